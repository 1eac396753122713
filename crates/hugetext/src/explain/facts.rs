//! Gathering: every fact read once, from the modules that own it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{
    layout_of, CacheFacts, FsFacts, Khugepaged, Layout, LoaderFacts, MappingFacts, ProcessFacts, SystemFacts, UnitFacts,
};
use crate::folio::{Class, Counts, Kind};
use crate::{elf, folio, fsutil, inspect, kernel, procfs, remap, Error, FactError, Result};

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
/// ELF interpreter supports, asked once.
#[derive(Default)]
struct FsCache {
    fs: HashMap<(u64, String), FsFacts>,
    loaders: HashMap<String, Option<bool>>,
}

impl FsCache {
    fn get(&mut self, file: &std::fs::File, dir: &Path) -> FsFacts {
        use std::os::unix::fs::MetadataExt;
        let name = fsutil::fs_name(file);
        let dev = file.metadata().map(|m| m.dev()).unwrap_or(0);
        self.fs
            .entry((dev, name.clone()))
            .or_insert_with(|| {
                let pmd_folios = fsutil::probe_pmd_folios(dir);
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

/// Whole windows of the unit of huge text in `[start, end)` in process
/// `pid` with no page present (pagemap's present bit; readable without
/// privilege).
fn unmapped_windows(pid: i32, start: u64, end: u64) -> Result<u64> {
    let pmd = kernel::unit_size() as u64;
    let per = (pmd / kernel::page_size() as u64) as usize;
    let (ws, we) = (start.div_ceil(pmd) * pmd, end / pmd * pmd);
    if ws >= we {
        return Ok(0);
    }
    let words = folio::read_pagemap(Some(pid), ws as usize, ((we - ws) / pmd) as usize * per)?;
    Ok(words
        .chunks(per)
        .filter(|w| w.iter().all(|&x| x & folio::PM_PRESENT == 0))
        .count() as u64)
}

/// kB mapped huge (by a PMD; where the unit is the contpte block, by
/// aligned PTEs of folios of at least the block, which arm64 maps with
/// contiguous-PTE entries), in other large folios, in base pages, unknown.
fn kb_of(counts: &Counts) -> (u64, u64, u64, u64) {
    let ps = kernel::page_size() as u64 / 1024;
    let (unit, unit_kind) = kernel::huge_unit();
    let unit_order = (unit / kernel::page_size()).trailing_zeros();
    let (mut pmd, mut large, mut base, mut unknown) = (0, 0, 0, 0);
    for kind in [Kind::File, Kind::Anon] {
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
    let pmd = kernel::unit_size() as u64;
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
    // Text mappings map executable segments; a read-only segment before
    // the text can share its first page.
    let segments = opened.as_ref().map_err(|e| e.to_string()).and_then(|f| {
        elf::check_open(&file_path, f)
            .map(|r| {
                r.segments
                    .iter()
                    .filter(|s| s.executable)
                    .map(|s| (s.offset, s.filesz, s.vaddr, s.p_align))
                    .collect::<Vec<_>>()
            })
            .map_err(|e| e.to_string())
    });
    let page = kernel::page_size() as u64;
    m.layout = Some(match segments {
        Ok(segs) => layout_of(t.start, offset, &segs, pmd, page),
        Err(why) => match layout_of(t.start, offset, &[], pmd, page) {
            Layout::Congruent => Layout::Congruent,
            _ => Layout::NotCongruent { why },
        },
    });
    if let Ok(file) = &opened {
        let dir = named.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mut fs = fs_cache.get(file, &dir);
        // An overlay maps the file of the layer it comes from: that filesystem decides.
        if fs.name == "overlayfs" {
            if let Some(layer) = fsutil::overlay_layer_of(&named) {
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
        m.fs = Some(fs);
    }
    let len = t.end - t.start;
    m.cache = Some(opened.as_ref().map_err(FactError::clone).and_then(|file| {
        folio::scan_open(file, &file_path, Some(offset..offset + len))
            .map(|f| CacheFacts {
                windows: f.total_windows,
                pmd_windows: f.pmd_windows.len() as u64,
                folios_kb: f.folios_kb.clone(),
                blockers: procfs::mapping_pids_file(file).unwrap_or_default(),
            })
            .map_err(FactError::from)
    }));
    m
}

/// Gather the facts of one process: its text mappings, their backing,
/// layout, filesystem and page cache. A missing process, a zombie or a
/// kernel thread is an error with one line that says so.
pub fn gather_process(pid: i32) -> Result<ProcessFacts> {
    let mut fs_cache = FsCache::default();
    gather_one(pid, &mut fs_cache)
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
    let own = match find(env::TUNABLES).and_then(|note| env::tunables_restore(note, Some(cur))) {
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
    let texts = remap::text_mappings(pid)?;
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
        let has = |flag: &str| flags.iter().any(|(s, f)| *s == t.start && f.iter().any(|x| x == flag));
        m.nohugepage = has("nh");
        m.hugepage = has("hg");
        m.unmapped_windows = unmapped_windows(pid, t.start, t.end).unwrap_or(0);
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
    Ok(ProcessFacts {
        pid,
        comm: st.comm,
        thp_disabled,
        exe: procfs::read_exe(pid),
        loader,
        glibc_tunables: glibc_tunables_of(pid),
        unit: unit_of(pid),
        mappings,
    })
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
