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

    /// Load bias for the text mapping that maps file offset `off` at
    /// address `addr`: the executable PT_LOAD holding that offset gives its
    /// vaddr (with 16 KiB pages a read-only segment before the text can
    /// share the text's first page: lld's text at offset 0x3000 is mapped
    /// from offset 0).
    pub fn bias(&self, addr: usize, off: u64) -> Option<u64> {
        let b = self.bytes();
        if b.get(0..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
            return None; // only ELF64 little-endian
        }
        let phoff = u64_at(b, 0x20)? as usize;
        let phentsize = u16_at(b, 0x36)? as usize;
        let phnum = u16_at(b, 0x38)? as usize;
        let mask = crate::scan::page() as u64 - 1;
        for i in 0..phnum {
            let p = phoff + i * phentsize;
            if u32_at(b, p)? != 1 || u32_at(b, p + 4)? & 1 == 0 {
                continue; // PT_LOAD with PF_X
            }
            let p_offset = u64_at(b, p + 8)?;
            let p_vaddr = u64_at(b, p + 16)?;
            let p_filesz = u64_at(b, p + 32)?;
            // Pages of the mapping start at the segment offset rounded down
            // to the kernel's page (16 KiB on some arm64 kernels).
            let seg_off = p_offset & !mask;
            if seg_off <= off && off < p_offset + p_filesz {
                let vaddr_at_off = (p_vaddr & !mask) + (off - seg_off);
                return Some((addr as u64).wrapping_sub(vaddr_at_off));
            }
        }
        None
    }

    /// Write "START SIZE NAME" lines naming the bytes of `[lo, hi)` (runtime
    /// addresses; symbol value + `bias`), as perf would name them from the
    /// file: `STT_FUNC`/`STT_GNU_IFUNC` symbols, and `STT_NOTYPE` symbols of
    /// executable sections where no function covers them; a symbol of size
    /// 0 extends to the next symbol or the end of its section; a symbol that
    /// starts before `lo` and reaches into the range is written clipped to
    /// it. Each `write()` holds whole lines. Returns how many lines.
    pub fn write_symbols(&self, bias: u64, lo: u64, hi: u64, out: &mut Out<8192>) -> usize {
        let Some(t) = self.table() else { return 0 };
        let count = t.count();
        // Room for every symbol (one pass over the table, not a pass to
        // count candidates first: pages never written cost nothing).
        let n = count;
        if n == 0 {
            return 0;
        }
        let bytes = n * core::mem::size_of::<Sym>();
        let mem = sys::anon_rw(bytes);
        if mem < 0 {
            return 0;
        }
        // SAFETY: a fresh private anonymous mapping of `n` `Sym`s (page
        // aligned, zero-filled: all-zero is a valid `Sym`), ours until the
        // munmap below; nothing else refers to it.
        let syms = unsafe { core::slice::from_raw_parts_mut(mem as *mut Sym, n) };
        let mut m = 0;
        for k in 0..count {
            if m == n {
                break;
            }
            if let Some(sym) = t.candidate(k) {
                syms[m] = sym;
                m += 1;
            }
        }
        let syms = &mut syms[..m];
        let written = name_range(syms, bias, lo, hi, |s, len, k| {
            let Some(nm) = t.name_at(k) else { return false };
            if out.room() < nm.len() + 40 {
                out.flush();
            }
            out.x(s).s(" ").x(len).s(" ").bytes(nm).s("\n");
            true
        });
        out.flush();
        // SAFETY: our own mapping from above; `syms` is not used after this.
        unsafe { sys::munmap(mem as usize, bytes) };
        written
    }

    /// The symbol table perf would read: `.symtab`, else `.dynsym`.
    fn table(&self) -> Option<Table<'_>> {
        let b = self.bytes();
        let shoff = u64_at(b, 0x28)? as usize;
        let shentsize = u16_at(b, 0x3a)? as usize;
        let shnum = u16_at(b, 0x3c)? as usize;
        if shoff == 0 || shentsize < 64 {
            return None;
        }
        let mut chosen = None;
        for want in [2u64 /* SHT_SYMTAB */, 11 /* SHT_DYNSYM */] {
            chosen = (0..shnum)
                .map(|i| shoff + i * shentsize)
                .find(|&s| u32_at(b, s + 4) == Some(want));
            if chosen.is_some() {
                break;
            }
        }
        let s = chosen?;
        let (off, size, link, ent) = (
            u64_at(b, s + 24)?,
            u64_at(b, s + 32)?,
            u32_at(b, s + 40)?,
            u64_at(b, s + 56)?,
        );
        let strs = shoff + link as usize * shentsize;
        let (str_off, str_size) = (u64_at(b, strs + 24)?, u64_at(b, strs + 32)?);
        let strtab = b.get(str_off as usize..str_off.checked_add(str_size)? as usize)?;
        if ent < 24 {
            return None;
        }
        let syms = b.get(off as usize..off.checked_add(size)? as usize)?;
        Some(Table {
            b,
            shoff,
            shentsize,
            shnum,
            syms,
            ent: ent as usize,
            strtab,
        })
    }
}

