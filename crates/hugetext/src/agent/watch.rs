//! What the agent watches: process exec/exit events from the kernel's proc
//! connector (netlink, needs CAP_NET_ADMIN in the initial namespaces; the
//! agent polls `/proc` where it is refused), and changes to the policy's
//! files (inotify on their directories: a package upgrade renames a new file
//! over the old one).
//!
//! The proc connector has no maintained Rust crate; its wire format (a
//! netlink header, a `cn_msg`, a `proc_event`) is a few fixed-offset fields
//! from `<linux/cn_proc.h>` read here.

use std::collections::BTreeSet;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::inotify;

/// `NETLINK_CONNECTOR`, `CN_IDX_PROC`/`CN_VAL_PROC`, `PROC_CN_MCAST_LISTEN`.
const NETLINK_CONNECTOR: i32 = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
/// `proc_event.what` values.
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// sizeof(struct nlmsghdr), sizeof(struct cn_msg).
const NLMSG_HDR: usize = 16;
const CN_MSG: usize = 20;

/// A process event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    /// A process (thread-group leader) called execve.
    Exec(i32),
    /// A process (thread-group leader) exited.
    Exit(i32),
}

/// Parse one datagram of proc connector messages (pure).
pub fn parse_proc_events(buf: &[u8]) -> Vec<ProcEvent> {
    let u32_at = |b: &[u8], o: usize| b.get(o..o + 4).map(|s| u32::from_ne_bytes(s.try_into().unwrap()));
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDR <= buf.len() {
        let Some(len) = u32_at(buf, off).map(|l| l as usize) else {
            break;
        };
        if len < NLMSG_HDR || off + len > buf.len() {
            break;
        }
        let msg = &buf[off..off + len];
        let ev = NLMSG_HDR + CN_MSG;
        if u32_at(msg, NLMSG_HDR) == Some(CN_IDX_PROC) && u32_at(msg, NLMSG_HDR + 4) == Some(CN_VAL_PROC) {
            // proc_event: what, cpu, timestamp_ns (u64), then the event data:
            // exec and exit both start with process_pid, process_tgid.
            if let (Some(what), Some(pid), Some(tgid)) = (u32_at(msg, ev), u32_at(msg, ev + 16), u32_at(msg, ev + 20)) {
                if pid == tgid {
                    match what {
                        PROC_EVENT_EXEC => out.push(ProcEvent::Exec(pid as i32)),
                        PROC_EVENT_EXIT => out.push(ProcEvent::Exit(pid as i32)),
                        _ => {}
                    }
                }
            }
        }
        off += len.div_ceil(4) * 4;
    }
    out
}

/// A subscription to the kernel's process events.
pub struct ProcConnector {
    fd: OwnedFd,
}

impl ProcConnector {
    /// Subscribe; fails (EPERM) without CAP_NET_ADMIN or outside the initial
    /// user and pid namespaces. `timeout` bounds each [`recv`](Self::recv).
    pub fn open(timeout: Duration) -> io::Result<ProcConnector> {
        // SAFETY: plain socket(2); the result is checked and owned.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_CONNECTOR,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = CN_IDX_PROC;
        // SAFETY: sa is a valid sockaddr_nl of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut msg = Vec::with_capacity(NLMSG_HDR + CN_MSG + 4);
        msg.extend_from_slice(&((NLMSG_HDR + CN_MSG + 4) as u32).to_ne_bytes());
        msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
        msg.extend_from_slice(&4u16.to_ne_bytes()); // len
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: msg is a valid buffer of its length.
        let n = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: tv is a valid timeval of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let c = ProcConnector { fd };
        // The kernel acknowledges the subscription; an error there (EPERM
        // on kernels that check at listen time) means no events will come.
        c.check_ack()?;
        Ok(c)
    }

    /// The acknowledgement of PROC_CN_MCAST_LISTEN: `proc_event` with
    /// what = 0 and `err` in the data.
    fn check_ack(&self) -> io::Result<()> {
        let mut buf = [0u8; 4096];
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            // No ack within the timeout on old kernels: assume subscribed.
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Ok(()),
                _ => Err(e),
            };
        }
        let b = &buf[..n as usize];
        let ev = NLMSG_HDR + CN_MSG;
        if b.len() >= ev + 20 && u32::from_ne_bytes(b[ev..ev + 4].try_into().unwrap()) == 0 {
            let err = u32::from_ne_bytes(b[ev + 16..ev + 20].try_into().unwrap());
            if err != 0 {
                return Err(io::Error::from_raw_os_error(err as i32));
            }
        }
        Ok(())
    }

    /// The next events; empty after the timeout. `Err` when the socket
    /// fails (ENOBUFS: events were lost — the caller re-scans).
    pub fn recv(&self) -> io::Result<Vec<ProcEvent>> {
        let mut buf = [0u8; 8192];
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(Vec::new()),
                _ => Err(e),
            };
        }
        Ok(parse_proc_events(&buf[..n as usize]))
    }
}

