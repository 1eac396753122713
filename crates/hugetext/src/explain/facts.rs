//! Gathering: every fact read once, from the modules that own it.

use hugetext_abi::geometry;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{
    layout_of, CacheFacts, FsFacts, Khugepaged, Layout, LoaderFacts, MappingFacts, ProcessFacts, SystemFacts, UnitFacts,
};
use crate::folio::{Class, Counts, Kind};
use crate::{elf, folio, fsutil, inspect, kernel, procfs, run::remap, Error, FactError, Result};

// ---------------------------------------------------------------------------
// Gathering

impl SystemFacts {
    /// Read the machine's facts.
    pub fn gather() -> SystemFacts {
        SystemFacts {
            thp_enabled: kernel::thp_mode(),
            hypervisor: kernel::hypervisor(),
            itlb_multihit: kernel::cpu_vulnerability("itlb_multihit"),
            khugepaged: Khugepaged::read(),
            pmd_size: kernel::pmd_size() as u64,
            unit: kernel::unit_size() as u64,
            unit_kind: kernel::huge_unit().1,
            cont_pte: kernel::cont_pte_size().map(|b| b as u64),
        }
    }
}

/// Per-filesystem facts, probed once per directory's filesystem; what each
/// ELF interpreter supports, asked once; per file (the inode a mapping
/// maps), its layout's segments and filesystem, read once however many
/// mappings map it; per mapped range of a file, its page cache, scanned
/// once. The work per mapping is bounded, and the whole is linear in
/// mappings.
#[derive(Default)]
struct FsCache {
    fs: HashMap<(u64, String), FsFacts>,
    loaders: HashMap<String, Option<bool>>,
    files: HashMap<(u64, u64), FileFacts>,
    packages: HashMap<String, Option<String>>,
    cache: HashMap<RangeKey, std::result::Result<CacheFacts, FactError>>,
}

/// A range of a file: (device, inode), offset, length.
type RangeKey = ((u64, u64), u64, u64);

/// What is read once per mapped file.
#[derive(Clone)]
struct FileFacts {
    /// Executable segments: (offset, filesz, vaddr, p_align); `Err`: why not.
    segments: std::result::Result<Vec<(u64, u64, u64, u64)>, String>,
    /// A PIE or DSO every process maps congruently ([`MappingFacts::shareable`]).
    shareable: bool,
    /// Executable segments: (offset, filesz, bytes PMD-mappable after
    /// `align`).
    after_align: Vec<(u64, u64, u64)>,
    fs: FsFacts,
}

impl FsCache {
    fn get(&mut self, file: &std::fs::File, dir: &Path) -> FsFacts {
        use std::os::unix::fs::MetadataExt;
        let name = fsutil::fs_name(file);
        let dev = file.metadata().map(|m| m.dev()).unwrap_or(0);
        self.fs
            .entry((dev, name.clone()))
            .or_insert_with(|| {
                let pmd_folios = crate::pagecache::probe_pmd_folios(dir);
                FsFacts {
                    // Asked only where it can matter: text in small folios on
                    // a filesystem that gives PMD folios.
                    collapse_in_place: match pmd_folios {
                        Some(true) => crate::pagecache::collapse_supported(dir).ok().map(|c| c.is_available()),
                        _ => None,
                    },
                    pmd_folios,
                    name,
                }
            })
            .clone()
    }
}

/// kB mapped huge (by a PMD; where the unit is the contpte block, by
/// aligned PTEs of folios of at least the block, which arm64 maps with
/// contiguous-PTE entries), in other large folios, in base pages, unknown.
fn kb_of(counts: &Counts) -> (u64, u64, u64, u64) {
    let ps = kernel::page_size() as u64 / 1024;
    let (unit, unit_kind) = kernel::huge_unit();
    let unit_order = (unit / kernel::page_size()).trailing_zeros();
    let (mut pmd, mut large, mut base, mut unknown) = (0, 0, 0, 0);
    for kind in Kind::ALL {
        for class in counts.classes(kind, false) {
            let kb = counts.get(kind, class) * ps;
            match class {
                Class::PmdAligned | Class::Hugetlb => pmd += kb,
                Class::PteAligned(o) if unit_kind == crate::elf::HugeUnit::Contpte && o >= unit_order => pmd += kb,
                Class::BasePage => base += kb,
                Class::PteUnknown => unknown += kb,
                Class::Partial | Class::PteAligned(_) | Class::PteUnaligned(_) => large += kb,
            }
        }
    }
    (pmd, large, base, unknown)
}

