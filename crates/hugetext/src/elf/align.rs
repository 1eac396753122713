//! `align`: rewrite an ELF file so its read-only segments can be PMD-mapped.
//!
//! What it changes, and nothing else:
//! * `p_align` of eligible read-only PT_LOADs of an ET_DYN → the target's
//!   PMD size (see [`super::Target`]);
//! * for a segment whose `p_vaddr - p_offset` is not a multiple of the PMD
//!   size (lld/mold layouts), zero padding is inserted in the file right before the
//!   segment, and `e_phoff`, `e_shoff`, every `p_offset` and every
//!   `sh_offset` after it are moved by the padding size.
//!
//! Virtual addresses, sizes, flags, contents, relocations, symbols and debug
//! info are untouched: only file offsets move, and no relocation, symbol or
//! dynamic entry of x86-64 or AArch64 holds a file offset (they hold virtual
//! addresses), so the same rewrite serves both machines. The output is written to a temporary file in the
//! target's directory, verified (re-parsed, every header compared with what
//! was intended, every byte compared with the original at its new offset, the
//! section-to-segment mapping compared), given the original's owner, mode and
//! extended attributes, and only then renamed over the target. A failure at any
//! point leaves the original as it was.

use std::fs::File;
use std::io;
use std::mem::offset_of;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsFd;
use std::path::{Path, PathBuf};

use object::elf::{FileHeader64, ProgramHeader64, SectionHeader64};
use object::LittleEndian as LE;
use serde::Serialize;

use super::check::{self, AlignPlan, CheckReport, Verdict};
use super::layout::Model;
use crate::fsutil::{self, MetadataCopy, NewFile, ReplaceImpact, Signature};
use crate::{Error, Result};

/// Options for [`align_file`].
#[derive(Debug, Clone, Default)]
pub struct AlignOptions {
    /// Write here instead of rewriting the input in place. The input is
    /// never modified then.
    pub output: Option<PathBuf>,
    /// Only say what would be done.
    pub dry_run: bool,
    /// Rewrite even signed files (the signature becomes invalid).
    pub force: bool,
    /// The target kernel's page size (its PMD size follows); `None`: the
    /// running kernel's for a file of this machine, else 4 KiB for AArch64.
    pub page_size: Option<u64>,
}

/// What [`align_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AlignStatus {
    /// The file was rewritten (exit code 0).
    Rewritten,
    /// `--dry-run`: the file would be rewritten (exit code 0).
    WouldRewrite,
    /// Already PMD-mappable: nothing to improve (exit code 2).
    NothingToDo,
    /// Cannot be improved, or refused (exit code 3); `reasons` says why.
    Cannot,
}

impl AlignStatus {
    /// The `hugetext align` exit code for this status.
    pub fn exit_code(self) -> u8 {
        self.outcome().exit_code()
    }

    /// In the convention of every state-changing command.
    pub fn outcome(self) -> crate::Outcome {
        match self {
            AlignStatus::Rewritten | AlignStatus::WouldRewrite => crate::Outcome::Done,
            AlignStatus::NothingToDo => crate::Outcome::NothingToDo,
            AlignStatus::Cannot => crate::Outcome::Impossible,
        }
    }
}

/// The result of [`align_file`].
#[derive(Debug, Clone, Serialize)]
pub struct AlignOutcome {
    pub status: AlignStatus,
    /// The input file.
    pub input: PathBuf,
    /// The file written (or that would be written).
    pub output: PathBuf,
    /// `check` of the input.
    pub before: CheckReport,
    /// `check` of the output, when one was written.
    pub after: Option<CheckReport>,
    /// Bytes the file grew by (apparent size).
    pub grew_by: u64,
    /// Bytes of disk the file grew by (allocated blocks; less than `grew_by`
    /// where the padding stayed a hole).
    pub grew_on_disk_by: i64,
    /// Why the status is what it is.
    pub reasons: Vec<String>,
    /// What the rewrite invalidates or what the user should know.
    pub warnings: Vec<String>,
}

/// Things a rewrite invalidates.
#[derive(Debug, Default, Clone)]
pub struct Invalidations {
    /// Signatures found; align refuses without `--force`.
    pub signed: Vec<String>,
    /// Other things worth knowing.
    pub warnings: Vec<String>,
    /// Extended attributes that the rewrite invalidates (not copied).
    pub stale_xattrs: Vec<String>,
}

