//! Paired A/B runs of a real command: its text (and its libraries', and its
//! children's) in small page-cache folios vs in PMD folios.
//!
//! ## Which files
//! A first, discarded warm-up run is traced with `ptrace` (following forks,
//! clones and execs): when any process of the command's tree exits, it is
//! stopped just before its memory goes away and its `/proc/PID/maps` is
//! read; every regular file it mapped executable is "text the command
//! maps". This is exact for what actually runs — libraries loaded with
//! `dlopen`, and programs the command starts (`gcc` runs `cc1` and `as`; the
//! rustup proxy runs the real `rustc`) — which a static `DT_NEEDED` walk of
//! the executable cannot see, however short-lived the processes are. Where
//! `ptrace` is not permitted, the tree is polled every 2 ms instead
//! (processes shorter than that can be missed). `--files` names more files.
//! The text ranges of each file are its executable `PT_LOAD` segments (ELF
//! program headers), or the mapped ranges for non-ELF files.
//!
//! ## The two sides
//! Before every run, each file's clean, unmapped page cache is evicted and
//! refilled, so both sides run on a fully cached file and differ only in the
//! folio size of the text:
//! - `small`: text faulted in through a `PROT_EXEC`, `MADV_NOHUGEPAGE`
//!   mapping — the exec readahead path, which gives 4 KiB folios on x86, as a
//!   program's own faults would;
//! - `huge`: the file warmed by hugetext's own warm ([`warm::warm_target`]
//!   on [`warm::plan`]: its read-only segments in PMD folios where whole
//!   windows allow).
//!
//! Both sides manage the same ranges (warm's plan: all read-only segments),
//! and the state is measured over the executable segments.
//!
//! Then the rest of each file is read with `pread` (same on both sides), and
//! the state is verified with [`folio::scan_file`] and recorded per run
//! (share of text kB in PMD folios). Pages that other processes map cannot
//! be evicted (e.g. libc): they keep their folios on both sides, and the
//! state says so.
//!
//! ## Afterwards
//! Before the first pair, the folio state of every managed file is recorded
//! ([`sides::record`]: which whole windows of its managed ranges are in PMD
//! folios, whether it is cached); after the last one, or whatever ended the
//! pairs, it is put back ([`sides::restore`]): a warmed file is warm again,
//! the others are left in small folios, and the report says so (`restored`).
//!
//! ## Statistics
//! Pairs alternate small-first and huge-first (ABBA..., the first side by a
//! seeded coin), so slow drift and "second run is faster" effects hit both
//! sides alike. Reported: median wall time per side, `ratio` =
//! median(huge) / median(small), and a 95% confidence interval of that ratio
//! by a percentile bootstrap over pairs ([`stats::ratio_ci95`]); the same
//! for user+sys CPU time (`cpu_ratio`), which other load on the machine
//! disturbs less than wall time.

mod files;
mod report;
mod sides;
pub mod startup;
mod trace;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

pub use files::TextFile;
pub use report::{notes, Failure, HotSide, ItlbInfo, Pair, Report, RunRecord, SideReport};
pub use sides::{prepare, record, restore, restored_note, verify, Found, Restored, TextState};

use super::perf::ItlbCounter;
use super::stats;
use super::Progress;
use crate::{kernel, run::remap, Error, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Pairs of runs (each pair = one small and one huge run).
    pub runs: u32,
    /// More files whose text to manage, beyond those discovered.
    pub files: Vec<PathBuf>,
    /// Discover files from the warm-up run (the command's process tree).
    pub discover: bool,
    /// Seed of the side order and of the bootstrap.
    pub seed: u64,
    /// Let the command write to hugetext's stdout (default: discarded).
    pub show_output: bool,
    /// A third side: only these windows (a profile's hot windows) in PMD
    /// folios, the rest of the text small; with the profile and its share.
    pub hot: Option<(PathBuf, f64, Vec<crate::profile::HotFile>)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            command: Vec::new(),
            runs: 10,
            files: Vec::new(),
            discover: true,
            seed: 0xab,
            show_output: false,
            hot: None,
        }
    }
}

/// One side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Text in small folios (as exec faults give them).
    Small,
    /// Text in PMD-size folios.
    Huge,
    /// Only a profile's hot windows in PMD-size folios.
    Hot,
}