fn mapping_facts(pid: i32, t: &remap::TextMapping, offset: u64, fs_cache: &mut FsCache) -> MappingFacts {
    // Congruence and windows modulo the unit of huge text.
    let unit = kernel::unit_size() as u64;
    let mut m = MappingFacts {
        start: t.start,
        end: t.end,
        offset,
        path: t.path.clone(),
        under_root: (t.path.starts_with('/') && procfs::other_root(pid)).then(|| format!("/proc/{pid}/root{}", t.path)),
        copied: t.copied,
        store_copy: inspect::store_copy_of(&t.path),
        ..Default::default()
    };
    if t.copied {
        m.layout = None;
        return m;
    }
    // The inode this process maps (the path may name a newer file by now),
    // opened once: its headers, filesystem and page cache are all read from
    // this descriptor. The kernel's link to it opens the mapped inode itself;
    // the path from maps is opened as any path from /proc (no link, no FIFO,
    // no blocking).
    let mapped = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", t.start, t.end));
    let named = procfs::name_path(&t.path);
    let (file_path, opened) = match std::fs::File::open(&mapped) {
        Ok(f) => (mapped, Ok(f)),
        Err(_) => {
            let f = crate::openfile::open_regular(&named, crate::openfile::Follow::No)
                .map_err(|e| FactError::from(Error::io(&named, e)));
            (named.clone(), f)
        }
    };
    // The inode this mapping maps: read once for all its mappings.
    let key = opened.as_ref().ok().and_then(|f| {
        use std::os::unix::fs::MetadataExt;
        f.metadata().ok().map(|md| (md.dev(), md.ino()))
    });
    let facts = opened.as_ref().map_err(FactError::clone).map(|file| match key {
        Some(key) => {
            if !fs_cache.files.contains_key(&key) {
                let facts = file_facts(file, &file_path, &named, fs_cache);
                fs_cache.files.insert(key, facts.clone());
                return facts;
            }
            fs_cache.files[&key].clone()
        }
        None => file_facts(file, &file_path, &named, fs_cache),
    });
    m.shareable = facts.as_ref().is_ok_and(|f| f.shareable);
    let segments = facts
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|f| f.segments.clone());
    let page = kernel::page_size() as u64;
    m.layout = Some(match segments {
        Ok(segs) => layout_of(t.start, offset, &segs, unit, page),
        Err(why) => match layout_of(t.start, offset, &[], unit, page) {
            Layout::Congruent => Layout::Congruent,
            _ => Layout::NotCongruent { why },
        },
    });
    let len = t.end - t.start;
    if let Ok(f) = &facts {
        m.after_align_kb = after_align_kb(&f.after_align, offset, len);
    }
    m.fs = facts.ok().map(|f| f.fs);
    // Who owns a file `align` would rewrite (not for the others: the lists
    // are megabytes).
    if matches!(m.layout, Some(Layout::Skewed { .. }) | Some(Layout::BaseBreaks { .. })) {
        m.package = fs_cache
            .packages
            .entry(t.path.clone())
            .or_insert_with(|| dpkg_owner(&t.path))
            .clone();
    }
    let scan = |file: &std::fs::File| {
        folio::scan_open(file, &file_path, Some(offset..offset + len))
            .map(|f| CacheFacts {
                windows: f.total_windows,
                unit_windows: f.unit_windows.len() as u64,
                folios_kb: f.folios_kb.clone(),
                // Filled in for every file at once (fill_blockers).
                blockers: Vec::new(),
            })
            .map_err(FactError::from)
    };
    m.cache = Some(match (&opened, key) {
        (Err(e), _) => Err(e.clone()),
        (Ok(file), Some(key)) => fs_cache
            .cache
            .entry((key, offset, len))
            .or_insert_with(|| scan(file))
            .clone(),
        (Ok(file), None) => scan(file),
    });
    m
}