const MODULE_SIG_MAGIC: &[u8] = b"~Module signature appended~\n";
const SIGNATURE_SECTIONS: &[&str] = &[
    ".signature",
    "signature",
    ".sig",
    ".SUNW_signature",
    ".note.signature",
    ".elfsign",
];

/// What `check` and `align` say of a file under the system's directories
/// (a package manager's file) before rewriting it in place.
pub const SYSTEM_FILE_WARNING: &str =
    "system file: the package manager's checksums (dpkg --verify, rpm -V) will report it changed, and an upgrade replaces it";

/// Look for signatures and other things that a rewrite of `file` invalidates.
pub fn invalidations(path: &Path, file: &File, model: &Model) -> Invalidations {
    let mut inv = Invalidations::default();
    for s in &model.shdrs {
        if SIGNATURE_SECTIONS.contains(&s.name.as_str()) {
            inv.signed
                .push(format!("section {} holds a signature over the file's bytes", s.name));
        }
    }
    if model.file_size >= MODULE_SIG_MAGIC.len() as u64 {
        let mut tail = vec![0u8; MODULE_SIG_MAGIC.len()];
        if file
            .read_exact_at(&mut tail, model.file_size - MODULE_SIG_MAGIC.len() as u64)
            .is_ok()
            && tail == MODULE_SIG_MAGIC
        {
            inv.signed
                .push("an appended module-style signature ends the file".into());
        }
    }
    if let Ok(impact) = ReplaceImpact::of(file) {
        for sig in &impact.signatures {
            inv.signed.push(
                match sig {
                    Signature::Ima => "IMA xattr security.ima (hash or signature of the old content)",
                    Signature::Evm => "EVM xattr security.evm (covers the old attributes)",
                    Signature::Verity => "fs-verity (the rewritten file is a new inode without it)",
                }
                .into(),
            );
        }
        inv.stale_xattrs = impact.stale_xattrs();
        if impact.links > 1 {
            inv.warnings.push(format!(
                "{} other hard link(s) to this file keep the old content after an in-place rewrite",
                impact.links - 1
            ));
        }
    }
    if let Ok(canon) = path.canonicalize() {
        let s = canon.to_string_lossy();
        let system = ["/usr/", "/bin/", "/sbin/", "/lib", "/opt/"]
            .iter()
            .any(|p| s.starts_with(p))
            && !s.starts_with("/usr/local/");
        if system {
            inv.warnings.push(SYSTEM_FILE_WARNING.into());
        }
    }
    inv
}

