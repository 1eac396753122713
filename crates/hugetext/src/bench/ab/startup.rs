//! The cost of `hugetext run`: start-up of a real command plain, with its
//! text warmed, and under `hugetext run` with each route, paired and
//! interleaved.
//!
//! Variants (all of them in every round, in an order rotated round by
//! round and reversed every other round):
//! - `plain`: the command as it is, its text in small page-cache folios;
//! - `warm`: the same command after its files were warmed with PMD folios
//!   (`hugetext warm`'s plan, as `bench ab`'s huge side);
//! - `run-ROUTE`: `hugetext run --strategy ROUTE -- COMMAND` on the small
//!   folios of `plain` (or, with [`Options::run_cache`], on the PMD folios
//!   of `warm`: a later start), for each route asked (by default every
//!   route `run` accepts).
//!
//! Before every run the files the command maps executable (found by a
//! first, discarded run, as in `bench ab`) are evicted and refilled, small
//! or huge, so every variant starts from the same warm cache. Start-up is
//! the command's wall time, or for a server (a [`Ready`] condition) the
//! time until it is ready: a probe command first succeeds (`--ready CMD`,
//! retried every 2 ms), or a file the server writes holds a text
//! (`--ready-file PATH TEXT`, checked every 0.5 ms without starting a
//! process); the server is then stopped with SIGTERM. The `run` variants
//! ask the preload for its machine-readable record (`hugetext-report:`
//! lines) and the report splits their time: pass setup (`ns_setup`, of it
//! maps parsing `ns_maps`), each route, and what lies outside the pass (the
//! `hugetext run` front end, the loader, the auditor). The copy route is
//! set against the machine's memory-copy floor for the same bytes, measured
//! in this process right after each start that copied ([`floor_once`]), in
//! wall and in CPU time: the fill's CPU time over the floor's, paired start
//! by start, is the ratio with an interval (wall times on a loaded machine
//! mostly measure the wait for a CPU).

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::files::{self, TextFile};
use super::sides::{self, TextState};
use super::{trace, Side};
use crate::bench::stats::{self, PairedRatio};
use crate::bench::Progress;
use crate::procfs::{self, Vma};
use crate::{kernel, run::remap, Error, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// The `hugetext` binary whose `run` is measured.
    pub hugetext: PathBuf,
    /// The routes (`run --strategy` values) to measure.
    pub routes: Vec<String>,
    /// Rounds; each runs every variant once.
    pub runs: u32,
    /// When the command (a server) is ready: start-up is then the time
    /// until then.
    pub ready: Option<Ready>,
    /// How long one start-up may take (and a server to stop).
    pub timeout: Duration,
    /// Run the command (and `hugetext run`) as this user and group.
    pub user: Option<(u32, u32)>,
    /// More files whose text to manage.
    pub files: Vec<PathBuf>,
    /// The page cache the `run` variants start from: small folios (the
    /// first start after the text was read the usual way: the `file` route
    /// refills it) or PMD folios (every later start: nothing left to do).
    pub run_cache: Side,
    /// Seed of the bootstrap.
    pub seed: u64,
}

/// When a server counts as ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// A shell command that succeeds (retried every 2 ms; each try is a
    /// process, so the moment is known to within the probe's own run).
    Probe(String),
    /// A file holds `text` where it did not when the start began (a
    /// server's pid file or log: postgres writes `ready` into
    /// `postmaster.pid`, mariadbd `ready for connections` into its error
    /// log). Checked every 0.5 ms ([`FileWatch`]).
    FileHas { path: PathBuf, text: String },
}

impl Ready {
    /// What ready means, for the report: "`CMD` succeeds" or "PATH holds
    /// \"TEXT\"".
    pub fn describe(&self) -> String {
        match self {
            Ready::Probe(p) => format!("`{p}` succeeds"),
            Ready::FileHas { path, text } => format!("{} holds {text:?}", path.display()),
        }
    }
}

/// Watches a file for a text written after [`FileWatch::new`]: the text
/// counts at an offset where the file, when the start began, did not hold
/// it. So a log's earlier lines never count, and neither does a pid file
/// left by an earlier start, but a new line does, a status rewritten in
/// place (postgres turns `starting` into `ready   ` in `postmaster.pid`)
/// does, and so does any match in a file that replaced the first (another
/// inode). The file is read again only when it changed (inode, size,
/// modification or change time) or was modified less than
/// [`FileWatch::RECENT`] ago (a rewrite within the file system's timestamp
/// granularity leaves the times alone); of a large file only the last
/// [`FileWatch::TAIL`] bytes are read. The file last read is kept open, so
/// its inode number cannot be reused by a file made after it was removed.
#[derive(Debug)]
pub struct FileWatch {
    path: PathBuf,
    text: Vec<u8>,
    /// The file when the start began (kept open), its identity and the
    /// offsets of the text in it.
    before: Option<(File, (u64, u64), Vec<u64>)>,
    /// The file last read (kept open) and what it looked like.
    last: Option<(File, Look)>,
}

