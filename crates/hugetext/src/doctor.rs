//! `doctor`: what the running kernel can do for huge text, and what each
//! finding means for the user.
//!
//! Where a question can be answered by experiment it is: whether a
//! filesystem gives PMD-order page-cache folios, whether those get
//! PMD-mapped, and whether `MADV_COLLAPSE` works on file text are probed on a
//! scratch file in the directory the user names (removed afterwards); whether
//! text on a tmpfs mounted `huge=within_size` (the text store) is PMD-mapped,
//! on a small tmpfs mounted for the experiment and unmounted after it.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use hugetext_abi::madv::COLLAPSE_RETRIES;
use hugetext_abi::thp::{ShmemMode, SizeMode, ThpMode};

use crate::kernel::{self, KernelVersion, Mapping};
use crate::{folio, fsutil, pagecache, procfs, Error, FactError, Result};

/// How a finding bears on using hugetext.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works / good.
    Ok,
    /// Works with a limitation, or could not be determined.
    Warn,
    /// Not available here.
    No,
    /// Plain information.
    Info,
}

impl Status {
    /// Short word for tables.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::No => "no",
            Status::Info => "info",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    /// Stable identifier (`kernel`, `thp`, `fs-large-folios`, …).
    pub id: &'static str,
    /// What was checked.
    pub check: String,
    /// What was found.
    pub value: String,
    /// Good, limited, absent, or informational.
    pub status: Status,
    /// What it means for the user.
    pub meaning: String,
}

fn finding(
    id: &'static str,
    check: &str,
    value: impl Into<String>,
    status: Status,
    meaning: impl Into<String>,
) -> Finding {
    Finding {
        id,
        check: check.into(),
        value: value.into(),
        status,
        meaning: meaning.into(),
    }
}

/// `hugetext doctor --json`: the path probed and every finding.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The path the user named (`--path`).
    pub path: PathBuf,
    /// The findings, in report order.
    pub checks: Vec<Finding>,
}

/// Result of the filesystem experiment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FsProbe {
    /// Directory probed.
    pub dir: PathBuf,
    /// Filesystem type name (from `statfs`).
    pub fs_type: String,
    /// Its block size (`statfs`'s `f_bsize`).
    pub block_size: u64,
    /// Windows of the unit of huge text in the scratch file that ended up in
    /// one folio of at least the unit after filling through a
    /// `MADV_HUGEPAGE` mapping (None: PFNs hidden).
    pub unit_folio_windows: Option<u64>,
    /// Windows in the scratch file.
    pub windows: u64,
    /// kB a fresh, unadvised, congruent mapping got PMD-mapped (smaps `FilePmdMapped`).
    pub pmd_mapped_kb: u64,
    /// kB PMD-mapped after `MADV_COLLAPSE` on small folios (None: it failed).
    pub collapse_kb: Option<u64>,
    /// Why `MADV_COLLAPSE` failed.
    pub collapse_error: Option<String>,
    /// That failure was a transient one ([`pagecache::collapse_transient`]:
    /// the kernel collapses here, not at that moment).
    #[serde(skip)]
    pub collapse_transient: bool,
}

/// Probe the filesystem holding `path` (a directory, or a file whose
/// directory is used) with a scratch file of two PMD-size windows (4 MiB
/// on x86-64, 64 MiB on a 16 KiB-page arm64 kernel): fill it through a
/// `MADV_HUGEPAGE` mapping, count PMD-order folios, map it again without
/// advice and read `FilePmdMapped`, then try `MADV_COLLAPSE` on small folios.
fn probe_fs(path: &Path) -> Result<FsProbe> {
    let dir = probe_dir(path);
    let st = rustix::fs::statfs(&dir).map_err(|e| Error::io(&dir, e.into()))?;
    let mut probe = FsProbe {
        dir: dir.clone(),
        fs_type: fsutil::fs_type_name(st.f_type as u64),
        block_size: st.f_bsize as u64,
        ..Default::default()
    };
    // Two windows of the huge unit: the PMD, or the 2 MiB contpte block
    // with 64 KiB pages (kernel::huge_unit).
    let unit = kernel::unit_size();
    let len = 2 * unit;
    // Removed when `scratch` is dropped.
    let (mut w, scratch) = fsutil::scratch_file_in(&dir, ".hugetext-doctor-").map_err(|e| {
        Error::Permission(format!(
            "cannot create a scratch file in {}: {e} (give a writable directory on the same filesystem)",
            dir.display()
        ))
    })?;
    let name: &Path = &scratch;
    // Return instructions (0xc3, RET) so the mapping looks like text.
    let block = vec![0xc3u8; 1 << 20];
    for _ in 0..len / block.len() {
        w.write_all(&block).map_err(|e| Error::io(name, e))?;
    }
    w.sync_all().map_err(|e| Error::io(name, e))?;
    drop(w);
    // Read-only from here on: MADV_COLLAPSE refuses files open for writing.
    let f = File::open(name).map_err(|e| Error::io(name, e))?;
    probe.windows = (len / unit) as u64;

    pagecache::evict(&f, 0..0)?;
    pagecache::fill_huge(&f, 0..len as u64)?;
    if kernel::pfn_access() {
        probe.unit_folio_windows = Some(folio::scan_open(&f, name, None)?.unit_windows.len() as u64);
    }
    {
        let rx = libc::PROT_READ | libc::PROT_EXEC;
        let m = Mapping::file_congruent(f.as_fd(), 0, len, rx, unit)?;
        m.populate_read(0, len)?;
        probe.pmd_mapped_kb = procfs::own_file_pmd_kb(m.addr())?;
    }

    // MADV_COLLAPSE: start from small folios (a cold PROT_EXEC fault);
    // EAGAIN and friends are transient (pages not yet on the LRU, a folio
    // locked, no free PMD-size block this instant): tried again a little later.
    if let Some(why) = pagecache::collapse_out_of_reach() {
        probe.collapse_error = Some(why);
        pagecache::evict(&f, 0..0)?;
        return Ok(probe);
    }
    let trial = pagecache::collapse_trial(&f, len, COLLAPSE_RETRIES)?;
    match trial.outcome {
        Ok(()) => probe.collapse_kb = Some(trial.after_kb),
        Err(source) => {
            probe.collapse_transient = pagecache::collapse_transient(&source);
            probe.collapse_error = Some(collapse_error(&source));
        }
    }
    pagecache::evict(&f, 0..0)?;
    Ok(probe)
}

/// What the shared-text experiment found: a tmpfs mounted
/// `huge=within_size`, a file of two PMD-size windows on it mapped
/// `PROT_EXEC` at a PMD-aligned address and faulted in.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ShmemProbe {
    /// kB of the mapping PMD-mapped (smaps `ShmemPmdMapped`).
    pub pmd_mapped_kb: u64,
    /// kB mapped.
    pub mapped_kb: u64,
}

