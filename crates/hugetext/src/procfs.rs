//! `/proc/PID/{maps,smaps,stat,comm,fd}`, `/proc/meminfo`, process and
//! cgroup enumeration, and who maps or has open a given file.
//!
//! Everything here reads the real `/proc`; a process that disappears while it
//! is being read turns into [`Error::NoProcess`], so that callers can skip it
//! (system and cgroup views) or report it (`--pid`).
//!
//! Names (`comm`, mapped paths, the executable's path) are bytes to the
//! kernel, and any user can give a program or a file a name that is not
//! UTF-8. They are read as bytes and carried as the text of
//! [`escape_name`]: lossless, printable, and unchanged for ordinary UTF-8
//! names; [`name_bytes`]/[`name_path`] give the bytes back.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// One line of `/proc/PID/maps`: a virtual memory area.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Vma {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions as the kernel prints them, e.g. `r-xp`.
    pub perms: String,
    /// File offset of `start` (bytes).
    pub offset: u64,
    /// Device major number of the backing file (0 for anonymous memory).
    pub dev_major: u32,
    /// Device minor number of the backing file.
    pub dev_minor: u32,
    /// Inode of the backing file (0 for anonymous memory).
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `[vdso]`, …); empty for anonymous
    /// memory. A name as [`escape_name`] writes it ([`Vma::file_path`] is
    /// the path itself).
    pub path: String,
}

impl Vma {
    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// True for a zero-length area (never produced by the kernel).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Executable (`x` permission).
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// Any access at all (not a `---p` guard or reservation).
    pub fn is_accessible(&self) -> bool {
        self.perms.as_bytes().iter().take(3).any(|&c| c != b'-')
    }

    /// Backed by a file (has an inode).
    pub fn is_file(&self) -> bool {
        self.inode != 0
    }

    /// The device as `MAJ:MIN` in hex, as `/proc/PID/maps` prints it.
    pub fn dev(&self) -> String {
        format!("{:02x}:{:02x}", self.dev_major, self.dev_minor)
    }

    /// The `[vsyscall]` page: not a real VMA, pagemap cannot describe it.
    pub fn is_vsyscall(&self) -> bool {
        self.path == "[vsyscall]"
    }

    /// The backing file's path as the kernel gave it (bytes, not escaped).
    pub fn file_path(&self) -> PathBuf {
        name_path(&self.path)
    }
}

/// A name from `/proc` (bytes) as text: UTF-8 characters are kept, except
/// that a backslash is written `\\` and every byte of a control character,
/// and every byte that is not UTF-8, is written `\xNN` (two lowercase hex
/// digits). Lossless ([`name_bytes`] undoes it), safe to print on a
/// terminal, and the identity for ordinary names. Every name hugetext
/// prints or puts in JSON from `/proc` is in this form.
pub fn escape_name(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    let hex = |out: &mut String, b: &[u8]| {
        for x in b {
            let _ = write!(out, "\\x{x:02x}");
        }
    };
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => hex(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes()),
                c => out.push(c),
            }
        }
        hex(&mut out, chunk.invalid());
    }
    out
}

/// The bytes of a name written by [`escape_name`].
pub(crate) fn name_bytes(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let byte = match (b[i], b.get(i + 1)) {
            (b'\\', Some(b'\\')) => Some((b'\\', 2)),
            (b'\\', Some(b'x')) => text
                .get(i + 2..i + 4)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .map(|v| (v, 4)),
            _ => None,
        };
        let (v, n) = byte.unwrap_or((b[i], 1));
        out.push(v);
        i += n;
    }
    out
}

/// The path named by an [`escape_name`] text.
pub fn name_path(text: &str) -> PathBuf {
    PathBuf::from(OsString::from_vec(name_bytes(text)))
}

/// A path (e.g. a `readlink` result) in the form of [`escape_name`].
pub fn path_name(path: &Path) -> String {
    escape_name(path.as_os_str().as_bytes())
}

/// Parse the text of `/proc/PID/maps` (or the header lines of smaps).
/// Lines that are not VMA headers are ignored.
fn parse_maps(text: &str) -> Vec<Vma> {
    text.lines().filter_map(parse_vma_line).collect()
}

/// Parse one VMA header line: `start-end perms offset maj:min inode   path`
/// (the parser is `hugetext_abi::maps`, shared with the preload).
pub fn parse_vma_line(line: &str) -> Option<Vma> {
    let l = hugetext_abi::maps::parse_line(line.as_bytes())?;
    // The path is the line's tail: a `&str` still.
    let path = &line[line.len() - l.path.len()..];
    Some(Vma {
        start: l.start as u64,
        end: l.end as u64,
        perms: std::str::from_utf8(&l.perms).ok()?.to_string(),
        offset: l.offset,
        dev_major: l.dev_major,
        dev_minor: l.dev_minor,
        inode: l.inode,
        path: path.to_string(),
    })
}

