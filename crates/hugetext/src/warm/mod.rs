//! `warm`: put programs' text (and their libraries') into PMD-sized page-cache
//! folios and verify the result.
//!
//! For each file: work out which byte ranges to warm (an ELF file's read-only
//! `PT_LOAD` segments, any other file whole), evict those ranges' clean,
//! unmapped page cache, refill them bounded to the ranges with PMD-order
//! folios ([`crate::pagecache::fill_bounded`]), and read the folio sizes back
//! ([`crate::folio::scan_file`]). Every later process that maps a warmed
//! window at a 2 MiB-congruent address gets it PMD-mapped, with no copy
//! (doc/kernel-facts.md §1).
//!
//! What can stay small, and why, is reported per file:
//! - the head and tail of a range (parts of a 2 MiB window) never fit a PMD;
//! - windows with pages that running processes map cannot be evicted
//!   ("blocked"; [`mapping_pids`] names the processes). `MADV_COLLAPSE`
//!   collapses them in place where the kernel allows it
//!   (`CONFIG_READ_ONLY_THP_FOR_FS`); otherwise [`replace_and_warm`] writes a
//!   warmed identical copy and renames it over the original;
//! - filesystems without large folios (tmpfs with `shmem_enabled=never`,
//!   btrfs here) never hold PMD folios for regular files.
//!
//! The module is split by stage: [`plan`](fn@plan) (what to warm),
//! [`warm_target`] (here), [`warm_all`] over all files (`run`), the report and its measurement (`report`),
//! `--replace` (`replace`), and the config file and memory guard (`config`).

mod config;
mod plan;
mod replace;
mod report;
mod run;

pub use crate::units::human;
pub use config::{check_memory, path_unit, Config, MemLimit};
pub use plan::{
    cut_ranges, open_regular, plan, plan_all, plan_exact, resolve_deps, resolve_link, restrict_to_hot, Runtime, Target,
    WarmRange,
};
pub use replace::{replace_and_warm, ReplaceAllow};
pub use report::{FileReport, RangeReport, SmallReasons};
pub use run::{warm_all, CollapseState, FileOutcome, WarmReport};
// Who maps or writes a file: procfs facts that warm and agent use.
pub use crate::procfs::{mapping_pids_file, mapping_pids_of, writer_pids_of, ProcRef};

use std::collections::BTreeSet;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use crate::kernel::{self, Mapping};
use crate::{fsutil, pagecache, Error, Result};

const KIB: u64 = 1024;

// ---------------------------------------------------------------------------
// Who maps a file

/// The processes that map `path` (see [`mapping_pids_of`]). `path` is
/// opened as a path from `/proc` ([`open_regular`]): a FIFO or a symbolic
/// link swapped in there is refused, without blocking. For a planned file,
/// [`target_mappers`].
pub fn mapping_pids(path: &Path) -> Result<Vec<ProcRef>> {
    mapping_pids_file(&open_regular(path)?).map_err(|e| Error::io(path, e))
}

/// The processes that map the planned file `t` (its open file: the path is
/// not opened again).
pub fn target_mappers(t: &Target) -> Result<Vec<ProcRef>> {
    mapping_pids_file(&t.file).map_err(|e| Error::io(&t.path, e))
}

/// `pid 12 (comm), …` for notes and refusals.
fn pid_list(v: &[ProcRef]) -> String {
    if v.is_empty() {
        return "no process found in /proc/*/maps".into();
    }
    let mut s: Vec<String> = v.iter().take(8).map(|p| format!("{} ({})", p.pid, p.comm)).collect();
    if v.len() > 8 {
        s.push(format!("and {} more", v.len() - 8));
    }
    format!("pid {}", s.join(", "))
}

// ---------------------------------------------------------------------------
// Warming

/// How a file's page cache was (or could not be) put into PMD folios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// Evict + refill through a `MADV_HUGEPAGE` mapping (PMD-order readahead).
    PmdReadahead,
    /// The above, then `MADV_COLLAPSE` for windows that stayed small.
    PmdReadaheadCollapse,
    /// A warmed identical copy renamed over the original (`--replace`).
    Replace,
    /// Nothing can give PMD folios here (see the notes).
    None,
    /// Nothing filled: no window of the file can be PMD-mapped when it
    /// runs (`hugetext align` first; `--force` fills anyway).
    NeedsAlign,
}

/// Options of [`warm_target`].
#[derive(Debug, Clone, Default)]
pub struct WarmOptions {
    /// Try `MADV_COLLAPSE` on windows that stayed small (default on).
    pub no_collapse: bool,
    /// Replace files whose windows are blocked by running processes with a
    /// warmed identical copy.
    pub replace: bool,
    /// What `replace` may override.
    pub replace_allow: ReplaceAllow,
    /// Fill PMD folios even for text no process can PMD-map
    /// ([`Target::never_pmd_mapped`]).
    pub force: bool,
}

