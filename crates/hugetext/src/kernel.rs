//! Kernel interfaces: version, page and PMD size, THP modes, and thin wrappers
//! over the memory-management system calls hugetext uses.
//!
//! Capabilities are detected at run time; nothing is assumed from the build
//! machine.

/// `MADV_POPULATE_READ` (Linux 5.14).
pub const MADV_POPULATE_READ: i32 = 22;
/// `MADV_COLLAPSE` (Linux 6.1).
pub const MADV_COLLAPSE: i32 = 25;

/// Base page size of the running kernel.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// PMD size (the size of a PMD-mapped THP), from
/// `/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`; 2 MiB on x86_64
/// when THP is not built in.
pub fn pmd_size() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2 << 20)
}
