//! The test program of the Linux "Optimize mprotect() for large folios"
//! patches: `mprotect()` a large anonymous region read-only, then
//! read-write, and rewrite it, 40 times, over three kinds of memory:
//!
//! 1. `pmd-thp-pte-mapped`: PMD THPs (`MADV_HUGEPAGE`, touched), then each
//!    THP PTE-mapped by splitting its VMA for a moment (`MADV_DONTFORK` +
//!    `MADV_DOFORK` on its first page), then `MADV_NOHUGEPAGE` so khugepaged
//!    leaves them PTE-mapped — as the test program does;
//! 2. `mthp-64k`: 64 KiB mTHPs; needs
//!    `/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled` not
//!    `never` (changed only with `allow_sysfs`, and restored);
//! 3. `small-4k`: 4 KiB pages (`MADV_NOHUGEPAGE`).
//!
//! `seconds` is the whole loop as the test program times it (mprotects and
//! the rewrite); `mprotect_seconds` is the time inside the `mprotect` calls
//! alone, the part the patches change. Each case verifies the folio sizes it
//! ran on (pagemap + kpageflags) and the PMD mappings (smaps).
//!
//! A run prepares every case's region first (so it holds `3 × size` of
//! memory), then runs the loop round by round with the cases alternating
//! within each round, in an order rotated by run and round: drift on the
//! machine hits all cases alike, and each case's ratio to `small-4k` is
//! taken run by run ([`stats::paired_ratio`]).

use hugetext_abi::thp::{SizeMode, ThpMode};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use super::stats::{self, PairedRatio, Summary};
use super::{Progress, Stopped, Until};
use crate::kernel::{self, Mapping};
use crate::{folio, Error, Result};

const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes per case (the test program: 1 GiB); rounded down to whole PMDs.
    pub size: u64,
    /// mprotect read-only/read-write rounds (the test program: 40).
    pub loops: u32,
    /// Runs (the minimum with `until.ci_width`); each run measures every
    /// case, interleaved round by round.
    pub runs: u32,
    /// Allow setting `hugepages-64kB/enabled` to `madvise` for case 2 (and
    /// restoring it afterwards).
    pub allow_sysfs: bool,
    /// Seed of the bootstrap.
    pub seed: u64,
    /// When to stop adding runs.
    pub until: Until,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            size: 1 << 30,
            loops: 40,
            runs: 5,
            allow_sysfs: false,
            seed: 0x5eed004,
            until: Until::default(),
        }
    }
}

/// The three cases of the patches' test program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Case {
    PmdThpPteMapped,
    Mthp64k,
    Small4k,
}

/// All cases in the test program's order.
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
    /// The test program's description.
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
    /// The test program's description of the case.
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
    pub stats: Option<CaseStats>,
    /// Verified memory state of the first run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
}

/// Statistics of one case over the runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseStats {
    pub mprotect_seconds: Summary,
    pub seconds: Summary,
}

/// The three cases' results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cases {
    #[serde(rename = "mthp-64k")]
    pub mthp_64k: CaseReport,
    #[serde(rename = "pmd-thp-pte-mapped")]
    pub pmd_thp_pte_mapped: CaseReport,
    #[serde(rename = "small-4k")]
    pub small_4k: CaseReport,
}

impl Cases {
    /// One case's result.
    pub fn get(&self, c: Case) -> &CaseReport {
        match c {
            Case::PmdThpPteMapped => &self.pmd_thp_pte_mapped,
            Case::Mthp64k => &self.mthp_64k,
            Case::Small4k => &self.small_4k,
        }
    }
}

/// Each large-folio case against 4 KiB pages, paired run by run (below 1:
/// faster than small pages).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratios {
    /// Loop seconds, pmd-thp-pte-mapped / small-4k.
    pub pmd_thp_pte_mapped_over_small_4k: PairedRatio,
    /// Seconds inside mprotect, pmd-thp-pte-mapped / small-4k.
    pub pmd_thp_pte_mapped_over_small_4k_in_mprotect: PairedRatio,
    /// Loop seconds, mthp-64k / small-4k (when the case ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mthp_64k_over_small_4k: Option<PairedRatio>,
    /// Seconds inside mprotect, mthp-64k / small-4k (when the case ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mthp_64k_over_small_4k_in_mprotect: Option<PairedRatio>,
}

