//! The `file` route: huge pages from the page cache, zero copy (see the
//! engine's module documentation, step 2).

use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

use super::collect::ensure_fd;
use super::collect::fs_name;
use super::{runs, Cand, Chunk, Pass};
use crate::out::line;
use crate::scan;
use crate::sys;
/// The steps of the `file` route a call runs: 2a maps 2 MiB folios the page
/// cache already holds (cheap, always first); 2b drops, evicts and refaults
/// what stayed small (where `collapse` goes first, it runs after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FileStep {
    /// 2a only.
    Cached,
    /// 2b only.
    Evict,
    /// 2a, then 2b.
    Both,
}

/// What `MADV_DONTNEED` of a whole 2 MiB window does with the emptied page
/// table on this kernel: not known yet, frees it (`CONFIG_PT_RECLAIM`,
/// 6.14+), or keeps it (then the file route replaces windows with
/// `mmap(MAP_FIXED)`, [`replace`]). Found out at the first dropped
/// window that refaults huge, or small from a 2 MiB folio
/// ([`window`]); remembered for the process. Process-wide because it is a
/// fact of the kernel, not of one pass: later passes of this copy of the
/// library skip the probe. Read and written only in this module, under the
/// pass lock (`BUSY` in lib.rs); [`window_mode`] decides from
/// its value.
static PT: AtomicU8 = AtomicU8::new(PT_UNKNOWN);
pub(super) const PT_UNKNOWN: u8 = 0;
pub(super) const PT_FREED: u8 = 1;
pub(super) const PT_KEPT: u8 = 2;
/// Evicted windows per pass that may refault small from small folios
/// without deciding it (a filesystem without large folios would otherwise
/// cost a probe per window)...
pub(super) const MAX_CHECKS: u8 = 4;
/// ... and probes per pass in all (windows not evicted: another process
/// maps their page cache, or threads running the text kept it mapped).
pub(super) const MAX_PROBES: u8 = 16;

/// Route 2, `file`, zero copy (congruent text only): the steps `step`
/// names (2a, 2b or both).
pub(super) fn route_file(p: &mut Pass, c: &Cand, w: &mut Chunk, fd: &mut isize, advised: &mut bool, step: FileStep) {
    let unit = scan::unit();
    let (a, all) = (w.a, w.all);
    if !*advised {
        *advised = true;
        let r = sys::advise(c.start, c.end - c.start, sys::Keep::Hugepage);
        if r < 0 {
            p.fail(c, "file route: madvise(MADV_HUGEPAGE)", r);
        }
    }
    // 2a: the page cache may already hold 2 MiB folios.
    if step != FileStep::Evict {
        for (i, k) in runs(all & !w.huge) {
            p.populate(a + i * unit, k * unit);
        }
        p.t.file += p.remeasure(c, w);
    }
    // 2b: drop, evict, refault.
    if w.done() || step == FileStep::Cached {
        return;
    }
    let f = ensure_fd(p, c, fd);
    if f < 0 {
        return p.fail(c, "file route: cannot open the mapped file", f);
    }
    // Dirty folios (a freshly written binary) cannot be evicted: write
    // them back first (no-op when clean).
    sys::fdatasync(f as i32);
    let mut err = 0;
    // Windows whose page cache was gone after the eviction (nobody else
    // maps it): if they refault small, the filesystem gives no large
    // folios.
    let mut evicted = 0u64;
    let mut what = "";
    // Window by window, so that other threads running this text have as
    // little time as possible to fault a small page back in between drop
    // and refault; a window they did spoil gets two more tries.
    for _attempt in 0..3 {
        for (i, k) in runs(all & !w.huge) {
            for win in i..i + k {
                let (r, gone, at) = window(p, c, f as i32, a + win * unit);
                if gone {
                    evicted |= 1u64 << win;
                }
                if r < 0 {
                    (err, what) = (r, at);
                    break;
                }
            }
            if err < 0 {
                break;
            }
        }
        if err < 0 {
            p.fail(c, what, err);
        }
        let gain = p.remeasure(c, w);
        p.t.file += gain;
        let progress = gain > 0;
        if w.done() || err < 0 || !progress {
            break;
        }
    }
    let small = all & !w.huge;
    if small != 0 && err == 0 {
        if small & !evicted == 0 {
            if p.cfg.verbose {
                line()
                    .bytes(p.st.path(c))
                    .s(": file route: evicted and read back through MADV_HUGEPAGE, the page cache stayed in small folios: ")
                    .s(fs_name(f as i32))
                    .s(" has no large folios on this kernel (ext4 has them from Linux 6.16, xfs from 5.18)");
            }
        } else if small & evicted == 0 {
            p.note(
                c,
                "file route: some windows stayed small: their page cache is mapped (by this process's running threads or another process), so it cannot be evicted",
            );
        } else {
            p.note(
                c,
                "file route: some windows stayed small (their page cache is mapped by another process, or the filesystem has no large folios)",
            );
        }
    }
}

