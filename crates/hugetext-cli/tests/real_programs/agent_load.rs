//! Load on `hugetext agent` over loopback: 50 scrapes/s for 60 s with 200
//! extra processes running. No scrape may fail, RSS may not grow beyond 10%
//! after warm-up; p50/p99 latency are printed. Ignored in the normal suite
//! (it takes a minute and a CPU):
//!
//!   cargo test --release -p hugetext-cli --test real_programs agent_load:: -- --ignored --nocapture
//!
//! HUGETEXT_LOAD_SECS, HUGETEXT_LOAD_RATE, HUGETEXT_LOAD_PROCS change the
//! duration, the scrape rate and the number of processes.

use common::status_kb;
use hugetext_testkit as common;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn rss_kb(pid: u32) -> u64 {
    status_kb(pid as i32, "VmRSS")
}

struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

#[test]
#[ignore = "a minute of load: run with --ignored"]
fn fifty_scrapes_a_second_for_a_minute_with_200_processes() {
    let secs = env("HUGETEXT_LOAD_SECS", 60);
    let rate = env("HUGETEXT_LOAD_RATE", 50);
    let nprocs = env("HUGETEXT_LOAD_PROCS", 200);
    let _kids = Kids(
        (0..nprocs)
            .map(|_| {
                Command::new("/bin/sleep")
                    .arg("3600")
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut agent = Command::new(common::bin())
        .args(["agent", "--listen", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let http: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let t = Instant::now();
    while http.get(format!("http://{addr}/healthz")).call().is_err() {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(50));
    }

    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let total = secs * rate;
    // Enough clients that slow pages do not lower the offered rate.
    let workers = 64u64;
    let lat = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now() + Duration::from_millis(100);
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (lat, failed, http, addr) = (lat.clone(), failed.clone(), http.clone(), addr.clone());
            std::thread::spawn(move || {
                let mut k = w;
                while k < total {
                    let at = start + period * k as u32;
                    if let Some(d) = at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                    let t = Instant::now();
                    let r = http
                        .get(format!("http://{addr}/metrics"))
                        .header("Accept", "application/openmetrics-text")
                        .call();
                    let ok = match r {
                        Ok(mut r) => {
                            let status = r.status().as_u16();
                            let body = r.body_mut().read_to_string().unwrap_or_default();
                            status == 200 && body.ends_with("# EOF\n")
                        }
                        Err(_) => false,
                    };
                    let d = t.elapsed();
                    if ok {
                        lat.lock().unwrap().push(d);
                    } else {
                        failed.lock().unwrap().push(k);
                    }
                    k += workers;
                }
            })
        })
        .collect();
    // RSS after the first sixth of the run (allocator arenas of the
    // serving threads settle under concurrent load), then its maximum.
    let warmup = Duration::from_secs(secs.div_ceil(6));
    let mut rss0 = None;
    let mut rss_max = 0;
    while threads.iter().any(|t| !t.is_finished()) {
        let r = rss_kb(agent.id());
        match rss0 {
            None if start.elapsed() >= warmup => rss0 = Some(r),
            Some(_) => rss_max = rss_max.max(r),
            None => {}
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let rss0 = rss0.expect("run longer than the warm-up");
    for t in threads {
        t.join().unwrap();
    }
    let wall = start.elapsed();
    let rss1 = rss_kb(agent.id());
    let (anon, file) = (
        status_kb(agent.id() as i32, "RssAnon"),
        status_kb(agent.id() as i32, "RssFile"),
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success());

    let mut l = lat.lock().unwrap().clone();
    l.sort();
    let q = |p: f64| l[((l.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;
    let failed = failed.lock().unwrap().len();
    println!(
        "agent load: {} scrapes in {:.1} s ({:.1}/s) with {nprocs} extra processes: {failed} failed; \
         latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; RSS {} kB after {} s of warm-up, {} kB max after that, {} kB at the end ({} kB anonymous, {} kB file)",
        l.len(),
        wall.as_secs_f64(),
        l.len() as f64 / wall.as_secs_f64(),
        q(0.5),
        q(0.99),
        q(1.0),
        rss0,
        warmup.as_secs(),
        rss_max,
        rss1,
        anon,
        file
    );
    assert_eq!(failed, 0, "failed scrapes");
    assert_eq!(l.len() as u64, total);
    assert!(
        rss_max * 10 <= rss0 * 11,
        "RSS grew from {rss0} kB to {rss_max} kB (> 10%)"
    );
}
