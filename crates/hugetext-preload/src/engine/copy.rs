//! The `copy` route: anonymous huge pages filled from the page cache or
//! the file, then moved over the text in one `mremap`.

use super::collect::ensure_fd;
use super::{full, runs, Cand, Chunk, Pass};
use crate::copies::remember_copy;
use crate::out::{line, Out};
use crate::perfmap::{self, ElfFile};
use crate::scan;
use crate::sys;
use hugetext_abi::copyname;
/// Route 4, `copy`: every window not yet huge into anonymous huge
/// pages ([`copy`]).
pub(super) fn route_copy(p: &mut Pass, c: &Cand, w: &mut Chunk, fd: &mut isize, elf: &mut Option<ElfFile>) {
    let unit = scan::unit();
    let f = ensure_fd(p, c, fd);
    if p.cfg.perf_map && elf.is_none() && f > 0 {
        let t_perf = sys::now_ns();
        *elf = ElfFile::map(f as i32).ok();
        p.t.ns_perf_map += sys::now_ns().saturating_sub(t_perf);
    }
    for (i, k) in runs(w.all & !w.huge) {
        copy(p, c, f, w.a + i * unit, k, elf.as_ref());
    }
    p.t.copy += p.remeasure(c, w);
}

/// Copy `k` windows at `dst` into anonymous huge pages and move them over
/// the original with one mremap per run of huge windows.
pub(super) fn copy(p: &mut Pass, c: &Cand, fd: isize, dst: usize, k: usize, elf: Option<&ElfFile>) {
    let unit = scan::unit();
    let len = k * unit;
    let m = sys::mmap(
        len + unit,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
        0,
    );
    if m < 0 {
        return p.fail(c, "copy: mmap", m);
    }
    let m = m as usize;
    let new = hugetext_abi::geometry::align_up(m, unit);
    // SAFETY: (every munmap and the mprotect of this function) the
    // ranges are parts of our own fresh mapping `m`, which nothing else
    // refers to, until mremap moves them over the text.
    unsafe {
        if new > m {
            sys::munmap(m, new - m);
        }
        if m + unit > new {
            sys::munmap(new + len, m + unit - new);
        }
    }
    let r = sys::advise(new, len, sys::Keep::Hugepage);
    if r < 0 {
        // SAFETY: see above.
        unsafe { sys::munmap(new, len) };
        return p.fail(c, "copy: madvise(MADV_HUGEPAGE)", r);
    }
    let off = c.off + (dst - c.start) as u64;
    // Contpte unit: which blocks got one folio of at least the unit,
    // proved before the fill writes anything else (verify::first_touch).
    let touched = if scan::is_contpte() {
        touch_blocks(new, k)
    } else {
        full(k)
    };
    if !scan::is_contpte() {
        // The huge pages' allocation and zeroing, in one call before
        // the fill and timed apart: what the machine charges for new
        // huge pages whatever fills them (on a VM, more when the host
        // no longer backs the memory). Where the call fails (before
        // 5.14) the fill's writes fault them in, as before.
        let (t_zero, c_zero) = (sys::now_ns(), sys::thread_cpu_ns());
        sys::advise(new, len, sys::Keep::PopulateWrite);
        p.t.ns_copy_zero += sys::now_ns().saturating_sub(t_zero);
        p.t.ns_copy_zero_cpu += sys::thread_cpu_ns().saturating_sub(c_zero);
    }
    let (t_fill, c_fill) = (sys::now_ns(), sys::thread_cpu_ns());
    fill(p, fd, off, dst, new, len);
    p.t.ns_copy_fill += sys::now_ns().saturating_sub(t_fill);
    p.t.ns_copy_fill_cpu += sys::thread_cpu_ns().saturating_sub(c_fill);
    let mut hm = match p.scan.pfn_windows(new, k) {
        // Both proofs, where PFNs show (each is exact alone).
        Some(m) => m & touched,
        None if scan::is_contpte() => touched,
        None => p.scan.huge_windows(new, k).unwrap_or(0),
    };
    if hm != full(k) && !scan::is_contpte() {
        // The fault could not get a huge page at once: compact and
        // collapse (MADV_COLLAPSE builds PMD-size folios only, so not
        // for a contpte unit).
        sys::advise(new, len, sys::Keep::Collapse);
        hm = p.scan.huge_windows(new, k).unwrap_or(0);
    }
    if hm == 0 {
        // SAFETY: see above.
        unsafe { sys::munmap(new, len) };
        let what = if scan::is_contpte() {
            "copy: no 2 MiB anonymous folio could be allocated (memory fragmented?)"
        } else {
            "copy: no huge page could be allocated"
        };
        return p.fail(c, what, -(libc::ENOMEM as isize));
    }
    // SAFETY: see above.
    let r = unsafe { sys::mprotect(new, len, libc::PROT_READ | libc::PROT_EXEC) };
    if r < 0 {
        // SAFETY: see above.
        unsafe { sys::munmap(new, len) };
        return p.fail(c, "copy: mprotect", r);
    }
    if p.cfg.name_vmas {
        let mut name = [0u8; copyname::BUF_LEN];
        let n = copyname::write(p.st.path(c), &mut name);
        let r = sys::name_anon(new, len, &name[..=n]);
        if r < 0 && !p.t.naming_failed {
            p.t.naming_failed = true;
            if p.cfg.verbose {
                line()
                    .s("cannot name the copied text in /proc/PID/maps (kernel without CONFIG_ANON_VMA_NAME?)")
                    .err(r);
            }
        }
    }
    for (i, kk) in runs(full(k) & !hm) {
        // SAFETY: see above.
        unsafe { sys::munmap(new + i * unit, kk * unit) };
    }
    for (i, kk) in runs(hm) {
        let (from, to, l) = (new + i * unit, dst + i * unit, kk * unit);
        // SAFETY: moves our copy (the same bytes, `r-x`) over the text
        // windows in one step: code running there keeps finding the
        // same instructions; `from` is ours.
        let r = unsafe { sys::mremap(from, l, l, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, to) };
        if r < 0 {
            // SAFETY: see above.
            unsafe { sys::munmap(from, l) };
            p.fail(c, "copy: mremap", r);
            continue;
        }
        remember_copy(to, to + l);
        if let Some(e) = elf {
            let t_perf = sys::now_ns();
            perf_symbols(p, c, e, to, l);
            p.t.ns_perf_map += sys::now_ns().saturating_sub(t_perf);
        }
    }
    if hm != full(k) {
        p.note(
            c,
            "copy: some windows got no huge page (memory fragmented?) and were left in place",
        );
    }
}

