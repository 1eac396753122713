//! Kernel interfaces: version, page and PMD size, THP modes, and thin wrappers
//! over the memory-management system calls hugetext uses.
//!
//! Capabilities are detected at run time; nothing is assumed from the build
//! machine.
//!
//! # Safety by construction
//! Nothing safe here can change memory this process does not own through a
//! [`Mapping`]: advice that can discard memory (`MADV_DONTNEED`) is a
//! method of an owned mapping ([`Mapping::madvise`]), and the raw-address
//! forms ([`madvise`], [`populate_read`], [`touch_pages`]) are `unsafe fn`s
//! with a `# Safety` section, as in rustix.
//!
//! # rustix or libc
//! Chosen per call family, deliberately:
//! - **rustix** where its typed API covers what hugetext passes: the page
//!   size and `uname` (here), `statfs`/`fstatfs` (fsutil), and
//!   `posix_fadvise`, whose `Option<NonZeroU64>` length says "to the end of
//!   the file" in the type ([`fadvise_dontneed`]).
//! - **libc** for the memory-management family (`mmap`, `munmap`,
//!   `madvise`, `mincore`): advice values are the plain numbers of
//!   `hugetext_abi::madv`, shared with the preload, and rustix's `Advice`
//!   has no `MADV_COLLAPSE`; one crate for the family, so that what libc
//!   maps, libc advises and unmaps.
//! - **libc** where rustix has no wrapper: `sync_file_range`
//!   ([`write_back`]), the `PAGEMAP_SCAN` ioctl (its number and structs are
//!   `hugetext_abi::pagemap_scan`), and glibc's `confstr`.

use hugetext_abi::thp::{self, ShmemMode, SizeMode, ThpMode};
use std::ffi::c_void;
use std::num::NonZeroU64;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::ptr::NonNull;

use crate::{Error, Result};

/// `madvise` advice values (one home: `hugetext_abi::madv`, shared with
/// the preload).
pub use hugetext_abi::madv::{MADV_COLLAPSE, MADV_DONTNEED, MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_POPULATE_READ};

/// Base page size of the running kernel (`getauxval(AT_PAGESZ)`).
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// PMD size (the size of a PMD-mapped THP) of the running kernel, from
/// `/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`; when the kernel
/// does not say (no THP), what its page size implies (4 KiB pages: 2 MiB,
/// 16 KiB: 32 MiB, 64 KiB: 512 MiB). The one place the library learns it.
pub fn pmd_size() -> usize {
    static PMD: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PMD.get_or_init(|| {
        std::fs::read(hugetext_abi::geometry::HPAGE_PMD_SIZE_PATH)
            .ok()
            .and_then(|s| hugetext_abi::geometry::parse_pmd_size(&s))
            .or_else(|| hugetext_abi::geometry::pmd_size_for_page(page_size()))
            .unwrap_or_else(|| page_size() / 8 * page_size())
    })
}

/// The arm64 contiguous-PTE block size for the running kernel's page size
/// (64 KiB with 4 KiB pages, 2 MiB with 16 KiB or 64 KiB pages): text in
/// naturally aligned folios of at least this size is mapped with one TLB
/// entry per block. `None` on other machines (x86-64 has no contpte).
pub fn cont_pte_size() -> Option<usize> {
    if !host_is_aarch64() {
        return None;
    }
    hugetext_abi::geometry::cont_pte_size(page_size())
}

/// The unit of huge text on a target kernel (what an ELF target is described
/// in: `elf::Target::unit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HugeUnit {
    /// One PMD entry maps it.
    #[default]
    Pmd,
    /// An arm64 contiguous-PTE block: one TLB entry maps it.
    Contpte,
}

impl HugeUnit {
    /// "PMD-mapped" or "contpte-mapped", for sentences.
    pub fn mapped(self) -> &'static str {
        match self {
            HugeUnit::Pmd => "PMD-mapped",
            HugeUnit::Contpte => "contpte-mapped",
        }
    }

    /// "PMD-mappable" or "contpte-mappable", for sentences.
    pub fn mappable(self) -> &'static str {
        match self {
            HugeUnit::Pmd => "PMD-mappable",
            HugeUnit::Contpte => "contpte-mappable",
        }
    }
}

/// The unit of huge text for `machine` with `page`-byte pages and a
/// `pmd`-byte PMD ([`HugeUnit`]).
pub fn huge_unit_of(machine: u16, page: u64, pmd: u64) -> (u64, HugeUnit) {
    // The rule lives in hugetext-abi, which the preload shares.
    match hugetext_abi::geometry::huge_unit(machine == object::elf::EM_AARCH64, page as usize, pmd as usize) {
        (block, true) => (block as u64, HugeUnit::Contpte),
        _ => (pmd, HugeUnit::Pmd),
    }
}

