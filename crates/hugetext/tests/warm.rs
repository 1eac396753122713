//! Library pieces of `warm` against the real kernel: bounded fills, the
//! MADV_COLLAPSE probe, who maps a file, planning.

use std::fs::File;

use hugetext::{folio, kernel, pagecache, warm};

use hugetext_testkit::{scratch, scratch_file};

#[test]
fn bounded_fill_reads_nothing_outside_the_range() {
    let dir = scratch();
    let (pmd, ps) = (kernel::pmd_size() as u64, kernel::page_size() as u64);
    let p = scratch_file(dir.path(), "f", ((4 * pmd) >> 20) as usize);
    let f = File::open(&p).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    // One whole window [PMD, 2 PMD) plus a head and a tail.
    let range = 3 * ps..2 * pmd + 5 * ps;
    pagecache::fill_bounded(&f, range.clone()).unwrap();
    let s = folio::scan_file(&p, Some(range.clone())).unwrap();
    assert_eq!(s.cached_kb, (range.end - range.start) / 1024, "{s:?}");
    assert_eq!(s.unit_windows, vec![pmd]);
    let before = folio::scan_file(&p, Some(0..range.start)).unwrap();
    let after = folio::scan_file(&p, Some(range.end..4 * pmd)).unwrap();
    assert_eq!(
        (before.cached_kb, after.cached_kb),
        (0, 0),
        "read outside: {before:?} {after:?}"
    );
}

#[test]
fn parallel_window_fill_gives_pmd_folios_and_stays_in_range() {
    let dir = scratch();
    let (pmd, ps) = (kernel::pmd_size() as u64, kernel::page_size() as u64);
    let p = scratch_file(dir.path(), "f", ((10 * pmd) >> 20) as usize);
    let f = File::open(&p).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    pagecache::fill_windows(&f, pmd..9 * pmd, 4).unwrap();
    let s = folio::scan_file(&p, None).unwrap();
    assert_eq!(s.unit_windows.len(), 8, "{s:?}");
    assert_eq!(s.cached_kb, 8 * pmd / 1024, "exactly the windows asked for: {s:?}");
    assert!(
        pagecache::fill_windows(&f, ps..pmd, 2).is_err(),
        "unaligned windows are refused"
    );
}

/// Whether the running kernel was built with CONFIG_READ_ONLY_THP_FOR_FS,
/// when it says (/proc/config.gz).
fn config_ro_thp() -> Option<bool> {
    let out = std::process::Command::new("sh")
        .args(["-c", "zcat /proc/config.gz 2>/dev/null"])
        .output()
        .ok()?;
    if out.stdout.is_empty() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l == "CONFIG_READ_ONLY_THP_FOR_FS=y"),
    )
}

#[test]
fn collapse_probe_matches_the_kernel_config() {
    let dir = scratch();
    let got = pagecache::collapse_supported(dir.path()).unwrap();
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "the probe file is removed"
    );
    match config_ro_thp() {
        Some(want) => assert_eq!(got.is_available(), want, "{got:?}"),
        None => eprintln!("no /proc/config.gz; probe says {got:?}"),
    }
    if let pagecache::CollapseSupport::Unavailable(why) = &got {
        assert!(why.contains("MADV_COLLAPSE"), "{why}");
    }
}

