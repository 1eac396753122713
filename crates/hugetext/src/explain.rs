//! `explain`: for each text mapping of a process (the executable and every
//! library), what it is now and, for what is not PMD-mapped, the first reason
//! that applies in the order the kernel decides, with the evidence and the
//! one command that fixes it.
//!
//! [`gather`] reads every fact once, from the modules that own it: backing
//! from [`inspect`](crate::inspect), layout from [`elf::check_file`], the
//! filesystem from [`fsutil`] (and its large-folio experiment), the page
//! cache from [`folio::scan_file`], blocking processes from
//! [`warm::mapping_pids`], maps/smaps/status from [`procfs`]. Then
//! [`decide`] and [`summary`] are pure functions over those facts.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::elf::{self, check::whole_windows};
use crate::folio::{Class, Counts, Kind};
use crate::warm::ProcRef;
use crate::{folio, fsutil, inspect, kernel, procfs, remap, warm, Error, Result};

const PMD_KB: u64 = 2048;

/// What the whole machine says, the same for every process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SystemFacts {
    /// THP `enabled` mode; `None` without THP.
    pub thp_enabled: Option<String>,
    /// The `hypervisor` CPU flag: this is a virtual machine.
    pub hypervisor: bool,
    /// `/sys/devices/system/cpu/vulnerabilities/itlb_multihit`.
    pub itlb_multihit: Option<String>,
}

/// Where a file-backed text mapping sits against its file (from the ELF
/// program headers and the address the loader chose).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `address ≡ file offset (mod 2 MiB)`.
    Congruent,
    /// The segment's `p_vaddr − p_offset` is not a multiple of 2 MiB (lld,
    /// mold): no load address can fix it.
    Skewed { skew: u64 },
    /// The segment is congruent, but the load base is not 2 MiB-aligned
    /// (`p_align` below 2 MiB).
    BaseBreaks { base: u64, p_align: u64 },
    /// Not congruent, and the file is not an ELF file we can read.
    NotCongruent { why: String },
}

/// The filesystem behind a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsFacts {
    /// Type name (`ext4`, `tmpfs`, `btrfs`, …).
    pub name: String,
    /// Whether it gives PMD-size page-cache folios, by experiment
    /// ([`fsutil::probe_pmd_folios`]); `None`: could not be tried.
    pub pmd_folios: Option<bool>,
}

/// The page cache of the file range a mapping maps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheFacts {
    /// Whole 2 MiB windows of the range.
    pub windows: u64,
    /// Of those, held in one PMD-size folio.
    pub pmd_windows: u64,
    /// kB cached, by folio size in kB.
    pub folios_kb: BTreeMap<u64, u64>,
    /// Processes mapping the file (they keep its small folios from being
    /// evicted by `warm`).
    pub blockers: Vec<ProcRef>,
}

/// Everything known about one text mapping.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MappingFacts {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The file (for a copy: the file it was copied from).
    pub path: String,
    /// Anonymous copy made by `hugetext run` (the `copy` route).
    pub copied: bool,
    /// kB mapped by PMDs.
    pub pmd_kb: u64,
    /// kB in large folios mapped by PTEs.
    pub pte_large_kb: u64,
    /// kB in base pages (4 KiB folios).
    pub base_kb: u64,
    /// kB PTE-mapped in folios of unknown size (no PFN access).
    pub pte_unknown_kb: u64,
    /// `nh` in smaps `VmFlags`: MADV_NOHUGEPAGE.
    pub nohugepage: bool,
    /// `None` for copies.
    pub layout: Option<Layout>,
    /// `None` for copies, or when it could not be told.
    pub fs: Option<FsFacts>,
    /// `Err`: why the page cache could not be read.
    pub cache: Option<std::result::Result<CacheFacts, String>>,
}

impl MappingFacts {
    /// Whole 2 MiB windows of the mapping's address range.
    pub fn windows(&self) -> u64 {
        whole_windows(self.start, self.end - self.start)
    }
}

/// Everything known about one process.
#[derive(Debug, Clone, Default)]
pub struct ProcessFacts {
    pub pid: i32,
    pub comm: String,
    /// `THP_enabled: 0` in /proc/PID/status (PR_SET_THP_DISABLE); `None`:
    /// the kernel does not say.
    pub thp_disabled: Option<bool>,
    pub mappings: Vec<MappingFacts>,
}

