//! Hostile cases: warm. The agent's `auto` rule takes paths from user
//! processes (`/proc/PID/maps`): an unprivileged user who owns the directory
//! can swap a FIFO or a symbolic link in at any time. Neither may block the
//! caller nor be followed. A path opened anew is refused; a planned file is
//! warmed through the descriptor opened when it was planned, which the swap
//! cannot change.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use hugetext::warm;
use hugetext_testkit as tk;

/// Run `f` on a thread; it must finish within the bound (a blocked open
/// never does).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} blocked (no answer within 20 s)"))
}

/// As the unprivileged account, in its own directory: replace `at` with
/// what `make` creates (a FIFO, a symbolic link) by rename.
fn swap_in(at: &Path, make: &[&str]) {
    let tmp = at.with_extension("new");
    let mut cmd = tk::as_attacker();
    cmd.args(make).arg(&tmp);
    assert!(cmd.status().unwrap().success(), "{make:?}");
    let st = tk::as_attacker()
        .arg("mv")
        .arg("-f")
        .arg(&tmp)
        .arg(at)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A directory the unprivileged account owns, holding a program it "ran"
/// (a copy of a fixture), and a root-owned victim file elsewhere.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tk::scratch();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().canonicalize().unwrap().join("attacker");
    std::fs::create_dir(&home).unwrap();
    let (uid, gid) = tk::attacker();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    let prog = home.join("prog");
    std::fs::copy(tk::fixture("bfd", "nopie"), &prog).unwrap();
    std::os::unix::fs::chown(&prog, Some(uid), Some(gid)).unwrap();
    let victim_dir = dir.path().join("victim");
    std::fs::create_dir(&victim_dir).unwrap();
    let victim = victim_dir.join("secret.so");
    std::fs::copy(tk::fixture("bfd", "nopie"), &victim).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, prog, victim)
}

fn refused(e: &hugetext::Error, what: &str) {
    let s = e.to_string();
    assert!(s.contains(what) && s.lines().count() == 1, "{s}");
}

/// Warm `t`, planned before the swap: it must not block, and it warms the
/// planned file, never `victim` (what the swapped-in link points to), saying
/// the path changed.
fn warms_the_planned_file(t: warm::Target, victim: &Path) {
    let v = std::fs::File::open(victim).unwrap();
    hugetext::pagecache::evict(&v, 0..0).unwrap();
    let held = t.file.clone();
    let r = bounded("warm_target", move || {
        warm::warm_target(&t, &warm::WarmOptions::default(), &mut warm::WarmContext::default())
    })
    .unwrap();
    assert!(
        r.notes.iter().any(|n| n.contains("another file is at this path now")),
        "{:?}",
        r.notes
    );
    let planned = hugetext::folio::scan_open(&held, Path::new("planned"), None).unwrap();
    assert!(r.cached_kb > 0 && planned.cached_kb >= r.cached_kb, "{planned:?} {r:?}");
    let victim = hugetext::folio::scan_open(&v, victim, None).unwrap();
    assert_eq!(victim.cached_kb, 0, "the victim was read: {victim:?}");
}

#[test]
fn a_fifo_swapped_in_blocks_nothing_and_is_refused() {
    let (_dir, prog, victim) = setup();
    let before = tk::tree_state(victim.parent().unwrap());
    // Checked while it is a program; planned.
    let t = warm::plan_exact(&prog).unwrap();
    assert!(t.eligible_windows() > 0);
    swap_in(&prog, &["mkfifo"]);

    let p = prog.clone();
    let e = bounded("mapping_pids", move || warm::mapping_pids(&p)).unwrap_err();
    refused(&e, "a FIFO");
    let p = prog.clone();
    let e = bounded("plan_exact", move || warm::plan_exact(&p)).unwrap_err();
    refused(&e, "a FIFO");
    warms_the_planned_file(t, &victim);
    // The command line too: one line, exit 1, no wait.
    let p = prog.clone();
    let o = bounded("hugetext warm", move || tk::hugetext(&["warm", p.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(1), "{}", tk::text(&o.stderr));
    assert!(tk::text(&o.stderr).contains("a FIFO"), "{}", tk::text(&o.stderr));
    assert_eq!(tk::tree_state(victim.parent().unwrap()), before);
}

#[test]
fn a_symlink_swapped_in_is_not_followed() {
    let (_dir, prog, victim) = setup();
    let before = tk::tree_state(victim.parent().unwrap());
    let victim_bytes = std::fs::read(&victim).unwrap();
    let t = warm::plan_exact(&prog).unwrap();
    swap_in(&prog, &["ln", "-s", victim.to_str().unwrap()]);

    let p = prog.clone();
    let e = bounded("mapping_pids", move || warm::mapping_pids(&p)).unwrap_err();
    refused(&e, "symbolic link");
    let p = prog.clone();
    let e = bounded("plan_exact", move || warm::plan_exact(&p)).unwrap_err();
    refused(&e, "symbolic link");
    warms_the_planned_file(t, &victim);
    assert_eq!(std::fs::read(&victim).unwrap(), victim_bytes);
    assert_eq!(tk::tree_state(victim.parent().unwrap()), before);
    // A link a user gives on the command line is still resolved once.
    let link = victim.with_extension("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = tk::hugetext(&["warm", "--json", link.to_str().unwrap()]);
    assert!(o.status.code() != Some(1), "{}", tk::text(&o.stderr));
    std::fs::remove_file(&link).unwrap();
}