/// Mount a small tmpfs `huge=within_size` on a fresh directory, write a
/// file of two PMD-size windows of `RET` instructions on it (sized first:
/// `within_size` gives PMD-size folios only below the file's size), map it
/// `PROT_READ | PROT_EXEC` PMD-aligned, fault every page and read
/// `ShmemPmdMapped`. The tmpfs is unmounted (lazily, if something still
/// holds it) and its directory removed whatever happens.
fn probe_shmem_text() -> Result<ShmemProbe> {
    let pmd = kernel::pmd_size();
    if kernel::unit_size() != pmd {
        return Err(Error::Unsupported(format!(
            "the unit of huge text is the contiguous-PTE block here, not the {} PMD",
            human(pmd)
        )));
    }
    // Mounting needs CAP_SYS_ADMIN: said before anything is made (an
    // unprivileged caller may not even write the temporary directory).
    if !rustix::process::geteuid().is_root() {
        return Err(Error::Permission(
            "mounting a tmpfs needs CAP_SYS_ADMIN (run as root)".into(),
        ));
    }
    let len = 2 * pmd;
    let dir = tempfile::Builder::new()
        .prefix("hugetext-doctor-shmem-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mnt = dir.path();
    let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
    let target = c(&mnt.to_string_lossy());
    let opts = c(&format!("huge=within_size,size={}k,mode=0700", (len + pmd) / 1024));
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            c("hugetext-doctor").as_ptr(),
            target.as_ptr(),
            c("tmpfs").as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) => Error::Permission("mounting a tmpfs needs CAP_SYS_ADMIN (run as root)".into()),
            Some(libc::EINVAL) => Error::Unsupported("this kernel's tmpfs refuses huge=within_size".into()),
            _ => Error::io(mnt, e),
        });
    }
    /// Unmounts the probe's tmpfs when dropped.
    struct Mounted<'a>(&'a std::ffi::CStr);
    impl Drop for Mounted<'_> {
        fn drop(&mut self) {
            // SAFETY: a NUL-terminated path; MNT_DETACH if still busy.
            unsafe {
                if libc::umount2(self.0.as_ptr(), 0) != 0 {
                    libc::umount2(self.0.as_ptr(), libc::MNT_DETACH);
                }
            }
        }
    }
    let _mounted = Mounted(&target);
    let name = mnt.join("text");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&name)
        .map_err(|e| Error::io(&name, e))?;
    f.set_len(len as u64).map_err(|e| Error::io(&name, e))?;
    let block = vec![0xc3u8; 1 << 20];
    for _ in 0..len / block.len() {
        f.write_all(&block).map_err(|e| Error::io(&name, e))?;
    }
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    let m = Mapping::file_congruent(f.as_fd(), 0, len, rx, pmd)?;
    m.populate_read(0, len)?;
    let stats = procfs::own_mapping_stats(m.addr() as u64)?.unwrap_or_default();
    Ok(ShmemProbe {
        pmd_mapped_kb: stats.shmem_pmd_kb,
        mapped_kb: (len / 1024) as u64,
    })
}

/// The page cache's largest folio, 2048 pages (`MAX_PAGECACHE_ORDER`, 11:
/// the xarray's limit), when it is smaller than a PMD: 128 MiB with
/// 64 KiB pages, below their 512 MiB PMD. Pure.
fn page_cache_cap_below(page: u64, pmd: usize) -> Option<u64> {
    let cap = page << 11;
    (page > 0 && cap < pmd as u64).then_some(cap)
}

/// ext4's largest page-cache folio, 2048 blocks (fs/ext4/inode.c,
/// `EXT4_MAX_PAGECACHE_ORDER`), when it is smaller than a PMD: 8 MiB with
/// 4 KiB blocks, below the 32 MiB PMD of 16 KiB-page arm64 kernels. Pure.
pub fn ext4_folio_cap_below(fs_type: &str, block_size: u64, pmd: usize) -> Option<u64> {
    let cap = 2048 * block_size;
    (fs_type == "ext4" && block_size > 0 && cap < pmd as u64).then_some(cap)
}

/// The directory probed for `path`: itself, or the directory of a file.
fn probe_dir(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new(".")).to_path_buf()
    }
}

/// How a collapse error that says nothing against the kernel starts.
const TRANSIENT: &str = "transient failure, ";

/// Why `MADV_COLLAPSE` refused file text, in words: EINVAL on a kernel that
/// does not know the advice at all ([`kernel::madv_collapse_known`]) is not
/// the same fact as EINVAL for file text only.
fn collapse_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        _ if pagecache::collapse_transient(e) => format!("{TRANSIENT}{e}"),
        Some(libc::EINVAL) if !kernel::madv_collapse_known() => {
            "EINVAL: this kernel has no MADV_COLLAPSE (Linux 6.1 added it)".to_string()
        }
        Some(libc::EINVAL) => "EINVAL (not supported for file text on this kernel)".to_string(),
        _ => e.to_string(),
    }
}

/// Everything `doctor` looks at, gathered once (all the I/O and the
/// filesystem experiment); [`findings`] decides what it means.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The path the user named (the filesystem to probe).
    pub path: PathBuf,
    /// `uname -r`.
    pub release: String,
    /// The kernel release as numbers.
    pub version: KernelVersion,
    /// Base page size, bytes.
    pub page_size: usize,
    /// PMD size, bytes.
    pub pmd_size: usize,
    /// The unit of huge text ([`kernel::huge_unit`]): the PMD size, or the
    /// contpte block where no page-cache folio reaches the PMD.
    pub unit: usize,
    /// arm64's contiguous-PTE block, bytes; `None` on other machines.
    pub cont_pte: Option<usize>,
    /// THP `enabled` mode; `None` without THP.
    pub thp_enabled: Option<ThpMode>,
    /// mTHP sizes (kB) and their modes.
    pub thp_sizes: Vec<(u64, kernel::ModeRead<SizeMode>)>,
    /// THP `shmem_enabled` mode.
    pub shmem_enabled: Option<kernel::ModeRead<ShmemMode>>,
    /// The filesystem experiment, or why it could not be done.
    pub probe: std::result::Result<FsProbe, FactError>,
    /// The shared-text experiment on a huge tmpfs, or why it could not be done.
    pub shmem_text: std::result::Result<ShmemProbe, FactError>,
    /// What evict + refill and collapse in place cost on that filesystem
    /// (the order `run` tries them in), or why it was not measured.
    pub route_costs: std::result::Result<crate::run::routecost::RouteCosts, FactError>,
    /// `CONFIG_READ_ONLY_THP_FOR_FS` (`y`, `n`), when the config is readable.
    pub read_only_thp_for_fs: Option<String>,
    /// This process holds `CAP_SYS_ADMIN`.
    pub cap_sys_admin: bool,
    /// `/proc/self/pagemap` shows page frame numbers (root with `CAP_SYS_ADMIN`).
    pub pfn_access: bool,
    /// The `PAGEMAP_SCAN` ioctl is available (Linux 6.7 and later).
    pub pagemap_scan: bool,
    /// Anonymous memory can be named (`PR_SET_VMA_ANON_NAME`).
    pub anon_vma_name: bool,
    /// glibc (major, minor); `None` for another C library.
    pub glibc: Option<(u32, u32)>,
}

