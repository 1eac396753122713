//! `hugetext agent`: a daemon that serves Prometheus metrics about how
//! program text is backed, and keeps the programs a policy names warm.
//!
//! - [`collect`]: `/metrics`, built at scrape time from [`crate::inspect`];
//! - [`policy`]: the `[agent]` table of the warm config file and the pure
//!   decisions made from it;
//! - [`watch`]: exec/exit events (proc connector, else polling) and file
//!   changes (inotify);
//! - [`actions`]: warming through [`crate::warm`], never touching a running
//!   process.
//!
//! - [`http`]: the listener, bounded in connections, time and threads.
//!
//! Threads: one serves HTTP (an event loop) with up to eight that build
//! pages, one keeps the policy, the caller's thread handles signals (SIGHUP
//! reloads the config, keeping the old one when the new one is bad;
//! SIGTERM/SIGINT stop cleanly).

pub mod actions;
pub mod collect;
pub mod http;
pub mod policy;
pub mod watch;

pub use collect::{scrape, AgentMetrics, ScrapeInput};
pub use policy::{AgentConfig, AutoRule, DEFAULT_LISTEN};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rustix::thread::CapabilitySet;

use crate::warm::Config;
use crate::{Error, Result};
use actions::log;

/// A capability, whether this process has it, and what it is for.
#[derive(Debug, Clone)]
pub struct Capability {
    /// `CAP_SYS_ADMIN`, ...
    pub name: &'static str,
    /// In the effective set now.
    pub have: bool,
    /// The feature that needs it, and what happens without it.
    pub needed_for: &'static str,
}

/// The capabilities the agent's features need (doc/agent.md lists the same).
pub fn capabilities() -> Vec<Capability> {
    let eff = rustix::thread::capabilities(None)
        .map(|c| c.effective)
        .unwrap_or(CapabilitySet::empty());
    vec![
        Capability {
            name: "CAP_SYS_ADMIN",
            have: eff.contains(CapabilitySet::SYS_ADMIN),
            needed_for: "folio sizes (PFNs in /proc/PID/pagemap, /proc/kpageflags) and the policy's PMD windows; \
                         without it text is split only into PMD- and PTE-mapped (smaps), and policy files are warmed once per version",
        },
        Capability {
            name: "CAP_SYS_PTRACE",
            have: eff.contains(CapabilitySet::SYS_PTRACE),
            needed_for: "reading /proc/PID/maps, smaps and pagemap of other users' processes; without it they are counted as unreadable",
        },
        Capability {
            name: "CAP_DAC_READ_SEARCH",
            have: eff.contains(CapabilitySet::DAC_READ_SEARCH),
            needed_for: "reading /proc/kpageflags and other users' /proc/PID/pagemap (mode 0400, root) when not root, and opening policy files this user cannot read, to warm them",
        },
        Capability {
            name: "CAP_NET_ADMIN",
            have: eff.contains(CapabilitySet::NET_ADMIN),
            needed_for: "exec/exit events from the proc connector; without it /proc is polled every poll_interval",
        },
    ]
}

/// How to start the agent.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The config file (the warm config with an `[agent]` table).
    pub config: Option<PathBuf>,
    /// `ADDR:PORT` (overrides the config's `listen`).
    pub listen: Option<String>,
}

/// Read the config (`None`: the defaults: metrics only, nothing warmed).
pub fn load_config(path: Option<&std::path::Path>) -> Result<Config> {
    match path {
        Some(p) => Config::load(p),
        None => Ok(Config::default()),
    }
}

/// How long [`Agent::stop`] waits for the threads.
pub const STOP_WAIT: Duration = Duration::from_millis(600);

/// The auto rule's look at every process costs CPU in proportion to the
/// processes; it runs at most every this many times its last cost (at
/// most 1/20 of a CPU, whatever users exec)…
const SCAN_COST_FACTOR: u32 = 20;
/// …and at most once per this long.
const SCAN_MIN_INTERVAL: Duration = Duration::from_secs(1);
/// A whole evaluation of the policy likewise runs at most every this many
/// times its last cost (and at most every 100 ms).
const EVAL_COST_FACTOR: u32 = 10;
/// Why the selected workloads fall short is worked out (as `explain` does)
/// at most this often…
const SHORTFALL_MIN_INTERVAL: Duration = Duration::from_secs(15);
/// …and at most every this many times its last cost.
const SHORTFALL_COST_FACTOR: u32 = 20;

