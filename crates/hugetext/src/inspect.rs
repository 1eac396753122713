//! `inspect`: how the text of processes, cgroups, files or the whole system is
//! backed — folio sizes, and whether each folio is PTE-mapped aligned,
//! unaligned, partially, or PMD-mapped (the classes of the kernel's
//! `tools/mm/thpmaps`, plus order-0 base pages).
//!
//! How a process is read (fastest first, chosen at run time):
//! - [`Method::PagemapScan`] (Linux ≥ 6.7, CAP_SYS_ADMIN): one `PAGEMAP_SCAN`
//!   ioctl per mapping returns the present ranges and which of them are
//!   PMD-mapped; PMD-mapped ranges need nothing more (one PMD = one folio),
//!   the rest is read with one pagemap `pread` per range and one kpageflags
//!   `pread` per physically contiguous run.
//! - [`Method::PagemapSmaps`] (older kernels): pagemap + kpageflags for every
//!   present page; how much is PMD-mapped comes from smaps
//!   (`FilePmdMapped`, `ShmemPmdMapped`, `AnonHugePages`), exactly as thpmaps
//!   does it.
//! - [`Method::SmapsOnly`] (no CAP_SYS_ADMIN: the kernel hides PFNs): smaps
//!   alone — PMD-mapped vs PTE-mapped kB, folio sizes unknown.
//!
//! Text shared by many processes is counted per mapping ("mapped") and once
//! per file page ("unique", keyed by device, inode and file page index): a
//! page mapped differently by different processes is counted once, under its
//! best mapping.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::folio::{self, Class, Classifier, Counts, FileFolios, Kind, Segment, PM_PRESENT};
use crate::kernel::{self, pagemap_scan as ps};
use crate::procfs::{self, Vma};
use crate::progress::Progress;
use crate::{Error, Result};

/// Which processes to inspect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every process on the system.
    System,
    /// These processes; a missing one is an error.
    Pids(Vec<i32>),
    /// Every process in this cgroup (v1 or v2) and its descendants.
    Cgroup(PathBuf),
}

/// How process memory is read; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// `PAGEMAP_SCAN` for PMD-mapped ranges, pagemap + kpageflags for the rest.
    PagemapScan,
    /// pagemap + kpageflags for all pages, PMD-mapped amounts from smaps.
    PagemapSmaps,
    /// smaps only (no PFN access): PMD- vs PTE-mapped, folio sizes unknown.
    SmapsOnly,
}

impl Method {
    /// The best method this process can use on this kernel.
    pub fn detect() -> Method {
        if !kernel::pfn_access() {
            Method::SmapsOnly
        } else if kernel::pagemap_scan_supported() {
            Method::PagemapScan
        } else {
            Method::PagemapSmaps
        }
    }
}

/// What to inspect and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// The processes.
    pub target: Target,
    /// Every mapping (anonymous and file apart) instead of executable ones only.
    pub all: bool,
    /// Orders of the contiguous naturally aligned blocks to count (`--cont`).
    pub cont_orders: Vec<u32>,
    /// Keep per-mapping detail (otherwise only per-process sums).
    pub mappings: bool,
    /// Force a method (default: [`Method::detect`]).
    pub method: Option<Method>,
}

/// One inspected mapping.
#[derive(Debug, Clone)]
pub struct MappingReport {
    /// The mapping as `/proc/PID/maps` shows it.
    pub vma: Vma,
    /// Its pages by kind and class.
    pub counts: Counts,
    /// For text `hugetext run` copied into anonymous memory: the file it
    /// was copied from (set by [`Report::name_copies`]).
    pub copy_of: Option<String>,
}

/// One inspected process.
#[derive(Debug, Clone)]
pub struct ProcessReport {
    /// Process id.
    pub pid: i32,
    /// Command name.
    pub comm: String,
    /// Mappings in scope with resident pages (empty unless
    /// [`Options::mappings`]).
    pub mappings: Vec<MappingReport>,
    /// Sum over the process's mappings in scope.
    pub counts: Counts,
}

