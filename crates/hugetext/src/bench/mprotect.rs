//! Seed 004's benchmark: `mprotect()` a large anonymous region read-only,
//! then read-write, and rewrite it, 40 times, over three kinds of memory:
//!
//! 1. `pmd-thp-pte-mapped`: PMD THPs (`MADV_HUGEPAGE`, touched), then each
//!    THP PTE-mapped by splitting its VMA for a moment (`MADV_DONTFORK` +
//!    `MADV_DOFORK` on its first page), then `MADV_NOHUGEPAGE` so khugepaged
//!    leaves them PTE-mapped — as the seed's C program does;
//! 2. `mthp-64k`: 64 KiB mTHPs; needs
//!    `/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled` not
//!    `never` (changed only with `allow_sysfs`, and restored);
//! 3. `small-4k`: 4 KiB pages (`MADV_NOHUGEPAGE`).
//!
//! `seconds` is the whole loop as the seed times it (mprotects and the
//! rewrite); `mprotect_seconds` is the time inside the `mprotect` calls
//! alone, the part the seed's patch changes. Each case verifies the folio
//! sizes it ran on (pagemap + kpageflags) and the PMD mappings (smaps).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use super::stats::Summary;
use super::Progress;
use crate::kernel::{self, Mapping};
use crate::{folio, Error, Result};

const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes per case (the seed: 1 GiB); rounded down to whole PMDs.
    pub size: u64,
    /// mprotect read-only/read-write rounds (the seed: 40).
    pub loops: u32,
    /// Runs per case (each case is run `runs` times, cases interleaved).
    pub runs: u32,
    /// Allow setting `hugepages-64kB/enabled` to `madvise` for case 2 (and
    /// restoring it afterwards).
    pub allow_sysfs: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            size: 1 << 30,
            loops: 40,
            runs: 3,
            allow_sysfs: false,
        }
    }
}

/// The seed's three cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Case {
    PmdThpPteMapped,
    Mthp64k,
    Small4k,
}

/// All cases in the seed's order.
pub const CASES: [Case; 3] = [Case::PmdThpPteMapped, Case::Mthp64k, Case::Small4k];

impl Case {
    /// Name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Case::PmdThpPteMapped => "pmd-thp-pte-mapped",
            Case::Mthp64k => "mthp-64k",
            Case::Small4k => "small-4k",
        }
    }
    /// The seed's description.
    pub fn description(self) -> &'static str {
        match self {
            Case::PmdThpPteMapped => "PMD THPs, then PTE-mapped",
            Case::Mthp64k => "64 KiB mTHPs",
            Case::Small4k => "4 KiB pages",
        }
    }
}

/// One case's result: numbers, or why the kernel cannot make it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseReport {
    /// The seed's description of the case.
    pub description: &'static str,
    /// Median seconds of the whole loop; `null` when not available.
    pub seconds: Option<f64>,
    /// Median seconds inside `mprotect` calls alone.
    pub mprotect_seconds: Option<f64>,
    /// Why the case could not be made on this kernel (then no numbers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_available: Option<String>,
    /// Per-run statistics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<BTreeMap<&'static str, Summary>>,
    /// Verified memory state of the first run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
}

/// The memory a case ran on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct State {
    /// kB per folio size (key in kB), from pagemap + kpageflags; empty when
    /// PFNs are not readable.
    pub folios_kb: BTreeMap<u64, u64>,
    /// Share of the region in the folio size this case is about, in percent.
    pub expected_folio_pct: f64,
    /// True when at least 90% of the region is in that folio size (false
    /// too when folio sizes could not be read).
    pub verified: bool,
    /// smaps `AnonHugePages` (PMD-mapped) after touching, before the loop
    /// setup that PTE-maps (case 1) — kB.
    pub anon_huge_kb_after_touch: u64,
    /// smaps `AnonHugePages` while the loop ran — kB (0 = all PTE-mapped).
    pub anon_huge_kb_during: u64,
    /// Increase of `hugepages-64kB/stats/anon_fault_alloc` (case 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mthp_64k_fault_alloc: Option<u64>,
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub kernel: String,
    pub size_bytes: u64,
    pub loops: u32,
    pub runs: u32,
    /// `/sys/kernel/mm/transparent_hugepage/enabled`.
    pub thp_enabled: Option<String>,
    /// `hugepages-64kB/enabled` as found (before any `--allow-sysfs` change).
    pub mthp_64k_enabled: Option<String>,
    /// Whether `hugepages-64kB/enabled` was changed for the run and restored.
    pub sysfs_changed: bool,
    pub cases: BTreeMap<&'static str, CaseReport>,
}

/// Restores a sysfs file on drop.
struct SysfsRestore {
    path: String,
    old: String,
}

impl Drop for SysfsRestore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.old);
    }
}