/// The facts of one mapped file: its executable segments and filesystem.
fn file_facts(file: &std::fs::File, file_path: &Path, named: &Path, fs_cache: &mut FsCache) -> FileFacts {
    // Text mappings map executable segments; a read-only segment before
    // the text can share its first page.
    let report = elf::check_open(file_path, file).map_err(|e| e.to_string());
    let segments = report.as_ref().map_err(String::clone).map(|r| {
        r.segments
            .iter()
            .filter(|s| s.executable)
            .map(|s| (s.offset, s.filesz, s.vaddr, s.p_align))
            .collect::<Vec<_>>()
    });
    let after_align = report
        .as_ref()
        .map(|r| {
            r.segments
                .iter()
                .filter(|s| s.executable)
                .map(|s| (s.offset, s.filesz, s.unit_mappable_bytes_after_align))
                .collect()
        })
        .unwrap_or_default();
    // Every process maps it at the same offset modulo the unit: placed by
    // the kernel or ld.so at a base aligned to p_align (at least the unit),
    // every executable segment congruent.
    let unit = kernel::unit_size() as u64;
    let shareable = report.as_ref().is_ok_and(|r| {
        use elf::check::{BaseAlignment, FileKind};
        matches!(r.kind, FileKind::Pie | FileKind::StaticPie | FileKind::SharedLibrary)
            && r.base == BaseAlignment::Aligned
            && r.max_p_align >= unit
    }) && segments.as_ref().is_ok_and(|s| {
        !s.is_empty()
            && s.iter()
                .all(|&(off, _, vaddr, _)| geometry::congruent(vaddr, off, unit))
    });
    let dir = named.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut fs = fs_cache.get(file, &dir);
    // An overlay maps the file of the layer it comes from: that filesystem decides.
    if fs.name == "overlayfs" {
        if let Some(layer) = fsutil::overlay_layer_of(named) {
            if let Ok(real) = crate::openfile::open_regular(&layer, crate::openfile::Follow::Yes) {
                let under = fs_cache.get(&real, layer.parent().unwrap_or(Path::new("/")));
                fs = FsFacts {
                    name: format!("overlayfs over {} ({})", under.name, layer.display()),
                    pmd_folios: under.pmd_folios,
                    collapse_in_place: under.collapse_in_place,
                };
            }
        }
    }
    FileFacts {
        segments,
        shareable,
        after_align,
        fs,
    }
}

/// Pure: kB PMD-mappable after `align` of the executable segments
/// `(offset, filesz, bytes)` that the file range `[offset, offset + len)`
/// maps.
fn after_align_kb(segments: &[(u64, u64, u64)], offset: u64, len: u64) -> Option<u64> {
    let mut hit = false;
    let mut bytes = 0;
    for &(o, n, b) in segments {
        if o < offset + len && offset < o + n {
            hit = true;
            bytes += b;
        }
    }
    hit.then_some(bytes / 1024)
}

/// The Debian package that owns `path`, from dpkg's file lists
/// (`/var/lib/dpkg/info/PKG[:ARCH].list`; on a merged-/usr system a file
/// of `/usr/bin` may be listed under `/bin`). `None` without dpkg.
pub fn dpkg_owner(path: &str) -> Option<String> {
    let mut names = vec![path.to_string()];
    if let Some(rest) = path.strip_prefix("/usr") {
        if ["/bin/", "/sbin/", "/lib"].iter().any(|p| rest.starts_with(p)) {
            names.push(rest.to_string());
        }
    }
    for e in std::fs::read_dir("/var/lib/dpkg/info").ok()?.flatten() {
        let file = e.file_name();
        let Some(pkg) = file.to_str().and_then(|n| n.strip_suffix(".list")) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if text.lines().any(|l| names.iter().any(|n| n == l)) {
            return Some(pkg.split(':').next().unwrap_or(pkg).to_string());
        }
    }
    None
}

/// The processes mapping each file whose page cache was read (they keep
/// its small folios from being evicted by `warm`): one pass over every
/// process's maps for all the files of all `procs`, not one per mapping.
fn fill_blockers(procs: &mut [ProcessFacts], keys: &[Vec<Option<procfs::MapsKey>>]) {
    let wanted: std::collections::HashSet<procfs::MapsKey> = keys.iter().flatten().flatten().copied().collect();
    let by_file = procfs::mapping_pids_many(&wanted);
    for (p, keys) in procs.iter_mut().zip(keys) {
        for (m, key) in p.mappings.iter_mut().zip(keys) {
            if let (Some(Ok(c)), Some(key)) = (&mut m.cache, key) {
                c.blockers = by_file.get(key).cloned().unwrap_or_default();
            }
        }
    }
}

/// Gather the facts of one process: its text mappings, their backing,
/// layout, filesystem and page cache. A missing process, a zombie or a
/// kernel thread is an error with one line that says so.
pub fn gather_process(pid: i32) -> Result<ProcessFacts> {
    let mut fs_cache = FsCache::default();
    let (p, keys) = gather_one(pid, &mut fs_cache)?;
    let mut procs = [p];
    fill_blockers(&mut procs, &[keys]);
    let [p] = procs;
    Ok(p)
}