/// Processes that were not inspected, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// Exited before or while being read.
    pub vanished: u64,
    /// pagemap or smaps not readable (e.g. another user namespace).
    pub unreadable: u64,
    /// Kernel threads (no user memory).
    pub kernel_threads: u64,
    /// Zombies (no address space left).
    pub zombies: u64,
}

impl Skipped {
    /// Total number of processes skipped.
    pub fn total(&self) -> u64 {
        self.vanished + self.unreadable + self.kernel_threads + self.zombies
    }
}

/// The result of an inspection.
#[derive(Debug, Clone)]
pub struct Report {
    /// How memory was read.
    pub method: Method,
    /// Whether PFNs (and so folio sizes) were visible.
    pub pfn_access: bool,
    /// Scope: every mapping (`true`) or executable ones.
    pub all: bool,
    /// Orders counted as contiguous blocks.
    pub cont_orders: Vec<u32>,
    /// Inspected processes, by pid.
    pub processes: Vec<ProcessReport>,
    /// Processes skipped, by reason.
    pub skipped: Skipped,
    /// Sum over all processes ("mapped": shared text once per mapping).
    pub total: Counts,
    /// File-backed pages counted once per file page ("unique"); `None` with
    /// [`Method::SmapsOnly`], which cannot tell which pages are mapped.
    pub unique: Option<Counts>,
}

/// kB of `pages` base pages.
fn pages_kb(pages: u64) -> u64 {
    pages * (kernel::page_size() as u64 / 1024)
}

/// kB per class label (thpmaps' names, e.g. `file-thp-pmd-aligned-2048kB`),
/// and `file_kb`/`anon_kb` totals: the open-ended part of the JSON, whose
/// keys depend on the folio sizes found.
pub type ClassKb = std::collections::BTreeMap<String, u64>;

impl Report {
    /// Name the text `hugetext run` copied into anonymous memory, as
    /// `explain` does: for each process with an anonymous executable
    /// mapping, the file each copy came from ([`crate::remap::text_mappings`];
    /// one more smaps read for those processes only).
    pub fn name_copies(&mut self) {
        for p in &mut self.processes {
            let anon_text = |m: &MappingReport| m.vma.is_exec() && !m.vma.is_file();
            if !p.mappings.iter().any(anon_text) {
                continue;
            }
            let Ok(texts) = crate::remap::text_mappings(p.pid) else {
                continue;
            };
            for m in p.mappings.iter_mut().filter(|m| anon_text(m)) {
                m.copy_of = texts
                    .iter()
                    .find(|t| t.copied && t.start == m.vma.start)
                    .map(|t| t.path.clone());
            }
        }
    }