/// Make `path` PMD-mappable. See the module documentation for what changes.
///
/// Returns the outcome for "nothing to do" and "cannot" as well (with the
/// reasons); `Err` only for real errors (I/O, not ELF, malformed, full disk),
/// in which case the input and any existing output are left untouched.
pub fn align_file(path: &Path, opts: &AlignOptions) -> Result<AlignOutcome> {
    let (input, model) = super::read_model(path)?;
    let in_meta = input.metadata().map_err(|e| Error::io(path, e))?;
    let machine = super::Target::for_machine(model.e_machine, opts.page_size).map_err(|e| Error::Elf {
        path: path.into(),
        msg: e.to_string(),
    })?;
    let before = check::analyse(path, &model, &machine);
    let inv = invalidations(path, &input, &model);

    // Where the result goes. In place: the symlink's target, so a symlink
    // stays a symlink. With -o naming the input itself: also in place. An
    // -o that is a link, a device, ... is refused (fsutil::output_refusal).
    let mut in_place = opts.output.is_none();
    let target = match &opts.output {
        None => path.canonicalize().map_err(|e| Error::io(path, e))?,
        Some(out) => {
            if let Ok(m) = std::fs::symlink_metadata(out) {
                if m.is_file() && m.dev() == in_meta.dev() && m.ino() == in_meta.ino() {
                    in_place = true;
                }
            }
            out.clone()
        }
    };
    let target = fsutil::check_output(&target).map_err(|e| Error::io(&target, e))?;
    // Hidden temporary files of runs that were killed in this directory:
    // removed (found only, with --dry-run).
    let left = fsutil::leftovers(&fsutil::dir_of(target.path()), !opts.dry_run);

    let mut outcome = AlignOutcome {
        status: AlignStatus::Cannot,
        input: path.to_path_buf(),
        output: target.path().to_path_buf(),
        before: before.clone(),
        after: None,
        grew_by: 0,
        grew_on_disk_by: 0,
        reasons: before.reasons.clone(),
        warnings: before.warnings.clone(),
    };
    if !left.is_empty() {
        let names: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
        let files = match left.len() {
            1 => "a hidden temporary file".to_string(),
            n => format!("{n} hidden temporary files"),
        };
        let done = if opts.dry_run { "found" } else { "removed" };
        outcome.warnings.push(format!(
            "{done} {files} of an interrupted hugetext run: {}",
            names.join(", ")
        ));
    }
    match before.verdict {
        Verdict::PmdMappable => {
            outcome.status = AlignStatus::NothingToDo;
            return Ok(outcome);
        }
        Verdict::NotImprovable => return Ok(outcome),
        Verdict::Improvable => {}
    }
    let plan = before.plan.clone();
    if !inv.signed.is_empty() {
        if !opts.force {
            outcome.status = AlignStatus::Cannot;
            outcome.reasons = inv
                .signed
                .iter()
                .map(|s| format!("signed: {s}; a rewrite would invalidate it (use --force to rewrite anyway)"))
                .collect();
            outcome.warnings.extend(inv.warnings);
            return Ok(outcome);
        }
        outcome
            .warnings
            .extend(inv.signed.iter().map(|s| format!("--force: invalidated {s}")));
    }
    if in_place {
        // What rewriting this very file changes for others (its package's
        // checksums, its other hard links); with -o it stays as it is.
        outcome.warnings.extend(inv.warnings.iter().cloned());
    }
    if plan.growth > 0 {
        outcome.warnings.push(format!(
            "file offsets from {:#x} on move by {} bytes: tools that recorded file offsets of this file (profiles, patchers, signatures) must re-read it",
            plan.insertions[0].at, plan.growth
        ));
    }
    outcome.grew_by = plan.growth;
    if opts.dry_run {
        outcome.status = AlignStatus::WouldRewrite;
        return Ok(outcome);
    }

    let tmp = NewFile::beside(&target, ".hugetext-align-").map_err(|e| {
        Error::io(
            fsutil::dir_of(target.path()),
            io::Error::new(
                e.kind(),
                format!("cannot create a temporary file in this directory ({e})"),
            ),
        )
    })?;
    let werr = |e: io::Error| {
        Error::io(
            target.path(),
            io::Error::new(
                e.kind(),
                format!("writing the new file failed ({e}); the original is untouched"),
            ),
        )
    };

    write_aligned(&input, &model, &plan, tmp.file()).map_err(werr)?;
    tmp.sync().map_err(werr)?;
    verify(&input, &model, &before, &plan, &machine, tmp.file()).map_err(|msg| {
        Error::Other(format!("{}: the rewritten file failed verification ({msg}); nothing was replaced (this is a bug; please report it)", path.display()))
    })?;
    if in_place {
        // Do not replace a file that changed under us since we read it.
        let now = std::fs::metadata(target.path()).map_err(|e| Error::io(target.path(), e))?;
        if now.ino() != in_meta.ino()
            || now.dev() != in_meta.dev()
            || now.size() != in_meta.size()
            || now.mtime_nsec() != in_meta.mtime_nsec()
            || now.mtime() != in_meta.mtime()
        {
            return Err(Error::Other(format!(
                "{}: the file changed while it was being aligned; nothing was replaced, run align again",
                target.path().display()
            )));
        }
    }
    // The original's owner, mode, set-id bits, attributes and capabilities
    // come last, in the commit (a killed run leaves nothing privileged).
    // In place, failing to keep the owner is an error; for a new `-o` file,
    // an owner we may not give away is left as ours.
    let keep = MetadataCopy {
        owner_required: in_place,
        times: false,
        skip_xattrs: &inv.stale_xattrs,
    };
    tmp.commit_keeping(&target, Some((&input, &in_meta, &keep)))
        .map_err(|e| {
            Error::io(
                target.path(),
                io::Error::new(
                    e.kind(),
                    format!("cannot put the new file in place ({e}); the original is untouched"),
                ),
            )
        })?;
    let target = target.path();
    let out_meta = std::fs::metadata(target).map_err(|e| Error::io(target, e))?;
    outcome.grew_on_disk_by = (out_meta.blocks() as i64 - in_meta.blocks() as i64) * 512;
    outcome.after = Some(super::check_file_for(target, opts.page_size)?);
    outcome.status = AlignStatus::Rewritten;
    outcome.reasons = before.reasons.clone();
    Ok(outcome)
}

