//! The files whose text is managed: what the warm-up run saw mapped
//! executable and `--files`, with their text ranges and windows.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::procfs::Vma;
use crate::{elf, kernel, warm, Error, Result};

/// A file whose text is managed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TextFile {
    pub path: PathBuf,
    pub size: u64,
    /// Byte ranges of text (`[start, end)` file offsets): the executable
    /// segments, over which the state is measured.
    pub text_ranges: Vec<[u64; 2]>,
    /// Byte ranges put in small or PMD folios: what `hugetext warm` warms
    /// (all read-only segments of an ELF file, any other file whole).
    pub managed_ranges: Vec<[u64; 2]>,
    /// `hugetext warm`'s plan for the file (used for the huge side).
    #[serde(skip_serializing)]
    pub plan: Option<warm::Target>,
    pub text_kb: u64,
    /// Whole 2 MiB file windows inside the text: what can be PMD-mapped.
    pub pmd_windows: u64,
    /// Whether the command mapped this text at an address congruent to its
    /// file offset modulo 2 MiB (required for PMD mappings); `null` when it
    /// was not seen mapped (a `--files` entry).
    pub congruent: Option<bool>,
    /// Of `pmd_windows`, those the command mapped at a 2 MiB-congruent
    /// address, i.e. that can actually be PMD-mapped when their folios are
    /// PMD-size; `null` when not seen mapped.
    pub mappable_windows: Option<u64>,
    /// "maps" (seen in the warm-up run) or "--files".
    pub source: &'static str,
    /// Filesystem the file lives on.
    pub filesystem: String,
}

/// File ranges of the executable `PT_LOAD` segments of an ELF file (32- or
/// 64-bit, through [`elf::text_segments`]); empty when it is not ELF.
fn exec_ranges(path: &Path) -> Vec<Range<u64>> {
    elf::text_segments(path)
        .map(|segs| {
            segs.iter()
                .filter(|s| s.is_executable() && s.file_size > 0)
                .map(|s| s.file_range())
                .collect()
        })
        .unwrap_or_default()
}

/// kB of the pages whose offsets lie in `r` (how [`folio::scan_file`]
/// counts a range).
pub(super) fn range_kb(r: Range<u64>) -> u64 {
    let ps = kernel::page_size() as u64;
    (r.end.div_ceil(ps) - r.start.div_ceil(ps)) * ps / 1024
}

/// Whole PMD windows inside `ranges`.
fn windows_in(ranges: &[Range<u64>]) -> u64 {
    let pmd = kernel::pmd_size() as u64;
    ranges
        .iter()
        .map(|r| (r.end / pmd).saturating_sub(r.start.div_ceil(pmd)))
        .sum()
}