    /// The labels and kB of one set of counts of `kind`, in display order:
    /// with [`Method::SmapsOnly`] PTE-/PMD-mapped/hugetlb only, else every
    /// class found (`all_classes`: also the empty ones) and the contiguous
    /// blocks of [`Report::cont_orders`].
    pub fn labelled(&self, c: &Counts, kind: Kind, all_classes: bool) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        if self.method == Method::SmapsOnly {
            for class in [Class::PteUnknown, Class::PmdAligned, Class::Hugetlb] {
                let v = c.get(kind, class);
                if v > 0 || (all_classes && class != Class::Hugetlb) {
                    out.push((class.label(kind), pages_kb(v)));
                }
            }
            return out;
        }
        for class in c.classes(kind, all_classes) {
            out.push((class.label(kind), pages_kb(c.get(kind, class))));
        }
        for &o in &self.cont_orders {
            let size = pages_kb(1 << o);
            let (pte, pmd) = c.cont(kind, o);
            if pte > 0 || all_classes {
                out.push((format!("{}-cont-pte-aligned-{size}kB", kind.name()), pages_kb(pte)));
            }
            if pmd > 0 || all_classes {
                out.push((format!("{}-cont-pmd-aligned-{size}kB", kind.name()), pages_kb(pmd)));
            }
        }
        out
    }

    /// `<kind>_kb` and every class label of `kinds` (empty ones included).
    fn class_kb(&self, c: &Counts, kinds: &[Kind]) -> ClassKb {
        let mut m = ClassKb::new();
        for &kind in kinds {
            m.insert(format!("{}_kb", kind.name()), pages_kb(c.total(kind)));
            m.extend(self.labelled(c, kind, true));
        }
        m
    }

    /// The JSON report of `hugetext inspect --json`: every mapping, or with
    /// `rollup` a sum per process; `elapsed` is how long the inspection took.
    pub fn to_json(&self, rollup: bool, elapsed: std::time::Duration) -> ReportJson {
        let kinds = [Kind::File, Kind::Anon];
        let processes = self
            .processes
            .iter()
            .map(|p| ProcessJson {
                pid: p.pid,
                comm: p.comm.clone(),
                mappings: (!rollup).then(|| {
                    p.mappings
                        .iter()
                        .map(|m| MappingJson {
                            start: format!("{:#x}", m.vma.start),
                            end: format!("{:#x}", m.vma.end),
                            perms: m.vma.perms.clone(),
                            offset: m.vma.offset,
                            dev: m.vma.dev(),
                            inode: m.vma.inode,
                            path: m.vma.path.clone(),
                            copy_of: m.copy_of.clone(),
                            counts: self.class_kb(&m.counts, &kinds),
                        })
                        .collect()
                }),
                counts: if rollup {
                    self.class_kb(&p.counts, &kinds)
                } else {
                    ClassKb::new()
                },
            })
            .collect();
        ReportJson {
            method: self.method,
            pfn_access: self.pfn_access,
            scope: if self.all { "all" } else { "exec" },
            page_size_kb: kernel::page_size() as u64 / 1024,
            pmd_size_kb: kernel::pmd_size() as u64 / 1024,
            elapsed_ms: elapsed.as_secs_f64() * 1e3,
            skipped: self.skipped.clone(),
            processes,
            total: TotalJson {
                counts: self.class_kb(&self.total, &kinds),
                unique: self.unique.as_ref().map(|u| self.class_kb(u, &[Kind::File])),
            },
        }
    }
}

/// `hugetext inspect --json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReportJson {
    pub method: Method,
    pub pfn_access: bool,
    /// `exec` (executable mappings) or `all`.
    pub scope: &'static str,
    pub page_size_kb: u64,
    pub pmd_size_kb: u64,
    pub elapsed_ms: f64,
    pub skipped: Skipped,
    pub processes: Vec<ProcessJson>,
    pub total: TotalJson,
}

/// One process in [`ReportJson`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessJson {
    pub pid: i32,
    pub comm: String,
    /// Every mapping in scope; absent with `--rollup`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mappings: Option<Vec<MappingJson>>,
    /// With `--rollup`: the process's sums (empty otherwise).
    #[serde(flatten)]
    pub counts: ClassKb,
}

/// One mapping in [`ProcessJson`]: its maps line and its counts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MappingJson {
    /// Hex, `0x…`.
    pub start: String,
    /// Hex, `0x…`.
    pub end: String,
    pub perms: String,
    pub offset: u64,
    /// `MAJ:MIN` in hex.
    pub dev: String,
    pub inode: u64,
    pub path: String,
    /// Text `hugetext run` copied into anonymous memory: the file it was
    /// copied from (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_of: Option<String>,
    #[serde(flatten)]
    pub counts: ClassKb,
}

/// The totals in [`ReportJson`]: mapped (per mapping), and `unique` (file
/// pages once; `null` with smaps only).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TotalJson {
    #[serde(flatten)]
    pub counts: ClassKb,
    pub unique: Option<ClassKb>,
}

/// `hugetext inspect --file … --json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FilesJson {
    /// Whether folio sizes were visible for every file.
    pub pfn_access: bool,
    /// The running kernel's contpte block (64 kB with 4 KiB pages, 2048 kB
    /// with 16 or 64 KiB pages); `null` for a page size without one.
    pub contpte_block_kb: Option<u64>,
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
    pub pmd_windows: u64,
    pub pmd_windows_huge: u64,
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
                    pmd_windows: v.pmd_windows,
                    pmd_windows_huge: v.pmd_windows_huge,
                    contpte_kb: v.contpte_kb,
                })
                .collect(),
        }
    }
}

