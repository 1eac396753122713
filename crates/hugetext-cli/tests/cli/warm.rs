//! `hugetext warm` against the real kernel: small folios in, PMD folios out,
//! PMD mappings in later processes, blocked pages, --replace, errors.

use hugetext_testkit as common;

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use hugetext::kernel::{self, Mapping};
use hugetext::{folio, pagecache};
use serde_json::Value;

/// Run `hugetext warm --json ARGS`, expect success, return the parsed output.
fn warm_json(args: &[&str]) -> Value {
    warm_json_exit(args, 0).0
}

/// Run `hugetext warm --json ARGS`, expect exit status `code`, return the
/// parsed output and stderr.
fn warm_json_exit(args: &[&str], code: i32) -> (Value, String) {
    let mut a = vec!["warm", "--json"];
    a.extend_from_slice(args);
    let out = common::hugetext(&a);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "hugetext {a:?}: {err}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), err)
}

fn file_entry<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("{name} not in {v:#}"))
}

/// `FilePmdMapped` kB of the mapping of `pid` (None = self) starting at `addr`
/// or, with `name`, summed over mappings whose path ends with `name`.
fn file_pmd_mapped(pid: Option<i32>, addr: Option<usize>, name: Option<&str>) -> u64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/smaps"),
        None => "/proc/self/smaps".into(),
    };
    let s = std::fs::read_to_string(path).unwrap();
    let mut inside = false;
    let mut kb = 0;
    for l in s.lines() {
        let first = l.split_whitespace().next().unwrap_or("");
        if let Some((a, _)) = first
            .split_once('-')
            .filter(|(a, _)| u64::from_str_radix(a, 16).is_ok())
        {
            let start = usize::from_str_radix(a, 16).unwrap();
            inside = addr.is_some_and(|x| x == start) || name.is_some_and(|n| l.trim_end().ends_with(n));
            continue;
        }
        if inside {
            if let Some(v) = l.strip_prefix("FilePmdMapped:") {
                kb += v.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap();
            }
        }
    }
    kb
}

#[test]
fn small_folios_warmed_then_plain_mapping_is_pmd_mapped() {
    let dir = common::scratch();
    // 32 MiB, or two windows where the PMD is bigger (32 MiB on a 16 KiB-page
    // kernel): 16 windows of 2 MiB, 2 of 32 MiB.
    let mib = (32 << 20).max(2 * common::pmd()) >> 20;
    let windows = (mib << 20) / common::pmd();
    let p = common::scratch_file(dir.path(), "data", mib as usize);
    // Under THP always on 7.x, khugepaged may be collapsing windows of the
    // file just then (once 4 of 32 MiB were not cached at the scan in the 7.x
    // arm64 guest): a few tries to see the small, fully cached state.
    let before = (0..3)
        .map(|_| {
            common::read_small(&p);
            folio::scan_file(&p, None).unwrap()
        })
        .find(|b| b.cached_kb == mib * 1024 && b.unit_windows.is_empty())
        .unwrap_or_else(|| folio::scan_file(&p, None).unwrap());
    assert_eq!(before.cached_kb, mib * 1024);
    assert!(
        before.unit_windows.is_empty(),
        "exec faults should leave small folios: {before:?}"
    );

    let v = warm_json(&[p.to_str().unwrap()]);
    let f = file_entry(&v, "data");
    assert_eq!(f["eligible_windows"], windows, "{f:#}");
    assert_eq!(f["unit_windows"], windows, "{f:#}");
    assert_eq!(f["unit_folio_kb"], mib * 1024);
    assert_eq!(f["blocked_kb"], 0);
    assert_eq!(f["route"], "pmd-readahead");

    // Independent read-back with the folio scanner.
    let after = folio::scan_file(&p, None).unwrap();
    assert_eq!(after.unit_windows.len() as u64, windows, "{after:?}");

    // A later plain congruent mapping, no madvise: PMD-mapped.
    let file = File::open(&p).unwrap();
    let len = (mib << 20) as usize;
    let m = Mapping::file_congruent(
        file.as_fd(),
        0,
        len,
        libc::PROT_READ | libc::PROT_EXEC,
        common::pmd() as usize,
    )
    .unwrap();
    for off in (0..len).step_by(kernel::page_size()) {
        // SAFETY: inside the mapping.
        unsafe { std::ptr::read_volatile(m.as_ptr().add(off)) };
    }
    let kb = file_pmd_mapped(None, Some(m.addr()), None);
    assert!(kb * 100 >= 99 * mib * 1024, "only {kb} kB PMD-mapped of {}", mib * 1024);
}

