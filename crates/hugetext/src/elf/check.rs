//! `check`: can an ELF file's read-only segments be PMD-mapped as the file
//! stands, and what would `align` achieve? Also computes the `align` plan, so
//! `check` and `align` can never disagree.

use hugetext_abi::geometry::{self, Windows};
use std::path::{Path, PathBuf};

use object::elf;
use serde::Serialize;

use super::layout::{machine_name, Model, Phdr};
use super::{Target, MAX_ALIGN_PMD};
use crate::Error;

/// What kind of object the file is, as far as placement at run time goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// `ET_EXEC`: fixed addresses, placed by the kernel.
    Executable,
    /// `ET_DYN` with `PT_INTERP` and `DF_1_PIE`: placed by the kernel.
    Pie,
    /// `ET_DYN` with `DF_1_PIE` and no interpreter: placed by the kernel.
    StaticPie,
    /// `ET_DYN` otherwise: a shared library, placed by ld.so.
    SharedLibrary,
    /// `ET_REL`, `ET_CORE` or anything else: never mapped as a program.
    Other,
}

impl FileKind {
    /// The name `check --json` gives it.
    pub const fn as_str(self) -> &'static str {
        match self {
            FileKind::Executable => "executable",
            FileKind::Pie => "pie",
            FileKind::StaticPie => "static-pie",
            FileKind::SharedLibrary => "shared-library",
            FileKind::Other => "other",
        }
    }
}

/// Whether the runtime load base keeps `p_vaddr ≡ p_offset (mod PMD)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BaseAlignment {
    /// ET_EXEC: addresses are fixed, congruence is what the file says.
    Fixed,
    /// ET_DYN with max `p_align` ≥ the PMD size: the loader aligns the base
    /// (given the kernel/glibc versions in `base_note`).
    Aligned,
    /// ET_DYN with max `p_align` < the PMD size: the base is only page
    /// aligned (a shared library may still land PMD-aligned by luck of the
    /// filesystem's `thp_get_unmapped_area`).
    NotAligned,
}

/// What `check` concludes for a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every read-only segment with a whole PMD window can be PMD-mapped;
    /// `align` has nothing to do.
    PmdMappable,
    /// `align` would make (more of) the text PMD-mappable.
    Improvable,
    /// Nothing can be done (the reasons say why).
    NotImprovable,
}

impl Verdict {
    /// The name `check --json` gives it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::PmdMappable => "pmd-mappable",
            Verdict::Improvable => "improvable",
            Verdict::NotImprovable => "not-improvable",
        }
    }
}

/// Why `check` reached its verdict, as a stable name (`reason_codes` in
/// `check --json`, one per entry of `reasons`, the human text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonCode {
    /// A 32-bit file.
    Elf32,
    /// A machine other than x86-64 and AArch64.
    UnsupportedMachine,
    /// A big-endian file.
    BigEndian,
    /// The target's PMD is larger than hugetext aligns to.
    PmdTooLarge,
    /// Not an executable or a shared library.
    NotAProgram,
    /// No `PT_LOAD` segment.
    NoLoadSegment,
    /// The text is in a writable (RWX) segment.
    WritableText,
    /// No read-only segment holds a whole window.
    NoWholeWindow,
    /// Every eligible segment can be PMD-mapped already.
    AlreadyPmdMappable,
    /// `align` would insert padding.
    AlignPads,
    /// `align` would raise `p_align`.
    AlignRaisesPAlign,
    /// Padding cannot be inserted without splitting a file structure (or
    /// the segment is malformed).
    CannotPad,
}

/// Per-PT_LOAD findings.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentReport {
    /// Index in the program header table.
    pub index: usize,
    /// Flags as `readelf` prints them ("R E").
    pub flags: String,
    pub writable: bool,
    pub executable: bool,
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub p_align: u64,
    /// `(p_vaddr - p_offset) mod PMD`; 0 means congruent.
    pub skew: u64,
    /// `p_vaddr ≡ p_offset (mod PMD)`.
    pub congruent: bool,
    /// Number of whole PMD windows `[k·PMD, (k+1)·PMD)` inside
    /// `[p_vaddr, p_vaddr + p_filesz)`.
    pub whole_windows: u64,
    /// Bytes of this segment that can be PMD-mapped as the file stands.
    pub unit_mappable_bytes: u64,
    /// Bytes that can be PMD-mapped after `align`.
    pub unit_mappable_bytes_after_align: u64,
    /// One plain-words line about this segment.
    pub note: String,
}

