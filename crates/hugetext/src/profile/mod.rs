//! `profile`: which text is hot, and what 2 MiB pages would save there.
//!
//! Three sources fill one [`Profile`]:
//! - [`sample`]: instruction pointers of a live process or a command, from
//!   `perf_event_open(2)` with the software `cpu-clock` event (no PMU needed);
//! - [`script`]: the output of `perf script` (an existing `perf.data`);
//! - [`exact`]: every executed instruction, counted by a TCG plugin in
//!   `qemu-user`, which also drives the modelled iTLBs of [`tlb`].
//!
//! Addresses are attributed ([`attrib`]) to the file behind them, by file
//! offset, so a profile holds across ASLR, copies of the file and `run`'s
//! remapping; files are keyed by their GNU build-id where they have one.
//! A window is a PMD-sized range of file offsets `[k × PMD, (k + 1) × PMD)`:
//! where text is congruent (what `align` ensures) it is exactly the 2 MiB
//! page the kernel or `run` maps.
//!
//! The profile file (JSON, `"format": "hugetext-profile"`, `"version": 1`)
//! is described in doc/profile.md; [`hot_windows`] turns one into the file
//! ranges to remap for a share of the samples.

pub mod attrib;
pub mod exact;
pub mod report;
pub mod sample;
pub mod script;
pub mod tlb;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The `format` value of every profile file.
pub const FORMAT: &str = "hugetext-profile";
/// The profile file version this library writes and reads.
pub const VERSION: u32 = 1;

/// Where a profile's counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `perf_event_open` cpu-clock samples of a live process or command.
    Sampling,
    /// `perf script` output.
    PerfScript,
    /// Every executed instruction, under qemu-user.
    Exact,
}

/// A profile: per file, counts per 4 KiB page and per PMD window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    pub source: Source,
    /// What is counted: `samples` (sampling, perf script) or `instructions` (exact).
    pub unit: String,
    /// The command profiled, or empty.
    #[serde(default)]
    pub command: Vec<String>,
    /// The process profiled (`--pid`), if any.
    #[serde(default)]
    pub pid: Option<i32>,
    /// Granule of `pages` (bytes): 4096.
    pub page_size: u64,
    /// Window size (bytes): the unit of huge text, the PMD size (2 MiB on
    /// x86-64), or the 2 MiB contpte block with 64 KiB pages, whose 512 MiB
    /// PMD no page-cache folio reaches. The key keeps its name.
    pub unit_size: u64,
    /// All counts seen, attributed or not.
    pub total: u64,
    /// Counts at addresses no file backs (JIT code, vdso, a process gone before its maps were read).
    pub unattributed: u64,
    /// Files, hottest first.
    pub files: Vec<FileProfile>,
    /// The iTLB model's estimate (exact source only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itlb: Option<tlb::Estimate>,
}

/// One file's counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileProfile {
    /// The path it was mapped from (as `/proc/PID/maps` names it).
    pub path: String,
    /// GNU build-id (hex), the key that survives copies and rebuilds' renames.
    pub build_id: Option<String>,
    /// File ranges `[start, end)` of its executable segments.
    pub text: Vec<[u64; 2]>,
    /// Counts in this file.
    pub count: u64,
    /// `[page index, count]` by file offset / `page_size`, ascending.
    pub pages: Vec<[u64; 2]>,
    /// Windows with counts, ascending by offset.
    pub windows: Vec<Window>,
}

/// One PMD window of a file: file offsets `[offset, offset + unit_size)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub offset: u64,
    pub count: u64,
}

/// The windows of one file to remap for a share of a profile's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HotFile {
    pub path: String,
    pub build_id: Option<String>,
    /// Merged file ranges `[start, end)`, PMD-aligned, ascending.
    pub ranges: Vec<[u64; 2]>,
    /// Counts inside them.
    pub count: u64,
}

