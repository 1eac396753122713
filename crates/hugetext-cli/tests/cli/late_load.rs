//! `hugetext run` and objects loaded after start (`dlopen`): followed through
//! the rtld audit interface, against the real kernel and real programs.
//!
//! C programs: crates/hugetext-cli/tests/c/late_load.c and late_capi.c
//! (built by tests/fixtures/mkctests.sh); python3 with numpy and Java 17
//! (scripts/install-deps.sh installs them) for the real-program tests.

use hugetext_testkit as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KIB_PER_MIB: u64 = 1024;

/// The kernel-compatibility fallbacks, all forced (a Linux 5.x kernel: see
/// tests/run.rs).
const FALLBACKS: &str = "no-pagemap-scan,no-populate,no-pt-reclaim";

/// The `-v` summary of one pass over objects loaded after start.
const LATE_SUMMARY: &str = ", loaded after start (dlopen): ";

/// `hugetext run ARGS -- PROG PROG_ARGS` with `env` set, nothing of the
/// preload's settings inherited.
fn run(args: &[&str], env: &[(&str, &str)], compat: Option<&str>, prog: &Path, prog_args: &[&str]) -> Output {
    common::preload();
    let mut cmd = Command::new(common::bin());
    cmd.arg("run").args(args).arg("--").arg(prog).args(prog_args);
    for v in [
        "HUGETEXT_STRATEGY",
        "HUGETEXT_VERBOSE",
        "HUGETEXT_DISABLE",
        "HUGETEXT_LATE",
        "HUGETEXT_LATE_MIN",
        "LD_AUDIT",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied());
    common::with_compat(&mut cmd, compat);
    common::output_without_perf_map(&mut cmd)
}

fn plain(prog: &Path, args: &[&str]) -> Output {
    common::output_without_perf_map(Command::new(prog).args(args))
}

/// One round of late_load: its stderr line "round=R huge_kib=K ...".
#[derive(Debug, Default)]
struct Round {
    huge_kib: u64,
    text_kib: u64,
    perf_lines: u64,
    left_kib: u64,
    stale_lines: u64,
}

fn rounds(stderr: &str) -> Vec<Round> {
    stderr
        .lines()
        .filter(|l| l.starts_with("round="))
        .map(|l| {
            let mut r = Round::default();
            for kv in l.split_whitespace() {
                let (k, v) = kv.split_once('=').unwrap();
                let v: u64 = v.parse().unwrap();
                match k {
                    "huge_kib" => r.huge_kib = v,
                    "text_kib" => r.text_kib = v,
                    "perf_lines" => r.perf_lines = v,
                    "left_kib" => r.left_kib = v,
                    "stale_lines" => r.stale_lines = v,
                    _ => {}
                }
            }
            r
        })
        .collect()
}

/// `late_load LIB ROUNDS THREADS` under `hugetext run -v ARGS`, checked
/// against a plain run: same stdout, exit 0, the parsed rounds.
fn late_load(args: &[&str], env: &[(&str, &str)], compat: Option<&str>, lib: &Path, n: usize) -> (Vec<Round>, String) {
    let prog = common::cprogs().join("late_load");
    let pargs = [lib.to_str().unwrap(), &n.to_string(), "4"];
    let a = plain(&prog, &pargs);
    assert!(
        a.status.success(),
        "late_load alone: {:?} {}",
        a.status,
        common::text(&a.stderr)
    );
    let mut all = vec!["-v"];
    all.extend_from_slice(args);
    let o = run(&all, env, compat, &prog, &pargs);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{args:?} {env:?}: {:?} {err}", o.status);
    assert_eq!(
        common::text(&o.stdout),
        common::text(&a.stdout),
        "{args:?} {env:?}: late_load prints something else under run"
    );
    let r = rounds(&err);
    assert_eq!(r.len(), n, "{err}");
    (r, err)
}

