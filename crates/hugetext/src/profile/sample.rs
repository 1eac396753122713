//! Sampling: user-space instruction pointers of a process or a command from
//! `perf_event_open(2)` with the software `cpu-clock` event (a timer, so it
//! works in virtual machines that expose no PMU), read from the events'
//! mmap ring buffers.
//!
//! One event per CPU and task, inherited by the threads and children the
//! task starts afterwards (the kernel refuses to map the ring buffer of an
//! inherited event that is not bound to one CPU). A command is sampled
//! through events opened on this process, disabled, with `enable_on_exec`:
//! the child inherits them and they start counting when it execs.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use perf_event::events::Software;
use perf_event::{Builder, SampleFlag, Sampler};

use super::attrib::Space;
use super::{Profile, Source, Tally};
use crate::{procfs, Error, Result};

/// Sampling settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Samples per second per running thread.
    pub frequency: u64,
    /// Stop after this long (`--pid`: default until the process exits).
    pub duration: Option<Duration>,
    /// [`sample_pids`]: also one profile per process named (its threads
    /// and the children it starts counted with it).
    pub per_pid: bool,
}

/// Ring buffer per event (bytes, a power of two).
const RING: usize = 64 << 10;
/// How often the ring buffers are drained.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// The online CPUs, from `/sys/devices/system/cpu/online` ("0-3,8").
fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpus = parse_cpu_list(&text);
    if cpus.is_empty() {
        (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
    } else {
        cpus
    }
}

/// Parse a kernel CPU list ("0-3,8"). Pure.
pub fn parse_cpu_list(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            out.extend(a..=b);
        }
    }
    out
}

/// The one-line reason `perf_event_open` failed on `who`.
fn open_error(who: &str, e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ESRCH) => Error::Other(format!("{who}: no such process")),
        Some(libc::EACCES) | Some(libc::EPERM) => Error::Permission(format!(
            "perf_event_open on {who} not permitted ({e}): run as root or as the process's owner, or lower /proc/sys/kernel/perf_event_paranoid"
        )),
        Some(libc::EMFILE) | Some(libc::ENFILE) => Error::Other(format!(
            "perf_event_open on {who}: out of file descriptors (one event per thread and CPU): raise `ulimit -n`"
        )),
        _ => Error::Other(format!("perf_event_open (cpu-clock) on {who}: {e}")),
    }
}

fn open(pid: i32, cpu: usize, freq: u64, on_exec: bool) -> std::io::Result<Sampler> {
    let mut b = Builder::new(Software::CPU_CLOCK);
    if pid == 0 {
        b.observe_self();
    } else {
        b.observe_pid(pid);
    }
    b.one_cpu(cpu)
        .sample(SampleFlag::IP | SampleFlag::TID)
        .exclude_kernel(true)
        .exclude_hv(true)
        .inherit(true)
        .sample_frequency(freq.max(1))
        .enabled(!on_exec)
        .enable_on_exec(on_exec);
    b.build()?.sampled(RING)
}

/// The events and what their samples resolve to.
struct Session {
    samplers: Vec<Sampler>,
    spaces: HashMap<i32, Space>,
    tally: Tally,
    lost: u64,
    pmd: u64,
    /// With per-process profiles: the processes named, and each sampled
    /// process's one among them (0: none found).
    roots: Option<(Vec<i32>, HashMap<i32, i32>)>,
    per: HashMap<i32, Tally>,
}

impl Session {
    fn new() -> Session {
        Session {
            samplers: Vec::new(),
            spaces: HashMap::new(),
            tally: Tally::default(),
            lost: 0,
            pmd: super::window_size(),
            roots: None,
            per: HashMap::new(),
        }
    }

