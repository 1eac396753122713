//! Folio scanning: read `/proc/PID/pagemap` and `/proc/kpageflags` in batches
//! and work out which folio (and of which size) backs every mapped page.
//!
//! Two views are built on the same primitives:
//! - processes' mappings (see [`crate::inspect`]);
//! - a file's page cache whether or not anyone maps it ([`scan_file`]): map
//!   the file, ask `mincore` which pages are cached, touch only those, and read
//!   this process's own pagemap (what the kernel's `page-types -f` does).

use hugetext_abi::geometry::Windows;
use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::kernel::{self, Mapping};
use crate::{Error, Result};

/// pagemap and kpageflags bits (one home: `hugetext_abi`, shared with the
/// preload).
pub use hugetext_abi::kpf;
pub use hugetext_abi::pagemap::{PM_FILE, PM_PFN_MASK, PM_PRESENT};

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
fn read_kpageflags(kpf_file: &File, pfn: u64, n: usize) -> Result<Vec<u64>> {
    read_u64s(kpf_file, Path::new("/proc/kpageflags"), pfn * 8, n)
}

fn read_u64s(f: &File, path: &Path, offset: u64, n: usize) -> Result<Vec<u64>> {
    let mut out = vec![0u64; n];
    if read_words_into(f, offset, &mut out).map_err(|e| Error::io(path, e))? < n {
        return Err(Error::Other(format!("{}: short read", path.display())));
    }
    Ok(out)
}

/// Open `/proc/kpageflags`, with a clear error when it is not readable.
pub fn open_kpageflags() -> Result<File> {
    File::open("/proc/kpageflags").map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied || e.kind() == std::io::ErrorKind::NotFound {
            Error::Permission("cannot read /proc/kpageflags: folio sizes need root (CAP_SYS_ADMIN); run as root".into())
        } else {
            Error::io("/proc/kpageflags", e)
        }
    })
}

/// The runs of present pages in `pagemap` that are physically contiguous as
/// well: `(i, j, pfn)` for entries `i..j` mapping frames `pfn..pfn + (j - i)`.
/// Pages without a PFN (not present, or PFNs hidden) are skipped.
pub fn pfn_runs(pagemap: &[u64]) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
    let n = pagemap.len();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < n && (pagemap[i] & PM_PRESENT == 0 || pagemap[i] & PM_PFN_MASK == 0) {
            i += 1;
        }
        if i == n {
            return None;
        }
        let pfn0 = pagemap[i] & PM_PFN_MASK;
        let mut j = i + 1;
        while j < n && pagemap[j] & PM_PRESENT != 0 && pagemap[j] & PM_PFN_MASK == pfn0 + (j - i) as u64 {
            j += 1;
        }
        let run = (i, j, pfn0);
        i = j;
        Some(run)
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
    for (i, j, pfn0) in pfn_runs(pagemap) {
        let words = read_kpageflags(kpf_file, pfn0, j - i)?;
        flags[i..j].copy_from_slice(&words);
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
    /// Start offsets of the whole windows of the huge unit inside the
    /// examined range that are held in a single folio of at least that size
    /// (the unit is the PMD size, or the contpte block with 64 KiB pages:
    /// [`kernel::huge_unit`]; named for the PMD in JSON, as everywhere).
    pub unit_windows: Vec<u64>,
    /// Number of whole windows of the huge unit inside the examined range.
    pub total_windows: u64,
}

impl FileFolios {
    /// kB held in PMD-size folios.
    pub fn pmd_kb(&self) -> u64 {
        self.folios_kb
            .get(&(kernel::pmd_size() as u64 / 1024))
            .copied()
            .unwrap_or(0)
    }

    /// kB held in folios of at least the huge unit ([`kernel::huge_unit`]):
    /// [`FileFolios::pmd_kb`] wherever the unit is the PMD.
    pub fn huge_kb(&self) -> u64 {
        let unit_kb = kernel::unit_size() as u64 / 1024;
        self.folios_kb.range(unit_kb..).map(|(_, kb)| kb).sum()
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
    let f = crate::openfile::open_regular(path, crate::openfile::Follow::Yes).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => Error::Invalid(format!("{}: {e}", path.display())),
        _ => Error::io(path, e),
    })?;
    scan_open(&f, path, range)
}