fn mthp_path(kb: u64, file: &str) -> String {
    format!("{THP_DIR}/hugepages-{kb}kB/{file}")
}

fn read_counter(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether anonymous 64 KiB mTHPs can be had in a `MADV_HUGEPAGE` region:
/// Ok(()) or the reason.
fn mthp_64k_usable() -> std::result::Result<(), String> {
    let path = mthp_path(64, "enabled");
    let Some(v) = kernel::sysfs_choice(&path) else {
        return Err(
            "this kernel has no 64 KiB mTHP size (no hugepages-64kB in /sys/kernel/mm/transparent_hugepage)".into(),
        );
    };
    let top = kernel::thp_enabled().unwrap_or_else(|| "never".into());
    match v.as_str() {
        "never" => Err(format!(
            "hugepages-64kB/enabled=never; enable with `echo madvise > {path}` or run with --allow-sysfs"
        )),
        "inherit" if top == "never" => Err(format!(
            "hugepages-64kB/enabled=inherit and transparent_hugepage/enabled=never; enable with `echo madvise > {path}` or run with --allow-sysfs"
        )),
        _ => Ok(()),
    }
}

/// Run the benchmark.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    let size = super::pmd_multiple(opts.size)?;
    if opts.runs == 0 || opts.loops == 0 {
        return Err(Error::Invalid("--runs and --loops must be at least 1".into()));
    }
    let thp = kernel::thp_enabled();
    let mthp_before = kernel::sysfs_choice(mthp_path(64, "enabled"));
    let mut guard = None;
    let mut mthp_ok = mthp_64k_usable();
    if mthp_ok.is_err() && opts.allow_sysfs && mthp_before.is_some() {
        let path = mthp_path(64, "enabled");
        let old = mthp_before.clone().unwrap();
        std::fs::write(&path, "madvise")
            .map_err(|e| Error::Permission(format!("cannot write {path} ({e}): --allow-sysfs needs root")))?;
        guard = Some(SysfsRestore { path, old });
        mthp_ok = mthp_64k_usable();
    }
    let sysfs_changed = guard.is_some();

    let mut results: BTreeMap<Case, Vec<(f64, f64, State)>> = BTreeMap::new();
    let runnable: Vec<Case> = CASES
        .iter()
        .copied()
        .filter(|c| *c != Case::Mthp64k || mthp_ok.is_ok())
        .collect();
    progress.start(u64::from(opts.runs) * runnable.len() as u64);
    if let Err(why) = &mthp_ok {
        progress.note(&format!("mthp-64k not available: {why}"));
    }
    for r in 0..opts.runs {
        for &c in &runnable {
            let out = run_case(c, size as usize, opts.loops)?;
            progress.step(&format!("run {}/{}: {} {:.2} s", r + 1, opts.runs, c.name(), out.0));
            results.entry(c).or_default().push(out);
        }
    }
    drop(guard);

    let mut cases = BTreeMap::new();
    for c in CASES {
        let rep = match results.remove(&c) {
            Some(rs) => {
                let secs: Vec<f64> = rs.iter().map(|r| r.0).collect();
                let mp: Vec<f64> = rs.iter().map(|r| r.1).collect();
                let mut stats = BTreeMap::new();
                stats.insert("seconds", Summary::of(&secs));
                stats.insert("mprotect_seconds", Summary::of(&mp));
                CaseReport {
                    description: c.description(),
                    seconds: Some(stats["seconds"].median),
                    mprotect_seconds: Some(stats["mprotect_seconds"].median),
                    not_available: None,
                    stats: Some(stats),
                    state: rs.into_iter().next().map(|r| r.2),
                }
            }
            None => CaseReport {
                description: c.description(),
                seconds: None,
                mprotect_seconds: None,
                not_available: Some(mthp_ok.clone().err().unwrap_or_default()),
                stats: None,
                state: None,
            },
        };
        cases.insert(c.name(), rep);
    }
    Ok(Report {
        kernel: kernel::KernelVersion::current().to_string(),
        size_bytes: size,
        loops: opts.loops,
        runs: opts.runs,
        thp_enabled: thp,
        mthp_64k_enabled: mthp_before,
        sysfs_changed,
        cases,
    })
}

/// Write zeros over the region in a way the compiler keeps.
fn bzero(m: &Mapping) {
    // SAFETY: the mapping is ours and read-write while this runs.
    unsafe { std::ptr::write_bytes(m.as_ptr(), 0, m.len()) };
    std::hint::black_box(m.as_ptr());
}

fn mprotect(m: &Mapping, prot: i32) -> Result<()> {
    // SAFETY: changing protection of our own mapping; nothing else uses it.
    let r = unsafe { libc::mprotect(m.as_ptr().cast(), m.len(), prot) };
    if r != 0 {
        return Err(Error::last_os("mprotect"));
    }
    Ok(())
}

