//! Seed 000's benchmark: a large file of RET stubs mapped executable.
//!
//! - **cold**: evict the file's page cache, map it `PROT_READ|PROT_EXEC` and
//!   call one stub per page in order: page faults + readahead + first
//!   execution;
//! - **random**: after that sequential sweep (which faulted every page in and
//!   is not timed), call stubs at random pages from a fixed seed: iTLB cost.
//!   The same sequence runs a few times (`random_passes`) and the fastest
//!   pass counts, so a co-tenant's burst does not decide the result.
//!
//! Variants, interleaved run by run in rotating order so that drift hits all
//! of them alike:
//! - `baseline`: a plain exec mapping; the exec readahead path gives 4 KiB
//!   folios on x86 (KERNEL-NOTES §1);
//! - `huge`: `MADV_HUGEPAGE` on the exec mapping before the cold sweep, so
//!   page-cache misses read PMD folios;
//! - `warm`: the page cache is prepared by hugetext's warm
//!   ([`warm::plan`] + [`warm::warm_target`], exactly what `hugetext warm
//!   FILE` does, its own verification included; timed as `warm_ms`), then a
//!   plain, unadvised, PMD-congruent exec mapping is swept.
//!
//! Each run records the state it measured: the page cache's share in PMD
//! folios (`folio::scan_file`) and the mapping's `FilePmdMapped` from smaps.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Instant;

use super::stats::Summary;
use super::{ms, Progress};
use crate::kernel::{self, Mapping};
use crate::{folio, pagecache, warm, Error, Result};

/// x86 `ret`.
const RET: u8 = 0xC3;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Size of the RET-stub file in bytes (rounded down to whole PMDs).
    pub size: u64,
    /// Runs; each run measures every variant once, in rotating order.
    pub runs: u32,
    /// Directory for the stub file (None: see [`super::scratch_dir`]).
    pub dir: Option<PathBuf>,
    /// Random calls per page of the file in the random phase.
    pub calls_per_page: u32,
    /// Passes of the random phase per run (same sequence); the run's
    /// `random_ms` is the fastest pass, which filters out interruptions by
    /// other load on the machine.
    pub random_passes: u32,
    /// Seed of the random phase's page sequence.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            size: 512 << 20,
            runs: 5,
            dir: None,
            calls_per_page: 4,
            random_passes: 3,
            seed: 0x5eed000,
        }
    }
}

/// The benchmark's variants, in their canonical order.
pub const VARIANTS: [Variant; 3] = [Variant::Baseline, Variant::Huge, Variant::Warm];

/// One way of preparing the page cache and mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Plain exec mapping, small folios as exec faults give them.
    Baseline,
    /// `MADV_HUGEPAGE` on the exec mapping at fault time.
    Huge,
    /// Page cache filled with PMD folios beforehand (`warm`), plain mapping.
    Warm,
}

impl Variant {
    /// Lower-case name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::Huge => "huge",
            Variant::Warm => "warm",
        }
    }
}

/// One measurement of one variant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    /// Which run (0-based) this belongs to.
    pub run: u32,
    /// Position of this variant within its run (0 = measured first).
    pub position: u32,
    /// Time to fill the page cache with PMD folios (warm variant only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_ms: Option<f64>,
    /// Cold sweep: one call per page, page cache evicted beforehand.
    pub cold_ms: f64,
    /// Random calls after the sweep: the fastest pass.
    pub random_ms: f64,
    /// Every pass of the random phase, in order.
    pub random_passes_ms: Vec<f64>,
    /// Verified state while measuring.
    pub state: State,
}

/// The memory state a run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct State {
    /// kB of the file cached before the cold sweep (0 = eviction worked;
    /// the whole file for `warm`).
    pub cached_before_kb: u64,
    /// Page cache after the sweep: kB per folio size (key in kB).
    pub folios_kb: BTreeMap<u64, u64>,
    /// Share of the file's page cache in PMD-size folios, in percent.
    pub pmd_folio_pct: f64,
    /// `FilePmdMapped` of the benchmark's mapping, as a share of its size,
    /// in percent (what the random phase ran on).
    pub pmd_mapped_pct: f64,
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub kernel: String,
    pub size_bytes: u64,
    pub pages: u64,
    pub random_calls: u64,
    /// Passes of the random phase per run (the fastest counts).
    pub random_passes: u32,
    pub seed: u64,
    pub runs: u32,
    /// Directory and filesystem of the stub file.
    pub dir: PathBuf,
    pub filesystem: String,
    /// Per variant: medians (`cold_ms`, `random_ms`, `warm_ms`) plus full
    /// statistics and per-run records.
    pub variants: BTreeMap<&'static str, VariantReport>,
    /// The targets, computed from the medians.
    pub targets: Targets,
}

