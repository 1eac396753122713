//! Rootful podman for the container tests (`daemonset_pod.rs`,
//! `containers.rs`): the runtime flags this machine needs, whether podman
//! can run here, and containers removed when dropped.

#![allow(dead_code)] // each test binary uses its part

use hugetext_testkit as common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// podman here: runc (crun refuses this machine's hybrid cgroups), and file
/// and process limits within the hard limits (podman's default nofile is
/// above them).
pub const RUNTIME: [&str; 3] = [
    "--runtime=runc",
    "--ulimit=nofile=1024:1024",
    "--ulimit=nproc=4096:4096",
];

/// Root and podman, or skipped (a failure where CI is set: CI installs
/// podman with `scripts/install-deps.sh --containers`).
pub fn runtime_ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let podman = Command::new("podman")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if root && podman {
        return true;
    }
    let msg = if root {
        "skipped: podman not installed (scripts/install-deps.sh --containers)"
    } else {
        "skipped: rootful podman needs root"
    };
    common::skip_line(msg);
    assert!(
        std::env::var_os("CI").is_none(),
        "{msg} (CI is set: this test must run)"
    );
    false
}

/// `podman ARGS`.
pub fn podman(args: &[&str]) -> Output {
    Command::new("podman").args(args).output().unwrap()
}

/// A container removed when dropped (also when the test fails).
pub struct Container(pub String);

impl Container {
    /// `podman run --detach` with [`RUNTIME`], named `name`, and `args`
    /// (options, the image, its arguments).
    pub fn run(name: &str, args: &[&str]) -> Container {
        let _ = podman(&["rm", "--force", "--time=0", name]);
        let mut a = vec!["run", "--detach", "--pull=never"];
        let n = format!("--name={name}");
        a.push(&n);
        a.extend(RUNTIME);
        a.extend_from_slice(args);
        let o = podman(&a);
        let c = Container(name.to_string());
        assert!(o.status.success(), "podman {a:?}: {}", common::text(&o.stderr));
        c
    }

    /// The host pid of its first process.
    pub fn pid(&self) -> i32 {
        let o = podman(&["inspect", "--format", "{{.State.Pid}}", &self.0]);
        common::text(&o.stdout).trim().parse().unwrap()
    }

    /// Its full id.
    pub fn id(&self) -> String {
        let o = podman(&["inspect", "--format", "{{.Id}}", &self.0]);
        common::text(&o.stdout).trim().to_string()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time=5", &self.0]);
    }
}

/// The container tests' workload image (`scripts/build-workload-image.sh`:
/// an aligned fixture at `/fixture`, `sleep`, the loader and libc; no
/// hugetext), built or found up to date.
pub fn workload_image() -> String {
    let o = Command::new("bash")
        .arg(common::root().join("scripts/build-workload-image.sh"))
        .arg(common::fixtures())
        .current_dir(common::root())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "scripts/build-workload-image.sh: {}",
        common::text(&o.stderr)
    );
    common::text(&o.stdout).trim().to_string()
}

/// The image's one layer directory on the host (overlay storage).
pub fn layer_dir(image: &str) -> PathBuf {
    let o = podman(&[
        "image",
        "inspect",
        image,
        "--format",
        "{{.GraphDriver.Name}} {{.GraphDriver.Data.UpperDir}}",
    ]);
    let s = common::text(&o.stdout);
    let (driver, dir) = s.trim().split_once(' ').unwrap();
    assert_eq!(driver, "overlay", "podman's storage driver");
    PathBuf::from(dir)
}