fn proc_path(pid: Option<i32>, what: &str) -> PathBuf {
    match pid {
        Some(p) => PathBuf::from(format!("/proc/{p}/{what}")),
        None => PathBuf::from(format!("/proc/self/{what}")),
    }
}

/// Map an I/O error on `/proc/PID/...` to [`Error::NoProcess`] when the
/// process is gone, [`Error::Permission`] when access is denied.
pub fn proc_error(pid: Option<i32>, path: &Path, e: std::io::Error) -> Error {
    match (pid, e.kind(), e.raw_os_error()) {
        (Some(p), ErrorKind::NotFound, _) | (Some(p), _, Some(libc::ESRCH)) => Error::NoProcess(p),
        (_, ErrorKind::PermissionDenied, _) => Error::Permission(format!(
            "{}: permission denied (run as root, or as the process's owner)",
            path.display()
        )),
        _ => Error::io(path, e),
    }
}

/// Read a `/proc/PID/<what>` file (None = this process).
fn read_proc(pid: Option<i32>, what: &str) -> Result<String> {
    let path = proc_path(pid, what);
    std::fs::read_to_string(&path).map_err(|e| proc_error(pid, &path, e))
}

/// Read a `/proc/PID/<what>` file that holds names (`maps`, `smaps`,
/// `stat`, `comm`) as bytes, each line in the form of [`escape_name`]: a
/// name that is not UTF-8 does not make the file unreadable.
pub fn read_proc_names(pid: Option<i32>, what: &str) -> Result<String> {
    let path = proc_path(pid, what);
    let bytes = std::fs::read(&path).map_err(|e| proc_error(pid, &path, e))?;
    // The usual case, cheaply: UTF-8 with nothing to escape.
    let bytes = match String::from_utf8(bytes) {
        Ok(s) if !s.chars().any(|c| c == '\\' || (c.is_control() && c != '\n')) => return Ok(s),
        Ok(s) => s.into_bytes(),
        Err(e) => e.into_bytes(),
    };
    Ok(bytes
        .split(|&b| b == b'\n')
        .map(escape_name)
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The cgroup of a process as `/proc/PID/cgroup` names it (the v2 path, or
/// v1's `name=systemd` hierarchy); `None` when it vanished.
pub fn cgroup_of(pid: i32) -> Option<String> {
    let text = read_proc_names(Some(pid), "cgroup").ok()?;
    let mut first = None;
    for l in text.lines() {
        let mut f = l.splitn(3, ':');
        let (id, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        if id == "0" && ctrl.is_empty() {
            return Some(path.to_string());
        }
        if ctrl == "name=systemd" || first.is_none() {
            first = Some(path.to_string());
        }
    }
    first
}

/// The VMAs of a process (None = this process).
pub fn read_maps(pid: Option<i32>) -> Result<Vec<Vma>> {
    Ok(parse_maps(&read_proc_names(pid, "maps")?))
}

/// The additive per-VMA counters of `/proc/PID/smaps` that hugetext uses (kB).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SmapsStats {
    /// `Rss`: resident kB (excludes the zero page).
    pub rss_kb: u64,
    /// `Pss`: proportional set size in kB (shared pages divided among sharers).
    pub pss_kb: u64,
    /// `Private_Clean` + `Private_Dirty`: kB mapped by this process only.
    pub private_kb: u64,
    /// `Anonymous`: kB of anonymous pages.
    pub anonymous_kb: u64,
    /// `AnonHugePages`: kB of anonymous memory mapped by PMDs.
    pub anon_huge_kb: u64,
    /// `FilePmdMapped`: kB of page cache mapped by PMDs.
    pub file_pmd_kb: u64,
    /// `ShmemPmdMapped`: kB of shmem mapped by PMDs.
    pub shmem_pmd_kb: u64,
    /// `Shared_Hugetlb` + `Private_Hugetlb` (hugetlbfs pages).
    pub hugetlb_kb: u64,
    /// `KernelPageSize`: the page size the kernel uses for this VMA.
    pub kernel_page_kb: u64,
}

/// Parse the text of `/proc/PID/smaps`.
pub fn parse_smaps(text: &str) -> Vec<(Vma, SmapsStats)> {
    let mut out: Vec<(Vma, SmapsStats)> = Vec::new();
    for line in text.lines() {
        if let Some((key, val)) = line.split_once(':') {
            // Counter lines look like "Rss:   123 kB"; VMA headers start with
            // a hex range and contain ':' only inside the device field.
            if !key.contains(' ') && !key.contains('-') {
                let Some(cur) = out.last_mut() else { continue };
                let v: u64 = val.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                let s = &mut cur.1;
                match key {
                    "Rss" => s.rss_kb = v,
                    "Pss" => s.pss_kb = v,
                    "Private_Clean" | "Private_Dirty" => s.private_kb += v,
                    "Anonymous" => s.anonymous_kb = v,
                    "AnonHugePages" => s.anon_huge_kb = v,
                    "FilePmdMapped" => s.file_pmd_kb = v,
                    "ShmemPmdMapped" => s.shmem_pmd_kb = v,
                    "Shared_Hugetlb" | "Private_Hugetlb" => s.hugetlb_kb += v,
                    "KernelPageSize" => s.kernel_page_kb = v,
                    _ => {}
                }
                continue;
            }
        }
        if let Some(vma) = parse_vma_line(line) {
            out.push((vma, SmapsStats::default()));
        }
    }
    out
}

/// The VMAs of a process with their smaps counters.
pub fn read_smaps(pid: Option<i32>) -> Result<Vec<(Vma, SmapsStats)>> {
    Ok(parse_smaps(&read_proc_names(pid, "smaps")?))
}

/// The `VmFlags` of each VMA of a process (`/proc/PID/smaps`): (start
/// address, the two-letter flags, e.g. `rd ex mr mw me nh`).
pub fn read_vm_flags(pid: Option<i32>) -> Result<Vec<(u64, Vec<String>)>> {
    Ok(parse_vm_flags(&read_proc_names(pid, "smaps")?))
}

/// The `VmFlags` of each VMA in the text of `/proc/PID/smaps` ([`read_vm_flags`]).
pub fn parse_vm_flags(text: &str) -> Vec<(u64, Vec<String>)> {
    let mut out: Vec<(u64, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some(last) = out.last_mut() {
                last.1 = flags.split_whitespace().map(String::from).collect();
            }
        } else if let Some(vma) = parse_vma_line(line) {
            out.push((vma.start, Vec::new()));
        }
    }
    out
}

/// A field of `/proc/PID/status` (e.g. `THP_enabled`), trimmed; `None`
/// when this kernel does not show it. (Its `Name:` may not be UTF-8: use
/// [`read_comm`] for names.)
pub fn status_field(pid: i32, name: &str) -> Result<Option<String>> {
    let path = proc_path(Some(pid), "status");
    let bytes = std::fs::read(&path).map_err(|e| proc_error(Some(pid), &path, e))?;
    Ok(String::from_utf8_lossy(&bytes).lines().find_map(|l| {
        l.split_once(':')
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.trim().to_string())
    }))
}

/// The smaps counters of this process's mapping that starts at `addr`
/// (`None` when no mapping starts there).
pub fn own_mapping_stats(addr: u64) -> Result<Option<SmapsStats>> {
    Ok(read_smaps(None)?
        .into_iter()
        .find(|(v, _)| v.start == addr)
        .map(|(_, s)| s))
}

/// `FilePmdMapped` (kB) of this process's mapping that starts at `addr`
/// (0 when no mapping starts there).
pub fn own_file_pmd_kb(addr: usize) -> Result<u64> {
    Ok(own_mapping_stats(addr as u64)?.map_or(0, |s| s.file_pmd_kb))
}

/// What `/proc/PID/stat` says about a process.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcStat {
    /// Process id.
    pub pid: i32,
    /// Command name (`comm`, at most 15 bytes), as [`escape_name`] writes it.
    pub comm: String,
    /// State letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// Parent process id.
    pub ppid: i32,
    /// Kernel `task->flags`.
    pub flags: u64,
    /// CPU time used in user and kernel mode (`utime` + `stime`), in clock
    /// ticks.
    pub cpu_ticks: u64,
    /// When the process started, in clock ticks after boot (`starttime`):
    /// with the pid, names one process even when its pid is reused.
    pub start_time: u64,
}

