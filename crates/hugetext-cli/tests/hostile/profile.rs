//! Hostile cases: profile.

use hugetext_testkit as tk;

/// A link planted where `profile -o`/`--svg` will write (a world-writable
/// directory, a name the victim uses) must not redirect root's write into
/// the file it points to: hugetext refuses to write through or over a link,
/// in one line; the target keeps its bytes and the link stays.
#[test]
fn output_through_a_planted_link_does_not_write_its_target() {
    let victim_dir = tk::scratch();
    let victim = victim_dir.path().join("passwd");
    std::fs::write(&victim, "root:x:0:0\n").unwrap();
    let before = tk::tree_state(victim_dir.path());

    let drop_dir = tk::scratch();
    let profile = drop_dir.path().join("in.json");
    let p = serde_json::json!({
        "format": "hugetext-profile", "version": 1, "source": "sampling", "unit": "samples",
        "page_size": 4096, "pmd_size": 2097152, "total": 1, "unattributed": 0,
        "files": [{"path": "/x", "build_id": null, "text": [[0, 4194304]], "count": 1,
                   "pages": [[0, 1]], "windows": [{"offset": 0, "count": 1}]}]
    });
    std::fs::write(&profile, p.to_string()).unwrap();
    let out = drop_dir.path().join("out.json");
    let svg = drop_dir.path().join("out.svg");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    std::os::unix::fs::symlink(&victim, &svg).unwrap();

    for (flag, link) in [("-o", &out), ("--svg", &svg)] {
        let o = tk::hugetext(&[
            "profile",
            "--input",
            profile.to_str().unwrap(),
            flag,
            link.to_str().unwrap(),
        ]);
        let err = tk::text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag}: {err}");
        assert!(
            err.contains("refusing to write") && err.trim_end().lines().count() == 1,
            "{flag}: {err}"
        );
        assert!(std::fs::symlink_metadata(link).unwrap().file_type().is_symlink());
    }
    assert_eq!(tk::tree_state(victim_dir.path()), before);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0\n");
    // A plain name is written.
    let plain = drop_dir.path().join("plain.json");
    let o = tk::hugetext(&[
        "profile",
        "--input",
        profile.to_str().unwrap(),
        "-o",
        plain.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", tk::text(&o.stderr));
    assert!(std::fs::read_to_string(&plain).unwrap().contains("hugetext-profile"));
}

/// A profiled program that puts a file of its own at every descriptor
/// number it inherited (what chromium's launcher does in the child it forks)
/// must not get the qemu plugin's records written into that file: the
/// plugin checks that its descriptor is still its pipe before each write.
/// The program runs to its end, the file keeps its bytes, and hugetext says
/// in one line that the profile stops where the pipe was taken.
#[test]
fn exact_plugin_never_writes_to_a_descriptor_the_program_replaced() {
    let victim_dir = tk::scratch();
    let victim = victim_dir.path().join("ipc.log");
    std::fs::write(&victim, "the program's own data\n").unwrap();
    let before = tk::tree_state(victim_dir.path());
    let prog = tk::cprogs().join("fdsteal");

    let o = tk::hugetext(&[
        "profile",
        "--exact",
        "--",
        prog.to_str().unwrap(),
        victim.to_str().unwrap(),
    ]);
    let err = tk::text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let now = std::fs::read(&victim).unwrap();
    assert!(
        now == b"the program's own data\n",
        "the plugin wrote {} bytes into the program's file",
        now.len() as i64 - 23
    );
    assert_eq!(tk::tree_state(victim_dir.path()), before);
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("stops early")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(notes[0].contains("replaced the descriptor"), "{err}");
}