/// inotify on the directories of the policy's files: a change to one of the
/// files (written, or a new file renamed over it) is reported.
pub struct FileWatch {
    fd: OwnedFd,
    /// (watch descriptor, directory, file names in it we care about).
    dirs: Vec<(i32, PathBuf, BTreeSet<std::ffi::OsString>)>,
}

impl FileWatch {
    /// Watch `files` (their directories, non-blocking). Files whose
    /// directory cannot be watched are left out and returned.
    pub fn new(files: &[PathBuf]) -> io::Result<(FileWatch, Vec<PathBuf>)> {
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
        let mut dirs: Vec<(i32, PathBuf, BTreeSet<std::ffi::OsString>)> = Vec::new();
        let mut failed = Vec::new();
        for f in files {
            let (Some(dir), Some(name)) = (f.parent(), f.file_name()) else {
                continue;
            };
            if let Some(d) = dirs.iter_mut().find(|d| d.1 == dir) {
                d.2.insert(name.to_owned());
                continue;
            }
            let mask = inotify::WatchFlags::CLOSE_WRITE
                | inotify::WatchFlags::MOVED_TO
                | inotify::WatchFlags::CREATE
                | inotify::WatchFlags::ATTRIB;
            match inotify::add_watch(&fd, dir, mask) {
                Ok(wd) => dirs.push((wd, dir.to_path_buf(), [name.to_owned()].into())),
                Err(_) => failed.push(f.clone()),
            }
        }
        Ok((FileWatch { fd, dirs }, failed))
    }

    /// The watched files that changed since the last call.
    pub fn changed(&self) -> Vec<PathBuf> {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
        let mut out = BTreeSet::new();
        while let Ok(ev) = reader.next() {
            let Some(name) = ev.file_name() else { continue };
            let name = std::ffi::OsStr::new(std::str::from_utf8(name.to_bytes()).unwrap_or_default());
            if let Some(d) = self.dirs.iter().find(|d| d.0 == ev.wd()) {
                if d.2.contains(name) {
                    out.insert(d.1.join(name));
                }
            }
        }
        out.into_iter().collect()
    }

    /// Directories watched.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.dirs.iter().map(|d| d.1.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(what: u32, pid: u32, tgid: u32) -> Vec<u8> {
        let len = NLMSG_HDR + CN_MSG + 40;
        let mut m = vec![0u8; len];
        m[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        m[NLMSG_HDR..NLMSG_HDR + 4].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
        m[NLMSG_HDR + 4..NLMSG_HDR + 8].copy_from_slice(&CN_VAL_PROC.to_ne_bytes());
        let ev = NLMSG_HDR + CN_MSG;
        m[ev..ev + 4].copy_from_slice(&what.to_ne_bytes());
        m[ev + 16..ev + 20].copy_from_slice(&pid.to_ne_bytes());
        m[ev + 20..ev + 24].copy_from_slice(&tgid.to_ne_bytes());
        m
    }

    #[test]
    fn parses_exec_and_exit_of_processes_not_threads() {
        let mut buf = message(PROC_EVENT_EXEC, 10, 10);
        buf.extend(message(PROC_EVENT_EXIT, 11, 10)); // a thread
        buf.extend(message(PROC_EVENT_EXIT, 12, 12));
        buf.extend(message(0x1, 13, 13)); // fork
        assert_eq!(parse_proc_events(&buf), vec![ProcEvent::Exec(10), ProcEvent::Exit(12)]);
        // Truncated input is not read past its end.
        assert_eq!(parse_proc_events(&buf[..30]), vec![]);
    }

    /// As root (CAP_NET_ADMIN), the kernel's events for a real child.
    #[test]
    fn real_exec_and_exit_events() {
        let c = match ProcConnector::open(Duration::from_millis(200)) {
            Ok(c) => c,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                return;
            }
        };
        let child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id() as i32;
        let mut child = child;
        child.wait().unwrap();
        let mut seen = Vec::new();
        // Until both are seen: on a busy machine every other process's
        // events come first, many batches of them.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            seen.extend(
                c.recv()
                    .unwrap()
                    .into_iter()
                    .filter(|e| matches!(e, ProcEvent::Exec(p) | ProcEvent::Exit(p) if *p == pid)),
            );
            if seen.len() == 2 {
                break;
            }
        }
        assert_eq!(seen, vec![ProcEvent::Exec(pid), ProcEvent::Exit(pid)]);
    }

    #[test]
    fn file_watch_sees_a_rename_over_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("prog");
        std::fs::write(&f, b"old").unwrap();
        let (w, failed) = FileWatch::new(&[f.clone(), PathBuf::from("/nonexistent/x")]).unwrap();
        assert_eq!(failed, vec![PathBuf::from("/nonexistent/x")]);
        assert!(w.changed().is_empty());
        std::fs::write(dir.path().join("other"), b"x").unwrap();
        let tmp = dir.path().join(".prog.new");
        std::fs::write(&tmp, b"new").unwrap();
        std::fs::rename(&tmp, &f).unwrap();
        assert_eq!(w.changed(), vec![f]);
    }
}
