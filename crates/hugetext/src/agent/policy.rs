//! The agent's policy: the `[agent]` table of the warm config file, and the
//! pure decisions made from it (which files are candidates, whether one may
//! be warmed now, the rate limit).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Config;
pub use crate::config::{AgentConfig, AutoRule, Selector, WorkloadRule};

/// Where the agent listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9437";

/// The files the policy names explicitly: `paths` and what `globs` match
/// now (sorted, once each; a symbolic link resolved to its file, which is
/// what the agent then opens, never following a link again), and the
/// patterns or paths that match nothing.
pub fn explicit_files(cfg: &Config) -> (BTreeSet<PathBuf>, Vec<String>) {
    let w = explicit_files_until(cfg, &|| false);
    (w.files, w.missing)
}

/// What [`explicit_files_until`] found.
#[derive(Debug, Default)]
pub struct Explicit {
    pub files: BTreeSet<PathBuf>,
    /// Paths and globs that match nothing.
    pub missing: Vec<String>,
    /// Globs whose walk stopped at a budget (in words, for the log).
    pub cut_short: Vec<String>,
    /// `cancel` said stop: the result is partial.
    pub cancelled: bool,
}

/// Budgets of one glob's walk: directories deeper than this below the
/// pattern's literal prefix are not entered…
pub const GLOB_MAX_DEPTH: usize = 24;
/// …at most this many directory entries are looked at…
pub const GLOB_MAX_ENTRIES: u64 = 200_000;
/// …and for at most this long.
pub const GLOB_MAX_TIME: Duration = Duration::from_secs(3);

/// [`explicit_files`], with walks that end: symbolic links to directories
/// are never followed (so a loop of links costs nothing), `/proc` and
/// `/sys` are never entered, each glob's walk is bounded by
/// [`GLOB_MAX_DEPTH`], [`GLOB_MAX_ENTRIES`] and [`GLOB_MAX_TIME`], and
/// `cancel` (asked often) stops it at once (a reload, or the agent
/// stopping).
pub fn explicit_files_until(cfg: &Config, cancel: &dyn Fn() -> bool) -> Explicit {
    let mut out = Explicit::default();
    for p in &cfg.paths {
        if p.is_file() {
            out.files.insert(crate::warm::resolve_link(p));
        } else {
            out.missing.push(p.display().to_string());
        }
    }
    walk_globs(&cfg.agent.globs, &mut out, cancel);
    out
}

/// The files the policy's `shmem` key names now (paths or globs, found as
/// [`explicit_files_until`] finds `globs`): to keep in the text store.
pub fn shmem_files_until(cfg: &Config, cancel: &dyn Fn() -> bool) -> Explicit {
    let mut out = Explicit::default();
    walk_globs(&cfg.agent.shmem, &mut out, cancel);
    out
}

/// Add what each of `globs` matches to `out` (bounded walks).
fn walk_globs(globs: &[String], out: &mut Explicit, cancel: &dyn Fn() -> bool) {
    for g in globs {
        let mut matched = false;
        match walk_glob(g, &mut out.files, &mut matched, cancel) {
            Walk::Done => {}
            Walk::Cancelled => {
                out.cancelled = true;
                return;
            }
            Walk::CutShort(why) => out.cut_short.push(format!(
                "glob {g:?}: stopped after {why} (walks are bounded; symbolic links to directories are not followed): name a narrower tree"
            )),
        }
        if !matched {
            out.missing.push(g.clone());
        }
    }
}

enum Walk {
    Done,
    Cancelled,
    CutShort(String),
}

