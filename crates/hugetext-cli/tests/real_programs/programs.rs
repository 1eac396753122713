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
