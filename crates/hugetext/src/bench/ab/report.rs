//! What a run of the benchmark reports: per-run records, per-side
//! summaries, the ratio, failures, and the notes that help judge it.

use std::path::PathBuf;

use super::files::TextFile;
use super::sides::TextState;
use super::{Discovery, Side};
use crate::bench::stats::{self, Summary};

/// One timed run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRecord {
    pub side: Side,
    pub seconds: f64,
    pub user_s: f64,
    pub sys_s: f64,
    /// iTLB misses of the command (user space, children included), when the
    /// CPU exposes the counter.
    pub itlb_misses: Option<u64>,
    /// Time spent preparing the page cache (not part of `seconds`).
    pub prepare_s: f64,
    pub state: TextState,
}

/// One pair of runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pair {
    /// "small,huge" or "huge,small": the order the sides ran in.
    pub order: String,
    pub small: RunRecord,
    pub huge: RunRecord,
    /// The third side (`--hot`): only the profile's hot windows in PMD folios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot: Option<RunRecord>,
}

/// Summary of one side.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SideReport {
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    /// Wall seconds of every run, in pair order.
    pub runs_s: Vec<f64>,
    pub user_s: f64,
    pub sys_s: f64,
    /// Median iTLB misses, `null` when not measurable.
    pub itlb_misses: Option<f64>,
    /// Share of text kB in PMD folios over this side's runs.
    pub text_unit_pct: Summary,
}

/// Whether iTLB misses could be counted.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ItlbInfo {
    pub supported: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A run of the command that failed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failure {
    /// Which run: "warm-up" or "pair N, SIDE side".
    pub run: String,
    /// Exit status, when it exited.
    pub exit_status: Option<i32>,
    /// Signal, when a signal killed it.
    pub signal: Option<i32>,
    /// Last lines of its standard error.
    pub stderr_tail: String,
}

impl Failure {
    /// Exit code for hugetext to pass on: the command's status, or
    /// 128 + signal.
    pub fn exit_code(&self) -> u8 {
        match (self.exit_status, self.signal) {
            (Some(c), _) if (1..=255).contains(&c) => c as u8,
            (_, Some(s)) => (128 + s).clamp(1, 255) as u8,
            _ => 1,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.exit_status, self.signal) {
            (Some(c), _) => write!(f, "the command exited with status {c} in the {} run", self.run)?,
            (_, Some(s)) => write!(f, "the command was killed by signal {s} in the {} run", self.run)?,
            _ => write!(f, "the command failed in the {} run", self.run)?,
        }
        let last = self.stderr_tail.lines().rev().find(|l| !l.trim().is_empty());
        if let Some(l) = last {
            write!(f, " (its stderr: {})", l.trim())?;
        }
        Ok(())
    }
}

/// Everything measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub command: Vec<String>,
    pub executable: PathBuf,
    pub kernel: String,
    pub runs: u32,
    pub seed: u64,
    /// Duration of the warm-up run (traced: slower than a normal run).
    pub warmup_s: f64,
    /// How the files were found.
    pub discovery: Discovery,
    pub files: Vec<TextFile>,
    pub small: SideReport,
    pub huge: SideReport,
    /// median(huge) / median(small).
    pub ratio: f64,
    /// 95% bootstrap confidence interval of `ratio`.
    pub ci95: [f64; 2],
    pub ci_method: &'static str,
    /// median(user+sys CPU seconds, huge) / median(..., small): less
    /// sensitive than wall time to other load on the machine.
    pub cpu_ratio: f64,
    /// 95% bootstrap confidence interval of `cpu_ratio`.
    pub cpu_ci95: [f64; 2],
    pub itlb: ItlbInfo,
    /// The `--hot` side, and its wall time over the small side's (ratio of
    /// medians, 95% CI), when a profile was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot: Option<HotSide>,
    pub pairs: Vec<Pair>,
    /// Things the reader should know to judge the result.
    pub notes: Vec<String>,
    /// The managed files put back in the folio state found before the runs
    /// (`null` when no run was made).
    pub restored: Option<super::sides::Restored>,
    /// Set when a run of the command failed; the run stopped there.
    pub failure: Option<Failure>,
}

