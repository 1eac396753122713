//! How the agent ships: the .deb (built with cargo-deb, installed with
//! dpkg, used from /usr/bin, removed), the hardened systemd unit, the
//! Kubernetes manifests (schema-validated by kubernetes-validate, and
//! checked against what the agent needs), the Containerfile, the Grafana
//! dashboard (every metric it queries exists), the example config and the
//! shell completions.

use common::free_addr;
use hugetext_testkit as common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::k8s_support;
use k8s_support::{docs, of_kind};

fn read(rel: &str) -> String {
    let p = common::root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The capabilities the agent asks for, without the `CAP_` prefix.
fn agent_caps() -> BTreeSet<String> {
    hugetext::agent::capabilities()
        .iter()
        .map(|c| c.name.trim_start_matches("CAP_").to_string())
        .collect()
}

/// A tool a test needs: present, or skipped here (a failure in CI, which
/// installs it with scripts/install-deps.sh).
fn tool(name: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let msg = format!("skipped: {name} not installed (scripts/install-deps.sh)");
        common::skip_line(&msg);
        assert!(
            std::env::var_os("CI").is_none(),
            "{msg} (CI is set: this test must run)"
        );
    }
    found
}

#[test]
fn kubernetes_manifests_pass_the_schema() {
    if !tool("kubernetes-validate") {
        return;
    }
    let root = common::root();
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--quiet", "--no-warn"])
        .arg(root.join("packaging/k8s/daemonset.yaml"))
        .arg(root.join("packaging/k8s/servicemonitor.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        common::text(&out.stdout),
        common::text(&out.stderr)
    );
}

#[test]
fn daemonset_has_what_the_agent_needs_and_no_more() {
    let d = docs("packaging/k8s/daemonset.yaml");
    let ds = of_kind(&d, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true, "host processes are the point");
    assert!(pod["hostNetwork"].is_null() && pod["hostIPC"].is_null());
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&ds["spec"]["selector"]["matchLabels"], labels);
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    let added: BTreeSet<String> = sc["capabilities"]["add"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(added, agent_caps(), "exactly the capabilities the agent names");
    for r in ["cpu", "memory"] {
        assert!(c["resources"]["limits"][r].is_string(), "limit {r}");
        assert!(c["resources"]["requests"][r].is_string(), "request {r}");
    }
    // Every mount read-only; the config mount holds the file the args name.
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    assert!(mounts.iter().all(|m| m["readOnly"] == true), "{mounts:?}");
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "agent");
    let conf = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    let cfg_mount = mounts.iter().find(|m| m["name"] == "config").unwrap();
    assert_eq!(
        Path::new(conf).parent().unwrap(),
        Path::new(cfg_mount["mountPath"].as_str().unwrap())
    );
    // The ConfigMap's config is one the agent accepts, listening where the
    // port and the probes point.
    let cm = of_kind(&d, "ConfigMap");
    let key = Path::new(conf).file_name().unwrap().to_str().unwrap();
    let cfg = hugetext::warm::Config::parse(cm["data"][key].as_str().unwrap()).unwrap();
    let port: u16 = cfg.agent.listen.unwrap().rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(c["ports"][0]["containerPort"].as_u64(), Some(port as u64));
    let pname = c["ports"][0]["name"].as_str().unwrap();
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz");
        assert_eq!(c[probe]["httpGet"]["port"], pname);
    }
    // Every host path is mounted read-only (checked above) and is a
    // directory; only the text store's may be missing (the kubelet makes it).
    for v in pod["volumes"].as_sequence().unwrap() {
        if !v["hostPath"].is_null() {
            let ty = if v["hostPath"]["path"] == "/run/hugetext" {
                "DirectoryOrCreate"
            } else {
                "Directory"
            };
            assert_eq!(v["hostPath"]["type"], ty, "{v:?}");
        }
    }
    // The host's text store at the path the agent reads it, seeing the
    // huge tmpfs the host mounts there after the pod started.
    let store = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["hostPath"]["path"] == "/run/hugetext")
        .expect("a hostPath volume for the host's /run/hugetext");
    let m = mounts.iter().find(|m| m["name"] == store["name"]).unwrap();
    assert_eq!(m["mountPath"], "/run/hugetext");
    assert_eq!(m["mountPropagation"], "HostToContainer");
    assert!(
        Path::new(&unit_value_of(STORE_UNIT, "Where")).starts_with("/run/hugetext"),
        "the store unit mounts under the volume"
    );
}