/// What identifies a version of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Look {
    id: (u64, u64),
    len: u64,
    mtime: std::time::SystemTime,
    ctime: (i64, i64),
}

fn look(f: &File) -> Option<Look> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata().ok()?;
    Some(Look {
        id: (m.dev(), m.ino()),
        len: m.len(),
        mtime: m.modified().ok()?,
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

impl FileWatch {
    /// Read again within this long of the file's last modification.
    pub const RECENT: Duration = Duration::from_millis(20);
    /// The most of a file read: its end.
    pub const TAIL: u64 = 256 << 10;

    pub fn new(path: &Path, text: &str) -> FileWatch {
        let text = text.as_bytes().to_vec();
        let before = File::open(path).ok().and_then(|mut f| {
            let l = look(&f)?;
            let at = Self::matches(&mut f, l.len, &text)?;
            Some((f, l.id, at))
        });
        FileWatch {
            path: path.to_path_buf(),
            text,
            before,
            last: None,
        }
    }

    /// The offsets of `text` in the last `TAIL` bytes of `f`.
    fn matches(f: &mut File, len: u64, text: &[u8]) -> Option<Vec<u64>> {
        let from = len.saturating_sub(Self::TAIL);
        let mut buf = Vec::new();
        f.seek(std::io::SeekFrom::Start(from)).ok()?;
        f.take(Self::TAIL).read_to_end(&mut buf).ok()?;
        if text.is_empty() {
            return Some(Vec::new());
        }
        Some(
            buf.windows(text.len())
                .enumerate()
                .filter(|(_, w)| *w == text)
                .map(|(i, _)| from + i as u64)
                .collect(),
        )
    }

    /// Whether the text has been written since `new`.
    pub fn seen(&mut self) -> bool {
        let Ok(mut f) = File::open(&self.path) else {
            return false;
        };
        let Some(l) = look(&f) else {
            return false;
        };
        let recent = std::time::SystemTime::now()
            .duration_since(l.mtime)
            .map_or(true, |d| d < Self::RECENT);
        if !recent && self.last.as_ref().is_some_and(|(_, was)| *was == l) {
            return false;
        }
        let Some(at) = Self::matches(&mut f, l.len, &self.text) else {
            return false;
        };
        self.last = Some((f, l));
        let old: &[u64] = match &self.before {
            Some((_, id, old)) if *id == l.id => old,
            _ => &[],
        };
        at.iter().any(|o| !old.contains(o))
    }
}

/// One timed start-up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Start {
    /// Wall time to exit, or to ready, seconds.
    pub seconds: f64,
    /// User + system CPU of the command's tree, seconds (to its end).
    pub cpu_s: f64,
    /// The page-cache state of the text right before.
    pub state: TextState,
    /// The preload's records, summed over every pass (`run` variants).
    pub pass: Option<PassTimes>,
    /// The memory-copy floor for the bytes this start copied, measured
    /// right after it (starts that copied).
    pub floor: Option<FloorRun>,
}

/// One measure of the memory-copy floor: `memcpy` of `bytes` from a buffer
/// already in memory into fresh, 2 MiB-aligned `MADV_HUGEPAGE` anonymous
/// memory (what the copy route fills: the huge pages' faults and zeroing
/// belong to any copy into them), ms per MiB; in two steps, as the preload
/// does: the huge pages faulted in (`MADV_POPULATE_WRITE`: allocated and
/// zeroed), then the `memcpy`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct FloorRun {
    pub bytes: u64,
    /// Wall time, both steps.
    pub ms_per_mib: f64,
    /// CPU time of the copying thread (user + system), both steps.
    pub cpu_ms_per_mib: f64,
    /// Of it, the fault and zeroing...
    pub zero_cpu_ms_per_mib: f64,
    /// ... and the `memcpy` into the faulted pages.
    pub copy_cpu_ms_per_mib: f64,
}

