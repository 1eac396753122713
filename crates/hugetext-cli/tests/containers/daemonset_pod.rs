//! The DaemonSet's pod, for real: the image `scripts/build-image.sh` builds
//! (a Debian minbase root plus the .deb) run under rootful podman with the
//! settings `packaging/k8s/daemonset.yaml` gives its container. Each
//! manifest field is translated to its podman flag in one place
//! ([`podman_args`]); a field it does not know fails the test, so the
//! manifest and what is tested cannot drift apart. The pod must find a host
//! process (per-path and per-cgroup ratios equal to smaps) and warm a
//! `/host/...` file into PMD-size folios of the host's page cache.

use common::{sample, status_kb};
use hugetext_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_yaml::Value as Yaml;

use crate::k8s_support;
use crate::podman_support;
use k8s_support::{docs, of_kind};
use podman_support::{podman, runtime_ready, Container, RUNTIME};

fn manifest() -> Vec<Yaml> {
    docs("packaging/k8s/daemonset.yaml")
}

fn keys(v: &Yaml) -> Vec<String> {
    v.as_mapping()
        .map(|m| m.keys().map(|k| k.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn unknown(what: &str, key: &str) -> ! {
    panic!("daemonset.yaml: {what}.{key}: no podman translation; add one to podman_args")
}

/// A Kubernetes CPU quantity in cores ("500m", "1", "0.5").
fn cpu_cores(q: &str) -> f64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse::<f64>().unwrap() / 1000.0,
        None => q.parse().unwrap(),
    }
}

/// A Kubernetes memory quantity in bytes ("256Mi", "1Gi", "32M", "1000").
fn mem_bytes(q: &str) -> u64 {
    for (suffix, mult) in [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ] {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() * mult;
        }
    }
    q.parse().unwrap()
}

