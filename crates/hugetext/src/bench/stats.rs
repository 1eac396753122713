//! Small statistics for noisy machines: medians, min/max, seeded bootstrap
//! confidence intervals for paired runs (the ratio of medians that `bench ab`
//! reports, and the median of per-run ratios that `exec`, `mprotect` and
//! `readahead` report), and the verdict such an interval supports.

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

/// Number of bootstrap resamples used by [`ratio_ci95`] and [`paired_ratio`].
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// Percentile-bootstrap 95% interval of a statistic of `n` paired runs:
/// `stat` gets the indices of one resample (drawn with replacement, `n` of
/// them) and returns the statistic of those runs. Fixed seed: the same data
/// always gives the same interval. Needs `n >= 2`.
fn bootstrap_ci95(n: usize, seed: u64, mut stat: impl FnMut(&[usize]) -> f64) -> (f64, f64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut values = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let mut idx = vec![0; n];
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for i in idx.iter_mut() {
            *i = rng.usize(..n);
        }
        values.push(stat(&idx));
    }
    values.sort_by(f64::total_cmp);
    (percentile_sorted(&values, 0.025), percentile_sorted(&values, 0.975))
}

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
    let mut ra = vec![0.0; n];
    let mut rb = vec![0.0; n];
    bootstrap_ci95(n, seed, |idx| {
        for (k, &i) in idx.iter().enumerate() {
            ra[k] = a[i];
            rb[k] = b[i];
        }
        median(&rb) / median(&ra)
    })
}

/// Fewest runs whose bootstrap interval of a median is a 95% interval in
/// earnest: with `n` runs it is about the range of the runs, which contains
/// the true median with probability `1 - 2^(1-n)` (94% for 5 runs, 75% for
/// 3). With fewer runs the verdict is "unresolved" whatever the interval.
pub const MIN_RUNS_FOR_VERDICT: usize = 5;

/// A ratio measured run by run: the median of the per-run ratios and its
/// 95% bootstrap confidence interval.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairedRatio {
    /// Median of the per-run ratios `b[i] / a[i]`.
    pub median: f64,
    /// 95% percentile-bootstrap interval of that median (runs resampled,
    /// fixed seed). Equal to `[median, median]` with fewer than 2 runs.
    pub ci95: [f64; 2],
    /// Every run's ratio, in run order.
    pub runs: Vec<f64>,
    /// What the interval supports.
    pub verdict: Verdict,
}

/// 95% interval of the median of `values` by a seeded percentile bootstrap
/// (the point itself for fewer than 2 values).
pub fn median_ci95(values: &[f64], seed: u64) -> (f64, f64) {
    let n = values.len();
    if n < 2 {
        let m = median(values);
        return (m, m);
    }
    let mut r = vec![0.0; n];
    bootstrap_ci95(n, seed, |idx| {
        for (k, &i) in idx.iter().enumerate() {
            r[k] = values[i];
        }
        median(&r)
    })
}

/// The paired ratio of runs `(a[i], b[i])` measured together: per-run
/// ratios `b[i] / a[i]`, their median and its seeded bootstrap 95% CI.
///
/// Each run's ratio cancels what hit both sides of that run (a busy
/// co-tenant, a slower disk moment); the interval then shows how much the
/// ratio itself moved from run to run. `lower_is_better` says whether the
/// measured quantity is a time (true) or a rate (false), for the verdict.
pub fn paired_ratio(a: &[f64], b: &[f64], seed: u64, lower_is_better: bool) -> PairedRatio {
    assert_eq!(a.len(), b.len());
    let runs: Vec<f64> = a.iter().zip(b).map(|(x, y)| y / x).collect();
    let m = median(&runs);
    let (lo, hi) = median_ci95(&runs, seed);
    PairedRatio {
        median: m,
        ci95: [lo, hi],
        verdict: if runs.len() < MIN_RUNS_FOR_VERDICT {
            Verdict::Unresolved
        } else {
            Verdict::of(lo, hi, lower_is_better)
        },
        runs,
    }
}

