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

/// Why a THP mode file's contents are not a mode hugetext knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeError<'a> {
    /// No word is bracketed (`always madvise never`).
    NoneSelected,
    /// The bracketed word is not one of the file's known modes (a newer
    /// kernel's word, or not a mode file at all).
    Unknown(&'a [u8]),
}

impl core::fmt::Display for ModeError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ModeError::NoneSelected => f.write_str("no mode is selected (nothing in brackets)"),
            ModeError::Unknown(w) => {
                f.write_str("unknown mode `")?;
                for &c in w.iter() {
                    let c = if c.is_ascii_graphic() { c as char } else { '?' };
                    core::fmt::Write::write_char(f, c)?;
                }
                f.write_str("`")
            }
        }
    }
}

/// The bracketed word of `text`, or why there is none.
fn selected(text: &[u8]) -> Result<&[u8], ModeError<'_>> {
    bracketed(text).ok_or(ModeError::NoneSelected)
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
    /// Parse the contents of a size's `enabled` file; the error names an
    /// unknown word.
    pub fn read(text: &[u8]) -> Result<SizeMode, ModeError<'_>> {
        match selected(text)? {
            b"always" => Ok(SizeMode::Always),
            b"inherit" => Ok(SizeMode::Inherit),
            b"madvise" => Ok(SizeMode::Madvise),
            b"never" => Ok(SizeMode::Never),
            w => Err(ModeError::Unknown(w)),
        }
    }

    /// [`SizeMode::read`], `None` for any error.
    pub fn parse(text: &[u8]) -> Option<SizeMode> {
        SizeMode::read(text).ok()
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

/// Where the kernel states the THP mode of shmem and tmpfs (the PMD
/// size's; Linux 6.11+ also has per-size `hugepages-<kB>kB/shmem_enabled`
/// files with the same words and `inherit`).
pub const SHMEM_ENABLED_PATH: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// The THP mode of shmem and tmpfs: the word bracketed in
/// [`SHMEM_ENABLED_PATH`] (`always within_size advise [never] deny force`,
/// `Documentation/admin-guide/mm/transhuge.rst`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmemMode {
    /// Huge pages wherever they fit.
    Always,
    /// Huge pages that do not reach past the file's size.
    WithinSize,
    /// Only where `madvise(MADV_HUGEPAGE)` or a `huge=` mount asks.
    Advise,
    /// None, unless a `huge=` mount option asks.
    Never,
    /// None, whatever mounts ask (emergency off).
    Deny,
    /// Huge pages for every mount (testing).
    Force,
}

impl ShmemMode {
    /// Parse the contents of [`SHMEM_ENABLED_PATH`]; the error names an
    /// unknown word.
    pub fn read(text: &[u8]) -> Result<ShmemMode, ModeError<'_>> {
        match selected(text)? {
            b"always" => Ok(ShmemMode::Always),
            b"within_size" => Ok(ShmemMode::WithinSize),
            b"advise" => Ok(ShmemMode::Advise),
            b"never" => Ok(ShmemMode::Never),
            b"deny" => Ok(ShmemMode::Deny),
            b"force" => Ok(ShmemMode::Force),
            w => Err(ModeError::Unknown(w)),
        }
    }

    /// The kernel's word for the mode.
    pub const fn as_str(self) -> &'static str {
        match self {
            ShmemMode::Always => "always",
            ShmemMode::WithinSize => "within_size",
            ShmemMode::Advise => "advise",
            ShmemMode::Never => "never",
            ShmemMode::Deny => "deny",
            ShmemMode::Force => "force",
        }
    }

    /// Can a tmpfs mounted without a `huge=` option get huge folios
    /// (every mode but `never` and `deny`, as hugetext has always read it)?
    pub const fn may_give_huge(self) -> bool {
        !matches!(self, ShmemMode::Never | ShmemMode::Deny)
    }
}

#[cfg(test)]
mod tests {
    use super::ThpMode;

    #[test]
    fn shmem_modes() {
        use super::{ModeError, ShmemMode};
        assert_eq!(
            ShmemMode::read(b"always within_size advise [never] deny force\n"),
            Ok(ShmemMode::Never)
        );
        assert_eq!(
            ShmemMode::read(b"always [within_size] advise never deny force\n"),
            Ok(ShmemMode::WithinSize)
        );
        assert_eq!(ShmemMode::read(b"[deny]"), Ok(ShmemMode::Deny));
        assert_eq!(ShmemMode::read(b"always advise never"), Err(ModeError::NoneSelected));
        let e = ShmemMode::read(b"always [sometimes] never\n").unwrap_err();
        assert_eq!(e, ModeError::Unknown(&b"sometimes"[..]));
        extern crate std;
        use std::string::ToString;
        assert_eq!(e.to_string(), "unknown mode `sometimes`");
        assert!(!ShmemMode::Deny.may_give_huge() && ShmemMode::Advise.may_give_huge());
        assert_eq!(ShmemMode::WithinSize.as_str(), "within_size");
    }

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
        assert_eq!(
            SizeMode::read(b"always inherit [sometimes] never\n"),
            Err(super::ModeError::Unknown(&b"sometimes"[..]))
        );
        assert!(SizeMode::Madvise.allows_madvised(ThpMode::Never));
        assert!(SizeMode::Always.allows_madvised(ThpMode::Never));
        assert!(SizeMode::Inherit.allows_madvised(ThpMode::Madvise));
        assert!(SizeMode::Inherit.allows_madvised(ThpMode::Always));
        assert!(!SizeMode::Inherit.allows_madvised(ThpMode::Never));
        assert!(!SizeMode::Never.allows_madvised(ThpMode::Always));
        assert_eq!(SizeMode::Inherit.as_str(), "inherit");
    }
}
