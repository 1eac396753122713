//! The hot-window list the preload reads (`HUGETEXT_HOT`, `HUGETEXT_HOT_LIST`):
//! a symbolic link or a FIFO in its place is refused without hanging, and a
//! set-user-ID program ignores both variables.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hugetext_testkit as tk;

use super::preload::{output_within, scratch_with_tmp, setuid_capi_program, with_private_tmp};

/// The hotcold fixture with the preload and `HUGETEXT_HOT=list`, verbose,
/// copy route; its stderr (it must exit 0 within 60 s).
fn with_list(list: &Path) -> String {
    let mut cmd = Command::new(tk::hotcold());
    cmd.arg("0")
        .env("LD_PRELOAD", tk::preload())
        .env("HUGETEXT_STRATEGY", "copy")
        .env("HUGETEXT_VERBOSE", "1")
        .env("HUGETEXT_HOT", list);
    let o = output_within(&mut cmd, Duration::from_secs(60)).expect("the program hung on HUGETEXT_HOT");
    let err = tk::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    err
}

#[test]
fn a_symlink_or_fifo_as_the_hot_list_is_refused_and_nothing_moves() {
    let d = tk::scratch();
    // A root-owned victim: a valid list elsewhere, reached through a link.
    let vdir = tk::scratch();
    let victim = vdir.path().join("list");
    std::fs::write(&victim, "hugetext-hot 1 2097152\n").unwrap();
    let before = tk::tree_state(vdir.path());
    let link = d.path().join("link");
    symlink(&victim, &link).unwrap();
    let err = with_list(&link);
    assert!(err.contains("cannot open (a symbolic link is refused)"), "{err}");
    assert!(err.contains("text left as it is"), "{err}");
    assert!(!err.contains("huge-backed"), "a pass ran: {err}");
    // A FIFO nobody writes: opening it must not block.
    let fifo = d.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let err = with_list(&fifo);
    assert!(err.contains("not a regular file"), "{err}");
    // A file that is not a list.
    let junk = d.path().join("junk");
    std::fs::write(&junk, "{\"format\":\"hugetext-profile\"}").unwrap();
    let err = with_list(&junk);
    assert!(err.contains("not a hugetext hot-window list"), "{err}");
    assert_eq!(tk::tree_state(vdir.path()), before, "the victim changed");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "hugetext-hot 1 2097152\n");
}

#[test]
fn secure_execution_ignores_the_hot_list() {
    tk::preload();
    let (d, tmp) = scratch_with_tmp();
    let exe = setuid_capi_program(d.path());
    // An empty list (nothing hot) and a FIFO: obeyed, nothing would be
    // remapped (or the call would fail); ignored, the text is remapped.
    let fifo = d.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let before = tk::tree_state(d.path());
    let mut cmd = with_private_tmp(&tmp, false);
    cmd.arg("setpriv");
    cmd.args(tk::as_attacker().get_args()).arg(&exe);
    cmd.env("HUGETEXT_HOT", &fifo)
        .env("HUGETEXT_HOT_LIST", "hugetext-hot 1 2097152\n");
    let o = output_within(&mut cmd, Duration::from_secs(60)).expect("the program hung");
    let out = tk::text(&o.stdout);
    assert!(o.status.success(), "{out}{}", tk::text(&o.stderr));
    let r: i64 = out.split_whitespace().next().unwrap().parse().unwrap();
    assert!(r > 0, "the set-user-ID program obeyed the hot list: {out}");
    assert_eq!(tk::tree_state(d.path()), before);
}
