//! `hugetext run`, libhugetext.so and the C API, against the real kernel.
//!
//! Needs target/<profile>/libhugetext.so next to the hugetext binary
//! (`cargo build --release` builds the whole workspace; scripts/test.sh does).

use hugetext_testkit as common;

use common::Running;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use hugetext::run::remap::text_mappings;

const MIB: u64 = 1 << 20;

/// The kernel-compatibility fallbacks, all forced (`HUGETEXT_COMPAT`):
/// verification with /proc/self/smaps totals instead of `PAGEMAP_SCAN`,
/// pages touched instead of `MADV_POPULATE_READ`, and `MADV_DONTNEED`
/// leaving the emptied page table (no `CONFIG_PT_RECLAIM`), so the file
/// route must replace windows with `mmap(MAP_FIXED)`: a Linux 5.x kernel.
const FALLBACKS: &str = "no-pagemap-scan,no-populate,no-pt-reclaim";

/// Only the page-table one: Linux 6.7 to 6.13 (`PAGEMAP_SCAN`, no
/// `CONFIG_PT_RECLAIM`; Ubuntu 24.04's 6.8).
const NO_PT_RECLAIM: &str = "no-pt-reclaim";

/// What the preload says with -v when the file route replaced windows.
const REPLACED: &str = "in windows replaced with mmap(MAP_FIXED)";

/// Does `compat` make `MADV_DONTNEED` keep page tables?
fn keeps_tables(compat: Option<&str>) -> bool {
    compat.is_some_and(|c| c.split(',').any(|w| w == "no-pt-reclaim" || w == "all"))
}

/// Put `path`'s page cache in 4 KiB folios, as a program's exec faults
/// leave it: the file route must then drop, evict and refault (2b).
fn small_folios(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    hugetext::pagecache::evict(&f, 0..0).unwrap();
    hugetext::pagecache::fill_small(&f, 0..u64::MAX).unwrap();
}

/// The zero-copy promise, after the file route: every executable mapping
/// within the span of `file`'s text names `file` (no anonymous text) and
/// holds no anonymous (copied-on-write) memory. The text may be split into
/// several lines: windows replaced with `mmap(MAP_FIXED)` are a VMA of
/// their own (a different struct file: the kernel does not merge them).
fn assert_text_is_the_file(pid: i32, file: &Path, case: &str) {
    let f = file.canonicalize().unwrap().to_string_lossy().into_owned();
    let ms = text_mappings(pid).unwrap();
    let mine: Vec<_> = ms.iter().filter(|m| m.path == f && !m.copied).collect();
    assert!(!mine.is_empty(), "{case}: no text mapping names {f}: {ms:#?}");
    let (lo, hi) = (
        mine.iter().map(|m| m.start).min().unwrap(),
        mine.iter().map(|m| m.end).max().unwrap(),
    );
    for m in ms.iter().filter(|m| m.start < hi && lo < m.end) {
        assert!(
            m.path == f && !m.copied,
            "{case}: executable memory inside the text of {f} is not the file: {m:#?}"
        );
        assert_eq!(m.anonymous, 0, "{case}: the file route made private copies: {m:#?}");
        assert_eq!(m.anon_huge, 0, "{case}: {m:#?}");
    }
    assert_eq!(
        mine.iter().map(|m| m.end - m.start).sum::<u64>(),
        hi - lo,
        "{case}: the text of {f} has a hole: {mine:#?}"
    );
}

/// What the preload says with -v when the fallbacks ran.
const FALLBACK_SUMMARY: [&str; 2] = [
    "verified with /proc/self/smaps totals",
    "pages touched, no MADV_POPULATE_READ",
];

fn run(args: &[&str], prog: &Path, prog_args: &[&str]) -> Output {
    run_with(None, args, prog, prog_args)
}

fn run_with(compat: Option<&str>, args: &[&str], prog: &Path, prog_args: &[&str]) -> Output {
    common::preload();
    let mut cmd = Command::new(common::bin());
    cmd.arg("run")
        .args(args)
        .arg("--")
        .arg(prog)
        .args(prog_args)
        .env_remove("HUGETEXT_STRATEGY")
        .env_remove("HUGETEXT_VERBOSE");
    common::with_compat(&mut cmd, compat);
    common::output_without_perf_map(&mut cmd)
}

fn alone(prog: &Path) -> Output {
    Command::new(prog).output().expect("spawn fixture")
}

/// Stop a running program and remove the perf map its preload wrote.
fn stop(r: Running) -> String {
    let pid = r.child.id();
    let err = Running::stop(r);
    common::remove_perf_map(pid);
    err
}

/// Is the text of `file` mapped by `pid` congruent (address − offset a
/// multiple of the PMD size), i.e. can the `file` route make it huge?
fn congruent(pid: i32, file: &Path) -> bool {
    let f = file.canonicalize().unwrap().to_string_lossy().into_owned();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines().any(|l| {
        let v: Vec<&str> = l.split_whitespace().collect();
        if v.len() < 6 || v[1] != "r-xp" || v[5] != f {
            return false;
        }
        let start = u64::from_str_radix(v[0].split('-').next().unwrap(), 16).unwrap();
        let off = u64::from_str_radix(v[2], 16).unwrap();
        start.wrapping_sub(off) % common::pmd() == 0
    })
}

/// A private copy of a fixture (fresh page cache, not shared with other
/// tests running at the same time). Keeps libbig.so next to usebig.
fn private_copy(linker: &str, names: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = common::scratch();
    for n in names {
        // Copy in a child process: a write fd of ours could leak into a
        // concurrently forked test child and make exec fail with ETXTBSY.
        let st = Command::new("cp")
            .arg(common::fixture(linker, n))
            .arg(dir.path().join(n))
            .status()
            .unwrap();
        assert!(st.success());
        // Written back, so that its page cache is clean and evictable.
        std::fs::File::open(dir.path().join(n)).unwrap().sync_all().unwrap();
    }
    let main = dir.path().join(names[0]);
    (dir, main)
}

#[test]
fn every_fixture_prints_the_same_and_runs_with_huge_text() {
    fixture_matrix(None, &["auto"]);
}

/// The same on a kernel without PAGEMAP_SCAN (before 6.7), without
/// MADV_POPULATE_READ (before 5.14) and without page-table reclaim (before
/// 6.14), forced here with HUGETEXT_COMPAT, for every route.
#[test]
fn every_fixture_and_route_with_the_old_kernel_fallbacks() {
    fixture_matrix(Some(FALLBACKS), &["auto", "copy", "file"]);
}

/// Text that starts the file, ELF header included (one `R E` segment from
/// offset 0: ld.bfd's `-z noseparate-code`, and the aarch64 bfd/nopie
/// fixture on 16 KiB pages): the copy route replaces the window holding
/// the header, so no mapping of the file at offset 0 is left, and the copy
/// must still count as the program's text (placed by the file's other
/// mappings). Before, 0 kB of AnonHugePages were attributed to it.
#[test]
fn copy_of_text_that_starts_the_file_is_attributed() {
    if common::prebuilt() {
        common::skip_line("skipped: needs gcc and ld.bfd (links a program of its own)");
        return;
    }
    let dir = common::scratch();
    let exe = dir.path().canonicalize().unwrap().join("nosep");
    let src = common::fixtures().join("src");
    let st = Command::new("gcc")
        .args([
            "-O1",
            "-fno-pie",
            "-no-pie",
            "-fuse-ld=bfd",
            "-Wl,-z,noseparate-code",
            "-o",
        ])
        .arg(&exe)
        .arg(src.join("main.c"))
        .arg(src.join("text.S"))
        .status()
        .expect("gcc (scripts/install-deps.sh)");
    assert!(st.success(), "gcc -fuse-ld=bfd -z noseparate-code");
    // The layout this is about: text from offset 0 over whole windows.
    let unit = common::unit();
    let segs = hugetext::elf::text_segments(&exe).unwrap();
    let text = segs.iter().find(|s| s.is_executable()).unwrap();
    assert_eq!(text.offset, 0, "{segs:?}");
    assert!(text.vaddr % unit == 0 && text.file_size >= 4 * unit, "{segs:?}");

    let running = common::run_waiting(&["--strategy", "copy"], &exe);
    let path = exe.to_string_lossy().into_owned();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", running.pid())).unwrap();
    let at_zero = maps.lines().filter(|l| l.ends_with(&path)).any(|l| {
        l.split_whitespace()
            .nth(2)
            .is_some_and(|o| u64::from_str_radix(o, 16) == Ok(0))
    });
    assert!(!at_zero, "the window holding the ELF header was not copied:\n{maps}");
    let (_, anon, _) = running.huge_of(&exe);
    // The first window is the header's; at least it and 2 more (the
    // fixture's text holds 10 or more).
    assert!(
        anon >= 3 * unit,
        "{} kB AnonHugePages attributed to {path}:\n{maps}",
        anon >> 10
    );
    common::remove_perf_map(running.child.id());
    running.stop();
}

/// Every fixture (× each strategy) prints what it prints alone, silently,
/// and a running instance has ≥ 12 MiB of its big text huge-backed (for
/// `file`: when that text is congruent; otherwise nothing can be). `file`
/// runs on private copies: the route evicts page cache, which another
/// test's process mapping the shared fixture would keep small.
fn fixture_matrix(compat: Option<&str>, strategies: &[&str]) {
    let mut file_route_cases = 0;
    for strategy in strategies {
        for linker in ["bfd", "lld", "mold"] {
            let private = (*strategy == "file").then(|| private_copy(linker, &["usebig", "libbig.so", "pie", "nopie"]));
            for name in ["pie", "nopie", "usebig", "small"] {
                let prog = match &private {
                    Some((d, _)) if name != "small" => d.path().join(name),
                    _ => common::fixture(linker, name),
                };
                let case = format!("{linker}/{name} --strategy {strategy} (HUGETEXT_COMPAT={compat:?})");
                let a = alone(&prog);
                let r = run_with(compat, &["--strategy", strategy], &prog, &[]);
                assert!(r.status.success(), "{case}: {:?} {}", r.status, common::text(&r.stderr));
                assert_eq!(
                    common::text(&r.stdout),
                    common::text(&a.stdout),
                    "{case} prints something else under run"
                );
                assert_eq!(common::text(&r.stderr), "", "{case}: run is not silent without -v");
                if name == "small" {
                    continue;
                }
                let big = if name == "usebig" {
                    prog.with_file_name("libbig.so")
                } else {
                    prog.clone()
                };
                // Without page-table reclaim only the drop/evict/refault
                // step differs: make the file route take it (the run above
                // left PMD-size folios).
                let drop_step = *strategy == "file" && keeps_tables(compat);
                if drop_step {
                    small_folios(&big);
                }
                let running = common::run_waiting_with(compat, &["-v", "--strategy", strategy], &prog);
                assert_eq!(running.first_line, common::text(&a.stdout).lines().next().unwrap());
                let (file, anon, _) = running.huge_of(&big);
                let expect = match *strategy {
                    "file" if !congruent(running.pid(), &big) => 0,
                    "file" => {
                        file_route_cases += 1;
                        assert_eq!(anon, 0, "{case}: the file route copied");
                        assert_text_is_the_file(running.pid(), &big, &case);
                        12 * MIB
                    }
                    _ => 12 * MIB,
                };
                assert!(
                    file + anon >= expect,
                    "{case}: only {} KiB of {} huge-backed: {:#?}\n/proc/PID/maps:\n{}",
                    (file + anon) >> 10,
                    big.display(),
                    text_mappings(running.pid()).unwrap(),
                    std::fs::read_to_string(format!("/proc/{}/maps", running.pid())).unwrap_or_default()
                );
                let congruent_file = *strategy == "file" && congruent(running.pid(), &big);
                let err = stop(running);
                if compat.is_some() {
                    for s in FALLBACK_SUMMARY {
                        assert!(err.contains(s), "{case}: the fallback did not run: {err}");
                    }
                }
                if drop_step && congruent_file {
                    assert!(err.contains(REPLACED), "{case}: no window was replaced: {err}");
                }
            }
        }
    }
    if strategies.contains(&"file") {
        // GNU ld's text is congruent in nopie and in libbig.so (its PIE's
        // load base is not 2 MiB-aligned: p_align is 4 KiB).
        assert!(
            file_route_cases >= 2,
            "the file route was checked {file_route_cases} times"
        );
    }
}

#[test]
fn file_strategy_is_zero_copy_and_shared() {
    file_strategy(None);
}

#[test]
fn file_strategy_with_the_old_kernel_fallbacks() {
    file_strategy(Some(FALLBACKS));
}

#[test]
fn file_strategy_without_page_table_reclaim() {
    file_strategy(Some(NO_PT_RECLAIM));
}

fn file_strategy(compat: Option<&str>) {
    // GNU ld non-PIE text is congruent: the file route applies.
    let (_d, prog) = private_copy("bfd", &["nopie"]);
    // In 4 KiB folios, as exec leaves a program: the route drops and refaults.
    small_folios(&prog);
    let running = common::run_waiting_with(compat, &["--strategy", "file", "-v"], &prog);
    let (file, anon, private_anon) = running.huge_of(&prog);
    assert!(file >= 16 * MIB, "FilePmdMapped {} KiB", file >> 10);
    assert_eq!(anon, 0);
    assert_eq!(private_anon, 0, "the file route must add no anonymous memory");
    assert_text_is_the_file(running.pid(), &prog, "file route");
    // A second process maps the same PMD-size page-cache folios without any help.
    let second = Running::start({
        let mut c = Command::new(&prog);
        c.arg("wait").env("HUGETEXT_DISABLE", "1");
        c
    });
    // Fault in its whole text (the fixture only touched what it ran).
    let (f2, _, _) = second.huge_of(&prog);
    assert!(f2 >= 12 * MIB, "a later plain process got {} KiB PMD-mapped", f2 >> 10);
    let err = stop(running);
    let want = common::mib(common::text_window_bytes(&prog));
    assert!(err.contains(&format!("file {want}")), "expected file {want}: {err}");
    if keeps_tables(compat) {
        assert!(err.contains(REPLACED), "{err}");
    }
    stop(second);
}

#[test]
fn copy_strategy_moves_text_and_names_symbols_for_perf() {
    copy_strategy(None);
}

#[test]
fn copy_strategy_with_the_old_kernel_fallbacks() {
    copy_strategy(Some(FALLBACKS));
}

fn copy_strategy(compat: Option<&str>) {
    // lld PIE: not congruent, only `copy` can make it huge.
    let prog = common::fixture("lld", "pie");
    let running = common::run_waiting_with(compat, &["--strategy", "copy"], &prog);
    let (_, anon, _) = running.huge_of(&prog);
    assert!(anon >= 16 * MIB, "AnonHugePages {} KiB", anon >> 10);
    let map = PathBuf::from(format!("/tmp/perf-{}.map", running.pid()));
    let syms = std::fs::read_to_string(&map).unwrap_or_default();
    let _ = std::fs::remove_file(&map);
    let copied: Vec<_> = text_mappings(running.pid())
        .unwrap()
        .into_iter()
        .filter(|m| m.copied)
        .collect();
    // Every function of the fixture that lies in a copy is named there, at
    // its address and with its size (which ones depends on where the loader
    // put the text and on the PMD size: with 32 MiB windows the first few
    // MiB of text stay in the file).
    let inside: Vec<_> = fixture_functions(running.pid(), &prog)
        .into_iter()
        .filter(|(a, n, _)| copied.iter().any(|m| m.start <= *a && a + n <= m.end))
        .collect();
    assert!(
        !inside.is_empty(),
        "no function of the fixture in the copies {copied:#?}"
    );
    for (a, n, name) in &inside {
        let want = format!("{a:x} {n:x} {name}");
        assert!(
            syms.lines().any(|l| l == want),
            "no `{want}` in {}: {syms}",
            map.display()
        );
    }
    // Every moved function's address is inside a copied text mapping (the
    // first line marks the map as the preload's).
    for l in syms.lines().filter(|l| !is_mark(l)) {
        let a = u64::from_str_radix(l.split(' ').next().unwrap(), 16).unwrap();
        assert!(
            copied.iter().any(|m| m.start <= a && a < m.end),
            "{l} outside the copies {copied:#?}"
        );
    }
    stop(running);
}