/// State shared by the threads.
struct Shared {
    cfg: RwLock<Arc<Config>>,
    /// Bumped on every successful reload.
    generation: AtomicU64,
    metrics: AgentMetrics,
    policy_files: Mutex<Vec<PathBuf>>,
    /// Per selected workload, why its text falls short
    /// ([`actions::shortfalls`]), as last worked out.
    shortfalls: Mutex<std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>>,
    /// One collection at a time: requests that arrive while one runs wait
    /// for it and share its page.
    flight: Mutex<Flight>,
    landed: std::sync::Condvar,
    stop: AtomicBool,
}

/// An agent listening and keeping its policy; [`Agent::stop`] ends it.
pub struct Agent {
    shared: Arc<Shared>,
    stop_http: Arc<tokio::sync::Notify>,
    threads: Vec<std::thread::JoinHandle<()>>,
    config_path: Option<PathBuf>,
    /// The address it listens on.
    pub addr: std::net::SocketAddr,
}

/// One page in both formats.
struct Page {
    openmetrics: String,
    classic: String,
}

/// A page, or why there is none.
type PageResult = Result<Page>;

/// The collection in progress, and the last page.
#[derive(Default)]
struct Flight {
    running: bool,
    /// Collections finished.
    landed: u64,
    last: Option<Arc<PageResult>>,
}

/// A page collected after this call began, or while it waited: the first
/// request collects, those arriving meanwhile share its result.
fn page(sh: &Shared) -> Arc<PageResult> {
    let mut f = sh.flight.lock().unwrap_or_else(|e| e.into_inner());
    if f.running {
        let mine = f.landed;
        while f.landed == mine {
            f = sh.landed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(p) = &f.last {
            return p.clone();
        }
    }
    f.running = true;
    drop(f);
    let cfg = sh.cfg.read().unwrap_or_else(|e| e.into_inner()).clone();
    let input = ScrapeInput {
        policy_files: sh.policy_files.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        max_series: cfg.agent.max_series,
        folio_sizes: true,
        workloads: cfg.agent.workloads.clone(),
        shortfalls: sh.shortfalls.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        store: cfg.agent.shmem_store.clone(),
    };
    let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| collect::scrape(&sh.metrics, &input))) {
        Ok(Ok(page)) => Ok(Page {
            classic: collect::to_classic(&page),
            openmetrics: page,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Other("internal error".into())),
    };
    let r = Arc::new(r);
    let mut f = sh.flight.lock().unwrap_or_else(|e| e.into_inner());
    f.running = false;
    f.landed += 1;
    f.last = Some(r.clone());
    sh.landed.notify_all();
    r
}