/// The preload's own record of its passes (`hugetext-report:` lines of
/// one start-up), summed: bytes per route and nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PassTimes {
    /// Passes recorded.
    pub passes: u64,
    /// Bytes of text in whole windows.
    pub windows: u64,
    /// Bytes huge-backed afterwards.
    pub huge: u64,
    /// Bytes already huge before.
    pub already: u64,
    /// Bytes made huge through the page cache.
    pub file: u64,
    /// Bytes collapsed in place.
    pub collapse: u64,
    /// Bytes copied to anonymous huge pages.
    pub copy: u64,
    /// Setup of the passes (maps included), ns.
    pub ns_setup: u64,
    /// Reading `/proc/self/maps`, ns.
    pub ns_maps: u64,
    /// Time in the `already` route, ns.
    pub ns_already: u64,
    /// Time in the `file` route, ns.
    pub ns_file: u64,
    /// Time in the `collapse` route, ns.
    pub ns_collapse: u64,
    /// Time in the `copy` route, ns.
    pub ns_copy: u64,
    /// Of it, filling the copies, ns.
    pub ns_copy_fill: u64,
    /// Of it, writing the perf map, ns.
    pub ns_perf_map: u64,
    /// The fill as the filling thread's CPU time, ns.
    pub ns_copy_fill_cpu: u64,
    /// Allocating and zeroing the copies' huge pages before the fill, ns,
    /// and as CPU time.
    pub ns_copy_zero: u64,
    pub ns_copy_zero_cpu: u64,
    /// The passes, whole, ns.
    pub ns: u64,
}

impl PassTimes {
    /// Sum the `hugetext-report:` records in `stderr` (`None`: none).
    pub fn parse(stderr: &str) -> Option<PassTimes> {
        let mut t = PassTimes::default();
        for line in stderr.lines() {
            let Some(json) = line.strip_prefix(hugetext_abi::report::PREFIX) else {
                continue;
            };
            let Ok(serde_json::Value::Object(m)) = serde_json::from_str(json) else {
                continue;
            };
            let get = |k: &str| m.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
            t.passes += 1;
            for (f, k) in [
                (&mut t.windows, "windows"),
                (&mut t.huge, "huge"),
                (&mut t.already, "already"),
                (&mut t.file, "file"),
                (&mut t.collapse, "collapse"),
                (&mut t.copy, "copy"),
                (&mut t.ns_setup, "ns_setup"),
                (&mut t.ns_maps, "ns_maps"),
                (&mut t.ns_already, "ns_already"),
                (&mut t.ns_file, "ns_file"),
                (&mut t.ns_collapse, "ns_collapse"),
                (&mut t.ns_copy, "ns_copy"),
                (&mut t.ns_copy_fill, "ns_copy_fill"),
                (&mut t.ns_perf_map, "ns_perf_map"),
                (&mut t.ns_copy_fill_cpu, "ns_copy_fill_cpu"),
                (&mut t.ns_copy_zero, "ns_copy_zero"),
                (&mut t.ns_copy_zero_cpu, "ns_copy_zero_cpu"),
                (&mut t.ns, "ns"),
            ] {
                *f += get(k);
            }
        }
        (t.passes > 0).then_some(t)
    }
}

/// One variant's runs and how it compares with `plain`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Variant {
    /// `plain`, `warm` or `run-ROUTE`.
    pub name: String,
    /// The route, for `run-ROUTE`.
    pub route: Option<String>,
    /// Whether the route never copies text (`file`, `collapse`, ...).
    pub zero_copy: bool,
    /// Median start-up, ms.
    pub median_ms: f64,
    /// Fastest and slowest, ms.
    pub min_ms: f64,
    pub max_ms: f64,
    /// Median CPU, ms.
    pub cpu_ms: f64,
    /// Share of the text in PMD folios before the runs (median, %).
    pub text_unit_pct: f64,
    /// Start-up over plain's, paired round by round (absent for plain).
    pub ratio: Option<PairedRatio>,
    /// CPU over plain's, paired.
    pub cpu_ratio: Option<PairedRatio>,
    /// Median of the rounds' added start-up time over plain, ms.
    pub added_ms: Option<f64>,
    /// Where `run`'s time went (medians over the rounds).
    pub breakdown: Option<Breakdown>,
    /// Every run.
    pub runs: Vec<Start>,
}

