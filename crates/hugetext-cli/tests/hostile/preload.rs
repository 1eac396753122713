//! Hostile cases: the preload (libhugetext.so) in a program that root (or
//! a set-user-ID program) runs, with a local user preparing its
//! `/tmp/perf-PID.map` or its environment.
//!
//! Each case runs in a mount namespace with a scratch directory bound over
//! /tmp (the host's /tmp is never touched), and the perf-map cases in a pid
//! namespace with its own /proc: the program is pid 1 there, so the path the
//! preload opens is known in advance (`/tmp/perf-1.map`).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hugetext_testkit as tk;

/// A scratch directory the attacker can reach, with `tmp/` (mode 1777,
/// root's, like /tmp) to bind over /tmp.
pub(super) fn scratch_with_tmp() -> (tempfile::TempDir, PathBuf) {
    let d = tk::scratch();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    tk::prepare_private_tmp(&tmp);
    (d, tmp)
}

/// `unshare` running what the caller appends with `tmp` bound over /tmp;
/// with `pid_ns`, as pid 1 of a new pid namespace with its own /proc (and
/// killed when unshare is). A checkout under /tmp stays visible
/// (`tk::private_tmp_args`; `tmp` from [`scratch_with_tmp`]).
pub(super) fn with_private_tmp(tmp: &Path, pid_ns: bool) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.arg("--mount");
    if pid_ns {
        cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"]);
    }
    cmd.args(tk::private_tmp_args(tmp));
    cmd.env_remove("HUGETEXT_STRATEGY").env_remove("HUGETEXT_VERBOSE");
    cmd
}

/// Run `cmd`, killing it if it has not finished within `limit`. Returns
/// its output, or None when it had to be killed (it hung).
pub(super) fn output_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn unshare (util-linux)");
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// `hugetext run -v --strategy copy -- FIXTURE` as pid 1 of a pid
/// namespace with `tmp` as its /tmp: the copy route writes
/// `/tmp/perf-1.map`.
fn run_copy_as_pid_1(tmp: &Path) -> Option<Output> {
    tk::preload();
    let prog = tk::fixture("lld", "pie");
    let mut cmd = with_private_tmp(tmp, true);
    cmd.arg(tk::bin())
        .args(["run", "-v", "--strategy", "copy", "--"])
        .arg(&prog);
    output_within(&mut cmd, Duration::from_secs(30))
}

/// The host's `/tmp/perf-1.map` as it is (absent, or its inode and size):
/// the namespaced cases must leave it alone.
fn host_perf_1() -> Option<(u64, u64, i64)> {
    let m = std::fs::symlink_metadata("/tmp/perf-1.map").ok()?;
    Some((m.ino(), m.len(), m.mtime()))
}

fn sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/fs/{name}"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn a_fifo_at_the_perf_map_path_does_not_hang_the_program() {
    // With fs.protected_fifos >= 1 the kernel itself refuses the O_CREAT
    // open of another user's FIFO in a sticky world-writable directory
    // (EACCES), so the preload's own check is not what saves the program.
    if sysctl("protected_fifos") != "0" {
        tk::skip_line(
            "fs.protected_fifos is not 0: the kernel refuses the attacker's FIFO before the preload looks at it; the case runs but does not exercise the preload's check",
        );
    }
    let (_d, tmp) = scratch_with_tmp();
    let fifo = tmp.join("perf-1.map");
    let st = tk::as_attacker().arg("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success(), "mkfifo as ht-attacker");
    let host = host_perf_1();
    let before = tk::tree_state(&tmp);
    let o = run_copy_as_pid_1(&tmp).expect("the program hung on the FIFO at /tmp/perf-1.map (killed after 30 s)");
    let err = tk::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(tk::text(&o.stdout).starts_with("sum="), "{}", tk::text(&o.stdout));
    assert!(err.contains("copy"), "the copy route did not run: {err}");
    let why: Vec<_> = err
        .lines()
        .filter(|l| l.contains("not writing /tmp/perf-1.map"))
        .collect();
    assert_eq!(why.len(), 1, "one -v line says why no perf map: {err}");
    assert_eq!(tk::tree_state(&tmp), before, "the FIFO was replaced or changed");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(host_perf_1(), host, "the host's /tmp/perf-1.map changed");
}

