//! Benchmark of `hugetext run` on programs whose big text is loaded after
//! start (`dlopen`): python3 + numpy (OpenBLAS) and java (libjvm.so), and
//! what following `dlopen` (`LD_AUDIT`) costs a program that loads nothing.
//!
//! ```sh
//! cargo build --release
//! cargo run --release -p hugetext-cli --example run_late -- 20
//! ```
//!
//! Per workload, each round runs three sides in a rotating order: `plain`
//! (no hugetext), `start` (`hugetext run --no-dlopen`: only what is mapped
//! before `main`) and `late` (`hugetext run`: also what is loaded later).
//! Reported per pair of sides: the median of per-round ratios of wall time
//! and of user+sys CPU time with a bootstrap 95% interval
//! (`hugetext::bench::stats::paired_ratio`), and the verdict the interval
//! supports. A benchmark, not a test: it asserts only that every run
//! succeeded and printed the same as the plain run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use hugetext::bench::stats::paired_ratio;

fn children_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Wall and CPU seconds of one run, and its stdout.
fn once(argv: &[String]) -> (f64, f64, String) {
    let c0 = children_cpu_s();
    let t0 = Instant::now();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait");
    let wall = t0.elapsed().as_secs_f64();
    let cpu = children_cpu_s() - c0;
    assert!(o.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&o.stderr));
    // `run` execs the program: same pid. Copied text leaves a perf map.
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    (wall, cpu, String::from_utf8_lossy(&o.stdout).into_owned())
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("target/release/hugetext");
    let py = Command::new("python3")
        .args(["-c", "import sys, numpy; print(sys.executable)"])
        .output()
        .expect("python3");
    let py = String::from_utf8_lossy(&py.stdout).trim().to_string();
    let blas = root.join("crates/hugetext-cli/tests/late/blas.py");
    let jdir = std::env::temp_dir().join("hugetext-run-late");
    std::fs::create_dir_all(&jdir).unwrap();
    let st = Command::new("javac")
        .arg("-d")
        .arg(&jdir)
        .arg(root.join("crates/hugetext-cli/tests/late/Work.java"))
        .status()
        .expect("javac");
    assert!(st.success());
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let small = root.join("target/fixtures/bfd/small");
    let workloads: Vec<(&str, Vec<String>)> = vec![
        ("small C program (start-up)", vec![s(&small)]),
        (
            "python3 -c pass (start-up)",
            vec![py.clone(), "-c".into(), "pass".into()],
        ),
        ("python3 + numpy, BLAS loop", vec![py.clone(), s(&blas), "40".into()]),
        (
            "java Work 400000",
            vec!["java".into(), "-cp".into(), s(&jdir), "Work".into(), "400000".into()],
        ),
    ];
    println!("{n} rounds per workload, sides in rotating order; ratios: median of per-round ratios [95% CI]");
    for (name, argv) in &workloads {
        let sides: [Vec<String>; 3] = [
            argv.clone(),
            [s(&bin), "run".into(), "--no-dlopen".into(), "--".into()]
                .into_iter()
                .chain(argv.iter().cloned())
                .collect(),
            [s(&bin), "run".into(), "--".into()]
                .into_iter()
                .chain(argv.iter().cloned())
                .collect(),
        ];
        let expect = once(&sides[0]).2; // warm-up, and the output to match
        for side in &sides[1..] {
            assert_eq!(once(side).2, expect, "{side:?} prints something else");
        }
        let mut wall = [vec![], vec![], vec![]];
        let mut cpu = [vec![], vec![], vec![]];
        for r in 0..n {
            for k in 0..3 {
                let i = (r + k) % 3;
                let (w, c, _) = once(&sides[i]);
                wall[i].push(w);
                cpu[i].push(c);
            }
        }
        let med = |v: &[f64]| hugetext::bench::stats::median(v) * 1000.0;
        println!(
            "\n{name}: median wall ms plain {:.1}, start {:.1}, late {:.1}; cpu ms {:.1} / {:.1} / {:.1}",
            med(&wall[0]),
            med(&wall[1]),
            med(&wall[2]),
            med(&cpu[0]),
            med(&cpu[1]),
            med(&cpu[2])
        );
        for (a, b, what) in [
            (0, 2, "late vs plain"),
            (1, 2, "late vs start"),
            (0, 1, "start vs plain"),
        ] {
            let w = paired_ratio(&wall[a], &wall[b], 7, true);
            let c = paired_ratio(&cpu[a], &cpu[b], 7, true);
            println!(
                "  {what:15} wall {}  cpu {}",
                w.verdict_line(what.split(' ').next().unwrap()),
                c.display()
            );
        }
    }
}