/// Medians of the preload's records of a `run` variant, ms and MiB.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Breakdown {
    /// Pass setup (settings, hot list, verifier, memory, maps).
    pub setup_ms: f64,
    /// Of it, reading `/proc/self/maps`.
    pub maps_ms: f64,
    /// Per route: already, file, collapse, copy.
    pub already_ms: f64,
    pub file_ms: f64,
    pub collapse_ms: f64,
    pub copy_ms: f64,
    /// Of `copy_ms`: filling the copies, and naming them in the perf map.
    pub copy_fill_ms: f64,
    pub perf_map_ms: f64,
    /// The passes, whole.
    pub pass_ms: f64,
    /// Added start-up outside the passes: `hugetext run` itself, the
    /// loader with the preload and auditor, its exit (median over the
    /// rounds of added − pass).
    pub outside_ms: f64,
    /// MiB made huge by each route.
    pub file_mib: f64,
    pub collapse_mib: f64,
    pub copy_mib: f64,
    /// MiB already huge.
    pub already_mib: f64,
    /// Copy time per MiB copied, ms (the whole route).
    pub copy_ms_per_mib: Option<f64>,
    /// The copy over the memory-copy floor into fresh huge pages.
    pub copy_over_floor: Option<f64>,
    /// The fill alone per MiB, ms, and over the floor.
    pub fill_ms_per_mib: Option<f64>,
    pub fill_over_floor: Option<f64>,
    /// The fill per MiB in CPU time of the filling thread, ms (median):
    /// reading the page cache into huge pages already faulted in.
    pub fill_cpu_ms_per_mib: Option<f64>,
    /// The floor's `memcpy` into faulted huge pages per MiB in CPU time,
    /// measured after each start (median).
    pub floor_cpu_ms_per_mib: Option<f64>,
    /// The fill over the floor's `memcpy` in CPU time, paired start by
    /// start (each start's fill over the floor measured right after it),
    /// with its 95% interval: the part of the copy hugetext chooses how to
    /// do, against the least it can cost.
    pub fill_over_floor_cpu: Option<PairedRatio>,
    /// Allocating and zeroing the copies' huge pages per MiB, CPU time
    /// (median), and the same in the floor (what any new huge page costs
    /// here; on a VM it varies with whether the host still backs the
    /// memory).
    pub zero_cpu_ms_per_mib: Option<f64>,
    pub floor_zero_cpu_ms_per_mib: Option<f64>,
}

/// The machine's memory-copy floor: `memcpy` of a given size, ms per MiB.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CopyFloor {
    /// Bytes copied per measurement.
    pub bytes: u64,
    /// Into memory already faulted in (best of 5).
    pub warm_ms_per_mib: f64,
    /// Into fresh anonymous memory with `MADV_HUGEPAGE` (faults and zeroing
    /// included, as any copy into new huge pages pays; best of 5).
    pub fresh_ms_per_mib: f64,
}

/// The benchmark's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub command: Vec<String>,
    /// The page cache the `run` variants started from: `small` or `huge`.
    pub run_cache: &'static str,
    pub executable: PathBuf,
    pub kernel: String,
    /// What start-up means: "exit" or "ready".
    pub until: &'static str,
    /// When ready: "`CMD` succeeds" or "PATH holds \"TEXT\"".
    pub ready: Option<String>,
    pub runs: u32,
    pub files: Vec<TextFile>,
    pub variants: Vec<Variant>,
    pub copy_floor: Option<CopyFloor>,
    pub notes: Vec<String>,
}

/// The variants of a benchmark with these routes, in their base order.
pub fn variant_names(routes: &[String]) -> Vec<String> {
    let mut v = vec!["plain".to_string(), "warm".to_string()];
    v.extend(routes.iter().map(|r| format!("run-{r}")));
    v
}

/// The order of the variants in round `i`: rotated by one every other
/// round and reversed every other round, so over `2n` rounds each variant
/// runs first twice and last twice. Pure.
pub fn order(n: usize, i: u32) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    if n > 0 {
        v.rotate_left((i / 2) as usize % n);
    }
    if i % 2 == 1 {
        v.reverse();
    }
    v
}

/// Whether a route copies text (`copy`, and `auto`, which may).
pub fn copies(route: &str) -> bool {
    matches!(route, "copy" | "auto")
}

struct Ran {
    seconds: f64,
    cpu_s: f64,
    stderr: String,
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
}

fn read_tail(mut f: File) -> String {
    let mut s = String::new();
    let _ = f.rewind();
    let _ = f.take(1 << 20).read_to_string(&mut s);
    s
}

fn last_lines(s: &str) -> String {
    let v: Vec<&str> = s
        .lines()
        .filter(|l| !l.starts_with(hugetext_abi::report::PREFIX))
        .collect();
    v[v.len().saturating_sub(3)..].join("\n")
}

/// Wait for `pid` until `deadline`; `None` when it is still running.
fn wait_until(pid: i32, deadline: Instant) -> Result<Option<(i32, libc::rusage)>> {
    loop {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: our own child, valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            return Ok(Some((status, ru)));
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::Sys {
                    call: "wait4",
                    source: e,
                });
            }
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wait for `pid` to end (a command that runs and exits).
fn wait_blocking(pid: i32) -> Result<(i32, libc::rusage)> {
    loop {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: our own child, valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok((status, ru));
        }
        let e = std::io::Error::last_os_error();
        if r < 0 && e.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::Sys {
                call: "wait4",
                source: e,
            });
        }
    }
}