/// Why (part of) a mapping is not PMD-mapped: the stable codes of
/// `explain --json` (doc/explain.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Every whole 2 MiB window is PMD-mapped.
    Ok,
    /// The mapping holds no whole 2 MiB window: nothing of it can be.
    NoWholeWindow,
    /// THP `enabled=never` (for an anonymous copy: file text is PMD-mapped regardless).
    ThpNever,
    /// PR_SET_THP_DISABLE on the process.
    ThpDisabledProcess,
    /// MADV_NOHUGEPAGE on the mapping.
    MadvNohugepage,
    /// `p_vaddr − p_offset` not a multiple of 2 MiB (lld, mold).
    LayoutSkewed,
    /// Small `p_align`: the load base breaks the congruence.
    BaseUnaligned,
    /// The filesystem gives no PMD-size page-cache folios.
    FsNoLargeFolios,
    /// The page cache holds the text in small folios.
    CacheSmallFolios,
    /// PMD folios in the page cache, mapped by PTEs.
    MappedBeforeWarm,
    /// A copy from `hugetext run` that is not in huge pages.
    CopyNotHuge,
    /// None of the above could be established (the evidence says why).
    Unknown,
}

/// The answer for one mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub reason: Reason,
    /// The facts that show it.
    pub evidence: String,
    /// The one command (or action) that fixes it.
    pub fix: Option<String>,
    /// kB of whole windows not PMD-mapped (what the fix can gain).
    pub gain_kb: u64,
}

fn verdict(reason: Reason, evidence: impl Into<String>, fix: Option<String>, gain_kb: u64) -> Verdict {
    Verdict {
        reason,
        evidence: evidence.into(),
        fix,
        gain_kb,
    }
}

/// `pid 12 (x), pid 13 (y)`.
fn pids(v: &[ProcRef]) -> String {
    let mut s: Vec<String> = v
        .iter()
        .take(6)
        .map(|p| format!("pid {} ({})", p.pid, p.comm))
        .collect();
    if v.len() > 6 {
        s.push(format!("{} more", v.len() - 6));
    }
    s.join(", ")
}

