//! Page cache: evict a file's clean, unmapped folios and refill ranges with
//! folios of the huge unit (PMD-order; the 2 MiB contpte block on arm64
//! with 64 KiB pages: [`kernel::huge_unit`]) through a unit-congruent
//! `MADV_HUGEPAGE` mapping (doc/kernel-facts.md §1).
//!
//! Pages are faulted in with `MADV_POPULATE_READ`, or, on kernels before
//! 5.14 (or with `HUGETEXT_COMPAT=no-populate`), by loading one byte per
//! page ([`kernel::populate_read`]): the first load of a window in a
//! `MADV_HUGEPAGE` mapping reads the whole PMD-order folio just the same.
//!
//! Three ways to fill, from the most to the least general:
//! - [`fill_huge`]: a congruent `MADV_HUGEPAGE` mapping over the range,
//!   populated; page-cache misses are read as PMD-order folios. Readahead is
//!   the kernel's VM_HUGEPAGE path, which reads up to two PMD windows per
//!   fault and may read past the end of the range.
//! - [`fill_bounded`]: what `warm` uses. The whole PMD windows inside the
//!   range are read with one PMD-order folio each and nothing outside them
//!   (`MADV_RANDOM` turns the two-window read into exactly one), several
//!   windows in flight at once; the head and tail of the range (parts of a
//!   window) are read with `readahead(2)`, which never reads past what it is
//!   asked for. So, like the kernel's exec readahead bounded to the VMA,
//!   padding outside the range is never pulled into the cache.
//! - [`collapse_window`]: `MADV_COLLAPSE` on a read-only executable mapping,
//!   which collapses a window in place even when other processes map it,
//!   but only on kernels with `CONFIG_READ_ONLY_THP_FOR_FS`
//!   ([`collapse_supported`] tells).

use hugetext_abi::geometry::Windows;
use std::fs::File;
use std::io::Write;
use std::num::NonZeroU64;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::kernel::{self, Mapping};
use crate::{Error, Result};

/// Drop the clean page cache of `range` of `file` that nobody maps.
///
/// Dirty pages (a file just written, copied or linked) cannot be dropped, so
/// the range is written back first (`sync_file_range`, which works on a
/// read-only descriptor); otherwise a freshly built program would keep the
/// folio sizes its writer gave it. On overlayfs the pages belong to the
/// layer's file, which `sync_file_range` on the overlay file does not
/// reach: there the file is written back with `fdatasync`, which overlayfs
/// passes down.
///
/// `0..0` means the whole file; any other empty range, nothing.
pub fn evict(file: &File, range: Range<u64>) -> Result<()> {
    let len = match range {
        Range { start: 0, end: 0 } => None,
        _ if range.is_empty() => return Ok(()),
        _ => NonZeroU64::new(range.end - range.start),
    };
    kernel::write_back(file.as_fd(), range.start, len)?;
    if crate::fsutil::fs_name(file) == "overlayfs" {
        rustix::fs::fdatasync(file.as_fd()).map_err(|e| Error::Sys {
            call: "fdatasync",
            source: e.into(),
        })?;
    }
    kernel::fadvise_dontneed(file.as_fd(), range.start, len)
}

/// Fill `range` of `file` into the page cache through a unit-congruent
/// `MADV_HUGEPAGE` mapping so that page-cache misses are read as PMD-order
/// folios (on filesystems with large-folio support; where the kernel caps
/// that readahead at 2 MiB, as 7.3 does, 64 KiB-page kernels read 2 MiB
/// folios there, the contpte unit). Pages
/// already cached keep the folio size they have: evict first.
pub fn fill_huge(file: &File, range: Range<u64>) -> Result<()> {
    if range.is_empty() {
        return Ok(());
    }
    let ps = kernel::page_size() as u64;
    let start = range.start / ps * ps;
    let len = (range.end - start).div_ceil(ps) * ps;
    let map = Mapping::file_congruent(
        file.as_fd(),
        start,
        len as usize,
        libc::PROT_READ | libc::PROT_EXEC,
        kernel::unit_size(),
    )?;
    map.madvise(0, len as usize, kernel::MADV_HUGEPAGE)?;
    map.populate_read(0, len as usize)
}

