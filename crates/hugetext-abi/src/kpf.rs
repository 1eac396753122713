//! `/proc/kpageflags` bits, 8 bytes per PFN
//! (include/uapi/linux/kernel-page-flags.h).

pub const LRU: u64 = 1 << 5;
pub const MMAP: u64 = 1 << 11;
pub const ANON: u64 = 1 << 12;
/// Swap-backed: anonymous memory and shmem (tmpfs, memfd, SysV shm); on a
/// page that is not [`ANON`], a shmem page.
pub const SWAPBACKED: u64 = 1 << 14;
pub const COMPOUND_HEAD: u64 = 1 << 15;
pub const COMPOUND_TAIL: u64 = 1 << 16;
/// hugetlb page.
pub const HUGE: u64 = 1 << 17;
/// Large rmappable folio (any order in recent kernels).
pub const THP: u64 = 1 << 22;
pub const ZERO_PAGE: u64 = 1 << 24;

/// Is a block of `pfns.len()` pages (the pages of one naturally aligned
/// block of virtual memory, in order: their page frame numbers from
/// pagemap, and `flags[i]` the kpageflags of `pfns[i]`) held by one folio
/// at least as large as the block? Exactly when the frames are consecutive,
/// the first is aligned to the block's page count (folios are naturally
/// aligned in physical memory), every page is part of a compound page, and
/// no page but the first is a head: then no folio starts inside the block
/// and the one holding its first page runs past its end. (A block of
/// smaller folios has a head inside it; a block of 4 KiB pages, or of
/// frames that are not consecutive, fails the other tests.) A frame number
/// of 0 (hidden: no `CAP_SYS_ADMIN`, or not present) never passes.
pub fn block_is_one_folio(pfns: &[u64], flags: &[u64]) -> bool {
    let n = pfns.len() as u64;
    if n == 0 || flags.len() != pfns.len() || pfns[0] == 0 || pfns[0] % n != 0 {
        return false;
    }
    pfns.iter().enumerate().all(|(i, &p)| p == pfns[0] + i as u64)
        && flags[0] & (COMPOUND_HEAD | COMPOUND_TAIL) != 0
        && flags[1..]
            .iter()
            .all(|&f| f & COMPOUND_TAIL != 0 && f & COMPOUND_HEAD == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_folio_per_block() {
        let pfns: [u64; 4] = [64, 65, 66, 67];
        let head = [COMPOUND_HEAD, COMPOUND_TAIL, COMPOUND_TAIL, COMPOUND_TAIL];
        assert!(block_is_one_folio(&pfns, &head));
        // Inside a larger folio: every page a tail.
        assert!(block_is_one_folio(&pfns, &[COMPOUND_TAIL; 4]));
        // Two folios of half the block.
        let two = [COMPOUND_HEAD, COMPOUND_TAIL, COMPOUND_HEAD, COMPOUND_TAIL];
        assert!(!block_is_one_folio(&pfns, &two));
        // Small pages.
        assert!(!block_is_one_folio(&pfns, &[0; 4]));
        // Not consecutive, not aligned, hidden.
        assert!(!block_is_one_folio(&[64, 65, 70, 71], &head));
        assert!(!block_is_one_folio(&[66, 67, 68, 69], &head));
        assert!(!block_is_one_folio(&[0, 1, 2, 3], &head));
        assert!(!block_is_one_folio(&[], &[]));
    }
}