impl Ratios {
    /// Every ratio that was measured, with its JSON name.
    pub fn all(&self) -> Vec<(&'static str, &PairedRatio)> {
        let mut v = vec![
            (
                "pmd_thp_pte_mapped_over_small_4k",
                &self.pmd_thp_pte_mapped_over_small_4k,
            ),
            (
                "pmd_thp_pte_mapped_over_small_4k_in_mprotect",
                &self.pmd_thp_pte_mapped_over_small_4k_in_mprotect,
            ),
        ];
        if let Some(r) = &self.mthp_64k_over_small_4k {
            v.push(("mthp_64k_over_small_4k", r));
        }
        if let Some(r) = &self.mthp_64k_over_small_4k_in_mprotect {
            v.push(("mthp_64k_over_small_4k_in_mprotect", r));
        }
        v
    }

    /// Width of the widest interval.
    pub fn widest(&self) -> f64 {
        self.all().iter().map(|(_, r)| r.width()).fold(0.0, f64::max)
    }
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
    /// Runs made.
    pub runs: u32,
    /// Why measuring stopped.
    pub stopped: Stopped,
    /// `/sys/kernel/mm/transparent_hugepage/enabled`.
    #[serde(serialize_with = "crate::kernel::serialize_thp_mode")]
    pub thp_enabled: Option<ThpMode>,
    /// `hugepages-64kB/enabled` as found (before any `--allow-sysfs` change).
    pub mthp_64k_enabled: Option<String>,
    /// Whether `hugepages-64kB/enabled` was changed for the run and restored.
    pub sysfs_changed: bool,
    pub cases: Cases,
    /// Each case against 4 KiB pages, paired run by run, with 95% CIs.
    pub ratios: Ratios,
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
fn mthp_64k_usable() -> Result<()> {
    let path = mthp_path(64, "enabled");
    let mode = match kernel::size_mode(64) {
        None => {
            return Err(Error::Unsupported(
                "this kernel has no 64 KiB mTHP size (no hugepages-64kB in /sys/kernel/mm/transparent_hugepage)".into(),
            ))
        }
        Some(Err(e)) => return Err(Error::Unsupported(e)),
        Some(Ok(m)) => m,
    };
    let top = kernel::thp_mode().unwrap_or(ThpMode::Never);
    match mode {
        SizeMode::Never => Err(Error::Unsupported(format!(
            "hugepages-64kB/enabled=never; enable with `echo madvise > {path}` or run with --allow-sysfs"
        ))),
        SizeMode::Inherit if top == ThpMode::Never => Err(Error::Unsupported(format!(
            "hugepages-64kB/enabled=inherit and transparent_hugepage/enabled=never; enable with `echo madvise > {path}` or run with --allow-sysfs"
        ))),
        _ => Ok(()),
    }
}

/// Run the benchmark.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    let size = super::pmd_multiple(opts.size)?;
    if opts.runs == 0 || opts.loops == 0 {
        return Err(Error::Invalid("--runs and --loops must be at least 1".into()));
    }
    opts.until.validate()?;
    let thp = kernel::thp_mode();
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

    let runnable: Vec<Case> = CASES
        .iter()
        .copied()
        .filter(|c| *c != Case::Mthp64k || mthp_ok.is_ok())
        .collect();
    let mut total_steps = u64::from(opts.runs) * runnable.len() as u64;
    progress.start(total_steps);
    if let Err(why) = &mthp_ok {
        progress.note(&format!("mthp-64k not available: {why}"));
    }
    // Per case (CASES order): every run's (seconds, mprotect seconds, state).
    let mut results: [Vec<Measured>; 3] = Default::default();
    let started = std::time::Instant::now();
    let mut r = 0u32;
    let stopped = loop {
        if r >= opts.runs {
            let widest = ratios(&results, opts.seed).widest();
            if let Some(why) = opts.until.stop(r, opts.runs, widest, started.elapsed()) {
                break why;
            }
            total_steps += runnable.len() as u64;
            progress.start(total_steps);
        }
        for (c, m) in run_cases(&runnable, r as usize, size as usize, opts.loops)? {
            progress.step(&format!("run {}: {} {:.2} s", r + 1, c.name(), m.seconds));
            results[case_index(c)].push(m);
        }
        r += 1;
    };
    drop(guard);

