//! Preparing a side (the text in small or in PMD folios) and verifying
//! the page-cache state before each run.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::files::{range_kb, TextFile};
use super::Side;
use crate::kernel::{self, Mapping};
use crate::{folio, pagecache, warm, Error, Result};

/// Verified page-cache state of the managed text right before a run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TextState {
    /// kB of text in all managed files.
    pub text_kb: u64,
    /// kB of it in the page cache.
    pub cached_kb: u64,
    /// kB of it in PMD-size folios.
    pub unit_folio_kb: u64,
    /// `unit_folio_kb / text_kb`, percent.
    pub text_unit_pct: f64,
    /// Whole 2 MiB text windows held in one PMD folio, out of `windows`.
    pub unit_windows: u64,
    pub windows: u64,
    /// kB of text, in files with whole 2 MiB windows, that other processes
    /// map (could not be evicted).
    pub mapped_by_others_kb: u64,
    /// kB of text per folio size (key in kB).
    pub folios_kb: BTreeMap<u64, u64>,
}

/// Fill `range` of `file` through a `PROT_EXEC`, `MADV_NOHUGEPAGE` mapping:
/// the exec fault path, which reads small folios on x86.
fn fill_small(file: &File, range: Range<u64>) -> Result<()> {
    let ps = kernel::page_size() as u64;
    let start = range.start / ps * ps;
    let len = ((range.end - start).div_ceil(ps) * ps) as usize;
    if len == 0 {
        return Ok(());
    }
    let map = Mapping::file_congruent(file.as_fd(), start, len, libc::PROT_READ | libc::PROT_EXEC, ps as usize)?;
    map.madvise(0, len, kernel::MADV_NOHUGEPAGE)?;
    map.madvise(0, len, kernel::MADV_POPULATE_READ)?;
    Ok(())
}

/// Read the whole file with `pread` so that everything that is not text is
/// cached too (the same way on both sides).
fn read_all(file: &File, path: &Path) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = file.read_at(&mut buf, off).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            return Ok(());
        }
        off += n as u64;
    }
}

/// The hot ranges of `tf` among a profile's hot windows: by build-id, then
/// by path (not when the build-ids differ).
fn hot_ranges<'a>(tf: &TextFile, hot: &'a [crate::profile::HotFile]) -> &'a [[u64; 2]] {
    let path = tf.path.to_string_lossy();
    let id = crate::profile::attrib::build_id(&path);
    crate::profile::hot_ranges_of(hot, &path, id.as_deref()).unwrap_or_default()
}

/// Put every managed file's text in `side`'s folios and verify the result
/// (`hot`: the windows the `hot` side puts in PMD folios).
pub fn prepare(files: &[TextFile], side: Side, hot: &[crate::profile::HotFile]) -> Result<TextState> {
    let mut ctx = warm::WarmContext::default();
    for tf in files {
        let f = File::open(&tf.path).map_err(|e| Error::io(&tf.path, e))?;
        // Dirty folios (a freshly built program) cannot be evicted and keep
        // whatever size the writer gave them: write them back first.
        f.sync_data().map_err(|e| Error::io(&tf.path, e))?;
        pagecache::evict(&f, 0..tf.size)?;
        match (side, &tf.plan) {
            (Side::Huge, Some(plan)) => {
                // The huge side is 2 MiB folios whether or not the text can be
                // PMD-mapped where it runs (warm's default leaves such text).
                let opts = warm::WarmOptions {
                    force: true,
                    ..Default::default()
                };
                warm::warm_target(plan, &opts, &mut ctx)?;
            }
            _ => {
                for r in &tf.managed_ranges {
                    match side {
                        Side::Small | Side::Hot => fill_small(&f, r[0]..r[1])?,
                        Side::Huge => pagecache::fill_huge(&f, r[0]..r[1])?,
                    }
                }
                if side == Side::Hot {
                    for r in hot_ranges(tf, hot) {
                        let r = r[0]..r[1].min(tf.size);
                        pagecache::evict(&f, r.clone())?;
                        pagecache::fill_huge(&f, r)?;
                    }
                }
            }
        }
        read_all(&f, &tf.path)?;
    }
    let mut st = verify(files)?;
    // Text evicted again before the check (memory pressure, or a proactive
    // reclaimer such as DAMON paging out what looks cold, which freshly
    // read text nobody runs yet does): read it back the side's way, so that
    // the runs measure folio sizes, not reads from disk.
    for _ in 0..3 {
        if st.cached_kb >= st.text_kb || side != Side::Small {
            break;
        }
        for tf in files {
            let f = File::open(&tf.path).map_err(|e| Error::io(&tf.path, e))?;
            for r in &tf.text_ranges {
                fill_small(&f, r[0]..r[1])?;
            }
        }
        st = verify(files)?;
    }
    Ok(st)
}