/// `e_machine` of the machine hugetext runs on (`EM_NONE` for one it does
/// not know).
pub fn host_machine() -> u16 {
    if cfg!(target_arch = "x86_64") {
        object::elf::EM_X86_64
    } else if cfg!(target_arch = "aarch64") {
        object::elf::EM_AARCH64
    } else {
        object::elf::EM_NONE
    }
}

/// Machines whose ELF files `align` rewrites.
pub fn supported_machine(m: u16) -> bool {
    matches!(m, object::elf::EM_X86_64 | object::elf::EM_AARCH64)
}

/// The unit of huge text on the running kernel, bytes, and what maps it:
/// the PMD size ([`pmd_size`]), except on arm64 with 64 KiB pages, whose
/// 512 MiB PMD no page-cache folio reaches (the page cache stops at 2048
/// pages, 128 MiB); there it is the 2 MiB contiguous-PTE block, which a
/// 2 MiB folio naturally aligned in the file and the address space gets
/// (one TLB entry). `warm` fills, and `inspect` and `explain` count, windows
/// of this size; the same rule as `check`'s ([`huge_unit_of`]).
pub fn huge_unit() -> (usize, HugeUnit) {
    let (unit, kind) = huge_unit_of(host_machine(), page_size() as u64, pmd_size() as u64);
    (unit as usize, kind)
}

/// The size of [`huge_unit`], bytes.
pub fn unit_size() -> usize {
    huge_unit().0
}

/// Is the running machine arm64 (where contpte mappings exist)?
fn host_is_aarch64() -> bool {
    cfg!(target_arch = "aarch64")
}

/// Kernel release as (major, minor, patch), from `uname`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct KernelVersion {
    /// Major version (the 6 of 6.12.3).
    pub major: u32,
    /// Minor version (the 12 of 6.12.3).
    pub minor: u32,
    /// Patch level (the 3 of 6.12.3); 0 when absent.
    pub patch: u32,
}

impl KernelVersion {
    /// The running kernel's version.
    pub fn current() -> Self {
        let uts = rustix::system::uname();
        Self::parse(&uts.release().to_string_lossy())
    }

    /// Parse a release string such as `6.18.44-fc-v669`.
    pub fn parse(release: &str) -> Self {
        let mut it = release
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u32>().unwrap_or(0));
        KernelVersion {
            major: it.next().unwrap_or(0),
            minor: it.next().unwrap_or(0),
            patch: it.next().unwrap_or(0),
        }
    }

    /// True when this version is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Read a sysfs "choice" file such as `always [madvise] never` and return the
/// bracketed (selected) word.
pub fn sysfs_choice(path: impl AsRef<Path>) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_string())
}

/// The global THP mode for anonymous memory, or `None` when the kernel has
/// no THP.
pub fn thp_mode() -> Option<ThpMode> {
    ThpMode::parse(&std::fs::read(thp::ENABLED_PATH).ok()?)
}

/// [`thp_mode`] as the kernel's word (`always`, `madvise`, `never`), for
/// reports.
pub fn thp_enabled() -> Option<String> {
    thp_mode().map(|m| m.as_str().to_string())
}

/// Serialize an optional [`ThpMode`] as the kernel's word (`null` without
/// THP), for `#[serde(serialize_with)]` in reports.
pub fn serialize_thp_mode<S: serde::Serializer>(mode: &Option<ThpMode>, s: S) -> std::result::Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&mode.map(ThpMode::as_str), s)
}

/// A memory mapping owned by this process, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<c_void>,
    len: usize,
    /// `PROT_*` it was mapped with.
    prot: i32,
}

