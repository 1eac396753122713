//! Hostile cases: profile.

use hugetext_testkit as tk;

/// A link planted where `profile -o`/`--svg` will write (a world-writable
/// directory, a name the victim uses) must not redirect root's write into
/// the file it points to: the output replaces the link, the target keeps
/// its bytes.
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

    let o = tk::hugetext(&[
        "profile",
        "--input",
        profile.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", tk::text(&o.stderr));
    assert_eq!(tk::tree_state(victim_dir.path()), before);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0\n");
    for f in [&out, &svg] {
        let m = std::fs::symlink_metadata(f).unwrap();
        assert!(m.file_type().is_file(), "{} is still a link", f.display());
    }
    assert!(std::fs::read_to_string(&out).unwrap().contains("hugetext-profile"));
}
