//! Keeping the policy's files warm: which files are candidates now, whether
//! each may be warmed ([`policy::decide`]), and the warm itself through
//! [`crate::warm::warm_target`] — never `--replace`, never a file a running
//! process maps, within the memory guard and the rate limit.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::collect::AgentMetrics;
use super::policy::{self, Candidate, Decision, FileId, RateLimit, RecentlyRan};
use crate::profile::HotFile;
use crate::warm::{self, Config, MemLimit, WarmContext, WarmOptions};
use crate::{procfs, Result};

/// A file identity warmed (or tried) is not tried again for this long,
/// unless it had PMD folios after the warm and has fewer now (evicted,
/// reclaimed): then it is warmed again (within the rate limit).
pub const RETRY_AFTER: Duration = Duration::from_secs(600);

/// A file a selected workload's processes mapped as text stays a candidate
/// this long after it was last seen mapped (its programs restart).
pub const WORKLOAD_REMEMBER: Duration = Duration::from_secs(3600);

/// One line of the agent's log (stderr; journald or `kubectl logs`).
pub fn log(msg: &str) {
    eprintln!("hugetext agent: {msg}");
}

/// The files the policy keeps warm now ([`Keeper::candidates_until`]).
#[derive(Debug, Default)]
pub struct Candidates {
    pub files: Vec<PathBuf>,
    /// Paths and globs that match nothing.
    pub missing: Vec<String>,
    /// Globs whose walk stopped at a budget, in words.
    pub cut_short: Vec<String>,
    /// Stopped early (a reload or the agent stopping): partial.
    pub cancelled: bool,
}

/// The policy's state across evaluations.
pub struct Keeper {
    rate: RateLimit,
    recently: RecentlyRan,
    /// Per file: the identity tried, when it may be tried again, and the
    /// windows in PMD folios the try left (a file found with fewer was
    /// evicted since: it is warmed again at once).
    attempts: HashMap<PathBuf, (FileId, Instant, u64)>,
    /// Text files of the selected workloads' processes (as reached from
    /// here: `/proc/PID/root/…` for a process with another root).
    workload_files: RecentlyRan,
    /// Per selected workload, its processes now.
    workload_pids: std::collections::BTreeMap<String, Vec<i32>>,
    eligible: HashMap<FileId, (u64, u64)>,
    ctx: WarmContext,
    blocked_logged: BTreeSet<PathBuf>,
    /// Files of the `shmem` key the store refused or failed to take: the
    /// identity tried and when it may be tried again.
    store_tried: HashMap<PathBuf, (FileId, Instant)>,
}

impl Keeper {
    pub fn new(cfg: &Config) -> Keeper {
        Keeper {
            rate: RateLimit::new(cfg.agent.rate_limit, Instant::now()),
            recently: RecentlyRan::default(),
            attempts: HashMap::new(),
            workload_files: RecentlyRan::default(),
            workload_pids: Default::default(),
            eligible: HashMap::new(),
            ctx: WarmContext::default(),
            blocked_logged: BTreeSet::new(),
            store_tried: HashMap::new(),
        }
    }

    /// A new config: a new rate.
    pub fn reconfigure(&mut self, cfg: &Config) {
        self.rate = RateLimit::new(cfg.agent.rate_limit, Instant::now());
    }

    /// A file changed (package upgrade): forget that it was warmed.
    pub fn forget(&mut self, path: &PathBuf) {
        self.attempts.remove(path);
    }

    /// Record the files every process maps as text now (the auto rule).
    pub fn note_running(&mut self) {
        self.note_running_until(&|| false)
    }

    /// [`Keeper::note_running`], stopped as soon as `cancel` says so.
    pub fn note_running_until(&mut self, cancel: &dyn Fn() -> bool) {
        let now = Instant::now();
        for pid in procfs::all_pids().unwrap_or_default() {
            if cancel() {
                return;
            }
            // Vanished or unreadable processes are simply not seen.
            let Ok(vmas) = procfs::read_maps(Some(pid)) else {
                continue;
            };
            for v in vmas
                .iter()
                .filter(|v| v.is_exec() && v.is_file() && v.path.starts_with('/'))
            {
                self.recently.saw(std::path::Path::new(&v.path), now);
            }
        }
    }

