//! `hugetext::elf::resolve_deps` against `ldd` on real programs.

use hugetext_testkit as common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use hugetext::elf::resolve_deps;

/// What ldd (ld.so in trace mode) loads, as canonical paths.
fn ldd(exe: &Path) -> BTreeSet<PathBuf> {
    let out = Command::new("ldd").arg(exe).output().expect("ldd");
    assert!(
        out.status.success(),
        "ldd {}: {}",
        exe.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut set = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim();
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = match line.split_once(" => ") {
            Some((_, rest)) => rest.split(" (").next().unwrap(),
            None => line.split(" (").next().unwrap(),
        };
        if path.starts_with('/') {
            set.insert(Path::new(path).canonicalize().unwrap());
        }
    }
    set
}

fn compare(exe: &Path) -> usize {
    let ours = resolve_deps(exe).unwrap_or_else(|e| panic!("resolve_deps {}: {e}", exe.display()));
    let unique: BTreeSet<PathBuf> = ours.iter().cloned().collect();
    assert_eq!(unique.len(), ours.len(), "duplicates in {ours:?}");
    for p in &ours {
        assert!(
            p.is_absolute() && p.canonicalize().unwrap() == *p,
            "not canonical: {}",
            p.display()
        );
    }
    assert_eq!(unique, ldd(exe), "{}", exe.display());
    ours.len()
}

#[test]
fn matches_ldd_on_system_programs() {
    for exe in [
        "/usr/bin/python3",
        "/usr/bin/ls",
        "/usr/bin/perf",
        "/usr/bin/gdb",
        "/usr/bin/cmake",
    ] {
        let exe = Path::new(exe);
        if !exe.exists() {
            continue;
        }
        let n = compare(exe);
        assert!(n >= 2, "{} has an interpreter and libc at least", exe.display());
    }
    // The interpreter comes first.
    let py = resolve_deps(Path::new("/usr/bin/python3")).unwrap();
    assert!(py[0].to_string_lossy().contains("ld-linux-x86-64"), "{py:?}");
}

#[test]
fn matches_ldd_on_fixtures_using_origin() {
    for linker in ["bfd", "lld", "mold"] {
        let usebig = common::fixture(linker, "usebig");
        compare(&usebig);
        let deps = resolve_deps(&usebig).unwrap();
        let lib = common::fixture(linker, "libbig.so").canonicalize().unwrap();
        assert!(deps.contains(&lib), "{linker}: $ORIGIN not resolved: {deps:?}");
    }
}

#[test]
fn ld_library_path_and_missing_libraries() {
    let dir = common::scratch();
    // usebig moved away from its library: $ORIGIN no longer finds it...
    let exe = dir.path().join("usebig");
    std::fs::copy(common::fixture("lld", "usebig"), &exe).unwrap();
    let err = resolve_deps(&exe).unwrap_err().to_string();
    assert!(err.contains("cannot find libbig.so"), "{err}");
    assert_eq!(err.lines().count(), 1);
    // ...but LD_LIBRARY_PATH does, as it does for ld.so. (Set in a child so
    // the test's own environment is not mutated under other threads.)
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &common::test_name(module_path!(), "ld_library_path_child"),
            "--nocapture",
        ])
        .env("HUGETEXT_TEST_EXE", &exe)
        .env("LD_LIBRARY_PATH", common::fixture("lld", "libbig.so").parent().unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn ld_library_path_child() {
    let Some(exe) = std::env::var_os("HUGETEXT_TEST_EXE") else {
        return;
    };
    let deps = resolve_deps(Path::new(&exe)).unwrap();
    assert!(deps.iter().any(|p| p.ends_with("libbig.so")), "{deps:?}");
    assert_eq!(deps.iter().cloned().collect::<BTreeSet<_>>(), ldd(Path::new(&exe)));
}

#[test]
fn static_and_non_elf() {
    let dir = common::scratch();
    let txt = dir.path().join("x.txt");
    std::fs::write(&txt, "hello").unwrap();
    assert!(resolve_deps(&txt).unwrap_err().to_string().contains("not an ELF file"));
    let src = dir.path().join("s.c");
    std::fs::write(&src, "int main(void){return 0;}\n").unwrap();
    let st = dir.path().join("static");
    if Command::new("gcc")
        .args(["-static", "-o"])
        .arg(&st)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
    {
        assert_eq!(resolve_deps(&st).unwrap(), Vec::<PathBuf>::new());
    }
}

/// `run` reads what it needs of each library before the exec in a few
/// system calls: at most 3 `pread`s (ELF and program headers, the dynamic
/// section, the names) and one `fstat` per library opened, and no `stat`
/// of a library's path to learn its inode. (Before: one `pread` per name
/// and 4 `stat`s per library: 360 `pread`s and 191 `statx` for postgres's
/// 45 libraries, 798 system calls in all before its exec; now 429.)
#[test]
fn run_reads_each_library_in_a_few_system_calls() {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        eprintln!("skipped: no /usr/bin/python3");
        return;
    }
    let prog = python.canonicalize().unwrap();
    let (before, _) = common::strace_run("openat,pread64,statx,newfstatat,fstat,execve", &prog, &["-c", "pass"]);
    // Each system call is counted for the file opened last: a library's
    // reads follow its `openat`, up to the next one.
    let (mut libs, mut preads, mut fstats, mut in_lib) = (0, 0, 0, false);
    for l in before.lines() {
        if l.starts_with("openat(") {
            in_lib = l.contains(".so") && !l.contains("= -1");
            libs += usize::from(in_lib);
        } else if in_lib && l.starts_with("pread64(") {
            preads += 1;
        } else if in_lib && (l.starts_with("statx(") || l.starts_with("newfstatat(")) && l.contains(", \"\",") {
            fstats += 1;
        }
    }
    let lib_stats: Vec<_> = before
        .lines()
        .filter(|l| (l.starts_with("statx(AT_FDCWD") || l.starts_with("newfstatat(AT_FDCWD")) && l.contains(".so"))
        .filter(|l| !l.contains("/ld.so.cache"))
        .collect();
    assert!(libs >= 3, "libraries opened: {libs}\n{before}");
    assert!(preads <= 3 * libs, "{preads} preads for {libs} libraries opened");
    assert!(fstats <= libs, "{fstats} fstats for {libs} libraries opened");
    assert!(lib_stats.len() <= 2, "stats of library paths: {lib_stats:#?}");
}
