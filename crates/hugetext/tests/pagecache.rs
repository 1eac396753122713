//! The zero-copy recipe against the real kernel: evict, refill through a
//! MADV_HUGEPAGE mapping, and read the folio sizes back.

use std::fs::File;
use std::io::{Read, Write};

use hugetext::{folio, kernel, pagecache};

fn scratch_file(name: &str, mib: usize) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("pagecache");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let mut f = File::create(&p).unwrap();
    let block: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + 3) as u8).collect();
    for _ in 0..mib {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
    p
}

#[test]
fn evict_then_fill_gives_pmd_folios() {
    let p = scratch_file("fill", 32);
    let f = File::open(&p).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    let cold = folio::scan_file(&p, None).unwrap();
    assert_eq!(cold.cached_kb, 0, "fresh evicted file should not be cached: {cold:?}");
    assert_eq!(cold.total_windows, 16);

    pagecache::fill_huge(&f, 0..32 << 20).unwrap();
    let warm = folio::scan_file(&p, None).unwrap();
    assert_eq!(warm.cached_kb, 32 * 1024);
    let pmd_kb = kernel::pmd_size() as u64 / 1024;
    assert_eq!(warm.folios_kb.get(&pmd_kb).copied().unwrap_or(0), 32 * 1024, "{warm:?}");
    assert_eq!(warm.pmd_windows.len(), 16);
    // Scanning did not change the cache.
    let again = folio::scan_file(&p, None).unwrap();
    assert_eq!(again.folios_kb, warm.folios_kb);
    assert_eq!(again.mapped_kb, 0);
}

#[test]
fn small_reads_give_small_folios_and_scan_reads_nothing() {
    let p = scratch_file("small", 8);
    let mut f = File::open(&p).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    // Read only the first 64 KiB with a plain read(): readahead brings in
    // some small folios; nothing near the end of the file.
    let mut buf = vec![0u8; 4096];
    f.read_exact(&mut buf).unwrap();
    let v = folio::scan_file(&p, None).unwrap();
    assert!(v.cached_kb > 0 && v.cached_kb < 8 * 1024, "{v:?}");
    assert!(v.pmd_windows.is_empty());
    let tail = folio::scan_file(&p, Some((6 << 20)..(8 << 20))).unwrap();
    assert_eq!(tail.cached_kb, 0, "scanning must not read uncached pages: {tail:?}");
}