/// dlopen, call, dlclose and dlopen again, from 4 threads at once, 6 rounds:
/// every round the library's text is huge-backed, remapped once (one late
/// pass per round, whichever thread's dlopen mapped it), and after dlclose
/// nothing of it is left (no anonymous copy, no perf-map line naming its
/// old addresses). lld's libbig.so is not congruent (the `copy` route);
/// bfd's is (`file` where the filesystem has large folios, else `copy`).
#[test]
fn dlopen_dlclose_and_again_from_threads_is_huge_each_time() {
    let cases: [(&str, &[&str], Option<&str>); 5] = [
        ("lld", &[], None),
        ("bfd", &[], None),
        ("bfd", &["--strategy", "copy"], None),
        ("lld", &[], Some(FALLBACKS)),
        ("bfd", &["--strategy", "copy"], Some(FALLBACKS)),
    ];
    for (linker, args, compat) in cases {
        let lib = common::fixture(linker, "libbig.so");
        let case = format!("{linker} {args:?} HUGETEXT_COMPAT={compat:?}");
        let (rs, err) = late_load(args, &[], compat, &lib, 6);
        let copies = args.contains(&"copy") || linker == "lld";
        for (i, r) in rs.iter().enumerate() {
            assert!(
                r.huge_kib >= 16 * KIB_PER_MIB && r.huge_kib <= r.text_kib,
                "{case}: round {i}: {r:?}\n{err}"
            );
            assert_eq!(
                r.left_kib, 0,
                "{case}: round {i}: mappings left after dlclose: {r:?}\n{err}"
            );
            assert_eq!(
                r.stale_lines, 0,
                "{case}: round {i}: perf map names unloaded text: {r:?}"
            );
            if copies {
                assert!(
                    r.perf_lines > 0,
                    "{case}: round {i}: copied text has no perf-map lines: {r:?}"
                );
            }
        }
        assert_eq!(
            err.matches(LATE_SUMMARY).count(),
            6,
            "{case}: one late pass per round expected (4 threads dlopen at once):\n{err}"
        );
        assert!(err.contains("are followed (LD_AUDIT)"), "{case}: {err}");
        if compat.is_some() {
            // smaps cannot see a contpte unit (64 KiB pages): PFNs verify
            // there whatever PAGEMAP_SCAN does.
            let how = if common::contpte_unit() {
                "verified with pagemap PFNs and /proc/kpageflags"
            } else {
                "verified with /proc/self/smaps totals"
            };
            assert!(err.contains(how), "{case}: {err}");
        }
    }
}

/// The opt-outs: --no-dlopen, the kill switch, --exclude and a minimum size
/// above the library's text leave it in 4 KiB pages (lld's libbig.so: not
/// congruent, so nothing but hugetext can make it huge), and -v says why.
#[test]
fn late_objects_obey_no_dlopen_kill_switch_exclude_and_minimum() {
    let lib = common::fixture("lld", "libbig.so");
    // A minimum above all the library's text (20 MiB on x86-64, 70 MiB on
    // aarch64), whole MiB.
    let min_mib = (std::fs::metadata(&lib).unwrap().len() >> 20) + 1;
    let min = format!("{min_mib}M");
    let below = format!("below HUGETEXT_LATE_MIN={min_mib}.0 MiB: left alone");
    type Case<'a> = (&'a [&'a str], Vec<(&'a str, &'a str)>, &'a str);
    let cases: [Case; 4] = [
        (&["--no-dlopen"], vec![], "are not followed: HUGETEXT_LATE=0"),
        (&[], vec![("HUGETEXT_DISABLE", "1")], ""),
        (&["--exclude", "libbig"], vec![], "are followed (LD_AUDIT)"),
        (&[], vec![("HUGETEXT_LATE_MIN", &min)], &below),
    ];
    for (args, env, says) in cases {
        let env = &env[..];
        let (rs, err) = late_load(args, env, None, &lib, 2);
        for r in &rs {
            assert_eq!(r.huge_kib, 0, "{args:?} {env:?}: {r:?}\n{err}");
            assert_eq!(r.left_kib, 0, "{args:?} {env:?}: {r:?}\n{err}");
        }
        assert!(!err.contains(LATE_SUMMARY), "{args:?} {env:?}: {err}");
        assert!(err.contains(says), "{args:?} {env:?}: expected {says:?} in\n{err}");
    }
    // The minimum counts whole windows: 18 MiB of them pass 16M.
    let (rs, err) = late_load(&[], &[("HUGETEXT_LATE_MIN", "16M")], None, &lib, 1);
    assert!(rs[0].huge_kib >= 16 * KIB_PER_MIB, "{rs:?}\n{err}");
}