/// The page cache's largest folio, in pages, where the PMD is larger
/// (`MAX_PAGECACHE_ORDER`, the xarray's limit: order 11, 128 MiB with
/// 64 KiB pages).
pub const MAX_PAGECACHE_PAGES: u64 = 1 << 11;

/// [`scan_file`] of a file already open (`path` names it in the result and
/// in errors; it is not opened again).
pub fn scan_open(f: &File, path: &Path, range: Option<Range<u64>>) -> Result<FileFolios> {
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    let size = meta.len();
    let range = range.unwrap_or(0..size);
    let range = range.start.min(size)..range.end.min(size);
    // Windows of the huge unit (the PMD, or the contpte block with 64 KiB
    // pages).
    let unit = kernel::unit_size() as u64;
    let ps = kernel::page_size() as u64;
    let mut out = FileFolios {
        path: path.to_path_buf(),
        size,
        range: range.clone(),
        cached_kb: 0,
        folios_kb: BTreeMap::new(),
        mapped_kb: 0,
        unit_windows: Vec::new(),
        total_windows: 0,
    };
    out.total_windows = Windows::<u64>::new(range.start, range.end, unit).count();
    if range.is_empty() {
        return Ok(out);
    }
    let kpf_file = open_kpageflags()?;
    let kpc_file = File::open("/proc/kpagecount").ok();
    // Work in chunks aligned to the largest folio the page cache holds (the
    // PMD, or 2048 pages where the PMD is larger), so that no folio is cut
    // and sizes are exact, and memory stays bounded for huge files.
    let largest = (kernel::pmd_size() as u64).min(MAX_PAGECACHE_PAGES * ps);
    let chunk = 64 * largest;
    let mut off = range.start / largest * largest;
    let end = range.end.div_ceil(ps) * ps;
    while off < end {
        let len = chunk.min(end - off) as usize;
        // A chunk with nothing cached (most of a sparse file) is skipped
        // without mapping it: the scan costs what is cached, not the range.
        // Kernels without cachestat (before 6.5) skip the file's holes
        // instead (zero pages cached there by reads of a hole go uncounted).
        let skip = match kernel::cached_pages(f.as_fd(), off, len as u64) {
            Some(n) => n == 0,
            None => all_hole(f, off, len as u64),
        };
        if skip {
            off += len as u64;
            continue;
        }
        let map = Mapping::file_congruent(f.as_fd(), off, len, libc::PROT_READ, largest as usize)?;
        map.madvise(0, len, libc::MADV_RANDOM)?;
        let resident = map.resident()?;
        let mut i = 0;
        while i < resident.len() {
            if !resident[i] {
                i += 1;
                continue;
            }
            let j = i + resident[i..].iter().take_while(|r| **r).count();
            // The pages are cached, so this maps them without I/O. A file
            // truncated meanwhile is an error here (never SIGBUS): pages
            // past its end stay unmapped and are not counted.
            match map.populate_read(i * ps as usize, (j - i) * ps as usize) {
                Err(e) if !kernel::is_past_eof(&e) => return Err(e),
                _ => {}
            }
            i = j;
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
            // Folios are naturally aligned in the file: a page at a window's
            // start in a folio at least that large has the whole window.
            if sz >= unit && page_off % unit == 0 && page_off >= range.start && page_off + unit <= range.end {
                out.unit_windows.push(page_off);
            }
        }
        drop(map);
        off += len as u64;
    }
    Ok(out)
}

/// Whether `[off, off + len)` of `f` is a hole (`SEEK_DATA` finds no data
/// before its end). Filesystems without holes say no.
fn all_hole(f: &File, off: u64, len: u64) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor we hold; the scan does not use the
    // file offset.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off as libc::off_t, libc::SEEK_DATA) };
    if r < 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
    }
    r as u64 >= off + len
}