/// The first reason that applies to the part of `m` that is not
/// PMD-mapped, in the kernel's order. Pure.
pub fn decide(sys: &SystemFacts, p: &ProcessFacts, m: &MappingFacts) -> Verdict {
    let windows = m.windows();
    let gain = (windows * PMD_KB).saturating_sub(m.pmd_kb);
    if windows == 0 {
        return verdict(
            Reason::NoWholeWindow,
            format!(
                "{} kB mapped at {:#x}: no whole 2 MiB window fits, so none of it can be PMD-mapped",
                (m.end - m.start) / 1024,
                m.start
            ),
            None,
            0,
        );
    }
    if gain == 0 {
        return verdict(
            Reason::Ok,
            format!("all {windows} whole 2 MiB windows are PMD-mapped"),
            None,
            0,
        );
    }
    // THP `enabled=never` stops anonymous huge pages (run's copies), not
    // the PMD mapping of file folios: do_set_pmd() checks only the process
    // and the VMA (verified on 6.18: a warmed file is PMD-mapped under never).
    if m.copied && sys.thp_enabled.as_deref() == Some("never") {
        return verdict(
            Reason::ThpNever,
            "/sys/kernel/mm/transparent_hugepage/enabled is [never]: no anonymous huge pages for the copy",
            Some("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled".into()),
            gain,
        );
    }
    if p.thp_disabled == Some(true) {
        return verdict(
            Reason::ThpDisabledProcess,
            format!(
                "THP_enabled: 0 in /proc/{}/status: the process (or a parent it inherited it from) called prctl(PR_SET_THP_DISABLE)",
                p.pid
            ),
            Some("restart it without PR_SET_THP_DISABLE (check its launcher, e.g. a systemd unit's MemoryTHP= or a wrapper calling prctl)".into()),
            gain,
        );
    }
    if m.nohugepage {
        return verdict(
            Reason::MadvNohugepage,
            format!(
                "nh in VmFlags of the mapping at {:#x} in /proc/{}/smaps",
                m.start, p.pid
            ),
            Some("the program calls madvise(MADV_NOHUGEPAGE) on its text: remove that call, then restart it".into()),
            gain,
        );
    }
    if m.copied {
        return verdict(
            Reason::CopyNotHuge,
            format!(
                "anonymous copy made by `hugetext run`: {} kB of {} kB in whole windows are in huge pages",
                m.pmd_kb,
                windows * PMD_KB
            ),
            Some("restart it with `hugetext run -v` and read why the copy was not made huge".into()),
            gain,
        );
    }
    match &m.layout {
        Some(Layout::Skewed { skew }) => {
            return verdict(
                Reason::LayoutSkewed,
                format!(
                    "the segment's p_vaddr - p_offset is {skew:#x} modulo 2 MiB (lld/mold layout): no address makes it congruent"
                ),
                Some(format!("hugetext align {}", m.path)),
                gain,
            )
        }
        Some(Layout::BaseBreaks { base, p_align }) => {
            return verdict(
                Reason::BaseUnaligned,
                format!(
                    "loaded at base {base:#x}, not 2 MiB-aligned (p_align {p_align:#x}): address - offset = {:#x} is not a multiple of 2 MiB",
                    m.start.wrapping_sub(m.offset)
                ),
                Some(format!("hugetext align {}", m.path)),
                gain,
            )
        }
        Some(Layout::NotCongruent { why }) => {
            return verdict(
                Reason::LayoutSkewed,
                format!(
                    "mapped at {:#x} from file offset {:#x}: not congruent modulo 2 MiB ({why})",
                    m.start, m.offset
                ),
                Some("start it with `hugetext run --strategy copy`".into()),
                gain,
            )
        }
        Some(Layout::Congruent) | None => {}
    }
    if let Some(fs) = &m.fs {
        if fs.pmd_folios == Some(false) {
            let what = if fsutil::is_memory_fs(&fs.name) || fs.name.starts_with("overlayfs over tmpfs") {
                format!("{} (shmem huge pages off) keeps regular files in small folios", fs.name)
            } else {
                format!("{} gives no PMD-size page-cache folios here", fs.name)
            };
            return verdict(
                Reason::FsNoLargeFolios,
                format!("{what} (tested with a scratch file on the same filesystem)"),
                Some(format!(
                    "move {} to a filesystem with large folios (xfs; ext4 on Linux 6.16 or later), or start it with `hugetext run --strategy copy`",
                    m.path
                )),
                gain,
            );
        }
    }
    match &m.cache {
        Some(Ok(c)) if c.pmd_windows < c.windows => {
            let sizes: Vec<String> = c.folios_kb.iter().map(|(sz, kb)| format!("{kb} kB in {sz} kB folios")).collect();
            let mut fix = format!("hugetext warm {}", m.path);
            if !c.blockers.is_empty() {
                fix.push_str(&format!(
                    " after {} exit (they map it, so its small folios cannot be evicted), then restart it",
                    pids(&c.blockers)
                ));
            }
            verdict(
                Reason::CacheSmallFolios,
                format!(
                    "{} of {} whole windows are 2 MiB folios in the page cache; cached: {}",
                    c.pmd_windows,
                    c.windows,
                    if sizes.is_empty() { "nothing".into() } else { sizes.join(", ") }
                ),
                Some(fix),
                gain,
            )
        }
        Some(Ok(c)) => verdict(
            Reason::MappedBeforeWarm,
            format!(
                "all {} whole windows are 2 MiB folios in the page cache, but this process maps them with 4 KiB page-table entries (it mapped them before they were 2 MiB folios, or while huge pages were off for it)",
                c.windows
            ),
            Some("restart the program (or start it with `hugetext run`)".into()),
            gain,
        ),
        Some(Err(why)) => verdict(
            Reason::Unknown,
            format!("the page cache could not be read: {why}"),
            None,
            gain,
        ),
        None => verdict(Reason::Unknown, "no page-cache facts", None, gain),
    }
}

/// Notes about the machine that bear on every process (a VM). Pure.
pub fn system_notes(sys: &SystemFacts) -> Vec<String> {
    let mut v = Vec::new();
    if sys.hypervisor {
        let mut s = "running in a virtual machine (hypervisor CPU flag): the guest can map 2 MiB pages, but how much \
                     they save depends on whether the host backs guest memory with huge pages"
            .to_string();
        if let Some(m) = &sys.itlb_multihit {
            s.push_str(&format!(
                "; itlb_multihit: {m} (on affected Intel hosts, KVM's mitigation maps executable guest memory with \
                 4 KiB pages in the host, so PMD-mapped text saves only the guest's page walks)"
            ));
        }
        v.push(s);
    }
    v
}

fn human_kb(kb: u64) -> String {
    warm::human(kb * 1024)
}