    /// The process named among `roots` that `pid` is, or descends from (0:
    /// none, or it exited before it could be asked).
    fn root_of(roots: &mut (Vec<i32>, HashMap<i32, i32>), pid: i32) -> i32 {
        if let Some(&r) = roots.1.get(&pid) {
            return r;
        }
        let mut p = pid;
        let mut found = 0;
        for _ in 0..64 {
            if roots.0.contains(&p) {
                found = p;
                break;
            }
            match procfs::read_stat(p) {
                Ok(st) if st.ppid > 0 => p = st.ppid,
                _ => break,
            }
        }
        roots.1.insert(pid, found);
        found
    }

    /// Read every record the rings hold and attribute the samples.
    fn drain(&mut self) {
        let mut ips: Vec<(i32, u64)> = Vec::new();
        for s in &mut self.samplers {
            while let Some(rec) = s.next_record() {
                match rec.parse_record() {
                    Ok(perf_event::data::Record::Sample(smp)) => {
                        if let (Some(ip), Some(pid)) = (smp.ip(), smp.pid()) {
                            ips.push((pid as i32, ip));
                        }
                    }
                    Ok(perf_event::data::Record::Lost(l)) => self.lost += l.lost,
                    _ => {}
                }
            }
        }
        let mut refreshed: Vec<i32> = Vec::new();
        for (pid, ip) in ips {
            let pmd = self.pmd;
            let space = self.spaces.entry(pid).or_insert_with(|| {
                let mut s = Space::new(Some(pid), pmd);
                let _ = s.refresh(true);
                refreshed.push(pid);
                s
            });
            let mut loc = space.resolve(ip);
            if loc.is_none() && !refreshed.contains(&pid) {
                // New code since the maps were read (dlopen, run's copies).
                let _ = space.refresh(true);
                refreshed.push(pid);
                loc = space.resolve(ip);
            }
            self.tally.add(loc.as_ref(), 1);
            if let Some(roots) = &mut self.roots {
                let root = Session::root_of(roots, pid);
                self.per.entry(root).or_default().add(loc.as_ref(), 1);
            }
        }
    }

    fn finish(mut self) -> (Profile, u64) {
        self.drain();
        let lost = self.lost;
        (self.tally.finish(Source::Sampling, "samples", self.pmd), lost)
    }
}

/// What became of one process sampled by [`sample_pids`]: what explains a
/// profile with no samples, and its own profile (`Options::per_pid`).
#[derive(Debug, Clone)]
pub struct Watched {
    /// The process.
    pub pid: i32,
    /// CPU time (user + system) it used during the window, clock ticks.
    pub cpu_ticks: u64,
    /// It exited (or became a zombie) before the window ended.
    pub exited: bool,
    /// Its samples alone (with `Options::per_pid`).
    pub profile: Option<Profile>,
}

/// Sample process `pid` (all its threads, and the threads and children
/// they start) until it exits, `opts.duration` passes or `stop` is set.
/// Returns the profile and the number of samples the kernel lost.
pub fn sample_pid(pid: i32, opts: &Options, stop: &AtomicBool) -> Result<(Profile, u64)> {
    let (p, lost, _) = sample_pids(&[pid], opts, stop)?;
    Ok((p, lost))
}