/// Inspect processes; `progress` counts them.
pub fn inspect(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    let method = opts.method.unwrap_or_else(Method::detect);
    let (pids, strict) = match &opts.target {
        Target::System => (procfs::all_pids()?, false),
        Target::Pids(p) => (p.clone(), true),
        Target::Cgroup(path) => (procfs::cgroup_pids(path)?, false),
    };
    let kpf = match method {
        Method::SmapsOnly => None,
        _ => Some(folio::open_kpageflags()?),
    };
    let mut scanner = Scanner {
        method,
        all: opts.all,
        keep_mappings: opts.mappings,
        cont_orders: opts.cont_orders.clone(),
        classifier: kpf.as_ref().map(|k| Classifier::new(k, &opts.cont_orders)),
        kpf: kpf.as_ref(),
        pagemap_buf: Vec::new(),
        regions: Vec::new(),
        unique: UniqueAcc::default(),
    };
    let mut report = Report {
        method,
        pfn_access: method != Method::SmapsOnly,
        all: opts.all,
        cont_orders: opts.cont_orders.clone(),
        processes: Vec::new(),
        skipped: Skipped::default(),
        total: Counts::default(),
        unique: None,
    };
    progress.start(pids.len() as u64);
    for &pid in &pids {
        match scanner.process(pid) {
            Ok(Some(p)) => {
                report.total.merge(&p.counts);
                report.processes.push(p);
            }
            Ok(None) => {}
            Err(Skip::KernelThread) => report.skipped.kernel_threads += 1,
            Err(Skip::Zombie) => report.skipped.zombies += 1,
            Err(Skip::Unreadable(e)) => {
                if strict && !matches!(e, Error::Permission(_)) {
                    return Err(e);
                }
                report.skipped.unreadable += 1
            }
            Err(Skip::Vanished) => {
                if strict {
                    return Err(Error::NoProcess(pid));
                }
                report.skipped.vanished += 1
            }
        }
        progress.step("");
    }
    if method != Method::SmapsOnly {
        report.unique = Some(scanner.unique.finish());
    }
    Ok(report)
}

enum Skip {
    KernelThread,
    Zombie,
    Vanished,
    Unreadable(Error),
}

struct Scanner<'a> {
    method: Method,
    all: bool,
    keep_mappings: bool,
    cont_orders: Vec<u32>,
    classifier: Option<Classifier<'a>>,
    kpf: Option<&'a File>,
    pagemap_buf: Vec<u64>,
    regions: Vec<kernel::PageRegion>,
    unique: UniqueAcc,
}

fn proc_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