/// The pod as podman runs it: the `podman run` arguments (up to and
/// including the image and the container's args), with the ConfigMap's
/// files written to `configmaps` and the first container port published on
/// 127.0.0.1:`host_port`. Every field of the pod spec, the container and its
/// security context is either translated here or named as having no
/// runtime effect (scheduling only); anything else panics.
fn podman_args(docs: &[Yaml], configmaps: &Path, host_port: u16, name: &str) -> Vec<String> {
    let ds = of_kind(docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let mut a: Vec<String> = vec!["run".into(), "--detach".into(), "--pull=never".into()];
    a.push(format!("--name={name}"));
    a.extend(RUNTIME.iter().map(|s| s.to_string()));
    let mut containers = pod["containers"].as_sequence().unwrap().iter();
    let c = containers.next().expect("a container");
    assert!(containers.next().is_none(), "one container per pod here");
    for k in keys(pod) {
        match k.as_str() {
            "hostPID" => {
                if pod["hostPID"] == true {
                    a.push("--pid=host".into());
                }
            }
            "hostNetwork" | "hostIPC" => {
                if pod[k.as_str()] == true {
                    a.push(format!("--{}=host", if k == "hostIPC" { "ipc" } else { "network" }));
                }
            }
            // Scheduling only: which node, and what evicts what.
            "priorityClassName" | "tolerations" | "nodeSelector" => {}
            "containers" | "volumes" => {}
            _ => unknown("spec.template.spec", &k),
        }
    }
    let mut image = None;
    let mut args: Vec<String> = vec![];
    for k in keys(c) {
        let v = &c[k.as_str()];
        match k.as_str() {
            "name" => {}
            "image" => image = Some(v.as_str().unwrap().to_string()),
            "args" => {
                args = v
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect()
            }
            "ports" => {
                let ports = v.as_sequence().unwrap();
                assert_eq!(ports.len(), 1, "one port here");
                let p = &ports[0];
                let proto = p["protocol"].as_str().unwrap_or("TCP").to_lowercase();
                a.push(format!(
                    "--publish=127.0.0.1:{host_port}:{}/{proto}",
                    p["containerPort"].as_u64().unwrap()
                ));
            }
            // The kubelet's probes: the test makes the same GET (see
            // `probe_path`) before it scrapes.
            "readinessProbe" | "livenessProbe" => {
                assert!(v["httpGet"]["path"].is_string(), "{k}: an httpGet probe");
            }
            "resources" => {
                for (kk, vv) in v.as_mapping().unwrap() {
                    for (r, q) in vv.as_mapping().unwrap() {
                        let q = q.as_str().unwrap();
                        match (kk.as_str().unwrap(), r.as_str().unwrap()) {
                            ("limits", "cpu") => a.push(format!("--cpus={}", cpu_cores(q))),
                            ("limits", "memory") => a.push(format!("--memory={}", mem_bytes(q))),
                            // The kubelet's shares: milli-CPU * 1024 / 1000.
                            ("requests", "cpu") => {
                                a.push(format!("--cpu-shares={}", ((cpu_cores(q) * 1024.0) as u64).max(2)))
                            }
                            // Scheduling only (no cgroup setting on cgroup v1).
                            ("requests", "memory") => {}
                            (x, y) => unknown("resources", &format!("{x}.{y}")),
                        }
                    }
                }
            }
            "securityContext" => {
                for kk in keys(v) {
                    let vv = &v[kk.as_str()];
                    match kk.as_str() {
                        "runAsUser" => a.push(format!("--user={}", vv.as_u64().unwrap())),
                        "runAsGroup" => {}
                        "privileged" => {
                            if *vv == true {
                                a.push("--privileged".into());
                            }
                        }
                        "allowPrivilegeEscalation" => {
                            if *vv == false {
                                a.push("--security-opt=no-new-privileges".into());
                            }
                        }
                        "readOnlyRootFilesystem" => {
                            if *vv == true {
                                // Kubernetes mounts no tmpfs of its own.
                                a.push("--read-only".into());
                                a.push("--read-only-tmpfs=false".into());
                            }
                        }
                        "capabilities" => {
                            for d in vv["drop"].as_sequence().into_iter().flatten() {
                                a.push(format!("--cap-drop={}", d.as_str().unwrap()));
                            }
                            for d in vv["add"].as_sequence().into_iter().flatten() {
                                a.push(format!("--cap-add={}", d.as_str().unwrap()));
                            }
                        }
                        "seccompProfile" => match vv["type"].as_str().unwrap() {
                            // The runtime's default profile: podman's, which
                            // like containerd's derives from Docker's.
                            "RuntimeDefault" => {
                                a.push("--security-opt=seccomp=/usr/share/containers/seccomp.json".into())
                            }
                            "Unconfined" => a.push("--security-opt=seccomp=unconfined".into()),
                            t => unknown("seccompProfile.type", t),
                        },
                        _ => unknown("securityContext", &kk),
                    }
                }
            }
            "volumeMounts" => {
                for m in v.as_sequence().unwrap() {
                    let vname = m["name"].as_str().unwrap();
                    let vol = pod["volumes"]
                        .as_sequence()
                        .unwrap()
                        .iter()
                        .find(|x| x["name"] == vname)
                        .unwrap_or_else(|| panic!("volume {vname}"));
                    let mut opts = vec![if m["readOnly"] == true { "ro" } else { "rw" }];
                    match m["mountPropagation"].as_str() {
                        None | Some("None") => {}
                        Some("HostToContainer") => opts.push("rslave"),
                        Some("Bidirectional") => opts.push("rshared"),
                        Some(p) => unknown("mountPropagation", p),
                    }
                    let src = if !vol["hostPath"].is_null() {
                        let p = PathBuf::from(vol["hostPath"]["path"].as_str().unwrap());
                        match vol["hostPath"]["type"].as_str() {
                            Some("Directory") => assert!(p.is_dir(), "hostPath {}", p.display()),
                            // What the kubelet does: make it (0755) if missing.
                            Some("DirectoryOrCreate") => std::fs::create_dir_all(&p).unwrap(),
                            t => unknown("hostPath.type", t.unwrap_or("(none)")),
                        }
                        p
                    } else if !vol["configMap"].is_null() {
                        let cm_name = vol["configMap"]["name"].as_str().unwrap();
                        let dir = configmaps.join(cm_name);
                        assert!(dir.is_dir(), "ConfigMap {cm_name} not written");
                        dir
                    } else {
                        unknown("volumes", vname)
                    };
                    a.push(format!(
                        "--volume={}:{}:{}",
                        src.display(),
                        m["mountPath"].as_str().unwrap(),
                        opts.join(",")
                    ));
                }
            }
            _ => unknown("containers[0]", &k),
        }
    }
    a.push(image.expect("an image"));
    a.extend(args);
    a
}

/// The path the kubelet's readiness probe GETs.
fn probe_path(docs: &[Yaml]) -> String {
    let c = &of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    c["readinessProbe"]["httpGet"]["path"].as_str().unwrap().to_string()
}

/// The image, built (or found up to date) once per test binary.
fn image() -> String {
    static BUILT: Mutex<bool> = Mutex::new(false);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("localhost/hugetext:{}", env!("CARGO_PKG_VERSION"));
    if !*built {
        let t = Instant::now();
        let o = Command::new("bash")
            .arg(common::root().join("scripts/build-image.sh"))
            .current_dir(common::root())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "scripts/build-image.sh: {}{}",
            common::text(&o.stdout),
            common::text(&o.stderr)
        );
        eprintln!(
            "{} ({:.1} s)",
            common::text(&o.stderr).trim(),
            t.elapsed().as_secs_f64()
        );
        *built = true;
    }
    name
}