/// Where each header table goes, and the new header values.
struct NewLayout {
    e_phoff: u64,
    e_shoff: u64,
    p_offset: Vec<u64>,
    p_align: Vec<u64>,
    sh_offset: Vec<u64>,
}

fn new_layout(m: &Model, plan: &AlignPlan) -> NewLayout {
    let e_phoff = if m.phdrs.is_empty() {
        m.e_phoff
    } else {
        plan.map_offset(m.e_phoff, m.phdr_table_size(), None)
    };
    let e_shoff = if m.shdrs.is_empty() {
        m.e_shoff
    } else {
        plan.map_offset(m.e_shoff, m.shdr_table_size(), None)
    };
    let p_offset = m
        .phdrs
        .iter()
        .map(|p| plan.map_offset(p.p_offset, p.p_filesz, Some(p.p_vaddr)))
        .collect();
    let p_align = m
        .phdrs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if plan.raise_align.contains(&i) {
                plan.p_align
            } else {
                p.p_align
            }
        })
        .collect();
    let sh_offset = m
        .shdrs
        .iter()
        .map(|s| {
            if s.sh_type == object::elf::SHT_NULL && s.sh_offset == 0 {
                0
            } else {
                let size = if s.has_file_bytes() { s.sh_size } else { 0 };
                plan.map_offset(s.sh_offset, size, if s.alloc() { Some(s.sh_addr) } else { None })
            }
        })
        .collect();
    NewLayout {
        e_phoff,
        e_shoff,
        p_offset,
        p_align,
        sh_offset,
    }
}

/// The pieces of the original file and where each lands:
/// `(orig_start, orig_end, new_start)`.
fn pieces(m: &Model, plan: &AlignPlan) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut shift = 0;
    for ins in &plan.insertions {
        out.push((start, ins.at, start + shift));
        start = ins.at;
        shift += ins.len;
    }
    out.push((start, m.file_size, start + shift));
    out
}

fn copy_range(src: &File, mut src_off: u64, dst: &File, mut dst_off: u64, mut len: u64) -> io::Result<()> {
    let mut fallback = false;
    while len > 0 {
        if !fallback {
            let chunk = len.min(1 << 30) as usize;
            match rustix::fs::copy_file_range(src.as_fd(), Some(&mut src_off), dst.as_fd(), Some(&mut dst_off), chunk) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the input file shrank while being copied",
                    ))
                }
                Ok(n) => {
                    len -= n as u64;
                    continue;
                }
                Err(
                    rustix::io::Errno::XDEV
                    | rustix::io::Errno::INVAL
                    | rustix::io::Errno::NOSYS
                    | rustix::io::Errno::OPNOTSUPP,
                ) => {
                    fallback = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut buf = vec![0u8; len.min(1 << 20) as usize];
        src.read_exact_at(&mut buf, src_off)?;
        dst.write_all_at(&buf, dst_off)?;
        src_off += buf.len() as u64;
        dst_off += buf.len() as u64;
        len -= buf.len() as u64;
    }
    Ok(())
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Write the aligned file into `out`: the original's bytes in pieces around
/// the padding (left as holes), then the patched header tables.
fn write_aligned(input: &File, m: &Model, plan: &AlignPlan, out: &File) -> io::Result<()> {
    let nl = new_layout(m, plan);
    let pieces = pieces(m, plan);
    for &(a, b, to) in &pieces {
        copy_range(input, a, out, to, b - a)?;
    }
    let last = pieces.last().map(|&(a, b, to)| to + (b - a)).unwrap_or(0);
    out.set_len(last)?;

    // ELF header: e_phoff, e_shoff (64-bit little-endian only: align refuses others).
    let mut eh = [0u8; 64];
    input.read_exact_at(&mut eh, 0)?;
    put_u64(&mut eh, offset_of!(FileHeader64<LE>, e_phoff), nl.e_phoff);
    put_u64(&mut eh, offset_of!(FileHeader64<LE>, e_shoff), nl.e_shoff);
    out.write_all_at(&eh, 0)?;

    if !m.phdrs.is_empty() {
        let fields = [
            (offset_of!(ProgramHeader64<LE>, p_offset), nl.p_offset.as_slice()),
            (offset_of!(ProgramHeader64<LE>, p_align), nl.p_align.as_slice()),
        ];
        patch_table(
            input,
            (m.e_phoff, nl.e_phoff),
            m.phdrs.len(),
            m.e_phentsize,
            &fields,
            out,
        )?;
    }
    if !m.shdrs.is_empty() {
        let fields = [(offset_of!(SectionHeader64<LE>, sh_offset), nl.sh_offset.as_slice())];
        patch_table(
            input,
            (m.e_shoff, nl.e_shoff),
            m.shdrs.len(),
            m.e_shentsize,
            &fields,
            out,
        )?;
    }
    Ok(())
}

