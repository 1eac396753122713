//! Reading processes: the scanner, one method per kernel, and the
//! per-file accumulator that counts shared text once.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::{MappingReport, Method, Options, ProcessReport, Report, Skipped, Target};
use crate::folio::{self, Class, Classifier, Counts, Kind, Segment, PM_PRESENT};
use crate::kernel::{self, pagemap_scan as ps};
use crate::procfs::{self, Vma};
use crate::progress::Progress;
use crate::{Error, Result};

/// Inspect processes; `progress` counts them.
pub fn inspect(opts: &Options, progress: &dyn Progress) -> Result<Report> {
    inspect_each(opts, progress, &mut |_, _, _| {})
}

/// [`inspect`], handing `each` every mapping in scope with resident pages
/// (pid, the mapping, its counts) as it is read: a caller that needs a few
/// numbers per mapping keeps those, not a [`MappingReport`] each (set
/// [`Options::mappings`] to `false`).
pub fn inspect_each(
    opts: &Options,
    progress: &dyn Progress,
    each: &mut dyn FnMut(i32, &Vma, &Counts),
) -> Result<Report> {
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
        each,
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
    each: &'a mut dyn FnMut(i32, &Vma, &Counts),
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

    fn push(&mut self, out: &mut ProcessReport, vma: Vma, mut counts: Counts) {
        if counts.is_empty() {
            return;
        }
        // One file is all shmem or all page cache: pages whose flags did
        // not say (a tail page first in a run, on kernels that report the
        // swap-backed bit on heads only) go with the rest.
        if counts.total(Kind::Shmem) > 0 {
            counts.move_kind(Kind::File, Kind::Shmem);
        }
        out.counts.merge(&counts);
        (self.each)(out.pid, &vma, &counts);
        if self.keep_mappings {
            out.mappings.push(MappingReport {
                store_copy: super::store_copy_of(&vma.path),
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
            // Without page flags a mapping is shmem when smaps says some of
            // it is PMD-mapped shmem (PTE-mapped shmem counts as page cache).
            let fk = if s.shmem_pmd_kb > 0 { Kind::Shmem } else { Kind::File };
            c.add(fk, Class::PmdAligned, file_pmd / ps_kb);
            c.add(fk, Class::PteUnknown, file_kb.saturating_sub(file_pmd) / ps_kb);
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
        // The page flags of the mapping's first huge page: hugetlb, and
        // for a file, shmem or page cache (one file is all one or the other).
        let mut first: Option<u64> = None;
        for r in &regions {
            if r.categories & ps::PAGE_IS_PFNZERO != 0 {
                continue;
            }
            if r.categories & ps::PAGE_IS_HUGE != 0 {
                if first.is_none() {
                    first = Some(self.page_flags(pagemap, path, pid, r.start)?);
                }
                let w = first.unwrap_or(0);
                let kind = if r.categories & ps::PAGE_IS_FILE == 0 {
                    Kind::Anon
                } else if w & folio::kpf::SWAPBACKED != 0 {
                    Kind::Shmem
                } else {
                    Kind::File
                };
                let class = if w & folio::kpf::HUGE != 0 {
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

    /// The `/proc/kpageflags` word of the page mapped at `addr` (0 when
    /// not present or not readable).
    fn page_flags(&mut self, pagemap: &File, path: &Path, pid: i32, addr: u64) -> Result<u64> {
        let pgs = kernel::page_size() as u64;
        self.read_pagemap(pagemap, path, pid, addr, addr + pgs)?;
        let e = self.pagemap_buf[0];
        let Some(kpf) = self.kpf else { return Ok(0) };
        if e & PM_PRESENT == 0 {
            return Ok(0);
        }
        let mut w = [0u64; 1];
        folio::read_words_into(kpf, (e & folio::PM_PFN_MASK) * 8, &mut w)
            .map_err(|e| Error::io("/proc/kpageflags", e))?;
        Ok(w[0])
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
        let mut counts = Counts::default();
        let mut segs: Vec<Segment> = Vec::new();
        // pagemap is read 64 PMDs at a time, and only the runs of PMD-size
        // windows with a page present are kept and classified: memory is
        // bounded by what is mapped, not by the size of the mapping (a
        // sparse terabyte). No folio is larger than a PMD, so one that
        // straddles two windows has pages present in both: runs keep
        // folios whole.
        let pmd = kernel::pmd_size() as u64;
        let per_read = 64 * pmd;
        let mut run: Vec<u64> = Vec::new();
        let mut run_vpn = 0;
        let mut pos = vma.start;
        while pos < vma.end {
            let end = (pos / per_read * per_read + per_read).min(vma.end);
            self.read_pagemap(pagemap, path, pid, pos, end)?;
            let cls = self.classifier.as_mut().expect("pagemap methods have a classifier");
            let mut a = pos;
            while a < end {
                let b = ((a / pmd + 1) * pmd).min(end);
                let words = &self.pagemap_buf[((a - pos) / pgs) as usize..((b - pos) / pgs) as usize];
                if words.iter().any(|&w| w & PM_PRESENT != 0) {
                    if run.is_empty() {
                        run_vpn = a / pgs;
                    }
                    run.extend_from_slice(words);
                } else if !run.is_empty() {
                    cls.classify(run_vpn, &run, &mut counts, |seg| segs.push(seg))?;
                    run.clear();
                }
                a = b;
            }
            pos = end;
        }
        if !run.is_empty() {
            let cls = self.classifier.as_mut().expect("pagemap methods have a classifier");
            cls.classify(run_vpn, &run, &mut counts, |seg| segs.push(seg))?;
        }
        // thpmaps' rule: PMD-mapped folios are fully mapped, aligned PMD-size
        // folios; smaps says how many. Move that many out of "pte-aligned"
        // (first ones first: smaps does not say where they are).
        let pmd = folio::pmd_order();
        let pmd_pages = 1u64 << pmd;
        if counts.total(Kind::Shmem) > 0 {
            counts.move_kind(Kind::File, Kind::Shmem);
            for seg in segs.iter_mut().filter(|g| g.kind == Kind::File) {
                seg.kind = Kind::Shmem;
            }
        }
        for (kind, kb) in [
            (Kind::File, s.file_pmd_kb),
            (Kind::Shmem, s.shmem_pmd_kb),
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

/// Whole windows of the unit of huge text in `[start, end)` of the process
/// whose `pagemap` this is that have no page present (never executed since
/// the process started, or dropped). Bounded by what is mapped, as the
/// inspection is: with `PAGEMAP_SCAN` the kernel reports only the present
/// ranges (a sparse 1 TiB mapping costs what its few pages cost); without
/// it, pagemap is read a bounded chunk at a time. The present bit needs no
/// privilege.
pub fn unmapped_windows(pagemap: &File, path: &Path, start: u64, end: u64) -> Result<u64> {
    let unit = kernel::unit_size() as u64;
    let pgs = kernel::page_size() as u64;
    let whole = hugetext_abi::geometry::Windows::<u64>::new(start, end, unit);
    if whole.is_empty() {
        return Ok(0);
    }
    let (ws, we, total) = (whole.start(), whole.end(), whole.count());
    if kernel::pagemap_scan_supported() {
        let mut regions = Vec::new();
        kernel::pagemap_scan(pagemap, ws, we, ps::PAGE_IS_PRESENT, ps::PAGE_IS_PRESENT, &mut regions)?;
        let (mut touched, mut last) = (0u64, None);
        for r in &regions {
            let (first, past) = (r.start / unit, r.end.div_ceil(unit));
            let from = match last {
                Some(l) if l >= first => l + 1,
                _ => first,
            };
            if past > from {
                touched += past - from;
                last = Some(past - 1);
            }
        }
        return Ok(total - touched.min(total));
    }
    // 64 windows (256 KiB of pagemap with 4 KiB pages) per read.
    let per = (unit / pgs) as usize;
    let mut buf = vec![0u64; 64 * per];
    let mut unmapped = 0;
    let mut w = ws;
    while w < we {
        let n = (((we - w) / unit) as usize).min(64);
        let words = &mut buf[..n * per];
        if folio::read_words_into(pagemap, w / pgs * 8, words).map_err(|e| Error::io(path, e))? < words.len() {
            return Err(Error::Other(format!("{}: short read", path.display())));
        }
        unmapped += words
            .chunks(per)
            .filter(|c| c.iter().all(|&x| x & PM_PRESENT == 0))
            .count() as u64;
        w += n as u64 * unit;
    }
    Ok(unmapped)
}

/// A file: (device major, device minor, inode).
type FileKey = (u32, u32, u64);
/// Classified file page ranges `[start, end)` (page indexes) of one file,
/// and whether any of its pages was shmem (then all of them are).
type FileRanges = (Vec<(u64, u64, Class)>, bool);

/// Accumulates file-backed pages (page cache and shmem) by (device, inode,
/// file page) so shared text is counted once.
#[derive(Default)]
struct UniqueAcc {
    files: HashMap<FileKey, FileRanges, rustc_hash::FxBuildHasher>,
    /// File-kind pages of mappings without an inode (vdso): not shared by key.
    direct: Counts,
}

impl UniqueAcc {
    fn add(&mut self, vma: &Vma, seg: Segment) {
        if seg.kind == Kind::Anon {
            return;
        }
        if !vma.is_file() {
            self.direct.add(seg.kind, seg.class, seg.pages);
            return;
        }
        let pgs = kernel::page_size() as u64;
        let start = vma.offset / pgs + (seg.vpn - vma.start / pgs);
        let end = start + seg.pages;
        let (v, shmem) = self.files.entry((vma.dev_major, vma.dev_minor, vma.inode)).or_default();
        *shmem |= seg.kind == Kind::Shmem;
        match v.last_mut() {
            Some(last) if last.1 == start && last.2 == seg.class => last.1 = end,
            _ => v.push((start, end, seg.class)),
        }
    }

    /// Count every file page once, under the best class any mapping gave it.
    fn finish(&mut self) -> Counts {
        let mut c = std::mem::take(&mut self.direct);
        for (_, (mut iv, shmem)) in self.files.drain() {
            let kind = if shmem { Kind::Shmem } else { Kind::File };
            iv.sort_unstable_by_key(|&(s, e, _)| (s, e));
            let disjoint = iv.windows(2).all(|w| w[0].1 <= w[1].0);
            if disjoint {
                for (s, e, class) in iv {
                    c.add(kind, class, e - s);
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
                    c.add(kind, best, pos - prev);
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