/// Add the regular files matching the absolute glob `pattern` to `files`
/// (see [`explicit_files_until`]); `matched` is set when one does.
fn walk_glob(pattern: &str, files: &mut BTreeSet<PathBuf>, matched: &mut bool, cancel: &dyn Fn() -> bool) -> Walk {
    let Ok(full) = glob::Pattern::new(pattern) else {
        return Walk::Done;
    };
    let opts = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let wild = |c: &str| c.contains(['*', '?', '[']);
    let lit = comps.iter().take_while(|c| !wild(c)).count();
    let mut root = PathBuf::from("/");
    root.extend(&comps[..lit]);
    let mut add = |p: &Path, files: &mut BTreeSet<PathBuf>| {
        if p.is_file() {
            files.insert(crate::warm::resolve_link(p));
            *matched = true;
        }
    };
    if lit == comps.len() {
        add(&root, files);
        return Walk::Done;
    }
    // The components after the literal prefix, each a pattern, up to the
    // first `**` (past it any depth may match).
    let rest: Vec<Option<glob::Pattern>> = comps[lit..]
        .iter()
        .map(|c| (*c != "**").then(|| glob::Pattern::new(c).ok()).flatten())
        .collect();
    let dstar = comps[lit..].iter().position(|c| *c == "**");
    let max_depth = match dstar {
        Some(_) => GLOB_MAX_DEPTH,
        None => rest.len(),
    };
    let start = Instant::now();
    let mut seen = 0u64;
    let mut stack = vec![(root, 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if cancel() {
            return Walk::Cancelled;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            seen += 1;
            if seen % 256 == 0 && cancel() {
                return Walk::Cancelled;
            }
            if seen > GLOB_MAX_ENTRIES {
                return Walk::CutShort(format!("{GLOB_MAX_ENTRIES} entries"));
            }
            if start.elapsed() > GLOB_MAX_TIME {
                return Walk::CutShort(format!("{} s", GLOB_MAX_TIME.as_secs()));
            }
            let path = e.path();
            let Ok(ft) = e.file_type() else { continue };
            // This entry is component `depth` below the prefix: before a
            // `**` it must match that component's pattern.
            let fits = match dstar {
                Some(d) if depth >= d => true,
                _ => rest
                    .get(depth)
                    .and_then(|p| p.as_ref())
                    .is_some_and(|p| p.matches_with(&e.file_name().to_string_lossy(), opts)),
            };
            if !fits {
                continue;
            }
            if full.matches_path_with(&path, opts) {
                add(&path, files);
            }
            if ft.is_dir() && depth + 1 < max_depth && path != Path::new("/proc") && path != Path::new("/sys") {
                stack.push((path, depth + 1));
            }
        }
    }
    Walk::Done
}

/// The workload a process in cgroup `path` belongs to under `rules`: the
/// label of the first entry that selects it (`unit:NAME`,
/// `container:ID12`, `pod:UID`, `cgroup:PATH`), unless an `exclude` entry
/// selects it too. Pure.
pub fn workload_of(rules: &[WorkloadRule], path: &str) -> Option<String> {
    if rules.iter().any(|r| r.exclude && select(&r.selector, path).is_some()) {
        return None;
    }
    rules
        .iter()
        .filter(|r| !r.exclude)
        .find_map(|r| select(&r.selector, path))
}

/// The id in a cgroup path component that names a container: podman's
/// `libpod-ID` (not its `libpod-conmon-ID`), Docker's `docker-ID.scope`,
/// containerd's `cri-containerd-ID.scope`, CRI-O's `crio-ID.scope`, or a
/// bare 64-digit id (cgroupfs drivers). Pure.
fn container_id(component: &str) -> Option<&str> {
    let c = component.strip_suffix(".scope").unwrap_or(component);
    if c.starts_with("libpod-conmon-") || c.starts_with("crio-conmon-") {
        return None;
    }
    let id = ["libpod-", "docker-", "cri-containerd-", "crio-"]
        .iter()
        .find_map(|p| c.strip_prefix(p))
        .unwrap_or(c);
    (id.len() == 64 && id.chars().all(|x| x.is_ascii_hexdigit())).then_some(id)
}

/// The pod UID a cgroup path component names: `podUID` (cgroupfs driver)
/// or `kubepods-QOS-podUID_WITH_UNDERSCORES.slice` (systemd driver), with
/// dashes. Pure.
fn pod_uid(component: &str) -> Option<String> {
    let c = component.strip_suffix(".slice").unwrap_or(component);
    let (_, uid) = c.rsplit_once("pod")?;
    (uid.len() >= 8 && uid.chars().all(|x| x.is_ascii_hexdigit() || x == '-' || x == '_'))
        .then(|| uid.to_ascii_lowercase().replace('_', "-"))
}

/// The workload label when `sel` selects cgroup `path`. Pure.
fn select(sel: &Selector, path: &str) -> Option<String> {
    let comps = || path.split('/').filter(|c| !c.is_empty());
    match sel {
        Selector::Unit(g) => {
            let pat = glob::Pattern::new(g).ok()?;
            comps().find(|c| pat.matches(c)).map(|c| format!("unit:{c}"))
        }
        Selector::Container(prefix) => comps()
            .filter_map(container_id)
            .find(|id| id.starts_with(prefix.as_str()))
            .map(|id| format!("container:{}", &id[..12])),
        Selector::Pod(uid) => comps()
            .filter_map(pod_uid)
            .find(|u| u == uid)
            .map(|u| format!("pod:{u}")),
        Selector::Cgroup(g) => glob::Pattern::new(g)
            .ok()
            .filter(|p| p.matches(path))
            .map(|_| format!("cgroup:{path}")),
    }
}

/// Files mapped as text recently, for the auto rule: when each was last seen.
#[derive(Debug, Default)]
pub struct RecentlyRan {
    seen: BTreeMap<PathBuf, Instant>,
}

impl RecentlyRan {
    /// `path` is mapped as text at `now`.
    pub fn saw(&mut self, path: &Path, now: Instant) {
        match self.seen.get_mut(path) {
            Some(t) => *t = now,
            None => {
                self.seen.insert(path.to_path_buf(), now);
            }
        }
    }

    /// Files seen within `within` of `now`; older ones are forgotten.
    pub fn within(&mut self, within: Duration, now: Instant) -> Vec<PathBuf> {
        self.seen.retain(|_, t| now.saturating_duration_since(*t) <= within);
        self.seen.keys().cloned().collect()
    }
}

/// A token bucket: at most `per_minute` actions in any minute, spread out.
#[derive(Debug)]
pub struct RateLimit {
    per_minute: u32,
    tokens: f64,
    last: Instant,
}

impl RateLimit {
    /// A full bucket.
    pub fn new(per_minute: u32, now: Instant) -> RateLimit {
        RateLimit {
            per_minute,
            tokens: per_minute as f64,
            last: now,
        }
    }

    /// Take one token if there is one.
    pub fn allow(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.per_minute as f64 / 60.0).min(self.per_minute as f64);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Identity of a file's contents as the page cache sees them: a package
/// upgrade renames a new file over the old one (new inode), an in-place
/// write changes the mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub mtime_ns: i128,
    pub size: u64,
}

impl FileId {
    /// The identity of `path` now (following symlinks).
    pub fn of(path: &Path) -> std::io::Result<FileId> {
        Ok(FileId::from_meta(&std::fs::metadata(path)?))
    }

    /// The identity in `m` (e.g. the `fstat` of a planned file).
    pub fn from_meta(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            size: m.len(),
        }
    }
}

