//! The effect of the Linux "batch folio insertion" readahead patches, in
//! small: readahead throughput with N threads.
//!
//! Two configurations move the same number of bytes:
//! - `distinct-files`: each thread `readahead(2)`s its own evicted file;
//! - `shared-file`: all threads `readahead(2)` disjoint slices of one evicted
//!   file, so every insertion contends on that file's page-cache xarray lock
//!   — the lock the patches' batched insertion takes once per batch instead
//!   of once per folio.
//!
//! Each thread issues `readahead(2)` in chunks, then waits for its data by
//! reading it back with `pread` (a copy from the page cache, the same for
//! both configurations); throughput is bytes over the wall time from the
//! threads' common start to the last one's end. Comparing the two
//! configurations (and the same configuration across kernels) shows the lock
//! cost; on a slow disk the I/O dominates and both come out alike. The two
//! alternate run by run in rotating order (each run needs evicted files, so
//! a run is the finest grain), and their ratio is taken run by run
//! ([`stats::paired_ratio`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use super::stats::{self, PairedRatio, Summary};
use super::{Progress, Stopped, Until};
use crate::{folio, kernel, pagecache, Error, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Threads (default: the number of CPUs).
    pub threads: u32,
    /// Bytes read per thread.
    pub size_per_thread: u64,
    /// Bytes per `readahead(2)` call.
    pub chunk: u64,
    /// Runs (the minimum with `until.ci_width`); each run measures both
    /// configurations.
    pub runs: u32,
    /// Directory for the files (None: see [`super::scratch_dir`]).
    pub dir: Option<PathBuf>,
    /// Seed of the bootstrap.
    pub seed: u64,
    /// When to stop adding runs.
    pub until: Until,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(2),
            size_per_thread: 256 << 20,
            chunk: 2 << 20,
            runs: 5,
            dir: None,
            seed: 0x5eed002,
            until: Until::default(),
        }
    }
}

/// The two configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// One evicted file per thread.
    DistinctFiles,
    /// Disjoint slices of one evicted file.
    SharedFile,
}

/// Both configurations.
pub const CONFIGS: [Config; 2] = [Config::DistinctFiles, Config::SharedFile];

impl Config {
    /// Name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Config::DistinctFiles => "distinct-files",
            Config::SharedFile => "shared-file",
        }
    }
}

/// One configuration's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConfigReport {
    /// Median throughput, MB/s (10^6 bytes per second).
    pub mb_per_s: f64,
    /// Throughput statistics over runs (MB/s).
    pub stats: Summary,
    /// Median wall time of a run, ms.
    pub median_ms: f64,
    /// Page cache after the last run: kB per folio size (key in kB),
    /// summed over the configuration's files.
    pub folios_kb: BTreeMap<u64, u64>,
}

/// Both configurations' results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Configs {
    #[serde(rename = "distinct-files")]
    pub distinct_files: ConfigReport,
    #[serde(rename = "shared-file")]
    pub shared_file: ConfigReport,
}

impl Configs {
    /// One configuration's results.
    pub fn get(&self, c: Config) -> &ConfigReport {
        match c {
            Config::DistinctFiles => &self.distinct_files,
            Config::SharedFile => &self.shared_file,
        }
    }
}

/// The benchmark's ratio, paired run by run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratios {
    /// MB/s of `shared-file` over `distinct-files` in the same run (below
    /// 1: the shared file was slower, e.g. by page-cache lock contention).
    pub shared_over_distinct: PairedRatio,
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub kernel: String,
    pub threads: u32,
    pub size_per_thread_bytes: u64,
    pub chunk_bytes: u64,
    /// Runs made.
    pub runs: u32,
    /// Why measuring stopped.
    pub stopped: Stopped,
    pub dir: PathBuf,
    pub filesystem: String,
    /// `read_ahead_kb` of the device holding the files, when found.
    pub read_ahead_kb: Option<u64>,
    pub configs: Configs,
    /// Median MB/s of `shared-file` over median MB/s of `distinct-files`
    /// (lock contention shows as < 1).
    pub shared_over_distinct: f64,
    /// The same, paired run by run, with its 95% confidence interval.
    pub ratios: Ratios,
}

