//! The exec-readahead microbenchmark of the Linux "large folios for exec
//! memory" patches: a large file of RET stubs mapped executable (x86-64
//! `ret`, or AArch64 `ret` where hugetext runs on arm64, [`ret_stub`]).
//!
//! - **cold**: evict the file's page cache, map it `PROT_READ|PROT_EXEC` and
//!   call one stub per page in order: page faults + readahead + first
//!   execution;
//! - **random**: after that sequential sweep (which faulted every page in and
//!   is not timed), call stubs at random pages from a fixed seed: iTLB cost.
//!   The same sequence runs a few times (`random_passes`) and the fastest
//!   pass counts, so a co-tenant's burst does not decide the result.
//!
//! Variants:
//! - `baseline`: a plain exec mapping; the exec readahead path gives 4 KiB
//!   folios on x86 (doc/kernel-facts.md §1);
//! - `huge`: `MADV_HUGEPAGE` on the exec mapping before the cold sweep, so
//!   page-cache misses read PMD folios;
//! - `warm`: the page cache is prepared by hugetext's warm
//!   ([`warm::plan`] + [`warm::warm_target`], exactly what `hugetext warm
//!   FILE` does, its own verification included; timed as `warm_ms`), then a
//!   plain, unadvised, PMD-congruent exec mapping is swept.
//!
//! Each variant has its own stub file, so that all three can be prepared at
//! once: a run sweeps the three cold (in an order rotated run by run: the
//! cold sweep needs an evicted file, so this is the finest honest grain),
//! keeps the three mappings, then alternates the variants pass by pass in
//! the random phase (again rotated), each pass on its variant's own
//! prepared mapping. Drift on the machine then hits all variants alike
//! within seconds, and every ratio is taken run by run
//! ([`stats::paired_ratio`]).
//!
//! Each run records the state it measured: the page cache's share in PMD
//! folios (`folio::scan_file`) and the mapping's `FilePmdMapped` from smaps
//! (with 64 KiB pages: 2 MiB blocks and contpte mappings), and two counts
//! that no emulator or noisy neighbour distorts: the page faults the cold
//! sweep took (`getrusage`, this thread) and the kB read from disk for the
//! variant (`pgpgin` of `/proc/vmstat`, over the warm fill and the sweep).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::stats::{self, PairedRatio, Summary};
use super::{ms, Progress, Stopped, Until};
use crate::kernel::{self, Mapping};
use crate::{folio, pagecache, warm, Error, Result};

/// The stub: one `ret` instruction, repeated over the whole file, so that
/// a call to any page's first byte returns at once. x86-64: `ret` (0xc3);
/// AArch64: `ret` (0xd65f03c0, little-endian; instructions are 4-byte
/// aligned, and every page starts on an instruction). `None` on machines
/// the benchmark does not know.
pub fn ret_stub() -> Option<&'static [u8]> {
    if cfg!(target_arch = "x86_64") {
        Some(&RET_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(&RET_AARCH64)
    } else {
        None
    }
}

/// x86-64 `ret`.
pub const RET_X86_64: [u8; 1] = [0xC3];
/// AArch64 `ret` (`ret x30`), 0xd65f03c0 in little-endian bytes.
pub const RET_AARCH64: [u8; 4] = 0xd65f03c0u32.to_le_bytes();

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Size of the RET-stub file in bytes (rounded down to whole windows of
    /// the unit of huge text: PMDs, or 2 MiB blocks with 64 KiB pages).
    pub size: u64,
    /// Runs (the minimum with `until.ci_width`); each run measures every
    /// variant once.
    pub runs: u32,
    /// Directory for the stub files (None: see [`super::scratch_dir`]).
    pub dir: Option<PathBuf>,
    /// Random calls per page of the file in the random phase.
    pub calls_per_page: u32,
    /// Passes of the random phase per run (same sequence, variants
    /// alternating pass by pass); the run's `random_ms` is the fastest pass,
    /// which filters out interruptions by other load on the machine.
    pub random_passes: u32,
    /// Seed of the random phase's page sequence and of the bootstrap.
    pub seed: u64,
    /// When to stop adding runs.
    pub until: Until,
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
            until: Until::default(),
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

    fn index(self) -> usize {
        self as usize
    }
}

