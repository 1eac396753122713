//! What each zero-copy route costs on a filesystem, measured: evict + refill
//! (drop a window's small folios, read it back through a `MADV_HUGEPAGE`
//! mapping in one 2 MiB folio) and `MADV_COLLAPSE` in place (copy the
//! resident small folios into one, no I/O). `run`'s `auto` tries the
//! cheaper one first (`HUGETEXT_ORDER`); `doctor` shows both.
//!
//! The experiment is made once per boot, kernel and filesystem on an unnamed
//! temporary file (`O_TMPFILE`: no name ever appears) of one PMD window in
//! the program's directory, and kept in a per-user runtime directory
//! (`/run/hugetext` for root, `$XDG_RUNTIME_DIR/hugetext` otherwise: both
//! are emptied at boot).

use crate::kernel::{self, Mapping};
use crate::{fsutil, pagecache, procfs, Error, Result};
use hugetext_abi::env::Order;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

/// One route's measured cost on one window.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Cost {
    /// It PMD-mapped the window, at this cost (milliseconds per MiB).
    MsPerMib(f64),
    /// It did not PMD-map the window: why.
    No(String),
}

impl Cost {
    /// The cost when the route works.
    pub fn ms_per_mib(&self) -> Option<f64> {
        match self {
            Cost::MsPerMib(v) => Some(*v),
            Cost::No(_) => None,
        }
    }

    /// "0.42 ms/MiB", or why not.
    pub fn describe(&self) -> String {
        match self {
            Cost::MsPerMib(v) => format!("{v:.2} ms/MiB"),
            Cost::No(why) => format!("not possible ({why})"),
        }
    }
}

/// The two zero-copy routes' costs on one filesystem, this boot.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RouteCosts {
    /// Filesystem type name.
    pub fs: String,
    /// `st_dev` of the directory measured.
    pub dev: u64,
    /// `uname -r` when measured.
    pub release: String,
    /// `/proc/sys/kernel/random/boot_id` when measured.
    pub boot_id: String,
    /// Evict + refill through `MADV_HUGEPAGE`.
    pub refill: Cost,
    /// `MADV_COLLAPSE` of resident small folios.
    pub collapse: Cost,
}

/// Which zero-copy route goes first: collapse in place where it works and
/// costs less than evict + refill (or where that does not work at all).
/// Pure.
pub fn order(c: &RouteCosts) -> Order {
    match (c.collapse.ms_per_mib(), c.refill.ms_per_mib()) {
        (Some(col), Some(re)) if col < re => Order::Collapse,
        (Some(_), None) => Order::Collapse,
        _ => Order::File,
    }
}

/// The order measured for the filesystem of `program`, for the preload's
/// settings (`None` where it cannot be measured: the preload's default
/// order, evict + refill first, applies), with the line `run -v` prints.
pub fn for_program(program: &Path) -> Option<(Order, String)> {
    let c = for_dir(&fsutil::dir_of(program))?;
    Some((order(&c), describe(&c)))
}

/// One line for `run -v` and `doctor`: both costs and the order they give.
pub fn describe(c: &RouteCosts) -> String {
    let first = match order(c) {
        Order::Collapse => "collapse in place is tried first",
        Order::File => "evict + refill is tried first",
    };
    format!(
        "zero-copy routes on {} (measured this boot): collapse in place {}, evict + refill {}: {first}",
        c.fs,
        c.collapse.describe(),
        c.refill.describe()
    )
}

/// The measured costs for the filesystem of `dir`: kept from earlier this
/// boot, else measured now and kept. `None` when they cannot be measured
/// (no writable directory there, or no runtime directory to keep them in:
/// measuring at every start would cost more than it saves).
pub fn for_dir(dir: &Path) -> Option<RouteCosts> {
    let cache = fsutil::runtime_dir()?;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let release = release();
    let boot = boot_id()?;
    let name = cache.join(format!("route-costs-{dev:x}.json"));
    if let Some(c) = load(&name).filter(|c| c.dev == dev && c.release == release && c.boot_id == boot) {
        return Some(c);
    }
    let c = measure(dir).ok()?;
    store(&name, &c);
    Some(c)
}

/// Measure both routes on one PMD window of an unnamed temporary file in
/// `dir` (written with `RET` instructions, synced, opened read-only).
pub fn measure(dir: &Path) -> Result<RouteCosts> {
    let pmd = kernel::pmd_size();
    if let Some(why) = pagecache::collapse_out_of_reach() {
        // 64 KiB pages: neither route reaches a PMD (and a PMD window is a
        // 512 MiB scratch file).
        return Err(Error::Other(format!("no zero-copy route to a PMD mapping: {why}")));
    }
    let f = pagecache::text_tmpfile(dir, pmd).map_err(|e| Error::io(dir, e))?;
    // Alternating rounds, the median of each route: one window's timing is
    // noisy (a busy machine, a virtual disk).
    let (mut refill, mut collapse) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        refill.push(refill_once(&f, pmd)?);
        collapse.push(collapse_once(&f, pmd)?);
    }
    let _ = pagecache::evict(&f, 0..0);
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    Ok(RouteCosts {
        fs: fsutil::fs_name(&f),
        dev: meta.dev(),
        release: release(),
        boot_id: boot_id().unwrap_or_default(),
        refill: median(refill),
        collapse: median(collapse),
    })
}

