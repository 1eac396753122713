//! `warm`: put programs' text (and their libraries') into PMD-sized page-cache
//! folios and verify the result.
//!
//! For each file: work out which byte ranges to warm (an ELF file's read-only
//! `PT_LOAD` segments, any other file whole), evict those ranges' clean,
//! unmapped page cache, refill them bounded to the ranges with PMD-order
//! folios ([`crate::pagecache::fill_bounded`]), and read the folio sizes back
//! ([`crate::folio::scan_file`]). Every later process that maps a warmed
//! window at a 2 MiB-congruent address gets it PMD-mapped, with no copy
//! (KERNEL-NOTES §1).
//!
//! What can stay small, and why, is reported per file:
//! - the head and tail of a range (parts of a 2 MiB window) never fit a PMD;
//! - windows with pages that running processes map cannot be evicted
//!   ("blocked"; [`mapping_pids`] names the processes). `MADV_COLLAPSE`
//!   collapses them in place where the kernel allows it
//!   (`CONFIG_READ_ONLY_THP_FOR_FS`); otherwise [`replace_and_warm`] writes a
//!   warmed identical copy and renames it over the original;
//! - filesystems without large folios (tmpfs with `shmem_enabled=never`,
//!   btrfs here) never hold PMD folios for regular files.

use std::collections::BTreeSet;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::fsutil::{self, MetadataCopy, NewFile, ReplaceImpact};
use crate::kernel::{self, Mapping};
use crate::{folio, pagecache, procfs, Error, Result};

const KIB: u64 = 1024;

// ---------------------------------------------------------------------------
// What to warm

/// Whether a read-only segment's windows can be PMD-mapped when the program
/// runs (KERNEL-NOTES §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// `p_vaddr ≡ p_offset (mod 2 MiB)` and the load address keeps it
    /// (ET_EXEC, or a max `p_align` ≥ 2 MiB): warmed windows are PMD-mapped.
    Congruent,
    /// Congruent in the file, but `p_align` < 2 MiB: PMD-mapped only when the
    /// loader happens to pick a 2 MiB-aligned base (ld.so-loaded libraries on
    /// ext4/xfs usually are; PIE executables usually are not).
    /// `hugetext align` raises `p_align`.
    LoadAddress,
    /// `p_vaddr − p_offset` is not a multiple of 2 MiB: never PMD-mapped
    /// until `hugetext align` relays the file out.
    Incongruent,
    /// Not an ELF file: whoever maps it decides.
    NotElf,
}

/// One byte range of a file to warm.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WarmRange {
    /// File offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The segment's virtual address (ELF only).
    pub vaddr: Option<u64>,
    /// Segment permissions as `r-x` / `r--` (ELF only).
    pub flags: Option<String>,
    /// Whether warmed windows will be PMD-mapped at run time.
    pub runtime: Runtime,
}

impl WarmRange {
    /// The range as `offset..offset+len`.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.len
    }
}

/// A file to warm and the ranges of it to warm.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    /// The file as given (or as resolved for a dependency).
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// True for an ELF file (ranges are its read-only segments).
    pub elf: bool,
    /// The ranges to warm, sorted, not overlapping.
    pub ranges: Vec<WarmRange>,
    /// Remarks from planning (e.g. "not a valid ELF file: warming all of it").
    pub notes: Vec<String>,
}

impl Target {
    /// Bytes to warm (ranges rounded out to pages).
    pub fn bytes(&self) -> u64 {
        let ps = kernel::page_size() as u64;
        self.ranges.iter().map(|r| (r.offset + r.len).div_ceil(ps) * ps - r.offset / ps * ps).sum()
    }
}

/// Check that `path` is something `warm` can work on, with one clear error
/// line when it is not: missing, a directory, not a regular file, not
/// readable.
pub fn open_regular(path: &Path) -> Result<File> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Invalid(format!("{}: no such file", path.display())),
        std::io::ErrorKind::PermissionDenied => Error::Permission(format!(
            "{}: permission denied (cannot look it up); run as root or as a user who can read it",
            path.display()
        )),
        _ => Error::io(path, e),
    })?;
    let ft = meta.file_type();
    if ft.is_dir() {
        return Err(Error::Invalid(format!(
            "{}: is a directory; warm takes files (programs, libraries)",
            path.display()
        )));
    }
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(Error::Invalid(format!(
            "{}: not a regular file ({what}); warm takes programs, libraries and other regular files",
            path.display()
        )));
    }
    File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => Error::Permission(format!(
            "{}: permission denied (cannot read it); run as root or as a user who can read it",
            path.display()
        )),
        _ => Error::io(path, e),
    })
}

