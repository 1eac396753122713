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
//!
//! Text mapped from a file whose pages are shmem (tmpfs, memfd: swap-backed
//! pages that are not anonymous) is a kind of its own, [`Kind::Shmem`]:
//! shared like page cache, huge when tmpfs gives PMD-size folios
//! (`huge=`), whatever the disk's filesystem does. A mapping of a file in
//! the text store (a copy `hugetext warm --shmem` made) is also named as a
//! copy of its original ([`store_copy_of`]).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use crate::folio::{Class, Counts, Kind};
use crate::kernel;
use crate::procfs::{self, Vma};

mod file;
mod scan;

pub use file::{contpte_kb, inspect_file, FileJson, FileView, FilesJson};
pub use scan::{inspect, inspect_each, unmapped_windows};

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
    /// For a mapping of a file in the text store: the original it copies.
    pub store_copy: Option<StoreCopy>,
}

/// The text store's root (one definition, shared with the preload).
const STORE_ROOT: &str = hugetext_abi::store::DEFAULT_ROOT;

/// The original file a text store copy stands for, as its name says
/// (`<st_dev hex>-<st_ino>-<size>-<mtime_ns>-<build-id hex or none>`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoreCopy {
    /// `st_dev` of the original (the kernel's encoding, as `stat` gives it).
    pub dev: u64,
    /// Its inode number.
    pub inode: u64,
    /// Its size in bytes when copied.
    pub size: u64,
    /// Its modification time when copied, nanoseconds since the epoch.
    pub mtime_ns: u64,
    /// Its GNU build-id (hex), if it has one.
    pub build_id: Option<String>,
}

impl StoreCopy {
    /// `device 0x803 inode 1234` and the build-id, for the tables.
    pub fn describe(&self) -> String {
        let id = self
            .build_id
            .as_deref()
            .map(|b| format!(", build-id {b}"))
            .unwrap_or_default();
        format!("store copy of device {:#x} inode {}{id}", self.dev, self.inode)
    }
}