/// The text store's systemd mount unit.
const STORE_UNIT: &str = "packaging/systemd/run-hugetext-text.mount";

/// The one value of `key` in a unit file of the repository.
fn unit_value_of(unit: &str, key: &str) -> String {
    let v: Vec<String> = read(unit)
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect();
    assert_eq!(v.len(), 1, "{unit}: {key}= {v:?}");
    v[0].clone()
}

/// The text store's mount unit: named for where it mounts (systemd
/// requires it), a tmpfs with 2 MiB pages below i_size, a size cap, no
/// set-uid or devices, and options this kernel's tmpfs takes as written
/// (mounted here with exactly them, it says huge=within_size).
#[test]
fn text_store_mount_unit_is_a_huge_tmpfs_this_kernel_mounts() {
    let where_ = unit_value_of(STORE_UNIT, "Where");
    assert_eq!(where_, "/run/hugetext/text");
    let name = Path::new(STORE_UNIT).file_name().unwrap().to_str().unwrap();
    if tool("systemd-escape") {
        let o = Command::new("systemd-escape")
            .args(["-p", "--suffix=mount", &where_])
            .output()
            .unwrap();
        assert_eq!(common::text(&o.stdout).trim(), name);
    }
    assert_eq!(unit_value_of(STORE_UNIT, "Type"), "tmpfs");
    let opts = unit_value_of(STORE_UNIT, "Options");
    let set: BTreeSet<&str> = opts.split(',').collect();
    for o in ["huge=within_size", "mode=0755", "nosuid", "nodev"] {
        assert!(set.contains(o), "{opts}: {o}");
    }
    assert!(set.iter().any(|o| o.starts_with("size=")), "{opts}: a size cap");
    assert!(!set.contains("noexec"), "{opts}: text is executed from it");
    assert!(read(STORE_UNIT).contains("WantedBy=local-fs.target"));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip_line("skipped: mounting the unit's tmpfs needs root");
        return;
    }
    let dir = common::scratch();
    let mnt = dir.path().join("text");
    std::fs::create_dir(&mnt).unwrap();
    let what = unit_value_of(STORE_UNIT, "What");
    ok(Command::new("mount")
        .args(["-t", "tmpfs", "-o", &opts, &what])
        .arg(&mnt));
    let mnt = mnt.canonicalize().unwrap();
    let result = std::panic::catch_unwind(|| {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let line = mounts
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(mnt.to_str().unwrap()))
            .expect("mounted")
            .to_string();
        assert!(line.contains("huge=within_size"), "{line}");
        assert!(line.contains("mode=755"), "{line}");
    });
    let _ = Command::new("umount").arg(&mnt).status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn pod_and_service_monitors_select_the_agent() {
    let ds_docs = docs("packaging/k8s/daemonset.yaml");
    let ds = of_kind(&ds_docs, "DaemonSet");
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    let port = ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"].clone();
    let pm = docs("packaging/k8s/podmonitor.yaml");
    let pm = of_kind(&pm, "PodMonitor");
    assert_eq!(pm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(&pm["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], port);
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["path"], "/metrics");
    let sm = docs("packaging/k8s/servicemonitor.yaml");
    let svc = of_kind(&sm, "Service");
    assert_eq!(&svc["spec"]["selector"], labels);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], port);
    let mon = of_kind(&sm, "ServiceMonitor");
    assert_eq!(&mon["spec"]["selector"]["matchLabels"], &svc["metadata"]["labels"]);
    assert_eq!(mon["spec"]["endpoints"][0]["port"], svc["spec"]["ports"][0]["name"]);
}

