//! What `hugetext run` can tell before it execs a program: whether the
//! preload will reach it (static linking, secure-execution mode), whether
//! the kernel can name copied text, and what the copy route costs each
//! process that takes it. Decisions are pure functions of gathered facts.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::elf::{self, FileKind};
use crate::run::remap::Strategy;

/// Why the dynamic loader runs a program in secure-execution mode
/// (`AT_SECURE`), ignoring `LD_PRELOAD` and `LD_AUDIT` given by path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secure {
    /// Set-user-ID to another user than the one starting it.
    SetUid { owner: u32 },
    /// Set-group-ID to another group than the starter's.
    SetGid { group: u32 },
    /// File capabilities, started by a user other than root.
    FileCaps,
}

/// What decides secure execution: the file's mode, owner and capabilities,
/// the mount's `nosuid`, and the credentials of the process that execs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecFacts {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// `security.capability` grants something (permitted or effective).
    pub file_caps: bool,
    pub nosuid: bool,
    pub ruid: u32,
    pub euid: u32,
    pub rgid: u32,
    pub egid: u32,
}

/// Pure: the kernel's rule (security/commoncap.c, `cap_bprm_creds_from_file`):
/// secure execution when the new effective user (group) differs from the
/// real one, or when a non-root user gains file capabilities.
pub fn secure_exec(f: &ExecFacts) -> Option<Secure> {
    let suid = f.mode & 0o4000 != 0 && !f.nosuid;
    // Set-group-ID without group execute is mandatory locking, not set-id.
    let sgid = f.mode & 0o2000 != 0 && f.mode & 0o010 != 0 && !f.nosuid;
    let euid = if suid { f.uid } else { f.euid };
    let egid = if sgid { f.gid } else { f.egid };
    if euid != f.ruid {
        Some(Secure::SetUid { owner: f.uid })
    } else if egid != f.rgid {
        Some(Secure::SetGid { group: f.gid })
    } else if f.file_caps && f.ruid != 0 && !f.nosuid {
        Some(Secure::FileCaps)
    } else {
        None
    }
}

/// Pure: does a `security.capability` value grant anything? (`vfs_cap_data`:
/// magic with the effective flag, then permitted/inheritable pairs.)
fn caps_grant(xattr: &[u8]) -> bool {
    let word = |i: usize| {
        xattr
            .get(i..i + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    word(0) & 1 != 0 || word(4) != 0 || word(12) != 0
}

/// The facts of `program` as the current process would exec it.
pub fn exec_facts(program: &Path) -> Option<ExecFacts> {
    let md = std::fs::metadata(program).ok()?;
    let mut buf = [0u8; 64];
    let file_caps = rustix::fs::getxattr(program, "security.capability", &mut buf[..])
        .is_ok_and(|n| caps_grant(&buf[..n.min(buf.len())]));
    let nosuid = rustix::fs::statvfs(program).is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::NOSUID));
    Some(ExecFacts {
        mode: md.mode(),
        uid: md.uid(),
        gid: md.gid(),
        file_caps,
        nosuid,
        ruid: rustix::process::getuid().as_raw(),
        euid: rustix::process::geteuid().as_raw(),
        rgid: rustix::process::getgid().as_raw(),
        egid: rustix::process::getegid().as_raw(),
    })
}

/// The warning `run` prints for a program in secure-execution mode.
pub fn secure_warning(program: &str, why: Secure) -> String {
    let what = match why {
        Secure::SetUid { owner } => {
            format!("is set-user-ID (owner uid {owner}, not the uid starting it)")
        }
        Secure::SetGid { group } => {
            format!("is set-group-ID (group gid {group}, not the gid starting it)")
        }
        Secure::FileCaps => "has file capabilities and is started by a user other than root".to_string(),
    };
    format!(
        "{program} {what}: it runs in secure-execution mode, where the dynamic loader ignores the preload and LD_AUDIT: it runs unchanged"
    )
}

/// Pure: the `-v` note for a set-ID or file-capability program that is not
/// in secure-execution mode (its owner starting it; root): the preload runs.
pub fn not_secure_note(program: &str, f: &ExecFacts) -> Option<String> {
    let setid = f.mode & 0o6000 != 0;
    (secure_exec(f).is_none() && (setid || f.file_caps)).then(|| {
        format!(
            "{program} is {} but started by uid {} it does not run in secure-execution mode: the preload runs",
            if setid { "set-ID" } else { "file-capability" },
            f.ruid
        )
    })
}