fn probe_ok(ready: &str) -> bool {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(ready)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Start `argv` once and time it; with `watch`, collect the executable
/// mappings of its process tree (until it exits, or at ready).
fn start_once(argv: &[OsString], opts: &Options, report_json: bool, mut watch: Option<&mut Vec<Vma>>) -> Result<Ran> {
    let err = tempfile::tempfile().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err.try_clone().map_err(|e| Error::io("stderr capture", e))?)
        .process_group(0);
    if report_json {
        cmd.env(hugetext_abi::settings::REPORT, "json");
    }
    if let Some((uid, gid)) = opts.user {
        cmd.uid(uid).gid(gid);
    }
    let shown = argv[0].to_string_lossy().into_owned();
    // What the file holds before the start never counts.
    let mut file = match &opts.ready {
        Some(Ready::FileHas { path, text }) => Some(FileWatch::new(path, text)),
        _ => None,
    };
    let t = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| Error::Other(format!("cannot start {shown}: {e}")))?;
    let pid = child.id() as i32;
    let deadline = t + opts.timeout;
    let fail = |what: String, err: File| Error::Other(format!("{what}: {}", last_lines(&read_tail(err))));
    let Some(ready) = &opts.ready else {
        loop {
            let waited = match watch {
                // Look at the tree every millisecond.
                Some(_) => wait_until(pid, Instant::now())?,
                None => Some(wait_blocking(pid)?),
            };
            if let Some((status, ru)) = waited {
                let seconds = t.elapsed().as_secs_f64();
                let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                if !ok {
                    return Err(fail(format!("{shown} failed (wait status {status})"), err));
                }
                return Ok(Ran {
                    seconds,
                    cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
                    stderr: read_tail(err),
                });
            }
            if let Some(seen) = watch.as_deref_mut() {
                for p in procfs::descendants(pid) {
                    seen.extend(trace::exec_maps(p));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            if Instant::now() >= deadline {
                // SAFETY: signalling our own child's process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let _ = wait_until(pid, Instant::now() + opts.timeout);
                return Err(Error::Other(format!(
                    "{shown} did not finish within {:?}",
                    opts.timeout
                )));
            }
        }
    };
    // A server: time until it is ready, then stop it.
    let seconds = loop {
        let now_ready = match &mut file {
            Some(w) => w.seen(),
            None => matches!(ready, Ready::Probe(p) if probe_ok(p)),
        };
        if now_ready {
            break t.elapsed().as_secs_f64();
        }
        if let Some((status, _)) = wait_until(pid, Instant::now())? {
            return Err(fail(
                format!("{shown} ended before it was ready (wait status {status})"),
                err,
            ));
        }
        if Instant::now() >= deadline {
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let _ = wait_until(pid, Instant::now() + opts.timeout);
            return Err(Error::Other(format!(
                "{shown} was not ready within {:?} (ready when {})",
                opts.timeout,
                ready.describe()
            )));
        }
        std::thread::sleep(match ready {
            Ready::Probe(_) => Duration::from_millis(2),
            Ready::FileHas { .. } => Duration::from_micros(500),
        });
    };
    if let Some(seen) = watch {
        for p in procfs::descendants(pid) {
            seen.extend(trace::exec_maps(p));
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let ru = match wait_until(pid, Instant::now() + opts.timeout)? {
        Some((_, ru)) => ru,
        None => {
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            wait_until(pid, Instant::now() + opts.timeout)?
                .map(|(_, ru)| ru)
                .unwrap_or(
                    // SAFETY: zeroed rusage is valid.
                    unsafe { std::mem::zeroed() },
                )
        }
    };
    // Whatever of the group is left (a helper that outlived the server).
    // SAFETY: signalling our own child's process group.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    drop(child);
    Ok(Ran {
        seconds,
        cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
        stderr: read_tail(err),
    })
}

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
/// Measure the floor once for `bytes` (see [`FloorRun`]); `None` when no
/// memory could be mapped.
pub fn floor_once(bytes: u64) -> Option<FloorRun> {
    let n = bytes.max(1 << 20) as usize;
    // Written, so in memory (not the shared zero page).
    let src = vec![0xc3u8; n];
    let dst = kernel::Mapping::anon_huge(n).ok()?;
    let (t, c) = (Instant::now(), thread_cpu_s());
    // Zeroing timed apart (a kernel without MADV_POPULATE_WRITE leaves
    // it to the copy's faults).
    let _ = dst.madvise(0, dst.len(), hugetext_abi::madv::MADV_POPULATE_WRITE);
    let c_zero = thread_cpu_s();
    // SAFETY: `n` bytes from `src`, into our fresh mapping of at least `n`.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_ptr(), n) };
    let (wall, c_end) = (t.elapsed().as_secs_f64(), thread_cpu_s());
    drop(dst);
    let mib = n as f64 / (1u64 << 20) as f64;
    Some(FloorRun {
        bytes: n as u64,
        ms_per_mib: wall * 1e3 / mib,
        cpu_ms_per_mib: (c_end - c) * 1e3 / mib,
        zero_cpu_ms_per_mib: (c_zero - c) * 1e3 / mib,
        copy_cpu_ms_per_mib: (c_end - c_zero) * 1e3 / mib,
    })
}

/// `memcpy` of `bytes`: into memory faulted in before, and into fresh
/// `MADV_HUGEPAGE` memory; best of 5 each, ms per MiB.
pub fn copy_floor(bytes: u64) -> CopyFloor {
    let n = bytes.max(1 << 20) as usize;
    let src = vec![0xc3u8; n];
    let mut dst = vec![0u8; n];
    let mib = n as f64 / (1u64 << 20) as f64;
    let mut warm = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&dst);
        warm = warm.min(t.elapsed().as_secs_f64() * 1e3 / mib);
    }
    let mut fresh = f64::INFINITY;
    for _ in 0..5 {
        let Ok(dst) = kernel::Mapping::anon_huge(n) else {
            break;
        };
        let t = Instant::now();
        // SAFETY: `n` bytes from `src`, into our fresh mapping of at least `n`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_ptr(), n) };
        fresh = fresh.min(t.elapsed().as_secs_f64() * 1e3 / mib);
    }
    CopyFloor {
        bytes: n as u64,
        warm_ms_per_mib: warm,
        fresh_ms_per_mib: fresh,
    }
}

fn med(v: impl Iterator<Item = f64>) -> f64 {
    stats::median(&v.collect::<Vec<_>>())
}

/// Run the benchmark.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    let Some(argv0) = opts.command.first() else {
        return Err(Error::Invalid(
            "no command given: use `hugetext bench startup -- COMMAND [ARGS...]`".into(),
        ));
    };
    if opts.runs == 0 {
        return Err(Error::Invalid("--runs must be at least 1".into()));
    }
    let path = std::env::var_os("PATH");
    let exe = remap::resolve_program(argv0, path.as_deref())?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let names = variant_names(&opts.routes);
    progress.start(1 + names.len() as u64 * u64::from(opts.runs));

    // The files: what a first run maps executable.
    let mut plain_argv = vec![exe.clone().into_os_string()];
    plain_argv.extend(opts.command[1..].iter().cloned());
    let mut seen = Vec::new();
    if opts.ready.is_none() && opts.user.is_none() {
        let ab = super::Options {
            command: opts.command.clone(),
            runs: 1,
            files: Vec::new(),
            discover: true,
            seed: opts.seed,
            show_output: false,
            hot: None,
        };
        let (ran, _) = trace::discover_run(&exe, &ab, &mut seen)?;
        if let Some(f) = ran.failure("first run".into()) {
            return Err(Error::Other(f.to_string()));
        }
    } else {
        start_once(&plain_argv, opts, false, Some(&mut seen))?;
    }
    progress.step("first run done");
    let files = files::text_files(&seen, &opts.files)?;
    let found = sides::record(&files)?;
    let measured = rounds(opts, &names, &plain_argv, &files, progress);
    let restored = sides::restore(&files, &found);
    let runs = measured?;
    let restored = restored?;

    let plain_s: Vec<f64> = runs[0].iter().map(|s| s.seconds).collect();
    let plain_cpu: Vec<f64> = runs[0].iter().map(|s| s.cpu_s).collect();
    let copy_bytes = med(runs
        .iter()
        .flatten()
        .filter_map(|s| s.pass.as_ref())
        .filter(|p| p.copy > 0)
        .map(|p| p.copy as f64));
    let floor = (copy_bytes > 0.0).then(|| copy_floor(copy_bytes as u64));
    let mut variants = Vec::new();
    for (k, (name, starts)) in names.iter().zip(runs).enumerate() {
        let secs: Vec<f64> = starts.iter().map(|s| s.seconds).collect();
        let cpu: Vec<f64> = starts.iter().map(|s| s.cpu_s).collect();
        let route = name.strip_prefix("run-").map(str::to_string);
        let (ratio, cpu_ratio, added_ms) = if k == 0 {
            (None, None, None)
        } else {
            let added: Vec<f64> = plain_s.iter().zip(&secs).map(|(a, b)| (b - a) * 1e3).collect();
            (
                Some(stats::paired_ratio(&plain_s, &secs, opts.seed, true)),
                Some(stats::paired_ratio(&plain_cpu, &cpu, opts.seed, true)),
                Some(stats::median(&added)),
            )
        };
        let breakdown = route.as_ref().and_then(|_| {
            let passes: Vec<&PassTimes> = starts.iter().filter_map(|s| s.pass.as_ref()).collect();
            if passes.is_empty() {
                return None;
            }
            // Per round: added start-up less the passes.
            let outside: Vec<f64> = starts
                .iter()
                .zip(&plain_s)
                .filter_map(|(s, p)| Some((s.seconds - p) * 1e3 - s.pass.as_ref()?.ns as f64 / 1e6))
                .collect();
            let ms = |f: fn(&PassTimes) -> u64| med(passes.iter().map(|p| f(p) as f64 / 1e6));
            let mib = |f: fn(&PassTimes) -> u64| med(passes.iter().map(|p| f(p) as f64 / (1u64 << 20) as f64));
            let pass_ms = ms(|p| p.ns);
            let copy_ms = ms(|p| p.ns_copy);
            let copy_mib = mib(|p| p.copy);
            let per = (copy_mib > 0.0).then(|| copy_ms / copy_mib);
            let copy_fill_ms = ms(|p| p.ns_copy_fill);
            let fill_per = (copy_mib > 0.0).then(|| copy_fill_ms / copy_mib);
            // Per start that copied: its fill and the floor right after it.
            let (floor_cpu, fill_cpu): (Vec<f64>, Vec<f64>) = starts
                .iter()
                .filter_map(|s| {
                    let (p, f) = (s.pass.as_ref()?, s.floor?);
                    (p.copy > 0 && p.ns_copy_fill_cpu > 0).then(|| {
                        let mib = p.copy as f64 / (1u64 << 20) as f64;
                        (f.copy_cpu_ms_per_mib, p.ns_copy_fill_cpu as f64 / 1e6 / mib)
                    })
                })
                .unzip();
            let floor_wall = med(starts.iter().filter_map(|s| s.floor.map(|f| f.ms_per_mib)));
            let floor_wall = (floor_wall > 0.0).then_some(floor_wall);
            Some(Breakdown {
                setup_ms: ms(|p| p.ns_setup),
                maps_ms: ms(|p| p.ns_maps),
                already_ms: ms(|p| p.ns_already),
                file_ms: ms(|p| p.ns_file),
                collapse_ms: ms(|p| p.ns_collapse),
                copy_ms,
                copy_fill_ms,
                perf_map_ms: ms(|p| p.ns_perf_map),
                pass_ms,
                outside_ms: stats::median(&outside),
                file_mib: mib(|p| p.file),
                collapse_mib: mib(|p| p.collapse),
                copy_mib,
                already_mib: mib(|p| p.already),
                copy_ms_per_mib: per,
                copy_over_floor: per.zip(floor_wall).map(|(p, f)| p / f),
                fill_ms_per_mib: fill_per,
                fill_over_floor: fill_per.zip(floor_wall).map(|(p, f)| p / f),
                fill_cpu_ms_per_mib: (!fill_cpu.is_empty()).then(|| stats::median(&fill_cpu)),
                floor_cpu_ms_per_mib: (!floor_cpu.is_empty()).then(|| stats::median(&floor_cpu)),
                fill_over_floor_cpu: (!fill_cpu.is_empty())
                    .then(|| stats::paired_ratio(&floor_cpu, &fill_cpu, opts.seed, true)),
                zero_cpu_ms_per_mib: (copy_mib > 0.0).then(|| ms(|p| p.ns_copy_zero_cpu) / copy_mib),
                floor_zero_cpu_ms_per_mib: {
                    let z = med(starts.iter().filter_map(|s| s.floor.map(|f| f.zero_cpu_ms_per_mib)));
                    (z > 0.0).then_some(z)
                },
            })
        });
        variants.push(Variant {
            name: name.clone(),
            zero_copy: route.as_deref().is_some_and(|r| !copies(r)),
            route,
            median_ms: stats::median(&secs) * 1e3,
            min_ms: secs.iter().copied().fold(f64::INFINITY, f64::min) * 1e3,
            max_ms: secs.iter().copied().fold(0.0, f64::max) * 1e3,
            cpu_ms: stats::median(&cpu) * 1e3,
            text_unit_pct: med(starts.iter().map(|s| s.state.text_unit_pct)),
            ratio,
            cpu_ratio,
            added_ms,
            breakdown,
            runs: starts,
        });
    }
    let mut notes = super::report::notes(&files, &[]);
    notes.push(sides::restored_note(&restored));
    Ok(Report {
        command: opts.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        run_cache: opts.run_cache.name(),
        executable: exe,
        kernel: kernel::KernelVersion::current().to_string(),
        until: if opts.ready.is_some() { "ready" } else { "exit" },
        ready: opts.ready.as_ref().map(Ready::describe),
        runs: opts.runs,
        files,
        variants,
        copy_floor: floor,
        notes,
    })
}

