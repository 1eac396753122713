//! Folio scanning: read `/proc/PID/pagemap` and `/proc/kpageflags` in batches
//! and work out which folio (and of which size) backs every mapped page.
//!
//! Two views are built on the same primitives:
//! - processes' mappings (see [`crate::inspect`]);
//! - a file's page cache whether or not anyone maps it ([`scan_file`]): map
//!   the file, ask `mincore` which pages are cached, touch only those, and read
//!   this process's own pagemap (what the kernel's `page-types -f` does).

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::kernel::{self, Mapping};
use crate::{Error, Result};

/// pagemap: page present.
pub const PM_PRESENT: u64 = 1 << 63;
/// pagemap: page is file-backed or shared anonymous.
pub const PM_FILE: u64 = 1 << 61;
/// pagemap: PFN field mask (bits 0–54).
pub const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// kpageflags bits (include/uapi/linux/kernel-page-flags.h).
pub mod kpf {
    pub const MMAP: u64 = 1 << 11;
    pub const ANON: u64 = 1 << 12;
    pub const COMPOUND_HEAD: u64 = 1 << 15;
    pub const COMPOUND_TAIL: u64 = 1 << 16;
    pub const HUGE: u64 = 1 << 17;
    pub const THP: u64 = 1 << 22;
}

/// Read `n` pagemap entries of process `pid` (None = this process) starting
/// at virtual address `addr`, in one `pread`.
pub fn read_pagemap(pid: Option<i32>, addr: usize, n: usize) -> Result<Vec<u64>> {
    let path = match pid {
        Some(p) => PathBuf::from(format!("/proc/{p}/pagemap")),
        None => PathBuf::from("/proc/self/pagemap"),
    };
    let f = File::open(&path).map_err(|e| Error::io(&path, e))?;
    read_u64s(&f, &path, (addr / kernel::page_size()) as u64 * 8, n)
}

/// Read the kpageflags words of `n` consecutive PFNs starting at `pfn`.
pub fn read_kpageflags(kpf_file: &File, pfn: u64, n: usize) -> Result<Vec<u64>> {
    read_u64s(kpf_file, Path::new("/proc/kpageflags"), pfn * 8, n)
}

fn read_u64s(f: &File, path: &Path, offset: u64, n: usize) -> Result<Vec<u64>> {
    let mut buf = vec![0u8; n * 8];
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    if done < buf.len() {
        return Err(Error::Other(format!("{}: short read", path.display())));
    }
    Ok(buf.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect())
}

/// Open `/proc/kpageflags`, with a clear error when it is not readable.
pub fn open_kpageflags() -> Result<File> {
    File::open("/proc/kpageflags").map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied || e.kind() == std::io::ErrorKind::NotFound {
            Error::Permission(
                "cannot read /proc/kpageflags: folio sizes need root (CAP_SYS_ADMIN); run as root".into(),
            )
        } else {
            Error::io("/proc/kpageflags", e)
        }
    })
}

/// For each page of a virtually contiguous range, the size in bytes of the
/// folio that holds it (0 = not present), given its pagemap entries.
///
/// Folios are found from kpageflags: a page with `COMPOUND_HEAD` starts a large
/// folio whose following `COMPOUND_TAIL` pages (contiguous both virtually and
/// physically) belong to it; a page with neither is an order-0 folio. Tails
/// at the start of the range whose head lies before it are counted as a folio
/// of the pages seen (a partial view): callers that need exact sizes start
/// their range at a folio-aligned address.
pub fn folio_sizes(kpf_file: &File, pagemap: &[u64]) -> Result<Vec<u64>> {
    let ps = kernel::page_size() as u64;
    let n = pagemap.len();
    let mut flags = vec![0u64; n];
    // Read kpageflags once per physically contiguous run of present pages.
    let mut i = 0;
    while i < n {
        if pagemap[i] & PM_PRESENT == 0 || pagemap[i] & PM_PFN_MASK == 0 {
            i += 1;
            continue;
        }
        let pfn0 = pagemap[i] & PM_PFN_MASK;
        let mut j = i + 1;
        while j < n && pagemap[j] & PM_PRESENT != 0 && pagemap[j] & PM_PFN_MASK == pfn0 + (j - i) as u64 {
            j += 1;
        }
        let words = read_kpageflags(kpf_file, pfn0, j - i)?;
        flags[i..j].copy_from_slice(&words);
        i = j;
    }
    let mut sizes = vec![0u64; n];
    let mut i = 0;
    while i < n {
        let e = pagemap[i];
        if e & PM_PRESENT == 0 || e & PM_PFN_MASK == 0 {
            i += 1;
            continue;
        }
        let pfn = e & PM_PFN_MASK;
        let mut j = i + 1;
        if flags[i] & (kpf::COMPOUND_HEAD | kpf::COMPOUND_TAIL) != 0 {
            while j < n
                && pagemap[j] & PM_PRESENT != 0
                && pagemap[j] & PM_PFN_MASK == pfn + (j - i) as u64
                && flags[j] & kpf::COMPOUND_TAIL != 0
            {
                j += 1;
            }
        }
        let size = (j - i) as u64 * ps;
        sizes[i..j].fill(size);
        i = j;
    }
    Ok(sizes)
}

