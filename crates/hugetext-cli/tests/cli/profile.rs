//! `hugetext profile`: sampling a command and a running process, the exact
//! mode under qemu-user with its iTLB model checked against misses computed
//! by hand, the profile file and its hot windows, and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::json_of;
use hugetext_testkit as common;
use serde_json::Value;

/// Random (or sequential) calls to 2048 stubs, each a `ret` alone on its
/// 4 KiB page, in a 2 MiB-aligned block of 4 windows; linked with 2 MiB
/// max-page-size so the block is congruent.
/// `randcall CALLS [sequential]`, or `randcall 0 spin SECONDS`.
const RANDCALL: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define N 2048
extern char stubs_begin[];
__asm__(".text\n.p2align 21\n.globl stubs_begin\nstubs_begin:\n"
        ".rept 2048\nret\n.p2align 12, 0xcc\n.endr\n");
int main(int argc, char **argv) {
    unsigned long calls = argc > 1 ? strtoul(argv[1], 0, 10) : 200000;
    int seq = argc > 2 && strcmp(argv[2], "sequential") == 0;
    double spin = argc > 3 && strcmp(argv[2], "spin") == 0 ? atof(argv[3]) : 0;
    unsigned long x = 88172645463325252UL;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long i = 0;; i++) {
        if (spin > 0) {
            if ((i & 0xffff) == 0) {
                clock_gettime(CLOCK_MONOTONIC, &t);
                if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > spin)
                    break;
            }
        } else if (i >= calls) {
            break;
        }
        unsigned long k;
        if (seq) {
            k = i % N;
        } else {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            k = x % N;
        }
        ((void (*)(void))(stubs_begin + k * 4096))();
    }
    return 0;
}
"#;

const STUBS: u64 = 2048;

fn randcall() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = common::target_profile_dir().join("profile-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("randcall.c");
        std::fs::write(&src, RANDCALL).unwrap();
        let exe = dir.join("randcall");
        let st = Command::new("gcc")
            .args(["-O2", "-Wl,-z,max-page-size=0x200000", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("gcc (scripts/install-deps.sh)");
        assert!(st.success(), "building randcall failed");
        exe
    })
}

/// The `--json` report of a profiled program: on stderr, all of it.
fn json_of_program(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "hugetext profile failed: {}",
        common::text(&out.stderr)
    );
    serde_json::from_slice(&out.stderr).unwrap_or_else(|e| panic!("{e}: {}", common::text(&out.stderr)))
}

/// The iTLB estimate of the file `path` in an exact run's JSON.
fn itlb_of<'a>(v: &'a Value, path: &Path) -> &'a Value {
    let p = path.to_str().unwrap();
    v["itlb"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == p)
        .unwrap_or_else(|| panic!("no estimate for {p}: {v}"))
}

fn exact(args: &[&str]) -> Value {
    let exe = randcall().to_str().unwrap();
    let mut all = vec!["profile", "--exact", "--json"];
    all.extend_from_slice(&args[..args.len() - 1]);
    all.extend_from_slice(&["--", exe]);
    all.extend(args.last().unwrap().split(' '));
    json_of_program(&common::hugetext(&all))
}

