//! `madvise(2)` advice values and the `posix_fadvise(2)` advice hugetext uses
//! (include/uapi/asm-generic/mman-common.h, include/uapi/linux/fadvise.h).
//! Spelled out here because libc crates lag behind the kernel: the preload
//! and the library must agree on them whatever libc version either builds
//! with.

/// Drop the range's page-table entries; file pages refault from the page
/// cache, private anonymous pages come back zeroed.
pub const MADV_DONTNEED: i32 = 4;
/// Mark the range `VM_HUGEPAGE`.
pub const MADV_HUGEPAGE: i32 = 14;
/// Mark the range `VM_NOHUGEPAGE`.
pub const MADV_NOHUGEPAGE: i32 = 15;
/// Fault the range in for reading (Linux 5.14).
pub const MADV_POPULATE_READ: i32 = 22;
/// Fault the range in for writing (Linux 5.14): private anonymous memory is
/// allocated and zeroed.
pub const MADV_POPULATE_WRITE: i32 = 23;
/// Collapse the range into THPs now (Linux 6.1; file text needs
/// `CONFIG_READ_ONLY_THP_FOR_FS`).
pub const MADV_COLLAPSE: i32 = 25;

/// `MADV_COLLAPSE` errors that mean "not now", not "not here": EAGAIN
/// (pages not yet on the LRU, a folio locked), ENOMEM (no free PMD-size
/// block this instant), EBUSY (a memcg charge failed). The kernel collapses
/// that text, but could not this time: worth a retry a little later. The
/// values are the generic errno numbers, the same on x86-64 and arm64.
pub fn collapse_transient(errno: i32) -> bool {
    const EAGAIN: i32 = 11;
    const ENOMEM: i32 = 12;
    const EBUSY: i32 = 16;
    matches!(errno, EAGAIN | ENOMEM | EBUSY)
}

/// How many times a transient `MADV_COLLAPSE` failure is tried again
/// ([`collapse_transient`]), and how long to wait before each try.
pub const COLLAPSE_RETRIES: usize = 3;
/// See [`COLLAPSE_RETRIES`].
pub const COLLAPSE_RETRY_NS: u64 = 100_000_000;

/// `posix_fadvise`: drop the clean, unmapped page cache of a range.
pub const POSIX_FADV_DONTNEED: i32 = 4;

/// The name of an advice value, for messages: `madvise(MADV_HUGEPAGE)`.
pub fn madvise_call_name(advice: i32) -> &'static str {
    match advice {
        MADV_HUGEPAGE => "madvise(MADV_HUGEPAGE)",
        MADV_NOHUGEPAGE => "madvise(MADV_NOHUGEPAGE)",
        MADV_DONTNEED => "madvise(MADV_DONTNEED)",
        MADV_POPULATE_READ => "madvise(MADV_POPULATE_READ)",
        MADV_POPULATE_WRITE => "madvise(MADV_POPULATE_WRITE)",
        MADV_COLLAPSE => "madvise(MADV_COLLAPSE)",
        _ => "madvise",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_collapse_errors_are_the_generic_errnos() {
        assert!(collapse_transient(11) && collapse_transient(12) && collapse_transient(16));
        // EINVAL (22): the kernel does not collapse file text at all.
        assert!(!collapse_transient(22) && !collapse_transient(0));
    }

    #[test]
    fn names() {
        assert_eq!(madvise_call_name(MADV_COLLAPSE), "madvise(MADV_COLLAPSE)");
        assert_eq!(madvise_call_name(MADV_POPULATE_READ), "madvise(MADV_POPULATE_READ)");
        assert_eq!(madvise_call_name(8), "madvise");
    }
}
