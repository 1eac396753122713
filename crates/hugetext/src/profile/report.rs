//! What a profile says: per file, how its counts spread over its PMD
//! windows (a heat strip), how many windows hold 50/90/99% of them, and an
//! SVG of the strips. Pure functions of a [`Profile`].

use serde::Serialize;

use super::{windows_for_shares, FileProfile, Profile};

/// The shares the report counts windows for.
pub const SHARES: [f64; 3] = [0.5, 0.9, 0.99];

/// One file's line of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileSummary {
    pub path: String,
    pub build_id: Option<String>,
    pub count: u64,
    /// Share of the profile's total.
    pub share: f64,
    /// Bytes of executable segments.
    pub text_bytes: u64,
    /// Windows its text spans.
    pub text_windows: u64,
    /// Windows with counts.
    pub hot_windows: usize,
    /// Windows holding 50%, 90%, 99% of its counts.
    pub windows_for: [usize; 3],
    /// Counts per window its text spans, in file order (the heat strip).
    pub heat: Vec<u64>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub unit: String,
    pub total: u64,
    pub unattributed: u64,
    pub unit_size: u64,
    /// Windows, over all files, holding 50%, 90%, 99% of attributed counts.
    pub windows_for: [usize; 3],
    pub files: Vec<FileSummary>,
}

/// The window offsets a file's text spans (its executable segments', or,
/// without them, the windows with counts).
fn text_windows(f: &FileProfile, pmd: u64) -> Vec<u64> {
    let mut w: Vec<u64> = f
        .text
        .iter()
        .filter(|r| r[1] > r[0])
        .flat_map(|r| (r[0] / pmd..=(r[1] - 1) / pmd).map(move |k| k * pmd))
        .chain(f.windows.iter().map(|w| w.offset))
        .collect();
    w.sort_unstable();
    w.dedup();
    w
}

fn three(v: Vec<usize>) -> [usize; 3] {
    [v[0], v[1], v[2]]
}

/// Summarise a profile. Pure.
pub fn summarise(p: &Profile) -> Summary {
    let all: Vec<u64> = p.files.iter().flat_map(|f| f.windows.iter().map(|w| w.count)).collect();
    let files = p
        .files
        .iter()
        .map(|f| {
            let counts: Vec<u64> = f.windows.iter().map(|w| w.count).collect();
            let spans = text_windows(f, p.unit_size);
            let heat = spans
                .iter()
                .map(|&o| f.windows.iter().find(|w| w.offset == o).map_or(0, |w| w.count))
                .collect();
            FileSummary {
                path: f.path.clone(),
                build_id: f.build_id.clone(),
                count: f.count,
                share: f.count as f64 / p.total.max(1) as f64,
                text_bytes: f.text.iter().map(|r| r[1].saturating_sub(r[0])).sum(),
                text_windows: spans.len() as u64,
                hot_windows: counts.iter().filter(|&&c| c > 0).count(),
                windows_for: three(windows_for_shares(&counts, &SHARES)),
                heat,
            }
        })
        .collect();
    Summary {
        unit: p.unit.clone(),
        total: p.total,
        unattributed: p.unattributed,
        unit_size: p.unit_size,
        windows_for: three(windows_for_shares(&all, &SHARES)),
        files,
    }
}

/// Heat characters, coldest to hottest (a space: no counts).
const RAMP: &[u8] = b" .:-=+*#%@";

/// A terminal strip: one character per window (windows merged, by their
/// sum, to fit `width`), heat relative to the hottest cell. Pure.
pub fn strip(heat: &[u64], width: usize) -> String {
    let cells = merge_cells(heat, width.max(1));
    let max = cells.iter().copied().max().unwrap_or(0).max(1);
    cells
        .iter()
        .map(|&c| {
            if c == 0 {
                ' '
            } else {
                let i = 1 + ((c as f64 / max as f64) * (RAMP.len() - 2) as f64).floor() as usize;
                RAMP[i.min(RAMP.len() - 1)] as char
            }
        })
        .collect()
}