/// The page-cache state of the managed text.
pub fn verify(files: &[TextFile]) -> Result<TextState> {
    let mut st = TextState::default();
    for tf in files {
        for r in &tf.text_ranges {
            let v = folio::scan_file(&tf.path, Some(r[0]..r[1]))?;
            st.text_kb += range_kb(r[0]..r[1]);
            st.cached_kb += v.cached_kb;
            st.unit_folio_kb += v.huge_kb();
            st.unit_windows += v.unit_windows.len() as u64;
            st.windows += v.total_windows;
            if tf.unit_windows > 0 {
                // Only where it matters: files with whole windows (libc
                // and friends are always mapped by everyone, hugetext too).
                st.mapped_by_others_kb += v.mapped_kb;
            }
            for (k, n) in v.folios_kb {
                *st.folios_kb.entry(k).or_default() += n;
            }
        }
    }
    st.text_unit_pct = crate::bench::exec::pct(st.unit_folio_kb, st.text_kb);
    Ok(st)
}

/// The folio state of one managed file before the runs, which
/// [`restore`] puts back.
#[derive(Debug, Clone)]
pub struct Found {
    /// Offsets of the whole windows of its managed ranges that were each
    /// in one PMD folio (a warmed file's).
    unit_windows: BTreeSet<u64>,
    /// Whether any of its managed ranges was cached.
    cached: bool,
}

/// What [`restore`] put back, reported with the results.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Restored {
    /// Managed files.
    pub files: usize,
    /// Windows that were in PMD folios before the runs (in all files).
    pub unit_windows_found: u64,
    /// Of those, the ones in PMD folios again after the runs.
    pub unit_windows_restored: u64,
}

/// The PMD windows of `tf`'s managed ranges in PMD folios, and whether any
/// of them is cached.
fn state_of(tf: &TextFile) -> Result<Found> {
    let mut found = Found {
        unit_windows: BTreeSet::new(),
        cached: false,
    };
    for r in &tf.managed_ranges {
        let v = folio::scan_file(&tf.path, Some(r[0]..r[1]))?;
        found.unit_windows.extend(v.unit_windows);
        found.cached |= v.cached_kb > 0;
    }
    Ok(found)
}

/// The folio state of every managed file, before the runs.
pub fn record(files: &[TextFile]) -> Result<Vec<Found>> {
    files.iter().map(state_of).collect()
}

/// Put every managed file back in the folio state [`record`] found: its
/// windows that were in PMD folios are filled with PMD folios again (a
/// warmed file stays warm), the rest of its managed text in small folios if
/// it was cached (else it stays evicted). Pages other processes map keep
/// theirs, as during the runs.
pub fn restore(files: &[TextFile], found: &[Found]) -> Result<Restored> {
    let pmd = kernel::pmd_size() as u64;
    let mut done = Restored {
        files: files.len(),
        ..Restored::default()
    };
    for (tf, was) in files.iter().zip(found) {
        let f = File::open(&tf.path).map_err(|e| Error::io(&tf.path, e))?;
        pagecache::evict(&f, 0..tf.size)?;
        for &w in &was.unit_windows {
            pagecache::fill_huge(&f, w..w + pmd)?;
        }
        if was.cached {
            for r in &tf.managed_ranges {
                fill_small(&f, r[0]..r[1])?;
            }
        }
        let now = state_of(tf)?;
        done.unit_windows_found += was.unit_windows.len() as u64;
        done.unit_windows_restored += was.unit_windows.intersection(&now.unit_windows).count() as u64;
    }
    Ok(done)
}

/// The line that says what [`restore`] did.
pub fn restored_note(r: &Restored) -> String {
    let head = format!("the {} managed file(s) are back in the folio state found", r.files);
    match (r.unit_windows_found, r.unit_windows_restored) {
        (0, _) => format!("{head} (none had windows in PMD folios)"),
        (f, k) if k == f => format!("{head}: the {f} window(s) that were in PMD folios (warmed) are again"),
        (f, k) => format!(
            "{head} but for {} of the {f} window(s) that were in PMD folios (warmed): run `hugetext warm` on them again",
            f - k
        ),
    }
}
