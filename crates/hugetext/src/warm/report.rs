//! The per-file report: what the page cache holds after warming, why what
//! stayed small is small, and what to do about it.

use std::collections::BTreeSet;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsFd;
use std::path::PathBuf;

use super::{ProcRef, Route, Runtime, Target, WarmRange, KIB};
use crate::kernel::{self, Mapping};
use crate::units::human;
use crate::{folio, pagecache, procfs, Result};

/// Kilobytes that stayed in small folios, by reason.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SmallReasons {
    /// In the head or tail of a range (a partial 2 MiB window): never a PMD.
    pub head_tail_kb: u64,
    /// In windows running processes map (could not be evicted).
    pub blocked_kb: u64,
    /// In windows the filesystem could not give large folios.
    pub no_large_folios_kb: u64,
    /// Anything else (memory pressure, pages that could not be evicted
    /// without a mapping process: dirty or under writeback).
    pub other_kb: u64,
}

/// One range's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RangeReport {
    /// The range warmed.
    #[serde(flatten)]
    pub range: WarmRange,
    /// Whole windows of the huge unit inside the range.
    pub eligible_windows: u64,
    /// Of those, held in one folio of at least the unit each after warming.
    pub unit_windows: u64,
}

/// The result of warming one file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// True for an ELF file (its read-only segments were warmed).
    pub elf: bool,
    /// Filesystem type.
    pub filesystem: String,
    /// How the folios were made.
    pub route: Route,
    /// File size in bytes.
    pub size: u64,
    /// kB of the warmed ranges now in the page cache.
    pub cached_kb: u64,
    /// The unit of huge text, kB: the PMD size, or the contpte block where
    /// no page-cache folio reaches the PMD (arm64, 64 KiB pages). The
    /// `pmd_*` fields count folios and windows of this size.
    pub unit_kb: u64,
    /// kB in folios of the huge unit (PMD-size folios; with 64 KiB pages,
    /// folios of at least the 2 MiB contpte block).
    pub unit_folio_kb: u64,
    /// kB in smaller folios.
    pub small_kb: u64,
    /// Of `small_kb`, kB in folios of at least the contpte block (arm64:
    /// mapped with contiguous PTEs); `None` on machines without contpte.
    pub contpte_kb: Option<u64>,
    /// kB in eligible windows that stayed small because running processes
    /// map pages of them (see `blocked_by`).
    pub blocked_kb: u64,
    /// Why `small_kb` is small.
    pub small: SmallReasons,
    /// Whole windows of the huge unit (`unit_kb`) in the warmed ranges.
    pub eligible_windows: u64,
    /// Of those, in one folio of at least the unit each.
    pub unit_windows: u64,
    /// Eligible windows blocked by running processes.
    pub blocked_windows: u64,
    /// PMD windows in segments that are certainly PMD-mapped at run time
    /// ([`Runtime::Congruent`]); for non-ELF files, all PMD windows.
    pub mappable_windows: u64,
    /// Processes that map the file (the old inode, after a replace).
    pub blocked_by: Vec<ProcRef>,
    /// The ranges warmed.
    pub ranges: Vec<RangeReport>,
    /// True when the file was replaced by a warmed copy.
    pub replaced: bool,
    /// Wall-clock time for this file, in milliseconds.
    pub millis: f64,
    /// Explanations and advice.
    pub notes: Vec<String>,
}

impl FileReport {
    /// In the convention of every state-changing command: no whole 2 MiB
    /// window to warm is nothing to do; `route: none` (no PMD folios on
    /// this filesystem), or no window in a PMD folio afterwards (running
    /// processes map them all, see `blocked_by`), is impossible here;
    /// anything else is done (what stayed small is reported).
    pub fn outcome(&self) -> crate::Outcome {
        if self.eligible_windows == 0 {
            crate::Outcome::NothingToDo
        } else if matches!(self.route, Route::None | Route::NeedsAlign) || self.unit_windows == 0 {
            crate::Outcome::Impossible
        } else {
            crate::Outcome::Done
        }
    }