/// The hand computation: 2048 stub pages spread evenly over the sets, called
/// uniformly at random; the caller's page, touched between any two calls,
/// keeps one way of its set. Under LRU a uniformly random reference hits
/// with probability ways/pages of its set, so per call:
/// - Skylake (4 KiB L1 iTLB 16 sets × 8 ways; STLB 128 × 12): L1 misses
///   1 - (15·8 + 7)/2048 = 1921/2048; walks 1 - (127·12 + 11)/2048 = 513/2048;
/// - Zen 4 (L1 64 fully associative; L2 64 × 8): L1 1 - 63/2048; walks
///   1 - 8/32 (the caller's page stays in the L1 and leaves the L2 alone);
/// - Neoverse V2 (L1 48 fully associative; L2 256 × 8): L1 1 - 47/2048; the
///   L2 holds all 2048 pages: 2048 walks in all, the first touches.
///
/// The second level sees only the L1's misses, which the formula ignores:
/// 3% tolerance there; the L1 formula is exact up to the binomial noise of
/// 200,000 calls (sd < 0.1%) and start-up code: 1%. With the 4 windows on
/// 2 MiB pages, every core's L1 holds them all: only first touches miss.
#[test]
fn exact_model_matches_misses_computed_by_hand_for_random_calls() {
    let calls = 200_000u64;
    let c = calls as f64;
    for (model, l1_rate, walks) in [
        ("skylake", 1921.0 / 2048.0, c * 513.0 / 2048.0),
        ("zen4", 1985.0 / 2048.0, c * 0.75),
        ("neoverse-v2", 2001.0 / 2048.0, STUBS as f64),
    ] {
        let v = exact(&["--itlb", model, &calls.to_string()]);
        assert_eq!(v["itlb"]["model"], model);
        let f = itlb_of(&v, randcall());
        let got_l1 = f["small"]["l1"].as_u64().unwrap() as f64;
        let got_walks = f["small"]["walks"].as_u64().unwrap() as f64;
        let want_l1 = c * l1_rate;
        assert!(
            (got_l1 / want_l1 - 1.0).abs() < 0.01,
            "{model}: L1 misses {got_l1}, by hand {want_l1:.0}"
        );
        assert!(
            (got_walks / walks - 1.0).abs() < 0.03,
            "{model}: walks {got_walks}, by hand {walks:.0}"
        );
        let huge = f["huge"]["l1"].as_u64().unwrap();
        assert!(
            huge <= 4 + 8,
            "{model}: {huge} misses with 2 MiB pages, want the 4 windows' first touches (+ start-up)"
        );
        // Instructions: every call runs the stub's one `ret`, plus the loop.
        let n = f["instructions"].as_u64().unwrap();
        assert!(n > calls * 5, "{n} instructions for {calls} calls");
    }
}

/// Sequential calls cycle through 2048 pages: more than any L1 holds in a
/// set, so under LRU every call misses the L1: exactly `calls` misses (plus a
/// handful at start-up). Skylake's STLB (1536) and Zen 4's L2 iTLB (512) are
/// smaller than the cycle too: every call walks. Neoverse V2's L2 TLB holds
/// 2048 entries, 8 per set, exactly the cycle: only the first lap walks (the
/// caller's page stays in the L1 and never reaches the L2 again).
#[test]
fn exact_model_misses_every_call_of_a_cycle_larger_than_the_tlbs() {
    let calls = 100_000u64;
    for (model, walks) in [("skylake", calls), ("zen4", calls), ("neoverse-v2", STUBS)] {
        let v = exact(&["--itlb", model, &format!("{calls} sequential")]);
        assert_eq!(v["itlb"]["model"], model);
        let f = itlb_of(&v, randcall());
        for (k, want) in [("l1", calls), ("walks", walks)] {
            let m = f["small"][k].as_u64().unwrap();
            assert!(
                (want..want + 16).contains(&m),
                "{model}: {k} {m}, want {want} (+ start-up)"
            );
        }
        let huge = f["huge"]["walks"].as_u64().unwrap();
        assert!(huge <= 12, "{model}: {huge} walks with 2 MiB pages");
    }
}