/// The whole windows of the huge unit ([`kernel::huge_unit`]: the PMD
/// size, or the contpte block where that is the unit) inside `range`:
/// `[ceil(start), floor(end))` rounded to the unit (empty when the range
/// holds no whole window).
pub fn huge_windows_in(range: &Range<u64>) -> Range<u64> {
    let w = Windows::<u64>::new(range.start, range.end, kernel::unit_size() as u64);
    w.start()..w.end()
}

/// Fill `range` of `file` reading nothing outside it: whole PMD windows as
/// PMD-order folios ([`fill_windows`]), the head and tail (and a range with
/// no whole window) with bounded reads ([`fill_edge`]). Evict first: cached
/// pages keep their folio size.
pub fn fill_bounded(file: &File, range: Range<u64>) -> Result<()> {
    if range.is_empty() {
        return Ok(());
    }
    let w = huge_windows_in(&range);
    if w.is_empty() {
        return fill_edge(file, range);
    }
    fill_edge(file, range.start..w.start)?;
    fill_edge(file, w.end..range.end)?;
    fill_windows(file, w, default_parallelism())
}

/// Fill a part of a range that cannot be PMD-mapped. Where the machine has
/// contpte mappings (arm64), in the largest folios the kernel reads for
/// executable mappings ([`fill_exec`]), which it can map with contiguous
/// PTEs; elsewhere in small folios ([`fill_small`]). Both read nothing
/// outside the (page-rounded) range.
fn fill_edge(file: &File, range: Range<u64>) -> Result<()> {
    if kernel::cont_pte_size().is_some() {
        fill_exec(file, range)
    } else {
        fill_small(file, range)
    }
}

/// Read `range` of `file` (page-rounded, clipped to the file size) through
/// an executable mapping of exactly that range: the kernel reads faults of
/// `VM_EXEC` mappings in folios of its preferred order for text (64 KiB on
/// arm64 since Linux 6.16) and bounds the read to the mapping; kernels
/// without that read one page per fault (`MADV_RANDOM`). Pages already
/// cached keep their folio size.
fn fill_exec(file: &File, range: Range<u64>) -> Result<()> {
    let ps = kernel::page_size() as u64;
    let size = file
        .metadata()
        .map_err(|e| Error::Sys {
            call: "fstat",
            source: e,
        })?
        .len();
    let start = range.start / ps * ps;
    let end = range.end.min(size).div_ceil(ps) * ps;
    if start >= end {
        return Ok(());
    }
    let len = (end - start) as usize;
    let map = Mapping::file_congruent(
        file.as_fd(),
        start,
        len,
        libc::PROT_READ | libc::PROT_EXEC,
        kernel::cont_pte_size().unwrap_or(ps as usize),
    )?;
    map.madvise(0, len, libc::MADV_RANDOM)?;
    map.populate_read(0, len)
}

/// How many windows to have in flight at once: one per CPU, at least 4
/// (a window read mostly waits for I/O), at most 8.
fn default_parallelism() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(4)
        .clamp(4, 8)
}

/// Read the unit-aligned `windows` of `file` into folios of the huge unit
/// ([`kernel::huge_unit`]), exactly one window per page-cache miss,
/// `parallel` windows in flight.
///
/// The range must start and end on unit boundaries. Pages already cached
/// are not read again (and keep their folio size).
pub fn fill_windows(file: &File, windows: Range<u64>, parallel: usize) -> Result<()> {
    let unit = kernel::unit_size() as u64;
    if windows.is_empty() {
        return Ok(());
    }
    if windows.start % unit != 0 || windows.end % unit != 0 {
        return Err(Error::Invalid(format!(
            "fill_windows: {:#x}..{:#x} is not aligned to the huge unit",
            windows.start, windows.end
        )));
    }
    let len = (windows.end - windows.start) as usize;
    let map = Mapping::file_congruent(
        file.as_fd(),
        windows.start,
        len,
        libc::PROT_READ | libc::PROT_EXEC,
        unit as usize,
    )?;
    map.madvise(0, len, kernel::MADV_HUGEPAGE)?;
    // VM_RAND_READ: the VM_HUGEPAGE fault path reads exactly one folio
    // (not two, not an async tail), so nothing past the range is read. Its
    // order is the PMD's, capped at 2 MiB where the kernel caps it (7.3
    // does): the contpte unit with 64 KiB pages.
    map.madvise(0, len, libc::MADV_RANDOM)?;
    let n = len as u64 / unit;
    let parallel = (parallel.max(1) as u64).min(n) as usize;
    let base = map.addr();
    if parallel <= 1 {
        return map.populate_read(0, len);
    }
    // Workers take windows from a shared counter, so each has one window
    // in flight and the next read starts as soon as one finishes.
    let next = std::sync::atomic::AtomicU64::new(0);
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..parallel)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if k >= n {
                            return Ok(());
                        }
                        // SAFETY: window k of `map` (PROT_READ), which stays
                        // mapped until the scope ends.
                        unsafe { kernel::populate_read(base + (k * unit) as usize, unit as usize)? };
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Other("fill worker panicked".into())))
            })
            .collect()
    });
    drop(map);
    results.into_iter().collect()
}

