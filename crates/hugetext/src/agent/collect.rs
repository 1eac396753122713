//! `/metrics`: built at scrape time from [`crate::inspect`] (the code behind
//! `hugetext inspect`), summed per file mapped as text and per cgroup —
//! never per pid — plus the policy's page-cache state, the kernel's file-THP
//! counters from `/proc/vmstat`, and the agent's own counters.
//!
//! A page is rendered whole into memory before anything is sent: a scrape
//! that fails gets an error status, never half a page.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::folio::{Class, Counts, Kind};
use crate::inspect::{self, CopyProofs, Method, Report, Target};
use crate::{kernel, procfs, warm, Result};

/// A label set.
pub type Labels = Vec<(String, String)>;

fn labels<const N: usize>(kv: [(&str, &str); N]) -> Labels {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The agent's own metrics, which live across scrapes.
#[derive(Debug, Clone)]
pub struct AgentMetrics {
    pub scrapes: Counter,
    pub scrape_errors: Family<Labels, Counter>,
    pub scrape_duration: Histogram,
    pub series_dropped: Counter,
    pub actions: Family<Labels, Counter>,
    pub reloads: Family<Labels, Counter>,
    pub events: Family<Labels, Counter>,
    pub policy_missing: Gauge,
    pub policy_files: Gauge,
    /// Proofs that unnamed anonymous text is a copy of a file, made by
    /// reading process memory (a process's copies are proved once).
    pub copy_proofs: Counter,
    /// Their verdicts, kept across scrapes.
    pub copy_verdicts: Arc<Mutex<CopyProofs>>,
}

/// Results of the warm action, and reasons of scrape errors: created at 0 so
/// that `rate()` sees a series before the first event.
pub const ACTION_RESULTS: &[&str] = &[
    "done",
    "blocked",
    "failed",
    "rate_limited",
    "memory_guard",
    "impossible",
];
pub const ERROR_REASONS: &[&str] = &["vanished", "unreadable", "failed", "policy_file", "vmstat"];

impl Default for AgentMetrics {
    fn default() -> Self {
        let m = AgentMetrics {
            scrapes: Counter::default(),
            scrape_errors: Family::default(),
            scrape_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            series_dropped: Counter::default(),
            actions: Family::default(),
            reloads: Family::default(),
            events: Family::default(),
            policy_missing: Gauge::default(),
            policy_files: Gauge::default(),
            copy_proofs: Counter::default(),
            copy_verdicts: Arc::default(),
        };
        for r in ACTION_RESULTS {
            let _ = m
                .actions
                .get_or_create_owned(&labels([("action", "warm"), ("result", r)]));
        }
        for r in ERROR_REASONS {
            let _ = m.scrape_errors.get_or_create_owned(&labels([("reason", r)]));
        }
        for r in ["ok", "error"] {
            let _ = m.reloads.get_or_create_owned(&labels([("result", r)]));
        }
        for s in ["proc_connector", "poll", "inotify"] {
            let _ = m.events.get_or_create_owned(&labels([("source", s)]));
        }
        m
    }
}

impl AgentMetrics {
    /// Count one action (`warm`) with its result.
    pub fn action(&self, action: &str, result: &str) {
        self.actions
            .get_or_create(&labels([("action", action), ("result", result)]))
            .inc();
    }

    /// Count a scrape error (or a skipped process) by reason.
    pub fn error(&self, reason: &str, n: u64) {
        if n > 0 {
            self.scrape_errors
                .get_or_create(&labels([("reason", reason)]))
                .inc_by(n);
        }
    }

    fn register(&self, r: &mut Registry) {
        r.register("scrapes", "Scrapes of /metrics served", self.scrapes.clone());
        r.register(
            "scrape_errors",
            "Scrape problems by reason: processes that vanished or could not be read mid-scrape, failed scrapes",
            self.scrape_errors.clone(),
        );
        r.register_with_unit(
            "scrape_duration",
            "Time to build one /metrics page",
            Unit::Seconds,
            self.scrape_duration.clone(),
        );
        r.register(
            "series_dropped",
            "Labelled series left out of pages because a family reached max_series",
            self.series_dropped.clone(),
        );
        r.register(
            "actions",
            "Policy actions by action and result (done, blocked, failed, rate_limited, memory_guard, impossible)",
            self.actions.clone(),
        );
        r.register("config_reloads", "Config reloads by result", self.reloads.clone());
        r.register(
            "copy_proofs",
            "Unnamed anonymous text proved a copy of its file (or not) by reading process memory; each process's mappings are proved once",
            self.copy_proofs.clone(),
        );
        r.register(
            "events",
            "Process and file events seen, by source (proc_connector, poll, inotify)",
            self.events.clone(),
        );
        r.register(
            "policy_paths_missing",
            "Policy paths and globs that match no regular file",
            self.policy_missing.clone(),
        );
        r.register(
            "policy_files",
            "Files the policy keeps warm now",
            self.policy_files.clone(),
        );
    }
}

/// What a scrape needs besides the kernel: the policy's files and the cap.
#[derive(Debug, Clone)]
pub struct ScrapeInput {
    /// Files whose page-cache state to report.
    pub policy_files: Vec<PathBuf>,
    /// At most this many series per family.
    pub max_series: usize,
    /// Read folio sizes (pagemap + kpageflags) where this process may
    /// (the agent always does); `false`: smaps only, as without
    /// CAP_SYS_ADMIN (the benchmark compares the two).
    pub folio_sizes: bool,
    /// The policy's workload selectors: per selected workload, its text.
    pub workloads: Vec<super::policy::WorkloadRule>,
    /// Per selected workload, bytes of whole windows not mapped huge by
    /// reason code ([`super::actions::shortfalls`]).
    pub shortfalls: BTreeMap<String, BTreeMap<String, u64>>,
    /// The text store's directory (the policy's `shmem_store`).
    pub store: PathBuf,
}

/// The `/proc/vmstat` counters that concern file text on huge pages
/// (counters; `nr_*` are gauges in pages).
pub const VMSTAT_FIELDS: &[&str] = &[
    "thp_file_alloc",
    "thp_file_fallback",
    "thp_file_fallback_charge",
    "thp_file_mapped",
    "thp_collapse_alloc",
    "thp_collapse_alloc_failed",
    "thp_split_page",
    "nr_file_hugepages",
    "nr_shmem_hugepages",
];

/// The [`VMSTAT_FIELDS`] present in `/proc/vmstat` text.
pub fn parse_vmstat(text: &str) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    for l in text.lines() {
        let mut it = l.split_whitespace();
        if let (Some(k), Some(v)) = (it.next(), it.next()) {
            if let (Some(&name), Ok(v)) = (VMSTAT_FIELDS.iter().find(|&&f| f == k), v.parse()) {
                out.push((name, v));
            }
        }
    }
    out
}

