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
//!
//! The `compat` column is `HUGETEXT_COMPAT`: `all` = the fallbacks of
//! kernels without `PAGEMAP_SCAN` (before 6.7: smaps verification),
//! `MADV_POPULATE_READ` (before 5.14: pages touched) and page-table reclaim
//! (before 6.14: `file` replaces windows with `mmap(MAP_FIXED)`);
//! `no-pt-reclaim` = only the last (6.7 to 6.13). The `cache` column is the
//! page cache before each run: `warm` (2 MiB folios, from the warm-up run),
//! `cold` (evicted: the text is read from disk) or `small` (4 KiB folios, as
//! plain runs of the program leave it: every window takes the file route's
//! drop/evict/refault step). When the Rust toolchain's own `rustc` is found,
//! it is measured too (`rustc --version`: start-up only; its huge MiB is
//! what the preload reports).
//!
//! The copy route alone, from each linker's layout, interleaved (one run of
//! each fixture with each preload per round), medians of the preload's own
//! time and of the copy route's (`-v`'s "time per route"), in ms per 100 MiB
//! and as a ratio to the machine's floor, measured in this process once per
//! round: new `MADV_HUGEPAGE` memory, which the kernel zeroes at the first
//! write, filled with `memcpy` from huge pages (the `copy_floor` example
//! breaks it down):
//!
//! ```sh
//! cargo run --release -p hugetext-cli --example run_startup -- target/fixtures80 20 copy
//! # the page cache in 4 KiB folios before each run, as plain runs leave it:
//! cargo run --release -p hugetext-cli --example run_startup -- target/fixtures80 20 copy small
//! # ... or in 2 MiB folios, as `hugetext warm` leaves it:
//! cargo run --release -p hugetext-cli --example run_startup -- target/fixtures80 20 copy huge
//! # compare libhugetext.so builds (each directory holds hugetext and libhugetext.so):
//! HUGETEXT_BINS=/tmp/old:target/release cargo run --release -p hugetext-cli --example run_startup -- target/fixtures80 20 copy
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use hugetext::run::remap::text_mappings;

#[path = "support/floor.rs"]
mod floor;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The page cache of `path` before a run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cache {
    /// As the previous run left it.
    Warm,
    /// Evicted.
    Cold,
    /// Evicted and read back in 4 KiB folios.
    Small,
    /// Evicted and read back in 2 MiB folios (as `hugetext warm` leaves it).
    Huge,
}

fn prepare(path: &Path, cache: Cache) {
    let f = std::fs::File::open(path).unwrap();
    match cache {
        Cache::Warm => {}
        Cache::Cold => hugetext::pagecache::evict(&f, 0..0).unwrap(),
        Cache::Small => {
            hugetext::pagecache::evict(&f, 0..0).unwrap();
            hugetext::pagecache::fill_small(&f, 0..u64::MAX).unwrap();
        }
        Cache::Huge => {
            hugetext::pagecache::evict(&f, 0..0).unwrap();
            let len = f.metadata().unwrap().len();
            hugetext::pagecache::fill_huge(&f, 0..len).unwrap();
        }
    }
}

fn hugetext_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("RUN_STARTUP_HUGETEXT") {
        return b.into();
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("../hugetext")
}