/// What `align` would do to the file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AlignPlan {
    /// Padding to insert: `(original file offset, bytes, vaddr of the
    /// segment that starts there)`, sorted by offset.
    pub insertions: Vec<Insertion>,
    /// Program header indexes whose `p_align` becomes [`AlignPlan::p_align`].
    pub raise_align: Vec<usize>,
    /// The `p_align` they get: the target's PMD size.
    pub p_align: u64,
    /// How many bytes the file grows (sum of the insertions).
    pub growth: u64,
}

/// One run of padding bytes inserted into the file.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Insertion {
    /// Original file offset where the padding goes (start of the segment).
    pub at: u64,
    /// Bytes of padding.
    pub len: u64,
    /// `p_vaddr` of the segment that starts at `at` (breaks ties for
    /// zero-sized things that sit exactly at `at`).
    pub vaddr: u64,
    /// Program header index of that segment.
    pub segment: usize,
}

impl AlignPlan {
    /// True when there is nothing to change.
    pub fn is_empty(&self) -> bool {
        self.insertions.is_empty() && self.raise_align.is_empty()
    }

    /// The new file offset of something at original offset `off`.
    /// `size` is its size in the file (0 for NOBITS and empty things) and
    /// `vaddr` its address, when it has one: a zero-sized thing that sits
    /// exactly where padding is inserted moves only if it belongs to the
    /// segment that starts there (by address).
    pub fn map_offset(&self, off: u64, size: u64, vaddr: Option<u64>) -> u64 {
        let mut shift = 0;
        for ins in &self.insertions {
            let moves = off > ins.at || (off == ins.at && (size > 0 || vaddr.map_or(true, |a| a >= ins.vaddr)));
            if moves {
                shift += ins.len;
            }
        }
        off + shift
    }
}

/// The full `check` result for one file. Serialisable; `hugetext check
/// --json` prints a list of these.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub path: PathBuf,
    /// "ELF64" or "ELF32".
    pub class: String,
    pub machine: String,
    /// The machine, page and PMD size the figures are for.
    pub target: Target,
    pub kind: FileKind,
    pub file_size: u64,
    /// Largest power-of-two `p_align` of the PT_LOADs.
    pub max_p_align: u64,
    pub base: BaseAlignment,
    /// Plain words: who places the base and what that needs.
    pub base_note: String,
    pub segments: Vec<SegmentReport>,
    /// Read-only (text and rodata) bytes that can be PMD-mapped as the
    /// file stands: whole PMD windows of non-writable PT_LOADs that are
    /// congruent, with a base that keeps the congruence.
    pub unit_mappable_bytes: u64,
    /// The same after `hugetext align`.
    pub unit_mappable_bytes_after_align: u64,
    pub verdict: Verdict,
    /// Why, in plain words.
    pub reasons: Vec<String>,
    /// Why, as stable names: one per entry of `reasons`, in the same order.
    pub reason_codes: Vec<ReasonCode>,
    /// What a rewrite would invalidate or what else the user should know.
    pub warnings: Vec<String>,
    /// What `align` would do (empty unless the verdict is `improvable`).
    pub plan: AlignPlan,
}

/// Whole `pmd`-size windows inside `[start, start+len)`.
pub fn whole_windows(start: u64, len: u64, pmd: u64) -> u64 {
    Windows::<u64>::new(start, start.saturating_add(len), pmd).count()
}

/// Bytes of the whole PMD windows (by virtual address) of the segments
/// that count `bytes` of theirs as PMD-mappable, each window once: two
/// PT_LOADs over the same addresses map the same memory.
fn distinct_window_bytes(segments: &[SegmentReport], pmd: u64, bytes: impl Fn(&SegmentReport) -> u64) -> u64 {
    let mut windows: Vec<(u64, u64)> = segments
        .iter()
        .filter(|s| bytes(s) > 0)
        .map(|s| Windows::<u64>::new(s.vaddr, s.vaddr.saturating_add(s.filesz), pmd))
        .map(|w| (w.first_index(), w.end_index()))
        .collect();
    windows.sort_unstable();
    let (mut total, mut covered) = (0u64, 0u64);
    for (start, end) in windows {
        let start = start.max(covered);
        if end > start {
            total += end - start;
            covered = end;
        }
    }
    total * pmd
}