/// Per-key sums of an inspection.
#[derive(Debug, Default)]
struct Group {
    counts: Counts,
    processes: u64,
}

/// Keep series until `cap`; count the rest as dropped. Groups come largest
/// first so what is dropped is the small text.
struct Capped {
    cap: usize,
    used: usize,
    dropped: u64,
}

impl Capped {
    fn take(&mut self, n: usize) -> bool {
        if self.used + n > self.cap {
            self.dropped += n as u64;
            false
        } else {
            self.used += n;
            true
        }
    }
}

/// The labelled kB of one group, class names without the kind prefix
/// (`thp-pmd-aligned-2048kB`, `base-page`, `pte-mapped` ...).
fn class_series(report: &Report, c: &Counts) -> Vec<(Kind, String, u64)> {
    let mut v = Vec::new();
    for kind in Kind::ALL {
        for (label, kb) in report.labelled(c, kind, false) {
            let class = label
                .strip_prefix(kind.name())
                .map(|s| s.trim_start_matches('-'))
                .unwrap_or(&label)
                .to_string();
            v.push((kind, class, kb));
        }
    }
    v
}

/// Share of the file-backed text (page cache and shmem) mapped huge, by
/// the unit of huge text (0 when there is none): PMD-mapped; on arm64 with 64 KiB pages, where no
/// page-cache folio reaches the 512 MiB PMD, also text in whole folios of
/// at least the 2 MiB contiguous-PTE block mapped aligned to their size
/// (`PteAligned` of such an order: arm64 maps them with contiguous PTEs,
/// one TLB entry per block; `kernel::huge_unit`).
fn unit_fraction(c: &Counts) -> f64 {
    let (unit, kind) = kernel::huge_unit();
    huge_fraction(
        c,
        (kind == crate::elf::HugeUnit::Contpte).then(|| (unit / kernel::page_size()).trailing_zeros()),
    )
}

