//! The THP mode for anonymous memory: the word the kernel brackets in
//! `/sys/kernel/mm/transparent_hugepage/enabled` (`always [madvise] never`).

/// Where the kernel states the THP mode.
pub const ENABLED_PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

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
        let open = text.iter().position(|&c| c == b'[')?;
        let rest = &text[open + 1..];
        let word = &rest[..rest.iter().position(|&c| c == b']')?];
        match word {
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
}