/// The timed rounds: per variant, its starts in round order.
fn rounds(
    opts: &Options,
    names: &[String],
    plain_argv: &[OsString],
    files: &[TextFile],
    progress: &dyn Progress,
) -> Result<Vec<Vec<Start>>> {
    let mut out: Vec<Vec<Start>> = vec![Vec::new(); names.len()];
    for i in 0..opts.runs {
        for k in order(names.len(), i) {
            let name = &names[k];
            let side = match name.as_str() {
                "warm" => Side::Huge,
                "plain" => Side::Small,
                _ => opts.run_cache,
            };
            let state = sides::prepare(files, side, &[])?;
            let (argv, report_json) = match name.strip_prefix("run-") {
                Some(route) => {
                    let mut a: Vec<OsString> = vec![
                        opts.hugetext.clone().into_os_string(),
                        "run".into(),
                        "--strategy".into(),
                        route.into(),
                        "--".into(),
                    ];
                    a.extend(plain_argv.iter().cloned());
                    (a, true)
                }
                None => (plain_argv.to_vec(), false),
            };
            let ran = start_once(&argv, opts, report_json, None)
                .map_err(|e| Error::Other(format!("round {}, {name}: {e}", i + 1)))?;
            progress.step(&format!(
                "round {}/{}: {name} {:.1} ms",
                i + 1,
                opts.runs,
                ran.seconds * 1e3
            ));
            let pass = if report_json {
                PassTimes::parse(&ran.stderr)
            } else {
                None
            };
            // The floor at the same moment (the machine's load changes
            // from start to start), for the same bytes.
            let floor = pass.as_ref().filter(|p| p.copy > 0).and_then(|p| floor_once(p.copy));
            out[k].push(Start {
                seconds: ran.seconds,
                cpu_s: ran.cpu_s,
                state,
                pass,
                floor,
            });
        }
    }
    Ok(out)
}