#[test]
fn elf_warm_is_bounded_to_read_only_segments() {
    let dir = common::scratch();
    let lib = common::copy_fixture(dir.path(), "bfd", "libbig.so");
    let size = std::fs::metadata(&lib).unwrap().len();
    pagecache::evict(&File::open(&lib).unwrap(), 0..0).unwrap();
    let v = warm_json(&[lib.to_str().unwrap()]);
    let f = file_entry(&v, "libbig.so");
    assert_eq!(f["elf"], true);
    let ranges = f["ranges"].as_array().unwrap();
    assert!(ranges.iter().any(|r| r["flags"] == "r-x"), "{f:#}");
    assert!(ranges.iter().all(|r| r["flags"] != "rw-"));
    let eligible = f["eligible_windows"].as_u64().unwrap();
    assert!(eligible * common::pmd() >= 16 << 20, "{f:#}");
    assert_eq!(f["unit_windows"], eligible, "100% of eligible windows: {f:#}");
    // GNU ld: vaddr == offset, p_align 4 KiB: depends on the load address.
    assert!(ranges.iter().all(|r| r["runtime"] == "load-address"), "{f:#}");
    // Nothing outside the read-only segments (page-rounded) was read: not
    // the padding between them, not the writable segment's own pages, not
    // the symbol tables at the end.
    let ps = kernel::page_size() as u64;
    let mut cursor = 0;
    let mut gaps = Vec::new();
    for r in ranges {
        let (o, l) = (r["offset"].as_u64().unwrap(), r["len"].as_u64().unwrap());
        if o / ps * ps > cursor {
            gaps.push(cursor..o / ps * ps);
        }
        cursor = (o + l).div_ceil(ps) * ps;
    }
    gaps.push(cursor..size);
    let mut checked = 0;
    for g in gaps.into_iter().filter(|g| g.start < g.end) {
        let s = folio::scan_file(&lib, Some(g.clone())).unwrap();
        assert_eq!(
            s.cached_kb, 0,
            "read outside the segments at {:#x}..{:#x}: {s:?}",
            g.start, g.end
        );
        checked += g.end - g.start;
    }
    assert!(checked > ps, "the fixture has gaps to check ({checked} bytes)");
    assert!(f["cached_kb"].as_u64().unwrap() * 1024 >= 20 << 20);
}

#[test]
fn running_instance_of_library_and_nopie_program_is_pmd_mapped() {
    let dir = common::scratch();
    let lib = common::copy_fixture(dir.path(), "bfd", "libbig.so");
    let exe = common::copy_fixture(dir.path(), "bfd", "usebig");
    let nopie = common::copy_fixture(dir.path(), "bfd", "nopie");
    common::align_if_loader_misaligns(&lib);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    for p in [&lib, &exe, &nopie] {
        common::read_small(p);
    }
    let v = warm_json(&[exe.to_str().unwrap(), lib.to_str().unwrap(), nopie.to_str().unwrap()]);
    let want_lib = file_entry(&v, "libbig.so")["unit_windows"].as_u64().unwrap();
    let want_nopie = file_entry(&v, "nopie")["mappable_windows"].as_u64().unwrap();
    assert!((want_lib.min(want_nopie)) * common::pmd() >= 16 << 20, "{v:#}");

    // usebig has RUNPATH=$ORIGIN: it loads the warmed copy next to it.
    let r = common::Running::fixture(&exe);
    let lib_kb = file_pmd_mapped(Some(r.pid()), None, Some("/libbig.so"));
    // The library's text windows are PMD-mapped where ld.so placed the
    // library PMD-aligned (ext4's and xfs's thp_get_unmapped_area do for big
    // mappings; on aarch64, after `align`); the small usebig has no whole
    // window of text.
    assert_eq!(lib_kb, want_lib * common::pmd_kb(), "libbig.so in running usebig");
    r.stop();

    let r = common::Running::fixture(&nopie);
    let kb = file_pmd_mapped(Some(r.pid()), None, "/nopie".into());
    assert_eq!(
        kb,
        want_nopie * common::pmd_kb(),
        "nopie text (ET_EXEC, congruent) in the running program"
    );
    r.stop();
}