impl Facts {
    /// Read the kernel's interfaces and probe the filesystem holding `path`.
    pub fn gather(path: &Path) -> Facts {
        Facts {
            path: path.to_path_buf(),
            release: rustix::system::uname().release().to_string_lossy().into_owned(),
            version: KernelVersion::current(),
            page_size: kernel::page_size(),
            pmd_size: kernel::pmd_size(),
            unit: kernel::unit_size(),
            cont_pte: kernel::cont_pte_size(),
            thp_enabled: kernel::thp_mode(),
            thp_sizes: kernel::thp_sizes(),
            shmem_enabled: kernel::shmem_mode(),
            probe: probe_fs(path).map_err(FactError::from),
            shmem_text: probe_shmem_text().map_err(FactError::from),
            route_costs: crate::run::routecost::measure(&probe_dir(path)).map_err(FactError::from),
            read_only_thp_for_fs: kernel::kernel_config("CONFIG_READ_ONLY_THP_FOR_FS"),
            cap_sys_admin: kernel::has_cap_sys_admin(),
            pfn_access: kernel::pfn_access(),
            pagemap_scan: kernel::pagemap_scan_supported(),
            anon_vma_name: kernel::anon_vma_name_supported(),
            glibc: kernel::glibc_version(),
        }
    }
}

/// Run every check; `path` names the filesystem to probe.
pub fn diagnose(path: &Path) -> Vec<Finding> {
    findings(&Facts::gather(path))
}

/// What the facts mean, check by check, in report order.
pub fn findings(f: &Facts) -> Vec<Finding> {
    let pmd_w = human(f.pmd_size);
    let mut out = vec![
        kernel_finding(&f.release, f.version, &pmd_w),
        page_size(f.page_size, f.pmd_size, f.cont_pte),
    ];
    out.push(thp(f.thp_enabled, &pmd_w));
    out.extend(thp_sizes(&f.thp_sizes));
    if f.unit != f.pmd_size {
        out.push(copy_unit(f.unit, &f.thp_sizes, f.thp_enabled));
    }
    out.extend(f.shmem_enabled.as_ref().map(|s| shmem(s, f.page_size)));
    match &f.probe {
        Ok(p) => out.extend(filesystem(
            p,
            f.page_size,
            f.pmd_size,
            f.unit,
            f.read_only_thp_for_fs.as_deref(),
        )),
        Err(e) => out.push(not_probed(e, &f.path)),
    }
    out.push(shmem_text(&f.shmem_text));
    out.extend(f.route_costs.as_ref().ok().map(route_costs));
    out.push(pfn_access(f.pfn_access, f.cap_sys_admin));
    out.push(pagemap_scan(f.pagemap_scan));
    out.push(anon_vma_name(f.anon_vma_name));
    out.push(glibc(f.glibc, &pmd_w));
    out
}

/// A size in words: "2 MiB", "32 MiB", "16 KiB".
fn human(b: usize) -> String {
    crate::units::human(b as u64)
}

fn kernel_finding(release: &str, v: KernelVersion, pmd_w: &str) -> Finding {
    finding(
        "kernel",
        "kernel",
        release,
        if v.at_least(5, 18) { Status::Ok } else { Status::Warn },
        format!(
            "Linux {v}: {}{}",
            if v.at_least(5, 18) {
                format!("file mappings are placed {pmd_w}-congruent by the kernel (thp_get_unmapped_area) and xfs has large folios")
            } else {
                "older than 5.18: no large page-cache folios on common filesystems; `hugetext run` (anonymous copy) is the route".to_string()
            },
            if v.at_least(6, 7) {
                "; PAGEMAP_SCAN makes `inspect` fast"
            } else {
                ""
            }
        ),
    )
}

fn page_size(ps: usize, pmd: usize, cont_pte: Option<usize>) -> Finding {
    let mut value = format!("{} kB pages, {} kB PMD", ps / 1024, pmd / 1024);
    let mut meaning = format!(
        "one PMD-mapped folio replaces {} base-page TLB entries with one",
        pmd / ps
    );
    if let Some(block) = cont_pte {
        value += &format!(", {} kB contpte block", block / 1024);
        // Contpte blocks exist on arm64 only.
        let (unit, _) = crate::kernel::huge_unit_of(object::elf::EM_AARCH64, ps as u64, pmd as u64);
        meaning = if unit == block as u64 {
            // 64 KiB pages: the PMD is beyond the page cache's largest folio.
            format!(
                "the {} PMD is out of reach (the page cache's largest folio is 2048 pages, {}; the loaders align to at most 32 MiB): \
                 the unit of huge text here is the {} contiguous-PTE block, {} pages under one TLB entry when a folio that large is \
                 naturally aligned in the file and in memory; `check` and `align` work to it",
                human(pmd),
                human(2048 * ps),
                human(block),
                block / ps
            )
        } else {
            format!(
                "{meaning}; below it, a folio of at least the {} contiguous-PTE block ({} pages), naturally aligned, \
                 takes one TLB entry per block (contpte)",
                human(block),
                block / ps
            )
        };
    }
    finding("page-size", "page and PMD size", value, Status::Info, meaning)
}

fn thp(mode: Option<ThpMode>, pmd_w: &str) -> Finding {
    match mode {
        None => finding(
            "thp",
            "transparent huge pages",
            "absent",
            Status::No,
            format!("kernel built without THP: no {pmd_w} pages for text from user space (only hugetlbfs)"),
        ),
        Some(mode) => {
            let (st, m) = match mode {
                ThpMode::Always | ThpMode::Madvise => (
                    Status::Ok,
                    format!("MADV_HUGEPAGE is honoured: `warm` fills the page cache with {pmd_w} folios and `run` can back text copies with THP"),
                ),
                ThpMode::Never => (
                    Status::Warn,
                    "anonymous THP is off: `run` (anonymous copy) gets no huge pages; page-cache text can still be PMD-mapped where the filesystem probe says so".to_string(),
                ),
            };
            finding("thp", "THP (enabled)", mode.as_str(), st, m)
        }
    }
}

