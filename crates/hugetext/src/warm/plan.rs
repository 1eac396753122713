//! What to warm: a file's ranges (an ELF file's read-only segments, any
//! other file whole), and the list of files (`--deps`).

use std::collections::BTreeSet;
use std::fs::{File, Metadata};
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::page_out;
use crate::kernel::{self, Mapping};
use crate::openfile::{self, Follow};
use crate::{pagecache, Error, Result};

/// Whether a read-only segment's windows can be PMD-mapped when the program
/// runs (doc/kernel-facts.md §3).
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
///
/// The file is opened once, when it is planned ([`plan`], [`plan_exact`]):
/// every later step (warming, measuring, who maps it, `--replace`'s copy)
/// works on that open file, never on the path again, so all of them see the
/// inode that was planned even if another file is renamed over the path
/// meanwhile. The path names the file in reports (and `--replace` renames
/// over it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    /// The file as given (or as resolved for a dependency).
    pub path: PathBuf,
    /// The file, opened when it was planned.
    #[serde(skip)]
    pub file: Arc<File>,
    /// Its metadata then (`fstat` of `file`): device, inode, size, times.
    #[serde(skip)]
    pub meta: Metadata,
    /// File size in bytes.
    pub size: u64,
    /// True for an ELF file (ranges are its read-only segments).
    pub elf: bool,
    /// The ranges to warm, sorted, not overlapping.
    pub ranges: Vec<WarmRange>,
    /// Remarks from planning (e.g. "not a valid ELF file: warming all of it").
    pub notes: Vec<String>,
    /// A shared library: ld.so places it, with one mapping of the whole
    /// file, which ext4 and xfs place 2 MiB-aligned when it is at least
    /// that large (`thp_get_unmapped_area`), so its congruent segments are
    /// PMD-mapped in practice even with a small `p_align`.
    pub placed_by_loader: bool,
}

impl Target {
    /// Whether `m` (e.g. the path's metadata now) is the planned file: the
    /// same device and inode.
    pub fn is_same_file(&self, m: &Metadata) -> bool {
        crate::fsutil::FileId::of(m) == crate::fsutil::FileId::of(&self.meta)
    }

    /// Bytes to warm (ranges rounded out to pages).
    pub fn bytes(&self) -> u64 {
        let ps = kernel::page_size() as u64;
        self.ranges
            .iter()
            .map(|r| (r.offset + r.len).div_ceil(ps) * ps - r.offset / ps * ps)
            .sum()
    }

    /// True when no window can be PMD-mapped when the program runs, so
    /// filling PMD folios would only cost memory: every range with a whole
    /// window is not congruent ([`Runtime::Incongruent`]), or congruent with
    /// a load base the kernel places only page-aligned (a PIE with a small
    /// `p_align`: [`Runtime::LoadAddress`] in a file not placed by ld.so).
    /// The facts are `check`'s ([`crate::elf::check::analyse`]).
    pub fn never_pmd_mapped(&self) -> bool {
        let with_windows: Vec<&WarmRange> = self
            .ranges
            .iter()
            .filter(|r| !pagecache::huge_windows_in(&r.range()).is_empty())
            .collect();
        self.elf
            && !with_windows.is_empty()
            && with_windows.iter().all(|r| match r.runtime {
                Runtime::Incongruent => true,
                Runtime::LoadAddress => !self.placed_by_loader,
                Runtime::Congruent | Runtime::NotElf => false,
            })
    }

    /// Whole windows of the huge unit in the ranges (PMD-size; the contpte
    /// block with 64 KiB pages): what warm can put in folios that large.
    pub fn eligible_windows(&self) -> u64 {
        let unit = kernel::unit_size() as u64;
        self.ranges
            .iter()
            .map(|r| {
                let w = pagecache::huge_windows_in(&r.range());
                (w.end - w.start) / unit
            })
            .sum()
    }
}