// SAFETY: a Mapping is a plain range of address space; access goes through
// raw pointers whose use the caller controls.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd` from file offset `offset` (page aligned) at an
    /// address congruent to `offset` modulo `align` (a power of two, e.g. the
    /// PMD size), so that whole `align`-sized file ranges line up with
    /// `align`-sized virtual ranges. `prot` is `libc::PROT_*`.
    pub fn file_congruent(fd: BorrowedFd<'_>, offset: u64, len: usize, prot: i32, align: usize) -> Result<Self> {
        assert!(align.is_power_of_two());
        let shift = (offset as usize) & (align - 1);
        // Reserve enough address space to find a congruent start, then
        // place the file mapping over it with MAP_FIXED.
        let reserve_len = len + align;
        // SAFETY: anonymous PROT_NONE reservation; no memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve_len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os("mmap (reserve)"));
        }
        let base_addr = base as usize;
        let aligned = hugetext_abi::geometry::align_up(base_addr, align);
        let mut start = aligned + shift;
        if start + len > base_addr + reserve_len {
            start -= align;
        }
        debug_assert!(start >= base_addr);
        // SAFETY: [start, start+len) lies inside our own reservation.
        let p = unsafe {
            libc::mmap(
                start as *mut c_void,
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        let err = (p == libc::MAP_FAILED).then(|| Error::last_os("mmap (file)"));
        // Give back the unused parts of the reservation.
        // SAFETY: these ranges are ours and hold nothing.
        unsafe {
            if start > base_addr {
                libc::munmap(base, start - base_addr);
            }
            let end = start + len;
            let res_end = base_addr + reserve_len;
            if res_end > end {
                libc::munmap(end as *mut c_void, res_end - end);
            }
            if let Some(e) = err {
                libc::munmap(start as *mut c_void, len);
                return Err(e);
            }
        }
        Ok(Mapping {
            ptr: NonNull::new(p).expect("mmap returned null"),
            len,
            prot,
        })
    }

    /// Map anonymous private memory of `len` bytes aligned to `align`.
    pub fn anon_aligned(len: usize, prot: i32, align: usize) -> Result<Self> {
        assert!(align.is_power_of_two());
        let reserve_len = len + align;
        // SAFETY: fresh anonymous mapping.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve_len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os("mmap (anonymous)"));
        }
        let b = base as usize;
        let start = hugetext_abi::geometry::align_up(b, align);
        // SAFETY: trimming our own fresh mapping.
        unsafe {
            if start > b {
                libc::munmap(base, start - b);
            }
            let end = start + len;
            if b + reserve_len > end {
                libc::munmap(end as *mut c_void, b + reserve_len - end);
            }
        }
        Ok(Mapping {
            ptr: NonNull::new(start as *mut c_void).unwrap(),
            len,
            prot,
        })
    }

    /// Fresh anonymous read-write memory for huge pages: `len` bytes rounded
    /// up to whole PMDs, PMD-aligned, advised `MADV_HUGEPAGE` (nothing is
    /// faulted in: the first write of each 2 MiB block allocates and zeroes
    /// its huge page).
    pub fn anon_huge(len: usize) -> Result<Self> {
        let pmd = pmd_size();
        let len = hugetext_abi::geometry::align_up(len.max(1), pmd);
        let m = Self::anon_aligned(len, libc::PROT_READ | libc::PROT_WRITE, pmd)?;
        m.madvise(0, len, libc::MADV_HUGEPAGE)?;
        Ok(m)
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length mapping (never produced by the constructors).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer to the start.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr() as *mut u8
    }

    /// `madvise` over a sub-range `[off, off+len)` of this mapping.
    pub fn madvise(&self, off: usize, len: usize, advice: i32) -> Result<()> {
        assert!(off + len <= self.len);
        // SAFETY: the range lies inside this mapping, which `self` owns;
        // its contents are reachable only through raw pointers (`as_ptr`),
        // whose users answer for what advice they gave.
        unsafe { madvise(self.addr() + off, len, advice) }
    }

    /// [`populate_read`] over a sub-range `[off, off+len)` of a mapping made
    /// with `PROT_READ` (an error otherwise).
    pub fn populate_read(&self, off: usize, len: usize) -> Result<()> {
        assert!(off + len <= self.len);
        if self.prot & libc::PROT_READ == 0 {
            return Err(Error::Invalid("populate_read: the mapping is not readable".into()));
        }
        // SAFETY: inside our own readable mapping, which stays mapped while
        // `self` is borrowed.
        unsafe { populate_read(self.addr() + off, len) }
    }

    /// Which pages of the mapping are resident (`mincore`), one bool per page.
    pub fn resident(&self) -> Result<Vec<bool>> {
        let ps = page_size();
        let pages = self.len.div_ceil(ps);
        let mut vec = vec![0u8; pages];
        // SAFETY: vec has one byte per page of our mapping.
        let r = unsafe { libc::mincore(self.ptr.as_ptr(), self.len, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(Error::last_os("mincore"));
        }
        Ok(vec.into_iter().map(|b| b & 1 != 0).collect())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this range.
        unsafe {
            libc::munmap(self.ptr.as_ptr(), self.len);
        }
    }
}