#[test]
fn a_hard_link_at_the_perf_map_path_leaves_its_target_unchanged() {
    let (d, tmp) = scratch_with_tmp();
    let vdir = d.path().join("victim");
    std::fs::create_dir(&vdir).unwrap();
    let victim = vdir.join("secret");
    std::fs::write(&victim, "root's file\n").unwrap();
    // Written long ago, so that even a map judged stale would be emptied.
    let st = Command::new("touch")
        .args(["-d", "-1 hour"])
        .arg(&victim)
        .status()
        .unwrap();
    assert!(st.success());
    // The link is made as root: with fs.protected_hardlinks=1 (the default,
    // and this machine's) the attacker may not link a file it cannot write;
    // with protected_hardlinks=0 it may, and this is the file it would make.
    std::fs::hard_link(&victim, tmp.join("perf-1.map")).unwrap();
    let host = host_perf_1();
    let before = tk::tree_state(&vdir);
    let o = run_copy_as_pid_1(&tmp).expect("the program hung");
    let err = tk::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("copy"), "the copy route did not run: {err}");
    assert!(
        err.lines()
            .any(|l| l.contains("not writing /tmp/perf-1.map") && l.contains("hard link")),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
    assert_eq!(tk::tree_state(&vdir), before, "the victim changed");
    assert_eq!(host_perf_1(), host, "the host's /tmp/perf-1.map changed");
}

/// A set-user-ID-root program that calls `hugetext_remap_text()` and runs
/// code of the fixtures' libbig.so (whose text has whole windows to copy).
pub(super) fn setuid_capi_program(dir: &Path) -> PathBuf {
    let src = dir.join("suid.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include \"hugetext.h\"\nextern long lib_f0(void);\n\
         int main(void) { long r = hugetext_remap_text(); printf(\"%ld %ld\\n\", r, lib_f0()); return 0; }\n",
    )
    .unwrap();
    let lib = tk::target_profile_dir();
    let big = tk::fixture("lld", "libbig.so");
    let big = big.parent().unwrap();
    let exe = dir.join("suid");
    let o = Command::new("gcc")
        .arg("-O1")
        .arg("-I")
        .arg(tk::root().join("include"))
        .arg(&src)
        .arg("-L")
        .arg(big)
        .arg("-lbig")
        .arg("-L")
        .arg(&lib)
        .arg("-lhugetext")
        // Absolute run paths: the loader honours them in secure-execution
        // mode (it ignores LD_LIBRARY_PATH and $ORIGIN there).
        .arg(format!("-Wl,-rpath,{}:{}", big.display(), lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("gcc");
    assert!(o.status.success(), "gcc: {}", tk::text(&o.stderr));
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o4755)).unwrap();
    exe
}