impl Scanner<'_> {
    fn in_scope(&self, v: &Vma) -> bool {
        !v.is_vsyscall() && v.is_accessible() && (self.all || v.is_exec())
    }

    fn process(&mut self, pid: i32) -> std::result::Result<Option<ProcessReport>, Skip> {
        let classify_err = |e: Error| match e {
            Error::NoProcess(_) => Skip::Vanished,
            _ if !proc_exists(pid) => Skip::Vanished,
            Error::Permission(_) => Skip::Unreadable(e),
            e => Skip::Unreadable(e),
        };
        let st = procfs::read_stat(pid).map_err(classify_err)?;
        if st.is_kernel_thread() {
            return Err(Skip::KernelThread);
        }
        if st.is_zombie() {
            return Err(Skip::Zombie);
        }
        let mut out = ProcessReport {
            pid,
            comm: st.comm,
            mappings: Vec::new(),
            counts: Counts::default(),
        };
        let r = match self.method {
            Method::SmapsOnly => self.process_smaps_only(pid, &mut out),
            Method::PagemapScan | Method::PagemapSmaps => self.process_pagemap(pid, &mut out),
        };
        r.map_err(classify_err)?;
        Ok(Some(out))
    }

    fn push(&mut self, out: &mut ProcessReport, vma: Vma, counts: Counts) {
        if counts.is_empty() {
            return;
        }
        out.counts.merge(&counts);
        if self.keep_mappings {
            out.mappings.push(MappingReport {
                vma,
                counts,
                copy_of: None,
            });
        }
    }

    fn process_smaps_only(&mut self, pid: i32, out: &mut ProcessReport) -> Result<()> {
        let ps_kb = kernel::page_size() as u64 / 1024;
        for (vma, s) in procfs::read_smaps(Some(pid))? {
            if !self.in_scope(&vma) {
                continue;
            }
            let mut c = Counts::default();
            let file_pmd = s.file_pmd_kb + s.shmem_pmd_kb;
            let file_kb = s.rss_kb.saturating_sub(s.anonymous_kb);
            c.add(Kind::File, Class::PmdAligned, file_pmd / ps_kb);
            c.add(Kind::File, Class::PteUnknown, file_kb.saturating_sub(file_pmd) / ps_kb);
            c.add(Kind::Anon, Class::PmdAligned, s.anon_huge_kb / ps_kb);
            c.add(
                Kind::Anon,
                Class::PteUnknown,
                s.anonymous_kb.saturating_sub(s.anon_huge_kb) / ps_kb,
            );
            let hk = if vma.is_file() { Kind::File } else { Kind::Anon };
            c.add(hk, Class::Hugetlb, s.hugetlb_kb / ps_kb);
            self.push(out, vma, c);
        }
        Ok(())
    }

    fn process_pagemap(&mut self, pid: i32, out: &mut ProcessReport) -> Result<()> {
        let smaps_mode = self.method == Method::PagemapSmaps;
        let vmas: Vec<(Vma, Option<procfs::SmapsStats>)> = if smaps_mode {
            procfs::read_smaps(Some(pid))?
                .into_iter()
                .map(|(v, s)| (v, Some(s)))
                .collect()
        } else {
            procfs::read_maps(Some(pid))?.into_iter().map(|v| (v, None)).collect()
        };
        if vmas.is_empty() {
            // A process between exit and reaping has no mappings left.
            return Err(Error::NoProcess(pid));
        }
        let path = PathBuf::from(format!("/proc/{pid}/pagemap"));
        let pagemap = File::open(&path).map_err(|e| procfs::proc_error(Some(pid), &path, e))?;
        for (vma, smaps) in vmas {
            if !self.in_scope(&vma) {
                continue;
            }
            if smaps.as_ref().is_some_and(|s| s.rss_kb == 0 && s.hugetlb_kb == 0) {
                continue;
            }
            let counts = match smaps {
                None => self.vma_pagemap_scan(&pagemap, &path, pid, &vma)?,
                Some(s) => self.vma_pagemap_smaps(&pagemap, &path, pid, &vma, &s)?,
            };
            self.push(out, vma, counts);
        }
        Ok(())
    }

    /// Read `[start, end)` of a pagemap into the reusable buffer.
    fn read_pagemap(&mut self, pagemap: &File, path: &Path, pid: i32, start: u64, end: u64) -> Result<()> {
        let pgs = kernel::page_size() as u64;
        let n = ((end - start) / pgs) as usize;
        self.pagemap_buf.clear();
        self.pagemap_buf.resize(n, 0);
        let got = folio::read_words_into(pagemap, start / pgs * 8, &mut self.pagemap_buf)
            .map_err(|e| procfs::proc_error(Some(pid), path, e))?;
        if got < n {
            // The address space went away under us.
            return Err(Error::NoProcess(pid));
        }
        Ok(())
    }

    fn vma_pagemap_scan(&mut self, pagemap: &File, path: &Path, pid: i32, vma: &Vma) -> Result<Counts> {
        let pgs = kernel::page_size() as u64;
        let mut counts = Counts::default();
        self.regions.clear();
        kernel::pagemap_scan(
            pagemap,
            vma.start,
            vma.end,
            ps::PAGE_IS_PRESENT,
            ps::PAGE_IS_PRESENT | ps::PAGE_IS_HUGE | ps::PAGE_IS_FILE | ps::PAGE_IS_PFNZERO,
            &mut self.regions,
        )
        .map_err(|e| if proc_exists(pid) { e } else { Error::NoProcess(pid) })?;
        let regions = std::mem::take(&mut self.regions);
        let mut pte: Vec<(u64, u64)> = Vec::new();
        let mut hugetlb: Option<bool> = None;
        for r in &regions {
            if r.categories & ps::PAGE_IS_PFNZERO != 0 {
                continue;
            }
            if r.categories & ps::PAGE_IS_HUGE != 0 {
                let kind = if r.categories & ps::PAGE_IS_FILE != 0 {
                    Kind::File
                } else {
                    Kind::Anon
                };
                if hugetlb.is_none() {
                    hugetlb = Some(self.is_hugetlb(pagemap, path, pid, r.start)?);
                }
                let class = if hugetlb == Some(true) {
                    Class::Hugetlb
                } else {
                    Class::PmdAligned
                };
                let pages = (r.end - r.start) / pgs;
                counts.add(kind, class, pages);
                if class == Class::PmdAligned {
                    for &o in &self.cont_orders {
                        counts.add_cont_pmd(kind, o, pages);
                    }
                }
                self.unique.add(
                    vma,
                    Segment {
                        vpn: r.start / pgs,
                        pages,
                        kind,
                        class,
                    },
                );
            } else {
                match pte.last_mut() {
                    Some(last) if last.1 == r.start => last.1 = r.end,
                    _ => pte.push((r.start, r.end)),
                }
            }
        }
        self.regions = regions;
        for (s, e) in pte {
            self.read_pagemap(pagemap, path, pid, s, e)?;
            let unique = &mut self.unique;
            let cls = self.classifier.as_mut().expect("pagemap methods have a classifier");
            cls.classify(s / pgs, &self.pagemap_buf, &mut counts, |seg| unique.add(vma, seg))?;
        }
        Ok(counts)
    }

    /// Whether the PMD-size mapping at `addr` is hugetlbfs (one pagemap word
    /// and one kpageflags word).
    fn is_hugetlb(&mut self, pagemap: &File, path: &Path, pid: i32, addr: u64) -> Result<bool> {
        let pgs = kernel::page_size() as u64;
        self.read_pagemap(pagemap, path, pid, addr, addr + pgs)?;
        let e = self.pagemap_buf[0];
        let Some(kpf) = self.kpf else { return Ok(false) };
        if e & PM_PRESENT == 0 {
            return Ok(false);
        }
        let mut w = [0u64; 1];
        folio::read_words_into(kpf, (e & folio::PM_PFN_MASK) * 8, &mut w)
            .map_err(|e| Error::io("/proc/kpageflags", e))?;
        Ok(w[0] & folio::kpf::HUGE != 0)
    }

    fn vma_pagemap_smaps(
        &mut self,
        pagemap: &File,
        path: &Path,
        pid: i32,
        vma: &Vma,
        s: &procfs::SmapsStats,
    ) -> Result<Counts> {
        let pgs = kernel::page_size() as u64;
        let ps_kb = pgs / 1024;
        self.read_pagemap(pagemap, path, pid, vma.start, vma.end)?;
        let mut counts = Counts::default();
        let mut segs: Vec<Segment> = Vec::new();
        let cls = self.classifier.as_mut().expect("pagemap methods have a classifier");
        cls.classify(vma.start / pgs, &self.pagemap_buf, &mut counts, |seg| segs.push(seg))?;
        // thpmaps' rule: PMD-mapped folios are fully mapped, aligned PMD-size
        // folios; smaps says how many. Move that many out of "pte-aligned"
        // (first ones first: smaps does not say where they are).
        let pmd = folio::pmd_order();
        let pmd_pages = 1u64 << pmd;
        for (kind, kb) in [
            (Kind::File, s.file_pmd_kb + s.shmem_pmd_kb),
            (Kind::Anon, s.anon_huge_kb),
        ] {
            let want = (kb / ps_kb) / pmd_pages * pmd_pages;
            let mut left = counts.reclassify(kind, Class::PteAligned(pmd), Class::PmdAligned, want);
            for seg in segs.iter_mut() {
                if left == 0 {
                    break;
                }
                if seg.kind == kind && seg.class == Class::PteAligned(pmd) {
                    seg.class = Class::PmdAligned;
                    left -= seg.pages;
                }
            }
        }
        for seg in segs {
            self.unique.add(vma, seg);
        }
        Ok(counts)
    }
}