/// A library with text relocations (the loader writes into its text after
/// the audit hook) is left alone; a dlopen of a file that is not ELF fails
/// as it does without hugetext. Neither disturbs the program.
#[test]
fn text_relocations_and_non_elf_files_are_left_alone() {
    let prog = common::cprogs().join("late_capi");
    let textrel = common::cprogs().join("libtextrel.so");
    // The preload looks no further at an object without a whole window of
    // text: two PMDs hold one wherever the loader puts it.
    assert!(
        std::fs::metadata(&textrel).unwrap().len() >= 2 * common::unit(),
        "{} has less than two {} windows of text (tests/fixtures/mkctests.sh)",
        textrel.display(),
        hugetext::units::human(common::unit())
    );
    let o = run(&["-v"], &[], None, &prog, &["open", textrel.to_str().unwrap()]);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{:?} {err}", o.status);
    assert_eq!(common::text(&o.stdout), "opened\n");
    assert!(
        err.contains("libtextrel.so: has text relocations (DT_TEXTREL)"),
        "{err}"
    );
    assert!(!err.contains(LATE_SUMMARY), "{err}");
    let junk = common::scratch();
    let not_elf = junk.path().join("libnot-elf.so");
    std::fs::write(&not_elf, vec![b'#'; 3 << 20]).unwrap();
    let o = run(&["-v"], &[], None, &prog, &["open", not_elf.to_str().unwrap()]);
    assert!(o.status.success(), "{:?} {}", o.status, common::text(&o.stderr));
    assert_eq!(common::text(&o.stdout), "dlopen failed\n");
    assert!(!common::text(&o.stderr).contains(LATE_SUMMARY));
}

/// hugetext_remap_text() (linked, not preloaded) remaps what was loaded
/// since its last call.
#[test]
fn c_api_remaps_objects_loaded_since_its_last_call() {
    for linker in ["lld", "bfd"] {
        let lib = common::fixture(linker, "libbig.so");
        let o = plain(&common::cprogs().join("late_capi"), &["capi", lib.to_str().unwrap()]);
        let out = common::text(&o.stdout);
        assert!(
            o.status.success(),
            "{linker}: {:?} {out} {}",
            o.status,
            common::text(&o.stderr)
        );
        let v: Vec<i64> = out
            .lines()
            .filter_map(|l| l.strip_prefix("remapped=")?.parse().ok())
            .collect();
        assert_eq!(v.len(), 2, "{out}");
        assert!(v[1] >= v[0] + (16 << 20), "{linker}: {v:?}");
        let huge: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("lib_huge_kib=")?.parse().ok())
            .unwrap();
        assert!(huge >= 16 * KIB_PER_MIB, "{linker}: {out}");
    }
}

/// kB huge-backed (AnonHugePages + FilePmdMapped) of the executable mappings
/// within the address span of the mappings whose path contains `name`, and kB of that span's text
/// in whole 2 MiB windows, from a /proc/PID/smaps text. Copied windows are
/// anonymous (no name where the kernel lacks CONFIG_ANON_VMA_NAME): they
/// lie inside the span.
fn huge_in_span(smaps: &str, name: &str) -> (u64, u64) {
    struct E {
        start: u64,
        end: u64,
        exec: bool,
        path: String,
        huge: u64,
    }
    let mut es: Vec<E> = Vec::new();
    for l in smaps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let header = f
            .first()
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?)));
        match header {
            Some((start, end)) if f.len() >= 5 => es.push(E {
                start,
                end,
                exec: f[1].contains('x'),
                path: f.get(5).unwrap_or(&"").to_string(),
                huge: 0,
            }),
            _ => {
                if let (Some(e), Some(k)) = (es.last_mut(), f.first()) {
                    if *k == "AnonHugePages:" || *k == "FilePmdMapped:" {
                        e.huge += f[1].parse::<u64>().unwrap();
                    }
                }
            }
        }
    }
    let mine: Vec<&E> = es.iter().filter(|e| e.path.contains(name)).collect();
    assert!(!mine.is_empty(), "no mapping of {name}");
    let (lo, hi) = (
        mine.iter().map(|e| e.start).min().unwrap(),
        mine.iter().map(|e| e.end).max().unwrap(),
    );
    let inside = es.iter().filter(|e| e.start >= lo && e.end <= hi);
    // Text only: read-only data after it may sit in a PMD-size page-cache
    // folio too (once anything read the whole file into large folios), and
    // FilePmdMapped counts it; that is not text made huge.
    let huge = inside.clone().filter(|e| e.exec).map(|e| e.huge).sum();
    let unit = common::unit();
    let exec_lo = inside.clone().filter(|e| e.exec).map(|e| e.start).min().unwrap_or(0);
    let exec_hi = inside.filter(|e| e.exec).map(|e| e.end).max().unwrap_or(0);
    let windows = (hugetext_abi::geometry::align_down(exec_hi, unit))
        .saturating_sub(hugetext_abi::geometry::align_up(exec_lo, unit))
        / 1024;
    (huge, windows)
}