impl Profile {
    /// Read and check a profile file.
    pub fn load(path: &Path) -> Result<Profile> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Profile::parse(&text).map_err(|msg| Error::Invalid(format!("{}: {msg}", path.display())))
    }

    /// Parse a profile's JSON; Err says what is wrong with it.
    pub fn parse(text: &str) -> Result<Profile> {
        let mut v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::Invalid(format!("not a hugetext profile (not JSON: {e})")))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(Error::Invalid(format!(
                "not a hugetext profile (no \"format\": \"{FORMAT}\")"
            )));
        }
        match v.get("version").and_then(|f| f.as_u64()) {
            Some(n) if n == VERSION as u64 => {}
            other => {
                return Err(Error::Invalid(format!(
                    "profile version {} is not supported (this hugetext reads version {VERSION}); profile again",
                    other.map_or("?".to_string(), |n| n.to_string())
                )))
            }
        }
        // Profiles written before the unit had its name say `pmd_size`.
        crate::units::accept_old_keys(&mut v, &["unit_size"]);
        let p: Profile = serde_json::from_value(v).map_err(|e| Error::Invalid(format!("malformed profile: {e}")))?;
        if p.unit_size == 0 || !p.unit_size.is_power_of_two() || p.page_size == 0 {
            return Err(Error::Invalid(
                "malformed profile: page_size and unit_size must be powers of two".into(),
            ));
        }
        Ok(p)
    }

    /// The counts attributed to files.
    pub fn attributed(&self) -> u64 {
        self.files.iter().map(|f| f.count).sum()
    }
}

/// Write an output file (the profile, the SVG) by the rule for every file
/// hugetext writes ([`crate::fsutil::check_output`]: never through or over
/// a link): a new file beside it, mode 0666 less the umask, renamed over it.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let out = crate::fsutil::check_output(path).map_err(|e| Error::io(path, e))?;
    let f = crate::fsutil::NewFile::beside_with_mode(&out, ".hugetext-profile-", 0o666)
        .map_err(|e| Error::io(crate::fsutil::dir_of(path), e))?;
    f.file().write_all(bytes).map_err(|e| Error::io(path, e))?;
    f.commit(&out).map_err(|e| Error::io(path, e))
}

/// How many of `counts` (largest first) it takes to hold each share of
/// their sum. Pure.
pub fn windows_for_shares(counts: &[u64], shares: &[f64]) -> Vec<usize> {
    let mut sorted = counts.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = sorted.iter().sum();
    shares
        .iter()
        .map(|&s| {
            if total == 0 {
                return 0;
            }
            let need = (s * total as f64).ceil() as u64;
            let mut acc = 0;
            sorted
                .iter()
                .position(|&c| {
                    acc += c;
                    acc >= need
                })
                .map_or(sorted.len(), |i| i + 1)
        })
        .collect()
}

/// The windows to remap so that they hold at least `share` (0..=1) of the
/// profile's attributed counts: the hottest windows over all files, taken
/// in order of count (ties: path, then offset) until the share is reached;
/// grouped per file, adjacent windows merged. Pure.
pub fn hot_windows(p: &Profile, share: f64) -> Vec<HotFile> {
    let mut all: Vec<(usize, &Window)> = p
        .files
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.windows.iter().map(move |w| (i, w)))
        .filter(|(_, w)| w.count > 0)
        .collect();
    all.sort_by(|a, b| {
        b.1.count
            .cmp(&a.1.count)
            .then_with(|| p.files[a.0].path.cmp(&p.files[b.0].path))
            .then_with(|| a.1.offset.cmp(&b.1.offset))
    });
    let total: u64 = all.iter().map(|(_, w)| w.count).sum();
    let need = (share.clamp(0.0, 1.0) * total as f64).ceil() as u64;
    let mut acc = 0;
    let mut chosen: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (i, w) in all {
        if acc >= need {
            break;
        }
        acc += w.count;
        chosen.entry(i).or_default().push(w.offset);
    }
    chosen
        .into_iter()
        .map(|(i, mut offs)| {
            let f = &p.files[i];
            offs.sort_unstable();
            let count = f
                .windows
                .iter()
                .filter(|w| offs.contains(&w.offset))
                .map(|w| w.count)
                .sum();
            HotFile {
                path: f.path.clone(),
                build_id: f.build_id.clone(),
                ranges: merge_windows(&offs, p.unit_size),
                count,
            }
        })
        .collect()
}

/// The hot-window list (`hugetext_abi::hot`) of the windows holding
/// `share` of the profile's counts: what `run --hot` hands the preload.
/// A path that cannot be written on one line is left out (the file still
/// matches by build-id; without one it cannot match). Pure.
pub fn hot_list(p: &Profile, share: f64) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "{} {} {}\n",
        String::from_utf8_lossy(hugetext_abi::hot::MAGIC),
        hugetext_abi::hot::VERSION,
        p.unit_size
    );
    for f in hot_windows(p, share) {
        let id = f
            .build_id
            .as_deref()
            .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_hexdigit()));
        let path = match f.path.contains('\n') || f.path.is_empty() {
            true if id.is_none() => continue,
            true => "?",
            false => f.path.as_str(),
        };
        let ranges: Vec<String> = f.ranges.iter().map(|r| format!("{}-{}", r[0], r[1])).collect();
        let _ = writeln!(out, "{} {} {path}", id.unwrap_or("-"), ranges.join(","));
    }
    out
}

