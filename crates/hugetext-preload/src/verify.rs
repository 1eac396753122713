//! What is huge-backed: `PAGEMAP_SCAN` (Linux 6.7+, per window), else
//! `/proc/self/smaps` totals (per VMA; see smaps.rs for what they prove).
//!
//! Where the unit of huge text is the arm64 contiguous-PTE block (64 KiB
//! pages: 2 MiB, [`scan::is_contpte`]), neither sees it: `PAGE_IS_HUGE`
//! and smaps' `AnonHugePages`/`FilePmdMapped` count PMD mappings only
//! (`pagemap_page_category()` and `smaps_pmd_entry()` in
//! fs/proc/task_mmu.c, Linux 7.3), and nothing in pagemap, `PAGEMAP_SCAN`
//! or smaps says how large the folio behind a PTE is. What the kernel
//! offers, and what each proves that a window is one folio of at least
//! the unit (which arm64 then maps with contiguous PTEs, one TLB entry):
//!
//! - **pagemap PFNs + `/proc/kpageflags`** (needs `CAP_SYS_ADMIN`: without
//!   it PFNs read as 0 and kpageflags cannot be opened): exact, for any
//!   window, file or anonymous ([`Pfn`], `hugetext_abi::kpf::block_is_one_folio`);
//! - **one write per block of a fresh anonymous mapping, then `mincore`**
//!   (no privilege): exact for the copy route's new memory, before it is
//!   filled ([`first_touch`]): an anonymous fault maps exactly one folio
//!   (`do_anonymous_page()` → `map_anon_folio_pte_pf()`, mm/memory.c) and
//!   picks only orders whose aligned range is all empty
//!   (`alloc_anon_folio()`), so after one fault per block, in address
//!   order, a block is wholly resident exactly when one folio of at least
//!   the block holds it;
//! - **`hugepages-2048kB/stats/anon_fault_alloc` and `anon_fault_fallback`**
//!   (no privilege): system-wide counters of 2 MiB anonymous folios mapped
//!   at fault and of failed attempts (`count_mthp_stat()` in mm/memory.c).
//!   They prove nothing about one process's blocks (any process may fault
//!   meanwhile, and a fault that never tries the size counts neither), so
//!   they are not used as proof;
//! - **smaps `THPeligible`**: that some THP order is allowed for the VMA,
//!   not that any was allocated.
//!
//! So without PFN access the contpte verifier proves only what the copy
//! route proved at copy time (the windows it moved, remembered as copies,
//! while they are still anonymous memory, every page present),
//! and the `file` route, whose page-cache folios it cannot see, is not
//! taken (see the engine's plan).

use crate::scan::{self, Scanner};
use crate::smaps::Smaps;
use crate::sys;
use hugetext_abi::{kpf, pagemap};

/// Pages per unit the contpte checks handle (2 MiB of 64 KiB pages is 32).
const MAX_UNIT_PAGES: usize = 512;

/// Pagemap and kpageflags, open, with PFNs visible.
pub struct Pfn {
    pagemap: i32,
    kpf: i32,
}

impl Pfn {
    /// Open both and check that pagemap shows PFNs (`CAP_SYS_ADMIN`).
    pub fn open() -> Option<Pfn> {
        let pm = sys::open(b"/proc/self/pagemap\0", libc::O_RDONLY | libc::O_CLOEXEC, 0);
        if pm < 0 {
            return None;
        }
        let kf = sys::open(b"/proc/kpageflags\0", libc::O_RDONLY | libc::O_CLOEXEC, 0);
        if kf < 0 {
            sys::close(pm as i32);
            return None;
        }
        let p = Pfn {
            pagemap: pm as i32,
            kpf: kf as i32,
        };
        // A page of our own stack, present: its PFN shows only to
        // CAP_SYS_ADMIN.
        let probe = [1u8; 64];
        let addr = core::hint::black_box(&probe) as *const _ as usize;
        let mut e = [0u64; 1];
        match p.entries(addr, &mut e) {
            Ok(()) if pagemap::pfn(e[0]).is_some() => Some(p),
            _ => None,
        }
    }

    /// The pagemap entries of the pages from `addr` on, one per element.
    fn entries(&self, addr: usize, out: &mut [u64]) -> Result<(), isize> {
        let page = scan::page();
        let off = (addr / page) as u64 * pagemap::ENTRY_SIZE;
        let len = out.len() * 8;
        // SAFETY: `out` is our own writable array of `len` bytes.
        let r = unsafe { sys::pread(self.pagemap, out.as_mut_ptr() as usize, len, off) };
        if r == len as isize {
            Ok(())
        } else if r < 0 {
            Err(r)
        } else {
            Err(-(libc::EIO as isize))
        }
    }

