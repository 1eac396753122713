//! Raw Linux system calls, without going through libc.
//!
//! The `file` route drops this process's page-table entries for text that may
//! belong to libc itself; until that text is faulted back in as huge pages,
//! touching it would pin a small page and spoil the window. So the code that
//! runs in that section calls the kernel directly (inline `syscall`
//! instruction on x86_64) and touches nothing but this library's own text,
//! its stack and its private state. Every wrapper returns the kernel's raw
//! result: a value `>= 0`, or `-errno`.

/// System call `n` with six arguments; the kernel's raw result.
///
/// # Safety
/// The arguments must be valid for system call `n`: pointers to memory of
/// the sizes it reads or writes, and nothing the call changes (mappings,
/// file descriptors) may be in use in a way the caller does not control.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn raw6(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract (valid arguments for call `n`); the
    // instruction clobbers only what the operands name.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d, in("r8") e, in("r9") f,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn raw6(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract (valid arguments for call `n`); the
    // instruction clobbers only what the operands name.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => ret,
            in("x1") b, in("x2") c, in("x3") d, in("x4") e, in("x5") f,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn raw6(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    // Other architectures: through libc (the critical section is then not
    // libc-free, which costs huge windows of libc itself, never correctness).
    let r = libc::syscall(n as libc::c_long, a, b, c, d, e, f) as isize;
    if r == -1 {
        -(*libc::__errno_location() as isize)
    } else {
        r
    }
}

#[inline(always)]
fn call(n: libc::c_long, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    // SAFETY: each wrapper below passes arguments that are valid for its
    // system call; the kernel validates user pointers itself.
    unsafe { raw6(n as usize, a, b, c, d, e, f) }
}

pub use hugetext_abi::madv::{
    MADV_COLLAPSE, MADV_DONTNEED, MADV_HUGEPAGE, MADV_POPULATE_READ, MADV_POPULATE_WRITE, POSIX_FADV_DONTNEED,
};
pub const PR_GET_THP_DISABLE: i32 = 42;
pub const PR_SET_VMA: i32 = 0x5356_4d41;
pub const PR_SET_VMA_ANON_NAME: usize = 0;

pub fn read(fd: i32, buf: &mut [u8]) -> isize {
    call(
        libc::SYS_read,
        fd as usize,
        buf.as_mut_ptr() as usize,
        buf.len(),
        0,
        0,
        0,
    )
}

pub fn write(fd: i32, buf: &[u8]) -> isize {
    call(libc::SYS_write, fd as usize, buf.as_ptr() as usize, buf.len(), 0, 0, 0)
}

/// `pread(fd, addr, len, off)`: read file bytes straight into memory.
///
/// # Safety
/// `[addr, addr + len)` must be writable memory of this process that
/// nothing else uses while the kernel writes it.
pub unsafe fn pread(fd: i32, addr: usize, len: usize, off: u64) -> isize {
    call(libc::SYS_pread64, fd as usize, addr, len, off as usize, 0, 0)
}

/// `pwrite(fd, buf, off)`.
pub fn pwrite(fd: i32, buf: &[u8], off: u64) -> isize {
    call(
        libc::SYS_pwrite64,
        fd as usize,
        buf.as_ptr() as usize,
        buf.len(),
        off as usize,
        0,
        0,
    )
}

/// `nanosleep` for `ns` nanoseconds (less than a second).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: ns as libc::c_long,
    };
    call(
        libc::SYS_nanosleep,
        &ts as *const libc::timespec as usize,
        0,
        0,
        0,
        0,
        0,
    );
}

/// `openat(AT_FDCWD, path, flags, mode)`; `path` must be NUL-terminated.
pub fn open(path: &[u8], flags: i32, mode: u32) -> isize {
    if path.last() != Some(&0) {
        return -(libc::EINVAL as isize); // the kernel would read past the slice
    }
    call(
        libc::SYS_openat,
        libc::AT_FDCWD as isize as usize,
        path.as_ptr() as usize,
        flags as usize,
        mode as usize,
        0,
        0,
    )
}

/// `openat(dir, name, flags, mode)`; `name` must be NUL-terminated.
pub fn openat(dir: i32, name: &[u8], flags: i32, mode: u32) -> isize {
    if name.last() != Some(&0) {
        return -(libc::EINVAL as isize); // the kernel would read past the slice
    }
    call(
        libc::SYS_openat,
        dir as isize as usize,
        name.as_ptr() as usize,
        flags as usize,
        mode as usize,
        0,
        0,
    )
}