/// The exact profile counts every instruction: each stub page's count is
/// the number of calls to it, so the stub pages sum to the calls; the run is
/// followed to its end (no note that the profile stops early).
#[test]
fn exact_counts_every_instruction_per_page() {
    let dir = common::scratch();
    let out = dir.path().join("p.json");
    let calls = 50_000u64;
    let o = common::hugetext(&[
        "profile",
        "--exact",
        "-o",
        out.to_str().unwrap(),
        "--",
        randcall().to_str().unwrap(),
        &calls.to_string(),
    ]);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    // The plugin's last record came: the run was followed to its end.
    assert!(!err.contains("stops early"), "{err}");
    assert!(err.contains("iTLB model: Intel Skylake"), "{err}");
    assert_eq!(common::text(&o.stdout), "", "the report is not in the program's stdout");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(
        (p["format"].as_str(), p["version"].as_u64()),
        (Some("hugetext-profile"), Some(1))
    );
    assert_eq!(p["unit"], "instructions");
    let f = file_of(&p, randcall());
    let stubs = stub_pages(randcall());
    let in_stubs: u64 = f["pages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pg| stubs.contains(&pg[0].as_u64().unwrap()))
        .map(|pg| pg[1].as_u64().unwrap())
        .sum();
    assert_eq!(in_stubs, calls);
}

/// File page indexes of the stubs: from the symbol and the segment holding it.
fn stub_pages(exe: &Path) -> std::ops::Range<u64> {
    let off = file_offset_of(exe, "stubs_begin");
    off / 4096..off / 4096 + STUBS
}

/// The file offset of symbol NAME in EXE.
fn file_offset_of(exe: &Path, name: &str) -> u64 {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let data = std::fs::read(exe).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let sym = obj.symbols().find(|s| s.name() == Ok(name)).unwrap().address();
    let seg = obj
        .segments()
        .find(|s| s.address() <= sym && sym < s.address() + s.size())
        .unwrap();
    sym - seg.address() + seg.file_range().0
}

fn file_of<'a>(p: &'a Value, path: &Path) -> &'a Value {
    let want = path.to_str().unwrap();
    p["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == want)
        .unwrap_or_else(|| panic!("{want} not in the profile"))
}