impl Side {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Side::Small => "small",
            Side::Huge => "huge",
            Side::Hot => "hot",
        }
    }
}

/// How the warm-up run found the command's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Discovery {
    /// ptrace: every process's maps read at its exit.
    Ptrace,
    /// /proc polling every 2 ms (ptrace not permitted).
    Polling,
    /// Not done (`--no-discover`).
    Off,
}

/// Run the benchmark. A failing command does not make this an `Err`: the
/// report carries the [`Failure`] and what was measured before it.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    let Some(argv0) = opts.command.first() else {
        return Err(Error::Invalid(
            "no command given: use `hugetext bench ab -- COMMAND [ARGS...]`".into(),
        ));
    };
    if opts.runs == 0 {
        return Err(Error::Invalid("--runs must be at least 1".into()));
    }
    let path = std::env::var_os("PATH");
    let exe = remap::resolve_program(argv0, path.as_deref())?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let sides = if opts.hot.is_some() { 3 } else { 2 };
    progress.start(1 + sides * u64::from(opts.runs));
    let mut seen = Vec::new();
    let (warm, discovery) = if opts.discover {
        trace::discover_run(&exe, opts, &mut seen)?
    } else {
        (trace::run_once(&exe, opts, None)?, Discovery::Off)
    };
    let mut report = Report {
        command: opts.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        executable: exe.clone(),
        kernel: kernel::KernelVersion::current().to_string(),
        runs: opts.runs,
        seed: opts.seed,
        warmup_s: warm.wall.as_secs_f64(),
        discovery,
        files: Vec::new(),
        small: report::summarize(&[]),
        huge: report::summarize(&[]),
        ratio: f64::NAN,
        ci95: [f64::NAN, f64::NAN],
        ci_method: "percentile bootstrap over pairs, 10000 resamples, seeded",
        cpu_ratio: f64::NAN,
        cpu_ci95: [f64::NAN, f64::NAN],
        itlb: ItlbInfo {
            supported: false,
            reason: None,
        },
        hot: None,
        pairs: Vec::new(),
        notes: Vec::new(),
        restored: None,
        failure: warm.failure("warm-up".into()),
    };
    if report.failure.is_some() {
        return Ok(report);
    }
    progress.step("warm-up run done");
    let mut extra = opts.files.clone();
    if !opts.discover {
        // Without discovery, at least the executable itself.
        extra.insert(0, exe.clone());
    }
    report.files = files::text_files(&seen, &extra)?;
    let counter = match ItlbCounter::open() {
        Ok(c) => {
            report.itlb = ItlbInfo {
                supported: true,
                reason: None,
            };
            Some(c)
        }
        Err(why) => {
            report.itlb = ItlbInfo {
                supported: false,
                reason: Some(why.to_string()),
            };
            None
        }
    };

    // What the runs change, put back afterwards, whatever ends them.
    let found = sides::record(&report.files)?;
    let measured = run_pairs(&exe, opts, counter.as_ref(), &mut report, progress);
    let restored = sides::restore(&report.files, &found);
    measured?;
    let restored = restored?;
    report.notes = report::notes(&report.files, &report.pairs);
    report.notes.push(sides::restored_note(&restored));
    report.restored = Some(restored);
    let smalls: Vec<&RunRecord> = report.pairs.iter().map(|p| &p.small).collect();
    let huges: Vec<&RunRecord> = report.pairs.iter().map(|p| &p.huge).collect();
    report.small = report::summarize(&smalls);
    report.huge = report::summarize(&huges);
    if !report.pairs.is_empty() {
        report.ratio = report.huge.median_s / report.small.median_s;
        let (lo, hi) = stats::ratio_ci95(&report.small.runs_s, &report.huge.runs_s, opts.seed);
        report.ci95 = [lo, hi];
        let cpu = |side: fn(&Pair) -> &RunRecord| -> Vec<f64> {
            report.pairs.iter().map(|p| side(p).user_s + side(p).sys_s).collect()
        };
        let (cs, ch) = (cpu(|p| &p.small), cpu(|p| &p.huge));
        let (lo, hi) = stats::ratio_ci95(&cs, &ch, opts.seed);
        report.cpu_ratio = stats::median(&ch) / stats::median(&cs);
        report.cpu_ci95 = [lo, hi];
        report.hot = hot_side(opts, &report);
    }
    Ok(report)
}

