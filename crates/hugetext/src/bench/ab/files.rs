//! The files whose text is managed: what the warm-up run saw mapped
//! executable and `--files`, with their text ranges and windows.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use hugetext_abi::geometry::{self, Windows};

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
    /// Whole windows of the unit of huge text (the PMD, or the contpte
    /// block with 64 KiB pages) inside the text: what can be mapped huge.
    pub unit_windows: u64,
    /// Whether the command mapped this text at an address congruent to its
    /// file offset modulo the unit (required for huge mappings); `null`
    /// when it was not seen mapped (a `--files` entry).
    pub congruent: Option<bool>,
    /// Of `unit_windows`, those the command mapped at a unit-congruent
    /// address, i.e. that can actually be mapped huge when their folios
    /// are of the unit; `null` when not seen mapped.
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

/// Whole windows of the unit of huge text inside `ranges`.
fn windows_in(ranges: &[Range<u64>], unit: u64) -> u64 {
    ranges
        .iter()
        .map(|r| Windows::<u64>::new(r.start, r.end, unit).count())
        .sum()
}

/// Indices (offset / `unit`) of the whole windows of `[lo, hi)`.
fn window_indices(lo: u64, hi: u64, unit: u64) -> Range<u64> {
    let w = Windows::<u64>::new(lo, hi, unit);
    w.first_index()..w.end_index()
}

/// Build the managed file list from the warm-up mappings and `--files`.
pub(super) fn text_files(seen: &[Vma], extra: &[PathBuf]) -> Result<Vec<TextFile>> {
    // Windows of the unit of huge text, as `warm` counts them (the PMD, or
    // the contpte block where no page-cache folio reaches the PMD).
    let unit = kernel::unit_size() as u64;
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
        let congruent = (!maps.is_empty()).then(|| maps.iter().any(|m| geometry::congruent(m.start, m.offset, unit)));
        let text_windows: BTreeSet<u64> = ranges
            .iter()
            .flat_map(|r| window_indices(r.start, r.end, unit))
            .collect();
        let mapped_windows: BTreeSet<u64> = maps
            .iter()
            .filter(|m| geometry::congruent(m.start, m.offset, unit))
            .flat_map(|m| window_indices(m.offset, m.offset + (m.end - m.start), unit))
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
            unit_windows: windows_in(&ranges, unit),
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

    /// Bug fixed: `bench ab` counted a file's windows with the PMD where
    /// `warm` and `inspect` use the unit of huge text. With 64 KiB pages on
    /// arm64 (a 512 MiB PMD, a 2 MiB contpte unit) the 6 MiB of text below
    /// had 0 windows for `bench ab` and 2 for `warm`. Counted here with the
    /// unit given, as `warm` counts them.
    #[test]
    fn windows_are_counted_in_the_unit_as_warm_counts_them() {
        let text = [0x1000..0x60_1000u64, 0x80_0000..0x80_8000];
        for unit in [64u64 << 10, 2 << 20, 512 << 20] {
            let warm: u64 = text
                .iter()
                .map(|r| Windows::<u64>::new(r.start, r.end, unit).count())
                .sum();
            assert_eq!(windows_in(&text, unit), warm, "unit {unit:#x}");
        }
        assert_eq!(windows_in(&text, 2 << 20), 2);
        assert_eq!(windows_in(&text, 64 << 10), 95);
        assert_eq!(windows_in(&text, 512 << 20), 0);
        assert_eq!(window_indices(0x1000, 0x60_1000, 2 << 20), 1..3);
        // Congruence modulo the unit, not the PMD: a mapping 64 KiB off a
        // 2 MiB boundary is congruent for a 64 KiB unit only.
        assert!(geometry::congruent(0x7f00_0001_0000u64, 0, 64 << 10));
        assert!(!geometry::congruent(0x7f00_0001_0000u64, 0, 2 << 20));
    }

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
