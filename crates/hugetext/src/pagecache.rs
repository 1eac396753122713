//! Page cache: evict a file's clean, unmapped folios and refill ranges with
//! PMD-order folios through a 2 MiB-congruent `MADV_HUGEPAGE` mapping
//! (KERNEL-NOTES §1).

use std::fs::File;
use std::ops::Range;
use std::os::fd::AsFd;

use crate::kernel::{self, Mapping};
use crate::Result;

/// Drop the clean page cache of `range` of `file` that nobody maps.
pub fn evict(file: &File, range: Range<u64>) -> Result<()> {
    kernel::fadvise_dontneed(file.as_fd(), range.start, range.end - range.start)
}

/// Fill `range` of `file` into the page cache through a PMD-congruent
/// `MADV_HUGEPAGE` mapping so that page-cache misses are read as PMD-order
/// folios (on filesystems with large-folio support). Pages already cached
/// keep the folio size they have: evict first.
pub fn fill_huge(file: &File, range: Range<u64>) -> Result<()> {
    if range.is_empty() {
        return Ok(());
    }
    let ps = kernel::page_size() as u64;
    let start = range.start / ps * ps;
    let len = (range.end - start).div_ceil(ps) * ps;
    let map = Mapping::file_congruent(file.as_fd(), start, len as usize, libc::PROT_READ | libc::PROT_EXEC, kernel::pmd_size())?;
    map.madvise(0, len as usize, kernel::MADV_HUGEPAGE)?;
    map.madvise(0, len as usize, kernel::MADV_POPULATE_READ)?;
    Ok(())
}
