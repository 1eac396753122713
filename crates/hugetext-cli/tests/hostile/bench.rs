//! Hostile cases: bench. A local user plants a link at the name root gives
//! to `bench ab --plot` in a sticky directory; and bench exec's scratch
//! files in a world-writable `--dir` are out of that user's reach.

use hugetext_testkit as tk;

use std::fs;
use std::path::Path;

use super::align::Stage;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

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