    let ratios = ratios(&results, opts.seed);
    let [pmd, mthp, small] = results;
    let report = |c: Case, rs: Vec<Measured>| -> CaseReport {
        if rs.is_empty() {
            return CaseReport {
                description: c.description(),
                seconds: None,
                mprotect_seconds: None,
                not_available: Some(mthp_ok.as_ref().err().map(Error::to_string).unwrap_or_default()),
                stats: None,
                state: None,
            };
        }
        let secs: Vec<f64> = rs.iter().map(|m| m.seconds).collect();
        let mp: Vec<f64> = rs.iter().map(|m| m.mprotect_seconds).collect();
        let stats = CaseStats {
            seconds: Summary::of(&secs),
            mprotect_seconds: Summary::of(&mp),
        };
        CaseReport {
            description: c.description(),
            seconds: Some(stats.seconds.median),
            mprotect_seconds: Some(stats.mprotect_seconds.median),
            not_available: None,
            stats: Some(stats),
            state: rs.into_iter().next().map(|m| m.state),
        }
    };
    Ok(Report {
        kernel: kernel::KernelVersion::current().to_string(),
        size_bytes: size,
        loops: opts.loops,
        runs: r,
        stopped,
        thp_enabled: thp,
        mthp_64k_enabled: mthp_before,
        sysfs_changed,
        cases: Cases {
            pmd_thp_pte_mapped: report(Case::PmdThpPteMapped, pmd),
            mthp_64k: report(Case::Mthp64k, mthp),
            small_4k: report(Case::Small4k, small),
        },
        ratios,
    })
}

fn case_index(c: Case) -> usize {
    c as usize
}

/// One case in one run.
struct Measured {
    /// The whole loop (mprotects and rewrites).
    seconds: f64,
    /// Inside the mprotect calls alone.
    mprotect_seconds: f64,
    state: State,
}

/// Each case against small-4k, run by run (`results` in [`CASES`] order).
fn ratios(results: &[Vec<Measured>; 3], seed: u64) -> Ratios {
    let col = |c: Case, f: fn(&Measured) -> f64| -> Vec<f64> { results[case_index(c)].iter().map(f).collect() };
    let secs = |m: &Measured| m.seconds;
    let inside = |m: &Measured| m.mprotect_seconds;
    let pr = |c: Case, f: fn(&Measured) -> f64| stats::paired_ratio(&col(Case::Small4k, f), &col(c, f), seed, true);
    let mthp = !results[case_index(Case::Mthp64k)].is_empty();
    Ratios {
        pmd_thp_pte_mapped_over_small_4k: pr(Case::PmdThpPteMapped, secs),
        pmd_thp_pte_mapped_over_small_4k_in_mprotect: pr(Case::PmdThpPteMapped, inside),
        mthp_64k_over_small_4k: mthp.then(|| pr(Case::Mthp64k, secs)),
        mthp_64k_over_small_4k_in_mprotect: mthp.then(|| pr(Case::Mthp64k, inside)),
    }
}

