//! Benchmark: `hugetext warm FILES` against evicting the same files and
//! reading them with `cat FILES > /dev/null`, the cheapest way to fill a page
//! cache from user space.
//!
//! Both start from the same state: the files evicted (cold). Runs are
//! interleaved (A B A B ...) so drift in the machine hits both alike; the
//! report gives medians and the ratio warm/cat, and checks that every
//! eligible 2 MiB window ends up in a PMD folio after `warm`.
//!
//! ```sh
//! cargo bench -p hugetext-cli --bench warm            # 4 x 96 MiB, 9 rounds
//! HUGETEXT_BENCH_MIB=1024 HUGETEXT_BENCH_ROUNDS=15 cargo bench -p hugetext-cli --bench warm
//! HUGETEXT_BENCH_PATHS=/usr/lib/x/libLLVM.so:/usr/bin/clang cargo bench -p hugetext-cli --bench warm
//! ```
//! With real ELF files `warm` reads only their read-only segments while
//! `cat` reads everything, so compare on plain files for like with like.
//! Needs root (folio sizes come from /proc/kpageflags) and a filesystem with
//! large folios for the target directory (ext4 ≥ 6.16, xfs).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn evict(files: &[PathBuf]) {
    for p in files {
        let f = File::open(p).unwrap();
        hugetext::pagecache::evict(&f, 0..0).unwrap();
    }
}

fn main() {
    // `cargo bench` passes --bench; ignore arguments.
    let total_mib = env_u64("HUGETEXT_BENCH_MIB", 384);
    let rounds = env_u64("HUGETEXT_BENCH_ROUNDS", 9) as usize;
    let nfiles = env_u64("HUGETEXT_BENCH_FILES", 4).max(1);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_hugetext"));
    let dir = bin.parent().unwrap().join("../bench-warm");
    std::fs::create_dir_all(&dir).unwrap();
    let per = total_mib / nfiles;
    let mut files = Vec::new();
    for i in 0..nfiles {
        let p = dir.join(format!("f{i}.bin"));
        if std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0) != per << 20 {
            let mut f = File::create(&p).unwrap();
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ i;
            let mut block = vec![0u8; 1 << 20];
            for _ in 0..per {
                for c in block.chunks_exact_mut(8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    c.copy_from_slice(&x.to_le_bytes());
                }
                f.write_all(&block).unwrap();
            }
            f.sync_all().unwrap();
        }
        files.push(p);
    }
    // Or real files (e.g. big shared libraries): HUGETEXT_BENCH_PATHS=a:b:c.
    if let Ok(list) = std::env::var("HUGETEXT_BENCH_PATHS") {
        files = list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect();
    }
    let names: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let cat_cmd = format!(
        "cat {} > /dev/null",
        names
            .iter()
            .map(|p| format!("'{}'", p.display()))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let bytes: u64 = files.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    println!(
        "warm vs evict+cat: {} files, {:.0} MiB total, {rounds} rounds (interleaved)",
        files.len(),
        bytes as f64 / (1 << 20) as f64
    );

    let mut t_cat = Vec::new();
    let mut t_warm = Vec::new();
    let mut pmd_ok = true;
    for round in 0..rounds {
        for which in if round % 2 == 0 {
            ["cat", "warm"]
        } else {
            ["warm", "cat"]
        } {
            evict(&files);
            let t = Instant::now();
            if which == "cat" {
                evict(&files);
                let st = Command::new("sh").arg("-c").arg(&cat_cmd).status().unwrap();
                assert!(st.success());
                t_cat.push(t.elapsed().as_secs_f64() * 1e3);
            } else {
                let out = Command::new(&bin)
                    .arg("warm")
                    .arg("--json")
                    .args(&files)
                    .output()
                    .unwrap();
                let el = t.elapsed().as_secs_f64() * 1e3;
                assert!(
                    out.status.success(),
                    "warm failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                t_warm.push(el);
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                for f in v["files"].as_array().unwrap() {
                    if f["unit_windows"] != f["eligible_windows"] {
                        pmd_ok = false;
                        eprintln!(
                            "round {round}: {} has {}/{} PMD windows",
                            f["path"], f["unit_windows"], f["eligible_windows"]
                        );
                    }
                }
            }
        }
    }
    // Independent check of the last warm: the page cache as it is now.
    evict(&files);
    let st = Command::new(&bin).arg("warm").args(&files).output().unwrap();
    assert!(st.status.success());
    let (mut pmd, mut all) = (0, 0);
    for p in &files {
        let s = hugetext::folio::scan_file(p, None).unwrap();
        pmd += s.unit_windows.len() as u64;
        all += s.total_windows;
    }
    let mc = median(&mut t_cat.clone());
    let mw = median(&mut t_warm.clone());
    println!(
        "evict+cat : median {mc:8.1} ms  (runs: {:?})",
        t_cat.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    println!(
        "warm      : median {mw:8.1} ms  (runs: {:?})",
        t_warm.iter().map(|x| x.round()).collect::<Vec<_>>()
    );
    println!("ratio warm/cat: {:.2}  (target <= 1.25, aim <= 1.0)", mw / mc);
    println!(
        "PMD windows after warm: {pmd}/{all} ({:.1}%), every round 100%: {pmd_ok}",
        100.0 * pmd as f64 / all.max(1) as f64
    );
}