/// One variant's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VariantReport {
    /// Median cold sweep time.
    pub cold_ms: f64,
    /// Median random-phase time.
    pub random_ms: f64,
    /// Median warm (PMD fill) time: warm variant only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_ms: Option<f64>,
    /// Median, min, max and per-run values of each quantity.
    pub stats: BTreeMap<&'static str, Summary>,
    /// Every run of this variant, with its verified state.
    pub runs: Vec<Run>,
}

/// Ratios the issue sets targets on (smaller is better).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Targets {
    /// random(huge) / random(baseline): target ≤ 0.8, aim ≤ 0.65.
    pub random_huge_over_baseline: f64,
    /// random(warm) / random(baseline).
    pub random_warm_over_baseline: f64,
    /// cold(huge) / cold(baseline).
    pub cold_huge_over_baseline: f64,
    /// (warm_ms + cold(warm)) / cold(baseline): target ≤ 1, aim ≤ 0.5.
    pub warm_total_over_baseline_cold: f64,
}

/// Run the benchmark.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    if !cfg!(target_arch = "x86_64") {
        return Err(Error::Unsupported(
            "bench exec calls x86 RET stubs: it runs on x86_64 only".into(),
        ));
    }
    let ps = kernel::page_size() as u64;
    let size = super::pmd_multiple(opts.size)?;
    if opts.runs == 0 {
        return Err(Error::Invalid("--runs must be at least 1".into()));
    }
    let dir = super::scratch_dir(opts.dir.as_deref())?;
    let filesystem = crate::fsutil::fs_name_at(dir.path())?;
    let path = dir.path().join("ret-stubs.bin");
    progress.start(1 + u64::from(opts.runs) * VARIANTS.len() as u64);
    super::write_filled(&path, size, RET)?;
    progress.step("stub file written");

    let pages = size / ps;
    let calls = pages * u64::from(opts.calls_per_page);
    let mut rng = fastrand::Rng::with_seed(opts.seed);
    let sequence: Vec<u32> = (0..calls).map(|_| rng.u32(..pages as u32)).collect();

    let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
    let mut runs: BTreeMap<Variant, Vec<Run>> = BTreeMap::new();
    for r in 0..opts.runs {
        for k in 0..VARIANTS.len() {
            let v = VARIANTS[(r as usize + k) % VARIANTS.len()];
            let mut one = measure(&file, &path, size, v, &sequence, opts.random_passes.max(1))?;
            one.run = r;
            one.position = k as u32;
            progress.step(&format!(
                "run {}/{}: {} cold {:.0} ms, random {:.0} ms",
                r + 1,
                opts.runs,
                v.name(),
                one.cold_ms,
                one.random_ms
            ));
            runs.entry(v).or_default().push(one);
        }
    }
    drop(file);
    let _ = std::fs::remove_file(&path);

    let mut variants = BTreeMap::new();
    for (v, rs) in runs {
        let cold: Vec<f64> = rs.iter().map(|r| r.cold_ms).collect();
        let random: Vec<f64> = rs.iter().map(|r| r.random_ms).collect();
        let mut stats = BTreeMap::new();
        stats.insert("cold_ms", Summary::of(&cold));
        stats.insert("random_ms", Summary::of(&random));
        let mut warm_ms = None;
        if v == Variant::Warm {
            let w: Vec<f64> = rs.iter().filter_map(|r| r.warm_ms).collect();
            let total: Vec<f64> = rs.iter().map(|r| r.warm_ms.unwrap_or(0.0) + r.cold_ms).collect();
            let s = Summary::of(&w);
            warm_ms = Some(s.median);
            stats.insert("warm_ms", s);
            stats.insert("warm_plus_cold_ms", Summary::of(&total));
        }
        variants.insert(
            v.name(),
            VariantReport {
                cold_ms: stats["cold_ms"].median,
                random_ms: stats["random_ms"].median,
                warm_ms,
                stats,
                runs: rs,
            },
        );
    }
    let b = &variants["baseline"];
    let h = &variants["huge"];
    let w = &variants["warm"];
    let targets = Targets {
        random_huge_over_baseline: h.random_ms / b.random_ms,
        random_warm_over_baseline: w.random_ms / b.random_ms,
        cold_huge_over_baseline: h.cold_ms / b.cold_ms,
        warm_total_over_baseline_cold: w.stats["warm_plus_cold_ms"].median / b.cold_ms,
    };
    Ok(Report {
        kernel: kernel::KernelVersion::current().to_string(),
        size_bytes: size,
        pages,
        random_calls: calls,
        random_passes: opts.random_passes.max(1),
        seed: opts.seed,
        runs: opts.runs,
        dir: dir.path().parent().unwrap_or(dir.path()).to_path_buf(),
        filesystem,
        variants,
        targets,
    })
}

