//! Hostile cases: bench. A local user plants a link at the name root gives
//! to `bench ab --plot` in a sticky directory; and bench exec's scratch
//! files in a world-writable `--dir` are out of that user's reach.

use hugetext_testkit as tk;
use tk::path_str as s;

use std::fs;
use std::path::Path;

use super::align::Stage;

/// `--plot` naming a symlink to a root-owned file: refused before the
/// runs, in one line; the link and the file stay as they were (the plot
/// was renamed over the link).
#[test]
fn planted_symlink_at_the_plot_is_refused() {
    let st = Stage::new();
    let victim = st.victim("report.svg", b"root's report\n");
    let before = tk::tree_state(&st.victims);
    let plot = st.tmp.join("plot.svg");
    st.attacker_runs(&["ln", "-s", s(&victim), s(&plot)]);
    let o = tk::hugetext(&["bench", "ab", "--runs", "1", "--plot", s(&plot), "--", "/bin/true"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("refusing to write") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(fs::read_link(&plot).unwrap(), victim);
    assert_eq!(tk::tree_state(&st.victims), before, "a root-owned file changed");
}

/// `bench exec --dir` a world-writable sticky directory, run under umask
/// 000: its scratch directory there is root's, mode 0700 whatever the
/// umask, so the attacker can neither list nor plant names in it while it
/// runs (under umask 000 it was 0777); it is gone afterwards.
#[test]
fn scratch_dir_in_a_shared_dir_is_private() {
    let st = Stage::new();
    let victim = st.victim("shadow", b"root's secrets\n");
    let before = tk::tree_state(&st.victims);
    let mut cmd = std::process::Command::new(tk::bin());
    cmd.args(["bench", "exec", "--size", "16M", "--runs", "3", "--dir"])
        .arg(&st.tmp)
        .stdout(std::process::Stdio::null());
    // SAFETY: umask is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::umask(0);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let start = std::time::Instant::now();
    let scratch = loop {
        let found = fs::read_dir(&st.tmp)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(".hugetext-bench-"));
        if let Some(d) = found {
            break d;
        }
        assert!(start.elapsed().as_secs() < 60, "no scratch directory appeared");
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    let planted = scratch.join("ret-stubs-warm.bin");
    let o = tk::as_attacker()
        .args(["ln", "-s", s(&victim), s(&planted)])
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "the attacker planted a link in the scratch directory"
    );
    assert!(child.wait().unwrap().success());
    assert!(!scratch.exists());
    assert_eq!(tk::tree_state(&st.victims), before, "a root-owned file changed");
}

/// The `.hugetext-bench-*` scratch directories in `dir`.
fn scratch_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".hugetext-bench-"))
        .collect()
}

/// `bench exec` killed outright (SIGKILL: no handler runs) while its
/// scratch files exist leaves its scratch directory behind; the next
/// benchmark in that directory removes it, and a benchmark running beside
/// it keeps its own. (Before: it stayed, 193 MB after one kill.)
#[test]
fn the_next_bench_removes_what_a_killed_one_left() {
    use std::time::{Duration, Instant};
    let st = Stage::new();
    let bench = |runs: &str| {
        let mut cmd = std::process::Command::new(tk::bin());
        cmd.args(["bench", "exec", "--size", "16M", "--runs", runs, "--dir"])
            .arg(&st.tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd
    };
    let mut killed = bench("1000").spawn().unwrap();
    let t0 = Instant::now();
    while scratch_dirs(&st.tmp)
        .iter()
        .all(|d| fs::read_dir(d).unwrap().next().is_none())
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "no scratch file appeared");
        std::thread::sleep(Duration::from_millis(2));
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    let left = scratch_dirs(&st.tmp);
    assert_eq!(left.len(), 1, "{left:?}");

    // A benchmark running meanwhile, and the next one.
    let mut beside = bench("1000").spawn().unwrap();
    let t0 = Instant::now();
    let live = loop {
        if let Some(d) = scratch_dirs(&st.tmp).into_iter().find(|d| *d != left[0]) {
            break d;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no scratch directory appeared");
        std::thread::sleep(Duration::from_millis(2));
    };
    let o = bench("1").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!left[0].exists(), "the killed run's scratch directory stayed");
    assert!(live.exists(), "a running benchmark's scratch directory was removed");
    beside.kill().unwrap();
    beside.wait().unwrap();
}
