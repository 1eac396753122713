//! Benchmark of `hugetext run`: start-up cost per strategy and private
//! memory added per process, on big-text fixtures.
//!
//! ```sh
//! cargo build --release
//! bash tests/fixtures/mkfixtures.sh target/fixtures80 80     # 80 MiB of text
//! cargo run --release -p hugetext-cli --example run_startup -- target/fixtures80 20
//! ```
//!
//! For each case it runs the fixture N times plainly and N times under
//! `hugetext run -v --strategy S`, and prints the median wall time of both,
//! the median time the preload itself reports ("... in X ms"), and, for one
//! instance kept running, the text's huge-backed bytes and its anonymous
//! (private) memory from smaps. A benchmark, not a test: it asserts nothing.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use hugetext::remap::text_mappings;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn evict(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: plain syscall on an open fd.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

fn hugetext_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("../hugetext")
}

fn command(strategy: Option<&str>, prog: &Path) -> Command {
    match strategy {
        None => Command::new(prog),
        Some(s) => {
            let mut c = Command::new(hugetext_bin());
            c.args(["run", "-v", "--strategy", s, "--"]).arg(prog);
            c
        }
    }
}

/// (wall ms, preload-reported ms)
fn once(strategy: Option<&str>, prog: &Path, cold: bool) -> (f64, Option<f64>) {
    if cold {
        evict(prog);
    }
    let t = Instant::now();
    let o = command(strategy, prog).stdout(Stdio::null()).output().unwrap();
    let wall = t.elapsed().as_secs_f64() * 1e3;
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let inner = err
        .lines()
        .find(|l| l.contains("huge-backed"))
        .and_then(|l| l.rsplit(") in ").next())
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok());
    (wall, inner)
}

/// (huge MiB, anonymous MiB, Pss MiB) of the text of a running instance.
fn memory(strategy: Option<&str>, prog: &Path) -> (f64, f64, f64) {
    let mut child = command(strategy, prog)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    out.read_line(&mut l).unwrap();
    let maps = text_mappings(child.id() as i32).unwrap();
    drop(child.stdin.take());
    child.wait().unwrap();
    let mib =
        |f: &dyn Fn(&hugetext::remap::TextMapping) -> u64| maps.iter().map(f).sum::<u64>() as f64 / (1 << 20) as f64;
    (mib(&|m| m.huge()), mib(&|m| m.anonymous), mib(&|m| m.pss))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "target/fixtures80".into()));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let cases: &[(&str, Option<&str>, bool)] = &[
        ("bfd/nopie", None, false),
        ("bfd/nopie", Some("file"), false),
        ("bfd/nopie", Some("file"), true),
        ("bfd/nopie", Some("copy"), false),
        ("lld/pie", None, false),
        ("lld/pie", Some("auto"), false),
        ("lld/pie", Some("copy"), false),
    ];
    println!(
        "{:<10} {:<6} {:<5} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9}",
        "fixture", "route", "cache", "wall ms", "+ vs plain", "preload ms", "huge MiB", "anon MiB", "Pss MiB"
    );
    let mut plain = std::collections::HashMap::new();
    for &(name, strategy, cold) in cases {
        let prog = dir.join(name);
        once(strategy, &prog, cold); // warm-up (and, for `file`, fill the page cache with 2 MiB folios)
        let runs: Vec<_> = (0..n).map(|_| once(strategy, &prog, cold)).collect();
        let wall = median(runs.iter().map(|r| r.0).collect());
        let inner: Vec<f64> = runs.iter().filter_map(|r| r.1).collect();
        let inner = if inner.is_empty() { f64::NAN } else { median(inner) };
        if strategy.is_none() {
            plain.insert(name, wall);
        }
        let delta = wall - plain.get(name).copied().unwrap_or(f64::NAN);
        let (huge, anon, pss) = memory(strategy, &prog);
        println!(
            "{:<10} {:<6} {:<5} {:>10.2} {:>12.2} {:>12.2} {:>9.1} {:>9.1} {:>9.1}",
            name,
            strategy.unwrap_or("plain"),
            if cold { "cold" } else { "warm" },
            wall,
            delta,
            inner,
            huge,
            anon,
            pss
        );
    }
}