/// [`unit_fraction`] of one file's text, its copies included: the file's
/// huge-mapped text and its copies' PMD-mapped anonymous pages, over both
/// (per file the anonymous counts are only copies of it, see [`scrape`]).
fn text_unit_fraction(c: &Counts) -> f64 {
    let copied = c.total(Kind::Anon);
    if copied == 0 {
        return unit_fraction(c);
    }
    let file = c.total(Kind::File);
    let huge = unit_fraction(c) * file as f64 + c.get(Kind::Anon, Class::PmdAligned) as f64;
    huge / (file + copied) as f64
}

/// [`unit_fraction`] with the contpte unit's order in pages, if the unit is
/// a contpte block.
fn huge_fraction(c: &Counts, contpte_order: Option<u32>) -> f64 {
    let kinds = [Kind::File, Kind::Shmem];
    let total: u64 = kinds.iter().map(|&k| c.total(k)).sum();
    if total == 0 {
        return 0.0;
    }
    let mut huge: u64 = kinds.iter().map(|&k| c.get(k, Class::PmdAligned)).sum();
    if let Some(min) = contpte_order {
        for k in kinds {
            huge += (min..crate::folio::MAX_ORDER as u32)
                .map(|o| c.get(k, Class::PteAligned(o)))
                .sum::<u64>();
        }
    }
    huge as f64 / total as f64
}

/// Register one family of per-key text series (bytes by kind and class, PMD
/// fraction, process count), largest first, within the cap.
fn register_groups(
    r: &mut Registry,
    report: &Report,
    groups: HashMap<String, Group>,
    what: (&str, &str),
    cap: usize,
) -> u64 {
    let (name, label) = what;
    let bytes: Family<Labels, Gauge> = Family::default();
    let frac: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    let procs: Family<Labels, Gauge> = Family::default();
    let mut sorted: Vec<(String, Group)> = groups.into_iter().collect();
    sorted.sort_by(|a, b| {
        let t = |g: &Group| Kind::ALL.iter().map(|&k| g.counts.total(k)).sum::<u64>();
        t(&b.1).cmp(&t(&a.1)).then_with(|| a.0.cmp(&b.0))
    });
    let mut capped = Capped {
        cap,
        used: 0,
        dropped: 0,
    };
    for (key, g) in sorted {
        let series = class_series(report, &g.counts);
        // Bytes, the ratio under both its names, the process count.
        if !capped.take(series.len() + 3) {
            continue;
        }
        for (kind, class, kb) in series {
            bytes
                .get_or_create(&labels([(label, &key), ("kind", kind.name()), ("class", &class)]))
                .set((kb * 1024) as i64);
        }
        frac.get_or_create(&labels([(label, &key)])).set(if name == "exe" {
            text_unit_fraction(&g.counts)
        } else {
            unit_fraction(&g.counts)
        });
        procs.get_or_create(&labels([(label, &key)])).set(g.processes as i64);
    }
    r.register_with_unit(
        format!("{name}_text"),
        format!("Text mapped by processes, per {label}, kind (file: page cache, shmem: tmpfs such as the text store, anon: copies) and class (base-page, thp-pte-aligned-<size>, thp-pmd-aligned-<size>, ...); shared text once per mapping"),
        Unit::Bytes,
        bytes,
    );
    r.register(
        format!("{name}_unit_mapped_ratio"),
        format!("Share of the file-backed text mapped huge, per {label}: by the unit of huge text (PMDs; arm64 with 64 KiB pages: whole 2 MiB contiguous-PTE blocks)"),
        frac.clone(),
    );
    r.register(
        format!("{name}_pmd_mapped_ratio"),
        format!("Deprecated name of {name}_unit_mapped_ratio (removed in the next release)"),
        frac,
    );
    r.register(
        format!("{name}_processes"),
        format!("Processes mapping text, per {label}"),
        procs,
    );
    capped.dropped
}

