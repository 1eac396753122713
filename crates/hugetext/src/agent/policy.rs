//! The agent's policy: the `[agent]` table of the warm config file, and the
//! pure decisions made from it (which files are candidates, whether one may
//! be warmed now, the rate limit).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::warm::Config;

/// Where the agent listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9437";

/// The `[agent]` table of the config file.
///
/// ```toml
/// [agent]
/// listen = "127.0.0.1:9437"
/// max_series = 5000
/// globs = ["/usr/lib/x86_64-linux-gnu/libLLVM*.so*"]
/// rate_limit = 6          # warm actions per minute at most
/// poll_interval = "2s"    # where the proc connector is not available
/// [agent.auto]            # every program or library that ran recently…
/// min_eligible_mib = 8    # …with at least this much eligible text
/// ran_within = "1h"
/// ```
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// `ADDR:PORT` for `/metrics` and `/healthz` (`--listen` wins).
    #[serde(deserialize_with = "socket_addr")]
    pub listen: Option<String>,
    /// At most this many labelled series per metric family; the rest are
    /// dropped (largest text first is kept) and counted.
    pub max_series: usize,
    /// Glob patterns of files to keep warm (besides `paths`).
    #[serde(deserialize_with = "globs")]
    pub globs: Vec<String>,
    /// Keep warm what ran recently and is large enough.
    pub auto: Option<AutoRule>,
    /// At most this many warm actions per minute.
    pub rate_limit: u32,
    /// How often to look at processes when exec/exit events are not
    /// available (and to re-check the policy in any case).
    #[serde(deserialize_with = "duration")]
    pub poll_interval: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            listen: None,
            max_series: 5000,
            globs: Vec::new(),
            auto: None,
            rate_limit: 6,
            poll_interval: Duration::from_secs(2),
        }
    }
}

/// "every executable and library with at least N MiB of eligible text that
/// ran in the last T".
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoRule {
    /// Minimum eligible text (whole 2 MiB windows of read-only segments), MiB.
    pub min_eligible_mib: u64,
    /// Mapped by a process within this long (`"1h"`).
    #[serde(deserialize_with = "duration")]
    pub ran_within: Duration,
}

fn socket_addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s: String = serde::Deserialize::deserialize(d)?;
    s.parse::<std::net::SocketAddr>()
        .map_err(|e| serde::de::Error::custom(format!("listen {s:?}: {e} (give ADDR:PORT, e.g. 127.0.0.1:9437)")))?;
    Ok(Some(s))
}

fn globs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v: Vec<String> = serde::Deserialize::deserialize(d)?;
    for g in &v {
        if !g.starts_with('/') {
            return Err(serde::de::Error::custom(format!("glob {g:?} is not an absolute path")));
        }
        glob::Pattern::new(g).map_err(|e| serde::de::Error::custom(format!("glob {g:?}: {e}")))?;
    }
    Ok(v)
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s: String = serde::Deserialize::deserialize(d)?;
    let v = humantime::parse_duration(&s)
        .map_err(|e| serde::de::Error::custom(format!("duration {s:?}: {e} (e.g. \"2s\", \"1h\")")))?;
    if v.is_zero() {
        return Err(serde::de::Error::custom(format!(
            "duration {s:?} must be more than zero"
        )));
    }
    Ok(v)
}

/// The files the policy names explicitly: `paths` and what `globs` match
/// now (sorted, once each; a symbolic link resolved to its file, which is
/// what the agent then opens, never following a link again), and the
/// patterns or paths that match nothing.
pub fn explicit_files(cfg: &Config) -> (BTreeSet<PathBuf>, Vec<String>) {
    let mut files = BTreeSet::new();
    let mut missing = Vec::new();
    for p in &cfg.paths {
        if p.is_file() {
            files.insert(crate::warm::resolve_link(p));
        } else {
            missing.push(p.display().to_string());
        }
    }
    for g in &cfg.agent.globs {
        let mut matched = false;
        if let Ok(it) = glob::glob(g) {
            for p in it.flatten().filter(|p| p.is_file()) {
                matched = true;
                files.insert(crate::warm::resolve_link(&p));
            }
        }
        if !matched {
            missing.push(g.clone());
        }
    }
    (files, missing)
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
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            size: m.len(),
        })
    }
}

/// What the agent knows about a candidate file when it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Whole 2 MiB windows of its read-only segments.
    pub eligible_windows: u64,
    /// Of those, windows held in one PMD-size folio now (`None`: unknown,
    /// no PFN access).
    pub pmd_windows: Option<u64>,
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
    match c.pmd_windows {
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
    fn agent_table_parses_with_defaults_and_rejects_with_positions() {
        let c = Config::parse("paths = [\"/bin/true\"]\n").unwrap();
        assert_eq!(c.agent, AgentConfig::default());
        let c = Config::parse(
            "[agent]\nlisten = \"127.0.0.1:1\"\nglobs = [\"/usr/lib/*.so\"]\nrate_limit = 2\npoll_interval = \"500ms\"\n\
             [agent.auto]\nmin_eligible_mib = 8\nran_within = \"1h\"\n",
        )
        .unwrap();
        assert_eq!(c.agent.listen.as_deref(), Some("127.0.0.1:1"));
        assert_eq!(c.agent.poll_interval, Duration::from_millis(500));
        assert_eq!(
            c.agent.auto,
            Some(AutoRule {
                min_eligible_mib: 8,
                ran_within: Duration::from_secs(3600)
            })
        );
        for (text, want) in [
            (
                "[agent]\nlisten = \"nowhere\"\n",
                "line 2, column 10: listen \"nowhere\"",
            ),
            (
                "[agent]\nglobs = [\"rel/*\"]\n",
                "line 2, column 9: glob \"rel/*\" is not an absolute path",
            ),
            (
                "[agent]\npoll_interval = \"soon\"\n",
                "line 2, column 17: duration \"soon\"",
            ),
            (
                "[agent]\npoll_interval = \"0s\"\n",
                "line 2, column 17: duration \"0s\" must be",
            ),
            ("[agent]\nfrob = 1\n", "line 2, column 1: unknown field `frob`"),
            (
                "[agent.auto]\nran_within = \"1h\"\n",
                "missing field `min_eligible_mib`",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{text:?}: {e}");
        }
    }

    #[test]
    fn decisions() {
        let c = |eligible, pmd, mapped, attempted| Candidate {
            eligible_windows: eligible,
            pmd_windows: pmd,
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