/// One candidate symbol: `[start, start + size)` in file addresses (size 0:
/// not known), the end of its section, the offset of its name in the string
/// table (kept here: reading the symbol again when its line is written
/// would be a cache miss per line, in address order) and its rank among
/// symbols at the same address (lower wins).
#[derive(Clone, Copy, Default)]
struct Sym {
    start: u64,
    size: u64,
    sec_end: u64,
    name: u32,
    rank: u8,
}

/// Rank of a `STT_NOTYPE` label: named only where no function is.
const RANK_LABEL: u8 = 3;

struct Table<'a> {
    b: &'a [u8],
    shoff: usize,
    shentsize: usize,
    shnum: usize,
    syms: &'a [u8],
    ent: usize,
    strtab: &'a [u8],
}

impl Table<'_> {
    fn count(&self) -> usize {
        self.syms.len() / self.ent
    }

    /// (sh_addr + sh_size, executable) of section `i`.
    fn section(&self, i: usize) -> Option<(u64, bool)> {
        if i == 0 || i >= self.shnum {
            return None;
        }
        let s = self.shoff + i * self.shentsize;
        let flags = u64_at(self.b, s + 8)?;
        let addr = u64_at(self.b, s + 16)?;
        let size = u64_at(self.b, s + 32)?;
        Some((addr.checked_add(size)?, flags & 4 /* SHF_EXECINSTR */ != 0))
    }

    /// The name at offset `name` of the string table.
    fn name_at(&self, name: usize) -> Option<&[u8]> {
        let tail = self.strtab.get(name..)?;
        // libc's memchr, not a byte loop: clang's libraries name 55,000
        // functions (5 MB of names) in one perf map.
        let look = tail.len().min(4000);
        // SAFETY: searches the first `look` bytes of `tail`, which is that long.
        let nul = unsafe { libc::memchr(tail.as_ptr().cast(), 0, look) };
        let len = match nul.is_null() {
            true => look,
            false => nul as usize - tail.as_ptr() as usize,
        };
        let nm = &tail[..len];
        (!nm.is_empty()).then_some(nm)
    }

    /// Symbol `k` when perf would name code with it.
    fn candidate(&self, k: usize) -> Option<Sym> {
        let e = k * self.ent;
        let info = *self.syms.get(e + 4)?;
        let shndx = u16_at(self.syms, e + 6)? as usize;
        let value = u64_at(self.syms, e + 8)?;
        let size = u64_at(self.syms, e + 16)?;
        if value == 0 || shndx == 0 {
            return None; // undefined
        }
        let (typ, bind) = (info & 0xf, info >> 4);
        let sec = self.section(shndx); // None for SHN_ABS and friends
        let rank = match typ {
            2 | 10 => match bind {
                1 => 0, // STB_GLOBAL
                2 => 1, // STB_WEAK
                _ => 2,
            },
            0 if sec.is_some_and(|(_, x)| x) => RANK_LABEL,
            _ => return None,
        };
        // The name's first bytes decide (no need for its end here: that
        // is looked for only when its line is written).
        let name = u32_at(self.syms, e)? as usize;
        let head = self.strtab.get(name..)?;
        match head {
            [] | [0, ..] => return None, // no name
            [b'.', b'L', ..] | [b'$', ..] if rank == RANK_LABEL => {
                return None; // assembler-local and mapping symbols
            }
            _ => {}
        }
        Some(Sym {
            start: value,
            size,
            sec_end: sec.map_or(0, |(end, _)| end),
            name: name as u32,
            rank,
        })
    }
}

