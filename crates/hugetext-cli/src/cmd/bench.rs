//! `hugetext bench`: the seeds' micro-benchmarks and paired A/B runs of real
//! programs. Results print as markdown tables (like the seeds' tables), or
//! as JSON with `--json`; a progress bar runs on stderr when it is a
//! terminal.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result};
use comfy_table::{presets::ASCII_MARKDOWN, Table};
use hugetext::bench::{self, ab, exec, mprotect, readahead};

use super::{exit_with, Bar};

/// Benchmarks: reproduce the kernel seeds' measurements on this machine, and
/// measure real programs with and without huge text.
///
/// Every benchmark checks the memory state it measures (folio sizes from
/// /proc/kpageflags, PMD mappings from smaps) and prints it next to the
/// numbers. Needs root (folio sizes). See doc/bench.md.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Seed 000: cold faults and random calls into a large executable file
    /// of RET stubs; baseline vs MADV_HUGEPAGE vs a warmed page cache.
    ///
    /// "cold" evicts the file's page cache and calls one stub per page in
    /// order (fault + readahead cost); "random" then calls stubs at random
    /// pages from a fixed seed (iTLB cost). Variants: `baseline` (plain exec
    /// mapping: 4 KiB folios on x86), `huge` (MADV_HUGEPAGE on the mapping
    /// before the cold sweep), `warm` (page cache filled with PMD folios
    /// first, timed as warm_ms, then a plain mapping). The variants are
    /// interleaved run by run in rotating order.
    Exec(ExecArgs),
    /// Seed 004: mprotect() read-only/read-write 40 times over 1 GiB of
    /// PTE-mapped PMD THPs, of 64 KiB mTHPs, and of 4 KiB pages.
    Mprotect(MprotectArgs),
    /// Seed 002: readahead(2) throughput from N threads, into N distinct
    /// files vs disjoint slices of one shared file (page-cache lock
    /// contention).
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
    /// CPU time).
    Ab(AbArgs),
}

fn size_arg(s: &str) -> Result<u64, String> {
    bench::parse_size(s).map_err(|e| e.to_string())
}