impl Agent {
    /// Read the config, bind, and start the threads. Errors (a bad config,
    /// an address in use) are one line.
    pub fn start(opts: &Options) -> Result<Agent> {
        let cfg = load_config(opts.config.as_deref())?;
        let listen = opts
            .listen
            .clone()
            .or_else(|| cfg.agent.listen.clone())
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let sa: std::net::SocketAddr = listen.parse().map_err(|e| {
            Error::Invalid(format!(
                "--listen {listen:?}: {e} (give ADDR:PORT, e.g. 127.0.0.1:9437)"
            ))
        })?;
        // One malloc arena per serving thread would let a long-running
        // process's heap grow with the number of threads that ever built or
        // sent a page; two are plenty here.
        #[cfg(target_env = "gnu")]
        // SAFETY: mallopt only tunes the allocator.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
        let shared = Arc::new(Shared {
            cfg: RwLock::new(Arc::new(cfg)),
            generation: AtomicU64::new(0),
            metrics: AgentMetrics::default(),
            policy_files: Mutex::new(Vec::new()),
            shortfalls: Mutex::new(Default::default()),
            flight: Mutex::new(Flight::default()),
            landed: std::sync::Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let stop_http = Arc::new(tokio::sync::Notify::new());
        let (addr, t) = http::start(sa, shared.clone(), http::Limits::of_this_process(), stop_http.clone())?;
        let mut threads = vec![t];
        let sh = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("hugetext-policy".into())
                .spawn(move || keep(&sh))
                .map_err(|e| Error::Other(format!("cannot start the policy thread: {e}")))?,
        );
        Ok(Agent {
            shared,
            stop_http,
            threads,
            config_path: opts.config.clone(),
            addr,
        })
    }

    /// Startup lines: where it listens, how it reads memory, what is
    /// missing and what that costs.
    pub fn startup_report(&self) -> Vec<String> {
        let cfg = self.config();
        let mut v = vec![format!(
            "listening on http://{}/metrics and /healthz; policy: {}",
            self.addr,
            match (
                &self.config_path,
                cfg.paths.is_empty()
                    && cfg.agent.globs.is_empty()
                    && cfg.agent.auto.is_none()
                    && cfg.agent.workloads.is_empty()
            ) {
                (None, _) => "none (metrics only; give --config to keep programs warm)".to_string(),
                (Some(p), true) => format!("{} lists nothing to keep warm (metrics only)", p.display()),
                (Some(p), false) => p.display().to_string(),
            }
        )];
        for c in capabilities().into_iter().filter(|c| !c.have) {
            v.push(format!("without {}: {}", c.name, c.needed_for));
        }
        v
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.shared.cfg.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-read the config file (SIGHUP). On error the old config stays in
    /// force and the error is returned (and counted).
    pub fn reload(&self) -> Result<()> {
        let Some(p) = &self.config_path else {
            return Err(Error::Invalid("no --config file to reload".into()));
        };
        match Config::load(p) {
            Ok(c) => {
                *self.shared.cfg.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
                self.shared.generation.fetch_add(1, Ordering::SeqCst);
                self.shared
                    .metrics
                    .reloads
                    .get_or_create(&vec![("result".into(), "ok".into())])
                    .inc();
                Ok(())
            }
            Err(e) => {
                self.shared
                    .metrics
                    .reloads
                    .get_or_create(&vec![("result".into(), "error".into())])
                    .inc();
                Err(e)
            }
        }
    }

    /// Stop the threads and wait for them, a little: the policy's work
    /// stops at its next check (within milliseconds, or a warm of one file
    /// in progress); what has not ended within [`STOP_WAIT`] is left to end
    /// with the process.
    pub fn stop(mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.stop_http.notify_one();
        let until = Instant::now() + STOP_WAIT;
        for t in self.threads.drain(..) {
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }

    /// Handle signals until SIGTERM or SIGINT: SIGHUP reloads.
    pub fn run_until_signalled(self) -> Result<()> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGTERM, SIGINT])
            .map_err(|e| Error::Invalid(format!("cannot handle signals: {e}")))?;
        for sig in signals.forever() {
            if sig == SIGHUP {
                match self.reload() {
                    Ok(()) => log("config reloaded"),
                    Err(e) => log(&format!("reload failed, the old config stays in force: {e}")),
                }
                continue;
            }
            log("stopping");
            break;
        }
        self.stop();
        Ok(())
    }
}

