//! Small statistics for noisy machines: medians, min/max, and a seeded
//! bootstrap confidence interval for the ratio of medians of paired runs.

/// Median, minimum, maximum and all values of one measured quantity.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Every measured value, in run order.
    pub runs: Vec<f64>,
}

impl Summary {
    /// Summarise `values` (in run order). An empty slice gives NaNs, which
    /// serialize as JSON `null`.
    pub fn of(values: &[f64]) -> Self {
        Summary {
            median: median(values),
            min: values.iter().copied().fold(f64::NAN, f64::min),
            max: values.iter().copied().fold(f64::NAN, f64::max),
            runs: values.to_vec(),
        }
    }
}

/// Median of `values` (mean of the two middle values for an even count;
/// NaN for none).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Percentile `p` in [0, 1] of sorted `v` by linear interpolation.
fn percentile_sorted(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let pos = p * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// Number of bootstrap resamples used by [`ratio_ci95`].
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// 95% confidence interval of `median(b) / median(a)` for paired samples
/// `(a[i], b[i])`, by a percentile bootstrap over pairs with a fixed seed
/// (so the same data always gives the same interval).
///
/// Resampling whole pairs keeps what pairing buys: drift that hit both
/// sides of a pair stays together. With fewer than 2 pairs the interval is
/// the point estimate itself (no spread can be estimated).
pub fn ratio_ci95(a: &[f64], b: &[f64], seed: u64) -> (f64, f64) {
    assert_eq!(a.len(), b.len());
    let n = a.len();
    let point = median(b) / median(a);
    if n < 2 {
        return (point, point);
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ratios = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let mut ra = vec![0.0; n];
    let mut rb = vec![0.0; n];
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for k in 0..n {
            let i = rng.usize(..n);
            ra[k] = a[i];
            rb[k] = b[i];
        }
        ratios.push(median(&rb) / median(&ra));
    }
    ratios.sort_by(f64::total_cmp);
    (percentile_sorted(&ratios, 0.025), percentile_sorted(&ratios, 0.975))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        let s = Summary::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
        assert_eq!(s.runs, vec![5.0, 1.0, 3.0]);
    }

    #[test]
    fn ci_contains_the_ratio_and_is_reproducible() {
        let a: Vec<f64> = (0..20).map(|i| 10.0 + (i % 5) as f64 * 0.1).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 0.8 + 0.01).collect();
        let (lo, hi) = ratio_ci95(&a, &b, 7);
        let r = median(&b) / median(&a);
        assert!(lo <= r && r <= hi, "{lo} {r} {hi}");
        assert!(hi - lo < 0.05, "tight data gives a tight interval: {lo} {hi}");
        assert_eq!(ratio_ci95(&a, &b, 7), (lo, hi));
        // Identical sides: the interval is around 1.
        let (lo, hi) = ratio_ci95(&a, &a, 1);
        assert!(lo <= 1.0 && hi >= 1.0);
        // One pair: degenerate interval at the point estimate.
        assert_eq!(ratio_ci95(&[2.0], &[1.0], 1), (0.5, 0.5));
    }
}
