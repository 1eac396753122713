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
