//! `explain`: for each text mapping of a process (the executable and every
//! library), what it is now and, for what is not PMD-mapped, the first reason
//! that applies in the order the kernel decides, with the evidence and the
//! one command that fixes it.
//!
//! [`gather`] reads every fact once, from the modules that own it: backing
//! from [`inspect`](crate::inspect), layout from
//! [`elf::check_file`](crate::elf::check_file), the filesystem from
//! [`fsutil`](crate::fsutil) (and its large-folio experiment), the page
//! cache from [`folio::scan_file`](crate::folio::scan_file), blocking
//! processes from [`procfs::mapping_pids_file`](crate::procfs::mapping_pids_file),
//! maps/smaps/status from [`procfs`](crate::procfs). Then [`decide`] and
//! [`summary`] are pure functions over those facts.

use std::collections::BTreeMap;

use hugetext_abi::thp::ThpMode;
use serde::Serialize;

use crate::elf::check::whole_windows;
use crate::procfs::ProcRef;

mod decide;
mod facts;

pub use decide::{
    align_command, decide, layout_of, loader_advice, summary, system_notes, Reason, Verdict, ALIGNED_COPIES,
};
pub use facts::{dpkg_owner, gather, gather_process, unit_of_cgroup, wait_loaded};

/// What the whole machine says, the same for every process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SystemFacts {
    /// THP `enabled` mode; `None` without THP.
    #[serde(serialize_with = "crate::kernel::serialize_thp_mode")]
    pub thp_enabled: Option<ThpMode>,
    /// The `hypervisor` CPU flag: this is a virtual machine.
    pub hypervisor: bool,
    /// `/sys/devices/system/cpu/vulnerabilities/itlb_multihit`.
    pub itlb_multihit: Option<String>,
    /// khugepaged's pace (`/sys/kernel/mm/transparent_hugepage/khugepaged/`):
    /// where file text collapses in place ([`FsFacts::collapse_in_place`]),
    /// it collapses congruent text mappings by itself under THP `always` or
    /// `MADV_HUGEPAGE`. `None`: not readable.
    pub khugepaged: Option<Khugepaged>,
    /// PMD size of the running kernel, bytes (2 MiB on x86-64; 2, 32 or
    /// 512 MiB on arm64 with 4, 16 or 64 KiB pages).
    pub pmd_size: u64,
    /// The unit of huge text, bytes ([`crate::kernel::huge_unit`]): the PMD
    /// size, or the contiguous-PTE block on arm64 with 64 KiB pages, where
    /// no page-cache folio reaches the PMD. Windows are counted in it.
    pub unit: u64,
    /// What maps [`SystemFacts::unit`].
    pub unit_kind: crate::elf::HugeUnit,
    /// arm64's contiguous-PTE block, bytes (64 KiB with 4 KiB pages, 2 MiB
    /// with 16 KiB and 64 KiB pages): a naturally aligned folio of at least
    /// this size is mapped with one TLB entry per block. `None` elsewhere.
    pub cont_pte: Option<u64>,
}

/// khugepaged's settings that govern when it collapses a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Khugepaged {
    /// Pause between two scans, ms.
    pub scan_sleep_millisecs: u64,
    /// Pages it looks at per scan.
    pub pages_to_scan: u64,
}

impl Khugepaged {
    fn read() -> Option<Khugepaged> {
        let get = |n: &str| -> Option<u64> {
            std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/khugepaged/{n}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some(Khugepaged {
            scan_sleep_millisecs: get("scan_sleep_millisecs")?,
            pages_to_scan: get("pages_to_scan")?,
        })
    }

    /// `every scan_sleep_millisecs=10000 ms it scans pages_to_scan=4096 pages`.
    fn pace(k: Option<Khugepaged>) -> String {
        match k {
            Some(k) => format!(
                " (every scan_sleep_millisecs={} ms it scans pages_to_scan={} pages)",
                k.scan_sleep_millisecs, k.pages_to_scan
            ),
            None => String::new(),
        }
    }
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
    /// ([`pagecache::probe_pmd_folios`](crate::pagecache::probe_pmd_folios)); `None`: could not be tried.
    pub pmd_folios: Option<bool>,
    /// Whether `MADV_COLLAPSE` (and so khugepaged) collapses file text in
    /// small folios in place here, while processes map it, by experiment
    /// ([`crate::pagecache::collapse_supported`]: `CONFIG_READ_ONLY_THP_FOR_FS`, or
    /// since 7.x any filesystem with PMD folios); `None`: not tried.
    pub collapse_in_place: Option<bool>,
}

/// The page cache of the file range a mapping maps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheFacts {
    /// Whole 2 MiB windows of the range.
    pub windows: u64,
    /// Of those, held in one PMD-size folio.
    pub unit_windows: u64,
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
    /// Where the process has another root than this one (a container):
    /// the file as reached from here, `/proc/PID/root` + `path`.
    pub under_root: Option<String>,
    /// Anonymous copy made by `hugetext run` (the `copy` route).
    pub copied: bool,
    /// Its pages are shmem (a file on tmpfs, a memfd): shared, and huge
    /// when tmpfs gives PMD-size folios, whatever the disk's filesystem does.
    pub shmem: bool,
    /// A copy in the text store: the original it stands for.
    pub store_copy: Option<crate::inspect::StoreCopy>,
    /// A PIE or shared library whose text every process maps at the same
    /// offset modulo the unit (`p_align` of the unit, congruent segments):
    /// one copy of it in a huge tmpfs can be shared by all of them.
    pub shareable: bool,
    /// kB mapped by PMDs.
    pub unit_mapped_kb: u64,
    /// kB in large folios mapped by PTEs.
    pub pte_large_kb: u64,
    /// kB in base pages (4 KiB folios).
    pub base_kb: u64,
    /// kB PTE-mapped in folios of unknown size (no PFN access).
    pub pte_unknown_kb: u64,
    /// `nh` in smaps `VmFlags`: MADV_NOHUGEPAGE.
    pub nohugepage: bool,
    /// `hg` in smaps `VmFlags`: MADV_HUGEPAGE.
    pub hugepage: bool,
    /// Whole windows of the mapping with no page mapped at all (never
    /// executed since the process started, or dropped), from the present
    /// bits of `/proc/PID/pagemap`.
    pub unmapped_windows: u64,
    /// `None` for copies.
    pub layout: Option<Layout>,
    /// `None` for copies, or when it could not be told.
    pub fs: Option<FsFacts>,
    /// `Err`: why the page cache could not be read.
    pub cache: Option<std::result::Result<CacheFacts, crate::FactError>>,
    /// kB of the executable segment(s) this mapping maps that can be
    /// PMD-mapped once `align` has rewritten the file (`check`'s plan, which
    /// `align` verifies its output against); `None`: not known.
    pub after_align_kb: Option<u64>,
    /// The Debian package that owns the file (`/var/lib/dpkg/info/*.list`),
    /// looked up for files whose fix is `align`.
    pub package: Option<String>,
}

