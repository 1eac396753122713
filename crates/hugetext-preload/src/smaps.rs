//! Verification without `PAGEMAP_SCAN` (kernels before 6.7): per-VMA totals
//! from `/proc/self/smaps`, read with raw `read()` into a fixed, mmapped
//! buffer (no allocation, no libc).
//!
//! smaps says how many bytes of each VMA are PMD-mapped (`FilePmdMapped`,
//! `AnonHugePages`), not where. What can be proved from that:
//!
//! - a PMD mapping covers an aligned 2 MiB window that lies wholly inside
//!   one VMA, so `FilePmdMapped + AnonHugePages` of a VMA is exactly
//!   2 MiB × (its PMD-mapped windows), and those windows are among its whole
//!   windows;
//! - so when that total equals the VMA's whole windows, **every** window of
//!   the VMA is huge; when it is 0, none is; in between, the count is known
//!   and the positions are not, and no window is claimed (conservative:
//!   routes then act on all of the VMA's windows; see `Verifier::huge_windows`
//!   in verify.rs);
//! - the copy route's new anonymous mapping is exactly the windows to move,
//!   so `AnonHugePages` = its size proves each of them;
//! - `Anonymous` + `Swap` of a private file mapping are its copy-on-write
//!   pages (debugger breakpoints, uprobes): the "not the file's" test.
//!
//! The field names exist since Linux 5.4 (`FilePmdMapped`); on older
//! kernels a missing field reads as 0, so nothing is ever over-claimed.

use crate::maps;
use crate::scan;
use crate::sys;
use hugetext_abi::smaps::kb_field;

const BUF: usize = 16384;

/// The totals of one VMA that matter here, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vma {
    pub start: usize,
    pub end: usize,
    /// `FilePmdMapped + AnonHugePages` (+ `ShmemPmdMapped`).
    pub pmd: u64,
    /// `Anonymous + Swap`: pages that are not the file's.
    pub private: u64,
}

impl Vma {
    /// The whole 2 MiB windows inside `[max(start, lo), min(end, hi))`.
    fn windows_within(&self, lo: usize, hi: usize) -> (usize, usize) {
        let w = scan::windows(self.start.max(lo), self.end.min(hi));
        (w.start(), w.end())
    }

    /// Are all of this VMA's whole windows PMD-mapped (and is there one)?
    pub fn all_huge(&self) -> bool {
        let (s, e) = self.windows_within(0, usize::MAX);
        e > s && self.pmd >= (e - s) as u64
    }
}

/// `/proc/self/smaps` reader with its own mmapped buffer.
pub struct Smaps {
    buf: *mut u8,
}

impl Smaps {
    /// Map the buffer and check that smaps can be read.
    pub fn open() -> Result<Smaps, isize> {
        let m = sys::anon_rw(BUF);
        if m < 0 {
            return Err(m);
        }
        let s = Smaps { buf: m as *mut u8 };
        // Reading stops after the first VMA: cheap.
        s.each(0, 1, |_| {})?;
        Ok(s)
    }

    /// Call `f` for every VMA intersecting `[start, end)`, in address order.
    /// Reading stops at the first VMA past `end`, so the kernel walks the
    /// page tables of no VMA after it.
    pub fn each(&self, start: usize, end: usize, mut f: impl FnMut(&Vma)) -> Result<(), isize> {
        // SAFETY: `buf` is our own BUF-byte read-write mapping, used by one
        // pass at a time (the pass lock in lib.rs).
        let buf = unsafe { core::slice::from_raw_parts_mut(self.buf, BUF) };
        let mut cur: Option<Vma> = None;
        let hits = |v: &Vma| v.start < end && start < v.end;
        maps::for_each_line(b"/proc/self/smaps\0", buf, |l| {
            if let Some(h) = maps::parse_line(l) {
                if let Some(v) = cur.take() {
                    if hits(&v) {
                        f(&v);
                    }
                }
                if h.start >= end {
                    return false;
                }
                cur = Some(Vma {
                    start: h.start,
                    end: h.end,
                    ..Vma::default()
                });
                return true;
            }
            if let Some(v) = cur.as_mut().filter(|v| hits(v)) {
                if let Some(kb) = kb_field(l, b"FilePmdMapped:")
                    .or_else(|| kb_field(l, b"AnonHugePages:"))
                    .or_else(|| kb_field(l, b"ShmemPmdMapped:"))
                {
                    v.pmd += kb << 10;
                } else if let Some(kb) = kb_field(l, b"Anonymous:").or_else(|| kb_field(l, b"Swap:")) {
                    v.private += kb << 10;
                }
            }
            true
        })?;
        if let Some(v) = cur.filter(|v| hits(v)) {
            f(&v);
        }
        Ok(())
    }