/// 2b for the window at `s`: drop this process's PTEs, evict the page
/// cache, fault it back through `MADV_HUGEPAGE`; where `MADV_DONTNEED`
/// leaves the emptied page table behind, also replace the window's
/// mapping so that the refault can install a PMD (see
/// [`replace`]). Whether it does is found out here, at the first
/// window that tells (process-wide, see [`PT`]). Returns (0 or
/// `-errno`, whether the page cache was evicted, what failed).
pub(super) fn window(p: &mut Pass, c: &Cand, f: i32, s: usize) -> (isize, bool, &'static str) {
    let unit = scan::unit();
    let off = Pass::file_off(c, s);
    let (detect, replace) = window_mode(PT.load(Relaxed), p.checks, p.probes);
    // The window's huge bytes before (outside the critical section: smaps
    // may be the verifier).
    let before = match detect {
        true => p.scan.measure(s, 1, c.start, c.end).ok(),
        false => None,
    };
    let (r, gone, what) = refault(p, f, s, off, replace);
    if r < 0 {
        return (r, gone, what);
    }
    let Some((_, bytes_before)) = before else {
        return (r, gone, what);
    };
    // Dropped and faulted back through MADV_HUGEPAGE: not PMD-mapped now
    // means that the page cache holds small folios (the filesystem or
    // memory gave no large one, or they could not be evicted: mapped by
    // another process, or by a thread of ours between drop and evict),
    // or that it holds one 2 MiB folio and the fault found a page table
    // and could not install a PMD. A fresh mapping of the same file range
    // tells which. (Not only evicted windows: a thread running the text
    // may fault the window back in after the eviction — from a 2 MiB
    // folio, which a kept table then maps with PTEs.)
    let huge_now = match p.scan.measure(s, 1, c.start, c.end) {
        Ok((m, b)) => m & 1 != 0 || b >= bytes_before + unit as u64,
        Err(_) => return (r, gone, what),
    };
    if huge_now {
        PT.store(PT_FREED, Relaxed);
        return (r, gone, what);
    }
    p.probes += 1;
    if !cache_is_pmd(p, f, off) {
        // Evicted and read back small: the filesystem or memory gave no
        // large folio. (Not evicted: most likely a thread of ours kept
        // small folios mapped; that says nothing about the kernel.)
        if gone {
            p.checks += 1;
        }
        return (r, gone, what);
    }
    PT.store(PT_KEPT, Relaxed);
    if p.cfg.verbose {
        let mut o = line();
        o.s("the page cache holds ")
            .size(scan::unit() as u64)
            .s(" folios but this process's mapping stayed in ")
            .size(scan::page() as u64)
            .s(" pages: ")
            .s("MADV_DONTNEED left the emptied page table (as kernels before 6.14 do");
        if p.cfg.compat.no_pt_reclaim {
            o.s("; here because of HUGETEXT_COMPAT=no-pt-reclaim");
        }
        o.s("); replacing windows with mmap(MAP_FIXED) from now on");
    }
    // Redo this window with the replacement (its 2 MiB folio, unmapped
    // again, is evicted and read once more: one window, once per process).
    let (r, _, what) = refault(p, f, s, off, true);
    (r, gone, what)
}