/// Rounds of each route [`measure`] times.
const ROUNDS: usize = 3;

/// The median cost of the rounds, or the first round's reason when one did
/// not PMD-map the window. Pure.
fn median(rounds: Vec<Cost>) -> Cost {
    let mut v = Vec::new();
    for c in rounds {
        match c {
            Cost::MsPerMib(x) => v.push(x),
            no => return no,
        }
    }
    v.sort_by(f64::total_cmp);
    match v.get(v.len() / 2) {
        Some(&m) => Cost::MsPerMib(m),
        None => Cost::No("not measured".into()),
    }
}

/// Evict + refill once: from nothing cached to a PMD-mapped window.
fn refill_once(f: &File, pmd: usize) -> Result<Cost> {
    pagecache::evict(f, 0..0)?;
    let t = Instant::now();
    let m = Mapping::file_congruent(f.as_fd(), 0, pmd, RX, pmd)?;
    m.madvise(0, pmd, kernel::MADV_HUGEPAGE)?;
    m.populate_read(0, pmd)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(match procfs::own_file_pmd_kb(m.addr())? >= (pmd / 1024) as u64 {
        true => Cost::MsPerMib(ms / mib(pmd)),
        false => Cost::No(format!(
            "no {} folio read back (the page cache gives none here on this kernel)",
            crate::units::human(pmd as u64)
        )),
    })
}

/// Collapse once: from small folios, mapped and resident (as running text
/// is), to a PMD-mapped window.
fn collapse_once(f: &File, pmd: usize) -> Result<Cost> {
    let whole_kb = (pmd / 1024) as u64;
    let trial = pagecache::collapse_trial(f, pmd, 0)?;
    if trial.before_kb >= whole_kb {
        return Ok(Cost::No("the window was PMD-mapped before any collapse".into()));
    }
    let ms = trial.elapsed.as_secs_f64() * 1e3;
    Ok(match (trial.outcome, trial.after_kb) {
        (Ok(()), kb) if kb >= whole_kb => Cost::MsPerMib(ms / mib(pmd)),
        (Ok(()), _) => Cost::No("accepted, but the window stayed in small pages".into()),
        (Err(source), _) if source.raw_os_error() == Some(libc::EINVAL) => {
            Cost::No(match kernel::madv_collapse_known() {
                true => "EINVAL: this kernel does not collapse file text".into(),
                false => "this kernel has no MADV_COLLAPSE".into(),
            })
        }
        (Err(e), _) => Cost::No(format!("MADV_COLLAPSE failed: {e}")),
    })
}

const RX: i32 = libc::PROT_READ | libc::PROT_EXEC;

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// `uname -r`.
fn release() -> String {
    rustix::system::uname().release().to_string_lossy().into_owned()
}

/// This boot's identity.
fn boot_id() -> Option<String> {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(s.trim().to_string())
}

/// A kept measurement: a small regular file of ours (never a link, a FIFO,
/// or another user's) with plausible values ([`plausible`]), else `None`
/// (measured again, and the file rewritten).
fn load(path: &Path) -> Option<RouteCosts> {
    let s = fsutil::read_kept(path, 4096)?;
    serde_json::from_str(&s).ok().filter(plausible)
}

/// The range a measured cost can be in, milliseconds per MiB: from 1 TB/s
/// (faster than any memory copy) to 10 s per MiB (slower than a floppy).
const PLAUSIBLE_MS_PER_MIB: std::ops::RangeInclusive<f64> = 1e-6..=1e4;

/// Whether kept costs can be believed: both costs within
/// [`PLAUSIBLE_MS_PER_MIB`] (not negative, zero, infinite or absurd), and
/// names and reasons of a sane length without control characters. Pure.
pub fn plausible(c: &RouteCosts) -> bool {
    let text = |s: &str, max: usize| s.len() <= max && !s.chars().any(char::is_control);
    let cost = |c: &Cost| match c {
        Cost::MsPerMib(v) => PLAUSIBLE_MS_PER_MIB.contains(v),
        Cost::No(why) => !why.is_empty() && text(why, 300),
    };
    cost(&c.refill) && cost(&c.collapse) && text(&c.fs, 64) && text(&c.release, 256) && text(&c.boot_id, 64)
}