/// Work out what to warm in `path`: an ELF file's read-only `PT_LOAD`
/// segments ([`crate::elf::text_segments`], merged where they overlap), any
/// other file whole.
///
/// Reading the headers goes through the page cache; whatever that pulled in
/// outside the ranges to warm (readahead past the headers, section headers
/// at the end) is evicted again, so planning leaves the rest of the file's
/// cache as it found it.
pub fn plan(path: &Path) -> Result<Target> {
    let f = open_regular(path)?;
    let size = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut t = Target { path: path.to_path_buf(), size, elf: false, ranges: Vec::new(), notes: Vec::new() };
    if size == 0 {
        return Ok(t);
    }
    let before = resident_pages(&f, size)?;
    // The magic, read without readahead.
    let _ = rustix::fs::fadvise(f.as_fd(), 0, None, rustix::fs::Advice::Random);
    let mut magic = [0u8; 4];
    let is_elf = size >= 4 && f.read_exact_at(&mut magic, 0).is_ok() && &magic == b"\x7fELF";
    if !is_elf {
        t.ranges.push(whole(size));
    } else {
        match elf_ranges(path) {
            Ok(ranges) => {
                t.elf = true;
                t.ranges = ranges;
                if t.ranges.is_empty() {
                    t.notes.push("ELF file without read-only loadable segments: nothing to warm".into());
                }
            }
            Err(e) => {
                let msg = e.to_string();
                let msg = msg.strip_prefix(&format!("{}: ", path.display())).unwrap_or(&msg).to_string();
                t.notes.push(format!("not a valid ELF file ({msg}): warming all of it"));
                t.ranges = vec![whole(size)];
            }
        }
    }
    uncache_new_pages(&f, &before, &t.ranges)?;
    Ok(t)
}

/// The read-only segments of an ELF file as warm ranges, with whether each
/// will be PMD-mapped at run time.
fn elf_ranges(path: &Path) -> Result<Vec<WarmRange>> {
    let pmd = kernel::pmd_size() as u64;
    let segs = crate::elf::text_segments(path)?;
    let (_file, model) = crate::elf::read_model(path)?;
    let base = crate::elf::check::analyse(path, &model).base;
    let keeps = !matches!(base, crate::elf::BaseAlignment::NotAligned);
    let size = model.file_size;
    let mut ranges: Vec<WarmRange> = segs
        .iter()
        .filter(|s| s.file_size > 0 && s.offset < size)
        .map(|s| WarmRange {
            offset: s.offset,
            len: (s.offset + s.file_size).min(size) - s.offset,
            vaddr: Some(s.vaddr),
            flags: Some(if s.is_executable() { "r-x" } else { "r--" }.to_string()),
            runtime: if s.vaddr.wrapping_sub(s.offset) % pmd != 0 {
                Runtime::Incongruent
            } else if keeps {
                Runtime::Congruent
            } else {
                Runtime::LoadAddress
            },
        })
        .collect();
    ranges.sort_by_key(|r| r.offset);
    // Overlapping segments (rare) are merged; the first one's metadata is kept.
    let mut merged: Vec<WarmRange> = Vec::new();
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.offset < last.offset + last.len => {
                let end = (r.offset + r.len).max(last.offset + last.len);
                last.len = end - last.offset;
            }
            _ => merged.push(r),
        }
    }
    Ok(merged)
}

fn whole(size: u64) -> WarmRange {
    WarmRange { offset: 0, len: size, vaddr: None, flags: None, runtime: Runtime::NotElf }
}

/// Which pages of the file are cached (`mincore`; reads nothing).
fn resident_pages(f: &File, size: u64) -> Result<Vec<bool>> {
    let map = Mapping::file_congruent(f.as_fd(), 0, size as usize, libc::PROT_READ, kernel::page_size())?;
    map.resident()
}