/// The critical section of one window (see [`window`]).
pub(super) fn refault(p: &mut Pass, f: i32, s: usize, off: u64, replace: bool) -> (isize, bool, &'static str) {
    let unit = scan::unit();
    // One byte per page of the window (the rest stays 0).
    let mut resident = [0u8; scan::MAX_PMD_PAGES];
    let mask = sys::block_signals();
    // Critical section: only raw syscalls and this library's own code
    // until the window is refaulted.
    // SAFETY: the window is text of a private file mapping with no
    // copy-on-write pages (checked per mapping: `has_private_pages`), so
    // dropping its PTEs loses nothing: it refaults the same bytes from
    // the file.
    let r = unsafe {
        // Two calls of 1 MiB: the kernel reclaims a page table only when
        // one call empties all of it (mm/pt_reclaim.c,
        // reclaim_pt_is_enabled: end - start >= PMD_SIZE), so the table
        // stays, as on every kernel before 6.14.
        if p.cfg.compat.no_pt_reclaim {
            match sys::madvise(s, unit / 2, sys::MADV_DONTNEED) {
                0 => sys::madvise(s + unit / 2, unit / 2, sys::MADV_DONTNEED),
                e => e,
            }
        } else {
            sys::madvise(s, unit, sys::MADV_DONTNEED)
        }
    };
    // MADV_DONTNEED also decides, before the mapping is replaced, that
    // the window may be dropped at all: it refuses mlocked text (EINVAL),
    // which a new mapping would silently unlock.
    let (mut r, mut what) = (r, "file route: madvise(MADV_DONTNEED)");
    let mut gone = false;
    if r == 0 {
        sys::fadvise(f, off, unit as u64, sys::POSIX_FADV_DONTNEED);
        // With our PTEs gone, mincore reports the page cache.
        gone = sys::mincore(s, unit, &mut resident) == 0 && resident.iter().all(|b| b & 1 == 0);
        // Replaced after the eviction: a thread faulting the old window
        // from now on reads a 2 MiB folio (the old VMA is VM_HUGEPAGE),
        // which the replacement then maps with a PMD; only a fault in the
        // two syscalls between the new mapping and its MADV_HUGEPAGE can
        // still read small folios (measured: the file route then wins
        // under the C API threads test about as often as without it).
        if replace {
            (r, what) = self::replace(p, f, s, off);
        }
    }
    if r == 0 {
        (r, what) = (p.populate(s, unit), "file route: madvise(MADV_POPULATE_READ)");
    }
    sys::restore_signals(mask);
    (r, gone, what)
}

/// Replace the window `[s, s + 2M)` with one new private mapping of the
/// same range of the same file (`f`: opened and checked to be the
/// mapped file by [`open_mapped`]), `r-x` like every candidate, then
/// `MADV_HUGEPAGE` it (`VM_HUGEPAGE` is per VMA). Called in the critical
/// section, after `MADV_DONTNEED` and the eviction.
///
/// Why: before Linux 6.14 (`CONFIG_PT_RECLAIM`, x86-64 only; and even
/// then not when a zap skips an entry) `MADV_DONTNEED` leaves the
/// emptied PTE table in place, and a fault with a page table present
/// maps 4 KiB pages (`do_set_pmd()` needs `pmd_none`). An mmap with
/// `MAP_FIXED` unmaps the old VMA first, and `munmap` frees the page
/// tables of the range between the neighbouring VMAs: in mm/vma.c
/// (6.12+), `vms_gather_munmap_vmas()` splits the text VMA at the window's
/// edges, sets `unmap_start`/`unmap_end` to the neighbours'
/// `vm_end`/`vm_start` (= the window), and `vms_clear_ptes()` calls
/// `free_pgtables()` with that floor and ceiling: the PTE table covering
/// exactly this 2 MiB-aligned window is freed (older kernels: the same
/// through `unmap_region()` in mm/mmap.c). It is atomic for the other
/// threads: `vm_mmap_pgoff()` holds the mmap write lock from before the
/// unmap until the new VMA is inserted (`mmap_region()` never downgrades
/// it, unlike `munmap(2)`), and the old VMA is write-locked
/// (`vma_start_write()`) before it is detached, so a thread executing
/// there faults, waits for the lock, and finds the new mapping: the same
/// bytes.
///
/// What the new VMA keeps and loses. Kept: prot `r-x`, `MAP_PRIVATE`,
/// file and offset (maps shows the same path, inode and offsets), and
/// the content: the route only runs on text with no copy-on-write pages
/// (checked per mapping; a `MAP_FIXED` would discard them), and uprobes
/// are re-inserted by `uprobe_mmap()`. `MAP_DENYWRITE` is ignored for
/// user mmaps, and since 5.15 no VMA denies writes (the executable's
/// `ETXTBSY` comes from `mm->exe_file`, untouched); before 5.15 the
/// loader's other `VM_DENYWRITE` segments of the file keep `ETXTBSY`.
/// Lost: per-VMA state set by the program on its own text — `madvise`
/// hints (`MADV_DONTDUMP`, `MADV_RANDOM`…), `mbind` policy, protection
/// keys, userfaultfd registration; `VM_LOCKED` cannot be lost (see
/// above). The struct file is ours, not the loader's, so the kernel
/// cannot merge the new VMA with the rest of the text (`is_mergeable_vma`
/// compares `vm_file`): the text shows as up to three lines in
/// /proc/PID/maps (head, the replaced windows — adjacent ones merge —
/// and tail), all naming the file. mseal'ed text fails with `EPERM`
/// before anything is unmapped.
///
/// Failure: since 6.12 ("Avoid MAP_FIXED gap exposure") a failing
/// `MAP_FIXED` mmap restores the old mapping. Older kernels unmap first
/// and may then fail allocating the new VMA (`ENOMEM`, in practice only
/// for a task being OOM-killed), leaving a hole: map the range again.
pub(super) fn replace(p: &mut Pass, f: i32, s: usize, off: u64) -> (isize, &'static str) {
    let unit = scan::unit();
    let prot = libc::PROT_READ | libc::PROT_EXEC;
    let flags = libc::MAP_PRIVATE | libc::MAP_FIXED;
    // SAFETY: the same bytes as before, the window's range of the very
    // file mapped there (`open_mapped` checked it), `r-x` like the text.
    let r = unsafe { sys::mmap_fixed(s, unit, prot, flags, f, off) };
    if r < 0 {
        let mut v = [0u8; 1];
        for _ in 0..8 {
            if sys::mincore(s, 4096, &mut v) != -(libc::ENOMEM as isize) {
                break; // still mapped
            }
            // SAFETY: as above, into the hole the failed call left.
            unsafe { sys::mmap_fixed(s, unit, prot, flags, f, off) };
        }
        return (r, "file route: mmap(MAP_FIXED) of the window");
    }
    p.t.replaced += unit as u64;
    (
        sys::advise(s, unit, sys::Keep::Hugepage),
        "file route: madvise(MADV_HUGEPAGE) of the replaced window",
    )
}