/// Run the benchmark.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    if opts.threads == 0 || opts.runs == 0 {
        return Err(Error::Invalid("--threads and --runs must be at least 1".into()));
    }
    opts.until.validate()?;
    let ps = kernel::page_size() as u64;
    let per = opts.size_per_thread / ps * ps;
    if per == 0 {
        return Err(Error::Invalid("--size must be at least one page".into()));
    }
    let chunk = opts.chunk.max(ps);
    let n = opts.threads as u64;
    // The distinct files and the shared one, all cached at the end of a run.
    let dir = super::scratch_dir(opts.dir.as_deref(), "--size", per.saturating_mul(2 * n))?;
    let filesystem = crate::fsutil::fs_name_at(dir.path())?;
    let mut total_steps = 2 + 2 * u64::from(opts.runs);
    progress.start(total_steps);
    let distinct: Vec<PathBuf> = (0..n).map(|i| dir.path().join(format!("distinct-{i}.bin"))).collect();
    for p in &distinct {
        super::write_filled(p, per, 0x5a)?;
    }
    progress.step("distinct files written");
    let shared = dir.path().join("shared.bin");
    super::write_filled(&shared, per * n, 0xa5)?;
    progress.step("shared file written");

    // Per configuration (CONFIGS order): MB/s and wall ms of every run.
    let mut mbps: [Vec<f64>; 2] = Default::default();
    let mut wall: [Vec<f64>; 2] = Default::default();
    let ratio = |mbps: &[Vec<f64>; 2]| stats::paired_ratio(&mbps[0], &mbps[1], opts.seed, false);
    let started = Instant::now();
    let mut r = 0u32;
    let stopped = loop {
        if r >= opts.runs {
            if let Some(why) = opts.until.stop(r, opts.runs, ratio(&mbps).width(), started.elapsed()) {
                break why;
            }
            total_steps += 2;
            progress.start(total_steps);
        }
        for k in 0..2 {
            let ci = (r as usize + k) % 2;
            let cfg = CONFIGS[ci];
            // (file, offset) per thread.
            let jobs: Vec<(PathBuf, u64)> = match cfg {
                Config::DistinctFiles => distinct.iter().map(|p| (p.clone(), 0)).collect(),
                Config::SharedFile => (0..n).map(|i| (shared.clone(), i * per)).collect(),
            };
            let secs = one_run(&jobs, per, chunk)?;
            let rate = (per * n) as f64 / secs / 1e6;
            progress.step(&format!("run {}: {} {rate:.0} MB/s", r + 1, cfg.name()));
            mbps[ci].push(rate);
            wall[ci].push(secs * 1e3);
        }
        r += 1;
    };
    let report = |cfg: Config| -> Result<ConfigReport> {
        let files: Vec<&Path> = match cfg {
            Config::DistinctFiles => distinct.iter().map(|p| p.as_path()).collect(),
            Config::SharedFile => vec![shared.as_path()],
        };
        let mut folios_kb = BTreeMap::new();
        for f in files {
            for (k, v) in folio::scan_file(f, None)?.folios_kb {
                *folios_kb.entry(k).or_default() += v;
            }
        }
        let i = cfg as usize;
        let stats = Summary::of(&mbps[i]);
        Ok(ConfigReport {
            mb_per_s: stats.median,
            stats,
            median_ms: stats::median(&wall[i]),
            folios_kb,
        })
    };
    let configs = Configs {
        distinct_files: report(Config::DistinctFiles)?,
        shared_file: report(Config::SharedFile)?,
    };
    let shared_over_distinct = configs.shared_file.mb_per_s / configs.distinct_files.mb_per_s;
    Ok(Report {
        kernel: kernel::KernelVersion::current().to_string(),
        threads: opts.threads,
        size_per_thread_bytes: per,
        chunk_bytes: chunk,
        runs: r,
        stopped,
        read_ahead_kb: read_ahead_kb(dir.path()),
        dir: dir.path().parent().unwrap_or(dir.path()).to_path_buf(),
        filesystem,
        configs,
        shared_over_distinct,
        ratios: Ratios {
            shared_over_distinct: ratio(&mbps),
        },
    })
}

/// Evict every job's file, then run one thread per job; wall seconds.
fn one_run(jobs: &[(PathBuf, u64)], per: u64, chunk: u64) -> Result<f64> {
    let mut files = Vec::new();
    for (p, _) in jobs {
        let f = File::open(p).map_err(|e| Error::io(p, e))?;
        pagecache::evict(&f, 0..0)?;
        files.push(f);
    }
    for (p, _) in jobs {
        let left = folio::scan_file(p, None)?.cached_kb;
        if left > 0 {
            return Err(Error::Other(format!(
                "{}: {left} kB stayed cached after eviction",
                p.display()
            )));
        }
    }
    let barrier = Barrier::new(jobs.len() + 1);
    let t = std::thread::scope(|s| -> Result<f64> {
        let handles: Vec<_> = files
            .iter()
            .zip(jobs)
            .map(|(f, (p, off))| {
                let barrier = &barrier;
                s.spawn(move || -> Result<()> {
                    barrier.wait();
                    read_range(f, p, *off, per, chunk)
                })
            })
            .collect();
        barrier.wait();
        let t = Instant::now();
        for h in handles {
            h.join()
                .map_err(|_| Error::Other("a readahead thread panicked".into()))??;
        }
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok(t)
}

/// `readahead(2)` `[off, off+len)` in `chunk`s, then read it back.
fn read_range(f: &File, p: &Path, off: u64, len: u64, chunk: u64) -> Result<()> {
    let mut pos = off;
    while pos < off + len {
        let n = chunk.min(off + len - pos);
        // SAFETY: plain syscall on a valid fd.
        let r = unsafe { libc::readahead(f.as_raw_fd(), pos as libc::off64_t, n as usize) };
        if r != 0 {
            return Err(Error::last_os("readahead"));
        }
        pos += n;
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = off;
    while pos < off + len {
        let n = (buf.len() as u64).min(off + len - pos) as usize;
        f.read_exact_at(&mut buf[..n], pos).map_err(|e| Error::io(p, e))?;
        pos += n as u64;
    }
    Ok(())
}

/// `read_ahead_kb` of the block device holding `path` (via
/// `/sys/dev/block/MAJ:MIN`), if it can be found.
fn read_ahead_kb(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    for p in [base.join("queue/read_ahead_kb"), base.join("../queue/read_ahead_kb")] {
        if let Some(v) = std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse().ok()) {
            return Some(v);
        }
    }
    None
}
