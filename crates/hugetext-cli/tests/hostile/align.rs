//! Hostile cases: align. A local user plants something at the name root
//! gives to `align -o` in a world-writable sticky directory (as /tmp):
//! root's run refuses in one line, and nothing outside that directory
//! changes.

use hugetext_testkit as tk;
use tk::path_str as s;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// In a fresh scratch directory (others may enter it): `victims/`, owned
/// by root, and `tmp/`, mode 1777 like /tmp.
pub(crate) struct Stage {
    /// Keeps the scratch directory until the case ends.
    _dir: tempfile::TempDir,
    pub victims: PathBuf,
    pub tmp: PathBuf,
}

impl Stage {
    pub(crate) fn new() -> Stage {
        tk::attacker();
        let dir = tk::scratch();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let victims = dir.path().join("victims");
        let tmp = dir.path().join("tmp");
        fs::create_dir(&victims).unwrap();
        fs::create_dir(&tmp).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
        Stage {
            _dir: dir,
            victims,
            tmp,
        }
    }

    /// A root-owned file in `victims/`.
    pub(crate) fn victim(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.victims.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    /// Run `args` as the attacker; it must succeed.
    pub(crate) fn attacker_runs(&self, args: &[&str]) {
        let st = tk::as_attacker().args(args).status().unwrap();
        assert!(st.success(), "attacker's {args:?} failed");
    }
}

/// Bytes, inode and owner of a file.
pub(crate) fn identity(p: &Path) -> (Vec<u8>, u64, u32) {
    let m = fs::metadata(p).unwrap();
    (fs::read(p).unwrap(), m.ino(), m.uid())
}

/// Root's `align` with `-o OUT`: exit 1 and one line saying why.
fn refused(prog: &Path, out: &Path, why: &str) {
    let o = tk::hugetext(&["align", s(prog), "-o", s(out)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("refusing to write") && err.contains(why), "{err}");
}

/// A symlink at the -o name pointing to a root-owned file: root's align
/// neither writes through it nor replaces it.
#[test]
fn planted_symlink_at_the_output_is_refused() {
    let st = Stage::new();
    let victim = st.victim("passwd", b"root:x:0:0\n");
    let prog = tk::copy_fixture(&st.victims, "lld", "pie");
    let before = tk::tree_state(&st.victims);
    let out = st.tmp.join("out");
    st.attacker_runs(&["ln", "-s", s(&victim), s(&out)]);
    refused(&prog, &out, "symbolic link");
    assert_eq!(fs::read_link(&out).unwrap(), victim);
    assert_eq!(tk::tree_state(&st.victims), before, "a root-owned file changed");
}

/// A symlink at the -o name pointing at the input itself: align took it for
/// "-o names the input" and rewrote root's input in place, which `-o`
/// promises to leave untouched.
#[test]
fn planted_symlink_to_the_input_does_not_rewrite_it() {
    let st = Stage::new();
    let prog = tk::copy_fixture(&st.victims, "lld", "pie");
    let before = identity(&prog);
    let tree = tk::tree_state(&st.victims);
    let out = st.tmp.join("aligned");
    st.attacker_runs(&["ln", "-s", s(&prog), s(&out)]);
    refused(&prog, &out, "symbolic link");
    assert_eq!(identity(&prog), before, "the input was rewritten");
    assert_eq!(tk::tree_state(&st.victims), tree);
}

/// A regular file the attacker owns at the -o name in the sticky
/// directory: root does not take it over (the kernel's protected_regular
/// rule, which is off here); the attacker's file stays as it was.
#[test]
fn planted_file_of_another_user_in_a_sticky_dir_is_refused() {
    let st = Stage::new();
    let prog = tk::copy_fixture(&st.victims, "lld", "pie");
    let tree = tk::tree_state(&st.victims);
    let out = st.tmp.join("out");
    st.attacker_runs(&["sh", "-c", &format!("echo mine > {}", s(&out))]);
    let planted = identity(&out);
    refused(&prog, &out, "sticky directory");
    assert_eq!(identity(&out), planted);
    assert_eq!(tk::tree_state(&st.victims), tree);
    // Root's own file there is replaced as asked.
    let own = st.tmp.join("own");
    fs::write(&own, b"old").unwrap();
    let o = tk::hugetext(&["align", s(&prog), "-o", s(&own)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(fs::read(&own).unwrap().starts_with(b"\x7fELF"));
}

/// `security.capability` for `cap_net_raw+ep` (revision 2, effective).
const CAP_NET_RAW_EP: [u8; 20] = [1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// A root-owned program in `victims/`, set-user-ID with a file capability,
/// as a package installs ping.
fn privileged_program(st: &Stage) -> PathBuf {
    use std::os::fd::AsRawFd;
    let prog = tk::copy_fixture(&st.victims, "lld", "pie");
    fs::set_permissions(&prog, fs::Permissions::from_mode(0o4755)).unwrap();
    let f = fs::File::open(&prog).unwrap();
    // SAFETY: a valid descriptor, name and buffer.
    let r = unsafe {
        libc::fsetxattr(
            f.as_raw_fd(),
            c"security.capability".as_ptr(),
            CAP_NET_RAW_EP.as_ptr().cast(),
            CAP_NET_RAW_EP.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setting a file capability: {}", std::io::Error::last_os_error());
    prog
}

/// Set-id bits or a file capability.
fn privileged(p: &Path) -> bool {
    let Ok(f) = fs::File::open(p) else { return false };
    f.metadata().unwrap().mode() & 0o6000 != 0 || hugetext::fsutil::get_xattr(&f, "security.capability").is_ok()
}

/// Whether `pid` is stopped (`T` in /proc/PID/stat).
fn stopped(pid: u32) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
}

/// Every file below `dir`, in directories too (seen as root).
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        match fs::symlink_metadata(&p).unwrap().is_dir() {
            true => v.extend(files_below(&p)),
            false => v.push(p),
        }
    }
    v
}

/// Everything in `dir` but `keep`.
fn others_in(dir: &Path, keep: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != keep)
        .collect();
    v.sort();
    v
}

/// `align` of a set-user-ID program with a file capability, killed
/// (SIGKILL) at each step of writing the new file, the instant between
/// naming the privileged new file and the rename included: the program is
/// the old file or the new one, privileged either way; no file the
/// unprivileged user can reach is set-id or has a capability, and they can
/// neither open nor hard-link a privileged leftover; `check` names what is
/// left; and the next `align` in that directory removes every leftover,
/// says so, and gives the program its new, privileged content.
/// (Before: a kill between the naming and the rename left a hidden
/// set-user-ID copy with the capability that any user could run and link.)
#[test]
fn killed_align_leaves_nothing_privileged_behind() {
    use std::time::{Duration, Instant};
    let st = Stage::new();
    for step in ["created", "written", "linked", "metadata", "renamed"] {
        let prog = privileged_program(&st);
        let old = fs::read(&prog).unwrap();
        let mut child = std::process::Command::new(tk::bin())
            .args(["align", s(&prog)])
            .env("HUGETEXT_TEST_STOP_AT", step)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !stopped(child.id()) {
            assert!(
                child.try_wait().unwrap().is_none(),
                "{step}: align ended before the step"
            );
            assert!(t0.elapsed() < Duration::from_secs(120), "{step}: never reached");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();

        // The name holds the old file or the new one, privileged.
        let now = fs::read(&prog).unwrap();
        assert!(privileged(&prog), "{step}: the program lost its privileges");
        let replaced = now != old;
        assert_eq!(replaced, step == "renamed", "{step}");
        let left = others_in(&st.victims, &prog);
        let attacker = |args: &[&str]| {
            tk::as_attacker()
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap()
                .success()
        };
        // What the unprivileged user can reach: nothing privileged but
        // the program itself.
        let o = tk::as_attacker()
            .args(["find", s(&st.victims), "-perm", "/6000", "-print"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), s(&prog), "{step}");
        let stolen = st.tmp.join("stolen");
        for p in files_below(&st.victims).iter().filter(|p| **p != prog) {
            // Unprivileged leftovers are the caller's, mode 0600.
            assert!(!attacker(&["cat", s(p)]), "{step}: the attacker read {}", p.display());
            assert!(
                !attacker(&["ln", s(p), s(&stolen)]),
                "{step}: the attacker hard-linked {}",
                p.display()
            );
            if privileged(p) {
                // Named only inside a directory nobody else may enter.
                assert!(!attacker(&["test", "-e", s(p)]), "{step}: {} is reachable", p.display());
            }
        }
        assert!(!stolen.exists(), "{step}");
        assert!(!left.is_empty() || !["linked", "metadata"].contains(&step), "{step}");

        // check names what is left, and leaves it.
        let o = tk::hugetext(&["check", s(&prog)]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{step}: {err}");
        assert_eq!(
            err.contains("hidden temporary files"),
            !left.is_empty(),
            "{step}: {err}"
        );
        assert_eq!(others_in(&st.victims, &prog), left, "{step}");

        // The next align removes what is left and says so.
        let o = tk::hugetext(&["align", s(&prog)]);
        let err = String::from_utf8_lossy(&o.stderr);
        // Rewritten (0), or nothing to do (2) where the kill came after the rename.
        let code = if replaced { 2 } else { 0 };
        assert_eq!(o.status.code(), Some(code), "{step}: {err}");
        assert_eq!(others_in(&st.victims, &prog), Vec::<PathBuf>::new(), "{step}: {err}");
        if !left.is_empty() {
            assert!(err.contains("hidden temporary file"), "{step}: {err}");
        }
        assert!(privileged(&prog) && fs::read(&prog).unwrap() != old, "{step}");
        fs::remove_file(&prog).unwrap();
    }
}

/// `align` of a set-user-ID program killed after delays spread over one
/// whole run, 40 times: the program is always the old file or the new one,
/// privileged; and the next `align` leaves no hidden file in the directory,
/// wherever the kills landed. (Before: 50 kills left 19 hidden copies,
/// 340 MB, that nothing removed.)
#[test]
fn align_killed_anywhere_leaves_nothing_after_the_next_run() {
    use std::time::Instant;
    let st = Stage::new();
    let prog = privileged_program(&st);
    let old = fs::read(&prog).unwrap();
    // How long one run takes here (on a loaded machine too).
    let t0 = Instant::now();
    assert!(tk::hugetext(&["align", s(&prog)]).status.success());
    let whole = t0.elapsed().mul_f64(1.5);
    let new = fs::read(&prog).unwrap();
    const KILLS: u32 = 40;
    for i in 0..KILLS {
        fs::remove_file(&prog).unwrap();
        let prog = privileged_program(&st);
        let mut child = std::process::Command::new(tk::bin())
            .args(["align", s(&prog)])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(whole * i / KILLS);
        let _ = child.kill();
        child.wait().unwrap();
        let now = fs::read(&prog).unwrap();
        assert!(
            now == old || now == new,
            "kill {i}: neither the old file nor the new one"
        );
        assert!(privileged(&prog), "kill {i}: the program lost its privileges");
    }
    let o = tk::hugetext(&["align", s(&prog)]);
    assert!(
        o.status.code().is_some_and(|c| c == 0 || c == 2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(others_in(&st.victims, &prog), Vec::<PathBuf>::new());
    assert!(privileged(&prog) && fs::read(&prog).unwrap() == new);
}