impl PairedRatio {
    /// Width of the interval (`hi - lo`); infinite when it is not finite.
    pub fn width(&self) -> f64 {
        let w = self.ci95[1] - self.ci95[0];
        if w.is_finite() {
            w
        } else {
            f64::INFINITY
        }
    }

    /// `0.81 [0.76, 0.86]`.
    pub fn display(&self) -> String {
        format!("{:.2} [{:.2}, {:.2}]", self.median, self.ci95[0], self.ci95[1])
    }

    /// One line that states only what the interval supports, e.g.
    /// `huge text was faster: 0.81 [0.76, 0.86]` or
    /// `no difference resolved: 0.97 [0.88, 1.06]`. `subject` names the
    /// numerator side ("huge text").
    pub fn verdict_line(&self, subject: &str) -> String {
        match self.verdict {
            Verdict::Faster => format!("{subject} was faster: {}", self.display()),
            Verdict::Slower => format!("{subject} was slower: {}", self.display()),
            Verdict::Unresolved if self.runs.len() < MIN_RUNS_FOR_VERDICT => format!(
                "no difference resolved ({} runs are too few for a 95% interval; {MIN_RUNS_FOR_VERDICT} or more are needed): {}",
                self.runs.len(),
                self.display()
            ),
            Verdict::Unresolved => format!("no difference resolved: {}", self.display()),
        }
    }
}

/// What a ratio's confidence interval supports about the numerator side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The whole interval is on the faster side of 1.
    Faster,
    /// The whole interval is on the slower side of 1.
    Slower,
    /// The interval contains 1, or is no 95% interval (fewer than
    /// [`MIN_RUNS_FOR_VERDICT`] runs, no finite values).
    Unresolved,
}

impl Verdict {
    /// From an interval `[lo, hi]` of a ratio; `lower_is_better` for times.
    pub fn of(lo: f64, hi: f64, lower_is_better: bool) -> Self {
        if !(lo.is_finite() && hi.is_finite()) {
            return Verdict::Unresolved;
        }
        let (better, worse) = if lower_is_better {
            (hi < 1.0, lo > 1.0)
        } else {
            (lo > 1.0, hi < 1.0)
        };
        match (better, worse) {
            (true, _) => Verdict::Faster,
            (_, true) => Verdict::Slower,
            _ => Verdict::Unresolved,
        }
    }
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