impl MappingFacts {
    /// Whole `pmd`-size windows of the mapping's address range.
    pub fn windows(&self, pmd: u64) -> u64 {
        whole_windows(self.start, self.end - self.start, pmd)
    }

    /// The file as a command run here names it: [`MappingFacts::under_root`]
    /// where the process has another root, else `path`.
    pub fn reachable(&self) -> &str {
        self.under_root.as_deref().unwrap_or(&self.path)
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
    /// The executable (`/proc/PID/exe`): the kernel maps it, the ELF
    /// interpreter maps the libraries.
    pub exe: Option<String>,
    /// The ELF interpreter (glibc's `ld.so`) and what it supports.
    pub loader: Option<LoaderFacts>,
    /// `GLIBC_TUNABLES` in `/proc/PID/environ`: `None` when unset or
    /// unreadable.
    pub glibc_tunables: Option<String>,
    /// The systemd unit the process runs in (from `/proc/PID/cgroup`) and
    /// its `MemoryTHP=` setting (`systemctl show`; newer systemd), when
    /// systemd manages the machine.
    pub unit: Option<UnitFacts>,
    pub mappings: Vec<MappingFacts>,
}

/// The process's ELF interpreter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LoaderFacts {
    /// As mapped by the process.
    pub path: String,
    /// Whether it knows the `glibc.elf.thp` tunable (newer glibc: with
    /// `glibc.elf.thp=1` it maps large read-only segments 2 MiB-aligned),
    /// from `ld.so --list-tunables`; `None`: it could not be asked (not
    /// glibc, or not reachable from here).
    pub elf_thp: Option<bool>,
}

/// The systemd unit of a process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UnitFacts {
    pub name: String,
    /// `MemoryTHP=` (`inherit`, `disable`, `madvise`, `system`); `None`
    /// where systemd does not know the setting.
    pub memory_thp: Option<String>,
}

/// The value of tunable `name` in a `GLIBC_TUNABLES` string
/// (`a.b.c=1:d.e.f=2`). Pure.
pub fn tunable<'a>(tunables: &'a str, name: &str) -> Option<&'a str> {
    // The last setting wins, as in glibc.
    tunables
        .rsplit(':')
        .filter_map(|t| t.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
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
    /// `file` (page cache), `shmem` (tmpfs, memfd, the text store) or
    /// `anon-copy`.
    pub backing: &'static str,
    /// A copy in the text store: the original it stands for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_copy: Option<crate::inspect::StoreCopy>,
    pub size_kb: u64,
    pub unit_mapped_kb: u64,
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
    pub exe: Option<String>,
    pub loader: Option<LoaderFacts>,
    pub glibc_tunables: Option<String>,
    pub unit: Option<UnitFacts>,
    pub text_kb: u64,
    pub unit_mapped_kb: u64,
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
                exe: p.exe.clone(),
                loader: p.loader.clone(),
                glibc_tunables: p.glibc_tunables.clone(),
                unit: p.unit.clone(),
                text_kb: p.mappings.iter().map(|m| (m.end - m.start) / 1024).sum(),
                unit_mapped_kb: p.mappings.iter().map(|m| m.unit_mapped_kb).sum(),
                summary: summary(p, &verdicts, sys.cont_pte, sys.pmd_size),
                mappings: p
                    .mappings
                    .iter()
                    .zip(verdicts)
                    .map(|(m, verdict)| MappingReport {
                        start: format!("{:x}", m.start),
                        end: format!("{:x}", m.end),
                        offset: m.offset,
                        path: m.path.clone(),
                        backing: match (m.copied, m.shmem) {
                            (true, _) => "anon-copy",
                            (false, true) => "shmem",
                            (false, false) => "file",
                        },
                        store_copy: m.store_copy.clone(),
                        size_kb: (m.end - m.start) / 1024,
                        unit_mapped_kb: m.unit_mapped_kb,
                        pte_large_kb: m.pte_large_kb,
                        base_kb: m.base_kb,
                        pte_unknown_kb: m.pte_unknown_kb,
                        whole_windows: m.windows(sys.unit),
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