/// Only the profile's hot windows of `t` (`hot`, the `hot` config key):
/// its ranges cut to the hot ranges of its file (matched by build-id, then
/// path); a file the profile does not name keeps no range.
pub fn restrict_to_hot(mut t: Target, hot: &[crate::profile::HotFile]) -> Target {
    let path = t.path.to_string_lossy().into_owned();
    let id = crate::profile::attrib::build_id_of(&t.file);
    match crate::profile::hot_ranges_of(hot, &path, id.as_deref()) {
        Some(h) => t.ranges = cut_ranges(&t.ranges, h),
        None => {
            t.ranges.clear();
            t.notes.push("no hot windows in the profile (`hot`): not warmed".into());
        }
    }
    t
}

/// `ranges` cut to the parts inside `hot` (`[start, end)` file ranges). Pure.
pub fn cut_ranges(ranges: &[WarmRange], hot: &[[u64; 2]]) -> Vec<WarmRange> {
    let mut out = Vec::new();
    for r in ranges {
        for h in hot {
            let (s, e) = (r.offset.max(h[0]), (r.offset + r.len).min(h[1]));
            if s < e {
                out.push(WarmRange {
                    offset: s,
                    len: e - s,
                    vaddr: r.vaddr.map(|v| v + (s - r.offset)),
                    ..r.clone()
                });
            }
        }
    }
    out.sort_by_key(|r| r.offset);
    out
}

/// Open `path`, which must be a regular file, to warm it, with one clear
/// error line when it is not: missing, a directory, a FIFO, a symbolic link
/// (planned paths are resolved, so a link there was swapped in), not
/// readable. Never blocks ([`openfile::open_regular`]).
pub fn open_regular(path: &Path) -> Result<File> {
    openfile::open_regular(path, Follow::No).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Invalid(format!("{}: no such file", path.display())),
        std::io::ErrorKind::PermissionDenied => Error::Permission(format!(
            "{}: permission denied (cannot read it); run as root or as a user who can read it",
            path.display()
        )),
        std::io::ErrorKind::InvalidInput if e.to_string() == openfile::IS_A_DIRECTORY => Error::Invalid(format!(
            "{}: is a directory; warm takes files (programs, libraries)",
            path.display()
        )),
        std::io::ErrorKind::InvalidInput => Error::Invalid(format!(
            "{}: {e}; warm takes programs, libraries and other regular files",
            path.display()
        )),
        _ => Error::io(path, e),
    })
}

/// A path a user gave, with a symbolic link at its last component resolved
/// (`libfoo.so.1` → `libfoo.so.1.2.3`): warm then opens exactly that file,
/// never following a link again.
pub fn resolve_link(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// Work out what to warm in `path`: an ELF file's read-only `PT_LOAD`
/// segments ([`crate::elf::text_segments`], merged where they overlap), any
/// other file whole.
///
/// Reading the headers goes through the page cache; whatever that pulled in
/// outside the ranges to warm (readahead past the headers, section headers
/// at the end) is evicted again, so planning leaves the rest of the file's
/// cache as it found it.
///
/// `path` is a user's: a symbolic link there is resolved first
/// ([`resolve_link`]). For paths from `/proc` use [`plan_exact`].
pub fn plan(path: &Path) -> Result<Target> {
    plan_exact(&resolve_link(path))
}

/// [`plan`] for a path taken from `/proc` or a process (the agent's `auto`
/// rule): a symbolic link, FIFO or anything but a regular file found there
/// is refused, and opening it never blocks.
pub fn plan_exact(path: &Path) -> Result<Target> {
    let file = Arc::new(open_regular(path)?);
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    let size = meta.len();
    let held = Arc::clone(&file);
    let f: &File = &held;
    let mut t = Target {
        path: path.to_path_buf(),
        file,
        meta,
        size,
        elf: false,
        ranges: Vec::new(),
        notes: Vec::new(),
        placed_by_loader: false,
    };
    if size == 0 {
        return Ok(t);
    }
    // The magic and the headers are read without readahead, noting the
    // pages read that were not cached before, to evict them again: the
    // cost follows what is read, never the file's size (a sparse 1 TiB
    // file plans as fast as a small one).
    let _ = rustix::fs::fadvise(f.as_fd(), 0, None, rustix::fs::Advice::Random);
    let mut reader = Noting::new(f, size);
    let mut magic = [0u8; 4];
    let is_elf = size >= 4 && std::io::Read::read_exact(&mut reader, &mut magic).is_ok() && &magic == b"\x7fELF";
    if !is_elf {
        t.ranges.push(whole(size));
    } else {
        let _ = std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(0));
        let (ranges, r) = elf_ranges(reader, path);
        reader = r;
        match ranges {
            Ok((ranges, placed_by_loader)) => {
                t.elf = true;
                t.ranges = ranges;
                t.placed_by_loader = placed_by_loader;
                if t.ranges.is_empty() {
                    t.notes
                        .push("ELF file without read-only loadable segments: nothing to warm".into());
                }
            }
            Err(e) => {
                let msg = e.to_string();
                let msg = msg
                    .strip_prefix(&format!("{}: ", path.display()))
                    .unwrap_or(&msg)
                    .to_string();
                t.notes.push(format!("not a valid ELF file ({msg}): warming all of it"));
                t.ranges = vec![whole(size)];
            }
        }
    }
    uncache_fresh_pages(f, &reader.fresh, &t.ranges)?;
    Ok(t)
}