#[test]
fn deps_warms_the_library_and_running_instance_shows_both_pmd_mapped() {
    let dir = common::scratch();
    let lib = common::copy_fixture(dir.path(), "bfd", "libbig.so");
    let exe = common::copy_fixture(dir.path(), "bfd", "usebig");
    common::align_if_loader_misaligns(&lib);
    common::read_small(&lib);
    let v = warm_json(&["--deps", exe.to_str().unwrap()]);
    let l = file_entry(&v, "libbig.so");
    assert_eq!(l["unit_windows"], l["eligible_windows"]);
    let r = common::Running::fixture(&exe);
    let kb = file_pmd_mapped(Some(r.pid()), None, Some("/libbig.so"));
    assert_eq!(kb, l["unit_windows"].as_u64().unwrap() * common::pmd_kb());
    r.stop();
}

#[test]
fn blocked_by_a_running_process_is_reported_and_the_process_is_unharmed() {
    let dir = common::scratch();
    let exe = common::copy_fixture(dir.path(), "bfd", "pie");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = File::open(&exe).unwrap();
    pagecache::evict(&f, 0..0).unwrap();
    drop(f);
    // Cold start: the kernel faults the text in 4 KiB folios, and the
    // program maps them.
    let r = common::Running::fixture(&exe);
    // Nothing could be warmed: impossible (3), and stderr names who maps it.
    // (--force: this PIE's text is not PMD-mappable at run time.)
    let (v, err) = warm_json_exit(&["--force", exe.to_str().unwrap()], 3);
    let e = file_entry(&v, "pie");
    assert_eq!(e["unit_windows"], 0, "{e:#}");
    assert!(
        err.contains("nothing warmed") && err.contains(&format!("pid {} (", r.pid())),
        "{err}"
    );
    assert!(e["blocked_kb"].as_u64().unwrap() > 0, "{e:#}");
    assert!(e["blocked_windows"].as_u64().unwrap() > 0);
    let pids: Vec<u64> = e["blocked_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert!(pids.contains(&(r.pid() as u64)), "{e:#}");
    assert!(e["notes"].to_string().contains("--replace"), "{e:#}");
    // Still runs, and computes what it computed before.
    let first = r.first_line.clone();
    r.stop();
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap(),
        first.trim()
    );
}

/// Where the kernel collapses file text in place (7.x: any filesystem with
/// PMD folios), the windows a running process keeps from being evicted are
/// collapsed under it instead of being reported blocked, and warm says so.
#[test]
fn running_process_text_is_collapsed_in_place_where_the_kernel_can() {
    let dir = common::scratch();
    if !pagecache::collapse_supported(dir.path()).unwrap().is_available() {
        common::skip_line("skipped: this kernel cannot collapse file text in place (warm reports it blocked)");
        return;
    }
    let exe = common::copy_fixture(dir.path(), "bfd", "pie");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    File::open(&exe).map(|f| pagecache::evict(&f, 0..0).unwrap()).unwrap();
    let r = common::Running::fixture(&exe);
    let (v, _) = warm_json_exit(&["--force", exe.to_str().unwrap()], 0);
    let e = file_entry(&v, "pie");
    assert_eq!(e["blocked_windows"], 0, "{e:#}");
    assert_eq!(e["unit_windows"], e["eligible_windows"], "{e:#}");
    assert_eq!(e["route"], "pmd-readahead-collapse", "{e:#}");
    let notes = e["notes"].to_string();
    assert!(
        notes.contains("in place while running processes map them") && notes.contains(&format!("pid {} (", r.pid())),
        "{e:#}"
    );
    // Still runs, and computes what it computed before.
    let first = r.first_line.clone();
    r.stop();
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap(),
        first.trim()
    );
}