/// `readlinkat(AT_FDCWD, path, buf)`; `path` must be NUL-terminated.
/// Returns the bytes written (not NUL-terminated) or `-errno`.
pub fn readlink(path: &[u8], buf: &mut [u8]) -> isize {
    if path.last() != Some(&0) {
        return -(libc::EINVAL as isize); // the kernel would read past the slice
    }
    call(
        libc::SYS_readlinkat,
        libc::AT_FDCWD as isize as usize,
        path.as_ptr() as usize,
        buf.as_mut_ptr() as usize,
        buf.len(),
        0,
        0,
    )
}

pub fn close(fd: i32) -> isize {
    call(libc::SYS_close, fd as usize, 0, 0, 0, 0, 0)
}

/// `newfstatat(AT_FDCWD, path, st, 0)`; `path` must be NUL-terminated.
pub fn stat(path: &[u8], st: &mut libc::stat) -> isize {
    if path.last() != Some(&0) {
        return -(libc::EINVAL as isize); // the kernel would read past the slice
    }
    call(
        libc::SYS_newfstatat,
        libc::AT_FDCWD as isize as usize,
        path.as_ptr() as usize,
        st as *mut libc::stat as usize,
        0,
        0,
        0,
    )
}

pub fn fstat(fd: i32, st: &mut libc::stat) -> isize {
    call(libc::SYS_fstat, fd as usize, st as *mut libc::stat as usize, 0, 0, 0, 0)
}

/// A fresh private anonymous read-write mapping of `len` bytes (zeroed):
/// the preload's working memory, never from the C library's allocator.
/// Returns its address, or `-errno`.
pub fn anon_rw(len: usize) -> isize {
    mmap(
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    )
}

/// `mmap` at an address the kernel chooses (`flags` without `MAP_FIXED`):
/// it cannot touch any existing mapping.
pub fn mmap(len: usize, prot: i32, flags: i32, fd: i32, off: u64) -> isize {
    debug_assert!(flags & libc::MAP_FIXED == 0);
    call(
        libc::SYS_mmap,
        0,
        len,
        prot as usize,
        (flags & !libc::MAP_FIXED) as usize,
        fd as isize as usize,
        off as usize,
    )
}

/// `mmap(MAP_FIXED)` at `addr`: whatever was mapped there is unmapped first.
///
/// # Safety
/// Nothing this process still uses may live in `[addr, addr + len)` unless
/// the new mapping has the same bytes (the same range of the same file).
pub unsafe fn mmap_fixed(addr: usize, len: usize, prot: i32, flags: i32, fd: i32, off: u64) -> isize {
    call(
        libc::SYS_mmap,
        addr,
        len,
        prot as usize,
        (flags | libc::MAP_FIXED) as usize,
        fd as isize as usize,
        off as usize,
    )
}

/// # Safety
/// Nothing this process still uses may live in `[addr, addr + len)`.
pub unsafe fn munmap(addr: usize, len: usize) -> isize {
    call(libc::SYS_munmap, addr, len, 0, 0, 0, 0)
}

/// # Safety
/// Nothing this process still uses in `[addr, addr + len)` may need an
/// access that `prot` takes away.
pub unsafe fn mprotect(addr: usize, len: usize, prot: i32) -> isize {
    call(libc::SYS_mprotect, addr, len, prot as usize, 0, 0, 0)
}

/// # Safety
/// As [`munmap`] for `[old, old + old_len)`, and, with `MREMAP_FIXED`, for
/// `[new, new + new_len)` unless the moved bytes are the same as those there.
pub unsafe fn mremap(old: usize, old_len: usize, new_len: usize, flags: i32, new: usize) -> isize {
    call(libc::SYS_mremap, old, old_len, new_len, flags as usize, new, 0)
}

/// `madvise` with any advice.
///
/// # Safety
/// `advice` may discard memory (`MADV_DONTNEED`: private anonymous pages
/// read back as zeros, private copy-on-write copies are lost): nothing this
/// process still uses may live in the range in a form the advice loses.
/// Advice that keeps the contents is [`advise`], safe.
pub unsafe fn madvise(addr: usize, len: usize, advice: i32) -> isize {
    call(libc::SYS_madvise, addr, len, advice as usize, 0, 0, 0)
}

