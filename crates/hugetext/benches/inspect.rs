//! Speed of `inspect --all --rollup` against the physical floor.
//!
//! A target process maps ≥ 4 GiB: anonymous THP (MADV_HUGEPAGE, touched), a
//! 512 MiB file PMD-mapped through the page cache, and 64 MiB of file text
//! faulted through PROT_EXEC (small folios). The floor is the cost of just
//! reading that process's pagemap (one pread per mapping) and the matching
//! kpageflags entries (one pread per physically contiguous run), which any
//! pagemap-based tool must at least do; the target is ≤ 2× the floor.
//!
//! Run: `cargo bench -p hugetext --bench inspect` (root). Environment:
//! HUGETEXT_BENCH_ANON_MIB (default 3584), HUGETEXT_BENCH_REPS (default 7).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hugetext::folio::{self, Kind};
use hugetext::inspect::{self, Method, Options, Target};
use hugetext::kernel::{self, Mapping};
use hugetext::{pagecache, procfs};

const MIB: usize = 1 << 20;

fn scratch(name: &str, mib: usize) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-inspect");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let ok = std::fs::metadata(&p)
        .map(|m| m.len() == (mib * MIB) as u64)
        .unwrap_or(false);
    if !ok {
        let mut f = File::create(&p).unwrap();
        let block = vec![0xc3u8; MIB];
        for _ in 0..mib {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
    }
    p
}

/// The target process: set up the mappings, say "ready", wait for stdin.
fn target() {
    let anon_mib: usize = std::env::var("HUGETEXT_BENCH_ANON_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3584);
    let pmd = kernel::pmd_size();
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    let anon = Mapping::anon_aligned(anon_mib * MIB, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
    anon.madvise(0, anon.len(), kernel::MADV_HUGEPAGE).unwrap();
    for i in (0..anon.len()).step_by(4096) {
        // SAFETY: i is inside the writable mapping anon.
        unsafe { anon.as_ptr().add(i).write_volatile(1) };
    }
    let big = scratch("pmd-text", 512);
    let bf = File::open(&big).unwrap();
    pagecache::evict(&bf, 0..0).unwrap();
    pagecache::fill_huge(&bf, 0..(512 * MIB) as u64).unwrap();
    let bm = Mapping::file_congruent(bf.as_fd(), 0, 512 * MIB, rx, pmd).unwrap();
    bm.madvise(0, bm.len(), kernel::MADV_POPULATE_READ).unwrap();
    let small = scratch("small-text", 64);
    let sf = File::open(&small).unwrap();
    pagecache::evict(&sf, 0..0).unwrap();
    let sm = Mapping::file_congruent(sf.as_fd(), 0, 64 * MIB, rx, pmd).unwrap();
    sm.madvise(0, sm.len(), kernel::MADV_POPULATE_READ).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut s = String::new();
    let _ = std::io::stdin().read_line(&mut s);
}

/// The floor: every mapping's pagemap in one pread each, then kpageflags in
/// one pread per physically contiguous run of present pages.
fn floor(pid: i32) -> (Duration, u64) {
    let t = Instant::now();
    let vmas = procfs::read_maps(Some(pid)).unwrap();
    let pm = File::open(format!("/proc/{pid}/pagemap")).unwrap();
    let kpf = File::open("/proc/kpageflags").unwrap();
    let ps = kernel::page_size() as u64;
    let mut buf = Vec::new();
    let mut flags = Vec::new();
    let mut present = 0u64;
    for v in vmas.iter().filter(|v| !v.is_vsyscall()) {
        let n = ((v.end - v.start) / ps) as usize;
        buf.clear();
        buf.resize(n, 0u64);
        folio::read_words_into(&pm, v.start / ps * 8, &mut buf).unwrap();
        for (i, j, pfn) in folio::pfn_runs(&buf) {
            flags.clear();
            flags.resize(j - i, 0u64);
            folio::read_words_into(&kpf, pfn * 8, &mut flags).unwrap();
            present += (j - i) as u64;
        }
    }
    (t.elapsed(), present * ps / 1024)
}

fn inspect_once(pid: i32, method: Method) -> (Duration, u64) {
    let opts = Options {
        target: Target::Pids(vec![pid]),
        all: true,
        cont_orders: vec![],
        mappings: false,
        method: Some(method),
    };
    let t = Instant::now();
    let r = inspect::inspect(&opts, &()).unwrap();
    let d = t.elapsed();
    let kb = (r.total.total(Kind::File) + r.total.total(Kind::Anon)) * kernel::page_size() as u64 / 1024;
    (d, kb)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::var_os("HUGETEXT_BENCH_TARGET").is_some() {
        return target();
    }
    if !kernel::pfn_access() {
        eprintln!("bench inspect: needs root (CAP_SYS_ADMIN) to read PFNs; skipped");
        return;
    }
    let reps: usize = std::env::var("HUGETEXT_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("HUGETEXT_BENCH_TARGET", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.map(|l| l == "ready").unwrap_or(false)),
        "target failed to start"
    );
    let pid = child.id() as i32;
    let smaps = procfs::read_smaps(Some(pid)).unwrap();
    let rss: u64 = smaps.iter().map(|(_, s)| s.rss_kb).sum();
    let anon_huge: u64 = smaps.iter().map(|(_, s)| s.anon_huge_kb).sum();
    let file_pmd: u64 = smaps.iter().map(|(_, s)| s.file_pmd_kb).sum();
    println!(
        "target pid {pid}: Rss {} MiB (AnonHugePages {} MiB, FilePmdMapped {} MiB)",
        rss >> 10,
        anon_huge >> 10,
        file_pmd >> 10
    );

    // Warm up caches and check both see the same memory.
    let (_, floor_kb) = floor(pid);
    let (_, scan_kb) = inspect_once(pid, Method::PagemapScan);
    println!(
        "floor read {} MiB present; inspect classified {} MiB",
        floor_kb >> 10,
        scan_kb >> 10
    );

    let mut f = Vec::new();
    let mut s = Vec::new();
    let mut m = Vec::new();
    for _ in 0..reps {
        f.push(floor(pid).0);
        if kernel::pagemap_scan_supported() {
            s.push(inspect_once(pid, Method::PagemapScan).0);
        }
        m.push(inspect_once(pid, Method::PagemapSmaps).0);
    }
    let fl = median(f);
    println!(
        "floor (pagemap + kpageflags reads):      {:9.2} ms",
        fl.as_secs_f64() * 1e3
    );
    if !s.is_empty() {
        let d = median(s);
        println!(
            "inspect --all --rollup (PAGEMAP_SCAN):   {:9.2} ms  = {:.2}x floor",
            d.as_secs_f64() * 1e3,
            d.as_secs_f64() / fl.as_secs_f64()
        );
    }
    let d = median(m);
    println!(
        "inspect --all --rollup (smaps fallback): {:9.2} ms  = {:.2}x floor",
        d.as_secs_f64() * 1e3,
        d.as_secs_f64() / fl.as_secs_f64()
    );
    drop(child.stdin.take());
    let _ = child.wait();
}