/// `/proc/kpagecount` words for the present pages of a pagemap slice
/// (0 for absent pages).
fn mapcounts(kpc: &File, pagemap: &[u64]) -> Result<Vec<u64>> {
    let mut out = vec![0u64; pagemap.len()];
    for (i, j, pfn0) in pfn_runs(pagemap) {
        let w = read_u64s(kpc, Path::new("/proc/kpagecount"), pfn0 * 8, j - i)?;
        out[i..j].copy_from_slice(&w);
    }
    Ok(out)
}

/// Read 8-byte words at `offset` of `f` into `out`, returning how many were
/// read in full (fewer only at end of file). One `pread` in the common case.
pub fn read_words_into(f: &File, offset: u64, out: &mut [u64]) -> std::io::Result<usize> {
    // SAFETY: u64 has no invalid bit patterns and a stricter alignment than
    // u8; the byte view covers exactly `out`.
    let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, std::mem::size_of_val(out)) };
    let mut done = 0;
    while done < bytes.len() {
        match f.read_at(&mut bytes[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(done / 8)
}

/// Anonymous memory, page cache, or shmem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Page cache of a file on disk: what program text is.
    File,
    /// Anonymous memory (text `hugetext run` copied).
    Anon,
    /// Shmem mapped from a file (tmpfs, memfd, SysV shm): file-backed and
    /// shared like page cache, but its folio sizes are tmpfs's (`huge=`),
    /// not the disk filesystem's.
    Shmem,
}

impl Kind {
    /// Every kind, in display order.
    pub const ALL: [Kind; 3] = [Kind::File, Kind::Shmem, Kind::Anon];

    /// `file`, `shmem` or `anon`, the prefix of thpmaps' labels.
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Anon => "anon",
            Kind::Shmem => "shmem",
        }
    }

    /// The kind of a mapped page from its `/proc/kpageflags` word.
    pub fn of_flags(w: u64) -> Kind {
        if w & kpf::ANON != 0 {
            Kind::Anon
        } else if w & kpf::SWAPBACKED != 0 {
            Kind::Shmem
        } else {
            Kind::File
        }
    }

    fn idx(self) -> usize {
        self as usize
    }
}

/// How a mapped page is backed and mapped: thpmaps' classes, plus order-0
/// base pages and hugetlb. The derived order ranks them from worst to best
/// for the iTLB (used to count shared text once, under its best mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// An order-0 folio (a base page): `<kind>-base-page`.
    BasePage,
    /// PTE-mapped, folio size unknown (no PFN access, smaps-only numbers):
    /// `<kind>-pte-mapped`.
    PteUnknown,
    /// Part of a large folio that this mapping maps only in part (or not
    /// contiguously): `<kind>-thp-pte-partial`.
    Partial,
    /// A whole large folio of this order, PTE-mapped at a virtual address
    /// not aligned to its size: `<kind>-thp-pte-unaligned-<size>kB`.
    PteUnaligned(u32),
    /// A whole large folio of this order, PTE-mapped at a virtual address
    /// aligned to its size: `<kind>-thp-pte-aligned-<size>kB`.
    PteAligned(u32),
    /// A PMD-size folio mapped by one PMD: `<kind>-thp-pmd-aligned-<size>kB`.
    PmdAligned,
    /// hugetlbfs pages: `<kind>-hugetlb`.
    Hugetlb,
}

/// Most folio orders a [`Counts`] can tell apart (order 31 = 8 TiB folios).
pub const MAX_ORDER: usize = 32;
const N_CODES: usize = 5 + 2 * MAX_ORDER;

impl Class {
    fn code(self) -> usize {
        match self {
            Class::BasePage => 0,
            Class::PteUnknown => 1,
            Class::Partial => 2,
            Class::PmdAligned => 3,
            Class::Hugetlb => 4,
            Class::PteUnaligned(o) => 5 + (o as usize).min(MAX_ORDER - 1),
            Class::PteAligned(o) => 5 + MAX_ORDER + (o as usize).min(MAX_ORDER - 1),
        }
    }