/// One measurement of one variant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    /// Which run (0-based) this belongs to.
    pub run: u32,
    /// Position of this variant in its run's cold phase (0 = swept first).
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
    pub unit_folio_pct: f64,
    /// `FilePmdMapped` of the benchmark's mapping, as a share of its size,
    /// in percent (what the random phase ran on).
    pub unit_mapped_pct: f64,
    /// Page faults of the cold sweep, minor and major (`getrusage`,
    /// `RUSAGE_THREAD`): one per page read in base pages, one per folio
    /// where the kernel maps a large folio at once.
    pub cold_faults: u64,
    /// Of those, major faults (the ones that waited for a read).
    pub cold_major_faults: u64,
    /// kB read from block devices while this variant was prepared and swept
    /// (`pgpgin` of `/proc/vmstat`: machine-wide, so other readers count
    /// too); about the file's size when readahead read it once.
    pub pgpgin_kb: u64,
}

/// This thread's (minor, major) page faults so far.
fn thread_faults() -> (u64, u64) {
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the value it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return (0, 0);
    }
    (ru.ru_minflt as u64, ru.ru_majflt as u64)
}

/// `pgpgin` of `/proc/vmstat` (kB read from block devices since boot); 0
/// where it cannot be read.
fn pgpgin_kb() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("pgpgin ").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub kernel: String,
    /// Base page size of the kernel, kB.
    pub page_kb: u64,
    /// The unit of huge text the states count in: the PMD, or the 2 MiB
    /// contiguous-PTE block with 64 KiB pages (`pmd` or `contpte`).
    pub unit: crate::elf::HugeUnit,
    /// Its size, kB.
    pub unit_kb: u64,
    pub size_bytes: u64,
    pub pages: u64,
    pub random_calls: u64,
    /// Passes of the random phase per run (the fastest counts).
    pub random_passes: u32,
    pub seed: u64,
    /// Runs made.
    pub runs: u32,
    /// Why measuring stopped.
    pub stopped: Stopped,
    /// Directory and filesystem of the stub files.
    pub dir: PathBuf,
    pub filesystem: String,
    /// Per variant: medians (`cold_ms`, `random_ms`, `warm_ms`) plus full
    /// statistics and per-run records.
    pub variants: Variants,
    /// Every ratio, paired run by run, with its 95% confidence interval.
    pub ratios: Ratios,
    /// The same ratios taken between the variants' medians (no interval).
    /// The key keeps its historical name for JSON readers; no goal is
    /// involved.
    #[serde(rename = "targets")]
    pub median_ratios: MedianRatios,
    /// What could not be prepared as asked, once each: `warm` leaving
    /// windows small on a kernel that cannot fill folios of the unit (the
    /// variant is then measured with what it got, which its state shows).
    pub notes: Vec<String>,
}

/// The three variants' results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Variants {
    pub baseline: VariantReport,
    pub huge: VariantReport,
    pub warm: VariantReport,
}

impl Variants {
    /// One variant's results.
    pub fn get(&self, v: Variant) -> &VariantReport {
        match v {
            Variant::Baseline => &self.baseline,
            Variant::Huge => &self.huge,
            Variant::Warm => &self.warm,
        }
    }
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
    pub stats: VariantStats,
    /// Every run of this variant, with its verified state.
    pub runs: Vec<Run>,
}

/// Statistics of one variant's quantities over the runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VariantStats {
    pub cold_ms: Summary,
    pub random_ms: Summary,
    /// Warm variant only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_ms: Option<Summary>,
    /// `warm_ms + cold_ms` per run: warm variant only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_plus_cold_ms: Option<Summary>,
}

/// The benchmark's ratios, each of per-run pairs (smaller is faster).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratios {
    /// cold(huge) / cold(baseline).
    pub cold_huge_over_baseline: PairedRatio,
    /// cold(warm) / cold(baseline): the sweep alone, warm's fill not counted.
    pub cold_warm_over_baseline: PairedRatio,
    /// random(huge) / random(baseline).
    pub random_huge_over_baseline: PairedRatio,
    /// random(warm) / random(baseline).
    pub random_warm_over_baseline: PairedRatio,
    /// (warm_ms + cold(warm)) / cold(baseline): filling the page cache with
    /// PMD folios and sweeping it, against faulting it in the plain way.
    pub warm_total_over_baseline_cold: PairedRatio,
}