/// The page-cache view of one file: how much of it is cached, in folios of
/// which sizes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileFolios {
    /// The file.
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// The byte range of the file that was examined.
    pub range: Range<u64>,
    /// kB of the examined range held in the page cache.
    pub cached_kb: u64,
    /// kB of the examined range held in folios of each size (key: folio size in kB).
    pub folios_kb: BTreeMap<u64, u64>,
    /// kB of the examined range whose folios some *other* process maps
    /// (from `/proc/kpagecount`): these cannot be evicted.
    pub mapped_kb: u64,
    /// Start offsets of the whole PMD-size windows inside the examined range
    /// that are held in a single PMD-size folio.
    pub pmd_windows: Vec<u64>,
    /// Number of whole PMD-size windows inside the examined range.
    pub total_windows: u64,
}

impl FileFolios {
    /// kB held in PMD-size folios.
    pub fn pmd_kb(&self) -> u64 {
        self.folios_kb.get(&(kernel::pmd_size() as u64 / 1024)).copied().unwrap_or(0)
    }
}

/// Scan the page cache of `path` over `range` (None = the whole file) without
/// reading anything that is not already cached.
///
/// The file is mapped at a PMD-congruent address with `MADV_RANDOM` (so no
/// readahead is triggered), `mincore` says which pages are cached, only those
/// are touched, and this process's pagemap + kpageflags give the folios.
/// The scan widens the range to PMD boundaries internally so that folio sizes
/// are exact, then counts only pages inside `range`.
pub fn scan_file(path: &Path, range: Option<Range<u64>>) -> Result<FileFolios> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::Invalid(format!("{}: not a regular file", path.display())));
    }
    let size = meta.len();
    let range = range.unwrap_or(0..size);
    let range = range.start.min(size)..range.end.min(size);
    let pmd = kernel::pmd_size() as u64;
    let ps = kernel::page_size() as u64;
    let mut out = FileFolios {
        path: path.to_path_buf(),
        size,
        range: range.clone(),
        cached_kb: 0,
        folios_kb: BTreeMap::new(),
        mapped_kb: 0,
        pmd_windows: Vec::new(),
        total_windows: 0,
    };
    let first_window = range.start.div_ceil(pmd);
    let last_window = range.end / pmd;
    out.total_windows = last_window.saturating_sub(first_window);
    if range.is_empty() {
        return Ok(out);
    }
    let kpf_file = open_kpageflags()?;
    let kpc_file = File::open("/proc/kpagecount").ok();
    // Work in PMD-sized chunks so memory stays bounded for huge files.
    let chunk = 64 * pmd;
    let mut off = range.start / pmd * pmd;
    let end = range.end.div_ceil(ps) * ps;
    while off < end {
        let len = chunk.min(end - off) as usize;
        let map = Mapping::file_congruent(f.as_fd(), off, len, libc::PROT_READ, pmd as usize)?;
        map.madvise(0, len, libc::MADV_RANDOM)?;
        let resident = map.resident()?;
        for (i, r) in resident.iter().enumerate() {
            if *r {
                // SAFETY: the page is inside our mapping and cached; a read
                // maps it without I/O.
                unsafe { std::ptr::read_volatile(map.as_ptr().add(i * ps as usize)) };
            }
        }
        let pm = read_pagemap(None, map.addr(), resident.len())?;
        let sizes = folio_sizes(&kpf_file, &pm)?;
        let counts = match &kpc_file {
            Some(kpc) => Some(mapcounts(kpc, &pm)?),
            None => None,
        };
        for (i, &sz) in sizes.iter().enumerate() {
            let page_off = off + i as u64 * ps;
            if sz == 0 || page_off < range.start || page_off >= range.end {
                continue;
            }
            out.cached_kb += ps / 1024;
            *out.folios_kb.entry(sz / 1024).or_default() += ps / 1024;
            if let Some(c) = &counts {
                // Our own mapping accounts for one.
                if c[i] > 1 {
                    out.mapped_kb += ps / 1024;
                }
            }
            if sz == pmd && page_off % pmd == 0 && page_off >= range.start && page_off + pmd <= range.end {
                out.pmd_windows.push(page_off);
            }
        }
        drop(map);
        off += len as u64;
    }
    Ok(out)
}

/// `/proc/kpagecount` words for the present pages of a pagemap slice
/// (0 for absent pages).
fn mapcounts(kpc: &File, pagemap: &[u64]) -> Result<Vec<u64>> {
    let mut out = vec![0u64; pagemap.len()];
    let mut i = 0;
    while i < pagemap.len() {
        let e = pagemap[i];
        if e & PM_PRESENT == 0 || e & PM_PFN_MASK == 0 {
            i += 1;
            continue;
        }
        let pfn0 = e & PM_PFN_MASK;
        let mut j = i + 1;
        while j < pagemap.len() && pagemap[j] & PM_PRESENT != 0 && pagemap[j] & PM_PFN_MASK == pfn0 + (j - i) as u64 {
            j += 1;
        }
        let w = read_u64s(kpc, Path::new("/proc/kpagecount"), pfn0 * 8, j - i)?;
        out[i..j].copy_from_slice(&w);
        i = j;
    }
    Ok(out)
}
