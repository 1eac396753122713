//! The machine-readable record of a remap pass: with `HUGETEXT_REPORT=json`
//! the preload writes one line on stderr per pass, [`PREFIX`] then a JSON
//! object whose keys are [`FIELDS`] (all integers: bytes, nanoseconds, 0/1),
//! for harnesses and tools that must not parse the human `-v` text. The
//! writer fills a [`Record`], whose fields are the keys by name.
//!
//! ```text
//! hugetext-report: {"v":1,"pid":4242,"late":0,"pmd":2097152,"windows":81788928,"huge":81788928,"already":0,"file":81788928,"collapse":0,"copy":0,"replaced":0,"copy_pmd":0,"copy_read":0,"ns_already":20110,"ns_file":17335002,"ns_collapse":0,"ns_copy":0,"ns":17400012,"smaps":0,"touch":0,"unit":2097152,"contpte":0,"hot_list":0,"hot":0,"cold":0}
//! ```

/// What starts the record's line.
pub const PREFIX: &str = "hugetext-report: ";
/// The record's format version (its `v` key).
pub const VERSION: u64 = 1;

/// Declares [`Record`], its field names [`FIELDS`] and [`Record::pairs`]
/// from one list, so a name and its value are paired by name, never by
/// position in two parallel lists.
macro_rules! record {
    ($($(#[doc = $d:literal])* $name:ident,)*) => {
        /// One pass's numbers, as written in the record (see [`FIELDS`]).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Record {
            $($(#[doc = $d])* pub $name: u64,)*
        }

        /// The keys after `v`, in the order written (the fields of
        /// [`Record`]). Keys are only ever added at the end; readers look
        /// them up by name.
        pub const FIELDS: [&str; [$(stringify!($name)),*].len()] = [$(stringify!($name)),*];

        impl Record {
            /// Each key with its value, in the order of [`FIELDS`].
            pub fn pairs(&self) -> [(&'static str, u64); FIELDS.len()] {
                [$((stringify!($name), self.$name)),*]
            }
        }
    };
}

record! {
    /// The process (as the kernel outside any pid namespace sees it; 0
    /// when unknown: `getpid` failed under a seccomp filter).
    pid,
    /// 1 for a pass over objects loaded after start (dlopen).
    late,
    /// The PMD size, bytes.
    pmd,
    /// Bytes of text in whole windows of the unit (`unit`; the pass's
    /// scope).
    windows,
    /// Of those, huge-backed after the pass: the sum of `already`, `file`,
    /// `collapse`, `copy` and `shmem`.
    huge,
    /// Bytes already huge-backed before the pass.
    already,
    /// Bytes made huge by the page-cache route.
    file,
    /// Bytes made huge by `MADV_COLLAPSE` in place.
    collapse,
    /// Bytes made huge by an anonymous copy.
    copy,
    /// Bytes of windows replaced with `mmap(MAP_FIXED)`.
    replaced,
    /// Bytes of the copies taken from 2 MiB page-cache folios.
    copy_pmd,
    /// Bytes of the copies read with `pread`.
    copy_read,
    /// Time in the `already` route, ns.
    ns_already,
    /// Time in the `file` route, ns.
    ns_file,
    /// Time in the `collapse` route, ns.
    ns_collapse,
    /// Time in the `copy` route, ns.
    ns_copy,
    /// The whole pass, ns.
    ns,
    /// 1 when verified with smaps totals (no `PAGEMAP_SCAN`).
    smaps,
    /// 1 when pages were faulted in by touching them.
    touch,
    /// The unit of huge text, bytes: the window size (the PMD, or the
    /// 2 MiB contiguous-PTE block on arm64 with 64 KiB pages).
    unit,
    /// 1 when the unit is a contiguous-PTE block.
    contpte,
    /// 1 when a hot-window list (`run --hot`, `HUGETEXT_HOT`) chose the
    /// windows; `hot` and `cold` are then its totals.
    hot_list,
    /// Bytes of whole windows the list names hot (the ones the pass
    /// remapped); 0 without a list.
    hot,
    /// Bytes of whole windows left alone as cold: not in the list, or in
    /// files the list does not name or names for another build.
    cold,
    /// Bytes made huge by mapping the file's copy in the text store
    /// (counted in `huge` too).
    shmem,
    /// Time in the `shmem` route, ns.
    ns_shmem,
    /// Time reading and parsing `/proc/self/maps`, ns (part of `ns_setup`).
    ns_maps,
    /// Time from the pass's start to its first route, ns: settings, the
    /// hot-window list, the verifier, working memory and `ns_maps`.
    ns_setup,
    /// Of `ns_copy`: filling the copies (from page-cache folios or with
    /// `pread`), ns; the huge pages' allocation and zeroing before it are
    /// `ns_copy_zero` (where `MADV_POPULATE_WRITE` works; else the fill's
    /// own writes fault them in and they count here).
    ns_copy_fill,
    /// Of `ns_copy`: naming the copied code in the perf map (the ELF
    /// file's symbols read, the lines written), ns.
    ns_perf_map,
    /// `ns_copy_fill` as CPU time of the filling thread (user and system:
    /// faults, zeroing, reads; not the time it waited for a CPU), ns.
    ns_copy_fill_cpu,
    /// Of `ns_copy`: allocating and zeroing the copies' huge pages
    /// (`MADV_POPULATE_WRITE`, before the fill), ns...
    ns_copy_zero,
    /// ... and as the thread's CPU time, ns.
    ns_copy_zero_cpu,
}

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

    #[test]
    fn pairs_carry_each_value_under_its_own_name() {
        let r = Record {
            pid: 7,
            windows: 3,
            hot: 5,
            cold: 11,
            ..Record::default()
        };
        let p = r.pairs();
        assert_eq!(p.map(|(k, _)| k), FIELDS);
        let get = |k: &str| p.iter().find(|(n, _)| *n == k).map(|&(_, v)| v);
        assert_eq!(get("pid"), Some(7));
        assert_eq!(get("windows"), Some(3));
        assert_eq!(get("hot"), Some(5));
        assert_eq!(get("cold"), Some(11));
        assert_eq!(get("huge"), Some(0));
    }

    #[test]
    fn the_first_keys_stay_where_they_were() {
        // Readers of version 1 may rely on these; new keys go at the end.
        let old = [
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
        assert_eq!(FIELDS[..old.len()], old);
    }
}
