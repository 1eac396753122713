//! CPU cost of one `hugetext agent` scrape ([`hugetext::agent::scrape`]) per
//! 100 processes.
//!
//! Measures the scrape's CPU time (this thread's user + system time) with
//! the processes the machine runs now, then with N more (`/bin/sleep`, each
//! mapping its text, libc and ld.so), and reports the cost of the extra
//! processes per 100. Goal: ≤ 10 ms per 100 processes.
//!
//! Run: `cargo bench -p hugetext --bench agent` (root, for folio sizes).
//! Environment: HUGETEXT_BENCH_PROCS (default 200), HUGETEXT_BENCH_REPS
//! (default 20).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hugetext::agent::{scrape, AgentMetrics, ScrapeInput};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// CPU time of this thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Median CPU time of `reps` scrapes, and the number of processes in the last page.
fn measure(reps: usize, folio_sizes: bool) -> (Duration, u64) {
    let m = AgentMetrics::default();
    let input = ScrapeInput {
        policy_files: Vec::new(),
        max_series: 100_000,
        folio_sizes,
        workloads: Vec::new(),
        shortfalls: Default::default(),
        store: hugetext::shmemstore::DEFAULT_ROOT.into(),
    };
    let mut v = Vec::new();
    let mut procs = 0;
    for _ in 0..reps {
        let t = thread_cpu();
        let page = scrape(&m, &input).unwrap();
        v.push(thread_cpu() - t);
        procs = page
            .lines()
            .filter(|l| l.starts_with("hugetext_cgroup_processes{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
    }
    v.sort();
    (v[v.len() / 2], procs)
}

fn main() {
    let n = env("HUGETEXT_BENCH_PROCS", 200);
    let reps = env("HUGETEXT_BENCH_REPS", 20);
    let method = hugetext::inspect::Method::detect();
    let (base, base_procs) = measure(reps, true);
    let (sbase, _) = measure(reps, false);
    let mut kids: Vec<Child> = (0..n)
        .map(|_| {
            Command::new("/bin/sleep")
                .arg("3600")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sleep")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (with, with_procs) = measure(reps, true);
    let (swith, _) = measure(reps, false);
    for k in &mut kids {
        let _ = k.kill();
        let _ = k.wait();
    }
    let extra = with_procs.saturating_sub(base_procs).max(1);
    let per100 = (with.saturating_sub(base)).as_secs_f64() * 1e3 * 100.0 / extra as f64;
    let per100_all = with.as_secs_f64() * 1e3 * 100.0 / with_procs.max(1) as f64;
    println!("agent scrape CPU time, median of {reps} ({method:?}):");
    println!("  {base_procs} processes: {:.2} ms", base.as_secs_f64() * 1e3);
    println!("  {with_procs} processes: {:.2} ms", with.as_secs_f64() * 1e3);
    println!("  per 100 added processes: {per100:.2} ms (goal <= 10 ms)");
    println!("  per 100 processes overall: {per100_all:.2} ms");
    let sper100 = (swith.saturating_sub(sbase)).as_secs_f64() * 1e3 * 100.0 / extra as f64;
    println!(
        "  folio_sizes = false (smaps only): {:.2} ms, {:.2} ms; per 100 added processes: {sper100:.2} ms",
        sbase.as_secs_f64() * 1e3,
        swith.as_secs_f64() * 1e3
    );
}