/// Copy a header table of `count` entries of `entsize` bytes from offset
/// `at.0` of `input` to offset `at.1` of `out`, setting in entry `i` each
/// 64-bit field `(offset in the entry, values)` to `values[i]`.
fn patch_table(
    input: &File,
    at: (u64, u64),
    count: usize,
    entsize: u64,
    fields: &[(usize, &[u64])],
    out: &File,
) -> io::Result<()> {
    let es = entsize as usize;
    let mut tab = vec![0u8; count * es];
    input.read_exact_at(&mut tab, at.0)?;
    for i in 0..count {
        for &(field, values) in fields {
            put_u64(&mut tab, i * es + field, values[i]);
        }
    }
    out.write_all_at(&tab, at.1)
}

/// Compare `len` bytes of `a` at `ao` with `b` at `bo`, skipping bytes whose
/// position in `b` falls in one of `skip` (sorted or not).
fn same_bytes(a: &File, ao: u64, b: &File, bo: u64, len: u64, skip: &[(u64, u64)]) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut ba = vec![0u8; CHUNK as usize];
    let mut bb = vec![0u8; CHUNK as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        let (xa, xb) = (&mut ba[..n as usize], &mut bb[..n as usize]);
        a.read_exact_at(xa, ao + done)
            .map_err(|e| Error::Other(format!("reading the original: {e}")))?;
        b.read_exact_at(xb, bo + done)
            .map_err(|e| Error::Other(format!("reading the new file: {e}")))?;
        if xa != xb {
            for i in 0..n {
                let pos = bo + done + i;
                if xa[i as usize] != xb[i as usize] && !skip.iter().any(|&(s, e)| pos >= s && pos < e) {
                    return Err(Error::Other(format!(
                        "byte at original offset {:#x} (new {pos:#x}) differs",
                        ao + done + i
                    )));
                }
            }
        }
        done += n;
    }
    Ok(())
}