fn skew_of(p: &Phdr, pmd: u64) -> u64 {
    geometry::skew(p.p_vaddr, p.p_offset, pmd)
}

/// Classify the file for placement.
pub fn kind_of(m: &Model) -> FileKind {
    match m.e_type {
        elf::ET_EXEC => FileKind::Executable,
        elf::ET_DYN if m.is_pie_flagged() && m.interp.is_some() => FileKind::Pie,
        elf::ET_DYN if m.is_pie_flagged() => FileKind::StaticPie,
        // Older linkers do not set DF_1_PIE: an ET_DYN with an interpreter
        // and no DT_SONAME is a PIE. (libc.so.6 has PT_INTERP and a SONAME:
        // a library.) Both loaders use the max p_align, so only the note differs.
        elf::ET_DYN if m.interp.is_some() && !m.has_soname => FileKind::Pie,
        elf::ET_DYN => FileKind::SharedLibrary,
        _ => FileKind::Other,
    }
}

/// Running kernel and glibc versions, for the notes.
fn system_versions() -> (String, String) {
    let kernel = rustix::system::uname().release().to_string_lossy().into_owned();
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let glibc = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) }
        .to_string_lossy()
        .into_owned();
    (kernel, glibc)
}

fn version_at_least(v: &str, major: u32, minor: u32) -> bool {
    let mut it = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let a = it.next().unwrap_or(0);
    let b = it.next().unwrap_or(0);
    (a, b) >= (major, minor)
}

fn base_note(kind: FileKind, base: BaseAlignment, pmd: &str) -> String {
    let (kernel, glibc) = system_versions();
    let mark = |ok: bool| if ok { "yes" } else { "NO" };
    match (kind, base) {
        (FileKind::Executable, _) => "ET_EXEC: loaded at fixed addresses, the file's congruence is kept".into(),
        (FileKind::Other, _) => "not loaded as a program or library".into(),
        (FileKind::Pie, BaseAlignment::Aligned) => format!(
            "PIE: the kernel aligns the load base to the largest p_align since Linux 5.10 (running {kernel}: {})",
            mark(version_at_least(&kernel, 5, 10))
        ),
        (FileKind::StaticPie, BaseAlignment::Aligned) => format!(
            "static PIE: the kernel aligns the load base to the largest p_align since Linux 6.11 (running {kernel}: {})",
            mark(version_at_least(&kernel, 6, 11))
        ),
        (FileKind::SharedLibrary, BaseAlignment::Aligned) => format!(
            "shared library: ld.so aligns the load base to the largest p_align since glibc 2.35 (running {glibc}: {})",
            mark(version_at_least(&glibc, 2, 35))
        ),
        (FileKind::SharedLibrary, _) => format!(
            "shared library with p_align < {pmd}: its base is only page-aligned by the ELF headers \
             (ext4/xfs often place a >= {pmd} mapping {pmd}-aligned, but nothing guarantees it)"
        ),
        (_, _) => format!(
            "PIE with p_align < {pmd}: the kernel picks a load base that is only page-aligned, so the text \
             is almost never {pmd}-congruent at run time"
        ),
    }
}

