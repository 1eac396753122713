//! ELF: PMD-mapping eligibility (`check`), the safe rewriter (`align`) and
//! DT_NEEDED resolution the way ld.so does it (`deps`).
//!
//! A read-only `PT_LOAD` can be mapped with PMD page-table entries only where
//! a whole PMD-size window of its virtual range is backed by a file range at
//! the same offset modulo the PMD size, and the runtime base keeps that
//! congruence (see `doc/elf.md`). The PMD size is the target kernel's
//! ([`Target`]): 2 MiB on x86-64 and on arm64 with 4 KiB pages, 32 MiB with
//! 16 KiB pages; with 64 KiB pages the unit is the 2 MiB contiguous-PTE
//! block instead of the 512 MiB PMD ([`Target::unit`]):
//!
//! * [`check_file`] says, per segment, whether that holds as the file stands
//!   and what [`align_file`] would achieve;
//! * [`align_file`] rewrites the file (x86-64 and AArch64): raises `p_align`
//!   to the PMD size and, for lld/mold layouts whose text is skewed by a
//!   page, inserts file padding so `p_offset ≡ p_vaddr (mod PMD)`, fixing
//!   every offset after it. Virtual
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
pub use check::{AlignPlan, BaseAlignment, CheckReport, FileKind, ReasonCode, SegmentReport, Verdict};
pub use deps::resolve_deps;

/// Largest PMD size `check` and `align` align for: the kernel's own rule
/// for read-only PT_LOADs (binfmt_elf) stops at 32 MiB, since a larger
/// alignment (512 MiB on 64 KiB-page arm64) costs too much address space.
pub const MAX_ALIGN_PMD: u64 = hugetext_abi::geometry::MAX_ALIGN_PMD as u64;

/// The machine a file is checked and aligned for, and that machine's page
/// and PMD sizes: the running kernel's when the file is for the running
/// machine, else those of the page size named with `--page-size` (arm64:
/// 4 KiB when none is named).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    /// `e_machine` of the file, as a name ("x86-64", "AArch64").
    pub machine: String,
    /// Base page size of the target kernel, bytes.
    pub page_size: u64,
    /// PMD size of the target kernel, bytes.
    pub pmd_size: u64,
    /// The unit of huge text on the target kernel, bytes, which `check` and
    /// `align` work to: the PMD size, except on arm64 with 64 KiB pages,
    /// whose 512 MiB PMD no page-cache folio reaches (the page cache stops
    /// at 2048 pages, 128 MiB) and no loader aligns to; there it is the
    /// 2 MiB contiguous-PTE block (32 pages, one TLB entry), which a 2 MiB
    /// folio naturally aligned in the file and in the address space gets.
    pub unit: u64,
    /// What [`Target::unit`] is.
    pub unit_kind: HugeUnit,
    /// The file is for another machine than the one running hugetext.
    pub foreign: bool,
    /// How the sizes were chosen, when that is worth saying (foreign file,
    /// page size assumed).
    pub note: Option<String>,
}

/// The unit of huge text and the machines hugetext knows live on the
/// kernel floor ([`crate::kernel`]), which knows no ELF; they are named here
/// too because ELF targets are described in them.
pub use crate::kernel::{host_machine, supported_machine, HugeUnit};

/// Parse a `--page-size` value: 4K, 16K or 64K (also `16384`, `16KiB`).
pub fn parse_page_size(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let num = t
        .strip_suffix("kib")
        .or(t.strip_suffix("kb"))
        .or(t.strip_suffix('k'))
        .map(|n| n.trim().parse::<u64>().map(|n| n << 10))
        .unwrap_or_else(|| t.parse::<u64>());
    match num {
        Ok(n) if matches!(n >> 10, 4 | 16 | 64) && n % 1024 == 0 => Ok(n),
        _ => Err(Error::Invalid(format!("{s}: not a page size (give 4K, 16K or 64K)"))),
    }
}

impl Target {
    /// The running kernel's page and PMD size, for a file of the running
    /// machine (what `warm` and `explain` measure against).
    pub fn running() -> Target {
        let (page_size, pmd_size) = (crate::kernel::page_size() as u64, crate::kernel::pmd_size() as u64);
        let (unit, unit_kind) = crate::kernel::huge_unit_of(host_machine(), page_size, pmd_size);
        Target {
            machine: layout::machine_name(host_machine()),
            page_size,
            pmd_size,
            unit,
            unit_kind,
            foreign: false,
            note: None,
        }
    }