/// The naming rules, on the candidates of one file (sorted here): calls
/// `emit(start, size, name)` for each line, runtime addresses clipped to
/// `[lo, hi)`; `emit` returns whether it wrote one. Returns how many.
fn name_range(syms: &mut [Sym], bias: u64, lo: u64, hi: u64, mut emit: impl FnMut(u64, u64, usize) -> bool) -> usize {
    syms.sort_unstable_by_key(|s| (s.start, s.rank));
    let mut written = 0;
    // End of the code the functions seen so far cover (labels inside it
    // are not named).
    let mut covered = 0u64;
    let mut i = 0;
    while i < syms.len() {
        let s = syms[i];
        // The others at this address are aliases: one name is enough.
        let mut j = i + 1;
        while j < syms.len() && syms[j].start == s.start {
            j += 1;
        }
        let next = syms.get(j).map(|n| n.start);
        i = j;
        let end = if s.size > 0 {
            s.start.saturating_add(s.size)
        } else {
            // Extend to the next symbol, within the section.
            match (next, s.sec_end > s.start) {
                (Some(n), true) => n.min(s.sec_end),
                (Some(n), false) => n,
                (None, true) => s.sec_end,
                (None, false) => continue,
            }
        };
        if s.rank == RANK_LABEL {
            if s.start < covered {
                continue;
            }
        } else {
            covered = covered.max(end);
        }
        let (a, z) = (s.start.wrapping_add(bias), end.wrapping_add(bias));
        if z <= lo || a >= hi || z <= a {
            continue;
        }
        let (a, z) = (a.max(lo), z.min(hi));
        if emit(a, z - a, s.name as usize) {
            written += 1;
        }
    }
    written
}

impl Drop for ElfFile {
    fn drop(&mut self) {
        // SAFETY: our own mapping of the file; what borrowed from it
        // borrowed `self`, which is going away.
        unsafe { sys::munmap(self.base, self.len) };
    }
}

/// Why the perf map was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The open failed (`ELOOP`: a symbolic link; `ENXIO`: a FIFO nobody
    /// reads; ...).
    Errno(isize),
    /// Something other than a regular file sits at the path (a FIFO that
    /// someone reads, a device).
    NotRegular,
    /// A regular file owned by another user.
    NotOurs,
    /// A regular file with other names (a hard link planted at the path
    /// would have us overwrite the file it names).
    Linked,
    /// This process's pid is unknown (`getpid` fails under a seccomp
    /// filter, and `/proc/self/status` cannot be read): no path to write.
    NoPid,
}

impl Skip {
    /// "not writing /tmp/perf-N.map: why".
    pub fn say(self) {
        let mut o = crate::out::line();
        o.s("not writing ");
        match path() {
            Some(p) => o.bytes(p.name()),
            None => o.s("/tmp/perf-PID.map"),
        };
        match self {
            Skip::Errno(e) => o.err(e),
            Skip::NotRegular => o.s(": not a regular file (a FIFO or a device someone put there)"),
            Skip::NotOurs => o.s(": owned by another user"),
            Skip::Linked => o.s(": it has other names (a hard link someone put there)"),
            Skip::NoPid => o.s(": this process's pid is unknown (getpid failed, and /proc/self/status cannot be read)"),
        };
    }
}

/// `/tmp/perf-PID.map` of this process.
pub struct MapPath(Out<64>);

impl MapPath {
    /// NUL-terminated, for `open`.
    fn c(&self) -> &[u8] {
        self.0.contents()
    }

    /// Without the NUL, for messages.
    pub fn name(&self) -> &[u8] {
        let c = self.c();
        &c[..c.len() - 1]
    }
}