/// Sample the processes `pids` (all their threads, and the threads and
/// children they start) into one profile, until all exited,
/// `opts.duration` passes or `stop` is set. Returns the profile, the number
/// of samples the kernel lost, and what each process did meanwhile.
pub fn sample_pids(pids: &[i32], opts: &Options, stop: &AtomicBool) -> Result<(Profile, u64, Vec<Watched>)> {
    let mut before = Vec::new();
    for &pid in pids {
        let st = procfs::read_stat(pid)?;
        if st.is_zombie() || st.is_kernel_thread() {
            return Err(Error::Invalid(format!(
                "pid {pid} is a zombie or a kernel thread: nothing to sample"
            )));
        }
        procfs::read_maps(Some(pid))?; // permission to read its maps, or the reason
        before.push(st.cpu_ticks);
    }
    let mut sess = Session::new();
    if opts.per_pid {
        sess.roots = Some((pids.to_vec(), HashMap::new()));
    }
    let cpus = online_cpus();
    for &pid in pids {
        for tid in task_ids(pid)? {
            for &cpu in &cpus {
                match open(tid, cpu, opts.frequency, false) {
                    Ok(s) => sess.samplers.push(s),
                    // A thread that ended meanwhile.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && tid != pid => break,
                    Err(e) => return Err(open_error(&format!("pid {pid}"), e)),
                }
            }
        }
    }
    let start = Instant::now();
    let alive = |pid: i32| procfs::read_stat(pid).is_ok_and(|s| !s.is_zombie());
    let mut last = before.clone();
    let mut exited = vec![false; pids.len()];
    while !stop.load(Ordering::Relaxed) && opts.duration.map_or(true, |d| start.elapsed() < d) {
        for (i, &pid) in pids.iter().enumerate() {
            match procfs::read_stat(pid) {
                Ok(st) if !st.is_zombie() => last[i] = st.cpu_ticks,
                Ok(st) => {
                    last[i] = st.cpu_ticks;
                    exited[i] = true;
                }
                Err(_) => exited[i] = true,
            }
        }
        if exited.iter().all(|&e| e) {
            break;
        }
        std::thread::sleep(DRAIN_EVERY);
        sess.drain();
    }
    for (i, &pid) in pids.iter().enumerate() {
        if !exited[i] && !alive(pid) {
            exited[i] = true;
        }
    }
    sess.drain();
    let mut per = std::mem::take(&mut sess.per);
    let pmd = sess.pmd;
    let (mut p, lost) = sess.finish();
    p.pid = pids.first().copied();
    let watched = pids
        .iter()
        .enumerate()
        .map(|(i, &pid)| Watched {
            pid,
            cpu_ticks: last[i].saturating_sub(before[i]),
            exited: exited[i],
            profile: opts.per_pid.then(|| {
                let mut one = per
                    .remove(&pid)
                    .unwrap_or_default()
                    .finish(Source::Sampling, "samples", pmd);
                one.pid = Some(pid);
                one
            }),
        })
        .collect();
    Ok((p, lost, watched))
}

fn task_ids(pid: i32) -> Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/task");
    let rd = std::fs::read_dir(&dir).map_err(|e| procfs::proc_error(Some(pid), dir.as_ref(), e))?;
    let mut tids: Vec<i32> = rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Start `command` and sample it (and every thread and child it starts)
/// until it exits, or until `opts.duration` passes, when it is killed.
/// Returns the profile, the samples lost, and its exit status.
pub fn sample_command(command: &[OsString], opts: &Options) -> Result<(Profile, u64, ExitStatus)> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| Error::Invalid("no command to profile".into()))?;
    let path = crate::run::remap::resolve_program(prog, std::env::var_os("PATH").as_deref())?;
    let mut sess = Session::new();
    for &cpu in &online_cpus() {
        let s = open(0, cpu, opts.frequency, true).map_err(|e| open_error("this process", e))?;
        sess.samplers.push(s);
    }
    let mut child: Child = Command::new(&path)
        .arg0(prog)
        .args(args)
        .spawn()
        .map_err(|e| Error::Other(format!("{}: cannot start: {e}", path.display())))?;
    let start = Instant::now();
    let status = loop {
        std::thread::sleep(DRAIN_EVERY);
        sess.drain();
        if let Some(st) = child.try_wait().map_err(|e| Error::Sys {
            call: "wait",
            source: e,
        })? {
            break st;
        }
        if opts.duration.is_some_and(|d| start.elapsed() >= d) {
            let _ = child.kill();
            break child.wait().map_err(|e| Error::Sys {
                call: "wait",
                source: e,
            })?;
        }
    };
    let (mut p, lost) = sess.finish();
    p.command = command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    Ok((p, lost, status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8\n"), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("0\n"), vec![0]);
        assert!(parse_cpu_list("").is_empty());
    }
}