/// This machine's profile window, bytes: the unit of huge text (the PMD,
/// or the 2 MiB contpte block with 64 KiB pages, whose 512 MiB PMD no
/// page-cache folio reaches), which the preload remaps in. Every source
/// counts in it and every reader checks it.
pub fn window_size() -> u64 {
    crate::kernel::unit_size() as u64
}

/// Read the profile at `path` and compile the hot-window list for `share`
/// of its counts, for this machine ([`window_size`]).
pub fn load_hot_list(path: &Path, share: f64) -> Result<(String, Vec<HotFile>)> {
    let p = load_for(path)?;
    let list = fits(hot_list(&p, share)).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
    Ok((list, hot_windows(&p, share)))
}

/// A hot-window list the preload can read (at most
/// `hugetext_abi::hot::MAX_LEN` bytes), or why not.
pub fn fits(list: String) -> Result<String> {
    match list.len() <= hugetext_abi::hot::MAX_LEN {
        true => Ok(list),
        false => Err(Error::Invalid(format!(
            "the hot-window list would take {} KiB, more than the {} KiB the preload reads: give a smaller share",
            list.len().div_ceil(1024),
            hugetext_abi::hot::MAX_LEN / 1024
        ))),
    }
}

/// The hot windows of the profile at `path` for `share` of its counts, for
/// this machine ([`window_size`]; `warm` and `agent`'s `hot` key).
pub fn load_hot(path: &Path, share: f64) -> Result<Vec<HotFile>> {
    Ok(hot_windows(&load_for(path)?, share))
}

/// Read a profile and check that its windows are this machine's.
fn load_for(path: &Path) -> Result<Profile> {
    let p = Profile::load(path)?;
    let pmd = window_size();
    if p.unit_size != pmd {
        return Err(Error::Invalid(format!(
            "{}: the profile counts windows of {} KiB, this machine's huge pages are {} KiB: profile on this machine",
            path.display(),
            p.unit_size >> 10,
            pmd >> 10
        )));
    }
    Ok(p)
}

/// The hot ranges of the file at `path` with `build_id` among `hot`: by
/// build-id, then by path (not when both have build-ids that differ). Pure.
pub fn hot_ranges_of<'a>(hot: &'a [HotFile], path: &str, build_id: Option<&str>) -> Option<&'a [[u64; 2]]> {
    hot.iter()
        .find(|h| build_id.is_some() && h.build_id.as_deref() == build_id)
        .or_else(|| {
            hot.iter()
                .find(|h| h.path == path && (h.build_id.is_none() || build_id.is_none()))
        })
        .map(|h| h.ranges.as_slice())
}

/// Ascending window offsets → merged `[start, end)` ranges. Pure.
fn merge_windows(offs: &[u64], pmd: u64) -> Vec<[u64; 2]> {
    let mut out: Vec<[u64; 2]> = Vec::new();
    for &o in offs {
        match out.last_mut() {
            Some(r) if r[1] == o => r[1] = o + pmd,
            _ => out.push([o, o + pmd]),
        }
    }
    out
}

/// Counts being gathered: per file path, per 4 KiB page of file offset.
#[derive(Debug, Default)]
pub struct Tally {
    files: HashMap<String, (attrib::FileRef, BTreeMap<u64, u64>)>,
    /// All counts seen.
    pub total: u64,
    /// Counts no file backs.
    pub unattributed: u64,
}

/// The profile's page granule.
pub const PAGE: u64 = 4096;

impl Tally {
    /// Count `n` at `loc` (or unattributed).
    pub fn add(&mut self, loc: Option<&attrib::Loc>, n: u64) {
        self.total += n;
        let Some(loc) = loc else {
            self.unattributed += n;
            return;
        };
        let e = self
            .files
            .entry(loc.file.path.clone())
            .or_insert_with(|| (loc.file.clone(), BTreeMap::new()));
        *e.1.entry(loc.offset / PAGE).or_default() += n;
    }

    /// The profile of what was counted, hottest file first.
    pub fn finish(self, source: Source, unit: &str, pmd: u64) -> Profile {
        let mut files: Vec<FileProfile> = self
            .files
            .into_values()
            .map(|(f, pages)| file_profile(&f, pages, pmd))
            .collect();
        files.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.path.cmp(&b.path)));
        Profile {
            format: FORMAT.into(),
            version: VERSION,
            source,
            unit: unit.into(),
            command: Vec::new(),
            pid: None,
            page_size: PAGE,
            unit_size: pmd,
            total: self.total,
            unattributed: self.unattributed,
            files,
            itlb: None,
        }
    }
}

