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

use crate::{fsutil, kernel, Error, Result};

pub mod ab;
pub mod exec;
pub mod mprotect;
pub mod perf;
pub mod plot;
pub mod readahead;
pub mod stats;

pub use crate::progress::Progress;

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
            match fsutil::fs_name_at(&tmp) {
                Ok(kind) if !fsutil::is_memory_fs(&kind) => tmp,
                _ => std::env::current_dir().map_err(|e| Error::io(".", e))?,
            }
        }
    };
    let kind = fsutil::fs_name_at(&base)?;
    if fsutil::is_memory_fs(&kind) {
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
    fn pmd_multiples() {
        let pmd = crate::kernel::pmd_size() as u64;
        assert_eq!(pmd_multiple(3 * pmd + 5).unwrap(), 3 * pmd);
        assert_eq!(pmd_multiple(pmd).unwrap(), pmd);
        assert!(pmd_multiple(pmd - 1).is_err());
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
        if crate::kernel::thp_enabled().as_deref() != Some("never") {
            assert_eq!(v, 2 * pmd as u64 / 1024);
        }
        assert!(crate::procfs::own_mapping_stats(m.addr() as u64 + 4096)
            .unwrap()
            .is_none());
    }
}
