//! The scratch directory of a benchmark that writes files (`exec`,
//! `readahead`): refused before anything is written when its files cannot
//! fit (disk space, memory), and removed whatever ends the benchmark: its
//! end, an error, a panic (unwinding drops the guard), or SIGINT, SIGTERM or
//! SIGHUP (a thread that receives them removes every live scratch
//! directory, then lets the signal end the process as it would have). What
//! a run killed outright (SIGKILL, a crash, a power loss) leaves behind is
//! removed by the next benchmark in the same directory: a live run holds a
//! lock on its directory, a dead one's lock is gone.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

use crate::warm::human;
use crate::{fsutil, procfs, Error, Result};

/// Scratch directories that exist now (removed by the signal thread).
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A benchmark's scratch directory (mode 0700, a random name starting with
/// `.hugetext-bench-`); removed with its files when dropped or when the
/// process gets SIGINT, SIGTERM or SIGHUP.
#[derive(Debug)]
pub struct ScratchDir {
    dir: tempfile::TempDir,
    /// The directory open, with a shared `flock` held while this process
    /// lives: [`remove_leftovers`] of another run leaves it alone.
    _lock: Option<std::fs::File>,
}

/// The name prefix of scratch directories.
const PREFIX: &str = ".hugetext-bench-";

impl ScratchDir {
    /// Create one in `base`. Registered under the lock, so that a signal
    /// arriving meanwhile still finds it.
    fn create(base: &Path) -> Result<ScratchDir> {
        use std::os::unix::fs::PermissionsExt;
        install_signal_thread();
        remove_leftovers(base);
        let mut live = live();
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(base)
            .map_err(|e| Error::io(base, e))?;
        let lock = std::fs::File::open(dir.path()).ok();
        if let Some(f) = &lock {
            let _ = rustix::fs::flock(f, rustix::fs::FlockOperation::NonBlockingLockShared);
        }
        live.push(dir.path().to_path_buf());
        Ok(ScratchDir { dir, _lock: lock })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        live().retain(|p| p != self.dir.path());
        // TempDir's own drop removes the directory.
    }
}

/// Remove the scratch directories in `base` that benchmarks killed outright
/// left behind: named like ours (the prefix and 6 random letters and
/// digits), a directory of the caller's, mode 0700, and no live benchmark
/// holding its lock. Returns the directories removed.
pub fn remove_leftovers(base: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let euid = rustix::process::geteuid().as_raw();
    let ours = |name: &str| {
        name.strip_prefix(PREFIX)
            .is_some_and(|r| r.len() == 6 && r.bytes().all(|b| b.is_ascii_alphanumeric()))
    };
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        if !e.file_name().to_str().is_some_and(ours) {
            continue;
        }
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        if !m.is_dir() || m.uid() != euid || m.mode() & 0o777 != 0o700 {
            continue;
        }
        let Ok(d) = std::fs::File::open(&p) else { continue };
        if d.metadata().map(|dm| (dm.dev(), dm.ino())).ok() != Some((m.dev(), m.ino())) {
            continue;
        }
        if rustix::fs::flock(&d, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            remove_tree(&p);
            removed.push(p);
        }
    }
    removed
}

/// Remove a directory and everything in it, again if a file appeared in it
/// meanwhile (the benchmark thread may still be creating its files).
fn remove_tree(dir: &Path) {
    for _ in 0..8 {
        let _ = std::fs::remove_dir_all(dir);
        if std::fs::symlink_metadata(dir).is_err() {
            return;
        }
    }
}

/// Once per process: a thread that, on SIGINT, SIGTERM or SIGHUP, removes
/// every live scratch directory and then ends the process with that signal
/// (its default action). It keeps the registry locked to the end, so no new
/// scratch directory is created after the cleanup.
fn install_signal_thread() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        let spawned = std::thread::Builder::new().name("bench-cleanup".into()).spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let live = live();
                for d in live.iter() {
                    remove_tree(d);
                }
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        });
        drop(spawned);
    });
}

/// Why a benchmark that keeps `bytes` of files on disk and in the page cache
/// at once must not start: the files do not fit in 90% of `free_disk` bytes
/// (of the filesystem of `dir`), or in half of `mem_available`. `None`:
/// they fit. `what` names the option that sets the size.
pub fn room_refusal(what: &str, bytes: u64, dir: &Path, free_disk: u64, mem_available: u64) -> Option<String> {
    if bytes > free_disk / 10 * 9 {
        return Some(format!(
            "{what} needs {} of files in {}, which has {} free: choose a smaller {what} or a --dir with room",
            human(bytes),
            dir.display(),
            human(free_disk)
        ));
    }
    if bytes > mem_available / 2 {
        return Some(format!(
            "{what} keeps {} of files in the page cache at once, more than half of the available memory ({}): choose a smaller {what}",
            human(bytes),
            human(mem_available)
        ));
    }
    None
}

