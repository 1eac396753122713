//! Benchmarks: the seeds' micro-benchmarks (`exec`, `mprotect`, `readahead`)
//! and paired A/B runs of real programs (`ab`).
//!
//! Every benchmark verifies the memory state it claims to measure (folio
//! sizes from `/proc/kpageflags`, PMD mappings from smaps) and reports that
//! state next to the numbers, so a result can be judged honestly.
//!
//! - [`exec`]: seed 000's RET-stub benchmark: cold faults and random calls
//!   into a large executable file mapping, baseline vs `MADV_HUGEPAGE` vs a
//!   page cache warmed with PMD folios.
//! - [`mprotect`]: seed 004's program: `mprotect` over 1 GiB of PTE-mapped
//!   THPs, 64 KiB mTHPs and 4 KiB pages.
//! - [`readahead`]: seed 002's effect in small: readahead throughput of many
//!   files vs one shared file from N threads.
//! - [`ab`]: a real command run alternately with its text in small and in PMD
//!   page-cache folios, paired, with a confidence interval.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

pub mod ab;
pub mod exec;
pub mod mprotect;
pub mod perf;
pub mod plot;
pub mod readahead;
pub mod stats;

/// Receives progress while a benchmark runs (the CLI draws a progress bar).
pub trait Progress: Sync {
    /// The benchmark will take `total` steps.
    fn start(&self, total: u64);
    /// One step is done; `msg` says what comes next or what was done.
    fn step(&self, msg: &str);
    /// A note for the user (e.g. a skipped case), printed above the bar.
    fn note(&self, _msg: &str) {}
}

/// No progress reporting.
impl Progress for () {
    fn start(&self, _total: u64) {}
    fn step(&self, _msg: &str) {}
}

const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// Filesystem type name of `path` for messages ("ext4", "tmpfs", ... or the
/// magic number in hex), and whether it is memory-backed (tmpfs/ramfs: no
/// large page-cache folios with `shmem_enabled=never`, and no disk I/O).
pub fn fs_kind(path: &Path) -> Result<(String, bool)> {
    let st = rustix::fs::statfs(path).map_err(|e| Error::io(path, e.into()))?;
    let magic = st.f_type as i64;
    let name = match magic {
        TMPFS_MAGIC => "tmpfs".to_string(),
        RAMFS_MAGIC => "ramfs".to_string(),
        0xEF53 => "ext4".to_string(),
        0x5846_5342 => "xfs".to_string(),
        0x9123_683E => "btrfs".to_string(),
        0x0100_4D31 => "squashfs".to_string(),
        0x794C_7630 => "overlayfs".to_string(),
        m => format!("fs 0x{m:x}"),
    };
    Ok((name, matches!(magic, TMPFS_MAGIC | RAMFS_MAGIC)))
}

/// Choose the directory for a benchmark's scratch files: `dir` when given,
/// else `$TMPDIR` (or `/tmp`) unless it is memory-backed, else the current
/// directory. Refuses tmpfs/ramfs with a clear message: the exec and
/// readahead benchmarks measure the disk page cache.
pub fn scratch_dir(dir: Option<&Path>) -> Result<tempfile::TempDir> {
    let base = match dir {
        Some(d) => d.to_path_buf(),
        None => {
            let tmp = std::env::var_os("TMPDIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            match fs_kind(&tmp) {
                Ok((_, false)) => tmp,
                _ => std::env::current_dir().map_err(|e| Error::io(".", e))?,
            }
        }
    };
    let (kind, mem) = fs_kind(&base)?;
    if mem {
        return Err(Error::Invalid(format!(
            "{} is on {kind}, which has no large page-cache folios here and no readahead: \
             pass --dir DIR on a disk filesystem (ext4, xfs)",
            base.display()
        )));
    }
    tempfile::Builder::new()
        .prefix(".hugetext-bench-")
        .tempdir_in(&base)
        .map_err(|e| Error::io(&base, e))
}

/// Create (or overwrite) `path` with `size` bytes all equal to `byte`, and
/// flush it to disk so that its page cache can be evicted afterwards.
pub fn write_filled(path: &Path, size: u64, byte: u8) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let block = vec![byte; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).map_err(|e| Error::io(path, e))?;
        left -= n as u64;
    }
    f.sync_all().map_err(|e| Error::io(path, e))?;
    Ok(())
}

/// Read one `kB` field (e.g. `FilePmdMapped`, `AnonHugePages`) of the
/// mapping that starts at `addr` in `/proc/self/smaps`.
pub fn smaps_kb(addr: usize, field: &str) -> Result<Option<u64>> {
    let text = std::fs::read_to_string("/proc/self/smaps").map_err(|e| Error::io("/proc/self/smaps", e))?;
    let head = format!("{addr:x}-");
    let mut inside = false;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            inside = first.starts_with(&head);
            continue;
        }
        if inside {
            if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
                return Ok(rest.trim().trim_end_matches("kB").trim().parse().ok());
            }
        }
    }
    Ok(None)
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
    fn smaps_field_of_own_mapping() {
        let pmd = crate::kernel::pmd_size();
        let m = crate::kernel::Mapping::anon_aligned(2 * pmd, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
        m.madvise(0, 2 * pmd, crate::kernel::MADV_HUGEPAGE).unwrap();
        // SAFETY: writing our own fresh mapping.
        unsafe { std::ptr::write_bytes(m.as_ptr(), 1, 2 * pmd) };
        let v = smaps_kb(m.addr(), "AnonHugePages")
            .unwrap()
            .expect("mapping is in smaps");
        // THP may be disabled on some machines; here (madvise) both are PMDs.
        if crate::kernel::thp_enabled().as_deref() != Some("never") {
            assert_eq!(v, 2 * pmd as u64 / 1024);
        }
        assert_eq!(smaps_kb(m.addr(), "NoSuchField").unwrap(), None);
    }
}