/// The systemd unit in a `/proc/PID/cgroup` text: the last `.service` or
/// `.scope` component of the unified (`0::`) or `name=systemd` hierarchy. Pure.
pub fn unit_of_cgroup(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            (ctl.is_empty() || ctl == "name=systemd").then_some(path)
        })
        .flat_map(|path| path.rsplit('/'))
        .find(|c| c.ends_with(".service") || c.ends_with(".scope"))
        .map(str::to_string)
}

/// Whether the ELF interpreter `path` knows `glibc.elf.thp`: `ld.so
/// --list-tunables` (glibc 2.33 and later) lists every tunable it has.
fn loader_knows_elf_thp(path: &Path) -> Option<bool> {
    let out = std::process::Command::new(path)
        .arg("--list-tunables")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    (out.status.success() && text.contains("glibc.")).then(|| text.lines().any(|l| l.starts_with("glibc.elf.thp:")))
}

/// The user's own `GLIBC_TUNABLES` of a process; `None` when unset or its
/// environment is unreadable.
fn glibc_tunables_of(pid: i32) -> Option<String> {
    user_tunables(&std::fs::read(format!("/proc/{pid}/environ")).ok()?)
}

/// The user's own `GLIBC_TUNABLES` in an environment block (NUL-separated):
/// where `hugetext run` added its tunable and the note of what was there
/// before is still in the environment (a process run with `--inherit`, a
/// wrapper being followed), what was there before. Pure.
pub fn user_tunables(env: &[u8]) -> Option<String> {
    use hugetext_abi::env;
    let find = |name: &str| {
        env.split(|b| *b == 0)
            .find_map(|v| v.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
    };
    let cur = find(env::GLIBC_TUNABLES)?;
    let own = match find(hugetext_abi::settings::TUNABLES).and_then(|note| env::tunables_restore(note, Some(cur))) {
        Some(None) => return None,
        Some(Some(n)) => &cur[..n],
        None => cur,
    };
    Some(String::from_utf8_lossy(own).into_owned())
}

/// The unit of process `pid` and its `MemoryTHP=`, where systemd runs the
/// machine (`/run/systemd/system`, as sd_booted() checks).
fn unit_of(pid: i32) -> Option<UnitFacts> {
    if !Path::new("/run/systemd/system").is_dir() {
        return None;
    }
    let name = unit_of_cgroup(&crate::procfs::read_proc_names(Some(pid), "cgroup").ok()?)?;
    let memory_thp = std::process::Command::new("systemctl")
        .args(["show", "--property=MemoryTHP", "--value", &name])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty());
    Some(UnitFacts { name, memory_thp })
}

/// One process's facts, and for each of its mappings the file whose
/// blockers [`fill_blockers`] finds (as maps names it).
type Gathered = (ProcessFacts, Vec<Option<procfs::MapsKey>>);

