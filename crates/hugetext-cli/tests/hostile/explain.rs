//! Hostile cases: explain. Any local user decides the shape of their own
//! address space; an administrator (or a tool) explaining that process
//! must get an answer at a cost bounded by what is mapped: linear in the
//! number of mappings, and nothing proportional to a mapping's size.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use hugetext_testkit as tk;

/// Generous bounds for a loaded CI machine (here: 60,000 mappings take
/// about 5 s and 90 MB, a sparse terabyte 0.1 s and 16 MB; before, more than
/// 300 s, and 34 s and 2.1 GB).
const TIME: Duration = Duration::from_secs(60);
const RSS_KB: u64 = 400 << 10;

/// A directory the unprivileged account owns, with a copy of the
/// `manymaps` program in it.
fn attacker_home() -> (tempfile::TempDir, PathBuf) {
    let (dir, home) = tk::attacker_home();
    std::fs::copy(tk::cprogs().join("manymaps"), home.join("manymaps")).unwrap();
    (dir, home)
}

/// `manymaps ARGS` as the unprivileged account, mapped and waiting.
fn attacker_maps(home: &std::path::Path, args: &[&str]) -> tk::Running {
    let mut cmd = tk::as_attacker();
    cmd.arg(home.join("manymaps")).args(args);
    tk::Running::start(cmd)
}

/// `hugetext explain --pid PID`, measured.
fn explain(pid: i32) -> tk::Measured {
    tk::measured(
        Command::new(tk::bin()).args(["explain", "--pid", &pid.to_string()]),
        TIME,
    )
}

fn assert_bounded(what: &str, m: &tk::Measured) {
    let err = tk::text(&m.output.stderr);
    assert!(
        !m.timed_out,
        "{what}: explain still running after {} s (killed)",
        TIME.as_secs()
    );
    assert!(m.output.status.success(), "{what}: {:?} {err}", m.output.status);
    assert!(
        m.max_rss_kb < RSS_KB,
        "{what}: explain used {} MB (bound {} MB)",
        m.max_rss_kb >> 10,
        RSS_KB >> 10
    );
    eprintln!("{what}: {:.2} s, {} MB", m.elapsed.as_secs_f64(), m.max_rss_kb >> 10);
}

/// vm.max_map_count raised to at least `want` for the life of the guard
/// (the default, 65530, is enough for 60,000 mappings: it is restored only
/// if it had to be raised).
struct MapCount(Option<String>);

impl MapCount {
    const PATH: &'static str = "/proc/sys/vm/max_map_count";

    fn at_least(want: u64) -> MapCount {
        let old = std::fs::read_to_string(Self::PATH).unwrap();
        if old.trim().parse::<u64>().unwrap() >= want {
            return MapCount(None);
        }
        std::fs::write(Self::PATH, want.to_string()).unwrap();
        MapCount(Some(old))
    }
}

impl Drop for MapCount {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write(Self::PATH, old.trim());
        }
    }
}

/// A process with 60,000 text mappings (one page of one file, mapped
/// again and again): explain's work per mapping must not grow with the
/// number of mappings (it looked each one up in lists of all of them and
/// read every process's maps once per mapping: more than 300 s).
#[test]
fn explain_of_sixty_thousand_text_mappings_is_linear() {
    const N: usize = 60_000;
    let _count = MapCount::at_least(N as u64 + 1000);
    let (_dir, home) = attacker_home();
    let prog = attacker_maps(&home, &[home.join("manymaps").to_str().unwrap(), &format!("pages={N}")]);
    let m = explain(prog.pid());
    assert_bounded("60,000 mappings", &m);
    let out = tk::text(&m.output.stdout);
    let shown = out
        .lines()
        .filter(|l| l.trim_start().starts_with(home.join("manymaps").to_str().unwrap()))
        .count();
    assert!(shown >= N, "{shown} of {N} mappings explained");
}

/// A sparse 1 TiB file mapped executable (it costs its owner nothing):
/// explain reads what is mapped and cached, not the terabyte (it read the
/// whole range's pagemap at once and scanned its page cache chunk by chunk:
/// 34 s and 2.1 GB).
#[test]
fn explain_of_a_sparse_terabyte_mapping_is_bounded() {
    let (_dir, home) = attacker_home();
    let sparse = home.join("sparse.so");
    let st = tk::as_attacker()
        .args(["truncate", "-s", "1T"])
        .arg(&sparse)
        .status()
        .unwrap();
    assert!(st.success());
    let prog = attacker_maps(&home, &[sparse.to_str().unwrap(), "whole"]);
    let m = explain(prog.pid());
    assert_bounded("a sparse 1 TiB mapping", &m);
    let out = tk::text(&m.output.stdout);
    // The mapping is explained: 524,288 windows of 2 MiB (fewer with a
    // larger unit), none of them huge.
    let windows = (1u64 << 40) / tk::unit();
    assert!(out.contains(&format!("{windows} whole")), "{out}");
}
