//! The `PAGEMAP_SCAN` ioctl on `/proc/PID/pagemap` (Linux 6.7,
//! include/uapi/linux/fs.h): ranges of an address space by page category.

/// Write-protect tracking (userfaultfd) is allowed on the page.
pub const PAGE_IS_WPALLOWED: u64 = 1 << 0;
/// Page was written since write-protection.
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// Page is file-backed (or shared anonymous).
pub const PAGE_IS_FILE: u64 = 1 << 2;
/// Page is present.
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
/// Page is swapped out.
pub const PAGE_IS_SWAPPED: u64 = 1 << 4;
/// Page is the zero page (or the huge zero page).
pub const PAGE_IS_PFNZERO: u64 = 1 << 5;
/// Page is mapped by a PMD (THP) or is hugetlb.
pub const PAGE_IS_HUGE: u64 = 1 << 6;

/// `struct page_region`: `[start, end)` with its categories.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageRegion {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

/// `struct pm_scan_arg`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmScanArg {
    /// `size_of::<PmScanArg>()`.
    pub size: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    /// Set by the kernel: where the walk stopped.
    pub walk_end: u64,
    /// Address of a `[PageRegion; vec_len]`.
    pub vec: u64,
    pub vec_len: u64,
    pub max_pages: u64,
    pub category_inverted: u64,
    pub category_mask: u64,
    pub category_anyof_mask: u64,
    pub return_mask: u64,
}

impl PmScanArg {
    /// A scan of `[start, end)` into `vec_len` regions at address `vec`, no
    /// flags, no page limit, every category filter empty (the caller sets
    /// the masks).
    pub fn new(start: u64, end: u64, vec: u64, vec_len: u64) -> PmScanArg {
        PmScanArg {
            size: core::mem::size_of::<PmScanArg>() as u64,
            start,
            end,
            vec,
            vec_len,
            ..PmScanArg::default()
        }
    }
}

const IOC_READ_WRITE: u64 = 3;
const IOC_DIRSHIFT: u64 = 30;
const IOC_SIZESHIFT: u64 = 16;
const IOC_TYPESHIFT: u64 = 8;

/// `_IOWR('f', 16, struct pm_scan_arg)`.
pub const PAGEMAP_SCAN: u64 = (IOC_READ_WRITE << IOC_DIRSHIFT)
    | ((core::mem::size_of::<PmScanArg>() as u64) << IOC_SIZESHIFT)
    | ((b'f' as u64) << IOC_TYPESHIFT)
    | 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes_and_ioctl_number() {
        assert_eq!(core::mem::size_of::<PmScanArg>(), 96);
        assert_eq!(core::mem::size_of::<PageRegion>(), 24);
        // _IOWR as include/uapi/asm-generic/ioctl.h computes it.
        assert_eq!(PAGEMAP_SCAN, 0xc060_6610);
        let a = PmScanArg::new(1, 2, 3, 4);
        assert_eq!((a.size, a.start, a.end, a.vec, a.vec_len, a.flags), (96, 1, 2, 3, 4, 0));
    }
}