/// Keep the policy: evaluate on exec/exit events, file changes, and every
/// poll interval. The work is bounded in CPU whatever users do (see
/// [`SCAN_COST_FACTOR`], [`EVAL_COST_FACTOR`]) and stops as soon as the
/// agent stops or the config is reloaded.
fn keep(sh: &Shared) {
    let cfg = sh.cfg.read().unwrap_or_else(|e| e.into_inner()).clone();
    let mut keeper = actions::Keeper::new(&cfg);
    let conn = match watch::ProcConnector::open(Duration::from_millis(200)) {
        Ok(c) => Some(c),
        Err(e) => {
            log(&format!(
                "no exec/exit events from the proc connector ({e}; it needs CAP_NET_ADMIN in the initial namespaces): polling /proc every {}",
                humantime::format_duration(cfg.agent.poll_interval)
            ));
            None
        }
    };
    let mut generation = u64::MAX;
    let mut cfg = cfg;
    let mut files_watch: Option<watch::FileWatch> = None;
    let mut watched: Vec<PathBuf> = Vec::new();
    let mut last_eval: Option<Instant> = None;
    let mut eval_cost = Duration::ZERO;
    let mut last_scan: Option<Instant> = None;
    let mut scan_cost = Duration::ZERO;
    let mut dirty = true;
    let mut logged_missing: Vec<String> = Vec::new();
    let mut logged_cut: Vec<String> = Vec::new();
    let mut last_short: Option<Instant> = None;
    let mut short_cost = Duration::ZERO;
    while !sh.stop.load(Ordering::SeqCst) {
        let g = sh.generation.load(Ordering::SeqCst);
        if g != generation {
            generation = g;
            cfg = sh.cfg.read().unwrap_or_else(|e| e.into_inner()).clone();
            keeper.reconfigure(&cfg);
            files_watch = None;
            dirty = true;
            last_eval = None;
        }
        match &conn {
            Some(c) => match c.recv() {
                Ok(evs) => {
                    // An exit may unblock a file; an exec may be one to note.
                    if !evs.is_empty() {
                        let source = vec![("source".to_string(), "proc_connector".to_string())];
                        sh.metrics.events.get_or_create(&source).inc_by(evs.len() as u64);
                        dirty = true;
                    }
                }
                Err(_) => dirty = true, // events lost (ENOBUFS): look again
            },
            None => std::thread::sleep(Duration::from_millis(100)),
        }
        if let Some(w) = &files_watch {
            for p in w.changed() {
                sh.metrics
                    .events
                    .get_or_create(&vec![("source".to_string(), "inotify".to_string())])
                    .inc();
                log(&format!("{} changed", p.display()));
                keeper.forget(&p);
                dirty = true;
            }
        }
        let now = Instant::now();
        let due = last_eval.map_or(true, |t| now.duration_since(t) >= cfg.agent.poll_interval);
        if due && conn.is_none() {
            sh.metrics
                .events
                .get_or_create(&vec![("source".to_string(), "poll".to_string())])
                .inc();
        }
        // Events come in bursts: evaluate at most every 100 ms, and at most
        // every EVAL_COST_FACTOR times what the last evaluation cost.
        let gap = (eval_cost * EVAL_COST_FACTOR).max(Duration::from_millis(100));
        let settled = last_eval.map_or(true, |t| now.duration_since(t) >= gap);
        if !((due || dirty) && settled) {
            continue;
        }
        dirty = false;
        last_eval = Some(now);
        let cancel = || sh.stop.load(Ordering::SeqCst) || sh.generation.load(Ordering::SeqCst) != generation;
        if cfg.agent.auto.is_some() {
            let gap = (scan_cost * SCAN_COST_FACTOR).max(SCAN_MIN_INTERVAL);
            if last_scan.map_or(true, |t| now.duration_since(t) >= gap) {
                keeper.note_running_until(&cancel);
                last_scan = Some(now);
                scan_cost = now.elapsed();
            }
        }
        keeper.note_workloads_until(&cfg, &cancel);
        let found = keeper.candidates_until(&cfg, &cancel);
        if found.cancelled {
            continue;
        }
        let (files, missing) = (found.files, found.missing);
        sh.metrics.policy_files.set(files.len() as i64);
        sh.metrics.policy_missing.set(missing.len() as i64);
        if missing != logged_missing {
            for m in missing.iter().filter(|m| !logged_missing.contains(m)) {
                log(&format!(
                    "{m}: no such file (the policy keeps it in mind and reports it)"
                ));
            }
            logged_missing = missing;
        }
        if found.cut_short != logged_cut {
            for c in found.cut_short.iter().filter(|c| !logged_cut.contains(c)) {
                log(c);
            }
            logged_cut = found.cut_short;
        }
        if files_watch.is_none() || files != watched {
            files_watch = watch::FileWatch::new(&files).ok().map(|(w, _)| w);
            watched = files.clone();
        }
        *sh.policy_files.lock().unwrap_or_else(|e| e.into_inner()) = files.clone();
        keeper.evaluate_until(&cfg, &files, &sh.metrics, &cancel);
        keeper.keep_store_until(&cfg, &sh.metrics, &cancel);
        eval_cost = now.elapsed();
        let gap = (short_cost * SHORTFALL_COST_FACTOR).max(SHORTFALL_MIN_INTERVAL);
        if !cfg.agent.workloads.is_empty() && last_short.map_or(true, |t| t.elapsed() >= gap) {
            let t = Instant::now();
            let short = actions::shortfalls(keeper.workload_pids());
            *sh.shortfalls.lock().unwrap_or_else(|e| e.into_inner()) = short;
            short_cost = t.elapsed();
            last_short = Some(t);
        }
    }
}
