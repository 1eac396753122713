//! The config file that `hugetext warm --config` and `hugetext agent
//! --config` read: the programs to keep warm, the memory guard, and the
//! agent's `[agent]` table. One format, below both commands; values are
//! validated while parsing, so that an error points at them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::units::human;
use crate::{Error, Result};

/// How much memory `warm` may fill: a share of `MemAvailable` or a size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemLimit {
    /// Percent of `MemAvailable` (0–100).
    Percent(f64),
    /// Bytes.
    Bytes(u64),
}

impl Default for MemLimit {
    fn default() -> Self {
        MemLimit::Percent(50.0)
    }
}

impl std::str::FromStr for MemLimit {
    type Err = Error;

    /// `50%`, `4G`, `512M`, `2GiB`, `1048576` (bytes).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::Invalid(format!(
                "bad memory limit {s:?}: give a percentage of available memory (50%) or a size (4G, 512M, 2GiB)"
            ))
        };
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(0.0..=100.0).contains(&v) {
                return Err(bad());
            }
            return Ok(MemLimit::Percent(v));
        }
        let digits = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(digits);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return Err(bad()),
        };
        Ok(MemLimit::Bytes((v * mult as f64) as u64))
    }
}

impl std::fmt::Display for MemLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemLimit::Percent(p) => write!(f, "{p}% of available memory"),
            MemLimit::Bytes(b) => write!(f, "{}", human(*b)),
        }
    }
}

/// `hugetext warm --config FILE` and `hugetext agent --config FILE`: the
/// programs to keep warm, in TOML. The `[agent]` table is the agent's policy
/// and settings ([`AgentConfig`]); `warm` ignores it.
///
/// ```toml
/// # /etc/hugetext/warm.conf
/// paths = ["/usr/bin/clang-19", "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"]
/// deps = true          # also every shared library they load
/// max_mem = "25%"      # memory guard: share of MemAvailable, or a size ("4G")
/// replace = false      # --replace for files running processes block
/// hot = "/etc/hugetext/clang.json"   # only the windows holding hot_share
/// hot_share = 99                     # percent of this profile's samples
/// ```
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Files to warm (absolute paths).
    #[serde(default, deserialize_with = "absolute_paths")]
    pub paths: Vec<PathBuf>,
    /// Also warm the shared libraries of ELF programs.
    #[serde(default)]
    pub deps: bool,
    /// Memory guard (`50%`, `4G`).
    #[serde(default, deserialize_with = "mem_limit")]
    pub max_mem: Option<MemLimit>,
    /// Replace blocked files with warmed copies.
    #[serde(default)]
    pub replace: bool,
    /// A profile (`hugetext profile -o`): warm only the windows holding
    /// `hot_share` of its samples; files it does not name are not warmed.
    #[serde(default, deserialize_with = "absolute_path")]
    pub hot: Option<PathBuf>,
    /// Percent of the profile's samples (default 99).
    #[serde(default, deserialize_with = "percent")]
    pub hot_share: Option<f64>,
    /// `hugetext agent`: what to keep warm besides `paths`, and its settings.
    #[serde(default)]
    pub agent: AgentConfig,
}

/// Validated while parsing, so that an error points at the value.
fn absolute_paths<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<PathBuf>, D::Error> {
    let v: Vec<PathBuf> = serde::Deserialize::deserialize(d)?;
    if let Some(p) = v.iter().find(|p| !p.is_absolute()) {
        return Err(serde::de::Error::custom(format!(
            "{:?} is not an absolute path",
            p.display().to_string()
        )));
    }
    Ok(v)
}

fn absolute_path<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<PathBuf>, D::Error> {
    let p: PathBuf = serde::Deserialize::deserialize(d)?;
    if !p.is_absolute() {
        return Err(serde::de::Error::custom(format!(
            "{:?} is not an absolute path",
            p.display().to_string()
        )));
    }
    Ok(Some(p))
}