impl Ratios {
    /// Every ratio with its JSON name.
    pub fn all(&self) -> [(&'static str, &PairedRatio); 5] {
        [
            ("cold_huge_over_baseline", &self.cold_huge_over_baseline),
            ("cold_warm_over_baseline", &self.cold_warm_over_baseline),
            ("random_huge_over_baseline", &self.random_huge_over_baseline),
            ("random_warm_over_baseline", &self.random_warm_over_baseline),
            ("warm_total_over_baseline_cold", &self.warm_total_over_baseline_cold),
        ]
    }

    /// Width of the widest interval.
    pub fn widest(&self) -> f64 {
        self.all().iter().map(|(_, r)| r.width()).fold(0.0, f64::max)
    }
}

/// Ratios between the variants' medians.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MedianRatios {
    /// median random(huge) / median random(baseline).
    pub random_huge_over_baseline: f64,
    /// median random(warm) / median random(baseline).
    pub random_warm_over_baseline: f64,
    /// median cold(huge) / median cold(baseline).
    pub cold_huge_over_baseline: f64,
    /// median (warm_ms + cold(warm)) / median cold(baseline).
    pub warm_total_over_baseline_cold: f64,
}

/// The per-run ratios of `runs[v]` (indexed by [`Variant::index`]), all
/// runs complete: each quantity of a variant over baseline's, run by run.
fn ratios(runs: &[Vec<Run>; 3], seed: u64) -> Ratios {
    let col = |v: Variant, f: fn(&Run) -> f64| -> Vec<f64> { runs[v.index()].iter().map(f).collect() };
    let cold = |r: &Run| r.cold_ms;
    let random = |r: &Run| r.random_ms;
    let total = |r: &Run| r.warm_ms.unwrap_or(0.0) + r.cold_ms;
    let base_cold = col(Variant::Baseline, cold);
    let base_random = col(Variant::Baseline, random);
    let pr = |a: &[f64], b: Vec<f64>| stats::paired_ratio(a, &b, seed, true);
    Ratios {
        cold_huge_over_baseline: pr(&base_cold, col(Variant::Huge, cold)),
        cold_warm_over_baseline: pr(&base_cold, col(Variant::Warm, cold)),
        random_huge_over_baseline: pr(&base_random, col(Variant::Huge, random)),
        random_warm_over_baseline: pr(&base_random, col(Variant::Warm, random)),
        warm_total_over_baseline_cold: pr(&base_cold, col(Variant::Warm, total)),
    }
}

fn variant_report(v: Variant, rs: Vec<Run>) -> VariantReport {
    let cold: Vec<f64> = rs.iter().map(|r| r.cold_ms).collect();
    let random: Vec<f64> = rs.iter().map(|r| r.random_ms).collect();
    let (warm_ms, warm_plus_cold_ms) = if v == Variant::Warm {
        let w: Vec<f64> = rs.iter().filter_map(|r| r.warm_ms).collect();
        let total: Vec<f64> = rs.iter().map(|r| r.warm_ms.unwrap_or(0.0) + r.cold_ms).collect();
        (Some(Summary::of(&w)), Some(Summary::of(&total)))
    } else {
        (None, None)
    };
    let stats = VariantStats {
        cold_ms: Summary::of(&cold),
        random_ms: Summary::of(&random),
        warm_ms,
        warm_plus_cold_ms,
    };
    VariantReport {
        cold_ms: stats.cold_ms.median,
        random_ms: stats.random_ms.median,
        warm_ms: stats.warm_ms.as_ref().map(|s| s.median),
        stats,
        runs: rs,
    }
}