    /// The target for a file of machine `machine`, with the page size the
    /// user named (`page`), if any. `Err` when that page size does not exist
    /// on that machine.
    pub fn for_machine(machine: u16, page: Option<u64>) -> Result<Target> {
        let name = layout::machine_name(machine);
        let host = host_machine();
        let foreign = machine != host;
        let kernel_page = crate::kernel::page_size() as u64;
        let (page_size, pmd_size, mut note) = match (machine, page) {
            (object::elf::EM_X86_64, Some(p)) if p != 4096 => {
                return Err(Error::Invalid(format!(
                    "x86-64 has 4 KiB pages only, not {} KiB",
                    p >> 10
                )))
            }
            // The running machine, its own page size: the kernel's word.
            (_, p) if !foreign && p.map_or(true, |p| p == kernel_page) => {
                (kernel_page, crate::kernel::pmd_size() as u64, None)
            }
            (object::elf::EM_X86_64, _) => (4096, 2 << 20, None),
            (object::elf::EM_AARCH64, Some(p)) => (p, pmd_for(p), None),
            (object::elf::EM_AARCH64, None) => (
                4096,
                pmd_for(4096),
                Some(
                    "assuming an arm64 kernel with 4 KiB pages (2 MiB PMD); --page-size 16K or 64K names another"
                        .into(),
                ),
            ),
            // A machine align does not handle: the running kernel's sizes,
            // only for the numbers `check` prints.
            _ => (kernel_page, crate::kernel::pmd_size() as u64, None),
        };
        if foreign {
            let host_name = layout::machine_name(host);
            let what = format!("{name} file on a {host_name} machine: it does not run here");
            note = Some(match (supported_machine(machine), note) {
                (true, Some(n)) => format!("{what}; {n}"),
                (true, None) => format!(
                    "{what}; figures are for an {name} kernel with {} KiB pages ({} MiB PMD)",
                    page_size >> 10,
                    pmd_size >> 20
                ),
                (false, _) => format!("{what}, and hugetext aligns x86-64 and AArch64 files only"),
            });
        }
        let (unit, unit_kind) = crate::kernel::huge_unit_of(machine, page_size, pmd_size);
        Ok(Target {
            machine: name,
            page_size,
            pmd_size,
            unit,
            unit_kind,
            foreign,
            note,
        })
    }
}

fn pmd_for(page: u64) -> u64 {
    hugetext_abi::geometry::pmd_size_for_page(page as usize).map_or(0, |p| p as u64)
}

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
    /// Writable (`PF_W`)?
    pub fn is_writable(&self) -> bool {
        self.flags & object::elf::PF_W != 0
    }
    /// The file range `[offset, offset + file_size)`.
    pub fn file_range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + self.file_size
    }
    /// The load bias (address minus link-time address) that a mapping of
    /// this segment's file at `start` from file offset `offset` implies,
    /// when this segment maps that offset: the kernel maps a segment from
    /// its offset rounded down to a `page`, so `offset` may lie up to a page
    /// before `p_offset`. `None` when the segment does not hold `offset`.
    /// Pure.
    pub fn bias_of_mapping(&self, start: u64, offset: u64, page: u64) -> Option<u64> {
        let first = self.offset & !(page.max(1) - 1);
        (first <= offset && offset < self.offset + self.file_size.max(1))
            .then(|| start.wrapping_sub(self.vaddr.wrapping_add(offset.wrapping_sub(self.offset))))
    }
}

/// Open and parse an ELF file's headers without reading the rest of it.
pub(crate) fn read_model(path: &Path) -> Result<(File, layout::Model)> {
    let file = crate::openfile::open_nonblocking(path, crate::openfile::Follow::Yes).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::Elf {
            path: path.into(),
            msg: "not a regular file".into(),
        });
    }
    let model = model_of(&file, path)?;
    Ok((file, model))
}

/// Parse the ELF headers of the open `file` (`path` names it in errors),
/// reading only the headers. The file's offset moves; reads elsewhere use
/// `pread`.
/// [`model_of`] through any reader (e.g. one that notes what it reads);
/// the reader is handed back.
pub(crate) fn model_of_reader<R: std::io::Read + std::io::Seek>(r: R, path: &Path) -> (Result<layout::Model>, R) {
    let cache = object::ReadCache::new(r);
    let m = layout::Model::parse(&cache).map_err(|e| Error::Elf {
        path: path.into(),
        msg: e.0,
    });
    (m, cache.into_inner())
}

pub(crate) fn model_of(file: &File, path: &Path) -> Result<layout::Model> {
    let cache = object::ReadCache::new(file);
    layout::Model::parse(&cache).map_err(|e| Error::Elf {
        path: path.into(),
        msg: e.0,
    })
}

/// Check one ELF file for the running kernel: [`check_file_for`] with no
/// page size named.
pub fn check_file(path: &Path) -> Result<CheckReport> {
    check_file_for(path, None)
}