#[test]
fn secure_execution_ignores_hugetext_variables_and_writes_no_perf_map() {
    tk::preload();
    let (d, tmp) = scratch_with_tmp();
    let exe = setuid_capi_program(d.path());
    // The scratch filesystem must honour set-user-ID bits.
    let nosuid = Command::new("findmnt")
        .args(["-n", "-o", "OPTIONS", "-T"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(
        !tk::text(&nosuid.stdout).split(',').any(|o| o.trim() == "nosuid"),
        "the scratch filesystem is mounted nosuid"
    );
    let (uid, _) = tk::attacker();
    let before = tk::tree_state(d.path());
    // `as_attacker()` is `setpriv ARGS --`: run it inside the namespace.
    let mut cmd = with_private_tmp(&tmp, false);
    cmd.arg("setpriv");
    cmd.args(tk::as_attacker().get_args()).arg(&exe);
    cmd.env("HUGETEXT_VERBOSE", "1").env("HUGETEXT_STRATEGY", "copy");
    let o = output_within(&mut cmd, Duration::from_secs(30)).expect("the program hung");
    let (out, err) = (tk::text(&o.stdout), tk::text(&o.stderr));
    assert!(o.status.success(), "{out}{err}");
    // It did run as the attacker with root's effective uid.
    assert!(out.split_whitespace().count() == 2, "{out}");
    assert!(!err.contains("hugetext"), "HUGETEXT_VERBOSE was obeyed: {err}");
    // (Not counting the mount point a checkout under /tmp needs.)
    let mount_point = tk::checkout_under_tmp().and_then(|r| r.components().next().map(|c| tmp.join(c)));
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| Some(p) != mount_point.as_ref())
        .collect();
    assert!(left.is_empty(), "secure-execution mode wrote {left:?} (uid {uid})");
    assert_eq!(tk::tree_state(d.path()), before);
}

/// `run --include` with patterns a backtracking matcher needs hours for
/// (`.*` eight times, then a byte the path lacks) against a library path
/// of over 1,000 bytes: the program starts at once, and each pattern
/// includes exactly what it matches. (Before: the program stalled before
/// `main`, still at it after 20 s for a 420-byte path.)
#[test]
fn a_backtracking_include_pattern_does_not_stall_the_program() {
    tk::preload();
    let d = tk::scratch();
    let mut dir = d.path().to_path_buf();
    for c in ["d", "e", "f", "g"] {
        dir.push(c.repeat(250));
    }
    std::fs::create_dir_all(&dir).unwrap();
    let prog = tk::copy_fixture(&dir, "lld", "usebig");
    let lib = tk::copy_fixture(&dir, "lld", "libbig.so").canonicalize().unwrap();
    let lib = lib.to_str().unwrap().to_string();
    let alone = Command::new(&prog).output().unwrap();
    assert!(alone.status.success());
    for (re, included) in [
        (".*.*.*.*.*.*.*.*Z", lib.contains('Z')),
        ("^.*.*.*.*.*.*.*.*.*.*.*.*.*.*.*.*#$", false),
        (
            "[^#]*[^#]*[^#]*[^#]*[^#]*[^#]*[^#]*[^#]*[^#]*#|d+d+d+d+d+d+d+d+d+d+#",
            false,
        ),
        (".*.*.*.*.*.*.*.*/libbig\\.so$", true),
    ] {
        let mut cmd = Command::new(tk::bin());
        cmd.args(["run", "-v", "--strategy", "copy", "--include", re, "--"])
            .arg(&prog)
            .env_remove("HUGETEXT_VERBOSE");
        let o = output_within(&mut cmd, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("--include {re:?} stalled the program for 60 s (killed)"));
        let err = tk::text(&o.stderr);
        assert!(o.status.success(), "{re}: {err}");
        assert_eq!(o.stdout, alone.stdout, "{re}");
        let named = err.lines().any(|l| l.starts_with(&format!("hugetext: {lib}: ")));
        assert_eq!(named, included, "--include {re:?}: {err}");
    }
}

/// tests/c/sandbox_dlopen.c, built in `dir`: after start it installs a
/// seccomp allow-list that kills the process for any other call, then
/// dlopens a library.
fn sandbox_dlopen(dir: &Path) -> PathBuf {
    let exe = dir.join("sandbox_dlopen");
    let o = Command::new("gcc")
        .args(["-O1", "-w"])
        .arg(tk::root().join("crates/hugetext-cli/tests/c/sandbox_dlopen.c"))
        .arg("-ldl")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("gcc");
    assert!(o.status.success(), "gcc: {}", tk::text(&o.stderr));
    exe
}

/// A program that sandboxes itself after start (a seccomp allow-list with
/// `SECCOMP_RET_KILL_PROCESS`, as most sandboxes make) and then dlopens a
/// plugin with 18 MiB of text: under `run` it runs as it does alone, and
/// `-v` says once that objects loaded after start are left alone. (Before:
/// killed by SIGSYS at the auditor's first `madvise`.) The same for one
/// that loads the plugin (copied, with perf-map lines), then sandboxes
/// itself, then unloads and loads it again (before: killed at `dlclose`,
/// where the auditor rewrote the perf map).
#[test]
fn a_program_that_sandboxes_itself_then_dlopens_is_not_killed() {
    use std::os::unix::process::ExitStatusExt;
    tk::preload();
    let d = tk::scratch();
    let exe = sandbox_dlopen(d.path());
    let lib = tk::fixture("lld", "libbig.so");
    let alone = Command::new(&exe).arg(&lib).output().unwrap();
    assert!(
        alone.status.success(),
        "alone: {:?} {}",
        alone.status,
        tk::text(&alone.stderr)
    );
    assert!(tk::text(&alone.stdout).starts_with("lib_f0="));
    let run = |extra: &[&str], verbose: bool| {
        let mut cmd = Command::new(tk::bin());
        cmd.arg("run")
            .args(verbose.then_some("-v"))
            .args(["--strategy", "copy", "--"])
            .arg(&exe)
            .arg(&lib)
            .args(extra)
            .env_remove("HUGETEXT_VERBOSE");
        output_within(&mut cmd, Duration::from_secs(120)).expect("the program hung (killed after 120 s)")
    };
    let passive = "a seccomp filter was installed after start";
    let late = "loaded after start (dlopen): ";
    // Unsandboxed, the same dlopen is followed: the library is copied.
    let o = run(&["open"], true);
    let err = tk::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(late) && !err.contains(passive), "{err}");
    for verbose in [true, false] {
        let o = run(&[], verbose);
        let err = tk::text(&o.stderr);
        assert!(
            o.status.success(),
            "killed under run (signal {:?}): {err}",
            o.status.signal()
        );
        assert_eq!(o.stdout, alone.stdout, "{err}");
        assert!(!err.contains(late), "a late pass ran under the filter: {err}");
        let said = err.lines().filter(|l| l.contains(passive)).count();
        assert_eq!(said, usize::from(verbose), "{err}");
    }
    let alone = Command::new(&exe).arg(&lib).arg("after").output().unwrap();
    assert!(
        alone.status.success(),
        "alone: {:?} {}",
        alone.status,
        tk::text(&alone.stderr)
    );
    assert_eq!(tk::text(&alone.stdout).lines().count(), 2);
    let o = run(&["after"], true);
    let err = tk::text(&o.stderr);
    assert!(
        o.status.success(),
        "killed under run (signal {:?}): {err}",
        o.status.signal()
    );
    assert_eq!(o.stdout, alone.stdout, "{err}");
    assert_eq!(
        err.matches(late).count(),
        1,
        "only the load before the filter is followed: {err}"
    );
    assert_eq!(err.lines().filter(|l| l.contains(passive)).count(), 1, "{err}");
}