/// `madvise` advice that never changes what the range reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// `MADV_HUGEPAGE`.
    Hugepage,
    /// `MADV_POPULATE_READ` (fails with `EFAULT` past the end of a file).
    PopulateRead,
    /// `MADV_POPULATE_WRITE` (Linux 5.14+): faults the range in writable
    /// (private anonymous memory: allocated and zeroed), as a write to
    /// every page would.
    PopulateWrite,
    /// `MADV_COLLAPSE`: copies the pages into a huge one.
    Collapse,
}

/// `madvise(addr, len, advice)` with advice that keeps the contents: safe
/// on any range.
pub fn advise(addr: usize, len: usize, advice: Keep) -> isize {
    let advice = match advice {
        Keep::Hugepage => MADV_HUGEPAGE,
        Keep::PopulateRead => MADV_POPULATE_READ,
        Keep::PopulateWrite => MADV_POPULATE_WRITE,
        Keep::Collapse => MADV_COLLAPSE,
    };
    // SAFETY: none of these advices changes what the range reads.
    unsafe { madvise(addr, len, advice) }
}

pub fn fadvise(fd: i32, off: u64, len: u64, advice: i32) -> isize {
    call(
        libc::SYS_fadvise64,
        fd as usize,
        off as usize,
        len as usize,
        advice as usize,
        0,
        0,
    )
}

/// The base page size (`AT_PAGESZ`, at least 4 KiB).
pub fn page_size() -> usize {
    // SAFETY: getauxval has no preconditions.
    (unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize).max(4096)
}

/// `mincore(addr, len, vec)`: one byte of `vec` per page of the range;
/// `-EINVAL` without a call when `vec` is shorter than that.
pub fn mincore(addr: usize, len: usize, vec: &mut [u8]) -> isize {
    if vec.len() < len.div_ceil(page_size()) {
        return -(libc::EINVAL as isize);
    }
    call(libc::SYS_mincore, addr, len, vec.as_mut_ptr() as usize, 0, 0, 0)
}

pub fn fstatfs(fd: i32, st: &mut libc::statfs) -> isize {
    call(
        libc::SYS_fstatfs,
        fd as usize,
        st as *mut libc::statfs as usize,
        0,
        0,
        0,
        0,
    )
}

pub fn ftruncate(fd: i32, len: u64) -> isize {
    call(libc::SYS_ftruncate, fd as usize, len as usize, 0, 0, 0, 0)
}

pub fn fdatasync(fd: i32) -> isize {
    call(libc::SYS_fdatasync, fd as usize, 0, 0, 0, 0, 0)
}

/// `ioctl(fd, req, arg)`.
///
/// # Safety
///
/// When `req` takes a pointer, `arg` must point to memory the kernel may
/// read and write as `req` does, for the length `req` implies (including
/// buffers the argument itself points to), for the duration of the call.
pub unsafe fn ioctl(fd: i32, req: usize, arg: usize) -> isize {
    call(libc::SYS_ioctl, fd as usize, req, arg, 0, 0, 0)
}

/// `prctl(op, a, b, c, d)`.
///
/// # Safety
///
/// Where `op` takes pointers, they must be valid as `op` requires for the
/// duration of the call; where it changes memory or the process (e.g.
/// `PR_SET_VMA`), the caller answers for the range it names.
pub unsafe fn prctl(op: i32, a: usize, b: usize, c: usize, d: usize) -> isize {
    call(libc::SYS_prctl, op as usize, a, b, c, d, 0)
}

/// Is THP disabled for this process (`PR_GET_THP_DISABLE`)?
pub fn thp_disabled() -> bool {
    // SAFETY: PR_GET_THP_DISABLE takes no pointer and changes nothing.
    unsafe { prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) > 0 }
}

/// Name the anonymous memory `[addr, addr + len)` (`PR_SET_VMA_ANON_NAME`;
/// `/proc/PID/maps` shows `[anon:NAME]`). `name` must end with a NUL:
/// `-EINVAL` without a call otherwise.
pub fn name_anon(addr: usize, len: usize, name: &[u8]) -> isize {
    if name.last() != Some(&0) {
        return -(libc::EINVAL as isize);
    }
    // SAFETY: `name` is a NUL-terminated string the kernel only reads
    // (copying at most 80 bytes); naming changes no memory contents.
    unsafe { prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, name.as_ptr() as usize) }
}

/// This process's pid; None when the call fails (a seccomp filter may make
/// it return an error: never read `-errno` as a pid).
pub fn getpid() -> Option<u32> {
    u32::try_from(call(libc::SYS_getpid, 0, 0, 0, 0, 0, 0))
        .ok()
        .filter(|&p| p > 0)
}