/// The fixture's functions `f0`, `f1`, … in process `pid`: (runtime address,
/// size, name), from the file's symbol table and the load bias (the address
/// of its mapping at file offset 0, less that segment's `p_vaddr`).
fn fixture_functions(pid: i32, file: &Path) -> Vec<(u64, u64, String)> {
    use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
    let f = file.canonicalize().unwrap();
    let data = std::fs::read(&f).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let first = elf
        .segments()
        .find(|s| s.file_range().0 == 0)
        .expect("no PT_LOAD at file offset 0")
        .address();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let start = maps
        .lines()
        .find_map(|l| {
            let v: Vec<&str> = l.split_whitespace().collect();
            let at_zero = v.len() >= 6 && u64::from_str_radix(v[2], 16) == Ok(0) && Path::new(v[5]) == f;
            at_zero.then(|| u64::from_str_radix(v[0].split('-').next().unwrap(), 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{} at offset 0 not in {maps}", f.display()));
    let bias = start.wrapping_sub(first);
    elf.symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .filter_map(|s| {
            let name = s.name().ok()?;
            let numbered = name.strip_prefix('f').is_some_and(|k| k.parse::<u32>().is_ok());
            numbered.then(|| (s.address().wrapping_add(bias), s.size(), name.to_string()))
        })
        .collect()
}

/// The lines of a perf map: (start, size, name), parsed as perf does
/// (`START SIZE NAME`, hex without prefix).
fn perf_map_entries(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter(|l| !is_mark(l))
        .map(|l| {
            let mut f = l.splitn(3, ' ');
            let (a, n, name) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(n, 16).unwrap(),
                name.to_string(),
            )
        })
        .collect()
}

/// The line that marks a perf map as the preload's (a symbol at address 0).
fn is_mark(line: &str) -> bool {
    line.as_bytes() == hugetext_abi::env::PERF_MAP_MARK.strip_suffix(b"\n").unwrap()
}

/// The names perf gives `addr`: those of the entries containing it.
fn perf_names(entries: &[(u64, u64, String)], addr: u64) -> Vec<&str> {
    entries
        .iter()
        .filter(|(a, n, _)| *a <= addr && addr < a + n)
        .map(|(_, _, name)| name.as_str())
        .collect()
}

/// tests/c/perfnames.c, built in a scratch directory.
fn perfnames() -> (tempfile::TempDir, PathBuf) {
    let dir = common::scratch();
    let exe = dir.path().join("perfnames");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/perfnames.c");
    let st = Command::new("gcc")
        .args(["-O1", "-fno-toplevel-reorder", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    (dir, exe)
}

#[test]
fn perf_map_names_every_copied_byte() {
    // tests/c/perfnames.c: a C function straddling the start of the first
    // copied window, an assembly function without .size over several
    // windows, and a plain label (STT_NOTYPE) after it.
    let (dir, exe) = perfnames();
    let running = common::run_waiting(&["--strategy", "copy"], &exe);
    let addr = |k: &str| {
        let v = running
            .first_line
            .split(' ')
            .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix("=0x")))
            .unwrap_or_else(|| panic!("{k} in {}", running.first_line));
        u64::from_str_radix(v, 16).unwrap()
    };
    let (straddle, bigasm, label, end) = (addr("straddle"), addr("bigasm"), addr("asm_label"), addr("asm_end"));
    let map = PathBuf::from(format!("/tmp/perf-{}.map", running.pid()));
    let text = std::fs::read_to_string(&map).unwrap_or_default();
    assert!(text.ends_with('\n'), "a line is cut: {text:?}");
    let entries = perf_map_entries(&text);
    let copied: Vec<(u64, u64)> = text_mappings(running.pid())
        .unwrap()
        .into_iter()
        .filter(|m| m.copied)
        .map(|m| (m.start, m.end))
        .collect();
    assert!(!copied.is_empty(), "nothing copied");
    // The C function's body is 3 MiB of nops after its first instruction.
    let funcs = [
        ("straddle", straddle, straddle + 3 * MIB),
        ("bigasm", bigasm, label),
        ("asm_label", label, end),
    ];
    for (name, lo, hi) in funcs {
        let mut seen = 0;
        for &(cs, ce) in &copied {
            let (a, z) = (lo.max(cs), hi.min(ce));
            if a >= z {
                continue;
            }
            seen += z - a;
            // Samples: every 4 KiB, and the first and last byte.
            for p in (a..z).step_by(4096).chain([z - 1]) {
                let names = perf_names(&entries, p);
                assert!(
                    !names.is_empty() && names.iter().all(|n| *n == name),
                    "{p:#x} ({name}) resolves to {names:?}; map:\n{text}"
                );
            }
            // Every byte: the entries named `name` cover [a, z) without a gap.
            let mut mine: Vec<_> = entries
                .iter()
                .filter(|e| e.2 == name)
                .map(|e| (e.0, e.0 + e.1))
                .collect();
            mine.sort();
            let mut at = a;
            for (s, e) in mine {
                if s <= at && at < e {
                    at = e;
                }
            }
            assert!(
                at >= z,
                "{name}: {at:#x}..{z:#x} of the copy is not named; map:\n{text}"
            );
        }
        assert!(seen > 0, "{name} ({lo:#x}..{hi:#x}) not in the copies {copied:x?}");
    }
    // Nothing outside the copies.
    for (a, n, name) in &entries {
        assert!(
            copied.iter().any(|&(cs, ce)| cs <= *a && a + n <= ce),
            "{a:x} {n:x} {name} outside the copies {copied:x?}"
        );
    }
    stop(running);
    perf_names_the_copy(&exe, dir.path(), Ns::Host);
}

/// perf itself, where it can sample here (`perf record -e cpu-clock`, no
/// PMU needed): attached to a running copy, every sample in the three
/// functions gets its name, those in the copy from the perf map.
/// Where `perf_names_the_copy` runs the program.
#[derive(Clone, Copy, PartialEq)]
enum Ns {
    /// Here.
    Host,
    /// Pid 1 of a new pid namespace (`unshare --pid --fork`), sharing /proc,
    /// the mount namespace and /tmp with the host, as chromium's sandboxed
    /// processes do.
    Pid,
    /// Pid 1 of a new pid namespace with its own /proc, hence its own mount
    /// namespace (`unshare --pid --fork --mount-proc`), and its own /tmp
    /// (the scratch directory's `tmp`, bound over it).
    PidAndProc,
}

/// In `ns`, perf on the host must still find the map. Returns the
/// program's stderr (`-v`).
fn perf_names_the_copy(exe: &Path, dir: &Path, ns: Ns) -> String {
    use std::io::{BufRead, BufReader, Read};
    if Command::new("perf").arg("--version").output().is_err() {
        eprintln!("perf not installed: resolved as perf does only");
        return String::new();
    }
    let mut cmd = match ns {
        Ns::Host => Command::new(common::bin()),
        _ => {
            let mut c = Command::new("unshare");
            c.args(["--pid", "--fork", "--kill-child"]);
            if ns == Ns::PidAndProc {
                let tmp = dir.join("tmp");
                std::fs::create_dir(&tmp).unwrap();
                common::prepare_private_tmp(&tmp);
                c.arg("--mount-proc").args(common::private_tmp_args(&tmp));
            }
            c.arg(common::bin());
            c
        }
    };
    let mut child = cmd
        .args(["run", "-v", "--strategy", "copy", "--"])
        .arg(exe)
        .arg("spin")
        .env_remove("HUGETEXT_STRATEGY")
        .env_remove("HUGETEXT_VERBOSE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The program's pid as perf, on the host, sees it.
    let pid: u32 = match ns {
        Ns::Host => child.id(),
        _ => {
            let u = child.id();
            let kids = std::fs::read_to_string(format!("/proc/{u}/task/{u}/children")).unwrap();
            kids.split_whitespace()
                .next()
                .expect("unshare's child")
                .parse()
                .unwrap()
        }
    };
    // perf names the map after the pid it sees; for a process in another
    // mount namespace it reads, under that name, the file the process
    // calls /tmp/perf-NSPID.map inside its namespace (here pid 1, in the
    // private /tmp).
    let map = format!("/tmp/perf-{pid}.map");
    let inside = dir.join("tmp/perf-1.map");
    let addr = |k: &str| {
        let v = first
            .split(' ')
            .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix("=0x")))
            .unwrap_or_else(|| panic!("{k} in {first}"));
        u64::from_str_radix(v, 16).unwrap()
    };
    let (straddle, bigasm, label, end) = (addr("straddle"), addr("bigasm"), addr("asm_label"), addr("asm_end"));
    let data = dir.join("perf.data");
    let funcs = [
        ("straddle", straddle, straddle + 3 * MIB),
        ("bigasm", bigasm, label),
        ("asm_label", label, end),
    ];
    // Up to three recordings: on a loaded machine perf script has been
    // seen to leave a sample of the copy [unknown] once in a while (the
    // same run then names every sample of the next recording).
    let mut verdict = Ok(());
    let mut recorded = true;
    for _ in 0..3 {
        let rec = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-p", &pid.to_string(), "-o"])
            .arg(&data)
            .args(["--", "sleep", "1"])
            .output()
            .unwrap();
        let script = Command::new("perf")
            .args(["script", "-F", "ip,sym,dso", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        if !rec.status.success() || !script.status.success() {
            eprintln!("perf cannot record here: {}", common::text(&rec.stderr));
            recorded = false;
            break;
        }
        verdict = perf_named(&common::text(&script.stdout), &funcs, &map);
        if verdict.is_ok() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let _ = std::fs::remove_file(&map);
    if ns == Ns::PidAndProc {
        assert!(inside.exists(), "no /tmp/perf-1.map inside the namespace: {err}");
    }
    if recorded {
        verdict.unwrap_or_else(|e| panic!("{e}"));
    }
    err
}

/// Every sample `perf script` printed inside one of `funcs` is named after
/// it, and some came from the perf map `map`.
fn perf_named(out: &str, funcs: &[(&str, u64, u64)], map: &str) -> Result<(), String> {
    let (mut inside, mut from_map) = (0, 0);
    for l in out.lines() {
        let v: Vec<&str> = l.split_whitespace().collect();
        let Some(Ok(ip)) = v.first().map(|f| u64::from_str_radix(f, 16)) else {
            continue;
        };
        let Some((name, _, _)) = funcs.iter().find(|(_, lo, hi)| *lo <= ip && ip < *hi) else {
            continue;
        };
        inside += 1;
        if !(v.len() >= 3 && v[1] == *name) {
            return Err(format!("perf names {ip:#x} ({name}) {l:?}"));
        }
        if l.contains(map) {
            from_map += 1;
        }
    }
    match inside > 0 && from_map > 0 {
        true => Ok(()),
        false => Err(format!("no sample in the copy: {out}")),
    }
}

/// A process in a pid namespace that shares the host's /tmp and /proc (as
/// chromium's sandboxed zygote, pid 1 there): its map is named after the
/// pid perf sees from the host, never `/tmp/perf-1.map` (which every other
/// namespace's pid 1 would write too), and perf on the host names its
/// copied code. `-v` shows both pids.
#[test]
fn perf_on_the_host_names_copied_code_of_a_process_in_a_pid_namespace() {
    let (dir, exe) = perfnames();
    let state = |p: &str| std::fs::symlink_metadata(p).ok().map(|m| (m.ino(), m.len(), m.mtime()));
    let before = state("/tmp/perf-1.map");
    let err = perf_names_the_copy(&exe, dir.path(), Ns::Pid);
    assert_eq!(state("/tmp/perf-1.map"), before, "/tmp/perf-1.map was written");
    assert!(
        err.lines()
            .any(|l| l.contains("pid 1 (pid ") && l.contains(" outside its pid namespace)")),
        "{err}"
    );
}

/// A process in a pid namespace with its own /proc (and so its own mount
/// namespace) cannot see its outer pid: its map is named after the pid it
/// sees, which is the file perf on the host reads inside its mount
/// namespace.
#[test]
fn perf_on_the_host_names_copied_code_of_a_process_with_its_own_proc() {
    let (dir, exe) = perfnames();
    let err = perf_names_the_copy(&exe, dir.path(), Ns::PidAndProc);
    if !err.is_empty() {
        assert!(err.lines().any(|l| l.starts_with("hugetext: pid 1: ")), "{err}");
    }
}

/// The `shmem` route maps the text from the store's copy, a whole copy of
/// the file: perf, attached to the running program, reads the symbols
/// from the copy's path and names every function (no perf map needed).
#[test]
fn perf_names_functions_of_text_mapped_from_the_store() {
    use std::io::{BufRead, BufReader};
    if Command::new("perf").arg("--version").output().is_err() {
        common::skip_line("skipped: perf not installed (scripts/install-deps.sh)");
        return;
    }
    // tests/c/perfnames.c, laid out for 2 MiB pages so the store takes it.
    let dir = common::scratch();
    let exe = dir.path().join("perfnames");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/perfnames.c");
    let st = Command::new("gcc")
        .args(["-O1", "-fno-toplevel-reorder", "-Wl,-z,max-page-size=0x200000", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    let store = common::TextStore::new();
    store.add(&exe);
    let mut child = Command::new(common::bin())
        .args(["run", "-v", "--strategy", "shmem", "--store"])
        .arg(&store.dir)
        .arg("--")
        .arg(&exe)
        .arg("spin")
        .env_remove("HUGETEXT_STRATEGY")
        .env_remove("HUGETEXT_VERBOSE")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let (pmd, _, _) = common::store_text(pid as i32, &store.dir);
    let addr = |k: &str| {
        let v = first
            .split(' ')
            .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix("=0x")))
            .unwrap_or_else(|| panic!("{k} in {first}"));
        u64::from_str_radix(v, 16).unwrap()
    };
    let (straddle, bigasm, label, end) = (addr("straddle"), addr("bigasm"), addr("asm_label"), addr("asm_end"));
    let funcs = [
        ("straddle", straddle, straddle + 3 * MIB),
        ("bigasm", bigasm, label),
        ("asm_label", label, end),
    ];
    let data = dir.path().join("perf.data");
    let prefix = format!("{}/", store.dir.display());
    let mut verdict = Err("not recorded".to_string());
    for _ in 0..3 {
        let rec = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-p", &pid.to_string(), "-o"])
            .arg(&data)
            .args(["--", "sleep", "1"])
            .output()
            .unwrap();
        let script = Command::new("perf")
            .args(["script", "-F", "ip,sym,dso", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        if !rec.status.success() || !script.status.success() {
            common::skip_line(&format!(
                "skipped: perf cannot record here: {}",
                common::text(&rec.stderr)
            ));
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        verdict = perf_named(&common::text(&script.stdout), &funcs, &prefix);
        if verdict.is_ok() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(pmd > 0, "no text mapped from the store");
    verdict.unwrap_or_else(|e| panic!("{e}"));
}

/// The copy route's part of `-v`'s summary: "copy 78.0 MiB in 22.51 ms
/// (0.289 ms/MiB; source: ...)".
fn copy_time(err: &str) -> &str {
    let summary = err.lines().find(|l| l.contains("huge-backed")).expect(err);
    let times = summary.split("; time per route: ").nth(1).expect(summary);
    // `copy` comes last.
    &times[times.find("copy ").expect(summary)..]
}

#[test]
fn copy_fills_from_the_page_cache_and_says_how_long_it_took() {
    // lld and mold PIEs are not congruent: their text maps the page cache in
    // 4 KiB pages only, so the copy never reads the text itself. From 4 KiB
    // folios it reads the file (pread); from 2 MiB folios (after `warm`) it
    // copies from a congruent mapping of them; bfd's congruent text the same.
    for (linker, name) in [("lld", "pie"), ("mold", "pie"), ("bfd", "nopie")] {
        let (_d, prog) = private_copy(linker, &[name]);
        let expected = common::text(&alone(&prog).stdout);
        small_folios(&prog);
        let r = run(&["--strategy", "copy", "-v"], &prog, &[]);
        assert!(r.status.success());
        assert_eq!(common::text(&r.stdout), expected);
        let err = common::text(&r.stderr);
        let copy = copy_time(&err);
        assert!(copy.contains(" MiB in ") && copy.contains(" ms/MiB"), "{copy}");
        assert!(copy.contains(" read with pread"), "{linker}: {copy}");
        assert!(!copy.contains(" page-cache folios"), "{linker}: {copy}");

        let f = std::fs::File::open(&prog).unwrap();
        hugetext::pagecache::evict(&f, 0..0).unwrap();
        hugetext::pagecache::fill_huge(&f, 0..f.metadata().unwrap().len()).unwrap();
        let folios = hugetext::folio::scan_file(&prog, None).unwrap();
        let r = run(&["--strategy", "copy", "-v"], &prog, &[]);
        assert!(r.status.success());
        assert_eq!(common::text(&r.stdout), expected);
        let err = common::text(&r.stderr);
        let copy = copy_time(&err);
        if folios.unit_windows.len() < 4 || err.contains("verified with /proc/self/smaps") {
            // No large folios in this filesystem's page cache (ext4 before
            // 6.16), or no PAGEMAP_SCAN to tell which blocks a PMD maps
            // (before 6.7): read, as above.
            assert!(copy.contains(" read with pread"), "{linker}: {copy}");
            continue;
        }
        let pmd_w = hugetext::units::human(common::pmd());
        assert!(
            copy.contains(&format!("copied from {pmd_w} page-cache folios")),
            "{linker}: {copy}"
        );
    }
}

#[test]
fn file_strategy_on_non_congruent_text_explains() {
    // mold and lld leave text off the 2 MiB grid on x86-64; where a layout
    // lands congruent anyway (mold's aarch64 PIE with 64 KiB pages and the
    // 2 MiB contpte unit), the file route must then have worked instead.
    let mut explained = 0;
    for linker in ["mold", "lld"] {
        let prog = common::fixture(linker, "pie");
        let r = run(&["--strategy", "file", "-v"], &prog, &[]);
        assert!(r.status.success());
        assert_eq!(common::text(&r.stdout), common::text(&alone(&prog).stdout));
        let err = common::text(&r.stderr);
        if err.contains("not congruent") {
            explained += 1;
        } else if err.contains(", file 0.0 MiB,") {
            // Congruent by chance (a 64 KiB-aligned base that fell on the
            // 2 MiB grid): the file route must have worked, unless this
            // filesystem gives no 2 MiB folios (6.12 with 64 KiB pages),
            // which the route says.
            assert!(
                !common::fs_gives_pmd_folios(prog.parent().unwrap()) && err.contains("some windows stayed small"),
                "{linker}: congruent, yet the file route did nothing: {err}"
            );
        }
    }
    assert!(explained >= 1, "no fixture was found not congruent");
}

#[test]
fn collapse_strategy_works_or_says_why() {
    let (_d, prog) = private_copy("bfd", &["nopie"]);
    let running = common::run_waiting(&["--strategy", "collapse", "-v"], &prog);
    let (file, _, _) = running.huge_of(&prog);
    let err = stop(running);
    assert!(
        file >= 12 * MIB
            || err.contains("CONFIG_READ_ONLY_THP_FOR_FS")
            // 64 KiB pages: collapse cannot build the 2 MiB unit.
            || (common::contpte_unit() && err.contains("MADV_COLLAPSE builds only PMD-size folios")),
        "{err}"
    );
}

/// MiB per route in the summary line of the preload's `-v` output:
/// (file, collapse).
fn route_mib(err: &str) -> (f64, f64) {
    let line = err
        .lines()
        .find(|l| l.contains("text in whole") && l.contains("(already "))
        .unwrap_or_else(|| panic!("no summary line: {err}"));
    let mib = |route: &str| -> f64 {
        let at = line.find(&format!(", {route} ")).unwrap_or_else(|| panic!("{line}")) + route.len() + 3;
        line[at..].split(' ').next().unwrap().parse().unwrap()
    };
    (mib("file"), mib("collapse"))
}

/// A private copy of a congruent fixture whose whole text is cached in small
/// folios (read page by page through an executable mapping, as exec faults
/// read it on x86-64), so that no window is PMD-mapped by the cheap first
/// step (mapping 2 MiB folios already cached, or reading uncached windows
/// through MADV_HUGEPAGE) and every window takes a zero-copy route that
/// must deal with small folios: evict + refill or collapse in place.
fn small_cached_copy() -> (tempfile::TempDir, PathBuf) {
    let (d, prog) = private_copy("bfd", &["nopie"]);
    common::read_small(&prog);
    (d, prog)
}

#[test]
fn auto_tries_the_zero_copy_route_measured_cheaper_first() {
    let (_d, prog) = small_cached_copy();
    let collapses = hugetext::pagecache::collapse_supported(prog.parent().unwrap())
        .unwrap()
        .is_available();
    // What `run` measured decides the order, and the preload follows it.
    let r = run(&["-v"], &prog, &[]);
    assert!(r.status.success());
    let err = common::text(&r.stderr);
    let measured = err
        .lines()
        .find(|l| l.contains("zero-copy routes on ") && l.contains("(measured this boot)"))
        .unwrap_or_else(|| panic!("run -v does not give the routes' costs: {err}"));
    let collapse_first = measured.ends_with("collapse in place is tried first");
    assert!(collapses || !collapse_first, "{measured}");
    assert_eq!(err.contains("MADV_COLLAPSE in place first"), collapse_first, "{err}");
    let (file, collapse) = route_mib(&err);
    assert!(file + collapse >= 12.0, "{err}");
    if collapse_first {
        assert_eq!(file, 0.0, "collapse came first and made every window huge: {err}");
    } else {
        assert_eq!(
            collapse, 0.0,
            "evict + refill came first and made every window huge: {err}"
        );
    }
    // HUGETEXT_ORDER=collapse straight to the preload: collapse in place
    // where the kernel collapses file text, else evict + refill after it.
    let (_d, prog) = small_cached_copy();
    let out = Command::new(&prog)
        .env("LD_PRELOAD", common::preload())
        .env("HUGETEXT_ORDER", "collapse")
        .env("HUGETEXT_VERBOSE", "1")
        .env("HUGETEXT_PERF_MAP", "0")
        .env_remove("HUGETEXT_STRATEGY")
        .output()
        .unwrap();
    let err = common::text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("MADV_COLLAPSE in place first"), "{err}");
    let (file, collapse) = route_mib(&err);
    if collapses {
        assert!(collapse >= 12.0 && file == 0.0, "{err}");
    } else {
        assert!(file >= 12.0 && collapse == 0.0, "{err}");
        assert!(err.contains("MADV_COLLAPSE cannot collapse file text"), "{err}");
    }
}

#[test]
fn the_machine_record_has_the_summary_numbers_exactly() {
    let (_d, prog) = small_cached_copy();
    let mut cmd = Command::new(common::bin());
    cmd.args(["run", "-v", "--no-dlopen", "--"])
        .arg(&prog)
        .env("HUGETEXT_REPORT", "json")
        .env_remove("HUGETEXT_STRATEGY");
    let out = common::output_without_perf_map(&mut cmd);
    assert!(out.status.success());
    let err = common::text(&out.stderr);
    let r = common::records(&err);
    assert_eq!(r.len(), 1, "one pass, one record: {err}");
    let r = &r[0];
    let mut want = vec!["v"];
    want.extend(hugetext_abi::report::FIELDS);
    assert_eq!(r.as_object().unwrap().len(), want.len(), "{r}");
    let line = err
        .lines()
        .find(|l| l.starts_with(hugetext_abi::report::PREFIX))
        .unwrap();
    let at: Vec<usize> = want
        .iter()
        .map(|k| line.find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("{k}: {line}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "every key, in order: {line}");
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    assert_eq!(n("v"), hugetext_abi::report::VERSION);
    assert_eq!(
        n("huge"),
        n("already") + n("file") + n("collapse") + n("copy") + n("shmem")
    );
    assert_eq!(n("pmd"), common::pmd());
    assert_eq!(n("unit"), common::unit());
    assert_eq!(n("contpte"), common::contpte_unit() as u64);
    assert!(n("windows") >= 12 * MIB && n("huge") == n("windows"), "{r}");
    assert_eq!(n("late"), 0);
    // The human summary says the same, rounded to tenths of MiB.
    let (file, collapse) = route_mib(&err);
    let mib = |b: u64| (b as f64 / MIB as f64 * 10.0).round() / 10.0;
    assert_eq!((mib(n("file")), mib(n("collapse"))), (file, collapse), "{err}");
    assert!(n("ns") >= n("ns_file") + n("ns_collapse") + n("ns_copy"), "{r}");
    // Not asked for: no record; asked for without -v: the record only.
    let plain = run(&[], &prog, &[]);
    assert!(common::records(&common::text(&plain.stderr)).is_empty());
    let mut cmd = Command::new(common::bin());
    cmd.args(["run", "--no-dlopen", "--"])
        .arg(&prog)
        .env("HUGETEXT_REPORT", "json")
        .env_remove("HUGETEXT_STRATEGY")
        .env_remove("HUGETEXT_VERBOSE");
    let quiet = common::text(&common::output_without_perf_map(&mut cmd).stderr);
    assert_eq!(common::records(&quiet).len(), 1, "{quiet}");
    assert!(!quiet.contains("huge-backed"), "{quiet}");
}

/// Without PFN access the copy route still proves its copies before they
/// replace text: with `PAGEMAP_SCAN` where the unit is the PMD, and where it
/// is the 2 MiB contpte block (arm64, 64 KiB pages) by one write per block
/// of the fresh copy and `mincore`, which `-v` names.
#[test]
fn copy_route_without_privilege_proves_its_copies() {
    let prog = common::fixture("lld", "pie");
    let mut cmd = common::as_nobody();
    cmd.arg(common::bin())
        .args(["run", "-v", "--strategy", "copy", "--no-dlopen", "--"])
        .arg(&prog)
        .env("HUGETEXT_REPORT", "json");
    let out = common::output_without_perf_map(&mut cmd);
    let err = common::text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let r = common::records(&err);
    assert_eq!(r.len(), 1, "{err}");
    let n = |k: &str| r[0][k].as_u64().unwrap_or_else(|| panic!("{k}: {err}"));
    assert!(n("windows") >= 12 * MIB, "{err}");
    assert_eq!(n("copy"), n("windows"), "every window copied and proved: {err}");
    if common::contpte_unit() {
        assert!(err.contains("no PFN access"), "{err}");
        assert!(
            err.contains("copies verified by mincore as they were allocated"),
            "{err}"
        );
    }
}

#[test]
fn gdb_mode_never_copies() {
    let prog = common::fixture("lld", "nopie");
    let running = common::run_waiting(&["--gdb", "-v"], &prog);
    assert!(
        text_mappings(running.pid())
            .unwrap()
            .iter()
            .all(|m| !m.copied && m.anonymous == 0),
        "{:#?}",
        text_mappings(running.pid()).unwrap()
    );
    let err = stop(running);
    assert!(err.contains("gdb-friendly"), "{err}");
}

#[test]
fn include_and_exclude_choose_mappings() {
    let (_d, prog) = private_copy("lld", &["usebig", "libbig.so"]);
    let lib = prog.with_file_name("libbig.so");
    let running = common::run_waiting(&["--exclude", "libbig\\.so$"], &prog);
    let (f, a, _) = running.huge_of(&lib);
    assert_eq!(f + a, 0, "excluded library was remapped");
    stop(running);
    let running = common::run_waiting(&["--include", "/lib[a-z]+\\.so$"], &prog);
    let (f, a, _) = running.huge_of(&lib);
    assert!(f + a >= 12 * MIB);
    stop(running);
}

#[test]
fn exit_status_and_errors() {
    let h = |args: &[&str]| {
        let o = common::hugetext(args);
        (o.status.code(), common::text(&o.stderr))
    };
    let (c, e) = h(&["run", "--", "no-such-program-hugetext"]);
    assert_eq!(c, Some(127));
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("command not found"), "{e}");
    let (c, _) = h(&["run", "--", "/no/such/dir/prog"]);
    assert_eq!(c, Some(127));
    let d = common::scratch();
    let plain = d.path().join("not-executable");
    std::fs::write(&plain, "echo hi\n").unwrap();
    let (c, e) = h(&["run", "--", plain.to_str().unwrap()]);
    assert_eq!(c, Some(126), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let (c, _) = h(&["run", "--", "/"]);
    assert_eq!(c, Some(126));
    let (c, _) = h(&["run", "--", "sh", "-c", "exit 7"]);
    assert_eq!(c, Some(7));
    let (c, e) = h(&["run", "--include", "(x|y)", "--", "true"]);
    assert_eq!(c, Some(2));
    assert!(e.contains("group"), "{e}");
    let o = Command::new(common::bin())
        .args(["run", "--", "true"])
        .env("HUGETEXT_PRELOAD", "/no/libhugetext.so")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(common::text(&o.stderr).contains("HUGETEXT_PRELOAD"));
    // Same pid: the program is exec'ed, not spawned.
    let o = Command::new(common::bin())
        .args(["run", "--", "sh", "-c", "echo $$"])
        .output()
        .unwrap();
    assert!(o.status.success());
}

#[test]
fn a_preload_that_is_not_a_shared_object_is_refused_before_exec() {
    let d = common::scratch();
    let text = d.path().join("libhugetext.so");
    std::fs::write(&text, "not a library\n").unwrap();
    let exe = common::fixture("lld", "small");
    for (preload, why) in [
        (text.as_path(), "not an ELF file"),
        (exe.as_path(), "not a shared object"),
    ] {
        let o = Command::new(common::bin())
            .args(["run", "--preload"])
            .arg(preload)
            .args(["--", "sh", "-c", "echo ran"])
            .output()
            .unwrap();
        let err = common::text(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("hugetext: ") && err.contains(why), "{err}");
        assert!(o.stdout.is_empty(), "the program ran");
    }
    // Something that is there but no file: said so, not "no such file".
    for (preload, why) in [
        ("/dev/zero", "/dev/zero: a character device, not a shared object"),
        ("/", "/: a directory, not a shared object"),
    ] {
        let o = Command::new(common::bin())
            .args(["run", "--", "sh", "-c", "echo ran"])
            .env("HUGETEXT_PRELOAD", preload)
            .output()
            .unwrap();
        let err = common::text(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(why) && !err.contains("no such file"), "{err}");
        assert!(o.stdout.is_empty(), "the program ran");
    }
}

#[test]
fn children_do_not_inherit_the_preload_unless_asked() {
    // A program with text that runs a shell (a shell run directly is a
    // wrapper: the preload stays for what it execs).
    let spawn = common::cprogs().join("spawn");
    let echo = ["sh", "-c", "echo \"[$LD_PRELOAD]\""];
    let r = run(&[], &spawn, &echo);
    assert_eq!(common::text(&r.stdout), "[]\n");
    let r = run(&["--inherit"], &spawn, &echo);
    assert!(
        common::text(&r.stdout).contains("libhugetext.so"),
        "{}",
        common::text(&r.stdout)
    );
    // A preload the user had stays.
    let o = Command::new(common::bin())
        .arg("run")
        .arg("--")
        .arg(&spawn)
        .args(echo)
        .env("LD_PRELOAD", "libm.so.6")
        .output()
        .unwrap();
    assert_eq!(common::text(&o.stdout), "[libm.so.6]\n");
}

/// A program whose text is all in a library it loads after start looks like
/// a wrapper at start (the preload stays for what it execs); once its late
/// pass remaps that text it is the program, and the children it starts from
/// then on see the environment as it was without hugetext.
#[test]
fn a_program_whose_text_is_dlopened_starts_its_children_plain() {
    let dlspawn = common::cprogs().join("dlspawn");
    let lib = common::fixture("lld", "libbig.so");
    let show = "echo \"[${LD_PRELOAD-unset}][${LD_AUDIT-unset}][${GLIBC_TUNABLES-unset}][${HUGETEXT_VIA-unset}]\"";
    let args = [lib.to_str().unwrap(), "sh", "-c", show];
    let r = run(&["-v"], &dlspawn, &args);
    let err = common::text(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(
        err.contains("loaded after start (dlopen): "),
        "the library was remapped: {err}"
    );
    assert!(err.contains("not a wrapper after all"), "{err}");
    assert_eq!(common::text(&r.stdout), "[unset][unset][unset][unset]\n", "{err}");
    // --inherit keeps the preload for every child.
    let r = run(&["--inherit"], &dlspawn, &args);
    assert!(
        common::text(&r.stdout).contains("libhugetext.so"),
        "{}",
        common::text(&r.stdout)
    );
}

/// The environment of a grandchild of `spawn sh -c 'cat /proc/self/environ;
/// true'` (the program runs a shell, which forks `cat`), started with
/// `hugetext run ARGS` (None: without hugetext) and `GLIBC_TUNABLES` set to
/// `tunables` (None: unset). Sorted, without the `HUGETEXT_*` settings
/// `run` passes to the program.
fn grandchild_environ(run_args: Option<&[&str]>, tunables: Option<&str>) -> Vec<String> {
    let spawn = common::cprogs().join("spawn");
    let mut cmd = match run_args {
        Some(a) => {
            common::preload();
            let mut c = Command::new(common::bin());
            c.arg("run").args(a).arg("--").arg(&spawn);
            c
        }
        None => Command::new(&spawn),
    };
    cmd.args(["sh", "-c", "cat /proc/self/environ; true"]);
    for v in ["LD_PRELOAD", "LD_AUDIT", "GLIBC_TUNABLES"] {
        cmd.env_remove(v);
    }
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("HUGETEXT_") {
            cmd.env_remove(k);
        }
    }
    if let Some(t) = tunables {
        cmd.env("GLIBC_TUNABLES", t);
    }
    let o = common::output_without_perf_map(&mut cmd);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    let mut v: Vec<String> = o
        .stdout
        .split(|&c| c == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .filter(|e| !e.is_empty() && !e.starts_with("HUGETEXT_"))
        .collect();
    v.sort();
    v
}

#[test]
fn grandchildren_see_the_environment_they_would_see_without_hugetext() {
    for tunables in [None, Some(""), Some("glibc.malloc.arena_max=2")] {
        let plain = grandchild_environ(None, tunables);
        let with = grandchild_environ(Some(&[]), tunables);
        assert_eq!(with, plain, "GLIBC_TUNABLES={tunables:?}");
        // `--inherit` keeps the preload and its loader settings: the
        // comparison sees them.
        let inherit = grandchild_environ(Some(&["--inherit"]), tunables);
        assert!(
            // (glibc cuts its copy of the value at each `:` in place, so
            // /proc/PID/environ may show the tunable as an entry of its own.)
            inherit.iter().any(|e| e.contains("optional_static_tls")),
            "{inherit:?}"
        );
    }
}

fn cprog(args: &[&str], name: &str) -> Output {
    cprog_command(name).args(args).output().unwrap()
}

/// The C API program `name`, verbose, its preload built.
fn cprog_command(name: &str) -> Command {
    common::preload();
    let mut c = Command::new(common::cprogs().join(name));
    c.env("HUGETEXT_VERBOSE", "1");
    c
}

/// Drop a file's clean, unmapped page cache.
fn evict(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: plain syscall on an open fd.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
}

#[test]
fn c_api_with_threads_running_the_text_20_of_20() {
    c_api_with_threads(None, 20);
}

#[test]
fn c_api_with_threads_and_the_old_kernel_fallbacks_10_of_10() {
    c_api_with_threads(Some(FALLBACKS), 10);
}

/// Windows replaced with `mmap(MAP_FIXED)` under the threads, verified with
/// `PAGEMAP_SCAN` (Linux 6.7 to 6.13).
#[test]
fn c_api_with_threads_without_page_table_reclaim_5_of_5() {
    c_api_with_threads(Some(NO_PT_RECLAIM), 5);
}

fn c_api_with_threads(compat: Option<&str>, runs: usize) {
    // lld's libbig.so goes through `copy` (mremap under running threads).
    // bfd's goes through `file` (PTEs dropped and refaulted under running
    // threads): a private copy of it, evicted before every run so that each
    // run starts from the small folios the loader's exec faults create.
    let (_d, lib) = private_copy("bfd", &["libbig.so"]);
    // aarch64: with its 64 KiB p_align the loader would place it off the
    // PMD grid (only `copy` could then help): aligned as a user would.
    common::align_if_loader_misaligns(&lib);
    let lib = lib.canonicalize().unwrap();
    // Without large folios (ext4 before 6.16) the file route cannot win:
    // every run must copy and say why.
    let large = common::fs_gives_pmd_folios(lib.parent().unwrap());
    // Readahead gives no PMD folios, but the kernel collapses file text in
    // place (7.x with 16 KiB pages: readahead stops at 2 MiB folios): under
    // THP always khugepaged builds PMD folios of the library at its own
    // pace, so what the file route finds from run to run is not fixed; the
    // runs must still succeed with the text huge.
    let in_place = hugetext::pagecache::collapse_supported(lib.parent().unwrap())
        .unwrap()
        .is_available();
    let collapse_only = !large && in_place;
    let mut file_route_runs = 0;
    // What each bfd run's first call made of the library, for the message.
    let mut outcomes = Vec::new();
    for linker in ["lld", "bfd"] {
        for i in 0..runs {
            let mut cmd = Command::new(common::cprogs().join(format!("remap_threads_{linker}")));
            cmd.args(["threads", "2"]).env("HUGETEXT_VERBOSE", "1");
            common::with_compat(&mut cmd, compat);
            if linker == "bfd" {
                evict(&lib);
                cmd.env("LD_LIBRARY_PATH", lib.parent().unwrap());
            }
            let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            let pid = child.id();
            let o = child.wait_with_output().unwrap();
            common::remove_perf_map(pid);
            let (out, err) = (common::text(&o.stdout), common::text(&o.stderr));
            assert!(
                o.status.success() && out.ends_with("clean\n"),
                "{linker} run {i}: {:?}\n{out}\n{err}",
                o.status
            );
            if compat.is_some_and(|c| c.contains("no-pagemap-scan")) {
                for s in FALLBACK_SUMMARY {
                    assert!(err.contains(s), "{linker} run {i}: the fallback did not run: {err}");
                }
            }
            let first: i64 = out
                .lines()
                .next()
                .unwrap()
                .trim_start_matches("remapped=")
                .parse()
                .unwrap();
            assert!(first >= 12 * MIB as i64, "{linker} run {i}: remapped={first}\n{err}");
            if linker == "bfd" {
                // The first call's line for the library.
                let first_call = err
                    .lines()
                    .find(|l| l.contains(&lib.display().to_string()) && l.contains(" huge ("))
                    .unwrap_or_else(|| panic!("{err}"));
                outcomes.push(format!("run {i}: {}", first_call.trim()));
                if collapse_only {
                    continue;
                }
                if !large {
                    // The threads may keep the pages mapped, so the preload
                    // cannot always tell which of the two reasons applies;
                    // it must give one.
                    assert!(first_call.contains("file 0.0 MiB"), "{err}");
                    assert!(
                        err.contains("file route: evicted and read back through MADV_HUGEPAGE, the page cache stayed in small folios")
                            || err.contains("file route: some windows stayed small")
                            // Kernels that place file mappings anywhere (before
                            // thp_get_unmapped_area for files, e.g. 5.10): the
                            // library lands off congruence, the file route
                            // cannot apply, and the line says so.
                            || first_call.contains("; not congruent: "),
                        "run {i}: no word on the file route: {err}"
                    );
                } else if !first_call.contains("file 0.0 MiB") {
                    file_route_runs += 1;
                    // Where the kernel collapses file text in place,
                    // khugepaged (THP always) may collapse a window and
                    // retract this process's page table first: the refault
                    // then maps a PMD with no replacement (7.x arm64 once:
                    // already 34, file 12, collapse 24 MiB, none replaced).
                    // (A contpte unit, 64 KiB pages, maps with PTEs
                    // whether or not the table stayed: nothing to replace.)
                    if keeps_tables(compat) && !in_place && !common::contpte_unit() {
                        assert!(err.contains(REPLACED), "run {i}: no window was replaced: {err}");
                    }
                } else {
                    // The drop/evict/refault still ran under the threads;
                    // they faulted small pages back in first (or, on a
                    // loaded machine with fragmented memory, the refill
                    // found no free PMD-size block), so `auto` fell back
                    // to copying, and said why.
                    assert!(
                        err.contains("file route: some windows stayed small")
                            || err.contains("file route: evicted and read back through MADV_HUGEPAGE, the page cache stayed in small folios"),
                        "run {i}: no word on the file route: {err}"
                    );
                }
            }
        }
    }
    // Which route made the text huge is a race against the threads, which
    // fault small pages back in: on a loaded machine they may win every
    // time. Each run above was checked for what must hold whoever wins (the
    // program's output, at least 12 MiB remapped, the reason when the file
    // route lost); the count is only information.
    eprintln!(
        "file route made the text huge in {file_route_runs} of {runs} runs under threads:\n{}",
        outcomes.join("\n")
    );
}

#[test]
fn signals_fork_and_exec_after_remap() {
    for linker in ["lld", "bfd"] {
        let p = format!("remap_threads_{linker}");
        let o = cprog(&["signals", "3"], &p);
        assert!(
            o.status.success() && common::text(&o.stdout).ends_with("clean\n"),
            "signals {linker}: {:?} {}",
            o.status,
            common::text(&o.stderr)
        );
        let o = cprog(&["fork"], &p);
        assert!(
            o.status.success() && common::text(&o.stdout).ends_with("clean\n"),
            "fork {linker}: {:?} {}",
            o.status,
            common::text(&o.stderr)
        );
        let small = common::fixture(linker, "small");
        let o = cprog(&["exec", small.to_str().unwrap()], &p);
        assert!(
            o.status.success(),
            "exec {linker}: {:?} {}",
            o.status,
            common::text(&o.stderr)
        );
        assert!(
            common::text(&o.stdout).ends_with("small\n"),
            "{}",
            common::text(&o.stdout)
        );
    }
}

#[test]
fn c_api_second_call_counts_what_the_first_did() {
    // The program's executable mappings after each call go to stderr
    // (REMAP_THREADS_MAPS): on a failure they show which windows moved.
    let o = cprog_command("remap_threads_lld")
        .args(["threads", "3"])
        .env("REMAP_THREADS_MAPS", "1")
        .output()
        .unwrap();
    let out = common::text(&o.stdout);
    let v: Vec<i64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("remapped=")?.parse().ok())
        .collect();
    let err = common::text(&o.stderr);
    assert_eq!(v.len(), 3, "{out}");
    assert!(v[0] >= 16 * MIB as i64, "{v:?}\n{err}");
    // Each call returns what its pass verified huge, as its -v summary says.
    // A later call copies nothing again: it counts what the earlier ones
    // did, unless they left windows in place for want of a huge page (a
    // fragmented 64 KiB-page guest: 64 MiB, then the other 4 MiB). The
    // counts themselves may move between calls: under memory pressure the
    // kernel may split a copied 2 MiB folio to migrate it, and collapse it
    // again (a 64 KiB-page guest: 60, then 62 of 68 MiB, all 68 moved).
    let passes: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("hugetext: pid ") && l.contains("is huge-backed"))
        .collect();
    assert_eq!(passes.len(), 3, "{err}");
    let left = err.contains("were left in place");
    for (i, (line, &got)) in passes.iter().zip(&v).enumerate() {
        let said = format!(": {:.1} MiB of ", got as f64 / MIB as f64);
        assert!(line.contains(&said), "call {}: returned {got}, said {line}", i + 1);
        if i > 0 && !left {
            assert!(line.contains(", copy 0.0 MiB)"), "call {} copied again: {err}", i + 1);
        }
    }
}

fn wrapped(mode: &str, strategy: &str, prog: &Path) -> Output {
    common::preload();
    Command::new(common::cprogs().join("wrap"))
        .arg(mode)
        .arg(common::bin())
        .args(["run", "-v", "--strategy", strategy, "--"])
        .arg(prog)
        .output()
        .unwrap()
}

#[test]
fn no_huge_pages_available_is_reported() {
    for linker in ["bfd", "lld"] {
        let prog = common::fixture(linker, "nopie");
        let o = wrapped("nothp", "auto", &prog);
        assert!(o.status.success(), "{:?} {}", o.status, common::text(&o.stderr));
        assert_eq!(common::text(&o.stdout), common::text(&alone(&prog).stdout));
        let err = common::text(&o.stderr);
        assert!(err.contains("huge pages are disabled for this process"), "{err}");
    }
}

#[test]
fn seccomp_restricted_program_runs_and_says_why() {
    // lld: the copy route (madvise, then mremap); bfd: the file route.
    for (mode, linker, expect) in [
        ("nomadvise", "lld", "madvise(MADV_HUGEPAGE): operation not permitted"),
        ("nomremap", "lld", "mremap: operation not permitted"),
        ("nomadvise", "bfd", "operation not permitted"),
    ] {
        let prog = common::fixture(linker, "pie");
        let o = wrapped(mode, "auto", &prog);
        assert!(
            o.status.success(),
            "{mode} {linker}: {:?} {}",
            o.status,
            common::text(&o.stderr)
        );
        assert_eq!(
            common::text(&o.stdout),
            common::text(&alone(&prog).stdout),
            "{mode} {linker}"
        );
        let err = common::text(&o.stderr);
        assert!(
            err.contains(expect) && err.contains("text left in place"),
            "{mode} {linker}: {err}"
        );
    }
}

#[test]
fn header_declares_the_api() {
    let h = std::fs::read_to_string(common::root().join("include/hugetext.h")).unwrap();
    assert!(h.contains("long hugetext_remap_text(void);"));
    // And the library exports it.
    let o = Command::new("nm")
        .arg("-D")
        .arg("--defined-only")
        .arg(common::preload())
        .output()
        .unwrap();
    assert!(
        common::text(&o.stdout).contains(" T hugetext_remap_text"),
        "{}",
        common::text(&o.stdout)
    );
    let _ = std::io::stdout().flush();
}

#[test]
fn a_perf_map_left_by_an_earlier_process_with_the_same_pid_is_replaced() {
    // The shell writes an old map for its own pid, then execs `hugetext
    // run`, which execs the program: same pid.
    let prog = common::fixture("lld", "pie");
    let script = format!(
        "m=/tmp/perf-$$.map; echo 'dead 10 stale_symbol' > $m; touch -d '-1 hour' $m; exec '{}' run --strategy copy -- '{}'",
        common::bin().display(),
        prog.display()
    );
    common::preload();
    let child = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    let map = std::fs::read_to_string(format!("/tmp/perf-{pid}.map")).unwrap();
    common::remove_perf_map(pid);
    assert!(!map.contains("stale_symbol"), "{map}");
    assert!(map.lines().any(|l| l.ends_with(" f10")), "{map}");
}

/// An executable script `dir/name`: `#!interp`, then `body`.
fn script(dir: &Path, name: &str, interp: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!{interp}\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The file name of the program behind `path` (`/bin/sh` → `dash`).
fn real_name(path: &str) -> String {
    let p = Path::new(path).canonicalize().unwrap();
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// `hugetext run -v -- WRAPPER wait`: the program at the end of the chain
/// is the fixture `prog`, which must be huge-backed, and `-v` must name
/// `chain` (the wrappers) then `prog`; `helpers` programs with text the
/// wrappers forked on the way make passes of their own. Returns the stderr.
fn reaches_through_wrappers(wrapper: &Path, prog: &Path, chain: &[String]) -> String {
    reaches_through_wrappers_with(wrapper, prog, chain, 0)
}

fn reaches_through_wrappers_with(wrapper: &Path, prog: &Path, chain: &[String], helpers: usize) -> String {
    let running = common::run_waiting(&["-v", "--strategy", "copy"], wrapper);
    let (f, a, _) = running.huge_of(prog);
    let windows = common::text_window_bytes(prog);
    let err = stop(running);
    assert!(
        f + a >= windows,
        "{}: {} of {} huge: {err}",
        prog.display(),
        f + a,
        windows
    );
    let n = chain.len();
    let want = format!(
        "via {n} wrapper{}: {} -> {}",
        if n == 1 { "" } else { "s" },
        chain.join(" -> "),
        prog.canonicalize().unwrap().display()
    );
    assert!(err.contains(&want), "wanted {want:?} in {err}");
    assert!(
        err.contains(&format!("{} is a script for", wrapper.display())),
        "run names the script: {err}"
    );
    // A wrapper's hop makes no pass and no summary of its own ("0.0 MiB of
    // 0.0 MiB"): the program's line names the chain.
    let passes = err.lines().filter(|l| l.contains("is huge-backed")).count();
    assert_eq!(passes, 1 + helpers, "one pass summary per program with text: {err}");
    let dlopen = err.lines().filter(|l| l.contains("objects loaded after start")).count();
    assert_eq!(dlopen, 1 + helpers, "one dlopen line per program with text: {err}");
    err
}

#[test]
fn a_shell_script_that_execs_the_program_is_followed_to_it() {
    let d = common::scratch();
    let pie = common::fixture("lld", "pie");
    let w = script(d.path(), "w", "/bin/sh", &format!("exec '{}' \"$@\"", pie.display()));
    let sh = real_name("/bin/sh");
    reaches_through_wrappers(&w, &pie, &[format!("{} ({sh})", w.display())]);
}

#[test]
fn a_two_level_wrapper_is_followed_to_the_program() {
    let d = common::scratch();
    let pie = common::fixture("lld", "pie");
    let inner = script(
        d.path(),
        "inner",
        "/bin/sh",
        &format!("exec '{}' \"$@\"", pie.display()),
    );
    let outer = script(
        d.path(),
        "outer",
        "/bin/sh",
        &format!("exec '{}' \"$@\"", inner.display()),
    );
    let sh = real_name("/bin/sh");
    reaches_through_wrappers(
        &outer,
        &pie,
        &[
            format!("{} ({sh})", outer.display()),
            format!("{} ({sh})", inner.display()),
        ],
    );
}

/// Launchers do not count against the budget: ten shell scripts in a row
/// (a pyenv shim and its helpers use several) still reach the program.
#[test]
fn ten_shell_hops_do_not_use_the_budget() {
    let d = common::scratch();
    let pie = common::fixture("lld", "pie");
    let sh = real_name("/bin/sh");
    let mut next = pie.clone();
    let mut chain = Vec::new();
    for i in (0..10).rev() {
        next = script(
            d.path(),
            &format!("w{i}"),
            "/bin/sh",
            &format!("exec '{}' \"$@\"", next.display()),
        );
        chain.insert(0, format!("{} ({sh})", next.display()));
    }
    reaches_through_wrappers(&next, &pie, &chain);
}

/// What a launcher's start costs is mostly the dynamic loader's work for the
/// preload and the audit module: the module `run` names in `LD_AUDIT` is
/// the small libhugetext-audit.so, which needs no library, so the
/// auditor's namespace holds no second copy of libhugetext.so and no second
/// C library (before: both, at every hop of a chain). The library needs
/// nothing but the C library and the loader: no libgcc_s.so.1 (the unwinder
/// is linked in).
#[test]
fn the_preload_and_auditor_load_nothing_but_the_c_library() {
    let out = common::hugetext(&["run", "--", "/bin/cat", "/proc/self/maps"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let maps = String::from_utf8_lossy(&out.stdout);
    let text_of = |name: &str| {
        maps.lines()
            .filter(|l| l.contains("r-xp") && l.rsplit('/').next().is_some_and(|f| f.starts_with(name)))
            .count()
    };
    // The preload and the audit module are both there (the test means
    // something), and the C library once.
    assert_eq!(text_of("libhugetext.so"), 1, "{maps}");
    assert_eq!(text_of(hugetext_abi::env::AUDIT_MODULE_PREFIX), 1, "{maps}");
    assert_eq!(text_of("libc.so.6"), 1, "{maps}");
    // ... and neither brought an object cat does not need itself.
    assert_eq!(text_of("libgcc_s"), 0, "{maps}");
}

/// A launcher's own work is what following needs and no more: without
/// `-v` the chain's names are not looked up (no `/proc/self/exe` link read,
/// no script opened to look for `#!`), nothing is written anywhere, and no
/// file of /proc or /sys is read to judge it (its text is judged from the
/// program headers; its seccomp state asked with `prctl`).
#[test]
fn a_launcher_without_verbose_looks_up_no_names_and_writes_nothing() {
    let d = common::scratch();
    let w = script(d.path(), "w", "/bin/sh", "exec /bin/true");
    // From the launcher's exec on (`hugetext run` itself comes before).
    let (_, after) = common::strace_run("execve,readlink,readlinkat,openat,write", &w, &[]);
    let after = after.as_str();
    assert!(after.contains("libhugetext.so"), "the preload was loaded: {after}");
    assert!(!after.contains("/proc/self/exe"), "{after}");
    assert!(!after.contains("write("), "{after}");
    for f in ["/proc/self/maps", "/proc/thread-self/status", "hpage_pmd_size"] {
        assert!(!after.contains(f), "{f} read: {after}");
    }
    assert!(
        !after.contains(&format!("openat(AT_FDCWD, \"{}\", O_RDONLY|O_NONBLOCK", w.display())),
        "{after}"
    );
}

/// A followed launcher starts a helper that can reach nothing hugetext
/// does without the preload: `quiet` has little text, and neither it nor
/// its library (found through its `RUNPATH` `$ORIGIN/lib`) imports a
/// function that starts programs or loads code. `starts` is the same
/// program with a library that calls `dlopen`: it gets the preload. Each
/// prints how many of its mappings are libhugetext.so.
#[test]
fn a_launcher_starts_helpers_that_reach_nothing_without_the_preload() {
    let d = common::scratch();
    let dir = d.path().canonicalize().unwrap();
    std::fs::create_dir(dir.join("lib")).unwrap();
    let gcc = |args: &[&str]| {
        let out = Command::new("gcc").args(args).current_dir(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "gcc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(dir.join("quiet.c"), "int q(int x) { return x + 1; }\n").unwrap();
    std::fs::write(
        dir.join("starts.c"),
        "#include <dlfcn.h>\nint q(int x) { return dlopen(0, RTLD_NOW) ? x : x + 1; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\n#include <string.h>\nint q(int);\n\
         int main(void) { FILE *m = fopen(\"/proc/self/maps\", \"r\"); char l[4096]; int n = 0;\n\
         while (fgets(l, sizeof l, m)) n += strstr(l, \"libhugetext\") != 0;\n\
         printf(\"%d\\n\", n); return q(0) < 0; }\n",
    )
    .unwrap();
    for lib in ["quiet", "starts"] {
        gcc(&[
            "-shared",
            "-fPIC",
            "-o",
            &format!("lib/lib{lib}.so"),
            &format!("{lib}.c"),
        ]);
        gcc(&[
            "-o",
            lib,
            "main.c",
            "-Llib",
            &format!("-l{lib}"),
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib",
        ]);
    }
    let sh = format!("'{0}/quiet'; '{0}/starts'", dir.display());
    let out = Command::new(common::bin())
        .args(["run", "-v", "--strategy", "file", "--", "/bin/sh", "-c", &sh])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let counts: Vec<&str> = stdout.lines().collect();
    assert_eq!(counts.len(), 2, "{stdout}");
    assert_eq!(counts[0], "0", "quiet has the preload mapped: {stderr}");
    assert_ne!(counts[1], "0", "starts has no preload: {stderr}");
    let quiet = format!("{}/quiet starts without the preload", dir.display());
    assert!(stderr.contains(&quiet), "{stderr}");
    assert!(
        !stderr.contains(&format!("{}/starts starts without", dir.display())),
        "{stderr}"
    );
}

/// A version manager's shim (pyenv's `python3`): `#!/usr/bin/env bash`,
/// running its own bash helper, which execs the program.
#[test]
fn a_version_manager_shim_is_followed_to_the_program() {
    let d = common::scratch();
    let pie = common::fixture("lld", "pie");
    let libexec = script(
        d.path(),
        "pyenv-exec",
        "/usr/bin/env bash",
        &format!("set -e\nshift\nexec '{}' \"$@\"", pie.display()),
    );
    let shim = script(
        d.path(),
        "python3",
        "/usr/bin/env bash",
        &format!(
            "set -e\nprogram=\"${{0##*/}}\"\nexec '{}' \"$program\" \"$@\"",
            libexec.display()
        ),
    );
    let bash = real_name("/bin/bash");
    let env = real_name("/usr/bin/env");
    reaches_through_wrappers(
        &shim,
        &pie,
        &[
            format!("{} ({env})", shim.display()),
            format!("{} ({bash})", shim.display()),
            format!("{} ({env})", libexec.display()),
            format!("{} ({bash})", libexec.display()),
        ],
    );
}

/// A helper the wrapper forks before its exec is judged like any process
/// the chain reaches: one with text (`spawn` runs code of libbig.so) has
/// its text remapped, and its own children get a clean environment.
#[test]
fn a_helper_with_text_forked_by_a_wrapper_is_remapped_and_its_children_run_plain() {
    let d = common::scratch();
    let pie = common::fixture("lld", "pie");
    let spawn = common::cprogs().join("spawn");
    let seen = d.path().join("helper-child-environ");
    let w = script(
        d.path(),
        "w",
        "/bin/sh",
        &format!(
            "'{}' cat /proc/self/environ > '{}'\nexec '{}' \"$@\"",
            spawn.display(),
            seen.display(),
            pie.display()
        ),
    );
    let sh = real_name("/bin/sh");
    let err = reaches_through_wrappers_with(&w, &pie, &[format!("{} ({sh})", w.display())], 1);
    let helper = format!("via 1 wrapper: {} ({sh}) -> {}", w.display(), spawn.display());
    assert!(err.contains(&helper), "wanted {helper:?} in {err}");
    let env = std::fs::read(&seen).unwrap();
    let env: Vec<String> = env
        .split(|&c| c == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect();
    for bad in ["LD_PRELOAD=", "LD_AUDIT=", "HUGETEXT_VIA=", "HUGETEXT_TUNABLES="] {
        assert!(
            !env.iter().any(|e| e.starts_with(bad)),
            "{bad} reached the helper's child: {env:?}"
        );
    }
}

/// What a launcher test starts: the fixture standing in for a server, and
/// `serve`, the script that starts it reading a FIFO (the server stops when
/// the test closes it, or ends), writing to `log`; all in a directory of
/// the unprivileged test account, which the server may run as.
struct Server {
    _dir: tempfile::TempDir,
    home: PathBuf,
    exe: PathBuf,
    serve: PathBuf,
    log: PathBuf,
    stdin: Option<std::fs::File>,
}

impl Server {
    fn new() -> Server {
        use std::os::unix::fs::PermissionsExt;
        let (dir, home) = common::attacker_home();
        let exe = common::copy_fixture(&home, "lld", "pie");
        let fifo = home.join("stdin");
        assert!(Command::new("mkfifo")
            .arg("-m0644")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let log = home.join("log");
        let serve = script(
            &home,
            "serve",
            "/bin/sh",
            &format!(
                "exec '{}' wait < '{}' > '{}' 2>&1",
                exe.display(),
                fifo.display(),
                log.display()
            ),
        );
        let (uid, gid) = common::attacker();
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
        // Read and write: opening never blocks, and the server reads EOF
        // once this end is closed (close-on-exec: no launcher inherits it).
        let stdin = std::fs::OpenOptions::new().read(true).write(true).open(&fifo).unwrap();
        Server {
            _dir: dir,
            home,
            exe,
            serve,
            log,
            stdin: Some(stdin),
        }
    }

    /// `hugetext run -v --strategy copy -- ARGV`, started by a launcher;
    /// waits until the server is ready, checks that its text is remapped
    /// and that its environment holds nothing of hugetext, stops it and
    /// returns run's stderr.
    fn through(mut self, case: &str, argv: &[std::ffi::OsString]) -> String {
        use std::time::{Duration, Instant};
        common::preload();
        let err_path = self.home.join("run.err");
        let mut child = Command::new(common::bin())
            .args(["run", "-v", "--strategy", "copy", "--"])
            .args(argv)
            .env_remove("HUGETEXT_VERBOSE")
            .env_remove("HUGETEXT_STRATEGY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let err = || std::fs::read_to_string(&err_path).unwrap_or_default();
        let t = Instant::now();
        // A line of its own: the preload's `-v` summary, in the same log
        // before the program starts, says "already".
        let ready = |log: &Path| std::fs::read_to_string(log).is_ok_and(|l| l.lines().any(|l| l == "ready"));
        while !ready(&self.log) {
            assert!(
                t.elapsed() < Duration::from_secs(180),
                "{case}: the server did not start: {}",
                err()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let exe = self.exe.canonicalize().unwrap();
        let pid = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe))
            .unwrap_or_else(|| panic!("{case}: no process runs {}", exe.display()));
        let (f, a, _) = common::huge_of_pid(pid, &self.exe);
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        drop(self.stdin.take());
        common::remove_perf_map(pid as u32);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "{case}: the server did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        while child.try_wait().unwrap().is_none() {
            assert!(t.elapsed() < Duration::from_secs(300), "{case}: run did not end");
            std::thread::sleep(Duration::from_millis(50));
        }
        let err = err();
        let windows = common::text_window_bytes(&self.exe);
        assert!(f + a >= windows, "{case}: {} of {windows} bytes huge: {err}", f + a);
        for e in environ.split(|&c| c == 0).map(String::from_utf8_lossy) {
            assert!(
                !e.starts_with("HUGETEXT_"),
                "{case}: {e} in the server's environ: {err}"
            );
            assert!(
                !(e.starts_with("LD_") && e.contains("libhugetext")),
                "{case}: {e}: {err}"
            );
        }
        err
    }
}

fn os(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<std::ffi::OsString> {
    args.iter().map(|a| a.as_ref().to_os_string()).collect()
}

/// The first of `paths` that exists.
fn installed(paths: &[&str]) -> Option<PathBuf> {
    paths.iter().map(PathBuf::from).find(|p| p.exists())
}

#[test]
fn a_server_started_by_runuser_is_remapped() {
    let s = Server::new();
    let argv = os(&[&"runuser", &"-u", &"ht-attacker", &"--", &s.serve]);
    let err = s.through("runuser", &argv);
    assert!(err.contains("runuser has no text of its own to remap"), "{err}");
}

#[test]
fn a_server_started_by_su_is_remapped() {
    let s = Server::new();
    let argv = os(&[&"su", &"-s", &"/bin/sh", &"-c", &s.serve, &"ht-attacker"]);
    s.through("su", &argv);
}

#[test]
fn a_server_started_by_start_stop_daemon_is_remapped() {
    let Some(ssd) = installed(&["/usr/sbin/start-stop-daemon", "/sbin/start-stop-daemon"]) else {
        common::skip_line("start-stop-daemon not installed: skipped");
        return;
    };
    let s = Server::new();
    let argv = os(&[
        &ssd,
        &"--start",
        &"--background",
        &"--chuid",
        &"ht-attacker",
        &"--name",
        &"ht-no-such-name",
        &"--startas",
        &s.serve,
    ]);
    s.through("start-stop-daemon", &argv);
}

/// `pg_ctl start` forks a shell that execs the server (here `-p` names
/// the stand-in; pg_ctl refuses to run as root, so `runuser` starts it).
#[test]
fn a_server_started_by_pg_ctl_is_remapped() {
    let pg_ctl = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path().join("bin/pg_ctl")))
        .find(|p| p.exists());
    let Some(pg_ctl) = pg_ctl else {
        common::skip_line("pg_ctl (postgresql) not installed: skipped");
        return;
    };
    let s = Server::new();
    let data = s.home.join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("PG_VERSION"), "15\n").unwrap();
    let (uid, gid) = common::attacker();
    for p in [&data, &data.join("PG_VERSION")] {
        std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
    }
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let argv = os(&[
        &"runuser",
        &"-u",
        &"ht-attacker",
        &"--",
        &pg_ctl,
        &"-D",
        &data,
        &"-p",
        &s.serve,
        &"-W",
        &"start",
    ]);
    let err = s.through("pg_ctl", &argv);
    assert!(err.contains("pg_ctl has no text of its own to remap"), "{err}");
}

/// A `mysqld_safe`-style script: the server started in the background
/// (`nohup ... &`), the script waiting for it.
#[test]
fn a_server_a_script_starts_in_the_background_is_remapped() {
    let s = Server::new();
    let safe = script(
        &s.home,
        "server_safe",
        "/bin/sh",
        &format!("nohup '{}' > /dev/null 2>&1 &\nwait", s.serve.display()),
    );
    s.through("mysqld_safe-style script", &os(&[&safe]));
}

/// MariaDB started by Debian's `mysqld_safe` (a shell script that forks
/// the server with `nohup ... &` and waits for it, running sed, expr,
/// my_print_defaults on the way): `mariadbd` answers with the whole
/// windows of its text huge-backed, and no process of the tree, neither
/// `mysqld_safe` (followed as a launcher, alive as long as the server)
/// nor `mariadbd`, has anything of hugetext in `/proc/PID/environ`.
#[test]
fn mariadb_started_by_mysqld_safe_is_remapped_with_a_clean_environment() {
    use std::time::{Duration, Instant};
    let (Some(safe), Some(install_db), Some(admin), Some(server)) = (
        installed(&["/usr/bin/mysqld_safe"]),
        installed(&["/usr/bin/mariadb-install-db"]),
        installed(&["/usr/bin/mariadb-admin"]),
        installed(&["/usr/sbin/mariadbd"]),
    ) else {
        common::skip_line(
            "mysqld_safe, mariadb-install-db or mariadbd missing (mariadb-server not installed): skipped",
        );
        return;
    };
    common::preload();
    let dir = common::scratch();
    // The server runs as mysql: it must reach its files.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    // Where the server writes its socket, pid file and log.
    let rundir = dir.path().join("run");
    assert!(Command::new("install")
        .args(["-d", "-o", "mysql", "-g", "mysql"])
        .arg(&rundir)
        .status()
        .unwrap()
        .success());
    let sock = rundir.join("sock");
    let o = Command::new(&install_db)
        .arg("--no-defaults")
        .arg("--user=mysql")
        .arg(format!("--datadir={}", data.display()))
        .arg("--skip-test-db")
        .output()
        .unwrap();
    assert!(o.status.success(), "mariadb-install-db: {}", common::text(&o.stderr));
    let err_path = dir.path().join("run.err");
    let mut run = Command::new(common::bin())
        .args(["run", "-v", "--strategy", "copy", "--"])
        .arg(&safe)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--socket={}", sock.display()))
        .arg("--skip-networking")
        .arg(format!("--pid-file={}", rundir.join("pid").display()))
        .arg(format!("--log-error={}", rundir.join("server.log").display()))
        .arg("--user=mysql")
        .env_remove("HUGETEXT_VERBOSE")
        .env_remove("HUGETEXT_STRATEGY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let root = run.id() as i32;
    // Stops the server (mysqld_safe ignores SIGTERM) whatever happens.
    struct Stop(PathBuf, PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = Command::new(&self.0)
                .arg("--no-defaults")
                .arg("-S")
                .arg(&self.1)
                .arg("shutdown")
                .output();
        }
    }
    let stop = Stop(admin.clone(), sock.clone());
    let log = rundir.join("server.log");
    let err = || {
        format!(
            "{}\nserver log: {}",
            std::fs::read_to_string(&err_path).unwrap_or_default(),
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    };
    let t = Instant::now();
    let ping = || {
        Command::new(&admin)
            .arg("--no-defaults")
            .arg("-S")
            .arg(&sock)
            .arg("ping")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    while !ping() {
        assert!(
            run.try_wait().unwrap().is_none(),
            "mysqld_safe ended before the server answered: {}",
            err()
        );
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the server did not answer: {}",
            err()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let tree = hugetext::procfs::descendants(root);
    let exe = server.canonicalize().unwrap();
    let pid = *tree
        .iter()
        .find(|&&p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe))
        .unwrap_or_else(|| panic!("no mariadbd among {tree:?}: {}", err()));
    let (f, a, _) = common::huge_of_pid(pid, &server);
    // Every process of the tree once the server answers (shells and tools
    // mysqld_safe ran on the way have ended); mysqld_safe is the root.
    let leaks: Vec<(i32, Vec<String>)> = tree
        .iter()
        .map(|&p| (p, common::ours_in_environ(p)))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    drop(stop);
    while run.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(600), "mysqld_safe did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    common::remove_perf_map(pid as u32);
    let err = err();
    assert!(tree.len() >= 2, "mysqld_safe and the server: {tree:?}");
    assert!(
        leaks.is_empty(),
        "hugetext's variables in /proc/PID/environ: {leaks:?}\n{err}"
    );
    let windows = common::text_window_bytes(&server);
    assert!(windows > 0);
    assert!(f + a >= windows, "mariadbd: {} of {windows} bytes huge: {err}", f + a);
    assert!(err.contains("mysqld_safe is a script for /bin/sh"), "{err}");
}

/// Debian's postgres started the way its docs say, `su postgres -c
/// "pg_ctl ... start"` (su forks a shell, pg_ctl forks a shell that execs
/// the server, which forks its workers; pg_ctl and su end once it is
/// ready): the postmaster has the whole windows of its text huge-backed,
/// and no process of the server has anything of hugetext in
/// `/proc/PID/environ`.
#[test]
fn postgres_started_by_su_and_pg_ctl_is_remapped_with_a_clean_environment() {
    let Some(su) = installed(&["/usr/bin/su", "/bin/su"]) else {
        common::skip_line("su not installed: skipped");
        return;
    };
    let Some(pg) = common::PgCluster::init() else {
        return;
    };
    common::preload();
    let (bin, home, data) = (&pg.bin, &pg.home, &pg.data);
    let pg_ctl = pg.pg_ctl();
    let start = format!(
        "'{}' -D '{}' -o \"-p 5432 -k '{}' -c listen_addresses=\" -l '{}' -w -t 300 start",
        pg_ctl.display(),
        data.display(),
        home.display(),
        home.join("log").display()
    );
    let o = Command::new(common::bin())
        .args(["run", "-v", "--strategy", "copy", "--"])
        .arg(&su)
        .args(["postgres", "-s", "/bin/sh", "-c", &start])
        .env_remove("HUGETEXT_VERBOSE")
        .env_remove("HUGETEXT_STRATEGY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "su ... pg_ctl start: {err}");
    let pid = pg.postmaster();
    let tree = hugetext::procfs::descendants(pid);
    let server = bin.join("postgres");
    let (f, a, _) = common::huge_of_pid(pid, &server);
    let leaks: Vec<(i32, Vec<String>)> = tree
        .iter()
        .map(|&p| (p, common::ours_in_environ(p)))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    drop(pg);
    for &p in &tree {
        common::remove_perf_map(p as u32);
    }
    assert!(tree.len() >= 2, "the postmaster and its workers: {tree:?}");
    assert!(
        leaks.is_empty(),
        "hugetext's variables in /proc/PID/environ: {leaks:?}\n{err}"
    );
    let windows = common::text_window_bytes(&server);
    assert!(windows > 0);
    assert!(f + a >= windows, "postgres: {} of {windows} bytes huge: {err}", f + a);
    assert!(err.contains("pg_ctl has no text of its own to remap"), "{err}");
}

/// A program with text but no whole window (Debian's python3.11: 2.7 MiB)
/// has nothing to remap: it is followed like a launcher, but counts; the
/// ninth in a chain ends it, and `-v` says so there.
#[test]
fn programs_with_text_but_no_window_are_followed_up_to_the_budget() {
    let d = common::scratch();
    let pie = common::fixture("lld", "pie");
    let hop = d.path().join("hop.py");
    std::fs::write(
        &hop,
        format!(
            "import os, sys\nn = int(sys.argv[1])\nif n > 0:\n    os.execv(sys.executable, [sys.executable, __file__, str(n - 1)])\nos.execv('{0}', ['{0}'])\n",
            pie.display()
        ),
    )
    .unwrap();
    let run = |hops: &str| {
        let mut cmd = Command::new(common::bin());
        cmd.args(["run", "-v", "--strategy", "copy", "--", "/usr/bin/python3"])
            .arg(&hop)
            .arg(hops)
            .env_remove("HUGETEXT_VERBOSE");
        let o = common::output_without_perf_map(&mut cmd);
        let err = common::text(&o.stderr);
        assert!(o.status.success(), "{err}");
        err
    };
    // The case needs a python3 with 2 MiB or more of text and no whole
    // window wherever it loads: a non-PIE executable (Debian's) whose
    // text segment holds none.
    let Ok(python) = Path::new("/usr/bin/python3").canonicalize() else {
        common::skip_line("no /usr/bin/python3: skipped");
        return;
    };
    let Ok(r) = hugetext::elf::check_file(&python) else {
        common::skip_line("/usr/bin/python3 is not an ELF program: skipped");
        return;
    };
    let text: u64 = r.segments.iter().filter(|s| s.executable).map(|s| s.filesz).sum();
    let fixed = matches!(r.kind, hugetext::elf::check::FileKind::Executable);
    if !fixed || text < 2 << 20 || common::text_window_bytes(&python) > 0 {
        common::skip_line("python3 is not a fixed-address program with text and no whole window here: skipped");
        return;
    }
    let err = run("0");
    assert!(err.contains("program with text 1 of at most 8"), "{err}");
    let pie_path = pie.canonicalize().unwrap();
    assert!(
        err.lines()
            .any(|l| l.contains("is huge-backed") && !l.contains("copy 0.0 MiB)")),
        "the program after python3 was remapped: {err}"
    );
    assert!(err.contains(&format!("-> {}", pie_path.display())), "{err}");
    // Nine in a row: the ninth ends the chain, the program runs plain.
    let err = run("8");
    assert!(err.contains("program with text 8 of at most 8"), "{err}");
    let ends: Vec<_> = err
        .lines()
        .filter(|l| l.contains("8 such programs were followed: the chain ends here"))
        .collect();
    assert_eq!(ends.len(), 1, "{err}");
    assert!(
        !err.lines()
            .any(|l| l.contains("is huge-backed") && !l.contains("copy 0.0 MiB)")),
        "nothing remapped past the budget: {err}"
    );
}

/// `env -i` starts its command with an empty environment: the chain is
/// lost there, and `-v` says so at that process.
#[test]
fn v_names_where_env_i_loses_the_chain() {
    common::preload();
    let pie = common::fixture("lld", "pie");
    let mut cmd = Command::new(common::bin());
    cmd.args(["run", "-v", "--", "env", "-i"]).arg(&pie);
    let o = common::output_without_perf_map(&mut cmd);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let lost: Vec<_> = err
        .lines()
        .filter(|l| l.contains("starts its command with a cleared environment"))
        .collect();
    assert_eq!(lost.len(), 1, "{err}");
    assert!(lost[0].contains("/env (-i)"), "{err}");
    assert!(!err.contains("huge-backed"), "nothing reached the program: {err}");
}

/// A launcher sees a clean environment like any program (a runtime that
/// copies it at start keeps nothing of hugetext), and the settings reach
/// the program it starts at exec instead, by every exec and spawn form of
/// the C library: `launch` (tests/c/launch.c) exits 3 if its environment
/// names hugetext, and the program at the end must make its pass, named
/// as reached through the launcher. An environment the launcher clears on
/// purpose is passed on as it is, and `-v` names the loss.
#[test]
fn a_launcher_sees_a_clean_environment_and_every_exec_form_reaches_the_program() {
    common::preload();
    let pie = common::fixture("lld", "pie");
    let launch = common::cprogs().join("launch");
    let target = pie.canonicalize().unwrap();
    let modes = [
        "execve",
        "execv",
        "execvp",
        "execvpe",
        "execl",
        "execlp",
        "execle",
        "fexecve",
        "posix_spawn",
        "posix_spawnp",
        "system",
        "popen",
        "vfork",
    ];
    for mode in modes {
        let mut cmd = Command::new(common::bin());
        cmd.args(["run", "-v", "--strategy", "copy", "--"])
            .arg(&launch)
            .arg(mode)
            .arg(&pie);
        let o = common::output_without_perf_map(&mut cmd);
        let err = common::text(&o.stderr);
        assert!(o.status.success(), "{mode}: {:?}: {err}", o.status);
        let reached = err
            .lines()
            .any(|l| l.contains(" -> ") && l.contains("via ") && l.ends_with(&*target.to_string_lossy()));
        assert!(reached, "{mode}: the program was not reached: {err}");
        assert!(err.contains("huge-backed"), "{mode}: {err}");
        assert!(!err.contains("is a Go program"), "{mode}: {err}");
    }
    let mut cmd = Command::new(common::bin());
    cmd.args(["run", "-v", "--"]).arg(&launch).arg("cleared").arg(&pie);
    let o = common::output_without_perf_map(&mut cmd);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let lost: Vec<_> = err
        .lines()
        .filter(|l| l.contains("starts a program with a cleared environment"))
        .collect();
    assert_eq!(lost.len(), 1, "{err}");
    assert!(lost[0].contains("/launch"), "{err}");
    assert!(!err.contains("huge-backed"), "nothing reached the program: {err}");
}

/// A launcher that starts its command with the execve system call (a Go
/// program: os/exec, syscall.Exec) cannot be interposed: known by Go's
/// build-id note (tests/c/rawexec.c carries one), it keeps the variables
/// in its environment (not in `/proc/PID/environ`), so the program it
/// starts is followed and remapped, and `-v` says so at it.
#[test]
fn a_go_launcher_keeps_the_variables_and_its_command_is_followed() {
    common::preload();
    let pie = common::fixture("bfd", "pie");
    let rawexec = common::cprogs().join("rawexec");
    let mut cmd = Command::new(common::bin());
    cmd.args(["run", "-v", "--strategy", "copy", "--"])
        .arg(&rawexec)
        .arg(&pie);
    let o = common::output_without_perf_map(&mut cmd);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let said: Vec<_> = err.lines().filter(|l| l.contains("is a Go program")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains("/rawexec") && said[0].contains("keeps hugetext's variables"),
        "{err}"
    );
    assert!(err.contains("huge-backed"), "the program was not reached: {err}");
}

fn run_stderr(prefix: Option<Command>, args: &[&str], program: &Path, program_args: &[&str]) -> String {
    common::preload();
    let mut cmd = match prefix {
        Some(p) => {
            let mut c = Command::new(p.get_program());
            c.args(p.get_args()).arg(common::bin());
            c
        }
        None => Command::new(common::bin()),
    };
    cmd.arg("run").args(args).arg("--").arg(program).args(program_args);
    cmd.env_remove("HUGETEXT_NAME");
    let o = common::output_without_perf_map(&mut cmd);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{}: {err}", program.display());
    err
}

/// Several processes of one run take the copy route (`--inherit`): where
/// the kernel cannot name anonymous memory, one line says so, once per
/// run, and only with -v.
#[test]
fn missing_anonymous_names_are_reported_once_per_run_and_only_with_v() {
    let pie = common::fixture("lld", "pie");
    let sh = format!("'{0}'; '{0}'; '{0}'", pie.display());
    let shell = Path::new("/bin/sh");
    let count = |err: &str| {
        err.lines()
            .filter(|l| l.contains("cannot name") || l.contains("name anonymous memory"))
            .count()
    };
    let verbose = run_stderr(None, &["-v", "--inherit", "--strategy", "copy"], shell, &["-c", &sh]);
    // Each pie run copies its whole 2 MiB windows of text: 18 or 20 MiB,
    // as the load address falls (the text is not congruent); /bin/sh
    // itself has no whole window and copies nothing.
    let copies = verbose
        .lines()
        .filter(|l| l.contains("is huge-backed") && !l.contains("copy 0.0 MiB)"))
        .count();
    assert_eq!(copies, 3, "three processes copied their text: {verbose}");
    let want = usize::from(!hugetext::run::prerun::anon_vma_names());
    assert_eq!(count(&verbose), want, "{verbose}");
    let quiet = run_stderr(None, &["--inherit", "--strategy", "copy"], shell, &["-c", &sh]);
    assert_eq!(count(&quiet), 0, "{quiet}");
}

/// A statically linked program built from the fixtures' sources with `ld`
/// (congruent: `-Ttext-segment` at a 2 MiB multiple) or lld (not).
fn static_fixture(dir: &Path, linker: &str) -> Option<PathBuf> {
    let src = common::fixtures().join("src");
    let exe = dir.join(format!("static-{linker}"));
    let mut cmd = Command::new("gcc");
    cmd.args(["-O1", "-static", "-fno-pie", "-no-pie"])
        .arg(format!("-fuse-ld={linker}"));
    if linker == "bfd" {
        cmd.arg("-Wl,-Ttext-segment=0x2000000");
    }
    let o = cmd
        .arg(src.join("main.c"))
        .arg(src.join("text.S"))
        .arg("-o")
        .arg(&exe)
        .output()
        .ok()?;
    o.status.success().then_some(exe)
}

#[test]
fn the_static_warning_says_what_works_instead() {
    let d = common::scratch();
    let Some(congruent) = static_fixture(d.path(), "bfd") else {
        eprintln!("skipped: gcc -static failed (no libc.a? apt-get install libc6-dev)");
        return;
    };
    let skewed = static_fixture(d.path(), "lld").expect("lld static link");
    let err = run_stderr(None, &[], &congruent, &[]);
    assert!(err.contains("is statically linked"), "{err}");
    assert!(
        err.contains(&format!("`hugetext warm {}`", congruent.display())) && err.contains("18.0 MiB"),
        "congruent ET_EXEC: warm works: {err}"
    );
    let err = run_stderr(None, &[], &skewed, &[]);
    assert!(
        err.contains(&format!("`hugetext align {}`", skewed.display())),
        "lld layout: align first: {err}"
    );
    // Found on PATH by a bare name (static Go as `go`): the advice names
    // the file, which `warm` can open, not the bare name.
    let name = congruent.file_name().unwrap().to_str().unwrap().to_string();
    let path = format!("{}:{}", d.path().display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new(common::bin())
        .args(["run", "--", &name])
        .env("PATH", path)
        .output()
        .unwrap();
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("`hugetext warm {}`", congruent.display())),
        "by name: the path: {err}"
    );
    assert!(!err.contains(&format!("`hugetext warm {name}`")), "{err}");
}

/// A copy of the fixture `lld/pie` in a scratch directory the attacker
/// account can read, with `mode`, owned by root.
fn privileged_copy(dir: &Path, name: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = dir.join(name);
    std::fs::copy(common::fixture("lld", "pie"), &p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

const UNCHANGED: &str = "runs in secure-execution mode";

/// Set-user-ID root: started by root (its owner) the loader runs the
/// preload, so no "runs unchanged"; started by another user it does not.
#[test]
fn set_uid_warnings_are_true_for_root_and_for_users() {
    let d = common::scratch();
    let exe = privileged_copy(d.path(), "suid", 0o4755);
    let err = run_stderr(None, &["-v"], &exe, &[]);
    assert!(!err.contains(UNCHANGED) && !err.contains("runs unchanged"), "{err}");
    assert!(err.contains("is huge-backed"), "the preload ran: {err}");
    assert!(
        err.contains("does not run in secure-execution mode: the preload runs"),
        "{err}"
    );
    let err = run_stderr(Some(common::as_attacker()), &["-v"], &exe, &[]);
    assert!(err.contains(UNCHANGED) && err.contains("set-user-ID"), "{err}");
    assert!(!err.contains("is huge-backed"), "the loader ignored the preload: {err}");
}

/// File capabilities: started by a user other than root the loader
/// ignores the preload, and `run` says so; root runs it with the preload.
#[test]
fn file_capability_programs_are_warned_about_for_users_only() {
    let d = common::scratch();
    let exe = privileged_copy(d.path(), "cap", 0o755);
    let st = Command::new("setcap").arg("cap_net_raw+ep").arg(&exe).status();
    if !st.is_ok_and(|s| s.success()) {
        eprintln!("skipped: setcap failed (apt-get install libcap2-bin; a filesystem with xattrs)");
        return;
    }
    let err = run_stderr(Some(common::as_attacker()), &["-v"], &exe, &[]);
    assert!(err.contains(UNCHANGED) && err.contains("file capabilities"), "{err}");
    assert!(!err.contains("is huge-backed"), "the loader ignored the preload: {err}");
    let err = run_stderr(None, &["-v"], &exe, &[]);
    assert!(!err.contains(UNCHANGED), "{err}");
    assert!(err.contains("is huge-backed"), "the preload ran: {err}");
}

/// The "copies N MiB" figure of `run -v --inherit`'s cost line.
fn inherit_copies(err: &str) -> f64 {
    let l = err
        .lines()
        .find(|l| l.contains("--inherit: every child process"))
        .unwrap_or_else(|| panic!("{err}"));
    let n = l.split("copies ").nth(1).unwrap().split(' ').next().unwrap();
    n.parse().unwrap()
}

/// Before starting, `run -v --inherit` says what each child process that
/// execs the program costs: its text (and its libraries') in whole windows
/// that cannot be shared, which the copy route puts in private memory.
#[test]
fn run_v_inherit_says_what_each_child_costs() {
    let windows = |p: &Path| common::text_window_bytes(p) as f64 / MIB as f64;
    let skewed = common::fixture("lld", "pie");
    let err = run_stderr(None, &["-v", "--inherit"], &skewed, &[]);
    let c = inherit_copies(&err);
    assert!(
        (c - windows(&skewed)).abs() <= 2.0,
        "lld layout: all copied ({c} MiB): {err}"
    );
    assert!(err.contains("pie "), "names the file: {err}");
    let congruent = common::fixture("bfd", "nopie");
    let err = run_stderr(None, &["-v", "--inherit"], &congruent, &[]);
    assert_eq!(inherit_copies(&err), 0.0, "congruent text is shared: {err}");
    assert!(err.contains(&format!("shares {:.1} MiB", windows(&congruent))), "{err}");
    let err = run_stderr(None, &["-v", "--inherit", "--gdb"], &skewed, &[]);
    assert_eq!(inherit_copies(&err), 0.0, "--gdb never copies: {err}");
    let err = run_stderr(None, &["-v"], &skewed, &[]);
    assert!(!err.contains("--inherit:"), "only with --inherit: {err}");
}

/// `FILE` and every library `ldd` names, at the same paths under `root`;
/// the ELF interpreter only at the path `ldd` names (/lib64/...), as a
/// busybox root with glibc copied in has it.
fn copy_with_libs(root: &Path, file: &Path) {
    let put = |f: &Path| {
        let dst = root.join(f.strip_prefix("/").unwrap());
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(f, &dst).unwrap();
    };
    put(file);
    let o = Command::new("ldd").arg(file).output().unwrap();
    for l in common::text(&o.stdout).lines() {
        if let Some(p) = l.split_whitespace().find(|w| w.starts_with('/')) {
            put(Path::new(p));
        }
    }
}

/// A minimal root (glibc copied in at the paths ldd names, no
/// /etc/ld.so.cache, ld.so not in its system directories): the dynamic
/// loader cannot load libhugetext.so as an audit module there, because
/// a namespace of its own searches every library, ld.so included. `run`
/// says so in one line and names no LD_AUDIT, instead of ld.so's
/// "cannot be loaded as audit interface"; the program runs.
#[test]
fn an_auditor_the_loader_cannot_load_is_said_up_front() {
    let d = common::scratch();
    let root = d.path().join("root");
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let preload = common::preload().canonicalize().unwrap();
    for f in [common::bin().canonicalize().unwrap(), preload.clone(), sh.clone()] {
        copy_with_libs(&root, &f);
    }
    let o = Command::new("chroot")
        .arg(&root)
        .arg(common::bin().canonicalize().unwrap())
        .args(["run", "--preload"])
        .arg(&preload)
        .arg("--")
        .arg(&sh)
        .args(["-c", "echo ran"])
        .output()
        .unwrap();
    let err = common::text(&o.stderr);
    assert_eq!(common::text(&o.stdout), "ran\n", "{err}");
    assert!(!err.contains("audit interface"), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("are not followed")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].starts_with("hugetext: ") && said[0].contains("would not find ld-linux"),
        "{err}"
    );
}

/// What `spawn sh -c SHOW` prints: the environment of the program (spawn's
/// `/proc/PID/environ`), then its child's (`env -0`), split at NULs.
const SHOW: &str = "cat /proc/$PPID/environ; printf '\\0--\\0'; env -0";

/// (the program's /proc/PID/environ, its child's environment) from SHOW's
/// output, without empty entries.
fn two_environs(out: &[u8]) -> (Vec<String>, Vec<String>) {
    let all: Vec<String> = out
        .split(|&c| c == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .filter(|e| !e.is_empty())
        .collect();
    let cut = all.iter().position(|e| e == "--").expect("the separator");
    (all[..cut].to_vec(), all[cut + 1..].to_vec())
}

/// No trace of hugetext in an environment, and the user's own preload list
/// as it was.
fn assert_clean(env: &[String], user_preload: &str, case: &str) {
    for e in env {
        assert!(!e.starts_with("HUGETEXT_"), "{case}: {e} in {env:?}");
        assert!(
            !(e.starts_with("LD_") && e.contains("libhugetext")),
            "{case}: {e} in {env:?}"
        );
        assert!(!e.contains("optional_static_tls"), "{case}: {e} in {env:?}");
    }
    let want = format!("LD_PRELOAD={user_preload}");
    assert_eq!(
        env.iter().filter(|e| e.starts_with("LD_PRELOAD=")).collect::<Vec<_>>(),
        [&want],
        "{case}: {env:?}"
    );
}

/// The program (reached through a wrapper script, or forked by `runuser`)
/// and its children see the environment they would see without hugetext,
/// in `environ` and in `/proc/PID/environ`, with the user's own
/// `LD_PRELOAD` exactly as it was (separators included), while the
/// program's text is remapped.
#[test]
fn the_program_and_its_children_see_no_trace_of_hugetext() {
    let spawn = common::cprogs().join("spawn");
    let dir = common::scratch();
    let script = dir.path().join("wrapper.sh");
    std::fs::write(&script, format!("#!/bin/sh\nexec {} \"$@\"\n", spawn.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let user_preload = " libm.so.6";
    let mut cases: Vec<(&str, Vec<std::ffi::OsString>)> = vec![
        ("direct", vec![spawn.clone().into()]),
        ("wrapper script", vec![script.clone().into()]),
    ];
    let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    match runuser {
        Some(r) => cases.push((
            "runuser",
            vec![r.into(), "-u".into(), "root".into(), "--".into(), spawn.clone().into()],
        )),
        None => common::skip_line("runuser not installed: that case is skipped"),
    }
    common::preload();
    for (case, argv) in cases {
        let mut cmd = Command::new(common::bin());
        cmd.args(["run", "--strategy", "copy", "--"])
            .args(&argv)
            .args(["sh", "-c", SHOW])
            .env("LD_PRELOAD", user_preload)
            .env("HUGETEXT_REPORT", "json")
            .env_remove("LD_AUDIT")
            .env_remove("GLIBC_TUNABLES");
        let o = cmd.output().unwrap();
        let err = common::text(&o.stderr);
        assert!(o.status.success(), "{case}: {err}");
        let recs = common::records(&err);
        if let Some(pid) = recs.first().and_then(|r| r["pid"].as_u64()) {
            common::remove_perf_map(pid as u32);
        }
        if case != "runuser" {
            // (runuser forks the program: what reaches it is another matter.)
            assert!(
                recs.iter().any(|r| r["huge"].as_u64() > Some(0)),
                "{case}: the text was remapped: {err}"
            );
        }
        let (program, child) = two_environs(&o.stdout);
        assert_clean(
            &program,
            user_preload,
            &format!("{case}: the program's /proc/PID/environ"),
        );
        assert_clean(&child, user_preload, &format!("{case}: its child's environment"));
    }
}

/// Under `--inherit` the environment stays as it is, and the room a
/// process title has over argv and the environment (what chromium's
/// `--type=` titles, postgres's and nginx's use) is at least what it is
/// without hugetext: the loader's copy of `GLIBC_TUNABLES` (glibc before
/// 2.40) no longer cuts it short.
#[test]
fn inherit_keeps_the_room_of_process_titles() {
    let title = common::cprogs().join("title");
    let room = |cmd: &mut Command| -> u64 {
        cmd.env_clear().env("A", "1").env("PATH", "/usr/bin:/bin");
        let o = common::output_without_perf_map(cmd);
        let out = common::text(&o.stdout);
        assert!(o.status.success(), "{out} {}", common::text(&o.stderr));
        out.trim()
            .strip_prefix("room ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"))
    };
    common::preload();
    let plain = room(&mut Command::new(&title));
    let inherit = room(
        Command::new(common::bin())
            .args(["run", "--inherit", "--strategy", "copy", "--"])
            .arg(&title),
    );
    let default = room(
        Command::new(common::bin())
            .args(["run", "--strategy", "copy", "--"])
            .arg(&title),
    );
    assert!(
        inherit >= plain,
        "--inherit: {inherit} bytes of title room, {plain} plain"
    );
    assert!(default >= plain, "run: {default} bytes of title room, {plain} plain");
}

/// `run -- chroot ROOT PROGRAM` into a root without libhugetext.so: one
/// line says so, the command runs without hugetext (no loader error, no
/// variables passed).
#[test]
fn run_into_a_root_without_the_preload_says_so_and_passes_nothing() {
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        common::skip_line("no /bin/busybox (a static program to run in an empty root): skipped");
        return;
    }
    common::preload();
    let dir = common::scratch();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    let o = Command::new(common::bin())
        .args(["run", "--", "chroot"])
        .arg(&root)
        .args(["/bin/busybox", "env"])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not exist: it runs without hugetext"), "{err}");
    let out = common::text(&o.stdout);
    for bad in ["HUGETEXT_", "LD_PRELOAD", "LD_AUDIT", "optional_static_tls"] {
        assert!(!out.contains(bad), "{bad} passed into the root: {out}");
    }
}

/// Perf maps the preload starts carry its first line; `run` removes those of
/// processes that ended over an hour ago, and leaves fresh ones, other
/// users', symbolic links and maps without that line (a JIT's).
#[test]
fn perf_maps_of_ended_processes_are_removed_by_a_later_run() {
    use std::os::unix::fs::symlink;
    use std::time::{Duration, SystemTime};
    let mark = hugetext_abi::env::PERF_MAP_MARK;
    // Pids of processes that have ended.
    let mut dead = Vec::new();
    while dead.len() < 5 {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        if !Path::new(&format!("/proc/{pid}")).exists() && !Path::new(&format!("/tmp/perf-{pid}.map")).exists() {
            dead.push(pid);
        }
    }
    let map = |pid: u32| PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let old = SystemTime::now() - Duration::from_secs(2 * 3600);
    let write = |pid: u32, body: &[u8], mtime: Option<SystemTime>| {
        std::fs::write(map(pid), body).unwrap();
        if let Some(t) = mtime {
            std::fs::File::options()
                .write(true)
                .open(map(pid))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
    };
    let body = [mark, b"7f0000001000 40 main\n"].concat();
    write(dead[0], &body, Some(old)); // removed
    write(dead[1], &body, None); // fresh: kept
    write(dead[2], &body, Some(old)); // another user's: kept
    let (uid, gid) = common::attacker();
    std::os::unix::fs::chown(map(dead[2]), Some(uid), Some(gid)).unwrap();
    write(dead[3], b"7f0000001000 40 jitted\n", Some(old)); // not ours: kept
    let dir = common::scratch();
    let target = dir.path().join("target.map");
    std::fs::write(&target, &body).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&target)
        .unwrap()
        .set_modified(old)
        .unwrap();
    symlink(&target, map(dead[4])).unwrap(); // a symbolic link: kept
                                             // Each run removes a bounded number: other stale maps may come first.
    for _ in 0..50 {
        if !map(dead[0]).exists() {
            break;
        }
        // A run looks at most once a minute after a look that left nothing.
        if let Some(stamp) = hugetext::run::prerun::reap_stamp() {
            let _ = std::fs::remove_file(stamp);
        }
        let o = Command::new(common::bin())
            .args(["run", "--", "true"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", common::text(&o.stderr));
    }
    let exists: Vec<bool> = dead
        .iter()
        .map(|&p| std::fs::symlink_metadata(map(p)).is_ok())
        .collect();
    for &p in &dead {
        let _ = std::fs::remove_file(map(p));
    }
    assert_eq!(exists, [false, true, true, true, true], "pids {dead:?}");
    assert!(target.exists());

    // A map the preload writes starts with that line.
    let o = Command::new(common::bin())
        .args(["run", "--strategy", "copy", "--"])
        .arg(common::fixture("lld", "pie"))
        .env("HUGETEXT_REPORT", "json")
        .output()
        .unwrap();
    let err = common::text(&o.stderr);
    let pid = common::records(&err)
        .first()
        .and_then(|r| r["pid"].as_u64())
        .expect("a record") as u32;
    let got = std::fs::read(map(pid));
    common::remove_perf_map(pid);
    let got = got.unwrap_or_else(|e| panic!("perf map of {pid}: {e}: {err}"));
    assert!(got.starts_with(mark), "{}", common::text(&got));
    assert!(got.len() > mark.len(), "it names the copied code too");
}

/// The `shmem` route: a congruent program copied into a text store (a
/// tmpfs `warm --shmem` mounts `huge=within_size`) runs with every whole
/// window of its text PMD-mapped from the store copy, and four processes
/// share those pages: no private text, whatever the filesystem.
#[test]
fn shmem_route_maps_text_from_the_store_shared_by_every_process() {
    // GNU ld non-PIE: congruent, so the copy is the file as it is.
    let (_d, prog) = private_copy("bfd", &["nopie"]);
    let store = common::TextStore::new();
    let out = store.add(&prog);
    assert!(out.contains("copied into the text store"), "{out}");
    assert!(out.contains("all in 2 MiB pages"), "{out}");
    assert!(out.contains("never dropped like page cache"), "{out}");
    let want = common::text_window_bytes(&prog);
    let dir = store.dir.to_str().unwrap();
    let plain = alone(&prog);
    let runs: Vec<Running> = (0..4)
        .map(|_| common::run_waiting(&["--strategy", "shmem", "--store", dir, "-v"], &prog))
        .collect();
    for r in &runs {
        assert_eq!(r.first_line, common::text(&plain.stdout).lines().next().unwrap());
        let (pmd, private, _) = common::store_text(r.pid(), &store.dir);
        assert_eq!(pmd, want, "ShmemPmdMapped of pid {}", r.pid());
        assert!(private < MIB, "pid {}: {private} bytes of private text", r.pid());
        let (_, anon, private_anon) = r.huge_of(&prog);
        assert_eq!((anon, private_anon), (0, 0), "no anonymous copy");
    }
    // Every process maps the same folios: each sees them shared.
    let (_, _, shared) = common::store_text(runs[3].pid(), &store.dir);
    assert!(shared >= want, "Shared_* {shared} of {want}");
    for r in runs {
        let err = stop(r);
        assert!(err.contains(&format!("shmem {}", common::mib(want))), "{err}");
    }
    // Listed as valid.
    let o = store.warm(&["--list"]);
    let listed = common::text(&o.stdout);
    assert!(
        listed.contains(prog.canonicalize().unwrap().to_str().unwrap()) && listed.contains("valid"),
        "{listed}"
    );
}

/// The store under a directory only root may pass (as `/run/hugetext` was,
/// 0700, made for root's caches): `warm --shmem` opens the way (`go+x`), and
/// another user's program takes the `shmem` route. Before, every user but
/// root found no entry.
#[test]
fn another_user_s_program_reaches_a_store_under_a_private_directory() {
    use std::os::unix::fs::PermissionsExt;
    let (d, prog) = private_copy("bfd", &["nopie"]);
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = common::scratch();
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = s.path().canonicalize().unwrap().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let dir = private.join("text");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _u = Unmount(dir.clone());
    let o = Command::new(common::bin())
        .args(["warm", "--shmem", "--shmem-size", "64M", "--store"])
        .arg(&dir)
        .arg(&prog)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        common::text(&o.stdout),
        common::text(&o.stderr)
    );
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o711, "the way to the store is open to pass, not to list");
    let want = common::text_window_bytes(&prog);
    let o = Command::new("runuser")
        .args(["-u", "ht-attacker", "--"])
        .arg(common::bin())
        .args(["run", "-v", "--strategy", "shmem", "--store"])
        .arg(&dir)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&format!("shmem {}", common::mib(want))), "{err}");
}

/// A changed original has no valid entry: the route says what the store
/// would share instead and leaves the text alone, `--list` says stale, and
/// the next `warm --shmem` removes the entry.
#[test]
fn a_touched_original_makes_its_store_entry_stale() {
    let (_d, prog) = private_copy("bfd", &["nopie"]);
    let store = common::TextStore::new();
    store.add(&prog);
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&prog)
        .unwrap()
        .set_modified(t)
        .unwrap();
    let dir = store.dir.to_str().unwrap();
    let r = common::run_waiting(&["--strategy", "shmem", "--store", dir, "-v"], &prog);
    assert_eq!(
        common::store_text(r.pid(), &store.dir),
        (0, 0, 0),
        "a stale copy was mapped"
    );
    let err = stop(r);
    assert!(err.contains("would share"), "{err}");
    let listed = common::text(&store.warm(&["--list"]).stdout);
    assert!(listed.contains("stale"), "{listed}");
    let again = store.add(&prog);
    assert!(again.contains("removed stale entry"), "{again}");
    let listed = common::text(&store.warm(&["--list"]).stdout);
    assert!(!listed.contains("stale") && listed.contains("valid"), "{listed}");
    // --drop empties it.
    let o = store.warm(&["--drop"]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    let listed = common::text(&store.warm(&["--list"]).stdout);
    assert!(listed.contains("no entries"), "{listed}");
}

/// `check` names a file's stale copy in the store (never used, still
/// holding memory) and what drops it; after `warm --shmem` it says nothing.
#[test]
fn check_names_a_stale_store_entry() {
    let (_d, prog) = private_copy("bfd", &["nopie"]);
    let store = common::TextStore::new();
    store.add(&prog);
    let dir = store.dir.to_str().unwrap();
    let p = prog.to_str().unwrap();
    let o = common::hugetext(&["check", "--store", dir, p]);
    assert_eq!(o.status.code(), Some(0));
    let err = common::text(&o.stderr);
    assert!(!err.contains("stale"), "a valid entry was called stale: {err}");
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&prog)
        .unwrap()
        .set_modified(t)
        .unwrap();
    let o = common::hugetext(&["check", "--store", dir, p]);
    assert_eq!(o.status.code(), Some(0), "a stale entry is a warning");
    let err = common::text(&o.stderr);
    let listed: serde_json::Value = serde_json::from_slice(&store.warm(&["--list", "--json"]).stdout).unwrap();
    let entry = listed["entries"][0]["name"].as_str().unwrap();
    assert!(err.contains("stale") && err.contains("warm --shmem"), "{err}");
    assert!(err.contains(entry), "the entry is not named: {err}\n{listed}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // `warm --shmem` drops it (and stores the file anew): nothing to say.
    let again = store.add(&prog);
    assert!(again.contains("removed stale entry"), "{again}");
    let err = common::text(&common::hugetext(&["check", "--store", dir, p]).stderr);
    assert!(!err.contains("stale"), "{err}");
}

/// A PIE whose load base is not 2 MiB-aligned cannot be shared from a
/// copy: refused, naming `hugetext align` (exit status 3).
#[test]
fn an_unaligned_pie_is_not_stored() {
    let (_d, prog) = private_copy("bfd", &["pie"]);
    let store = common::TextStore::new();
    let o = store.warm(&[prog.to_str().unwrap()]);
    let err = common::text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("not stored") && err.contains("hugetext align"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Where the page cache has no 2 MiB folios (btrfs here: its `st_dev` is
/// also not the device maps shows), the store still gives shared huge
/// text: `--strategy shmem` maps every whole window from it, and `auto`
/// makes the text huge without a private copy.
#[test]
fn shmem_route_on_a_filesystem_without_large_folios() {
    let Some(fs) = common::loop_fs("btrfs") else { return };
    let prog = fs.path().join("nopie");
    std::fs::copy(common::fixture("bfd", "nopie"), &prog).unwrap();
    std::fs::File::open(&prog).unwrap().sync_all().unwrap();
    let store = common::TextStore::new();
    store.add(&prog);
    let want = common::text_window_bytes(&prog);
    let dir = store.dir.to_str().unwrap();
    let r = common::run_waiting(&["--strategy", "shmem", "--store", dir], &prog);
    assert_eq!(common::store_text(r.pid(), &store.dir).0, want);
    stop(r);
    let r = common::run_waiting_recorded(None, &["--store", dir], &prog);
    let err = stop(r);
    let rec = common::start_record(&err);
    assert_eq!(rec["huge"], rec["windows"], "{err}");
    assert_eq!(rec["copy"], 0, "auto copied where the store shares: {err}");
}

/// `--inherit`: child processes keep the preload and its settings, so each
/// maps its text from the same store copy (`HUGETEXT_STORE` is inherited).
#[test]
fn inherited_children_take_the_shmem_route_too() {
    let (_d, prog) = private_copy("bfd", &["nopie"]);
    let store = common::TextStore::new();
    store.add(&prog);
    let want = common::text_window_bytes(&prog);
    common::preload();
    let p = prog.to_str().unwrap();
    let out = common::output_without_perf_map(
        Command::new(common::bin())
            .args(["run", "--inherit", "--strategy", "shmem", "--store"])
            .arg(&store.dir)
            .args(["--", "sh", "-c", &format!("{p} && {p}")])
            .env(hugetext_abi::settings::REPORT, "json")
            .env_remove("HUGETEXT_STRATEGY"),
    );
    let err = common::text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let children: Vec<_> = common::records(&err)
        .into_iter()
        .filter(|r| r["windows"] == want && r["late"] == 0)
        .collect();
    assert_eq!(children.len(), 2, "{err}");
    for r in children {
        assert_eq!(r["shmem"], want, "{err}");
    }
}