/// Contpte unit: fault each block of the fresh copy at `new` once and
/// return the blocks proved one folio of at least the unit
/// ([`crate::verify::first_touch`]). A block that got smaller folios
/// (no free 2 MiB block at that moment) is mapped afresh and faulted
/// again, up to twice more: the kernel compacts memory for a
/// `MADV_HUGEPAGE` fault (THP `defrag`), as `MADV_COLLAPSE` does for
/// the PMD unit, which builds PMD-size folios only.
pub(super) fn touch_blocks(new: usize, k: usize) -> u64 {
    let unit = scan::unit();
    let mut got = crate::verify::first_touch(new, k);
    for _ in 0..2 {
        if got == full(k) {
            break;
        }
        for (i, kk) in runs(full(k) & !got) {
            let (a, l) = (new + i * unit, kk * unit);
            // SAFETY: blocks of our own fresh copy, which nothing else
            // refers to yet: unmapped and mapped again, empty.
            let r = unsafe {
                sys::mmap_fixed(
                    a,
                    l,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r < 0 || sys::advise(a, l, sys::Keep::Hugepage) < 0 {
                continue;
            }
            got |= crate::verify::first_touch(a, kk) << i;
        }
    }
    got
}

/// Fill `new` with the `len` bytes of text at `dst`, file offset `off`:
/// from the file open on `fd` if `fd > 0` ([`fill_from_file`]),
/// and what is left (no fd, or a read failed or stopped short) copied
/// from the mapped text. The text was checked unmodified
/// ([`mapping::mapping`]: no private pages), so the file holds the same
/// bytes.
pub(super) fn fill(p: &mut Pass, fd: isize, off: u64, dst: usize, new: usize, len: usize) {
    let done = if fd > 0 {
        fill_from_file(p, fd as i32, off, new, len)
    } else {
        0
    };
    if done == len {
        return;
    }
    let (dst, new, len) = (dst + done, new + done, len - done);
    // Map the rest of the source in one call (the kernel's fault-around,
    // no trap per 64 KiB). Without it the copy below faults it in.
    if !p.touch && sys::advise(dst, len, sys::Keep::PopulateRead) == -(libc::EINVAL as isize) {
        p.populate_refused();
    }
    // SAFETY: `dst..dst+len` is readable text of this process (r-x, and
    // verified unmodified); `new..new+len` is our fresh writable mapping.
    unsafe { core::ptr::copy_nonoverlapping(dst as *const u8, new as *mut u8, len) };
}

/// Fill `new` with the `len` bytes at offset `off` of the file open on
/// `fd`, the cheapest way the page cache allows, never faulting the text
/// itself (measured with the `copy_floor` example; the kernel zeroes
/// each new huge page at its first write whatever fills it): map the
/// file range again at a congruent address (address − offset a multiple
/// of 2 MiB, which the text of lld and mold output is not) and probe each
/// 2 MiB block of it with one load ([`file::cache_is_pmd`]'s way). The
/// bytes that 2 MiB folios hold, now mapped with PMDs, are copied from
/// there (memory speed); the others are `pread` straight into the new
/// huge pages (from smaller folios, reading beats mapping them in 4 KiB
/// pages and copying). Returns the bytes filled from the start of `new`
/// (less than `len` when a read failed or stopped short).
pub(super) fn fill_from_file(p: &mut Pass, fd: i32, off: u64, new: usize, len: usize) -> usize {
    let unit = scan::unit();
    let base = hugetext_abi::geometry::align_down(off, unit as u64);
    let head = (off - base) as usize;
    // File 2 MiB blocks the range touches (`<= 65`).
    let blocks = (head + len).div_ceil(unit);
    // A mask of the blocks held by 2 MiB folios, when it can be learned
    // cheaply (PAGEMAP_SCAN, MADV_POPULATE_READ not refused).
    let mut huge = [0u64; 2];
    let mut view = 0usize;
    let res = if p.touch || p.scan.is_smaps() || !p.scan.sees_folios() {
        -1
    } else {
        sys::mmap(
            blocks * unit + unit,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if res >= 0 {
        let t = hugetext_abi::geometry::align_up(res as usize, unit);
        // SAFETY: `[t, t + blocks·2M)` lies inside our own PROT_NONE
        // reservation `res`, which nothing else uses.
        let m = unsafe {
            sys::mmap_fixed(
                t,
                blocks * unit,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                fd,
                base,
            )
        };
        if m >= 0 && sys::advise(t, blocks * unit, sys::Keep::Hugepage) == 0 {
            view = t;
            for b in 0..blocks {
                // SAFETY: the first page of block `b`, mapped PROT_READ
                // just above, inside the file: it is at or before
                // `off + len`, within the text.
                unsafe { sys::touch(t + b * unit, 4096) };
            }
            for (i, m) in huge.iter_mut().enumerate() {
                let n = blocks.saturating_sub(i * 64).min(64);
                if n > 0 {
                    *m = p.scan.huge_windows(t + i * 64 * unit, n).unwrap_or(0);
                }
            }
        }
    }
    let is_pmd = |b: usize| view != 0 && huge[b / 64] & (1 << (b % 64)) != 0;
    // Runs of blocks of one kind, in order: copy or read.
    let mut done = 0;
    let mut b = 0;
    while b < blocks {
        let kind = is_pmd(b);
        let mut e = b + 1;
        while e < blocks && is_pmd(e) == kind {
            e += 1;
        }
        // The bytes of `new` that blocks `[b, e)` hold.
        let lo = (b * unit).saturating_sub(head);
        let hi = (e * unit - head).min(len);
        if kind {
            // SAFETY: `view + head + lo..hi` is our own mapping of the
            // file, PMD-mapped (2 MiB folios, resident); `new + lo..hi`
            // is our fresh writable mapping.
            unsafe { core::ptr::copy_nonoverlapping((view + head + lo) as *const u8, (new + lo) as *mut u8, hi - lo) };
            p.t.copy_pmd += (hi - lo) as u64;
            done = hi;
        } else {
            let r = read(fd, off + lo as u64, new + lo, hi - lo);
            p.t.copy_read += r as u64;
            done = lo + r;
            if done < hi {
                break;
            }
        }
        b = e;
    }
    if res >= 0 {
        // SAFETY: our reservation and the view in it; nothing refers to
        // them (the copy is done).
        unsafe { sys::munmap(res as usize, blocks * unit + unit) };
    }
    done
}

/// `pread` `len` bytes at `off` of `fd` into `new` (our fresh writable
/// mapping). Returns the bytes read (fewer on error or end of file).
pub(super) fn read(fd: i32, off: u64, new: usize, len: usize) -> usize {
    let mut done = 0;
    while done < len {
        // SAFETY: `new + done..new + len` is our fresh writable mapping,
        // which nothing else uses yet.
        let r = unsafe { sys::pread(fd, new + done, len - done, off + done as u64) };
        if r == -(libc::EINTR as isize) {
            continue;
        }
        if r <= 0 {
            break;
        }
        done += r as usize;
    }
    done
}

pub(super) fn perf_symbols(p: &mut Pass, c: &Cand, e: &ElfFile, at: usize, len: usize) {
    if p.t.perf_map_fd == 0 {
        p.t.perf_map_fd = match perfmap::open_map() {
            Ok(fd) => fd as isize,
            Err(why) => {
                if p.cfg.verbose {
                    why.say();
                }
                -1
            }
        };
    }
    if p.t.perf_map_fd < 0 {
        return;
    }
    let Some(bias) = e.bias(c.start, c.off) else { return };
    let mut out = Out::<8192>::new(p.t.perf_map_fd as i32);
    e.write_symbols(bias, at as u64, (at + len) as u64, &mut out);
}
