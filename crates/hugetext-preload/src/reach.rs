//! At exec, in a followed launcher: can the program about to start reach
//! anything hugetext does (`hugetext_abi::reach`)? Its file and its
//! libraries' files are read here, before the exec, with raw system calls
//! into one 4 KiB buffer on the stack (no allocation: this runs in a
//! child of `vfork` too). A program that cannot (no text of a window's
//! size, and nothing it links starts a program or loads code: `date`,
//! `expr`, `cut` in a launcher script) starts without the preload and the
//! audit module: its environment is the launcher's, as clean as without
//! hugetext. Anything not understood, missing or too large to judge here
//! answers "it may reach", which is what following costs, no more.

use core::ffi::{c_char, c_int, CStr};

use hugetext_abi::reach::{self, Head};

use crate::sys;

/// What is about to be exec'd.
#[derive(Clone, Copy)]
pub enum Target {
    /// A path (`execve`, `execv`, `posix_spawn`).
    Path(*const c_char),
    /// A file name looked up in `PATH` when it has no `/` (`execvp`,
    /// `execvpe`, `posix_spawnp`).
    Search(*const c_char),
    /// An open file (`fexecve`).
    Fd(c_int),
    /// A shell (`system`, `popen`): it may reach.
    Shell,
}

/// At most this many objects (the program and its libraries) are judged;
/// more, and the program may reach.
const MAX_OBJECTS: usize = 16;
/// A string table larger than this is not read (libstdc++'s is 300 KiB,
/// a helper's a few KiB).
const MAX_STRTAB: u64 = 256 << 10;
/// Paths longer than this are not judged.
const PATH_LEN: usize = 256;

/// The libraries still to judge, and the names already met.
struct Work {
    paths: [[u8; PATH_LEN]; MAX_OBJECTS],
    queued: usize,
    names: [u64; MAX_OBJECTS * 4],
    n_names: usize,
    /// `/etc/ld.so.cache` mapped (address, length), once needed.
    cache: Option<(usize, usize)>,
    /// The program's `DT_RPATH` (searched for libraries without
    /// `DT_RUNPATH`, as the loader does), NUL-terminated; empty if none.
    exe_rpath: [u8; PATH_LEN],
    exe_dir: [u8; PATH_LEN],
}

/// Read up to `buf.len()` bytes at `off`; the bytes read.
fn pread(fd: i32, buf: &mut [u8], off: u64) -> Option<&[u8]> {
    // SAFETY: `buf` is ours, writable, for its length.
    let n = unsafe { sys::pread(fd, buf.as_mut_ptr() as usize, buf.len(), off) };
    (n >= 0).then(|| &buf[..n as usize])
}

/// `path` (no NUL) as a NUL-terminated string in `out`.
fn c_path<'a>(out: &'a mut [u8; 512], parts: &[&[u8]]) -> Option<&'a [u8]> {
    let mut n = 0;
    for p in parts {
        out.get_mut(n..n + p.len())?.copy_from_slice(p);
        n += p.len();
    }
    *out.get_mut(n)? = 0;
    Some(&out[..=n])
}

/// Open for reading; never waits (a FIFO put where a library or the
/// program is looked for opens at once, and is then not a regular file).
fn open_ro(path: &[u8]) -> Option<i32> {
    let fd = sys::open(path, libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK, 0);
    (fd >= 0).then_some(fd as i32)
}

/// A regular file with an execute bit, as `execvp` looks for.
fn open_program(path: &[u8]) -> Option<i32> {
    let fd = open_ro(path)?;
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    if sys::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_mode & 0o111 != 0 {
        return Some(fd);
    }
    sys::close(fd);
    None
}

/// What the environment the program gets says about its loading.
pub struct Loading<'a> {
    /// `LD_LIBRARY_PATH`.
    pub library_path: Option<&'a [u8]>,
    /// `LD_PRELOAD` or `LD_AUDIT` names libraries of the caller's own.
    pub own_preload: bool,
    /// The caller's `PATH` (for [`Target::Search`]).
    pub path: Option<&'a [u8]>,
}

/// Can the program `target` reach what the preload does, loaded as
/// `loading` says? True unless judged that it cannot.
///
/// # Safety
/// `target`'s pointer is a NUL-terminated string.
pub unsafe fn may_reach(target: Target, loading: &Loading<'_>) -> bool {
    // Libraries preloaded into every process: the user's own, or the
    // system's (/etc/ld.so.preload), are not judged here.
    if loading.own_preload || exists(b"/etc/ld.so.preload\0") {
        return true;
    }
    let mut w = Work {
        paths: [[0; PATH_LEN]; MAX_OBJECTS],
        queued: 0,
        names: [0; MAX_OBJECTS * 4],
        n_names: 0,
        cache: None,
        exe_rpath: [0; PATH_LEN],
        exe_dir: [0; PATH_LEN],
    };
    let reaches = judge_all(&mut w, target, loading.library_path, loading.path);
    if let Some((addr, len)) = w.cache {
        // SAFETY: our own mapping of the cache, which nothing refers to.
        unsafe { sys::munmap(addr, len) };
    }
    reaches
}