fn percent<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<f64>, D::Error> {
    let v: f64 = serde::Deserialize::deserialize(d)?;
    if !(v > 0.0 && v <= 100.0) {
        return Err(serde::de::Error::custom("hot_share must be a percentage in (0, 100]"));
    }
    Ok(Some(v))
}

fn mem_limit<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<MemLimit>, D::Error> {
    let s: String = serde::Deserialize::deserialize(d)?;
    s.parse::<MemLimit>().map(Some).map_err(serde::de::Error::custom)
}

/// 1-based line and column of byte `offset` in `s`.
fn line_col(s: &str, offset: usize) -> (usize, usize) {
    let before = &s[..offset.min(s.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// A config parse error: where (line, column) and what, on one line.
fn parse_error(s: &str, e: toml::de::Error) -> (Option<(usize, usize)>, String) {
    let at = e.span().map(|sp| line_col(s, sp.start));
    (at, e.message().trim().replace('\n', " "))
}

impl Config {
    /// The `hot` key's windows (None without it); a profile that cannot be
    /// used is an error.
    pub fn hot_windows(&self) -> Result<Option<Vec<crate::profile::HotFile>>> {
        let Some(p) = &self.hot else {
            return Ok(None);
        };
        let share = self.hot_share.unwrap_or(99.0) / 100.0;
        crate::profile::load_hot(p, share).map(Some)
    }

    /// Read and parse a config file; errors are one line,
    /// `FILE:LINE:COLUMN: what`.
    pub fn load(path: &Path) -> Result<Config> {
        let s = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        toml::from_str(&s).map_err(|e| {
            let (at, msg) = parse_error(&s, e);
            Error::Invalid(match at {
                Some((l, c)) => format!("{}:{l}:{c}: {msg}", path.display()),
                None => format!("{}: {msg}", path.display()),
            })
        })
    }

    /// Parse config text; errors are one line, `line L, column C: what`.
    pub fn parse(s: &str) -> Result<Config> {
        toml::from_str(s).map_err(|e| {
            let (at, msg) = parse_error(s, e);
            Error::Invalid(match at {
                Some((l, c)) => format!("line {l}, column {c}: {msg}"),
                None => msg,
            })
        })
    }
}

/// The `[agent]` table of the config file.
///
/// ```toml
/// [agent]
/// listen = "127.0.0.1:9437"
/// max_series = 5000
/// globs = ["/usr/lib/x86_64-linux-gnu/libLLVM*.so*"]
/// rate_limit = 6          # warm actions per minute at most
/// shmem = ["/usr/bin/postgres", "/usr/lib/x86_64-linux-gnu/libLLVM*.so*"]  # kept in the text store
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
    /// Paths or glob patterns of files to keep in the text store (as
    /// `hugetext warm --shmem` does): added when missing, added again when
    /// the original changed (the stale copy is dropped).
    #[serde(deserialize_with = "globs")]
    pub shmem: Vec<String>,
    /// The text store's directory (`--store` of `warm --shmem` and `run`).
    pub shmem_store: PathBuf,
    /// At most this many warm actions per minute.
    pub rate_limit: u32,
    /// How often to look at processes when exec/exit events are not
    /// available (and to re-check the policy in any case).
    #[serde(deserialize_with = "duration")]
    pub poll_interval: Duration,
    /// Workloads selected by cgroup (`[[agent.workloads]]`): the text of
    /// every process in them is kept warm, and each one's ratio exported.
    pub workloads: Vec<WorkloadRule>,
}

/// One `[[agent.workloads]]` entry: exactly one selector, and `exclude`.
///
/// ```toml
/// [[agent.workloads]]
/// unit = "nginx.service"          # a systemd unit (glob: "ht-*.service")
/// [[agent.workloads]]
/// container = "3f2a9c0d1e7b"      # a container id, or its first 12+ hex digits
/// [[agent.workloads]]
/// pod = "0b5e3c2a-…"              # a Kubernetes pod UID
/// [[agent.workloads]]
/// cgroup = "/kubepods/*"          # a glob over the cgroup path
/// exclude = true                  # opt out: never selected
/// ```
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(try_from = "RawWorkloadRule")]
pub struct WorkloadRule {
    /// What selects the cgroups.
    pub selector: Selector,
    /// An opt-out: cgroups it selects are never selected by another entry.
    pub exclude: bool,
}

/// What a [`WorkloadRule`] selects, by cgroup path.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// A systemd unit: a component of the cgroup path matches this glob.
    Unit(String),
    /// A container: a component of the cgroup path is its id (as podman,
    /// Docker, containerd and CRI-O name it), which starts with this.
    Container(String),
    /// A Kubernetes pod: a component is `pod<UID>` (cgroupfs driver) or
    /// ends in `-pod<UID with _>.slice` (systemd driver).
    Pod(String),
    /// A glob over the whole cgroup path (`*` crosses `/`).
    Cgroup(String),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkloadRule {
    unit: Option<String>,
    container: Option<String>,
    pod: Option<String>,
    cgroup: Option<String>,
    #[serde(default)]
    exclude: bool,
}

impl TryFrom<RawWorkloadRule> for WorkloadRule {
    type Error = String;

    fn try_from(r: RawWorkloadRule) -> std::result::Result<Self, String> {
        let mut given = Vec::new();
        if let Some(u) = r.unit {
            glob::Pattern::new(&u).map_err(|e| format!("unit {u:?}: {e}"))?;
            if u.contains('/') {
                return Err(format!("unit {u:?}: a unit name, without /"));
            }
            given.push(Selector::Unit(u));
        }
        if let Some(c) = r.container {
            if c.len() < 12 || !c.chars().all(|x| x.is_ascii_hexdigit()) {
                return Err(format!(
                    "container {c:?}: give its id, or at least its first 12 hex digits (podman ps, crictl ps)"
                ));
            }
            given.push(Selector::Container(c.to_ascii_lowercase()));
        }
        if let Some(p) = r.pod {
            if p.len() < 8 || !p.chars().all(|x| x.is_ascii_hexdigit() || x == '-' || x == '_') {
                return Err(format!(
                    "pod {p:?}: give its UID (kubectl get pod NAME -o jsonpath='{{.metadata.uid}}')"
                ));
            }
            given.push(Selector::Pod(p.to_ascii_lowercase().replace('_', "-")));
        }
        if let Some(g) = r.cgroup {
            if !g.starts_with('/') {
                return Err(format!(
                    "cgroup {g:?}: an absolute cgroup path (as in /proc/PID/cgroup)"
                ));
            }
            glob::Pattern::new(&g).map_err(|e| format!("cgroup {g:?}: {e}"))?;
            given.push(Selector::Cgroup(g));
        }
        match given.len() {
            1 => Ok(WorkloadRule {
                selector: given.pop().unwrap(),
                exclude: r.exclude,
            }),
            0 => Err("a workload needs one of unit, container, pod or cgroup".into()),
            _ => Err("a workload takes one of unit, container, pod or cgroup, not several".into()),
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            listen: None,
            max_series: 5000,
            globs: Vec::new(),
            auto: None,
            shmem: Vec::new(),
            shmem_store: PathBuf::from(crate::shmemstore::DEFAULT_ROOT),
            rate_limit: 6,
            poll_interval: Duration::from_secs(2),
            workloads: Vec::new(),
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
        if let Some(fs) = under_kernel_fs(g) {
            return Err(serde::de::Error::custom(format!(
                "glob {g:?} reaches into {fs}, which holds no programs to warm (and links that loop): name the files' own directories"
            )));
        }
    }
    Ok(v)
}

/// `/proc` or `/sys` when the absolute pattern or path `p` (its `..`
/// resolved lexically) names something in them, or may (a wildcard in its
/// first component). Pure.
pub fn under_kernel_fs(p: &str) -> Option<&'static str> {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let first = parts.first()?;
    ["/proc", "/sys"]
        .into_iter()
        .find(|fs| glob::Pattern::new(first).is_ok_and(|pat| pat.matches(&fs[1..])))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_into_proc_and_sys_are_named() {
        assert_eq!(under_kernel_fs("/sys/**"), Some("/sys"));
        assert_eq!(under_kernel_fs("/proc/*/exe"), Some("/proc"));
        assert_eq!(under_kernel_fs("/usr/../proc/x"), Some("/proc"));
        assert_eq!(under_kernel_fs("//./sys"), Some("/sys"));
        assert_eq!(under_kernel_fs("/*/lib/*.so"), Some("/proc"));
        assert_eq!(under_kernel_fs("/usr/lib/**/*.so"), None);
        assert_eq!(under_kernel_fs("/srv/proc/*.so"), None);
    }

    #[test]
    fn mem_limits_parse() {
        assert_eq!("50%".parse::<MemLimit>().unwrap(), MemLimit::Percent(50.0));
        assert_eq!("4G".parse::<MemLimit>().unwrap(), MemLimit::Bytes(4 << 30));
        assert_eq!("512MiB".parse::<MemLimit>().unwrap(), MemLimit::Bytes(512 << 20));
        assert_eq!("1.5g".parse::<MemLimit>().unwrap(), MemLimit::Bytes(3 << 29));
        assert_eq!("4096".parse::<MemLimit>().unwrap(), MemLimit::Bytes(4096));
        for bad in ["", "150%", "-1%", "12Q", "G", "abc"] {
            let e = bad.parse::<MemLimit>().unwrap_err().to_string();
            assert!(e.contains("bad memory limit") && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn config_parses_and_rejects_with_line_numbers() {
        let c = Config::parse("paths = [\"/bin/true\"]\ndeps = true\nmax_mem = \"25%\"\n").unwrap();
        assert_eq!(c.paths, vec![PathBuf::from("/bin/true")]);
        assert!(c.deps && !c.replace);
        let e = Config::parse("paths = [\"/bin/true\"]\nfrobnicate = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2, column 1") && e.contains("frobnicate"), "{e}");
        assert!(Config::parse("paths = [\"relative\"]").is_err());
        let e = Config::parse("deps = true\nmax_mem = \"lots\"")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 2, column 11: bad memory limit"), "{e}");
    }

    #[test]
    fn load_names_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("warm.conf");
        std::fs::write(&p, "deps = true\npaths = [\"/bin/true\", \"rel\"]\n").unwrap();
        let e = Config::load(&p).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}:2:9: ", p.display())), "{e}");
        assert!(e.contains("not an absolute path") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn shipped_example_config_parses() {
        let c = Config::parse(include_str!("../../../packaging/warm.conf.example")).unwrap();
        assert!(c.deps && !c.replace && c.paths.len() == 2);
        assert_eq!(c.max_mem, Some(MemLimit::Percent(25.0)));
    }

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
        assert!(c.agent.shmem.is_empty());
        assert_eq!(c.agent.shmem_store, PathBuf::from("/run/hugetext/text"));
        let st = Config::parse(
            "[agent]\nshmem = [\"/usr/bin/postgres\", \"/usr/lib/libLLVM*.so*\"]\nshmem_store = \"/srv/store\"\n",
        )
        .unwrap();
        assert_eq!(st.agent.shmem, ["/usr/bin/postgres", "/usr/lib/libLLVM*.so*"]);
        assert_eq!(st.agent.shmem_store, PathBuf::from("/srv/store"));
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
                "[agent]\nshmem = [\"bin/postgres\"]\n",
                "line 2, column 9: glob \"bin/postgres\" is not an absolute path",
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
                "[[agent.workloads]]\nunit = \"a.service\"\npod = \"0b5e3c2a-1111\"\n",
                "one of unit, container, pod or cgroup, not several",
            ),
            ("[[agent.workloads]]\nexclude = true\n", "a workload needs one of"),
            ("[[agent.workloads]]\ncontainer = \"abc\"\n", "first 12 hex digits"),
            (
                "[[agent.workloads]]\ncgroup = \"kubepods\"\n",
                "an absolute cgroup path",
            ),
            (
                "[agent.auto]\nran_within = \"1h\"\n",
                "missing field `min_eligible_mib`",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{text:?}: {e}");
        }
    }
}