/// Text of an ELF file's executable segments, in bytes of whole PMD
/// windows: all of them, and those congruent in the file with a base
/// that keeps them so (the zero-copy routes can serve those).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileText {
    pub path: PathBuf,
    pub kind: FileKind,
    pub whole: u64,
    pub congruent: u64,
    /// Congruent once rewritten by `hugetext align`.
    pub after_align: u64,
}

/// Read `path`'s executable segments (`hugetext check`'s figures).
pub fn file_text(path: &Path) -> Option<FileText> {
    let r = elf::check_file(path).ok()?;
    let pmd = r.target.pmd_size;
    let exec = || r.segments.iter().filter(|s| s.executable);
    Some(FileText {
        path: path.to_path_buf(),
        kind: r.kind,
        whole: exec().map(|s| s.whole_windows * pmd).sum(),
        congruent: exec().map(|s| s.unit_mappable_bytes).sum(),
        after_align: exec().map(|s| s.unit_mappable_bytes_after_align).sum(),
    })
}

/// Pure: what a statically linked program's warning adds: what does work.
pub fn static_advice(program: &str, t: Option<&FileText>) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    match t {
        Some(t) if t.congruent > 0 => format!(
            "its text is 2 MiB-congruent ({:.1} MiB in whole windows): `hugetext warm {program}` puts it in 2 MiB page-cache folios, which the kernel maps with PMDs at every start, no preload needed",
            mib(t.congruent)
        ),
        Some(t) if t.after_align > 0 => format!(
            "`hugetext align {program}`, then `hugetext warm {program}`, would get {:.1} MiB of its text mapped with PMDs at every start, no preload needed",
            mib(t.after_align)
        ),
        Some(_) => "its text has no whole 2 MiB window: nothing to gain".to_string(),
        None => format!("`hugetext check {program}` says whether `warm` (congruent text) or `align` helps"),
    }
}

/// What one process of a program costs when it takes the copy route:
/// private bytes (copied text) and bytes the zero-copy routes share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyCost {
    pub private: u64,
    pub shared: u64,
}

/// Pure: the per-process cost of the program's and its libraries' text
/// under `strategy` (`gdb`: nothing is ever copied).
pub fn copy_cost(files: &[FileText], strategy: Strategy, gdb: bool) -> CopyCost {
    let copies = !gdb && matches!(strategy, Strategy::Auto | Strategy::Copy);
    files.iter().fold(CopyCost::default(), |c, f| {
        let shareable = if strategy == Strategy::Copy { 0 } else { f.congruent };
        let copied = if copies { f.whole - shareable } else { 0 };
        CopyCost {
            private: c.private + copied,
            shared: c.shared + shareable,
        }
    })
}

/// The program and the libraries it needs at start, with their text.
pub fn start_text(program: &Path) -> Vec<FileText> {
    let deps = elf::deps::resolve_deps(program).unwrap_or_default();
    std::iter::once(program.to_path_buf())
        .chain(deps)
        .filter_map(|p| file_text(&p))
        .collect()
}

/// Pure: `run -v --inherit`'s line on what each child costs.
pub fn inherit_cost_line(program: &str, files: &[FileText], cost: CopyCost) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut worst: Vec<&FileText> = files.iter().filter(|f| f.whole > f.congruent).collect();
    worst.sort_by_key(|f| std::cmp::Reverse(f.whole - f.congruent));
    let named: Vec<String> = worst
        .iter()
        .take(3)
        .map(|f| {
            let name = f
                .path
                .file_name()
                .map_or_else(|| f.path.display().to_string(), |n| n.to_string_lossy().into());
            format!("{name} {:.1}", mib(f.whole - f.congruent))
        })
        .collect();
    let detail = match named.is_empty() {
        true => String::new(),
        false => format!(
            " (not 2 MiB-congruent, MiB: {}; `hugetext align` makes them shareable)",
            named.join(", ")
        ),
    };
    format!(
        "--inherit: every child process that execs {program} copies {:.1} MiB of text into private memory{detail}, and shares {:.1} MiB through the page cache; libraries it loads later (dlopen) come on top",
        mib(cost.private),
        mib(cost.shared)
    )
}

