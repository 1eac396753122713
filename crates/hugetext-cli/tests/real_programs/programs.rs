//! Real system programs under `hugetext run`, not just fixtures: python3,
//! perl, gcc, git and rustc print exactly what they print alone, with every
//! strategy and with the older-kernel fallbacks forced; rustc's
//! librustc_driver.so (~100 MiB of text, the big real-world case) is
//! huge-backed, and the process's text is as the preload's machine-readable
//! record (`HUGETEXT_REPORT=json`) says it is.
//!
//! A program that is not installed is skipped with a note on stderr
//! (scripts/install-deps.sh installs python3, perl, gcc and git).

use hugetext_testkit as common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use hugetext::run::remap::text_mappings;

/// The older-kernel fallbacks (`HUGETEXT_COMPAT`): a 5.x kernel without
/// `PAGEMAP_SCAN`, `MADV_POPULATE_READ` and page-table reclaim.
const FALLBACKS: &str = "no-pagemap-scan,no-populate,no-pt-reclaim";
const MIB: f64 = (1 << 20) as f64;

/// The first ELF executable called `name` on PATH. Scripts are passed over:
/// a wrapper (pyenv shim, ...) would exec the real program with the preload
/// already removed from its environment.
fn find_elf(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).find_map(|d| {
        let p = d.join(name);
        let meta = std::fs::metadata(&p).ok()?;
        let mut magic = [0u8; 4];
        let elf = std::fs::File::open(&p)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok()
            && &magic == b"\x7fELF";
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0 && elf).then_some(p)
    })
}

/// The toolchain's own rustc (`rustc` on PATH is often rustup's proxy,
/// which would exec it without the preload).
fn real_rustc() -> Option<PathBuf> {
    let o = Command::new("rustc").args(["--print", "sysroot"]).output().ok()?;
    let sysroot = String::from_utf8(o.stdout).ok()?;
    let p = Path::new(sysroot.trim()).join("bin/rustc");
    p.is_file().then_some(p)
}

fn program(name: &str) -> Option<PathBuf> {
    let p = if name == "rustc" { real_rustc() } else { find_elf(name) };
    if p.is_none() {
        eprintln!("note: {name} is not installed: skipped");
    }
    p
}

/// A command with no HUGETEXT_* settings inherited from the test's caller.
fn clean(mut c: Command) -> Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("HUGETEXT_") {
            c.env_remove(k);
        }
    }
    c
}

/// Run and remove the perf map a copied process may leave.
fn output(mut c: Command) -> Output {
    common::output_without_perf_map(&mut c)
}

/// `hugetext run --strategy STRATEGY -- PROG ARGS`; with `record`, the
/// preload writes its record of each pass on stderr (`HUGETEXT_REPORT=json`).
fn under_run(compat: Option<&str>, strategy: &str, record: bool, prog: &Path, args: &[&str]) -> Command {
    let mut c = clean(Command::new(common::bin()));
    c.args(["run", "--strategy", strategy]);
    if record {
        c.env(hugetext_abi::settings::REPORT, "json");
    }
    c.arg("--").arg(prog).args(args);
    if let Some(v) = compat {
        c.env("HUGETEXT_COMPAT", v);
    }
    c
}

#[test]
fn system_programs_print_the_same_under_run() {
    let cases: [(&str, &[&str]); 5] = [
        (
            "python3",
            &["-c", "import json,sys;print(json.dumps(sys.version_info[:2]))"],
        ),
        ("perl", &["-e", "print 6*7"]),
        ("gcc", &["--version"]),
        ("git", &["--version"]),
        ("rustc", &["--version"]),
    ];
    let mut ran = 0;
    for (name, args) in cases {
        let Some(prog) = program(name) else { continue };
        let alone = output({
            let mut c = clean(Command::new(&prog));
            c.args(args);
            c
        });
        assert!(alone.status.success(), "{name} alone: {:?}", alone.status);
        for compat in [None, Some(FALLBACKS)] {
            for strategy in ["auto", "file", "copy"] {
                let case = format!("{name} --strategy {strategy} (HUGETEXT_COMPAT={compat:?})");
                let r = output(under_run(compat, strategy, false, &prog, args));
                assert_eq!(
                    r.status.code(),
                    alone.status.code(),
                    "{case}: {}",
                    common::text(&r.stderr)
                );
                assert_eq!(
                    common::text(&r.stdout),
                    common::text(&alone.stdout),
                    "{case}: other output"
                );
                assert_eq!(
                    common::text(&r.stderr),
                    common::text(&alone.stderr),
                    "{case}: other errors"
                );
                ran += 1;
            }
        }
    }
    // python3, perl, gcc and git are Debian packages the test setup installs.
    assert!(
        ran >= 4 * 6,
        "only {ran} runs: are python3, perl, gcc and git installed?"
    );
}