/// Per-run state shared between files (what was learnt about the kernel).
#[derive(Debug, Default)]
pub struct WarmContext {
    /// `None` until a collapse was tried; then whether it works.
    pub collapse: Option<pagecache::CollapseSupport>,
    /// Per filesystem (`st_dev`), whether it gives PMD-order page-cache
    /// folios ([`crate::pagecache::probe_pmd_folios`]; `None`: could not be probed).
    /// Asked only when a file's windows all stayed small.
    pub pmd_folios: std::collections::HashMap<u64, Option<bool>>,
}

/// Warm one planned file and report what its page cache holds afterwards.
pub fn warm_target(t: &Target, opts: &WarmOptions, ctx: &mut WarmContext) -> Result<FileReport> {
    let start = Instant::now();
    let f: &File = &t.file;
    let fs = fsutil::fs_name(f);
    let mut notes = t.notes.clone();
    notes.extend(replaced_since_planned(t));
    if t.never_pmd_mapped() && !opts.force {
        return needs_align(t, &fs, start);
    }

    let mut stuck = BTreeSet::new();
    let mut shrank = false;
    if fsutil::is_memory_fs(&fs) {
        notes.push(format!(
            "{fs} keeps files in memory with no backing store to re-read them from, so warm cannot change their folios: \
             PMD folios are impossible here unless it is mounted with huge=always or huge=within_size \
             (shmem_enabled is {}) and the file is written afresh; or put the file on ext4 (Linux ≥ 6.16) or xfs",
            match kernel::shmem_mode() {
                Some(Ok(m)) => m.as_str().to_string(),
                Some(Err(e)) => e,
                None => "absent".into(),
            }
        ));
    } else {
        for r in &t.ranges {
            pagecache::evict(f, page_out(&r.range()))?;
        }
        // What is still cached in whole windows after eviction could not be
        // evicted: some process maps it (or it is dirty).
        for r in &t.ranges {
            stuck.extend(resident_windows(f, &pagecache::huge_windows_in(&r.range()))?);
        }
        // Only what is in the file now (it may have shrunk since it was
        // planned); a file that shrinks during the fill ends it early.
        let size = f.metadata().map(|m| m.len()).unwrap_or(t.size);
        for r in &t.ranges {
            let r = r.range();
            match pagecache::fill_bounded(f, r.start.min(size)..r.end.min(size)) {
                Err(e) if kernel::is_past_eof(&e) => {
                    shrank = true;
                    break;
                }
                r => r?,
            }
        }
    }

    let (mut report, have) = report::measure(t, &fs, &stuck)?;
    if report.size != t.size || shrank {
        notes.push(format!(
            "the file changed size while it was warmed ({} bytes when planned, {} now): what it holds now is reported",
            t.size, report.size
        ));
    }
    report.notes = notes.clone();

    // Better route: collapse windows that stayed small in place.
    let small_windows = small_windows(t, &have);
    if !small_windows.is_empty() && !opts.no_collapse && !fsutil::is_memory_fs(&fs) {
        let mut collapsed = 0;
        if !matches!(ctx.collapse, Some(pagecache::CollapseSupport::Unavailable(_))) {
            for w in &small_windows {
                match pagecache::collapse_window(f, *w) {
                    Ok(()) => {
                        collapsed += 1;
                        ctx.collapse = Some(pagecache::CollapseSupport::Available);
                    }
                    Err(Error::Sys { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
                        if ctx.collapse.is_none() {
                            ctx.collapse = Some(pagecache::CollapseSupport::Unavailable(
                                pagecache::collapse_refusal().into(),
                            ));
                        }
                        break;
                    }
                    // Transient (EAGAIN, ENOMEM, EBUSY): try the others.
                    Err(Error::Sys { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if collapsed > 0 {
            report = report::measure(t, &fs, &stuck)?.0;
            report.route = Route::PmdReadaheadCollapse;
            // Windows that running processes map could not be evicted: the
            // kernel collapsed them under those processes, and drops their
            // page tables of the range, so they fault them back with PMDs.
            let holders = if stuck.is_empty() {
                Vec::new()
            } else {
                target_mappers(t)?
            };
            let under = match holders.is_empty() {
                true => String::new(),
                false => format!(
                    " while running processes map them ({}; they map them with PMDs at their next fault)",
                    pid_list(&holders)
                ),
            };
            report.notes = notes_with(
                &notes,
                format!("MADV_COLLAPSE collapsed {collapsed} window(s) in place{under}"),
            );
        } else if let Some(pagecache::CollapseSupport::Unavailable(why)) = &ctx.collapse {
            report
                .notes
                .push(format!("{why}: {} window(s) stayed small", small_windows.len()));
        }
    }

    // Nothing became a PMD folio: is it the filesystem? The answer decides
    // whether waiting for processes to exit (or --replace) can help.
    if report.eligible_windows > 0 && report.unit_windows == 0 && !fsutil::is_memory_fs(&fs) {
        let dev = t.meta.dev();
        let dir = fsutil::dir_of(&t.path);
        let verdict = *ctx
            .pmd_folios
            .entry(dev)
            .or_insert_with(|| pagecache::probe_pmd_folios(&dir));
        report::filesystem_verdict(&mut report, verdict);
    }

    if report.blocked_windows > 0 {
        report.blocked_by = target_mappers(t)?;
        if opts.replace {
            return replace_and_warm(t, opts, ctx, report, start);
        }
        if report.blocked_by.is_empty() {
            // Nothing maps the file (any more): the pages were pinned another
            // way (a process that has exited since, pages under I/O or locked).
            report.notes.push(format!(
                "{} window(s) ({}) could not be evicted although no process maps the file now \
                 (a process that has exited since, or pages under I/O): run warm again",
                report.blocked_windows,
                human(report.blocked_kb * KIB),
            ));
            report::unblock(&mut report);
        } else {
            report.notes.push(format!(
                "{} window(s) ({}) stay small: running processes map them ({}); they get PMD folios once those exit, \
                 or use --replace (new processes get a warmed copy)",
                report.blocked_windows,
                human(report.blocked_kb * KIB),
                pid_list(&report.blocked_by)
            ));
        }
    }
    report::advise(t, &mut report);
    report.millis = start.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

/// A note when the path no longer names the planned file (it was replaced
/// or removed after planning): warm works on the planned file, which is
/// what it checked, but processes that start now get what is there now.
fn replaced_since_planned(t: &Target) -> Option<String> {
    let now = std::fs::symlink_metadata(&t.path).ok();
    changed_note(now.as_ref().map(|m| t.is_same_file(m)))
}

/// The note of [`replaced_since_planned`], given whether the path still
/// names the planned file (`None`: it names nothing now). Pure.
fn changed_note(same: Option<bool>) -> Option<String> {
    let now = match same {
        Some(true) => return None,
        Some(false) => "another file is at this path now (it was replaced after planning)",
        None => "no file is at this path now (it was removed after planning)",
    };
    Some(format!(
        "{now}: the planned file was warmed; run warm again to warm what is there now"
    ))
}

/// The report of a file whose text no process can PMD-map: nothing filled,
/// what the page cache holds measured as it is, and why.
fn needs_align(t: &Target, fs: &str, start: Instant) -> Result<FileReport> {
    let (mut report, _) = report::measure(t, fs, &BTreeSet::new())?;
    report.route = Route::NeedsAlign;
    // Small because nothing was filled, not for the filesystem's sake.
    report.small.other_kb += std::mem::take(&mut report.small.no_large_folios_kb);
    report.notes = t.notes.clone();
    report.notes.push(format!(
        "nothing filled: no window of its text can be PMD-mapped when it runs ({}); \
         run `hugetext align {}` first, then warm the aligned file (--force fills it anyway)",
        report::unmappable_why(t),
        t.path.display()
    ));
    report.millis = start.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

/// How many of `t`'s eligible windows are held in one PMD-size folio now,
/// measured as [`warm_target`] measures its result (needs PFN access).
pub fn pmd_windows_now(t: &Target) -> Result<u64> {
    Ok(report::measure(t, "", &BTreeSet::new())?.0.unit_windows)
}

fn notes_with(notes: &[String], extra: String) -> Vec<String> {
    let mut v = notes.to_vec();
    v.push(extra);
    v
}

/// Page-rounded outwards.
fn page_out(r: &Range<u64>) -> Range<u64> {
    let ps = kernel::page_size() as u64;
    r.start / ps * ps..r.end.div_ceil(ps) * ps
}

/// Start offsets of the windows in `windows` that hold any cached page.
fn resident_windows(f: &File, windows: &Range<u64>) -> Result<Vec<u64>> {
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    let unit = kernel::unit_size() as u64;
    let ps = kernel::page_size() as u64;
    let len = (windows.end - windows.start) as usize;
    let map = Mapping::file_congruent(f.as_fd(), windows.start, len, libc::PROT_READ, unit as usize)?;
    let res = map.resident()?;
    let per = (unit / ps) as usize;
    Ok(res
        .chunks(per)
        .enumerate()
        .filter(|(_, c)| c.iter().any(|r| *r))
        .map(|(i, _)| windows.start + i as u64 * unit)
        .collect())
}

/// Eligible windows of `t` that are not in the PMD-folio set `have`.
fn small_windows(t: &Target, have: &BTreeSet<u64>) -> Vec<u64> {
    let unit = kernel::unit_size() as u64;
    let mut v = Vec::new();
    for r in &t.ranges {
        let w = pagecache::huge_windows_in(&r.range());
        let mut o = w.start;
        while o < w.end {
            if !have.contains(&o) {
                v.push(o);
            }
            o += unit;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::changed_note;

    #[test]
    fn a_path_that_names_another_file_is_noted() {
        assert_eq!(changed_note(Some(true)), None);
        assert!(changed_note(Some(false)).unwrap().contains("replaced after planning"));
        assert!(changed_note(None).unwrap().contains("removed after planning"));
    }
}