/// Whether to tell the preload not to name copies (`HUGETEXT_NAME=0`):
/// this kernel cannot name anonymous memory ([`anon_vma_names`]) and the
/// variable is not set.
pub fn naming_off() -> bool {
    std::env::var_os(hugetext_abi::settings::NAME).is_none() && !anon_vma_names()
}

/// Can this kernel name anonymous memory (`PR_SET_VMA_ANON_NAME`, needs
/// `CONFIG_ANON_VMA_NAME`)? Without it, copied text shows as unnamed
/// anonymous memory in `/proc/PID/maps`.
pub fn anon_vma_names() -> bool {
    const PR_SET_VMA: libc::c_int = 0x5356_4d41;
    const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
    let page = rustix::param::page_size();
    let Ok(m) = crate::kernel::Mapping::anon_aligned(page, libc::PROT_READ, page) else {
        return true;
    };
    // SAFETY: names our own fresh mapping; the name is NUL-terminated.
    let r = unsafe {
        libc::prctl(
            PR_SET_VMA,
            PR_SET_VMA_ANON_NAME,
            m.addr() as libc::c_ulong,
            m.len() as libc::c_ulong,
            c"hugetext-probe".as_ptr(),
        )
    };
    r == 0
}

/// The system search path in the output of `ld.so --help` (glibc 2.33 and
/// later): the lines that end with `(system search path)`. Pure.
fn parse_system_dirs(help: &str) -> Vec<PathBuf> {
    help.lines()
        .filter_map(|l| l.trim().strip_suffix("(system search path)"))
        .map(|d| PathBuf::from(d.trim()))
        .collect()
}

/// A dynamic loader's identity: a different file, or the same file
/// changed in any way, has another.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoaderId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    /// GNU build-id, hex (empty when it has none).
    pub build_id: String,
}

impl LoaderId {
    /// The identity of the open loader file.
    pub fn of(f: &std::fs::File) -> Option<LoaderId> {
        use object::Object;
        let m = f.metadata().ok()?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        let cache = object::ReadCache::new(f);
        let build_id = object::File::parse(&cache)
            .ok()
            .and_then(|o| {
                o.build_id()
                    .ok()
                    .flatten()
                    .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
            })
            .unwrap_or_default();
        Some(LoaderId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            build_id,
        })
    }
}

/// What a loader's `--help` said, kept for the next `run`: its system
/// search path, under the loader's identity.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptDirs {
    pub loader: LoaderId,
    pub dirs: Vec<PathBuf>,
}