/// One run: prepare every case's region, then run the loop round by round,
/// the cases alternating within each round (order rotated by run and
/// round), so that drift on the machine hits every case alike.
fn run_cases(cases: &[Case], run: usize, size: usize, loops: u32) -> Result<Vec<(Case, Measured)>> {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let mut prepared = Vec::new();
    for &c in cases {
        let (m, state) = prepare_case(c, size)?;
        prepared.push((c, m, state, 0.0f64, 0.0f64));
    }
    let n = prepared.len();
    for round in 0..loops as usize {
        for k in 0..n {
            let (_, m, _, secs, inside) = &mut prepared[(run + round + k) % n];
            let t = Instant::now();
            mprotect(m, libc::PROT_READ)?;
            mprotect(m, rw)?;
            *inside += t.elapsed().as_secs_f64();
            bzero(m);
            *secs += t.elapsed().as_secs_f64();
        }
    }
    Ok(prepared
        .into_iter()
        .map(|(c, _, state, seconds, mprotect_seconds)| {
            (
                c,
                Measured {
                    seconds,
                    mprotect_seconds,
                    state,
                },
            )
        })
        .collect())
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

/// Prepare the region for `case` as the test program does, ready for the
/// loop; the region and its verified state.
fn prepare_case(case: Case, size: usize) -> Result<(Mapping, State)> {
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
    // As the test program: no khugepaged collapse during the loop, then rewrite.
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
    let folios_kb = mapped_folios(&m)?;
    let expected_kb = match case {
        Case::PmdThpPteMapped => pmd as u64 / 1024,
        Case::Mthp64k => 64,
        Case::Small4k => ps as u64 / 1024,
    };
    let total: u64 = folios_kb.values().sum();
    let expected_folio_pct = super::exec::pct(folios_kb.get(&expected_kb).copied().unwrap_or(0), total);

    Ok((
        m,
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

/// Folio sizes backing a mapping of ours: kB per folio size.
/// Empty when PFNs or `/proc/kpageflags` are not readable.
fn mapped_folios(m: &Mapping) -> Result<BTreeMap<u64, u64>> {
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

/// The range sizes of the reported regression of PTE-batched `mprotect()`
/// on small pages (400 KiB, 1 MiB, 4 MiB).
pub const RANGE_BYTES: [usize; 3] = [400 << 10, 1 << 20, 4 << 20];

/// What backs a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Private anonymous memory, written.
    Anon,
    /// A shared mapping of a file on disk, read (page cache).
    File,
}

impl Backing {
    /// Name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Backing::Anon => "anon",
            Backing::File => "file",
        }
    }
}

/// What to run for the range cases.
#[derive(Debug, Clone)]
pub struct RangeOptions {
    /// `mprotect()` calls per direction (read-only, and back to read-write).
    pub calls: u32,
    /// Execute the instruction counter's markers around every call
    /// ([`super::marker`]); pins the thread to its CPU.
    pub markers: bool,
    /// Directory for the files of the file-backed cases (None: see
    /// [`super::scratch_dir`]).
    pub dir: Option<std::path::PathBuf>,
}

impl Default for RangeOptions {
    fn default() -> Self {
        RangeOptions {
            calls: 1000,
            markers: false,
            dir: None,
        }
    }
}

/// Microseconds per call in one direction.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PerCall {
    /// Median over the calls.
    pub median_us: f64,
    /// Fastest call.
    pub min_us: f64,
    /// Mean over the calls.
    pub mean_us: f64,
}

impl PerCall {
    fn of(mut v: Vec<f64>) -> PerCall {
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1) as f64;
        PerCall {
            median_us: v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(f64::NAN),
            min_us: v.first().copied().unwrap_or(f64::NAN),
            mean_us: v.iter().sum::<f64>() / n,
        }
    }
}

/// The counter's interval ids of one range case.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct MarkerIds {
    /// Around each `mprotect(PROT_READ)`.
    pub to_read_only: u16,
    /// Around each `mprotect(PROT_READ | PROT_WRITE)`.
    pub to_read_write: u16,
}

/// One range case's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RangeReport {
    /// `anon-400k`, `file-4m`, …
    pub name: String,
    /// `anon` or `file`.
    pub backing: &'static str,
    /// Bytes per call.
    pub bytes: u64,
    /// Calls per direction.
    pub calls: u32,
    /// Each `mprotect(PROT_READ)` call.
    pub to_read_only: PerCall,
    /// Each `mprotect(PROT_READ | PROT_WRITE)` call.
    pub to_read_write: PerCall,
    /// The counter's ids (with `--markers`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marker_ids: Option<MarkerIds>,
    /// kB per folio size (key in kB) backing the range; empty when PFNs are
    /// not readable.
    pub folios_kb: BTreeMap<u64, u64>,
    /// At least 90% of the range in 4 KiB pages (false too when folio sizes
    /// could not be read).
    pub verified: bool,
}

/// The range cases' results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RangesReport {
    /// Running kernel.
    pub kernel: String,
    /// `/sys/kernel/mm/transparent_hugepage/enabled`.
    #[serde(serialize_with = "crate::kernel::serialize_thp_mode")]
    pub thp_enabled: Option<ThpMode>,
    /// The filesystem of the file-backed cases.
    pub filesystem: String,
    /// Whether the calls were wrapped in the counter's markers.
    pub markers: bool,
    /// Per case: anonymous then file, 400 KiB, 1 MiB, 4 MiB.
    pub cases: Vec<RangeReport>,
}