    /// The thpmaps-style label for this class, e.g.
    /// `file-thp-pte-aligned-64kB` (sizes from the page size and PMD order).
    pub fn label(self, kind: Kind) -> String {
        let k = kind.name();
        let kb = |order: u32| (kernel::page_size() as u64) << order >> 10;
        match self {
            Class::BasePage => format!("{k}-base-page"),
            Class::PteUnknown => format!("{k}-pte-mapped"),
            Class::Partial => format!("{k}-thp-pte-partial"),
            Class::PteUnaligned(o) => format!("{k}-thp-pte-unaligned-{}kB", kb(o)),
            Class::PteAligned(o) => format!("{k}-thp-pte-aligned-{}kB", kb(o)),
            Class::PmdAligned => format!("{k}-thp-pmd-aligned-{}kB", kernel::pmd_size() >> 10),
            Class::Hugetlb => format!("{k}-hugetlb"),
        }
    }
}

/// The order of the PMD size (9 on x86_64 with 4 KiB pages).
pub fn pmd_order() -> u32 {
    (kernel::pmd_size() / kernel::page_size()).trailing_zeros()
}

/// Page counts per [`Kind`] and [`Class`], plus contiguous-block counts
/// (`--cont`). Cheap to add to and merge; all numbers are pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pages: [[u64; N_CODES]; 3],
    cont_pte: [[u64; MAX_ORDER]; 3],
    cont_pmd: [[u64; MAX_ORDER]; 3],
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            pages: [[0; N_CODES]; 3],
            cont_pte: [[0; MAX_ORDER]; 3],
            cont_pmd: [[0; MAX_ORDER]; 3],
        }
    }
}

impl Counts {
    /// Add `pages` pages of `kind` in `class`.
    pub fn add(&mut self, kind: Kind, class: Class, pages: u64) {
        self.pages[kind.idx()][class.code()] += pages;
    }

    /// Move up to `pages` pages of `kind` from class `from` to class `to`
    /// (and, for the PMD class, from PTE- to PMD-mapped contiguous blocks);
    /// returns how many moved.
    pub fn reclassify(&mut self, kind: Kind, from: Class, to: Class, pages: u64) -> u64 {
        let n = pages.min(self.get(kind, from));
        self.pages[kind.idx()][from.code()] -= n;
        self.pages[kind.idx()][to.code()] += n;
        if to == Class::PmdAligned {
            for o in 0..MAX_ORDER {
                if self.cont_pte[kind.idx()][o] > 0 {
                    let m = n.min(self.cont_pte[kind.idx()][o]);
                    self.cont_pte[kind.idx()][o] -= m;
                    self.cont_pmd[kind.idx()][o] += m;
                }
            }
        }
        n
    }

    /// Pages of `kind` in `class`.
    pub fn get(&self, kind: Kind, class: Class) -> u64 {
        self.pages[kind.idx()][class.code()]
    }

    /// Add PTE-mapped contiguous aligned blocks of order `order` (pages).
    fn add_cont_pte(&mut self, kind: Kind, order: u32, pages: u64) {
        self.cont_pte[kind.idx()][order as usize] += pages;
    }

    /// Add PMD-mapped pages to the contiguous-block counters of `order`.
    pub fn add_cont_pmd(&mut self, kind: Kind, order: u32, pages: u64) {
        self.cont_pmd[kind.idx()][order as usize] += pages;
    }

    /// Pages in contiguous aligned blocks of `order`: (PTE-mapped, PMD-mapped).
    pub fn cont(&self, kind: Kind, order: u32) -> (u64, u64) {
        (
            self.cont_pte[kind.idx()][order as usize],
            self.cont_pmd[kind.idx()][order as usize],
        )
    }

    /// All mapped pages of `kind` (every class; contiguous blocks are a
    /// second view of the same pages and not added).
    pub fn total(&self, kind: Kind) -> u64 {
        self.pages[kind.idx()].iter().sum()
    }

    /// Add another set of counts to this one.
    pub fn merge(&mut self, other: &Counts) {
        for k in 0..Kind::ALL.len() {
            for (a, b) in self.pages[k].iter_mut().zip(other.pages[k].iter()) {
                *a += b;
            }
            for o in 0..MAX_ORDER {
                self.cont_pte[k][o] += other.cont_pte[k][o];
                self.cont_pmd[k][o] += other.cont_pmd[k][o];
            }
        }
    }