/// A file: (device major, device minor, inode).
type FileKey = (u32, u32, u64);
/// Classified file page ranges `[start, end)` (page indexes) of one file.
type FileRanges = Vec<(u64, u64, Class)>;

/// Accumulates file-backed pages by (device, inode, file page) so shared
/// text is counted once.
#[derive(Default)]
struct UniqueAcc {
    files: HashMap<FileKey, FileRanges, rustc_hash::FxBuildHasher>,
    /// File-kind pages of mappings without an inode (vdso): not shared by key.
    direct: Counts,
}

impl UniqueAcc {
    fn add(&mut self, vma: &Vma, seg: Segment) {
        if seg.kind != Kind::File {
            return;
        }
        if !vma.is_file() {
            self.direct.add(Kind::File, seg.class, seg.pages);
            return;
        }
        let pgs = kernel::page_size() as u64;
        let start = vma.offset / pgs + (seg.vpn - vma.start / pgs);
        let end = start + seg.pages;
        let v = self.files.entry((vma.dev_major, vma.dev_minor, vma.inode)).or_default();
        match v.last_mut() {
            Some(last) if last.1 == start && last.2 == seg.class => last.1 = end,
            _ => v.push((start, end, seg.class)),
        }
    }

    /// Count every file page once, under the best class any mapping gave it.
    fn finish(&mut self) -> Counts {
        let mut c = std::mem::take(&mut self.direct);
        for (_, mut iv) in self.files.drain() {
            iv.sort_unstable_by_key(|&(s, e, _)| (s, e));
            let disjoint = iv.windows(2).all(|w| w[0].1 <= w[1].0);
            if disjoint {
                for (s, e, class) in iv {
                    c.add(Kind::File, class, e - s);
                }
                continue;
            }
            // Sweep over interval boundaries, keeping the active classes.
            let mut events: Vec<(u64, bool, Class)> = Vec::with_capacity(iv.len() * 2);
            for &(s, e, class) in &iv {
                events.push((s, true, class));
                events.push((e, false, class));
            }
            events.sort_unstable_by_key(|&(p, _, _)| p);
            let mut active: std::collections::BTreeMap<Class, u32> = Default::default();
            let mut prev = 0u64;
            for (pos, start, class) in events {
                if let Some((&best, _)) = active.iter().next_back() {
                    c.add(Kind::File, best, pos - prev);
                }
                prev = pos;
                if start {
                    *active.entry(class).or_default() += 1;
                } else if let Some(n) = active.get_mut(&class) {
                    *n -= 1;
                    if *n == 0 {
                        active.remove(&class);
                    }
                }
            }
        }
        c
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
    pub pmd_windows: u64,
    /// Windows held in one PMD-size folio.
    pub pmd_windows_huge: u64,
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
            pmd_windows: f.total_windows,
            pmd_windows_huge: f.pmd_windows.len() as u64,
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
    let pmd = kernel::pmd_size() as u64;
    let mut cached = 0u64;
    let chunk = 64 * pmd;
    let mut off = 0;
    while off < size {
        let len = chunk.min(size - off) as usize;
        use std::os::fd::AsFd;
        let m = kernel::Mapping::file_congruent(file.as_fd(), off, len, libc::PROT_READ, pmd as usize)?;
        cached += m.resident()?.iter().filter(|&&r| r).count() as u64;
        off += len as u64;
    }
    Ok(FileView {
        path: path.to_path_buf(),
        size,
        cached_kb: cached * kernel::page_size() as u64 / 1024,
        folios_kb: None,
        pmd_windows: size / pmd,
        pmd_windows_huge: 0,
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
            pmd_windows: 4,
            pmd_windows_huge: 2,
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
        assert_eq!((&f["pmd_windows"], &f["pmd_windows_huge"]), (&4.into(), &2.into()));
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