/// Whether kept search directories can be believed: at most 64 absolute
/// paths of a sane length without control characters, and a build-id
/// that is hex. Pure.
pub fn plausible_dirs(k: &KeptDirs) -> bool {
    let sane = |d: &PathBuf| {
        d.to_str()
            .is_some_and(|s| s.starts_with('/') && s.len() <= 4096 && !s.chars().any(char::is_control))
    };
    k.dirs.len() <= 64
        && k.dirs.iter().all(sane)
        && k.loader.build_id.len() <= 128
        && k.loader.build_id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The system search path of the dynamic loader `interp`, from its
/// `--help` (empty when it does not say one). Asked once per loader file:
/// the answer is kept in the runtime directory ([`crate::fsutil::runtime_dir`])
/// under the loader's [`LoaderId`], so a later `run` with the same loader
/// starts no process. `None` when the loader cannot be asked.
pub fn loader_system_dirs(interp: &Path) -> Option<Vec<PathBuf>> {
    let id = crate::openfile::open_regular(interp, crate::openfile::Follow::Yes)
        .ok()
        .and_then(|f| LoaderId::of(&f));
    let kept = id.as_ref().and_then(|id| {
        let dir = crate::fsutil::runtime_dir()?;
        Some(dir.join(format!("loader-dirs-{:x}-{:x}.json", id.dev, id.ino)))
    });
    if let (Some(id), Some(path)) = (&id, &kept) {
        let k = crate::fsutil::read_kept(path, 64 << 10)
            .and_then(|s| serde_json::from_str::<KeptDirs>(&s).ok())
            .filter(|k| plausible_dirs(k) && k.loader == *id);
        if let Some(k) = k {
            return Some(k.dirs);
        }
    }
    // No Stdio::null(): a minimal root may have no /dev/null.
    let piped = std::process::Stdio::piped;
    let child = std::process::Command::new(interp)
        .arg("--help")
        .stdin(std::process::Stdio::inherit())
        .stdout(piped())
        .stderr(piped())
        .spawn();
    let out = child.and_then(|c| c.wait_with_output()).ok()?;
    let dirs = parse_system_dirs(&String::from_utf8_lossy(&out.stdout));
    if let (Some(loader), Some(path), true) = (id, &kept, out.status.success()) {
        let k = KeptDirs {
            loader,
            dirs: dirs.clone(),
        };
        if let Ok(json) = serde_json::to_string(&k).map(|j| j.into_bytes()) {
            if plausible_dirs(&k) {
                crate::fsutil::keep(path, ".loader-dirs-", &json);
            }
        }
    }
    Some(dirs)
}

/// What the preload needs that `program`'s dynamic loader cannot find when it
/// loads the preload as an `LD_AUDIT` module, in a namespace of its own
/// ([`elf::deps::missing_in_new_namespace`]; the loader's system directories
/// from its `--help`, [`loader_system_dirs`]). Empty for a static program,
/// or when the loader does not say its search path (then it is not
/// second-guessed).
pub fn audit_missing(program: &Path, preload: &Path) -> Vec<String> {
    let Some(interp) = elf::deps::interpreter(program) else {
        return Vec::new();
    };
    let dirs = loader_system_dirs(Path::new(&interp)).unwrap_or_default();
    if dirs.is_empty() {
        return Vec::new();
    }
    let cache = elf::deps::ld_so_cache();
    elf::deps::missing_in_new_namespace(preload, &elf::deps::ld_library_path(), &cache, &dirs)
}

/// Remove perf maps of ended processes from `dir` ([`crate::perfmaps::reap`]),
/// unless a full look through it ended less than
/// [`crate::perfmaps::REAP_EVERY`] ago: the time of the last one is the
/// modification time of `stamp` (a file of ours in the runtime directory,
/// [`crate::fsutil::read_kept`]'s rules; none: every `run` looks). The
/// stamp is renewed only when a look removed fewer than
/// [`crate::perfmaps::MAX_REMOVED`] maps (none left over). `None`: not due.
pub fn reap_perf_maps(dir: &Path, stamp: Option<&Path>, now: std::time::SystemTime) -> Option<usize> {
    use crate::perfmaps;
    let last = stamp.and_then(|p| {
        crate::fsutil::read_kept(p, 64)?;
        std::fs::symlink_metadata(p).ok()?.modified().ok()
    });
    if !perfmaps::reap_due(last, now) {
        return None;
    }
    let removed = perfmaps::reap(dir, now);
    if let (Some(p), true) = (stamp, removed < perfmaps::MAX_REMOVED) {
        crate::fsutil::keep(p, ".perfmaps-reaped-", b"");
    }
    Some(removed)
}

/// Where `run` keeps the time of its last look for perf maps to remove.
pub fn reap_stamp() -> Option<PathBuf> {
    Some(crate::fsutil::runtime_dir()?.join("perfmaps-reaped"))
}

/// The line `run` prints when the loader could not load the preload as an
/// audit module (`missing` from [`audit_missing`]), instead of ld.so's own
/// "cannot be loaded as audit interface"; `run` then sets no `LD_AUDIT`.
/// Pure.
pub fn audit_line(preload: &Path, missing: &[String]) -> Option<String> {
    (!missing.is_empty()).then(|| {
        format!(
            "objects loaded after start (dlopen) are not followed: the dynamic loader would not find {} for {} as an audit module \
             (it searches LD_LIBRARY_PATH, /etc/ld.so.cache and its system directories, not the paths already loaded); \
             run ldconfig, or put them in its system directories (ld.so --help lists them); text loaded at start is remapped as usual",
            missing.join(", "),
            preload.display()
        )
    })
}

/// The root directory a launcher that changes root runs its command in:
/// `chroot [OPTION]... NEWROOT`, `unshare --root=DIR` (`-R DIR`),
/// `nsenter --root=DIR` (`-rDIR`), or `nsenter -t PID` with `-r` or `-m`
/// (that process's root, `/proc/PID/root`). None for other programs, or
/// when the arguments name no root. Pure.
pub fn new_root(program: &std::ffi::OsStr, args: &[OsString]) -> Option<PathBuf> {
    let base = Path::new(program).file_name()?.to_str()?;
    let args: Vec<&str> = args.iter().map(|a| a.to_str()).collect::<Option<_>>()?;
    match base {
        "chroot" => {
            let mut it = args.iter();
            while let Some(a) = it.next() {
                match *a {
                    "--userspec" | "--groups" => {
                        it.next();
                    }
                    "--" => return it.next().map(PathBuf::from),
                    a if a.starts_with('-') => {}
                    a => return Some(PathBuf::from(a)),
                }
            }
            None
        }
        "unshare" | "nsenter" => {
            let (mut root, mut pid, mut whose_root) = (None, None, false);
            let mut it = args.iter();
            while let Some(a) = it.next() {
                let value = |long: &str| a.strip_prefix(long).and_then(|r| r.strip_prefix('='));
                if base == "unshare" {
                    if let Some(v) = value("--root") {
                        root = Some(v.to_string());
                    } else if *a == "--root" || *a == "-R" {
                        root = it.next().map(|s| s.to_string());
                    } else if let Some(v) = a.strip_prefix("-R") {
                        root = Some(v.to_string());
                    }
                } else if let Some(v) = value("--root") {
                    root = Some(v.to_string());
                } else if *a == "--root" || *a == "-r" || *a == "--mount" || *a == "-m" {
                    whose_root = true;
                } else if let Some(v) = a.strip_prefix("-r") {
                    root = Some(v.to_string());
                } else if let Some(v) = value("--target") {
                    pid = Some(v.to_string());
                } else if *a == "--target" || *a == "-t" {
                    pid = it.next().map(|s| s.to_string());
                } else if let Some(v) = a.strip_prefix("-t") {
                    pid = Some(v.to_string());
                }
                if !a.starts_with('-') || *a == "--" {
                    break; // the command
                }
            }
            match (root, pid) {
                (Some(r), _) => Some(PathBuf::from(r)),
                (None, Some(p)) if whose_root => Some(PathBuf::from(format!("/proc/{p}/root"))),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Does `path` (absolute) exist inside `root`? Resolved by the kernel
/// relative to the root (`RESOLVE_IN_ROOT`), so that a symbolic link in
/// the root points where it would for the command.
pub fn exists_in_root(root: &Path, path: &Path) -> bool {
    let Ok(dir) = std::fs::File::open(root) else {
        return false;
    };
    let rel = path.strip_prefix("/").unwrap_or(path);
    let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::PATH;
    match rustix::fs::openat2(
        &dir,
        rel,
        flags,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::IN_ROOT,
    ) {
        Ok(_) => true,
        // Kernels before 5.6: the plain path under the root.
        Err(rustix::io::Errno::NOSYS) => root.join(rel).exists(),
        Err(_) => false,
    }
}

/// The line `run` says when the command runs in another root that does not
/// hold the preload (it then runs the command without it).
pub fn root_line(program: &str, root: &Path, preload: &Path) -> String {
    format!(
        "warning: {program} runs its command in {}, where {} does not exist: it runs without hugetext (install libhugetext.so at that path inside the root, or use `hugetext run` there)",
        root.display(),
        preload.display()
    )
}

#[cfg(test)]
mod tests {
    /// A look through the maps directory that left nothing is not made
    /// again within a minute; a missing, or future, stamp means a look.
    #[test]
    fn perf_maps_are_looked_for_at_most_once_a_minute() {
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().unwrap();
        let maps = dir.path().join("maps");
        std::fs::create_dir(&maps).unwrap();
        let stamp = dir.path().join("stamp");
        let now = SystemTime::now();
        let map = |pid: u32| maps.join(format!("perf-{pid}.map"));
        // Pids that have ended.
        let mut dead = Vec::new();
        while dead.len() < 2 {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            let pid = c.id();
            c.wait().unwrap();
            if !Path::new(&format!("/proc/{pid}")).exists() {
                dead.push(pid);
            }
        }
        let old = now - Duration::from_secs(2 * 3600);
        let write = |pid: u32| {
            let body = [hugetext_abi::env::PERF_MAP_MARK, b"7f0000001000 40 main\n"].concat();
            std::fs::write(map(pid), body).unwrap();
            let f = std::fs::File::options().write(true).open(map(pid)).unwrap();
            f.set_modified(old).unwrap();
        };
        write(dead[0]);
        assert_eq!(reap_perf_maps(&maps, Some(&stamp), now), Some(1), "no stamp: a look");
        assert!(!map(dead[0]).exists());
        assert!(stamp.exists(), "a full look leaves a stamp");
        write(dead[1]);
        assert_eq!(
            reap_perf_maps(&maps, Some(&stamp), now),
            None,
            "within a minute: no look"
        );
        assert!(map(dead[1]).exists());
        let later = now + crate::perfmaps::REAP_EVERY + Duration::from_secs(1);
        assert_eq!(reap_perf_maps(&maps, Some(&stamp), later), Some(1));
        assert!(!map(dead[1]).exists());
        // A stamp from the future (a clock set back) does not stop a look.
        write(dead[0]);
        let f = std::fs::File::options().write(true).open(&stamp).unwrap();
        f.set_modified(now + Duration::from_secs(3600)).unwrap();
        assert_eq!(reap_perf_maps(&maps, Some(&stamp), now), Some(1));
        // Without a stamp every call looks.
        write(dead[1]);
        assert_eq!(reap_perf_maps(&maps, None, now), Some(1));
        assert_eq!(reap_perf_maps(&maps, None, now), Some(0));
    }

    /// A loader is asked for its search path once: a later `run` with the
    /// same loader file reads the kept answer and starts no process; a
    /// loader changed in place is asked again.
    #[test]
    fn a_loader_is_asked_once_until_it_changes() {
        use std::os::unix::fs::PermissionsExt;
        if crate::fsutil::runtime_dir().is_none() {
            eprintln!("no runtime directory: nothing is kept");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let asked = dir.path().join("asked");
        let loader = dir.path().join("ld.so");
        let script = |dirs: &str| {
            format!(
                "#!/bin/sh\necho x >> '{}'\nprintf '  {dirs} (system search path)\\n'\n",
                asked.display()
            )
        };
        std::fs::write(&loader, script("/lib/one")).unwrap();
        std::fs::set_permissions(&loader, std::fs::Permissions::from_mode(0o755)).unwrap();
        let times = || std::fs::read_to_string(&asked).map_or(0, |s| s.lines().count());
        let want = Some(vec![PathBuf::from("/lib/one")]);
        assert_eq!(super::loader_system_dirs(&loader), want);
        assert_eq!(super::loader_system_dirs(&loader), want);
        assert_eq!(super::loader_system_dirs(&loader), want);
        assert_eq!(times(), 1, "asked at every start");
        // The same inode, rewritten: asked again.
        std::fs::write(&loader, script("/lib/two/more")).unwrap();
        assert_eq!(
            super::loader_system_dirs(&loader),
            Some(vec![PathBuf::from("/lib/two/more")])
        );
        assert_eq!(times(), 2);
        let id = crate::openfile::open_regular(&loader, crate::openfile::Follow::Yes).unwrap();
        let id = super::LoaderId::of(&id).unwrap();
        let kept = crate::fsutil::runtime_dir()
            .unwrap()
            .join(format!("loader-dirs-{:x}-{:x}.json", id.dev, id.ino));
        // A kept answer that is not believable is not used (and is replaced).
        let forged = serde_json::json!({"loader": id, "dirs": ["relative\nline"]});
        std::fs::remove_file(&kept).unwrap();
        std::fs::write(&kept, forged.to_string()).unwrap();
        assert_eq!(
            super::loader_system_dirs(&loader),
            Some(vec![PathBuf::from("/lib/two/more")])
        );
        assert_eq!(times(), 3);
        let _ = std::fs::remove_file(&kept);
    }

    #[test]
    fn kept_search_dirs_must_be_plausible() {
        let id = super::LoaderId {
            dev: 1,
            ino: 2,
            size: 3,
            mtime_ns: 4,
            ctime_ns: 5,
            build_id: "ab12".into(),
        };
        let k = |dirs: &[&str], bid: &str| super::KeptDirs {
            loader: super::LoaderId {
                build_id: bid.into(),
                ..id.clone()
            },
            dirs: dirs.iter().map(PathBuf::from).collect(),
        };
        assert!(super::plausible_dirs(&k(&["/lib", "/usr/lib"], "ab12")));
        assert!(super::plausible_dirs(&k(&[], "")));
        assert!(!super::plausible_dirs(&k(&["lib"], "ab12")));
        assert!(!super::plausible_dirs(&k(&["/lib\n/x"], "ab12")));
        assert!(!super::plausible_dirs(&k(&["/lib"], "zz")));
        assert!(!super::plausible_dirs(&k(&["/l"; 65], "")));
    }

    #[test]
    fn roots_of_launchers() {
        let r = |p: &str, a: &[&str]| {
            let a: Vec<OsString> = a.iter().map(OsString::from).collect();
            new_root(std::ffi::OsStr::new(p), &a)
        };
        assert_eq!(r("/usr/sbin/chroot", &["/srv/r", "/bin/sh"]), Some("/srv/r".into()));
        assert_eq!(
            r("chroot", &["--userspec", "1:1", "--skip-chdir", "/srv/r", "x"]),
            Some("/srv/r".into())
        );
        assert_eq!(r("unshare", &["-m", "--root=/srv/r", "x"]), Some("/srv/r".into()));
        assert_eq!(r("unshare", &["-R", "/srv/r", "x"]), Some("/srv/r".into()));
        assert_eq!(r("unshare", &["-m", "x"]), None);
        assert_eq!(r("nsenter", &["-t", "12", "-m", "x"]), Some("/proc/12/root".into()));
        assert_eq!(r("nsenter", &["--root=/srv/r", "x"]), Some("/srv/r".into()));
        assert_eq!(r("nsenter", &["-t", "12", "-n", "x"]), None);
        assert_eq!(r("env", &["/srv/r"]), None);
    }

    use super::*;

    #[test]
    fn the_loaders_system_directories_are_read_from_its_help() {
        let help = "Shared library search path:\n  (libraries located via /etc/ld.so.cache)\n  \
                    /lib/x86_64-linux-gnu (system search path)\n  /usr/lib (system search path)\n\n\
                    Subdirectories of glibc-hwcaps directories, in priority order:\n  x86-64-v3 (supported, searched)\n";
        assert_eq!(
            parse_system_dirs(help),
            [PathBuf::from("/lib/x86_64-linux-gnu"), PathBuf::from("/usr/lib")]
        );
        assert!(parse_system_dirs("ld.so 2.31: unknown option --help").is_empty());
    }

    #[test]
    fn audit_line_names_what_is_missing_only_when_something_is() {
        let p = Path::new("/opt/h/libhugetext.so");
        assert_eq!(audit_line(p, &[]), None);
        let l = audit_line(p, &["ld-linux-x86-64.so.2".into()]).unwrap();
        assert!(
            l.contains("would not find ld-linux-x86-64.so.2 for /opt/h/libhugetext.so"),
            "{l}"
        );
        assert!(!l.contains('\n'));
    }

    /// A root where the loader's system directory holds libc and libgcc_s
    /// but not ld.so (copied only to its PT_INTERP path, as minimal
    /// container roots do): ld.so is what the audit namespace misses.
    #[test]
    fn a_new_namespace_misses_what_is_not_in_the_search_path() {
        let preload = crate::elf::deps::resolve_deps(Path::new("/bin/sh")).unwrap();
        let libc = preload
            .iter()
            .find(|p| p.to_string_lossy().contains("libc.so"))
            .unwrap();
        let d = tempfile::tempdir().unwrap();
        std::fs::copy(libc, d.path().join("libc.so.6")).unwrap();
        let dirs = [d.path().to_path_buf()];
        let none = elf::deps::LdCache::default();
        // libc needs ld.so, which is nowhere in the search path.
        let missing = elf::deps::missing_in_new_namespace(&d.path().join("libc.so.6"), &[], &none, &dirs);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].starts_with("ld-linux"), "{missing:?}");
        // Found once it is there.
        let ld = crate::elf::deps::interpreter(Path::new("/bin/sh")).unwrap();
        let name = Path::new(&ld).file_name().unwrap();
        std::fs::copy(&ld, d.path().join(name)).unwrap();
        assert!(elf::deps::missing_in_new_namespace(&d.path().join("libc.so.6"), &[], &none, &dirs).is_empty());
    }

    fn facts(mode: u32, uid: u32, ruid: u32) -> ExecFacts {
        ExecFacts {
            mode,
            uid,
            ruid,
            euid: ruid,
            ..Default::default()
        }
    }

    #[test]
    fn secure_execution_follows_the_kernel_rule() {
        // root starting a set-uid-root program: not secure.
        assert_eq!(secure_exec(&facts(0o104755, 0, 0)), None);
        // a user starting it: secure.
        assert_eq!(
            secure_exec(&facts(0o104755, 0, 1000)),
            Some(Secure::SetUid { owner: 0 })
        );
        // root starting a program set-uid to another user: secure.
        assert_eq!(secure_exec(&facts(0o104755, 5, 0)), Some(Secure::SetUid { owner: 5 }));
        // nosuid mounts ignore the bit.
        let f = ExecFacts {
            nosuid: true,
            ..facts(0o104755, 0, 1000)
        };
        assert_eq!(secure_exec(&f), None);
        // set-gid to another group; without group execute it is not set-gid.
        let g = ExecFacts {
            gid: 7,
            ..facts(0o102755, 0, 0)
        };
        assert_eq!(secure_exec(&g), Some(Secure::SetGid { group: 7 }));
        let g = ExecFacts {
            gid: 7,
            ..facts(0o102745, 0, 0)
        };
        assert_eq!(secure_exec(&g), None);
        // file capabilities: secure for a user, not for root.
        let c = ExecFacts {
            file_caps: true,
            ..facts(0o100755, 0, 1000)
        };
        assert_eq!(secure_exec(&c), Some(Secure::FileCaps));
        let c = ExecFacts {
            file_caps: true,
            ..facts(0o100755, 0, 0)
        };
        assert_eq!(secure_exec(&c), None);
        assert!(not_secure_note("p", &c).unwrap().contains("the preload runs"));
        assert_eq!(not_secure_note("p", &facts(0o100755, 0, 0)), None);
    }

    #[test]
    fn capability_values() {
        // cap_net_raw+ep (revision 2): magic 0x02000001, permitted 1 << 13.
        let mut v = vec![0u8; 20];
        v[..4].copy_from_slice(&0x0200_0001u32.to_le_bytes());
        v[4..8].copy_from_slice(&(1u32 << 13).to_le_bytes());
        assert!(caps_grant(&v));
        // inheritable only, no effective flag: grants nothing.
        let mut i = vec![0u8; 20];
        i[..4].copy_from_slice(&0x0200_0000u32.to_le_bytes());
        i[8..12].copy_from_slice(&(1u32 << 13).to_le_bytes());
        assert!(!caps_grant(&i));
        assert!(!caps_grant(&[]));
    }

    fn ft(whole: u64, congruent: u64) -> FileText {
        FileText {
            path: PathBuf::from("/x/lib"),
            kind: FileKind::SharedLibrary,
            whole,
            congruent,
            after_align: whole,
        }
    }

    #[test]
    fn copy_cost_by_strategy() {
        let files = [ft(10, 4), ft(6, 0)];
        assert_eq!(
            copy_cost(&files, Strategy::Auto, false),
            CopyCost { private: 12, shared: 4 }
        );
        assert_eq!(
            copy_cost(&files, Strategy::Copy, false),
            CopyCost { private: 16, shared: 0 }
        );
        assert_eq!(
            copy_cost(&files, Strategy::File, false),
            CopyCost { private: 0, shared: 4 }
        );
        assert_eq!(
            copy_cost(&files, Strategy::Auto, true),
            CopyCost { private: 0, shared: 4 }
        );
    }

    #[test]
    fn static_advice_names_what_works() {
        let mut t = ft(8 << 20, 8 << 20);
        assert!(static_advice("p", Some(&t)).contains("`hugetext warm p`"));
        t.congruent = 0;
        assert!(static_advice("p", Some(&t)).contains("`hugetext align p`"));
        t.after_align = 0;
        assert!(static_advice("p", Some(&t)).contains("nothing to gain"));
    }
}
