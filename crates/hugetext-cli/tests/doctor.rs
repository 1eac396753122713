//! `hugetext doctor` against the real kernel: every finding is checked
//! against an independent look at the same fact.

use hugetext_testkit as common;

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
    if huge {
        assert_eq!(check(&v, "pmd-map")["status"], "ok");
    }
    // MADV_COLLAPSE on file text needs CONFIG_READ_ONLY_THP_FOR_FS.
    match kernel::kernel_config("CONFIG_READ_ONLY_THP_FOR_FS").as_deref() {
        Some("n") => assert_eq!(check(&v, "madv-collapse")["status"], "no"),
        Some("y") => assert_ne!(check(&v, "madv-collapse")["status"], "no"),
        _ => {}
    }
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
}

#[test]
fn bad_path_is_one_line() {
    let out = common::hugetext(&["doctor", "--path", "/nonexistent/dir"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/dir"));
}