/// Sum `heat` into at most `width` cells. Pure.
fn merge_cells(heat: &[u64], width: usize) -> Vec<u64> {
    let per = heat.len().div_ceil(width).max(1);
    heat.chunks(per).map(|c| c.iter().sum()).collect()
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An SVG of the heat strips of the `max_files` hottest files: one row per
/// file, one cell per window, darker = hotter (per file), with a title per
/// cell giving its offset and count. Pure.
pub fn svg(s: &Summary, max_files: usize) -> String {
    let cell = 6.0_f64;
    let row = 22.0;
    let label = 360.0;
    let files: Vec<&FileSummary> = s.files.iter().take(max_files).collect();
    let widest = files.iter().map(|f| f.heat.len().min(400)).max().unwrap_or(1);
    let (w, h) = (label + cell * widest as f64 + 20.0, 40.0 + row * files.len() as f64);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"monospace\" font-size=\"11\">\n\
         <text x=\"4\" y=\"16\">{} {} — one cell per {} KiB window of file offsets, darker = hotter</text>\n",
        s.total,
        xml_escape(&s.unit),
        s.unit_size >> 10
    );
    for (i, f) in files.iter().enumerate() {
        let y = 30.0 + row * i as f64;
        out += &format!(
            "<text x=\"4\" y=\"{}\">{} ({:.1}%)</text>\n",
            y + 12.0,
            xml_escape(&shorten(&f.path, 44)),
            f.share * 100.0
        );
        let cells = merge_cells(&f.heat, 400);
        let per = f.heat.len().div_ceil(400).max(1) as u64;
        let max = cells.iter().copied().max().unwrap_or(0).max(1);
        for (k, &c) in cells.iter().enumerate() {
            let a = if c == 0 {
                0.0
            } else {
                0.1 + 0.9 * (c as f64 / max as f64)
            };
            out += &format!(
                "<rect x=\"{:.0}\" y=\"{y}\" width=\"{}\" height=\"16\" fill=\"#c0392b\" fill-opacity=\"{a:.3}\" stroke=\"#ddd\" stroke-width=\"0.5\"><title>window {} ({} MiB): {c}</title></rect>\n",
                label + cell * k as f64,
                cell - 1.0,
                k as u64 * per,
                (k as u64 * per * s.unit_size) >> 20
            );
        }
    }
    out += "</svg>\n";
    out
}

/// `…` + the last `n` characters of `s`, if longer. Pure.
pub fn shorten(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        s.to_string()
    } else {
        format!("…{}", s.chars().skip(count - n + 1).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_scale_to_the_hottest_cell() {
        assert_eq!(strip(&[0, 1, 10], 10), " .@");
        assert_eq!(strip(&[0, 0], 10), "  ");
        // Merged to fit: 4 windows in 2 cells.
        assert_eq!(strip(&[1, 1, 0, 8], 2), "-@");
    }

    #[test]
    fn svg_names_each_file_and_window() {
        let s = Summary {
            unit: "samples".into(),
            total: 3,
            unattributed: 0,
            unit_size: 2 << 20,
            windows_for: [1, 1, 1],
            files: vec![FileSummary {
                path: "/bin/<x>".into(),
                build_id: None,
                count: 3,
                share: 1.0,
                text_bytes: 4 << 20,
                text_windows: 2,
                hot_windows: 1,
                windows_for: [1, 1, 1],
                heat: vec![3, 0],
            }],
        };
        let out = svg(&s, 10);
        assert!(out.starts_with("<svg"));
        assert!(out.contains("/bin/&lt;x&gt;"));
        assert_eq!(out.matches("<rect").count(), 2);
        assert!(out.contains("window 0 (0 MiB): 3"));
    }

    #[test]
    fn shorten_keeps_the_tail() {
        assert_eq!(shorten("/usr/lib/libx.so", 8), "…libx.so");
        assert_eq!(shorten("/a", 8), "/a");
    }
}
