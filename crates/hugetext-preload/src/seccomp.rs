//! Seccomp filters a program installs after start (a sandbox, systemd's
//! `SystemCallFilter=` applied by the program itself): a filter whose
//! default action kills the process (`SECCOMP_RET_KILL_PROCESS`) makes any
//! system call it does not list fatal, and the pass over objects loaded
//! after start (`audit`) makes calls such a list rarely has (`madvise`,
//! `mremap`, `prctl`, ...). So that pass runs only while the calling
//! thread's seccomp state is what it was at start-up (where the start pass
//! ran under it, and survived); once it changed, the auditor stays passive
//! for the rest of the process.
//!
//! At start-up the state is asked with `PR_GET_SECCOMP` ([`start_state`]);
//! after it, the state is read from `/proc/thread-self/status` (`Seccomp:` and, since
//! Linux 5.9, `Seccomp_filters:`) with `openat`, `read` and `close`: the
//! calls the dynamic loader has just made in the same thread to open the
//! new object (`PR_GET_SECCOMP` would be a `prctl`, which a filter may
//! kill). Filters can only be added, never removed, so a change seen once
//! holds for good.

use crate::maps;

/// The seccomp mode (0 none, 1 strict, 2 filter) and, where the kernel
/// reports it, the number of filters, of the calling thread.
pub type State = (u8, Option<u32>);

/// The calling thread's seccomp state; None when `/proc` cannot tell (not
/// mounted). A kernel without seccomp has no `Seccomp:` line: mode 0.
pub fn state() -> Option<State> {
    let mut buf = [0u8; 256];
    let mut mode = None;
    let mut filters = None;
    let mut line = |l: &[u8]| {
        if let Some(v) = l.strip_prefix(b"Seccomp:") {
            mode = number(v).and_then(|n| u8::try_from(n).ok());
            true
        } else if let Some(v) = l.strip_prefix(b"Seccomp_filters:") {
            filters = number(v);
            false // the last line of interest
        } else {
            // The line after `Seccomp:` without `Seccomp_filters:` (before
            // Linux 5.9): nothing more to read.
            mode.is_none()
        }
    };
    let mut r = maps::for_each_line(b"/proc/thread-self/status\0", &mut buf, &mut line);
    if r == Err(-(libc::ENOENT as isize)) {
        // Before Linux 3.17: the process's (its first thread's) state.
        r = maps::for_each_line(b"/proc/self/status\0", &mut buf, &mut line);
    }
    r.ok()?;
    Some((mode.unwrap_or(0), filters))
}

/// The calling thread's state at start-up, before any code of the program
/// ran: `PR_GET_SECCOMP` first, one system call where reading the status
/// file is three and the kernel formatting all of it (paid by every process
/// `run` reaches). At start-up no filter of the program's own exists yet,
/// and one the process inherited that kills `prctl` would kill the start
/// pass's calls as well; mode 0 means no filter at all. Any other answer
/// (a filter, or an error a filter returned) is read from the status file,
/// as [`state`] does, for its count of filters.
pub fn start_state() -> Option<State> {
    // SAFETY: PR_GET_SECCOMP takes no pointer arguments.
    let mode = unsafe { crate::sys::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    match mode {
        0 => Some((0, None)),
        _ => state(),
    }
}

/// The decimal number after the tab of a status line.
fn number(v: &[u8]) -> Option<u32> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 9 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0')))
}

/// Has the seccomp state changed since `start` (a filter was added)? An
/// unreadable state counts as changed: nothing is known.
pub fn changed(start: Option<State>, now: Option<State>) -> bool {
    match (start, now) {
        (_, None) => true,
        (None, Some((mode, _))) => mode != 0,
        // No filter then and none now, whether or not a count was read.
        (Some((0, _)), Some((0, _))) => false,
        (Some((m0, f0)), Some((m1, f1))) => m1 != m0 || f1 != f0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_threads_state() {
        let s = state().expect("/proc/thread-self/status");
        assert!(s.0 <= 2, "{s:?}");
        assert!(!changed(Some(s), state()));
    }

    #[test]
    fn the_start_state_agrees_with_the_status_file() {
        let s = state().expect("/proc/thread-self/status");
        let start = start_state().expect("start state");
        assert_eq!(start.0, s.0);
        assert!(!changed(Some(start), state()), "{start:?} {s:?}");
    }

    #[test]
    fn a_new_filter_or_an_unreadable_state_is_a_change() {
        assert!(changed(Some((0, Some(0))), Some((2, Some(1)))));
        assert!(changed(Some((2, Some(1))), Some((2, Some(2)))));
        assert!(!changed(Some((2, Some(1))), Some((2, Some(1)))));
        assert!(!changed(Some((0, None)), Some((0, None))));
        assert!(changed(Some((0, None)), Some((2, None))));
        assert!(changed(Some((0, Some(0))), None));
        assert!(!changed(Some((0, None)), Some((0, Some(0)))));
        assert!(changed(Some((0, None)), Some((2, Some(1)))));
        assert!(changed(None, Some((2, Some(1)))));
        assert!(!changed(None, Some((0, Some(0)))));
        assert_eq!(number(b"\t2"), Some(2));
        assert_eq!(number(b"\t"), None);
        assert_eq!(number(b"\t99999999999"), None);
    }
}