#[test]
fn mapping_pids_finds_a_process_that_maps_the_file() {
    let sleep = std::fs::canonicalize("/bin/sleep").unwrap();
    let mut child = std::process::Command::new(&sleep).arg("30").spawn().unwrap();
    // Wait until exec has mapped it.
    let mut found = false;
    for _ in 0..100 {
        let pids = warm::mapping_pids(&sleep).unwrap();
        if pids.iter().any(|p| p.pid == child.id() as i32) {
            found = true;
            assert!(pids.iter().any(|p| p.comm == "sleep"));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(found, "pid {} not found mapping {}", child.id(), sleep.display());
}

#[test]
fn plan_of_an_elf_file_is_its_read_only_segments() {
    let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
    let t = warm::plan(&exe).unwrap();
    assert!(t.elf);
    assert!(!t.ranges.is_empty());
    assert!(t.ranges.iter().any(|r| r.flags.as_deref() == Some("r-x")));
    assert!(
        t.ranges.windows(2).all(|w| w[0].offset + w[0].len <= w[1].offset),
        "sorted, disjoint"
    );
    assert!(t.bytes() < t.size + 2 * kernel::page_size() as u64 * t.ranges.len() as u64);

    let dir = scratch();
    let data = scratch_file(dir.path(), "data", 1);
    let t = warm::plan(&data).unwrap();
    assert!(!t.elf);
    assert_eq!((t.ranges.len(), t.ranges[0].offset, t.ranges[0].len), (1, 0, 1 << 20));
    // ELF magic but garbage: whole file, with a note.
    let bad = dir.path().join("bad");
    std::fs::write(&bad, b"\x7fELF\x02\x01\x01garbage").unwrap();
    let t = warm::plan(&bad).unwrap();
    assert_eq!(t.ranges.len(), 1);
    assert!(t.notes[0].contains("not a valid ELF"), "{:?}", t.notes);
}

#[test]
fn warm_fills_the_planned_file_when_another_is_renamed_over_its_path() {
    let dir = scratch();
    let pmd = kernel::pmd_size() as u64;
    let mib = ((4 * pmd) >> 20) as usize;
    let p = scratch_file(dir.path(), "planned", mib);
    let t = warm::plan(&p).unwrap();
    assert_eq!(t.eligible_windows(), 4);
    // The planned inode, held to look at its page cache afterwards.
    let planned = File::open(&p).unwrap();
    pagecache::evict(&planned, 0..0).unwrap();
    // Another file renamed over the path, nothing of it cached.
    let other = scratch_file(dir.path(), "other", mib);
    std::fs::rename(&other, &p).unwrap();
    let now = File::open(&p).unwrap();
    pagecache::evict(&now, 0..0).unwrap();

    let r = warm::warm_target(&t, &warm::WarmOptions::default(), &mut warm::WarmContext::default()).unwrap();
    let held = std::path::PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&planned)));
    let s = folio::scan_file(&held, None).unwrap();
    assert_eq!(
        s.unit_windows,
        vec![0, pmd, 2 * pmd, 3 * pmd],
        "the planned file: {s:?}"
    );
    assert_eq!(r.unit_windows, 4, "{r:?}");
    let s = folio::scan_file(&p, None).unwrap();
    assert_eq!(s.cached_kb, 0, "the file at the path now was not touched: {s:?}");
    assert!(
        r.notes.iter().any(|n| n.contains("another file is at this path now")),
        "{:?}",
        r.notes
    );
}

#[test]
fn replace_renames_only_over_the_planned_file() {
    let dir = scratch();
    let mib = ((2 * kernel::pmd_size() as u64) >> 20) as usize;
    let p = scratch_file(dir.path(), "planned", mib);
    let t = warm::plan(&p).unwrap();
    let opts = warm::WarmOptions {
        replace: true,
        ..Default::default()
    };
    let mut ctx = warm::WarmContext::default();
    let before = warm::warm_target(&t, &warm::WarmOptions::default(), &mut ctx).unwrap();
    let other = scratch_file(dir.path(), "other", mib);
    std::fs::rename(&other, &p).unwrap();
    let ino = |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let there = ino(&p);
    let e = warm::replace_and_warm(&t, &opts, &mut ctx, before, std::time::Instant::now()).unwrap_err();
    assert!(
        e.to_string().contains("replaced or removed since it was planned"),
        "{e}"
    );
    assert_eq!(ino(&p), there, "the file at the path was replaced");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("planned")], "no copy is left");
}