/// `madvise(addr, len, advice)` on raw addresses of this process. The safe
/// form is [`Mapping::madvise`], on a mapping this process owns.
///
/// # Safety
/// `advice` may discard memory (`MADV_DONTNEED`: private anonymous pages
/// read back as zeros, file pages refault from the page cache, dropping a
/// private copy-on-write copy) or change how it is backed. The caller must
/// own `[addr, addr + len)` or otherwise know that nothing it or other
/// threads still use lives there in a form the advice would lose.
pub unsafe fn madvise(addr: usize, len: usize, advice: i32) -> Result<()> {
    // SAFETY: madvise does not dereference; the kernel validates the range,
    // and the caller vouches for what the advice does to its contents.
    let r = unsafe { libc::madvise(addr as *mut c_void, len, advice) };
    if r != 0 {
        return Err(Error::Sys {
            call: hugetext_abi::madv::madvise_call_name(advice),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `HUGETEXT_COMPAT` (read once per process): kernel features to act as if
/// missing, to exercise on a new kernel the fallbacks that older kernels
/// need. A testing and diagnostic knob, parsed as libhugetext.so parses it
/// (`hugetext_abi::compat`).
///
/// Read from this process's environment rather than passed in: its one
/// reader, [`populate_read`], lies under `warm`, `doctor`, the page-cache
/// experiments and the route costs, several calls deep, and the knob must
/// reach all of them the way it reaches the preload (one variable for the
/// whole run).
pub fn compat() -> Compat<'static> {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let v = VALUE.get_or_init(|| std::env::var(hugetext_abi::settings::COMPAT).unwrap_or_default());
    Compat::parse(v.as_bytes())
}

pub use hugetext_abi::compat::Compat;

/// The kernel refused `MADV_POPULATE_READ` once (EINVAL: before 5.14).
static NO_POPULATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`populate_read`] touches pages instead of using
/// `MADV_POPULATE_READ` (kernel before 5.14, or `HUGETEXT_COMPAT=no-populate`).
pub fn populate_by_touch() -> bool {
    NO_POPULATE.load(std::sync::atomic::Ordering::Relaxed) || compat().no_populate
}

/// Fault `[addr, addr + len)` in for reading, as the process's own reads
/// would: `MADV_POPULATE_READ` (one call, no trap per page), or, where the
/// kernel has none (EINVAL, before 5.14; remembered) or
/// `HUGETEXT_COMPAT=no-populate` says so, one volatile load per page
/// ([`touch_pages`]). In a `MADV_HUGEPAGE` file mapping the first load of a
/// PMD window reads a PMD-order folio and maps it whole, so the window's
/// other loads cost no fault.
///
/// Never dies of SIGBUS: a page past the end of a file (truncated by
/// someone else meanwhile) is an `EFAULT` error ([`is_past_eof`]), from
/// `MADV_POPULATE_READ` or from the loads, which run under a guard that
/// turns the fault into that error.
///
/// # Safety
/// `[addr, addr + len)` must be readable memory of this process that stays
/// mapped during the call. A page past the end of a file in it may be
/// replaced by a private zero page (the guard's way out of the fault).
pub unsafe fn populate_read(addr: usize, len: usize) -> Result<()> {
    if !populate_by_touch() {
        // SAFETY: MADV_POPULATE_READ only faults pages in; it discards nothing.
        match unsafe { madvise(addr, len, MADV_POPULATE_READ) } {
            Err(Error::Sys { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
                NO_POPULATE.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            r => return r,
        }
    }
    // SAFETY: the caller's contract.
    match unsafe { touch_pages_guarded(addr, len) } {
        true => Ok(()),
        false => Err(Error::Sys {
            call: "read (past the end of the file)",
            source: std::io::Error::from_raw_os_error(libc::EFAULT),
        }),
    }
}

/// Whether `e` is [`populate_read`]'s error for a page past the end of the
/// file (the file shrank under the mapping).
pub fn is_past_eof(e: &Error) -> bool {
    matches!(e, Error::Sys { source, .. } if source.raw_os_error() == Some(libc::EFAULT))
}

/// Load one byte of every page of `[addr, addr + len)`, in address order.
///
/// # Safety
/// As for [`populate_read`]: readable memory of this process. A page of a
/// file mapping past the end of the file raises SIGBUS here: prefer
/// [`populate_read`].
pub unsafe fn touch_pages(addr: usize, len: usize) {
    let ps = page_size();
    let mut p = addr;
    while p < addr + len {
        // SAFETY: the caller guarantees the range is readable.
        unsafe { std::ptr::read_volatile(p as *const u8) };
        p += ps;
    }
}

thread_local! {
    /// The range whose SIGBUS the guard takes on this thread (start, end).
    static BUS_GUARD: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
    /// Set by the guard when it took a fault.
    static BUS_HIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The SIGBUS action before the guard's (run for faults outside a guard).
static OLD_BUS: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();
static PAGE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(4096);

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (start, end) = BUS_GUARD.with(|g| g.get());
    if addr >= start && addr < end {
        let ps = PAGE.load(std::sync::atomic::Ordering::Relaxed);
        // Replace the page that cannot be read with a private zero page
        // (async-signal-safe: one system call); the load then completes.
        // SAFETY: the page is inside the guarded range, which the caller
        // of `touch_pages_guarded` owns.
        unsafe {
            libc::mmap(
                (addr & !(ps - 1)) as *mut c_void,
                ps,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        BUS_HIT.with(|h| h.set(true));
        return;
    }
    // Not ours: what was there before (by default, the process dies as it
    // would have without the guard).
    match OLD_BUS.get() {
        Some(old) if old.sa_flags & libc::SA_SIGINFO != 0 && old.sa_sigaction > 1 => {
            // SAFETY: the previous handler, called as it was installed.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig, info, ctx)
        }
        Some(old) if old.sa_sigaction > 1 => {
            // SAFETY: as above, a plain handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig)
        }
        _ => {
            // SAFETY: resetting to the default action; the faulting load
            // runs again and the kernel delivers SIGBUS as it would have.
            unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        }
    }
}

/// Install the SIGBUS guard's handler once per process.
fn install_bus_guard() {
    OLD_BUS.get_or_init(|| {
        PAGE.store(page_size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: plain sigaction calls with zeroed, then filled, structs.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, &sa, &mut old);
            old
        }
    });
}

/// [`touch_pages`] under a SIGBUS guard: a page that cannot be read (past
/// the end of a file that shrank) becomes a zero page instead of killing
/// the process. False when that happened.
///
/// # Safety
/// As for [`populate_read`].
unsafe fn touch_pages_guarded(addr: usize, len: usize) -> bool {
    install_bus_guard();
    BUS_HIT.with(|h| h.set(false));
    BUS_GUARD.with(|g| g.set((addr, addr + len)));
    // SAFETY: the caller's contract; faults in the range are the guard's.
    unsafe { touch_pages(addr, len) };
    BUS_GUARD.with(|g| g.set((0, 0)));
    !BUS_HIT.with(|h| h.get())
}

/// `cachestat(2)` (Linux 6.5): pages of `[offset, offset + len)` of `fd`
/// in the page cache, counted by the kernel without a per-page walk of the
/// holes. `None` where the kernel has no such call, or on a stacking
/// filesystem, whose pages it does not see.
pub fn cached_pages(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Option<u64> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    static MISSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if MISSING.load(std::sync::atomic::Ordering::Relaxed) || len == 0 {
        return (len == 0).then_some(0);
    }
    // Stacking filesystems (overlayfs, FUSE passthrough, eCryptfs) keep the
    // pages in the file below, which mappings reach and cachestat does not.
    const STACKED: [i64; 3] = [0x794c_7630, 0x6573_5546, 0xf15f];
    // `f_type`'s type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    match rustix::fs::fstatfs(fd) {
        Ok(st) if !STACKED.contains(&(st.f_type as i64)) => {}
        _ => return None,
    }
    let r = Range { off: offset, len };
    let mut st = Stat::default();
    // SAFETY: cachestat reads `r` and writes `st`, both ours and of the
    // kernel's layout; 451 is its number on every architecture.
    let rc = unsafe { libc::syscall(451, fd.as_raw_fd(), &r as *const Range, &mut st as *mut Stat, 0u32) };
    if rc != 0 {
        // ENOSYS: before 6.5. EPERM: a seccomp allow-list that does not
        // name the call (systemd before 255 does not know it, so the
        // agent's unit refuses it); the kernel itself never says EPERM.
        if matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOSYS | libc::EPERM)
        ) {
            MISSING.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        return None;
    }
    Some(st.nr_cache)
}

/// `posix_fadvise(fd, offset, len, POSIX_FADV_DONTNEED)`: drop the clean,
/// unmapped page cache of a range (`len` `None` = to the end of the file).
/// Folios that some process maps stay.
pub fn fadvise_dontneed(fd: BorrowedFd<'_>, offset: u64, len: Option<NonZeroU64>) -> Result<()> {
    rustix::fs::fadvise(fd, offset, len, rustix::fs::Advice::DontNeed).map_err(|e| Error::Sys {
        call: "posix_fadvise(DONTNEED)",
        source: e.into(),
    })
}

/// Write back the dirty page cache of a range of `fd` and wait for it
/// (`sync_file_range` with WAIT_BEFORE | WRITE | WAIT_AFTER; `len` `None` =
/// to the end of the file). Works on a read-only descriptor.
pub fn write_back(fd: BorrowedFd<'_>, offset: u64, len: Option<NonZeroU64>) -> Result<()> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // The kernel's "to the end of the file" is a length of 0.
    let nbytes = len.map_or(0, NonZeroU64::get);
    // SAFETY: plain syscall on a valid fd.
    let r = unsafe { libc::sync_file_range(fd.as_raw_fd(), offset as libc::off64_t, nbytes as libc::off64_t, flags) };
    if r != 0 {
        return Err(Error::last_os("sync_file_range"));
    }
    Ok(())
}

/// True when this process has CAP_SYS_ADMIN in its effective set (needed to
/// see PFNs in `/proc/PID/pagemap`).
pub fn has_cap_sys_admin() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .map(|caps| caps & rustix::thread::CapabilitySet::SYS_ADMIN.bits() != 0)
        .unwrap_or(false)
}

/// `PAGEMAP_SCAN` (Linux 6.7): ask the kernel for ranges of a process's
/// address space by page category, without reading one pagemap word per
/// page. The ABI (`PAGE_IS_*`, the argument and region structs, the ioctl
/// number) is `hugetext_abi::pagemap_scan`, shared with the preload.
pub use hugetext_abi::pagemap_scan;
pub use hugetext_abi::pagemap_scan::PageRegion;
use hugetext_abi::pagemap_scan::{PmScanArg, PAGEMAP_SCAN};

/// Run `PAGEMAP_SCAN` on an open `/proc/PID/pagemap` over `[start, end)`,
/// reporting pages that have every category in `required` and returning
/// their `report` categories; adjacent pages with equal categories come back
/// as one region. Regions are appended to `out`.
///
/// Fails with [`Error::Unsupported`] on kernels without the ioctl (< 6.7).
pub fn pagemap_scan(
    pagemap: &std::fs::File,
    start: u64,
    end: u64,
    required: u64,
    report: u64,
    out: &mut Vec<PageRegion>,
) -> Result<()> {
    let mut buf = vec![PageRegion::default(); 256];
    let mut pos = start;
    while pos < end {
        let mut arg = PmScanArg {
            category_mask: required,
            return_mask: report,
            ..PmScanArg::new(pos, end, buf.as_mut_ptr() as u64, buf.len() as u64)
        };
        // SAFETY: arg and buf are valid for the kernel to read and write;
        // buf has vec_len elements.
        let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg as *mut PmScanArg) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOTTY) | Some(libc::EINVAL) if pos == start => {
                    Error::Unsupported("PAGEMAP_SCAN is not supported by this kernel (needs Linux 6.7)".into())
                }
                _ => Error::Sys {
                    call: "ioctl(PAGEMAP_SCAN)",
                    source: e,
                },
            });
        }
        let n = n as usize;
        out.extend_from_slice(&buf[..n]);
        if arg.walk_end <= pos {
            break;
        }
        pos = arg.walk_end;
        if n < buf.len() && pos >= end {
            break;
        }
    }
    Ok(())
}