    /// Find the processes of the workloads `cfg` selects by cgroup, and
    /// note the files each maps as text (stopped as soon as `cancel` says
    /// so). A process with another root (a container) names its files
    /// under `/proc/PID/root`.
    pub fn note_workloads_until(&mut self, cfg: &Config, cancel: &dyn Fn() -> bool) {
        self.workload_pids.clear();
        if cfg.agent.workloads.is_empty() {
            return;
        }
        let now = Instant::now();
        for pid in procfs::all_pids().unwrap_or_default() {
            if cancel() {
                return;
            }
            let Some(w) = procfs::cgroup_of(pid).and_then(|cg| policy::workload_of(&cfg.agent.workloads, &cg)) else {
                continue;
            };
            let Ok(vmas) = procfs::read_maps(Some(pid)) else {
                continue;
            };
            let other_root = procfs::other_root(pid);
            for v in vmas
                .iter()
                .filter(|v| v.is_exec() && v.is_file() && v.path.starts_with('/') && !v.path.ends_with(" (deleted)"))
            {
                let p = if other_root {
                    PathBuf::from(format!("/proc/{pid}/root{}", v.path))
                } else {
                    PathBuf::from(&v.path)
                };
                self.workload_files.saw(&p, now);
            }
            self.workload_pids.entry(w).or_default().push(pid);
        }
    }

    /// The selected workloads' processes, as last noted.
    pub fn workload_pids(&self) -> &std::collections::BTreeMap<String, Vec<i32>> {
        &self.workload_pids
    }

    /// The policy's `shmem` key: keep those files in the text store, as
    /// `hugetext warm --shmem` does ([`crate::shmemstore`]): a file with
    /// no valid entry (never stored, or its original changed) is stored,
    /// the store's stale entries dropped first; the store is mounted when
    /// it is not (its default cap). Within the rate limit; a file the
    /// store refuses (not shareable) or fails to take is tried again
    /// after [`RETRY_AFTER`] or when it changes. Stopped as soon as
    /// `cancel` says so.
    pub fn keep_store_until(&mut self, cfg: &Config, m: &AgentMetrics, cancel: &dyn Fn() -> bool) {
        use crate::shmemstore as store;
        if cfg.agent.shmem.is_empty() {
            return;
        }
        let found = policy::shmem_files_until(cfg, cancel);
        if found.cancelled {
            return;
        }
        let root = &cfg.agent.shmem_store;
        let now = Instant::now();
        let mut need = Vec::new();
        for p in &found.files {
            let Ok(id) = FileId::of(p) else { continue };
            if self
                .store_tried
                .get(p)
                .is_some_and(|(i, until)| *i == id && now < *until)
            {
                continue;
            }
            match store::has_entry(root, p) {
                Ok(true) => {}
                Ok(false) => need.push((p.clone(), id)),
                Err(e) => log(&format!("shmem: {e}")),
            }
        }
        if need.is_empty() {
            return;
        }
        if let Err(e) = store::ensure_mounted(root, store::share_of_ram(store::DEFAULT_SIZE_PCT)) {
            m.action("shmem", "failed");
            log(&format!("shmem: {e}"));
            for (p, id) in need {
                self.store_tried.insert(p, (id, now + RETRY_AFTER));
            }
            return;
        }
        match store::remove_stale(root) {
            Ok(gone) => {
                for e in gone {
                    let orig = e
                        .original
                        .map(|o| o.display().to_string())
                        .unwrap_or_else(|| "original not recorded".into());
                    log(&format!("shmem: dropped the stale entry {} ({orig})", e.name));
                }
            }
            Err(e) => log(&format!("shmem: {e}")),
        }
        for (p, id) in need {
            if cancel() {
                return;
            }
            if !self.rate.allow(Instant::now()) {
                m.action("shmem", "rate_limited");
                return;
            }
            match store::add(root, &p) {
                Ok(Ok(a)) => {
                    m.action("shmem", "done");
                    self.store_tried.remove(&p);
                    log(&format!(
                        "stored {} in the text store as {} ({}/{} text windows in 2 MiB pages, {} bytes of Shmem)",
                        p.display(),
                        root.join(&a.entry).display(),
                        a.huge_windows,
                        a.windows,
                        a.bytes
                    ));
                }
                Ok(Err(why)) => {
                    m.action("shmem", "impossible");
                    log(&format!("shmem: {}: not stored: {why}", p.display()));
                    self.store_tried.insert(p, (id, Instant::now() + RETRY_AFTER));
                }
                Err(e) => {
                    m.action("shmem", "failed");
                    log(&format!("shmem: {e}"));
                    self.store_tried.insert(p, (id, Instant::now() + RETRY_AFTER));
                }
            }
        }
    }

    /// The files the policy keeps warm now, and the paths or globs that
    /// match nothing.
    pub fn candidates(&mut self, cfg: &Config) -> (Vec<PathBuf>, Vec<String>) {
        let c = self.candidates_until(cfg, &|| false);
        (c.files, c.missing)
    }

