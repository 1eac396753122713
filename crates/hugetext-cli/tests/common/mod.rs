//! Shared helpers for the integration tests: the `hugetext` binary, the real
//! ELF fixtures (built once per test run by tests/fixtures/mkfixtures.sh), and
//! scratch directories on the real filesystem (never tmpfs).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Path of the `hugetext` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hugetext"))
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The cargo target directory that holds the binary under test
/// (`target/release` or `target/debug`).
pub fn target_profile_dir() -> PathBuf {
    bin().parent().unwrap().to_path_buf()
}

/// Run `hugetext ARGS...` and capture its output.
pub fn hugetext(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("spawn hugetext")
}

/// Directory of the ELF fixtures, built on first use. Linkers that are not
/// installed are skipped by the script; `fixture()` then panics with a clear
/// message, because the test command installs all of them.
pub fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = target_profile_dir().join("../fixtures");
        let script = root().join("tests/fixtures/mkfixtures.sh");
        let st = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .status()
            .expect("run mkfixtures.sh");
        assert!(st.success(), "mkfixtures.sh failed");
        dir.canonicalize().unwrap()
    })
}

/// One fixture: `linker` in bfd/lld/mold, `name` in pie/nopie/libbig.so/usebig/small.
pub fn fixture(linker: &str, name: &str) -> PathBuf {
    let p = fixtures().join(linker).join(name);
    assert!(
        p.exists(),
        "fixture {} missing: is the {linker} linker installed? (scripts/install-deps.sh)",
        p.display()
    );
    p
}

/// A fresh scratch directory on the same (real, disk-backed) filesystem as
/// the target directory; removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    let base = target_profile_dir().join("../scratch");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new().prefix("t").tempdir_in(base).unwrap()
}