/// The effective user id; None when the call fails (a seccomp filter).
pub fn geteuid() -> Option<u32> {
    u32::try_from(call(libc::SYS_geteuid, 0, 0, 0, 0, 0, 0)).ok()
}

/// Fault `[addr, addr + len)` in for reading by loading one byte per
/// 4 KiB page, in address order: what `MADV_POPULATE_READ` does, for
/// kernels before 5.14. In a `MADV_HUGEPAGE` file mapping the first load of
/// a 2 MiB window reads (or finds) a PMD-order folio and maps it with a PMD;
/// the window's other loads then fault no more. The range must be readable
/// (text mappings are `r-x`). No system call, no libc: safe in the critical
/// section.
///
/// # Safety
/// `[addr, addr + len)` must be readable memory of this process that stays
/// mapped during the call (past the end of a file, a load raises SIGBUS).
pub unsafe fn touch(addr: usize, len: usize) {
    let mut p = addr;
    while p < addr + len {
        // SAFETY: the caller passes a readable range of this process.
        unsafe { core::ptr::read_volatile(p as *const u8) };
        p += 4096;
    }
}

/// Block every signal on this thread; returns the previous mask.
pub fn block_signals() -> u64 {
    let all: u64 = !0;
    let mut old: u64 = 0;
    let r = call(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK as usize,
        &all as *const u64 as usize,
        &mut old as *mut u64 as usize,
        8,
        0,
        0,
    );
    if r < 0 {
        // Could not block; restoring "old" must then be a no-op-equivalent.
        let mut cur: u64 = 0;
        call(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK as usize,
            0,
            &mut cur as *mut u64 as usize,
            8,
            0,
            0,
        );
        return cur;
    }
    old
}

/// Restore a signal mask returned by [`block_signals`].
pub fn restore_signals(old: u64) {
    call(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK as usize,
        &old as *const u64 as usize,
        0,
        8,
        0,
        0,
    );
}

/// Monotonic clock in nanoseconds; 0 when the call fails (a seccomp
/// filter): durations are then 0, never negative (use `saturating_sub`).
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread in nanoseconds (user and system: page
/// faults, zeroing and compaction included, time waiting for a CPU not);
/// 0 when the call fails, as [`now_ns`].
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let r = call(
        libc::SYS_clock_gettime,
        clock as usize,
        &mut ts as *mut libc::timespec as usize,
        0,
        0,
        0,
        0,
    );
    if r < 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Short name of an errno value, for one-line messages.
pub fn errno_name(e: isize) -> &'static str {
    match -e as i32 {
        libc::EPERM => "operation not permitted",
        libc::ENOENT => "no such file",
        libc::EINTR => "interrupted",
        libc::EAGAIN => "resource temporarily unavailable",
        libc::ENOMEM => "out of memory",
        libc::EACCES => "permission denied",
        libc::EFAULT => "bad address",
        libc::EBUSY => "busy",
        libc::EINVAL => "invalid argument",
        libc::ENOSYS => "system call not available",
        libc::ENOTTY => "not supported by this kernel",
        libc::EOPNOTSUPP => "not supported",
        libc::EHWPOISON => "hardware poisoned page",
        libc::ESTALE => "the file at that path is not the mapped one",
        libc::ELOOP => "a symbolic link (not followed)",
        libc::ENXIO => "no reader on that FIFO, or no such device",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The safe wrappers refuse arguments the kernel would read or write
    /// past, without making the call.
    #[test]
    fn checked_lengths_refuse_short_buffers() {
        let einval = -(libc::EINVAL as isize);
        assert_eq!(open(b"/proc/self/maps", libc::O_RDONLY, 0), einval);
        let mut buf = [0u8; 16];
        assert_eq!(readlink(b"/proc/self/exe", &mut buf), einval);
        let page = page_size();
        let m = mmap(
            4 * page,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert!(m > 0);
        let mut vec = [0u8; 4];
        assert_eq!(mincore(m as usize, 4 * page, &mut vec[..3]), einval);
        assert_eq!(mincore(m as usize, 4 * page, &mut vec), 0);
        assert_eq!(name_anon(m as usize, page, b"x"), einval);
        let fd = open(b"/proc/self/maps\0", libc::O_RDONLY, 0);
        assert!(fd >= 0);
        close(fd as i32);
        // SAFETY: our own mapping, unused.
        unsafe { munmap(m as usize, 4 * page) };
    }
}
