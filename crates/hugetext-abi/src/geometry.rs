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

/// The largest PMD that `check` and `align` raise `p_align` to (32 MiB,
/// arm64 with 16 KiB pages). Above it (arm64 with 64 KiB pages: 512 MiB,
/// beyond the page cache's largest folio of 2048 pages, 128 MiB) the unit
/// of huge text is the contiguous-PTE block instead ([`huge_unit`]).
pub const MAX_ALIGN_PMD: usize = 32 << 20;

/// The smallest unit [`huge_unit`] gives for any base page size (the 2 MiB
/// PMD of 4 KiB pages, the 2 MiB contiguous-PTE block of 64 KiB ones): a
/// range shorter than this holds no whole window, whatever the kernel's
/// geometry, so it needs no look at the PMD size.
pub const MIN_UNIT: usize = 2 << 20;

/// The unit of huge text, bytes, and whether it is an arm64 contiguous-PTE
/// block (`true`) or the PMD (`false`), for a kernel of the given machine
/// (`aarch64`), base page and PMD sizes: the PMD, except on arm64 when the
/// PMD is above [`MAX_ALIGN_PMD`] (64 KiB pages), where it is the 2 MiB
/// contpte block (32 × 64 KiB, one TLB entry for a folio of at least
/// 2 MiB mapped naturally aligned). The one rule `check`, `align`, `warm`,
/// `inspect`, the agent and the preload share.
pub const fn huge_unit(aarch64: bool, page: usize, pmd: usize) -> (usize, bool) {
    match cont_pte_size(page) {
        Some(block) if aarch64 && pmd > MAX_ALIGN_PMD => (block, true),
        _ => (pmd, false),
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

/// The whole windows of the unit of huge text (the PMD, or a
/// contiguous-PTE block: [`huge_unit`]) in a range `[lo, hi)`: the aligned
/// windows from `lo` rounded up to `hi` rounded down, and what is left
/// outside them (the head before the first window, the tail after the
/// last). The central quantity of the project: only a whole, aligned window
/// can be mapped with one PMD (or one contpte TLB entry). `T` is `u64` (file offsets, ELF addresses) or `usize` (this
/// process's addresses); `unit` is a power of two.
///
/// Arithmetic is on window indices, so a range near the top of the address
/// space (a hostile ELF header) cannot overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows<T> {
    lo: T,
    hi: T,
    first: T,
    last: T,
    unit: T,
}

/// `(start, n)` runs of at most `max` consecutive windows of a
/// [`Windows`], in order (the preload measures 64 at a time).
pub struct Batches<T> {
    at: T,
    left: T,
    max: T,
    unit: T,
}

macro_rules! windows_of {
    ($t:ty) => {
        impl Windows<$t> {
            /// The windows of `[lo, hi)` (`hi < lo` counts as empty).
            pub const fn new(lo: $t, hi: $t, unit: $t) -> Self {
                let hi = if hi < lo { lo } else { hi };
                let first = lo.div_ceil(unit);
                let last = hi / unit;
                let last = if last < first { first } else { last };
                Windows {
                    lo,
                    hi,
                    first,
                    last,
                    unit,
                }
            }
            /// The window size.
            pub const fn unit(&self) -> $t {
                self.unit
            }
            /// How many whole windows.
            pub const fn count(&self) -> $t {
                self.last - self.first
            }
            /// Is there no whole window?
            pub const fn is_empty(&self) -> bool {
                self.last == self.first
            }
            /// Bytes in whole windows.
            pub const fn bytes(&self) -> $t {
                self.count() * self.unit
            }
            /// Index (address / unit) of the first window.
            pub const fn first_index(&self) -> $t {
                self.first
            }
            /// Index of the window after the last one.
            pub const fn end_index(&self) -> $t {
                self.last
            }
            /// Start of the first window (`lo` rounded up).
            pub const fn start(&self) -> $t {
                self.first.saturating_mul(self.unit)
            }
            /// End of the last window (`hi` rounded down; the start when
            /// empty).
            pub const fn end(&self) -> $t {
                self.last.saturating_mul(self.unit)
            }
            /// Start of window `i` (`i < count()`).
            pub const fn at(&self, i: $t) -> $t {
                self.start() + i * self.unit
            }
            /// Bytes before the first window (all of them when empty).
            pub const fn head(&self) -> $t {
                if self.is_empty() {
                    self.hi - self.lo
                } else {
                    self.start() - self.lo
                }
            }
            /// Bytes after the last window (none when empty: see `head`).
            pub const fn tail(&self) -> $t {
                if self.is_empty() {
                    0
                } else {
                    self.hi - self.end()
                }
            }
            /// The windows in runs of at most `max` (`max > 0`).
            pub const fn batches(&self, max: $t) -> Batches<$t> {
                Batches {
                    at: self.start(),
                    left: self.count(),
                    max,
                    unit: self.unit,
                }
            }
        }

        impl Iterator for Batches<$t> {
            type Item = ($t, $t);
            fn next(&mut self) -> Option<($t, $t)> {
                if self.left == 0 {
                    return None;
                }
                let n = if self.left < self.max { self.left } else { self.max };
                let run = (self.at, n);
                self.at += n * self.unit;
                self.left -= n;
                Some(run)
            }
        }
    };
}

windows_of!(u64);
windows_of!(usize);

mod sealed {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for usize {}
}

/// An address or file offset: `u64` (file offsets, ELF addresses) or
/// `usize` (this process's addresses). The arithmetic of [`align_up`],
/// [`align_down`], [`skew`] and [`congruent`]; `unit` is a power of two.
pub trait Offset: Copy + sealed::Sealed {
    /// `self` rounded up to a multiple of `unit` (saturating at the top of
    /// the type's range, as [`Windows::start`]).
    fn align_up(self, unit: Self) -> Self;
    /// `self` rounded down to a multiple of `unit`.
    fn align_down(self, unit: Self) -> Self;
    /// `(self - other) mod unit`, wrapping: how far an address is from
    /// where its file offset would place it on a unit boundary.
    fn skew(self, other: Self, unit: Self) -> Self;
}

macro_rules! offset_of {
    ($t:ty) => {
        impl Offset for $t {
            fn align_up(self, unit: $t) -> $t {
                self.div_ceil(unit).saturating_mul(unit)
            }
            fn align_down(self, unit: $t) -> $t {
                self / unit * unit
            }
            fn skew(self, other: $t, unit: $t) -> $t {
                self.wrapping_sub(other) % unit
            }
        }
    };
}

offset_of!(u64);
offset_of!(usize);

/// `x` rounded up to a multiple of `unit` (a power of two).
pub fn align_up<T: Offset>(x: T, unit: T) -> T {
    x.align_up(unit)
}

/// `x` rounded down to a multiple of `unit` (a power of two).
pub fn align_down<T: Offset>(x: T, unit: T) -> T {
    x.align_down(unit)
}

/// `(vaddr - offset) mod unit`: zero when a mapping of file `offset` at
/// address `vaddr` puts the file's `unit`-aligned windows on `unit`-aligned
/// addresses.
pub fn skew<T: Offset>(vaddr: T, offset: T, unit: T) -> T {
    vaddr.skew(offset, unit)
}

/// Is `vaddr` congruent to `offset` modulo `unit`: does a mapping of file
/// `offset` at `vaddr` keep the file's whole windows on whole windows of
/// the address space (the condition for mapping them huge)?
pub fn congruent<T: Offset + PartialEq + From<u8>>(vaddr: T, offset: T, unit: T) -> bool {
    skew(vaddr, offset, unit) == T::from(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_page_size_has_a_unit_below_the_floor() {
        for page in [4usize << 10, 16 << 10, 64 << 10] {
            let pmd = pmd_size_for_page(page).unwrap();
            for aarch64 in [false, true] {
                assert!(huge_unit(aarch64, page, pmd).0 >= MIN_UNIT, "{page} {aarch64}");
            }
        }
    }

    #[test]
    fn congruence_and_alignment() {
        let unit = 64u64 << 10;
        assert_eq!(align_up(1u64, unit), unit);
        assert_eq!(align_up(unit, unit), unit);
        assert_eq!(align_up(0u64, unit), 0);
        assert_eq!(align_up(u64::MAX - 5, unit), u64::MAX);
        assert_eq!(align_down(unit + 5, unit), unit);
        assert_eq!(align_up(5usize, 4096), 4096);
        assert!(congruent(0x40_0000u64 + 0x1000, 0x1000, 2 << 20));
        assert!(!congruent(0x40_0000u64 + 0x2000, 0x1000, 2 << 20));
        assert!(congruent(0x1000u64, 0x1000 + 3 * unit, unit));
        assert_eq!(skew(0x1000usize, 0x3000, 0x10000), 0xe000);
        assert_eq!(skew(0x1000u64, 0, 2 << 20), 0x1000);
    }

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
    fn unit_of_huge_text() {
        // x86-64 and arm64 4K/16K: the PMD.
        assert_eq!(huge_unit(false, 4 << 10, 2 << 20), (2 << 20, false));
        assert_eq!(huge_unit(true, 4 << 10, 2 << 20), (2 << 20, false));
        assert_eq!(huge_unit(true, 16 << 10, 32 << 20), (32 << 20, false));
        // arm64 64K: the 2 MiB contpte block, not the 512 MiB PMD.
        assert_eq!(huge_unit(true, 64 << 10, 512 << 20), (2 << 20, true));
        // A 64 KiB page size on a machine without contpte keeps the PMD.
        assert_eq!(huge_unit(false, 64 << 10, 512 << 20), (512 << 20, false));
    }

    #[test]
    fn sysfs_value() {
        assert_eq!(parse_pmd_size(b"2097152\n"), Some(2 << 20));
        assert_eq!(parse_pmd_size(b"33554432"), Some(32 << 20));
        assert_eq!(parse_pmd_size(b"\n"), None);
        assert_eq!(parse_pmd_size(b"2097153\n"), None);
        assert_eq!(parse_pmd_size(b"12x\n"), None);
    }

    #[test]
    fn windows_of_a_range() {
        const M: u64 = 2 << 20;
        let w = Windows::<u64>::new(0x1000, 4 * M + 0x1000, M);
        assert_eq!((w.count(), w.bytes(), w.start(), w.end()), (3, 3 * M, M, 4 * M));
        assert_eq!((w.head(), w.tail(), w.at(1)), (M - 0x1000, 0x1000, 2 * M));
        assert_eq!((w.first_index(), w.end_index()), (1, 4));
        let e = Windows::<u64>::new(M + 1, 2 * M + 5, M);
        assert!(e.is_empty());
        assert_eq!(
            (e.count(), e.head(), e.tail(), e.start(), e.end()),
            (0, M + 4, 0, 2 * M, 2 * M)
        );
        let exact = Windows::<u64>::new(M, 3 * M, M);
        assert_eq!((exact.count(), exact.head(), exact.tail()), (2, 0, 0));
        assert!(Windows::<u64>::new(5 * M, M, M).is_empty());
        // No overflow near the top of the address space.
        let top = Windows::<u64>::new(u64::MAX - 5, u64::MAX, M);
        assert_eq!(top.count(), 0);
        let w = Windows::<usize>::new(0, 130 * (2 << 20), 2 << 20);
        let runs: [(usize, usize); 3] = [(0, 64), (64 * (2 << 20), 64), (128 * (2 << 20), 2)];
        assert!(w.batches(64).eq(runs.iter().copied()));
        assert_eq!(Windows::<usize>::new(1, 2, 2 << 20).batches(64).next(), None);
    }
}