/// Metric names in a PromQL expression (`hugetext_…`; a `__name__` regex
/// prefix ending in `_` is skipped).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(p) = expr[i..].find("hugetext_") {
        let s = i + p;
        let mut e = s;
        while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'_') {
            e += 1;
        }
        let name = &expr[s..e];
        if !name.ends_with('_') {
            out.push(name.to_string());
        }
        i = e;
    }
    out
}

#[test]
fn grafana_dashboard_queries_metrics_the_agent_serves() {
    let d: serde_json::Value = serde_json::from_str(&read("packaging/k8s/grafana-dashboard.json")).unwrap();
    assert!(d["uid"].is_string() && d["title"].is_string());
    let page = hugetext::agent::scrape(
        &hugetext::agent::AgentMetrics::default(),
        &hugetext::agent::ScrapeInput {
            // A policy file with whole windows, so the policy families have series.
            policy_files: vec![common::bin()],
            max_series: 100_000,
            folio_sizes: true,
            workloads: Vec::new(),
            shortfalls: Default::default(),
            store: hugetext::shmemstore::DEFAULT_ROOT.into(),
        },
    )
    .unwrap();
    // Families present in a page (labelled families may be empty here: the
    // TYPE line names them).
    let families: BTreeSet<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let pfn = hugetext::kernel::pfn_access();
    let served = |name: &str| {
        (!pfn && name == "hugetext_policy_pmd_windows")
            || families.contains(name)
            || ["_total", "_bucket", "_sum", "_count", "_info"]
                .iter()
                .any(|suf| name.strip_suffix(suf).is_some_and(|f| families.contains(f)))
    };
    let mut ids = BTreeSet::new();
    let mut n = 0;
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        for t in p["targets"].as_array().unwrap() {
            for name in metric_names(t["expr"].as_str().unwrap()) {
                assert!(
                    served(&name),
                    "panel {:?} queries {name}, which the agent does not serve",
                    p["title"]
                );
                n += 1;
            }
        }
    }
    assert!(n >= 8, "{n}");
    // The vmstat panel's regex names counters the agent serves.
    for f in [
        "thp_file_alloc",
        "thp_file_fallback",
        "thp_file_mapped",
        "thp_collapse_alloc",
    ] {
        assert!(served(&format!("hugetext_vmstat_{f}_total")), "{f}");
    }
}

/// Every value of `key=` in the agent's unit, in order.
fn unit_values(key: &str) -> Vec<String> {
    read("packaging/systemd/hugetext-agent.service")
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

/// The one value of `key=` in the agent's unit.
fn unit_value(key: &str) -> String {
    let v = unit_values(key);
    assert_eq!(v.len(), 1, "{key}= should be set once: {v:?}");
    v[0].clone()
}

fn cap_set(v: &str) -> BTreeSet<String> {
    v.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_string())
        .collect()
}

