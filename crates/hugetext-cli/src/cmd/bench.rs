//! `hugetext bench`: the micro-benchmarks of the Linux large-folio patches
//! and paired A/B runs of real programs. Results print as markdown tables
//! (like the patches' tables), or as JSON with `--json`; a progress bar runs
//! on stderr when it is a terminal.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result};
use comfy_table::{presets::ASCII_MARKDOWN, Table};
use hugetext::bench::stats::PairedRatio;
use hugetext::bench::{self, ab, exec, mprotect, readahead};

use super::{exit_with, Bar};

/// Benchmarks: reproduce the measurements of the Linux large-folio patches
/// on this machine, and measure real programs with and without huge text.
///
/// Every benchmark checks the memory state it measures (folio sizes from
/// /proc/kpageflags, PMD mappings from smaps) and prints it next to the
/// numbers, and every ratio with a 95% confidence interval over paired runs.
/// Needs root (folio sizes). See doc/bench.md.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// The exec-readahead microbenchmark of the Linux "large folios for exec
    /// memory" patches: cold faults and random calls into a large executable
    /// file of RET stubs (x86-64 `ret`, or AArch64 `ret` on arm64);
    /// baseline vs MADV_HUGEPAGE vs a warmed page cache.
    ///
    /// "cold" evicts the file's page cache and calls one stub per page in
    /// order (fault + readahead cost); "random" then calls stubs at random
    /// pages from a fixed seed (iTLB cost). Variants: `baseline` (plain exec
    /// mapping: 4 KiB folios on x86), `huge` (MADV_HUGEPAGE on the mapping
    /// before the cold sweep), `warm` (page cache first filled with folios
    /// of the unit of huge text: PMD-size, or 2 MiB contpte blocks with
    /// 64 KiB pages; timed as warm_ms; then a plain mapping). Each variant has its
    /// own file: a run sweeps all three cold in rotating order, then
    /// alternates them pass by pass in the random phase. Every ratio is the
    /// median of per-run ratios with a 95% bootstrap confidence interval.
    Exec(ExecArgs),
    /// The test program of the Linux "Optimize mprotect() for large folios"
    /// patches: mprotect() read-only/read-write 40 times over 1 GiB of
    /// PTE-mapped PMD THPs, of 64 KiB mTHPs, and of 4 KiB pages.
    ///
    /// A run prepares all cases (3 × --size of memory) and alternates them
    /// round by round; each case is compared with 4 KiB pages run by run,
    /// with a 95% bootstrap confidence interval.
    Mprotect(MprotectArgs),
    /// The effect of the Linux "batch folio insertion" readahead patches:
    /// readahead(2) throughput from N threads, into N distinct files vs
    /// disjoint slices of one shared file (page-cache lock contention).
    Readahead(ReadaheadArgs),
    /// Run a real command alternately with its text (and its libraries',
    /// and its children's) in small and in PMD page-cache folios, paired.
    ///
    /// A first, discarded warm-up run finds the files the command's process
    /// tree maps executable. Before every timed run each file is evicted
    /// and refilled: `small` through an exec mapping (4 KiB folios, as
    /// exec faults give them), `huge` through a MADV_HUGEPAGE mapping (PMD
    /// folios); the state is verified and recorded per run. The sides run
    /// alternately first within each pair. Prints the median per side, the
    /// ratio huge/small and its 95% bootstrap confidence interval (wall and
    /// CPU time). Afterwards every file is put back in the folio state it
    /// was found in (a warmed file stays warm), and a note says so.
    Ab(AbArgs),
    /// The cost of `hugetext run`: a command's start-up plain, with its
    /// text warmed, and under `hugetext run --strategy ROUTE` for each
    /// route, paired and interleaved round by round.
    ///
    /// Before every start the files the command maps executable are put in
    /// small page-cache folios (or PMD folios for `warm`), as `ab` does.
    /// Start-up is the wall time to exit, or for a server until it is
    /// ready (--ready: a probe first succeeds; --ready-file: a file it
    /// writes holds a text), the server then stopped with SIGTERM. Prints median
    /// start-up and CPU per variant, the ratio to plain with a 95%
    /// bootstrap interval and the added milliseconds, where `run`'s time
    /// went (from the preload's own record: setup, maps, each route,
    /// outside the pass), and the copy route's cost per MiB against the
    /// machine's memory-copy floor.
    Startup(StartupArgs),
}

/// `bench startup --run-cache`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum RunCache {
    /// Text in small page-cache folios.
    Small,
    /// Text in PMD folios.
    Huge,
}