/// True when this kernel supports `PAGEMAP_SCAN` (probed once on this
/// process's own stack).
pub fn pagemap_scan_supported() -> bool {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONCE.get_or_init(|| {
        let Ok(f) = std::fs::File::open("/proc/self/pagemap") else {
            return false;
        };
        let probe = [0u8; 64];
        let ps = page_size() as u64;
        let addr = (probe.as_ptr() as u64) / ps * ps;
        let mut out = Vec::new();
        pagemap_scan(&f, addr, addr + ps, 0, pagemap_scan::PAGE_IS_PRESENT, &mut out).is_ok()
    })
}

/// True when this kernel knows `MADV_COLLAPSE` at all (Linux 6.1+), asked
/// of one PMD-aligned window of this process's own anonymous memory with one
/// page touched: a kernel without the advice refuses it with EINVAL whatever
/// the memory, while one that has it collapses (or fails for another reason).
/// Whether it also collapses *file* text is a separate experiment
/// (`doctor::probe_fs`).
pub fn madv_collapse_known() -> bool {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONCE.get_or_init(|| {
        let pmd = pmd_size();
        let Ok(m) = Mapping::anon_aligned(pmd, libc::PROT_READ | libc::PROT_WRITE, pmd) else {
            return false;
        };
        // SAFETY: the first byte of our own fresh, writable mapping.
        unsafe { std::ptr::write_volatile(m.as_ptr(), 1) };
        !is_einval(&m.madvise(0, pmd, MADV_COLLAPSE))
    })
}