fn gather_one(pid: i32, fs_cache: &mut FsCache) -> Result<Gathered> {
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
    // smaps read once: the mappings, the text among them, their VmFlags.
    let smaps_text = procfs::read_proc_names(Some(pid), "smaps")?;
    let smaps = procfs::parse_smaps(&smaps_text);
    let flags = procfs::parse_vm_flags(&smaps_text);
    drop(smaps_text);
    let texts = remap::text_mappings_in(&smaps);
    let vmas: Vec<procfs::Vma> = smaps.into_iter().map(|(v, _)| v).collect();
    // Looked up by start address: one pass each, whatever the number of
    // mappings.
    let by_start: HashMap<u64, &procfs::Vma> = vmas.iter().map(|v| (v.start, v)).collect();
    let advice: HashMap<u64, (bool, bool)> = flags
        .into_iter()
        .map(|(start, f)| {
            let has = |flag: &str| f.iter().any(|x| x == flag);
            (start, (has("nh"), has("hg")))
        })
        .collect();
    // kB by backing per mapping, kept as four numbers each (not inspect's
    // counts per mapping: tens of thousands of mappings stay small).
    let mut kb: HashMap<u64, (u64, u64, u64, u64)> = HashMap::new();
    let mut shmem: std::collections::HashSet<u64> = Default::default();
    inspect::inspect_each(
        &inspect::Options {
            target: inspect::Target::Pids(vec![pid]),
            all: false,
            cont_orders: Vec::new(),
            mappings: false,
            method: None,
        },
        &(),
        &mut |_, vma, counts| {
            kb.insert(vma.start, kb_of(counts));
            if counts.total(Kind::Shmem) > 0 {
                shmem.insert(vma.start);
            }
        },
    )?;
    let pagemap_path = PathBuf::from(format!("/proc/{pid}/pagemap"));
    let pagemap = std::fs::File::open(&pagemap_path).ok();
    let mut mappings = Vec::with_capacity(texts.len());
    let mut keys = Vec::with_capacity(texts.len());
    for t in &texts {
        let vma = by_start.get(&t.start);
        let offset = vma.map_or(0, |v| v.offset);
        let mut m = mapping_facts(pid, t, offset, fs_cache);
        if let Some(&k) = kb.get(&t.start) {
            (m.unit_mapped_kb, m.pte_large_kb, m.base_kb, m.pte_unknown_kb) = k;
        }
        (m.nohugepage, m.hugepage) = advice.get(&t.start).copied().unwrap_or_default();
        m.shmem = !t.copied && shmem.contains(&t.start);
        m.unmapped_windows = pagemap
            .as_ref()
            .and_then(|pm| inspect::unmapped_windows(pm, &pagemap_path, t.start, t.end).ok())
            .unwrap_or(0);
        keys.push(
            vma.filter(|v| !t.copied && v.is_file())
                .map(|v| (v.dev_major, v.dev_minor, v.inode)),
        );
        mappings.push(m);
    }
    let loader = vmas
        .iter()
        .find(|v| {
            v.is_exec()
                && v.file_path()
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("ld-") && n.contains(".so"))
        })
        .map(|v| {
            let elf_thp = fs_cache
                .loaders
                .entry(v.path.clone())
                .or_insert_with(|| {
                    loader_knows_elf_thp(
                        &Path::new(&format!("/proc/{pid}/root"))
                            .join(v.file_path().strip_prefix("/").unwrap_or(Path::new(""))),
                    )
                })
                .to_owned();
            LoaderFacts {
                path: v.path.clone(),
                elf_thp,
            }
        });
    Ok((
        ProcessFacts {
            pid,
            comm: st.comm,
            thp_disabled,
            exe: procfs::read_exe(pid),
            loader,
            glibc_tunables: glibc_tunables_of(pid),
            unit: unit_of(pid),
            mappings,
        },
        keys,
    ))
}

/// Gather the facts of several processes (the filesystem experiment runs
/// once per filesystem). With `strict`, the first process that cannot be
/// explained is an error; otherwise it is skipped and counted (a cgroup's
/// kernel threads, zombies, processes that exited meanwhile).
pub fn gather(pids: &[i32], strict: bool) -> Result<(Vec<ProcessFacts>, u64)> {
    let mut fs_cache = FsCache::default();
    let (mut out, mut keys, mut skipped) = (Vec::new(), Vec::new(), 0);
    for &pid in pids {
        match gather_one(pid, &mut fs_cache) {
            Ok((p, k)) => {
                out.push(p);
                keys.push(k);
            }
            Err(e) if strict => return Err(e),
            Err(_) => skipped += 1,
        }
    }
    fill_blockers(&mut out, &keys);
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
        .map(|l| procfs::path_name(&l))
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

    #[test]
    fn unit_from_cgroup_v1_and_v2() {
        assert_eq!(
            unit_of_cgroup("0::/system.slice/nginx.service\n").as_deref(),
            Some("nginx.service")
        );
        assert_eq!(
            unit_of_cgroup("4:memory:/x\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n0::/\n").as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(unit_of_cgroup("4:memory:/a.service\n0::/\n"), None);
    }
}

#[cfg(test)]
mod user_tunables_tests {
    use super::user_tunables;

    #[test]
    fn hugetext_s_tunable_is_not_the_user_s() {
        let tls = "glibc.rtld.optional_static_tls=612";
        let ours = format!("A=1\0GLIBC_TUNABLES={tls}\0HUGETEXT_TUNABLES=-\0");
        assert_eq!(user_tunables(ours.as_bytes()), None);
        let both = format!("GLIBC_TUNABLES=glibc.malloc.arena_max=2:{tls}\0HUGETEXT_TUNABLES=24\0");
        assert_eq!(
            user_tunables(both.as_bytes()).as_deref(),
            Some("glibc.malloc.arena_max=2")
        );
        let user = "GLIBC_TUNABLES=glibc.malloc.arena_max=2\0";
        assert_eq!(
            user_tunables(user.as_bytes()).as_deref(),
            Some("glibc.malloc.arena_max=2")
        );
        assert_eq!(user_tunables(b"A=1\0"), None);
    }
}