/// The image runs the command: `--version`, `doctor`, `agent`.
#[test]
fn image_runs_version_doctor_and_agent() {
    if !runtime_ready() {
        return;
    }
    let img = image();
    let run = |args: &[&str]| {
        let mut a = vec!["run", "--rm", "--pull=never"];
        a.extend(RUNTIME);
        a.push(img.as_str());
        a.extend_from_slice(args);
        podman(&a)
    };
    let o = run(&["--version"]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    assert_eq!(
        common::text(&o.stdout).trim(),
        format!("hugetext {}", env!("CARGO_PKG_VERSION"))
    );
    let o = run(&["doctor"]);
    let all = format!("{}{}", common::text(&o.stdout), common::text(&o.stderr));
    assert!(o.status.code().is_some_and(|c| c < 101), "doctor: {all}");
    assert!(!all.contains("panicked"), "{all}");
    assert!(
        all.to_lowercase().contains("transparent_hugepage") || all.contains("THP"),
        "{all}"
    );
    let o = run(&[
        "agent",
        "--check-config",
        "--config",
        "/usr/share/doc/hugetext/examples/agent.conf",
    ]);
    assert!(
        o.status.success(),
        "{}{}",
        common::text(&o.stdout),
        common::text(&o.stderr)
    );
    // No apt lists, docs or man pages; the examples are there.
    let mut a = vec!["run", "--rm", "--pull=never", "--entrypoint=/bin/sh"];
    a.extend(RUNTIME);
    a.extend([
        img.as_str(),
        "-c",
        "find /var/lib/apt/lists /usr/share/doc /usr/share/man /usr/share/locale -type f 2>/dev/null",
    ]);
    let listing = common::text(&podman(&a).stdout);
    let extra: Vec<&str> = listing
        .lines()
        .filter(|f| {
            !(f.ends_with("/copyright")
                || f.starts_with("/usr/share/doc/hugetext/examples/")
                || *f == "/var/lib/apt/lists/lock"
                || *f == "/usr/share/locale/locale.alias")
        })
        .collect();
    assert!(extra.is_empty(), "files the image should not have: {extra:?}");
    assert!(
        listing.contains("/usr/share/doc/hugetext/examples/agent.conf"),
        "{listing}"
    );
    let size: u64 = common::text(&podman(&["image", "inspect", &img, "--format", "{{.Size}}"]).stdout)
        .trim()
        .parse()
        .unwrap();
    eprintln!("image {img}: {} MiB", size >> 20);
    assert!(size < 200 << 20, "image is {} MiB", size >> 20);
}

/// A field the translation does not know fails, naming itself: the test
/// cannot silently run something other than the manifest.
#[test]
#[should_panic(expected = "securityContext.seLinuxOptions: no podman translation")]
fn a_manifest_field_without_a_podman_flag_fails() {
    let mut docs = manifest();
    let ds = docs.iter_mut().find(|d| d["kind"] == "DaemonSet").unwrap();
    let sc = &mut ds["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    sc.as_mapping_mut()
        .unwrap()
        .insert("seLinuxOptions".into(), Yaml::Mapping(Default::default()));
    let dir = common::scratch();
    std::fs::create_dir_all(dir.path().join("hugetext-agent")).unwrap();
    podman_args(&docs, dir.path(), 9437, "unused");
}

/// CPU time (user + system, clock ticks) and RSS (kB) of a host pid.
fn cpu_rss(pid: i32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split_whitespace().collect();
    let ticks = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    (ticks, status_kb(pid, "VmRSS:"))
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// (FilePmdMapped, Rss) of `file`'s executable mappings in `pid`, from
/// smaps; of all its file-backed executable mappings with `None`.
fn smaps_text(pid: i32, file: Option<&Path>) -> (u64, u64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let want = file.map(|f| f.canonicalize().unwrap().to_string_lossy().into_owned());
    let (mut pmd, mut rss, mut inside) = (0, 0, false);
    for l in smaps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 5 && f[0].contains('-') && !l.ends_with(" kB") {
            inside = f[1].contains('x')
                && f.get(5)
                    .is_some_and(|p| want.as_deref().map_or(p.starts_with('/'), |w| *p == w));
        } else if inside {
            let kb = |k: &str| {
                l.strip_prefix(k)
                    .map(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024)
            };
            if let Some(v) = kb("FilePmdMapped:") {
                pmd += v;
            }
            if let Some(v) = kb("Rss:") {
                rss += v;
            }
        }
    }
    (pmd, rss)
}

fn get(url: &str) -> Option<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    agent.get(url).call().ok()?.body_mut().read_to_string().ok()
}

/// The DaemonSet's pod under podman: it scrapes a host process equal to
/// smaps (per path and per cgroup) and warms a `/host/...` file into
/// PMD-size folios of the host's page cache.
#[test]
fn daemonset_pod_sees_host_processes_and_warms_host_files() {
    if !runtime_ready() {
        return;
    }
    let dir = common::scratch();
    if !common::fs_gives_pmd_folios(dir.path()) {
        common::skip_line("skipped: the scratch filesystem gives no PMD-size page-cache folios");
        return;
    }
    let img = image();
    let docs = manifest();

    // A host process on warmed, PMD-mapped text, in a cgroup of its own.
    let running_dir = dir.path().join("running");
    std::fs::create_dir(&running_dir).unwrap();
    let prog = common::copy_fixture(&running_dir, "bfd", "nopie");
    common::read_small(&prog);
    let w = common::hugetext(&["warm", prog.to_str().unwrap()]);
    assert!(w.status.success(), "{}", common::text(&w.stderr));
    let r = common::Running::fixture(&prog);
    let cg = common::Cgroup::new(&format!("/hugetext-pod-test-{}", std::process::id()))
        .expect("a cgroup v2 hierarchy to make a cgroup in");
    cg.enter(r.pid());

    // The policy file: not mapped by anyone, evicted, named as /host/...
    let policy_dir = dir.path().join("policy");
    std::fs::create_dir(&policy_dir).unwrap();
    let target = common::copy_fixture(&policy_dir, "bfd", "nopie");
    hugetext::pagecache::evict(&std::fs::File::open(&target).unwrap(), 0..0).unwrap();
    let target = target.canonicalize().unwrap();
    assert_eq!(
        hugetext::folio::scan_file(&target, None).unwrap().unit_windows.len(),
        0,
        "policy file already in PMD folios before the pod started"
    );
    let in_pod = format!("/host{}", target.display());

    // The ConfigMap as the manifest has it, with the policy naming that file.
    let cm = of_kind(&docs, "ConfigMap");
    let cm_dir = dir
        .path()
        .join("configmaps")
        .join(cm["metadata"]["name"].as_str().unwrap());
    std::fs::create_dir_all(&cm_dir).unwrap();
    for (k, v) in cm["data"].as_mapping().unwrap() {
        let mut text = v.as_str().unwrap().to_string();
        if k == "warm.conf" {
            assert!(text.contains("paths = []"), "{text}");
            text = text.replacen("paths = []", &format!("paths = [\"{in_pod}\"]"), 1);
            text = text.replace("[agent]", "[agent]\npoll_interval = \"1s\"");
        }
        std::fs::write(cm_dir.join(k.as_str().unwrap()), text).unwrap();
    }

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let name = format!("hugetext-pod-test-{}", std::process::id());
    let args = podman_args(&docs, &dir.path().join("configmaps"), port, &name);
    // The manifest's image is the one build-image.sh built and tagged.
    let id = |i: &str| common::text(&podman(&["image", "inspect", "--format", "{{.Id}}", i]).stdout);
    let manifest_image = of_kind(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(id(&manifest_image), id(&img), "{manifest_image} is not {img}");
    eprintln!("podman {}", args.join(" "));
    let o = Command::new("podman").args(&args).output().unwrap();
    let ctr = Container(name.clone());
    assert!(o.status.success(), "podman run: {}", common::text(&o.stderr));
    let logs = || {
        let o = podman(&["logs", &name]);
        format!("{}{}", common::text(&o.stdout), common::text(&o.stderr))
    };

    // The kubelet's readiness probe, then a scrape.
    let base = format!("http://127.0.0.1:{port}");
    let t = Instant::now();
    while get(&format!("{base}{}", probe_path(&docs))).is_none() {
        assert!(t.elapsed() < Duration::from_secs(120), "pod not ready: {}", logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid: i32 = common::text(&podman(&["inspect", "--format", "{{.State.Pid}}", &name]).stdout)
        .trim()
        .parse()
        .unwrap();

    // The host's page cache: the pod warms the /host file.
    // Its log says all eligible windows were filled, and the metric counts
    // them; the host then sees PMD-size folios it did not have before (some
    // may be reclaimed again meanwhile on a busy machine: at least one).
    let eligible = {
        let t = Instant::now();
        let prefix = format!("warmed {in_pod}: ");
        loop {
            let l = logs();
            if let Some(rest) = l.lines().find_map(|l| l.split_once(&prefix).map(|x| x.1.to_string())) {
                let (done, of) = rest.split_once(' ').unwrap().0.split_once('/').unwrap();
                assert_eq!(done, of, "{l}");
                break of.parse::<usize>().unwrap();
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "the pod did not warm {in_pod}: {l}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    assert!(eligible >= 2, "{eligible}");
    let page = get(&format!("{base}/metrics")).unwrap();
    assert_eq!(
        sample(&page, &format!("hugetext_policy_eligible_windows{{path=\"{in_pod}\"}}")),
        Some(eligible as f64),
        "{page}"
    );
    let (cpu_warm, _) = cpu_rss(pid);
    let hwm = status_kb(pid, "VmHWM:");
    eprintln!(
        "pod agent: start to warm done: {:.2} s CPU, peak RSS {hwm} kB",
        cpu_warm as f64 / clk_tck()
    );
    let host_side = hugetext::folio::scan_file(&target, None).unwrap().unit_windows.len();
    assert!(
        (1..=eligible).contains(&host_side),
        "{host_side} PMD folios of {} seen from the host",
        target.display()
    );

    // The host process, per path and per cgroup, equal to smaps.
    let page = get(&format!("{base}/metrics")).unwrap();
    let (pmd, rss) = smaps_text(r.pid(), Some(&prog));
    assert!(pmd >= 2 * common::pmd(), "host process not PMD-mapped: {pmd}");
    let path = prog.canonicalize().unwrap();
    let q = format!(
        "hugetext_exe_text_bytes{{path=\"{}\",kind=\"file\",class=\"thp-pmd-aligned-2048kB\"}}",
        path.display()
    );
    assert_eq!(sample(&page, &q), Some(pmd as f64), "{q}\n{page}");
    let want = pmd as f64 / rss as f64;
    let ratio = sample(
        &page,
        &format!("hugetext_exe_pmd_mapped_ratio{{path=\"{}\"}}", path.display()),
    )
    .unwrap_or_else(|| panic!("no ratio for {}: {page}", path.display()));
    assert!((ratio - want).abs() < 1e-6, "per path: {ratio} vs smaps {want}");
    // The cgroup holds the one process: all its file text (libc too).
    let (pmd_all, rss_all) = smaps_text(r.pid(), None);
    let want = pmd_all as f64 / rss_all as f64;
    let ratio = sample(
        &page,
        &format!("hugetext_cgroup_pmd_mapped_ratio{{cgroup=\"{}\"}}", cg.name),
    )
    .unwrap_or_else(|| panic!("no ratio for cgroup {}: {page}", cg.name));
    // The cgroup's file text, by class, against smaps: PMD-mapped bytes
    // exactly, the total within 4 pages: the agent also counts the [vdso]'s
    // present page as file text (PAGEMAP_SCAN calls kernel pages file),
    // which this sum of file mappings leaves out.
    let prefix = format!("hugetext_cgroup_text_bytes{{cgroup=\"{}\",kind=\"file\",", cg.name);
    let total: f64 = page
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let pmd_cg = sample(&page, &format!("{prefix}class=\"thp-pmd-aligned-2048kB\"}}"));
    eprintln!(
        "cgroup {}: agent {pmd_cg:?} PMD of {total} bytes, ratio {ratio}; smaps {pmd_all} of {rss_all}, {want}",
        cg.name
    );
    assert_eq!(pmd_cg, Some(pmd_all as f64), "per cgroup PMD-mapped bytes\n{page}");
    assert!(
        (total - rss_all as f64).abs() <= 16384.0,
        "per cgroup file text: agent {total}, smaps Rss {rss_all}"
    );
    assert!((ratio - want).abs() < 0.001, "per cgroup: {ratio} vs smaps {want}");
    assert_eq!(
        sample(&page, &format!("hugetext_cgroup_processes{{cgroup=\"{}\"}}", cg.name)),
        Some(1.0)
    );

    // Resource use: idle for 10 s (scraped once), then what the warm cost.
    let (c0, _) = cpu_rss(pid);
    std::thread::sleep(Duration::from_secs(10));
    let (c1, rss_idle) = cpu_rss(pid);
    let hz = clk_tck();
    eprintln!(
        "pod agent: idle {:.1}% CPU over 10 s, RSS {rss_idle} kB",
        (c1 - c0) as f64 / hz / 10.0 * 100.0
    );
    assert!(rss_idle < 256 * 1024, "RSS {rss_idle} kB over the manifest's limit");
    drop(ctr);
    r.stop();
    drop(cg);
}