    /// [`Keeper::candidates`], stopped as soon as `cancel` says so (then
    /// `cancelled` is set and the lists are partial). Glob walks are
    /// bounded ([`policy::explicit_files_until`]); a file of the auto rule
    /// larger than the memory guard allows is not a candidate (it could
    /// never be warmed, and looking at it costs in proportion).
    pub fn candidates_until(&mut self, cfg: &Config, cancel: &dyn Fn() -> bool) -> Candidates {
        let found = policy::explicit_files_until(cfg, cancel);
        let mut out = Candidates {
            missing: found.missing,
            cut_short: found.cut_short,
            cancelled: found.cancelled,
            ..Default::default()
        };
        let mut files = found.files;
        if out.cancelled {
            out.files = files.into_iter().collect();
            return out;
        }
        if cfg.deps {
            let roots: Vec<PathBuf> = files.iter().cloned().collect();
            for r in roots {
                if cancel() {
                    out.cancelled = true;
                    break;
                }
                files.extend(warm::resolve_deps(&r).unwrap_or_default());
            }
        }
        if !cfg.agent.workloads.is_empty() {
            for p in self.workload_files.within(WORKLOAD_REMEMBER, Instant::now()) {
                if p.is_file() {
                    files.insert(p);
                }
            }
        }
        if let (Some(auto), false) = (&cfg.agent.auto, out.cancelled) {
            let limit: MemLimit = cfg.max_mem.unwrap_or_default();
            let min = auto.min_eligible_mib * (1 << 20) / crate::kernel::unit_size() as u64;
            for p in self.recently.within(auto.ran_within, Instant::now()) {
                if cancel() {
                    out.cancelled = true;
                    break;
                }
                if p.to_str().is_some_and(|s| s.ends_with(" (deleted)")) {
                    continue;
                }
                let fits = |(e, bytes): (u64, u64)| e >= min.max(1) && warm::check_memory(bytes, limit).is_ok();
                if self.eligible_windows(&p).is_some_and(fits) {
                    files.insert(p);
                }
            }
        }
        out.files = files.into_iter().collect();
        out
    }

    /// Eligible windows and bytes to warm of `path`, cached per file
    /// identity.
    fn eligible_windows(&mut self, path: &std::path::Path) -> Option<(u64, u64)> {
        let id = FileId::of(path).ok()?;
        if let Some(&e) = self.eligible.get(&id) {
            return Some(e);
        }
        let t = warm::plan_exact(path).ok()?;
        let e = (t.eligible_windows(), t.bytes());
        if self.eligible.len() > 10_000 {
            self.eligible.clear();
        }
        self.eligible.insert(id, e);
        Some(e)
    }

    /// Evaluate the policy once: warm what may be warmed now.
    pub fn evaluate(&mut self, cfg: &Config, files: &[PathBuf], m: &AgentMetrics) {
        self.evaluate_until(cfg, files, m, &|| false)
    }

    /// [`Keeper::evaluate`], stopped between files as soon as `cancel`
    /// says so. One round warms at most what the memory guard allows in
    /// all (the rest waits for the next round).
    pub fn evaluate_until(&mut self, cfg: &Config, files: &[PathBuf], m: &AgentMetrics, cancel: &dyn Fn() -> bool) {
        let limit: MemLimit = cfg.max_mem.unwrap_or_default();
        // The `hot` key: only the profile's hot windows; a profile that
        // cannot be used stops warming until the config is fixed.
        let hot = match cfg.hot_windows() {
            Ok(h) => h,
            Err(e) => {
                m.action("warm", "failed");
                log(&format!("hot: {e}; nothing warmed"));
                return;
            }
        };
        let mut round = 0u64;
        for path in files {
            if cancel() {
                return;
            }
            if let Err(e) = self.consider(path, limit, hot.as_deref(), m, &mut round) {
                m.action("warm", "failed");
                log(&format!("{}: {e}", path.display()));
            }
        }
    }

