//! `hugetext doctor` against the real kernel: every finding is checked
//! against an independent look at the same fact.

use hugetext_testkit as common;

use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Command;

use hugetext::kernel;
use serde_json::Value;

fn doctor_json(path: &str) -> Value {
    let out = common::hugetext(&["doctor", "--json", "--path", path]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {v}"))
}

/// What `MADV_COLLAPSE` does to file text here, found without doctor.
#[derive(Debug)]
enum Collapse {
    /// The kernel does not know the advice (EINVAL even for anonymous memory).
    NoAdvice,
    /// Refused for file text (what the kernel said).
    Refused(String),
    /// A fresh, unadvised, congruent mapping of the collapsed range is PMD-mapped.
    PmdMapped,
    /// Accepted, and yet a fresh mapping is not PMD-mapped.
    NotMapped,
    /// Refused again and again with "not now" (EAGAIN, ENOMEM, EBUSY).
    Transient,
    /// Not tried: the PMD is beyond any page-cache folio (64 KiB pages).
    Skipped,
}

/// Fill a file in small folios (a cold fault through a PROT_EXEC mapping),
/// `MADV_COLLAPSE` it, then look at the page cache through a second, fresh
/// mapping: PMD-mapped whole exactly when the collapse made PMD folios.
fn collapse_here(dir: &Path) -> Collapse {
    let pmd = kernel::pmd_size();
    let path = dir.join("collapse-me");
    let mut w = std::fs::File::create(&path).unwrap();
    w.write_all(&vec![0xc3u8; 2 * pmd]).unwrap();
    w.sync_all().unwrap();
    drop(w);
    // Read-only: the kernel does not collapse files open for writing.
    let f = std::fs::File::open(&path).unwrap();
    kernel::fadvise_dontneed(f.as_fd(), 0, None).unwrap();
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    let small = kernel::Mapping::file_congruent(f.as_fd(), 0, 2 * pmd, rx, pmd).unwrap();
    small.populate_read(0, 2 * pmd).unwrap();
    let mut r = small.madvise(0, 2 * pmd, kernel::MADV_COLLAPSE);
    // "Not now" (pages not yet on the LRU, no free PMD-size block): again,
    // as doctor does.
    let transient = |r: &hugetext::Result<()>| matches!(r, Err(hugetext::Error::Sys { source, .. }) if hugetext::pagecache::collapse_transient(source));
    for _ in 0..3 {
        if !transient(&r) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        small.populate_read(0, 2 * pmd).unwrap();
        r = small.madvise(0, 2 * pmd, kernel::MADV_COLLAPSE);
    }
    if transient(&r) {
        return Collapse::Transient;
    }
    drop(small);
    match r {
        Err(hugetext::Error::Sys { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
            if kernel::madv_collapse_known() {
                Collapse::Refused("EINVAL".into())
            } else {
                Collapse::NoAdvice
            }
        }
        Err(hugetext::Error::Sys { source, .. }) => Collapse::Refused(source.to_string()),
        Err(e) => panic!("MADV_COLLAPSE: {e}"),
        Ok(()) => {
            let fresh = kernel::Mapping::file_congruent(f.as_fd(), 0, 2 * pmd, rx, pmd).unwrap();
            fresh.populate_read(0, 2 * pmd).unwrap();
            let kb = hugetext::procfs::own_file_pmd_kb(fresh.addr()).unwrap();
            if kb == (2 * pmd / 1024) as u64 {
                Collapse::PmdMapped
            } else {
                Collapse::NotMapped
            }
        }
    }
}

/// Name a page of anonymous memory and look for the name in /proc/self/maps.
fn anon_name_shows_in_maps() -> bool {
    const PR_SET_VMA: libc::c_int = 0x5356_4d41;
    let ps = kernel::page_size();
    let m = kernel::Mapping::anon_aligned(ps, libc::PROT_READ | libc::PROT_WRITE, ps).unwrap();
    let name = c"doctor-test-name";
    // SAFETY: names our own mapping; the kernel copies the string.
    unsafe {
        libc::prctl(
            PR_SET_VMA,
            0 as libc::c_ulong,
            m.addr() as libc::c_ulong,
            ps as libc::c_ulong,
            name.as_ptr(),
        )
    };
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let shown = maps.lines().any(|l| l.ends_with("[anon:doctor-test-name]"));
    drop(m);
    shown
}

#[test]
fn findings_match_the_kernel() {
    let dir = common::scratch();
    let d = dir.path().to_str().unwrap();
    let v = doctor_json(d);
    for c in v["checks"].as_array().unwrap() {
        assert!(!c["meaning"].as_str().unwrap().is_empty(), "{c}");
    }
    let uname = Command::new("uname").arg("-r").output().unwrap();
    let release = String::from_utf8(uname.stdout).unwrap().trim().to_string();
    assert_eq!(check(&v, "kernel")["value"], release.as_str());
    assert!(check(&v, "page-size")["value"]
        .as_str()
        .unwrap()
        .contains(&format!("{} kB PMD", kernel::pmd_size() / 1024)));
    assert_eq!(check(&v, "thp")["value"], kernel::thp_enabled().unwrap().as_str());

    // doctor's scratch file is gone (checked before our own experiment,
    // which removes its file too).
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, Vec::<std::ffi::OsString>::new());
    // The same experiment, done here: does this filesystem give PMD folios?
    let huge = common::fs_gives_pmd_folios(dir.path());
    let fs = check(&v, "fs-large-folios");
    assert_eq!(fs["status"], if huge { "ok" } else { "no" }, "{fs}");
    // With 64 KiB pages the unit is the contpte block: no PMD mapping to
    // check (hugeunit.rs checks the contiguous-PTE one).
    let pmd_unit = kernel::huge_unit().1 == hugetext::elf::HugeUnit::Pmd;
    if huge && pmd_unit {
        assert_eq!(check(&v, "pmd-map")["status"], "ok");
    }
    // MADV_COLLAPSE on file text, tried here too (up to 6.x it needs
    // CONFIG_READ_ONLY_THP_FOR_FS; since 7.x any file whose mapping has PMD
    // folios; before 6.1 the advice does not exist).
    let collapse = check(&v, "madv-collapse");
    let value = collapse["value"].as_str().unwrap();
    if !pmd_unit {
        // Nothing to collapse file text into: said without a 512 MiB try.
        assert_eq!(collapse["status"], "no", "{collapse}");
        assert!(value.contains("larger than any page-cache folio"), "{collapse}");
    }
    match if pmd_unit {
        collapse_here(dir.path())
    } else {
        Collapse::Skipped
    } {
        Collapse::NoAdvice => {
            assert_eq!(collapse["status"], "no", "{collapse}");
            assert!(value.contains("has no MADV_COLLAPSE"), "{collapse}");
        }
        Collapse::Refused(why) => {
            assert_eq!(collapse["status"], "no", "{collapse}");
            assert!(
                value.starts_with(why.as_str()) && !value.contains("has no"),
                "{why}: {collapse}"
            );
        }
        Collapse::PmdMapped => assert_eq!(collapse["status"], "ok", "{collapse}"),
        Collapse::NotMapped => assert_eq!(collapse["status"], "warn", "{collapse}"),
        Collapse::Skipped => {}
        // Doctor's own tries may have got through, or not.
        Collapse::Transient => assert!(
            collapse["status"] == "ok" || (collapse["status"] == "warn" && value.starts_with("transient failure")),
            "{collapse}"
        ),
    }
    assert_eq!(
        check(&v, "anon-vma-name")["value"],
        if anon_name_shows_in_maps() { "yes" } else { "no" }
    );
    assert_eq!(
        check(&v, "pfn-access")["status"],
        if kernel::pfn_access() { "ok" } else { "warn" }
    );
    assert_eq!(
        check(&v, "pagemap-scan")["value"],
        if kernel::pagemap_scan_supported() { "yes" } else { "no" }
    );
    let (a, b) = kernel::glibc_version().unwrap();
    assert_eq!(check(&v, "glibc")["value"], format!("{a}.{b}").as_str());
    // The table names every check.
    let out = common::hugetext(&["doctor", "--path", d]);
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "kernel",
        "PMD-order page-cache folios",
        "MADV_COLLAPSE",
        "pagemap PFN access",
        "glibc",
    ] {
        assert!(text.contains(word), "{word} missing: {text}");
    }
}