/// Whether a mapping's path is that of shared anonymous memory: the
/// kernel's `/dev/zero (deleted)` of `MAP_SHARED|MAP_ANONYMOUS`, a memfd
/// (`/memfd:NAME (deleted)`), or a System V segment (`/SYSV…`).
fn shared_anonymous(path: &str) -> bool {
    path == "/dev/zero (deleted)" || path.starts_with("/memfd:") || path.starts_with("/SYSV")
}

/// Bytes used and the size of the tmpfs mounted at `root` (`statvfs`);
/// `None` when nothing is there, or it is not a tmpfs (no store mounted:
/// the directory's own filesystem says nothing about the store).
fn store_usage(root: &Path) -> Option<(u64, u64)> {
    let fs = rustix::fs::statfs(root).ok()?;
    if crate::fsutil::fs_type_name(fs.f_type as u64) != "tmpfs" {
        return None;
    }
    let v = rustix::fs::statvfs(root).ok()?;
    Some((
        v.f_blocks.saturating_sub(v.f_bfree) * v.f_frsize,
        v.f_blocks * v.f_frsize,
    ))
}

/// Build one `/metrics` page: inspect every process now, then render.
pub fn scrape(m: &AgentMetrics, input: &ScrapeInput) -> Result<String> {
    let start = Instant::now();
    let opts = inspect::Options {
        target: Target::System,
        all: false,
        cont_orders: Vec::new(),
        mappings: true,
        method: (!input.folio_sizes).then_some(Method::SmapsOnly),
    };
    let mut report = inspect::inspect(&opts, &())?;
    // Text `run` copied into anonymous memory counts as its file's (named,
    // or proven by its bytes where the kernel has no anonymous VMA names).
    {
        let mut proofs = m.copy_verdicts.lock().unwrap_or_else(|e| e.into_inner());
        let before = proofs.reads();
        report.name_copies_cached(&mut proofs);
        m.copy_proofs.inc_by(proofs.reads() - before);
    }
    let mut r = Registry::with_prefix("hugetext");

    // Per file mapped as text, and per cgroup.
    let mut by_path: HashMap<String, Group> = HashMap::new();
    let mut by_cgroup: HashMap<String, Group> = HashMap::new();
    let mut by_workload: HashMap<String, Group> = HashMap::new();
    let mut vanished = 0;
    // Anonymous executable memory: copies `run` made, and the rest (JIT
    // code buffers and the like), bytes.
    let (mut anon_copied, mut anon_other) = (0u64, 0u64);
    for p in &report.processes {
        let mut paths: BTreeMap<&str, Counts> = BTreeMap::new();
        for mr in &p.mappings {
            if mr.vma.is_exec() && shared_anonymous(&mr.vma.path) {
                // Shared anonymous memory (`MAP_SHARED|MAP_ANONYMOUS`, a
                // memfd): a JIT's code buffer, no program's text; its
                // pages are shmem.
                anon_other += mr.counts.total(Kind::Anon) + mr.counts.total(Kind::Shmem);
            } else if mr.vma.is_file() {
                paths.entry(mr.vma.path.as_str()).or_default().merge(&mr.counts);
            } else if let Some(file) = &mr.copy_of {
                paths.entry(file.as_str()).or_default().merge(&mr.counts);
                anon_copied += mr.counts.total(Kind::Anon);
            } else if mr.vma.is_exec() && !mr.vma.path.starts_with("[v") {
                anon_other += mr.counts.total(Kind::Anon);
            }
        }
        for (path, c) in paths {
            let g = by_path.entry(path.to_string()).or_default();
            g.counts.merge(&c);
            g.processes += 1;
        }
        match procfs::cgroup_of(p.pid) {
            Some(cg) => {
                if let Some(w) = super::policy::workload_of(&input.workloads, &cg) {
                    let g = by_workload.entry(w).or_default();
                    g.counts.merge(&p.counts);
                    g.processes += 1;
                }
                let g = by_cgroup.entry(cg).or_default();
                g.counts.merge(&p.counts);
                g.processes += 1;
            }
            None => vanished += 1,
        }
    }
    let cap = input.max_series.max(1);
    let mut dropped = register_groups(&mut r, &report, by_path, ("exe", "path"), cap);
    dropped += register_groups(&mut r, &report, by_cgroup, ("cgroup", "cgroup"), cap);
    if !input.workloads.is_empty() {
        dropped += register_groups(&mut r, &report, by_workload, ("workload", "workload"), cap);
        // Why each selected workload's text falls short, as the policy
        // last explained it: bytes of whole windows not mapped huge, by
        // explain's reason code.
        let short: Family<Labels, Gauge> = Family::default();
        for (w, reasons) in &input.shortfalls {
            for (reason, bytes) in reasons {
                short
                    .get_or_create(&labels([("workload", w), ("reason", reason)]))
                    .set(*bytes as i64);
            }
        }
        r.register_with_unit(
            "workload_short",
            "Text of each selected workload in whole 2 MiB windows that is not mapped huge, by reason (the codes of hugetext explain); absent when all of it is",
            Unit::Bytes,
            short,
        );
    }

    let system: Family<Labels, Gauge> = Family::default();
    for (kind, class, kb) in class_series(&report, &report.total) {
        system
            .get_or_create(&labels([("kind", kind.name()), ("class", &class)]))
            .set((kb * 1024) as i64);
    }
    r.register_with_unit(
        "system_text",
        "Text mapped by all processes, by kind and class; shared text once per mapping",
        Unit::Bytes,
        system,
    );
    r.register(
        "system_unit_mapped_ratio",
        "Share of all file-backed text mapped huge: by the unit of huge text (PMDs; arm64 with 64 KiB pages: whole 2 MiB contiguous-PTE blocks)",
        ConstGauge::new(unit_fraction(&report.total)),
    );
    r.register(
        "system_pmd_mapped_ratio",
        "Deprecated name of system_unit_mapped_ratio (removed in the next release)",
        ConstGauge::new(unit_fraction(&report.total)),
    );

    // The text store: what its tmpfs holds, and its cap.
    if let Some((used, size)) = store_usage(&input.store) {
        let entries = crate::shmemstore::list(&input.store).unwrap_or_default();
        let stale = entries
            .iter()
            .filter(|e| e.state == crate::shmemstore::State::Stale)
            .count();
        r.register(
            "text_store_entries",
            "Files in the text store (copies `run` maps text from)",
            ConstGauge::new(entries.len() as i64),
        );
        r.register(
            "text_store_stale",
            "Entries of the text store whose original changed or is gone: never used, holding memory until the next warm --shmem (or the agent's shmem key) drops them",
            ConstGauge::new(stale as i64),
        );
        r.register_with_unit(
            "text_store_used",
            "Memory the text store's files take (its tmpfs: shmem, counted once however many processes map it)",
            Unit::Bytes,
            ConstGauge::new(used as i64),
        );
        r.register_with_unit(
            "text_store_size",
            "The text store's cap (its tmpfs's size=)",
            Unit::Bytes,
            ConstGauge::new(size as i64),
        );
    }

    let anon: Family<Labels, Gauge> = Family::default();
    let bytes = |pages: u64| (pages * kernel::page_size() as u64) as i64;
    anon.get_or_create(&labels([("owner", "hugetext")]))
        .set(bytes(anon_copied));
    anon.get_or_create(&labels([("owner", "other")])).set(bytes(anon_other));
    r.register_with_unit(
        "anon_exec",
        "Anonymous executable memory of all processes: text `hugetext run` copied (owner=hugetext, also counted under its file in exe_text) and anonymous executable memory that is not hugetext's (owner=other: JIT code buffers and the like)",
        Unit::Bytes,
        anon,
    );

    // Processes that could not be read.
    let sk = &report.skipped;
    let skipped: Family<Labels, Gauge> = Family::default();
    for (reason, n) in [("vanished", sk.vanished + vanished), ("unreadable", sk.unreadable)] {
        skipped.get_or_create(&labels([("reason", reason)])).set(n as i64);
        m.error(reason, n);
    }
    r.register(
        "scrape_processes_skipped",
        "Processes left out of this page: vanished mid-scrape, or unreadable (no permission)",
        skipped,
    );
    r.register(
        "agent",
        "How the agent reads memory: pagemap-scan or pagemap-smaps (folio sizes), smaps-only (no CAP_SYS_ADMIN)",
        Info::new(labels([
            ("method", method_name(report.method)),
            ("version", env!("CARGO_PKG_VERSION")),
        ])),
    );

    // The policy's files: eligible windows, and those in folios of the unit.
    let eligible: Family<Labels, Gauge> = Family::default();
    let in_unit: Family<Labels, Gauge> = Family::default();
    let mut capped = Capped {
        cap,
        used: 0,
        dropped: 0,
    };
    for f in &input.policy_files {
        match file_state(f) {
            Ok((e, p)) => {
                if !capped.take(1) {
                    continue;
                }
                let l = labels([("path", &f.display().to_string())]);
                eligible.get_or_create(&l).set(e as i64);
                if let Some(p) = p {
                    in_unit.get_or_create(&l).set(p as i64);
                }
            }
            Err(_) => m.error("policy_file", 1),
        }
    }
    dropped += capped.dropped;
    r.register(
        "policy_eligible_windows",
        "Whole windows of the unit of huge text (the PMD size, or the contiguous-PTE block on arm64 with 64 KiB pages) of the read-only segments of each file the policy keeps warm",
        eligible,
    );
    r.register(
        "policy_unit_windows",
        "Of those, windows held in one page-cache folio of at least the unit now (needs CAP_SYS_ADMIN)",
        in_unit.clone(),
    );
    r.register(
        "policy_pmd_windows",
        "Deprecated name of policy_unit_windows (removed in the next release)",
        in_unit,
    );

    // The kernel's counters.
    match std::fs::read_to_string("/proc/vmstat") {
        Ok(text) => {
            for (name, v) in parse_vmstat(&text) {
                if name.starts_with("nr_") {
                    r.register(
                        format!("vmstat_{name}"),
                        format!("/proc/vmstat {name} (pages)"),
                        ConstGauge::new(v as i64),
                    );
                } else {
                    r.register(
                        format!("vmstat_{name}"),
                        format!("/proc/vmstat {name}"),
                        ConstCounter::new(v),
                    );
                }
            }
        }
        Err(_) => m.error("vmstat", 1),
    }

    m.series_dropped.inc_by(dropped);
    m.scrapes.inc();
    m.scrape_duration.observe(start.elapsed().as_secs_f64());
    m.register(&mut r);
    let mut page = String::with_capacity(64 << 10);
    encode(&mut page, &r).map_err(|_| crate::Error::Invalid("cannot encode the metrics page".into()))?;
    Ok(page)
}