#[test]
fn systemd_unit_is_hardened_with_the_capabilities_the_agent_names() {
    assert_eq!(cap_set(&unit_value("CapabilityBoundingSet")), agent_caps());
    assert_eq!(cap_set(&unit_value("AmbientCapabilities")), agent_caps());
    assert!(
        unit_values("User").is_empty(),
        "a user of its own: DynamicUser, not root"
    );
    for (k, v) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("LimitNOFILE", "1024"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "read-only"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("LockPersonality", "yes"),
        ("SystemCallArchitectures", "native"),
        ("SystemCallErrorNumber", "EPERM"),
        ("UMask", "0077"),
        ("ProtectProc", "default"),
    ] {
        assert_eq!(unit_value(k), v, "{k}");
    }
    assert_eq!(
        unit_values("SystemCallFilter"),
        ["@system-service mincore", "~@privileged @resources"]
    );
    let families: BTreeSet<String> = unit_value("RestrictAddressFamilies")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(
        families,
        ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]
            .map(String::from)
            .into()
    );
    assert!(unit_value("ExecStart").contains("/usr/bin/hugetext agent"));
    assert_eq!(unit_value("ExecReload"), "/bin/kill -HUP $MAINPID");
    // The connection cap stays within the descriptor limit.
    let nofile: u64 = unit_value("LimitNOFILE").parse().unwrap();
    let lim = hugetext::agent::http::Limits::for_nofile(nofile);
    assert!(lim.max_conns as u64 + hugetext::agent::http::RESERVED_FDS <= nofile);
    if !tool("systemd-analyze") {
        return;
    }
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(common::root().join("packaging/systemd/hugetext-agent.service"))
        .output()
        .unwrap();
    let text = common::text(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| l.split("exposure level for hugetext-agent.service: ").nth(1))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("systemd-analyze security: {text}{}", common::text(&out.stderr)));
    eprintln!("systemd-analyze security: exposure {level}");
    assert!(level <= 3.0, "exposure {level} (was 2.5): {text}");
}

