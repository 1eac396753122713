//! Hostile cases: align. A local user plants something at the name root
//! gives to `align -o` in a world-writable sticky directory (as /tmp):
//! root's run refuses in one line, and nothing outside that directory
//! changes.

use hugetext_testkit as tk;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// In a fresh scratch directory (others may enter it): `victims/`, owned
/// by root, and `tmp/`, mode 1777 like /tmp.
pub(crate) struct Stage {
    /// Keeps the scratch directory until the case ends.
    _dir: tempfile::TempDir,
    pub victims: PathBuf,
    pub tmp: PathBuf,
}

impl Stage {
    pub(crate) fn new() -> Stage {
        tk::attacker();
        let dir = tk::scratch();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let victims = dir.path().join("victims");
        let tmp = dir.path().join("tmp");
        fs::create_dir(&victims).unwrap();
        fs::create_dir(&tmp).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
        Stage {
            _dir: dir,
            victims,
            tmp,
        }
    }

    /// A root-owned file in `victims/`.
    pub(crate) fn victim(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.victims.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    /// Run `args` as the attacker; it must succeed.
    pub(crate) fn attacker_runs(&self, args: &[&str]) {
        let st = tk::as_attacker().args(args).status().unwrap();
        assert!(st.success(), "attacker's {args:?} failed");
    }
}

/// Bytes, inode and owner of a file.
pub(crate) fn identity(p: &Path) -> (Vec<u8>, u64, u32) {
    let m = fs::metadata(p).unwrap();
    (fs::read(p).unwrap(), m.ino(), m.uid())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Root's `align` with `-o OUT`: exit 1 and one line saying why.
fn refused(prog: &Path, out: &Path, why: &str) {
    let o = tk::hugetext(&["align", s(prog), "-o", s(out)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("refusing to write") && err.contains(why), "{err}");
}

/// A symlink at the -o name pointing to a root-owned file: root's align
/// neither writes through it nor replaces it.
#[test]
fn planted_symlink_at_the_output_is_refused() {
    let st = Stage::new();
    let victim = st.victim("passwd", b"root:x:0:0\n");
    let prog = tk::copy_fixture(&st.victims, "lld", "pie");
    let before = tk::tree_state(&st.victims);
    let out = st.tmp.join("out");
    st.attacker_runs(&["ln", "-s", s(&victim), s(&out)]);
    refused(&prog, &out, "symbolic link");
    assert_eq!(fs::read_link(&out).unwrap(), victim);
    assert_eq!(tk::tree_state(&st.victims), before, "a root-owned file changed");
}

/// A symlink at the -o name pointing at the input itself: align took it for
/// "-o names the input" and rewrote root's input in place, which `-o`
/// promises to leave untouched.
#[test]
fn planted_symlink_to_the_input_does_not_rewrite_it() {
    let st = Stage::new();
    let prog = tk::copy_fixture(&st.victims, "lld", "pie");
    let before = identity(&prog);
    let tree = tk::tree_state(&st.victims);
    let out = st.tmp.join("aligned");
    st.attacker_runs(&["ln", "-s", s(&prog), s(&out)]);
    refused(&prog, &out, "symbolic link");
    assert_eq!(identity(&prog), before, "the input was rewritten");
    assert_eq!(tk::tree_state(&st.victims), tree);
}

/// A regular file the attacker owns at the -o name in the sticky
/// directory: root does not take it over (the kernel's protected_regular
/// rule, which is off here); the attacker's file stays as it was.
#[test]
fn planted_file_of_another_user_in_a_sticky_dir_is_refused() {
    let st = Stage::new();
    let prog = tk::copy_fixture(&st.victims, "lld", "pie");
    let tree = tk::tree_state(&st.victims);
    let out = st.tmp.join("out");
    st.attacker_runs(&["sh", "-c", &format!("echo mine > {}", s(&out))]);
    let planted = identity(&out);
    refused(&prog, &out, "sticky directory");
    assert_eq!(identity(&out), planted);
    assert_eq!(tk::tree_state(&st.victims), tree);
    // Root's own file there is replaced as asked.
    let own = st.tmp.join("own");
    fs::write(&own, b"old").unwrap();
    let o = tk::hugetext(&["align", s(&prog), "-o", s(&own)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(fs::read(&own).unwrap().starts_with(b"\x7fELF"));
}
