//! `hugetext explain` against the real kernel: each situation is built for
//! real, explain must name it with its reason code and fix, the fix is
//! applied, and explain must then report the mapping PMD-mapped.

use hugetext_testkit as common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Maps FILE read+exec at a 2 MiB-aligned address (congruent with offset 0),
/// optionally after prctl(PR_SET_THP_DISABLE) or with MADV_NOHUGEPAGE,
/// touches every page, prints two lines and waits; a `hugepage` line on stdin
/// switches the mapping to MADV_HUGEPAGE.
const HELPER: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
path, opts = sys.argv[1], sys.argv[2:]
if "prctl" in opts:
    assert libc.prctl(41, 1, 0, 0, 0) == 0  # PR_SET_THP_DISABLE
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
M = 2 << 20
base = libc.mmap(None, size + M, 0, 0x22 | 0x4000, -1, 0)  # PROT_NONE reservation
addr = (base + M - 1) & ~(M - 1)
assert libc.mmap(addr, size, 1 | 4, 0x02 | 0x10, fd, 0) == addr  # r-x, MAP_PRIVATE|MAP_FIXED
if "nohuge" in opts:
    assert libc.madvise(addr, size, 15) == 0  # MADV_NOHUGEPAGE
for off in range(0, size, 4096):
    ctypes.string_at(addr + off, 1)
print("mapped", hex(addr), flush=True)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "hugepage":
        assert libc.madvise(addr, size, 14) == 0  # MADV_HUGEPAGE
"#;

/// Start the helper mapping `file` with `opts`.
fn helper(dir: &Path, file: &Path, opts: &[&str]) -> common::Running {
    let script = dir.join("helper.py");
    if !script.exists() {
        std::fs::write(&script, HELPER).unwrap();
    }
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(file).args(opts);
    common::Running::start(cmd)
}

