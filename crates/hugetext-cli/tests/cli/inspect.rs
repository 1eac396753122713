//! `hugetext inspect` against real processes whose backing is known, checked
//! against the kernel's own counters (smaps), and every bad input.
//!
//! The processes under test are this test binary re-executed as a helper
//! (`helper_entry`, active only with HUGETEXT_TEST_HELPER set): it maps a file
//! or anonymous memory in a known way, prints "ready ADDR", and waits until
//! its stdin closes.

use common::{huge_tmpfs_text, keys, windows_mib};
use hugetext_testkit as common;

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use hugetext::{kernel, pagecache, procfs};
use serde_json::Value;

/// kB in `n` PMD-size windows.
fn windows_kb(n: u64) -> u64 {
    n * common::pmd_kb()
}

/// The class label of `kind` (`file`, `anon`) in `how` (`thp-pmd-aligned`,
/// `thp-pte-unaligned`, ...) for folios of the kernel's PMD size.
fn pmd_label(kind: &str, how: &str) -> String {
    format!("{kind}-{how}-{}kB", common::pmd_kb())
}

/// A helper process holding a mapping; killed and reaped on drop.
struct Helper {
    child: Child,
    addr: u64,
    /// Kept open so the helper's last words do not hit a closed pipe.
    _out: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Helper {
    fn start(mode: &str, path: &Path) -> Helper {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &common::test_name(module_path!(), "helper_entry"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HUGETEXT_TEST_HELPER", format!("{mode}:{}", path.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        while let Some(line) = out.next() {
            let line = line.unwrap();
            // libtest prints "test helper_entry ... " on the same line.
            if let Some(i) = line.find("ready ") {
                let addr = u64::from_str_radix(line[i + 6..].trim(), 16).unwrap();
                return Helper { child, addr, _out: out };
            }
            assert!(!line.starts_with("helper error"), "{line}");
        }
        let _ = child.wait();
        panic!("helper {mode} exited before it was ready");
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The helper's smaps counters for the mapping that starts at its address.
    fn smaps(&self) -> procfs::SmapsStats {
        procfs::read_smaps(Some(self.pid()))
            .unwrap()
            .into_iter()
            .find(|(v, _)| v.start == self.addr)
            .map(|(_, s)| s)
            .expect("helper mapping in smaps")
    }

    /// `hugetext inspect --pid PID --json ARGS...`, the helper's mapping.
    fn inspect_mapping(&self, extra: &[&str]) -> Value {
        let pid = self.pid().to_string();
        let mut args = vec!["inspect", "--pid", &pid, "--json"];
        args.extend_from_slice(extra);
        let v = run_json(&args);
        let maps = v["processes"][0]["mappings"].as_array().expect("mappings").clone();
        let start = format!("{:#x}", self.addr);
        maps.into_iter()
            .find(|m| m["start"] == start.as_str())
            .unwrap_or_else(|| {
                // The helper's own maps, read now: whether the mapping is there
                // and inspect missed it, or it is gone.
                let now = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
                panic!("no mapping {start} in inspect's view; /proc/{pid}/maps now:\n{now}\ninspect: {v}")
            })
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_json(args: &[&str]) -> Value {
    let out = common::hugetext(args);
    assert!(
        out.status.success(),
        "hugetext {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn kb(v: &Value, label: &str) -> u64 {
    v[label].as_u64().unwrap_or_else(|| panic!("no {label} in {v}"))
}

/// The helper side: set up the mapping the mode asks for, then wait.
#[test]
fn helper_entry() {
    let Ok(spec) = std::env::var("HUGETEXT_TEST_HELPER") else {
        return;
    };
    let (mode, path) = spec.split_once(':').unwrap();
    let pmd = kernel::pmd_size();
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    let (addr, _keep): (usize, Box<dyn std::any::Any>) = match mode {
        // A file mapped with MADV_HUGEPAGE after eviction: PMD-order folios,
        // PMD-mapped.
        "file-pmd" => {
            let f = File::open(path).unwrap();
            let len = f.metadata().unwrap().len() as usize;
            let m = kernel::Mapping::file_congruent(f.as_fd(), 0, len, rx, pmd).unwrap();
            m.madvise(0, len, kernel::MADV_HUGEPAGE).unwrap();
            // MADV_POPULATE_READ, or one load per page before Linux 5.14.
            m.populate_read(0, len).unwrap();
            (m.addr(), Box::new(m))
        }
        // The same file mapped one page off congruence: PTEs only.
        "file-off" | "file-plain" => {
            let f = File::open(path).unwrap();
            let len = f.metadata().unwrap().len() as usize;
            let shift = if mode == "file-off" { kernel::page_size() } else { 0 };
            // Reserve, then place the file at an address ≡ shift (mod PMD).
            let r = kernel::Mapping::anon_aligned(len + pmd, libc::PROT_NONE, pmd).unwrap();
            let at = r.addr() + shift;
            // SAFETY: a fixed mapping inside the reservation r, which this test owns.
            let p = unsafe {
                libc::mmap(
                    at as *mut _,
                    len,
                    rx,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    0,
                )
            };
            assert_eq!(p as usize, at);
            // SAFETY: populating discards nothing; [at, at + len) is the file mapped above.
            unsafe { kernel::populate_read(at, len) }.unwrap();
            (at, Box::new(r))
        }
        // Anonymous THP.
        "anon-thp" => {
            let len = 4 * pmd;
            let m = kernel::Mapping::anon_aligned(len, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
            m.madvise(0, len, kernel::MADV_HUGEPAGE).unwrap();
            for i in (0..len).step_by(kernel::page_size()) {
                // SAFETY: i is inside the writable mapping m.
                unsafe { m.as_ptr().add(i).write_volatile(1) };
            }
            (m.addr(), Box::new(m))
        }
        _ => panic!("unknown helper mode {mode}"),
    };
    println!("\nready {addr:x}");
    std::io::stdout().flush().unwrap();
    let mut s = String::new();
    let _ = std::io::stdin().read_line(&mut s);
}

#[test]
fn pmd_mapped_file_equals_file_pmd_mapped() {
    let dir = common::scratch();
    let p = common::scratch_file(dir.path(), "pmd", windows_mib(4));
    let h = Helper::start("file-pmd", &p);
    let m = h.inspect_mapping(&[]);
    let smaps = h.smaps();
    assert_eq!(
        smaps.file_pmd_kb,
        windows_kb(4),
        "kernel did not PMD-map the file: {smaps:?}"
    );
    assert_eq!(kb(&m, &pmd_label("file", "thp-pmd-aligned")), smaps.file_pmd_kb, "{m}");
    assert_eq!(kb(&m, "file_kb"), smaps.rss_kb);
    assert_eq!(kb(&m, &pmd_label("file", "thp-pte-aligned")), 0);
    assert_eq!(kb(&m, "file-base-page"), 0);
    // --cont: every 64K block of a PMD-mapped folio is a PMD-mapped block.
    let c = h.inspect_mapping(&["--cont", "64K"]);
    assert_eq!(kb(&c, "file-cont-pmd-aligned-64kB"), windows_kb(4));
    assert_eq!(kb(&c, "file-cont-pte-aligned-64kB"), 0);
    // The page-cache view agrees.
    let f = run_json(&["inspect", "--json", "--file", p.to_str().unwrap()]);
    assert_eq!(f["files"][0]["cached_kb"], windows_kb(4));
    assert_eq!(
        f["files"][0]["folios"][format!("{}kB", common::pmd_kb())],
        windows_kb(4),
        "{f}"
    );
}

#[test]
fn same_pmd_folios_one_page_off_are_unaligned() {
    let dir = common::scratch();
    let p = common::scratch_file(dir.path(), "off", windows_mib(4));
    pagecache::fill_huge(&File::open(&p).unwrap(), 0..4 * common::pmd()).unwrap();
    let h = Helper::start("file-off", &p);
    let m = h.inspect_mapping(&["--cont", "64K"]);
    let smaps = h.smaps();
    let unaligned = pmd_label("file", "thp-pte-unaligned");
    assert_eq!(smaps.file_pmd_kb, 0, "{smaps:?}");
    assert_eq!(kb(&m, &unaligned), windows_kb(4), "{m}");
    assert_eq!(kb(&m, &pmd_label("file", "thp-pmd-aligned")), 0);
    assert_eq!(kb(&m, &pmd_label("file", "thp-pte-aligned")), 0);
    assert_eq!(kb(&m, "file_kb"), smaps.rss_kb);
    // Physically contiguous but one page off: no aligned 64K block at all.
    assert_eq!(kb(&m, "file-cont-pte-aligned-64kB"), 0);
    // Rollup and unique: one mapping, so unique = mapped.
    let pid = h.pid().to_string();
    let r = run_json(&["inspect", "--pid", &pid, "--rollup", "--json"]);
    assert!(kb(&r["total"], &unaligned) >= windows_kb(4), "{r}");
    assert_eq!(r["total"]["unique"][&unaligned], r["total"][&unaligned]);
}

#[test]
fn pmd_folios_mapped_aligned_by_ptes_and_shared_text_counted_once() {
    // Two processes map the same PMD folios: one by PMDs, one one page off.
    // Unique counts each file page once, under its best mapping.
    let dir = common::scratch();
    let p = common::scratch_file(dir.path(), "shared", windows_mib(2));
    let a = Helper::start("file-pmd", &p);
    let b = Helper::start("file-off", &p);
    let (pa, pb) = (a.pid().to_string(), b.pid().to_string());
    let r = run_json(&["inspect", "--pid", &pa, "--pid", &pb, "--rollup", "--json"]);
    let t = &r["total"];
    let (aligned, unaligned) = (
        pmd_label("file", "thp-pmd-aligned"),
        pmd_label("file", "thp-pte-unaligned"),
    );
    let shared = windows_kb(2);
    assert!(kb(t, &aligned) >= shared, "{r}");
    assert!(kb(t, &unaligned) >= shared, "{r}");
    let u = &t["unique"];
    // Both helpers also share this test binary's and libc's text.
    assert!(
        kb(t, "file_kb") - kb(u, "file_kb") >= shared,
        "the shared {shared} kB are counted once: {r}"
    );
    // Where the programs' files live on a tmpfs (a guest's initramfs),
    // their pages are shmem: base pages of either kind.
    let base = |c: &Value| kb(c, "file-base-page") + kb(c, "shmem-base-page");
    assert!(base(u) < base(t), "{r}");
    assert_eq!(kb(u, &aligned), kb(t, &aligned));
    assert_eq!(kb(u, &unaligned), kb(t, &unaligned) - shared);
}

#[test]
fn anon_thp_equals_anon_huge_pages() {
    let dir = common::scratch();
    let h = Helper::start("anon-thp", dir.path());
    let smaps = h.smaps();
    assert!(smaps.anon_huge_kb >= windows_kb(2), "no anon THP: {smaps:?}");
    // Executable mappings only by default: the anon region is not there.
    let pid = h.pid().to_string();
    let v = run_json(&["inspect", "--pid", &pid, "--json"]);
    let start = format!("{:#x}", h.addr);
    assert!(!v["processes"][0]["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["start"] == start.as_str()));
    let m = h.inspect_mapping(&["--all"]);
    assert_eq!(kb(&m, &pmd_label("anon", "thp-pmd-aligned")), smaps.anon_huge_kb, "{m}");
    assert_eq!(kb(&m, "anon_kb"), smaps.anonymous_kb);
    assert_eq!(kb(&m, "file_kb"), 0);
}

#[test]
fn exec_faulted_file_is_in_base_pages() {
    // A cold fault through a PROT_EXEC mapping reads order-0 folios on x86
    // from Linux 6.16 on (exec readahead asks for exec_folio_order(), 0 on
    // x86); doc/kernel-facts.md §1. Before it, exec faults take ordinary mmap
    // readahead, whose folio orders ramp up on a filesystem with large folios
    // (Debian 6.12 on xfs: 16-128 KiB folios; the kernel matrix shows it) —
    // but no fault-around maps them with PMDs.
    let dir = common::scratch();
    let p = common::scratch_file(dir.path(), "small", 4);
    let h = Helper::start("file-plain", &p);
    let m = h.inspect_mapping(&[]);
    let smaps = h.smaps();
    assert_eq!(smaps.file_pmd_kb, 0);
    assert_eq!(kb(&m, "file_kb"), smaps.rss_kb);
    let f = run_json(&["inspect", "--json", "--file", p.to_str().unwrap()]);
    let folios = f["files"][0]["folios"].as_object().unwrap();
    // Whatever the folio sizes, inspect's per-mapping view and the page-cache
    // view must agree on them.
    let page_label = format!("{}kB", common::page() / 1024);
    let base = folios.get(&page_label).and_then(|v| v.as_u64()).unwrap_or(0);
    assert_eq!(kb(&m, "file-base-page"), base, "{m} vs {f}");
    if cfg!(target_arch = "x86_64") && kernel::KernelVersion::current().at_least(6, 16) {
        assert_eq!(base, 4096, "{f}");
    }
}

#[test]
fn file_view_of_unmapped_file() {
    let dir = common::scratch();
    let p = common::scratch_file(dir.path(), "nomap", windows_mib(3));
    let cold = run_json(&["inspect", "--json", "--file", p.to_str().unwrap()]);
    assert_eq!(cold["files"][0]["cached_kb"], 0, "{cold}");
    pagecache::fill_huge(&File::open(&p).unwrap(), 0..3 * common::pmd()).unwrap();
    let warm = run_json(&["inspect", "--json", "--file", p.to_str().unwrap()]);
    let f = &warm["files"][0];
    let folio = format!("{}kB", common::pmd_kb());
    assert_eq!(f["cached_kb"], windows_kb(3));
    assert_eq!(f["folios"][&folio], windows_kb(3), "{warm}");
    assert_eq!(f["unit_windows"], 3);
    assert_eq!(f["unit_windows_huge"], 3);
    let out = common::hugetext(&["inspect", "--file", p.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("in {folio} folios")) && text.contains("3/3"),
        "{text}"
    );
}

#[test]
fn without_cap_sys_admin_falls_back_to_smaps() {
    let dir = common::scratch();
    let p = common::scratch_file(dir.path(), "nocap", windows_mib(2));
    let h = Helper::start("file-pmd", &p);
    let pid = h.pid().to_string();
    let before = h.smaps();
    let out = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-sys_admin", "--"])
        .arg(common::bin())
        .args(["inspect", "--pid", &pid, "--json"])
        .output()
        .expect("setpriv (util-linux)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().filter(|l| l.contains("CAP_SYS_ADMIN")).count(), 1, "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pfn_access"], false);
    assert_eq!(v["method"], "smaps-only");
    let start = format!("{:#x}", h.addr);
    let m = v["processes"][0]["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["start"] == start.as_str())
        .unwrap()
        .clone();
    let smaps = h.smaps();
    // Where the filesystem gives PMD-order folios (the helper's MADV_HUGEPAGE
    // mapping fills them), the mapping is PMD-mapped, so the PMD class is
    // really compared; elsewhere (ext4 before 6.16) both are 0.
    // (With 64 KiB pages the unit is a contpte block, which smaps does not
    // show: there only the smaps-only classes are compared.)
    if common::fs_gives_pmd_folios(dir.path()) && !common::contpte_unit() {
        assert_eq!(
            smaps.file_pmd_kb,
            windows_kb(2),
            "kernel did not PMD-map the file: {smaps:?}"
        );
    }
    assert_eq!(kb(&m, &pmd_label("file", "thp-pmd-aligned")), smaps.file_pmd_kb);
    // The kernel may reclaim some of a large file's mapped page cache while
    // inspect reads (64 KiB pages: the file is 1 GiB of a 3 GiB guest, and
    // 64 MiB went once): inspect's count lies between smaps' before and after.
    let pte = kb(&m, "file-pte-mapped");
    let (lo, hi) = {
        let (a, b) = (before.rss_kb - before.file_pmd_kb, smaps.rss_kb - smaps.file_pmd_kb);
        (a.min(b), a.max(b))
    };
    assert!(
        lo <= pte && pte <= hi,
        "inspect {pte} kB, smaps {before:?} then {smaps:?}"
    );
    // --file too: cached kB without folio sizes.
    let out = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-sys_admin", "--"])
        .arg(common::bin())
        .args(["inspect", "--json", "--file", p.to_str().unwrap()])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"][0]["cached_kb"], windows_kb(2));
    assert!(v["files"][0]["folios"].is_null());
}

#[test]
fn system_and_cgroup_views_skip_what_they_cannot_read() {
    // A zombie: a child that exited and is not reaped yet.
    let mut zombie = Command::new("true").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let v = run_json(&["inspect", "--rollup", "--json"]);
    assert!(v["skipped"]["zombies"].as_u64().unwrap() >= 1, "{}", v["skipped"]);
    assert!(v["processes"].as_array().unwrap().len() >= 2);
    assert!(v["total"]["file_kb"].as_u64().unwrap() > 0);
    // --pid on the zombie: skipped with a count, not an error.
    let zp = zombie.id().to_string();
    let z = run_json(&["inspect", "--pid", &zp, "--json"]);
    assert_eq!(z["skipped"]["zombies"], 1);
    zombie.wait().unwrap();
    // As an unprivileged user most processes are unreadable: counted, no abort.
    let out = common::as_nobody()
        .arg(common::bin())
        .args(["inspect", "--rollup", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["skipped"]["unreadable"].as_u64().unwrap() >= 1, "{}", v["skipped"]);
    // Our own cgroup (v2 here; v1 works the same way).
    let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    if let Some(rel) = cg.lines().find_map(|l| l.strip_prefix("0::")) {
        let path = format!("/sys/fs/cgroup{}", rel.trim());
        if Path::new(&path).join("cgroup.procs").exists() {
            let v = run_json(&["inspect", "--cgroup", &path, "--rollup", "--json"]);
            let me = std::process::id() as i64;
            assert!(
                v["processes"].as_array().unwrap().iter().any(|p| p["pid"] == me),
                "{path}"
            );
        }
    }
}

#[test]
fn processes_that_come_and_go_never_abort_a_system_scan() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let churn = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = Command::new("true").status();
        }
    });
    for _ in 0..5 {
        let out = common::hugetext(&["inspect", "--all", "--rollup", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}

fn assert_one_line_error(args: &[&str], needle: &str) {
    let out = common::hugetext(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.starts_with("hugetext: error:") && err.contains(needle),
        "{args:?}: {err}"
    );
    assert!(!err.contains("panicked") && !err.contains("internal error"));
}

#[test]
fn bad_input_is_one_line() {
    assert_one_line_error(&["inspect", "--pid", "2147483647"], "no process with pid 2147483647");
    assert_one_line_error(&["inspect", "--cgroup", "/nonexistent/cgroup"], "cgroup");
    assert_one_line_error(&["inspect", "--cgroup", "/tmp"], "not a cgroup directory");
    assert_one_line_error(&["inspect", "--cont", "3K"], "--cont 3K");
    assert_one_line_error(&["inspect", "--cont", "4M"], "PMD size");
    assert_one_line_error(&["inspect", "--cont", "big"], "not a size");
    assert_one_line_error(&["inspect", "--file", "/nonexistent/file"], "/nonexistent/file");
    assert_one_line_error(&["inspect", "--watch", "0"], "--watch");
}

#[test]
fn table_output_for_a_real_program() {
    // A fixture program's text, as the demo shows it.
    let exe = common::fixture("bfd", "pie");
    let mut child = Command::new(&exe)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("ready")), "fixture never got ready");
    let pid = child.id().to_string();
    let out = common::hugetext(&["inspect", "--pid", &pid]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(exe.to_str().unwrap()) && text.contains("file-") && text.contains("% mapped"),
        "{text}"
    );
    let out = common::hugetext(&["inspect", "--pid", &pid, "--rollup"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("PMD-mapped"));
    drop(child.stdin.take());
    child.wait().unwrap();
}

#[test]
fn watch_repeats_one_json_document_per_line() {
    let me = std::process::id().to_string();
    let mut child = Command::new(common::bin())
        .args(["inspect", "--pid", &me, "--rollup", "--json", "--watch", "0.1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap());
    let mut n = 0;
    for line in lines.lines().take(3) {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        assert_eq!(v["processes"][0]["pid"], std::process::id() as i64);
        n += 1;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(n, 3);
}

/// A thpmaps-style class label of `kind` (`file-base-page`,
/// `anon-thp-pte-aligned-64kB`, `file-cont-pmd-aligned-64kB`, ...).
fn is_label(kind: &str, k: &str) -> bool {
    let Some(rest) = k.strip_prefix(kind).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let sized = |p: &str| {
        rest.strip_prefix(p)
            .and_then(|n| n.strip_suffix("kB"))
            .is_some_and(|n| n.parse::<u64>().is_ok())
    };
    ["base-page", "pte-mapped", "thp-pte-partial", "hugetlb"].contains(&rest)
        || [
            "thp-pte-unaligned-",
            "thp-pte-aligned-",
            "thp-pmd-aligned-",
            "cont-pte-aligned-",
            "cont-pmd-aligned-",
        ]
        .iter()
        .any(|p| sized(p))
}

/// Counts of `kinds`: `<kind>_kb` and class labels, all numbers, nothing else.
fn assert_counts(v: &Value, fixed: &[&str], kinds: &[&str]) {
    let o = v.as_object().unwrap();
    for kind in kinds {
        assert!(o[&format!("{kind}_kb")].is_u64(), "{kind}_kb in {v}");
    }
    for (k, val) in o {
        if fixed.contains(&k.as_str()) {
            continue;
        }
        assert!(
            kinds.iter().any(|kind| *k == format!("{kind}_kb") || is_label(kind, k)),
            "unexpected key {k} in {v}"
        );
        assert!(val.is_u64(), "{k} is not a number of kB: {v}");
    }
}

/// Pins the JSON of `inspect --json` (mappings, --rollup, --cont) and of
/// `inspect --file --json`: the keys and the types of their values.
#[test]
fn json_shape_is_stable() {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let top = [
        "elapsed_ms",
        "method",
        "page_size_kb",
        "pfn_access",
        "pmd_size_kb",
        "processes",
        "scope",
        "skipped",
        "total",
    ];
    for rollup in [false, true] {
        let mut args = vec!["inspect", "--pid", &pid, "--json", "--cont", "64K"];
        if rollup {
            args.push("--rollup");
        }
        let v = run_json(&args);
        assert_eq!(keys(&v), top, "{v}");
        assert!(v["method"].is_string() && v["pfn_access"].is_boolean() && v["elapsed_ms"].is_f64());
        assert_eq!(v["scope"], "exec");
        assert_eq!(v["page_size_kb"], kernel::page_size() as u64 / 1024);
        assert_eq!(v["pmd_size_kb"], kernel::pmd_size() as u64 / 1024);
        assert_eq!(
            keys(&v["skipped"]),
            ["kernel_threads", "unreadable", "vanished", "zombies"]
        );
        assert_counts(&v["total"], &["unique"], &["file", "shmem", "anon"]);
        assert_counts(&v["total"]["unique"], &[], &["file", "shmem"]);
        let p = &v["processes"][0];
        assert_eq!(p["pid"], child.id());
        assert_eq!(p["comm"], "sleep");
        if rollup {
            assert_counts(p, &["pid", "comm"], &["file", "shmem", "anon"]);
        } else {
            assert_eq!(keys(p), ["comm", "mappings", "pid"]);
            let maps = p["mappings"].as_array().unwrap();
            assert!(!maps.is_empty());
            let fixed = ["start", "end", "perms", "offset", "dev", "inode", "path"];
            for m in maps {
                assert_counts(m, &fixed, &["file", "shmem", "anon"]);
                assert!(m["start"].as_str().unwrap().starts_with("0x"), "{m}");
                assert!(m["end"].as_str().unwrap().starts_with("0x"), "{m}");
                assert!(m["perms"].is_string() && m["dev"].is_string() && m["path"].is_string());
                assert!(m["offset"].is_u64() && m["inode"].is_u64());
            }
            assert!(maps
                .iter()
                .any(|m| m.as_object().unwrap().contains_key("file-cont-pte-aligned-64kB")));
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let v = run_json(&["inspect", "--json", "--file", "/bin/sleep"]);
    assert_eq!(keys(&v), ["contpte_block_kb", "files", "pfn_access", "unit_kb"]);
    // The unit the files' windows are counted in: the PMD, or the contpte
    // block with 64 KiB pages.
    assert_eq!(v["unit_kb"], common::unit_kb());
    // The contpte block where the machine has one (arm64), else null.
    assert_eq!(
        v["contpte_block_kb"].as_u64(),
        kernel::cont_pte_size().map(|b| b as u64 / 1024)
    );
    let f = &v["files"][0];
    assert_eq!(
        keys(f),
        [
            "cached_kb",
            "contpte_kb",
            "folios",
            "path",
            // The old names, kept for one release.
            "pmd_windows",
            "pmd_windows_huge",
            "size",
            "unit_windows",
            "unit_windows_huge"
        ]
    );
    assert_eq!(
        f["contpte_kb"].is_u64(),
        kernel::cont_pte_size().is_some() && f["folios"].is_object()
    );
    assert!(f["path"].as_str().unwrap().ends_with("sleep"));
    assert!(f["size"].is_u64() && f["cached_kb"].is_u64() && f["unit_windows"].is_u64());
    for (k, n) in f["folios"].as_object().unwrap() {
        assert!(
            k.strip_suffix("kB").unwrap().parse::<u64>().is_ok() && n.is_u64(),
            "{f}"
        );
    }
}

/// Without --cont, arm64 gets the contpte view (the kernel's contiguous-PTE
/// block for its page size) and other machines none.
#[test]
fn contpte_view_is_the_default_on_arm64_only() {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let v = run_json(&["inspect", "--pid", &pid, "--json", "--rollup"]);
    child.kill().unwrap();
    child.wait().unwrap();
    let p = v["processes"][0].as_object().unwrap();
    let cont: Vec<&String> = p.keys().filter(|k| k.contains("-cont-")).collect();
    match kernel::cont_pte_size() {
        Some(block) => {
            let key = format!("file-cont-pte-aligned-{}kB", block / 1024);
            assert!(cont.contains(&&key), "{key} missing: {cont:?}");
        }
        None => assert!(cont.is_empty(), "{cont:?}"),
    }
}

#[test]
fn copied_text_is_named_after_its_file_as_explain_names_it() {
    // Text `hugetext run` copied into anonymous memory: inspect names the
    // file it came from ("FILE (anonymous copy)", JSON `copy_of`), not
    // `[anon]` at offset 0x0.
    let dir = common::scratch();
    let p = common::copy_fixture(dir.path(), "lld", "pie");
    let r = common::run_waiting(&["--strategy", "copy"], &p);
    let want = p.canonicalize().unwrap().to_str().unwrap().to_string();
    let pid = r.pid().to_string();
    let v = run_json(&["inspect", "--pid", &pid, "--json"]);
    let maps = v["processes"][0]["mappings"].as_array().unwrap();
    let copies: Vec<&Value> = maps.iter().filter(|m| m["copy_of"] == want.as_str()).collect();
    assert!(!copies.is_empty(), "no mapping names {want} as copy_of: {maps:#?}");
    assert!(copies.iter().all(|m| m["inode"] == 0), "{copies:#?}");
    let out = common::hugetext(&["inspect", "--pid", &pid]);
    let table = common::text(&out.stdout);
    assert!(
        table.contains("(anonymous copy)") && !table.contains("[anon]"),
        "{table}"
    );
    common::remove_perf_map(r.child.id());
    r.stop();
}

/// Text run from a huge tmpfs is a kind of its own, shmem: mapped by PMDs
/// as smaps' ShmemPmdMapped says, none of it counted as page cache.
#[test]
fn huge_tmpfs_text_is_shmem_pmd_mapped_as_smaps_says() {
    let Some((_fs, p, r, shmem_pmd)) = huge_tmpfs_text() else {
        return;
    };
    let v = run_json(&["inspect", "--json", "--pid", &r.pid().to_string()]);
    let f = p.canonicalize().unwrap();
    let m = v["processes"][0]["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == f.to_str().unwrap() && m["perms"].as_str().unwrap().contains('x'))
        .unwrap_or_else(|| panic!("no text mapping of {} in {v}", f.display()))
        .clone();
    assert_eq!(kb(&m, &pmd_label("shmem", "thp-pmd-aligned")), shmem_pmd, "{m}");
    assert_eq!(kb(&m, "file_kb"), 0, "{m}");
    assert_eq!(kb(&m, &pmd_label("file", "thp-pmd-aligned")), 0, "{m}");
    assert!(kb(&m, "shmem_kb") >= shmem_pmd, "{m}");
    // Counted once in the unique view, as shmem.
    let u = &v["total"]["unique"];
    assert!(kb(u, &pmd_label("shmem", "thp-pmd-aligned")) >= shmem_pmd, "{u}");
    // The table says it too.
    let out = common::hugetext(&["inspect", "--pid", &r.pid().to_string(), "--rollup"]);
    let t = common::text(&out.stdout);
    assert!(t.contains("shmem kB"), "{t}");
    assert!(t.contains(&pmd_label("shmem", "thp-pmd-aligned")), "{t}");
    r.stop();
}
