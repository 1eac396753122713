//! Which PMD-size windows of this process are PMD-mapped, and whether a range
//! holds pages that are not the file's (copy-on-write copies made by a
//! debugger's breakpoints or uprobes): the `PAGEMAP_SCAN` ioctl on
//! `/proc/self/pagemap` (Linux 6.7+). It needs no privilege and reads only
//! this process's page tables.

use crate::sys;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use hugetext_abi::geometry::Windows;
use hugetext_abi::pagemap_scan::{
    PageRegion, PmScanArg, PAGEMAP_SCAN, PAGE_IS_FILE, PAGE_IS_HUGE, PAGE_IS_PRESENT, PAGE_IS_SWAPPED,
};

/// The running kernel's PMD size, bytes; 0 until first asked.
static PMD_BYTES: AtomicUsize = AtomicUsize::new(0);
/// The unit of huge text ([`unit`]), bytes; 0 until first asked.
static UNIT_BYTES: AtomicUsize = AtomicUsize::new(0);
/// The unit is an arm64 contiguous-PTE block ([`is_contpte`]).
static CONTPTE: AtomicBool = AtomicBool::new(false);

/// Most pages one PMD maps (64 KiB pages: 8192): the size of a `mincore`
/// vector for one window.
pub const MAX_PMD_PAGES: usize = 8192;

/// The running kernel's PMD size (2 MiB on x86-64; 2, 32 or 512 MiB on
/// arm64 with 4, 16 or 64 KiB pages): `hpage_pmd_size` from sysfs, else
/// what the page size (`AT_PAGESZ`) implies. Read once, with raw system
/// calls ([`init_geometry`] runs before any critical section).
#[inline]
pub fn pmd() -> usize {
    match PMD_BYTES.load(Ordering::Relaxed) {
        0 => init_geometry(),
        n => n,
    }
}

/// The unit of huge text on the running kernel, bytes: the size of the
/// windows every route works in. The PMD size ([`pmd`]), except on arm64
/// with 64 KiB pages, where the 512 MiB PMD is out of reach (the page
/// cache's largest folio is 128 MiB) and the unit is the 2 MiB
/// contiguous-PTE block: a folio of at least 2 MiB mapped naturally
/// aligned takes one TLB entry per block ([`is_contpte`]). The rule is
/// `hugetext_abi::geometry::huge_unit`, the library's too.
#[inline]
pub fn unit() -> usize {
    match UNIT_BYTES.load(Ordering::Relaxed) {
        0 => {
            init_geometry();
            UNIT_BYTES.load(Ordering::Relaxed)
        }
        n => n,
    }
}

/// Is the unit ([`unit`]) a contiguous-PTE block (arm64, 64 KiB pages)?
/// Then "huge" means "each window is one folio of at least the unit",
/// which `PAGEMAP_SCAN`'s `PAGE_IS_HUGE` (PMD mappings only) cannot see:
/// see [`crate::verify`].
#[inline]
pub fn is_contpte() -> bool {
    unit();
    CONTPTE.load(Ordering::Relaxed)
}

/// The whole windows of `[lo, hi)` in units of huge text ([`unit`]).
#[inline]
pub fn windows(lo: usize, hi: usize) -> Windows<usize> {
    Windows::<usize>::new(lo, hi, unit())
}

/// The running kernel's base page size (`AT_PAGESZ`: 4 KiB on x86-64; 4,
/// 16 or 64 KiB on arm64), for messages.
pub fn page() -> usize {
    sys::page_size()
}

