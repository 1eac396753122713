//! `/proc/PID/pagemap` entries: 8 bytes per virtual page
//! (Documentation/admin-guide/mm/pagemap.rst).

/// Page present in RAM.
pub const PM_PRESENT: u64 = 1 << 63;
/// Page swapped out.
pub const PM_SWAPPED: u64 = 1 << 62;
/// Page is file-backed or shared anonymous.
pub const PM_FILE: u64 = 1 << 61;
/// The page frame number (bits 0–54); reads as 0 without `CAP_SYS_ADMIN`.
pub const PM_PFN_MASK: u64 = (1 << 55) - 1;
/// Bytes per entry.
pub const ENTRY_SIZE: u64 = 8;

/// The PFN of a present page whose frame number the kernel shows.
pub fn pfn(entry: u64) -> Option<u64> {
    let pfn = entry & PM_PFN_MASK;
    (entry & PM_PRESENT != 0 && pfn != 0).then_some(pfn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfns() {
        assert_eq!(pfn(PM_PRESENT | 0x1234), Some(0x1234));
        assert_eq!(pfn(PM_PRESENT | PM_FILE), None, "hidden PFN");
        assert_eq!(pfn(0x1234), None, "not present");
        assert_eq!(pfn(PM_PRESENT | PM_SWAPPED | PM_FILE | PM_PFN_MASK), Some(PM_PFN_MASK));
    }
}