/// [`may_reach`]'s work: true when the program may reach.
fn judge_all(w: &mut Work, target: Target, library_path: Option<&[u8]>, path_env: Option<&[u8]>) -> bool {
    let mut buf = [0u8; 4096];
    let mut scratch = [0u8; 512];
    // The program.
    let (fd, owned) = match target {
        Target::Shell => return true,
        Target::Fd(fd) => (fd, false),
        Target::Path(p) | Target::Search(p) => {
            if p.is_null() {
                return true;
            }
            // SAFETY: the caller's contract: a NUL-terminated string.
            let name = unsafe { CStr::from_ptr(p) }.to_bytes();
            let found = if matches!(target, Target::Search(_)) && !name.contains(&b'/') {
                search_path(name, path_env.unwrap_or(b"/bin:/usr/bin"), &mut scratch)
            } else {
                c_path(&mut scratch, &[name]).and_then(|c| Some((open_program(c)?, c.len() - 1)))
            };
            let Some((fd, len)) = found else { return true };
            let dir = scratch[..len].rsplitn(2, |&c| c == b'/').nth(1).unwrap_or(b".");
            if dir.len() >= PATH_LEN {
                sys::close(fd);
                return true;
            }
            w.exe_dir[..dir.len()].copy_from_slice(dir);
            w.exe_dir[dir.len()] = 0;
            (fd, true)
        }
    };
    let r = judge(w, fd, true, None, library_path, &mut buf, &mut scratch);
    if owned {
        sys::close(fd);
    }
    if r {
        return true;
    }
    // Its libraries, each once.
    let mut i = 0;
    while i < w.queued {
        let path = w.paths[i];
        let len = path.iter().position(|&c| c == 0).unwrap_or(0);
        let Some(fd) = open_ro(&path[..=len]) else { return true };
        let r = judge(w, fd, false, Some(&path[..len]), library_path, &mut buf, &mut scratch);
        sys::close(fd);
        if r {
            return true;
        }
        i += 1;
    }
    false
}

/// Find `name` in the `:`-separated `path_env` as `execvp` does: the
/// open file and the length of its path (left in `out`).
fn search_path(name: &[u8], path_env: &[u8], out: &mut [u8; 512]) -> Option<(i32, usize)> {
    for dir in path_env.split(|&c| c == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        if let Some(c) = c_path(out, &[dir, b"/", name]) {
            let len = c.len() - 1;
            if let Some(fd) = open_program(c) {
                return Some((fd, len));
            }
        }
    }
    None
}

/// Judge one object (open as `fd`; `path` for a library, whose directory
/// is its `$ORIGIN`): true when it may reach. Its libraries are queued.
fn judge(
    w: &mut Work,
    fd: i32,
    exe: bool,
    path: Option<&[u8]>,
    library_path: Option<&[u8]>,
    buf: &mut [u8; 4096],
    scratch: &mut [u8; 512],
) -> bool {
    let Some(b) = pread(fd, buf, 0) else { return true };
    let elf = match reach::head(b, reach::MACHINE, exe) {
        Head::Reaches(_) => return true,
        Head::Elf(e) => e,
    };
    let Some((dyn_off, dyn_size)) = elf.dynamic else {
        return true;
    };
    let len = (dyn_size as usize).min(buf.len());
    let Some(d) = pread(fd, &mut buf[..len], dyn_off).and_then(reach::dynamic) else {
        return true;
    };
    let Some(strtab) = elf.offset_of(d.strtab, d.strsz) else {
        return true;
    };
    if d.strsz > MAX_STRTAB {
        return true;
    }
    // The names it imports (or defines), in chunks that end at a NUL.
    let mut at = 0u64;
    while at < d.strsz {
        let n = ((d.strsz - at) as usize).min(buf.len());
        let Some(chunk) = pread(fd, &mut buf[..n], strtab + at) else {
            return true;
        };
        if chunk.is_empty() {
            return true;
        }
        let end = if at + (chunk.len() as u64) < d.strsz {
            match chunk.iter().rposition(|&c| c == 0) {
                Some(i) => i + 1,
                None => return true, // one name longer than the buffer
            }
        } else {
            chunk.len()
        };
        if reach::names_any(&chunk[..end], reach::STARTS) {
            return true;
        }
        at += end as u64;
    }
    // Where its libraries are looked for.
    let mut runpath = [0u8; PATH_LEN];
    let mut rpath = [0u8; PATH_LEN];
    let string = |off: Option<u32>, out: &mut [u8; PATH_LEN]| -> Option<usize> {
        let Some(off) = off else { return Some(0) };
        let s = pread(fd, out, strtab + off as u64)?;
        s.iter().position(|&c| c == 0)
    };
    let (Some(runpath_len), Some(rpath_len)) = (string(d.runpath, &mut runpath), string(d.rpath, &mut rpath)) else {
        return true;
    };
    if exe && d.runpath.is_none() {
        w.exe_rpath[..=rpath_len].copy_from_slice(&rpath[..=rpath_len]);
    }
    // `$ORIGIN`: the object's directory (the program's, kept at start).
    let mut origin_buf = [0u8; PATH_LEN];
    let origin_len = match path {
        Some(p) => {
            let dir = p.rsplitn(2, |&c| c == b'/').nth(1).unwrap_or(b".");
            origin_buf[..dir.len()].copy_from_slice(dir);
            dir.len()
        }
        None => {
            origin_buf = w.exe_dir;
            w.exe_dir.iter().position(|&c| c == 0).unwrap_or(0)
        }
    };
    let origin = &origin_buf[..origin_len];
    for i in 0..d.n_needed {
        let mut name = [0u8; PATH_LEN];
        let Some(s) = pread(fd, &mut name, strtab + d.needed[i] as u64) else {
            return true;
        };
        let Some(n) = s.iter().position(|&c| c == 0) else {
            return true;
        };
        let name = &name[..n];
        if reach::is_c_library(name) {
            continue;
        }
        let h = hugetext_abi::env::fnv1a(name);
        if w.names[..w.n_names].contains(&h) {
            continue;
        }
        if w.n_names == w.names.len() || w.queued == MAX_OBJECTS {
            return true;
        }
        w.names[w.n_names] = h;
        w.n_names += 1;
        let exe_rpath_len = w.exe_rpath.iter().position(|&c| c == 0).unwrap_or(0);
        let exe_rpath = w.exe_rpath;
        let dirs: [(&[u8], &[u8]); 4] = [
            (if runpath_len == 0 { &rpath[..rpath_len] } else { b"" }, origin),
            (
                if runpath_len == 0 {
                    &exe_rpath[..exe_rpath_len]
                } else {
                    b""
                },
                b"",
            ),
            (library_path.unwrap_or(b""), b""),
            (&runpath[..runpath_len], origin),
        ];
        let Some(found) = find_library(w, name, &dirs, d.nodeflib, scratch) else {
            return true; // not found, or a token not expanded here
        };
        if found >= PATH_LEN {
            return true;
        }
        let slot = w.queued;
        w.paths[slot][..found].copy_from_slice(&scratch[..found]);
        w.paths[slot][found] = 0;
        w.queued += 1;
    }
    false
}