/// A program whose `getpid` fails (a seccomp filter returning `EPERM`):
/// `-v` and the JSON report give its real pid (from /proc/self/status) and
/// the perf map is `/tmp/perf-PID.map`, never pid 4294967295 (-1 read as a
/// pid, as before).
#[test]
fn a_filtered_getpid_is_never_read_as_a_pid() {
    tk::preload();
    let (_d, tmp) = scratch_with_tmp();
    let prog = tk::fixture("lld", "pie");
    let mut cmd = with_private_tmp(&tmp, false);
    cmd.arg(tk::cprogs().join("wrap"))
        .arg("nogetpid")
        .arg(tk::bin())
        .args(["run", "-v", "--strategy", "copy", "--"])
        .arg(&prog)
        .env("HUGETEXT_REPORT", "json");
    let o = output_within(&mut cmd, Duration::from_secs(60)).expect("the program hung");
    let err = tk::text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(tk::text(&o.stdout).starts_with("sum="), "{}", tk::text(&o.stdout));
    assert!(!err.contains("4294967295"), "{err}");
    let pid = err
        .lines()
        .find_map(|l| l.strip_prefix("hugetext: pid ")?.split(':').next()?.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no summary line with a pid: {err}"));
    assert!(err.contains(&format!("\"pid\":{pid},")), "{err}");
    let maps: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("perf-"))
        .collect();
    assert_eq!(maps, [format!("perf-{pid}.map")], "{err}");
}