/// `PF_KTHREAD`: the task is a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

impl ProcStat {
    /// A kernel thread (no user address space).
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// A zombie (exited, not yet reaped: no address space).
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z' || self.state == 'X'
    }
}

/// Read `/proc/PID/stat`.
pub fn read_stat(pid: i32) -> Result<ProcStat> {
    let text = read_proc_names(Some(pid), "stat")?;
    // comm is in parentheses and may itself contain ") ": split at the last.
    let open = text.find('(');
    let close = text.rfind(')');
    let (Some(open), Some(close)) = (open, close) else {
        return Err(Error::Other(format!("/proc/{pid}/stat: unexpected format")));
    };
    let comm = text[open + 1..close].to_string();
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // After comm: state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8) flags(9).
    let state = fields.first().and_then(|s| s.chars().next()).unwrap_or('?');
    let ppid = fields.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let flags = fields.get(6).and_then(|s| s.parse().ok()).unwrap_or(0);
    // utime(14) stime(15).
    let tick = |i: usize| fields.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    Ok(ProcStat {
        pid,
        comm,
        state,
        ppid,
        flags,
        cpu_ticks: tick(11) + tick(12),
        // starttime(22).
        start_time: tick(19),
    })
}

/// All process ids in `/proc`, sorted.
pub fn all_pids() -> Result<Vec<i32>> {
    let rd = std::fs::read_dir("/proc").map_err(|e| Error::io("/proc", e))?;
    let mut pids: Vec<i32> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// `root` and all its live descendants, parents before children
/// (processes that vanish while being read are left out).
pub fn descendants(root: i32) -> Vec<i32> {
    let mut children: std::collections::HashMap<i32, Vec<i32>> = std::collections::HashMap::new();
    for st in all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| read_stat(p).ok())
    {
        children.entry(st.ppid).or_default().push(st.pid);
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

/// The command name of a process (`/proc/PID/comm`, at most 15 bytes), as
/// [`escape_name`] writes it.
fn read_comm(pid: i32) -> Result<String> {
    Ok(read_proc_names(Some(pid), "comm")?.trim_end_matches('\n').to_string())
}

/// The path of a process's executable (`/proc/PID/exe`), as [`escape_name`]
/// writes it; `None` when it cannot be read (a kernel thread, no permission).
pub fn read_exe(pid: i32) -> Option<String> {
    std::fs::read_link(proc_path(Some(pid), "exe"))
        .ok()
        .map(|p| path_name(&p))
}

/// The processes whose address space maps the file with device `dev` and
/// inode `ino` (from `/proc/*/maps`), sorted. Processes that vanish or cannot
/// be read are skipped.
fn pids_mapping(dev: u64, ino: u64) -> Vec<i32> {
    pids_mapping_real(dev, ino, None)
}

/// [`pids_mapping`], and where `real` is given, also the processes that map
/// the inode through another device with the same inode number whose real
/// inode ([`real_inode`] of `/proc/PID/map_files/…`) is `real`: the same
/// image file seen through each container's own overlayfs mount (each has
/// its own device number; the inode number is the layer's).
fn pids_mapping_real(dev: u64, ino: u64, real: Option<&RealInode>) -> Vec<i32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|&pid| {
            read_maps(Some(pid)).is_ok_and(|vmas| {
                vmas.iter().filter(|v| v.inode == ino).any(|v| {
                    (v.dev_major == major && v.dev_minor == minor)
                        || real.is_some_and(|r| {
                            real_inode_of_path(Path::new(&format!("/proc/{pid}/map_files/{:x}-{:x}", v.start, v.end)))
                                .as_ref()
                                == Some(r)
                        })
                })
            })
        })
        .collect()
}