/// Read `range` of `file` into the page cache in small folios, reading
/// nothing outside it (page-rounded; clipped to the file size).
///
/// `readahead(2)` reads exactly the pages asked for, asynchronously, but it is
/// best-effort: the kernel may skip pages. So the range is checked with
/// `mincore` afterwards and what is missing is read with `pread` through a
/// private descriptor marked `POSIX_FADV_RANDOM`, which makes the kernel read
/// exactly the requested pages and no readahead window beyond them.
pub fn fill_small(file: &File, range: Range<u64>) -> Result<()> {
    let ps = kernel::page_size() as u64;
    let size = file
        .metadata()
        .map_err(|e| Error::Sys {
            call: "fstat",
            source: e,
        })?
        .len();
    let start = range.start / ps * ps;
    let end = range.end.min(size).div_ceil(ps) * ps;
    if start >= end {
        return Ok(());
    }
    // SAFETY: plain syscall on a valid fd.
    let r = unsafe { libc::readahead(file.as_raw_fd(), start as libc::off64_t, (end - start) as usize) };
    if r != 0 {
        return Err(Error::last_os("readahead"));
    }
    let map = Mapping::file_congruent(
        file.as_fd(),
        start,
        (end - start) as usize,
        libc::PROT_READ,
        ps as usize,
    )?;
    let resident = map.resident()?;
    drop(map);
    if resident.iter().all(|&r| r) {
        return Ok(());
    }
    let fd_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    let exact = File::open(&fd_path).map_err(|e| Error::io(&fd_path, e))?;
    // SAFETY: plain syscall on a valid fd.
    let r = unsafe { libc::posix_fadvise(exact.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    if r != 0 {
        return Err(Error::Sys {
            call: "posix_fadvise(RANDOM)",
            source: std::io::Error::from_raw_os_error(r),
        });
    }
    let mut buf = Vec::new();
    let mut i = 0;
    while i < resident.len() {
        if resident[i] {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < resident.len() && !resident[j] {
            j += 1;
        }
        let off = start + i as u64 * ps;
        let len = ((j - i) as u64 * ps).min(size - off) as usize;
        buf.resize(len, 0);
        match exact.read_exact_at(&mut buf, off) {
            // The file shrank meanwhile: nothing more to read.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            r => r.map_err(|e| Error::Sys {
                call: "pread",
                source: e,
            })?,
        }
        i = j;
    }
    Ok(())
}

/// Whether `MADV_COLLAPSE` can collapse read-only file text into PMD folios
/// on this kernel, for files on the filesystem of `dir`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum CollapseSupport {
    /// It works (the kernel has `CONFIG_READ_ONLY_THP_FOR_FS`).
    Available,
    /// It does not; the string says why.
    Unavailable(String),
}

impl CollapseSupport {
    /// True for [`CollapseSupport::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, CollapseSupport::Available)
    }
}

/// One `MADV_COLLAPSE` experiment ([`collapse_trial`]): what the kernel
/// said and what was PMD-mapped before and after.
#[derive(Debug)]
pub struct CollapseTrial {
    /// kB PMD-mapped (smaps `FilePmdMapped`) after the first fault, before
    /// any collapse: the kernel may map a PMD by itself (THP `always`).
    pub before_kb: u64,
    /// What `MADV_COLLAPSE` returned, after the retries of transient
    /// failures ([`collapse_transient`]).
    pub outcome: std::result::Result<(), std::io::Error>,
    /// kB PMD-mapped after the collapse and a refault (a file collapse
    /// drops the page tables of the small folios, ours too: the next fault
    /// maps the PMD, as in a process that runs the text).
    pub after_kb: u64,
    /// Time of the `MADV_COLLAPSE` calls and the refault.
    pub elapsed: std::time::Duration,
}