    /// True when nothing is counted.
    pub fn is_empty(&self) -> bool {
        Kind::ALL.iter().all(|&k| self.total(k) == 0)
    }

    /// Move every count of kind `from` to kind `to` (a mapping found to be
    /// shmem after some of its pages were counted as page cache).
    pub fn move_kind(&mut self, from: Kind, to: Kind) {
        let (f, t) = (from.idx(), to.idx());
        if f == t {
            return;
        }
        for c in 0..N_CODES {
            self.pages[t][c] += std::mem::take(&mut self.pages[f][c]);
        }
        for o in 0..MAX_ORDER {
            self.cont_pte[t][o] += std::mem::take(&mut self.cont_pte[f][o]);
            self.cont_pmd[t][o] += std::mem::take(&mut self.cont_pmd[f][o]);
        }
    }

    /// Every class present in these counts (or, with `all`, every class this
    /// kernel can produce), in display order: base pages, PTE-mapped aligned
    /// by size, unaligned by size, partial, PMD-mapped, then the rest.
    pub fn classes(&self, kind: Kind, all: bool) -> Vec<Class> {
        let pmd = pmd_order();
        let mut v = vec![Class::BasePage];
        v.extend((1..=pmd).map(Class::PteAligned));
        v.extend((1..=pmd).map(Class::PteUnaligned));
        v.push(Class::Partial);
        v.push(Class::PmdAligned);
        // Orders above the PMD order only occur with hugetlb-like oddities;
        // show them when present.
        for o in pmd + 1..MAX_ORDER as u32 {
            if self.get(kind, Class::PteAligned(o)) > 0 {
                v.push(Class::PteAligned(o));
            }
            if self.get(kind, Class::PteUnaligned(o)) > 0 {
                v.push(Class::PteUnaligned(o));
            }
        }
        v.push(Class::Hugetlb);
        v.push(Class::PteUnknown);
        v.retain(|&c| {
            let n = self.get(kind, c);
            n > 0 || (all && !matches!(c, Class::Hugetlb | Class::PteUnknown))
        });
        v
    }
}

/// What one folio (or run of base pages) of a mapping is: `pages` pages from
/// virtual page number `vpn`, of `kind`, classified as `class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First virtual page number.
    pub vpn: u64,
    /// Number of base pages.
    pub pages: u64,
    /// What backs the pages.
    pub kind: Kind,
    /// How the segment is mapped and aligned.
    pub class: Class,
}

/// Classifies PTE-mapped pages into thpmaps' classes from their pagemap
/// entries, reading `/proc/kpageflags` once per physically contiguous run
/// and once per frame over its life. Buffers are reused between calls.
pub struct Classifier<'a> {
    kpf: &'a File,
    cont_orders: Vec<u32>,
    flags: Vec<u64>,
    tmp: Vec<u64>,
    runs: Vec<(usize, usize, u64)>,
    seen: FlagsCache,
}

/// The kpageflags words a [`Classifier`] has read, by PFN: every process
/// that maps a library maps the same page-cache frames, so during one scan
/// (a scrape, an inspection) each frame's flags are read from the kernel
/// once and shared by all the processes that map it. Bounded: past
/// [`FlagsCache::MAX`] frames, further words are read but not kept.
#[derive(Default)]
struct FlagsCache {
    words: rustc_hash::FxHashMap<u64, u64>,
}

impl FlagsCache {
    /// A million frames (4 GiB of 4 KiB pages; the table takes at most
    /// about 32 MiB): a system's resident text is far less.
    const MAX: usize = 1 << 20;

    /// Fill `out` with the words of `pfn0..pfn0 + out.len()` if all are
    /// known.
    fn get(&self, pfn0: u64, out: &mut [u64]) -> bool {
        for (k, w) in out.iter_mut().enumerate() {
            match self.words.get(&(pfn0 + k as u64)) {
                Some(&v) => *w = v,
                None => return false,
            }
        }
        true
    }