/// One line for a process, from its mappings and their verdicts. Pure.
pub fn summary(p: &ProcessFacts, verdicts: &[Verdict]) -> String {
    let text_kb: u64 = p.mappings.iter().map(|m| (m.end - m.start) / 1024).sum();
    let pmd_kb: u64 = p.mappings.iter().map(|m| m.pmd_kb).sum();
    let pct = (pmd_kb * 100).checked_div(text_kb).unwrap_or(0);
    let mut s = format!(
        "pid {} ({}): {pct}% of {} text PMD-mapped",
        p.pid,
        p.comm,
        human_kb(text_kb)
    );
    // The fix that gains most.
    let mut by_fix: Vec<(&str, u64)> = Vec::new();
    for v in verdicts {
        if let (Some(f), true) = (&v.fix, v.gain_kb > 0) {
            match by_fix.iter_mut().find(|(g, _)| *g == f.as_str()) {
                Some(e) => e.1 += v.gain_kb,
                None => by_fix.push((f.as_str(), v.gain_kb)),
            }
        }
    }
    by_fix.sort_by_key(|e| std::cmp::Reverse(e.1));
    if let Some((fix, kb)) = by_fix.first() {
        s.push_str(&format!("; {} more with: {fix}", human_kb(*kb)));
    }
    s
}

// ---------------------------------------------------------------------------
// Reports

/// One mapping in `explain --json`.
#[derive(Debug, Clone, Serialize)]
pub struct MappingReport {
    pub start: String,
    pub end: String,
    pub offset: u64,
    pub path: String,
    /// `file` or `anon-copy`.
    pub backing: &'static str,
    pub size_kb: u64,
    pub pmd_kb: u64,
    pub pte_large_kb: u64,
    pub base_kb: u64,
    pub pte_unknown_kb: u64,
    pub whole_windows: u64,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// One process in `explain --json`.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    pub pid: i32,
    pub comm: String,
    pub thp_disabled: Option<bool>,
    pub text_kb: u64,
    pub pmd_kb: u64,
    pub summary: String,
    pub mappings: Vec<MappingReport>,
}

/// `hugetext explain --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub system: SystemFacts,
    pub notes: Vec<String>,
    pub processes: Vec<ProcessReport>,
}

/// Decide every mapping of every process. Pure.
pub fn report(sys: &SystemFacts, procs: &[ProcessFacts]) -> Report {
    let processes = procs
        .iter()
        .map(|p| {
            let verdicts: Vec<Verdict> = p.mappings.iter().map(|m| decide(sys, p, m)).collect();
            ProcessReport {
                pid: p.pid,
                comm: p.comm.clone(),
                thp_disabled: p.thp_disabled,
                text_kb: p.mappings.iter().map(|m| (m.end - m.start) / 1024).sum(),
                pmd_kb: p.mappings.iter().map(|m| m.pmd_kb).sum(),
                summary: summary(p, &verdicts),
                mappings: p
                    .mappings
                    .iter()
                    .zip(verdicts)
                    .map(|(m, verdict)| MappingReport {
                        start: format!("{:x}", m.start),
                        end: format!("{:x}", m.end),
                        offset: m.offset,
                        path: m.path.clone(),
                        backing: if m.copied { "anon-copy" } else { "file" },
                        size_kb: (m.end - m.start) / 1024,
                        pmd_kb: m.pmd_kb,
                        pte_large_kb: m.pte_large_kb,
                        base_kb: m.base_kb,
                        pte_unknown_kb: m.pte_unknown_kb,
                        whole_windows: m.windows(),
                        verdict,
                    })
                    .collect(),
            }
        })
        .collect();
    Report {
        system: sys.clone(),
        notes: system_notes(sys),
        processes,
    }
}

// ---------------------------------------------------------------------------
// Gathering

impl SystemFacts {
    /// Read the machine's facts.
    pub fn gather() -> SystemFacts {
        SystemFacts {
            thp_enabled: kernel::thp_enabled(),
            hypervisor: kernel::hypervisor(),
            itlb_multihit: kernel::cpu_vulnerability("itlb_multihit"),
        }
    }
}