/// The `copy` mode: `copy` of bfd/nopie, lld/pie and mold/pie with each
/// build in `HUGETEXT_BINS` (directories, `:`-separated), interleaved; the
/// page cache as the previous run left it, or in 4 KiB (`small`) or 2 MiB
/// (`huge`) folios.
fn copy_mode(dir: &Path, n: usize, cache: Cache) {
    let bins: Vec<PathBuf> = match std::env::var("HUGETEXT_BINS") {
        Ok(v) => v.split(':').map(|d| Path::new(d).join("hugetext")).collect(),
        Err(_) => vec![hugetext_bin()],
    };
    let fixtures = ["bfd/nopie", "lld/pie", "mold/pie"];
    let case = Case {
        strategy: Some("copy"),
        compat: None,
        cache,
    };
    // (preload ms, copy route ms, huge MiB) per (fixture, build).
    let mut got: Vec<Vec<Vec<(f64, f64, f64)>>> = vec![vec![Vec::new(); bins.len()]; fixtures.len()];
    // The machine's floor, in this process, once per round.
    let src = floor::random_source(100 << 20);
    let mut floors = Vec::new();
    for round in 0..=n {
        let fl = floor::floor_ms(&src);
        if round > 0 {
            floors.push(fl);
        }
        for (fi, f) in fixtures.iter().enumerate() {
            for (bi, b) in bins.iter().enumerate() {
                std::env::set_var("RUN_STARTUP_HUGETEXT", b);
                let (_, err) = run_once(case, &dir.join(f), &[]);
                let (ms, huge) = summary(&err);
                let route = copy_route_ms(&err);
                if round > 0 {
                    // Round 0 warms up.
                    got[fi][bi].push((
                        ms.unwrap_or(f64::NAN),
                        route.unwrap_or(f64::NAN),
                        huge.unwrap_or(f64::NAN),
                    ));
                }
            }
        }
    }
    let floor = median(floors);
    println!(
        "floor (in this process: new huge pages, zeroed by the kernel, filled by memcpy from huge pages): {floor:.2} ms per 100 MiB"
    );
    println!(
        "{:<10} {:<32} {:>10} {:>9} {:>14} {:>9} {:>14} {:>9}",
        "fixture", "build", "preload ms", "huge MiB", "ms per 100 MiB", "/ floor", "copy route ms", "/ floor"
    );
    for (fi, f) in fixtures.iter().enumerate() {
        for (bi, b) in bins.iter().enumerate() {
            let v = &got[fi][bi];
            let ms = median(v.iter().map(|r| r.0).collect());
            let route = median(v.iter().map(|r| r.1).collect());
            let huge = median(v.iter().map(|r| r.2).collect());
            let per100 = |x: f64| x * 100.0 / huge;
            println!(
                "{:<10} {:<32} {:>10.2} {:>9.1} {:>14.2} {:>9.2} {:>14.2} {:>9.2}",
                f,
                b.parent().unwrap().display(),
                ms,
                huge,
                per100(ms),
                per100(ms) / floor,
                route,
                per100(route) / floor
            );
        }
    }
}

/// The copy route's time from `-v`'s "time per route: ... copy 78.0 MiB in
/// 22.51 ms (..." (or, from older builds, "copy 22.51 ms, ...").
fn copy_route_ms(err: &str) -> Option<f64> {
    let times = err.lines().find_map(|l| l.split("; time per route: ").nth(1))?;
    let copy = times.split(", ").find(|r| r.starts_with("copy "))?;
    let before_ms = copy.split(" ms").next()?;
    before_ms.rsplit(' ').next()?.parse().ok()
}

/// One measured configuration.
#[derive(Clone, Copy)]
struct Case<'a> {
    strategy: Option<&'a str>,
    /// `HUGETEXT_COMPAT`: older-kernel fallbacks.
    compat: Option<&'a str>,
    cache: Cache,
}

fn command(case: Case, prog: &Path, args: &[&str]) -> Command {
    let mut c = match case.strategy {
        None => Command::new(prog),
        Some(s) => {
            let mut c = Command::new(hugetext_bin());
            c.args(["run", "-v", "--strategy", s, "--"]).arg(prog);
            c
        }
    };
    c.args(args).env_remove("HUGETEXT_COMPAT");
    if let Some(v) = case.compat {
        c.env("HUGETEXT_COMPAT", v);
    }
    c
}

/// (wall ms, preload-reported ms, preload-reported huge MiB)
fn once(case: Case, prog: &Path, args: &[&str]) -> (f64, Option<f64>, Option<f64>) {
    let (wall, err) = run_once(case, prog, args);
    let (inner, huge) = summary(&err);
    (wall, inner, huge)
}

