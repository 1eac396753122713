//! `hugetext profile`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hugetext::profile::report::{self, Summary};
use hugetext::profile::tlb::{self, Estimate, FileEstimate};
use hugetext::profile::{self, exact, sample, script, Profile};

use super::exit_with;
use hugetext::units::mib;

/// The long help of `hugetext profile`.
const LONG_HELP: &str = "\
Sources (one of):
  --pid PID            sample a running process (all its threads) for --duration;
                       repeat --pid to sample several processes into one profile
  -- PROGRAM [ARGS]    start PROGRAM and sample it until it exits
  --exact -- PROGRAM   run PROGRAM under qemu-user and count every instruction
  --perf-script FILE   read `perf script --show-mmap-events -F pid,ip,dso` output
  --input PROFILE      report a profile written earlier with --output

Sampling uses perf_event_open's software cpu-clock event: a timer, so it works
in virtual machines that expose no hardware counters. Samples are attributed to
the file behind the address, by file offset, and to its PMD windows (2 MiB of
file offsets on x86-64): the pages the kernel or `run` would map huge.

--exact also drives modelled instruction TLBs (--itlb: skylake, zen4,
neoverse-v2; geometries from the vendors' manuals) twice: with every text page
4 KiB, and with the whole 2 MiB windows of text on huge pages. It prints L1
iTLB misses and page walks per 1,000 instructions and the estimated cycles
spent on them, per file. It needs qemu-user (apt-get install qemu-user) and a C
compiler (the plugin is built on first use); it is slow (tens of times slower
than native) and does not follow programs the command execs.

The report: per file, its share, its windows holding 50/90/99% of the counts,
and a heat strip (one column per window, ' .:-=+*#%@' from cold to hot). --svg
writes the strips as an image; --output writes the profile (JSON, format
documented in doc/profile.md) that `run --hot` reads; --hot PCT lists the
windows holding PCT% of the counts, the ones `run --hot` would remap;
--hot-out FILE writes them (default 99%) as the hot-window list HUGETEXT_HOT
names, for programs started with libhugetext.so without `run`.

Where the report goes: with a PROGRAM, the program keeps stdout and stderr as
they are and the report (text or --json) is written to stderr once it has
ended, or to --report FILE; otherwise to stdout, or to --report FILE. Use
--json --report FILE for JSON that nothing else writes into.

A profile with no samples says why: the process used no CPU time during the
window (idle), exited, or the program ran for less than one sample period.

Exits 0, or 1 on error (no such process, not permitted, qemu missing),
127/126 when PROGRAM cannot be found or executed.";

/// Arguments of `hugetext profile`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// Sample this running process (repeat for several: one profile of all).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..), conflicts_with_all = ["perf_script", "input", "exact"])]
    pub pid: Vec<i32>,

    /// Read samples from `perf script --show-mmap-events -F pid,ip,dso` output ('-': stdin).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["input", "exact"])]
    pub perf_script: Option<PathBuf>,

    /// Report a profile written earlier with --output.
    #[arg(long, value_name = "PROFILE", conflicts_with = "exact")]
    pub input: Option<PathBuf>,

    /// Run PROGRAM under qemu-user: every instruction counted, and the iTLB model.
    #[arg(long)]
    pub exact: bool,

    /// Stop sampling after this many seconds (--pid: default 10).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub duration: Option<Duration>,

    /// Samples per second per running thread.
    #[arg(long, value_name = "HZ", default_value_t = 999, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub frequency: u64,

    /// iTLB geometry modelled by --exact: skylake, zen4 or neoverse-v2.
    #[arg(long, value_name = "MODEL", default_value = "skylake", value_parser = parse_itlb)]
    pub itlb: String,

    /// Cycles per page walk in the --exact estimate.
    #[arg(long, value_name = "N", default_value_t = tlb::WALK_CYCLES)]
    pub walk_cycles: u32,

    /// The qemu-user binary for --exact (default: qemu-ARCH on PATH).
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,

    /// Write the profile (JSON) to this file.
    #[arg(long, short = 'o', value_name = "PROFILE")]
    pub output: Option<PathBuf>,

    /// Write the heat strips as SVG to this file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// List the windows holding this percentage of the counts (what `run --hot` remaps).
    #[arg(long, value_name = "PCT", value_parser = super::parse_percent)]
    pub hot: Option<f64>,

    /// Write the windows of --hot (default 99%) as a hot-window list for HUGETEXT_HOT.
    #[arg(long, value_name = "FILE")]
    pub hot_out: Option<PathBuf>,

    /// Print JSON (summary, iTLB estimate, hot windows) instead of text.
    #[arg(long)]
    pub json: bool,

    /// Write the report (text, or --json) to this file, not to stdout (or,
    /// with a PROGRAM, stderr).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// With several --pid: also a table (and JSON summary) per process.
    #[arg(long, requires = "pid")]
    pub per_pid: bool,

    /// Files shown in the text report.
    #[arg(long, value_name = "N", default_value_t = 15)]
    pub top: usize,

    /// Start PROGRAM with ARGS and profile it.
    #[arg(last = true, value_name = "PROGRAM [ARGS]", conflicts_with_all = ["pid", "perf_script", "input"])]
    pub command: Vec<OsString>,
}