/// The layout of a file mapping at `start` from file `offset`, given the
/// file's `check` segments as (p_offset, p_filesz, p_vaddr, p_align). Pure.
pub fn layout_of(start: u64, offset: u64, segments: &[(u64, u64, u64, u64)]) -> Layout {
    let pmd = PMD_KB * 1024;
    if start.wrapping_sub(offset) % pmd == 0 {
        return Layout::Congruent;
    }
    let seg = segments.iter().find(|(o, sz, _, _)| {
        let page = o & !0xfff;
        offset >= page && offset < o + sz
    });
    match seg {
        Some(&(o, _, v, a)) => {
            let skew = v.wrapping_sub(o) % pmd;
            if skew != 0 {
                Layout::Skewed { skew }
            } else {
                Layout::BaseBreaks {
                    base: start.wrapping_sub(offset).wrapping_sub(v.wrapping_sub(o)),
                    p_align: a,
                }
            }
        }
        None => Layout::NotCongruent {
            why: "no PT_LOAD segment covers it".into(),
        },
    }
}

/// Per-filesystem facts, probed once per directory's filesystem.
#[derive(Default)]
struct FsCache(HashMap<(u64, String), FsFacts>);

impl FsCache {
    fn get(&mut self, file: &std::fs::File, dir: &Path) -> FsFacts {
        use std::os::unix::fs::MetadataExt;
        let name = fsutil::fs_name(file);
        let dev = file.metadata().map(|m| m.dev()).unwrap_or(0);
        self.0
            .entry((dev, name.clone()))
            .or_insert_with(|| FsFacts {
                pmd_folios: fsutil::probe_pmd_folios(dir),
                name,
            })
            .clone()
    }
}

fn kb_of(counts: &Counts) -> (u64, u64, u64, u64) {
    let ps = kernel::page_size() as u64 / 1024;
    let (mut pmd, mut large, mut base, mut unknown) = (0, 0, 0, 0);
    for kind in [Kind::File, Kind::Anon] {
        for class in counts.classes(kind, false) {
            let kb = counts.get(kind, class) * ps;
            match class {
                Class::PmdAligned | Class::Hugetlb => pmd += kb,
                Class::BasePage => base += kb,
                Class::PteUnknown => unknown += kb,
                Class::Partial | Class::PteAligned(_) | Class::PteUnaligned(_) => large += kb,
            }
        }
    }
    (pmd, large, base, unknown)
}

fn mapping_facts(pid: i32, t: &remap::TextMapping, offset: u64, fs_cache: &mut FsCache) -> MappingFacts {
    let mut m = MappingFacts {
        start: t.start,
        end: t.end,
        offset,
        path: t.path.clone(),
        copied: t.copied,
        ..Default::default()
    };
    if t.copied {
        m.layout = None;
        return m;
    }
    // The inode this process maps (the path may name a newer file by now).
    let mapped = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", t.start, t.end));
    let file_path = if std::fs::File::open(&mapped).is_ok() {
        mapped
    } else {
        PathBuf::from(&t.path)
    };
    let segments: std::result::Result<Vec<_>, String> = elf::check_file(&file_path)
        .map(|r| {
            r.segments
                .iter()
                .map(|s| (s.offset, s.filesz, s.vaddr, s.p_align))
                .collect()
        })
        .map_err(|e| e.to_string());
    m.layout = Some(match segments {
        Ok(segs) => layout_of(t.start, offset, &segs),
        Err(why) => match layout_of(t.start, offset, &[]) {
            Layout::Congruent => Layout::Congruent,
            _ => Layout::NotCongruent { why },
        },
    });
    if let Ok(file) = std::fs::File::open(&file_path) {
        let dir = Path::new(&t.path).parent().unwrap_or(Path::new("/")).to_path_buf();
        let mut fs = fs_cache.get(&file, &dir);
        // An overlay maps the file of the layer it comes from: that filesystem decides.
        if fs.name == "overlayfs" {
            if let Some(layer) = fsutil::overlay_layer_of(Path::new(&t.path)) {
                if let Ok(real) = std::fs::File::open(&layer) {
                    let under = fs_cache.get(&real, layer.parent().unwrap_or(Path::new("/")));
                    fs = FsFacts {
                        name: format!("overlayfs over {} ({})", under.name, layer.display()),
                        pmd_folios: under.pmd_folios,
                    };
                }
            }
        }
        m.fs = Some(fs);
    }
    let len = t.end - t.start;
    m.cache = Some(
        folio::scan_file(&file_path, Some(offset..offset + len))
            .map(|f| CacheFacts {
                windows: f.total_windows,
                pmd_windows: f.pmd_windows.len() as u64,
                folios_kb: f.folios_kb.clone(),
                blockers: warm::mapping_pids(&file_path).unwrap_or_default(),
            })
            .map_err(|e| e.to_string()),
    );
    m
}