/// The perf map path perf reads for this process. perf (tools/perf/util/
/// symbol.c, `dso__find_perf_map`) looks first, when the process is in
/// another mount namespace than perf, for `/tmp/perf-NSTGID.map` inside
/// that namespace (NSTGID: the pid in the process's own pid namespace),
/// then for `/tmp/perf-TGID.map` in its own mount namespace (TGID: the pid
/// as perf sees it). So: in a pid namespace whose outer pid this process
/// can see (its `/proc` is the outer one: `NStgid` lists both), the outer
/// pid, which perf finds in both cases where `/tmp` is shared and which no
/// process of another namespace also has; otherwise (no pid namespace, or
/// one with its own `/proc`, hence its own mount namespace) the pid as the
/// process sees it, which perf looks up inside its mount namespace.
/// None when this process's pid is unknown ([`map_pid`]).
pub fn path() -> Option<MapPath> {
    let mut p = Out::<64>::new(-1);
    p.s("/tmp/perf-").u(u64::from(map_pid().0?)).s(".map\0");
    Some(MapPath(p))
}

/// (the pid that names the perf map, this process's own pid); None where
/// unknown: `getpid` failed (a seccomp filter may make it fail) and
/// `/proc/self/status` could not tell either.
pub fn map_pid() -> (Option<u32>, Option<u32>) {
    let mut buf = [0u8; 512];
    let mut outer = None;
    let mut last = None;
    let _ = crate::maps::for_each_line(b"/proc/self/status\0", &mut buf, |l| match l.strip_prefix(b"NStgid:") {
        Some(v) => {
            outer = outer_pid(v);
            last = own_pid(v);
            false
        }
        None => true,
    });
    let own = sys::getpid().or(last);
    (outer.or(own), own)
}

/// This process's pid: [`sys::getpid`], or where that fails the pid it
/// has in its own pid namespace according to `/proc/self/status`.
pub fn pid() -> Option<u32> {
    sys::getpid().or_else(|| map_pid().1)
}

/// The innermost pid of an `NStgid` value ("\t12345\t1": 1), the one
/// `getpid` returns. Pure.
fn own_pid(v: &[u8]) -> Option<u32> {
    let last = v.split(|&c| c == b'\t' || c == b' ').rfind(|f| !f.is_empty())?;
    u32::try_from(dec(last)?).ok().filter(|&p| p > 0)
}

/// The outermost pid of an `NStgid` value ("\t12345\t1"), when it lists
/// more than one (the process is in a nested pid namespace). Pure.
fn outer_pid(v: &[u8]) -> Option<u32> {
    let mut it = v.split(|&c| c == b'\t' || c == b' ').filter(|f| !f.is_empty());
    let first = dec(it.next()?)?;
    it.next()?;
    u32::try_from(first).ok()
}

/// Whether an opened perf map may be written: a regular file, ours, with
/// no other name. Pure.
fn judge(st: &libc::stat, euid: u32) -> Result<(), Skip> {
    if (st.st_mode & libc::S_IFMT) != libc::S_IFREG {
        Err(Skip::NotRegular)
    } else if st.st_uid != euid {
        Err(Skip::NotOurs)
    } else if st.st_nlink != 1 {
        Err(Skip::Linked)
    } else {
        Ok(())
    }
}

/// Open the map with `flags`, never following a symlink and never waiting
/// (`O_NONBLOCK`: a FIFO put at the path fails with `ENXIO` or is refused
/// below, instead of blocking the program), and keep it only if [`judge`]
/// says so. Returns the fd and its `stat`.
fn open_own(flags: i32) -> Result<(i32, libc::stat), Skip> {
    let Some(path) = path() else {
        return Err(Skip::NoPid);
    };
    let fd = sys::open(
        path.c(),
        flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        0o600,
    );
    if fd < 0 {
        return Err(Skip::Errno(fd));
    }
    let fd = fd as i32;
    // SAFETY: zero is a valid `stat`.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    let r = sys::fstat(fd, &mut st);
    let ok = match (r, sys::geteuid()) {
        (r, _) if r < 0 => Err(Skip::Errno(r)),
        (_, Some(euid)) => judge(&st, euid),
        (_, None) => Err(Skip::Errno(-(libc::EPERM as isize))),
    };
    match ok {
        Ok(()) => Ok((fd, st)),
        Err(e) => {
            sys::close(fd);
            Err(e)
        }
    }
}