/// What the agent knows about a candidate file when it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Whole 2 MiB windows of its read-only segments.
    pub eligible_windows: u64,
    /// Of those, windows held in one PMD-size folio now (`None`: unknown,
    /// no PFN access).
    pub unit_windows: Option<u64>,
    /// Processes map it now (warm would leave their windows small).
    pub mapped: bool,
    /// This identity was warmed (or tried) within the retry interval.
    pub attempted: bool,
}

/// Why a candidate is (not) warmed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Warm it now.
    Warm,
    /// Every eligible window is a PMD folio already.
    AlreadyWarm,
    /// No whole window: nothing warm could do.
    NothingEligible,
    /// Running processes map it: wait until they exit.
    Blocked,
    /// This identity was warmed (or tried) recently: it is not retried
    /// before the retry interval ends (e.g. a filesystem without large
    /// folios), and without PFN access nothing says it cooled.
    Done,
}

/// The decision for one candidate (pure): the agent never touches a running
/// process, so a mapped file waits; a file whose windows are all PMD folios
/// is left alone.
pub fn decide(c: &Candidate) -> Decision {
    if c.eligible_windows == 0 {
        return Decision::NothingEligible;
    }
    match c.unit_windows {
        Some(n) if n >= c.eligible_windows => return Decision::AlreadyWarm,
        None if c.attempted => return Decision::Done,
        _ => {}
    }
    if c.mapped {
        return Decision::Blocked;
    }
    if c.attempted {
        return Decision::Done;
    }
    Decision::Warm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let c = |eligible, pmd, mapped, attempted| Candidate {
            eligible_windows: eligible,
            unit_windows: pmd,
            mapped,
            attempted,
        };
        assert_eq!(decide(&c(0, Some(0), false, false)), Decision::NothingEligible);
        assert_eq!(decide(&c(4, Some(4), true, false)), Decision::AlreadyWarm);
        assert_eq!(decide(&c(4, Some(1), true, false)), Decision::Blocked);
        assert_eq!(decide(&c(4, Some(1), false, false)), Decision::Warm);
        // Tried recently and still small (e.g. no large folios): not again yet.
        assert_eq!(decide(&c(4, Some(1), false, true)), Decision::Done);
        assert_eq!(decide(&c(4, None, false, false)), Decision::Warm);
        assert_eq!(decide(&c(4, None, false, true)), Decision::Done);
        assert_eq!(decide(&c(4, None, true, false)), Decision::Blocked);
    }

    #[test]
    fn workloads_by_unit_container_and_pod() {
        let rule = |sel: Selector, exclude: bool| WorkloadRule { selector: sel, exclude };
        let id = "91da2882686c3c62686c7c5a5f21df42d507d80c006936cc0a84c11ce3bf4156";
        let uid = "0b5e3c2a-1d2f-4c6e-9a7b-3f0e2d1c4b5a";
        let rules = vec![
            rule(Selector::Unit("ht-*.service".into()), false),
            rule(Selector::Container(id[..12].into()), false),
            rule(Selector::Pod(uid.into()), false),
            rule(Selector::Cgroup("/kubepods/besteffort/*".into()), false),
            rule(Selector::Unit("ht-private.service".into()), true),
        ];
        let w = |p: &str| workload_of(&rules, p);
        assert_eq!(w("/system.slice/ht-web.service"), Some("unit:ht-web.service".into()));
        assert_eq!(w("/system.slice/ht-private.service"), None);
        assert_eq!(w("/system.slice/sshd.service"), None);
        assert_eq!(
            w(&format!("/libpod_parent/libpod-{id}")),
            Some(format!("container:{}", &id[..12]))
        );
        assert_eq!(w(&format!("/libpod_parent/libpod-conmon-{id}")), None);
        assert_eq!(
            w(&format!("/system.slice/docker-{id}.scope")),
            Some(format!("container:{}", &id[..12]))
        );
        // Pods: cgroupfs and systemd drivers.
        assert_eq!(
            w(&format!("/kubepods/burstable/pod{uid}/{id}")),
            Some(format!("container:{}", &id[..12]))
        );
        let other = "f".repeat(64);
        assert_eq!(
            w(&format!("/kubepods/burstable/pod{uid}/{other}")),
            Some(format!("pod:{uid}"))
        );
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{other}.scope",
            uid.replace('-', "_")
        );
        assert_eq!(w(&systemd), Some(format!("pod:{uid}")));
        assert_eq!(
            w("/kubepods/besteffort/podx/y"),
            Some("cgroup:/kubepods/besteffort/podx/y".into())
        );
    }

    #[test]
    fn rate_limit_refills_over_time() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(2, t0);
        assert!(r.allow(t0) && r.allow(t0));
        assert!(!r.allow(t0));
        assert!(!r.allow(t0 + Duration::from_secs(10)));
        assert!(r.allow(t0 + Duration::from_secs(31)));
    }

    #[test]
    fn recently_ran_forgets_old_files() {
        let t0 = Instant::now();
        let mut r = RecentlyRan::default();
        r.saw(Path::new("/a"), t0);
        r.saw(Path::new("/b"), t0 + Duration::from_secs(50));
        let later = t0 + Duration::from_secs(70);
        assert_eq!(r.within(Duration::from_secs(60), later), vec![PathBuf::from("/b")]);
    }

    #[test]
    fn glob_walks_do_not_follow_links_to_directories() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/b/x.so"), b"x").unwrap();
        std::fs::write(d.join("top.so"), b"x").unwrap();
        std::os::unix::fs::symlink("..", d.join("a/up")).unwrap();
        std::os::unix::fs::symlink("..", d.join("a/b/up")).unwrap();
        std::os::unix::fs::symlink(d.join("a/b/x.so"), d.join("a/link.so")).unwrap();
        let mut cfg = Config::default();
        cfg.agent.globs = vec![format!("{}/**/*.so", d.display()), format!("{}/a/*/x.so", d.display())];
        let w = explicit_files_until(&cfg, &|| false);
        // The link to a file is resolved to it; the links to directories
        // are not followed.
        assert!(w.missing.is_empty() && w.cut_short.is_empty() && !w.cancelled, "{w:?}");
        let files: Vec<PathBuf> = w.files.into_iter().collect();
        assert_eq!(files, vec![d.join("a/b/x.so"), d.join("top.so")]);
        assert!(explicit_files_until(&cfg, &|| true).cancelled);
    }

    #[test]
    fn explicit_files_report_what_matches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.so");
        std::fs::write(&a, b"x").unwrap();
        let mut cfg = Config {
            paths: vec![a.clone(), dir.path().join("gone")],
            ..Default::default()
        };
        cfg.agent.globs = vec![format!("{}/*.so", dir.path().display()), "/nonexistent/*".into()];
        let (files, missing) = explicit_files(&cfg);
        assert_eq!(files.into_iter().collect::<Vec<_>>(), vec![a]);
        assert_eq!(missing.len(), 2, "{missing:?}");
    }
}
