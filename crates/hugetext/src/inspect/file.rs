//! `inspect --file`: the page cache of a file, mapped or not.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::ClassKb;
use crate::folio::{self, FileFolios};
use crate::kernel;
use crate::{Error, Result};

/// `hugetext inspect --file … --json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FilesJson {
    /// Whether folio sizes were visible for every file.
    pub pfn_access: bool,
    /// The running kernel's contpte block (64 kB with 4 KiB pages, 2048 kB
    /// with 16 or 64 KiB pages); `null` for a page size without one.
    pub contpte_block_kb: Option<u64>,
    /// The unit of huge text, kB: the PMD size, or the contpte block where
    /// no page-cache folio reaches the PMD (arm64, 64 KiB pages); each
    /// file's `unit_windows` are windows of this size.
    pub unit_kb: u64,
    pub files: Vec<FileJson>,
}

/// One file in [`FilesJson`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileJson {
    pub path: PathBuf,
    pub size: u64,
    pub cached_kb: u64,
    /// kB per folio size (`"2048kB"`); `null` without PFN access.
    pub folios: Option<ClassKb>,
    /// Whole windows of the huge unit (`unit_kb`) in the file.
    pub unit_windows: u64,
    /// Of those, held in one folio of at least the unit each.
    pub unit_windows_huge: u64,
    /// kB in folios that arm64 can map with contiguous PTEs (at least the
    /// contpte block, below the PMD size); `null` without PFN access or
    /// contpte blocks.
    pub contpte_kb: Option<u64>,
}

impl FilesJson {
    /// The JSON report of these file views.
    pub fn of(views: &[FileView]) -> FilesJson {
        FilesJson {
            pfn_access: views.iter().all(|v| v.folios_kb.is_some()),
            contpte_block_kb: kernel::cont_pte_size().map(|b| b as u64 / 1024),
            unit_kb: kernel::unit_size() as u64 / 1024,
            files: views
                .iter()
                .map(|v| FileJson {
                    path: v.path.clone(),
                    size: v.size,
                    cached_kb: v.cached_kb,
                    folios: v
                        .folios_kb
                        .as_ref()
                        .map(|f| f.iter().map(|(k, n)| (format!("{k}kB"), *n)).collect()),
                    unit_windows: v.unit_windows,
                    unit_windows_huge: v.unit_windows_huge,
                    contpte_kb: v.contpte_kb,
                })
                .collect(),
        }
    }
}

/// The page-cache view of one file for `inspect --file`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileView {
    /// The file.
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// kB of the file in the page cache.
    pub cached_kb: u64,
    /// kB held in folios of each size (key: folio size in kB); `None` when
    /// PFNs are hidden (no CAP_SYS_ADMIN).
    pub folios_kb: Option<std::collections::BTreeMap<u64, u64>>,
    /// Whole PMD-size windows of the file, and how many are one PMD-size folio.
    pub unit_windows: u64,
    /// Windows held in one PMD-size folio.
    pub unit_windows_huge: u64,
    /// kB held in folios of at least the contpte block size
    /// ([`kernel::cont_pte_size`]) and smaller than the PMD size: what arm64
    /// maps with contiguous PTEs where it cannot use a PMD. `None` without
    /// folio sizes, or for a page size without contpte blocks.
    pub contpte_kb: Option<u64>,
}

/// kB of `folios_kb` (kB per folio size in kB) in folios of at least
/// `block_kb` and below `pmd_kb`. Pure.
pub fn contpte_kb(folios_kb: &std::collections::BTreeMap<u64, u64>, block_kb: u64, pmd_kb: u64) -> u64 {
    folios_kb.range(block_kb..pmd_kb).map(|(_, kb)| kb).sum()
}

fn contpte_of(folios_kb: &std::collections::BTreeMap<u64, u64>) -> Option<u64> {
    let block = kernel::cont_pte_size()? as u64 / 1024;
    Some(contpte_kb(folios_kb, block, kernel::pmd_size() as u64 / 1024))
}

/// Inspect the page cache of a file, whether or not anyone maps it, without
/// reading anything that is not cached.
pub fn inspect_file(path: &Path) -> Result<FileView> {
    if kernel::pfn_access() {
        let f: FileFolios = folio::scan_file(path, None)?;
        return Ok(FileView {
            path: f.path.clone(),
            size: f.size,
            cached_kb: f.cached_kb,
            unit_windows: f.total_windows,
            unit_windows_huge: f.unit_windows.len() as u64,
            contpte_kb: contpte_of(&f.folios_kb),
            folios_kb: Some(f.folios_kb),
        });
    }
    // No PFNs: mincore says what is cached, not in which folios.
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::Invalid(format!("{}: not a regular file", path.display())));
    }
    let size = meta.len();
    let unit = kernel::unit_size() as u64;
    let mut cached = 0u64;
    let chunk = 64 * unit;
    let mut off = 0;
    while off < size {
        let len = chunk.min(size - off) as usize;
        use std::os::fd::AsFd;
        let m = kernel::Mapping::file_congruent(file.as_fd(), off, len, libc::PROT_READ, unit as usize)?;
        cached += m.resident()?.iter().filter(|&&r| r).count() as u64;
        off += len as u64;
    }
    Ok(FileView {
        path: path.to_path_buf(),
        size,
        cached_kb: cached * kernel::page_size() as u64 / 1024,
        folios_kb: None,
        unit_windows: size / unit,
        unit_windows_huge: 0,
        contpte_kb: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_views_as_json() {
        let view = |folios_kb| FileView {
            path: PathBuf::from("/usr/bin/x"),
            size: 8 << 20,
            cached_kb: 6144,
            folios_kb,
            unit_windows: 4,
            unit_windows_huge: 2,
            contpte_kb: Some(1024),
        };
        let with = view(Some([(4, 2048), (2048, 4096)].into_iter().collect()));
        let v = serde_json::to_value(FilesJson::of(std::slice::from_ref(&with))).unwrap();
        assert_eq!(v["pfn_access"], true);
        let f = &v["files"][0];
        assert_eq!(f["folios"], serde_json::json!({"4kB": 2048, "2048kB": 4096}));
        assert_eq!(
            (&f["path"], &f["size"], &f["cached_kb"]),
            (&"/usr/bin/x".into(), &(8u64 << 20).into(), &6144.into())
        );
        assert_eq!((&f["unit_windows"], &f["unit_windows_huge"]), (&4.into(), &2.into()));
        assert_eq!(f["contpte_kb"], 1024);
        // One file without folio sizes makes the whole report "no PFN access".
        let v = serde_json::to_value(FilesJson::of(&[with, view(None)])).unwrap();
        assert_eq!(v["pfn_access"], false);
        assert!(v["files"][1]["folios"].is_null());
    }

    #[test]
    fn contpte_counts_folios_from_the_block_to_below_the_pmd() {
        let f = [(4, 100), (16, 10), (64, 640), (512, 1024), (2048, 4096)]
            .into_iter()
            .collect();
        // 4 KiB pages: 64 kB blocks, 2 MiB PMD.
        assert_eq!(contpte_kb(&f, 64, 2048), 640 + 1024);
        // 16 KiB pages: 2 MiB blocks, 32 MiB PMD: the 2 MiB folios count.
        assert_eq!(contpte_kb(&f, 2048, 32768), 4096);
    }
}