/// Call the RET stub at `addr`.
///
/// # Safety
/// `addr` must point at a `ret` instruction in executable memory.
#[inline(always)]
unsafe fn call(addr: usize) {
    let f: extern "C" fn() = std::mem::transmute(addr);
    f();
}

fn measure(file: &File, path: &std::path::Path, size: u64, v: Variant, sequence: &[u32], passes: u32) -> Result<Run> {
    let ps = kernel::page_size();
    let pmd = kernel::pmd_size();
    let pages = size as usize / ps;
    pagecache::evict(file, 0..size)?;
    let cached_after_evict = folio::scan_file(path, None)?.cached_kb;
    let mut warm_ms = None;
    if v == Variant::Warm {
        let t = Instant::now();
        let target = warm::plan(path)?;
        let report = warm::warm_target(
            &target,
            &warm::WarmOptions::default(),
            &mut warm::WarmContext::default(),
        )?;
        warm_ms = Some(ms(t.elapsed()));
        if report.pmd_windows < report.eligible_windows {
            return Err(Error::Other(format!(
                "warm left {} of {} windows of {} small: {}",
                report.eligible_windows - report.pmd_windows,
                report.eligible_windows,
                path.display(),
                report.notes.join("; ")
            )));
        }
    }
    let cached_before_kb = if v == Variant::Warm {
        folio::scan_file(path, None)?.cached_kb
    } else {
        cached_after_evict
    };
    if v != Variant::Warm && cached_before_kb > 0 {
        return Err(Error::Other(format!(
            "{}: {cached_before_kb} kB stayed cached after eviction (is another process mapping it?)",
            path.display()
        )));
    }
    let map = Mapping::file_congruent(file.as_fd(), 0, size as usize, libc::PROT_READ | libc::PROT_EXEC, pmd)?;
    if v == Variant::Huge {
        map.madvise(0, size as usize, kernel::MADV_HUGEPAGE)?;
    }
    let base = map.addr();
    let t = Instant::now();
    for p in 0..pages {
        // SAFETY: every byte of the file is RET and the mapping is PROT_EXEC.
        unsafe { call(base + p * ps) };
    }
    let cold_ms = ms(t.elapsed());
    let mut random_passes_ms = Vec::new();
    for _ in 0..passes {
        let t = Instant::now();
        for &p in sequence {
            // SAFETY: as above; p < pages.
            unsafe { call(base + p as usize * ps) };
        }
        random_passes_ms.push(ms(t.elapsed()));
    }
    let random_ms = random_passes_ms.iter().copied().fold(f64::INFINITY, f64::min);
    let pmd_mapped_kb = crate::procfs::own_mapping_stats(base as u64)?.map_or(0, |s| s.file_pmd_kb);
    drop(map);
    let view = folio::scan_file(path, None)?;
    let pmd_kb = view.pmd_kb();
    Ok(Run {
        run: 0,
        position: 0,
        warm_ms,
        cold_ms,
        random_ms,
        random_passes_ms,
        state: State {
            cached_before_kb,
            pmd_folio_pct: pct(pmd_kb, view.cached_kb),
            folios_kb: view.folios_kb,
            pmd_mapped_pct: pct(pmd_mapped_kb, size / 1024),
        },
    })
}

/// `part / whole` in percent, 0 when `whole` is 0.
pub(crate) fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}