/// Gather the facts of one process: its text mappings, their backing,
/// layout, filesystem and page cache. A missing process, a zombie or a
/// kernel thread is an error with one line that says so.
pub fn gather_process(pid: i32) -> Result<ProcessFacts> {
    let mut fs_cache = FsCache::default();
    gather_one(pid, &mut fs_cache)
}

fn gather_one(pid: i32, fs_cache: &mut FsCache) -> Result<ProcessFacts> {
    let st = procfs::read_stat(pid)?;
    if st.is_kernel_thread() {
        return Err(Error::Invalid(format!(
            "pid {pid} ({}) is a kernel thread: it has no program text",
            st.comm
        )));
    }
    if st.is_zombie() {
        return Err(Error::Invalid(format!(
            "pid {pid} ({}) is a zombie: it has exited and maps nothing",
            st.comm
        )));
    }
    let thp_disabled = procfs::status_field(pid, "THP_enabled")?.map(|v| v == "0");
    let vmas = procfs::read_maps(Some(pid))?;
    let mut texts = remap::text_mappings(pid)?;
    texts.extend(unnamed_copies(&vmas, &texts));
    texts.sort_by_key(|t| t.start);
    let flags = procfs::read_vm_flags(Some(pid))?;
    let insp = inspect::inspect(
        &inspect::Options {
            target: inspect::Target::Pids(vec![pid]),
            all: false,
            cont_orders: Vec::new(),
            mappings: true,
            method: None,
        },
        &(),
    )?;
    let counts: HashMap<u64, &Counts> = insp
        .processes
        .iter()
        .flat_map(|p| p.mappings.iter().map(|m| (m.vma.start, &m.counts)))
        .collect();
    let mut mappings = Vec::new();
    for t in &texts {
        let offset = vmas.iter().find(|v| v.start == t.start).map_or(0, |v| v.offset);
        let mut m = mapping_facts(pid, t, offset, fs_cache);
        if let Some(c) = counts.get(&t.start) {
            (m.pmd_kb, m.pte_large_kb, m.base_kb, m.pte_unknown_kb) = kb_of(c);
        }
        m.nohugepage = flags.iter().any(|(s, f)| *s == t.start && f.iter().any(|x| x == "nh"));
        mappings.push(m);
    }
    Ok(ProcessFacts {
        pid,
        comm: st.comm,
        thp_disabled,
        mappings,
    })
}

/// Copies made by `hugetext run` on kernels without anonymous VMA names
/// that [`remap::text_mappings`] cannot tell from the mapping before them
/// (the copy starts a text segment, after a gap): an unnamed `r-x` anonymous
/// mapping followed directly by the same segment's file mapping. Pure.
pub fn unnamed_copies(vmas: &[procfs::Vma], known: &[remap::TextMapping]) -> Vec<remap::TextMapping> {
    vmas.windows(2)
        .filter(|w| {
            let (a, b) = (&w[0], &w[1]);
            a.perms.starts_with("r-x")
                && a.path.is_empty()
                && a.inode == 0
                && b.perms.starts_with("r-x")
                && b.path.starts_with('/')
                && b.start == a.end
                && !known.iter().any(|t| t.start == a.start)
        })
        .map(|w| remap::TextMapping {
            start: w[0].start,
            end: w[0].end,
            path: w[1].path.clone(),
            copied: true,
            file_pmd: 0,
            anon_huge: 0,
            private: 0,
            pss: 0,
            anonymous: 0,
        })
        .collect()
}

/// Gather the facts of several processes (the filesystem experiment runs
/// once per filesystem). With `strict`, the first process that cannot be
/// explained is an error; otherwise it is skipped and counted (a cgroup's
/// kernel threads, zombies, processes that exited meanwhile).
pub fn gather(pids: &[i32], strict: bool) -> Result<(Vec<ProcessFacts>, u64)> {
    let mut fs_cache = FsCache::default();
    let (mut out, mut skipped) = (Vec::new(), 0);
    for &pid in pids {
        match gather_one(pid, &mut fs_cache) {
            Ok(p) => out.push(p),
            Err(e) if strict => return Err(e),
            Err(_) => skipped += 1,
        }
    }
    Ok((out, skipped))
}