    /// A standard normal draw (Box–Muller).
    fn normal(rng: &mut fastrand::Rng) -> f64 {
        let u = 1.0 - rng.f64(); // (0, 1]
        let v = rng.f64();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// `n` synthetic paired runs whose per-run ratio is `ratio` times
    /// log-normal noise of spread `sd` (so the true median ratio is
    /// `ratio`), on top of run-to-run drift that hits both sides alike.
    fn synthetic(rng: &mut fastrand::Rng, n: usize, ratio: f64, sd: f64) -> (Vec<f64>, Vec<f64>) {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for _ in 0..n {
            let drift = 100.0 * (0.3 * normal(rng)).exp();
            a.push(drift * (sd * normal(rng)).exp());
            b.push(drift * ratio * (sd * normal(rng)).exp());
        }
        (a, b)
    }

    #[test]
    fn paired_ratio_ci_covers_the_true_ratio() {
        // Over many seeded trials the 95% interval should contain the true
        // ratio about 95% of the time; a percentile bootstrap of a median
        // from 15 runs runs a little under or over, never far.
        let mut rng = fastrand::Rng::with_seed(17);
        let trials = 300;
        for (ratio, sd) in [(0.8, 0.05), (1.0, 0.1), (0.6, 0.2)] {
            let mut covered = 0;
            for t in 0..trials {
                let (a, b) = synthetic(&mut rng, 15, ratio, sd);
                let r = paired_ratio(&a, &b, t, true);
                assert!(r.ci95[0] <= r.median && r.median <= r.ci95[1], "{r:?}");
                if r.ci95[0] <= ratio && ratio <= r.ci95[1] {
                    covered += 1;
                }
            }
            let cov = covered as f64 / trials as f64;
            eprintln!("ratio {ratio}, sd {sd}: coverage {cov}");
            assert!((0.88..=0.995).contains(&cov), "ratio {ratio}, sd {sd}: coverage {cov}");
        }
    }

    #[test]
    fn pairing_cancels_drift_shared_by_both_sides() {
        // Drift of ±30% between runs, 1% noise within a run: the paired
        // ratio is tight although each side alone spreads widely.
        let mut rng = fastrand::Rng::with_seed(3);
        let (a, b) = synthetic(&mut rng, 10, 0.9, 0.01);
        let r = paired_ratio(&a, &b, 1, true);
        assert!(r.width() < 0.03, "{r:?}");
        let (lo, hi) = median_ci95(&a, 1);
        assert!((hi - lo) / median(&a) > 0.1, "[{lo}, {hi}]");
        assert!(r.ci95[0] <= 0.9 && 0.9 <= r.ci95[1], "{r:?}");
        assert_eq!(r.runs.len(), 10);
    }

    #[test]
    fn verdicts_state_only_what_the_interval_supports() {
        let mut rng = fastrand::Rng::with_seed(5);
        let (a, b) = synthetic(&mut rng, 12, 0.8, 0.03);
        let r = paired_ratio(&a, &b, 9, true);
        assert_eq!(r.verdict, Verdict::Faster);
        assert!(
            r.verdict_line("huge text").starts_with("huge text was faster: 0.8"),
            "{r:?}"
        );
        let (a, b) = synthetic(&mut rng, 12, 1.25, 0.03);
        let r = paired_ratio(&a, &b, 9, true);
        assert_eq!(r.verdict, Verdict::Slower);
        assert!(
            r.verdict_line("huge text").starts_with("huge text was slower: 1.2"),
            "{r:?}"
        );
        let (a, b) = synthetic(&mut rng, 12, 1.0, 0.1);
        let r = paired_ratio(&a, &b, 9, true);
        assert_eq!(r.verdict, Verdict::Unresolved, "{r:?}");
        assert!(r.verdict_line("huge text").starts_with("no difference resolved: "));
        // A rate (MB/s): higher is faster.
        assert_eq!(Verdict::of(1.1, 1.3, false), Verdict::Faster);
        assert_eq!(Verdict::of(0.7, 0.9, false), Verdict::Slower);
        assert_eq!(Verdict::of(0.7, 0.9, true), Verdict::Faster);
        assert_eq!(Verdict::of(0.9, 1.1, true), Verdict::Unresolved);
        assert_eq!(Verdict::of(f64::NAN, 0.9, true), Verdict::Unresolved);
        // The line quotes the numbers as given.
        let r = PairedRatio {
            median: 0.97,
            ci95: [0.88, 1.06],
            runs: vec![0.9, 0.95, 0.97, 1.0, 1.05],
            verdict: Verdict::of(0.88, 1.06, true),
        };
        assert_eq!(r.verdict_line("huge text"), "no difference resolved: 0.97 [0.88, 1.06]");
        // Too few runs: nothing is resolved however far from 1 the ratio
        // is (one run has no spread; 3 runs' interval is their range, a 75%
        // interval).
        let r = paired_ratio(&[2.0], &[1.0], 1, true);
        assert_eq!(r.ci95, [0.5, 0.5]);
        assert_eq!(r.verdict, Verdict::Unresolved);
        assert_eq!(
            r.verdict_line("huge text"),
            "no difference resolved (1 runs are too few for a 95% interval; 5 or more are needed): 0.50 [0.50, 0.50]"
        );
        let r = paired_ratio(&[2.0, 2.1, 1.9], &[1.0, 1.1, 1.0], 1, true);
        assert!(r.ci95[1] < 1.0 && r.verdict == Verdict::Unresolved, "{r:?}");
        let r = paired_ratio(&[2.0, 2.1, 1.9, 2.0, 2.2], &[1.0, 1.1, 1.0, 1.0, 1.1], 1, true);
        assert_eq!(r.verdict, Verdict::Faster, "{r:?}");
    }
}
