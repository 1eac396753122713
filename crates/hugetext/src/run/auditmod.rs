//! libhugetext-audit.so, the audit module `run` names in `LD_AUDIT`.
//!
//! The dynamic loader loads an audit module into a link namespace of its
//! own in every process. Named there, libhugetext.so itself costs each
//! process a second copy of the library and a second C library (about 50
//! page faults on `/bin/true`, paid at every hop of a launcher chain). The
//! module (`crates/hugetext-preload/audit/auditor.rs`, 6 KiB, no C library)
//! costs about 6: it hands the loader's callbacks to the preload copy of
//! libhugetext.so, which runs the pass over objects loaded after start.
//!
//! The module is built with this library (`build.rs`) and carried in it;
//! `run` writes it once into the runtime directory
//! ([`crate::fsutil::runtime_dir`]) under a name with its content's hash,
//! mode 0644 (root's directory is passable by all: the processes of a
//! server that switches user load it too). Where it cannot be written or
//! read back as written, `run` names libhugetext.so in `LD_AUDIT`, as
//! before: the same pass, at the higher cost.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hugetext_abi::env;

/// The module's bytes, built for this target.
pub const MODULE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libhugetext-audit.so"));

/// The module's file name: named by its content.
pub fn file_name() -> String {
    format!("{}{:016x}.so", env::AUDIT_MODULE_PREFIX, env::fnv1a(MODULE))
}

/// Is the file at `p` ours (owner, a regular file, never a link) and the
/// module byte for byte, readable by everyone?
fn is_module(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    crate::fsutil::read_kept_bytes(p, MODULE.len() as u64)
        .is_some_and(|(b, m)| b == MODULE && m.permissions().mode() & 0o444 == 0o444)
}

/// Modules of other builds neither written nor loaded for this long are
/// removed when `run` writes a new one (a chain started before that still
/// names its module; one that old is not running any more in practice,
/// and the loader would only say it cannot load it and go on).
pub const RETIRE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// Remove from `dir` the audit modules other than `keep` that are this
/// user's regular files (not links) whose modification and access times
/// are both [`RETIRE_AFTER`] before `now`: the count removed.
fn retire_old(dir: &Path, keep: &str, now: SystemTime) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let euid = rustix::process::geteuid().as_raw();
    let old = |t: std::io::Result<SystemTime>| {
        t.ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|d| d >= RETIRE_AFTER)
    };
    let mut removed = 0;
    for e in entries.flatten().take(1024) {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == keep || !name.starts_with(env::AUDIT_MODULE_PREFIX) || !name.ends_with(".so") {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if m.file_type().is_file() && m.uid() == euid && old(m.modified()) && old(m.accessed()) {
            removed += usize::from(std::fs::remove_file(e.path()).is_ok());
        }
    }
    removed
}

/// The module's path in the runtime directory, written there when it is
/// not yet (a new file renamed into place); `None` when there is no
/// runtime directory or the module cannot be kept there.
pub fn path() -> Option<PathBuf> {
    let dir = crate::fsutil::runtime_dir()?;
    let p = dir.join(file_name());
    if is_module(&p) {
        return Some(p);
    }
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let out = crate::fsutil::check_output(&p)?;
        let new = crate::fsutil::NewFile::beside(&out, ".audit-")?;
        new.file().write_all(MODULE)?;
        new.file().set_permissions(std::fs::Permissions::from_mode(0o644))?;
        new.commit(&out)
    };
    write().ok()?;
    // A new build's module: the old ones go once unused for a week.
    retire_old(&dir, &file_name(), SystemTime::now());
    is_module(&p).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_is_a_small_elf_library_needing_nothing() {
        use object::{Object, ObjectSymbol};
        // (A copy: the parser wants the header aligned.)
        let bytes = MODULE.to_vec();
        let f = object::File::parse(&*bytes).unwrap();
        assert!(MODULE.len() < 128 << 10, "{} bytes", MODULE.len());
        let names: Vec<_> = f
            .dynamic_symbols()
            .filter_map(|s| s.name().ok().map(str::to_string))
            .collect();
        for hook in ["la_version", "la_objopen", "la_objclose", "la_activity"] {
            assert!(names.iter().any(|n| n == hook), "{hook} not in {names:?}");
        }
        assert!(f.dynamic_symbols().all(|s| !s.is_undefined() || s.name() == Ok("")));
        assert!(env::is_hugetext_preload(file_name().as_bytes()), "{}", file_name());
    }

    #[test]
    fn modules_of_other_builds_unused_for_a_week_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let long_ago = now - RETIRE_AFTER - Duration::from_secs(60);
        let yesterday = now - Duration::from_secs(24 * 3600);
        let make = |name: &str, modified: SystemTime, accessed: SystemTime| {
            let p = d.path().join(name);
            let f = std::fs::File::create(&p).unwrap();
            f.set_times(std::fs::FileTimes::new().set_modified(modified).set_accessed(accessed))
                .unwrap();
            p
        };
        let keep = file_name();
        let unused = make("libhugetext-audit-0000000000000001.so", long_ago, long_ago);
        let loaded = make("libhugetext-audit-0000000000000002.so", long_ago, yesterday);
        let other = make("perfmaps-reaped", long_ago, long_ago);
        let this = make(&keep, long_ago, long_ago);
        let link = d.path().join("libhugetext-audit-0000000000000003.so");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        assert_eq!(retire_old(d.path(), &keep, now), 1);
        assert!(!unused.exists());
        for p in [&loaded, &other, &this, &link] {
            assert!(p.symlink_metadata().is_ok(), "{} removed", p.display());
        }
    }
}