/// Build the managed file list from the warm-up mappings and `--files`.
pub(super) fn text_files(seen: &[Vma], extra: &[PathBuf]) -> Result<Vec<TextFile>> {
    let pmd = kernel::pmd_size() as u64;
    let mut by_path: BTreeMap<PathBuf, Vec<&Vma>> = BTreeMap::new();
    for m in seen {
        by_path.entry(PathBuf::from(&m.path)).or_default().push(m);
    }
    let mut paths: Vec<(PathBuf, &'static str)> = by_path.keys().map(|p| (p.clone(), "maps")).collect();
    let known: BTreeSet<PathBuf> = by_path.keys().cloned().collect();
    for p in extra {
        let c = p.canonicalize().map_err(|e| Error::io(p, e))?;
        if !known.contains(&c) && !paths.iter().any(|(q, _)| *q == c) {
            paths.push((c, "--files"));
        }
    }
    let mut out = Vec::new();
    for (path, source) in paths {
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_file() {
            continue;
        }
        let size = meta.len();
        let maps = by_path.get(&path).map(|v| v.as_slice()).unwrap_or(&[]);
        let mut ranges = exec_ranges(&path);
        if ranges.is_empty() {
            ranges = maps
                .iter()
                .map(|m| m.offset..(m.offset + (m.end - m.start)).min(size))
                .collect();
            if ranges.is_empty() {
                // A non-ELF `--files` entry: manage the whole file.
                ranges.push(0..size);
            }
        }
        ranges.sort_by_key(|r| r.start);
        ranges.dedup();
        let congruent = (!maps.is_empty()).then(|| maps.iter().any(|m| m.start.wrapping_sub(m.offset) % pmd == 0));
        let text_windows: BTreeSet<u64> = ranges.iter().flat_map(|r| r.start.div_ceil(pmd)..r.end / pmd).collect();
        let mapped_windows: BTreeSet<u64> = maps
            .iter()
            .filter(|m| m.start.wrapping_sub(m.offset) % pmd == 0)
            .flat_map(|m| m.offset.div_ceil(pmd)..(m.offset + (m.end - m.start)) / pmd)
            .collect();
        let mappable_windows = (!maps.is_empty()).then(|| text_windows.intersection(&mapped_windows).count() as u64);
        let filesystem = crate::fsutil::fs_name_at(&path).unwrap_or_else(|_| "?".into());
        let plan = warm::plan(&path).ok();
        let managed_ranges = match &plan {
            Some(p) if !p.ranges.is_empty() => p.ranges.iter().map(|r| [r.offset, r.offset + r.len]).collect(),
            _ => ranges.iter().map(|r| [r.start, r.end]).collect(),
        };
        out.push(TextFile {
            managed_ranges,
            plan,
            text_kb: ranges.iter().map(|r| range_kb(r.clone())).sum(),
            pmd_windows: windows_in(&ranges),
            text_ranges: ranges.iter().map(|r| [r.start, r.end]).collect(),
            path,
            size,
            congruent,
            mappable_windows,
            source,
            filesystem,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_ranges_of_elf_and_other_files() {
        let ranges = exec_ranges(&std::fs::read_link("/proc/self/exe").unwrap());
        assert!(!ranges.is_empty());
        assert!(ranges.iter().all(|r| r.start < r.end));
        assert!(exec_ranges(Path::new("/etc/passwd")).is_empty());
    }

    /// A minimal little-endian ELF32 i386 executable: one read-only PT_LOAD
    /// at 0x1000 (4 KiB) and one executable PT_LOAD at 0x2000 (8 KiB).
    fn elf32(path: &Path) {
        let mut d = vec![0u8; 0x4000];
        d[..16].copy_from_slice(b"\x7fELF\x01\x01\x01\0\0\0\0\0\0\0\0\0");
        let put16 = |d: &mut Vec<u8>, at: usize, v: u16| d[at..at + 2].copy_from_slice(&v.to_le_bytes());
        let put32 = |d: &mut Vec<u8>, at: usize, v: u32| d[at..at + 4].copy_from_slice(&v.to_le_bytes());
        put16(&mut d, 16, 2); // ET_EXEC
        put16(&mut d, 18, 3); // EM_386
        put32(&mut d, 20, 1);
        put32(&mut d, 24, 0x0804_a000); // e_entry
        put32(&mut d, 28, 52); // e_phoff
        put16(&mut d, 40, 52); // e_ehsize
        put16(&mut d, 42, 32); // e_phentsize
        put16(&mut d, 44, 2); // e_phnum
        put16(&mut d, 46, 40); // e_shentsize
        for (i, (off, len, flags)) in [(0x1000u32, 0x1000u32, 4u32), (0x2000, 0x2000, 5)]
            .into_iter()
            .enumerate()
        {
            let ph = 52 + 32 * i;
            put32(&mut d, ph, 1); // PT_LOAD
            put32(&mut d, ph + 4, off);
            put32(&mut d, ph + 8, 0x0804_8000 + off);
            put32(&mut d, ph + 12, 0x0804_8000 + off);
            put32(&mut d, ph + 16, len);
            put32(&mut d, ph + 20, len);
            put32(&mut d, ph + 24, flags);
            put32(&mut d, ph + 28, 0x1000);
        }
        std::fs::write(path, d).unwrap();
    }

    /// Bug fixed by reading through elf::text_segments: ab's own reader took
    /// only ELF64 headers, so a 32-bit program's text fell back to whatever
    /// the warm-up run happened to map.
    #[test]
    fn exec_ranges_of_a_32_bit_program() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prog32");
        elf32(&p);
        assert_eq!(exec_ranges(&p), vec![0x2000..0x4000]);
    }
}