/// The one experiment behind [`collapse_supported`], `doctor`'s collapse
/// check and the route-cost measurement: the first `len` bytes of `f`
/// (read-only, a multiple of the PMD size) are evicted, mapped
/// `PROT_READ|PROT_EXEC` at a congruent address, faulted in (small folios,
/// as exec leaves text), then `MADV_COLLAPSE`d, retried up to `retries`
/// times 100 ms apart while the failure is transient, and faulted again.
/// The page cache is left as the experiment made it.
pub fn collapse_trial(f: &File, len: usize, retries: usize) -> Result<CollapseTrial> {
    let pmd = kernel::pmd_size();
    evict(f, 0..0)?;
    let m = Mapping::file_congruent(f.as_fd(), 0, len, libc::PROT_READ | libc::PROT_EXEC, pmd)?;
    m.populate_read(0, len)?;
    let before_kb = crate::procfs::own_file_pmd_kb(m.addr())?;
    let t = std::time::Instant::now();
    let mut r = m.madvise(0, len, kernel::MADV_COLLAPSE);
    for _ in 0..retries {
        match &r {
            Err(Error::Sys { source, .. }) if collapse_transient(source) => {
                std::thread::sleep(std::time::Duration::from_nanos(hugetext_abi::madv::COLLAPSE_RETRY_NS));
                m.populate_read(0, len)?;
                r = m.madvise(0, len, kernel::MADV_COLLAPSE);
            }
            _ => break,
        }
    }
    let outcome = match r {
        Ok(()) => Ok(()),
        Err(Error::Sys { source, .. }) => Err(source),
        Err(e) => return Err(e),
    };
    m.populate_read(0, len)?;
    let elapsed = t.elapsed();
    Ok(CollapseTrial {
        before_kb,
        outcome,
        after_kb: crate::procfs::own_file_pmd_kb(m.addr())?,
        elapsed,
    })
}

/// Find out whether `MADV_COLLAPSE` works on read-only file text by trying
/// it ([`collapse_trial`]): a scratch file of one PMD window is written in
/// `dir` (which must be writable and on the filesystem of interest), closed,
/// reopened read-only (collapse refuses files open for writing), unlinked,
/// and collapsed.
pub fn collapse_supported(dir: &Path) -> Result<CollapseSupport> {
    let pmd = kernel::pmd_size();
    if let Some(why) = collapse_out_of_reach() {
        return Ok(CollapseSupport::Unavailable(why));
    }
    // Removed when `path` is dropped, right after it is opened read-only.
    let (mut w, path) =
        crate::fsutil::scratch_file_in(dir, ".hugetext-collapse-probe-").map_err(|e| Error::io(dir, e))?;
    // RET (0xc3) everywhere: harmless text.
    let written = w.write_all(&vec![0xc3u8; pmd]).and_then(|()| w.sync_all());
    drop(w);
    written.map_err(|e| Error::io(&*path, e))?;
    let f = File::open(&path).map_err(|e| Error::io(&*path, e))?;
    drop(path);
    Ok(match collapse_trial(&f, pmd, 0)?.outcome {
        Ok(()) => CollapseSupport::Available,
        Err(source) => match source.raw_os_error() {
            Some(libc::EINVAL) => CollapseSupport::Unavailable(collapse_refusal().into()),
            // Transient failures mean the kernel would collapse file text
            // given the memory.
            _ if collapse_transient(&source) => CollapseSupport::Available,
            _ => CollapseSupport::Unavailable(format!("MADV_COLLAPSE failed: {source}")),
        },
    })
}