fn thp_sizes(sizes: &[(u64, kernel::ModeRead<SizeMode>)]) -> Option<Finding> {
    if sizes.is_empty() {
        return None;
    }
    let on: Vec<String> = sizes
        .iter()
        .filter(|(_, m)| *m != Ok(SizeMode::Never))
        .map(|(kb, m)| match m {
            Ok(m) => format!("{kb}kB={}", m.as_str()),
            Err(e) => format!("{kb}kB=? ({e})"),
        })
        .collect();
    Some(finding(
        "thp-sizes",
        "THP per size (mTHP)",
        if on.is_empty() {
            "all never".to_string()
        } else {
            on.join(" ")
        },
        Status::Info,
        "anonymous memory only; page-cache folio sizes come from the filesystem and readahead, not from these settings",
    ))
}

/// Where the unit of huge text is below the PMD (the 2 MiB contpte block
/// with 64 KiB pages): can `run`'s copy get anonymous folios of the unit?
/// That is the unit's own mTHP size (`hugepages-2048kB/enabled`):
/// `always`, `madvise` (the copy is `MADV_HUGEPAGE`), or `inherit` with a
/// top-level mode other than `never`.
fn copy_unit(unit: usize, sizes: &[(u64, kernel::ModeRead<SizeMode>)], top: Option<ThpMode>) -> Finding {
    let kb = unit as u64 / 1024;
    let dir = format!("/sys/kernel/mm/transparent_hugepage/hugepages-{kb}kB/enabled");
    let parsed = sizes.iter().find(|(k, _)| *k == kb).map(|(_, m)| m.clone());
    let top = top.unwrap_or(ThpMode::Never);
    match parsed {
        Some(Err(e)) => finding(
            "copy-unit",
            "anonymous folios of the unit",
            format!("{kb}kB=?"),
            Status::Warn,
            format!("cannot tell whether `run`'s copy route gets {} anonymous folios: {e}", human(unit)),
        ),
        Some(Ok(m)) if m.allows_madvised(top) => finding(
            "copy-unit",
            "anonymous folios of the unit",
            format!("{kb}kB={}", m.as_str()),
            Status::Ok,
            format!(
                "`run`'s copy route gets {} anonymous folios (MADV_HUGEPAGE), mapped with contiguous PTEs: one TLB entry per block",
                human(unit)
            ),
        ),
        Some(Ok(m)) => finding(
            "copy-unit",
            "anonymous folios of the unit",
            format!("{kb}kB={}", m.as_str()),
            Status::Warn,
            format!(
                "`run`'s copy route gets no {} anonymous folios ({dir} is `{}`{}): as root, `echo madvise > {dir}`",
                human(unit),
                m.as_str(),
                if m == SizeMode::Inherit { " and transparent_hugepage is `never`" } else { "" }
            ),
        ),
        None => finding(
            "copy-unit",
            "anonymous folios of the unit",
            "absent",
            Status::No,
            format!(
                "no {} anonymous THP size ({dir} is missing: Linux 6.8+ has sizes below the PMD): `run` cannot copy text into folios of the unit",
                human(unit)
            ),
        ),
    }
}

fn shmem(shm: &kernel::ModeRead<ShmemMode>, page: usize) -> Finding {
    match shm {
        Ok(m) => finding(
            "shmem",
            "THP for shmem/tmpfs",
            m.as_str(),
            Status::Info,
            if m.may_give_huge() {
                "programs on tmpfs can have huge page-cache folios".to_string()
            } else {
                format!("programs run from tmpfs keep their text in {} pages", human(page))
            },
        ),
        Err(e) => finding("shmem", "THP for shmem/tmpfs", "?", Status::Warn, e.clone()),
    }
}

/// Whether text on a huge tmpfs (the text store) is PMD-mapped here: one
/// copy of a program there is huge text shared by every process that runs
/// it, whatever the disk's filesystem gives.
fn shmem_text(p: &std::result::Result<ShmemProbe, FactError>) -> Finding {
    let check = "shared huge text from a huge tmpfs";
    match p {
        Ok(p) if p.pmd_mapped_kb > 0 && p.pmd_mapped_kb == p.mapped_kb => finding(
            "shmem-text",
            check,
            format!("{} of {} kB PMD-mapped from a huge=within_size tmpfs", p.pmd_mapped_kb, p.mapped_kb),
            Status::Ok,
            "shared huge text via the store: available (`hugetext warm --shmem FILE` copies a program into /run/hugetext/text, \
             which run-hugetext-text.mount mounts; every process that runs it then shares its PMD-mapped text)",
        ),
        Ok(p) => finding(
            "shmem-text",
            check,
            format!("{} of {} kB PMD-mapped from a huge=within_size tmpfs", p.pmd_mapped_kb, p.mapped_kb),
            if p.pmd_mapped_kb > 0 { Status::Warn } else { Status::No },
            "shared huge text via the store: not available (this kernel does not map text from a huge tmpfs with PMDs)",
        ),
        Err(e) => finding(
            "shmem-text",
            check,
            format!("not tried: {e}"),
            Status::Warn,
            "shared huge text via the store: unknown",
        ),
    }
}