/// A reader of a file being planned that notes the pages it reads which
/// were not in the page cache before (`mincore` of just those pages).
struct Noting<'a> {
    f: &'a File,
    pos: u64,
    size: u64,
    /// Page-rounded byte ranges read that were not cached before.
    fresh: Vec<Range<u64>>,
}

impl<'a> Noting<'a> {
    fn new(f: &'a File, size: u64) -> Self {
        Noting {
            f,
            pos: 0,
            size,
            fresh: Vec::new(),
        }
    }

    /// Note the pages of `[off, off + len)` that are not cached now.
    fn note(&mut self, off: u64, len: u64) {
        let ps = kernel::page_size() as u64;
        let end = (off + len).min(self.size).div_ceil(ps) * ps;
        let start = off / ps * ps;
        if start >= end {
            return;
        }
        let res = Mapping::file_congruent(
            self.f.as_fd(),
            start,
            (end - start) as usize,
            libc::PROT_READ,
            ps as usize,
        )
        .and_then(|m| m.resident());
        let Ok(res) = res else {
            // Unknown: the pages are left as they are.
            return;
        };
        let mut i = 0;
        while i < res.len() {
            if res[i] {
                i += 1;
                continue;
            }
            let j = i + res[i..].iter().take_while(|r| !**r).count();
            self.fresh.push(start + i as u64 * ps..start + j as u64 * ps);
            i = j;
        }
    }
}

impl std::io::Read for Noting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.note(self.pos, buf.len() as u64);
        let n = self.f.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for Noting<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let p = match to {
            std::io::SeekFrom::Start(p) => Some(p),
            std::io::SeekFrom::End(d) => self.size.checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = p.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// The read-only segments of the ELF file `f` (named `path`) as warm
/// ranges, with whether each will be PMD-mapped at run time, and whether
/// ld.so places the file (a shared library).
fn elf_ranges<'a>(f: Noting<'a>, path: &Path) -> (Result<(Vec<WarmRange>, bool)>, Noting<'a>) {
    let (model, f) = crate::elf::model_of_reader(f, path);
    (model.map(|m| elf_ranges_of(&m, path)), f)
}

