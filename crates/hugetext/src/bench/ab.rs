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
//! ## Statistics
//! Pairs alternate small-first and huge-first (ABBA..., the first side by a
//! seeded coin), so slow drift and "second run is faster" effects hit both
//! sides alike. Reported: median wall time per side, `ratio` =
//! median(huge) / median(small), and a 95% confidence interval of that ratio
//! by a percentile bootstrap over pairs ([`stats::ratio_ci95`]); the same
//! for user+sys CPU time (`cpu_ratio`), which other load on the machine
//! disturbs less than wall time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek};
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::perf::ItlbCounter;
use super::stats::{self, Summary};
use super::Progress;
use crate::kernel::{self, Mapping};
use crate::{folio, pagecache, warm, Error, Result};

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
}

impl Side {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Side::Small => "small",
            Side::Huge => "huge",
        }
    }
}

/// A file whose text is managed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TextFile {
    pub path: PathBuf,
    pub size: u64,
    /// Byte ranges of text (`[start, end)` file offsets): the executable
    /// segments, over which the state is measured.
    pub text_ranges: Vec<[u64; 2]>,
    /// Byte ranges put in small or PMD folios: what `hugetext warm` warms
    /// (all read-only segments of an ELF file, any other file whole).
    pub managed_ranges: Vec<[u64; 2]>,
    /// `hugetext warm`'s plan for the file (used for the huge side).
    #[serde(skip_serializing)]
    pub plan: Option<warm::Target>,
    pub text_kb: u64,
    /// Whole 2 MiB file windows inside the text: what can be PMD-mapped.
    pub pmd_windows: u64,
    /// Whether the command mapped this text at an address congruent to its
    /// file offset modulo 2 MiB (required for PMD mappings); `null` when it
    /// was not seen mapped (a `--files` entry).
    pub congruent: Option<bool>,
    /// Of `pmd_windows`, those the command mapped at a 2 MiB-congruent
    /// address, i.e. that can actually be PMD-mapped when their folios are
    /// PMD-size; `null` when not seen mapped.
    pub mappable_windows: Option<u64>,
    /// "maps" (seen in the warm-up run) or "--files".
    pub source: &'static str,
    /// Filesystem the file lives on.
    pub filesystem: String,
}

/// Verified page-cache state of the managed text right before a run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TextState {
    /// kB of text in all managed files.
    pub text_kb: u64,
    /// kB of it in the page cache.
    pub cached_kb: u64,
    /// kB of it in PMD-size folios.
    pub pmd_kb: u64,
    /// `pmd_kb / text_kb`, percent.
    pub text_pmd_pct: f64,
    /// Whole 2 MiB text windows held in one PMD folio, out of `windows`.
    pub pmd_windows: u64,
    pub windows: u64,
    /// kB of text, in files with whole 2 MiB windows, that other processes
    /// map (could not be evicted).
    pub mapped_by_others_kb: u64,
    /// kB of text per folio size (key in kB).
    pub folios_kb: BTreeMap<u64, u64>,
}

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
    pub text_pmd_pct: Summary,
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
    pub pairs: Vec<Pair>,
    /// Things the reader should know to judge the result.
    pub notes: Vec<String>,
    /// Set when a run of the command failed; the run stopped there.
    pub failure: Option<Failure>,
}

/// Find `argv0` the way a shell does: as a path when it contains a `/`,
/// else in `$PATH`. The error says "not found" or "not executable".
pub fn resolve_command(argv0: &OsStr) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    let name = Path::new(argv0);
    if argv0.is_empty() {
        return Err(Error::Invalid(
            "no command given: use `hugetext bench ab -- COMMAND [ARGS...]`".into(),
        ));
    }
    if argv0.as_encoded_bytes().contains(&b'/') {
        if !name.exists() {
            return Err(Error::Invalid(format!("{}: command not found", name.display())));
        }
        if !is_exec(name) {
            return Err(Error::Permission(format!("{}: not an executable file", name.display())));
        }
        return Ok(name.canonicalize().unwrap_or_else(|_| name.to_path_buf()));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let p = dir.join(name);
        if is_exec(&p) {
            return Ok(p);
        }
    }
    Err(Error::Invalid(format!("{}: command not found in PATH", name.display())))
}

