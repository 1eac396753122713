//! `hugetext agent` against the real kernel and a real Prometheus: metrics
//! that equal smaps, a policy that warms a program when it exits, and bad
//! input (config, port, permissions, vanishing processes, missing paths).

use common::{free_addr, sample};
use hugetext_testkit as common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Running;

use crate::podman_support;
use podman_support::{layer_dir, podman, runtime_ready, workload_image, Container};

/// An HTTP client that ignores proxies from the environment (loopback only).
fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// GET `url`: (status, body).
fn get(url: &str) -> (u16, String) {
    let (status, _, body) = get_as(url, "*/*");
    (status, body)
}

/// What Prometheus sends by default: OpenMetrics preferred.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// GET `url` with an `Accept` header: (status, content type, body).
fn get_as(url: &str, accept: &str) -> (u16, String, String) {
    let mut r = http()
        .get(url)
        .header("Accept", accept)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, ct, r.body_mut().read_to_string().unwrap())
}

/// `hugetext agent` running in the background, its stderr collected.
struct AgentProc {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl AgentProc {
    /// Start `cmd` (the agent) listening on `addr`; wait for /healthz.
    fn start(mut cmd: Command, addr: &str) -> AgentProc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let err = child.stderr.take().unwrap();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                l.lock().unwrap().push(line);
            }
        });
        let mut a = AgentProc {
            child,
            addr: addr.to_string(),
            log,
        };
        let t = Instant::now();
        while http().get(format!("http://{addr}/healthz")).call().is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "agent not up: {:?}", a.lines());
            if let Ok(Some(st)) = a.child.try_wait() {
                panic!("agent exited {st}: {:?}", a.lines());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        a
    }

    fn with_config(config: Option<&Path>) -> AgentProc {
        let addr = free_addr();
        let mut cmd = Command::new(common::bin());
        cmd.args(["agent", "--listen", &addr]);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        AgentProc::start(cmd, &addr)
    }

    /// A page in the OpenMetrics format.
    fn metrics(&self) -> String {
        let (status, _, body) = get_as(&format!("http://{}/metrics", self.addr), PROMETHEUS_ACCEPT);
        assert_eq!(status, 200, "{body}");
        assert!(body.ends_with("# EOF\n"), "not a whole page: {body}");
        body
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Wait until a log line contains `what`.
    fn wait_log(&self, what: &str, within: Duration) -> String {
        let t = Instant::now();
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| l.contains(what)) {
                return l;
            }
            assert!(t.elapsed() < within, "no log line with {what:?}: {:?}", self.lines());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// SIGTERM: it must exit 0. Returns its log.
    fn stop(mut self) -> Vec<String> {
        self.signal(libc::SIGTERM);
        let st = self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let lines = self.lines();
        assert!(st.success(), "agent exited {st}: {lines:?}");
        lines
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn bad_config_is_one_line_with_file_line_and_column() {
    let dir = common::scratch();
    let p = dir.path().join("agent.conf");
    std::fs::write(
        &p,
        "paths = [\"/bin/true\"]\n[agent]\nrate_limit = 6\npoll_interval = \"often\"\n",
    )
    .unwrap();
    let out = common::hugetext(&["agent", "--config", p.to_str().unwrap(), "--listen", &free_addr()]);
    assert_eq!(out.status.code(), Some(1));
    let err = common::text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("hugetext: error: {}:4:17: duration \"often\"", p.display())),
        "{err}"
    );
    let out = common::hugetext(&["agent", "--config", "/nonexistent/agent.conf"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(common::text(&out.stderr).contains("/nonexistent/agent.conf"));
}

#[test]
fn port_in_use_is_one_line() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let out = common::hugetext(&["agent", "--listen", &addr]);
    assert_eq!(out.status.code(), Some(1));
    let err = common::text(&out.stderr);
    assert_eq!(
        err.trim(),
        format!("hugetext: error: cannot listen on {addr}: Address already in use (os error 98)")
    );
    let out = common::hugetext(&["agent", "--listen", "nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(common::text(&out.stderr).contains("give ADDR:PORT"));
}

/// SIGHUP with a broken config: reported, counted, the old one stays; a
/// good one is then taken; missing policy paths are counted; SIGTERM exits 0.
#[test]
fn sighup_keeps_the_old_config_on_error_and_missing_paths_are_counted() {
    let dir = common::scratch();
    let p = dir.path().join("agent.conf");
    std::fs::write(&p, "paths = [\"/nonexistent/prog\"]\n").unwrap();
    let a = AgentProc::with_config(Some(&p));
    a.wait_log("/nonexistent/prog: no such file", Duration::from_secs(10));
    let page = a.metrics();
    assert_eq!(sample(&page, "hugetext_policy_paths_missing"), Some(1.0), "{page}");

    std::fs::write(&p, "paths = [\"/nonexistent/prog\"]\nbogus = \n").unwrap();
    a.signal(libc::SIGHUP);
    let l = a.wait_log("reload failed", Duration::from_secs(10));
    assert!(
        l.contains(&format!("{}:2:", p.display())) && l.contains("old config stays"),
        "{l}"
    );
    let page = a.metrics();
    assert_eq!(
        sample(&page, "hugetext_config_reloads_total{result=\"error\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(sample(&page, "hugetext_policy_paths_missing"), Some(1.0));

    std::fs::write(&p, "paths = []\n").unwrap();
    a.signal(libc::SIGHUP);
    a.wait_log("config reloaded", Duration::from_secs(10));
    let t = Instant::now();
    while sample(&a.metrics(), "hugetext_policy_paths_missing") != Some(0.0) {
        assert!(t.elapsed() < Duration::from_secs(10), "reloaded config not in force");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _) = get(&format!("http://{}/nope", a.addr));
    assert_eq!(status, 404);
    let log = a.stop();
    assert!(log.iter().any(|l| l.contains("stopping")), "{log:?}");
}

/// The page in both formats: OpenMetrics for a scraper that asks for it
/// (Prometheus does), the classic text format otherwise, which
/// `promtool check metrics` accepts without a complaint.
#[test]
fn both_formats_are_served_and_promtool_accepts_the_classic_one() {
    let a = AgentProc::with_config(None);
    let url = format!("http://{}/metrics", a.addr);
    let (status, ct, om) = get_as(&url, PROMETHEUS_ACCEPT);
    assert_eq!(status, 200);
    assert!(ct.starts_with("application/openmetrics-text; version=1.0.0"), "{ct}");
    assert!(
        om.ends_with("# EOF\n") && om.contains("# TYPE hugetext_agent info\n"),
        "{om}"
    );
    for accept in [
        "*/*",
        "text/plain;version=0.0.4",
        "application/openmetrics-text;q=0.1,text/plain;q=0.9",
    ] {
        let (status, ct, classic) = get_as(&url, accept);
        assert_eq!(status, 200);
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{accept}: {ct}");
        assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"), "{classic}");
        assert!(classic.contains("# TYPE hugetext_agent_info gauge\n"), "{classic}");
        assert!(
            classic.contains("# TYPE hugetext_scrapes_total counter\nhugetext_scrapes_total "),
            "{classic}"
        );
        let mut promtool = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool (package prometheus; scripts/install-deps.sh installs it)");
        std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), classic.as_bytes()).unwrap();
        let out = promtool.wait_with_output().unwrap();
        let said = format!("{}{}", common::text(&out.stdout), common::text(&out.stderr));
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool check metrics: {said}"
        );
    }
    a.stop();
}

/// Unprivileged: every scrape still works, says how it reads memory, and
/// counts the processes it may not read; startup names what is missing.
#[test]
fn without_privileges_metrics_still_work_and_say_what_is_missing() {
    let addr = free_addr();
    let mut cmd = common::as_nobody();
    cmd.arg(common::bin()).args(["agent", "--listen", &addr]);
    let a = AgentProc::start(cmd, &addr);
    let page = a.metrics();
    assert!(page.contains("hugetext_agent_info{method=\"smaps-only\""), "{page}");
    let unreadable = sample(&page, "hugetext_scrape_processes_skipped{reason=\"unreadable\"}").unwrap();
    assert!(unreadable >= 1.0, "root's processes are unreadable to nobody: {page}");
    let log = a.stop();
    assert!(
        log.iter().any(|l| l.contains("without CAP_SYS_ADMIN: folio sizes")),
        "{log:?}"
    );
    assert!(log.iter().any(|l| l.contains("without CAP_NET_ADMIN")), "{log:?}");
}

/// Processes exiting while pages are built: every page is whole, the
/// vanished are counted, and the agent survives.
#[test]
fn processes_vanishing_mid_scrape_are_counted() {
    let a = AgentProc::with_config(None);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let churn = std::thread::spawn(move || {
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let kids: Vec<Child> = (0..20)
                .map(|_| Command::new("/bin/true").stdout(Stdio::null()).spawn().unwrap())
                .collect();
            for mut k in kids {
                k.wait().unwrap();
            }
        }
    });
    let t = Instant::now();
    let mut pages = 0;
    while t.elapsed() < Duration::from_secs(4) {
        let page = a.metrics();
        assert!(page.contains("hugetext_scrape_processes_skipped{reason=\"vanished\"}"));
        pages += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
    assert!(pages >= 4, "{pages}");
    let page = a.metrics();
    assert!(sample(&page, "hugetext_scrapes_total").unwrap() >= pages as f64);
    a.stop();
}

/// A loop-mounted xfs that gives PMD folios, or `None` (skipped) here.
fn xfs() -> Option<common::LoopFs> {
    let fs = common::loop_fs("xfs")?;
    if !common::fs_gives_pmd_folios(fs.path()) {
        common::skip_line("skipped: this kernel's xfs gives no PMD-order page-cache folios");
        return None;
    }
    Some(fs)
}

/// A Prometheus server scraping `target` every second, on 127.0.0.1 only,
/// with its own config and data in `dir`.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Prometheus {
    fn start(dir: &Path, target: &str) -> Prometheus {
        let addr = free_addr();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: hugetext\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (scripts/install-deps.sh installs the Debian package)");
        let p = Prometheus { child, addr };
        let t = Instant::now();
        while http()
            .get(format!("http://{}/-/ready", p.addr))
            .call()
            .map(|r| r.status().as_u16())
            .ok()
            != Some(200)
        {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "prometheus not ready: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// The value of an instant query with one result (None: no result).
    fn query(&self, q: &str) -> Option<f64> {
        let mut r = http()
            .get(format!("http://{}/api/v1/query", self.addr))
            .query("query", q)
            .call()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(v["status"], "success", "{q}: {v}");
        let res = v["data"]["result"].as_array()?;
        assert!(res.len() <= 1, "{q}: {v}");
        res.first()?["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scrapes the agent; after two scrapes, its API gives a
/// warmed fixture's PMD-mapped text, equal to smaps' FilePmdMapped.
#[test]
fn prometheus_scrapes_pmd_mapped_text_equal_to_smaps() {
    let Some(fs) = xfs() else { return };
    let prog = common::copy_fixture(fs.path(), "bfd", "nopie");
    common::read_small(&prog);
    let w = common::hugetext(&["warm", prog.to_str().unwrap()]);
    assert!(w.status.success(), "{}", common::text(&w.stderr));
    let r = Running::fixture(&prog);
    let (file_pmd, _, _) = r.huge_of(&prog);
    assert!(
        file_pmd >= 8 * common::pmd(),
        "warmed fixture not PMD-mapped: {file_pmd}"
    );

    let a = AgentProc::with_config(None);
    let dir = common::scratch();
    let prom = Prometheus::start(dir.path(), &a.addr);
    let t = Instant::now();
    while prom.query("hugetext_scrapes_total").unwrap_or(0.0) < 2.0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "prometheus did not scrape the agent twice"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let path = prog.canonicalize().unwrap();
    let q = format!(
        "hugetext_exe_text_bytes{{path=\"{}\",kind=\"file\",class=\"thp-pmd-aligned-2048kB\"}}",
        path.display()
    );
    let got = prom.query(&q).unwrap_or_else(|| panic!("no result for {q}"));
    assert_eq!(got as u64, file_pmd, "Prometheus {q} vs smaps FilePmdMapped");
    let ratio = prom
        .query(&format!("hugetext_exe_pmd_mapped_ratio{{path=\"{}\"}}", path.display()))
        .unwrap();
    assert!(ratio > 0.5, "{ratio}");
    assert_eq!(prom.query("up{job=\"hugetext\"}"), Some(1.0));
    drop(prom);
    r.stop();
    a.stop();
}

/// The policy: a fixture runs on 4 KiB text and exits; nobody asks, the
/// agent warms it; the next run is PMD-mapped.
#[test]
fn policy_warms_a_program_after_it_exits() {
    let Some(fs) = xfs() else { return };
    let prog = common::copy_fixture(fs.path(), "bfd", "nopie");
    common::read_small(&prog);
    let first = Running::fixture(&prog);
    assert_eq!(first.huge_of(&prog).0, 0, "first run should be on 4 KiB text");

    let dir = common::scratch();
    let conf = dir.path().join("agent.conf");
    std::fs::write(
        &conf,
        format!("paths = [\"{}\"]\n[agent]\npoll_interval = \"500ms\"\n", prog.display()),
    )
    .unwrap();
    let a = AgentProc::with_config(Some(&conf));
    a.wait_log("waiting: running processes map it", Duration::from_secs(20));
    let page = a.metrics();
    let pmd_series = format!("hugetext_policy_pmd_windows{{path=\"{}\"}}", prog.display());
    let eligible = sample(
        &page,
        &format!("hugetext_policy_eligible_windows{{path=\"{}\"}}", prog.display()),
    )
    .unwrap_or_else(|| panic!("no eligible windows for the fixture: {page}"));
    assert!(eligible >= 8.0, "{page}");
    assert_eq!(sample(&page, &pmd_series), Some(0.0), "{page}");

    first.stop();
    let l = a.wait_log(&format!("warmed {}", prog.display()), Duration::from_secs(30));
    assert!(l.contains(&format!("{0}/{0} eligible windows", eligible as u64)), "{l}");
    let page = a.metrics();
    assert_eq!(sample(&page, &pmd_series), Some(eligible), "{page}");
    assert_eq!(
        sample(&page, "hugetext_actions_total{action=\"warm\",result=\"done\"}"),
        Some(1.0),
        "{page}"
    );

    let next = Running::fixture(&prog);
    assert_eq!(
        next.huge_of(&prog).0,
        eligible as u64 * common::pmd(),
        "next run not PMD-mapped"
    );
    next.stop();
    a.stop();
}

/// Text run from a huge tmpfs is its own kind in the agent's series,
/// `kind="shmem"`, PMD-mapped bytes equal to smaps' ShmemPmdMapped, and
/// counted huge in the path's ratio.
#[test]
fn huge_tmpfs_text_is_exported_as_shmem_equal_to_smaps() {
    let Some((_fs, p, r, shmem_pmd)) = common::huge_tmpfs_text() else {
        return;
    };
    let a = AgentProc::with_config(None);
    let page = a.metrics();
    let path = p.canonicalize().unwrap();
    let series = format!(
        "hugetext_exe_text_bytes{{path=\"{}\",kind=\"shmem\",class=\"thp-pmd-aligned-{}kB\"}}",
        path.display(),
        common::pmd_kb()
    );
    let got = sample(&page, &series).unwrap_or_else(|| panic!("no {series} in the page"));
    assert_eq!(got as u64, shmem_pmd * 1024, "{series} vs smaps ShmemPmdMapped");
    let file = format!("hugetext_exe_text_bytes{{path=\"{}\",kind=\"file\"", path.display());
    assert!(!page.contains(&file), "shmem text counted as page cache too");
    let ratio = sample(
        &page,
        &format!("hugetext_exe_pmd_mapped_ratio{{path=\"{}\"}}", path.display()),
    )
    .unwrap();
    assert!(ratio > 0.5, "{ratio}");
    r.stop();
    a.stop();
}

/// Wait (generously) for `cond` on a fresh page; the last page on timeout.
fn wait_page(a: &AgentProc, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let last = std::cell::RefCell::new(String::new());
    common::wait_for(
        what,
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            let page = a.metrics();
            let ok = cond(&page);
            *last.borrow_mut() = page;
            ok.then(|| last.borrow().clone())
        },
        || format!("{}\n{:?}", last.borrow(), a.lines()),
    )
}

/// Wait (generously) until `file` has `n` windows in PMD folios.
fn wait_pmd_windows(a: &AgentProc, file: &Path, n: usize) {
    common::wait_pmd_windows(file, n, || format!("{:?}", a.lines()));
}

/// A workload selected by its systemd unit (`[[agent.workloads]] unit =`):
/// its ratio and why it falls short are exported while its program runs on
/// small folios; the text is warmed once the program exits, warmed again
/// after it was evicted, and the next run is PMD-mapped with its ratio
/// exported. A unit excluded by another entry is never selected. The
/// units' cgroups are made where systemd makes them
/// (`/system.slice/NAME.service`): this machine's PID 1 is not systemd.
#[test]
fn workload_selected_by_unit_is_kept_warm_and_its_ratio_exported() {
    let dir = common::scratch();
    if !common::fs_gives_pmd_folios(dir.path()) {
        common::skip_line("skipped: the scratch filesystem gives no PMD-size page-cache folios");
        return;
    }
    let me = std::process::id();
    let (unit, off) = (format!("ht-test-{me}.service"), format!("ht-test-{me}-off.service"));
    let cg = common::Cgroup::new(&format!("/system.slice/{unit}")).expect("a cgroup v2 hierarchy");
    let cg_off = common::Cgroup::new(&format!("/system.slice/{off}")).expect("a cgroup v2 hierarchy");
    let (on_dir, off_dir) = (dir.path().join("on"), dir.path().join("off"));
    std::fs::create_dir_all(&on_dir).unwrap();
    std::fs::create_dir_all(&off_dir).unwrap();
    let prog = common::copy_fixture(&on_dir, "bfd", "nopie").canonicalize().unwrap();
    let other = common::copy_fixture(&off_dir, "bfd", "nopie").canonicalize().unwrap();
    common::read_small(&prog);
    common::read_small(&other);
    let first = Running::fixture(&prog);
    cg.enter(first.pid());
    let excluded = Running::fixture(&other);
    cg_off.enter(excluded.pid());

    let conf = dir.path().join("agent.conf");
    std::fs::write(
        &conf,
        format!(
            "[agent]\npoll_interval = \"500ms\"\n\
             [[agent.workloads]]\nunit = \"ht-test-{me}*.service\"\n\
             [[agent.workloads]]\nunit = \"{off}\"\nexclude = true\n"
        ),
    )
    .unwrap();
    let a = AgentProc::with_config(Some(&conf));
    let w = format!("workload=\"unit:{unit}\"");
    let ratio = format!("hugetext_workload_pmd_mapped_ratio{{{w}}}");
    let short = format!("hugetext_workload_short_bytes{{{w},reason=\"cache-small-folios\"}}");
    let page = wait_page(&a, "the unit's shortfall", |p| sample(p, &short).is_some());
    let eligible = common::text_window_bytes(&prog) / common::pmd();
    assert_eq!(sample(&page, &ratio), Some(0.0), "{page}");
    assert_eq!(sample(&page, &short), Some((eligible * common::pmd()) as f64), "{page}");
    assert_eq!(sample(&page, &format!("hugetext_workload_processes{{{w}}}")), Some(1.0));
    assert!(
        !page.contains(&format!("workload=\"unit:{off}\"")),
        "the excluded unit is exported: {page}"
    );

    // The program exits: its text is warmed; evicted, warmed again.
    first.stop();
    excluded.stop();
    wait_pmd_windows(&a, &prog, eligible as usize);
    hugetext::pagecache::evict(&std::fs::File::open(&prog).unwrap(), 0..0).unwrap();
    let evicted = hugetext::folio::scan_file(&prog, None).unwrap().unit_windows.len();
    assert!(evicted < eligible as usize, "eviction left {evicted} PMD folios");
    wait_pmd_windows(&a, &prog, eligible as usize);

    // The next run is PMD-mapped, and its ratio exported (equal to smaps:
    // the fixture's PMD-mapped bytes of its file text).
    let next = Running::fixture(&prog);
    cg.enter(next.pid());
    let (pmd, _, _) = next.huge_of(&prog);
    assert_eq!(pmd, eligible * common::pmd(), "next run not PMD-mapped");
    let pmd_series = format!("hugetext_workload_text_bytes{{{w},kind=\"file\",class=\"thp-pmd-aligned-2048kB\"}}");
    let page = wait_page(&a, "the unit's PMD-mapped text", |p| {
        sample(p, &pmd_series) == Some(pmd as f64) && sample(p, &short).is_none()
    });
    let r = sample(&page, &ratio).unwrap();
    assert!(r > 0.5 && r <= 1.0, "{r}\n{page}");
    eprintln!("{unit}: ratio {r:.3}, {} windows kept warm", eligible);
    next.stop();
    // Never selected: the excluded unit's program was not warmed.
    assert_eq!(hugetext::folio::scan_file(&other, None).unwrap().unit_windows.len(), 0);
    a.stop();
    drop((cg, cg_off));
}

/// Workloads selected by container (`container =` its id; a cgroup path
/// with an `exclude` of that container by id): the selected
/// container's program, on small folios while it runs, is exported with
/// its ratio (equal to the process's smaps) and explain's reason; the
/// excluded container is not.
#[test]
fn workload_selected_by_container_exports_ratio_and_reason() {
    if !runtime_ready() {
        return;
    }
    let image = workload_image();
    let layer = layer_dir(&image);
    if !common::fs_gives_pmd_folios(&layer) {
        common::skip_line("skipped: podman's storage gives no PMD-size page-cache folios");
        return;
    }
    let lower = layer.join("fixture");
    let me = std::process::id();
    // The layer's file in small folios (a container of it may still run
    // from another test: then it stays as it is, and small either way once
    // it was read small).
    common::read_small(&lower);
    let run = |n: &str| {
        let c = Container::run(&format!("hugetext-agent-{n}-{me}"), &["--interactive", &image, "wait"]);
        let t = Instant::now();
        while !common::text(&podman(&["logs", &c.0]).stdout).contains("ready") {
            assert!(t.elapsed() < Duration::from_secs(60), "container {} not ready", c.0);
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    };
    let (x, y) = (run("x"), run("y"));
    let (xid, yid) = (x.id(), y.id());
    // y is selected by its cgroup path and excluded by its id: the
    // exclusion wins.
    let y_cgroup = hugetext::procfs::cgroup_of(y.pid()).unwrap();
    let dir = common::scratch();
    let conf = dir.path().join("agent.conf");
    std::fs::write(
        &conf,
        format!(
            "[agent]\npoll_interval = \"500ms\"\n\
             [[agent.workloads]]\ncontainer = \"{}\"\n\
             [[agent.workloads]]\ncgroup = \"{y_cgroup}\"\n\
             [[agent.workloads]]\ncontainer = \"{yid}\"\nexclude = true\n",
            &xid[..12]
        ),
    )
    .unwrap();
    let a = AgentProc::with_config(Some(&conf));
    let w = format!("workload=\"container:{}\"", &xid[..12]);
    let short = format!("hugetext_workload_short_bytes{{{w},reason=\"cache-small-folios\"}}");
    let page = wait_page(&a, "the container's shortfall", |p| sample(p, &short).is_some());
    let eligible = common::text_window_bytes(&lower) / common::pmd();
    assert_eq!(sample(&page, &short), Some((eligible * common::pmd()) as f64), "{page}");
    assert_eq!(
        sample(&page, &format!("hugetext_workload_processes{{{w}}}")),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, &format!("hugetext_workload_pmd_mapped_ratio{{{w}}}")),
        Some(0.0),
        "{page}"
    );
    assert!(
        !page
            .lines()
            .any(|l| l.starts_with("hugetext_workload") && l.contains(&yid[..12])),
        "the excluded container is exported: {page}"
    );
    a.stop();
    drop((x, y));
}

/// Text `run --strategy copy` copied is counted under its file, on kernels
/// with or without anonymous VMA names (this one has none: the copies are
/// unnamed `r-xp` anonymous mappings), and the per-file ratio equals what
/// smaps says of that process: (FilePmdMapped + AnonHugePages) / Rss over
/// the file's text and its copies. Anonymous executable memory that is not
/// a copy (a JIT's code buffer, here a Python mmap) is reported apart.
#[test]
fn copied_text_counts_under_its_file_equal_to_smaps_and_jit_memory_apart() {
    let dir = common::scratch();
    // Its own path: no other test's processes map it.
    let prog = common::copy_fixture(dir.path(), "bfd", "nopie");
    let path = prog.canonicalize().unwrap();
    let p = path.to_str().unwrap();
    let r = common::run_waiting(&["--strategy", "copy"], &prog);
    // A JIT-like buffer: 4 MiB of anonymous executable memory, touched.
    let mut jit = Command::new("python3")
        .args([
            "-c",
            "import mmap,sys\nm=mmap.mmap(-1,4<<20,prot=mmap.PROT_READ|mmap.PROT_WRITE|mmap.PROT_EXEC)\n\
             m.write(b'\\xc3'*(4<<20))\nprint('ready',flush=True)\nsys.stdin.read()",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(jit.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    // smaps, read directly: the file's r-x mappings and the unnamed r-x
    // anonymous ones (the fixture has no other anonymous text).
    let smaps = hugetext::procfs::read_smaps(Some(r.pid())).unwrap();
    let (mut huge_kb, mut rss_kb, mut copied_kb) = (0u64, 0u64, 0u64);
    for (v, s) in &smaps {
        if !v.perms.starts_with("r-x") {
            continue;
        }
        if v.path == p {
            huge_kb += s.file_pmd_kb;
            rss_kb += s.rss_kb;
        } else if v.path.is_empty() || v.path.starts_with("[anon:hugetext:") {
            huge_kb += s.anon_huge_kb;
            rss_kb += s.rss_kb;
            copied_kb += s.anon_huge_kb;
        }
    }
    assert!(
        copied_kb * 1024 >= 8 * common::pmd(),
        "the copy route copied: {copied_kb} kB"
    );
    let want = huge_kb as f64 / rss_kb as f64;

    let a = AgentProc::with_config(None);
    let page = a.metrics();
    let got = sample(&page, &format!("hugetext_exe_pmd_mapped_ratio{{path=\"{p}\"}}"))
        .unwrap_or_else(|| panic!("no ratio for {p}: {page}"));
    assert!(
        (got - want).abs() < 0.005,
        "agent {got} vs smaps {want} ({huge_kb} of {rss_kb} kB)"
    );
    let copies = sample(
        &page,
        &format!("hugetext_exe_text_bytes{{path=\"{p}\",kind=\"anon\",class=\"thp-pmd-aligned-2048kB\"}}"),
    )
    .unwrap_or_else(|| panic!("no copied text under {p}: {page}"));
    assert_eq!(copies as u64, copied_kb * 1024, "{page}");
    let mine = sample(&page, "hugetext_anon_exec_bytes{owner=\"hugetext\"}").unwrap();
    let other = sample(&page, "hugetext_anon_exec_bytes{owner=\"other\"}").unwrap();
    assert!(mine >= (copied_kb * 1024) as f64, "{mine} {page}");
    assert!(
        other >= (4u64 << 20) as f64,
        "the Python buffer is not hugetext's: {other}"
    );
    drop(jit.stdin.take());
    let _ = jit.wait();
    r.stop();
    a.stop();
}

/// A file the policy warmed and that is then evicted (back in 4 KiB
/// folios, as memory pressure or `POSIX_FADV_DONTNEED` leave it) is warmed
/// again within a few evaluations, not after the ten-minute retry; and again
/// after the program ran on the evicted file (its exit is the event).
#[test]
fn policy_warms_again_a_file_found_evicted() {
    let Some(fs) = xfs() else { return };
    let prog = common::copy_fixture(fs.path(), "bfd", "nopie");
    common::read_small(&prog);
    let dir = common::scratch();
    let conf = dir.path().join("agent.conf");
    std::fs::write(
        &conf,
        format!("paths = [\"{}\"]\n[agent]\npoll_interval = \"500ms\"\n", prog.display()),
    )
    .unwrap();
    let a = AgentProc::with_config(Some(&conf));
    let warmed = format!("warmed {}", prog.display());
    let count = |a: &AgentProc| a.lines().iter().filter(|l| l.contains(&warmed)).count();
    let wait_count = |a: &AgentProc, n: usize, what: &str| {
        // Generous: 60 poll intervals on a loaded machine.
        let t = Instant::now();
        while count(a) < n {
            assert!(t.elapsed() < Duration::from_secs(30), "{what}: {:?}", a.lines());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_count(&a, 1, "first warm");
    // Evicted: 4 KiB folios again.
    common::read_small(&prog);
    wait_count(&a, 2, "not warmed again after eviction");
    a.wait_log("no longer in PMD folios: warming again", Duration::from_secs(5));
    // Evicted again, and the program runs on the small folios meanwhile.
    common::read_small(&prog);
    let run = Running::fixture(&prog);
    run.stop();
    wait_count(&a, 3, "not warmed again after the program ran");
    let next = Running::fixture(&prog);
    assert!(next.huge_of(&prog).0 >= 8 * common::pmd(), "next run not PMD-mapped");
    next.stop();
    a.stop();
}

/// The policy's `shmem` key keeps files in the text store: stored when
/// missing, stored again (its stale copy dropped) when the original
/// changes; the store's entries and stale entries are exported.
#[test]
fn shmem_key_keeps_files_in_the_text_store() {
    let dir = common::scratch();
    let prog = common::copy_fixture(dir.path(), "bfd", "nopie");
    let dir2 = common::scratch();
    let other = common::copy_fixture(dir2.path(), "bfd", "nopie");
    let store = common::TextStore::new();
    let conf = dir.path().join("agent.conf");
    std::fs::write(
        &conf,
        format!(
            "[agent]\npoll_interval = \"500ms\"\nshmem = [\"{}\"]\nshmem_store = \"{}\"\n",
            prog.display(),
            store.dir.display()
        ),
    )
    .unwrap();
    let a = AgentProc::with_config(Some(&conf));
    let stored = format!("stored {} in the text store", prog.display());
    a.wait_log(&stored, Duration::from_secs(60));
    let real = prog.canonicalize().unwrap().display().to_string();
    let listed = common::text(&store.warm(&["--list"]).stdout);
    assert!(listed.contains(&real) && listed.contains("valid"), "{listed}");
    // Another entry, made stale: exported (the agent leaves it while its
    // own files are in the store).
    store.add(&other);
    let older = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&other)
        .unwrap()
        .set_modified(older)
        .unwrap();
    wait_page(&a, "one stale entry of two", |p| {
        sample(p, "hugetext_text_store_entries") == Some(2.0) && sample(p, "hugetext_text_store_stale") == Some(1.0)
    });
    // The policy's file changes: stored again, the stale entries dropped.
    std::fs::File::options()
        .write(true)
        .open(&prog)
        .unwrap()
        .set_modified(older)
        .unwrap();
    let page = wait_page(&a, "the changed file stored again", |p| {
        sample(p, "hugetext_text_store_entries") == Some(1.0) && sample(p, "hugetext_text_store_stale") == Some(0.0)
    });
    let lines = a.lines();
    assert_eq!(lines.iter().filter(|l| l.contains(&stored)).count(), 2, "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("dropped the stale entry")), "{lines:?}");
    assert_eq!(
        sample(&page, "hugetext_actions_total{action=\"shmem\",result=\"done\"}"),
        Some(2.0),
        "{page}"
    );
    let listed = common::text(&store.warm(&["--list"]).stdout);
    assert!(listed.contains(&real) && !listed.contains("stale"), "{listed}");
    a.stop();
}

/// The text of `exe` in every process running it, from smaps read
/// directly: (pids, PMD-mapped bytes, resident bytes), counting the file's
/// r-x mappings and the unnamed r-x anonymous ones (copies) of those
/// processes.
fn smaps_text_of(exe: &Path) -> (Vec<i32>, u64, u64) {
    let mut pids: Vec<i32> = hugetext::procfs::all_pids()
        .unwrap()
        .into_iter()
        .filter(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe))
        .collect();
    pids.sort_unstable();
    let (mut huge, mut rss) = (0u64, 0u64);
    let path = exe.to_string_lossy();
    for &pid in &pids {
        let Ok(smaps) = hugetext::procfs::read_smaps(Some(pid)) else {
            continue;
        };
        for (v, s) in &smaps {
            if !v.perms.starts_with("r-x") {
                continue;
            }
            if v.path == path {
                huge += s.file_pmd_kb * 1024;
                rss += s.rss_kb * 1024;
            } else if v.path.is_empty() || v.path.starts_with("[anon:hugetext:") {
                huge += s.anon_huge_kb * 1024;
                rss += s.rss_kb * 1024;
            }
        }
    }
    (pids, huge, rss)
}

/// Debian's postgres under `run --strategy copy` (started by `pg_ctl`, as
/// the postgres user; a kernel without anonymous VMA names): the agent's
/// `pmd_mapped_ratio` of the postgres executable is what the smaps of
/// its processes (postmaster and workers) say, copies included.
#[test]
fn postgres_copied_text_ratio_equals_smaps() {
    let Some(pg) = common::PgCluster::init() else {
        return;
    };
    common::preload();
    let pg_ctl = pg.pg_ctl();
    let o = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(common::bin())
        .args(["run", "--strategy", "copy", "--"])
        .arg(&pg_ctl)
        .arg("-D")
        .arg(&pg.data)
        .arg("-o")
        .arg(pg.server_options())
        .arg("-l")
        .arg(pg.home.join("log"))
        .args(["-w", "-t", "300", "start"])
        .env_remove("HUGETEXT_STRATEGY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "pg_ctl start: {}", common::text(&o.stderr));
    let exe = pg.bin.join("postgres").canonicalize().unwrap();
    let p = exe.display().to_string();
    let a = AgentProc::with_config(None);
    // The same processes before and after the scrape (another test may
    // start or stop a postgres meanwhile: then again).
    let mut tries = 0;
    let (got, want, huge, rss, pids) = loop {
        let before = smaps_text_of(&exe);
        let page = a.metrics();
        let after = smaps_text_of(&exe);
        tries += 1;
        if before != after && tries < 20 {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        let got = sample(&page, &format!("hugetext_exe_pmd_mapped_ratio{{path=\"{p}\"}}"))
            .unwrap_or_else(|| panic!("no ratio for {p}: {page}"));
        break (got, after.1 as f64 / after.2 as f64, after.1, after.2, after.0);
    };
    a.stop();
    drop(pg);
    for pid in pids {
        common::remove_perf_map(pid as u32);
    }
    assert!(
        huge >= common::pmd(),
        "the copy route made nothing huge: {huge} of {rss} bytes"
    );
    assert!(
        (got - want).abs() < 0.005,
        "agent {got} vs smaps {want} ({huge} of {rss} bytes)"
    );
}
