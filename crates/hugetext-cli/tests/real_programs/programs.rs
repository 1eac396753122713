//! Real system programs under `hugetext run`, not just fixtures: python3,
//! perl, gcc, git and rustc print exactly what they print alone, with every
//! strategy and with the older-kernel fallbacks forced; rustc's
//! librustc_driver.so (~100 MiB of text, the big real-world case) is
//! huge-backed as the preload says it is.
//!
//! A program that is not installed is skipped with a note on stderr
//! (scripts/install-deps.sh installs python3, perl, gcc and git).

use hugetext_testkit as common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use hugetext::remap::text_mappings;

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

fn under_run(compat: Option<&str>, strategy: &str, verbose: bool, prog: &Path, args: &[&str]) -> Command {
    let mut c = clean(Command::new(common::bin()));
    c.args(["run", "--strategy", strategy]);
    if verbose {
        c.arg("-v");
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

/// The preload's `-v` claims for the mappings of files whose name contains
/// `name`: (huge MiB, MiB in whole windows, lines).
fn claimed(err: &str, name: &str) -> (f64, f64, usize) {
    let mut sum = (0.0, 0.0, 0);
    for l in err.lines() {
        // "hugetext: PATH: X MiB of Y MiB huge (already ..."
        let Some((path, rest)) = l.strip_prefix("hugetext: ").and_then(|r| r.split_once(": ")) else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        if !path.contains(name) || w.len() < 6 || w[1..3] != ["MiB", "of"] || w[4..6] != ["MiB", "huge"] {
            continue;
        }
        sum.0 += w[0].parse::<f64>().unwrap();
        sum.1 += w[3].parse::<f64>().unwrap();
        sum.2 += 1;
    }
    sum
}

/// rustc blocked reading its program from stdin, after the preload ran:
/// the driver's text as smaps shows it from outside must be what the
/// preload reported, and `auto`/`copy` must make most of it huge.
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
            // The preload's summary comes before main; then rustc blocks
            // reading stdin.
            let mut err = String::new();
            let mut r = BufReader::new(child.stderr.take().unwrap());
            while !err.contains("text in whole 2 MiB windows is huge-backed") {
                let mut l = String::new();
                if r.read_line(&mut l).unwrap() == 0 {
                    let _ = child.kill();
                    panic!("{case}: no summary from the preload: {err}");
                }
                err.push_str(&l);
            }
            let preload_done = t0.elapsed();
            let seen: u64 = text_mappings(pid as i32)
                .unwrap()
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
            let (huge, windows, lines) = claimed(&err, "librustc_driver");
            let seen = seen as f64 / MIB;
            eprintln!(
                "{case}: librustc_driver {huge:.1} of {windows:.1} MiB huge (smaps: {seen:.1}), preload done {:.0} ms after spawn",
                preload_done.as_secs_f64() * 1e3
            );
            assert!(lines >= 1 && windows >= 32.0, "{case}: no driver text reported: {err}");
            // Each reported figure is rounded to 0.1 MiB.
            assert!(
                (seen - huge).abs() <= 0.1 * lines as f64,
                "{case}: smaps shows {seen:.1} MiB, the preload said {huge:.1}: {err}"
            );
            if strategy != "file" {
                assert!(huge >= 0.9 * windows, "{case}: only {huge} of {windows} MiB: {err}");
            }
            // `file` can only do the driver's congruent segment, and only
            // where no other process (a concurrent cargo build's rustc) maps
            // its small page-cache folios: no minimum.
            if compat.is_some() {
                assert!(err.contains("verified with /proc/self/smaps totals"), "{case}: {err}");
            }
        }
    }
}