/// python3 with numpy (`pip install numpy`, scripts/install-deps.sh); the
/// interpreter itself, not a pyenv shim script (which would strip the
/// preload before python starts).
fn python_with_numpy() -> PathBuf {
    let o = Command::new("python3")
        .args(["-c", "import sys, numpy; print(sys.executable)"])
        .output()
        .expect("python3");
    assert!(
        o.status.success(),
        "python3 with numpy is needed (scripts/install-deps.sh installs it): {}",
        common::text(&o.stderr)
    );
    PathBuf::from(common::text(&o.stdout).trim())
}

/// numpy's bundled OpenBLAS, dlopen'ed by `import numpy`: its text is
/// huge-backed in the live process, and the BLAS loop prints what it prints
/// without hugetext.
#[test]
fn numpy_openblas_text_is_huge_and_the_output_unchanged() {
    let py = python_with_numpy();
    let script = common::root().join("crates/hugetext-cli/tests/late/blas.py");
    let script = script.to_str().unwrap();
    let a = plain(&py, &[script, "20"]);
    assert!(a.status.success(), "{}", common::text(&a.stderr));
    let o = run(&[], &[], None, &py, &[script, "20", "smaps"]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    assert_eq!(common::text(&o.stdout), common::text(&a.stdout));
    let (huge, windows) = huge_in_span(&common::text(&o.stderr), "openblas");
    assert!(
        windows >= 4 * KIB_PER_MIB,
        "OpenBLAS text has {windows} kB in whole windows"
    );
    assert_eq!(
        huge, windows,
        "OpenBLAS: {huge} of {windows} kB of whole windows huge-backed"
    );
    // The plain run: nothing of it (the kernel does not map library text
    // with huge pages by itself under THP `madvise`; under `always` it may).
    let v = run(&["-v"], &[], None, &py, &[script, "1"]);
    let err = common::text(&v.stderr);
    assert!(
        err.lines()
            .any(|l| l.contains("libscipy_openblas") && l.contains(" huge (")),
        "{err}"
    );
}

/// `java -version` and a small program: libjvm.so (dlopen'ed by the java
/// launcher) huge-backed, output unchanged.
#[test]
fn java_libjvm_text_is_huge_and_the_output_unchanged() {
    let java = PathBuf::from("java");
    let a = plain(&java, &["-version"]);
    assert!(
        a.status.success(),
        "java is needed (scripts/install-deps.sh installs it)"
    );
    let o = run(&[], &[], None, &java, &["-version"]);
    assert!(o.status.success());
    assert_eq!(
        common::text(&o.stderr),
        common::text(&a.stderr),
        "java -version says something else"
    );
    assert_eq!(common::text(&o.stdout), common::text(&a.stdout));
    let v = run(&["-v"], &[], None, &java, &["-version"]);
    let err = common::text(&v.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("/libjvm.so: ") && l.contains(" huge ("))
        .unwrap_or_else(|| panic!("no -v line for libjvm.so:\n{err}"));
    let (got, of) = line
        .split_once("libjvm.so: ")
        .and_then(|(_, r)| r.split_once(" MiB of "))
        .map(|(g, r)| (g.to_string(), r.split(' ').next().unwrap().to_string()))
        .unwrap();
    assert!(got.parse::<f64>().unwrap() >= 4.0 && got == of, "{line}");

    let dir = common::scratch();
    let src = common::root().join("crates/hugetext-cli/tests/late/Work.java");
    let st = Command::new("javac")
        .arg("-d")
        .arg(dir.path())
        .arg(&src)
        .status()
        .expect("javac");
    assert!(st.success());
    let cp = dir.path().to_str().unwrap();
    let a = plain(&java, &["-cp", cp, "Work", "100000"]);
    assert!(a.status.success(), "{}", common::text(&a.stderr));
    let o = run(&[], &[], None, &java, &["-cp", cp, "Work", "100000", "smaps"]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    assert_eq!(common::text(&o.stdout), common::text(&a.stdout));
    let (huge, windows) = huge_in_span(&common::text(&o.stderr), "/libjvm.so");
    assert!(
        windows >= 4 * KIB_PER_MIB,
        "libjvm.so text has {windows} kB in whole windows"
    );
    assert_eq!(
        huge, windows,
        "libjvm.so: {huge} of {windows} kB of whole windows huge-backed"
    );
}

/// Children run plain: the constructor removes the library from `LD_AUDIT`
/// as from `LD_PRELOAD` (an auditor the user had stays), unless --inherit.
#[test]
fn children_do_not_inherit_the_auditor_unless_asked() {
    // A program with text that runs a shell (a shell run directly is a
    // wrapper: the preload stays for what it execs).
    let spawn = common::cprogs().join("spawn");
    let echo = ["sh", "-c", "echo \"[$LD_AUDIT]\""];
    let o = run(&[], &[], None, &spawn, &echo);
    assert_eq!(common::text(&o.stdout), "[]\n");
    let o = run(&["--inherit"], &[], None, &spawn, &echo);
    // The small audit module `run` keeps in the runtime directory.
    let module = hugetext::fsutil::runtime_dir()
        .expect("root has /run/hugetext")
        .join(hugetext::run::auditmod::file_name());
    assert_eq!(common::text(&o.stdout), format!("[{}]\n", module.display()));
    let o = run(&["--no-dlopen"], &[], None, &spawn, &echo);
    assert_eq!(common::text(&o.stdout), "[]\n");
}

/// Objects loaded after start without a whole window of text (Python's
/// extension modules and the small libraries they need) are judged from
/// their own program headers: the `dlopen`s that map them read
/// /proc/self/maps no more than a start without them does (before, each
/// such `dlopen` read it twice), and do not read the thread's seccomp
/// state in /proc/thread-self/status either (before: once per `dlopen`,
/// 6 for these imports, 17 for `import numpy`).
#[test]
fn small_objects_loaded_after_start_read_no_proc_maps() {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        eprintln!("skipped: no /usr/bin/python3");
        return;
    }
    common::preload();
    // (reads of /proc/self/maps, shared objects opened, reads of the
    // seccomp state) in the python process, from its exec on.
    let count = |code: &str| -> (usize, usize, usize) {
        let (_, after) = common::strace_run("openat,execve", python, &["-c", code]);
        let opened = |l: &&str| l.contains("openat(") && !l.contains("ENOENT");
        (
            after.lines().filter(|l| l.contains("\"/proc/self/maps\"")).count(),
            after.lines().filter(opened).filter(|l| l.contains(".so")).count(),
            after.lines().filter(|l| l.contains("/status\"")).count(),
        )
    };
    let (maps_plain, objects_plain, status_plain) = count("pass");
    let (maps_loaded, objects_loaded, status_loaded) = count("import ctypes, json, sqlite3, bz2, lzma, decimal, csv");
    assert!(
        objects_loaded >= objects_plain + 5,
        "the imports loaded objects after start: {objects_plain} -> {objects_loaded}"
    );
    assert_eq!(
        maps_loaded,
        maps_plain,
        "reads of /proc/self/maps with {} more objects loaded after start",
        objects_loaded - objects_plain
    );
    assert_eq!(
        status_loaded,
        status_plain,
        "reads of the seccomp state with {} more objects loaded after start",
        objects_loaded - objects_plain
    );
}