/// One executable file mapping seen in a process.
#[derive(Debug, Clone)]
struct ExecMap {
    path: PathBuf,
    start: u64,
    end: u64,
    offset: u64,
}

/// Executable, file-backed mappings of process `pid`.
fn exec_maps(pid: i32) -> Vec<ExecMap> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(_ino)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.next().unwrap_or("").trim_start();
        if !perms.as_bytes().get(2).is_some_and(|&c| c == b'x')
            || !path.starts_with('/')
            || path.ends_with(" (deleted)")
        {
            continue;
        }
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(s, 16),
            u64::from_str_radix(e, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        out.push(ExecMap {
            path: PathBuf::from(path),
            start,
            end,
            offset,
        });
    }
    out
}

/// `pid` and all its live descendants.
fn process_tree(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) S ppid ...": comm may hold spaces and parens.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse::<i32>().ok()) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c);
        }
        i += 1;
    }
    out
}

/// Outcome of one run of the command.
struct Ran {
    wall: Duration,
    user_s: f64,
    sys_s: f64,
    status: i32,
    stderr_tail: String,
}

impl Ran {
    fn failure(&self, run: String) -> Option<Failure> {
        if libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0 {
            return None;
        }
        Some(Failure {
            run,
            exit_status: libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status)),
            signal: libc::WIFSIGNALED(self.status).then(|| libc::WTERMSIG(self.status)),
            stderr_tail: self.stderr_tail.clone(),
        })
    }
}

fn tv_secs(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6
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

fn command_for(exe: &Path, opts: &Options, err_file: &File) -> Result<Command> {
    let mut cmd = Command::new(exe);
    cmd.arg0(&opts.command[0]).args(&opts.command[1..]).stdin(Stdio::null());
    cmd.stdout(if opts.show_output {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    cmd.stderr(err_file.try_clone().map_err(|e| Error::io("stderr capture", e))?);
    Ok(cmd)
}

fn stderr_tail(mut err_file: File) -> String {
    let mut tail = String::new();
    let len = err_file.seek(std::io::SeekFrom::End(0)).unwrap_or(0);
    let _ = err_file.seek(std::io::SeekFrom::Start(len.saturating_sub(2048)));
    let _ = err_file.read_to_string(&mut tail);
    let tail: Vec<&str> = tail.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The warm-up run: trace the command's process tree with ptrace and read
/// every process's executable mappings when it exits. Falls back to
/// polling when ptrace is refused.
fn discover_run(exe: &Path, opts: &Options, seen: &mut Vec<ExecMap>) -> Result<(Ran, Discovery)> {
    let err_file = tempfile::tempfile().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut cmd = command_for(exe, opts, &err_file)?;
    // SAFETY: ptrace(PTRACE_TRACEME) is async-signal-safe and touches no
    // memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(
                libc::PTRACE_TRACEME,
                0,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t = Instant::now();
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            return Ok((run_once(exe, opts, Some(seen))?, Discovery::Polling));
        }
        Err(e) => return Err(Error::Other(format!("cannot start {}: {e}", exe.display()))),
    };
    let root = child.id() as i32;
    let ptrace = |req: libc::c_uint, pid: i32, data: usize| {
        // SAFETY: ptrace requests on our own stopped tracees; data is an
        // integer argument (options or signal number).
        unsafe {
            libc::ptrace(
                req,
                pid,
                std::ptr::null_mut::<libc::c_void>(),
                data as *mut libc::c_void,
            )
        }
    };
    let mut root_status = None;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut root_ru = ru;
    let options = libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEEXEC
        | libc::PTRACE_O_TRACEEXIT
        | libc::PTRACE_O_EXITKILL;
    let mut configured = false;
    loop {
        let mut st = 0;
        // SAFETY: waiting for our tracees with valid out-pointers.
        let w = unsafe { libc::wait4(-1, &mut st, libc::__WALL, &mut ru) };
        if w < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => break,
                _ => {
                    return Err(Error::Sys {
                        call: "wait4",
                        source: e,
                    })
                }
            }
        }
        if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            if w == root {
                root_status = Some(st);
                root_ru = ru;
            }
            continue;
        }
        if !libc::WIFSTOPPED(st) {
            continue;
        }
        if w == root && !configured {
            // The stop after the first exec: follow everything from here.
            ptrace(libc::PTRACE_SETOPTIONS, w, options as usize);
            configured = true;
            ptrace(libc::PTRACE_CONT, w, 0);
            continue;
        }
        let sig = libc::WSTOPSIG(st);
        let event = st >> 16;
        let deliver = if event == libc::PTRACE_EVENT_EXIT {
            seen.extend(exec_maps(w));
            0
        } else if event != 0 || sig == libc::SIGTRAP || sig == libc::SIGSTOP {
            // ptrace events, exec traps and new tracees' initial stops.
            0
        } else {
            sig
        };
        ptrace(libc::PTRACE_CONT, w, deliver as usize);
    }
    let wall = t.elapsed();
    drop(child);
    let status = root_status.ok_or_else(|| Error::Other("lost track of the traced command".into()))?;
    let ran = Ran {
        wall,
        user_s: tv_secs(root_ru.ru_utime),
        sys_s: tv_secs(root_ru.ru_stime),
        status,
        stderr_tail: stderr_tail(err_file),
    };
    Ok((ran, Discovery::Ptrace))
}