    /// Whether to warm `path` now, and warm it. The file is opened once
    /// ([`warm::plan_exact`]); its identity, who maps it and the warm itself
    /// all come from that open file.
    fn consider(
        &mut self,
        path: &PathBuf,
        limit: MemLimit,
        hot: Option<&[HotFile]>,
        m: &AgentMetrics,
        round: &mut u64,
    ) -> Result<()> {
        let t = match hot {
            Some(h) => warm::restrict_to_hot(warm::plan_exact(path)?, h),
            None => warm::plan_exact(path)?,
        };
        let id = FileId::from_meta(&t.meta);
        let now = Instant::now();
        let tried = self
            .attempts
            .get(path)
            .filter(|(i, until, _)| *i == id && now < *until)
            .map(|&(_, _, left)| left);
        // Larger than the memory guard allows: refused before anything
        // costs in proportion to its size (measuring it, warming it).
        if let Err(e) = warm::check_memory(t.bytes(), limit) {
            if tried.is_none() {
                m.action("warm", "memory_guard");
                log(&format!("{}: {e}", path.display()));
                self.attempts
                    .insert(path.clone(), (id, now + Duration::from_secs(60), 0));
            }
            return Ok(());
        }
        let (eligible, pmd) = super::collect::target_state(&t)?;
        // Warmed before, and fewer windows in PMD folios now than the warm
        // left: evicted since (memory pressure, a `warm --drop`, a
        // `POSIX_FADV_DONTNEED`): warm it again now, not after RETRY_AFTER.
        let evicted = matches!((tried, pmd), (Some(left), Some(now_pmd)) if now_pmd < left);
        if evicted {
            log(&format!(
                "{}: {} of {} windows warmed earlier are no longer in PMD folios: warming again",
                path.display(),
                tried.unwrap_or(0) - pmd.unwrap_or(0),
                tried.unwrap_or(0)
            ));
        }
        let attempted = tried.is_some() && !evicted;
        let mut c = Candidate {
            eligible_windows: eligible,
            unit_windows: pmd,
            mapped: false,
            attempted,
        };
        if policy::decide(&c) == Decision::Warm {
            // The question warm itself asks about blocked windows.
            let by = warm::target_mappers(&t)?;
            c.mapped = !by.is_empty();
            if c.mapped && self.blocked_logged.insert(path.clone()) {
                log(&format!(
                    "{}: waiting: running processes map it ({} process(es), e.g. pid {})",
                    path.display(),
                    by.len(),
                    by[0].pid
                ));
                m.action("warm", "blocked");
            }
        }
        if policy::decide(&c) != Decision::Warm {
            return Ok(());
        }
        self.blocked_logged.remove(path);
        // What this round has warmed already counts against the guard: the
        // rest waits for the next round.
        if warm::check_memory(*round + t.bytes(), limit).is_err() {
            return Ok(());
        }
        if !self.rate.allow(now) {
            m.action("warm", "rate_limited");
            return Ok(());
        }
        let opts = WarmOptions::default();
        *round += t.bytes();
        let r = warm::warm_target(&t, &opts, &mut self.ctx)?;
        let result = if matches!(r.route, warm::Route::None | warm::Route::NeedsAlign) {
            "impossible"
        } else if r.unit_windows > 0 {
            "done"
        } else if r.blocked_windows > 0 {
            "blocked"
        } else {
            "impossible"
        };
        m.action("warm", result);
        // Pages of a process that has just exited can stay pinned for a
        // moment: a result with blocked windows (also one that filled the
        // others) is retried soon, the others much later.
        let retry = if r.blocked_windows > 0 {
            Duration::from_secs(2)
        } else {
            RETRY_AFTER
        };
        self.attempts.insert(path.clone(), (id, now + retry, r.unit_windows));
        log(&format!(
            "warmed {}: {}/{} eligible windows in PMD folios ({:.0} ms){}",
            path.display(),
            r.unit_windows,
            r.eligible_windows,
            r.millis,
            r.notes.first().map(|n| format!("; {n}")).unwrap_or_default()
        ));
        Ok(())
    }
}

/// Why the text of each selected workload falls short of huge: per
/// workload, the bytes of whole windows not mapped huge by `explain`'s
/// reason code (the same decision as `hugetext explain --pid`); a workload
/// whose text is all huge has none. Processes that vanish are skipped.
pub fn shortfalls(
    workloads: &std::collections::BTreeMap<String, Vec<i32>>,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> {
    let mut out = std::collections::BTreeMap::new();
    if workloads.is_empty() {
        return out;
    }
    let sys = crate::explain::SystemFacts::gather();
    for (w, pids) in workloads {
        let Ok((procs, _)) = crate::explain::gather(pids, false) else {
            continue;
        };
        let mut by: std::collections::BTreeMap<String, u64> = Default::default();
        for p in &procs {
            for m in &p.mappings {
                let v = crate::explain::decide(&sys, p, m);
                if v.gain_kb > 0 {
                    let code = serde_json::to_value(v.reason)
                        .ok()
                        .and_then(|j| j.as_str().map(str::to_string))
                        .unwrap_or_else(|| "unknown".into());
                    *by.entry(code).or_default() += v.gain_kb * 1024;
                }
            }
        }
        out.insert(w.clone(), by);
    }
    out
}