/// Why file text can never be collapsed to a PMD here, without trying:
/// with 64 KiB pages no page-cache folio reaches the 512 MiB PMD (and there
/// is no reason to write a 512 MiB scratch file to be told so). `None`
/// where the PMD is the unit of huge text ([`kernel::huge_unit`]).
pub fn collapse_out_of_reach() -> Option<String> {
    (kernel::huge_unit().1 == kernel::HugeUnit::Contpte).then(|| {
        format!(
            "MADV_COLLAPSE has nothing to collapse file text into: the {} MiB PMD is larger than any page-cache folio on this kernel",
            kernel::pmd_size() >> 20
        )
    })
}

/// `MADV_COLLAPSE` errors that mean "not now", not "not here"
/// ([`hugetext_abi::madv::collapse_transient`], which the preload uses too).
pub fn collapse_transient(e: &std::io::Error) -> bool {
    e.raw_os_error().is_some_and(hugetext_abi::madv::collapse_transient)
}

/// Why `MADV_COLLAPSE` said EINVAL for file text: a kernel without the
/// advice at all (before 6.1) is told apart from one that refuses file text.
pub fn collapse_refusal() -> &'static str {
    if kernel::madv_collapse_known() {
        "MADV_COLLAPSE refuses file text on this kernel (no CONFIG_READ_ONLY_THP_FOR_FS, and before 7.x no other way)"
    } else {
        "this kernel has no MADV_COLLAPSE (Linux 6.1 added it): file text cannot be collapsed in place"
    }
}

/// `MADV_COLLAPSE` the PMD window starting at `offset` (PMD aligned) of a
/// file opened read-only, through a congruent `PROT_READ|PROT_EXEC`
/// mapping. Works even where other processes map the window's pages.
pub fn collapse_window(file: &File, offset: u64) -> Result<()> {
    let pmd = kernel::pmd_size();
    let map = Mapping::file_congruent(file.as_fd(), offset, pmd, libc::PROT_READ | libc::PROT_EXEC, pmd)?;
    map.madvise(0, pmd, kernel::MADV_COLLAPSE)
}

/// An unnamed file (`O_TMPFILE`: no name ever appears, it vanishes when
/// closed) of `len` bytes of `RET` instructions, like text, in `dir`,
/// written back; its writable descriptor is closed (`MADV_COLLAPSE` refuses
/// files open for writing), and the read-only one returned is its last
/// reference.
pub fn text_tmpfile(dir: &Path, len: usize) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut w = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(dir)?;
    w.write_all(&vec![0xc3u8; len])?;
    w.sync_all()?;
    File::open(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&w)))
}

/// Whether the filesystem holding directory `dir` gives PMD-order
/// page-cache folios, by experiment: an unnamed temporary file
/// (`O_TMPFILE`: no name appears, it vanishes when closed) of one PMD
/// window is written, evicted, read back through a `MADV_HUGEPAGE` mapping
/// and its folios counted. `None` when the experiment cannot be made (a
/// read-only filesystem, no `O_TMPFILE` support, no PFN access).
pub fn probe_pmd_folios(dir: &Path) -> Option<bool> {
    if !kernel::pfn_access() {
        return None;
    }
    // One window of the huge unit (the PMD, or the contpte block with
    // 64 KiB pages).
    let unit = kernel::unit_size();
    let f = text_tmpfile(dir, unit).ok()?;
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f)));
    evict(&f, 0..0).ok()?;
    fill_huge(&f, 0..unit as u64).ok()?;
    let huge = crate::folio::scan_file(&path, None).ok()?.unit_windows.len() == 1;
    let _ = evict(&f, 0..0);
    Some(huge)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty range other than `0..0` evicts nothing (it used to reach the
    /// kernel as length 0: "to the end of the file").
    #[test]
    fn evict_of_an_empty_range_keeps_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 4 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        if crate::fsutil::is_memory_fs(&crate::fsutil::fs_name(&f)) {
            return; // tmpfs: nothing is ever evicted
        }
        std::fs::read(&p).unwrap();
        let cached = || crate::folio::scan_file(&p, None).unwrap().cached_kb;
        assert_eq!(cached(), 4096);
        // Past any folio that straddles it: an eviction from there to the
        // end would show.
        evict(&f, 2 << 20..2 << 20).unwrap();
        assert_eq!(cached(), 4096, "an empty range evicted the page cache");
        evict(&f, 0..0).unwrap();
        assert_eq!(cached(), 0, "0..0 is the whole file");
    }
}