/// Analyse a parsed model for `target` (see [`Target::for_machine`]).
/// `path` is only used to fill the report.
pub fn analyse(path: &Path, m: &Model, target: &Target) -> CheckReport {
    let unit = target.unit;
    let unit_w = crate::units::human(unit);
    let (mapped, mappable) = (target.unit_kind.mapped(), target.unit_kind.mappable());
    let kind = kind_of(m);
    let max_p_align = m.max_load_align();
    let base = match kind {
        FileKind::Executable => BaseAlignment::Fixed,
        _ if max_p_align >= unit => BaseAlignment::Aligned,
        _ => BaseAlignment::NotAligned,
    };
    let mut reasons = Vec::new();
    let mut warnings = Vec::new();

    // Reasons that make the whole file ineligible.
    let mut blocker: Option<(ReasonCode, String)> = None;
    if !m.is_64 {
        blocker = Some((
            ReasonCode::Elf32,
            "32-bit ELF: PMD alignment is for 64-bit programs only (it would cost too much of a 32-bit address space)"
                .into(),
        ));
    } else if !super::supported_machine(m.e_machine) {
        blocker = Some((
            ReasonCode::UnsupportedMachine,
            format!(
                "{} ELF: hugetext aligns x86-64 and AArch64 files only",
                machine_name(m.e_machine)
            ),
        ));
    } else if !m.little_endian {
        blocker = Some((
            ReasonCode::BigEndian,
            format!(
                "big-endian {} ELF: hugetext handles little-endian files only",
                machine_name(m.e_machine)
            ),
        ));
    } else if unit > MAX_ALIGN_PMD {
        blocker = Some((ReasonCode::PmdTooLarge, format!(
            "the target's PMD is {unit_w} ({} pages): aligning to more than {} would cost that much address space per object, \
             and the kernel's own ELF loader does not align to it either",
            crate::units::human(target.page_size),
            crate::units::human(MAX_ALIGN_PMD)
        )));
    } else if kind == FileKind::Other {
        blocker = Some((
            ReasonCode::NotAProgram,
            format!("ELF type {}: not an executable or shared library", etype_name(m.e_type)),
        ));
    } else if m.loads().next().is_none() {
        blocker = Some((
            ReasonCode::NoLoadSegment,
            "no PT_LOAD segment: nothing is mapped from this file".into(),
        ));
    }

    let base_keeps = matches!(base, BaseAlignment::Fixed | BaseAlignment::Aligned);
    let mut segments = Vec::new();
    for (index, p) in m.loads() {
        let skew = skew_of(p, unit);
        let congruent = skew == 0;
        let windows = whole_windows(p.p_vaddr, p.p_filesz, unit);
        let ro = !p.writable();
        let now = if ro && congruent && base_keeps && blocker.is_none() {
            windows * unit
        } else {
            0
        };
        let note = if p.writable() {
            if p.executable() {
                format!("writable and executable: cannot be {mapped} from the page cache")
            } else {
                "writable data: not a candidate".to_string()
            }
        } else if windows == 0 {
            format!(
                "contains no whole {unit_w} window: stays on {} pages",
                crate::units::human(target.page_size)
            )
        } else if !congruent {
            format!(
                "vaddr and file offset differ by {skew:#x} modulo {unit_w}: no window can be {mapped} until the file is relaid out"
            )
        } else if !base_keeps {
            format!(
                "congruent, {windows} whole {unit_w} window(s), but the load base is not {unit_w}-aligned (p_align {:#x})",
                p.p_align
            )
        } else {
            format!("congruent: {windows} whole {unit_w} window(s) can be {mapped}")
        };
        segments.push(SegmentReport {
            index,
            flags: p.flags_str(),
            writable: p.writable(),
            executable: p.executable(),
            vaddr: p.p_vaddr,
            offset: p.p_offset,
            filesz: p.p_filesz,
            memsz: p.p_memsz,
            p_align: p.p_align,
            skew,
            congruent,
            whole_windows: windows,
            unit_mappable_bytes: now,
            unit_mappable_bytes_after_align: now,
            note,
        });
    }
    let unit_mappable_bytes = distinct_window_bytes(&segments, unit, |s| s.unit_mappable_bytes);

    let mut plan = AlignPlan::default();
    let verdict;
    if let Some(b) = blocker {
        reasons.push(b);
        verdict = Verdict::NotImprovable;
    } else {
        let candidates: Vec<&SegmentReport> = segments.iter().filter(|s| !s.writable && s.whole_windows > 0).collect();
        if candidates.is_empty() {
            if segments
                .iter()
                .any(|s| s.writable && s.executable && s.whole_windows > 0)
            {
                reasons.push((
                    ReasonCode::WritableText,
                    format!(
                        "its text is in a writable segment (RWX): file pages of a writable mapping are not {mapped}"
                    ),
                ));
            }
            reasons.push((
                ReasonCode::NoWholeWindow,
                format!(
                    "no read-only segment contains a whole {unit_w} window (text smaller than ~{}, or split)",
                    crate::units::human(2 * unit)
                ),
            ));
            verdict = Verdict::NotImprovable;
        } else {
            match make_plan(m, kind, target) {
                Ok(p) if p.is_empty() => {
                    reasons.push((
                        ReasonCode::AlreadyPmdMappable,
                        format!(
                            "already {mappable}: {} MiB of read-only segments in whole {unit_w} windows",
                            unit_mappable_bytes >> 20
                        ),
                    ));
                    verdict = Verdict::PmdMappable;
                }
                Ok(p) => {
                    for s in segments.iter_mut().filter(|s| !s.writable && s.whole_windows > 0) {
                        s.unit_mappable_bytes_after_align = s.whole_windows * unit;
                    }
                    if !p.insertions.is_empty() {
                        let segs: Vec<String> = p
                            .insertions
                            .iter()
                            .map(|i| format!("#{} (+{:#x})", i.segment, i.len))
                            .collect();
                        reasons.push((
                            ReasonCode::AlignPads,
                            format!(
                                "align inserts {} bytes of zero padding so segment(s) {} become {unit_w}-congruent (vaddrs unchanged)",
                                p.growth,
                                segs.join(", ")
                            ),
                        ));
                    }
                    if !p.raise_align.is_empty() {
                        let segs: Vec<String> = p.raise_align.iter().map(|i| format!("#{i}")).collect();
                        reasons.push((
                            ReasonCode::AlignRaisesPAlign,
                            format!(
                                "align sets p_align to {unit_w} on segment(s) {} so the loader aligns the load base",
                                segs.join(", ")
                            ),
                        ));
                    }
                    plan = p;
                    verdict = Verdict::Improvable;
                }
                Err(why) => {
                    reasons.push((ReasonCode::CannotPad, why.to_string()));
                    verdict = Verdict::NotImprovable;
                }
            }
        }
    }
    let unit_mappable_bytes_after_align = if verdict == Verdict::Improvable {
        distinct_window_bytes(&segments, unit, |s| s.unit_mappable_bytes_after_align)
    } else {
        unit_mappable_bytes
    };
    if verdict == Verdict::Improvable && kind != FileKind::Executable {
        warnings.push(format!(
            "a {unit_w}-aligned load base leaves {} fewer bits of ASLR entropy for this object",
            (unit / target.page_size.max(1)).trailing_zeros()
        ));
    }
    if let Some(n) = &target.note {
        warnings.insert(0, n.clone());
    }
    let described = m.described_end();
    if m.file_size > described {
        warnings.push(format!(
            "{} bytes of data are appended after the last ELF structure; a relayout moves them, which breaks readers that locate them by absolute offset",
            m.file_size - described
        ));
    }
    CheckReport {
        path: path.to_path_buf(),
        class: if m.is_64 { "ELF64" } else { "ELF32" }.into(),
        machine: machine_name(m.e_machine),
        target: target.clone(),
        kind,
        file_size: m.file_size,
        max_p_align,
        base,
        base_note: base_note(kind, base, &unit_w),
        segments,
        unit_mappable_bytes,
        unit_mappable_bytes_after_align,
        verdict,
        reason_codes: reasons.iter().map(|r| r.0).collect(),
        reasons: reasons.into_iter().map(|r| r.1).collect(),
        warnings,
        plan,
    }
}