/// Prepare the region for `case`, run the loop; (seconds, mprotect seconds, state).
fn run_case(case: Case, size: usize, loops: u32) -> Result<(f64, f64, State)> {
    let pmd = kernel::pmd_size();
    let ps = kernel::page_size();
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let m = Mapping::anon_aligned(size, rw, pmd)?;
    let mut fault_alloc_before = None;
    match case {
        Case::PmdThpPteMapped => {
            m.madvise(0, size, kernel::MADV_HUGEPAGE)?;
            bzero(&m);
        }
        Case::Mthp64k => {
            // With MADV_HUGEPAGE the fault path would pick PMD THPs first. A
            // PMD whose page table already exists gets mTHPs instead: touch
            // one page per PMD while the region is MADV_NOHUGEPAGE (4 KiB,
            // creates the page table), free it again (the table stays), then
            // allow huge pages and fill. `verified` below checks the result.
            m.madvise(0, size, kernel::MADV_NOHUGEPAGE)?;
            for off in (0..size).step_by(pmd) {
                // SAFETY: inside our read-write mapping.
                unsafe { std::ptr::write_volatile(m.as_ptr().add(off + pmd - ps), 0) };
            }
            // Free those pages again: the page tables stay.
            for off in (0..size).step_by(pmd) {
                m.madvise(off + pmd - ps, ps, kernel::MADV_DONTNEED)?;
            }
            m.madvise(0, size, kernel::MADV_HUGEPAGE)?;
            fault_alloc_before = read_counter(&mthp_path(64, "stats/anon_fault_alloc"));
            bzero(&m);
        }
        Case::Small4k => {
            m.madvise(0, size, kernel::MADV_NOHUGEPAGE)?;
            bzero(&m);
        }
    }
    let anon_huge_kb_after_touch = crate::procfs::own_mapping_stats(m.addr() as u64)?.map_or(0, |s| s.anon_huge_kb);
    let mthp_64k_fault_alloc = fault_alloc_before
        .and_then(|b| read_counter(&mthp_path(64, "stats/anon_fault_alloc")).map(|a| a.saturating_sub(b)));
    // As the seed: no khugepaged collapse during the loop, then rewrite.
    m.madvise(0, size, kernel::MADV_NOHUGEPAGE)?;
    bzero(&m);
    if case == Case::PmdThpPteMapped {
        // PTE-map each THP by splitting the VMA around its first page.
        for off in (0..size).step_by(pmd) {
            m.madvise(off, ps, libc::MADV_DONTFORK)?;
            m.madvise(off, ps, libc::MADV_DOFORK)?;
        }
    }
    let anon_huge_kb_during = crate::procfs::own_mapping_stats(m.addr() as u64)?.map_or(0, |s| s.anon_huge_kb);
    let folios_kb = anon_folios(&m)?;
    let expected_kb = match case {
        Case::PmdThpPteMapped => pmd as u64 / 1024,
        Case::Mthp64k => 64,
        Case::Small4k => ps as u64 / 1024,
    };
    let total: u64 = folios_kb.values().sum();
    let expected_folio_pct = super::exec::pct(folios_kb.get(&expected_kb).copied().unwrap_or(0), total);

    let mut in_mprotect = 0.0;
    let t = Instant::now();
    for _ in 0..loops {
        let a = Instant::now();
        mprotect(&m, libc::PROT_READ)?;
        mprotect(&m, rw)?;
        in_mprotect += a.elapsed().as_secs_f64();
        bzero(&m);
    }
    let secs = t.elapsed().as_secs_f64();
    Ok((
        secs,
        in_mprotect,
        State {
            folios_kb,
            expected_folio_pct,
            verified: expected_folio_pct >= 90.0,
            anon_huge_kb_after_touch,
            anon_huge_kb_during,
            mthp_64k_fault_alloc,
        },
    ))
}

/// Folio sizes backing an anonymous mapping of ours: kB per folio size.
/// Empty when PFNs or `/proc/kpageflags` are not readable.
fn anon_folios(m: &Mapping) -> Result<BTreeMap<u64, u64>> {
    let mut out = BTreeMap::new();
    let Ok(kpf) = folio::open_kpageflags() else {
        return Ok(out);
    };
    if !kernel::has_cap_sys_admin() || !Path::new("/proc/self/pagemap").exists() {
        return Ok(out);
    }
    let ps = kernel::page_size();
    let chunk = 64 * kernel::pmd_size();
    let mut off = 0;
    while off < m.len() {
        let len = chunk.min(m.len() - off);
        let pm = folio::read_pagemap(None, m.addr() + off, len / ps)?;
        for sz in folio::folio_sizes(&kpf, &pm)? {
            if sz > 0 {
                *out.entry(sz / 1024).or_default() += ps as u64 / 1024;
            }
        }
        off += len;
    }
    Ok(out)
}