/// Check the new file against the original and the plan. Returns what is
/// wrong, in words.
fn verify(
    input: &File,
    old: &Model,
    before: &CheckReport,
    plan: &AlignPlan,
    target: &super::Target,
    out: &File,
) -> Result<()> {
    let cache = object::ReadCache::new(out);
    let new = Model::parse(&cache).map_err(|e| Error::Other(format!("does not parse: {e}")))?;
    drop(cache);
    let nl = new_layout(old, plan);
    if new.file_size != old.file_size + plan.growth {
        return Err(Error::Other(format!(
            "size {} instead of {}",
            new.file_size,
            old.file_size + plan.growth
        )));
    }
    if (new.e_type, new.e_machine, new.e_phoff, new.e_shoff) != (old.e_type, old.e_machine, nl.e_phoff, nl.e_shoff) {
        return Err(Error::Other("ELF header differs from the intended one".into()));
    }
    if new.phdrs.len() != old.phdrs.len() || new.shdrs.len() != old.shdrs.len() {
        return Err(Error::Other("header counts changed".into()));
    }
    for (i, (o, n)) in old.phdrs.iter().zip(&new.phdrs).enumerate() {
        let want = super::layout::Phdr {
            p_offset: nl.p_offset[i],
            p_align: nl.p_align[i],
            ..*o
        };
        if *n != want {
            return Err(Error::Other(format!("program header {i} is {n:?}, expected {want:?}")));
        }
        if o.p_vaddr != n.p_vaddr {
            return Err(Error::Other(format!("program header {i} changed its vaddr")));
        }
    }
    for (i, (o, n)) in old.shdrs.iter().zip(&new.shdrs).enumerate() {
        let want = super::layout::Shdr {
            sh_offset: nl.sh_offset[i],
            ..o.clone()
        };
        if *n != want {
            return Err(Error::Other(format!(
                "section header {i} ({}) is not what was intended",
                o.name
            )));
        }
    }
    let ehsize = 64;
    let mut patched = vec![(0, ehsize)];
    if !old.phdrs.is_empty() {
        patched.push((nl.e_phoff, nl.e_phoff + old.phdr_table_size()));
    }
    if !old.shdrs.is_empty() {
        patched.push((nl.e_shoff, nl.e_shoff + old.shdr_table_size()));
    }
    // Every byte of the original, at its new place.
    for (a, b, to) in pieces(old, plan) {
        same_bytes(input, a, out, to, b - a, &patched)?;
    }
    // The padding reads as zeros.
    let mut shift = 0;
    for ins in &plan.insertions {
        let at = ins.at + shift;
        let mut z = vec![0u8; ins.len as usize];
        out.read_exact_at(&mut z, at)
            .map_err(|e| Error::Other(format!("reading padding: {e}")))?;
        if z.iter().any(|&b| b != 0) {
            return Err(Error::Other(format!("padding at {at:#x} is not zero")));
        }
        shift += ins.len;
    }
    // Every header and section still points at the same content.
    for (i, (o, n)) in old.phdrs.iter().zip(&new.phdrs).enumerate() {
        if o.p_filesz > 0 {
            same_bytes(input, o.p_offset, out, n.p_offset, o.p_filesz, &patched)
                .map_err(|e| Error::Other(format!("program header {i}: {e}")))?;
        }
    }
    for (o, n) in old.shdrs.iter().zip(&new.shdrs) {
        if o.has_file_bytes() {
            same_bytes(input, o.sh_offset, out, n.sh_offset, o.sh_size, &patched)
                .map_err(|e| Error::Other(format!("section {}: {e}", o.name)))?;
        }
    }
    // Section-to-segment mapping is unchanged.
    let inside = |s: &super::layout::Shdr, p: &super::layout::Phdr| -> bool {
        let by_addr = s.alloc() && s.sh_addr >= p.p_vaddr && s.sh_addr + s.sh_size <= p.p_vaddr + p.p_memsz;
        let by_file =
            !s.has_file_bytes() || (s.sh_offset >= p.p_offset && s.sh_offset + s.sh_size <= p.p_offset + p.p_filesz);
        by_addr && by_file
    };
    for (si, (os, ns)) in old.shdrs.iter().zip(&new.shdrs).enumerate() {
        for (pi, (op, np)) in old.phdrs.iter().zip(&new.phdrs).enumerate() {
            if inside(os, op) != inside(ns, np) {
                return Err(Error::Other(format!(
                    "section {si} ({}) moved in or out of segment {pi}",
                    os.name
                )));
            }
        }
    }
    // Non-load headers stay inside the same PT_LOADs.
    for (o, n) in old
        .phdrs
        .iter()
        .zip(&new.phdrs)
        .filter(|(o, _)| !o.is_load() && o.p_filesz > 0)
    {
        for (ol, nl2) in old.phdrs.iter().zip(&new.phdrs).filter(|(p, _)| p.is_load()) {
            let a = o.p_offset >= ol.p_offset && o.file_end() <= ol.file_end();
            let b = n.p_offset >= nl2.p_offset && n.file_end() <= nl2.file_end();
            if a != b {
                return Err(Error::Other(format!(
                    "{} moved in or out of a PT_LOAD",
                    super::layout::ptype_name(o.p_type)
                )));
            }
        }
    }
    // And the point of it all.
    let after = check::analyse(Path::new(""), &new, target);
    if after.verdict != Verdict::PmdMappable || after.unit_mappable_bytes != before.unit_mappable_bytes_after_align {
        return Err(Error::Other(format!(
            "the result is not PMD-mappable as planned ({} bytes instead of {})",
            after.unit_mappable_bytes, before.unit_mappable_bytes_after_align
        )));
    }
    Ok(())
}