/// `Content-Type` of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the classic Prometheus text format.
pub const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's `Accept` header prefers OpenMetrics to the classic
/// text format (what Prometheus sends by default; curl's `*/*` gets the
/// classic format).
pub fn wants_openmetrics(accept: &str) -> bool {
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut params = range.split(';').map(str::trim);
        let media = params.next().unwrap_or("").to_ascii_lowercase();
        let q = params
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|v| v.parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

/// The classic Prometheus text format (0.0.4) of an OpenMetrics page made
/// by [`scrape`]: counter families are named with their `_total` samples,
/// info families become gauges named `_info`, and the `# UNIT` and `# EOF`
/// lines (which the classic format does not have) are left out.
pub fn to_classic(openmetrics: &str) -> String {
    let types: HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("HELP", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("TYPE", r)));
        match meta {
            Some((kw, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let ty = types.get(name).copied().unwrap_or("unknown");
                let (name, tail) = classic_meta(kw, name, ty, tail);
                out.push_str(&format!("# {kw} {name} {tail}\n"));
            }
            None if line.starts_with("# ") || line.is_empty() => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// A `# HELP`/`# TYPE` line's family name and rest in the classic format.
fn classic_meta(kw: &str, name: &str, ty: &str, tail: &str) -> (String, String) {
    let name = match ty {
        "counter" => format!("{name}_total"),
        "info" => format!("{name}_info"),
        _ => name.to_string(),
    };
    let tail = match (kw, tail) {
        ("TYPE", "info") => "gauge".to_string(),
        ("TYPE", "unknown") => "untyped".to_string(),
        // OpenMetrics escapes quotes in help text; the classic format does not.
        ("HELP", t) => t.replace("\\\"", "\""),
        (_, t) => t.to_string(),
    };
    (name, tail)
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::PagemapScan => "pagemap-scan",
        Method::PagemapSmaps => "pagemap-smaps",
        Method::SmapsOnly => "smaps-only",
    }
}

/// Eligible windows of `path` and (with PFN access) how many are PMD folios
/// now, measured the way `warm` measures its result.
pub fn file_state(path: &Path) -> Result<(u64, Option<u64>)> {
    target_state(&warm::plan_exact(path)?)
}

/// [`file_state`] of a planned target (the agent's, cut to hot windows).
pub fn target_state(t: &warm::Target) -> Result<(u64, Option<u64>)> {
    let eligible = t.eligible_windows();
    if !kernel::pfn_access() || eligible == 0 {
        return Ok((eligible, None));
    }
    Ok((eligible, Some(warm::pmd_windows_now(t)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's size is what its tmpfs says (statvfs): a 4 MiB file in
    /// a 64 MiB tmpfs mounted here; a directory on another filesystem is
    /// no store.
    #[test]
    fn store_usage_is_the_tmpfs_statvfs() {
        let disk = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")).unwrap();
        if crate::fsutil::fs_name_at(disk.path()).is_ok_and(|n| n != "tmpfs") {
            assert_eq!(store_usage(disk.path()), None);
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m", "hugetext-test"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return;
        }
        std::fs::write(dir.path().join("f"), vec![1u8; 4 << 20]).unwrap();
        let got = store_usage(dir.path());
        let _ = std::process::Command::new("umount").arg(dir.path()).status();
        let (used, size) = got.expect("a tmpfs is a store");
        assert_eq!(size, 64 << 20);
        assert!((4 << 20..8 << 20).contains(&used), "{used}");
    }

    #[test]
    fn contpte_mapped_text_counts_as_huge_where_it_is_the_unit() {
        // 64 KiB pages: order 5 is the 2 MiB contpte block.
        let mut c = Counts::default();
        c.add(Kind::File, Class::PteAligned(5), 32); // one 2 MiB folio, aligned
        c.add(Kind::File, Class::PteAligned(7), 128); // 8 MiB
        c.add(Kind::File, Class::PteAligned(4), 16); // 1 MiB: below the block
        c.add(Kind::File, Class::PteUnaligned(5), 32); // not aligned: no contpte
        c.add(Kind::File, Class::BasePage, 48);
        c.add(Kind::Anon, Class::PteAligned(5), 32); // anon is not counted
        assert_eq!(huge_fraction(&c, Some(5)), 160.0 / 256.0);
        // The PMD unit: PMD-mapped only.
        assert_eq!(huge_fraction(&c, None), 0.0);
        c.add(Kind::File, Class::PmdAligned, 256);
        assert_eq!(huge_fraction(&c, None), 0.5);
        assert_eq!(huge_fraction(&Counts::default(), Some(5)), 0.0);
    }

    #[test]
    fn vmstat_fields_of_this_kernel() {
        let v = parse_vmstat("thp_file_alloc 5\nnr_file_hugepages 2\npgfault 9\nbad\n");
        assert_eq!(v, vec![("thp_file_alloc", 5), ("nr_file_hugepages", 2)]);
        let real = parse_vmstat(&std::fs::read_to_string("/proc/vmstat").unwrap());
        assert!(real.iter().any(|(k, _)| *k == "thp_file_mapped"), "{real:?}");
    }

    #[test]
    fn openmetrics_only_for_scrapers_that_prefer_it() {
        assert!(wants_openmetrics(
            "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        ));
        assert!(wants_openmetrics("application/openmetrics-text"));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics(
            "application/openmetrics-text;q=0.2,text/plain;q=0.9"
        ));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
        assert!(!wants_openmetrics(""));
    }

    #[test]
    fn classic_format_names_counters_and_infos_as_their_samples() {
        let om = "# HELP a_scrapes Scrapes \\\"served\\\".\n# TYPE a_scrapes counter\na_scrapes_total 3\n\
                  # HELP a_agent How.\n# TYPE a_agent info\na_agent_info{m=\"x\"} 1\n\
                  # HELP a_text_bytes Text.\n# TYPE a_text_bytes gauge\n# UNIT a_text_bytes bytes\na_text_bytes 5\n# EOF\n";
        assert_eq!(
            to_classic(om),
            "# HELP a_scrapes_total Scrapes \"served\".\n# TYPE a_scrapes_total counter\na_scrapes_total 3\n\
             # HELP a_agent_info How.\n# TYPE a_agent_info gauge\na_agent_info{m=\"x\"} 1\n\
             # HELP a_text_bytes Text.\n# TYPE a_text_bytes gauge\na_text_bytes 5\n"
        );
    }

    #[test]
    fn series_cap_counts_what_it_drops() {
        let mut c = Capped {
            cap: 5,
            used: 0,
            dropped: 0,
        };
        assert!(c.take(3));
        assert!(!c.take(3));
        assert!(c.take(2));
        assert!(!c.take(1));
        assert_eq!((c.used, c.dropped), (5, 4));
    }

    #[test]
    fn a_page_of_this_system() {
        let m = AgentMetrics::default();
        let page = scrape(
            &m,
            &ScrapeInput {
                policy_files: vec![],
                max_series: 100,
                folio_sizes: true,
                workloads: Vec::new(),
                shortfalls: Default::default(),
                store: crate::shmemstore::DEFAULT_ROOT.into(),
            },
        )
        .unwrap();
        assert!(page.ends_with("# EOF\n"), "{page}");
        assert!(page.contains("hugetext_exe_text_bytes{path=\""), "{page}");
        assert!(page.contains("hugetext_scrapes_total 1\n"), "{page}");
        assert!(page.contains("hugetext_vmstat_thp_file_mapped_total "), "{page}");
        // The cap holds: at most 100 series per exe family.
        let n = page
            .lines()
            .filter(|l| l.starts_with("hugetext_exe_text_bytes{"))
            .count();
        assert!(n <= 100, "{n}");
        assert!(!page.lines().any(|l| l.contains("pid=")));
    }
}
