//! The shipped man page is generated from the CLI definition; it must not
//! drift from `--help`.

use hugetext_testkit as common;

#[test]
fn shipped_man_page_matches_the_cli() {
    let out = common::hugetext(&["man"]);
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    for page in [
        "hugetext",
        "hugetext-inspect",
        "hugetext-warm",
        "hugetext-run",
        "hugetext-bench-ab",
    ] {
        assert!(
            generated.contains(&format!(".TH {page} 1")),
            "no page {page} in `hugetext man`"
        );
    }
    let shipped = std::fs::read_to_string(common::root().join("doc/hugetext.1")).unwrap();
    assert!(
        shipped == generated,
        "doc/hugetext.1 is out of date: run `target/release/hugetext man > doc/hugetext.1`"
    );
}

#[test]
fn every_command_has_help() {
    for cmd in ["inspect", "doctor", "check", "align", "warm", "profile", "run", "bench"] {
        let out = common::hugetext(&[cmd, "--help"]);
        assert!(out.status.success(), "{cmd} --help failed");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Usage: hugetext "), "{cmd} --help: {text}");
    }
    let out = common::hugetext(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}

#[test]
fn installed_tree_runs_and_finds_its_preload() {
    let dir = common::scratch();
    let st = std::process::Command::new("bash")
        .arg(common::root().join("scripts/install.sh"))
        .args(["--prefix", "/opt/hugetext", "--destdir"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let root = dir.path().join("opt/hugetext");
    for f in [
        "bin/hugetext",
        "lib/libhugetext.so",
        "include/hugetext.h",
        "share/man/man1/hugetext.1",
    ] {
        assert!(root.join(f).exists(), "{f} not installed");
    }
    let unit = std::fs::read_to_string(root.join("share/hugetext/systemd/hugetext-warm.service")).unwrap();
    assert!(unit.contains("ExecStart=/opt/hugetext/bin/hugetext warm"), "{unit}");
    // The installed binary finds the installed preload (not the build tree's).
    let out = std::process::Command::new(root.join("bin/hugetext"))
        .args(["run", "-v", "--", "/bin/echo", "installed"])
        .env_remove("HUGETEXT_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "installed\n");
    let err = String::from_utf8_lossy(&out.stderr);
    // echo has no text of its own: the preload says it follows it as a
    // launcher instead of a pass summary.
    assert!(
        err.contains("huge-backed") || err.contains("has no text of its own to remap"),
        "the installed preload did not run (no -v line of its own): {err}"
    );
}