fn build_id(path: &Path) -> String {
    use object::Object;
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    obj.build_id()
        .unwrap()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn samples_a_command_and_writes_a_profile_run_can_read() {
    let dir = common::scratch();
    let out = dir.path().join("p.json");
    let svg = dir.path().join("p.svg");
    let o = common::hugetext(&[
        "profile",
        "-o",
        out.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        "--",
        randcall().to_str().unwrap(),
        "0",
        "spin",
        "1",
    ]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    // The program prints nothing: its stdout stays empty, the report is on
    // stderr.
    assert_eq!(common::text(&o.stdout), "");
    let text = common::text(&o.stderr);
    assert!(text.contains("samples (cpu-clock)"), "{text}");
    assert!(text.contains(randcall().to_str().unwrap()), "{text}");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(p["source"], "sampling");
    let f = file_of(&p, randcall());
    assert_eq!(f["build_id"].as_str().unwrap(), build_id(randcall()));
    let n = f["count"].as_u64().unwrap();
    // A second of CPU at 999 Hz, on a shared machine: at least a tenth of it,
    // nearly all in the program (its loop and its stubs).
    assert!(n >= 100, "{n} samples");
    assert!(n as f64 >= 0.9 * p["total"].as_u64().unwrap() as f64, "{p}");
    // The samples are attributed to the windows that run: main's loop and
    // the stubs' 4 windows. How they split between the two is the host's:
    // a timer-interrupt sample lands where the vCPU was interrupted, and on
    // a PMU-less VM that was main's loop for 521 of 522 samples, on others
    // mostly the stubs.
    let stubs = stub_pages(randcall());
    let main_window = file_offset_of(randcall(), "main") / (2 << 20);
    let w = f["windows"].as_array().unwrap();
    let in_stubs: u64 = w
        .iter()
        .filter(|w| (stubs.start..stubs.end).contains(&(w["offset"].as_u64().unwrap() / 4096)))
        .map(|w| w["count"].as_u64().unwrap())
        .sum();
    let in_main: u64 = w
        .iter()
        .filter(|w| w["offset"].as_u64().unwrap() / (2 << 20) == main_window)
        .map(|w| w["count"].as_u64().unwrap())
        .sum();
    assert!(
        (in_stubs + in_main) as f64 >= 0.9 * n as f64,
        "{in_stubs} of {n} samples in the stubs' windows, {in_main} in main's: {p}"
    );
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    // The profile's hot windows, as `run --hot` will ask for them.
    let v = json_of(&common::hugetext(&[
        "profile",
        "--input",
        out.to_str().unwrap(),
        "--hot",
        "99",
        "--json",
    ]));
    let hot = &v["hot"]["files"][0];
    assert_eq!(hot["build_id"].as_str().unwrap(), build_id(randcall()));
    let ranges = hot["ranges"].as_array().unwrap();
    assert!(!ranges.is_empty());
    for r in ranges {
        let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
        assert!(a % common::pmd() == 0 && b % common::pmd() == 0 && b > a, "{r}");
    }
    assert!(hot["count"].as_u64().unwrap() as f64 >= 0.99 * n as f64);
}

#[test]
fn samples_a_running_process_by_pid() {
    let mut child = Command::new(randcall())
        .args(["0", "spin", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let o = common::hugetext(&["profile", "--pid", &pid, "--duration", "1", "--json"]);
    let _ = child.kill();
    let _ = child.wait();
    let v = json_of(&o);
    assert_eq!(v["pid"].as_i64().unwrap().to_string(), pid);
    let f = &v["summary"]["files"][0];
    assert_eq!(f["path"].as_str().unwrap(), randcall().to_str().unwrap());
    assert!(f["count"].as_u64().unwrap() >= 50, "{v}");
    assert!(f["windows_for"][2].as_u64().unwrap() >= 1);
}

#[test]
fn reads_perf_script_output() {
    let dir = common::scratch();
    let data = dir.path().join("perf.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(&data)
        .arg("--")
        .arg(randcall())
        .args(["0", "spin", "0.5"])
        .stderr(Stdio::null())
        .status()
        .expect("perf (linux-perf, scripts/install-deps.sh)");
    assert!(st.success());
    let script = Command::new("perf")
        .args(["script", "--show-mmap-events", "-F", "pid,ip,dso", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let txt = dir.path().join("script.txt");
    std::fs::write(&txt, &script.stdout).unwrap();
    let v = json_of(&common::hugetext(&[
        "profile",
        "--perf-script",
        txt.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["source"], "perf-script");
    let f = &v["summary"]["files"][0];
    assert_eq!(f["path"].as_str().unwrap(), randcall().to_str().unwrap());
    assert_eq!(f["build_id"].as_str().unwrap(), build_id(randcall()));
}

/// One line on stderr, nothing on stdout, exit `code`, and the line says `what`.
fn refused(o: &std::process::Output, code: i32, what: &str) {
    let err = common::text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(what), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    refused(
        &common::hugetext(&["profile", "--pid", "999999999"]),
        1,
        "no process with pid 999999999",
    );
    refused(
        &common::hugetext(&[
            "profile",
            "--exact",
            "--qemu",
            "/nonexistent/qemu-x86_64",
            "--",
            "/bin/true",
        ]),
        1,
        "qemu-user",
    );
    refused(
        &common::hugetext(&["profile", "--", "/nonexistent/program"]),
        127,
        "/nonexistent/program",
    );
    refused(&common::hugetext(&["profile"]), 2, "nothing to profile");
    let dir = common::scratch();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, "hello\n").unwrap();
    refused(
        &common::hugetext(&["profile", "--input", junk.to_str().unwrap()]),
        1,
        "not a hugetext profile",
    );
    refused(
        &common::hugetext(&["profile", "--perf-script", junk.to_str().unwrap()]),
        1,
        "no samples",
    );
}

/// Profiling another user's process is refused (perf_event_open and its
/// maps need ptrace access), in one line.
#[test]
fn another_users_process_is_not_permitted() {
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    let o = common::as_attacker()
        .arg(common::bin())
        .args(["profile", "--pid", &victim.id().to_string(), "--duration", "0.2"])
        .output()
        .unwrap();
    let _ = victim.kill();
    let _ = victim.wait();
    refused(&o, 1, "permission denied");
}

/// Text `run` copied into anonymous huge pages is still the program's: its
/// samples are attributed to the file, at the file offsets it came from.
#[test]
fn samples_in_text_run_copied_are_attributed_to_the_file() {
    let mut child = Command::new(common::bin())
        .args(["run", "--strategy", "copy", "--"])
        .arg(randcall())
        .args(["0", "spin", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let exe = randcall().to_str().unwrap();
    let copied = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        hugetext::run::remap::text_mappings(pid).is_ok_and(|ms| ms.iter().any(|m| m.copied && m.path == exe))
    });
    let o = common::hugetext(&["profile", "--pid", &pid.to_string(), "--duration", "1", "--json"]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(copied, "run did not copy the text of {exe}");
    let v = json_of(&o);
    let s = &v["summary"];
    let f = &s["files"][0];
    assert_eq!(f["path"].as_str().unwrap(), exe, "{v}");
    let (n, total) = (f["count"].as_u64().unwrap(), s["total"].as_u64().unwrap());
    assert!(
        n >= 50 && n as f64 >= 0.9 * total as f64,
        "{n} of {total} samples in {exe}: {v}"
    );
}

/// The profiled program's stdout is exactly what it prints alone: the
/// report (text or `--json`) goes to stderr, or to `--report FILE`, and
/// the JSON parses whole.
#[test]
fn a_profiled_programs_stdout_is_its_own_and_the_json_report_parses() {
    let script = "printf 'known text\\n%s\\n' 'second line'; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done";
    let alone = Command::new("sh").args(["-c", script]).output().unwrap();
    assert_eq!(common::text(&alone.stdout), "known text\nsecond line\n");
    let o = common::hugetext(&["profile", "--json", "--", "sh", "-c", script]);
    assert_eq!(o.stdout, alone.stdout, "{}", common::text(&o.stdout));
    let v = json_of_program(&o);
    assert!(v["summary"].is_object(), "{v}");
    let o = common::hugetext(&["profile", "--", "sh", "-c", script]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    assert_eq!(o.stdout, alone.stdout, "{}", common::text(&o.stdout));
    assert!(common::text(&o.stderr).contains("samples (cpu-clock)"));
    let dir = common::scratch();
    let report = dir.path().join("report.json");
    let o = common::hugetext(&[
        "profile",
        "--json",
        "--report",
        report.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    assert_eq!(o.stdout, alone.stdout);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(v["summary"].is_object(), "{v}");
}

/// A process kept spinning for a test; killed and reaped when dropped.
struct Spinner(std::process::Child);

impl Spinner {
    fn start(exe: &Path) -> Spinner {
        let c = Command::new(exe)
            .args(["0", "spin", "60"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Spinner(c)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--pid` repeated: one profile of all the processes named, each file's
/// samples summed.
#[test]
fn several_pids_are_sampled_into_one_profile() {
    let dir = common::scratch();
    let other = dir.path().canonicalize().unwrap().join("randcall-b");
    std::fs::copy(randcall(), &other).unwrap();
    let (a, b) = (Spinner::start(randcall()), Spinner::start(&other));
    let o = common::hugetext(&[
        "profile",
        "--pid",
        &a.pid(),
        "--pid",
        &b.pid(),
        "--duration",
        "2",
        "--json",
    ]);
    drop((a, b));
    let v = json_of(&o);
    assert_eq!(v["pids"].as_array().map(|p| p.len()), Some(2), "{v}");
    for exe in [randcall(), other.as_path()] {
        let f = v["summary"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == exe.to_str().unwrap())
            .unwrap_or_else(|| panic!("no samples in {}: {v}", exe.display()));
        // Two seconds of a spinning process at 999 Hz, on a loaded machine:
        // a tenth of it at least.
        assert!(f["count"].as_u64().unwrap() >= 100, "{v}");
    }
    assert!(v["per_pid"].is_null(), "no per-pid tables unless asked: {v}");
}

/// `--per-pid`: each process's own table besides the summed one; each
/// holds its own program's samples only.
#[test]
fn per_pid_gives_each_process_its_own_table() {
    let dir = common::scratch();
    let other = dir.path().canonicalize().unwrap().join("randcall-c");
    std::fs::copy(randcall(), &other).unwrap();
    let (a, b) = (Spinner::start(randcall()), Spinner::start(&other));
    let (pa, pb) = (a.pid(), b.pid());
    let args = ["profile", "--pid", &pa, "--pid", &pb, "--duration", "2", "--per-pid"];
    let v = json_of(&common::hugetext(&[&args[..], &["--json"]].concat()));
    let text = common::hugetext(&args);
    drop((a, b));
    let per = v["per_pid"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(per.len(), 2, "{v}");
    for p in per {
        let exe = if p["pid"].as_i64().map(|n| n.to_string()) == Some(pa.clone()) {
            randcall()
        } else {
            other.as_path()
        };
        let files = p["summary"]["files"].as_array().unwrap();
        assert_eq!(files[0]["path"], exe.to_str().unwrap(), "{p}");
        assert!(files[0]["count"].as_u64().unwrap() >= 100, "{p}");
        let theirs = if exe == randcall() { other.as_path() } else { randcall() };
        assert!(!files.iter().any(|f| f["path"] == theirs.to_str().unwrap()), "{p}");
    }
    let out = common::text(&text.stdout);
    assert_eq!(out.matches("samples (cpu-clock)").count(), 3, "{out}");
}

/// A process that uses no CPU time during the window gives no samples,
/// and the report says so (text: a note on stderr; JSON: in `notes`).
#[test]
fn an_idle_process_gives_no_samples_and_says_why() {
    let mut idle = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = idle.id().to_string();
    let o = common::hugetext(&["profile", "--pid", &pid, "--duration", "1"]);
    let v = json_of(&common::hugetext(&[
        "profile",
        "--pid",
        &pid,
        "--duration",
        "1",
        "--json",
    ]));
    let _ = idle.kill();
    let _ = idle.wait();
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let want = format!("pid {pid}: no samples: it used no CPU time during the 1.0 s window");
    assert!(err.contains(&want), "{err}");
    assert!(
        v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains(&want)),
        "{v}"
    );
}

/// The fixture `usebig` runs code spread over libbig.so's 20 MiB of text,
/// which thrashes the modelled 4 KiB iTLBs; libc and the loader have no
/// whole window, yet miss less in the huge model (libbig.so on 2 MiB pages
/// leaves them the TLB entries): those rows are marked, with a note.
#[test]
fn files_that_gain_only_from_other_files_huge_text_are_marked() {
    let usebig = common::fixture("lld", "usebig").canonicalize().unwrap();
    let libbig = usebig.with_file_name("libbig.so");
    let exe = usebig.to_str().unwrap();
    let v = json_of_program(&common::hugetext(&["profile", "--exact", "--json", "--", exe]));
    assert_eq!(itlb_of(&v, &libbig)["own_huge"], true, "{v}");
    let files = v["itlb"]["files"].as_array().unwrap();
    let marked: Vec<&str> = files
        .iter()
        .filter(|f| f["own_huge"] == false && f["huge_cycles"].as_u64() < f["small_cycles"].as_u64())
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(!marked.is_empty(), "no file gains only from the others: {v}");
    let o = common::hugetext(&["profile", "--exact", "--", exe]);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    for m in &marked {
        assert!(err.contains(&format!("{m} *")), "{m} not marked: {err}");
    }
    assert!(err.contains("* no whole 2 MiB window of its own"), "{err}");
    assert!(!err.contains(&format!("{} *", libbig.display())), "{err}");
}