/// Keep a measurement (a new file renamed over the old one); a failure
/// only means measuring again next time.
fn store(path: &Path, c: &RouteCosts) {
    if let Ok(json) = serde_json::to_string(c) {
        fsutil::keep(path, ".route-costs-", json.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(collapse: Cost, refill: Cost) -> RouteCosts {
        RouteCosts {
            fs: "ext4".into(),
            dev: 1,
            release: "7.3.4".into(),
            boot_id: "b".into(),
            refill,
            collapse,
        }
    }

    #[test]
    fn the_cheaper_working_route_goes_first() {
        let no = || Cost::No("no".into());
        let o = |c, r| order(&costs(c, r));
        assert_eq!(o(Cost::MsPerMib(0.3), Cost::MsPerMib(2.0)), Order::Collapse);
        assert_eq!(o(Cost::MsPerMib(2.0), Cost::MsPerMib(0.3)), Order::File);
        assert_eq!(o(Cost::MsPerMib(0.3), no()), Order::Collapse);
        assert_eq!(o(no(), Cost::MsPerMib(0.3)), Order::File);
        assert_eq!(o(no(), no()), Order::File);
        let d = describe(&costs(Cost::MsPerMib(0.25), Cost::MsPerMib(3.0)));
        assert!(
            d.contains("collapse in place 0.25 ms/MiB, evict + refill 3.00 ms/MiB"),
            "{d}"
        );
        assert!(d.ends_with("collapse in place is tried first"), "{d}");
    }

    /// On the real kernel and filesystem of the test binary: each route is
    /// either measured (it PMD-mapped the window) or says why not, and
    /// the measurement is what this kernel does with file text: refill works
    /// where the filesystem gives PMD folios, collapse where the kernel
    /// collapses file text.
    #[test]
    fn both_routes_are_measured_or_refused_with_the_reason() {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap();
        let c = measure(dir).unwrap();
        eprintln!("{}", describe(&c));
        assert_eq!(c.dev, std::fs::metadata(dir).unwrap().dev());
        let pmd_folios = pagecache::probe_pmd_folios(dir);
        if pmd_folios == Some(true) && kernel::thp_mode().is_some() {
            assert!(c.refill.ms_per_mib().is_some(), "{c:?}");
        }
        if pmd_folios == Some(false) {
            assert!(c.refill.ms_per_mib().is_none(), "{c:?}");
        }
        let collapses = pagecache::collapse_supported(dir).unwrap().is_available();
        assert_eq!(c.collapse.ms_per_mib().is_some(), collapses, "{c:?}");
        for cost in [&c.refill, &c.collapse] {
            if let Some(v) = cost.ms_per_mib() {
                assert!(v > 0.0 && v.is_finite(), "{c:?}");
            }
        }
    }

    #[test]
    fn the_median_round_counts_and_a_failed_round_says_why() {
        let m = |v: &[f64]| median(v.iter().map(|&x| Cost::MsPerMib(x)).collect());
        assert_eq!(m(&[3.0, 1.0, 2.0]), Cost::MsPerMib(2.0));
        assert_eq!(m(&[9.0]), Cost::MsPerMib(9.0));
        let no = Cost::No("why".into());
        assert_eq!(median(vec![Cost::MsPerMib(1.0), no.clone(), Cost::MsPerMib(2.0)]), no);
        assert!(matches!(median(Vec::new()), Cost::No(_)));
    }

    #[test]
    fn absurd_kept_costs_are_not_believed() {
        let ok = |c: Cost, r: Cost| plausible(&costs(c, r));
        assert!(ok(Cost::MsPerMib(0.25), Cost::MsPerMib(3.0)));
        assert!(ok(
            Cost::No("EINVAL: this kernel does not collapse file text".into()),
            Cost::MsPerMib(3.0)
        ));
        for absurd in [-7.0, 0.0, 1e300, f64::INFINITY, f64::NAN, 1e-300] {
            assert!(!ok(Cost::MsPerMib(absurd), Cost::MsPerMib(3.0)), "{absurd}");
            assert!(!ok(Cost::MsPerMib(0.25), Cost::MsPerMib(absurd)), "{absurd}");
        }
        assert!(!ok(Cost::No(String::new()), Cost::MsPerMib(3.0)));
        assert!(!ok(Cost::No("a\nforged line".into()), Cost::MsPerMib(3.0)));
        // Such a file is not loaded.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("route-costs-1.json");
        store(&p, &costs(Cost::MsPerMib(-7.0), Cost::MsPerMib(1e300)));
        assert!(p.exists());
        assert_eq!(load(&p), None);
    }

    #[test]
    fn a_kept_measurement_must_be_a_small_regular_file_of_ours() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("route-costs-1.json");
        let c = costs(Cost::MsPerMib(1.0), Cost::No("x".into()));
        store(&p, &c);
        assert_eq!(load(&p), Some(c.clone()));
        std::fs::write(&p, vec![b' '; 5000]).unwrap();
        assert_eq!(load(&p), None, "oversized");
        std::fs::remove_file(&p).unwrap();
        let other = dir.path().join("other.json");
        store(&other, &c);
        std::os::unix::fs::symlink(&other, &p).unwrap();
        assert_eq!(load(&p), None, "a link");
        std::fs::remove_file(&p).unwrap();
        let c_path = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        assert_eq!(load(&p), None, "a FIFO (and it did not block)");
    }
}