/// Run the benchmark.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    let Some(stub) = ret_stub() else {
        return Err(Error::Unsupported(
            "bench exec calls RET stubs of x86-64 or AArch64: it runs on those machines only".into(),
        ));
    };
    let ps = kernel::page_size() as u64;
    let size = super::unit_multiple(opts.size)?;
    if opts.runs == 0 {
        return Err(Error::Invalid("--runs must be at least 1".into()));
    }
    opts.until.validate()?;
    let dir = super::scratch_dir(
        opts.dir.as_deref(),
        "--size",
        size.saturating_mul(VARIANTS.len() as u64),
    )?;
    let filesystem = crate::fsutil::fs_name_at(dir.path())?;
    let paths: Vec<PathBuf> = VARIANTS
        .iter()
        .map(|v| dir.path().join(format!("ret-stubs-{}.bin", v.name())))
        .collect();
    let steps_per_run = VARIANTS.len() as u64;
    let mut total_steps = 1 + u64::from(opts.runs) * steps_per_run;
    progress.start(total_steps);
    for p in &paths {
        super::write_pattern(p, size, stub)?;
    }
    progress.step("stub files written");

    let pages = size / ps;
    let calls = pages * u64::from(opts.calls_per_page);
    let mut rng = fastrand::Rng::with_seed(opts.seed);
    let sequence: Vec<u32> = (0..calls).map(|_| rng.u32(..pages as u32)).collect();
    let passes = opts.random_passes.max(1);

    let mut runs: [Vec<Run>; 3] = Default::default();
    let mut notes: Vec<String> = Vec::new();
    let started = Instant::now();
    let mut r = 0u32;
    let stopped = loop {
        if r >= opts.runs {
            let widest = ratios(&runs, opts.seed).widest();
            if let Some(why) = opts.until.stop(r, opts.runs, widest, started.elapsed()) {
                break why;
            }
            total_steps += steps_per_run;
            progress.start(total_steps);
        }
        let one = measure_run(&paths, size, r, &sequence, passes, &mut notes, progress)?;
        for (v, run) in VARIANTS.iter().zip(one) {
            runs[v.index()].push(run);
        }
        r += 1;
    };
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }

    let ratios = ratios(&runs, opts.seed);
    let [b, h, w] = runs;
    let variants = Variants {
        baseline: variant_report(Variant::Baseline, b),
        huge: variant_report(Variant::Huge, h),
        warm: variant_report(Variant::Warm, w),
    };
    let (b, h, w) = (&variants.baseline, &variants.huge, &variants.warm);
    let median_ratios = MedianRatios {
        random_huge_over_baseline: h.random_ms / b.random_ms,
        random_warm_over_baseline: w.random_ms / b.random_ms,
        cold_huge_over_baseline: h.cold_ms / b.cold_ms,
        warm_total_over_baseline_cold: w.stats.warm_plus_cold_ms.as_ref().map_or(f64::NAN, |s| s.median) / b.cold_ms,
    };
    Ok(Report {
        kernel: kernel::KernelVersion::current().to_string(),
        page_kb: kernel::page_size() as u64 / 1024,
        unit: kernel::huge_unit().1,
        unit_kb: kernel::unit_size() as u64 / 1024,
        size_bytes: size,
        pages,
        random_calls: calls,
        random_passes: passes,
        seed: opts.seed,
        runs: r,
        stopped,
        dir: dir.path().parent().unwrap_or(dir.path()).to_path_buf(),
        filesystem,
        variants,
        ratios,
        median_ratios,
        notes,
    })
}

/// kB of this process's `[addr, addr + len)` (unit-aligned) in whole
/// windows of `unit` each held by one folio of at least the unit, mapped
/// there (pagemap PFNs and `/proc/kpageflags`,
/// `hugetext_abi::kpf::block_is_one_folio`); 0 without PFN access. Where
/// the unit is the 2 MiB contiguous-PTE block, that is what arm64 maps
/// with one TLB entry per block.
fn own_unit_mapped_kb(addr: usize, len: usize, unit: usize) -> u64 {
    use std::os::unix::fs::FileExt;
    let ps = kernel::page_size();
    let np = unit / ps;
    let (Ok(pm), Ok(kf)) = (File::open("/proc/self/pagemap"), File::open("/proc/kpageflags")) else {
        return 0;
    };
    let mut raw = vec![0u8; np * 8];
    let mut words = |f: &File, off: u64| -> Vec<u64> {
        if f.read_exact_at(&mut raw, off).is_err() {
            raw.fill(0);
        }
        raw.chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    };
    let mut kb = 0;
    for w in (addr..addr + len).step_by(unit) {
        let pfns: Vec<u64> = words(&pm, (w / ps * 8) as u64)
            .into_iter()
            .map(|e| hugetext_abi::pagemap::pfn(e).unwrap_or(0))
            .collect();
        if pfns[0] != 0 && hugetext_abi::kpf::block_is_one_folio(&pfns, &words(&kf, pfns[0] * 8)) {
            kb += unit as u64 / 1024;
        }
    }
    kb
}

/// Call the RET stub at `addr`.
///
/// # Safety
/// `addr` must point at a `ret` instruction in executable memory.
#[inline(always)]
unsafe fn call(addr: usize) {
    // SAFETY: the caller's contract: `addr` is a `ret` in executable memory,
    // a function of no arguments that returns at once.
    let f: extern "C" fn() = unsafe { std::mem::transmute(addr) };
    f();
}

/// A variant's file after its cold sweep: the mapping the random phase
/// runs on, and what was measured so far.
struct Prepared<'a> {
    path: &'a Path,
    map: Mapping,
    warm_ms: Option<f64>,
    warm_note: Option<String>,
    cached_before_kb: u64,
    cold_ms: f64,
    cold_faults: (u64, u64),
    pgpgin_kb: u64,
    random_passes_ms: Vec<f64>,
    position: u32,
}