/// [`elf_ranges`] of a parsed file.
fn elf_ranges_of(model: &crate::elf::layout::Model, path: &Path) -> (Vec<WarmRange>, bool) {
    // Congruence modulo the huge unit (the PMD, or the contpte block).
    let unit = kernel::unit_size() as u64;
    let segs = crate::elf::text_segments_of(model);
    let facts = crate::elf::check::analyse(path, model, &crate::elf::Target::running());
    let (base, library) = (facts.base, facts.kind == crate::elf::check::FileKind::SharedLibrary);
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
            runtime: if !hugetext_abi::geometry::congruent(s.vaddr, s.offset, unit) {
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
    (merged, library)
}

fn whole(size: u64) -> WarmRange {
    WarmRange {
        offset: 0,
        len: size,
        vaddr: None,
        flags: None,
        runtime: Runtime::NotElf,
    }
}

/// Evict the pages of `fresh` (read while planning, not cached before)
/// that lie outside `ranges` (page-rounded).
fn uncache_fresh_pages(f: &File, fresh: &[Range<u64>], ranges: &[WarmRange]) -> Result<()> {
    for r in fresh {
        let mut pieces = vec![r.clone()];
        for w in ranges.iter().map(|w| page_out(&w.range())) {
            pieces = pieces
                .into_iter()
                .flat_map(|p| [p.start..p.end.min(w.start), p.start.max(w.end)..p.end])
                .filter(|p| !p.is_empty())
                .collect();
        }
        for p in pieces {
            pagecache::evict(f, p)?;
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
///
/// Every plan holds its file open until it is warmed, so the soft limit of
/// open files (often 1024) is raised to the hard one first.
pub fn plan_all(paths: &[PathBuf], deps: bool) -> Vec<(PathBuf, Result<Target>)> {
    raise_open_file_limit();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    // The program's open file, when it is an ELF file whose libraries to add.
    let mut add = |p: PathBuf, out: &mut Vec<(PathBuf, Result<Target>)>| -> Option<std::sync::Arc<File>> {
        if let Ok(m) = std::fs::metadata(&p) {
            if !seen.insert((m.dev(), m.ino())) {
                return None;
            }
        }
        let t = plan(&p);
        let elf = t.as_ref().ok().filter(|t| t.elf).map(|t| t.file.clone());
        out.push((p, t));
        elf
    };
    for p in paths {
        let elf = add(p.clone(), &mut out);
        if let (true, Some(file)) = (deps, elf) {
            // From the descriptor planned: the libraries of the file that
            // is warmed, whatever the path names by now.
            match crate::elf::deps::resolve_deps_of(&file, p) {
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

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (as Go programs do at
/// start): many planned files are open at once. Nothing is spawned with it.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if let Some(raised) = soft_nofile(l.current, l.maximum) {
        l.current = Some(raised);
        // Best effort: without it, files past the limit fail one by one.
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// The soft open-file limit to set given the current soft and hard limits
/// (`None`: infinite), or `None` when it stays. Pure.
fn soft_nofile(current: Option<u64>, maximum: Option<u64>) -> Option<u64> {
    match (current, maximum) {
        (Some(c), Some(m)) if c < m => Some(m),
        _ => None,
    }
}

#[cfg(test)]
mod hot_tests {
    use super::*;

    #[test]
    fn ranges_are_cut_to_the_hot_windows() {
        const M: u64 = 1 << 20;
        let r = WarmRange {
            offset: M,
            len: 9 * M,
            vaddr: Some(0x40_0000 + M),
            flags: Some("r-x".into()),
            runtime: Runtime::Congruent,
        };
        let cut = cut_ranges(&[r], &[[4 * M, 6 * M], [0, 2 * M], [12 * M, 14 * M]]);
        let got: Vec<_> = cut.iter().map(|c| (c.offset, c.len, c.vaddr)).collect();
        assert_eq!(
            got,
            vec![(M, M, Some(0x40_0000 + M)), (4 * M, 2 * M, Some(0x40_0000 + 4 * M))]
        );
        assert!(cut_ranges(&cut, &[]).is_empty());
    }

    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
        assert_eq!(soft_nofile(Some(1024), Some(524_288)), Some(524_288));
        assert_eq!(soft_nofile(Some(1024), Some(1024)), None);
        // An infinite hard limit: a finite soft one is left (setting it to
        // infinity is refused for files).
        assert_eq!(soft_nofile(Some(1024), None), None);
        assert_eq!(soft_nofile(None, None), None);
    }
}
