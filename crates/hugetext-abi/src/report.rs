//! The machine-readable record of a remap pass: with `HUGETEXT_REPORT=json`
//! the preload writes one line on stderr per pass, [`PREFIX`] then a JSON
//! object whose keys are [`FIELDS`] (all integers: bytes, nanoseconds, 0/1),
//! for harnesses and tools that must not parse the human `-v` text.
//!
//! ```text
//! hugetext-report: {"v":1,"pid":4242,"late":0,"pmd":2097152,"windows":81788928,"huge":81788928,"already":0,"file":81788928,"collapse":0,"copy":0,"replaced":0,"copy_pmd":0,"copy_read":0,"ns_already":20110,"ns_file":17335002,"ns_collapse":0,"ns_copy":0,"ns":17400012,"smaps":0,"touch":0,"unit":2097152,"contpte":0}
//! ```

/// What starts the record's line.
pub const PREFIX: &str = "hugetext-report: ";
/// The record's format version (its `v` key).
pub const VERSION: u64 = 1;

/// The keys after `v`, in the order written:
/// - `pid`: the process (as the kernel outside any pid namespace sees it;
///   0 when unknown: `getpid` failed under a seccomp filter);
/// - `late`: 1 for a pass over objects loaded after start (dlopen);
/// - `pmd`: the PMD size, bytes;
/// - `windows`: bytes of text in whole windows of the unit (`unit`; the
///   pass's scope);
/// - `huge`: of those, huge-backed after the pass, the sum of
/// - `already`, `file`, `collapse`, `copy`: bytes by route;
/// - `replaced`: bytes of windows replaced with `mmap(MAP_FIXED)`;
/// - `copy_pmd`, `copy_read`: bytes of the copies taken from 2 MiB
///   page-cache folios, and read with `pread`;
/// - `ns_already`, `ns_file`, `ns_collapse`, `ns_copy`: time per route;
/// - `ns`: the whole pass;
/// - `smaps`: 1 when verified with smaps totals (no `PAGEMAP_SCAN`);
/// - `touch`: 1 when pages were faulted in by touching them;
/// - `unit`: the unit of huge text, bytes: the window size (the PMD, or
///   the 2 MiB contiguous-PTE block on arm64 with 64 KiB pages);
/// - `contpte`: 1 when the unit is a contiguous-PTE block.
///
/// Keys are only ever added at the end; readers look them up by name.
pub const FIELDS: [&str; 21] = [
    "pid",
    "late",
    "pmd",
    "windows",
    "huge",
    "already",
    "file",
    "collapse",
    "copy",
    "replaced",
    "copy_pmd",
    "copy_read",
    "ns_already",
    "ns_file",
    "ns_collapse",
    "ns_copy",
    "ns",
    "smaps",
    "touch",
    "unit",
    "contpte",
];

/// Whether the value of `HUGETEXT_REPORT` asks for the record.
pub fn wanted(v: &[u8]) -> bool {
    v == b"json"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_asks_and_keys_are_unique() {
        assert!(wanted(b"json"));
        assert!(!wanted(b"") && !wanted(b"1") && !wanted(b"JSON "));
        for (i, a) in FIELDS.iter().enumerate() {
            assert!(!FIELDS[i + 1..].contains(a), "{a}");
            assert!(a.bytes().all(|c| c.is_ascii_lowercase() || c == b'_'));
        }
    }
}