/// `hugetext explain --json --pid PID`, which must succeed.
fn explain_json(pid: i32) -> Value {
    let out = common::hugetext(&["explain", "--json", "--pid", &pid.to_string()]);
    assert!(
        out.status.success(),
        "explain failed: {}\n{}",
        common::text(&out.stderr),
        common::text(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The mapping of `file` with the most whole windows in process `pid`'s explanation.
fn mapping(pid: i32, file: &Path) -> Value {
    let v = explain_json(pid);
    let want = file.canonicalize().unwrap().to_string_lossy().into_owned();
    let p = &v["processes"][0];
    assert_eq!(p["pid"], pid);
    assert!(
        p["summary"].as_str().unwrap().starts_with(&format!("pid {pid} (")),
        "{p:#}"
    );
    p["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["path"] == want.as_str())
        .max_by_key(|m| m["whole_windows"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("{want} not in {v:#}"))
        .clone()
}

/// True when the loader happened to place the mapping 2 MiB-congruent with
/// its file offset (a page-aligned base does so 1 time in 512): a skewed
/// layout then does not show.
fn landed_congruent(m: &Value) -> bool {
    let start = u64::from_str_radix(m["start"].as_str().unwrap(), 16).unwrap();
    let yes = (start - m["offset"].as_u64().unwrap()) % (2 << 20) == 0;
    if yes {
        common::skip_line("skipped: the loader placed the text 2 MiB-congruent by chance");
    }
    yes
}

fn reason(m: &Value) -> &str {
    m["reason"].as_str().unwrap()
}

fn fix(m: &Value) -> &str {
    m["fix"].as_str().unwrap_or("")
}

fn s(p: &Path) -> String {
    p.canonicalize().unwrap().to_string_lossy().into_owned()
}

fn assert_ok(m: &Value) {
    assert_eq!(reason(m), "ok", "{m:#}");
    let windows = m["whole_windows"].as_u64().unwrap();
    assert!(windows > 0 && m["pmd_kb"].as_u64().unwrap() >= windows * 2048, "{m:#}");
}

fn hugetext_ok(args: &[&str]) {
    let out = common::hugetext(args);
    assert!(
        out.status.success(),
        "hugetext {args:?}: {}\n{}",
        common::text(&out.stderr),
        common::text(&out.stdout)
    );
}

/// A scratch file of `mib` MiB of RET instructions in 2 MiB page-cache folios.
fn warmed_file(dir: &Path, mib: usize) -> PathBuf {
    let p = common::scratch_file(dir, "text.bin", mib);
    hugetext_ok(&["warm", p.to_str().unwrap()]);
    p
}

#[test]
fn skewed_lld_pie_align_then_warm_then_pmd_mapped() {
    let dir = common::scratch();
    let p = common::copy_fixture(dir.path(), "lld", "pie");
    let r = common::Running::fixture(&p);
    let m = mapping(r.pid(), &p);
    if landed_congruent(&m) {
        return;
    }
    assert_eq!(reason(&m), "layout-skewed", "{m:#}");
    assert_eq!(fix(&m), format!("hugetext align {}", s(&p)));
    assert_eq!(m["backing"], "file");
    assert_eq!(m["pmd_kb"], 0);
    drop(r);

    // The fix. The new file's page cache then holds what an exec fault reads: small folios.
    hugetext_ok(&["align", p.to_str().unwrap()]);
    common::read_small(&p);
    let r = common::Running::fixture(&p);
    let m = mapping(r.pid(), &p);
    assert_eq!(reason(&m), "cache-small-folios", "{m:#}");
    let f = fix(&m);
    assert!(
        f.starts_with(&format!("hugetext warm {} after pid {} (", s(&p), r.pid())),
        "{f}"
    );
    assert!(m["base_kb"].as_u64().unwrap() > 0, "{m:#}");
    r.stop();

    // The fix: warm once the process that blocked it has exited, then restart.
    hugetext_ok(&["warm", p.to_str().unwrap()]);
    let r = common::Running::fixture(&p);
    assert_ok(&mapping(r.pid(), &p));
    r.stop();
}

#[test]
fn nohugepage_then_pte_mapped_pmd_folios_then_restart() {
    let dir = common::scratch();
    let file = warmed_file(dir.path(), 8);
    let h = helper(dir.path(), &file, &["nohuge"]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "madv-nohugepage", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("nh in VmFlags"), "{m:#}");
    assert!(fix(&m).contains("MADV_NOHUGEPAGE"), "{m:#}");

    // Advice changed after the pages were mapped: 2 MiB folios in the cache, PTEs in the process.
    writeln!(h.child.stdin.as_ref().unwrap(), "hugepage").unwrap();
    let mut m = mapping(h.pid(), &file);
    for _ in 0..50 {
        if reason(&m) != "madv-nohugepage" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        m = mapping(h.pid(), &file);
    }
    assert_eq!(reason(&m), "mapped-before-warm", "{m:#}");
    assert!(fix(&m).starts_with("restart"), "{m:#}");
    assert_eq!(m["pmd_kb"], 0);
    h.stop();

    // The fix: restart.
    let h = helper(dir.path(), &file, &[]);
    assert_ok(&mapping(h.pid(), &file));
    h.stop();
}

#[test]
fn thp_disabled_by_prctl_then_restarted_without() {
    let dir = common::scratch();
    let file = warmed_file(dir.path(), 4);
    let h = helper(dir.path(), &file, &["prctl"]);
    let v = explain_json(h.pid());
    assert_eq!(v["processes"][0]["thp_disabled"], true, "{v:#}");
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "thp-disabled-process", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("THP_enabled: 0"), "{m:#}");
    assert!(fix(&m).contains("PR_SET_THP_DISABLE"), "{m:#}");
    h.stop();

    let h = helper(dir.path(), &file, &[]);
    assert_ok(&mapping(h.pid(), &file));
    h.stop();
}

#[test]
fn text_on_tmpfs_names_the_filesystem() {
    let dir = common::scratch();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let shmem = hugetext::kernel::sysfs_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    if !matches!(shmem.as_deref(), Some("never") | Some("deny")) {
        common::skip_line(&format!(
            "skipped: shmem_enabled is {shmem:?}, tmpfs may give huge pages"
        ));
        return;
    }
    let file = common::scratch_file(shm.path(), "text.bin", 4);
    let h = helper(dir.path(), &file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("tmpfs"), "{m:#}");
    assert!(fix(&m).contains("hugetext run --strategy copy"), "{m:#}");
    h.stop();
}

#[test]
fn text_on_btrfs_names_the_filesystem() {
    let Some(fs) = common::loop_fs("btrfs") else { return };
    if common::fs_gives_pmd_folios(fs.path()) {
        common::skip_line("skipped: this kernel's btrfs gives PMD folios");
        return;
    }
    let dir = common::scratch();
    let file = common::scratch_file(fs.path(), "text.bin", 4);
    let h = helper(dir.path(), &file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("btrfs"), "{m:#}");
    h.stop();
}

#[test]
fn anonymous_copy_from_run_is_ok() {
    let dir = common::scratch();
    let p = common::copy_fixture(dir.path(), "lld", "pie");
    let r = common::run_waiting(&["--strategy", "copy"], &p);
    let want = s(&p);
    let v = explain_json(r.pid());
    let copies: Vec<&Value> = v["processes"][0]["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["path"] == want.as_str() && m["backing"] == "anon-copy")
        .collect();
    assert!(!copies.is_empty(), "{v:#}");
    assert!(copies.iter().any(|m| reason(m) == "ok"), "{v:#}");
    common::remove_perf_map(r.child.id());
    r.stop();
}

#[test]
fn program_mode_explains_then_stops_or_waits() {
    let out = common::hugetext(&["explain", "--json", "--stop", "--", "sleep", "30"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["processes"][0]["comm"], "sleep");
    assert!(!v["processes"][0]["mappings"].as_array().unwrap().is_empty(), "{v:#}");

    let out = common::hugetext(&["explain", "--", "sh", "-c", "sleep 0.5; exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", common::text(&out.stderr));
    assert!(
        common::text(&out.stdout).contains("% of "),
        "{}",
        common::text(&out.stdout)
    );
}

/// One line on stderr, no panic, the expected exit status.
fn one_line_error(args: &[&str], code: i32, says: &str) {
    let out = common::hugetext(args);
    let err = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
    assert!(!err.contains("internal error") && !err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_gives_one_line_and_a_non_zero_status() {
    one_line_error(&["explain", "--pid", "1073741823"], 1, "no process with pid 1073741823");
    one_line_error(&["explain", "--pid", "2"], 1, "kernel thread");
    let mut zombie = Command::new("true").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    one_line_error(&["explain", "--pid", &zombie.id().to_string()], 1, "zombie");
    zombie.wait().unwrap();
    one_line_error(&["explain", "--", "/no/such/program"], 127, "no such file");
    one_line_error(&["explain", "--", "/etc/passwd"], 126, "cannot execute");
    one_line_error(&["explain", "--", "true"], 1, "before it could be explained");
    one_line_error(&["explain"], 2, "--pid");

    // Another user's process, without privileges.
    let r = common::Running::fixture(&common::fixture("bfd", "pie"));
    let out = common::as_nobody()
        .arg(common::bin())
        .args(["explain", "--pid", &r.pid().to_string()])
        .output()
        .unwrap();
    let err = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("permission denied"), "{err}");
    r.stop();
}

#[test]
fn small_p_align_pie_at_an_unaligned_base_then_align_and_warm() {
    let dir = common::scratch();
    let p = common::copy_fixture(dir.path(), "bfd", "pie");
    let r = common::Running::fixture(&p);
    let m = mapping(r.pid(), &p);
    if landed_congruent(&m) {
        return;
    }
    let start = u64::from_str_radix(m["start"].as_str().unwrap(), 16).unwrap();
    let offset = m["offset"].as_u64().unwrap();
    assert_eq!(reason(&m), "base-unaligned", "{m:#}");
    // bfd: p_vaddr == p_offset, so the base is address - offset.
    let base = format!("loaded at base {:#x}", start - offset);
    assert!(m["evidence"].as_str().unwrap().contains(&base), "{m:#}");
    assert_eq!(fix(&m), format!("hugetext align {}", s(&p)));
    r.stop();

    hugetext_ok(&["align", p.to_str().unwrap()]);
    hugetext_ok(&["warm", p.to_str().unwrap()]);
    let r = common::Running::fixture(&p);
    assert_ok(&mapping(r.pid(), &p));
    r.stop();
}

#[test]
fn text_output_has_the_summary_the_reason_and_the_fix() {
    let dir = common::scratch();
    let p = common::copy_fixture(dir.path(), "lld", "pie");
    let r = common::Running::fixture(&p);
    if landed_congruent(&mapping(r.pid(), &p)) {
        return;
    }
    let out = common::hugetext(&["explain", "--pid", &r.pid().to_string()]);
    let t = common::text(&out.stdout);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let first = t.lines().find(|l| l.starts_with("pid ")).unwrap();
    assert!(
        first.starts_with(&format!("pid {} (pie): 0% of ", r.pid()))
            && first.contains(&format!("more with: hugetext align {}", s(&p))),
        "{t}"
    );
    assert!(
        t.contains("    layout-skewed: ") && t.contains(&format!("    fix: hugetext align {}", s(&p))),
        "{t}"
    );
    r.stop();
}

/// An overlayfs mount of `lower` (upper and work directories in `scratch`),
/// unmounted when dropped.
struct Overlay(PathBuf);

impl Overlay {
    fn mount(lower: &Path, scratch: &Path) -> Option<Overlay> {
        let (upper, work, merged) = (scratch.join("upper"), scratch.join("work"), scratch.join("merged"));
        for d in [&upper, &work, &merged] {
            std::fs::create_dir_all(d).unwrap();
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        let st = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(&merged)
            .status()
            .ok()?;
        if !st.success() {
            common::skip_line("skipped: cannot mount overlayfs here");
            return None;
        }
        Some(Overlay(merged))
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        for _ in 0..50 {
            if Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = Command::new("umount").arg("--lazy").arg(&self.0).status();
    }
}

#[test]
fn overlayfs_over_ext4_small_folios_then_warm_then_ok() {
    let dir = common::scratch();
    let lower = dir.path().join("lower");
    std::fs::create_dir(&lower).unwrap();
    if !common::fs_gives_pmd_folios(&lower) {
        common::skip_line("skipped: the scratch filesystem gives no PMD folios");
        return;
    }
    common::scratch_file(&lower, "text.bin", 4);
    let Some(ov) = Overlay::mount(&lower, dir.path()) else {
        return;
    };
    let file = ov.0.join("text.bin");
    // The helper's exec faults read the file into small folios.
    let h = helper(dir.path(), &file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "cache-small-folios", "{m:#}");
    assert!(fix(&m).starts_with(&format!("hugetext warm {}", s(&file))), "{m:#}");
    h.stop();

    hugetext_ok(&["warm", file.to_str().unwrap()]);
    let h = helper(dir.path(), &file, &[]);
    assert_ok(&mapping(h.pid(), &file));
    h.stop();
}

#[test]
fn overlayfs_over_tmpfs_names_the_layer_below() {
    let shmem = hugetext::kernel::sysfs_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    if !matches!(shmem.as_deref(), Some("never") | Some("deny")) {
        common::skip_line(&format!(
            "skipped: shmem_enabled is {shmem:?}, tmpfs may give huge pages"
        ));
        return;
    }
    let dir = common::scratch();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    common::scratch_file(shm.path(), "text.bin", 4);
    let Some(ov) = Overlay::mount(shm.path(), dir.path()) else {
        return;
    };
    let file = ov.0.join("text.bin");
    let h = helper(dir.path(), &file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(
        m["evidence"].as_str().unwrap().contains("overlayfs over tmpfs"),
        "{m:#}"
    );
    h.stop();
}