/// The three findings of the filesystem experiment: PMD-order folios, PMD
/// mapping, MADV_COLLAPSE (`ro_thp`: CONFIG_READ_ONLY_THP_FOR_FS).
fn filesystem(p: &FsProbe, page: usize, pmd: usize, unit: usize, ro_thp: Option<&str>) -> [Finding; 3] {
    let windows = p.windows;
    // The probe's windows and folios are of the huge unit; the PMD words
    // stay for what only a PMD does.
    let unit_w = human(unit);
    let (st, val, m) = match p.unit_folio_windows {
        Some(n) if n == windows => (
            Status::Ok,
            format!("{}: yes ({n}/{windows} windows in {unit_w} folios)", p.fs_type),
            format!(
                "`hugetext warm` can put text stored on {} into {unit_w} page-cache folios",
                p.dir.display()
            ),
        ),
        Some(n) => (
            Status::No,
            format!("{}: no ({n}/{windows} windows in {unit_w} folios)", p.fs_type),
            if fsutil::is_memory_fs(&p.fs_type) {
                format!(
                    "{} holds files in memory: no PMD folios unless mounted with huge=within_size (tmpfs); `warm` cannot help; use `hugetext run` (anonymous copy) or put the programs on ext4/xfs",
                    p.fs_type
                )
            } else if let Some(cap) = page_cache_cap_below(page as u64, pmd) {
                format!(
                    "the page cache holds folios of at most 2048 pages ({} here), below the {} PMD: no file text is PMD-mapped on this kernel, whatever the filesystem, \
                     and its MADV_HUGEPAGE readahead gave no {unit_w} folios of the contiguous-PTE unit either (kernels that cap that readahead at 2 MiB, as 7.3 does, give them); \
                     use `hugetext run` (anonymous copy)",
                    human(cap as usize),
                    human(pmd)
                )
            } else if p.collapse_kb.unwrap_or(0) > 0 {
                format!(
                    "readahead gives no {unit_w} folios here (Linux 7.x reads at most 2 MiB folios through MADV_HUGEPAGE), but MADV_COLLAPSE builds them: `hugetext warm` and `run` collapse text in place"
                )
            } else if let Some(cap) = ext4_folio_cap_below(&p.fs_type, p.block_size, unit) {
                format!(
                    "ext4 caps page-cache folios at 2048 blocks ({} with its {} blocks), below the {unit_w} PMD: `warm` and `run --strategy file` cannot help here; use `hugetext run` (anonymous copy), xfs, or an ext4 made with blocks of {} or more (mkfs.ext4 -b)",
                    human(cap as usize),
                    human(p.block_size as usize),
                    human(pmd / 2048),
                )
            } else {
                format!(
                    "{} gives only small page-cache folios on this kernel: `warm` and `run --strategy file` cannot help; use `hugetext run` (anonymous copy) or put the programs on ext4 (Linux ≥ 6.16) or xfs",
                    p.fs_type
                )
            },
        ),
        None if p.pmd_mapped_kb > 0 => (
            Status::Ok,
            format!(
                "{}: yes (PMD-mapped; folio sizes hidden without CAP_SYS_ADMIN)",
                p.fs_type
            ),
            "`hugetext warm` works on this filesystem".to_string(),
        ),
        None => (
            Status::Warn,
            format!("{}: unknown (no PFN access)", p.fs_type),
            "run as root to see folio sizes".to_string(),
        ),
    };
    let folios = finding("fs-large-folios", "PMD-order page-cache folios", val, st, m);
    let want = (windows as usize * unit / 1024) as u64;
    let mapped = if unit < pmd {
        finding(
            "pmd-map",
            "PMD mapping of page-cache text",
            format!("none possible ({} PMD)", human(pmd)),
            Status::Info,
            format!(
                "{unit_w} folios naturally aligned in the file are mapped with contiguous PTEs (one TLB entry per {unit_w} block) \
                 by every process that maps them at a {unit_w}-congruent address, shared, with no copy"
            ),
        )
    } else {
        finding(
            "pmd-map",
            "PMD mapping of page-cache text",
            format!(
                "{} of {} kB PMD-mapped in a fresh unadvised mapping",
                p.pmd_mapped_kb, want
            ),
            if p.pmd_mapped_kb == want {
                Status::Ok
            } else {
                Status::No
            },
            if p.pmd_mapped_kb == want {
                format!("every process that maps warmed text at a {unit_w}-congruent address gets it on {unit_w} pages, shared, with no copy")
            } else {
                "warmed folios are not PMD-mapped here: only `hugetext run` (anonymous copy) puts text on huge pages"
                    .to_string()
            },
        )
    };
    let cfg_note = match ro_thp {
        Some("y") => " (CONFIG_READ_ONLY_THP_FOR_FS=y)",
        Some("n") => " (CONFIG_READ_ONLY_THP_FOR_FS is not set)",
        _ => "",
    };
    let (st, val, m) = match (p.collapse_kb, &p.collapse_error) {
        (Some(kb), _) if kb > 0 => (
            Status::Ok,
            format!("works ({kb} kB collapsed){cfg_note}"),
            "file text already in small folios can be collapsed in place (khugepaged or MADV_COLLAPSE)",
        ),
        (Some(_), _) => (
            Status::Warn,
            format!("accepted but nothing PMD-mapped after a refault{cfg_note}"),
            "MADV_COLLAPSE did not give PMD mappings here; use `warm` (evict + refill)",
        ),
        (None, Some(e)) if p.collapse_transient => (
            Status::Warn,
            format!("{e} after {} tries{cfg_note}", COLLAPSE_RETRIES + 1),
            "the kernel collapses file text here but could not at that moment (pages busy or no free PMD-size block): `warm` and `run` try it again",
        ),
        (None, e) => (
            Status::No,
            format!("{}{cfg_note}", e.as_deref().unwrap_or("failed")),
            "text already cached in small folios cannot be collapsed in place; `warm` evicts and refills it instead",
        ),
    };
    let collapse = finding("madv-collapse", "MADV_COLLAPSE on file text", val, st, m);
    [folios, mapped, collapse]
}

/// The zero-copy routes' measured costs, and which one `run` tries first.
fn route_costs(c: &crate::run::routecost::RouteCosts) -> Finding {
    use crate::run::routecost::order;
    let first = match order(c) {
        hugetext_abi::env::Order::Collapse => {
            "`run` collapses text in place before it tries evict + refill (HUGETEXT_ORDER=collapse); `warm` collapses what processes map"
        }
        hugetext_abi::env::Order::File => "`run` tries evict + refill before collapse in place",
    };
    finding(
        "route-costs",
        "zero-copy route costs",
        format!(
            "collapse in place {}, evict + refill {}",
            c.collapse.describe(),
            c.refill.describe()
        ),
        Status::Ok,
        first,
    )
}

fn not_probed(why: &FactError, path: &Path) -> Finding {
    finding(
        "fs-large-folios",
        "PMD-order page-cache folios",
        format!("not probed: {why}"),
        Status::Warn,
        format!(
            "give `--path DIR` on the filesystem that holds your programs (default: {})",
            path.display()
        ),
    )
}

fn pfn_access(pfn: bool, cap: bool) -> Finding {
    finding(
        "pfn-access",
        "pagemap PFN access",
        format!(
            "{} (CAP_SYS_ADMIN: {})",
            if pfn { "yes" } else { "no" },
            if cap { "yes" } else { "no" }
        ),
        if pfn { Status::Ok } else { Status::Warn },
        if pfn {
            "`inspect` sees every folio's size and alignment"
        } else {
            "the kernel hides PFNs: `inspect` shows smaps-only numbers (PMD- vs PTE-mapped); run as root for folio sizes"
        },
    )
}

fn pagemap_scan(scan: bool) -> Finding {
    finding(
        "pagemap-scan",
        "PAGEMAP_SCAN ioctl",
        if scan { "yes" } else { "no" },
        if scan { Status::Ok } else { Status::Info },
        if scan {
            "`inspect` learns PMD-mapped ranges without reading a flag word per page"
        } else {
            "`inspect` reads every page's flags and takes PMD-mapped amounts from smaps (slower, same numbers)"
        },
    )
}