/// The `--hot` side's summary and ratios, when it ran.
fn hot_side(opts: &Options, report: &Report) -> Option<HotSide> {
    let (profile, share, _) = opts.hot.as_ref()?;
    let hots: Vec<&RunRecord> = report.pairs.iter().filter_map(|p| p.hot.as_ref()).collect();
    let side = report::summarize(&hots);
    let (lo, hi) = stats::ratio_ci95(&report.small.runs_s, &side.runs_s, opts.seed);
    Some(HotSide {
        profile: profile.clone(),
        share: *share,
        ratio: side.median_s / report.small.median_s,
        ci95: [lo, hi],
        over_huge: side.median_s / report.huge.median_s,
        side,
    })
}

/// The order of the sides in run `i`: pairs alternate small-first and
/// huge-first (ABBA...) from a seeded coin toss; with a third side, the
/// three rotate, and every other run reverses (each side runs first, second
/// and last equally often over six runs). Pure.
pub fn side_order(i: u32, first_small: bool, hot: bool) -> Vec<Side> {
    if !hot {
        return if (i % 2 == 0) == first_small {
            vec![Side::Small, Side::Huge]
        } else {
            vec![Side::Huge, Side::Small]
        };
    }
    let mut v = vec![Side::Small, Side::Huge, Side::Hot];
    v.rotate_left((i / 2 % 3) as usize);
    if (i % 2 == 0) != first_small {
        v.reverse();
    }
    v
}

/// The timed pairs, recorded in `report` (a failing command ends them with
/// `report.failure` set).
fn run_pairs(
    exe: &std::path::Path,
    opts: &Options,
    counter: Option<&ItlbCounter>,
    report: &mut Report,
    progress: &dyn Progress,
) -> Result<()> {
    let first_small = fastrand::Rng::with_seed(opts.seed).bool();
    for i in 0..opts.runs {
        // Balanced order: pairs alternate small-first and huge-first
        // (ABBA...), starting with a seeded coin toss.
        let order = side_order(i, first_small, opts.hot.is_some());
        let mut recs: Vec<RunRecord> = Vec::new();
        for &side in &order {
            let t = Instant::now();
            let hot = opts.hot.as_ref().map(|h| h.2.as_slice()).unwrap_or_default();
            let state = sides::prepare(&report.files, side, hot)?;
            let prepare_s = t.elapsed().as_secs_f64();
            if let Some(c) = counter {
                c.start();
            }
            let ran = trace::run_once(exe, opts, None)?;
            let itlb_misses = counter.and_then(|c| c.stop());
            if let Some(fail) = ran.failure(format!("pair {}, {} side", i + 1, side.name())) {
                report.failure = Some(fail);
                break;
            }
            progress.step(&format!(
                "pair {}/{}: {} {:.3} s ({:.0}% of text in PMD folios)",
                i + 1,
                opts.runs,
                side.name(),
                ran.wall.as_secs_f64(),
                state.text_unit_pct
            ));
            recs.push(RunRecord {
                side,
                seconds: ran.wall.as_secs_f64(),
                user_s: ran.user_s,
                sys_s: ran.sys_s,
                itlb_misses,
                prepare_s,
                state,
            });
        }
        if recs.len() < order.len() {
            break;
        }
        let mut take = |s: Side| recs.iter().position(|r| r.side == s).map(|i| recs.remove(i));
        let (Some(small), Some(huge)) = (take(Side::Small), take(Side::Huge)) else {
            break;
        };
        let hot = take(Side::Hot);
        report.pairs.push(Pair {
            order: order.iter().map(|s| s.name()).collect::<Vec<_>>().join(","),
            small,
            huge,
            hot,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_sides_run_first_second_and_last_equally_often() {
        let mut at = [[0u32; 3]; 3];
        for i in 0..6 {
            let o = side_order(i, true, true);
            assert_eq!(o.len(), 3);
            for (pos, s) in o.iter().enumerate() {
                at[*s as usize][pos] += 1;
            }
        }
        assert_eq!(at, [[2; 3]; 3]);
        assert_eq!(side_order(0, true, false), vec![Side::Small, Side::Huge]);
        assert_eq!(side_order(1, true, false), vec![Side::Huge, Side::Small]);
    }
}