    /// Why nothing was warmed, in one line, when [`FileReport::outcome`]
    /// is impossible for a file with windows to warm.
    pub fn nothing_warmed(&self) -> Option<String> {
        if self.outcome() != crate::Outcome::Impossible {
            return None;
        }
        let why = if self.route == Route::NeedsAlign {
            format!(
                "no window can be PMD-mapped when it runs; run `hugetext align {}` first (--force fills it anyway)",
                self.path.display()
            )
        } else if self.route == Route::None {
            format!("no PMD folios on this filesystem ({})", self.filesystem)
        } else if !self.blocked_by.is_empty() {
            format!(
                "running processes map it ({}); they get PMD folios once those exit, or use --replace",
                super::pid_list(&self.blocked_by)
            )
        } else {
            "no window became a PMD folio (see the notes)".into()
        };
        Some(format!(
            "{}: nothing warmed (0/{} windows): {why}",
            self.path.display(),
            self.eligible_windows
        ))
    }
}

/// No process maps the file after all: what could not be evicted stayed
/// small for another reason (pages pinned or under I/O), not "blocked".
pub(super) fn unblock(rep: &mut FileReport) {
    rep.small.other_kb += rep.small.blocked_kb;
    rep.small.blocked_kb = 0;
    rep.blocked_kb = 0;
    rep.blocked_windows = 0;
}

/// Read back the folio sizes of `t`'s ranges and classify what is small.
/// Also returns the offsets of the windows held in PMD folios.
pub(super) fn measure(t: &Target, fs: &str, stuck: &BTreeSet<u64>) -> Result<(FileReport, BTreeSet<u64>)> {
    // Windows of the huge unit (the PMD, or the contpte block with 64 KiB
    // pages).
    let (unit, unit_kind) = kernel::huge_unit();
    let unit = unit as u64;
    let unit_kb = unit / KIB;
    // The size now: the file may have been truncated or extended since it
    // was planned; only what is inside it now is measured and reported.
    let size = t.file.metadata().map(|m| m.len()).unwrap_or(t.size);
    let mut rep = FileReport {
        path: t.path.clone(),
        elf: t.elf,
        filesystem: fs.to_string(),
        route: Route::PmdReadahead,
        size,
        cached_kb: 0,
        unit_kb: unit / KIB,
        unit_folio_kb: 0,
        small_kb: 0,
        contpte_kb: kernel::cont_pte_size().map(|_| 0),
        blocked_kb: 0,
        small: SmallReasons::default(),
        eligible_windows: 0,
        unit_windows: 0,
        blocked_windows: 0,
        mappable_windows: 0,
        blocked_by: Vec::new(),
        ranges: Vec::new(),
        replaced: false,
        millis: 0.0,
        notes: Vec::new(),
    };
    let mut pmd_offsets = BTreeSet::new();
    let mut window_small_kb = 0;
    let mut blocked = 0u64;
    let mut unblocked_small = 0u64;
    for r in &t.ranges {
        let range = r.range();
        let range = range.start.min(size)..range.end.min(size);
        let w = pagecache::huge_windows_in(&range);
        let eligible = (w.end - w.start) / unit;
        let mut pmd_here = 0;
        for part in [
            range.start..w.start.max(range.start),
            w.clone(),
            w.end.max(range.start)..range.end,
        ] {
            let part = part.start..part.end.min(range.end);
            if part.is_empty() {
                continue;
            }
            if part == w && unit_kind == crate::elf::HugeUnit::Pmd {
                if let Some(n) = all_windows_pmd(&t.file, &w)? {
                    // Fast path: every window is PMD-mapped, hence one PMD folio.
                    let kb = n * unit_kb;
                    rep.cached_kb += kb;
                    rep.unit_folio_kb += kb;
                    pmd_here = n;
                    let mut o = w.start;
                    while o < w.end {
                        pmd_offsets.insert(o);
                        o += unit;
                    }
                    continue;
                }
            }
            let s = folio::scan_open(&t.file, &t.path, Some(part.clone()))?;
            let pk = s.huge_kb();
            rep.cached_kb += s.cached_kb;
            rep.unit_folio_kb += pk;
            let small = s.cached_kb - pk;
            rep.small_kb += small;
            if let (Some(c), Some(block)) = (rep.contpte_kb.as_mut(), kernel::cont_pte_size()) {
                *c += crate::inspect::contpte_kb(&s.folios_kb, block as u64 / KIB, unit_kb);
            }
            if part == w {
                pmd_here = s.unit_windows.len() as u64;
                pmd_offsets.extend(s.unit_windows.iter().copied());
                window_small_kb += small;
            } else {
                rep.small.head_tail_kb += small;
            }
        }
        let mut o = w.start;
        while o < w.end {
            if !pmd_offsets.contains(&o) {
                if stuck.contains(&o) {
                    blocked += 1;
                } else {
                    unblocked_small += 1;
                }
            }
            o += unit;
        }
        rep.eligible_windows += eligible;
        rep.unit_windows += pmd_here;
        if matches!(r.runtime, Runtime::Congruent | Runtime::NotElf) {
            rep.mappable_windows += pmd_here;
        }
        rep.ranges.push(RangeReport {
            range: r.clone(),
            eligible_windows: eligible,
            unit_windows: pmd_here,
        });
    }
    // Windows that stayed small hold up to a window each of small folios.
    rep.blocked_windows = blocked;
    rep.blocked_kb = (blocked * unit_kb).min(window_small_kb);
    rep.small.blocked_kb = rep.blocked_kb;
    let rest = window_small_kb - rep.blocked_kb;
    let no_large = crate::fsutil::is_memory_fs(fs) || (unblocked_small > 0 && rep.unit_windows == 0);
    if no_large {
        rep.small.no_large_folios_kb = rest;
        rep.route = Route::None;
    } else {
        rep.small.other_kb = rest;
    }
    Ok((rep, pmd_offsets))
}