fn file_profile(f: &attrib::FileRef, pages: BTreeMap<u64, u64>, pmd: u64) -> FileProfile {
    let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
    for (&pg, &n) in &pages {
        *windows.entry(pg * PAGE / pmd * pmd).or_default() += n;
    }
    FileProfile {
        path: f.path.clone(),
        build_id: f.build_id.clone(),
        text: f.text.iter().map(|s| [s.offset, s.offset + s.file_size]).collect(),
        count: pages.values().sum(),
        pages: pages.into_iter().map(|(k, v)| [k, v]).collect(),
        windows: windows
            .into_iter()
            .map(|(offset, count)| Window { offset, count })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 2 << 20;

    fn file(path: &str, windows: &[(u64, u64)]) -> FileProfile {
        FileProfile {
            path: path.into(),
            build_id: Some(format!("id-{path}")),
            text: vec![[0, 64 * M]],
            count: windows.iter().map(|w| w.1).sum(),
            pages: vec![],
            windows: windows
                .iter()
                .map(|&(k, c)| Window {
                    offset: k * M,
                    count: c,
                })
                .collect(),
        }
    }

    fn profile(files: Vec<FileProfile>) -> Profile {
        Profile {
            format: FORMAT.into(),
            version: VERSION,
            source: Source::Sampling,
            unit: "samples".into(),
            command: vec![],
            pid: None,
            page_size: PAGE,
            unit_size: M,
            total: files.iter().map(|f| f.count).sum(),
            unattributed: 0,
            files,
            itlb: None,
        }
    }

    #[test]
    fn shares_count_the_hottest_first() {
        assert_eq!(
            windows_for_shares(&[1, 50, 40, 9], &[0.5, 0.9, 0.99, 1.0]),
            vec![1, 2, 3, 4]
        );
        assert_eq!(windows_for_shares(&[], &[0.5]), vec![0]);
        assert_eq!(windows_for_shares(&[10], &[0.99]), vec![1]);
    }

    #[test]
    fn hot_windows_take_the_share_over_all_files_and_merge() {
        let p = profile(vec![
            file("/a", &[(0, 500), (1, 300), (5, 1)]),
            file("/b", &[(2, 150), (3, 49)]),
        ]);
        // 1000 in all: 50% = /a w0; 90% adds /a w1 and /b w2 (950);
        // 99% adds /b w3 (999); 100% adds /a w5.
        let h = hot_windows(&p, 0.5);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].ranges, vec![[0, M]]);
        let h = hot_windows(&p, 0.9);
        assert_eq!(h[0].ranges, vec![[0, 2 * M]]);
        assert_eq!(h[0].count, 800);
        assert_eq!(h[1].path, "/b");
        assert_eq!(h[1].ranges, vec![[2 * M, 3 * M]]);
        let h = hot_windows(&p, 0.99);
        assert_eq!(h[1].ranges, vec![[2 * M, 4 * M]]);
        assert_eq!(h[0].ranges, vec![[0, 2 * M]]);
        let h = hot_windows(&p, 1.0);
        assert_eq!(h[0].ranges, vec![[0, 2 * M], [5 * M, 6 * M]]);
        assert_eq!(h[0].build_id.as_deref(), Some("id-/a"));
        assert!(hot_windows(&p, 0.0).is_empty());
    }

    #[test]
    fn a_profile_round_trips_and_bad_files_are_refused() {
        let p = profile(vec![file("/a", &[(0, 5)])]);
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(Profile::parse(&text).unwrap(), p);
        assert!(Profile::parse("{").unwrap_err().to_string().contains("not JSON"));
        assert!(Profile::parse("{\"format\":\"x\"}")
            .unwrap_err()
            .to_string()
            .contains("not a hugetext profile"));
        let v2 = text.replace("\"version\":1", "\"version\":2");
        let list = hot_list(&profile(vec![file("/a", &[(0, 5), (3, 1)])]), 0.99);
        let parsed = hugetext_abi::hot::parse(list.as_bytes()).unwrap();
        assert_eq!(parsed.pmd, M);
        let e: Vec<_> = parsed.entries().collect();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].path, b"/a");
        assert_eq!(e[0].ranges, format!("0-{M},{}-{}", 3 * M, 4 * M).as_bytes());
        assert_eq!(fits(list.clone()).unwrap(), list);
        let big = "x".repeat(hugetext_abi::hot::MAX_LEN + 1);
        assert!(fits(big).unwrap_err().to_string().contains("give a smaller share"));
        assert!(Profile::parse(&v2)
            .unwrap_err()
            .to_string()
            .contains("version 2 is not supported"));
    }
}
