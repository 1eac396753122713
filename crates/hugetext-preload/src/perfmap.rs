//! `/tmp/perf-PID.map` entries for text moved to anonymous memory, so that
//! `perf report` still names the functions (perf reads this file for
//! samples in anonymous executable memory). Symbols come from the ELF file's
//! `.symtab` (or `.dynsym` when stripped), read through a private read-only
//! mapping of the file before the text is moved.

use crate::out::Out;
use crate::sys;

fn u16_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?) as u64)
}
fn u32_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?) as u64)
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// A read-only private mapping of a whole ELF file.
pub struct ElfFile {
    base: usize,
    len: usize,
}

impl ElfFile {
    /// Map the file open on `fd` (the caller keeps ownership of `fd`).
    pub fn map(fd: i32) -> Result<ElfFile, isize> {
        // SAFETY: zero is a valid `stat`.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        let r = sys::fstat(fd, &mut st);
        if r < 0 {
            return Err(r);
        }
        let len = st.st_size as usize;
        if len < 64 {
            return Err(-(libc::ENOEXEC as isize));
        }
        let base = sys::mmap(len, libc::PROT_READ, libc::MAP_PRIVATE, fd, 0);
        if base < 0 {
            return Err(base);
        }
        Ok(ElfFile {
            base: base as usize,
            len,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `base..base+len` is our private read-only mapping, alive
        // until drop. (A concurrent truncation of the file would SIGBUS, like
        // for any mapped file; binaries in use are not truncated in place.)
        unsafe { core::slice::from_raw_parts(self.base as *const u8, self.len) }
    }

    /// Load bias for the mapping that maps file offset `off` at address
    /// `addr`: the PT_LOAD holding that offset gives its vaddr.
    pub fn bias(&self, addr: usize, off: u64) -> Option<u64> {
        let b = self.bytes();
        if b.get(0..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
            return None; // only ELF64 little-endian
        }
        let phoff = u64_at(b, 0x20)? as usize;
        let phentsize = u16_at(b, 0x36)? as usize;
        let phnum = u16_at(b, 0x38)? as usize;
        for i in 0..phnum {
            let p = phoff + i * phentsize;
            if u32_at(b, p)? != 1 {
                continue; // PT_LOAD
            }
            let p_offset = u64_at(b, p + 8)?;
            let p_vaddr = u64_at(b, p + 16)?;
            let p_filesz = u64_at(b, p + 32)?;
            // Pages of the mapping start at the page-aligned segment offset.
            let seg_off = p_offset & !0xfff;
            if seg_off <= off && off < p_offset + p_filesz {
                let vaddr_at_off = (p_vaddr & !0xfff) + (off - seg_off);
                return Some((addr as u64).wrapping_sub(vaddr_at_off));
            }
        }
        None
    }

    /// Write "START SIZE NAME" lines for the function symbols whose runtime
    /// address (value + `bias`) lies in `[lo, hi)`. Returns how many.
    pub fn write_symbols(&self, bias: u64, lo: u64, hi: u64, out: &mut Out<8192>) -> usize {
        let b = self.bytes();
        let Some(shoff) = u64_at(b, 0x28) else { return 0 };
        let (Some(shentsize), Some(shnum)) = (u16_at(b, 0x3a), u16_at(b, 0x3c)) else {
            return 0;
        };
        let (shoff, shentsize, shnum) = (shoff as usize, shentsize as usize, shnum as usize);
        // Prefer the full symbol table; fall back to the dynamic one.
        let mut chosen = None;
        for want in [2u64 /* SHT_SYMTAB */, 11 /* SHT_DYNSYM */] {
            for i in 0..shnum {
                let s = shoff + i * shentsize;
                if u32_at(b, s + 4) == Some(want) {
                    chosen = Some(s);
                    break;
                }
            }
            if chosen.is_some() {
                break;
            }
        }
        let Some(s) = chosen else { return 0 };
        let (Some(off), Some(size), Some(link), Some(ent)) = (
            u64_at(b, s + 24),
            u64_at(b, s + 32),
            u32_at(b, s + 40),
            u64_at(b, s + 56),
        ) else {
            return 0;
        };
        let strs = shoff + link as usize * shentsize;
        let (Some(str_off), Some(str_size)) = (u64_at(b, strs + 24), u64_at(b, strs + 32)) else {
            return 0;
        };
        let Some(strtab) = b.get(str_off as usize..(str_off + str_size) as usize) else {
            return 0;
        };
        if ent < 24 {
            return 0;
        }
        let mut n = 0;
        let count = size / ent;
        for k in 0..count {
            let e = (off + k * ent) as usize;
            let (Some(name), Some(info), Some(value), Some(sz)) =
                (u32_at(b, e), b.get(e + 4), u64_at(b, e + 8), u64_at(b, e + 16))
            else {
                break;
            };
            let typ = info & 0xf;
            if !(typ == 2 || typ == 10) || sz == 0 || value == 0 {
                continue; // STT_FUNC / STT_GNU_IFUNC with a size
            }
            let start = value.wrapping_add(bias);
            if start < lo || start >= hi {
                continue;
            }
            let Some(tail) = strtab.get(name as usize..) else {
                continue;
            };
            let nm = &tail[..tail.iter().position(|&c| c == 0).unwrap_or(tail.len()).min(4000)];
            if nm.is_empty() {
                continue;
            }
            if out.room() < nm.len() + 40 {
                out.flush();
            }
            out.x(start).s(" ").x(sz).s(" ").bytes(nm).s("\n");
            n += 1;
        }
        n
    }
}

impl Drop for ElfFile {
    fn drop(&mut self) {
        // SAFETY: our own mapping of the file; what borrowed from it
        // borrowed `self`, which is going away.
        unsafe { sys::munmap(self.base, self.len) };
    }
}

/// Open (append) `/tmp/perf-PID.map`, refusing symlinks and files owned by
/// someone else. Returns the fd or `-errno`.
pub fn open_map() -> isize {
    let mut path = Out::<64>::new(-1);
    path.s("/tmp/perf-").u(sys::getpid() as u64).s(".map\0");
    let fd = sys::open(
        path.contents(),
        libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        0o644,
    );
    if fd < 0 {
        return fd;
    }
    // SAFETY: zero is a valid `stat`.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    if sys::fstat(fd as i32, &mut st) < 0 || st.st_uid != sys::geteuid() || (st.st_mode & libc::S_IFMT) != libc::S_IFREG
    {
        sys::close(fd as i32);
        return -(libc::EPERM as isize);
    }
    // A map last written before this process started was left by an earlier
    // process with the same pid (pids are reused): its lines would give perf
    // wrong names for our addresses. Our own lines (or a JIT's in this
    // process) are never older than the process.
    if st.st_size > 0 && started_at().is_some_and(|t| (st.st_mtime as u64) + 1 < t) {
        sys::ftruncate(fd as i32, 0);
    }
    fd
}

/// When this process started, in seconds since the epoch: `btime` of
/// /proc/stat plus field 22 of /proc/self/stat (clock ticks; USER_HZ is 100
/// on the architectures this library builds for).
fn started_at() -> Option<u64> {
    let mut buf = [0u8; 1024];
    let mut ticks = None;
    crate::maps::for_each_line(b"/proc/self/stat\0", &mut buf, |l| {
        // Fields 3.. follow the command name, which may hold spaces and
        // parentheses; starttime is field 22.
        if let Some(i) = l.iter().rposition(|&c| c == b')') {
            ticks = l[i + 1..]
                .split(|&c| c == b' ')
                .filter(|f| !f.is_empty())
                .nth(19)
                .and_then(dec);
        }
        false
    })
    .ok()?;
    let mut btime = None;
    crate::maps::for_each_line(b"/proc/stat\0", &mut buf, |l| match l.strip_prefix(b"btime ") {
        Some(v) => {
            btime = dec(v);
            false
        }
        None => true,
    })
    .ok()?;
    Some(btime? + ticks? / 100)
}

fn dec(s: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for &c in s {
        v = v.checked_mul(10)?.checked_add((c as char).to_digit(10)? as u64)?;
    }
    (!s.is_empty()).then_some(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_started_recently() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let t = super::started_at().unwrap();
        assert!(t <= now + 1 && t + 3600 > now, "started_at {t}, now {now}");
    }
}