fn parse_seconds(s: &str) -> std::result::Result<Duration, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err("must be a positive number of seconds".into());
    }
    Ok(Duration::from_secs_f64(v))
}

fn parse_itlb(s: &str) -> std::result::Result<String, String> {
    tlb::geometry(s).map(|g| g.name.to_string()).ok_or_else(|| {
        let names: Vec<&str> = tlb::GEOMETRIES.iter().map(|g| g.name).collect();
        format!("unknown iTLB model '{s}' (one of: {})", names.join(", "))
    })
}

/// `println!` into a `String`.
macro_rules! out {
    ($o:expr) => {
        $o.push('\n')
    };
    ($o:expr, $($t:tt)*) => {{
        $o.push_str(&format!($($t)*));
        $o.push('\n');
    }};
}

pub fn run(args: Args) -> Result<u8> {
    let profile = gather(&args)?;
    let per_pid = std::mem::take(&mut *PER_PID.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(out) = &args.output {
        let text = serde_json::to_string(&hugetext::units::with_old_keys(serde_json::to_value(&profile)?))? + "\n";
        profile::write_output(out, text.as_bytes()).context("cannot write the profile")?;
    }
    let summary = report::summarise(&profile);
    if let Some(svg) = &args.svg {
        profile::write_output(svg, report::svg(&summary, args.top.max(1)).as_bytes())
            .context("cannot write the SVG")?;
    }
    if let Some(out) = &args.hot_out {
        let list = profile::fits(profile::hot_list(&profile, args.hot.unwrap_or(0.99)))
            .map_err(|e| exit_with(1, e.to_string()))?;
        profile::write_output(out, list.as_bytes()).context("cannot write the hot-window list")?;
    }
    let hot = args.hot.map(|s| (s, profile::hot_windows(&profile, s)));
    let notes = std::mem::take(&mut *NOTES.lock().unwrap_or_else(|e| e.into_inner()));
    let mut o = String::new();
    if !args.json {
        for n in &notes {
            eprintln!("note: {n}");
        }
    }
    if args.json {
        let v = serde_json::json!({
            "source": profile.source,
            "command": profile.command,
            "pid": profile.pid,
            "pids": args.pid,
            "summary": summary,
            "itlb": profile.itlb,
            "hot": hot.as_ref().map(|(s, h)| serde_json::json!({ "share": s, "files": h })),
            "notes": notes,
            "per_pid": args.per_pid.then(|| per_pid.iter().map(|p| serde_json::json!({
                "pid": p.pid,
                "summary": report::summarise(p),
            })).collect::<Vec<_>>()),
        });
        o = serde_json::to_string_pretty(&hugetext::units::with_old_keys(v))? + "\n";
    } else {
        print_text(&mut o, &profile, &summary, args.top);
        for p in &per_pid {
            out!(o);
            out!(o, "pid {}:", p.pid.unwrap_or(0));
            print_text(&mut o, p, &report::summarise(p), args.top);
        }
        if let Some((s, h)) = &hot {
            print_hot(&mut o, *s, h, profile.unit_size);
        }
        if let Some(e) = &profile.itlb {
            print_itlb(&mut o, e, args.top);
        }
    }
    use std::io::Write;
    match &args.report {
        Some(path) => profile::write_output(path, o.as_bytes()).context("cannot write the report")?,
        // The program's own stdout is its alone.
        None if !args.command.is_empty() => std::io::stderr().write_all(o.as_bytes())?,
        None => std::io::stdout().write_all(o.as_bytes())?,
    }
    Ok(0)
}

/// The profile from the source the arguments name.
fn gather(args: &Args) -> Result<Profile> {
    if let Some(path) = &args.input {
        return Ok(Profile::load(path)?);
    }
    if let Some(path) = &args.perf_script {
        return from_perf_script(path);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let opts = sample::Options {
        frequency: args.frequency,
        duration: args.duration,
        per_pid: args.per_pid,
    };
    if args.exact {
        if args.command.is_empty() {
            return Err(exit_with(
                2,
                "--exact needs a program: hugetext profile --exact -- PROGRAM [ARGS]",
            ));
        }
        let geometry = tlb::geometry(&args.itlb).unwrap_or_else(exact::default_geometry);
        let o = exact::Options {
            qemu: args.qemu.clone(),
            geometry,
            walk_cycles: args.walk_cycles,
        };
        let out = exact::run(&args.command, &o)?;
        note_status(out.status);
        if out.status.code().is_some() && !out.complete {
            note(format!("the profile stops early ({} instructions): the program closed or replaced the descriptor the profiler writes to",
                count(out.profile.total)
            ));
        }
        return Ok(out.profile);
    }
    if !args.pid.is_empty() {
        let mut pids = args.pid.clone();
        pids.sort_unstable();
        pids.dedup();
        let window = opts.duration.unwrap_or(Duration::from_secs(10));
        let opts = sample::Options {
            duration: Some(window),
            ..opts
        };
        let (p, lost, mut watched) = sample::sample_pids(&pids, &opts, &stop)?;
        *PER_PID.lock().unwrap_or_else(|e| e.into_inner()) =
            watched.iter_mut().filter_map(|w| w.profile.take()).collect();
        note_lost(lost);
        if p.total == 0 {
            for w in &watched {
                note(no_samples_reason(w, window, ticks_per_second()));
            }
        }
        return Ok(p);
    }
    if args.command.is_empty() {
        return Err(exit_with(
            2,
            "nothing to profile: give --pid PID, -- PROGRAM [ARGS], --exact -- PROGRAM, --perf-script FILE or --input PROFILE",
        ));
    }
    let (p, lost, status) = sample::sample_command(&args.command, &opts)?;
    note_lost(lost);
    note_status(status);
    if p.total == 0 {
        note(format!("no samples: the program and its children used {} of CPU time, less than a few sample periods at {} Hz; profile a longer run or raise --frequency",
            children_cpu_text(),
            args.frequency
        ));
    }
    Ok(p)
}

static NOTES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// `--per-pid`: each process's own profile, in the order named.
static PER_PID: std::sync::Mutex<Vec<Profile>> = std::sync::Mutex::new(Vec::new());

/// A note about the profile: on stderr before the report, or (`--json`) in
/// the report's `notes`.
fn note(s: String) {
    NOTES.lock().unwrap_or_else(|e| e.into_inner()).push(s);
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

/// The CPU time of this process's waited-for children, for a note.
fn children_cpu_text() -> String {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN needs no privilege.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return "too little".into();
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    format!("{:.1} ms", (us(ru.ru_utime) + us(ru.ru_stime)) as f64 / 1000.0)
}

/// Why a process sampled for `window` gave no samples. Pure.
fn no_samples_reason(w: &sample::Watched, window: Duration, hz: u64) -> String {
    let cpu = w.cpu_ticks as f64 / hz.max(1) as f64;
    if w.exited && w.cpu_ticks == 0 {
        format!(
            "pid {}: no samples: it exited during the window without using CPU time",
            w.pid
        )
    } else if w.exited {
        format!(
            "pid {}: no samples: it exited during the window after {cpu:.2} s of CPU time",
            w.pid
        )
    } else if w.cpu_ticks == 0 {
        format!(
            "pid {}: no samples: it used no CPU time during the {:.1} s window (utime + stime unchanged): an idle process gives none; profile it while it works (under load), or for longer with --duration",
            w.pid,
            window.as_secs_f64()
        )
    } else {
        format!(
            "pid {}: no samples although it used {cpu:.2} s of CPU time in the {:.1} s window: the kernel delivered none (perf_event_paranoid, a seccomp or container policy, or a CPU the events were not opened on)",
            w.pid,
            window.as_secs_f64()
        )
    }
}

fn from_perf_script(path: &std::path::Path) -> Result<Profile> {
    let read = if path.as_os_str() == "-" {
        script::read(std::io::stdin().lock(), "stdin")?
    } else {
        let f = std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
        script::read(std::io::BufReader::new(f), &path.display().to_string())?
    };
    if read.long_lines > 0 {
        note(format!(
            "{} longer than {} KiB skipped (not perf script -F pid,ip,dso output)",
            match read.long_lines {
                1 => "1 line".to_string(),
                n => format!("{n} lines"),
            },
            script::MAX_LINE >> 10
        ));
    }
    Ok(read.profile)
}

fn note_lost(lost: u64) {
    if lost > 0 {
        note(format!(
            "the kernel dropped {lost} samples (ring buffer full); lower --frequency"
        ));
    }
}

fn note_status(status: std::process::ExitStatus) {
    if !status.success() {
        note(format!(
            "the program ended with {status}; the profile covers what it ran"
        ));
    }
}

/// Thousands separators.
fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn print_text(o: &mut String, p: &Profile, s: &Summary, top: usize) {
    let attributed = p.attributed();
    let what = match p.source {
        profile::Source::Sampling => "samples (cpu-clock)",
        profile::Source::PerfScript => "samples (perf script)",
        profile::Source::Exact => "instructions (exact)",
    };
    out!(
        o,
        "{} {what}: {} in {} files, {} in no file (JIT, vdso, exited processes)",
        count(p.total),
        pct(attributed as f64 / p.total.max(1) as f64),
        p.files.len(),
        pct(p.unattributed as f64 / p.total.max(1) as f64)
    );
    let w = mib(p.unit_size);
    let [a, b, c] = s.windows_for;
    out!(
        o,
        "windows of {w} holding 50% / 90% / 99% of them: {a} / {b} / {c} (all files)"
    );
    if s.files.is_empty() {
        return;
    }
    out!(o);
    out!(
        o,
        "{:>6}  {:>12}  {:>10}  {:>7}  {:>10}  {:<32}  FILE",
        "SHARE",
        "COUNT",
        "TEXT",
        "WINDOWS",
        "50/90/99",
        "HEAT (1 column = 1 window)"
    );
    for f in s.files.iter().take(top) {
        let [a, b, c] = f.windows_for;
        out!(
            o,
            "{:>6}  {:>12}  {:>10}  {:>7}  {:>10}  |{:<30}|  {}",
            pct(f.share),
            count(f.count),
            mib(f.text_bytes),
            format!("{}/{}", f.hot_windows, f.text_windows),
            format!("{a}/{b}/{c}"),
            report::strip(&f.heat, 30),
            f.path
        );
    }
    if s.files.len() > top {
        out!(o, "… and {} more files (--top N, --json)", s.files.len() - top);
    }
}

fn print_hot(o: &mut String, share: f64, h: &[profile::HotFile], pmd: u64) {
    let total: u64 = h.iter().flat_map(|f| f.ranges.iter()).map(|r| r[1] - r[0]).sum();
    out!(o);
    out!(o, "windows holding {}: {} in {} files", pct(share), mib(total), h.len());
    for f in h {
        let ranges: Vec<String> = f.ranges.iter().map(|r| format!("{:#x}-{:#x}", r[0], r[1])).collect();
        out!(
            o,
            "  {} ({} windows, build-id {}): {}",
            f.path,
            f.ranges.iter().map(|r| (r[1] - r[0]) / pmd).sum::<u64>(),
            f.build_id.as_deref().unwrap_or("none"),
            ranges.join(" ")
        );
    }
}

fn itlb_line(o: &mut String, label: &str, f: &FileEstimate) {
    let (m4, mh) = f.mpki();
    let (w4, wh) = f.walks_pki();
    let saved = if f.small_cycles > 0 {
        pct(1.0 - f.huge_cycles as f64 / f.small_cycles as f64)
    } else {
        "-".into()
    };
    out!(
        o,
        "{:>14}  {:>8.3} {:>8.3}  {:>8.3} {:>8.3}  {:>12} {:>12}  {:>7}  {}",
        count(f.instructions),
        m4,
        mh,
        w4,
        wh,
        count(f.small_cycles),
        count(f.huge_cycles),
        saved,
        label
    );
}

fn print_itlb(o: &mut String, e: &Estimate, top: usize) {
    out!(o);
    out!(
        o,
        "iTLB model: {} ({}); second-level hit {} cycles, page walk {} cycles",
        e.core,
        e.source,
        e.l2_hit_cycles,
        e.walk_cycles
    );
    out!(
        o,
        "{:>14}  {:>17}  {:>17}  {:>25}  {:>7}  FILE",
        "INSTRUCTIONS",
        "L1 MISS/1k 4K HUGE",
        "WALKS/1k 4K HUGE",
        "MISS CYCLES 4K HUGE",
        "SAVED"
    );
    itlb_line(o, "(all code)", &e.all);
    let mut shared = false;
    for f in e.files.iter().take(top) {
        let via_others = gains_only_via_others(f);
        shared |= via_others;
        let label = if via_others {
            format!("{} *", f.path)
        } else {
            f.path.clone()
        };
        itlb_line(o, &label, f);
    }
    if shared {
        out!(
            o,
            "* no whole 2 MiB window of its own: its misses drop only because other files' text went huge and left its 4 KiB pages more TLB entries (the TLBs are shared); it gains only with them"
        );
    }
}

/// A file with no whole window of its own whose modelled misses still drop
/// (the others' text on 2 MiB pages frees shared TLB entries). Pure.
fn gains_only_via_others(f: &FileEstimate) -> bool {
    !f.own_huge && f.huge_cycles < f.small_cycles
}