/// Choose the directory for a benchmark's scratch files: `dir` when given,
/// else `$TMPDIR` (or `/tmp`) unless it is memory-backed, else the current
/// directory. Refuses tmpfs/ramfs with a clear message (the exec and
/// readahead benchmarks measure the disk page cache), and, before anything
/// is written, files of `bytes` in all that do not fit
/// ([`room_refusal`]; `what` names the size option).
pub fn scratch_dir(dir: Option<&Path>, what: &str, bytes: u64) -> Result<ScratchDir> {
    let base = match dir {
        Some(d) => d.to_path_buf(),
        None => {
            let tmp = std::env::var_os("TMPDIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            match fsutil::fs_name_at(&tmp) {
                Ok(kind) if !fsutil::is_memory_fs(&kind) => tmp,
                _ => std::env::current_dir().map_err(|e| Error::io(".", e))?,
            }
        }
    };
    let kind = fsutil::fs_name_at(&base)?;
    if fsutil::is_memory_fs(&kind) {
        return Err(Error::Invalid(format!(
            "{} is on {kind}, which has no large page-cache folios here and no readahead: \
             pass --dir DIR on a disk filesystem (ext4, xfs)",
            base.display()
        )));
    }
    let st = rustix::fs::statvfs(&base).map_err(|e| Error::io(&base, e.into()))?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if let Some(why) = room_refusal(what, bytes, &base, free, procfs::mem_available()?) {
        return Err(Error::Invalid(why));
    }
    ScratchDir::create(&base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_refused_for_disk_then_memory() {
        let g = 1u64 << 30;
        let d = Path::new("/d");
        assert_eq!(room_refusal("--size", 3 * g, d, 10 * g, 20 * g), None);
        let disk = room_refusal("--size", 3 << 40, d, 74 * g, 20 * g).unwrap();
        assert!(disk.contains("3072 GiB") && disk.contains("74 GiB free"), "{disk}");
        // 90% of the free space at most.
        assert!(room_refusal("--size", 10 * g, d, 11 * g, 40 * g).is_some());
        let mem = room_refusal("--size", 12 * g, d, 100 * g, 22 * g).unwrap();
        assert!(mem.contains("page cache") && mem.contains("22 GiB"), "{mem}");
    }

    #[test]
    fn scratch_dir_is_private_and_removed_even_on_panic() {
        use std::os::unix::fs::PermissionsExt;
        let exe = std::env::current_exe().unwrap();
        let base = exe.parent().unwrap();
        let s = scratch_dir(Some(base), "--size", 1 << 20).unwrap();
        let p = s.path().to_path_buf();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(live().contains(&p));
        let inside = p.join("f");
        let r = std::panic::catch_unwind(move || {
            let _s = s;
            std::fs::write(inside, b"x").unwrap();
            panic!("benchmark failed");
        });
        assert!(r.is_err());
        assert!(!p.exists(), "{} left behind", p.display());
        assert!(!live().contains(&p));
    }

    /// A scratch directory nobody holds (its benchmark was killed) goes at
    /// the next benchmark in that directory; a live one and other names stay.
    #[test]
    fn the_next_run_removes_what_a_killed_one_left() {
        use std::os::unix::fs::PermissionsExt;
        let exe = std::env::current_exe().unwrap();
        let base = tempfile::Builder::new()
            .prefix(".scratch-test-")
            .tempdir_in(exe.parent().unwrap())
            .unwrap();
        let dead = base.path().join(".hugetext-bench-Dead01");
        std::fs::create_dir(&dead).unwrap();
        std::fs::set_permissions(&dead, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(dead.join("ret-stubs-warm.bin"), vec![0u8; 4096]).unwrap();
        let other = base.path().join(".hugetext-bench-mine");
        std::fs::create_dir(&other).unwrap();
        let live = scratch_dir(Some(base.path()), "--size", 1 << 20).unwrap();
        assert!(!dead.exists(), "the killed run's directory stayed");
        assert!(other.exists());
        assert_eq!(remove_leftovers(base.path()), Vec::<PathBuf>::new());
        assert!(live.path().exists(), "a live run's directory was removed");
    }
}