/// Apply what is known about the filesystem to a report whose eligible
/// windows all stayed small. `Some(false)`: it gives no PMD folios at all,
/// so every small window is small for that reason (also those that running
/// processes map: their exit would not help). `Some(true)`: it does, so the
/// windows are small for another reason. `None`: not known; the guess of
/// [`measure`] stands (windows free to be re-read, none became a PMD folio).
pub(super) fn filesystem_verdict(rep: &mut FileReport, pmd_folios: Option<bool>) {
    let s = &mut rep.small;
    match pmd_folios {
        Some(false) => {
            s.no_large_folios_kb += s.blocked_kb + s.other_kb;
            s.blocked_kb = 0;
            s.other_kb = 0;
            rep.blocked_kb = 0;
            rep.blocked_windows = 0;
            rep.route = Route::None;
        }
        Some(true) if rep.route == Route::None => {
            s.other_kb += s.no_large_folios_kb;
            s.no_large_folios_kb = 0;
            rep.route = Route::PmdReadahead;
        }
        _ => {}
    }
}

/// Fast verification of whole windows: map them read-only at a congruent
/// address, touch the first page of each cached window (`MADV_RANDOM`, so a
/// page that is not cached is not read around), and read this mapping's
/// `FilePmdMapped` from `/proc/self/smaps`. The kernel PMD-maps only
/// PMD-size folios, so when every window is PMD-mapped, every window is one
/// PMD folio: `Some(number of windows)`. Otherwise `None`, and the caller
/// scans page by page ([`folio::scan_file`]), which is exact but slower.
fn all_windows_pmd(f: &File, w: &Range<u64>) -> Result<Option<u64>> {
    let pmd = kernel::pmd_size() as u64;
    let ps = kernel::page_size();
    let n = (w.end - w.start) / pmd;
    if n == 0 {
        return Ok(Some(0));
    }
    // Not every page cached (a sparse or cold file): no need to look closer.
    if kernel::cached_pages(f.as_fd(), w.start, w.end - w.start).is_some_and(|c| c < (w.end - w.start) / ps as u64) {
        return Ok(None);
    }
    // In chunks, so that memory stays bounded whatever the file's size.
    let chunk = 64 * pmd;
    let mut o = w.start;
    while o < w.end {
        let len = chunk.min(w.end - o) as usize;
        let k_n = len / pmd as usize;
        let map = Mapping::file_congruent(f.as_fd(), o, len, libc::PROT_READ, pmd as usize)?;
        map.madvise(0, len, libc::MADV_RANDOM)?;
        let res = map.resident()?;
        let per = (pmd as usize) / ps;
        for k in 0..k_n {
            if !res[k * per] {
                return Ok(None);
            }
            // The page is cached, so this maps it (and its folio) without
            // I/O; a file truncated meanwhile is an error, never SIGBUS.
            match map.populate_read(k * pmd as usize, ps) {
                Ok(()) => {}
                Err(e) if kernel::is_past_eof(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let kb = procfs::own_file_pmd_kb(map.addr())?;
        if kb != k_n as u64 * pmd / KIB {
            return Ok(None);
        }
        o += len as u64;
    }
    Ok(Some(n))
}

/// Why no window of `t` can be PMD-mapped at run time, in words (for a
/// target where [`Target::never_pmd_mapped`]).
pub(super) fn unmappable_why(t: &Target) -> String {
    let unit_w = crate::units::human(kernel::unit_size() as u64);
    if t.ranges.iter().any(|r| r.runtime == Runtime::Incongruent) {
        format!("a segment's vaddr − offset is not a multiple of {unit_w}")
    } else {
        format!("p_align < {unit_w}: the kernel loads it at a base that is only page-aligned")
    }
}

/// Add advice about the result (what to do about what stayed small).
pub(super) fn advise(t: &Target, rep: &mut FileReport) {
    if rep.route == Route::None && rep.eligible_windows > 0 {
        if crate::fsutil::is_memory_fs(&rep.filesystem) {
            // Already explained when warming.
        } else {
            rep.notes.push(format!(
                "PMD folios are impossible on this filesystem ({}): this kernel gives its files only small page-cache \
                 folios; put the file on ext4 (Linux ≥ 6.16) or xfs (≥ 5.18), or use `hugetext run` \
                 (copies the text to anonymous huge pages)",
                rep.filesystem
            ));
        }
    }
    if rep.small.other_kb > 0 && rep.route != Route::None {
        rep.notes.push(format!(
            "{} in whole windows stayed small without a mapping process (memory pressure, or dirty pages); run warm again",
            human(rep.small.other_kb * KIB)
        ));
    }
    if t.elf && rep.route != Route::NeedsAlign {
        let inc = t.ranges.iter().any(|r| {
            r.runtime == Runtime::Incongruent
                && pagecache::huge_windows_in(&r.range()).end > pagecache::huge_windows_in(&r.range()).start
        });
        let la = t
            .ranges
            .iter()
            .any(|r| r.runtime == Runtime::LoadAddress && !pagecache::huge_windows_in(&r.range()).is_empty());
        let (unit, kind) = kernel::huge_unit();
        let (unit_w, mapped) = (crate::units::human(unit as u64), kind.mapped());
        if inc {
            rep.notes.push(format!(
                "a segment's vaddr − offset is not a multiple of {unit_w}: its warm windows are never {mapped}; run `hugetext align` on the file"
            ));
        }
        if la {
            rep.notes.push(format!(
                "segments are congruent but p_align < {unit_w}: {mapped} only if the loader picks a {unit_w}-aligned base \
                 (libraries on ext4/xfs usually, PIE executables rarely); `hugetext align` raises p_align"
            ));
        }
    }
}