/// rustc blocked reading its program from stdin, after the preload ran:
/// the process's text as smaps shows it from outside must be what the
/// preload's record says is huge-backed, and `auto`/`copy` must make most
/// of it huge, the driver's included.
#[test]
fn rustc_driver_is_huge_backed_as_reported() {
    let Some(rustc) = program("rustc") else { return };
    let dir = common::scratch();
    let out = dir.path().join("t.rmeta");
    let args = [
        "-",
        "--crate-name",
        "t",
        "--crate-type",
        "lib",
        "--emit",
        "metadata",
        "-o",
        out.to_str().unwrap(),
    ];
    for compat in [None, Some(FALLBACKS)] {
        for strategy in ["auto", "copy", "file"] {
            let case = format!("rustc --strategy {strategy} (HUGETEXT_COMPAT={compat:?})");
            let _ = std::fs::remove_file(&out);
            let t0 = std::time::Instant::now();
            let mut child = under_run(compat, strategy, true, &rustc, &args)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id();
            // The preload's record of its pass at start comes before main;
            // then rustc blocks reading stdin.
            let mut err = String::new();
            let mut r = BufReader::new(child.stderr.take().unwrap());
            let rec = loop {
                let mut l = String::new();
                if r.read_line(&mut l).unwrap() == 0 {
                    let _ = child.kill();
                    panic!("{case}: no record from the preload: {err}");
                }
                err.push_str(&l);
                if let Some(rec) = common::records(&l).into_iter().find(|r| r["late"] == 0) {
                    break rec;
                }
            };
            let preload_done = t0.elapsed();
            let text = text_mappings(pid as i32).unwrap();
            let seen: u64 = text.iter().map(|m| m.huge()).sum();
            let driver: u64 = text
                .iter()
                .filter(|m| m.path.contains("librustc_driver"))
                .map(|m| m.huge())
                .sum();
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(b"pub fn f() -> u32 { 6 * 7 }\n").unwrap();
            drop(stdin);
            let st = child.wait().unwrap();
            common::remove_perf_map(pid);
            assert!(st.success() && out.exists(), "{case}: rustc failed: {st:?} {err}");
            let field = |k: &str| rec[k].as_u64().unwrap_or_else(|| panic!("{case}: no {k} in {rec}"));
            let (huge, windows) = (field("huge"), field("windows"));
            eprintln!(
                "{case}: {:.1} of {:.1} MiB huge (smaps: {:.1}, librustc_driver {:.1}), preload done {:.0} ms after spawn",
                huge as f64 / MIB,
                windows as f64 / MIB,
                seen as f64 / MIB,
                driver as f64 / MIB,
                preload_done.as_secs_f64() * 1e3
            );
            assert!(windows >= 32 << 20, "{case}: no driver text in the record: {rec}");
            // Exact bytes on both sides: huge-backed text is whole windows.
            assert_eq!(
                seen, huge,
                "{case}: smaps shows {seen} bytes huge, the preload said {huge}: {rec}"
            );
            if strategy != "file" {
                assert!(
                    huge * 10 >= windows * 9,
                    "{case}: only {huge} of {windows} bytes: {rec}"
                );
                assert!(
                    driver >= 32 << 20,
                    "{case}: librustc_driver has {driver} bytes huge: {rec}"
                );
            }
            // `file` can only do the driver's congruent segment, and only
            // where no other process (a concurrent cargo build's rustc) maps
            // its small page-cache folios: no minimum.
            if compat.is_some() {
                assert_eq!(field("smaps"), 1, "{case}: not verified with smaps totals: {rec}");
            }
        }
    }
}
/// The entries of an environment that are hugetext's (`common::is_ours`).
fn ours(env: &[String]) -> Vec<&String> {
    env.iter().filter(|e| common::is_ours(e)).collect()
}