/// The loader's search for the library file `name` (the directory lists
/// `dirs` with their `$ORIGIN`, then unless `nodeflib` the cache and the
/// default directories): the length of its path, left in `out`. `None`
/// when not found, or a list holds a token other than `$ORIGIN`.
fn find_library(
    w: &mut Work,
    name: &[u8],
    dirs: &[(&[u8], &[u8])],
    nodeflib: bool,
    out: &mut [u8; 512],
) -> Option<usize> {
    if name.contains(&b'/') {
        let c = c_path(out, &[name])?;
        return exists(c).then_some(c.len() - 1);
    }
    for &(list, origin) in dirs {
        for dir in list.split(|&c| c == b':').filter(|d| !d.is_empty()) {
            let token = dir.strip_prefix(b"$ORIGIN").or_else(|| dir.strip_prefix(b"${ORIGIN}"));
            let (head, rest): (&[u8], &[u8]) = if let Some(r) = token {
                if origin.is_empty() {
                    return None; // fexecve: the program's directory is not known
                }
                (origin, r)
            } else if dir.contains(&b'$') {
                return None;
            } else {
                (b"", dir)
            };
            if let Some(c) = c_path(out, &[head, rest, b"/", name]) {
                if exists(c) {
                    return Some(c.len() - 1);
                }
            }
        }
    }
    if nodeflib {
        return None;
    }
    if w.cache.is_none() {
        w.cache = Some(map_cache().unwrap_or((0, 0)));
    }
    if let Some((addr, len)) = w.cache.filter(|c| c.0 != 0) {
        // SAFETY: our read-only mapping of the cache, `len` bytes.
        let data = unsafe { core::slice::from_raw_parts(addr as *const u8, len) };
        let mut hit = None;
        reach::cache_paths(data, name, reach::CACHE_FLAGS, |p| {
            let ok = c_path(out, &[p]).is_some_and(exists);
            if ok {
                hit = Some(p.len());
            }
            ok
        });
        if hit.is_some() {
            return hit;
        }
    }
    for dir in reach::DEFAULT_DIRS {
        if let Some(c) = c_path(out, &[dir.as_bytes(), b"/", name]) {
            if exists(c) {
                return Some(c.len() - 1);
            }
        }
    }
    None
}

fn exists(c: &[u8]) -> bool {
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    sys::stat(c, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// `/etc/ld.so.cache`, mapped read-only: (address, length).
fn map_cache() -> Option<(usize, usize)> {
    let fd = open_ro(b"/etc/ld.so.cache\0")?;
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    let len = if sys::fstat(fd, &mut st) == 0 {
        st.st_size as usize
    } else {
        0
    };
    let addr = if len > 0 && len < 64 << 20 {
        sys::mmap(len, libc::PROT_READ, libc::MAP_PRIVATE, fd, 0)
    } else {
        -1
    };
    sys::close(fd);
    (addr >= 0).then_some((addr as usize, len))
}