/// (wall ms, stderr) of one run.
fn run_once(case: Case, prog: &Path, args: &[&str]) -> (f64, String) {
    prepare(prog, case.cache);
    let t = Instant::now();
    let child = command(case, prog, args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let wall = t.elapsed().as_secs_f64() * 1e3;
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    assert!(o.status.success());
    (wall, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// (preload-reported ms, preload-reported huge MiB) from `-v`'s summary.
fn summary(err: &str) -> (Option<f64>, Option<f64>) {
    let summary = err.lines().find(|l| l.contains("huge-backed"));
    let inner = summary
        .and_then(|l| l.rsplit(") in ").next())
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok());
    // "hugetext: pid N: X MiB of ..."
    let huge = summary
        .and_then(|l| l.split(": ").nth(2))
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok());
    (inner, huge)
}

/// (huge MiB, anonymous MiB, Pss MiB) of the text of a running instance.
fn memory(case: Case, prog: &Path) -> (f64, f64, f64) {
    prepare(prog, case.cache);
    let mut child = command(case, prog, &["wait"])
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
    let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", child.id()));
    let mib = |f: &dyn Fn(&hugetext::run::remap::TextMapping) -> u64| {
        maps.iter().map(f).sum::<u64>() as f64 / (1 << 20) as f64
    };
    (mib(&|m| m.huge()), mib(&|m| m.anonymous), mib(&|m| m.pss))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "target/fixtures80".into()));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    if args.next().as_deref() == Some("copy") {
        let cache = match args.next().as_deref() {
            Some("small") => Cache::Small,
            Some("huge") => Cache::Huge,
            _ => Cache::Warm,
        };
        return copy_mode(&dir, n, cache);
    }
    let case = |strategy, compat, cache| Case {
        strategy,
        compat,
        cache,
    };
    let (all, no_pt) = (Some("all"), Some("no-pt-reclaim"));
    use Cache::{Cold, Small, Warm};
    let cases: &[(&str, Case)] = &[
        ("bfd/nopie", case(None, None, Warm)),
        ("bfd/nopie", case(Some("file"), None, Warm)),
        ("bfd/nopie", case(Some("file"), all, Warm)),
        ("bfd/nopie", case(Some("file"), None, Cold)),
        ("bfd/nopie", case(Some("file"), no_pt, Cold)),
        ("bfd/nopie", case(Some("file"), all, Cold)),
        ("bfd/nopie", case(Some("file"), None, Small)),
        ("bfd/nopie", case(Some("file"), no_pt, Small)),
        ("bfd/nopie", case(Some("file"), all, Small)),
        ("bfd/nopie", case(Some("copy"), None, Warm)),
        ("bfd/nopie", case(Some("copy"), all, Warm)),
        ("lld/pie", case(None, None, Warm)),
        ("lld/pie", case(Some("auto"), None, Warm)),
        ("lld/pie", case(Some("auto"), all, Warm)),
        ("lld/pie", case(Some("copy"), None, Warm)),
        ("lld/pie", case(Some("copy"), all, Warm)),
    ];
    println!(
        "{:<10} {:<6} {:<13} {:<5} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9}",
        "fixture", "route", "compat", "cache", "wall ms", "+ vs plain", "preload ms", "huge MiB", "anon MiB", "Pss MiB"
    );
    fn compat<'a>(c: &Case<'a>) -> &'a str {
        match (c.strategy, c.compat) {
            (None, _) => "-",
            (_, None) => "none",
            (_, Some(v)) => v,
        }
    }
    let cache = |c: &Case| match c.cache {
        Warm => "warm",
        Cold => "cold",
        Small => "small",
        Cache::Huge => "huge",
    };
    let mut plain = std::collections::HashMap::new();
    for &(name, c) in cases {
        let prog = dir.join(name);
        once(c, &prog, &[]); // warm-up (and, for `file`, fill the page cache with 2 MiB folios)
        let runs: Vec<_> = (0..n).map(|_| once(c, &prog, &[])).collect();
        let wall = median(runs.iter().map(|r| r.0).collect());
        let inner: Vec<f64> = runs.iter().filter_map(|r| r.1).collect();
        let inner = if inner.is_empty() { f64::NAN } else { median(inner) };
        if c.strategy.is_none() {
            plain.insert(name.to_string(), wall);
        }
        let delta = wall - plain.get(name).copied().unwrap_or(f64::NAN);
        let (huge, anon, pss) = memory(c, &prog);
        println!(
            "{:<10} {:<6} {:<13} {:<5} {:>10.2} {:>12.2} {:>12.2} {:>9.1} {:>9.1} {:>9.1}",
            name,
            c.strategy.unwrap_or("plain"),
            compat(&c),
            cache(&c),
            wall,
            delta,
            inner,
            huge,
            anon,
            pss
        );
    }
    // The big real-world case: rustc (librustc_driver.so, ~100 MiB of text).
    let Some(rustc) = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("bin/rustc"))
        .filter(|p| p.is_file())
    else {
        println!("rustc not found: skipped");
        return;
    };
    println!(
        "\n{}: rustc --version (huge MiB: all text, as the preload reports)",
        rustc.display()
    );
    let mut plain = f64::NAN;
    for c in [
        case(None, None, Warm),
        case(Some("auto"), None, Warm),
        case(Some("auto"), all, Warm),
        case(Some("copy"), None, Warm),
        case(Some("copy"), all, Warm),
        case(Some("file"), None, Warm),
        case(Some("file"), all, Warm),
    ] {
        once(c, &rustc, &["--version"]);
        let runs: Vec<_> = (0..n).map(|_| once(c, &rustc, &["--version"])).collect();
        let wall = median(runs.iter().map(|r| r.0).collect());
        if c.strategy.is_none() {
            plain = wall;
        }
        let med = |v: Vec<f64>| if v.is_empty() { f64::NAN } else { median(v) };
        let inner = med(runs.iter().filter_map(|r| r.1).collect());
        let huge = med(runs.iter().filter_map(|r| r.2).collect());
        println!(
            "{:<10} {:<6} {:<13} {:<5} {:>10.2} {:>12.2} {:>12.2} {:>9.1}",
            "rustc",
            c.strategy.unwrap_or("plain"),
            compat(&c),
            "warm",
            wall,
            wall - plain,
            inner,
            huge
        );
    }
}
