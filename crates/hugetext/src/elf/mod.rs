//! ELF: PMD-mapping eligibility (`check`), the safe rewriter (`align`) and
//! DT_NEEDED resolution the way ld.so does it (`deps`).
//!
//! A read-only `PT_LOAD` can be mapped with 2 MiB page-table entries (PMDs)
//! only where a whole 2 MiB window of its virtual range is backed by a file
//! range at the same offset modulo 2 MiB, and the runtime base keeps that
//! congruence (see `doc/elf.md` and KERNEL-NOTES §2–3):
//!
//! * [`check_file`] says, per segment, whether that holds as the file stands
//!   and what [`align_file`] would achieve;
//! * [`align_file`] rewrites the file: raises `p_align` to 2 MiB and, for
//!   lld/mold layouts whose text is skewed by 4 KiB, inserts file padding so
//!   `p_offset ≡ p_vaddr (mod 2 MiB)`, fixing every offset after it. Virtual
//!   addresses never change. Output is verified by re-parsing and comparing
//!   before it replaces anything;
//! * [`text_segments`] lists a file's read-only PT_LOADs (for `warm`);
//! * [`resolve_deps`] finds a program's interpreter and shared libraries.

use std::fs::File;
use std::path::Path;

use serde::Serialize;

use crate::{Error, Result};

pub mod align;
pub mod check;
pub mod deps;
pub mod layout;

pub use align::{align_file, AlignOptions, AlignOutcome, AlignStatus};
pub use check::{AlignPlan, BaseAlignment, CheckReport, FileKind, SegmentReport, Verdict};
pub use deps::resolve_deps;

/// PMD size on x86-64 with 4 KiB pages: the unit of huge text.
pub const PMD_SIZE: u64 = 2 << 20;
/// Base page size on x86-64.
pub const PAGE_SIZE: u64 = 4096;

/// A loadable segment of an ELF file: where its bytes are in the file and
/// where they are mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// Index in the program header table.
    pub index: usize,
    /// `p_offset`: file offset of the first byte.
    pub offset: u64,
    /// `p_filesz`: bytes taken from the file.
    pub file_size: u64,
    /// `p_vaddr`: link-time virtual address (add the load bias for ET_DYN).
    pub vaddr: u64,
    /// `p_memsz`.
    pub mem_size: u64,
    /// `p_flags` (`PF_R` = 4, `PF_W` = 2, `PF_X` = 1).
    pub flags: u32,
    /// `p_align`.
    pub align: u64,
}

impl Segment {
    /// Executable (`PF_X`)?
    pub fn is_executable(&self) -> bool {
        self.flags & object::elf::PF_X != 0
    }
    /// The file range `[offset, offset + file_size)`.
    pub fn file_range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + self.file_size
    }
}

/// Open and parse an ELF file's headers without reading the rest of it.
pub(crate) fn read_model(path: &Path) -> Result<(File, layout::Model)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::Elf {
            path: path.into(),
            msg: "not a regular file".into(),
        });
    }
    let cache = object::ReadCache::new(&file);
    let model = layout::Model::parse(&cache).map_err(|msg| Error::Elf { path: path.into(), msg })?;
    drop(cache);
    Ok((file, model))
}

/// Check one ELF file: per-PT_LOAD congruence, whole 2 MiB windows, whether
/// the runtime base keeps the congruence, how many bytes can be PMD-mapped now
/// and after `align`, a verdict with reasons, and what a rewrite would
/// invalidate. Reads only the headers.
///
/// Errors: the file cannot be read, is not ELF, or is truncated/malformed.
/// A well-formed ELF file that cannot be helped (32-bit, other machine,
/// object file, …) is not an error: its verdict says why.
pub fn check_file(path: &Path) -> Result<CheckReport> {
    let (file, model) = read_model(path)?;
    let mut report = check::analyse(path, &model);
    let inv = align::invalidations(path, &file, &model);
    report.warnings.extend(
        inv.signed
            .iter()
            .map(|s| format!("signed: {s}; align refuses it unless --force")),
    );
    report.warnings.extend(inv.warnings);
    Ok(report)
}

/// The read-only (non-writable) PT_LOAD segments of an ELF file, in program
/// header order: the file ranges whose page cache `warm` fills. Works for
/// ELF32 and ELF64 of any machine.
pub fn text_segments(path: &Path) -> Result<Vec<Segment>> {
    let (_file, model) = read_model(path)?;
    Ok(model
        .loads()
        .filter(|(_, p)| !p.writable())
        .map(|(index, p)| Segment {
            index,
            offset: p.p_offset,
            file_size: p.p_filesz,
            vaddr: p.p_vaddr,
            mem_size: p.p_memsz,
            flags: p.p_flags,
            align: p.p_align,
        })
        .collect())
}

/// Is this file an ELF file (by its magic)? Errors only on I/O.
pub fn is_elf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; 4];
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(&magic == b"\x7fELF"),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}