/// True when this kernel names anonymous memory (`CONFIG_ANON_VMA_NAME`,
/// Linux 5.17+): `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME)` on one page of
/// this process's own anonymous memory succeeds. Where it does, the text
/// `run` copies shows in `/proc/PID/maps` as `[anon:hugetext:PATH]`.
pub fn anon_vma_name_supported() -> bool {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONCE.get_or_init(|| {
        const PR_SET_VMA: libc::c_int = 0x5356_4d41;
        const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
        let ps = page_size();
        let Ok(m) = Mapping::anon_aligned(ps, libc::PROT_READ | libc::PROT_WRITE, ps) else {
            return false;
        };
        let name = c"hugetext-probe";
        // SAFETY: names our own mapping; the kernel copies the string.
        let r = unsafe {
            libc::prctl(
                PR_SET_VMA,
                PR_SET_VMA_ANON_NAME,
                m.addr() as libc::c_ulong,
                ps as libc::c_ulong,
                name.as_ptr(),
            )
        };
        r == 0
    })
}

fn is_einval(r: &Result<()>) -> bool {
    matches!(r, Err(Error::Sys { source, .. }) if source.raw_os_error() == Some(libc::EINVAL))
}

/// True when this process can see page frame numbers: `/proc/kpageflags`
/// opens and this process's own pagemap shows a non-zero PFN for a page it
/// has just touched. Without CAP_SYS_ADMIN the kernel hides PFNs (reads 0).
pub fn pfn_access() -> bool {
    use std::os::unix::fs::FileExt;
    if std::fs::File::open("/proc/kpageflags").is_err() {
        return false;
    }
    let Ok(f) = std::fs::File::open("/proc/self/pagemap") else {
        return false;
    };
    let probe = std::hint::black_box(vec![1u8; page_size()]);
    let addr = probe.as_ptr() as u64;
    let mut w = [0u8; 8];
    let at = addr / page_size() as u64 * hugetext_abi::pagemap::ENTRY_SIZE;
    if f.read_exact_at(&mut w, at).is_err() {
        return false;
    }
    hugetext_abi::pagemap::pfn(u64::from_ne_bytes(w)).is_some()
}