/// Check one ELF file: per-PT_LOAD congruence, whole PMD windows, whether
/// the runtime base keeps the congruence, how many bytes can be PMD-mapped now
/// and after `align`, a verdict with reasons, and what a rewrite would
/// invalidate. Reads only the headers. `page` names the target kernel's page
/// size (see [`Target::for_machine`]).
///
/// Errors: the file cannot be read, is not ELF, is truncated/malformed, or
/// `page` does not exist on its machine. A well-formed ELF file that cannot
/// be helped (32-bit, other machine, object file, …) is not an error: its
/// verdict says why.
pub fn check_file_for(path: &Path, page: Option<u64>) -> Result<CheckReport> {
    let (file, model) = read_model(path)?;
    check_model(path, &file, &model, page)
}

/// [`check_file`] of a file already open (`path` names it in the report):
/// the headers are read from `file`, never from the path again.
pub fn check_open(path: &Path, file: &File) -> Result<CheckReport> {
    check_model(path, file, &model_of(file, path)?, None)
}

fn check_model(path: &Path, file: &File, model: &layout::Model, page: Option<u64>) -> Result<CheckReport> {
    let target = Target::for_machine(model.e_machine, page).map_err(|e| Error::Elf {
        path: path.into(),
        msg: e.to_string(),
    })?;
    let mut report = check::analyse(path, model, &target);
    let inv = align::invalidations(path, file, model);
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
    Ok(text_segments_of(&read_model(path)?.1))
}

/// [`text_segments`] of a parsed model.
pub(crate) fn text_segments_of(model: &layout::Model) -> Vec<Segment> {
    load_segments_of(model)
        .into_iter()
        .filter(|s| !s.is_writable())
        .collect()
}

/// Every PT_LOAD segment of an ELF file, writable ones too, in program
/// header order: what a file-backed mapping of the file can hold, from
/// which its load bias follows ([`Segment::bias_of_mapping`]).
pub fn load_segments(path: &Path) -> Result<Vec<Segment>> {
    Ok(load_segments_of(&read_model(path)?.1))
}

/// [`load_segments`] of a parsed model.
pub(crate) fn load_segments_of(model: &layout::Model) -> Vec<Segment> {
    model
        .loads()
        .map(|(index, p)| Segment {
            index,
            offset: p.p_offset,
            file_size: p.p_filesz,
            vaddr: p.p_vaddr,
            mem_size: p.p_memsz,
            flags: p.p_flags,
            align: p.p_align,
        })
        .collect()
}

/// `(e_machine, ELF64?)` of an ELF file, from its header alone; `None` for
/// a file that is not ELF (a script). Errors only on I/O.
pub fn machine_of(path: &Path) -> Result<Option<(u16, bool)>> {
    use object::read::elf::FileHeader;
    use std::io::Read;
    let f = crate::openfile::open_nonblocking(path, crate::openfile::Follow::Yes).map_err(|e| Error::io(path, e))?;
    let mut head = Vec::with_capacity(64);
    f.take(64).read_to_end(&mut head).map_err(|e| Error::io(path, e))?;
    let m = match head.get(layout::EI_CLASS) {
        Some(&object::elf::ELFCLASS64) => object::elf::FileHeader64::<object::Endianness>::parse(head.as_slice())
            .ok()
            .and_then(|h| Some((h.e_machine(h.endian().ok()?), true))),
        Some(&object::elf::ELFCLASS32) => object::elf::FileHeader32::<object::Endianness>::parse(head.as_slice())
            .ok()
            .and_then(|h| Some((h.e_machine(h.endian().ok()?), false))),
        _ => None,
    };
    Ok(m)
}

/// Why a preload (`libhugetext.so`) cannot load into `program`, when its
/// ELF machine or class differs from the program's: the dynamic loader
/// would refuse it ("wrong ELF class" / skip it). `None` when they match or
/// either is not ELF. Pure.
pub fn preload_mismatch(program: Option<(u16, bool)>, preload: Option<(u16, bool)>) -> Option<String> {
    let (p, l) = (program?, preload?);
    if p == l {
        return None;
    }
    let name = |(m, is_64): (u16, bool)| format!("{} ELF{}", layout::machine_name(m), if is_64 { 64 } else { 32 });
    Some(format!(
        "the program is {} and the preload is built for {}: it cannot load into this program",
        name(p),
        name(l)
    ))
}

/// Is this file an ELF file (by its magic)? Errors only on I/O.
pub fn is_elf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut f =
        crate::openfile::open_nonblocking(path, crate::openfile::Follow::Yes).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; 4];
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(&magic == b"\x7fELF"),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}
