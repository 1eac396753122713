//! The lifecycle of the perf maps libhugetext.so writes
//! (`/tmp/perf-PID.map`, naming text copied to anonymous memory for perf):
//! each `run` removes a few maps left by processes that have ended, so that
//! `/tmp` does not grow with every program run while `perf report` after a
//! run still names its code. A map is removed only when all of these hold:
//! its name is `perf-PID.map`; it is a regular file (never a symbolic link
//! followed) with one name, owned by the user running `run`; it was last
//! written more than [`KEEP`] ago; no process PID exists; and its first
//! line is the one libhugetext.so writes ([`env::PERF_MAP_MARK`]), so a
//! JIT's map is never touched.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use hugetext_abi::env;

/// How long a map of an ended process is kept.
pub const KEEP: Duration = Duration::from_secs(env::PERF_MAP_KEEP_SECS);
/// At most this many maps are removed per `run`.
pub const MAX_REMOVED: usize = 64;
/// At most this many entries of the directory are looked at per `run`.
pub const MAX_SEEN: usize = 20_000;
/// A full look through the directory that left nothing to remove is not
/// made again for this long (each costs a `stat` per map in `/tmp`: with a
/// few hundred maps there, the largest part of `run`'s own work). Small
/// next to [`KEEP`]: a map is removed at most this much later.
pub const REAP_EVERY: Duration = Duration::from_secs(60);

/// Is a look through the directory due, the last full one having ended at
/// `last` (none known: due; as far in the future as [`REAP_EVERY`], a
/// clock set back: due)? Pure.
pub fn reap_due(last: Option<SystemTime>, now: SystemTime) -> bool {
    match last.map(|l| now.duration_since(l)) {
        Some(Ok(since)) => since >= REAP_EVERY,
        Some(Err(ahead)) => ahead.duration() >= REAP_EVERY,
        None => true,
    }
}

/// The pid in a perf map's file name (`perf-PID.map`). Pure.
pub fn pid_of(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("perf-")?.strip_suffix(".map")?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&p| p > 0)
}

/// Is there a process with this pid (in this pid namespace)?
fn alive(pid: u32) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
        return true;
    };
    // ESRCH: none; EPERM: another user's.
    !matches!(rustix::process::test_kill_process(p), Err(rustix::io::Errno::SRCH))
}

/// Remove the maps of `dir` (`/tmp`) that [`reapable`] allows, at most
/// [`MAX_REMOVED`]. Returns how many were removed. Errors are not
/// reported: this is housekeeping.
pub fn reap(dir: &Path, now: SystemTime) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    let euid = rustix::process::geteuid().as_raw();
    let mut removed = 0;
    for entry in rd.take(MAX_SEEN).flatten() {
        if removed == MAX_REMOVED {
            break;
        }
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(pid_of) else {
            continue;
        };
        let path = entry.path();
        if reapable(&path, pid, euid, now) && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// May the map at `path`, named for `pid`, be removed? (See the module.)
fn reapable(path: &Path, pid: u32, euid: u32, now: SystemTime) -> bool {
    let Ok(md) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let old = md
        .modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .is_some_and(|age| age > KEEP);
    if !md.file_type().is_file() || md.uid() != euid || md.nlink() != 1 || !old || alive(pid) {
        return false;
    }
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    match f.metadata() {
        Ok(m) if m.dev() == md.dev() && m.ino() == md.ino() => {}
        _ => return false,
    }
    let mut head = [0u8; 64];
    let mut got = 0;
    while got < env::PERF_MAP_MARK.len() {
        match f.read(&mut head[got..env::PERF_MAP_MARK.len()]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    &head[..got] == env::PERF_MAP_MARK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_names() {
        assert_eq!(pid_of("perf-123.map"), Some(123));
        assert_eq!(pid_of("perf-0.map"), None);
        assert_eq!(pid_of("perf-.map"), None);
        assert_eq!(pid_of("perf-12a.map"), None);
        assert_eq!(pid_of("perf-12.map.tmp"), None);
        assert_eq!(pid_of("perf-+12.map"), None);
        assert_eq!(pid_of("perf-99999999999.map"), None);
    }
}