/// Run the command once. With `watch`, poll its process tree and collect
/// executable mappings until it exits.
fn run_once(exe: &Path, opts: &Options, mut watch: Option<&mut Vec<ExecMap>>) -> Result<Ran> {
    let err_file = tempfile::tempfile().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut cmd = command_for(exe, opts, &err_file)?;
    let self_exe = std::fs::read_link("/proc/self/exe").ok();
    let t = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| Error::Other(format!("cannot start {}: {e}", exe.display())))?;
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let flags = if watch.is_some() { libc::WNOHANG } else { 0 };
        // SAFETY: waiting for our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Sys {
                call: "wait4",
                source: e,
            });
        }
        if let Some(seen) = watch.as_deref_mut() {
            for p in process_tree(pid) {
                // A child between fork and exec is still a copy of us.
                if self_exe.is_some() && std::fs::read_link(format!("/proc/{p}/exe")).ok() == self_exe {
                    continue;
                }
                seen.extend(exec_maps(p));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let wall = t.elapsed();
    drop(child);
    Ok(Ran {
        wall,
        user_s: tv_secs(ru.ru_utime),
        sys_s: tv_secs(ru.ru_stime),
        status,
        stderr_tail: stderr_tail(err_file),
    })
}

/// Executable `PT_LOAD` file ranges of an ELF file; None when it is not ELF.
fn elf_text_ranges(path: &Path) -> Option<Vec<Range<u64>>> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let f = File::open(path).ok()?;
    let cache = object::ReadCache::new(f);
    let hdr = object::elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = hdr.endian().ok()?;
    let phdrs = hdr.program_headers(endian, &cache).ok()?;
    let mut out = Vec::new();
    for ph in phdrs {
        if ph.p_type(endian) == object::elf::PT_LOAD && ph.p_flags(endian) & object::elf::PF_X != 0 {
            let off = ph.p_offset(endian);
            let len = ph.p_filesz(endian);
            if len > 0 {
                out.push(off..off + len);
            }
        }
    }
    Some(out)
}

/// kB of the pages whose offsets lie in `r` (how [`folio::scan_file`]
/// counts a range).
fn range_kb(r: Range<u64>) -> u64 {
    let ps = kernel::page_size() as u64;
    (r.end.div_ceil(ps) - r.start.div_ceil(ps)) * ps / 1024
}

/// Whole PMD windows inside `ranges`.
fn windows_in(ranges: &[Range<u64>]) -> u64 {
    let pmd = kernel::pmd_size() as u64;
    ranges
        .iter()
        .map(|r| (r.end / pmd).saturating_sub(r.start.div_ceil(pmd)))
        .sum()
}

