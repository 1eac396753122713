//! Benchmarks: the micro-benchmarks of the Linux patches on large folios
//! (`exec`, `mprotect`, `readahead`) and paired A/B runs of real programs
//! (`ab`).
//!
//! Every benchmark verifies the memory state it claims to measure (folio
//! sizes from `/proc/kpageflags`, PMD mappings from smaps) and reports that
//! state next to the numbers, so a result can be judged honestly. Every
//! ratio is paired run by run and given with a 95% confidence interval
//! ([`stats::paired_ratio`]); [`Until`] keeps measuring until the intervals
//! are narrow enough or a time budget runs out.
//!
//! - [`exec`]: the exec-readahead microbenchmark of the Linux "large folios
//!   for exec memory" patches (RET stubs): cold faults and random calls into
//!   a large executable file mapping, baseline vs `MADV_HUGEPAGE` vs a page
//!   cache warmed with PMD folios.
//! - [`mprotect`]: the test program of the Linux "Optimize mprotect() for
//!   large folios" patches: `mprotect` over 1 GiB of PTE-mapped THPs, 64 KiB
//!   mTHPs and 4 KiB pages.
//! - [`readahead`]: the effect of the Linux "batch folio insertion"
//!   readahead patches, in small: readahead throughput of many files vs one
//!   shared file from N threads.
//! - [`ab`]: a real command run alternately with its text in small and in PMD
//!   page-cache folios, paired, with a confidence interval; and
//!   [`ab::startup`], what `hugetext run` costs a command's start-up, route
//!   by route, against plain and warmed starts.

use std::path::Path;
use std::time::Duration;

use crate::{kernel, Error, Result};

pub mod ab;
pub mod exec;
pub mod marker;
pub mod mprotect;
pub mod perf;
pub mod plot;
pub mod readahead;
pub mod scratch;
pub mod stats;

pub use scratch::{scratch_dir, ScratchDir};

pub use crate::progress::Progress;

/// Create `path` (a new file: `O_EXCL`, never through a link) with `size`
/// bytes all equal to `byte`, and flush it to disk so that its page cache
/// can be evicted afterwards.
pub fn write_filled(path: &Path, size: u64, byte: u8) -> Result<()> {
    write_pattern(path, size, &[byte])
}

/// Write a new file of `size` bytes repeating `pattern` (whose length
/// divides 1 MiB: an instruction word, for instance), synced.
pub fn write_pattern(path: &Path, size: u64, pattern: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    assert!(!pattern.is_empty() && (1 << 20) % pattern.len() == 0);
    let block: Vec<u8> = pattern.iter().copied().cycle().take(1 << 20).collect();
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).map_err(|e| Error::io(path, e))?;
        left -= n as u64;
    }
    f.sync_all().map_err(|e| Error::io(path, e))?;
    Ok(())
}

/// `size` rounded down to whole PMDs, for `--size`: at least one PMD.
pub fn pmd_multiple(size: u64) -> Result<u64> {
    let pmd = kernel::pmd_size() as u64;
    match size / pmd * pmd {
        0 => Err(Error::Invalid(format!(
            "--size must be at least one PMD ({} KiB)",
            pmd / 1024
        ))),
        n => Ok(n),
    }
}

/// `size` rounded down to whole windows of the unit of huge text
/// ([`kernel::unit_size`]: the PMD, or the 2 MiB contiguous-PTE block on
/// arm64 with 64 KiB pages), for `--size`: at least one.
pub fn unit_multiple(size: u64) -> Result<u64> {
    let unit = kernel::unit_size() as u64;
    match size / unit * unit {
        0 => Err(Error::Invalid(format!(
            "--size must be at least one {} ({} KiB)",
            if unit == kernel::pmd_size() as u64 {
                "PMD"
            } else {
                "contiguous-PTE block"
            },
            unit / 1024
        ))),
        n => Ok(n),
    }
}

/// Parse a size such as `512M`, `1G`, `64k`, `4096` (binary units).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => {
            let unit = t[i..]
                .trim_end_matches(['B', 'b'])
                .trim_end_matches('i')
                .to_ascii_lowercase();
            let m = match unit.as_str() {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(Error::Invalid(format!("bad size {s:?}: use e.g. 512M, 1G, 64K"))),
            };
            (&t[..i], m)
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| Error::Invalid(format!("bad size {s:?}: use e.g. 512M, 1G, 64K")))?;
    n.checked_mul(mult)
        .ok_or_else(|| Error::Invalid(format!("size {s:?} is too large")))
}

/// When a benchmark that measures run by run stops: after its minimum
/// number of runs, or — with `ci_width` — once every ratio it reports has a
/// 95% confidence interval at most that wide, or `max_time` has passed since
/// the first run started, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Until {
    /// Keep adding runs until the widest ratio interval (`hi - lo`) is at
    /// most this; `None`: stop after the minimum runs.
    pub ci_width: Option<f64>,
    /// Stop adding runs after this long (only with `ci_width`).
    pub max_time: Duration,
}

impl Default for Until {
    fn default() -> Self {
        Until {
            ci_width: None,
            max_time: Duration::from_secs(60),
        }
    }
}