#[derive(clap::Args, Debug)]
struct StartupArgs {
    /// Rounds (each starts every variant once).
    #[arg(long, default_value_t = 10)]
    runs: u32,
    /// Routes to measure, comma-separated (default: every route `run
    /// --strategy` accepts).
    #[arg(long, value_delimiter = ',', value_name = "ROUTE,...")]
    routes: Vec<String>,
    /// A shell command that succeeds once the command is ready (e.g.
    /// `pg_isready -q -h /tmp -p 5499`): start-up is the time until then,
    /// and the command is stopped with SIGTERM.
    #[arg(long, value_name = "SHELL-COMMAND")]
    ready: Option<String>,
    /// Ready once PATH holds TEXT where it did not when the start began
    /// (postgres: `DATA/postmaster.pid ready`; mariadbd: `ERROR-LOG 'ready
    /// for connections'`): checked every 0.5 ms, no process started, so
    /// the moment is not rounded to a probe's run.
    #[arg(long, num_args = 2, value_names = ["PATH", "TEXT"], conflicts_with = "ready")]
    ready_file: Vec<String>,
    /// Longest a start (and a server's stop) may take (s, m suffixes).
    #[arg(long, default_value = "60s", value_parser = duration_arg)]
    timeout: std::time::Duration,
    /// Run the command, and `hugetext run`, as this user (name or uid),
    /// with its primary group.
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// More files whose text to manage.
    #[arg(long, num_args = 1.., value_name = "PATH")]
    files: Vec<PathBuf>,
    /// The page cache the `run` variants start from: `small` (a first
    /// start: the file route refills the text) or `huge` (a later start,
    /// the text already in PMD folios as the file route leaves it).
    #[arg(long, value_enum, default_value = "small")]
    run_cache: RunCache,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0xab)]
    seed: u64,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// The command to start, after `--`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

fn size_arg(s: &str) -> Result<u64, String> {
    bench::parse_size(s).map_err(|e| e.to_string())
}

fn duration_arg(s: &str) -> Result<std::time::Duration, String> {
    bench::parse_duration(s).map_err(|e| e.to_string())
}

/// When to stop: shared by exec, mprotect and readahead.
#[derive(clap::Args, Debug)]
struct UntilArgs {
    /// Keep adding runs (after --runs) until every ratio's 95% confidence
    /// interval is at most WIDTH wide (e.g. 0.05), or --max-time has passed.
    #[arg(long, value_name = "WIDTH")]
    until_ci: Option<f64>,
    /// Time budget for --until-ci, from the first run (s, m, h suffixes).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg, requires = "until_ci")]
    max_time: std::time::Duration,
}

impl UntilArgs {
    fn until(&self) -> bench::Until {
        bench::Until {
            ci_width: self.until_ci,
            max_time: self.max_time,
        }
    }
}

#[derive(clap::Args, Debug)]
struct ExecArgs {
    /// Size of each variant's RET-stub file (K, M, G suffixes; whole
    /// windows of the unit of huge text: the PMD, 2 MiB on x86-64, or the
    /// 2 MiB contpte block with 64 KiB pages). A run keeps all three in the page cache: refused before
    /// anything is written when they do not fit in 90% of the free space of
    /// --dir or in half of the available memory.
    #[arg(long, default_value = "512M", value_parser = size_arg)]
    size: u64,
    /// Runs (the minimum with --until-ci); each run measures every variant
    /// once.
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// Directory for the stub files, on a disk filesystem (ext4, xfs).
    /// Default: $TMPDIR unless it is tmpfs, else the current directory.
    /// They are removed at the end, on an error, and on SIGINT, SIGTERM or
    /// SIGHUP.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Random calls per page of the file.
    #[arg(long, default_value_t = 4)]
    calls_per_page: u32,
    /// Passes of the random phase per run, variants alternating pass by
    /// pass; the fastest pass counts.
    #[arg(long, default_value_t = 3)]
    random_passes: u32,
    /// Seed of the random phase and of the bootstrap.
    #[arg(long, default_value_t = 0x5eed000)]
    seed: u64,
    #[command(flatten)]
    until: UntilArgs,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct MprotectArgs {
    /// Memory per case (the test program: 1G); a run holds all cases.
    #[arg(long, default_value = "1G", value_parser = size_arg)]
    size: u64,
    /// mprotect read-only/read-write rounds.
    #[arg(long, default_value_t = 40)]
    loops: u32,
    /// Runs (the minimum with --until-ci); cases alternate round by round.
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0x5eed004)]
    seed: u64,
    #[command(flatten)]
    until: UntilArgs,
    /// Allow setting /sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled
    /// to `madvise` for the mTHP case when it is `never` (restored after).
    #[arg(long)]
    allow_sysfs: bool,
    /// Instead of the test program: mprotect() of 400 KiB, 1 MiB and 4 MiB
    /// ranges of 4 KiB pages, anonymous and file-backed, read-only and back
    /// to read-write, each call timed (the small-page cases of the reported
    /// regression of PTE-batched mprotect).
    #[arg(long)]
    ranges: bool,
    /// With --ranges: mprotect() calls per range and direction.
    #[arg(long, default_value_t = 1000, requires = "ranges")]
    calls: u32,
    /// With --ranges: wrap every call in the markers of the kernel lab's
    /// instruction counter (no-ops elsewhere); pins the benchmark to its CPU.
    #[arg(long, requires = "ranges")]
    markers: bool,
    /// With --ranges: directory for the file-backed ranges' files (default:
    /// $TMPDIR when on a disk filesystem, else the current directory).
    #[arg(long, requires = "ranges")]
    dir: Option<std::path::PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ReadaheadArgs {
    /// Threads (default: number of CPUs).
    #[arg(long)]
    threads: Option<u32>,
    /// Bytes read per thread.
    #[arg(long, default_value = "256M", value_parser = size_arg)]
    size: u64,
    /// Bytes per readahead(2) call.
    #[arg(long, default_value = "2M", value_parser = size_arg)]
    chunk: u64,
    /// Runs (the minimum with --until-ci); configurations alternate.
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// Directory for the files, on a disk filesystem.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0x5eed002)]
    seed: u64,
    #[command(flatten)]
    until: UntilArgs,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct AbArgs {
    /// Pairs of runs (one small + one huge run each).
    #[arg(long, default_value_t = 10)]
    runs: u32,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot of every run's time to FILE (a new name or a
    /// regular file you own; mode 0666 less the umask).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// More files whose text to manage (e.g. code the warm-up run did not
    /// reach, or when ptrace is not permitted and discovery falls back to
    /// polling).
    #[arg(long, num_args = 1.., value_name = "PATH")]
    files: Vec<PathBuf>,
    /// Do not discover files from the warm-up run; manage only the
    /// executable and --files.
    #[arg(long)]
    no_discover: bool,
    /// Seed of the side order and the bootstrap.
    #[arg(long, default_value_t = 0xab)]
    seed: u64,
    /// Show the command's standard output (default: discarded).
    #[arg(long)]
    show_output: bool,
    /// A third side: only the windows holding --hot-share of this profile's
    /// samples (`hugetext profile -o`) in PMD folios, the rest small.
    #[arg(long, value_name = "PROFILE")]
    hot: Option<PathBuf>,
    /// With --hot: the share of the profile's samples its windows hold.
    #[arg(long, value_name = "PCT", default_value = "99", requires = "hot", value_parser = super::parse_percent)]
    hot_share: f64,
    /// The command to run, after `--`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Run a benchmark; `routes` are the values `run --strategy` accepts.
pub fn run(args: Args, routes: &[String]) -> Result<u8> {
    match args.what {
        What::Startup(a) => run_startup(a, routes),
        What::Exec(a) => run_exec(a),
        What::Mprotect(a) => run_mprotect(a),
        What::Readahead(a) => run_readahead(a),
        What::Ab(a) => run_ab(a),
    }
}

/// Run a benchmark with a progress bar on stderr (when it is a terminal),
/// clearing the bar before any result or error is printed.
fn with_progress<R>(f: impl FnOnce(&Bar) -> hugetext::Result<R>) -> hugetext::Result<R> {
    let bar = Bar::new("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}");
    let r = f(&bar);
    bar.finish();
    r
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&hugetext::units::with_old_keys(serde_json::to_value(v)?))?
    );
    Ok(())
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header(header.to_vec());
    t
}