    /// Bit `i` set ⇔ window `[start + i·2M, start + (i+1)·2M)` is proved
    /// PMD-mapped: it lies in a VMA all of whose whole windows are. Also
    /// returns the PMD-mapped bytes of `[lo, hi)`: per intersecting VMA its
    /// total, at most its whole windows inside `[lo, hi)`.
    pub fn measure(&self, start: usize, n: usize, lo: usize, hi: usize) -> Result<(u64, u64), isize> {
        let unit = scan::unit();
        let end = start + n * unit;
        let (mut mask, mut bytes) = (0u64, 0u64);
        self.each(start.min(lo), end.max(hi), |v| {
            if v.start < hi && lo < v.end {
                let (s, e) = v.windows_within(lo, hi);
                bytes += v.pmd.min((e - s) as u64);
            }
            if v.start < end && start < v.end && v.all_huge() {
                for i in 0..n {
                    let ws = start + i * unit;
                    if v.start <= ws && ws + unit <= v.end {
                        mask |= 1 << i;
                    }
                }
            }
        })?;
        Ok((mask, bytes))
    }

    /// Does any VMA in `[start, end)` hold pages that are not the file's?
    pub fn has_private_pages(&self, start: usize, end: usize) -> Result<bool, isize> {
        let mut any = false;
        self.each(start, end, |v| any |= v.private > 0)?;
        Ok(any)
    }
}

impl Drop for Smaps {
    fn drop(&mut self) {
        // SAFETY: our own buffer; `each` borrows it only while `self` lives.
        unsafe { sys::munmap(self.buf as usize, BUF) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_huge_needs_every_whole_window() {
        let v = |start, end, pmd| Vma {
            start,
            end,
            pmd,
            private: 0,
        };
        // 0x1000..4 PMD + 0x1000: windows 1, 2, 3 (3 whole windows), in
        // units of the running kernel's PMD size.
        let p = scan::unit();
        assert!(v(0x1000, 4 * p + 0x1000, (3 * p) as u64).all_huge());
        assert!(!v(0x1000, 4 * p + 0x1000, (2 * p) as u64).all_huge());
        // No whole window: never "all huge".
        assert!(!v(0x1000, p, 0).all_huge());
    }

    /// Against this process's real smaps: an anonymous MADV_HUGEPAGE
    /// mapping of 4 windows, all touched, then 2 of 4.
    #[test]
    fn measures_a_real_anonymous_mapping() {
        let unit = scan::unit();
        let s = Smaps::open().unwrap();
        let len = 4 * unit;
        let m = sys::anon_rw(len + unit);
        assert!(m > 0);
        let a = hugetext_abi::geometry::align_up(m as usize, unit);
        if sys::advise(a, len, sys::Keep::Hugepage) < 0 {
            return; // THP not built in
        }
        // Guard pages so the VMA is exactly [a, a+len) (no merging).
        // SAFETY: the parts of our own mapping outside [a, a + len).
        unsafe {
            sys::mprotect(m as usize, a - m as usize, libc::PROT_NONE);
            sys::mprotect(a + len, m as usize + unit - a, libc::PROT_NONE);
        }
        let (mask, bytes) = s.measure(a, 4, a, a + len).unwrap();
        assert_eq!((mask, bytes), (0, 0));
        for w in 0..4 {
            // SAFETY: inside our writable mapping.
            unsafe { core::ptr::write_volatile((a + w * unit) as *mut u8, 1) };
        }
        // THP `enabled` is `madvise` or `always` on the machines we test on.
        let (mask, bytes) = s.measure(a, 4, a, a + len).unwrap();
        assert_eq!((mask, bytes), (0b1111, len as u64));
        // Split one window into 4 KiB pages: the count drops, and no window
        // can be claimed any more.
        // SAFETY: our own mapping; only this test reads it.
        unsafe { sys::madvise(a + unit, 4096, sys::MADV_DONTNEED) };
        let (mask, bytes) = s.measure(a, 4, a, a + len).unwrap();
        assert_eq!((mask, bytes), (0, 3 * unit as u64));
        // A range inside the VMA: its windows are not claimed either.
        assert_eq!(s.measure(a + 2 * unit, 2, a, a + len).unwrap(), (0, 3 * unit as u64));
        assert!(s.has_private_pages(a, a + len).unwrap());
        // SAFETY: our own mapping, no longer used.
        unsafe { sys::munmap(m as usize, len + unit) };
    }
}