fn anon_vma_name(named: bool) -> Finding {
    finding(
        "anon-vma-name",
        "anonymous VMA names",
        if named { "yes" } else { "no" },
        if named { Status::Ok } else { Status::Info },
        if named {
            "text `run` copies shows in /proc/PID/maps as [anon:hugetext:PATH]"
        } else {
            "text `run` copies shows in /proc/PID/maps as unnamed anonymous memory (perf and gdb read /tmp/perf-PID.map)"
        },
    )
}

fn glibc(version: Option<(u32, u32)>, pmd_w: &str) -> Finding {
    match version {
        Some((a, b)) => finding(
            "glibc",
            "glibc (p_align support)",
            format!("{a}.{b}"),
            if (a, b) >= (2, 35) { Status::Ok } else { Status::Warn },
            if (a, b) >= (2, 35) {
                format!("ld.so aligns shared libraries to their largest p_align: libraries rewritten by `hugetext align` load {pmd_w}-congruent")
            } else {
                "ld.so ignores p_align > page size for libraries: aligned libraries land congruent only by luck (kernel placement of large mappings helps)".to_string()
            },
        ),
        None => finding(
            "glibc",
            "glibc (p_align support)",
            "not glibc",
            Status::Info,
            "check your C library's loader for p_align support",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine kind: 6.18, ext4 with large folios, THP madvise, root,
    /// no CONFIG_READ_ONLY_THP_FOR_FS.
    fn facts() -> Facts {
        Facts {
            path: PathBuf::from("/srv"),
            release: "6.18.0-test".into(),
            version: KernelVersion::parse("6.18.0"),
            page_size: 4096,
            pmd_size: 2 << 20,
            unit: 2 << 20,
            cont_pte: None,
            thp_enabled: Some(ThpMode::Madvise),
            thp_sizes: vec![(64, Ok(SizeMode::Never)), (2048, Ok(SizeMode::Inherit))],
            shmem_enabled: Some(Ok(ShmemMode::Never)),
            probe: Ok(FsProbe {
                dir: PathBuf::from("/srv"),
                fs_type: "ext4".into(),
                block_size: 4096,
                unit_folio_windows: Some(2),
                windows: 2,
                pmd_mapped_kb: 4096,
                collapse_kb: None,
                collapse_error: Some("EINVAL (not supported for file text on this kernel)".into()),
                collapse_transient: false,
            }),
            shmem_text: Ok(ShmemProbe {
                pmd_mapped_kb: 4096,
                mapped_kb: 4096,
            }),
            route_costs: Err(Error::Other("not measured".into()).into()),
            read_only_thp_for_fs: Some("n".into()),
            cap_sys_admin: true,
            pfn_access: true,
            pagemap_scan: true,
            anon_vma_name: false,
            glibc: Some((2, 36)),
        }
    }

    fn probe(f: &mut Facts) -> &mut FsProbe {
        f.probe.as_mut().unwrap()
    }

    fn get<'a>(v: &'a [Finding], id: &str) -> &'a Finding {
        v.iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("no {id} in {v:?}"))
    }

    #[test]
    fn the_copy_route_needs_the_units_mthp_size_where_the_unit_is_contpte() {
        let sizes = |m: &str| {
            let m = SizeMode::read(format!("[{m}]").as_bytes()).map_err(|e| e.to_string());
            vec![(64, Ok(SizeMode::Never)), (2048, m), (524288, Ok(SizeMode::Inherit))]
        };
        let f = copy_unit(2 << 20, &sizes("never"), Some(ThpMode::Always));
        assert_eq!((f.status, f.value.as_str()), (Status::Warn, "2048kB=never"));
        assert!(
            f.meaning
                .contains("echo madvise > /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"),
            "{}",
            f.meaning
        );
        assert_eq!(
            copy_unit(2 << 20, &sizes("madvise"), Some(ThpMode::Never)).status,
            Status::Ok
        );
        assert_eq!(
            copy_unit(2 << 20, &sizes("inherit"), Some(ThpMode::Madvise)).status,
            Status::Ok
        );
        let f = copy_unit(2 << 20, &sizes("inherit"), Some(ThpMode::Never));
        assert!(f.status == Status::Warn && f.meaning.contains("transparent_hugepage is `never`"));
        assert_eq!(copy_unit(2 << 20, &[], Some(ThpMode::Always)).status, Status::No);
        // A word this hugetext does not know is named, not taken for `never`.
        let f = copy_unit(2 << 20, &sizes("sometimes"), Some(ThpMode::Always));
        assert!(
            f.status == Status::Warn && f.meaning.contains("unknown mode `sometimes`"),
            "{f:?}"
        );
    }

    #[test]
    fn shmem_modes_are_read_once_and_unknown_words_named() {
        let page = 4096;
        assert!(shmem(&Ok(ShmemMode::Deny), page)
            .meaning
            .contains("tmpfs keep their text in 4 KiB pages"));
        assert!(shmem(&Ok(ShmemMode::WithinSize), page)
            .meaning
            .contains("can have huge"));
        let e = ShmemMode::read(b"always [sometimes] never").map_err(|e| format!("shmem_enabled: {e}"));
        let f = shmem(&e, page);
        assert!(
            f.status == Status::Warn && f.meaning.contains("unknown mode `sometimes`"),
            "{f:?}"
        );
    }

    #[test]
    fn arm64_page_size_names_the_contpte_block_and_the_unit_with_64k_pages() {
        // x86-64: no contpte block.
        let v = findings(&facts());
        assert_eq!(get(&v, "page-size").value, "4 kB pages, 2048 kB PMD");
        assert!(!get(&v, "page-size").meaning.contains("contiguous-PTE"));
        // arm64, 4 KiB pages: 64 KiB blocks below the 2 MiB PMD.
        let mut f = facts();
        f.cont_pte = Some(64 << 10);
        let p = findings(&f).into_iter().find(|x| x.id == "page-size").unwrap();
        assert_eq!(p.value, "4 kB pages, 2048 kB PMD, 64 kB contpte block");
        assert!(
            p.meaning.contains("64 KiB contiguous-PTE block (16 pages)"),
            "{}",
            p.meaning
        );
        // arm64, 64 KiB pages: the 512 MiB PMD is out of reach, the 2 MiB
        // block is the unit.
        let mut f = facts();
        (f.page_size, f.pmd_size, f.cont_pte) = (64 << 10, 512 << 20, Some(2 << 20));
        let p = findings(&f).into_iter().find(|x| x.id == "page-size").unwrap();
        assert_eq!(p.value, "64 kB pages, 524288 kB PMD, 2048 kB contpte block");
        assert!(
            p.meaning.contains("512 MiB PMD is out of reach")
                && p.meaning.contains("128 MiB")
                && p.meaning
                    .contains("unit of huge text here is the 2 MiB contiguous-PTE block, 32 pages"),
            "{}",
            p.meaning
        );
    }

    #[test]
    fn every_check_in_order() {
        let ids: Vec<_> = findings(&facts()).iter().map(|f| f.id).collect();
        assert_eq!(
            ids,
            [
                "kernel",
                "page-size",
                "thp",
                "thp-sizes",
                "shmem",
                "fs-large-folios",
                "pmd-map",
                "madv-collapse",
                "shmem-text",
                "pfn-access",
                "pagemap-scan",
                "anon-vma-name",
                "glibc"
            ]
        );
        let v = findings(&facts());
        assert_eq!(get(&v, "fs-large-folios").status, Status::Ok);
        assert_eq!(
            get(&v, "pmd-map").value,
            "4096 of 4096 kB PMD-mapped in a fresh unadvised mapping"
        );
        assert_eq!(get(&v, "thp-sizes").value, "2048kB=inherit");
        assert_eq!(get(&v, "page-size").value, "4 kB pages, 2048 kB PMD");
    }

    #[test]
    fn shmem_text_says_whether_the_store_gives_shared_huge_text() {
        let mut f = facts();
        let v = findings(&f);
        let s = get(&v, "shmem-text");
        assert_eq!(s.status, Status::Ok);
        assert!(
            s.meaning.starts_with("shared huge text via the store: available"),
            "{}",
            s.meaning
        );
        f.shmem_text = Ok(ShmemProbe {
            pmd_mapped_kb: 0,
            mapped_kb: 4096,
        });
        let v = findings(&f);
        assert_eq!(get(&v, "shmem-text").status, Status::No);
        f.shmem_text = Err(Error::Permission("mounting a tmpfs needs CAP_SYS_ADMIN (run as root)".into()).into());
        let v = findings(&f);
        let s = get(&v, "shmem-text");
        assert_eq!(s.status, Status::Warn);
        assert!(s.value.starts_with("not tried: "), "{}", s.value);
    }

    #[test]
    fn tmpfs_has_no_pmd_folios() {
        let mut f = facts();
        let p = probe(&mut f);
        (p.fs_type, p.unit_folio_windows, p.pmd_mapped_kb) = ("tmpfs".into(), Some(0), 0);
        let v = findings(&f);
        let fs = get(&v, "fs-large-folios");
        assert_eq!(
            (fs.status, fs.value.as_str()),
            (Status::No, "tmpfs: no (0/2 windows in 2 MiB folios)")
        );
        assert!(fs.meaning.contains("holds files in memory"), "{fs:?}");
        assert_eq!(get(&v, "pmd-map").status, Status::No);
        // A disk filesystem without large folios gets the other advice.
        probe(&mut f).fs_type = "btrfs".into();
        assert!(get(&findings(&f), "fs-large-folios")
            .meaning
            .contains("ext4 (Linux ≥ 6.16) or xfs"));
    }

    /// A 16 KiB-page arm64 kernel: every size the report names is its own
    /// (32 MiB PMD, 16 KiB pages), never x86-64's.
    #[test]
    fn sizes_are_the_kernels_own() {
        let mut f = facts();
        (f.page_size, f.pmd_size, f.unit) = (16 << 10, 32 << 20, 32 << 20);
        probe(&mut f).pmd_mapped_kb = 2 * 32 * 1024;
        let v = findings(&f);
        let fs = get(&v, "fs-large-folios");
        assert_eq!(fs.value, "ext4: yes (2/2 windows in 32 MiB folios)");
        assert!(fs.meaning.contains("into 32 MiB page-cache folios"), "{fs:?}");
        assert_eq!(get(&v, "pmd-map").status, Status::Ok);
        assert!(get(&v, "pmd-map").meaning.contains("32 MiB-congruent"));
        assert!(get(&v, "shmem").meaning.contains("16 KiB pages"));
        // "2 MiB" not inside "32 MiB".
        let x86 = |s: &str| {
            s.match_indices("2 MiB")
                .any(|(i, _)| i == 0 || !s.as_bytes()[i - 1].is_ascii_digit())
                || s.contains("4 KiB")
        };
        for x in &v {
            assert!(!x86(&x.value) && !x86(&x.meaning), "{x:?}");
        }
    }

    #[test]
    fn hidden_pfns() {
        let mut f = facts();
        (f.pfn_access, f.cap_sys_admin) = (false, false);
        probe(&mut f).unit_folio_windows = None;
        let v = findings(&f);
        let fs = get(&v, "fs-large-folios");
        assert_eq!(fs.status, Status::Ok, "PMD-mapped proves the folios: {fs:?}");
        assert!(fs.value.contains("folio sizes hidden"), "{fs:?}");
        let pfn = get(&v, "pfn-access");
        assert_eq!(
            (pfn.status, pfn.value.as_str()),
            (Status::Warn, "no (CAP_SYS_ADMIN: no)")
        );
        // Nothing PMD-mapped either: cannot tell.
        probe(&mut f).pmd_mapped_kb = 0;
        assert_eq!(get(&findings(&f), "fs-large-folios").status, Status::Warn);
    }

    #[test]
    fn a_pmd_above_the_page_cache_cap_is_said_for_every_filesystem() {
        assert_eq!(page_cache_cap_below(4096, 2 << 20), None);
        assert_eq!(page_cache_cap_below(16384, 32 << 20), None);
        assert_eq!(page_cache_cap_below(65536, 512 << 20), Some(128 << 20));
        let mut f = facts();
        f.pmd_size = 512 << 20;
        f.page_size = 65536;
        probe(&mut f).unit_folio_windows = Some(0);
        let m = get(&findings(&f), "fs-large-folios").meaning.clone();
        assert!(
            m.starts_with("the page cache holds folios of at most 2048 pages (128 MiB here), below the 512 MiB PMD"),
            "{m}"
        );
    }

    #[test]
    fn with_64k_pages_the_contpte_unit_is_probed_and_pmd_mapping_is_not_expected() {
        let mut f = facts();
        (f.page_size, f.pmd_size, f.unit, f.cont_pte) = (65536, 512 << 20, 2 << 20, Some(2 << 20));
        (probe(&mut f).unit_folio_windows, probe(&mut f).pmd_mapped_kb) = (Some(2), 0);
        let v = findings(&f);
        let fs = get(&v, "fs-large-folios");
        assert_eq!(
            (fs.status, fs.value.as_str()),
            (Status::Ok, "ext4: yes (2/2 windows in 2 MiB folios)")
        );
        let m = get(&v, "pmd-map");
        assert_eq!(
            (m.status, m.value.as_str()),
            (Status::Info, "none possible (512 MiB PMD)")
        );
        assert!(m.meaning.contains("contiguous PTEs"), "{}", m.meaning);
    }

    #[test]
    fn no_pmd_readahead_but_collapse_is_said_as_such() {
        let mut f = facts();
        (f.page_size, f.pmd_size, f.unit) = (16384, 32 << 20, 32 << 20);
        (probe(&mut f).unit_folio_windows, probe(&mut f).collapse_kb) = (Some(0), Some(65536));
        let c = get(&findings(&f), "fs-large-folios").clone();
        assert_eq!(c.status, Status::No);
        assert!(c.meaning.contains("MADV_COLLAPSE builds them"), "{}", c.meaning);
    }

    #[test]
    fn ext4_blocks_cap_its_folios_below_a_16k_kernel_pmd() {
        assert_eq!(ext4_folio_cap_below("ext4", 4096, 2 << 20), None);
        assert_eq!(ext4_folio_cap_below("ext4", 4096, 32 << 20), Some(8 << 20));
        assert_eq!(ext4_folio_cap_below("ext4", 16384, 32 << 20), None);
        assert_eq!(ext4_folio_cap_below("xfs", 4096, 32 << 20), None);
        let mut f = facts();
        (f.page_size, f.pmd_size, f.unit) = (16384, 32 << 20, 32 << 20);
        (probe(&mut f).block_size, probe(&mut f).unit_folio_windows) = (4096, Some(0));
        let m = get(&findings(&f), "fs-large-folios").meaning.clone();
        assert!(
            m.starts_with(
                "ext4 caps page-cache folios at 2048 blocks (8 MiB with its 4 KiB blocks), below the 32 MiB PMD"
            ),
            "{m}"
        );
        assert!(m.contains("blocks of 16 KiB or more"), "{m}");
    }

    #[test]
    fn a_transient_collapse_failure_is_not_a_no() {
        let e = std::io::Error::from_raw_os_error(libc::EAGAIN);
        assert!(pagecache::collapse_transient(&e));
        assert!(!pagecache::collapse_transient(&std::io::Error::from_raw_os_error(
            libc::EINVAL
        )));
        let mut f = facts();
        probe(&mut f).collapse_error = Some(collapse_error(&e));
        probe(&mut f).collapse_transient = true;
        let c = get(&findings(&f), "madv-collapse").clone();
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.value.starts_with("transient failure, ") && c.value.contains("after 4 tries"),
            "{}",
            c.value
        );
    }

    #[test]
    fn route_costs_say_which_route_run_tries_first() {
        use crate::run::routecost::{Cost, RouteCosts};
        let mut f = facts();
        assert!(!findings(&f).iter().any(|x| x.id == "route-costs"));
        let c = RouteCosts {
            fs: "ext4".into(),
            dev: 1,
            release: "7.3.4".into(),
            boot_id: "b".into(),
            refill: Cost::MsPerMib(3.5),
            collapse: Cost::MsPerMib(0.5),
        };
        f.route_costs = Ok(c.clone());
        let r = get(&findings(&f), "route-costs").clone();
        assert_eq!(r.value, "collapse in place 0.50 ms/MiB, evict + refill 3.50 ms/MiB");
        assert!(
            r.meaning.starts_with("`run` collapses text in place before"),
            "{}",
            r.meaning
        );
        f.route_costs = Ok(RouteCosts {
            collapse: Cost::No("EINVAL: this kernel does not collapse file text".into()),
            ..c
        });
        let r = get(&findings(&f), "route-costs").clone();
        assert!(
            r.value.starts_with("collapse in place not possible (EINVAL"),
            "{}",
            r.value
        );
        assert_eq!(r.meaning, "`run` tries evict + refill before collapse in place");
    }

    #[test]
    fn collapse_refused_works_or_does_nothing() {
        let v = findings(&facts());
        let c = get(&v, "madv-collapse");
        assert_eq!(c.status, Status::No);
        assert_eq!(
            c.value,
            "EINVAL (not supported for file text on this kernel) (CONFIG_READ_ONLY_THP_FOR_FS is not set)"
        );
        let mut f = facts();
        f.read_only_thp_for_fs = Some("y".into());
        (probe(&mut f).collapse_kb, probe(&mut f).collapse_error) = (Some(4096), None);
        let c = get(&findings(&f), "madv-collapse").clone();
        assert_eq!(
            (c.status, c.value.as_str()),
            (Status::Ok, "works (4096 kB collapsed) (CONFIG_READ_ONLY_THP_FOR_FS=y)")
        );
        probe(&mut f).collapse_kb = Some(0);
        f.read_only_thp_for_fs = None;
        let c = get(&findings(&f), "madv-collapse").clone();
        assert_eq!(
            (c.status, c.value.as_str()),
            (Status::Warn, "accepted but nothing PMD-mapped after a refault")
        );
    }

    #[test]
    fn old_kernel_and_old_glibc() {
        let mut f = facts();
        (f.release, f.version, f.glibc, f.pagemap_scan) =
            ("5.15.0".into(), KernelVersion::parse("5.15.0"), Some((2, 31)), false);
        let v = findings(&f);
        let k = get(&v, "kernel");
        assert_eq!(k.status, Status::Warn);
        assert!(
            k.meaning.contains("older than 5.18") && !k.meaning.contains("PAGEMAP_SCAN"),
            "{k:?}"
        );
        assert_eq!(get(&v, "glibc").status, Status::Warn);
        assert_eq!(get(&v, "pagemap-scan").status, Status::Info);
        f.glibc = None;
        assert_eq!(get(&findings(&f), "glibc").value, "not glibc");
    }

    #[test]
    fn thp_never_or_absent() {
        let mut f = facts();
        f.thp_enabled = Some(ThpMode::Never);
        assert_eq!(get(&findings(&f), "thp").status, Status::Warn);
        (f.thp_enabled, f.thp_sizes, f.shmem_enabled) = (None, vec![], None);
        let v = findings(&f);
        assert_eq!(get(&v, "thp").status, Status::No);
        assert!(!v.iter().any(|x| x.id == "thp-sizes" || x.id == "shmem"));
    }

    #[test]
    fn probe_not_possible() {
        let mut f = facts();
        f.probe = Err(Error::Permission("cannot create a scratch file in /srv: Read-only file system".into()).into());
        let v = findings(&f);
        let fs = get(&v, "fs-large-folios");
        assert_eq!(fs.status, Status::Warn);
        assert!(fs.value.starts_with("not probed: cannot create") && fs.meaning.contains("(default: /srv)"));
        assert!(!v.iter().any(|x| x.id == "pmd-map" || x.id == "madv-collapse"));
    }
}
