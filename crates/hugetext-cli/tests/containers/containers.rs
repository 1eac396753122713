//! Programs in containers (rootful podman, overlay storage): inspected,
//! explained and warmed from the host through `/proc/PID/root`; the page
//! cache that gets 2 MiB folios is the image layer's file, shared by every
//! container of the image; `run` inside an image that has hugetext, and
//! `run -- chroot/nsenter` into a container root that lacks it.
//!
//! The workload image (`scripts/build-workload-image.sh`): an aligned
//! 20 MiB-text fixture at `/fixture`, `sleep`, the loader and libc; no
//! hugetext.

use hugetext_testkit as common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::podman_support;
use podman_support::{layer_dir, podman, runtime_ready, workload_image, Container, RUNTIME};

/// The tests share the workload image's layer file (its page cache is
/// evicted and warmed): one at a time.
static LAYER: Mutex<()> = Mutex::new(());

/// Containers named after this test process.
fn name(what: &str) -> String {
    format!("hugetext-ctr-{what}-{}", std::process::id())
}

/// Bytes of `/fixture`'s executable mappings of `pid` mapped by PMDs.
fn fixture_pmd(pid: i32) -> u64 {
    hugetext::run::remap::text_mappings(pid)
        .unwrap()
        .into_iter()
        .filter(|m| m.path == "/fixture")
        .map(|m| m.file_pmd)
        .sum()
}

/// Root, podman, overlay storage on a filesystem with PMD-size page-cache
/// folios; else skipped.
fn ready() -> Option<(String, PathBuf)> {
    if !runtime_ready() {
        return None;
    }
    let image = workload_image();
    let layer = layer_dir(&image);
    if !common::fs_gives_pmd_folios(&layer) {
        common::skip_line("skipped: podman's storage gives no PMD-size page-cache folios");
        return None;
    }
    Some((image, layer))
}