/// The agent started as `nobody` with `caps` (`+cap_a,+cap_b`; empty: none)
/// in its ambient set, serving on `addr` with `config`.
fn agent_as_nobody_with(caps: &str, addr: &str, config: &Path) -> std::process::Child {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    if caps.is_empty() {
        cmd.args(["--inh-caps=-all", "--bounding-set=-all"]);
    } else {
        cmd.arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"))
            .arg(format!("--bounding-set=-all,{caps}"));
    }
    cmd.arg("--")
        .arg(common::bin())
        .args(["agent", "--listen", addr, "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A page from the agent at `addr` once its policy has been evaluated (its
/// one file found or missing), then SIGTERM: (page, startup log).
fn page_and_log(child: std::process::Child, addr: &str) -> (String, String) {
    let t = Instant::now();
    // The policy is evaluated in steps: the file read, then each path's
    // windows; a scrape can fall between (seen on a loaded machine), so once
    // the file is read, wait up to 5 s more for the paths' figures.
    let mut read_at: Option<Instant> = None;
    let page = loop {
        if let Ok(s) = std::net::TcpStream::connect(addr) {
            drop(s);
            let page = scrape_once(addr);
            if page.contains("hugetext_policy_paths_missing 1\n") {
                break page;
            }
            if page.contains("hugetext_policy_files 1\n") {
                let at = *read_at.get_or_insert_with(Instant::now);
                if page.contains("hugetext_policy_eligible_windows{") || at.elapsed() > Duration::from_secs(5) {
                    break page;
                }
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "agent not listening or no policy evaluated"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    (page, common::text(&out.stderr))
}

/// The unit's capabilities, tried as a user that is not root (`nobody`):
/// with all of them the agent reads what root reads (folio sizes of a root
/// process's text, a policy file only root may read, the proc connector);
/// without each one, the feature it names is lost and the startup log says
/// so.
#[test]
fn the_units_capabilities_are_what_a_user_other_than_root_needs() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip_line("skipped: needs root to change user and grant capabilities");
        return;
    }
    let dir = common::scratch();
    let secret = dir.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    let secret = secret.canonicalize().unwrap();
    let prog = secret.join("ht-cap-sleep");
    std::fs::copy("/bin/sleep", &prog).unwrap();
    let conf = secret.join("agent.conf");
    std::fs::write(&conf, format!("paths = [{:?}]\n", prog.to_str().unwrap())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut root_proc = Command::new(&prog).arg("60").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));

    let caps: Vec<String> = unit_value("AmbientCapabilities")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let exe = format!("hugetext_exe_processes{{path=\"{}\"}} 1", prog.display());
    let folio_class = format!(
        "hugetext_exe_text_bytes{{path=\"{}\",kind=\"file\",class=\"",
        prog.display()
    );
    let addr = free_addr();
    let (page, log) = page_and_log(agent_as_nobody_with(&caps.join(","), &addr, &conf), &addr);
    assert!(page.contains(&exe), "root's process not read:\n{page}");
    assert!(
        !page.contains(&format!("{folio_class}pte-mapped")),
        "no folio sizes:\n{page}"
    );
    assert!(page.contains("hugetext_agent_info{method=\"pagemap-"), "{page}");
    assert!(
        page.contains("hugetext_policy_eligible_windows{path="),
        "policy file not read:\n{page}"
    );
    assert!(!log.contains("without CAP_") && !log.contains("polling"), "{log}");

    for drop in &caps {
        let fewer: Vec<&str> = caps.iter().filter(|c| *c != drop).map(String::as_str).collect();
        let addr = free_addr();
        let (page, log) = page_and_log(agent_as_nobody_with(&fewer.join(","), &addr, &conf), &addr);
        let name = format!("CAP_{}", drop.trim_start_matches('+').to_uppercase());
        assert!(log.contains(&format!("without {name}:")), "{name}: {log}");
        match name.as_str() {
            "CAP_SYS_ADMIN" => assert!(page.contains("method=\"smaps-only\""), "{name}: {page}"),
            "CAP_DAC_READ_SEARCH" => {
                assert!(page.contains("method=\"smaps-only\""), "{name}: {page}");
                assert!(
                    !page.contains("hugetext_policy_eligible_windows{path="),
                    "{name}: {page}"
                );
            }
            // CAP_NET_ADMIN: the proc connector's events (the startup line
            // above); CAP_SYS_PTRACE: other users' /proc/PID files by the
            // kernel's ptrace read-access rule (this machine's kernel lets
            // CAP_SYS_ADMIN pass it too, so the loss is not visible here).
            _ => {}
        }
    }
    let _ = root_proc.kill();
    let _ = root_proc.wait();
}

/// Every system call the agent makes (serving both formats, warming,
/// reloading, stopping; traced with strace) passes the unit's
/// SystemCallFilter, expanded by systemd-analyze.
#[test]
fn the_agents_system_calls_pass_the_units_filter() {
    if !tool("strace") || !tool("systemd-analyze") {
        return;
    }
    fn expand(set: &str, out: &mut BTreeSet<String>) {
        if let Some(group) = set.strip_prefix('@') {
            let o = Command::new("systemd-analyze")
                .args(["syscall-filter", &format!("@{group}")])
                .output()
                .unwrap();
            for l in common::text(&o.stdout).lines().skip(1) {
                let item = l.trim();
                if item.starts_with('#') || item.is_empty() || !l.starts_with(' ') {
                    continue;
                }
                expand(item, out);
            }
        } else {
            out.insert(set.to_string());
        }
    }
    let mut allowed = BTreeSet::new();
    let mut denied = BTreeSet::new();
    for v in unit_values("SystemCallFilter") {
        let (deny, list) = match v.strip_prefix('~') {
            Some(rest) => (true, rest.to_string()),
            None => (false, v),
        };
        for item in list.split_whitespace() {
            expand(item, if deny { &mut denied } else { &mut allowed });
        }
    }
    assert!(allowed.len() > 100 && allowed.contains("openat"), "{allowed:?}");

    let dir = common::scratch();
    let prog = dir.path().join("prog");
    std::fs::copy(common::bin(), &prog).unwrap();
    let conf = dir.path().join("agent.conf");
    std::fs::write(&conf, format!("paths = [{:?}]\n", prog.to_str().unwrap())).unwrap();
    let trace = dir.path().join("trace");
    let addr = free_addr();
    let strace = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&trace)
        .arg(common::bin())
        .args(["agent", "--listen", &addr, "--config"])
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(t.elapsed() < Duration::from_secs(30), "agent not listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    let agent_pid: i32 = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", strace.id()))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // The policy's gauges appear after its first pass, which a loaded
    // machine may not have run by the first scrape.
    let t = Instant::now();
    let mut page = scrape_once(&addr);
    while !page.contains("hugetext_policy_eligible_windows") && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
        page = scrape_once(&addr);
    }
    assert!(page.contains("hugetext_policy_eligible_windows"), "{page}");
    // SAFETY: kill(2) on our own descendant.
    unsafe { libc::kill(agent_pid, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(500));
    let _ = scrape_once(&addr);
    // SAFETY: as above.
    unsafe { libc::kill(agent_pid, libc::SIGTERM) };
    let out = strace.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let used: BTreeSet<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let call = l.split_whitespace().nth(1)?;
            let name = call.split('(').next()?;
            (call.contains('(')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
            .then(|| name.to_string())
        })
        .collect();
    assert!(used.contains("pread64") && used.contains("accept4"), "{used:?}");
    // cachestat(2) (Linux 6.5, number 451) is unknown to systemd before 255
    // and to strace before 6.5, so the unit's allow-list refuses it with
    // EPERM: the agent then falls back to SEEK_DATA and mincore for good
    // (kernel::cached_pages), so a refusal costs nothing but that.
    let falls_back = ["cachestat", "syscall_0x1c3"];
    let refused: Vec<&String> = used
        .iter()
        .filter(|s| !falls_back.contains(&s.as_str()))
        .filter(|s| !allowed.contains(*s) || denied.contains(*s))
        .collect();
    assert!(
        refused.is_empty(),
        "system calls the unit's filter refuses: {refused:?}"
    );
}