fn etype_name(t: u16) -> String {
    match t {
        elf::ET_NONE => "ET_NONE".into(),
        elf::ET_REL => "ET_REL (object file)".into(),
        elf::ET_CORE => "ET_CORE (core dump)".into(),
        other => format!("{other:#x}"),
    }
}

/// Compute what `align` must do. `Err` carries the reason it cannot.
///
/// Eligible segments are the non-writable PT_LOADs that contain at least one
/// whole PMD window (the target's PMD size). Each one that is not congruent
/// gets padding inserted at its file offset (so it, and everything after it,
/// moves up by `(p_vaddr - p_offset) mod PMD`). For ET_DYN, each eligible
/// segment's p_align becomes the PMD size (never any other segment: glibc <
/// 2.35 rejects a segment whose p_vaddr - p_offset is not a multiple of its
/// own p_align, and only the eligible ones are made congruent modulo PMD).
pub fn make_plan(m: &Model, kind: FileKind, target: &Target) -> crate::Result<AlignPlan> {
    let (unit, page) = (target.unit, target.page_size);
    let mut order: Vec<(usize, &Phdr)> = m.loads().collect();
    order.sort_by_key(|(i, p)| (p.p_offset, *i));
    let mut plan = AlignPlan {
        p_align: unit,
        ..AlignPlan::default()
    };
    let mut shift = 0u64;
    for (i, p) in &order {
        let eligible = !p.writable() && whole_windows(p.p_vaddr, p.p_filesz, unit) > 0;
        if !eligible {
            continue;
        }
        let new_off = p.p_offset + shift;
        let d = geometry::skew(p.p_vaddr, new_off, unit);
        if d != 0 {
            if d % page != 0 {
                return Err(Error::Invalid(format!(
                    "segment #{i}: p_vaddr {:#x} and p_offset {:#x} differ modulo the {} page size: {}, not touching it",
                    p.p_vaddr,
                    p.p_offset,
                    crate::units::human(page),
                    if target.foreign || page != crate::kernel::page_size() as u64 {
                        "the file does not load on a kernel with these pages"
                    } else {
                        "malformed"
                    }
                )));
            }
            plan.insertions.push(Insertion {
                at: p.p_offset,
                len: d,
                vaddr: p.p_vaddr,
                segment: *i,
            });
            shift += d;
        }
        // A p_align that is not a power of two is ignored by the loaders:
        // replace it too.
        if kind != FileKind::Executable && !(p.p_align.is_power_of_two() && p.p_align >= unit) {
            plan.raise_align.push(*i);
        }
    }
    plan.raise_align.sort_unstable();
    plan.growth = shift;
    if plan.insertions.is_empty() {
        return Ok(plan);
    }
    check_plan(m, &plan, page)?;
    Ok(plan)
}