    /// Bit `i` set ⇔ window `[start + i·unit, start + (i+1)·unit)` is held
    /// by one folio of at least the unit (`n <= 64`).
    pub fn windows(&self, start: usize, n: usize) -> Result<u64, isize> {
        let (unit, page) = (scan::unit(), scan::page());
        let np = unit / page;
        if np == 0 || np > MAX_UNIT_PAGES {
            return Err(-(libc::EINVAL as isize));
        }
        let mut ent = [0u64; MAX_UNIT_PAGES];
        let mut flags = [0u64; MAX_UNIT_PAGES];
        let mut mask = 0u64;
        for i in 0..n {
            self.entries(start + i * unit, &mut ent[..np])?;
            for e in ent[..np].iter_mut() {
                *e = pagemap::pfn(*e).unwrap_or(0);
            }
            let pfn0 = ent[0];
            if pfn0 == 0 {
                continue;
            }
            let len = np * 8;
            // SAFETY: `flags` is our own writable array of at least `len`
            // bytes.
            let r = unsafe { sys::pread(self.kpf, flags.as_mut_ptr() as usize, len, pfn0 * 8) };
            if r != len as isize {
                continue;
            }
            if kpf::block_is_one_folio(&ent[..np], &flags[..np]) {
                mask |= 1 << i;
            }
        }
        Ok(mask)
    }
}

impl Drop for Pfn {
    fn drop(&mut self) {
        sys::close(self.pagemap);
        sys::close(self.kpf);
    }
}

/// The contpte verifier: folio sizes from [`Pfn`] where allowed, else the
/// copies proved when they were made; the copy-on-write test from
/// `PAGEMAP_SCAN` or smaps as elsewhere.
pub struct Cont {
    pub pfn: Option<Pfn>,
    /// `/proc/self/pagemap`, read for its flags (no privilege needed): a
    /// remembered copy counts only while its range is still anonymous
    /// memory, every page present ([`Cont::still_copied`]).
    pub pagemap: i32,
    pub scan: Option<Scanner>,
    pub smaps: Option<Smaps>,
}

impl Cont {
    /// Is the window at `w` one the copy route proved and moved there
    /// ([`crate::copies::was_copied`]) and still that copy: every page
    /// present and anonymous? (A range remembered from a copy since
    /// unmapped, by `dlclose` for instance, may hold file text again.)
    fn still_copied(&self, w: usize) -> bool {
        let (unit, page) = (scan::unit(), scan::page());
        let np = unit / page;
        if np == 0 || np > MAX_UNIT_PAGES || self.pagemap < 0 || !crate::copies::was_copied(w, w + unit) {
            return false;
        }
        let mut e = [0u64; MAX_UNIT_PAGES];
        let len = np * 8;
        // SAFETY: `e` is our own writable array of at least `len` bytes.
        let r = unsafe { sys::pread(self.pagemap, e.as_mut_ptr() as usize, len, (w / page) as u64 * 8) };
        r == len as isize
            && e[..np]
                .iter()
                .all(|&x| x & pagemap::PM_PRESENT != 0 && x & pagemap::PM_FILE == 0)
    }
}

impl Drop for Cont {
    fn drop(&mut self) {
        if self.pagemap >= 0 {
            sys::close(self.pagemap);
        }
    }
}

/// Write one byte at the start of each of the `n` unit blocks from `start`
/// (a fresh, private, anonymous, writable mapping nothing else knows of,
/// unit-aligned, `n <= 64`), in address order, then ask `mincore` which
/// blocks are wholly resident: bit `i` set ⇔ block `i` is held by one
/// folio of at least the unit (see the module documentation for why that
/// is exact). Call it before anything else writes the mapping.
pub fn first_touch(start: usize, n: usize) -> u64 {
    let (unit, page) = (scan::unit(), scan::page());
    let np = unit / page;
    if np == 0 || np > MAX_UNIT_PAGES {
        return 0;
    }
    for i in 0..n {
        // SAFETY: the caller's fresh writable mapping, block `i`'s first
        // byte; nothing else uses the mapping yet.
        unsafe { core::ptr::write_volatile((start + i * unit) as *mut u8, 0) };
    }
    let mut v = [0u8; MAX_UNIT_PAGES];
    let mut mask = 0u64;
    for i in 0..n {
        if sys::mincore(start + i * unit, unit, &mut v[..np]) == 0 && v[..np].iter().all(|b| b & 1 != 0) {
            mask |= 1 << i;
        }
    }
    mask
}

