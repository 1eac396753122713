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

use std::path::PathBuf;

use hugetext_abi::env;

/// The module's bytes, built for this target.
pub const MODULE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libhugetext-audit.so"));

/// FNV-1a, 64 bits: names the module by its content. Pure.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The module's file name.
pub fn file_name() -> String {
    format!("{}{:016x}.so", env::AUDIT_MODULE_PREFIX, fnv1a(MODULE))
}

/// Is the file at `p` ours (owner, a regular file, never a link) and the
/// module byte for byte, readable by everyone?
fn is_module(p: &std::path::Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(f) = crate::openfile::open_regular(p, crate::openfile::Follow::No) else {
        return false;
    };
    let Ok(m) = f.metadata() else { return false };
    if m.uid() != rustix::process::geteuid().as_raw()
        || m.len() != MODULE.len() as u64
        || m.permissions().mode() & 0o444 != 0o444
    {
        return false;
    }
    let mut b = Vec::with_capacity(MODULE.len());
    f.take(MODULE.len() as u64 + 1).read_to_end(&mut b).is_ok() && b == MODULE
}

/// The module's path in the runtime directory, written there when it is
/// not yet (a new file renamed into place); `None` when there is no
/// runtime directory or the module cannot be kept there.
pub fn path() -> Option<PathBuf> {
    let p = crate::fsutil::runtime_dir()?.join(file_name());
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
}
