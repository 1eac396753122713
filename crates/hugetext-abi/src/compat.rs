//! `HUGETEXT_COMPAT`: kernel features to act as if missing, to exercise on a
//! new kernel the fallbacks that older kernels need (testing and diagnosis).
//! Read by the preload and by the library alike.

/// The words [`Compat::parse`] knows, for messages.
pub const WORDS: &str = "no-pagemap-scan, no-populate, no-pt-reclaim or all";

/// Kernel features not to use, from a comma- or space-separated list of
/// words: `no-pagemap-scan,no-populate,no-pt-reclaim` (`all` = every one;
/// empty = none).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Compat<'a> {
    /// `no-pagemap-scan`: verify with `/proc/self/smaps` totals, as before
    /// Linux 6.7.
    pub no_pagemap_scan: bool,
    /// `no-populate`: fault pages in by touching them, as before Linux 5.14
    /// (no `MADV_POPULATE_READ`).
    pub no_populate: bool,
    /// `no-pt-reclaim`: drop each window's PTEs with two `MADV_DONTNEED`
    /// calls of 1 MiB, which this kernel, like every kernel before 6.14
    /// (no `CONFIG_PT_RECLAIM`) for any range, answers by leaving the
    /// emptied page table in place (the preload must then detect that and
    /// replace the window with `mmap(MAP_FIXED)`).
    pub no_pt_reclaim: bool,
    /// The first unknown word, for a warning.
    pub unknown: Option<&'a [u8]>,
}

impl<'a> Compat<'a> {
    /// Parse the value of `HUGETEXT_COMPAT`.
    pub fn parse(v: &'a [u8]) -> Compat<'a> {
        let mut c = Compat::default();
        for w in v.split(|&b| b == b',' || b == b' ').filter(|w| !w.is_empty()) {
            match w {
                b"no-pagemap-scan" => c.no_pagemap_scan = true,
                b"no-populate" => c.no_populate = true,
                b"no-pt-reclaim" => c.no_pt_reclaim = true,
                b"all" => {
                    c.no_pagemap_scan = true;
                    c.no_populate = true;
                    c.no_pt_reclaim = true;
                }
                other => {
                    if c.unknown.is_none() {
                        c.unknown = Some(other);
                    }
                }
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        let c = Compat::parse(b"no-pagemap-scan,no-populate");
        assert!(c.no_pagemap_scan && c.no_populate && !c.no_pt_reclaim && c.unknown.is_none());
        let c = Compat::parse(b"no-populate");
        assert!(!c.no_pagemap_scan && c.no_populate && !c.no_pt_reclaim);
        let c = Compat::parse(b"no-pt-reclaim");
        assert!(c.no_pt_reclaim && !c.no_populate && c.unknown.is_none());
        assert_eq!(
            Compat::parse(b"all"),
            Compat::parse(b"no-populate no-pagemap-scan,no-pt-reclaim")
        );
        assert_eq!(Compat::parse(b""), Compat::default());
        assert_eq!(Compat::parse(b" , ,, "), Compat::default());
    }

    #[test]
    fn bad_tokens() {
        // The first unknown word is kept; known words around it still count.
        let c = Compat::parse(b"no-scan,no-populate,bogus");
        assert_eq!(c.unknown, Some(&b"no-scan"[..]));
        assert!(c.no_populate && !c.no_pagemap_scan);
        // Case matters, and so do separators other than ',' and ' '.
        assert_eq!(Compat::parse(b"NO-POPULATE").unknown, Some(&b"NO-POPULATE"[..]));
        let c = Compat::parse(b"no-populate;no-pagemap-scan");
        assert_eq!(c.unknown, Some(&b"no-populate;no-pagemap-scan"[..]));
        assert!(!c.no_populate);
        // A tab is part of a word.
        assert!(Compat::parse(b"\tall").unknown.is_some());
        // Words are exact, not prefixes.
        assert!(Compat::parse(b"no-populate-read").unknown.is_some());
        assert!(Compat::parse(b"al").unknown.is_some());
    }
}