/// The path of the `hugetext` binary running now.
pub fn current_hugetext() -> Option<PathBuf> {
    std::fs::read_link("/proc/self/exe")
        .ok()
        .filter(|p| Path::new(p).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_runs_at_every_place_over_two_rotations() {
        for n in [3usize, 4, 6] {
            let (mut first, mut last) = (vec![0; n], vec![0; n]);
            for i in 0..(2 * n as u32) {
                let o = order(n, i);
                assert_eq!(o.len(), n);
                first[o[0]] += 1;
                last[o[n - 1]] += 1;
            }
            assert!(first.iter().all(|&c| c == 2), "{n}: {first:?}");
            assert!(last.iter().all(|&c| c == 2), "{n}: {last:?}");
        }
        assert_eq!(variant_names(&["file".into()]), ["plain", "warm", "run-file"]);
    }

    #[test]
    fn records_are_summed_by_name() {
        let err = "noise\nhugetext-report: {\"v\":1,\"copy\":2097152,\"ns_copy\":1000,\"ns\":5000,\"ns_maps\":7}\n\
                   hugetext-report: {\"v\":1,\"copy\":2097152,\"ns_copy\":3000,\"ns\":6000}\n";
        let t = PassTimes::parse(err).unwrap();
        assert_eq!(
            (t.passes, t.copy, t.ns_copy, t.ns, t.ns_maps),
            (2, 4 << 20, 4000, 11000, 7)
        );
        assert_eq!(PassTimes::parse("nothing here"), None);
        assert!(copies("copy") && copies("auto") && !copies("file") && !copies("shmem"));
    }

    #[test]
    fn a_file_watch_sees_only_text_written_after_it_began() {
        use std::io::Write;
        use std::os::unix::fs::FileExt;
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("err.log");
        // An earlier start's line is in the log already.
        std::fs::write(&log, "old: ready for connections\n").unwrap();
        let mut w = FileWatch::new(&log, "ready for connections");
        assert!(!w.seen());
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"starting\nready for con").unwrap();
        assert!(!w.seen());
        f.write_all(b"nections\n").unwrap();
        assert!(w.seen());

        // A pid file absent at the start, written, then its status line
        // rewritten in place (the same inode, the same size).
        let pid = d.path().join("postmaster.pid");
        let mut w = FileWatch::new(&pid, "\nready");
        assert!(!w.seen());
        std::fs::write(&pid, "42\nstarting\n").unwrap();
        assert!(!w.seen());
        let f = std::fs::OpenOptions::new().write(true).open(&pid).unwrap();
        f.write_all_at(b"ready   ", 3).unwrap();
        assert!(w.seen());

        // A pid file left by an earlier start, already "ready", removed and
        // made again by the new start (at the same offset).
        let mut w = FileWatch::new(&pid, "\nready");
        assert!(!w.seen());
        std::fs::remove_file(&pid).unwrap();
        std::fs::write(&pid, "43\nstarting\n").unwrap();
        assert!(!w.seen());
        std::fs::write(&pid, "43\nready   \n").unwrap();
        assert!(w.seen());
        assert_eq!(
            Ready::FileHas {
                path: pid.clone(),
                text: "ready".into()
            }
            .describe(),
            format!("{} holds \"ready\"", pid.display())
        );
    }
}