/// Evict the pages outside `ranges` (page-rounded) that are cached now but
/// were not in `before`.
fn uncache_new_pages(f: &File, before: &[bool], ranges: &[WarmRange]) -> Result<()> {
    let size = f.metadata().map_err(|e| Error::io("(open file)", e))?.len();
    let now = resident_pages(f, size)?;
    let ps = kernel::page_size() as u64;
    let inside = |page: u64| {
        let off = page * ps;
        ranges.iter().any(|r| {
            let pr = page_out(&r.range());
            off >= pr.start && off < pr.end
        })
    };
    let mut i = 0;
    while i < now.len() {
        if now[i] && !before.get(i).copied().unwrap_or(false) && !inside(i as u64) {
            let mut j = i + 1;
            while j < now.len() && now[j] && !before.get(j).copied().unwrap_or(false) && !inside(j as u64) {
                j += 1;
            }
            pagecache::evict(f, i as u64 * ps..j as u64 * ps)?;
            i = j;
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// The shared libraries `exe` loads (its interpreter first, then DT_NEEDED
/// resolved like ld.so: RPATH/RUNPATH, LD_LIBRARY_PATH, ld.so.cache,
/// default directories), from [`crate::elf::resolve_deps`].
pub fn resolve_deps(exe: &Path) -> Result<Vec<PathBuf>> {
    crate::elf::resolve_deps(exe)
}

/// Expand `paths` to the files to warm: each path, then (with `deps`) every
/// shared library each ELF program loads, without duplicates (by device and
/// inode). Each entry is a plan or the error that prevented one.
pub fn plan_all(paths: &[PathBuf], deps: bool) -> Vec<(PathBuf, Result<Target>)> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut add = |p: PathBuf, out: &mut Vec<(PathBuf, Result<Target>)>| -> bool {
        if let Ok(m) = std::fs::metadata(&p) {
            if !seen.insert((m.dev(), m.ino())) {
                return false;
            }
        }
        let t = plan(&p);
        let elf = matches!(&t, Ok(t) if t.elf);
        out.push((p, t));
        elf
    };
    for p in paths {
        let elf = add(p.clone(), &mut out);
        if deps && elf {
            match resolve_deps(p) {
                Ok(libs) => {
                    for l in libs {
                        add(l, &mut out);
                    }
                }
                Err(e) => out.push((p.clone(), Err(e))),
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Memory guard

/// How much memory `warm` may fill: a share of `MemAvailable` or a size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemLimit {
    /// Percent of `MemAvailable` (0–100).
    Percent(f64),
    /// Bytes.
    Bytes(u64),
}

impl Default for MemLimit {
    fn default() -> Self {
        MemLimit::Percent(50.0)
    }
}

impl std::str::FromStr for MemLimit {
    type Err = Error;

    /// `50%`, `4G`, `512M`, `2GiB`, `1048576` (bytes).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Invalid(format!("bad memory limit {s:?}: give a percentage of available memory (50%) or a size (4G, 512M, 2GiB)"));
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(0.0..=100.0).contains(&v) {
                return Err(bad());
            }
            return Ok(MemLimit::Percent(v));
        }
        let digits = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(digits);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return Err(bad()),
        };
        Ok(MemLimit::Bytes((v * mult as f64) as u64))
    }
}

impl std::fmt::Display for MemLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemLimit::Percent(p) => write!(f, "{p}% of available memory"),
            MemLimit::Bytes(b) => write!(f, "{}", human(*b)),
        }
    }
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").map_err(|e| Error::io("/proc/meminfo", e))?;
    s.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * KIB)
        .ok_or_else(|| Error::Other("/proc/meminfo has no MemAvailable line".into()))
}

/// Refuse (one clear error) when `bytes` is more than `limit` allows.
pub fn check_memory(bytes: u64, limit: MemLimit) -> Result<()> {
    let avail = mem_available()?;
    let allowed = match limit {
        MemLimit::Percent(p) => (avail as f64 * p / 100.0) as u64,
        MemLimit::Bytes(b) => b,
    };
    if bytes > allowed {
        return Err(Error::Invalid(format!(
            "refusing to warm {}: more than the memory guard allows ({}, {} with {} available); raise --max-mem or warm fewer files",
            human(bytes),
            limit,
            human(allowed),
            human(avail)
        )));
    }
    Ok(())
}

/// `12.3 MiB`-style size.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

// ---------------------------------------------------------------------------
// Who maps a file

/// A process that maps (or has open) a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct ProcRef {
    /// Process id.
    pub pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
}

/// The processes (other than this one) that map the file with device `dev`
/// and inode `ino`, from `/proc/*/maps`. Processes that vanish or cannot be
/// read are skipped.
pub fn mapping_pids_of(dev: u64, ino: u64) -> Vec<ProcRef> {
    let me = std::process::id() as i32;
    let want_dev = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    let want_ino = ino.to_string();
    let mut out = Vec::new();
    for pid in pids() {
        if pid == me {
            continue;
        }
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
        let hit = maps.lines().any(|l| {
            let mut it = l.split_ascii_whitespace();
            let (_, _, _, d, i) = (it.next(), it.next(), it.next(), it.next(), it.next());
            i == Some(want_ino.as_str()) && d == Some(want_dev.as_str())
        });
        if hit {
            out.push(ProcRef { pid, comm: comm(pid) });
        }
    }
    out
}

/// The processes that map `path` (see [`mapping_pids_of`]).
pub fn mapping_pids(path: &Path) -> Result<Vec<ProcRef>> {
    let m = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    Ok(mapping_pids_of(m.dev(), m.ino()))
}

/// The processes (other than this one) holding the file open for writing.
pub fn writer_pids_of(dev: u64, ino: u64) -> Vec<ProcRef> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for pid in pids() {
        if pid == me {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for ent in rd.flatten() {
            let Ok(m) = std::fs::metadata(ent.path()) else { continue };
            if m.dev() != dev || m.ino() != ino {
                continue;
            }
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", ent.file_name().to_string_lossy()))
                .unwrap_or_default();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
                .unwrap_or(0);
            if flags as i32 & libc::O_ACCMODE != libc::O_RDONLY {
                out.push(ProcRef { pid, comm: comm(pid) });
                break;
            }
        }
    }
    out
}

fn pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut v: Vec<i32> = rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    v.sort_unstable();
    v
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim().to_string()).unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Filesystems

/// True for filesystems whose page cache *is* the file (no backing store to
/// evict to and re-read from).
fn memory_fs(name: &str) -> bool {
    matches!(name, "tmpfs" | "ramfs")
}

// ---------------------------------------------------------------------------
// Warming