/// Build the managed file list from the warm-up mappings and `--files`.
fn text_files(seen: &[ExecMap], extra: &[PathBuf]) -> Result<Vec<TextFile>> {
    let pmd = kernel::pmd_size() as u64;
    let mut by_path: BTreeMap<PathBuf, Vec<&ExecMap>> = BTreeMap::new();
    for m in seen {
        by_path.entry(m.path.clone()).or_default().push(m);
    }
    let mut paths: Vec<(PathBuf, &'static str)> = by_path.keys().map(|p| (p.clone(), "maps")).collect();
    let known: BTreeSet<PathBuf> = by_path.keys().cloned().collect();
    for p in extra {
        let c = p.canonicalize().map_err(|e| Error::io(p, e))?;
        if !known.contains(&c) && !paths.iter().any(|(q, _)| *q == c) {
            paths.push((c, "--files"));
        }
    }
    let mut out = Vec::new();
    for (path, source) in paths {
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_file() {
            continue;
        }
        let size = meta.len();
        let maps = by_path.get(&path).map(|v| v.as_slice()).unwrap_or(&[]);
        let mut ranges = elf_text_ranges(&path).unwrap_or_default();
        if ranges.is_empty() {
            ranges = maps
                .iter()
                .map(|m| m.offset..(m.offset + (m.end - m.start)).min(size))
                .collect();
            if ranges.is_empty() {
                // A non-ELF `--files` entry: manage the whole file.
                ranges.push(0..size);
            }
        }
        ranges.sort_by_key(|r| r.start);
        ranges.dedup();
        let congruent = (!maps.is_empty()).then(|| maps.iter().any(|m| m.start.wrapping_sub(m.offset) % pmd == 0));
        let text_windows: BTreeSet<u64> = ranges.iter().flat_map(|r| r.start.div_ceil(pmd)..r.end / pmd).collect();
        let mapped_windows: BTreeSet<u64> = maps
            .iter()
            .filter(|m| m.start.wrapping_sub(m.offset) % pmd == 0)
            .flat_map(|m| m.offset.div_ceil(pmd)..(m.offset + (m.end - m.start)) / pmd)
            .collect();
        let mappable_windows = (!maps.is_empty()).then(|| text_windows.intersection(&mapped_windows).count() as u64);
        let filesystem = crate::fsutil::fs_name_at(&path).unwrap_or_else(|_| "?".into());
        let plan = warm::plan(&path).ok();
        let managed_ranges = match &plan {
            Some(p) if !p.ranges.is_empty() => p.ranges.iter().map(|r| [r.offset, r.offset + r.len]).collect(),
            _ => ranges.iter().map(|r| [r.start, r.end]).collect(),
        };
        out.push(TextFile {
            managed_ranges,
            plan,
            text_kb: ranges.iter().map(|r| range_kb(r.clone())).sum(),
            pmd_windows: windows_in(&ranges),
            text_ranges: ranges.iter().map(|r| [r.start, r.end]).collect(),
            path,
            size,
            congruent,
            mappable_windows,
            source,
            filesystem,
        });
    }
    Ok(out)
}

/// Fill `range` of `file` through a `PROT_EXEC`, `MADV_NOHUGEPAGE` mapping:
/// the exec fault path, which reads small folios on x86.
fn fill_small(file: &File, range: Range<u64>) -> Result<()> {
    let ps = kernel::page_size() as u64;
    let start = range.start / ps * ps;
    let len = ((range.end - start).div_ceil(ps) * ps) as usize;
    if len == 0 {
        return Ok(());
    }
    let map = Mapping::file_congruent(file.as_fd(), start, len, libc::PROT_READ | libc::PROT_EXEC, ps as usize)?;
    map.madvise(0, len, kernel::MADV_NOHUGEPAGE)?;
    map.madvise(0, len, kernel::MADV_POPULATE_READ)?;
    Ok(())
}

/// Read the whole file with `pread` so that everything that is not text is
/// cached too (the same way on both sides).
fn read_all(file: &File, path: &Path) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = file.read_at(&mut buf, off).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            return Ok(());
        }
        off += n as u64;
    }
}