/// The reported regression's cases: `mprotect()` of a 400 KiB, 1 MiB and
/// 4 MiB range of 4 KiB pages (`MADV_NOHUGEPAGE`), anonymous and
/// file-backed, `PROT_READ` and back to `PROT_READ | PROT_WRITE`, `calls`
/// times each, every call timed (and, with `markers`, counted).
pub fn run_ranges(opts: &RangeOptions, progress: &dyn Progress) -> Result<RangesReport> {
    if opts.calls == 0 {
        return Err(Error::Invalid("--calls must be at least 1".into()));
    }
    let markers = if opts.markers {
        super::marker::pin_here()?;
        Some(super::marker::Markers::new()?)
    } else {
        None
    };
    let total: usize = RANGE_BYTES.iter().sum();
    let dir = super::scratch_dir(opts.dir.as_deref(), "the file-backed ranges", total as u64)?;
    let filesystem = crate::fsutil::fs_name_at(dir.path())?;
    let mut cases = Vec::new();
    progress.start(2 * RANGE_BYTES.len() as u64);
    for backing in [Backing::Anon, Backing::File] {
        for bytes in RANGE_BYTES {
            let i = cases.len() as u16;
            let ids = MarkerIds {
                to_read_only: 1 + 2 * i,
                to_read_write: 2 + 2 * i,
            };
            let name = format!("{}-{}", backing.name(), size_name(bytes));
            let path = dir.path().join(format!("{name}.bin"));
            let (m, _file) = prepare_range(backing, bytes, &path)?;
            let folios_kb = mapped_folios(&m)?;
            let all: u64 = folios_kb.values().sum();
            let small = folios_kb
                .get(&(kernel::page_size() as u64 / 1024))
                .copied()
                .unwrap_or(0);
            let (mut ro, mut rw) = (Vec::new(), Vec::new());
            for _ in 0..opts.calls {
                for (to, id, out) in [
                    (libc::PROT_READ, ids.to_read_only, &mut ro),
                    (libc::PROT_READ | libc::PROT_WRITE, ids.to_read_write, &mut rw),
                ] {
                    let t = Instant::now();
                    if let Some(mk) = &markers {
                        mk.open(id);
                    }
                    let r = mprotect(&m, to);
                    if let Some(mk) = &markers {
                        mk.close(id);
                    }
                    out.push(t.elapsed().as_secs_f64() * 1e6);
                    r?;
                }
            }
            progress.step(&format!("{name}: {} calls each way", opts.calls));
            cases.push(RangeReport {
                name,
                backing: backing.name(),
                bytes: bytes as u64,
                calls: opts.calls,
                to_read_only: PerCall::of(ro),
                to_read_write: PerCall::of(rw),
                marker_ids: markers.as_ref().map(|_| ids),
                verified: super::exec::pct(small, all) >= 90.0,
                folios_kb,
            });
        }
    }
    Ok(RangesReport {
        kernel: kernel::KernelVersion::current().to_string(),
        thp_enabled: kernel::thp_mode(),
        filesystem,
        markers: markers.is_some(),
        cases,
    })
}

fn size_name(bytes: usize) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{}m", bytes >> 20)
    } else {
        format!("{}k", bytes >> 10)
    }
}

/// A range of 4 KiB pages, every page mapped, read-write: anonymous
/// (`MADV_NOHUGEPAGE`, written), or a shared mapping of a new file at
/// `path` written, evicted and read back one page per fault (`MADV_RANDOM`:
/// no readahead, so 4 KiB page-cache folios on any filesystem).
fn prepare_range(backing: Backing, bytes: usize, path: &Path) -> Result<(Mapping, Option<std::fs::File>)> {
    let ps = kernel::page_size();
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    match backing {
        Backing::Anon => {
            let m = Mapping::anon_aligned(bytes, rw, kernel::pmd_size())?;
            m.madvise(0, bytes, kernel::MADV_NOHUGEPAGE)?;
            bzero(&m);
            Ok((m, None))
        }
        Backing::File => {
            use std::io::Write;
            use std::os::fd::AsFd;
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| Error::io(path, e))?;
            f.write_all(&vec![0x5a; bytes]).map_err(|e| Error::io(path, e))?;
            f.sync_all().map_err(|e| Error::io(path, e))?;
            kernel::fadvise_dontneed(f.as_fd(), 0, None)?;
            let m = Mapping::file_congruent(f.as_fd(), 0, bytes, rw, kernel::pmd_size())?;
            m.madvise(0, bytes, kernel::MADV_NOHUGEPAGE)?;
            m.madvise(0, bytes, libc::MADV_RANDOM)?;
            for off in (0..bytes).step_by(ps) {
                // SAFETY: inside our own readable mapping of a file of `bytes`.
                unsafe { std::ptr::read_volatile(m.as_ptr().add(off)) };
            }
            Ok((m, Some(f)))
        }
    }
}