/// Whether process `pid` has another root directory than this process (a
/// container, a chroot): paths in its maps then name files under
/// `/proc/PID/root`. False when that cannot be told.
pub fn other_root(pid: i32) -> bool {
    match (
        std::fs::metadata(format!("/proc/{pid}/root")),
        std::fs::metadata("/proc/self/root"),
    ) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) != (b.dev(), b.ino()),
        _ => false,
    }
}

/// The inode that holds a file's page cache, as a file handle
/// (`name_to_handle_at` with `AT_HANDLE_FID`, which every filesystem
/// gives): on overlayfs the handle of the upper or lower layer's inode that
/// overlayfs encodes in its own, so every container's mount of one image
/// layer names the same inode; elsewhere the file's own handle. Handles are
/// compared only between files of the same inode number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealInode {
    /// The handle type (`FILEID_*`) of the real inode's filesystem.
    pub handle_type: i32,
    /// The handle's bytes.
    pub handle: Vec<u8>,
}

/// overlayfs' own handle type (`OVL_FILEID_V1`).
const OVL_FILEID_V1: i32 = 0xf8;
/// The magic byte of an overlayfs handle (`OVL_FH_MAGIC`).
const OVL_FH_MAGIC: u8 = 0xfb;

/// [`RealInode`] of the file at `path` (links followed: a
/// `/proc/PID/map_files/…` link names the mapped inode). None when the
/// filesystem or the kernel gives no handle.
pub fn real_inode_of_path(path: &Path) -> Option<RealInode> {
    handle_at(libc::AT_FDCWD, path.as_os_str().as_bytes(), libc::AT_SYMLINK_FOLLOW)
}