/// Why a benchmark stopped measuring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stopped {
    /// The requested number of runs was done.
    Runs,
    /// Every ratio's interval became narrow enough.
    Ci,
    /// The time budget ran out first (the intervals may be wider than asked).
    MaxTime,
}

impl Until {
    /// Whether to stop after `done` runs whose widest ratio interval is
    /// `widest`, `elapsed` after the first run started: `None` to measure
    /// another run. At least `min_runs` runs are always made; with a CI
    /// width, at least [`stats::MIN_RUNS_FOR_VERDICT`] too (fewer runs give
    /// no 95% interval, however narrow it looks).
    pub fn stop(&self, done: u32, min_runs: u32, widest: f64, elapsed: Duration) -> Option<Stopped> {
        let least = match self.ci_width {
            Some(_) => min_runs.max(stats::MIN_RUNS_FOR_VERDICT as u32),
            None => min_runs,
        };
        if done < least {
            return None;
        }
        match self.ci_width {
            None => Some(Stopped::Runs),
            Some(w) if widest <= w => Some(Stopped::Ci),
            Some(_) if elapsed >= self.max_time => Some(Stopped::MaxTime),
            Some(_) => None,
        }
    }

    /// Check the options: the width, when given, is a positive number.
    pub(crate) fn validate(&self) -> Result<()> {
        match self.ci_width {
            Some(w) if !(w > 0.0 && w.is_finite()) => Err(Error::Invalid(format!(
                "the CI width must be a positive number, not {w}"
            ))),
            _ => Ok(()),
        }
    }
}

/// Parse a duration such as `60s`, `90`, `2m`, `1.5m`, `500ms`, `1h`
/// (seconds without a unit).
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let bad = || Error::Invalid(format!("bad duration {s:?}: use e.g. 60s, 2m, 500ms"));
    let i = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let n: f64 = t[..i].parse().map_err(|_| bad())?;
    let secs = match t[i..].trim() {
        "" | "s" | "sec" => n,
        "ms" => n / 1e3,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

/// Milliseconds of a duration as f64.
pub(crate) fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn until_stops_at_runs_ci_or_time() {
        let s = Duration::from_secs;
        let runs = Until::default();
        assert_eq!(runs.stop(2, 3, 0.0, s(0)), None, "minimum runs first");
        assert_eq!(runs.stop(3, 3, 9.0, s(0)), Some(Stopped::Runs));
        let ci = Until {
            ci_width: Some(0.05),
            max_time: s(60),
        };
        assert_eq!(ci.stop(5, 6, 0.01, s(100)), None, "minimum runs even past the budget");
        assert_eq!(ci.stop(4, 3, 0.01, s(10)), None, "5 runs before an interval counts");
        assert_eq!(ci.stop(5, 3, 0.2, s(10)), None);
        assert_eq!(ci.stop(5, 3, 0.05, s(10)), Some(Stopped::Ci));
        assert_eq!(ci.stop(9, 3, 0.2, s(60)), Some(Stopped::MaxTime));
        assert_eq!(ci.stop(9, 3, f64::INFINITY, s(61)), Some(Stopped::MaxTime));
        assert!(ci.validate().is_ok());
        assert!(Until {
            ci_width: Some(0.0),
            ..ci
        }
        .validate()
        .is_err());
        assert!(Until {
            ci_width: Some(f64::NAN),
            ..ci
        }
        .validate()
        .is_err());
    }

    #[test]
    fn pmd_multiples() {
        let pmd = crate::kernel::pmd_size() as u64;
        assert_eq!(pmd_multiple(3 * pmd + 5).unwrap(), 3 * pmd);
        assert_eq!(pmd_multiple(pmd).unwrap(), pmd);
        assert!(pmd_multiple(pmd - 1).is_err());
        let unit = crate::kernel::unit_size() as u64;
        assert_eq!(unit_multiple(2 * unit + 1).unwrap(), 2 * unit);
        assert!(unit_multiple(unit - 1).is_err());
    }

    #[test]
    fn smaps_field_of_own_mapping() {
        // What exec and mprotect read back: the counters of the mapping that
        // starts at an address (procfs::own_mapping_stats).
        let pmd = crate::kernel::pmd_size();
        let m = crate::kernel::Mapping::anon_aligned(2 * pmd, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
        m.madvise(0, 2 * pmd, crate::kernel::MADV_HUGEPAGE).unwrap();
        // SAFETY: writing our own fresh mapping.
        unsafe { std::ptr::write_bytes(m.as_ptr(), 1, 2 * pmd) };
        let v = crate::procfs::own_mapping_stats(m.addr() as u64)
            .unwrap()
            .expect("mapping is in smaps")
            .anon_huge_kb;
        // THP may be disabled on some machines; here (madvise) both are PMDs.
        if crate::kernel::thp_mode() != Some(hugetext_abi::thp::ThpMode::Never) {
            assert_eq!(v, 2 * pmd as u64 / 1024);
        }
        assert!(crate::procfs::own_mapping_stats(m.addr() as u64 + 4096)
            .unwrap()
            .is_none());
    }
}