#[test]
fn replace_warms_a_copy_and_keeps_metadata() {
    let dir = common::scratch();
    let exe = common::copy_fixture(dir.path(), "bfd", "pie");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o4751)).unwrap();
    set_xattr(&exe, "user.hugetext-test", b"kept");
    // A valid file capability (v2, cap_net_bind_service permitted+effective).
    let mut cap = Vec::new();
    for w in [0x0200_0001u32, 1 << 10, 0, 0, 0] {
        cap.extend_from_slice(&w.to_le_bytes());
    }
    set_xattr(&exe, "security.capability", &cap);
    let orig = std::fs::read(&exe).unwrap();
    let old_ino = std::fs::metadata(&exe).unwrap().ino();
    let old_mtime = std::fs::metadata(&exe).unwrap().mtime();
    File::open(&exe).map(|f| pagecache::evict(&f, 0..0).unwrap()).unwrap();
    let r = common::Running::fixture(&exe);

    // A hard link makes --replace refuse, and nothing changes.
    let link = dir.path().join("pie-link");
    std::fs::hard_link(&exe, &link).unwrap();
    let out = common::hugetext(&["warm", "--force", "--replace", exe.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hard links") && err.lines().count() == 1, "{err}");
    assert_eq!(std::fs::metadata(&exe).unwrap().ino(), old_ino);
    std::fs::remove_file(&link).unwrap();

    let v = warm_json(&["--force", "--replace", exe.to_str().unwrap()]);
    let e = file_entry(&v, "pie");
    assert_eq!(e["replaced"], true, "{e:#}");
    assert_eq!(e["route"], "replace");
    assert_eq!(e["unit_windows"], e["eligible_windows"], "{e:#}");
    assert!(
        e["eligible_windows"].as_u64().unwrap() * common::pmd() >= 16 << 20,
        "{e:#}"
    );
    let m = std::fs::metadata(&exe).unwrap();
    assert_ne!(m.ino(), old_ino, "a new inode");
    assert_eq!(m.mode() & 0o7777, 0o4751);
    assert_eq!(m.mtime(), old_mtime);
    assert_eq!(std::fs::read(&exe).unwrap(), orig, "identical content");
    assert_eq!(get_xattr(&exe, "user.hugetext-test"), b"kept");
    assert_eq!(get_xattr(&exe, "security.capability"), cap);
    // The old process still runs; a new one maps the warmed copy.
    r.stop();
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    assert!(!dir
        .path()
        .read_dir()
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().contains(".hugetext-")));
}

fn set_xattr(p: &Path, name: &str, val: &[u8]) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    let r = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), val.as_ptr().cast(), val.len(), 0) };
    assert_eq!(r, 0, "setxattr {name}: {}", std::io::Error::last_os_error());
}

fn get_xattr(p: &Path, name: &str) -> Vec<u8> {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and buffer.
    let r = unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "getxattr {name}: {}", std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf
}

#[test]
fn tmpfs_says_pmd_folios_are_impossible() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || kernel::shmem_mode() != Some(Ok(hugetext_abi::thp::ShmemMode::Never)) {
        // The claim under test only holds for shmem_enabled=never.
        return;
    }
    // Two whole windows of the kernel's PMD size (4 MiB on x86-64, 64 MiB
    // with 16 KiB pages): something to warm, were it possible.
    let mib = ((2 * common::unit()) >> 20) as usize;
    let p = common::scratch_file(shm, &format!("hugetext-warm-test-{}", std::process::id()), mib);
    let out = common::hugetext(&["warm", "--json", p.to_str().unwrap()]);
    let _ = std::fs::remove_file(&p);
    // Impossible here: exit 3 (the exit-status convention of README.md).
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &v["files"][0];
    assert_eq!(e["filesystem"], "tmpfs");
    assert_eq!(e["route"], "none");
    assert_eq!(e["unit_windows"], 0);
    assert!(e["notes"].to_string().contains("PMD folios are impossible"), "{e:#}");
}