/// The running glibc's version (`confstr(_CS_GNU_LIBC_VERSION)`), e.g.
/// `(2, 36)`; `None` when this program does not run on glibc.
pub fn glibc_version() -> Option<(u32, u32)> {
    let mut buf = [0u8; 64];
    // SAFETY: buf is writable for its length.
    let n = unsafe {
        libc::confstr(
            libc::_CS_GNU_LIBC_VERSION,
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n == 0 || n > buf.len() {
        return None;
    }
    let s = std::str::from_utf8(&buf[..n - 1]).ok()?;
    let v = s.strip_prefix("glibc ")?;
    let mut it = v.split('.').map(|x| x.parse::<u32>().ok());
    Some((it.next()??, it.next()??))
}

/// Whether this machine is a virtual machine, as the guest can see it: the
/// `hypervisor` CPU flag in `/proc/cpuinfo` (x86).
pub fn hypervisor() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| {
            s.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
        })
        .unwrap_or(false)
}

/// The kernel's report on a CPU vulnerability
/// (`/sys/devices/system/cpu/vulnerabilities/NAME`, e.g. `itlb_multihit`);
/// `None` when the kernel does not report it.
pub fn cpu_vulnerability(name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/vulnerabilities/{name}"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// A THP mode read from sysfs: the mode, or a line naming the file and the
/// word hugetext does not know.
pub type ModeRead<T> = std::result::Result<T, String>;

/// The mode in a sysfs THP mode file, parsed by `parse` (one of the
/// `hugetext_abi::thp` readers); `None` when the file cannot be read.
fn read_mode<T>(
    path: &Path,
    parse: impl for<'a> Fn(&'a [u8]) -> std::result::Result<T, thp::ModeError<'a>>,
) -> Option<ModeRead<T>> {
    let text = std::fs::read(path).ok()?;
    Some(parse(&text).map_err(|e| format!("{}: {e}", path.display())))
}