/// Read the PMD size (see [`pmd`]) and the unit (see [`unit`]) and
/// remember them; returns the PMD size.
pub fn init_geometry() -> usize {
    use hugetext_abi::geometry;
    let mut path = [0u8; 64];
    let p = geometry::HPAGE_PMD_SIZE_PATH.as_bytes();
    path[..p.len()].copy_from_slice(p);
    let mut buf = [0u8; 32];
    let mut n = 0;
    let fd = sys::open(&path[..=p.len()], libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if fd >= 0 {
        n = sys::read(fd as i32, &mut buf).max(0) as usize;
        sys::close(fd as i32);
    }
    // SAFETY: getauxval has no preconditions.
    let page = unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize;
    let v = geometry::parse_pmd_size(&buf[..n])
        .or_else(|| geometry::pmd_size_for_page(page))
        .filter(|&v| v / page.max(1) <= MAX_PMD_PAGES)
        .unwrap_or(page.max(4096) / 8 * page.max(4096));
    PMD_BYTES.store(v, Ordering::Relaxed);
    let (u, cont) = geometry::huge_unit(cfg!(target_arch = "aarch64"), page, v);
    CONTPTE.store(cont, Ordering::Relaxed);
    UNIT_BYTES.store(u, Ordering::Relaxed);
    v
}

/// An open `/proc/self/pagemap`.
pub struct Scanner {
    fd: i32,
}

impl Scanner {
    /// Open the scanner; `Err(-errno)` when pagemap cannot be opened or the
    /// kernel has no `PAGEMAP_SCAN` (`-ENOTTY`).
    pub fn open() -> Result<Scanner, isize> {
        let fd = sys::open(b"/proc/self/pagemap\0", libc::O_RDONLY | libc::O_CLOEXEC, 0);
        if fd < 0 {
            return Err(fd);
        }
        let s = Scanner { fd: fd as i32 };
        // Probe with an empty range.
        let mut regs = [PageRegion::default(); 1];
        s.scan(0, 0, PAGE_IS_HUGE, 0, 0, &mut regs)?;
        Ok(s)
    }

    fn scan(
        &self,
        start: usize,
        end: usize,
        mask: u64,
        inverted: u64,
        anyof: u64,
        regs: &mut [PageRegion],
    ) -> Result<usize, isize> {
        let mut arg = PmScanArg {
            category_inverted: inverted,
            category_mask: mask,
            category_anyof_mask: anyof,
            return_mask: PAGE_IS_HUGE | PAGE_IS_FILE | PAGE_IS_PRESENT,
            ..PmScanArg::new(start as u64, end as u64, regs.as_mut_ptr() as u64, regs.len() as u64)
        };
        // SAFETY: `arg` is a PAGEMAP_SCAN argument of the size the request
        // encodes; the region vector it names is `regs`, whose length it
        // carries, borrowed mutably for the call.
        let r = unsafe { sys::ioctl(self.fd, PAGEMAP_SCAN as usize, &mut arg as *mut PmScanArg as usize) };
        if r < 0 {
            Err(r)
        } else {
            Ok(r as usize)
        }
    }

    /// Bit `i` set ⇔ the window `[start + i·2M, start + (i+1)·2M)` is
    /// PMD-mapped. `start` is 2 MiB-aligned, `n <= 64`. (PMD windows only:
    /// `PAGE_IS_HUGE` is set for PMD and hugetlb mappings, never for PTEs,
    /// whatever folio they map: `pagemap_page_category()` in
    /// fs/proc/task_mmu.c.)
    pub fn huge_windows(&self, start: usize, n: usize) -> Result<u64, isize> {
        let pmd = pmd();
        debug_assert!(start % pmd == 0 && n <= 64);
        let mut regs = [PageRegion::default(); 64];
        let end = start + n * pmd;
        let got = self.scan(start, end, PAGE_IS_HUGE, 0, 0, &mut regs)?;
        let mut mask = 0u64;
        for r in regs.iter().take(got) {
            let (s, e) = (r.start as usize, r.end as usize);
            for i in 0..n {
                let ws = start + i * pmd;
                if s <= ws && ws + pmd <= e {
                    mask |= 1 << i;
                }
            }
        }
        Ok(mask)
    }

    /// Does `[start, end)` hold any page that is not the file's own
    /// (anonymous copy-on-write page, present or swapped out)?
    pub fn has_private_pages(&self, start: usize, end: usize) -> Result<bool, isize> {
        let mut regs = [PageRegion::default(); 1];
        let got = self.scan(
            start,
            end,
            PAGE_IS_FILE,
            PAGE_IS_FILE,
            PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            &mut regs,
        )?;
        Ok(got > 0)
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        sys::close(self.fd);
    }
}