fn fmt_ms(s: &bench::stats::Summary) -> String {
    format!("{:.1} ms ({:.1}–{:.1})", s.median, s.min, s.max)
}

fn folios_text(f: &std::collections::BTreeMap<u64, u64>) -> String {
    let total: u64 = f.values().sum();
    if total == 0 {
        return "unknown (PFNs not readable)".into();
    }
    let mut parts: Vec<(u64, u64)> = f.iter().map(|(k, v)| (*k, *v)).collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    parts
        .iter()
        .take(3)
        .map(|(k, v)| format!("{:.0}% {}", *v as f64 * 100.0 / total as f64, size_name(*k)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn size_name(kb: u64) -> String {
    if kb >= 1024 && kb % 1024 == 0 {
        format!("{} MiB", kb / 1024)
    } else {
        format!("{kb} KiB")
    }
}

/// `0.81 [0.76, 0.86]`.
fn ratio_cell(r: &PairedRatio) -> String {
    r.display()
}

/// How the ratios were made and why measuring stopped.
fn ratio_note(runs: u32, stopped: bench::Stopped, until: &UntilArgs) -> String {
    let why = match stopped {
        bench::Stopped::Runs => format!("{runs} runs"),
        bench::Stopped::Ci => format!(
            "{runs} runs: every interval at most {} wide",
            until.until_ci.unwrap_or(f64::NAN)
        ),
        bench::Stopped::MaxTime => format!(
            "{runs} runs: the {} s budget ran out before every interval was at most {} wide",
            until.max_time.as_secs_f64(),
            until.until_ci.unwrap_or(f64::NAN)
        ),
    };
    let min = bench::stats::MIN_RUNS_FOR_VERDICT;
    let few = if (runs as usize) < min {
        format!(" (fewer than {min} runs give no 95% interval: no verdict; use --runs {min} or more)")
    } else {
        String::new()
    };
    format!("ratios: median of the per-run ratios [95% bootstrap confidence interval], {why}{few}")
}

fn run_exec(a: ExecArgs) -> Result<u8> {
    let opts = exec::Options {
        size: a.size,
        runs: a.runs,
        dir: a.dir,
        calls_per_page: a.calls_per_page,
        random_passes: a.random_passes,
        seed: a.seed,
        until: a.until.until(),
    };
    let r = with_progress(|bar| exec::run(&opts, bar))?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    let (b, h, w) = (&r.variants.baseline, &r.variants.huge, &r.variants.warm);
    let q = &r.ratios;
    println!(
        "exec benchmark (the exec-readahead microbenchmark of the Linux \"large folios for exec memory\" patches): \
         {} MiB file of RET stubs per variant on {} ({}), kernel {}, {} KiB pages, {} runs (times: median, min–max)\n",
        r.size_bytes >> 20,
        r.filesystem,
        r.dir.display(),
        r.kernel,
        r.page_kb,
        r.runs
    );
    // The unit the states count in: the PMD, or with 64 KiB pages the
    // 2 MiB contpte block.
    let (unit_folios, unit_mapped, warm_head) = match r.unit {
        hugetext::elf::HugeUnit::Pmd => (
            "Page cache in PMD-size folios".to_string(),
            "Mapping PMD-mapped".to_string(),
            "Warm (PMD page cache)".to_string(),
        ),
        hugetext::elf::HugeUnit::Contpte => (
            format!("Page cache in folios of {} KiB or more", r.unit_kb),
            format!("Mapping contpte-mapped ({} KiB blocks)", r.unit_kb),
            format!("Warm ({} KiB folios)", r.unit_kb),
        ),
    };
    let mut t = table(&[
        "Phase",
        "Baseline",
        "Huge (MADV_HUGEPAGE)",
        &warm_head,
        "huge/base",
        "warm/base",
    ]);
    t.add_row(vec![
        "Cold fault".to_string(),
        fmt_ms(&b.stats.cold_ms),
        fmt_ms(&h.stats.cold_ms),
        fmt_ms(&w.stats.cold_ms),
        ratio_cell(&q.cold_huge_over_baseline),
        ratio_cell(&q.cold_warm_over_baseline),
    ]);
    t.add_row(vec![
        "Random".to_string(),
        fmt_ms(&b.stats.random_ms),
        fmt_ms(&h.stats.random_ms),
        fmt_ms(&w.stats.random_ms),
        ratio_cell(&q.random_huge_over_baseline),
        ratio_cell(&q.random_warm_over_baseline),
    ]);
    let dash = || "–".to_string();
    t.add_row(vec![
        "Warm (fill)".to_string(),
        dash(),
        dash(),
        w.stats.warm_ms.as_ref().map_or_else(dash, fmt_ms),
        "".into(),
        "".into(),
    ]);
    t.add_row(vec![
        "Warm + cold".to_string(),
        dash(),
        dash(),
        w.stats.warm_plus_cold_ms.as_ref().map_or_else(dash, fmt_ms),
        "".into(),
        format!("{} of base cold", ratio_cell(&q.warm_total_over_baseline_cold)),
    ]);
    let state = |v: &exec::VariantReport, f: fn(&exec::State) -> f64| {
        let vals: Vec<f64> = v.runs.iter().map(|r| f(&r.state)).collect();
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if (hi - lo).abs() < 0.05 {
            format!("{lo:.1}%")
        } else {
            format!("{lo:.1}–{hi:.1}%")
        }
    };
    t.add_row(vec![
        unit_folios,
        state(b, |s| s.unit_folio_pct),
        state(h, |s| s.unit_folio_pct),
        state(w, |s| s.unit_folio_pct),
        "".into(),
        "".into(),
    ]);
    t.add_row(vec![
        unit_mapped,
        state(b, |s| s.unit_mapped_pct),
        state(h, |s| s.unit_mapped_pct),
        state(w, |s| s.unit_mapped_pct),
        "".into(),
        "".into(),
    ]);
    // Counts: what an emulator or a busy neighbour cannot distort.
    let count = |v: &exec::VariantReport, f: fn(&exec::State) -> u64| {
        let mut vals: Vec<u64> = v.runs.iter().map(|r| f(&r.state)).collect();
        vals.sort_unstable();
        let (lo, hi) = (vals[0], vals[vals.len() - 1]);
        if lo == hi {
            lo.to_string()
        } else {
            format!("{} ({lo}–{hi})", vals[vals.len() / 2])
        }
    };
    let faults = |v: &exec::VariantReport| {
        format!(
            "{}, {} major",
            count(v, |s| s.cold_faults),
            count(v, |s| s.cold_major_faults)
        )
    };
    t.add_row(vec![
        "Cold sweep page faults".to_string(),
        faults(b),
        faults(h),
        faults(w),
        "".into(),
        "".into(),
    ]);
    t.add_row(vec![
        "Read from disk, kB (pgpgin)".to_string(),
        count(b, |s| s.pgpgin_kb),
        count(h, |s| s.pgpgin_kb),
        count(w, |s| s.pgpgin_kb),
        "".into(),
        "".into(),
    ]);
    println!("{t}\n");
    for n in &r.notes {
        println!("note: {n}\n");
    }
    println!("{}\n", ratio_note(r.runs, r.stopped, &a.until));
    for (label, ratio, subject) in [
        ("random calls, huge/baseline", &q.random_huge_over_baseline, "huge text"),
        (
            "random calls, warm/baseline",
            &q.random_warm_over_baseline,
            "warmed text",
        ),
        ("cold sweep, huge/baseline", &q.cold_huge_over_baseline, "huge text"),
        ("cold sweep, warm/baseline", &q.cold_warm_over_baseline, "warmed text"),
        (
            "warm fill + cold sweep vs baseline cold sweep",
            &q.warm_total_over_baseline_cold,
            "warm + cold sweep",
        ),
    ] {
        println!("{label}: {}", ratio.verdict_line(subject));
    }
    Ok(0)
}

fn run_mprotect_ranges(a: MprotectArgs) -> Result<u8> {
    let opts = mprotect::RangeOptions {
        calls: a.calls,
        markers: a.markers,
        dir: a.dir,
    };
    let r = with_progress(|bar| mprotect::run_ranges(&opts, bar))?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    println!(
        "mprotect of ranges of 4 KiB pages: {} calls each way, kernel {}, THP {}, files on {}{}\n",
        a.calls,
        r.kernel,
        r.thp_enabled.map_or("absent", |m| m.as_str()),
        r.filesystem,
        if r.markers { ", counting markers on" } else { "" }
    );
    let mut t = table(&[
        "Range",
        "To read-only (µs, median)",
        "To read-write (µs, median)",
        "Verified state",
    ]);
    for c in &r.cases {
        let mut s = folios_text(&c.folios_kb);
        if !c.verified {
            s = format!("NOT 4 KiB pages: {s}");
        }
        t.add_row(vec![
            c.name.clone(),
            format!("{:.2}", c.to_read_only.median_us),
            format!("{:.2}", c.to_read_write.median_us),
            s,
        ]);
    }
    println!("{t}");
    Ok(0)
}

fn run_mprotect(a: MprotectArgs) -> Result<u8> {
    if a.ranges {
        return run_mprotect_ranges(a);
    }
    let opts = mprotect::Options {
        size: a.size,
        loops: a.loops,
        runs: a.runs,
        allow_sysfs: a.allow_sysfs,
        seed: a.seed,
        until: a.until.until(),
    };
    let r = with_progress(|bar| mprotect::run(&opts, bar))?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    println!(
        "mprotect benchmark (the test program of the Linux \"Optimize mprotect() for large folios\" patches): \
         {} MiB, read-only/read-write {} times, kernel {}, THP {}, hugepages-64kB {}{}; {} runs (loop: median, min–max)\n",
        r.size_bytes >> 20,
        r.loops,
        r.kernel,
        r.thp_enabled.map_or("absent", |m| m.as_str()),
        r.mthp_64k_enabled.as_deref().unwrap_or("absent"),
        if r.sysfs_changed { " (set to madvise for this run, restored)" } else { "" },
        r.runs
    );
    let q = &r.ratios;
    let vs_small = |c: mprotect::Case| -> (Option<&PairedRatio>, Option<&PairedRatio>) {
        match c {
            mprotect::Case::PmdThpPteMapped => (
                Some(&q.pmd_thp_pte_mapped_over_small_4k),
                Some(&q.pmd_thp_pte_mapped_over_small_4k_in_mprotect),
            ),
            mprotect::Case::Mthp64k => (
                q.mthp_64k_over_small_4k.as_ref(),
                q.mthp_64k_over_small_4k_in_mprotect.as_ref(),
            ),
            mprotect::Case::Small4k => (None, None),
        }
    };
    let mut t = table(&[
        "Test case",
        "Memory",
        "Loop (s)",
        "In mprotect (s)",
        "Loop / 4 KiB",
        "In mprotect / 4 KiB",
        "Verified state",
    ]);
    for (i, c) in mprotect::CASES.iter().enumerate() {
        let rep = r.cases.get(*c);
        let (loop_ratio, mp_ratio) = vs_small(*c);
        let cell = |x: Option<&PairedRatio>| x.map_or_else(|| "–".to_string(), ratio_cell);
        let row = match &rep.stats {
            None => vec![
                format!("T{} {}", i + 1, c.name()),
                rep.description.to_string(),
                "not available".into(),
                "–".into(),
                "–".into(),
                "–".into(),
                rep.not_available.clone().unwrap_or_default(),
            ],
            Some(stats) => {
                let st = rep.state.as_ref();
                let mut s = st.map(|s| folios_text(&s.folios_kb)).unwrap_or_default();
                if st.is_some_and(|s| !s.verified) {
                    s = format!("NOT the intended memory: {s}");
                }
                if let Some(st) = st {
                    if *c == mprotect::Case::PmdThpPteMapped {
                        s += &format!(
                            "; AnonHugePages {} MiB after touch, {} MiB while looping",
                            st.anon_huge_kb_after_touch / 1024,
                            st.anon_huge_kb_during / 1024
                        );
                    }
                    if let Some(n) = st.mthp_64k_fault_alloc {
                        s += &format!("; {n} 64 KiB fault allocations");
                    }
                }
                let sm = &stats.seconds;
                vec![
                    format!("T{} {}", i + 1, c.name()),
                    rep.description.to_string(),
                    format!("{:.2} ({:.2}–{:.2})", sm.median, sm.min, sm.max),
                    format!("{:.3}", stats.mprotect_seconds.median),
                    cell(loop_ratio),
                    cell(mp_ratio),
                    s,
                ]
            }
        };
        t.add_row(row);
    }
    println!("{t}\n");
    println!("{}\n", ratio_note(r.runs, r.stopped, &a.until));
    for c in [mprotect::Case::PmdThpPteMapped, mprotect::Case::Mthp64k] {
        let (loop_ratio, mp_ratio) = vs_small(c);
        let subject = match c {
            mprotect::Case::PmdThpPteMapped => "the PTE-mapped THP case",
            _ => "the 64 KiB mTHP case",
        };
        if let Some(x) = loop_ratio {
            println!("{} / small-4k, loop: {}", c.name(), x.verdict_line(subject));
        }
        if let Some(x) = mp_ratio {
            println!("{} / small-4k, in mprotect: {}", c.name(), x.verdict_line(subject));
        }
    }
    Ok(0)
}

fn run_readahead(a: ReadaheadArgs) -> Result<u8> {
    let mut opts = readahead::Options {
        size_per_thread: a.size,
        chunk: a.chunk,
        runs: a.runs,
        dir: a.dir,
        seed: a.seed,
        until: a.until.until(),
        ..Default::default()
    };
    if let Some(n) = a.threads {
        opts.threads = n;
    }
    let r = with_progress(|bar| readahead::run(&opts, bar))?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    println!(
        "readahead benchmark (the Linux \"batch folio insertion\" readahead patches): {} threads × {} MiB, \
         readahead(2) in {} KiB chunks, on {} ({}, read_ahead_kb {}), kernel {}; {} runs (median, min–max)\n",
        r.threads,
        r.size_per_thread_bytes >> 20,
        r.chunk_bytes >> 10,
        r.filesystem,
        r.dir.display(),
        r.read_ahead_kb.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
        r.kernel,
        r.runs
    );
    let mut t = table(&["Config", "Throughput", "min–max", "Wall", "Page cache folios"]);
    for cfg in readahead::CONFIGS {
        let c = r.configs.get(cfg);
        t.add_row(vec![
            cfg.name().to_string(),
            format!("{:.0} MB/s", c.mb_per_s),
            format!("{:.0}–{:.0}", c.stats.min, c.stats.max),
            format!("{:.0} ms", c.median_ms),
            folios_text(&c.folios_kb),
        ]);
    }
    println!("{t}\n");
    println!("{}\n", ratio_note(r.runs, r.stopped, &a.until));
    println!(
        "shared-file / distinct-files MB/s (below 1: page-cache lock contention on the shared file): {}",
        r.ratios.shared_over_distinct.verdict_line("the shared file")
    );
    Ok(0)
}

fn run_ab(a: AbArgs) -> Result<u8> {
    if a.command.is_empty() {
        return Err(exit_with(
            2,
            "no command given: use `hugetext bench ab [OPTIONS] -- COMMAND [ARGS...]`",
        ));
    }
    let opts = ab::Options {
        command: a.command.clone(),
        runs: a.runs,
        files: a.files.clone(),
        discover: !a.no_discover,
        seed: a.seed,
        show_output: a.show_output,
        hot: match &a.hot {
            Some(p) => {
                let profile = hugetext::profile::Profile::load(p).map_err(|e| exit_with(2, e.to_string()))?;
                Some((
                    p.clone(),
                    a.hot_share,
                    hugetext::profile::hot_windows(&profile, a.hot_share),
                ))
            }
            None => None,
        },
    };
    if let Some(path) = &a.plot {
        // Refused before the runs, not after them.
        hugetext::fsutil::check_output(path).map_err(|e| hugetext::Error::io(path, e))?;
    }
    let r = with_progress(|bar| ab::run(&opts, bar))?;
    if let Some(path) = &a.plot {
        if !r.pairs.is_empty() {
            let title = format!(
                "{} — huge/small {:.3} [{:.3}, {:.3}]",
                r.command.join(" ").chars().take(60).collect::<String>(),
                r.ratio,
                r.ci95[0],
                r.ci95[1]
            );
            bench::plot::write_svg(
                path,
                &title,
                "wall time (s)",
                &[
                    bench::plot::Series {
                        label: "small folios",
                        values: &r.small.runs_s,
                        median: r.small.median_s,
                    },
                    bench::plot::Series {
                        label: "PMD folios",
                        values: &r.huge.runs_s,
                        median: r.huge.median_s,
                    },
                ],
            )
            .with_context(|| format!("writing the plot to {}", path.display()))?;
        }
    }
    if a.json {
        print_json(&r)?;
    } else {
        print_ab(&r);
    }
    if let Some(f) = &r.failure {
        return Err(exit_with(f.exit_code(), f.to_string()));
    }
    Ok(0)
}

fn print_ab(r: &ab::Report) {
    println!(
        "A/B: `{}` ({} pairs, sides alternating small-first/huge-first), kernel {}; warm-up run {:.3} s\n",
        r.command.join(" "),
        r.pairs.len(),
        r.kernel,
        r.warmup_s
    );
    if r.files.is_empty() {
        return; // the warm-up run failed before any file was seen
    }
    let mut ft = table(&["File", "Text", "PMD windows", "PMD-mappable", "Source"]);
    for f in &r.files {
        ft.add_row(vec![
            f.path.display().to_string(),
            format!("{:.1} MiB", f.text_kb as f64 / 1024.0),
            f.unit_windows.to_string(),
            match f.mappable_windows {
                Some(m) => m.to_string(),
                None => "not seen mapped".into(),
            },
            f.source.to_string(),
        ]);
    }
    println!("{ft}\n");
    if r.pairs.is_empty() {
        return;
    }
    let mut t = table(&[
        "Side",
        "Median",
        "Min",
        "Max",
        "User",
        "Sys",
        "iTLB misses",
        "Text in PMD folios",
    ]);
    let hot = r.hot.as_ref().map(|h| ("hot", &h.side));
    for (name, s) in [("small", &r.small), ("huge", &r.huge)].into_iter().chain(hot) {
        t.add_row(vec![
            name.to_string(),
            format!("{:.4} s", s.median_s),
            format!("{:.4} s", s.min_s),
            format!("{:.4} s", s.max_s),
            format!("{:.3} s", s.user_s),
            format!("{:.3} s", s.sys_s),
            s.itlb_misses.map(|v| format!("{v:.0}")).unwrap_or_else(|| "n/a".into()),
            format!(
                "{:.1}% ({:.1}–{:.1})",
                s.text_unit_pct.median, s.text_unit_pct.min, s.text_unit_pct.max
            ),
        ]);
    }
    println!("{t}\n");
    println!(
        "huge/small wall time = {:.3}, 95% CI [{:.3}, {:.3}] ({})",
        r.ratio, r.ci95[0], r.ci95[1], r.ci_method
    );
    println!(
        "huge/small CPU time (user+sys) = {:.3}, 95% CI [{:.3}, {:.3}]",
        r.cpu_ratio, r.cpu_ci95[0], r.cpu_ci95[1]
    );
    if let Some(h) = &r.hot {
        println!(
            "hot/small wall time = {:.3}, 95% CI [{:.3}, {:.3}]; hot/huge = {:.3} (hot: the windows holding {}% of {}'s samples)",
            h.ratio,
            h.ci95[0],
            h.ci95[1],
            h.over_huge,
            h.share * 100.0,
            h.profile.display()
        );
    }
    if let Some(why) = &r.itlb.reason {
        println!("iTLB misses: {why}");
    }
    for n in &r.notes {
        println!("note: {n}");
    }
}

/// uid and primary gid of a user name or number.
fn user_ids(user: &str) -> Option<(u32, u32)> {
    let name = std::ffi::CString::new(user).ok()?;
    // SAFETY: getpwnam/getpwuid return NULL or a pointer to a static
    // record, read at once (this process is single-threaded here).
    let pw = unsafe {
        match user.parse::<u32>() {
            Ok(uid) => libc::getpwuid(uid),
            Err(_) => libc::getpwnam(name.as_ptr()),
        }
    };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null, see above.
    let pw = unsafe { &*pw };
    Some((pw.pw_uid, pw.pw_gid))
}

fn run_startup(a: StartupArgs, accepted: &[String]) -> Result<u8> {
    if a.command.is_empty() {
        return Err(exit_with(
            2,
            "no command given: use `hugetext bench startup [OPTIONS] -- COMMAND [ARGS...]`",
        ));
    }
    let routes = if a.routes.is_empty() {
        accepted.to_vec()
    } else {
        a.routes.clone()
    };
    if let Some(bad) = routes.iter().find(|r| !accepted.contains(r)) {
        return Err(exit_with(
            2,
            format!(
                "--routes: {bad:?} is no route of `hugetext run` ({})",
                accepted.join(", ")
            ),
        ));
    }
    match a.ready_file.as_slice() {
        [] => {}
        [_, text] if !text.is_empty() => {}
        [_, _] => return Err(exit_with(2, "--ready-file: the TEXT to wait for is empty")),
        _ => return Err(exit_with(2, "--ready-file: give it once, as --ready-file PATH TEXT")),
    }
    let user = match &a.user {
        Some(u) => Some(user_ids(u).ok_or_else(|| exit_with(2, format!("--user: no user {u:?}")))?),
        None => None,
    };
    let hugetext = ab::startup::current_hugetext()
        .ok_or_else(|| exit_with(1, "cannot find the running hugetext binary (/proc/self/exe)"))?;
    let opts = ab::startup::Options {
        command: a.command.clone(),
        hugetext,
        routes,
        runs: a.runs,
        ready: match (&a.ready, a.ready_file.as_slice()) {
            (Some(p), _) => Some(ab::startup::Ready::Probe(p.clone())),
            (None, [path, text]) => Some(ab::startup::Ready::FileHas {
                path: path.into(),
                text: text.clone(),
            }),
            _ => None,
        },
        timeout: a.timeout,
        user,
        files: a.files.clone(),
        run_cache: match a.run_cache {
            RunCache::Small => ab::Side::Small,
            RunCache::Huge => ab::Side::Huge,
        },
        seed: a.seed,
    };
    let r = with_progress(|bar| ab::startup::run(&opts, bar))?;
    if a.json {
        print_json(&r)?;
    } else {
        print_startup(&r);
    }
    Ok(0)
}

fn ms_ratio(r: &Option<PairedRatio>) -> String {
    r.as_ref().map(|r| r.display()).unwrap_or_else(|| "–".into())
}

fn print_startup(r: &ab::startup::Report) {
    println!(
        "Start-up of `{}` (until {}; {} rounds, variants interleaved; run variants from {} page-cache folios), kernel {}\n",
        r.command.join(" "),
        match &r.ready {
            Some(p) => format!("ready: {p}"),
            None => "exit".into(),
        },
        r.runs,
        r.run_cache,
        r.kernel
    );
    let mut t = table(&[
        "Variant",
        "Start-up (median, min–max)",
        "CPU",
        "/ plain [95% CI]",
        "Added",
        "CPU / plain [95% CI]",
        "Text in PMD folios before",
    ]);
    for v in &r.variants {
        t.add_row(vec![
            v.name.clone(),
            format!("{:.1} ms ({:.1}–{:.1})", v.median_ms, v.min_ms, v.max_ms),
            format!("{:.1} ms", v.cpu_ms),
            ms_ratio(&v.ratio),
            v.added_ms.map(|a| format!("{a:+.1} ms")).unwrap_or_else(|| "–".into()),
            ms_ratio(&v.cpu_ratio),
            format!("{:.0}%", v.text_unit_pct),
        ]);
    }
    println!("{t}\n");
    let mut b = table(&[
        "Route",
        "Setup (maps)",
        "already",
        "file",
        "collapse",
        "copy (fill, perf map)",
        "Pass",
        "Outside the pass",
        "MiB file / copy / already",
        "Copy ms/MiB (× floor)",
        "Fill ms/MiB (× floor)",
    ]);
    let mut any = false;
    for v in &r.variants {
        let Some(d) = &v.breakdown else { continue };
        any = true;
        b.add_row(vec![
            v.name.clone(),
            format!("{:.2} ms ({:.2})", d.setup_ms, d.maps_ms),
            format!("{:.2} ms", d.already_ms),
            format!("{:.2} ms", d.file_ms),
            format!("{:.2} ms", d.collapse_ms),
            format!("{:.2} ms ({:.2}, {:.2})", d.copy_ms, d.copy_fill_ms, d.perf_map_ms),
            format!("{:.2} ms", d.pass_ms),
            format!("{:+.1} ms", d.outside_ms),
            format!("{:.0} / {:.0} / {:.0}", d.file_mib, d.copy_mib, d.already_mib),
            match (d.copy_ms_per_mib, d.copy_over_floor) {
                (Some(p), Some(f)) => format!("{p:.3} ({f:.2}×)"),
                (Some(p), None) => format!("{p:.3}"),
                _ => "–".into(),
            },
            match (d.fill_ms_per_mib, d.fill_over_floor) {
                (Some(p), Some(f)) => format!("{p:.3} ({f:.2}×)"),
                (Some(p), None) => format!("{p:.3}"),
                _ => "–".into(),
            },
        ]);
    }
    if any {
        println!("Where `run`'s time went (medians of the preload's records):\n\n{b}\n");
    }
    for v in &r.variants {
        let Some(d) = &v.breakdown else { continue };
        if let (Some(fill), Some(floor), Some(x)) =
            (d.fill_cpu_ms_per_mib, d.floor_cpu_ms_per_mib, &d.fill_over_floor_cpu)
        {
            println!(
                "{}: copy fill {fill:.3} ms/MiB of CPU, memcpy floor {floor:.3} (measured after each start): {:.2}× [{:.2}, {:.2}] the floor; zeroing the huge pages {} ms/MiB of CPU (floor's: {})",
                v.name,
                x.median,
                x.ci95[0],
                x.ci95[1],
                d.zero_cpu_ms_per_mib.map_or("–".into(), |z| format!("{z:.3}")),
                d.floor_zero_cpu_ms_per_mib.map_or("–".into(), |z| format!("{z:.3}")),
            );
        }
    }
    if let Some(f) = &r.copy_floor {
        println!(
            "memory-copy floor ({:.0} MiB): {:.3} ms/MiB into fresh huge pages (faults and zeroing included), {:.3} ms/MiB into memory already faulted in",
            f.bytes as f64 / (1u64 << 20) as f64,
            f.fresh_ms_per_mib,
            f.warm_ms_per_mib
        );
    }
    for v in r.variants.iter().filter(|v| v.ratio.is_some()) {
        if let Some(ratio) = &v.ratio {
            println!(
                "{}: {}",
                v.name,
                ratio.verdict_line(&format!("start-up with {}", v.name))
            );
        }
    }
    for n in &r.notes {
        println!("note: {n}");
    }
}