/// Refuse plans that would split something: every insertion point must lie
/// between file structures, never inside one.
fn check_plan(m: &Model, plan: &AlignPlan, page: u64) -> crate::Result<()> {
    let ehsize = if m.is_64 { 64 } else { 52 };
    for ins in &plan.insertions {
        let at = ins.at;
        let inside = |start: u64, len: u64| len > 0 && start < at && at < start + len;
        if at < ehsize {
            return Err(Error::Invalid(format!(
                "segment #{} starts inside the ELF header: cannot insert padding there",
                ins.segment
            )));
        }
        if inside(m.e_phoff, m.phdr_table_size()) {
            return Err(Error::Invalid(format!(
                "the program header table spans offset {at:#x} where padding would go"
            )));
        }
        if inside(m.e_shoff, m.shdr_table_size()) {
            return Err(Error::Invalid(format!(
                "the section header table spans offset {at:#x} where padding would go"
            )));
        }
        for (j, p) in m.phdrs.iter().enumerate() {
            if inside(p.p_offset, p.p_filesz) {
                return Err(Error::Invalid(format!(
                    "program header #{j} ({}) overlaps the start of segment #{} in the file (offset {at:#x}): cannot insert padding without splitting it",
                    super::layout::ptype_name(p.p_type),
                    ins.segment
                )));
            }
        }
        for s in m.shdrs.iter().filter(|s| s.has_file_bytes()) {
            if inside(s.sh_offset, s.sh_size) {
                return Err(Error::Invalid(format!(
                    "section {} spans offset {at:#x} where padding would go",
                    s.name
                )));
            }
        }
    }
    // Every PT_LOAD must stay congruent modulo its own p_align (and the page).
    for (j, p) in m.loads() {
        let size = p.p_filesz;
        let new_off = plan.map_offset(p.p_offset, size, Some(p.p_vaddr));
        let align = if plan.raise_align.contains(&j) {
            plan.p_align
        } else {
            p.p_align.max(1)
        };
        let align = if align.is_power_of_two() { align.max(page) } else { page };
        if p.p_vaddr.wrapping_sub(new_off) % align != 0 {
            return Err(Error::Invalid(format!(
                "padding would leave segment #{j} with p_vaddr {:#x} and p_offset {new_off:#x} not congruent modulo its p_align {align:#x}",
                p.p_vaddr
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_json_names() {
        use FileKind::*;
        for k in [Executable, Pie, StaticPie, SharedLibrary, Other] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        for v in [Verdict::PmdMappable, Verdict::Improvable, Verdict::NotImprovable] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
    }

    #[test]
    fn whole_windows_counts_only_complete_aligned_windows() {
        for m in [2u64 << 20, 32 << 20, 512 << 20] {
            assert_eq!(whole_windows(0, m - 1, m), 0);
            assert_eq!(whole_windows(0, m, m), 1);
            assert_eq!(whole_windows(0x1000, m, m), 0);
            assert_eq!(whole_windows(0x1000, 2 * m, m), 1);
            assert_eq!(whole_windows(u64::MAX - 10, 100, m), 0);
        }
        // The bfd fixture: text at 0x1000, 0x1402009 bytes -> [2M, 20M),
        // and no whole 32 MiB window.
        assert_eq!(whole_windows(0x1000, 0x1402009, 2 << 20), 9);
        assert_eq!(whole_windows(0x1000, 0x1402009, 32 << 20), 0);
    }

    #[test]
    fn targets_by_machine_and_page_size() {
        let a = |p| Target::for_machine(elf::EM_AARCH64, p).unwrap();
        assert_eq!(
            (a(Some(4 << 10)).page_size, a(Some(4 << 10)).pmd_size),
            (4 << 10, 2 << 20)
        );
        assert_eq!(a(Some(16 << 10)).pmd_size, 32 << 20);
        assert_eq!(a(Some(64 << 10)).pmd_size, 512 << 20);
        let x = Target::for_machine(elf::EM_X86_64, None).unwrap();
        assert_eq!(x.pmd_size, 2 << 20);
        assert!(Target::for_machine(elf::EM_X86_64, Some(16 << 10)).is_err());
        let host = super::super::host_machine();
        let h = Target::for_machine(host, None).unwrap();
        assert!(!h.foreign && h.note.is_none());
        assert_eq!(
            (h.page_size, h.pmd_size),
            (crate::kernel::page_size() as u64, crate::kernel::pmd_size() as u64)
        );
        let other = if host == elf::EM_AARCH64 {
            elf::EM_X86_64
        } else {
            elf::EM_AARCH64
        };
        let o = Target::for_machine(other, None).unwrap();
        assert!(
            o.foreign && o.note.as_deref().unwrap().contains("does not run here"),
            "{o:?}"
        );
        let r = Target::for_machine(elf::EM_RISCV, None).unwrap();
        assert!(r.note.unwrap().contains("x86-64 and AArch64 files only"));
    }

    #[test]
    fn preload_must_match_the_program() {
        use super::super::preload_mismatch;
        let x = Some((elf::EM_X86_64, true));
        let a = Some((elf::EM_AARCH64, true));
        assert_eq!(preload_mismatch(x, x), None);
        assert_eq!(preload_mismatch(None, x), None);
        let why = preload_mismatch(a, x).unwrap();
        assert!(
            why.contains("program is AArch64 ELF64") && why.contains("built for x86-64 ELF64"),
            "{why}"
        );
        assert!(preload_mismatch(Some((elf::EM_386, false)), x).is_some());
    }

    #[test]
    fn page_sizes_parse() {
        assert_eq!(super::super::parse_page_size("16K").unwrap(), 16 << 10);
        assert_eq!(super::super::parse_page_size("64kib").unwrap(), 64 << 10);
        assert_eq!(super::super::parse_page_size("4096").unwrap(), 4 << 10);
        assert_eq!(
            super::super::parse_page_size("8K").unwrap_err().to_string(),
            "8K: not a page size (give 4K, 16K or 64K)"
        );
        assert!(super::super::parse_page_size("2M").is_err());
    }

    #[test]
    fn map_offset_moves_what_is_at_or_after_the_insertion() {
        let plan = AlignPlan {
            insertions: vec![Insertion {
                at: 0x1000,
                len: 0x1000,
                vaddr: 0x2000,
                segment: 3,
            }],
            raise_align: vec![3],
            p_align: 2 << 20,
            growth: 0x1000,
        };
        assert_eq!(plan.map_offset(0x40, 0x200, Some(0x40)), 0x40);
        assert_eq!(plan.map_offset(0x1000, 0x100, Some(0x2000)), 0x2000);
        assert_eq!(plan.map_offset(0x5000, 0, None), 0x6000);
        // Zero-sized at the insertion point: decided by address.
        assert_eq!(plan.map_offset(0x1000, 0, Some(0x1800)), 0x1000);
        assert_eq!(plan.map_offset(0x1000, 0, Some(0x2000)), 0x2000);
    }

    #[test]
    fn versions_compare_numerically() {
        assert!(version_at_least("6.18.0-1-cloud-amd64", 5, 10));
        assert!(version_at_least("2.36", 2, 35));
        assert!(!version_at_least("2.31", 2, 35));
        assert!(!version_at_least("5.4.0", 5, 10));
        assert!(version_at_least("10.0", 6, 11));
    }
}
