//! The zero-copy recipe against the real kernel: evict, refill through a
//! MADV_HUGEPAGE mapping, and read the folio sizes back.

use std::fs::File;
use std::io::Read;

use hugetext::{folio, kernel, pagecache};

use hugetext_testkit::{pmd, pmd_kb, scratch, scratch_file, windows_mib};

#[test]
fn evict_then_fill_gives_pmd_folios() {
    let dir = scratch();
    // Four windows: 8 MiB on x86-64, 128 MiB with 16 KiB pages.
    let n = 4;
    let p = scratch_file(dir.path(), "fill", windows_mib(n));
    let f = File::open(&p).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    let cold = folio::scan_file(&p, None).unwrap();
    assert_eq!(cold.cached_kb, 0, "fresh evicted file should not be cached: {cold:?}");
    assert_eq!(cold.total_windows, n);

    pagecache::fill_huge(&f, 0..n * pmd()).unwrap();
    let warm = folio::scan_file(&p, None).unwrap();
    assert_eq!(warm.cached_kb, n * pmd_kb());
    assert_eq!(
        warm.folios_kb.get(&pmd_kb()).copied().unwrap_or(0),
        n * pmd_kb(),
        "{warm:?}"
    );
    assert_eq!(warm.unit_windows.len(), n as usize);
    // Scanning did not change the cache.
    let again = folio::scan_file(&p, None).unwrap();
    assert_eq!(again.folios_kb, warm.folios_kb);
    assert_eq!(again.mapped_kb, 0);
}

#[test]
fn small_reads_give_small_folios_and_scan_reads_nothing() {
    let dir = scratch();
    let p = scratch_file(dir.path(), "small", 8);
    let mut f = File::open(&p).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    // Read only the first 64 KiB with a plain read(): readahead brings in
    // some small folios; nothing near the end of the file.
    let mut buf = vec![0u8; 4096];
    f.read_exact(&mut buf).unwrap();
    let v = folio::scan_file(&p, None).unwrap();
    assert!(v.cached_kb > 0 && v.cached_kb < 8 * 1024, "{v:?}");
    assert!(v.unit_windows.is_empty());
    let tail = folio::scan_file(&p, Some((6 << 20)..(8 << 20))).unwrap();
    assert_eq!(tail.cached_kb, 0, "scanning must not read uncached pages: {tail:?}");
}

/// The fallback for kernels without `MADV_POPULATE_READ` (before 5.14):
/// loading one byte per page of a congruent `MADV_HUGEPAGE` mapping fills
/// the page cache with PMD folios just the same.
#[test]
fn touching_pages_fills_pmd_folios_like_populate() {
    use std::os::fd::AsFd;
    let dir = scratch();
    let p = scratch_file(dir.path(), "touch", windows_mib(4));
    let f = File::open(&p).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    let len = 4 * pmd() as usize;
    let m =
        kernel::Mapping::file_congruent(f.as_fd(), 0, len, libc::PROT_READ | libc::PROT_EXEC, pmd() as usize).unwrap();
    m.madvise(0, len, kernel::MADV_HUGEPAGE).unwrap();
    // SAFETY: our own PROT_READ mapping.
    unsafe { kernel::touch_pages(m.addr(), len) };
    drop(m);
    let v = folio::scan_file(&p, None).unwrap();
    assert_eq!(v.folios_kb.get(&pmd_kb()).copied().unwrap_or(0), 4 * pmd_kb(), "{v:?}");
    // A mapping that is not readable is refused, not touched.
    let n = kernel::Mapping::anon_aligned(4096, libc::PROT_NONE, 4096).unwrap();
    assert!(n.populate_read(0, 4096).is_err());
}

/// `HUGETEXT_COMPAT=no-populate` makes `fill_windows`/`fill_huge` (what
/// `warm` uses) take the touch fallback; the page cache still ends up in PMD
/// folios. The test re-runs itself with the knob set (it is read once per
/// process).
#[test]
fn compat_knob_makes_fills_touch_pages() {
    const NAME: &str = "compat_knob_makes_fills_touch_pages";
    if std::env::var_os("HUGETEXT_COMPAT").is_some() {
        assert!(
            kernel::populate_by_touch(),
            "HUGETEXT_COMPAT=no-populate is not honoured"
        );
        let dir = scratch();
        let p = scratch_file(dir.path(), "compat-windows", windows_mib(4));
        let f = File::open(&p).unwrap();
        pagecache::evict(&f, 0..0).unwrap();
        pagecache::fill_windows(&f, 0..4 * pmd(), 4).unwrap();
        let v = folio::scan_file(&p, None).unwrap();
        assert_eq!(v.folios_kb.get(&pmd_kb()).copied().unwrap_or(0), 4 * pmd_kb(), "{v:?}");
        let dir = scratch();
        let p = scratch_file(dir.path(), "compat-huge", windows_mib(4));
        let f = File::open(&p).unwrap();
        pagecache::evict(&f, 0..0).unwrap();
        pagecache::fill_huge(&f, 0..4 * pmd()).unwrap();
        let v = folio::scan_file(&p, None).unwrap();
        assert_eq!(v.folios_kb.get(&pmd_kb()).copied().unwrap_or(0), 4 * pmd_kb(), "{v:?}");
        return;
    }
    if kernel::KernelVersion::current().at_least(5, 14) {
        assert!(!kernel::populate_by_touch(), "MADV_POPULATE_READ exists since 5.14");
    }
    let o = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--test-threads", "1"])
        .env("HUGETEXT_COMPAT", "no-populate")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("1 passed"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