#[test]
fn containerfile_and_example_config() {
    let c = read("packaging/k8s/Containerfile");
    assert!(c.contains("ENTRYPOINT [\"/usr/bin/hugetext\"]"), "{c}");
    let port = hugetext::agent::DEFAULT_LISTEN.rsplit(':').next().unwrap();
    assert!(c.contains(&format!("EXPOSE {port}")), "{c}");
    for l in c.lines().filter_map(|l| l.strip_prefix("COPY ")) {
        let src = l.split_whitespace().next().unwrap();
        if !src.starts_with("--") && src != "." {
            assert!(common::root().join(src).exists(), "COPY {src}: missing");
        }
    }
    let cfg = hugetext::warm::Config::parse(&read("packaging/agent.conf.example")).unwrap();
    assert!(cfg.agent.auto.is_some() && !cfg.agent.globs.is_empty(), "{cfg:?}");
    assert_eq!(cfg.agent.listen.as_deref(), Some(hugetext::agent::DEFAULT_LISTEN));
}

#[test]
fn shipped_completions_match_the_cli() {
    for (shell, file) in [
        ("bash", "hugetext.bash"),
        ("zsh", "_hugetext"),
        ("fish", "hugetext.fish"),
    ] {
        let out = common::hugetext(&["completions", shell]);
        assert!(out.status.success());
        assert!(
            common::text(&out.stdout) == read(&format!("packaging/completions/{file}")),
            "packaging/completions/{file} is out of date: run `target/release/hugetext completions {shell} > packaging/completions/{file}`"
        );
        assert!(common::text(&out.stdout).contains("agent"));
    }
    let out = common::hugetext(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

fn ok(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}\n{}{}",
        o.status,
        common::text(&o.stdout),
        common::text(&o.stderr)
    );
    o
}

/// `dpkg ARGS`, waiting (up to 10 minutes) while another package manager
/// holds dpkg's lock: an `apt-get` of the machine's own is not this test's
/// failure.
fn dpkg(args: &[&str]) -> Output {
    let t = std::time::Instant::now();
    loop {
        let o = Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|e| panic!("dpkg: {e}"));
        let locked = !o.status.success() && common::text(&o.stderr).contains("lock");
        if !locked || t.elapsed() > std::time::Duration::from_secs(600) {
            return o;
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

/// Purges the package when dropped (also when the test fails midway).
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = dpkg(&["--purge", "hugetext"]);
    }
}

