//! The config file (`--config`), the systemd `.path` unit, and the memory
//! guard (`--max-mem`).

use std::path::{Path, PathBuf};

use super::report::human;
use crate::{procfs, Error, Result};

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

/// Refuse (one clear error) when `bytes` is more than `limit` allows.
pub fn check_memory(bytes: u64, limit: MemLimit) -> Result<()> {
    let avail = procfs::mem_available()?;
    let allowed = match limit {
        MemLimit::Percent(p) => (avail as f64 * p / 100.0) as u64,
        MemLimit::Bytes(b) => b,
    };
    if bytes > allowed {
        return Err(Error::Invalid(format!(
            "refusing to warm {}: more than the memory guard allows ({}, {} with {} available); raise --max-mem or warm fewer files",
            human(bytes),
            limit,
            human(allowed),
            human(avail)
        )));
    }
    Ok(())
}

/// `hugetext warm --config FILE` and `hugetext agent --config FILE`: the
/// programs to keep warm, in TOML. The `[agent]` table is the agent's policy
/// and settings ([`crate::agent::AgentConfig`]); `warm` ignores it.
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
    pub max_mem: Option<String>,
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
    pub agent: crate::agent::AgentConfig,
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

fn mem_limit<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<String>, D::Error> {
    let s: String = serde::Deserialize::deserialize(d)?;
    s.parse::<MemLimit>().map_err(serde::de::Error::custom)?;
    Ok(Some(s))
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
        crate::profile::load_hot(p, share, crate::kernel::pmd_size() as u64).map(Some)
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

/// A systemd `.path` unit that starts `hugetext-warm.service` when any of
/// `files` (or the config file) changes.
pub fn path_unit(config: Option<&Path>, files: &[PathBuf]) -> String {
    let mut s = String::from(
        "# Generated by `hugetext warm --path-unit`: re-warm when a listed file changes.\n\
         [Unit]\nDescription=Re-warm program text when it changes (hugetext)\n\n[Path]\n",
    );
    if let Some(c) = config {
        s.push_str(&format!("PathChanged={}\n", c.display()));
    }
    for f in files {
        s.push_str(&format!("PathChanged={}\n", f.display()));
    }
    s.push_str("Unit=hugetext-warm.service\n\n[Install]\nWantedBy=multi-user.target\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn memory_guard_refuses_over_the_limit() {
        check_memory(1 << 20, MemLimit::Percent(50.0)).unwrap();
        let e = check_memory(1 << 30, MemLimit::Bytes(1 << 20)).unwrap_err().to_string();
        assert!(e.contains("refusing to warm 1.0 GiB") && e.contains("--max-mem"), "{e}");
        let avail = procfs::mem_available().unwrap();
        assert!(check_memory(avail, MemLimit::Percent(50.0)).is_err());
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
        let c = Config::parse(include_str!("../../../../packaging/warm.conf.example")).unwrap();
        assert!(c.deps && !c.replace && c.paths.len() == 2);
        assert_eq!(c.max_mem.unwrap().parse::<MemLimit>().unwrap(), MemLimit::Percent(25.0));
    }

    #[test]
    fn path_unit_lists_files() {
        let u = path_unit(
            Some(Path::new("/etc/hugetext/warm.conf")),
            &[PathBuf::from("/usr/bin/x")],
        );
        assert!(u.contains("PathChanged=/etc/hugetext/warm.conf\n"));
        assert!(u.contains("PathChanged=/usr/bin/x\n"));
        assert!(u.contains("Unit=hugetext-warm.service"));
    }
}