/// [`RealInode`] of the open file `f`.
pub fn real_inode(f: &std::fs::File) -> Option<RealInode> {
    use std::os::fd::AsRawFd;
    handle_at(f.as_raw_fd(), b"", libc::AT_EMPTY_PATH)
}

fn handle_at(dirfd: i32, path: &[u8], flags: i32) -> Option<RealInode> {
    const AT_HANDLE_FID: i32 = 0x200;
    const MAX: usize = 128;
    let c = std::ffi::CString::new(path).ok()?;
    // struct file_handle: u32 handle_bytes, i32 handle_type, bytes.
    let mut buf = [0u32; 2 + MAX / 4];
    buf[0] = MAX as u32;
    let mut mnt: i32 = 0;
    // SAFETY: buf is a file_handle with room for MAX bytes, as handle_bytes says.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            dirfd,
            c.as_ptr(),
            buf.as_mut_ptr(),
            &mut mnt as *mut i32,
            flags | AT_HANDLE_FID,
        )
    };
    if r != 0 {
        return None;
    }
    let len = (buf[0] as usize).min(MAX);
    let handle_type = buf[1] as i32;
    let bytes: Vec<u8> = buf[2..].iter().flat_map(|w| w.to_ne_bytes()).take(len).collect();
    Some(overlay_real(handle_type, bytes))
}

/// The real inode an overlayfs handle encodes (`struct ovl_fh`: three
/// bytes of padding, then version, magic, length, flags, the real handle's
/// type, the real filesystem's UUID and the real handle); any other handle
/// as it is. Pure.
pub fn overlay_real(handle_type: i32, bytes: Vec<u8>) -> RealInode {
    const HEAD: usize = 3 + 5 + 16;
    if handle_type == OVL_FILEID_V1 && bytes.len() > HEAD && bytes[4] == OVL_FH_MAGIC {
        let len = (bytes[5] as usize + 3).min(bytes.len());
        if len > HEAD {
            return RealInode {
                handle_type: bytes[7] as i32,
                handle: bytes[HEAD..len].to_vec(),
            };
        }
    }
    RealInode {
        handle_type,
        handle: bytes,
    }
}

/// A mapped file as `/proc/PID/maps` names it: (device major, device minor, inode).
pub type MapsKey = (u32, u32, u64);

/// For each file of `files`, the processes other than this one that map it
/// ([`mapping_pids_of`] for many files at once): one pass over every
/// process's maps, however many files are asked about. Files nobody maps
/// are absent.
pub fn mapping_pids_many(
    files: &std::collections::HashSet<MapsKey>,
) -> std::collections::HashMap<MapsKey, Vec<ProcRef>> {
    let mut pids: std::collections::HashMap<MapsKey, Vec<i32>> = Default::default();
    if files.is_empty() {
        return Default::default();
    }
    for pid in all_pids().unwrap_or_default() {
        let Ok(vmas) = read_maps(Some(pid)) else { continue };
        for v in vmas {
            let key = (v.dev_major, v.dev_minor, v.inode);
            if v.inode != 0 && files.contains(&key) {
                let list = pids.entry(key).or_default();
                if list.last() != Some(&pid) {
                    list.push(pid);
                }
            }
        }
    }
    // Names read once per process, not once per file it maps.
    let mut comms: std::collections::HashMap<i32, ProcRef> = Default::default();
    pids.into_iter()
        .map(|(key, list)| {
            let refs = list
                .into_iter()
                .filter(|&pid| pid != std::process::id() as i32)
                .map(|pid| {
                    comms
                        .entry(pid)
                        .or_insert_with(|| ProcRef {
                            pid,
                            comm: read_comm(pid).unwrap_or_default(),
                        })
                        .clone()
                })
                .collect();
            (key, refs)
        })
        .collect()
}

/// One open file descriptor of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFd {
    /// The descriptor number.
    pub fd: i32,
    /// Its open flags (`flags:` of `/proc/PID/fdinfo/FD`; 0 if unreadable).
    pub flags: u32,
}