/// The `--hot` side's summary.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HotSide {
    /// The profile, and the share of its samples the hot windows hold.
    pub profile: PathBuf,
    pub share: f64,
    pub side: SideReport,
    /// median(hot) / median(small) wall time, and its 95% CI.
    pub ratio: f64,
    pub ci95: [f64; 2],
    /// median(hot) / median(huge).
    pub over_huge: f64,
}

pub(super) fn summarize(runs: &[&RunRecord]) -> SideReport {
    let secs: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
    let s = Summary::of(&secs);
    let itlb: Vec<f64> = runs.iter().filter_map(|r| r.itlb_misses.map(|v| v as f64)).collect();
    SideReport {
        median_s: s.median,
        min_s: s.min,
        max_s: s.max,
        runs_s: secs,
        user_s: stats::median(&runs.iter().map(|r| r.user_s).collect::<Vec<_>>()),
        sys_s: stats::median(&runs.iter().map(|r| r.sys_s).collect::<Vec<_>>()),
        itlb_misses: (!itlb.is_empty()).then(|| stats::median(&itlb)),
        text_unit_pct: Summary::of(&runs.iter().map(|r| r.state.text_unit_pct).collect::<Vec<_>>()),
    }
}

/// The notes a reader needs to judge the result, from the files and the
/// pairs measured: no whole windows, windows mapped at non-congruent
/// addresses, files on filesystems without large folios, text other
/// processes kept mapped, a small side that was not clean.
pub fn notes(files: &[TextFile], pairs: &[Pair]) -> Vec<String> {
    let mut notes = Vec::new();
    let windows: u64 = files.iter().map(|f| f.unit_windows).sum();
    let (unit, kind) = crate::kernel::huge_unit();
    let unit_w = crate::units::human(unit as u64);
    if windows == 0 {
        notes.push(format!(
            "no managed file has a whole {unit_w} window of text: both sides are the same (expect a ratio near 1)"
        ));
    }
    for f in files {
        if f.unit_windows > 0 && f.mappable_windows.is_some_and(|m| m < f.unit_windows) {
            notes.push(format!(
                "{}: {} of its {} text windows are mapped at addresses not congruent to their file offsets modulo {unit_w}, so their {unit_w} folios cannot be {} (see `hugetext check`/`align`)",
                f.path.display(),
                f.unit_windows - f.mappable_windows.unwrap_or(0),
                f.unit_windows,
                kind.mapped()
            ));
        }
        if crate::fsutil::is_memory_fs(&f.filesystem) {
            notes.push(format!(
                "{}: on {}, which has no large page-cache folios here",
                f.path.display(),
                f.filesystem
            ));
        }
    }
    let others = pairs
        .iter()
        .flat_map(|p| [&p.small, &p.huge])
        .map(|r| r.state.mapped_by_others_kb)
        .max()
        .unwrap_or(0);
    // A little is normal (libraries a concurrent process shares); say so
    // when it is enough to blur the comparison.
    let text_kb: u64 = files.iter().filter(|f| f.unit_windows > 0).map(|f| f.text_kb).sum();
    if others > 0 && others * 20 > text_kb {
        notes.push(format!(
            "up to {:.1} MiB of the managed text was mapped by other processes during the runs, so it could not be evicted and kept its folios on both sides (per-run mapped_by_others_kb in the JSON); for clean sides use a quiet machine or a private copy of the program",
            others as f64 / 1024.0
        ));
    }
    let small_pmd = pairs.iter().map(|p| p.small.state.text_unit_pct).fold(0.0, f64::max);
    if small_pmd > 1.0 {
        notes.push(format!(
            "the small side had up to {small_pmd:.1}% of its text in PMD folios (pages other processes kept mapped): the sides were not clean and the ratio understates the difference"
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, unit_windows: u64, mappable: Option<u64>, fs: &str) -> TextFile {
        TextFile {
            path: PathBuf::from(path),
            size: 64 << 20,
            text_ranges: vec![[0, 32 << 20]],
            managed_ranges: vec![[0, 32 << 20]],
            plan: None,
            text_kb: 32 << 10,
            unit_windows,
            congruent: mappable.map(|m| m == unit_windows),
            mappable_windows: mappable,
            source: "maps",
            filesystem: fs.into(),
        }
    }

    fn record(side: Side, pmd_pct: f64, others_kb: u64) -> RunRecord {
        RunRecord {
            side,
            seconds: 1.0,
            user_s: 0.9,
            sys_s: 0.1,
            itlb_misses: None,
            prepare_s: 0.2,
            state: TextState {
                text_unit_pct: pmd_pct,
                mapped_by_others_kb: others_kb,
                ..TextState::default()
            },
        }
    }

    fn pair(small_pct: f64, others_kb: u64) -> Pair {
        Pair {
            order: "small,huge".into(),
            small: record(Side::Small, small_pct, others_kb),
            huge: record(Side::Huge, 100.0, others_kb),
            hot: None,
        }
    }

    #[test]
    fn clean_sides_need_no_notes() {
        let files = [file("/usr/bin/big", 16, Some(16), "ext4")];
        assert_eq!(notes(&files, &[pair(0.0, 0), pair(0.5, 64)]), Vec::<String>::new());
    }

    #[test]
    fn no_whole_window_means_equal_sides() {
        let n = notes(&[file("/usr/bin/small", 0, Some(0), "ext4")], &[]);
        assert_eq!(n.len(), 1);
        assert!(n[0].contains("no managed file has a whole"), "{n:?}");
    }

    #[test]
    fn non_congruent_windows_are_counted() {
        let n = notes(&[file("/opt/lld-linked", 16, Some(4), "ext4")], &[]);
        assert_eq!(n.len(), 1);
        assert!(n[0].starts_with("/opt/lld-linked: 12 of its 16 text windows"), "{n:?}");
        // Not seen mapped (a --files entry): nothing to say about addresses.
        assert!(notes(&[file("/opt/extra", 16, None, "ext4")], &[]).is_empty());
    }

    #[test]
    fn memory_filesystems_have_no_large_folios() {
        for fs in ["tmpfs", "ramfs"] {
            let n = notes(&[file("/dev/shm/prog", 16, Some(16), fs)], &[]);
            assert_eq!(
                n,
                vec![format!(
                    "/dev/shm/prog: on {fs}, which has no large page-cache folios here"
                )]
            );
        }
    }

    #[test]
    fn text_kept_mapped_by_others_blurs_the_sides() {
        let files = [file("/usr/bin/big", 16, Some(16), "ext4")];
        // 5% of the 32 MiB of text is the threshold.
        assert!(notes(&files, &[pair(0.0, 1638)]).is_empty());
        let n = notes(&files, &[pair(0.0, 100), pair(0.0, 4096)]);
        assert_eq!(n.len(), 1);
        assert!(n[0].starts_with("up to 4.0 MiB of the managed text"), "{n:?}");
    }

    #[test]
    fn small_side_with_pmd_folios_is_not_clean() {
        let files = [file("/usr/bin/big", 16, Some(16), "ext4")];
        let n = notes(&files, &[pair(0.5, 0), pair(12.5, 0)]);
        assert_eq!(n.len(), 1);
        assert!(n[0].starts_with("the small side had up to 12.5%"), "{n:?}");
    }

    #[test]
    fn failure_exit_codes() {
        let f = Failure {
            run: "warm-up".into(),
            exit_status: Some(3),
            signal: None,
            stderr_tail: "x\nboom\n".into(),
        };
        assert_eq!(f.exit_code(), 3);
        assert!(f.to_string().contains("status 3") && f.to_string().contains("boom"));
        let s = Failure {
            run: "warm-up".into(),
            exit_status: None,
            signal: Some(9),
            stderr_tail: String::new(),
        };
        assert_eq!(s.exit_code(), 137);
    }
}