/// How a file's page cache was (or could not be) put into PMD folios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// Evict + refill through a `MADV_HUGEPAGE` mapping (PMD-order readahead).
    PmdReadahead,
    /// The above, then `MADV_COLLAPSE` for windows that stayed small.
    PmdReadaheadCollapse,
    /// A warmed identical copy renamed over the original (`--replace`).
    Replace,
    /// Nothing can give PMD folios here (see the notes).
    None,
}

/// Options of [`warm_target`].
#[derive(Debug, Clone, Default)]
pub struct WarmOptions {
    /// Try `MADV_COLLAPSE` on windows that stayed small (default on).
    pub no_collapse: bool,
    /// Replace files whose windows are blocked by running processes with a
    /// warmed identical copy.
    pub replace: bool,
    /// What `replace` may override.
    pub replace_allow: ReplaceAllow,
}

/// Conditions under which `--replace` refuses unless told otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplaceAllow {
    /// Replace files with more than one hard link (the other names keep the
    /// old inode).
    pub hardlinked: bool,
    /// Replace files some process has open for writing (its writes go to
    /// the old inode).
    pub open_for_write: bool,
    /// Replace signed files (IMA/EVM xattrs, fs-verity): the copy's
    /// signature may not verify.
    pub signed: bool,
}

/// Per-run state shared between files (what was learnt about the kernel).
#[derive(Debug, Default)]
pub struct WarmContext {
    /// `None` until a collapse was tried; then whether it works.
    pub collapse: Option<pagecache::CollapseSupport>,
}

/// Kilobytes that stayed in small folios, by reason.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SmallReasons {
    /// In the head or tail of a range (a partial 2 MiB window): never a PMD.
    pub head_tail_kb: u64,
    /// In windows running processes map (could not be evicted).
    pub blocked_kb: u64,
    /// In windows the filesystem could not give large folios.
    pub no_large_folios_kb: u64,
    /// Anything else (memory pressure, pages that could not be evicted
    /// without a mapping process: dirty or under writeback).
    pub other_kb: u64,
}

/// One range's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RangeReport {
    /// The range warmed.
    #[serde(flatten)]
    pub range: WarmRange,
    /// Whole 2 MiB windows inside the range.
    pub eligible_windows: u64,
    /// Of those, held in one PMD folio each after warming.
    pub pmd_windows: u64,
}

/// The result of warming one file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// True for an ELF file (its read-only segments were warmed).
    pub elf: bool,
    /// Filesystem type.
    pub filesystem: String,
    /// How the folios were made.
    pub route: Route,
    /// File size in bytes.
    pub size: u64,
    /// kB of the warmed ranges now in the page cache.
    pub cached_kb: u64,
    /// kB in PMD-size folios.
    pub pmd_kb: u64,
    /// kB in smaller folios.
    pub small_kb: u64,
    /// kB in eligible windows that stayed small because running processes
    /// map pages of them (see `blocked_by`).
    pub blocked_kb: u64,
    /// Why `small_kb` is small.
    pub small: SmallReasons,
    /// Whole 2 MiB windows in the warmed ranges.
    pub eligible_windows: u64,
    /// Of those, in one PMD folio each.
    pub pmd_windows: u64,
    /// Eligible windows blocked by running processes.
    pub blocked_windows: u64,
    /// PMD windows in segments that are certainly PMD-mapped at run time
    /// ([`Runtime::Congruent`]); for non-ELF files, all PMD windows.
    pub mappable_windows: u64,
    /// Processes that map the file (the old inode, after a replace).
    pub blocked_by: Vec<ProcRef>,
    /// The ranges warmed.
    pub ranges: Vec<RangeReport>,
    /// True when the file was replaced by a warmed copy.
    pub replaced: bool,
    /// Wall-clock time for this file, in milliseconds.
    pub millis: f64,
    /// Explanations and advice.
    pub notes: Vec<String>,
}