/// Two containers of one image share the text warmed through a third's
/// root: the 2 MiB folios are the layer file's page cache. Warming while a
/// container maps the file names that container's process (each container
/// sees the file through its own overlayfs mount, with its own device
/// number), and explain tells the path to warm from the host.
#[test]
fn containers_of_one_image_share_text_warmed_through_one() {
    let Some((image, layer)) = ready() else { return };
    let _one = LAYER.lock().unwrap_or_else(|e| e.into_inner());
    let lower = layer.join("fixture");
    let eligible = common::text_window_bytes(&lower) / common::pmd();
    assert!(eligible >= 4, "{eligible}");
    hugetext::pagecache::evict(&std::fs::File::open(&lower).unwrap(), 0..0).unwrap();

    // A container runs the program on small folios.
    let a = Container::run(&name("a"), &["--interactive", &image, "wait"]);
    let pa = a.pid();
    // Wait for it to have mapped its text (it prints "ready").
    let t = std::time::Instant::now();
    while !common::text(&podman(&["logs", &a.0]).stdout).contains("ready") {
        assert!(t.elapsed().as_secs() < 60, "container a not ready");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(fixture_pmd(pa), 0);
    // explain names the file as the host reaches it.
    let o = common::hugetext(&["explain", "--pid", &pa.to_string()]);
    let out = common::text(&o.stdout);
    let want = format!("hugetext warm /proc/{pa}/root/fixture");
    assert!(
        out.contains(&want),
        "explain: no `{want}`:\n{out}{}",
        common::text(&o.stderr)
    );

    // Another container of the image, running only sleep: warm through its
    // root while a still maps the file: a's process is named as blocking.
    let b = Container::run(&name("b"), &["--entrypoint=/sleep", &image, "600"]);
    let via_b = format!("/proc/{}/root/fixture", b.pid());
    let o = common::hugetext(&["warm", "--json", &via_b]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", common::text(&o.stdout), common::text(&o.stderr)));
    let f = &j["files"][0];
    let by: Vec<i64> = f["blocked_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_i64().unwrap())
        .collect();
    assert!(
        by.contains(&(pa as i64)),
        "warm through b's root did not name a's pid {pa}: {f}"
    );
    assert_eq!(f["blocked_windows"].as_u64(), Some(eligible), "{f}");
    drop(a);

    // Once a is gone, one warm through b's root fills the layer file.
    let o = common::hugetext(&["warm", "--json", &via_b]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        j["files"][0]["unit_windows"].as_u64(),
        Some(eligible),
        "{}",
        common::text(&o.stderr)
    );
    assert_eq!(j["files"][0]["filesystem"].as_str(), Some("overlayfs"), "{j}");
    let host = hugetext::folio::scan_file(&lower, None).unwrap().unit_windows.len() as u64;
    assert_eq!(
        host,
        eligible,
        "the layer's own file {} holds the folios",
        lower.display()
    );

    // Two new containers of the image map the text by PMDs, and inspect
    // and explain say so.
    let c = Container::run(&name("c"), &["--interactive", &image, "wait"]);
    let d = Container::run(&name("d"), &["--interactive", &image, "wait"]);
    for ctr in [&c, &d] {
        let t = std::time::Instant::now();
        while !common::text(&podman(&["logs", &ctr.0]).stdout).contains("ready") {
            assert!(t.elapsed().as_secs() < 60, "container {} not ready", ctr.0);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let pid = ctr.pid();
        assert_eq!(
            fixture_pmd(pid),
            eligible * common::pmd(),
            "container {} (pid {pid})",
            ctr.0
        );
        let o = common::hugetext(&["explain", "--pid", &pid.to_string()]);
        let out = common::text(&o.stdout);
        assert!(
            out.contains(&format!("all {eligible} whole 2 MiB windows are PMD-mapped")),
            "{out}"
        );
        let o = common::hugetext(&["inspect", "--pid", &pid.to_string(), "--json"]);
        assert!(o.status.success(), "{}", common::text(&o.stderr));
        assert!(
            common::text(&o.stdout).contains("thp-pmd-aligned"),
            "{}",
            common::text(&o.stdout)
        );
    }
    eprintln!(
        "{eligible} windows warmed once through {via_b}: containers {} and {} PMD-map all of them",
        c.0, d.0
    );
}

/// `hugetext run` inside the hugetext image remaps a program; `run --
/// chroot ROOT` and `run -- nsenter -t PID -m` into a container root
/// without hugetext say so in one line and run the program as it is.
#[test]
fn run_inside_an_image_with_hugetext_and_into_one_without() {
    let Some((image, _layer)) = ready() else { return };
    let hugetext_image = format!("localhost/hugetext:{}", env!("CARGO_PKG_VERSION"));
    if podman(&["image", "exists", &hugetext_image]).status.code() != Some(0) {
        let o = Command::new("bash")
            .arg(common::root().join("scripts/build-image.sh"))
            .current_dir(common::root())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", common::text(&o.stderr));
    }
    let fixture = common::fixture("bfd", "nopie");
    let vol = format!("--volume={}:/fixture:ro", fixture.display());
    let report = format!("--env={}=json", hugetext_abi::settings::REPORT);
    let mut a = vec![
        "run",
        "--rm",
        "--pull=never",
        "--entrypoint=/usr/bin/hugetext",
        vol.as_str(),
        report.as_str(),
    ];
    a.extend(RUNTIME);
    a.extend([hugetext_image.as_str(), "run", "--", "/fixture"]);
    let o = podman(&a);
    let err = common::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        common::text(&o.stdout).starts_with("sum="),
        "{}",
        common::text(&o.stdout)
    );
    let rec = common::start_record(&err);
    let want = common::text_window_bytes(&fixture);
    assert_eq!(
        (rec["windows"].as_u64(), rec["huge"].as_u64()),
        (Some(want), Some(want)),
        "not every window huge inside the container: {rec}"
    );

    let _one = LAYER.lock().unwrap_or_else(|e| e.into_inner());
    let b = Container::run(&name("root"), &["--entrypoint=/sleep", &image, "600"]);
    let root = format!("/proc/{}/root", b.pid());
    let pid = b.pid().to_string();
    for launcher in [
        vec!["chroot", root.as_str(), "/fixture"],
        vec!["nsenter", "-t", pid.as_str(), "-m", "/fixture"],
    ] {
        let o = Command::new(common::bin())
            .arg("run")
            .arg("--")
            .args(&launcher)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let err = common::text(&o.stderr);
        assert!(o.status.success(), "{launcher:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{launcher:?}: {err}");
        assert!(err.contains("does not exist: it runs without hugetext"), "{err}");
        assert!(common::text(&o.stdout).starts_with("sum="), "{launcher:?}");
    }
}
