//! `/proc/kpageflags` bits, 8 bytes per PFN
//! (include/uapi/linux/kernel-page-flags.h).

pub const LRU: u64 = 1 << 5;
pub const MMAP: u64 = 1 << 11;
pub const ANON: u64 = 1 << 12;
pub const COMPOUND_HEAD: u64 = 1 << 15;
pub const COMPOUND_TAIL: u64 = 1 << 16;
/// hugetlb page.
pub const HUGE: u64 = 1 << 17;
/// Large rmappable folio (any order in recent kernels).
pub const THP: u64 = 1 << 22;
pub const ZERO_PAGE: u64 = 1 << 24;