/// Open (append) `/tmp/perf-PID.map`, created `0600`; see [`open_own`] for
/// what is refused. Returns the fd.
pub fn open_map() -> Result<i32, Skip> {
    let (fd, st) = open_own(libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND)?;
    OPENED.store(true, core::sync::atomic::Ordering::Relaxed);
    // A map last written before this process started was left by an earlier
    // process with the same pid (pids are reused): its lines would give perf
    // wrong names for our addresses. Our own lines (or a JIT's in this
    // process) are never older than the process.
    let mut size = st.st_size;
    if size > 0 && started_at().is_some_and(|t| (st.st_mtime as u64) + 1 < t) {
        sys::ftruncate(fd, 0);
        size = 0;
    }
    // A map this library starts says so in its first line, so that a later
    // `run` can tell it from others' (a JIT's) and remove it once its
    // process has ended (see `PERF_MAP_MARK`).
    if size == 0 {
        sys::write(fd, hugetext_abi::env::PERF_MAP_MARK);
    }
    Ok(fd)
}

/// This copy of the library opened the perf map to write ([`open_map`]).
static OPENED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Has this copy of the library written to the perf map (so that it may
/// have lines to drop)?
pub fn opened() -> bool {
    OPENED.load(core::sync::atomic::Ordering::Relaxed)
}

/// Remove from this process's `/tmp/perf-PID.map` the lines whose start
/// address lies in `[lo, hi)` (an object being unloaded: its addresses may
/// be reused by the next one). The file is rewritten in place; lines that
/// do not parse are kept. Returns the lines removed, or `-errno`. Callers
/// hold the pass lock, so this library's own appends cannot interleave.
pub fn drop_range(lo: u64, hi: u64) -> isize {
    match open_own(libc::O_RDWR) {
        Err(Skip::Errno(e)) if e == -(libc::ENOENT as isize) => 0,
        Err(Skip::Errno(e)) => e,
        Err(_) => -(libc::EPERM as isize),
        Ok((fd, st)) => {
            let r = rewrite_without(fd, st.st_size as usize, lo, hi);
            sys::close(fd);
            r
        }
    }
}

fn rewrite_without(fd: i32, size: usize, lo: u64, hi: u64) -> isize {
    if size == 0 {
        return 0;
    }
    let mem = sys::anon_rw(size);
    if mem < 0 {
        return mem;
    }
    let mem = mem as usize;
    let mut got = 0;
    while got < size {
        // SAFETY: `mem + got..mem + size` is our fresh writable mapping.
        let r = unsafe { sys::pread(fd, mem + got, size - got, got as u64) };
        if r == -(libc::EINTR as isize) {
            continue;
        }
        if r <= 0 {
            break;
        }
        got += r as usize;
    }
    // SAFETY: our own mapping of `size` bytes, `got` of them read; nothing
    // else refers to it until the munmap below.
    let buf = unsafe { core::slice::from_raw_parts_mut(mem as *mut u8, got) };
    let (kept, dropped) = keep_lines(buf, lo, hi);
    let mut r = dropped as isize;
    if dropped > 0 {
        let w = sys::pwrite(fd, &buf[..kept], 0);
        if w < 0 {
            r = w;
        } else if (w as usize) == kept {
            sys::ftruncate(fd, kept as u64);
        }
    }
    // SAFETY: our own mapping from above; `buf` is not used after this.
    unsafe { sys::munmap(mem, size) };
    r
}

/// Compact `buf` (perf map lines "START SIZE NAME", hex) in place, leaving
/// out whole lines whose START lies in `[lo, hi)`. Returns (bytes kept,
/// lines left out). A last line without its newline is kept as it is.
fn keep_lines(buf: &mut [u8], lo: u64, hi: u64) -> (usize, usize) {
    let (mut r, mut w, mut dropped) = (0, 0, 0);
    while r < buf.len() {
        let end = buf[r..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(buf.len(), |i| r + i + 1);
        let line = &buf[r..end];
        let start = line
            .split(|&c| c == b' ')
            .next()
            .filter(|h| !h.is_empty() && h.len() <= 16)
            .and_then(|h| {
                h.iter().try_fold(0u64, |v, &c| {
                    let d = (c as char).to_digit(16)?;
                    Some(v << 4 | d as u64)
                })
            });
        let gone = line.last() == Some(&b'\n') && start.is_some_and(|s| lo <= s && s < hi);
        if gone {
            dropped += 1;
        } else {
            buf.copy_within(r..end, w);
            w += end - r;
        }
        r = end;
    }
    (w, dropped)
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
    use super::{name_range, Sym, RANK_LABEL};

    fn sym(start: u64, size: u64, sec_end: u64, index: u32, rank: u8) -> Sym {
        Sym {
            start,
            size,
            sec_end,
            name: index,
            rank,
        }
    }

    fn named(syms: &mut [Sym], bias: u64, lo: u64, hi: u64) -> Vec<(u64, u64, usize)> {
        let mut v = Vec::new();
        name_range(syms, bias, lo, hi, |a, n, k| {
            v.push((a, n, k));
            true
        });
        v
    }

    #[test]
    fn size_zero_extends_to_the_next_symbol_or_the_section_end() {
        let mut s = [
            sym(0x3000, 0, 0x9000, 1, 0),
            sym(0x1000, 0, 0x9000, 0, 0),
            sym(0x5000, 0x10, 0x9000, 2, 0),
        ];
        assert_eq!(
            named(&mut s, 0, 0, u64::MAX),
            vec![(0x1000, 0x2000, 0), (0x3000, 0x2000, 1), (0x5000, 0x10, 2)]
        );
        let mut s = [sym(0x5000, 0, 0x9000, 7, 0)];
        assert_eq!(named(&mut s, 0, 0, u64::MAX), vec![(0x5000, 0x4000, 7)]);
    }

    #[test]
    fn symbols_reaching_into_the_range_are_clipped_to_it() {
        let mut s = [sym(0x1000, 0x3000, 0x9000, 0, 0), sym(0x4000, 0x100, 0x9000, 1, 0)];
        // bias 0x10000: runtime 0x11000..0x14000, range from 0x12000.
        assert_eq!(
            named(&mut s, 0x10000, 0x12000, 0x14080),
            vec![(0x12000, 0x2000, 0), (0x14000, 0x80, 1)]
        );
        assert_eq!(named(&mut s, 0, 0x8000, 0x9000), vec![]);
    }

    #[test]
    fn labels_only_where_no_function_is_and_one_name_per_address() {
        let mut s = [
            sym(0x1000, 0x100, 0x9000, 0, 2),
            sym(0x1000, 0x100, 0x9000, 1, 0),      // global alias wins
            sym(0x1080, 0, 0x9000, 2, RANK_LABEL), // inside the function
            sym(0x2000, 0, 0x9000, 3, RANK_LABEL),
        ];
        assert_eq!(
            named(&mut s, 0, 0, u64::MAX),
            vec![(0x1000, 0x100, 1), (0x2000, 0x7000, 3)]
        );
    }

    #[test]
    fn the_outer_pid_names_the_map_in_a_pid_namespace() {
        assert_eq!(super::outer_pid(b"\t12345\t1"), Some(12345));
        assert_eq!(super::outer_pid(b"\t12345\t7\t1"), Some(12345));
        assert_eq!(super::outer_pid(b"\t12345"), None);
        assert_eq!(super::outer_pid(b""), None);
        // This process (not in a pid namespace of its own here, or seeing
        // only its own /proc): its own pid.
        let (map, own) = super::map_pid();
        assert_eq!(own, Some(std::process::id()));
        assert!(map == own || map > Some(1));
        assert_eq!(super::pid(), own);
        assert_eq!(super::own_pid(b"\t12345\t7"), Some(7));
        assert_eq!(super::own_pid(b"\t12345"), Some(12345));
        assert_eq!(super::own_pid(b"\t"), None);
    }

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