#[derive(clap::Args, Debug)]
struct ExecArgs {
    /// Size of the RET-stub file (K, M, G suffixes; whole 2 MiB units).
    #[arg(long, default_value = "512M", value_parser = size_arg)]
    size: u64,
    /// Runs; each run measures every variant once.
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// Directory for the stub file, on a disk filesystem (ext4, xfs).
    /// Default: $TMPDIR unless it is tmpfs, else the current directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Random calls per page of the file.
    #[arg(long, default_value_t = 4)]
    calls_per_page: u32,
    /// Passes of the random phase per run; the fastest pass counts.
    #[arg(long, default_value_t = 3)]
    random_passes: u32,
    /// Seed of the random phase.
    #[arg(long, default_value_t = 0x5eed000)]
    seed: u64,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct MprotectArgs {
    /// Memory per case (the seed: 1G).
    #[arg(long, default_value = "1G", value_parser = size_arg)]
    size: u64,
    /// mprotect read-only/read-write rounds.
    #[arg(long, default_value_t = 40)]
    loops: u32,
    /// Runs per case (cases interleaved).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Allow setting /sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled
    /// to `madvise` for the mTHP case when it is `never` (restored after).
    #[arg(long)]
    allow_sysfs: bool,
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
    /// Runs per configuration.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Directory for the files, on a disk filesystem.
    #[arg(long)]
    dir: Option<PathBuf>,
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
    /// Write an SVG plot of every run's time to FILE.
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
    /// The command to run, after `--`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> Result<u8> {
    match args.what {
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
    println!("{}", serde_json::to_string_pretty(v)?);
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

fn verdict(value: f64, target: f64, aim: f64) -> &'static str {
    if !value.is_finite() {
        "not measured"
    } else if value <= aim {
        "met (and the aim)"
    } else if value <= target {
        "met"
    } else {
        "NOT met"
    }
}

fn run_exec(a: ExecArgs) -> Result<u8> {
    let opts = exec::Options {
        size: a.size,
        runs: a.runs,
        dir: a.dir,
        calls_per_page: a.calls_per_page,
        random_passes: a.random_passes,
        seed: a.seed,
    };
    let r = with_progress(|bar| exec::run(&opts, bar))?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    let (b, h, w) = (&r.variants["baseline"], &r.variants["huge"], &r.variants["warm"]);
    println!(
        "exec benchmark (seed 000): {} MiB file of RET stubs on {} ({}), kernel {}, {} runs (median, min–max)\n",
        r.size_bytes >> 20,
        r.filesystem,
        r.dir.display(),
        r.kernel,
        r.runs
    );
    let mut t = table(&[
        "Phase",
        "Baseline",
        "Huge (MADV_HUGEPAGE)",
        "Warm (PMD page cache)",
        "huge/base",
        "warm/base",
    ]);
    t.add_row(vec![
        "Cold fault".to_string(),
        fmt_ms(&b.stats["cold_ms"]),
        fmt_ms(&h.stats["cold_ms"]),
        fmt_ms(&w.stats["cold_ms"]),
        format!("{:.2}", h.cold_ms / b.cold_ms),
        format!("{:.2}", w.cold_ms / b.cold_ms),
    ]);
    t.add_row(vec![
        "Random".to_string(),
        fmt_ms(&b.stats["random_ms"]),
        fmt_ms(&h.stats["random_ms"]),
        fmt_ms(&w.stats["random_ms"]),
        format!("{:.2}", h.random_ms / b.random_ms),
        format!("{:.2}", w.random_ms / b.random_ms),
    ]);
    t.add_row(vec![
        "Warm (fill)".to_string(),
        "–".into(),
        "–".into(),
        fmt_ms(&w.stats["warm_ms"]),
        "".into(),
        "".into(),
    ]);
    t.add_row(vec![
        "Warm + cold".to_string(),
        "–".into(),
        "–".into(),
        fmt_ms(&w.stats["warm_plus_cold_ms"]),
        "".into(),
        format!("{:.2}", r.targets.warm_total_over_baseline_cold),
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
        "Page cache in 2 MiB folios".to_string(),
        state(b, |s| s.pmd_folio_pct),
        state(h, |s| s.pmd_folio_pct),
        state(w, |s| s.pmd_folio_pct),
        "".into(),
        "".into(),
    ]);
    t.add_row(vec![
        "Mapping PMD-mapped".to_string(),
        state(b, |s| s.pmd_mapped_pct),
        state(h, |s| s.pmd_mapped_pct),
        state(w, |s| s.pmd_mapped_pct),
        "".into(),
        "".into(),
    ]);
    println!("{t}\n");
    let tg = &r.targets;
    println!(
        "random huge/baseline = {:.2} (target ≤ 0.8, aim ≤ 0.65): {}",
        tg.random_huge_over_baseline,
        verdict(tg.random_huge_over_baseline, 0.8, 0.65)
    );
    println!(
        "(warm_ms + cold of warm) / baseline cold = {:.2} (target ≤ 1, aim ≤ 0.5): {}",
        tg.warm_total_over_baseline_cold,
        verdict(tg.warm_total_over_baseline_cold, 1.0, 0.5)
    );
    Ok(0)
}

fn run_mprotect(a: MprotectArgs) -> Result<u8> {
    let opts = mprotect::Options {
        size: a.size,
        loops: a.loops,
        runs: a.runs,
        allow_sysfs: a.allow_sysfs,
    };
    let r = with_progress(|bar| mprotect::run(&opts, bar))?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    println!(
        "mprotect benchmark (seed 004): {} MiB, read-only/read-write {} times, kernel {}, THP {}, hugepages-64kB {}{}; median of {} runs\n",
        r.size_bytes >> 20,
        r.loops,
        r.kernel,
        r.thp_enabled.as_deref().unwrap_or("absent"),
        r.mthp_64k_enabled.as_deref().unwrap_or("absent"),
        if r.sysfs_changed { " (set to madvise for this run, restored)" } else { "" },
        r.runs
    );
    let mut t = table(&["Test case", "Memory", "Loop (s)", "In mprotect (s)", "Verified state"]);
    for (i, c) in mprotect::CASES.iter().enumerate() {
        let rep = &r.cases[c.name()];
        let row = match &rep.stats {
            None => vec![
                format!("T{} {}", i + 1, c.name()),
                rep.description.to_string(),
                "not available".into(),
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
                let sm = &stats["seconds"];
                vec![
                    format!("T{} {}", i + 1, c.name()),
                    rep.description.to_string(),
                    format!("{:.2} ({:.2}–{:.2})", sm.median, sm.min, sm.max),
                    format!("{:.3}", rep.mprotect_seconds.unwrap_or(f64::NAN)),
                    s,
                ]
            }
        };
        t.add_row(row);
    }
    println!("{t}");
    Ok(0)
}

fn run_readahead(a: ReadaheadArgs) -> Result<u8> {
    let mut opts = readahead::Options {
        size_per_thread: a.size,
        chunk: a.chunk,
        runs: a.runs,
        dir: a.dir,
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
        "readahead benchmark (seed 002): {} threads × {} MiB, readahead(2) in {} KiB chunks, on {} ({}, read_ahead_kb {}), kernel {}; median of {} runs\n",
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
        let c = &r.configs[cfg];
        t.add_row(vec![
            cfg.to_string(),
            format!("{:.0} MB/s", c.mb_per_s),
            format!("{:.0}–{:.0}", c.stats.min, c.stats.max),
            format!("{:.0} ms", c.median_ms),
            folios_text(&c.folios_kb),
        ]);
    }
    println!("{t}\n");
    println!(
        "shared-file / distinct-files = {:.2} (below 1: page-cache lock contention on the shared file)",
        r.shared_over_distinct
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
    };
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
    let mut ft = table(&["File", "Text", "2 MiB windows", "PMD-mappable", "Source"]);
    for f in &r.files {
        ft.add_row(vec![
            f.path.display().to_string(),
            format!("{:.1} MiB", f.text_kb as f64 / 1024.0),
            f.pmd_windows.to_string(),
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
    for (name, s) in [("small", &r.small), ("huge", &r.huge)] {
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
                s.text_pmd_pct.median, s.text_pmd_pct.min, s.text_pmd_pct.max
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
    if let Some(why) = &r.itlb.reason {
        println!("iTLB misses: {why}");
    }
    for n in &r.notes {
        println!("note: {n}");
    }
}