/// The original of a text store copy from the path of a mapping (as
/// `/proc/PID/maps` gives it): `None` unless the file is directly under the
/// store's root (`/run/hugetext/text`) and its name has the store's form.
pub fn store_copy_of(path: &str) -> Option<StoreCopy> {
    let name = path.strip_suffix(" (deleted)").unwrap_or(path);
    let name = name.strip_prefix(STORE_ROOT)?.strip_prefix('/')?;
    let parts: Vec<&str> = name.split('-').collect();
    let [dev, ino, size, mtime, id] = parts[..] else {
        return None;
    };
    let dec = |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u64>().ok())?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    Some(StoreCopy {
        dev: hex(dev).then(|| u64::from_str_radix(dev, 16).ok())??,
        inode: dec(ino)?,
        size: dec(size)?,
        mtime_ns: dec(mtime)?,
        build_id: match id {
            "none" => None,
            id if hex(id) => Some(id.to_ascii_lowercase()),
            _ => return None,
        },
    })
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
    /// mapping, the file each copy came from ([`crate::run::remap::text_mappings`];
    /// one more smaps read for those processes only).
    pub fn name_copies(&mut self) {
        self.name_copies_cached(&mut CopyProofs::default());
    }

    /// [`Report::name_copies`], with the verdicts of the proofs that read
    /// process memory kept in `proofs` across calls (a steady process is
    /// proved once); the verdicts of processes no longer in the report, or
    /// whose pid now names another process, are dropped.
    pub fn name_copies_cached(&mut self, proofs: &mut CopyProofs) {
        let mut live = HashSet::new();
        for p in &mut self.processes {
            let anon_text = |m: &MappingReport| m.vma.is_exec() && !m.vma.is_file();
            if !p.mappings.iter().any(anon_text) {
                continue;
            }
            let Ok(started) = procfs::read_stat(p.pid).map(|s| s.start_time) else {
                continue;
            };
            live.insert((p.pid, started));
            let pid = p.pid;
            let Ok(texts) =
                crate::run::remap::text_mappings_proved_by(pid, |smaps, t| proofs.verdict(pid, started, smaps, t))
            else {
                continue;
            };
            for m in p.mappings.iter_mut().filter(|m| anon_text(m)) {
                m.copy_of = texts
                    .iter()
                    .find(|t| t.copied && t.start == m.vma.start)
                    .map(|t| t.path.clone());
            }
        }
        proofs.verdicts.retain(|k, _| live.contains(&(k.pid, k.started)));
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
        let kinds = Kind::ALL;
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
                            store_copy: m.store_copy.clone(),
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
                unique: self
                    .unique
                    .as_ref()
                    .map(|u| self.class_kb(u, &[Kind::File, Kind::Shmem])),
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
    /// A mapping of a text store copy: the original, from the copy's name
    /// (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_copy: Option<StoreCopy>,
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

/// Verdicts of [`crate::run::remap::copy_proven`] (whether unnamed anonymous
/// text is a copy of a file, proved by reading `/proc/PID/mem`), kept per
/// process (pid and start time: a reused pid is proved again), mapping
/// start and file (device and inode) by [`Report::name_copies_cached`].
#[derive(Debug, Default)]
pub struct CopyProofs {
    verdicts: HashMap<ProofKey, bool>,
    reads: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ProofKey {
    pid: i32,
    started: u64,
    start: u64,
    dev: (u32, u32),
    inode: u64,
}

impl CopyProofs {
    /// Proofs made by reading process memory so far (verdicts not found
    /// here).
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Verdicts kept.
    pub fn len(&self) -> usize {
        self.verdicts.len()
    }

    /// No verdict kept.
    pub fn is_empty(&self) -> bool {
        self.verdicts.is_empty()
    }

    fn verdict(
        &mut self,
        pid: i32,
        started: u64,
        smaps: &[(Vma, procfs::SmapsStats)],
        t: &crate::run::remap::TextMapping,
    ) -> bool {
        // The file: its mapping nearest to the copy, as copy_proven reads it.
        let Some(head) = crate::run::remap::file_mapping(smaps, &t.path, t.start, t.end) else {
            return false;
        };
        let key = ProofKey {
            pid,
            started,
            start: t.start,
            dev: (head.dev_major, head.dev_minor),
            inode: head.inode,
        };
        if let Some(&v) = self.verdicts.get(&key) {
            return v;
        }
        self.reads += 1;
        let v = crate::run::remap::copy_proven(pid, smaps, t);
        self.verdicts.insert(key, v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unnamed `r-x` anonymous copy of a page of a program's text,
    /// right after a mapping of the program (as a copy looks on a
    /// kernel without anonymous VMA names): proved by reading process
    /// memory once, then named from the kept verdict without reading; a
    /// verdict kept for an earlier process under the same pid (another
    /// start time) is not used but proved again, and dropped.
    #[test]
    fn copy_proofs_are_kept_per_process_and_mapping() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let page = kernel::page_size() as u64;
        // A copy of a program that nothing else maps (the proof places the
        // copy by the file's mappings in this process; other tests of this
        // binary map /bin/sh meanwhile).
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().canonicalize().unwrap().join("sh");
        std::fs::copy("/bin/sh", &exe).unwrap();
        let segs = crate::elf::text_segments(&exe).unwrap();
        let seg = segs.iter().find(|s| s.is_executable()).unwrap();
        // The page of text at the first page boundary inside the segment.
        let rel = seg.vaddr.next_multiple_of(page);
        assert!(rel + page <= seg.vaddr + seg.file_size, "{seg:?}");
        let f = std::fs::File::open(&exe).unwrap();
        let mut bytes = vec![0u8; page as usize];
        f.read_exact_at(&mut bytes, rel - seg.vaddr + seg.offset).unwrap();
        let len = (rel + 2 * page) as usize;
        // The reservation, unmapped whole at the end of the test.
        let reserved = crate::kernel::Mapping::anon_aligned(len, libc::PROT_NONE, page as usize).unwrap();
        let base = reserved.addr();
        // SAFETY: fresh mappings inside the reservation.
        let anon = unsafe {
            let at = |off: u64| (base as u64 + off) as *mut libc::c_void;
            let fixed = libc::MAP_PRIVATE | libc::MAP_FIXED;
            // The file up to the copy (no hole another thread's mmap
            // could take), the copy, then the file again.
            assert_ne!(
                libc::mmap(at(0), rel as usize, libc::PROT_READ, fixed, f.as_raw_fd(), 0),
                libc::MAP_FAILED
            );
            let anon = libc::mmap(
                at(rel),
                page as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                fixed | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(anon, libc::MAP_FAILED);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), anon as *mut u8, page as usize);
            assert_eq!(
                libc::mprotect(anon, page as usize, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
            assert_ne!(
                libc::mmap(at(rel + page), page as usize, libc::PROT_READ, fixed, f.as_raw_fd(), 0),
                libc::MAP_FAILED
            );
            anon as u64
        };
        let me = std::process::id() as i32;
        let named = |proofs: &mut CopyProofs| {
            let opts = Options {
                target: Target::Pids(vec![me]),
                all: false,
                cont_orders: Vec::new(),
                mappings: true,
                method: Some(Method::SmapsOnly),
            };
            let mut r = inspect(&opts, &()).unwrap();
            r.name_copies_cached(proofs);
            let m = r.processes[0].mappings.iter().find(|m| m.vma.start == anon).unwrap();
            m.copy_of.clone()
        };
        let want = Some(exe.to_string_lossy().into_owned());
        let mut proofs = CopyProofs::default();
        assert_eq!(named(&mut proofs), want, "proved a copy of the program");
        let first = proofs.reads();
        assert!(first >= 1 && !proofs.is_empty(), "{proofs:?}");
        assert_eq!(named(&mut proofs), want, "named again");
        assert_eq!(proofs.reads(), first, "the second pass read no process memory");
        // As if kept for an earlier process with this pid: another start
        // time, and the opposite verdict.
        proofs.verdicts = proofs
            .verdicts
            .drain()
            .map(|(k, v)| {
                (
                    ProofKey {
                        started: k.started.wrapping_sub(1),
                        ..k
                    },
                    !v,
                )
            })
            .collect();
        assert_eq!(
            named(&mut proofs),
            want,
            "proved again, not taken from the earlier process"
        );
        assert_eq!(proofs.reads(), 2 * first, "{proofs:?}");
        let started = procfs::read_stat(me).unwrap().start_time;
        assert!(proofs.verdicts.keys().all(|k| k.started == started), "{proofs:?}");
        drop(reserved);
    }

    #[test]
    fn store_names_parse_and_others_do_not() {
        let c = store_copy_of("/run/hugetext/text/803-1234-20971520-1700000000123456789-ab12cd").unwrap();
        assert_eq!((c.dev, c.inode, c.size), (0x803, 1234, 20971520));
        assert_eq!(c.mtime_ns, 1700000000123456789);
        assert_eq!(c.build_id.as_deref(), Some("ab12cd"));
        let c = store_copy_of("/run/hugetext/text/fd00-7-4096-0-none (deleted)").unwrap();
        assert_eq!((c.dev, c.build_id), (0xfd00, None));
        for p in [
            "/usr/bin/803-1234-1-2-none",
            "/run/hugetext/text/sub/803-1234-1-2-none",
            "/run/hugetext/text/803-1234-1-2",
            "/run/hugetext/text/803-1234-1-2-none-x",
            "/run/hugetext/text/80g-1234-1-2-none",
            "/run/hugetext/text/803--1-2-none",
            "/run/hugetext/text/803-12-1-2-zz",
            "/run/hugetext/textual/803-1234-1-2-none",
        ] {
            assert_eq!(store_copy_of(p), None, "{p}");
        }
    }
}