#[test]
fn unprivileged_doctor_says_what_it_cannot_see() {
    // As nobody: no PFN access, and a root-owned directory cannot be probed.
    let dir = common::scratch();
    let out = common::as_nobody()
        .arg(common::bin())
        .args(["doctor", "--json", "--path", dir.path().to_str().unwrap()])
        .output()
        .expect("setpriv (util-linux)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(check(&v, "pfn-access")["status"], "warn");
    let fs = check(&v, "fs-large-folios");
    assert_eq!(fs["status"], "warn");
    assert!(fs["value"].as_str().unwrap().starts_with("not probed"), "{fs}");
    // Mounting the shared-text experiment's tmpfs needs root: said, not failed.
    let sh = check(&v, "shmem-text");
    assert_eq!(sh["status"], "warn", "{sh}");
    assert!(sh["value"].as_str().unwrap().contains("CAP_SYS_ADMIN"), "{sh}");
}

/// The mounts whose source is the doctor's experiment tmpfs.
fn doctor_tmpfs_mounts() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(" - tmpfs hugetext-doctor "))
        .count()
}

/// doctor's experiment on a huge tmpfs agrees with one of the test's own: a
/// file on a tmpfs mounted huge=within_size, mapped PROT_EXEC PMD-aligned,
/// is PMD-mapped (ShmemPmdMapped) exactly when doctor says shared huge text
/// is available; its tmpfs is unmounted afterwards.
#[test]
fn shmem_text_matches_an_experiment_and_leaves_no_mount() {
    if common::contpte_unit() {
        common::skip_line("skipped: the unit of huge text is the contpte block here");
        return;
    }
    let Some(fs) = common::tmpfs("huge=within_size,size=16m") else {
        return;
    };
    let pmd = common::pmd() as usize;
    let f = fs.path().join("text");
    {
        let mut w = std::fs::File::create(&f).unwrap();
        w.set_len(2 * pmd as u64).unwrap();
        w.write_all(&vec![0xc3u8; 2 * pmd]).unwrap();
    }
    let file = std::fs::File::open(&f).unwrap();
    let m = kernel::Mapping::file_congruent(file.as_fd(), 0, 2 * pmd, libc::PROT_READ | libc::PROT_EXEC, pmd).unwrap();
    m.populate_read(0, 2 * pmd).unwrap();
    let mine = hugetext::procfs::own_mapping_stats(m.addr() as u64)
        .unwrap()
        .unwrap()
        .shmem_pmd_kb;
    drop(m);
    let before = doctor_tmpfs_mounts();
    let dir = common::scratch();
    let v = doctor_json(dir.path().to_str().unwrap());
    let sh = check(&v, "shmem-text");
    let kb = 2 * common::pmd_kb();
    if mine == kb {
        assert_eq!(sh["status"], "ok", "{sh}");
        assert_eq!(
            sh["value"],
            format!("{kb} of {kb} kB PMD-mapped from a huge=within_size tmpfs")
        );
        assert!(
            sh["meaning"]
                .as_str()
                .unwrap()
                .starts_with("shared huge text via the store: available"),
            "{sh}"
        );
    } else {
        assert_ne!(sh["status"], "ok", "the experiment got {mine} kB: {sh}");
    }
    assert_eq!(doctor_tmpfs_mounts(), before, "doctor left its tmpfs mounted");
    let out = common::hugetext(&["doctor", "--path", dir.path().to_str().unwrap()]);
    assert!(common::text(&out.stdout).contains("shared huge text via the store"));
}

#[test]
fn bad_path_is_one_line() {
    let out = common::hugetext(&["doctor", "--path", "/nonexistent/dir"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/dir"));
}