/// The mode of one anonymous THP size (`hugepages-<kB>kB/enabled`, Linux
/// 6.8+), `None` when the kernel has no such size.
pub fn size_mode(kb: u64) -> Option<ModeRead<SizeMode>> {
    read_mode(Path::new(&format!("{}{kb}kB/enabled", thp::SIZE_DIR)), SizeMode::read)
}

/// The THP mode of shmem and tmpfs (`shmem_enabled`), `None` when the
/// kernel has no THP.
pub fn shmem_mode() -> Option<ModeRead<ShmemMode>> {
    read_mode(Path::new(thp::SHMEM_ENABLED_PATH), ShmemMode::read)
}

/// The per-size THP settings (`hugepages-<size>kB/enabled`), as
/// (size in kB, mode), sorted by size. Empty on kernels before 6.8 (no mTHP).
pub fn thp_sizes() -> Vec<(u64, ModeRead<SizeMode>)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/kernel/mm/transparent_hugepage") {
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(kb) = name
                .to_str()
                .and_then(|n| n.strip_prefix("hugepages-"))
                .and_then(|n| n.strip_suffix("kB"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if let Some(mode) = read_mode(&e.path().join("enabled"), SizeMode::read) {
                out.push((kb, mode));
            }
        }
    }
    out.sort_by_key(|&(kb, _)| kb);
    out
}

/// The value of a kernel build option (`y`, `m`, a string) from
/// `/boot/config-RELEASE` or `/proc/config.gz`; `Some("n")` when the config is
/// readable and the option is unset; `None` when no config is readable.
pub fn kernel_config(option: &str) -> Option<String> {
    let release = rustix::system::uname().release().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(format!("/boot/config-{release}"))
        .ok()
        .or_else(|| {
            let out = std::process::Command::new("gzip")
                .args(["-dc", "/proc/config.gz"])
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })?;
    let prefix = format!("{option}=");
    for line in text.lines() {
        if let Some(v) = line.strip_prefix(&prefix) {
            return Some(v.trim_matches('"').to_string());
        }
    }
    Some("n".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parses_distro_strings() {
        let v = KernelVersion::parse("6.18.44-fc-v669");
        assert_eq!((v.major, v.minor, v.patch), (6, 18, 44));
        assert!(v.at_least(6, 1) && !v.at_least(6, 19));
        assert_eq!(KernelVersion::parse("5.10.0-28-amd64").to_string(), "5.10.0");
    }

    #[test]
    fn pagemap_scan_reports_present_pages() {
        if !KernelVersion::current().at_least(6, 7) {
            assert!(!pagemap_scan_supported());
            return;
        }
        assert!(pagemap_scan_supported());
        let ps = page_size();
        let a = Mapping::anon_aligned(8 * ps, libc::PROT_READ | libc::PROT_WRITE, ps).unwrap();
        // Touch pages 1 and 2 and 5 only.
        for i in [1usize, 2, 5] {
            // SAFETY: page i of our own writable mapping.
            unsafe { a.as_ptr().add(i * ps).write_volatile(1) };
        }
        let f = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut out = Vec::new();
        let base = a.addr() as u64;
        pagemap_scan(
            &f,
            base,
            base + 8 * ps as u64,
            pagemap_scan::PAGE_IS_PRESENT,
            pagemap_scan::PAGE_IS_PRESENT,
            &mut out,
        )
        .unwrap();
        let ranges: Vec<(u64, u64)> = out
            .iter()
            .map(|r| ((r.start - base) / ps as u64, (r.end - base) / ps as u64))
            .collect();
        assert_eq!(ranges, vec![(1, 3), (5, 6)]);
    }

    #[test]
    fn glibc_and_thp_sizes() {
        let (maj, min) = glibc_version().expect("tests run on glibc");
        assert!(maj == 2 && min >= 17);
        for (kb, mode) in thp_sizes() {
            assert!(kb.is_power_of_two() && mode.is_ok(), "{kb} kB: {mode:?}");
        }
        assert!(shmem_mode().is_none_or(|m| m.is_ok()));
    }

    #[test]
    fn congruent_file_mapping_is_congruent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let (pmd, ps) = (pmd_size(), page_size());
        std::fs::write(&p, vec![0u8; pmd + 2 * ps]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        use std::os::fd::AsFd;
        let m = Mapping::file_congruent(f.as_fd(), ps as u64, pmd, libc::PROT_READ, pmd).unwrap();
        assert_eq!((m.addr() - ps) % pmd, 0);
        let a = Mapping::anon_aligned(2 * pmd, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
        assert_eq!(a.addr() % pmd, 0);
    }
}