/// The .deb: built with cargo-deb from the release build, installed with
/// dpkg, its /usr/bin/hugetext run (a command, the preload, the agent),
/// then removed, leaving nothing behind.
#[test]
fn deb_installs_works_from_usr_bin_and_removes_cleanly() {
    if !tool("cargo-deb") || !tool("dpkg") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip_line("skipped: dpkg -i needs root");
        return;
    }
    let installed = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "hugetext"])
        .output()
        .map(|o| common::text(&o.stdout).contains("installed"))
        .unwrap_or(false);
    if installed || Path::new("/usr/bin/hugetext").exists() {
        common::skip_line("skipped: hugetext is already installed on this machine; not touching it");
        return;
    }
    let out_dir = common::scratch();
    let t = Instant::now();
    let mut cmd = Command::new("cargo");
    cmd.current_dir(common::root())
        .args(["deb", "-p", "hugetext-cli", "--no-build", "--fast", "--output"])
        .arg(out_dir.path());
    let o = ok(&mut cmd);
    let deb = PathBuf::from(common::text(&o.stdout).trim().lines().last().unwrap());
    assert!(deb.exists(), "{}", deb.display());
    eprintln!("cargo deb: {:.1} s", t.elapsed().as_secs_f64());

    let guard = Installed;
    let o = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "dpkg -i: {}{}",
        common::text(&o.stdout),
        common::text(&o.stderr)
    );
    let o = ok(Command::new("/usr/bin/hugetext").arg("--version"));
    assert_eq!(
        common::text(&o.stdout).trim(),
        format!("hugetext {}", env!("CARGO_PKG_VERSION"))
    );
    for f in [
        "/usr/lib/hugetext/libhugetext.so",
        "/usr/include/hugetext.h",
        "/usr/share/man/man1/hugetext.1.gz",
        "/usr/share/bash-completion/completions/hugetext",
        "/usr/lib/systemd/system/hugetext-agent.service",
        "/usr/lib/systemd/system/run-hugetext-text.mount",
        "/usr/share/doc/hugetext/examples/agent.conf",
    ] {
        assert!(Path::new(f).exists(), "{f} not installed");
    }
    // `run` finds the packaged preload next to the packaged command.
    let o = ok(Command::new("/usr/bin/hugetext").args(["run", "--", "/bin/true"]));
    assert!(o.status.success());
    // The packaged agent with the packaged example config checks, serves,
    // and stops on SIGTERM.
    ok(Command::new("/usr/bin/hugetext").args([
        "agent",
        "--check-config",
        "--config",
        "/usr/share/doc/hugetext/examples/agent.conf",
    ]));
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut agent = Command::new("/usr/bin/hugetext")
        .args(["agent", "--listen", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let page = loop {
        if let Ok(s) = std::net::TcpStream::connect(&addr) {
            drop(s);
            let o = Command::new("/usr/bin/hugetext").arg("--version").output().unwrap();
            assert!(o.status.success());
            break scrape_once(&addr);
        }
        assert!(t.elapsed() < Duration::from_secs(20), "packaged agent not listening");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(page.contains("hugetext_agent_info{"), "{page}");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success());

    let o = dpkg(&["-r", "hugetext"]);
    assert!(
        o.status.success(),
        "dpkg -r: {}{}",
        common::text(&o.stdout),
        common::text(&o.stderr)
    );
    drop(guard);
    assert!(!Path::new("/usr/bin/hugetext").exists());
    assert!(!Path::new("/usr/lib/hugetext").exists());
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "hugetext"])
        .output()
        .unwrap();
    assert!(
        !common::text(&o.stdout).contains(" installed"),
        "{}",
        common::text(&o.stdout)
    );
}

/// GET /metrics over a plain connection.
fn scrape_once(addr: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder().proxy(None).build().into();
    agent
        .get(format!("http://{addr}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}