/// Put every managed file's text in `side`'s folios and verify the result.
pub fn prepare(files: &[TextFile], side: Side) -> Result<TextState> {
    let mut ctx = warm::WarmContext::default();
    for tf in files {
        let f = File::open(&tf.path).map_err(|e| Error::io(&tf.path, e))?;
        // Dirty folios (a freshly built program) cannot be evicted and keep
        // whatever size the writer gave them: write them back first.
        f.sync_data().map_err(|e| Error::io(&tf.path, e))?;
        pagecache::evict(&f, 0..tf.size)?;
        match (side, &tf.plan) {
            (Side::Huge, Some(plan)) => {
                warm::warm_target(plan, &warm::WarmOptions::default(), &mut ctx)?;
            }
            _ => {
                for r in &tf.managed_ranges {
                    match side {
                        Side::Small => fill_small(&f, r[0]..r[1])?,
                        Side::Huge => pagecache::fill_huge(&f, r[0]..r[1])?,
                    }
                }
            }
        }
        read_all(&f, &tf.path)?;
    }
    verify(files)
}

/// The page-cache state of the managed text.
pub fn verify(files: &[TextFile]) -> Result<TextState> {
    let mut st = TextState::default();
    for tf in files {
        for r in &tf.text_ranges {
            let v = folio::scan_file(&tf.path, Some(r[0]..r[1]))?;
            st.text_kb += range_kb(r[0]..r[1]);
            st.cached_kb += v.cached_kb;
            st.pmd_kb += v.pmd_kb();
            st.pmd_windows += v.pmd_windows.len() as u64;
            st.windows += v.total_windows;
            if tf.pmd_windows > 0 {
                // Only where it matters: files with whole windows (libc
                // and friends are always mapped by everyone, hugetext too).
                st.mapped_by_others_kb += v.mapped_kb;
            }
            for (k, n) in v.folios_kb {
                *st.folios_kb.entry(k).or_default() += n;
            }
        }
    }
    st.text_pmd_pct = super::exec::pct(st.pmd_kb, st.text_kb);
    Ok(st)
}