#[test]
fn memory_guard_refuses_and_touches_nothing() {
    let dir = common::scratch();
    let p = common::scratch_file(dir.path(), "data", 8);
    common::read_small(&p);
    let before = folio::scan_file(&p, None).unwrap();
    let out = common::hugetext(&["warm", "--max-mem", "1M", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("hugetext: error: refusing to warm 8 MiB") && err.lines().count() == 1,
        "{err}"
    );
    let after = folio::scan_file(&p, None).unwrap();
    assert_eq!(before.folios_kb, after.folios_kb, "the guard must act before evicting");
    let out = common::hugetext(&["warm", "--max-mem", "lots", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "clap rejects a bad value");
}

#[test]
fn config_hot_warms_only_the_profiles_hot_windows() {
    let dir = common::scratch();
    // A copy of the fixture: matched by build-id; and a file the profile does not name.
    let exe = dir.path().join("hotcold");
    std::fs::copy(common::hotcold(), &exe).unwrap();
    let other = common::scratch_file(dir.path(), "other", 4);
    let prof = common::hotcold_profile(dir.path());
    let conf = dir.path().join("warm.conf");
    std::fs::write(&conf, format!("paths = [{exe:?}, {other:?}]\nhot = {prof:?}\n")).unwrap();
    let (v, err) = warm_json_exit(&["--config", conf.to_str().unwrap()], 0);
    assert_eq!(file_entry(&v, "/hotcold")["unit_windows"], 4, "{v:#} {err}");
    assert_eq!(file_entry(&v, "/other")["unit_windows"], 0, "{v:#}");
    // Half the samples: main's window alone (40 of 100) is not enough, two are.
    std::fs::write(&conf, format!("paths = [{exe:?}]\nhot = {prof:?}\nhot_share = 50\n")).unwrap();
    let v = warm_json(&["--config", conf.to_str().unwrap()]);
    assert_eq!(file_entry(&v, "/hotcold")["unit_windows"], 2, "{v:#}");
    // A bad share, a relative path, a missing profile: one line, exit 1.
    for (bad, want) in [
        (
            format!("paths = [{exe:?}]\nhot = {prof:?}\nhot_share = 0\n"),
            "hot_share must be a percentage",
        ),
        (
            format!("paths = [{exe:?}]\nhot = \"rel.json\"\n"),
            "is not an absolute path",
        ),
        (
            format!("paths = [{exe:?}]\nhot = \"/nonexistent/p.json\"\n"),
            "/nonexistent/p.json",
        ),
    ] {
        std::fs::write(&conf, bad).unwrap();
        let out = common::hugetext(&["warm", "--config", conf.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want) && err.trim().lines().count() == 1, "{err}");
    }
}

#[test]
fn config_file_lists_what_to_warm() {
    let dir = common::scratch();
    let a = common::scratch_file(dir.path(), "a", 4);
    let b = common::scratch_file(dir.path(), "b", 4);
    let conf = dir.path().join("warm.conf");
    std::fs::write(&conf, format!("paths = [{:?}, {:?}]\nmax_mem = \"90%\"\n", a, b)).unwrap();
    let v = warm_json(&["--config", conf.to_str().unwrap()]);
    assert_eq!(file_entry(&v, "/a")["unit_windows"], 2);
    assert_eq!(file_entry(&v, "/b")["unit_windows"], 2);

    let out = common::hugetext(&["warm", "--config", conf.to_str().unwrap(), "--path-unit"]);
    let unit = String::from_utf8_lossy(&out.stdout);
    assert!(
        unit.contains(&format!("PathChanged={}", a.display())) && unit.contains("Unit=hugetext-warm.service"),
        "{unit}"
    );

    std::fs::write(&conf, "paths = [\"/bin/true\"]\nmax_memory = 3\n").unwrap();
    let out = common::hugetext(&["warm", "--config", conf.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&format!("{}:2:1: ", conf.display())) && err.contains("max_memory") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn bad_paths_give_one_clear_line_each() {
    let dir = common::scratch();
    let missing = dir.path().join("missing");
    for (path, want) in [
        (missing.to_str().unwrap(), "no such file"),
        (dir.path().to_str().unwrap(), "is a directory"),
        ("/dev/null", "not a regular file (a character device)"),
    ] {
        let out = common::hugetext(&["warm", path]);
        assert_eq!(out.status.code(), Some(1), "{path}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("hugetext: error: ") && err.contains(path) && err.contains(want),
            "{err}"
        );
    }
    // No permission: as nobody, a root-only file.
    let secret = common::scratch_file(dir.path(), "secret", 1);
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = common::as_nobody()
        .arg(common::bin())
        .args(["warm", secret.to_str().unwrap()])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("permission denied") && err.lines().count() == 1, "{err}");
    // Errors in one file do not stop the others.
    let good = common::scratch_file(dir.path(), "good", 2);
    let out = common::hugetext(&["warm", "--json", missing.to_str().unwrap(), good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(file_entry(&v, "missing")["error"]
        .as_str()
        .unwrap()
        .contains("no such file"));
    assert_eq!(file_entry(&v, "good")["unit_windows"], 1);
}

#[test]
fn freshly_written_file_is_warmed_on_the_first_run() {
    // A just-built or just-copied program has dirty page cache, which
    // POSIX_FADV_DONTNEED cannot drop: warm must write it back first, or the
    // windows stay in whatever folios the writer made (and were once
    // misreported as "blocked by running processes").
    let dir = common::scratch();
    let dst = dir.path().join("nopie");
    std::fs::copy(common::fixture("bfd", "nopie"), &dst).unwrap(); // no fsync: dirty
    let v = warm_json(&[dst.to_str().unwrap()]);
    let f = file_entry(&v, "nopie");
    assert!(
        f["eligible_windows"].as_u64().unwrap() * common::pmd() >= 16 << 20,
        "{f:#}"
    );
    assert_eq!(f["unit_windows"], f["eligible_windows"], "{f:#}");
    assert_eq!(f["blocked_kb"], 0, "{f:#}");
}

#[test]
fn text_no_process_can_pmd_map_is_left_as_it_is_unless_forced() {
    // A PIE with p_align < 2 MiB (the kernel loads it page-aligned) and a
    // non-PIE whose segments are not 2 MiB-congruent (lld): filling their
    // page cache with 2 MiB folios only costs memory.
    let dir = common::scratch();
    for (linker, name, why) in [("bfd", "pie", "p_align"), ("lld", "nopie", "not a multiple")] {
        let p = common::copy_fixture(dir.path(), linker, name);
        common::read_small(&p);
        let (v, err) = warm_json_exit(&[p.to_str().unwrap()], 3);
        let f = file_entry(&v, name);
        assert_eq!(f["route"], "needs-align", "{f:#}");
        assert_eq!(f["unit_windows"], 0, "nothing filled: {f:#}");
        assert_eq!(f["small"]["no_large_folios_kb"], 0, "{f:#}");
        let notes = f["notes"].to_string();
        assert!(
            notes.contains(&format!("hugetext align {}", p.display())) && notes.contains(why),
            "{notes}"
        );
        assert!(
            err.contains("nothing warmed") && err.contains("hugetext align"),
            "{err}"
        );
        let after = folio::scan_file(&p, None).unwrap();
        assert!(after.unit_windows.is_empty(), "the cache was left as it was");
        // --force fills it as before.
        let v = warm_json(&["--force", p.to_str().unwrap()]);
        let f = file_entry(&v, name);
        assert_eq!(f["unit_windows"], f["eligible_windows"], "{f:#}");
        assert_eq!(f["mappable_windows"], 0, "{f:#}");
    }
}

/// An overlayfs mount (lower, upper and work directories under `dir`),
/// unmounted when dropped.
struct Overlay(std::path::PathBuf);

impl Overlay {
    fn mount(dir: &Path) -> Option<Overlay> {
        for d in ["lower", "upper", "work", "merged"] {
            std::fs::create_dir(dir.join(d)).unwrap();
        }
        let merged = dir.join("merged");
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            dir.join("lower").display(),
            dir.join("upper").display(),
            dir.join("work").display()
        );
        let st = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(&merged)
            .status()
            .unwrap();
        st.success().then_some(Overlay(merged))
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn freshly_written_file_on_overlayfs_is_warmed_and_not_called_blocked() {
    // On overlayfs the dirty pages belong to the upper layer's file, which
    // sync_file_range on the overlay file does not reach: they stayed, and
    // were reported as "blocked by running processes" with exit 0.
    let dir = common::scratch();
    if !common::fs_gives_pmd_folios(dir.path()) {
        common::skip_line("the scratch filesystem gives no PMD folios");
        return;
    }
    let Some(ov) = Overlay::mount(dir.path()) else {
        common::skip_line("cannot mount overlayfs here");
        return;
    };
    let dst = ov.0.join("nopie");
    std::fs::copy(common::fixture("bfd", "nopie"), &dst).unwrap(); // no fsync: dirty
    let (v, err) = warm_json_exit(&[dst.to_str().unwrap()], 0);
    let f = file_entry(&v, "nopie");
    assert_eq!(f["filesystem"], "overlayfs", "{f:#}");
    assert!(
        f["eligible_windows"].as_u64().unwrap() * common::pmd() >= 16 << 20,
        "{f:#}"
    );
    assert_eq!(f["unit_windows"], f["eligible_windows"], "{f:#} {err}");
    assert_eq!(f["blocked_kb"], 0, "{f:#}");
    assert_eq!(f["small"]["blocked_kb"], 0, "{f:#}");
    assert_eq!(f["blocked_by"], serde_json::json!([]), "{f:#}");
}

/// The exit-status convention: 0 done, 2 nothing to do (no whole 2 MiB
/// window), 1 error, an error winning over done and done over nothing.
#[test]
fn exit_status_says_done_nothing_to_do_or_error() {
    let dir = common::scratch();
    let small = common::scratch_file(dir.path(), "small", 1);
    let big = common::scratch_file(dir.path(), "big", 4);
    let missing = dir.path().join("missing");
    let code = |args: &[&Path]| {
        let mut a = vec!["warm".to_string()];
        a.extend(args.iter().map(|p| p.to_str().unwrap().to_string()));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        common::hugetext(&a).status.code()
    };
    assert_eq!(code(&[&small]), Some(2), "no whole 2 MiB window: nothing to do");
    assert_eq!(code(&[&small, &big]), Some(0), "one file warmed: done");
    assert_eq!(code(&[&big, &missing]), Some(1), "an error wins");
}

/// Every planned file stays open until it is warmed: more files than a
/// soft open-file limit of 1024 (the common default) are all warmed.
#[test]
fn more_files_than_the_soft_open_file_limit_are_all_warmed() {
    const N: usize = 1100;
    let hard = Command::new("sh").args(["-c", "ulimit -Hn"]).output().unwrap();
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_string();
    if hard.parse::<usize>().is_ok_and(|h| h < 2 * N) {
        eprintln!("skipped: the hard open-file limit ({hard}) leaves no room above {N} files");
        return;
    }
    let dir = common::scratch();
    let files: Vec<String> = (0..N)
        .map(|i| {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, b"x").unwrap();
            p.to_str().unwrap().to_string()
        })
        .collect();
    let out = Command::new("sh")
        .args(["-c", "ulimit -Sn 1024 && exec \"$0\" warm --json \"$@\""])
        .arg(common::bin())
        .args(&files)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // No whole 2 MiB window in any of them: nothing to do, and no error.
    assert_eq!(out.status.code(), Some(2), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got = v["files"].as_array().unwrap();
    assert_eq!(got.len(), N);
    assert!(got.iter().all(|f| f.get("error").is_none()), "{err}");
}