/// `hugetext run --strategy copy` of a program that prints, as one JSON
/// object, its own `/proc/self/environ` (`proc`), the environment it sees
/// (`env`) and a child's `/proc/self/environ` (`child`): none of `views`
/// holds anything of hugetext, and the preload did run (its record).
fn program_and_child_see_no_trace(case: &str, prog: &Path, args: &[&str], views: &[&str]) {
    let mut c = under_run(None, "copy", false, prog, args);
    c.env("HUGETEXT_REPORT", "json");
    let o = output(c);
    let (out, err) = (common::text(&o.stdout), common::text(&o.stderr));
    assert!(o.status.success(), "{case}: {err}");
    assert!(
        !common::records(&err).is_empty(),
        "{case}: the preload made no record: {err}"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{case}: {e}: {out} {err}"));
    for &what in views {
        let env: Vec<String> = v[what]
            .as_array()
            .unwrap_or_else(|| panic!("{case}: no {what}: {out}"))
            .iter()
            .filter_map(|e| e.as_str())
            .filter(|e| !e.is_empty())
            .map(String::from)
            .collect();
        assert!(env.iter().any(|e| e.starts_with("PATH=")), "{case} {what}: {env:?}");
        assert!(ours(&env).is_empty(), "{case} {what}: {:?}", ours(&env));
    }
}

/// node (`process.env`, a child from `child_process.execSync`) and
/// python3 with numpy imported (a child from `subprocess`) under `run`:
/// the program and its child see the environment they would see without
/// hugetext, in `/proc/PID/environ` and in what it reads (`process.env`,
/// `os.environ`: python3 reads it while it is still a followed launcher).
#[test]
fn node_and_numpy_and_their_children_see_no_trace_of_hugetext() {
    let mut ran = 0;
    match find_elf("node") {
        Some(node) => {
            let js = "const cp=require('child_process'),fs=require('fs');\
                const split=s=>s.split('\\0');\
                console.log(JSON.stringify({\
                proc:split(fs.readFileSync('/proc/self/environ','latin1')),\
                env:Object.entries(process.env).map(([k,v])=>k+'='+v),\
                child:split(cp.execSync('cat /proc/self/environ').toString('latin1'))}))";
            program_and_child_see_no_trace("node", &node, &["-e", js], &["proc", "env", "child"]);
            ran += 1;
        }
        None => common::skip_line("node (nodejs) not installed: its case is skipped"),
    }
    // Debian's python3 with python3-numpy (the first python3 on PATH may
    // be another one, without numpy).
    let py = Path::new("/usr/bin/python3");
    let numpy = py.exists()
        && Command::new(py)
            .args(["-c", "import numpy"])
            .output()
            .is_ok_and(|o| o.status.success());
    if numpy {
        let code = "import numpy, subprocess, os, json\n\
            split = lambda b: b.decode('latin1').split('\\0')\n\
            print(json.dumps({'proc': split(open('/proc/self/environ', 'rb').read()),\
            'env': [k + '=' + v for k, v in os.environ.items()],\
            'child': split(subprocess.run(['cat', '/proc/self/environ'], capture_output=True).stdout)}))";
        // `os.environ` too: Debian's python3 has text but no whole window,
        // so it starts as a launcher the preload follows, and copies the
        // environment at start, before numpy's libraries (loaded later)
        // make it the program; a followed launcher's environment is clean
        // all the same (the settings travel at exec: doc/run.md).
        program_and_child_see_no_trace("python3 + numpy", py, &["-c", code], &["proc", "env", "child"]);
        ran += 1;
    } else {
        common::skip_line("/usr/bin/python3 cannot import numpy (python3-numpy not installed): its case is skipped");
    }
    eprintln!("{ran} of 2 programs checked");
}

/// Debian's chromium, started through its wrapper script
/// (`/usr/bin/chromium` execs `/usr/lib/chromium/chromium`) under `run`,
/// headless on a blank page: once its processes (browser, zygotes,
/// renderer, utilities) are up, none holds anything of hugetext in
/// `/proc/PID/environ`, and the browser's text is huge-backed.
#[test]
fn chromium_processes_hold_no_trace_of_hugetext() {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let (wrapper, browser) = (Path::new("/usr/bin/chromium"), Path::new("/usr/lib/chromium/chromium"));
    if !wrapper.exists() || !browser.exists() {
        common::skip_line("chromium not installed: skipped");
        return;
    }
    common::preload();
    let dir = common::scratch();
    let mut c = under_run(
        None,
        "copy",
        true,
        wrapper,
        &[
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            &format!("--user-data-dir={}", dir.path().display()),
            "about:blank",
        ],
    );
    let err_path = dir.path().join("run.err");
    let mut child = c
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let root = child.id() as i32;
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: signalling the process group the test started.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
    let kill = Kill(root);
    let err = || std::fs::read_to_string(&err_path).unwrap_or_default();
    let exe = browser.canonicalize().unwrap();
    let runs_browser = |p: &i32| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe);
    // Each process of the browser is judged by its `/proc/PID/environ`.
    // A clean read is final: the variables are there from exec until the
    // preload's start removes them, and nothing puts them back. A process
    // exec'd a moment ago may not have run the preload's start yet, so a
    // read that shows them is taken again, and counts only once the
    // process has shown them for ten seconds. Children that end (chromium
    // restarts a crashed one under a new pid) are dropped, and the count
    // of pids that came and went goes into any failure message.
    let environ = |p: i32| -> Option<Vec<String>> {
        let raw = std::fs::read(format!("/proc/{p}/environ")).ok()?;
        Some(
            raw.split(|&c| c == 0)
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .collect(),
        )
    };
    let mut clean: Vec<i32> = Vec::new();
    let mut dirty: std::collections::HashMap<i32, (Instant, Vec<String>)> = Default::default();
    let mut seen_pids: std::collections::HashSet<i32> = Default::default();
    let t = Instant::now();
    let main = loop {
        assert!(child.try_wait().unwrap().is_none(), "chromium ended: {}", err());
        let tree: Vec<i32> = hugetext::procfs::descendants(root)
            .into_iter()
            .filter(|p| runs_browser(p))
            .collect();
        seen_pids.extend(&tree);
        for &p in &tree {
            if clean.contains(&p) {
                continue;
            }
            let Some(env) = environ(p) else { continue };
            let mine: Vec<String> = ours(&env).into_iter().cloned().collect();
            if mine.is_empty() {
                dirty.remove(&p);
                clean.push(p);
            } else {
                let since = dirty.entry(p).or_insert_with(|| (Instant::now(), Vec::new()));
                since.1 = mine;
                assert!(
                    since.0.elapsed() < Duration::from_secs(10),
                    "pid {p} still holds {:?} ten seconds after it was first seen\n{}",
                    since.1,
                    err()
                );
            }
        }
        // The browser and at least two of its children (zygote, renderer, ...),
        // all alive now and all read clean.
        clean.retain(|p| tree.contains(p));
        // The browser is the one whose parent does not run chromium.
        let browser_pid = tree
            .iter()
            .copied()
            .find(|&p| hugetext::procfs::read_stat(p).is_ok_and(|st| !tree.contains(&st.ppid)));
        if clean.len() >= 3 {
            if let Some(main) = browser_pid.filter(|p| clean.contains(p)) {
                break main;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "after five minutes {} of chromium's processes are alive and clean ({clean:?} of {tree:?}; \
             {} pids seen in all; still showing hugetext: {dirty:?})\n{}",
            clean.len(),
            seen_pids.len(),
            err()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The copy may still be under way on a loaded machine: look until the
    // text is huge or a minute has passed.
    let huge_text = || -> u64 {
        text_mappings(main)
            .unwrap_or_default()
            .iter()
            .filter(|m| m.path == exe.to_string_lossy())
            .map(|m| m.huge())
            .sum()
    };
    let t = Instant::now();
    let mut seen = huge_text();
    while seen == 0 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
        seen = huge_text();
    }
    drop(kill);
    let _ = child.wait();
    for &p in &seen_pids {
        common::remove_perf_map(p as u32);
    }
    let err = err();
    assert!(seen > 0, "the browser's text is not huge-backed: {err}");
    eprintln!(
        "chromium: {} processes clean ({} pids seen), browser text {:.0} MiB huge",
        clean.len(),
        seen_pids.len(),
        seen as f64 / MIB
    );
}