    fn put(&mut self, pfn0: u64, words: &[u64]) {
        if self.words.len() + words.len() > Self::MAX {
            return;
        }
        for (k, &w) in words.iter().enumerate() {
            self.words.insert(pfn0 + k as u64, w);
        }
    }
}

impl<'a> Classifier<'a> {
    /// A classifier reading `kpf` (an open `/proc/kpageflags`) that also
    /// counts naturally aligned contiguous blocks of the given orders.
    pub fn new(kpf: &'a File, cont_orders: &[u32]) -> Self {
        Classifier {
            kpf,
            cont_orders: cont_orders.to_vec(),
            flags: Vec::new(),
            tmp: Vec::new(),
            runs: Vec::new(),
            seen: FlagsCache::default(),
        }
    }

    /// The kpageflags words of `pfn0..pfn0 + n` and of the frame after
    /// (when there is one) into `self.tmp`; how many were read.
    fn flags_of_run(&mut self, pfn0: u64, n: usize) -> Result<usize> {
        self.tmp.clear();
        self.tmp.resize(n + 1, 0);
        if self.seen.get(pfn0, &mut self.tmp) {
            return Ok(n + 1);
        }
        // One pread for the run and the word after it.
        let got = read_words_into(self.kpf, pfn0 * 8, &mut self.tmp).map_err(|e| Error::io("/proc/kpageflags", e))?;
        if got < n {
            return Err(Error::Other("/proc/kpageflags: short read".into()));
        }
        self.seen.put(pfn0, &self.tmp[..got]);
        Ok(got)
    }

    /// Classify the PTE-mapped pages `[vpn0, vpn0 + pagemap.len())` of one
    /// mapping given their pagemap entries (no PMD mappings inside: callers
    /// take those from `PAGEMAP_SCAN` or smaps).
    ///
    /// Semantics follow the kernel's `tools/mm/thpmaps`: a large folio is
    /// *aligned* when all of it is mapped, virtually and physically
    /// contiguously, at a virtual address aligned to its size; *unaligned*
    /// when all of it is mapped so but not at an aligned address; pages of a
    /// folio mapped only in part are *partial*. Zero pages are not counted
    /// (like smaps' `Rss`). Counts go to `counts`; each folio (or run of
    /// base pages) is also reported to `sink`.
    pub fn classify(
        &mut self,
        vpn0: u64,
        pagemap: &[u64],
        counts: &mut Counts,
        mut sink: impl FnMut(Segment),
    ) -> Result<()> {
        let n = pagemap.len();
        self.flags.clear();
        self.flags.resize(n, 0);
        self.runs.clear();
        // 1. kpageflags per physically contiguous run, plus the word of the
        //    page after the run (a tail there means the last folio goes on).
        for (i, j, pfn0) in pfn_runs(pagemap) {
            let got = self.flags_of_run(pfn0, j - i)?;
            self.flags[i..j].copy_from_slice(&self.tmp[..j - i]);
            // At the end of physical memory there is no word after the run.
            let next = if got > j - i { self.tmp[j - i] } else { 0 };
            self.runs.push((i, j, next));
        }
        // 2. Walk each run folio by folio.
        let large = kpf::COMPOUND_HEAD | kpf::COMPOUND_TAIL;
        for &(i, j, next) in &self.runs {
            let f = &self.flags[i..j];
            let kind_of = Kind::of_flags;
            let mut k = 0;
            let len = j - i;
            while k < len {
                let w = f[k];
                let vpn = vpn0 + (i + k) as u64;
                if w & kpf::ZERO_PAGE != 0 {
                    k += 1;
                    continue;
                }
                let kind = kind_of(w);
                if w & kpf::HUGE != 0 {
                    let mut m = k + 1;
                    while m < len && f[m] & kpf::HUGE != 0 {
                        m += 1;
                    }
                    emit(counts, &mut sink, vpn, (m - k) as u64, kind, Class::Hugetlb);
                    k = m;
                } else if w & large == 0 {
                    let mut m = k + 1;
                    while m < len && f[m] & (large | kpf::ZERO_PAGE | kpf::HUGE) == 0 && kind_of(f[m]) == kind {
                        m += 1;
                    }
                    emit(counts, &mut sink, vpn, (m - k) as u64, kind, Class::BasePage);
                    k = m;
                } else if w & kpf::COMPOUND_TAIL != 0 {
                    // Only possible at the start of a run: the head is not
                    // mapped here (contiguously), so this folio is partial.
                    let mut m = k + 1;
                    while m < len && f[m] & kpf::COMPOUND_TAIL != 0 {
                        m += 1;
                    }
                    emit(counts, &mut sink, vpn, (m - k) as u64, kind, Class::Partial);
                    k = m;
                } else {
                    let mut m = k + 1;
                    while m < len && f[m] & kpf::COMPOUND_TAIL != 0 {
                        m += 1;
                    }
                    let nr = (m - k) as u64;
                    let class = if m == len && next & kpf::COMPOUND_TAIL != 0 {
                        Class::Partial
                    } else {
                        let order = 63 - nr.leading_zeros();
                        if vpn % (1u64 << order) == 0 && nr.is_power_of_two() {
                            Class::PteAligned(order)
                        } else {
                            Class::PteUnaligned(order)
                        }
                    };
                    emit(counts, &mut sink, vpn, nr, kind, class);
                    k = m;
                }
            }
            // 3. Contiguous, naturally aligned blocks inside one large folio.
            let pfn_i = pagemap[i] & PM_PFN_MASK;
            for &order in &self.cont_orders {
                let nr = 1usize << order;
                let vpn_i = vpn0 + i as u64;
                if (pfn_i.wrapping_sub(vpn_i)) % nr as u64 != 0 {
                    continue;
                }
                let mut b = ((vpn_i.div_ceil(nr as u64) * nr as u64) - vpn_i) as usize;
                while b + nr <= len {
                    let blk = &f[b..b + nr];
                    let ok = blk[0] & large != 0
                        && blk[0] & (kpf::HUGE | kpf::ZERO_PAGE) == 0
                        && blk[1..].iter().all(|&x| x & kpf::COMPOUND_TAIL != 0);
                    if ok {
                        counts.add_cont_pte(kind_of(blk[0]), order, nr as u64);
                    }
                    b += nr;
                }
            }
        }
        Ok(())
    }
}