/// Wait until process `pid` has mapped every file in `libs` (its
/// libraries) and its resident text has stopped growing, or `timeout`
/// passes. `Err(NoProcess)` if it exits first.
pub fn wait_loaded(pid: i32, libs: &[PathBuf], timeout: std::time::Duration) -> Result<()> {
    let t0 = std::time::Instant::now();
    let want: Vec<String> = libs
        .iter()
        .filter_map(|l| l.canonicalize().ok())
        .map(|l| l.to_string_lossy().into_owned())
        .collect();
    let mut last_rss = u64::MAX;
    let mut stable = 0;
    while t0.elapsed() < timeout {
        let st = procfs::read_stat(pid)?;
        if st.is_zombie() {
            return Err(Error::NoProcess(pid));
        }
        let smaps = procfs::read_smaps(Some(pid))?;
        let loaded = want.iter().all(|w| smaps.iter().any(|(v, _)| &v.path == w));
        let rss: u64 = smaps.iter().filter(|(v, _)| v.is_exec()).map(|(_, s)| s.rss_kb).sum();
        if loaded {
            stable = if rss == last_rss { stable + 1 } else { 0 };
            if stable >= 3 {
                return Ok(());
            }
        }
        last_rss = rss;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 2 << 20;

    fn map(start: u64, len: u64) -> MappingFacts {
        MappingFacts {
            start,
            end: start + len,
            offset: 0,
            path: "/usr/bin/x".into(),
            layout: Some(Layout::Congruent),
            fs: Some(FsFacts {
                name: "ext4".into(),
                pmd_folios: Some(true),
            }),
            cache: Some(Ok(CacheFacts {
                windows: len / M,
                pmd_windows: len / M,
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn proc1(m: MappingFacts) -> ProcessFacts {
        ProcessFacts {
            pid: 42,
            comm: "x".into(),
            thp_disabled: Some(false),
            mappings: vec![m],
        }
    }

    fn madvise() -> SystemFacts {
        SystemFacts {
            thp_enabled: Some("madvise".into()),
            ..Default::default()
        }
    }

    fn why(sys: &SystemFacts, p: &ProcessFacts) -> Verdict {
        decide(sys, p, &p.mappings[0])
    }

    #[test]
    fn pmd_mapped_is_ok_and_small_mappings_have_no_window() {
        let mut m = map(0x40_0000, 4 * M);
        m.pmd_kb = 8192;
        assert_eq!(why(&madvise(), &proc1(m)).reason, Reason::Ok);
        let m = map(0x40_1000, M);
        let v = why(&madvise(), &proc1(m));
        assert_eq!((v.reason, v.fix), (Reason::NoWholeWindow, None));
    }

    #[test]
    fn reasons_come_in_the_kernels_order() {
        // Everything wrong at once: the process wins, then the VMA, then the layout;
        // THP never does not stop file text from being PMD-mapped, only copies.
        let mut m = map(0x40_0000, 4 * M);
        m.nohugepage = true;
        m.layout = Some(Layout::Skewed { skew: 0x1000 });
        let mut p = proc1(m);
        p.thp_disabled = Some(true);
        let never = SystemFacts {
            thp_enabled: Some("never".into()),
            ..Default::default()
        };
        assert_eq!(why(&never, &p).reason, Reason::ThpDisabledProcess);
        let mut copy = p.clone();
        copy.mappings[0].copied = true;
        assert_eq!(why(&never, &copy).reason, Reason::ThpNever);
        let v = why(&madvise(), &p);
        assert_eq!(v.reason, Reason::ThpDisabledProcess);
        assert!(v.evidence.contains("THP_enabled: 0"), "{}", v.evidence);
        p.thp_disabled = Some(false);
        let v = why(&madvise(), &p);
        assert_eq!(v.reason, Reason::MadvNohugepage);
        assert_eq!(v.gain_kb, 8192);
        p.mappings[0].nohugepage = false;
        let v = why(&madvise(), &p);
        assert_eq!(
            (v.reason, v.fix.as_deref()),
            (Reason::LayoutSkewed, Some("hugetext align /usr/bin/x"))
        );
    }

    #[test]
    fn base_breaking_congruence_shows_the_base() {
        let l = layout_of(0x5555_5561_1000, 0x1000, &[(0x1000, 8 * M, 0x1000, 0x1000)]);
        assert_eq!(
            l,
            Layout::BaseBreaks {
                base: 0x5555_5561_0000,
                p_align: 0x1000
            }
        );
        let mut m = map(0x5555_5561_1000, 8 * M);
        m.offset = 0x1000;
        m.layout = Some(l);
        let v = why(&madvise(), &proc1(m));
        assert_eq!(v.reason, Reason::BaseUnaligned);
        assert!(v.evidence.contains("0x555555610000"), "{}", v.evidence);
        assert_eq!(v.fix.as_deref(), Some("hugetext align /usr/bin/x"));
        assert_eq!(
            layout_of(0x20_2000, 0x1000, &[(0x1000, 8 * M, 0x2000, 0x1000)]),
            Layout::Skewed { skew: 0x1000 }
        );
        assert_eq!(layout_of(0x40_0000, 0, &[]), Layout::Congruent);
    }

    #[test]
    fn filesystem_then_page_cache_then_mapping() {
        let mut m = map(0x40_0000, 4 * M);
        m.fs = Some(FsFacts {
            name: "btrfs".into(),
            pmd_folios: Some(false),
        });
        let v = why(&madvise(), &proc1(m.clone()));
        assert_eq!(v.reason, Reason::FsNoLargeFolios);
        assert!(v.evidence.contains("btrfs") && v.fix.unwrap().contains("hugetext run --strategy copy"));
        m.fs = Some(FsFacts {
            name: "tmpfs".into(),
            pmd_folios: Some(false),
        });
        assert!(why(&madvise(), &proc1(m.clone())).evidence.contains("tmpfs"));

        m.fs.as_mut().unwrap().pmd_folios = Some(true);
        m.cache = Some(Ok(CacheFacts {
            windows: 2,
            pmd_windows: 0,
            folios_kb: [(4, 8192)].into_iter().collect(),
            blockers: vec![ProcRef {
                pid: 42,
                comm: "x".into(),
            }],
        }));
        let v = why(&madvise(), &proc1(m.clone()));
        assert_eq!(v.reason, Reason::CacheSmallFolios);
        assert!(v.evidence.contains("8192 kB in 4 kB folios"), "{}", v.evidence);
        let fix = v.fix.unwrap();
        assert!(fix.starts_with("hugetext warm /usr/bin/x after pid 42 (x)"), "{fix}");

        m.cache = Some(Ok(CacheFacts {
            windows: 2,
            pmd_windows: 2,
            ..Default::default()
        }));
        let v = why(&madvise(), &proc1(m));
        assert_eq!(v.reason, Reason::MappedBeforeWarm);
        assert!(v.fix.unwrap().starts_with("restart"));
    }

    #[test]
    fn copies_and_summary() {
        let mut m = map(0x40_0000, 4 * M);
        m.copied = true;
        m.layout = None;
        m.pmd_kb = 8192;
        assert_eq!(why(&madvise(), &proc1(m.clone())).reason, Reason::Ok);
        m.pmd_kb = 0;
        assert_eq!(why(&madvise(), &proc1(m)).reason, Reason::CopyNotHuge);

        let mut a = map(0x40_0000, 4 * M);
        a.pmd_kb = 4096;
        a.cache = Some(Ok(CacheFacts {
            windows: 4,
            pmd_windows: 2,
            ..Default::default()
        }));
        let p = proc1(a);
        let r = report(&madvise(), std::slice::from_ref(&p));
        assert_eq!(
            r.processes[0].summary,
            "pid 42 (x): 50% of 8.0 MiB text PMD-mapped; 4.0 MiB more with: hugetext warm /usr/bin/x"
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["processes"][0]["mappings"][0]["reason"], "cache-small-folios");
        assert_eq!(j["processes"][0]["mappings"][0]["backing"], "file");
    }

    #[test]
    fn finds_copies_that_start_a_segment() {
        let maps = procfs::parse_maps(
            "55d000000000-55d000001000 r--p 00000000 fe:00 7 /x/pie\n\
             55d000200000-55d001400000 r-xp 00000000 00:00 0 \n\
             55d001400000-55d001402000 r-xp 01401000 fe:00 7 /x/pie\n\
             7f0000000000-7f0000200000 r-xp 00000000 00:00 0 \n",
        );
        let c = unnamed_copies(&maps, &[]);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].start, c[0].path.as_str(), c[0].copied),
            (0x55d000200000, "/x/pie", true)
        );
        assert!(unnamed_copies(&maps, &c).is_empty());
    }

    #[test]
    fn vm_note_explains_itlb_multihit() {
        assert!(system_notes(&madvise()).is_empty());
        let sys = SystemFacts {
            hypervisor: true,
            itlb_multihit: Some("Not affected".into()),
            ..madvise()
        };
        let n = system_notes(&sys);
        assert!(n[0].contains("virtual machine") && n[0].contains("itlb_multihit: Not affected"));
    }
}
