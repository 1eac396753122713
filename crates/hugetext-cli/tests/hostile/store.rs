//! Hostile cases: the text store (`warm --shmem`) and `run`'s `shmem`
//! route. A local user must not get their bytes run as another user's
//! program text through the store: they cannot write into a store root
//! `warm --shmem` made, and a copy planted where they can write (a
//! user-writable `--store`), or a symbolic link at an entry's name, is
//! refused by the preload's checks of the opened descriptor.

use std::path::{Path, PathBuf};
use std::process::Command;

use hugetext_testkit as tk;

/// A private copy of the GNU ld non-PIE fixture (congruent: storable) in a
/// scratch directory everyone can traverse.
fn program() -> (tempfile::TempDir, PathBuf) {
    let (dir, _) = tk::attacker_home();
    let p = dir.path().canonicalize().unwrap().join("nopie");
    let st = Command::new("cp")
        .arg(tk::fixture("bfd", "nopie"))
        .arg(&p)
        .status()
        .unwrap();
    assert!(st.success());
    (dir, p)
}

/// The entry name the store gives `prog` as it is now.
fn entry_of(prog: &Path) -> String {
    hugetext::shmemstore::entry_name(&std::fs::File::open(prog).unwrap()).unwrap()
}

/// Run `prog` through the shmem route with the store `dir`: its output
/// must be the plain program's, and no text may come from `dir`. Returns
/// the preload's stderr.
fn runs_plain_text(prog: &Path, dir: &Path) -> String {
    let plain = Command::new(prog).output().unwrap();
    let r = tk::run_waiting(&["--strategy", "shmem", "--store", dir.to_str().unwrap(), "-v"], prog);
    assert_eq!(r.first_line, tk::text(&plain.stdout).lines().next().unwrap());
    assert_eq!(
        tk::store_text(r.pid(), dir),
        (0, 0, 0),
        "text mapped from {}",
        dir.display()
    );
    let pid = r.child.id();
    let err = tk::Running::stop(r);
    tk::remove_perf_map(pid);
    err
}

#[test]
fn the_store_cannot_be_written_by_another_user() {
    let (_d, prog) = program();
    let store = tk::TextStore::new();
    store.add(&prog);
    let entry = store.dir.join(entry_of(&prog));
    let before = std::fs::read(&entry).unwrap();
    // Plant a new file, swap the entry, grow it, or write into it.
    for script in [
        "echo x > \"$1/planted\"",
        "mv \"$2\" \"$1/gone\"",
        "cp /bin/true \"$2\"",
        "echo x >> \"$2\"",
        "truncate -s +2M \"$2\"",
    ] {
        let o = tk::as_attacker()
            .args(["sh", "-c", script, "sh"])
            .arg(&store.dir)
            .arg(&entry)
            .output()
            .unwrap();
        assert!(!o.status.success(), "as ht-attacker: {script} succeeded");
    }
    assert_eq!(std::fs::read(&entry).unwrap(), before, "the entry changed");
    assert!(!store.dir.join("planted").exists());
}

#[test]
fn a_copy_planted_in_a_user_writable_store_is_refused() {
    let (_d, prog) = program();
    let (_h, home) = tk::attacker_home();
    // The attacker plants "a copy" under the right name, of the right size
    // and mode: the program with their own bytes in its text windows.
    let name = entry_of(&prog);
    let st = tk::as_attacker()
        .args([
            "sh",
            "-c",
            "cp \"$1\" \"$2\" && printf 'planted' | dd of=\"$2\" bs=1 seek=2097152 conv=notrunc status=none && chmod 0444 \"$2\"",
        ])
        .arg("sh")
        .arg(&prog)
        .arg(home.join(&name))
        .status()
        .unwrap();
    assert!(st.success());
    let err = runs_plain_text(&prog, &home);
    assert!(err.contains("refused: not owned by root"), "{err}");
}

#[test]
fn a_symbolic_link_at_an_entry_name_is_not_followed() {
    let (_d, prog) = program();
    // A genuine root-owned entry of another file...
    let (_d2, other) = program();
    let store = tk::TextStore::new();
    store.add(&other);
    // ...linked at the name of the victim's entry, in a directory the
    // attacker owns.
    let (_h, home) = tk::attacker_home();
    let st = tk::as_attacker()
        .arg("ln")
        .arg("-s")
        .arg(store.dir.join(entry_of(&other)))
        .arg(home.join(entry_of(&prog)))
        .status()
        .unwrap();
    assert!(st.success());
    let err = runs_plain_text(&prog, &home);
    assert!(err.contains("refused: it is a symbolic link"), "{err}");
}