/// Does the page cache hold one 2 MiB folio for the file range at `off`
/// (2 MiB-aligned)? Map it at a fresh 2 MiB-aligned address, where no
/// page table exists yet, and load one byte: a PMD folio is then mapped
/// with a PMD (`do_set_pmd()`), small folios with PTEs. Read-only, and
/// the pages are resident (just populated): nothing is read from disk.
pub(super) fn cache_is_pmd(pass: &Pass, f: i32, off: u64) -> bool {
    let unit = scan::unit();
    let m = sys::mmap(
        2 * unit,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
        0,
    );
    if m < 0 {
        return false;
    }
    let p = hugetext_abi::geometry::align_up(m as usize, unit);
    // SAFETY: [p, p + 2M) lies inside our own PROT_NONE reservation.
    let ok = unsafe { sys::mmap_fixed(p, unit, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_FIXED, f, off) } >= 0
        && sys::advise(p, unit, sys::Keep::Hugepage) == 0
        && {
            // SAFETY: the first page of the file range just mapped
            // PROT_READ at `p`, inside the file (`off` is a window of it).
            unsafe { sys::touch(p, 4096) };
            pass.scan.huge_windows(p, 1) == Ok(1)
        };
    // SAFETY: our reservation and the probe mapping in it; nothing
    // refers to them.
    unsafe { sys::munmap(m as usize, 2 * unit) };
    ok
}

/// How the file route drops and refaults one window, from what is known of
/// this kernel's `MADV_DONTNEED` ([`PT`]) and the pass's probe budget:
/// (measure it to find out whether the emptied page table stays, replace
/// the window with `mmap(MAP_FIXED)` because it does).
pub(super) fn window_mode(pt: u8, checks: u8, probes: u8) -> (bool, bool) {
    let detect = pt == PT_UNKNOWN && checks < MAX_CHECKS && probes < MAX_PROBES;
    (detect, pt == PT_KEPT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_replaced_where_dontneed_keeps_page_tables() {
        // Not known yet: find out (while the budget lasts), do not replace.
        assert_eq!(window_mode(PT_UNKNOWN, 0, 0), (true, false));
        assert_eq!(window_mode(PT_UNKNOWN, MAX_CHECKS - 1, MAX_PROBES - 1), (true, false));
        assert_eq!(window_mode(PT_UNKNOWN, MAX_CHECKS, 0), (false, false));
        assert_eq!(window_mode(PT_UNKNOWN, 0, MAX_PROBES), (false, false));
        // Kernels before 6.14 (or HUGETEXT_COMPAT=no-pt-reclaim): replace.
        assert_eq!(window_mode(PT_KEPT, 0, 0), (false, true));
        // 6.14+ with CONFIG_PT_RECLAIM: neither.
        assert_eq!(window_mode(PT_FREED, 0, 0), (false, false));
    }
}
