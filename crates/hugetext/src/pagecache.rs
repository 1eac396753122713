//! Page cache: evict a file's clean, unmapped folios and refill ranges with
//! PMD-order folios through a 2 MiB-congruent `MADV_HUGEPAGE` mapping
//! (KERNEL-NOTES §1).
