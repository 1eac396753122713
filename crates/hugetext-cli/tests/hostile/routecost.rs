//! Hostile cases: the route-cost cache `run` keeps per user. A user's own
//! cache file with absurd costs (or garbage) changes nothing but a new
//! measurement: the costs are range-checked, and the file is rewritten.

use hugetext_testkit as tk;

use hugetext::run::routecost::{plausible, Cost, RouteCosts};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Give `p` to the attacker.
fn give(p: &Path, mode: u32) {
    let (uid, gid) = tk::attacker();
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// The attacker's cache says collapse in place costs -7 ms/MiB and evict +
/// refill 1e300 ms/MiB (or holds garbage): `run -v` never shows nor uses
/// those, it measures again (or, where it cannot, uses no cost at all),
/// and the file it keeps then holds plausible costs. (Before: the absurd
/// costs were believed and decided the order of the routes.)
#[test]
fn absurd_cached_route_costs_are_measured_again() {
    tk::attacker();
    let d = tk::scratch();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let work = d.path().join("work");
    fs::create_dir(&work).unwrap();
    give(&work, 0o755);
    let prog = tk::copy_fixture(&work, "lld", "small");
    give(&prog, 0o755);
    let rt = d.path().join("rt");
    fs::create_dir_all(rt.join("hugetext")).unwrap();
    give(&rt, 0o700);
    give(&rt.join("hugetext"), 0o700);
    let dev = fs::metadata(&work).unwrap().dev();
    let cache = rt.join(format!("hugetext/route-costs-{dev:x}.json"));
    let absurd = RouteCosts {
        fs: "ext4".into(),
        dev,
        release: release(),
        boot_id: fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
            .into(),
        refill: Cost::MsPerMib(1e300),
        collapse: Cost::MsPerMib(-7.0),
    };
    let garbage = "{\"fs\": [".to_string();
    for planted in [serde_json::to_string(&absurd).unwrap(), garbage] {
        fs::write(&cache, planted).unwrap();
        give(&cache, 0o600);
        let o = tk::as_attacker()
            .arg(tk::bin())
            .args(["run", "-v", "--"])
            .arg(&prog)
            .env("XDG_RUNTIME_DIR", &rt)
            .env("HUGETEXT_PERF_MAP", "0")
            .env_remove("HUGETEXT_STRATEGY")
            .env_remove("HUGETEXT_VERBOSE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(
            !err.contains("-7.00 ms/MiB") && !err.contains("e300"),
            "absurd costs believed: {err}"
        );
        let measured = err.lines().find(|l| l.contains("zero-copy routes on "));
        let kept: Option<RouteCosts> = serde_json::from_str(&fs::read_to_string(&cache).unwrap()).ok();
        match (measured, kept) {
            (Some(line), Some(kept)) => {
                assert!(plausible(&kept), "{kept:?}");
                assert!(line.contains(&kept.collapse.describe()), "{line}\n{kept:?}");
            }
            // Where nothing can be measured, nothing is said.
            (None, _) => {}
            (Some(line), None) => panic!("{line}, but the cache was not rewritten"),
        }
    }
}

/// `uname -r`.
fn release() -> String {
    let o = std::process::Command::new("uname").arg("-r").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A user without a login session (no `XDG_RUNTIME_DIR`: a daemon's
/// account, `runuser`, `su`, cron) keeps `run`'s answers too, in
/// `/tmp/hugetext-UID`: the second start asks the loader nothing (no
/// `ld.so --help` process) and does not look through `/tmp` for perf maps.
/// A `/tmp/hugetext-UID` someone else made first is not used: nothing is
/// written into it, and `run` still works. (Before: such a user had no
/// runtime directory, and every start ran `ld.so --help` and read all of
/// `/tmp`: 2.5 ms of a postgres start.)
#[test]
fn a_user_without_a_session_keeps_answers_in_a_directory_of_its_own() {
    let (uid, _) = tk::attacker();
    if Path::new(&format!("/run/user/{uid}")).exists() {
        eprintln!("/run/user/{uid} exists: the /tmp fallback is not used");
        return;
    }
    let (_d, home) = tk::attacker_home();
    let prog = tk::copy_fixture(&home, "lld", "small");
    give(&prog, 0o755);
    let fallback = std::path::PathBuf::from(format!("/tmp/hugetext-{uid}"));
    let run = |trace: Option<&Path>| {
        let mut c = tk::as_attacker();
        if let Some(t) = trace {
            c.args(["strace", "-f", "-e", "trace=execve,openat", "-o"]).arg(t);
        }
        let o = c
            .arg(tk::bin())
            .args(["run", "--"])
            .arg(&prog)
            .env_remove("XDG_RUNTIME_DIR")
            .env("HUGETEXT_PERF_MAP", "0")
            .env_remove("HUGETEXT_STRATEGY")
            .env_remove("HUGETEXT_VERBOSE")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };

    // Someone else's directory, open to all: not used.
    let _ = fs::remove_dir_all(&fallback);
    fs::create_dir(&fallback).unwrap();
    fs::set_permissions(&fallback, fs::Permissions::from_mode(0o777)).unwrap();
    run(None);
    let planted: Vec<_> = fs::read_dir(&fallback).unwrap().flatten().map(|e| e.path()).collect();
    fs::remove_dir_all(&fallback).unwrap();
    assert!(planted.is_empty(), "written into another user's directory: {planted:?}");

    // Its own: made 0700, and the second start asks and looks for nothing.
    run(None);
    let m = fs::symlink_metadata(&fallback).expect("no /tmp/hugetext-UID made");
    assert!(m.is_dir() && m.uid() == uid && m.mode() & 0o777 == 0o700, "{m:?}");
    let trace = home.join("second.strace");
    run(Some(&trace));
    let t = fs::read_to_string(&trace).unwrap();
    let asked: Vec<_> = t
        .lines()
        .filter(|l| l.contains("execve(") && l.contains("\"--help\""))
        .collect();
    assert!(asked.is_empty(), "the loader was asked again: {asked:?}");
    let looked: Vec<_> = t
        .lines()
        .filter(|l| l.contains("openat(") && l.contains("\"/tmp\"") && l.contains("O_DIRECTORY"))
        .collect();
    assert!(looked.is_empty(), "/tmp was read again: {looked:?}");
}