fn emit(counts: &mut Counts, sink: &mut impl FnMut(Segment), vpn: u64, pages: u64, kind: Kind, class: Class) {
    counts.add(kind, class, pages);
    sink(Segment {
        vpn,
        pages,
        kind,
        class,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_cache_answers_only_runs_it_holds_whole_and_stays_bounded() {
        let mut c = FlagsCache::default();
        c.put(100, &[1, 2, 3]);
        let mut out = [0u64; 2];
        assert!(c.get(101, &mut out));
        assert_eq!(out, [2, 3]);
        let mut out = [0u64; 3];
        assert!(!c.get(101, &mut out), "frame 103 was never read");
        c.put(u64::MAX - 10, &vec![0; FlagsCache::MAX]);
        assert_eq!(c.words.len(), 3, "past the bound nothing more is kept");
    }

    /// The same pages classified twice by one classifier (the second time
    /// from its cache) give the same counts, as a fresh classifier does.
    #[test]
    fn cached_flags_classify_as_read_ones() {
        let Ok(kpf) = open_kpageflags() else { return };
        let exe = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = exe.lines().find(|l| l.contains("r-xp")).unwrap();
        let (start, end) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        let pgs = kernel::page_size() as u64;
        let pm = read_pagemap(None, start as usize, ((end - start) / pgs) as usize).unwrap();
        let mut cls = Classifier::new(&kpf, &[]);
        let (mut a, mut b) = (Counts::default(), Counts::default());
        cls.classify(start / pgs, &pm, &mut a, |_| {}).unwrap();
        cls.classify(start / pgs, &pm, &mut b, |_| {}).unwrap();
        assert_eq!(a, b);
        assert!(!a.is_empty());
    }
}