/// One run: the cold phase of every variant (order rotated by `r`), then
/// `passes` random passes alternating the variants pass by pass (rotated
/// too). Returns the runs in [`VARIANTS`] order.
fn measure_run(
    paths: &[PathBuf],
    size: u64,
    r: u32,
    sequence: &[u32],
    passes: u32,
    notes: &mut Vec<String>,
    progress: &dyn Progress,
) -> Result<Vec<Run>> {
    let n = VARIANTS.len();
    let mut prepared: Vec<Option<Prepared>> = (0..n).map(|_| None).collect();
    for k in 0..n {
        let v = VARIANTS[(r as usize + k) % n];
        let mut p = cold(&paths[v.index()], size, v)?;
        if let Some(n) = p.warm_note.take() {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
        p.position = k as u32;
        prepared[v.index()] = Some(p);
    }
    let mut prepared: Vec<Prepared> = prepared.into_iter().map(|p| p.expect("every variant swept")).collect();
    let ps = kernel::page_size();
    for pass in 0..passes as usize {
        for k in 0..n {
            let p = &mut prepared[(r as usize + pass + k) % n];
            let base = p.map.addr();
            let t = Instant::now();
            for &page in sequence {
                // SAFETY: every byte of the file is RET, the mapping is
                // PROT_EXEC and page < pages.
                unsafe { call(base + page as usize * ps) };
            }
            p.random_passes_ms.push(ms(t.elapsed()));
        }
    }
    let mut out = Vec::new();
    for (v, p) in VARIANTS.iter().zip(prepared) {
        let unit_mapped_kb = match kernel::huge_unit() {
            // 64 KiB pages: mapped by the unit means whole 2 MiB blocks of
            // one folio each (contiguous PTEs); smaps counts PMDs only.
            (unit, crate::elf::HugeUnit::Contpte) => own_unit_mapped_kb(p.map.addr(), size as usize, unit),
            _ => crate::procfs::own_mapping_stats(p.map.addr() as u64)?.map_or(0, |s| s.file_pmd_kb),
        };
        drop(p.map);
        let view = folio::scan_file(p.path, None)?;
        // Folios of at least the unit (PMD-size wherever the unit is the PMD).
        let unit_folio_kb = view.huge_kb();
        let random_ms = p.random_passes_ms.iter().copied().fold(f64::INFINITY, f64::min);
        progress.step(&format!(
            "run {}: {} cold {:.0} ms, random {:.0} ms",
            r + 1,
            v.name(),
            p.cold_ms,
            random_ms
        ));
        out.push(Run {
            run: r,
            position: p.position,
            warm_ms: p.warm_ms,
            cold_ms: p.cold_ms,
            random_ms,
            random_passes_ms: p.random_passes_ms,
            state: State {
                cached_before_kb: p.cached_before_kb,
                unit_folio_pct: pct(unit_folio_kb, view.cached_kb),
                folios_kb: view.folios_kb,
                unit_mapped_pct: pct(unit_mapped_kb, size / 1024),
                cold_faults: p.cold_faults.0 + p.cold_faults.1,
                cold_major_faults: p.cold_faults.1,
                pgpgin_kb: p.pgpgin_kb,
            },
        });
    }
    Ok(out)
}

/// Evict `file`, prepare it as variant `v` wants, map it and time the cold
/// sweep; the mapping is kept for the random phase.
fn cold(path: &Path, size: u64, v: Variant) -> Result<Prepared<'_>> {
    // The file is opened afresh for every cold sweep, as a program's start
    // opens it: the kernel keeps readahead state in the open file (`f_ra`),
    // and a second sweep through the same open file read the first 2 MiB
    // of the `huge` variant in 64 KiB to 1 MiB folios on Linux 7.3 with
    // 64 KiB pages (its first sweep: 2 MiB and larger).
    let file = &File::open(path).map_err(|e| Error::io(path, e))?;
    let ps = kernel::page_size();
    // Congruent to the unit (the PMD; the 2 MiB contpte block with 64 KiB
    // pages, whose 512 MiB PMD no page-cache folio reaches).
    let unit = kernel::unit_size();
    let pages = size as usize / ps;
    // The kernel may hold a few folios for a moment (a background
    // collapse or writeback of the file just written): evict again, a few
    // times, before calling the file held by someone else.
    let mut cached_after_evict = 0;
    for attempt in 0..4 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(100 << attempt));
        }
        pagecache::evict(file, 0..size)?;
        cached_after_evict = folio::scan_file(path, None)?.cached_kb;
        if cached_after_evict == 0 {
            break;
        }
    }
    let pgpgin_before = pgpgin_kb();
    let mut warm_ms = None;
    let mut warm_note = None;
    if v == Variant::Warm {
        let t = Instant::now();
        let target = warm::plan(path)?;
        let report = warm::warm_target(
            &target,
            &warm::WarmOptions::default(),
            &mut warm::WarmContext::default(),
        )?;
        warm_ms = Some(ms(t.elapsed()));
        if report.unit_windows < report.eligible_windows {
            // Measured all the same: on a kernel that cannot fill folios
            // of the unit (6.12 with 64 KiB pages), that is the result.
            warm_note = Some(format!(
                "warm left {} of {} windows small: {}",
                report.eligible_windows - report.unit_windows,
                report.eligible_windows,
                report.notes.join("; ")
            ));
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
    let map = Mapping::file_congruent(file.as_fd(), 0, size as usize, libc::PROT_READ | libc::PROT_EXEC, unit)?;
    if v == Variant::Huge {
        map.madvise(0, size as usize, kernel::MADV_HUGEPAGE)?;
    }
    let base = map.addr();
    let faults_before = thread_faults();
    let t = Instant::now();
    for p in 0..pages {
        // SAFETY: every byte of the file is RET and the mapping is PROT_EXEC.
        unsafe { call(base + p * ps) };
    }
    let cold_ms = ms(t.elapsed());
    let faults_after = thread_faults();
    let cold_faults = (
        faults_after.0.saturating_sub(faults_before.0),
        faults_after.1.saturating_sub(faults_before.1),
    );
    let pgpgin_kb = pgpgin_kb().saturating_sub(pgpgin_before);
    Ok(Prepared {
        path,
        map,
        warm_ms,
        warm_note,
        cached_before_kb,
        cold_ms,
        cold_faults,
        pgpgin_kb,
        random_passes_ms: Vec::new(),
        position: 0,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ret_stubs_of_each_machine() {
        assert_eq!(RET_X86_64, [0xc3]);
        // `ret` (x30) is 0xd65f03c0, stored little-endian.
        assert_eq!(RET_AARCH64, [0xc0, 0x03, 0x5f, 0xd6]);
        // Both divide a page, so every page starts on an instruction.
        assert_eq!(4096 % RET_AARCH64.len(), 0);
        let here = ret_stub().expect("x86-64 or AArch64");
        assert_eq!(here.len(), if cfg!(target_arch = "aarch64") { 4 } else { 1 });
    }

    fn run(cold_ms: f64, random_ms: f64, warm_ms: Option<f64>) -> Run {
        Run {
            run: 0,
            position: 0,
            warm_ms,
            cold_ms,
            random_ms,
            random_passes_ms: vec![random_ms],
            state: State {
                cached_before_kb: 0,
                folios_kb: BTreeMap::new(),
                unit_folio_pct: 0.0,
                unit_mapped_pct: 0.0,
                cold_faults: 0,
                cold_major_faults: 0,
                pgpgin_kb: 0,
            },
        }
    }

    #[test]
    fn ratios_are_taken_run_by_run() {
        // Run 2 is twice as slow for every variant (a busy co-tenant): the
        // per-run ratios do not move.
        let runs: [Vec<Run>; 3] = [
            vec![run(100.0, 10.0, None), run(200.0, 20.0, None)],
            vec![run(25.0, 7.0, None), run(50.0, 14.0, None)],
            vec![run(5.0, 8.0, Some(20.0)), run(10.0, 16.0, Some(40.0))],
        ];
        let r = ratios(&runs, 1);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(r.cold_huge_over_baseline.runs.iter().all(|&x| close(x, 0.25)));
        assert!(r.cold_warm_over_baseline.runs.iter().all(|&x| close(x, 0.05)));
        assert!(r.random_huge_over_baseline.runs.iter().all(|&x| close(x, 0.7)));
        assert!(r.random_warm_over_baseline.runs.iter().all(|&x| close(x, 0.8)));
        assert!(r.warm_total_over_baseline_cold.runs.iter().all(|&x| close(x, 0.25)));
        assert!(close(r.random_huge_over_baseline.median, 0.7));
        assert!(r.widest() < 1e-12);
        assert_eq!(r.all().len(), 5);
        // Two runs give no verdict.
        assert_eq!(r.random_huge_over_baseline.verdict, stats::Verdict::Unresolved);
    }
}
