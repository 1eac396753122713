//! Page-table geometry: the PMD size and the contiguous-PTE block size that
//! follow from a base page size, and the parser for the kernel's own word
//! on the PMD size (`/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`).
//!
//! Nothing here assumes 4 KiB pages: x86-64 has 4 KiB pages and 2 MiB PMDs;
//! arm64 kernels are built with 4 KiB, 16 KiB or 64 KiB pages, whose PMDs
//! map 2 MiB, 32 MiB and 512 MiB. The library (`hugetext::kernel`) and the
//! preload both read the running kernel's values through these functions.

/// Where the kernel states its PMD size, in bytes.
pub const HPAGE_PMD_SIZE_PATH: &str = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size";

/// The PMD size of a 64-bit kernel with `page`-byte base pages: one page
/// table of 8-byte entries maps `page / 8` pages (4 KiB → 2 MiB,
/// 16 KiB → 32 MiB, 64 KiB → 512 MiB). `None` for a page size that is not
/// a power of two of at least 4 KiB.
pub const fn pmd_size_for_page(page: usize) -> Option<usize> {
    if page < 4096 || !page.is_power_of_two() {
        return None;
    }
    (page / 8).checked_mul(page)
}

/// The arm64 contiguous-PTE block (`CONT_PTE_SIZE`) for `page`-byte base
/// pages: 16 × 4 KiB = 64 KiB, 128 × 16 KiB = 2 MiB, 32 × 64 KiB = 2 MiB.
/// A folio at least this large, naturally aligned in the file and in the
/// address space, is mapped with one TLB entry per block ("contpte").
/// `None` for a page size arm64 does not have.
pub const fn cont_pte_size(page: usize) -> Option<usize> {
    match page {
        4096 => Some(16 * 4096),
        16384 => Some(128 * 16384),
        65536 => Some(32 * 65536),
        _ => None,
    }
}

/// Parse the contents of [`HPAGE_PMD_SIZE_PATH`] (a decimal byte count and
/// a newline). `None` unless it is a power of two.
pub fn parse_pmd_size(text: &[u8]) -> Option<usize> {
    let mut v: usize = 0;
    let mut digits = 0;
    for &c in text.iter().take_while(|c| !c.is_ascii_whitespace()) {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as usize)?;
        digits += 1;
    }
    (digits > 0 && v.is_power_of_two()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmd_follows_the_page_size() {
        assert_eq!(pmd_size_for_page(4 << 10), Some(2 << 20));
        assert_eq!(pmd_size_for_page(16 << 10), Some(32 << 20));
        assert_eq!(pmd_size_for_page(64 << 10), Some(512 << 20));
        assert_eq!(pmd_size_for_page(3000), None);
        assert_eq!(pmd_size_for_page(2048), None);
    }

    #[test]
    fn cont_pte_blocks() {
        assert_eq!(cont_pte_size(4 << 10), Some(64 << 10));
        assert_eq!(cont_pte_size(16 << 10), Some(2 << 20));
        assert_eq!(cont_pte_size(64 << 10), Some(2 << 20));
        assert_eq!(cont_pte_size(8 << 10), None);
    }

    #[test]
    fn sysfs_value() {
        assert_eq!(parse_pmd_size(b"2097152\n"), Some(2 << 20));
        assert_eq!(parse_pmd_size(b"33554432"), Some(32 << 20));
        assert_eq!(parse_pmd_size(b"\n"), None);
        assert_eq!(parse_pmd_size(b"2097153\n"), None);
        assert_eq!(parse_pmd_size(b"12x\n"), None);
    }
}
