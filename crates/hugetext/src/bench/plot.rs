//! SVG plot of paired A/B runs: every run's time per side, with each side's
//! median as a line.

use std::path::Path;

use plotters::prelude::*;

use crate::{fsutil, Error, Result};

/// One series to plot: a label and one value per pair (NaN = missing).
pub struct Series<'a> {
    pub label: &'a str,
    pub values: &'a [f64],
    pub median: f64,
}

/// Render `series` (x = pair number, y = seconds) as an SVG document.
pub fn render_svg(title: &str, y_label: &str, series: &[Series<'_>]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 520)).into_drawing_area();
        draw(&root, title, y_label, series).map_err(|e| Error::Other(format!("plot: {e}")))?;
        root.present().map_err(|e| Error::Other(format!("plot: {e}")))?;
    }
    Ok(svg)
}

/// Render and write the SVG to `path` (through a temporary file in the same
/// directory, renamed into place; [`fsutil::check_output`]'s rule), mode
/// 0666 less the umask, as any new file.
pub fn write_svg(path: &Path, title: &str, y_label: &str, series: &[Series<'_>]) -> Result<()> {
    let svg = render_svg(title, y_label, series)?;
    let out = fsutil::check_output(path).map_err(|e| Error::io(path, e))?;
    let tmp = fsutil::NewFile::beside_with_mode(&out, ".hugetext-plot-", 0o666)
        .map_err(|e| Error::io(fsutil::dir_of(path), e))?;
    std::io::Write::write_all(&mut tmp.file(), svg.as_bytes()).map_err(|e| Error::io(path, e))?;
    tmp.commit(&out).map_err(|e| Error::io(path, e))?;
    Ok(())
}

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    series: &[Series<'_>],
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let n = series.iter().map(|s| s.values.len()).max().unwrap_or(0).max(1);
    let vals = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite());
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    let pad = ((hi - lo) * 0.1).max(hi.abs() * 0.01).max(1e-6);
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5f64..(n as f64 + 0.5), (lo - pad)..(hi + pad))?;
    chart
        .configure_mesh()
        .x_desc("pair (run number)")
        .y_desc(y_label)
        .x_labels(n.min(20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = s
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(k, v)| (k as f64 + 1.0, *v))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(1)))?
            .label(format!("{} (median {:.4})", s.label, s.median))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        if s.median.is_finite() {
            chart.draw_series(DashedLineSeries::new(
                vec![(0.5, s.median), (n as f64 + 0.5, s.median)],
                6,
                4,
                color.stroke_width(1),
            ))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_both_series() {
        let a = [1.0, 1.1, 0.9];
        let b = [0.8, 0.85, f64::NAN];
        let svg = render_svg(
            "t",
            "seconds",
            &[
                Series {
                    label: "small",
                    values: &a,
                    median: 1.0,
                },
                Series {
                    label: "huge",
                    values: &b,
                    median: 0.825,
                },
            ],
        )
        .unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("small (median 1.0000)") && svg.contains("huge"));
        assert!(svg.matches("<circle").count() >= 5, "{svg}");
    }
}
