//! The unit of huge text, on every kernel: windows of the PMD size, or of
//! the 2 MiB contiguous-PTE block on arm64 with 64 KiB pages, where no
//! page-cache folio reaches the 512 MiB PMD. `warm` fills them, `inspect
//! --file` counts them, and a congruent mapping of them is mapped by the
//! unit: one PMD each (smaps `FilePmdMapped`), or contiguous PTEs (every
//! page present, the frames of each block contiguous and block-aligned, in
//! one folio of at least the block: what arm64 maps with one TLB entry).

use common::hugetext_json as json;
use hugetext_testkit as common;

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use hugetext::elf::HugeUnit;
use hugetext::folio::{self, PM_PFN_MASK, PM_PRESENT};
use hugetext::kernel::{self, Mapping};
use serde_json::Value;

/// Whole windows of the unit in the test file (plus a 1 MiB tail).
const WINDOWS: u64 = 4;

/// A file of [`WINDOWS`] windows of the unit and a 1 MiB tail in `dir`,
/// written back and evicted.
fn unit_file(dir: &Path) -> PathBuf {
    let mib = ((WINDOWS * common::unit()) >> 20) as usize + 1;
    common::scratch_file(dir, "text.bin", mib)
}

/// Where this filesystem gives no folios of the unit, say so and skip;
/// but not under CI or in the kernel matrix's guests (which run these tests
/// only where doctor found such folios): there it is a failure.
fn large_folios_here(dir: &Path) -> bool {
    let yes = common::fs_gives_pmd_folios(dir);
    if !yes {
        let strict = std::env::var_os("CI").is_some() || common::prebuilt();
        assert!(!strict, "the filesystem under test gives no folios of the huge unit");
        common::skip_line("skipped: the filesystem under test gives no folios of the huge unit");
    }
    yes
}

#[test]
fn warm_fills_windows_of_the_unit_and_inspect_counts_them() {
    let dir = common::scratch();
    if !large_folios_here(dir.path()) {
        return;
    }
    let p = unit_file(dir.path());
    let path = p.to_str().unwrap();
    let before = folio::scan_file(&p, None).unwrap();
    assert_eq!(before.cached_kb, 0, "evicted: {before:?}");

    let w = json(&["warm", "--json", path]);
    let f = &w["files"][0];
    assert_eq!(f["unit_kb"], common::unit_kb(), "{f:#}");
    assert_eq!(f["eligible_windows"], WINDOWS, "{f:#}");
    assert_eq!(f["unit_windows"], WINDOWS, "{f:#}");
    assert!(
        f["unit_folio_kb"].as_u64().unwrap() >= WINDOWS * common::unit_kb(),
        "{f:#}"
    );

    // The folios themselves: each window inside one folio of at least the
    // unit, and no folio larger than the page cache's largest.
    let s = folio::scan_file(&p, None).unwrap();
    assert_eq!(s.total_windows, WINDOWS, "{s:?}");
    assert_eq!(s.unit_windows.len() as u64, WINDOWS, "{s:?}");
    assert!(s.huge_kb() >= WINDOWS * common::unit_kb(), "{s:?}");

    let i = json(&["inspect", "--file", path, "--json"]);
    assert_eq!(i["unit_kb"], common::unit_kb(), "{i:#}");
    assert_eq!(i["files"][0]["unit_windows"], WINDOWS, "{i:#}");
    assert_eq!(i["files"][0]["unit_windows_huge"], WINDOWS, "{i:#}");
}

#[test]
fn a_congruent_mapping_of_warmed_windows_is_mapped_by_the_unit() {
    let dir = common::scratch();
    if !large_folios_here(dir.path()) {
        return;
    }
    let p = unit_file(dir.path());
    json(&["warm", "--json", p.to_str().unwrap()]);
    let f = File::open(&p).unwrap();
    let (unit, kind) = kernel::huge_unit();
    let len = WINDOWS as usize * unit;
    let map = Mapping::file_congruent(f.as_fd(), 0, len, libc::PROT_READ | libc::PROT_EXEC, unit).unwrap();
    map.populate_read(0, len).unwrap();
    match kind {
        HugeUnit::Pmd => {
            let kb = hugetext::procfs::own_file_pmd_kb(map.addr()).unwrap();
            assert_eq!(kb, WINDOWS * common::unit_kb(), "FilePmdMapped");
        }
        HugeUnit::Contpte => {
            // What arm64 needs to fold a block into one contiguous-PTE
            // entry: all its pages present, their frames contiguous and
            // aligned to the block, inside one large folio.
            let per = unit / kernel::page_size();
            let pm = folio::read_pagemap(None, map.addr(), len / kernel::page_size()).unwrap();
            let kpf = folio::open_kpageflags().unwrap();
            let sizes = folio::folio_sizes(&kpf, &pm).unwrap();
            for (b, block) in pm.chunks(per).enumerate() {
                let pfn0 = block[0] & PM_PFN_MASK;
                assert!(
                    block.iter().all(|e| e & PM_PRESENT != 0),
                    "block {b}: a page is not mapped"
                );
                assert_eq!(pfn0 % per as u64, 0, "block {b}: frames not block-aligned");
                for (i, e) in block.iter().enumerate() {
                    assert_eq!(
                        e & PM_PFN_MASK,
                        pfn0 + i as u64,
                        "block {b}: frames not contiguous at page {i}"
                    );
                }
                let folio = sizes[b * per];
                assert!(folio >= unit as u64, "block {b}: in a folio of {folio} bytes");
            }
        }
    }
}

#[test]
fn doctor_names_the_unit_and_finds_its_folios() {
    let dir = common::scratch();
    let v = json(&["doctor", "--json", "--path", dir.path().to_str().unwrap()]);
    let check = |id: &str| -> Value {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no {id} in {v:#}"))
    };
    let (unit, kind) = kernel::huge_unit();
    let words = hugetext::units::human(unit as u64);
    let fs = check("fs-large-folios");
    if common::fs_gives_pmd_folios(dir.path()) {
        assert_eq!(fs["status"], "ok", "{fs}");
        assert!(
            fs["value"]
                .as_str()
                .unwrap()
                .contains(&format!("windows in {words} folios")),
            "{fs}"
        );
    }
    let pmd_map = check("pmd-map");
    match kind {
        HugeUnit::Pmd => assert_ne!(pmd_map["status"], "info", "{pmd_map}"),
        HugeUnit::Contpte => {
            assert_eq!(pmd_map["status"], "info", "{pmd_map}");
            assert!(
                pmd_map["meaning"].as_str().unwrap().contains("contiguous PTEs"),
                "{pmd_map}"
            );
            let page = check("page-size");
            assert!(
                page["meaning"].as_str().unwrap().contains("unit of huge text"),
                "{page}"
            );
            let collapse = check("madv-collapse");
            assert!(
                collapse["value"]
                    .as_str()
                    .unwrap()
                    .contains("larger than any page-cache folio"),
                "{collapse}"
            );
        }
    }
}
