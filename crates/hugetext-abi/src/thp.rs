//! The THP mode for anonymous memory: the word the kernel brackets in
//! `/sys/kernel/mm/transparent_hugepage/enabled` (`always [madvise] never`).

/// Where the kernel states the THP mode.
pub const ENABLED_PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The word the kernel brackets in a THP `enabled` file (`always [madvise]
/// never`), `None` when nothing is bracketed.
fn bracketed(text: &[u8]) -> Option<&[u8]> {
    let open = text.iter().position(|&c| c == b'[')?;
    let rest = &text[open + 1..];
    Some(&rest[..rest.iter().position(|&c| c == b']')?])
}

/// The global THP mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpMode {
    /// Every eligible mapping gets huge pages.
    Always,
    /// Only `MADV_HUGEPAGE` mappings do.
    Madvise,
    /// None do (also what a kernel without THP amounts to).
    Never,
}

impl ThpMode {
    /// Parse the contents of [`ENABLED_PATH`]: the bracketed word. `None`
    /// when nothing is bracketed or the word is not a mode.
    pub fn parse(text: &[u8]) -> Option<ThpMode> {
        match bracketed(text)? {
            b"always" => Some(ThpMode::Always),
            b"madvise" => Some(ThpMode::Madvise),
            b"never" => Some(ThpMode::Never),
            _ => None,
        }
    }

    /// The kernel's word for the mode.
    pub const fn as_str(self) -> &'static str {
        match self {
            ThpMode::Always => "always",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
        }
    }
}

/// The directory of one anonymous THP size (mTHP, Linux 6.8+):
/// `/sys/kernel/mm/transparent_hugepage/hugepages-<kB>kB/`, with its own
/// `enabled` (a [`SizeMode`]) and `stats/`.
pub const SIZE_DIR: &str = "/sys/kernel/mm/transparent_hugepage/hugepages-";

/// The 2 MiB size's `enabled` file: the size of the contiguous-PTE block
/// with 16 KiB and 64 KiB pages, below the PMD there, so an anonymous
/// mTHP size of its own (`mm/huge_memory.c`, `thpsize_create()`).
pub const ENABLED_2M_PATH: &str = "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled";

/// The mode of one anonymous THP size: the word bracketed in
/// `hugepages-<kB>kB/enabled` (`always inherit madvise [never]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeMode {
    Always,
    /// Follow the top-level [`ThpMode`].
    Inherit,
    Madvise,
    Never,
}

impl SizeMode {
    /// Parse the contents of a size's `enabled` file.
    pub fn parse(text: &[u8]) -> Option<SizeMode> {
        match bracketed(text)? {
            b"always" => Some(SizeMode::Always),
            b"inherit" => Some(SizeMode::Inherit),
            b"madvise" => Some(SizeMode::Madvise),
            b"never" => Some(SizeMode::Never),
            _ => None,
        }
    }

    /// The kernel's word for the mode.
    pub const fn as_str(self) -> &'static str {
        match self {
            SizeMode::Always => "always",
            SizeMode::Inherit => "inherit",
            SizeMode::Madvise => "madvise",
            SizeMode::Never => "never",
        }
    }

    /// Does an anonymous `MADV_HUGEPAGE` mapping get folios of this size
    /// at fault time, given the top-level mode (`thp_vma_allowable_orders()`
    /// in `include/linux/huge_mm.h`: the size's own `always`/`madvise`, or
    /// `inherit` and a top-level mode other than `never`)?
    pub const fn allows_madvised(self, top: ThpMode) -> bool {
        match self {
            SizeMode::Always | SizeMode::Madvise => true,
            SizeMode::Inherit => !matches!(top, ThpMode::Never),
            SizeMode::Never => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ThpMode;

    #[test]
    fn bracketed_word() {
        assert_eq!(ThpMode::parse(b"always [madvise] never\n"), Some(ThpMode::Madvise));
        assert_eq!(ThpMode::parse(b"[always] madvise never\n"), Some(ThpMode::Always));
        assert_eq!(ThpMode::parse(b"always madvise [never]\n"), Some(ThpMode::Never));
        assert_eq!(ThpMode::parse(b"always madvise never\n"), None);
        assert_eq!(ThpMode::parse(b"[inherit] always\n"), None);
        assert_eq!(ThpMode::parse(b"[never"), None);
        assert_eq!(ThpMode::Madvise.as_str(), "madvise");
    }

    #[test]
    fn per_size_modes() {
        use super::SizeMode;
        assert_eq!(
            SizeMode::parse(b"always inherit madvise [never]\n"),
            Some(SizeMode::Never)
        );
        assert_eq!(
            SizeMode::parse(b"always [inherit] madvise never\n"),
            Some(SizeMode::Inherit)
        );
        assert_eq!(
            SizeMode::parse(b"[always] inherit madvise never\n"),
            Some(SizeMode::Always)
        );
        assert_eq!(SizeMode::parse(b"always inherit madvise never\n"), None);
        assert!(SizeMode::Madvise.allows_madvised(ThpMode::Never));
        assert!(SizeMode::Always.allows_madvised(ThpMode::Never));
        assert!(SizeMode::Inherit.allows_madvised(ThpMode::Madvise));
        assert!(SizeMode::Inherit.allows_madvised(ThpMode::Always));
        assert!(!SizeMode::Inherit.allows_madvised(ThpMode::Never));
        assert!(!SizeMode::Never.allows_madvised(ThpMode::Always));
        assert_eq!(SizeMode::Inherit.as_str(), "inherit");
    }
}