impl OpenFd {
    /// Open for writing (`O_WRONLY` or `O_RDWR`).
    pub fn writable(&self) -> bool {
        self.flags as i32 & libc::O_ACCMODE != libc::O_RDONLY
    }
}

/// The descriptors of process `pid` that refer to the file with device `dev`
/// and inode `ino` (from `/proc/PID/fd` and `fdinfo`). Empty when the process
/// vanished or cannot be read.
fn fds_on(pid: i32, dev: u64, ino: u64) -> Vec<OpenFd> {
    let Ok(rd) = std::fs::read_dir(proc_path(Some(pid), "fd")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let Ok(m) = std::fs::metadata(ent.path()) else { continue };
        if m.dev() != dev || m.ino() != ino {
            continue;
        }
        let Some(fd) = ent.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let flags = read_proc(Some(pid), &format!("fdinfo/{fd}"))
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            })
            .unwrap_or(0);
        out.push(OpenFd { fd, flags });
    }
    out
}

/// A field of `/proc/meminfo` (given without the colon, e.g. `MemAvailable`),
/// in bytes.
fn meminfo(field: &str) -> Result<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").map_err(|e| Error::io("/proc/meminfo", e))?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| Error::Other(format!("/proc/meminfo has no {field} line")))
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available() -> Result<u64> {
    meminfo("MemAvailable")
}

/// All process ids in the cgroup at `path` and its descendants (cgroup v1 or
/// v2: both have `cgroup.procs` in every cgroup directory), sorted.
pub fn cgroup_pids(path: &Path) -> Result<Vec<i32>> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::Invalid(format!(
            "cgroup {}: {e} (give a directory under /sys/fs/cgroup)",
            path.display()
        ))
    })?;
    if !meta.is_dir() || !path.join("cgroup.procs").exists() {
        return Err(Error::Invalid(format!(
            "{} is not a cgroup directory (it has no cgroup.procs; give a directory under /sys/fs/cgroup)",
            path.display()
        )));
    }
    let mut pids = BTreeSet::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let procs = dir.join("cgroup.procs");
        match std::fs::read_to_string(&procs) {
            Ok(text) => pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
            // A child cgroup removed while we walk: nothing to count.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&procs, e)),
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for ent in rd.flatten() {
                if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(ent.path());
                }
            }
        }
    }
    Ok(pids.into_iter().collect())
}

// ---------------------------------------------------------------------------
// Who maps a file

/// A process that maps (or has open) a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct ProcRef {
    /// Process id.
    pub pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
}

/// The processes (other than this one) that map the file with device `dev`
/// and inode `ino`, from `/proc/*/maps` ([`pids_mapping`]).
/// Processes that vanish or cannot be read are skipped.
pub fn mapping_pids_of(dev: u64, ino: u64) -> Vec<ProcRef> {
    proc_refs(pids_mapping(dev, ino))
}

/// The device number `/proc/PID/maps` shows for `f`: the superblock's.
/// On most filesystems it is `st_dev`; on btrfs `stat` reports the
/// subvolume's anonymous device instead, so a file's `st_dev` never matches
/// the maps lines of the processes that map it. Learnt by mapping the
/// file's first page and reading this process's own maps; `st_dev` when the
/// file cannot be mapped (it is empty).
pub fn maps_dev(f: &std::fs::File) -> std::io::Result<u64> {
    use std::os::fd::AsFd;
    let st_dev = f.metadata()?.dev();
    let ps = crate::kernel::page_size();
    let Ok(m) = crate::kernel::Mapping::file_congruent(f.as_fd(), 0, ps, libc::PROT_READ, ps) else {
        return Ok(st_dev);
    };
    let vmas = read_maps(None).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(vmas
        .iter()
        .find(|v| v.start == m.addr() as u64)
        .map_or(st_dev, |v| libc::makedev(v.dev_major, v.dev_minor)))
}

/// The processes that map the open file `f`. The device is the one maps
/// lines show ([`maps_dev`]; on btrfs not `st_dev`).
///
/// Processes that map the same inode through another device are found too
/// when their file's real inode is this one's ([`real_inode`]): the file of
/// an image layer, opened through one container's root (or as the layer's
/// own file on the host), is mapped by every container of that image, each
/// through its own overlayfs mount.
pub fn mapping_pids_file(f: &std::fs::File) -> std::io::Result<Vec<ProcRef>> {
    let ino = f.metadata()?.ino();
    let dev = maps_dev(f)?;
    let real = real_inode(f);
    Ok(proc_refs(pids_mapping_real(dev, ino, real.as_ref())))
}

