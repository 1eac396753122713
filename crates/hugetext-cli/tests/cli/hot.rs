//! `hugetext run --hot PROFILE` and `HUGETEXT_HOT`: only the windows holding
//! the profile's share of the samples are remapped, on the fixture with
//! 100 MiB of text whose hot path is 8 MiB (tests/fixtures/hotcold.c).

use hugetext_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::Running;

const MIB: u64 = 1 << 20;

/// A sampled profile of the fixture calling its hot stubs (written once).
fn profile() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let exe = common::hotcold();
        let out = common::target_profile_dir().join("hotcold").join("hotcold.json");
        let o = Command::new(common::bin())
            .args(["profile", "--frequency", "4999", "-o"])
            .arg(&out)
            .arg("--")
            .arg(exe)
            .arg("30000000")
            .output()
            .unwrap();
        assert!(o.status.success(), "profile: {}", common::text(&o.stderr));
        out
    })
}

/// `hugetext run ARGS -- hotcold wait` with `HUGETEXT_REPORT=json`:
/// (anonymous huge bytes of its text, stderr).
fn run_copy(args: &[&str]) -> (u64, String) {
    let exe = common::hotcold();
    let mut all = vec!["--strategy", "copy", "-v"];
    all.extend_from_slice(args);
    let r = common::run_waiting_recorded(None, &all, exe);
    let (_, anon_huge, _) = r.huge_of(exe);
    (anon_huge, r.stop())
}

/// The fixture's hot path as a profile: main's window and the stubs' three,
/// 40/20/20/20 samples (a sampled profile's share of the stubs depends on
/// where the host's timer interrupts land: on a VM with no PMU, a `ret`
/// stub took under 1% of 5,470 cpu-clock samples, main's loop the rest).
fn hot_path() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = common::target_profile_dir().join("hotcold");
        common::hotcold_profile(&dir)
    })
}

#[test]
fn run_hot_copies_only_the_hot_windows() {
    let p = hot_path().to_str().unwrap().to_string();
    let (whole, all) = run_copy(&[]);
    let (hot, err) = run_copy(&["--hot", &p]);
    // The hot path: main's window and the three windows of stubs.
    assert_eq!(hot, 8 * MIB, "{err}");
    assert!(whole >= 96 * MIB, "the whole-text copy made {} MiB huge", whole / MIB);
    // The record carries the list's totals (what harnesses read).
    let rec = common::start_record(&err);
    let n = |k: &str| rec[k].as_u64().unwrap_or_else(|| panic!("{k}: {rec}"));
    assert_eq!((n("hot_list"), n("hot"), n("cold")), (1, 8 * MIB, 92 * MIB), "{rec}");
    assert_eq!(n("copy"), 8 * MIB, "{rec}");
    // Without a list, every window is in scope and the totals are 0.
    let rec = common::start_record(&all);
    assert_eq!(
        (&rec["hot_list"], &rec["hot"], &rec["cold"]),
        (&0.into(), &0.into(), &0.into())
    );
    // The -v summary says the same.
    assert!(
        err.contains("hot windows 8.0 MiB, cold windows left alone 92.0 MiB"),
        "{err}"
    );
    assert!(err.contains("hold 99% of the profile's samples"), "{err}");
}

#[test]
fn hot_share_takes_fewer_windows() {
    let p = profile().to_str().unwrap().to_string();
    // Half the samples: fewer windows than the whole hot path, at least one.
    let (hot, err) = run_copy(&["--hot", &p, "--hot-share", "50"]);
    assert!((2 * MIB..8 * MIB).contains(&hot), "{} MiB: {err}", hot / MIB);
}

#[test]
fn hugetext_hot_names_a_list_for_direct_preload_users() {
    let d = common::scratch();
    let list = d.path().join("app.hot");
    let o = common::hugetext(&[
        "profile",
        "--input",
        hot_path().to_str().unwrap(),
        "--hot-out",
        list.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    let text = std::fs::read_to_string(&list).unwrap();
    assert!(text.starts_with("hugetext-hot 1 "), "{text}");
    let exe = common::hotcold();
    let mut cmd = Command::new(exe);
    cmd.arg("wait")
        .env("LD_PRELOAD", common::preload())
        .env("HUGETEXT_STRATEGY", "copy")
        .env("HUGETEXT_VERBOSE", "1")
        .env("HUGETEXT_HOT", &list);
    let r = Running::start(cmd);
    let (_, anon_huge, _) = r.huge_of(exe);
    let err = r.stop();
    assert_eq!(anon_huge, 8 * MIB, "{err}");
}

#[test]
fn a_profile_of_another_build_leaves_the_file_alone() {
    let d = common::scratch();
    let json = std::fs::read_to_string(profile()).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for f in v["files"].as_array_mut().unwrap() {
        f["build_id"] = "00112233445566778899aabbccddeeff00112233".into();
    }
    let other = d.path().join("other.json");
    std::fs::write(&other, v.to_string()).unwrap();
    let (hot, err) = run_copy(&["--hot", other.to_str().unwrap()]);
    assert_eq!(hot, 0, "{err}");
    assert!(
        err.contains("its build-id is not the profile's (another build): left alone"),
        "{err}"
    );
}

#[test]
fn a_bad_profile_is_refused_before_the_program_runs() {
    let d = common::scratch();
    let marker = d.path().join("ran");
    let good = std::fs::read_to_string(profile()).unwrap();
    let cases = [
        ("missing.json", None, "missing.json"),
        ("junk.json", Some("{not json".to_string()), "not a hugetext profile"),
        (
            "v2.json",
            Some(good.replace("\"version\":1", "\"version\":2")),
            "profile version 2 is not supported",
        ),
        (
            "pmd.json",
            Some(
                good.replace("\"unit_size\":2097152", "\"unit_size\":33554432")
                    .replace("\"pmd_size\":2097152", "\"pmd_size\":33554432"),
            ),
            "this machine's huge pages are",
        ),
    ];
    for (name, body, want) in cases {
        let path = d.path().join(name);
        if let Some(b) = &body {
            std::fs::write(&path, b).unwrap();
        }
        let o = common::hugetext(&[
            "run",
            "--hot",
            path.to_str().unwrap(),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ]);
        let err = common::text(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(!marker.exists(), "{name}: the program ran");
    }
    // --hot-share needs --hot, and a share in (0, 100].
    let o = common::hugetext(&["run", "--hot-share", "50", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    let o = common::hugetext(&["run", "--hot", "x", "--hot-share", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
}