fn summarize(runs: &[&RunRecord]) -> SideReport {
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
        text_pmd_pct: Summary::of(&runs.iter().map(|r| r.state.text_pmd_pct).collect::<Vec<_>>()),
    }
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
    let exe = resolve_command(argv0)?;
    progress.start(1 + 2 * u64::from(opts.runs));
    let mut seen = Vec::new();
    let (warm, discovery) = if opts.discover {
        discover_run(&exe, opts, &mut seen)?
    } else {
        (run_once(&exe, opts, None)?, Discovery::Off)
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
        small: summarize(&[]),
        huge: summarize(&[]),
        ratio: f64::NAN,
        ci95: [f64::NAN, f64::NAN],
        ci_method: "percentile bootstrap over pairs, 10000 resamples, seeded",
        cpu_ratio: f64::NAN,
        cpu_ci95: [f64::NAN, f64::NAN],
        itlb: ItlbInfo {
            supported: false,
            reason: None,
        },
        pairs: Vec::new(),
        notes: Vec::new(),
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
    report.files = text_files(&seen, &extra)?;
    let windows: u64 = report.files.iter().map(|f| f.pmd_windows).sum();
    if windows == 0 {
        report.notes.push(
            "no managed file has a whole 2 MiB window of text: both sides are the same (expect a ratio near 1)".into(),
        );
    }
    for f in &report.files {
        if f.pmd_windows > 0 && f.mappable_windows.is_some_and(|m| m < f.pmd_windows) {
            report.notes.push(format!(
                "{}: {} of its {} text windows are mapped at addresses not congruent to their file offsets modulo 2 MiB, so their PMD folios cannot be PMD-mapped (see `hugetext check`/`align`)",
                f.path.display(),
                f.pmd_windows - f.mappable_windows.unwrap_or(0),
                f.pmd_windows
            ));
        }
        if f.filesystem == "tmpfs" || f.filesystem == "ramfs" {
            report.notes.push(format!(
                "{}: on {}, which has no large page-cache folios here",
                f.path.display(),
                f.filesystem
            ));
        }
    }
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
                reason: Some(why),
            };
            None
        }
    };

    let first_small = fastrand::Rng::with_seed(opts.seed).bool();
    for i in 0..opts.runs {
        // Balanced order: pairs alternate small-first and huge-first
        // (ABBA...), starting with a seeded coin toss.
        let order = if (i % 2 == 0) == first_small {
            [Side::Small, Side::Huge]
        } else {
            [Side::Huge, Side::Small]
        };
        let mut recs: Vec<RunRecord> = Vec::new();
        for side in order {
            let t = Instant::now();
            let state = prepare(&report.files, side)?;
            let prepare_s = t.elapsed().as_secs_f64();
            if let Some(c) = &counter {
                c.start();
            }
            let ran = run_once(&exe, opts, None)?;
            let itlb_misses = counter.as_ref().and_then(|c| c.stop());
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
                state.text_pmd_pct
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
        if recs.len() < 2 {
            break;
        }
        let (a, b) = (recs.remove(0), recs.remove(0));
        let (small, huge) = if a.side == Side::Small { (a, b) } else { (b, a) };
        report.pairs.push(Pair {
            order: format!("{},{}", order[0].name(), order[1].name()),
            small,
            huge,
        });
    }
    let others = report
        .pairs
        .iter()
        .flat_map(|p| [&p.small, &p.huge])
        .map(|r| r.state.mapped_by_others_kb)
        .max()
        .unwrap_or(0);
    // A little is normal (libraries a concurrent process shares); say so
    // when it is enough to blur the comparison.
    let text_kb: u64 = report
        .files
        .iter()
        .filter(|f| f.pmd_windows > 0)
        .map(|f| f.text_kb)
        .sum();
    if others > 0 && others * 20 > text_kb {
        report.notes.push(format!(
            "up to {:.1} MiB of the managed text was mapped by other processes during the runs, so it could not be evicted and kept its folios on both sides (per-run mapped_by_others_kb in the JSON); for clean sides use a quiet machine or a private copy of the program",
            others as f64 / 1024.0
        ));
    }
    let small_pmd = report
        .pairs
        .iter()
        .map(|p| p.small.state.text_pmd_pct)
        .fold(0.0, f64::max);
    if small_pmd > 1.0 {
        report.notes.push(format!(
            "the small side had up to {small_pmd:.1}% of its text in PMD folios (pages other processes kept mapped): the sides were not clean and the ratio understates the difference"
        ));
    }
    let smalls: Vec<&RunRecord> = report.pairs.iter().map(|p| &p.small).collect();
    let huges: Vec<&RunRecord> = report.pairs.iter().map(|p| &p.huge).collect();
    report.small = summarize(&smalls);
    report.huge = summarize(&huges);
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
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_resolution() {
        assert!(resolve_command(OsStr::new("sh")).unwrap().ends_with("sh"));
        assert!(resolve_command(OsStr::new("no-such-command-hugetext"))
            .unwrap_err()
            .to_string()
            .contains("not found"));
        assert!(resolve_command(OsStr::new("/etc/passwd"))
            .unwrap_err()
            .to_string()
            .contains("not an executable"));
        assert!(resolve_command(OsStr::new("")).is_err());
    }

    #[test]
    fn own_exec_maps_and_tree() {
        let me = std::process::id() as i32;
        let maps = exec_maps(me);
        assert!(
            maps.iter().any(|m| m.path.to_string_lossy().contains("libc")),
            "{maps:?}"
        );
        assert_eq!(process_tree(me)[0], me);
        let ranges = elf_text_ranges(&std::fs::read_link("/proc/self/exe").unwrap()).unwrap();
        assert!(!ranges.is_empty());
        assert!(elf_text_ranges(Path::new("/etc/passwd")).is_none());
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
