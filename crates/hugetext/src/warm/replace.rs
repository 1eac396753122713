//! `--replace`: a warmed identical copy renamed over a file that running
//! processes pin ([`crate::fsutil`] does the safe replacement).

use std::collections::BTreeSet;
use std::fs::{File, Metadata};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::report::{self, FileReport};
use super::{page_out, pid_list, writer_pids_of, Route, Target, WarmContext, WarmOptions, KIB};
use crate::fsutil::{self, FileId, MetadataCopy, NewFile, ReplaceImpact};
use crate::units::human;
use crate::{pagecache, Error, Result};

/// Conditions under which `--replace` refuses unless told otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplaceAllow {
    /// Replace files with more than one hard link (the other names keep the
    /// old inode).
    pub hardlinked: bool,
    /// Replace files some process has open for writing (its writes go to
    /// the old inode).
    pub open_for_write: bool,
    /// Replace signed files (IMA/EVM xattrs, fs-verity): the copy's
    /// signature may not verify.
    pub signed: bool,
}

/// Reasons `--replace` refuses the open file `f` with metadata `m` (`path`
/// names it in errors); empty when it may proceed.
fn refusals_of(f: &File, m: &Metadata, path: &Path, allow: ReplaceAllow) -> Result<Vec<String>> {
    let mut why = Vec::new();
    let impact = ReplaceImpact::of(f).map_err(|e| Error::io(path, e))?;
    if impact.links > 1 && !allow.hardlinked {
        why.push(format!(
            "it has {} hard links (the other names would keep the old file; allow with --replace-allow hardlinked)",
            impact.links
        ));
    }
    if !allow.open_for_write {
        let w = writer_pids_of(m.dev(), m.ino());
        if !w.is_empty() {
            why.push(format!(
                "it is open for writing by {} (allow with --replace-allow open-for-write)",
                pid_list(&w)
            ));
        }
    }
    if impact.immutable {
        why.push("it is immutable (chattr +i); remove the flag first".into());
    }
    if impact.append_only {
        why.push("it is append-only (chattr +a); remove the flag first".into());
    }
    if !allow.signed {
        for sig in impact.signatures {
            why.push(match sig.xattr() {
                None => {
                    "it is protected by fs-verity, which a copy would lose (allow with --replace-allow signed)".into()
                }
                Some(name) => {
                    format!(
                        "it is signed ({name}); a copy's signature may not verify (allow with --replace-allow signed)"
                    )
                }
            });
        }
    }
    Ok(why)
}

/// `--replace`: write an identical copy of `t`'s file next to it (same
/// mode, owner, extended attributes including file capabilities, times),
/// warm the copy, and rename it over the original. Processes already
/// running keep the old inode; new ones map the warmed copy. Refuses
/// (the reasons of `refusals_of`) where that would break something, and when
/// the path no longer names the planned file: the copy is made from the
/// planned file's open descriptor and renamed only over that inode.
pub fn replace_and_warm(
    t: &Target,
    opts: &WarmOptions,
    ctx: &mut WarmContext,
    before: FileReport,
    start: Instant,
) -> Result<FileReport> {
    let real = std::fs::canonicalize(&t.path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => changed_since_planned(t),
        _ => Error::io(&t.path, e),
    })?;
    // The name must hold a regular file we may replace (fsutil's rule), and
    // still the planned one (the commit checks it again at the rename).
    let out = fsutil::check_output(&real).map_err(|e| Error::io(&real, e))?;
    if out.existing() != Some(FileId::of(&t.meta)) {
        return Err(changed_since_planned(t));
    }
    let why = refusals_of(&t.file, &t.meta, &real, opts.replace_allow)?;
    if !why.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: --replace refused: {}",
            t.path.display(),
            why.join("; ")
        )));
    }
    let name = real
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut src: &File = &t.file;
    src.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&real, e))?;
    // Leftovers of killed runs in this directory go first.
    fsutil::remove_leftovers(fsutil::dir_of(&real).as_path());
    // Removed again on any error below.
    let mut new =
        NewFile::beside(&out, &format!(".{name}.hugetext-")).map_err(|e| Error::io(fsutil::dir_of(&real), e))?;
    std::io::copy(&mut src, &mut new.file()).map_err(|e| Error::io(&real, e))?;
    // Warm the copy: its pages are clean after the sync, and nobody maps
    // it, so all of it can be evicted and refilled.
    let copy = new.finish_writing().map_err(|e| Error::io(&real, e))?;
    for r in &t.ranges {
        pagecache::evict(&copy, page_out(&r.range()))?;
        pagecache::fill_bounded(&copy, r.range())?;
    }
    // Same owner, mode, xattrs (security.capability among them) and
    // times, given in the commit's last steps.
    let keep = MetadataCopy {
        owner_required: true,
        times: true,
        skip_xattrs: &[],
    };
    new.commit_keeping(&out, Some((src, &t.meta, &keep)))
        .map_err(|e| Error::io(&real, e))?;
    // What is at the path now: the warmed copy.
    let meta = copy.metadata().map_err(|e| Error::io(&real, e))?;
    let warmed = Target {
        file: Arc::new(copy),
        meta,
        ..t.clone()
    };
    let mut rep = report::measure(&warmed, &before.filesystem, &BTreeSet::new())?.0;
    rep.replaced = true;
    rep.route = if rep.route == Route::None {
        Route::None
    } else {
        Route::Replace
    };
    rep.blocked_by = before.blocked_by.clone();
    rep.notes = before.notes.clone();
    rep.notes.push(format!(
        "replaced by a warmed identical copy: {} keep(s) the old file ({} blocked), new processes get the warmed one",
        pid_list(&rep.blocked_by),
        human(before.blocked_kb * KIB)
    ));
    let _ = ctx;
    report::advise(&warmed, &mut rep);
    rep.millis = start.elapsed().as_secs_f64() * 1e3;
    Ok(rep)
}

/// `--replace`'s refusal when the path no longer names the planned file.
fn changed_since_planned(t: &Target) -> Error {
    Error::Invalid(format!(
        "{}: --replace refused: the file was replaced or removed since it was planned; run warm again",
        t.path.display()
    ))
}