/// The verifier of one pass.
pub enum Verifier {
    /// Exact, per window.
    Scan(Scanner),
    /// Per-VMA totals: a window is claimed only when its whole VMA is huge.
    Smaps(Smaps),
    /// The unit is a contiguous-PTE block ([`Cont`]).
    Cont(Cont),
}

impl Verifier {
    /// True for the smaps fallback.
    pub fn is_smaps(&self) -> bool {
        matches!(self, Verifier::Smaps(_))
    }

    /// The contpte verifier?
    pub fn is_cont(&self) -> bool {
        matches!(self, Verifier::Cont(_))
    }

    /// Can it tell whether any window (file text too) is huge? Not the
    /// contpte verifier without PFN access.
    pub fn sees_folios(&self) -> bool {
        !matches!(self, Verifier::Cont(Cont { pfn: None, .. }))
    }

    /// With the contpte verifier and PFN access: the windows of the fresh
    /// anonymous copy at `start` held by one folio of at least the unit.
    /// `None` elsewhere.
    pub fn pfn_windows(&self, start: usize, n: usize) -> Option<u64> {
        match self {
            Verifier::Cont(Cont { pfn: Some(p), .. }) => Some(p.windows(start, n).unwrap_or(0)),
            _ => None,
        }
    }

    /// The windows of `[start, start + n·2M)` proved PMD-mapped (bit `i` =
    /// window `i`, `n <= 64`), and the PMD-mapped bytes of the accounting
    /// scope: with `PAGEMAP_SCAN`, those windows; with smaps, the whole
    /// range `[lo, hi)` (a text mapping: totals cannot be split into
    /// windows). Differences of the bytes between two calls with the same
    /// arguments are what happened in between.
    pub fn measure(&self, start: usize, n: usize, lo: usize, hi: usize) -> Result<(u64, u64), isize> {
        let unit = scan::unit();
        match self {
            Verifier::Scan(s) => {
                let m = s.huge_windows(start, n)?;
                Ok((m, m.count_ones() as u64 * unit as u64))
            }
            Verifier::Smaps(s) => s.measure(start, n, lo, hi),
            Verifier::Cont(c) => {
                let m = match &c.pfn {
                    Some(p) => p.windows(start, n)?,
                    // Without PFNs: the windows the copy route proved
                    // before it moved them there ([`first_touch`]).
                    None => (0..n)
                        .filter(|&i| c.still_copied(start + i * unit))
                        .fold(0u64, |m, i| m | 1 << i),
                };
                Ok((m, m.count_ones() as u64 * unit as u64))
            }
        }
    }

    /// The windows of `[start, start + n·2M)` proved PMD-mapped.
    pub fn huge_windows(&self, start: usize, n: usize) -> Result<u64, isize> {
        let unit = scan::unit();
        self.measure(start, n, start, start + n * unit).map(|(m, _)| m)
    }

    /// PMD-mapped bytes of the whole windows `[ws, we)` (2 MiB-aligned).
    pub fn huge_bytes(&self, ws: usize, we: usize) -> Result<u64, isize> {
        let unit = scan::unit();
        match self {
            Verifier::Scan(_) | Verifier::Cont(_) => {
                let mut total = 0;
                for (a, n) in scan::windows(ws, we).batches(64) {
                    total += self.measure(a, n, a, a + n * unit)?.1;
                }
                Ok(total)
            }
            Verifier::Smaps(s) => s.measure(ws, 0, ws, we).map(|(_, b)| b),
        }
    }

    /// Does `[start, end)` hold pages that are not the file's own
    /// (copy-on-write copies made by breakpoints or uprobes)?
    pub fn has_private_pages(&self, start: usize, end: usize) -> Result<bool, isize> {
        match self {
            Verifier::Scan(s) => s.has_private_pages(start, end),
            Verifier::Smaps(s) => s.has_private_pages(start, end),
            Verifier::Cont(Cont { scan: Some(s), .. }) => s.has_private_pages(start, end),
            Verifier::Cont(Cont { smaps: Some(s), .. }) => s.has_private_pages(start, end),
            Verifier::Cont(_) => Err(-(libc::ENOSYS as isize)),
        }
    }
}