/// The processes (other than this one) holding the file open for writing
/// ([`fds_on`]).
pub fn writer_pids_of(dev: u64, ino: u64) -> Vec<ProcRef> {
    let pids = all_pids().unwrap_or_default();
    proc_refs(
        pids.into_iter()
            .filter(|&pid| fds_on(pid, dev, ino).iter().any(OpenFd::writable)),
    )
}

/// `pids` other than this process, with their command names.
fn proc_refs(pids: impl IntoIterator<Item = i32>) -> Vec<ProcRef> {
    let me = std::process::id() as i32;
    pids.into_iter()
        .filter(|&pid| pid != me)
        .map(|pid| ProcRef {
            pid,
            comm: read_comm(pid).unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn overlay_handles_name_the_layer_inode() {
        // An overlayfs handle of a lower-layer file on ext4 (as 6.18 gives
        // it): the real handle is ext4's FILEID_INO32_GEN one inside.
        let mut b = vec![0, 0, 0, 0, 0xfb, 29, 0, 1];
        b.extend([0u8; 16]);
        b.extend([0x83, 0xc0, 0x18, 0x00, 0xba, 0x82, 0x97, 0x9a]);
        let r = overlay_real(0xf8, b);
        assert_eq!(r.handle_type, 1);
        assert_eq!(r.handle, vec![0x83, 0xc0, 0x18, 0x00, 0xba, 0x82, 0x97, 0x9a]);
        // Any other handle is its own.
        assert_eq!(overlay_real(1, vec![1, 2]).handle, vec![1, 2]);
        let me = real_inode(&std::fs::File::open("/proc/self/exe").unwrap());
        assert!(me.is_some_and(|r| !r.handle.is_empty()));
    }

    #[test]
    fn cgroup_of_self_and_of_nobody() {
        let cg = cgroup_of(std::process::id() as i32).unwrap();
        assert!(cg.starts_with('/'), "{cg}");
        assert_eq!(cgroup_of(i32::MAX), None);
    }

    use super::*;

    #[test]
    fn parses_real_maps_of_self() {
        let vmas = read_maps(None).unwrap();
        assert!(vmas.iter().any(|v| v.is_exec() && v.is_file()), "{vmas:?}");
        assert!(vmas.iter().any(|v| v.path == "[stack]"));
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(vmas.iter().any(|v| Path::new(&v.path) == exe && v.is_exec()));
        for v in &vmas {
            assert!(v.start < v.end);
        }
    }

    #[test]
    fn names_are_escaped_losslessly() {
        for (raw, shown) in [
            (&b"sleep"[..], "sleep"),
            (b"/usr/lib/caf\xc3\xa9", "/usr/lib/caf\u{e9}"),
            (b"bad\xff\xfe", "bad\\xff\\xfe"),
            (b"a\\xff", "a\\\\xff"),
            (b"tab\tesc\x1b\xc2\x9b", "tab\\x09esc\\x1b\\xc2\\x9b"),
            (b"", ""),
        ] {
            assert_eq!(escape_name(raw), shown);
            assert_eq!(name_bytes(shown), raw, "{shown}");
        }
        assert_eq!(name_path("bad\\xff").as_os_str().as_bytes(), b"bad\xff");
        // Text that escape_name cannot have written is taken as it stands.
        assert_eq!(name_bytes("a\\xZZ\\"), b"a\\xZZ\\");
    }

    #[test]
    fn a_process_named_in_bytes_that_are_not_utf8_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join(OsString::from_vec(b"bad\xff\xfe".to_vec()));
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let mut child = std::process::Command::new(&exe).arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let mut seen = None;
        for _ in 0..400 {
            let maps = read_maps(Some(pid)).unwrap();
            if let Some(v) = maps.iter().find(|v| v.is_exec() && v.path.ends_with("\\xff\\xfe")) {
                seen = Some(v.file_path());
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (comm, stat, exe_name) = (read_comm(pid).unwrap(), read_stat(pid).unwrap(), read_exe(pid));
        let smaps = read_smaps(Some(pid)).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(seen.as_deref(), Some(exe.as_path()));
        assert_eq!(comm, "bad\\xff\\xfe");
        assert_eq!(stat.comm, comm);
        assert_eq!(exe_name.map(|e| name_path(&e)), Some(exe.clone()));
        assert!(smaps.iter().any(|(v, _)| v.file_path() == exe));
    }

    #[test]
    fn parses_paths_with_spaces_and_no_path() {
        let v = parse_vma_line("7f00-7f10 r-xp 00001000 08:01 1234     /tmp/a b (deleted)").unwrap();
        assert_eq!(v.path, "/tmp/a b (deleted)");
        assert_eq!((v.start, v.end, v.offset, v.inode), (0x7f00, 0x7f10, 0x1000, 1234));
        assert!(v.is_exec() && v.perms.as_bytes().get(3) == Some(&b'p'));
        let a = parse_vma_line("7f00-7f10 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(a.path, "");
        assert!(!a.is_file());
    }

    #[test]
    fn smaps_of_self_has_counters() {
        let s = read_smaps(None).unwrap();
        assert!(s.iter().map(|(_, st)| st.rss_kb).sum::<u64>() > 0);
        assert!(s.iter().all(|(_, st)| st.kernel_page_kb > 0));
        // One smaps entry per maps line. Compared on a sleeping child: this
        // process's own map changes while other test threads run.
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let key = |v: &[Vma]| v.iter().map(|m| (m.start, m.end, m.path.clone())).collect::<Vec<_>>();
        // The child maps its libraries after exec: compare once its map is
        // the same before and after the smaps read.
        let (mut smaps, mut maps) = (Vec::new(), Vec::new());
        for _ in 0..400 {
            let before = read_maps(Some(pid)).unwrap();
            smaps = read_smaps(Some(pid)).unwrap();
            maps = read_maps(Some(pid)).unwrap();
            if key(&before) == key(&maps) && maps.iter().any(|m| m.path.ends_with("/sleep")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!maps.is_empty());
        assert_eq!(smaps.len(), maps.len());
        for ((a, _), b) in smaps.iter().zip(&maps) {
            assert_eq!((a.start, a.end, &a.path), (b.start, b.end, &b.path));
        }
    }

    #[test]
    fn smaps_private_and_pss_of_own_anonymous_mapping() {
        let len = 1 << 20;
        let mut v = vec![1u8; len];
        v[len - 1] = 2;
        let addr = v.as_ptr() as u64;
        let all = read_smaps(None).unwrap();
        let (vma, s) = all.iter().find(|(m, _)| m.start <= addr && addr < m.end).unwrap();
        assert!(
            s.private_kb >= (len as u64 / 1024) / 2 && s.private_kb <= s.rss_kb,
            "{s:?}"
        );
        assert!(s.pss_kb >= s.private_kb && s.pss_kb <= s.rss_kb, "{s:?}");
        let again = own_mapping_stats(vma.start)
            .unwrap()
            .expect("the mapping is still there");
        assert!(again.private_kb >= (len as u64 / 1024) / 2, "{again:?}");
        assert_eq!(own_mapping_stats(1).unwrap(), None);
    }

    #[test]
    fn who_maps_and_who_writes_a_file() {
        let exe = std::env::current_exe().unwrap();
        let m = std::fs::metadata(&exe).unwrap();
        let me = std::process::id() as i32;
        assert!(pids_mapping(m.dev(), m.ino()).contains(&me));
        assert!(fds_on(me, m.dev(), m.ino()).is_empty());
        let scratch = tempfile::Builder::new().tempfile_in(exe.parent().unwrap()).unwrap();
        let sm = scratch.as_file().metadata().unwrap();
        let fds = fds_on(me, sm.dev(), sm.ino());
        assert!(!fds.is_empty() && fds.iter().all(OpenFd::writable), "{fds:?}");
        assert!(!pids_mapping(sm.dev(), sm.ino()).contains(&me));
        let ro = std::fs::File::open(scratch.path()).unwrap();
        use std::os::fd::AsRawFd;
        assert!(fds_on(me, sm.dev(), sm.ino())
            .iter()
            .any(|f| f.fd == ro.as_raw_fd() && !f.writable()));
    }

    #[test]
    fn meminfo_and_comm() {
        let avail = mem_available().unwrap();
        assert!(avail > 0 && avail < meminfo("MemTotal").unwrap());
        assert!(meminfo("NoSuchField")
            .unwrap_err()
            .to_string()
            .contains("no NoSuchField line"));
        let me = std::process::id() as i32;
        assert_eq!(read_comm(me).unwrap(), read_stat(me).unwrap().comm);
    }

    #[test]
    fn stat_of_self_and_kthreadd() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert!(!me.is_kernel_thread() && !me.is_zombie());
        // pid 2 is kthreadd on a normal system; in a pid namespace it may not exist.
        if let Ok(k) = read_stat(2) {
            if k.comm == "kthreadd" {
                assert!(k.is_kernel_thread());
            }
        }
        assert!(matches!(read_stat(i32::MAX), Err(Error::NoProcess(_))));
    }
}