/// Warm one planned file and report what its page cache holds afterwards.
pub fn warm_target(t: &Target, opts: &WarmOptions, ctx: &mut WarmContext) -> Result<FileReport> {
    let start = Instant::now();
    let f = open_regular(&t.path)?;
    let fs = fsutil::fs_name(&f);
    let mut notes = t.notes.clone();

    let mut stuck = BTreeSet::new();
    if memory_fs(&fs) {
        notes.push(format!(
            "{fs} keeps files in memory with no backing store to re-read them from, so warm cannot change their folios: \
             PMD folios are impossible here unless it is mounted with huge=always or huge=within_size \
             (shmem_enabled is {}) and the file is written afresh; or put the file on ext4 (Linux ≥ 6.16) or xfs",
            kernel::sysfs_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled").unwrap_or_else(|| "absent".into())
        ));
    } else {
        for r in &t.ranges {
            pagecache::evict(&f, page_out(&r.range()))?;
        }
        // What is still cached in whole windows after eviction could not be
        // evicted: some process maps it (or it is dirty).
        for r in &t.ranges {
            stuck.extend(resident_windows(&f, &pagecache::pmd_windows_in(&r.range()))?);
        }
        for r in &t.ranges {
            pagecache::fill_bounded(&f, r.range())?;
        }
    }

    let (mut report, have) = measure(t, &fs, &stuck)?;
    report.notes = notes.clone();

    // Better route: collapse windows that stayed small in place.
    let small_windows = small_windows(t, &have);
    if !small_windows.is_empty() && !opts.no_collapse && !memory_fs(&fs) {
        let mut collapsed = 0;
        if !matches!(ctx.collapse, Some(pagecache::CollapseSupport::Unavailable(_))) {
            for w in &small_windows {
                match pagecache::collapse_window(&f, *w) {
                    Ok(()) => {
                        collapsed += 1;
                        ctx.collapse = Some(pagecache::CollapseSupport::Available);
                    }
                    Err(Error::Sys { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
                        if ctx.collapse.is_none() {
                            ctx.collapse = Some(pagecache::CollapseSupport::Unavailable(
                                "MADV_COLLAPSE refuses file text on this kernel (no CONFIG_READ_ONLY_THP_FOR_FS)".into(),
                            ));
                        }
                        break;
                    }
                    // Transient (EAGAIN, ENOMEM, EBUSY): try the others.
                    Err(Error::Sys { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if collapsed > 0 {
            report = measure(t, &fs, &stuck)?.0;
            report.route = Route::PmdReadaheadCollapse;
            report.notes = notes_with(&notes, format!("MADV_COLLAPSE collapsed {collapsed} window(s) in place"));
        } else if let Some(pagecache::CollapseSupport::Unavailable(why)) = &ctx.collapse {
            report.notes.push(format!("{why}: {} window(s) stayed small", small_windows.len()));
        }
    }

    if report.blocked_windows > 0 {
        report.blocked_by = mapping_pids(&t.path)?;
        if opts.replace {
            drop(f);
            return replace_and_warm(t, opts, ctx, report, start);
        }
        report.notes.push(format!(
            "{} window(s) ({}) stay small: running processes map them ({}); they get PMD folios once those exit, \
             or use --replace (new processes get a warmed copy)",
            report.blocked_windows,
            human(report.blocked_kb * KIB),
            pid_list(&report.blocked_by)
        ));
    }
    advise(t, &mut report);
    report.millis = start.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

fn notes_with(notes: &[String], extra: String) -> Vec<String> {
    let mut v = notes.to_vec();
    v.push(extra);
    v
}

/// Page-rounded outwards.
fn page_out(r: &Range<u64>) -> Range<u64> {
    let ps = kernel::page_size() as u64;
    r.start / ps * ps..r.end.div_ceil(ps) * ps
}

/// Start offsets of the windows in `windows` that hold any cached page.
fn resident_windows(f: &File, windows: &Range<u64>) -> Result<Vec<u64>> {
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    let pmd = kernel::pmd_size() as u64;
    let ps = kernel::page_size() as u64;
    let len = (windows.end - windows.start) as usize;
    let map = Mapping::file_congruent(f.as_fd(), windows.start, len, libc::PROT_READ, pmd as usize)?;
    let res = map.resident()?;
    let per = (pmd / ps) as usize;
    Ok(res
        .chunks(per)
        .enumerate()
        .filter(|(_, c)| c.iter().any(|r| *r))
        .map(|(i, _)| windows.start + i as u64 * pmd)
        .collect())
}

/// Eligible windows of `t` that are not in the PMD-folio set `have`.
fn small_windows(t: &Target, have: &BTreeSet<u64>) -> Vec<u64> {
    let pmd = kernel::pmd_size() as u64;
    let mut v = Vec::new();
    for r in &t.ranges {
        let w = pagecache::pmd_windows_in(&r.range());
        let mut o = w.start;
        while o < w.end {
            if !have.contains(&o) {
                v.push(o);
            }
            o += pmd;
        }
    }
    v
}

/// Read back the folio sizes of `t`'s ranges and classify what is small.
/// Also returns the offsets of the windows held in PMD folios.
fn measure(t: &Target, fs: &str, stuck: &BTreeSet<u64>) -> Result<(FileReport, BTreeSet<u64>)> {
    let pmd = kernel::pmd_size() as u64;
    let pmd_kb = pmd / KIB;
    let mut rep = FileReport {
        path: t.path.clone(),
        elf: t.elf,
        filesystem: fs.to_string(),
        route: Route::PmdReadahead,
        size: t.size,
        cached_kb: 0,
        pmd_kb: 0,
        small_kb: 0,
        blocked_kb: 0,
        small: SmallReasons::default(),
        eligible_windows: 0,
        pmd_windows: 0,
        blocked_windows: 0,
        mappable_windows: 0,
        blocked_by: Vec::new(),
        ranges: Vec::new(),
        replaced: false,
        millis: 0.0,
        notes: Vec::new(),
    };
    let mut pmd_offsets = BTreeSet::new();
    let mut window_small_kb = 0;
    let mut blocked = 0u64;
    let mut unblocked_small = 0u64;
    for r in &t.ranges {
        let range = r.range();
        let w = pagecache::pmd_windows_in(&range);
        let eligible = (w.end - w.start) / pmd;
        let mut pmd_here = 0;
        for part in [range.start..w.start.max(range.start), w.clone(), w.end.max(range.start)..range.end] {
            let part = part.start..part.end.min(range.end);
            if part.is_empty() {
                continue;
            }
            if part == w {
                if let Some(n) = all_windows_pmd(&t.path, &w)? {
                    // Fast path: every window is PMD-mapped, hence one PMD folio.
                    let kb = n * pmd_kb;
                    rep.cached_kb += kb;
                    rep.pmd_kb += kb;
                    pmd_here = n;
                    let mut o = w.start;
                    while o < w.end {
                        pmd_offsets.insert(o);
                        o += pmd;
                    }
                    continue;
                }
            }
            let s = folio::scan_file(&t.path, Some(part.clone()))?;
            let pk = s.pmd_kb();
            rep.cached_kb += s.cached_kb;
            rep.pmd_kb += pk;
            let small = s.cached_kb - pk;
            rep.small_kb += small;
            if part == w {
                pmd_here = s.pmd_windows.len() as u64;
                pmd_offsets.extend(s.pmd_windows.iter().copied());
                window_small_kb += small;
            } else {
                rep.small.head_tail_kb += small;
            }
        }
        let mut o = w.start;
        while o < w.end {
            if !pmd_offsets.contains(&o) {
                if stuck.contains(&o) {
                    blocked += 1;
                } else {
                    unblocked_small += 1;
                }
            }
            o += pmd;
        }
        rep.eligible_windows += eligible;
        rep.pmd_windows += pmd_here;
        if matches!(r.runtime, Runtime::Congruent | Runtime::NotElf) {
            rep.mappable_windows += pmd_here;
        }
        rep.ranges.push(RangeReport { range: r.clone(), eligible_windows: eligible, pmd_windows: pmd_here });
    }
    // Windows that stayed small hold up to a window each of small folios.
    rep.blocked_windows = blocked;
    rep.blocked_kb = (blocked * pmd_kb).min(window_small_kb);
    rep.small.blocked_kb = rep.blocked_kb;
    let rest = window_small_kb - rep.blocked_kb;
    let no_large = memory_fs(fs) || (unblocked_small > 0 && rep.pmd_windows == 0);
    if no_large {
        rep.small.no_large_folios_kb = rest;
        rep.route = Route::None;
    } else {
        rep.small.other_kb = rest;
    }
    Ok((rep, pmd_offsets))
}

/// Fast verification of whole windows: map them read-only at a congruent
/// address, touch the first page of each cached window (`MADV_RANDOM`, so a
/// page that is not cached is not read around), and read this mapping's
/// `FilePmdMapped` from `/proc/self/smaps`. The kernel PMD-maps only
/// PMD-size folios, so when every window is PMD-mapped, every window is one
/// PMD folio: `Some(number of windows)`. Otherwise `None`, and the caller
/// scans page by page ([`folio::scan_file`]), which is exact but slower.
fn all_windows_pmd(path: &Path, w: &Range<u64>) -> Result<Option<u64>> {
    let pmd = kernel::pmd_size() as u64;
    let n = (w.end - w.start) / pmd;
    if n == 0 {
        return Ok(Some(0));
    }
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = (w.end - w.start) as usize;
    let map = Mapping::file_congruent(f.as_fd(), w.start, len, libc::PROT_READ, pmd as usize)?;
    map.madvise(0, len, libc::MADV_RANDOM)?;
    let res = map.resident()?;
    let per = (pmd as usize) / kernel::page_size();
    for k in 0..n as usize {
        if !res[k * per] {
            return Ok(None);
        }
        // SAFETY: inside our mapping; the page is cached, so the read maps
        // it (and its folio) without I/O.
        unsafe { std::ptr::read_volatile(map.as_ptr().add(k * pmd as usize)) };
    }
    let kb = procfs::own_file_pmd_kb(map.addr())?;
    Ok((kb == n * pmd / KIB).then_some(n))
}

/// Add advice about the result (what to do about what stayed small).
fn advise(t: &Target, rep: &mut FileReport) {
    if rep.route == Route::None && rep.eligible_windows > 0 {
        if memory_fs(&rep.filesystem) {
            // Already explained when warming.
        } else {
            rep.notes.push(format!(
                "PMD folios are impossible on this filesystem ({}): the kernel gives its files only small page-cache folios \
                 (large folios: ext4 since Linux 6.16, xfs since 5.18); move the file to such a filesystem",
                rep.filesystem
            ));
        }
    }
    if rep.small.other_kb > 0 && rep.route != Route::None {
        rep.notes.push(format!(
            "{} in whole windows stayed small without a mapping process (memory pressure, or dirty pages); run warm again",
            human(rep.small.other_kb * KIB)
        ));
    }
    if t.elf {
        let inc = t.ranges.iter().any(|r| r.runtime == Runtime::Incongruent && pagecache::pmd_windows_in(&r.range()).end > pagecache::pmd_windows_in(&r.range()).start);
        let la = t.ranges.iter().any(|r| r.runtime == Runtime::LoadAddress && !pagecache::pmd_windows_in(&r.range()).is_empty());
        if inc {
            rep.notes.push(
                "a segment's vaddr − offset is not a multiple of 2 MiB: its warm windows are never PMD-mapped; run `hugetext align` on the file".into(),
            );
        }
        if la {
            rep.notes.push(
                "segments are congruent but p_align < 2 MiB: PMD-mapped only if the loader picks a 2 MiB-aligned base \
                 (libraries on ext4/xfs usually, PIE executables rarely); `hugetext align` raises p_align".into(),
            );
        }
    }
}

fn pid_list(v: &[ProcRef]) -> String {
    if v.is_empty() {
        return "no process found in /proc/*/maps".into();
    }
    let mut s: Vec<String> = v.iter().take(8).map(|p| format!("{} ({})", p.pid, p.comm)).collect();
    if v.len() > 8 {
        s.push(format!("and {} more", v.len() - 8));
    }
    format!("pid {}", s.join(", "))
}

// ---------------------------------------------------------------------------
// --replace

/// Reasons `--replace` refuses a file; empty when it may proceed.
pub fn replace_refusals(path: &Path, allow: ReplaceAllow) -> Result<Vec<String>> {
    let m = std::fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
    let mut why = Vec::new();
    if m.file_type().is_symlink() {
        // We rename over the name we were given: resolve it first.
        return replace_refusals(&std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?, allow);
    }
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let impact = ReplaceImpact::of(&f).map_err(|e| Error::io(path, e))?;
    if impact.links > 1 && !allow.hardlinked {
        why.push(format!(
            "it has {} hard links (the other names would keep the old file; allow with --replace-allow hardlinked)",
            impact.links
        ));
    }
    if !allow.open_for_write {
        let w = writer_pids_of(m.dev(), m.ino());
        if !w.is_empty() {
            why.push(format!("it is open for writing by {} (allow with --replace-allow open-for-write)", pid_list(&w)));
        }
    }
    if impact.immutable {
        why.push("it is immutable (chattr +i); remove the flag first".into());
    }
    if impact.append_only {
        why.push("it is append-only (chattr +a); remove the flag first".into());
    }
    if !allow.signed {
        for sig in impact.signatures {
            why.push(match sig.xattr() {
                None => "it is protected by fs-verity, which a copy would lose (allow with --replace-allow signed)".into(),
                Some(name) => {
                    format!("it is signed ({name}); a copy's signature may not verify (allow with --replace-allow signed)")
                }
            });
        }
    }
    Ok(why)
}

/// `--replace`: write an identical copy of `t`'s file next to it (same
/// mode, owner, extended attributes including file capabilities, times),
/// warm the copy, and rename it over the original. Processes already
/// running keep the old inode; new ones map the warmed copy. Refuses
/// (see [`replace_refusals`]) where that would break something.
pub fn replace_and_warm(t: &Target, opts: &WarmOptions, ctx: &mut WarmContext, before: FileReport, start: Instant) -> Result<FileReport> {
    let real = std::fs::canonicalize(&t.path).map_err(|e| Error::io(&t.path, e))?;
    let why = replace_refusals(&real, opts.replace_allow)?;
    if !why.is_empty() {
        return Err(Error::Invalid(format!("{}: --replace refused: {}", t.path.display(), why.join("; "))));
    }
    let name = real.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let meta = std::fs::metadata(&real).map_err(|e| Error::io(&real, e))?;
    let src = File::open(&real).map_err(|e| Error::io(&real, e))?;
    // Removed again on any error below.
    let mut new = NewFile::beside(&real, &format!(".{name}.hugetext-")).map_err(|e| Error::io(fsutil::dir_of(&real), e))?;
    let tmp = new.path().to_path_buf();
    std::io::copy(&mut &src, &mut new.file()).map_err(|e| Error::io(&tmp, e))?;
    // Same owner, mode, xattrs (security.capability among them) and times.
    let keep = MetadataCopy { owner_required: true, times: true, skip_xattrs: &[] };
    fsutil::copy_metadata(&src, &meta, new.file(), &keep).map_err(|e| Error::io(&tmp, e))?;
    // Warm the copy: its pages are clean after the sync, and nobody maps
    // it, so all of it can be evicted and refilled.
    let copy = new.finish_writing().map_err(|e| Error::io(&tmp, e))?;
    for r in &t.ranges {
        pagecache::evict(&copy, page_out(&r.range()))?;
        pagecache::fill_bounded(&copy, r.range())?;
    }
    drop(copy);
    new.commit(&real).map_err(|e| Error::io(&real, e))?;
    let mut rep = measure(t, &before.filesystem, &BTreeSet::new())?.0;
    rep.replaced = true;
    rep.route = if rep.route == Route::None { Route::None } else { Route::Replace };
    rep.blocked_by = before.blocked_by.clone();
    rep.notes = before.notes.clone();
    rep.notes.push(format!(
        "replaced by a warmed identical copy: {} keep(s) the old file ({} blocked), new processes get the warmed one",
        pid_list(&rep.blocked_by),
        human(before.blocked_kb * KIB)
    ));
    let _ = ctx;
    advise(t, &mut rep);
    rep.millis = start.elapsed().as_secs_f64() * 1e3;
    Ok(rep)
}

// ---------------------------------------------------------------------------
// Config file

/// `hugetext warm --config FILE`: the programs to keep warm, in TOML.
///
/// ```toml
/// # /etc/hugetext/warm.conf
/// paths = ["/usr/bin/clang-19", "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"]
/// deps = true          # also every shared library they load
/// max_mem = "25%"      # memory guard: share of MemAvailable, or a size ("4G")
/// replace = false      # --replace for files running processes block
/// ```
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Files to warm.
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// Also warm the shared libraries of ELF programs.
    #[serde(default)]
    pub deps: bool,
    /// Memory guard (`50%`, `4G`).
    #[serde(default)]
    pub max_mem: Option<String>,
    /// Replace blocked files with warmed copies.
    #[serde(default)]
    pub replace: bool,
}

impl Config {
    /// Read and parse a config file.
    pub fn load(path: &Path) -> Result<Config> {
        let s = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&s).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// Parse config text; errors are one line.
    pub fn parse(s: &str) -> Result<Config> {
        let c: Config = toml::from_str(s).map_err(|e| {
            let msg = e.message().to_string();
            let at = e.span().map(|sp| {
                let line = s[..sp.start.min(s.len())].matches('\n').count() + 1;
                format!("line {line}: ")
            });
            Error::Invalid(format!("{}{}", at.unwrap_or_default(), msg.replace('\n', " ")))
        })?;
        if let Some(m) = &c.max_mem {
            m.parse::<MemLimit>()?;
        }
        for p in &c.paths {
            if !p.is_absolute() {
                return Err(Error::Invalid(format!("paths: {:?} is not an absolute path", p.display().to_string())));
            }
        }
        Ok(c)
    }
}

/// A systemd `.path` unit that starts `hugetext-warm.service` when any of
/// `files` (or the config file) changes.
pub fn path_unit(config: Option<&Path>, files: &[PathBuf]) -> String {
    let mut s = String::from(
        "# Generated by `hugetext warm --path-unit`: re-warm when a listed file changes.\n\
         [Unit]\nDescription=Re-warm program text when it changes (hugetext)\n\n[Path]\n",
    );
    if let Some(c) = config {
        s.push_str(&format!("PathChanged={}\n", c.display()));
    }
    for f in files {
        s.push_str(&format!("PathChanged={}\n", f.display()));
    }
    s.push_str("Unit=hugetext-warm.service\n\n[Install]\nWantedBy=multi-user.target\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_limits_parse() {
        assert_eq!("50%".parse::<MemLimit>().unwrap(), MemLimit::Percent(50.0));
        assert_eq!("4G".parse::<MemLimit>().unwrap(), MemLimit::Bytes(4 << 30));
        assert_eq!("512MiB".parse::<MemLimit>().unwrap(), MemLimit::Bytes(512 << 20));
        assert_eq!("1.5g".parse::<MemLimit>().unwrap(), MemLimit::Bytes(3 << 29));
        assert_eq!("4096".parse::<MemLimit>().unwrap(), MemLimit::Bytes(4096));
        for bad in ["", "150%", "-1%", "12Q", "G", "abc"] {
            let e = bad.parse::<MemLimit>().unwrap_err().to_string();
            assert!(e.contains("bad memory limit") && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn memory_guard_refuses_over_the_limit() {
        check_memory(1 << 20, MemLimit::Percent(50.0)).unwrap();
        let e = check_memory(1 << 30, MemLimit::Bytes(1 << 20)).unwrap_err().to_string();
        assert!(e.contains("refusing to warm 1.0 GiB") && e.contains("--max-mem"), "{e}");
        let avail = mem_available().unwrap();
        assert!(check_memory(avail, MemLimit::Percent(50.0)).is_err());
    }

    #[test]
    fn config_parses_and_rejects_with_line_numbers() {
        let c = Config::parse("paths = [\"/bin/true\"]\ndeps = true\nmax_mem = \"25%\"\n").unwrap();
        assert_eq!(c.paths, vec![PathBuf::from("/bin/true")]);
        assert!(c.deps && !c.replace);
        let e = Config::parse("paths = [\"/bin/true\"]\nfrobnicate = 1\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("frobnicate"), "{e}");
        assert!(Config::parse("paths = [\"relative\"]").is_err());
        assert!(Config::parse("max_mem = \"lots\"").is_err());
    }

    #[test]
    fn shipped_example_config_parses() {
        let c = Config::parse(include_str!("../../../packaging/warm.conf.example")).unwrap();
        assert!(c.deps && !c.replace && c.paths.len() == 2);
        assert_eq!(c.max_mem.unwrap().parse::<MemLimit>().unwrap(), MemLimit::Percent(25.0));
    }

    #[test]
    fn path_unit_lists_files() {
        let u = path_unit(Some(Path::new("/etc/hugetext/warm.conf")), &[PathBuf::from("/usr/bin/x")]);
        assert!(u.contains("PathChanged=/etc/hugetext/warm.conf\n"));
        assert!(u.contains("PathChanged=/usr/bin/x\n"));
        assert!(u.contains("Unit=hugetext-warm.service"));
    }
}
