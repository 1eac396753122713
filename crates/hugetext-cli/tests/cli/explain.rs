//! `hugetext explain` against the real kernel: each situation is built for
//! real, explain must name it with its reason code and fix, the fix is
//! applied, and explain must then report the mapping PMD-mapped.

use hugetext_testkit as common;

use crate::explain_support;
use explain_support::*;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[test]
fn skewed_lld_pie_align_then_warm_then_pmd_mapped() {
    let dir = common::scratch();
    let p = common::copy_fixture(dir.path(), "lld", "pie");
    let r = common::Running::fixture(&p);
    let m = mapping(r.pid(), &p);
    if landed_congruent(&m) {
        return;
    }
    // lld puts the text one max-page-size past its file offset (4 KiB on
    // x86-64, 64 KiB on aarch64): off the PMD grid at any base.
    assert_eq!(reason(&m), "layout-skewed", "{m:#}");
    assert_eq!(fix(&m), format!("hugetext align {}", s(&p)));
    assert_eq!(m["backing"], "file");
    assert_eq!(m["unit_mapped_kb"], 0);
    drop(r);

    // The fix. The new file's page cache then holds what an exec fault reads: small folios.
    hugetext_ok(&["align", p.to_str().unwrap()]);
    common::read_small(&p);
    let r = common::Running::fixture(&p);
    let m = mapping(r.pid(), &p);
    if small_folios_unless_khugepaged(&m, &p, r.pid()) {
        // Exec faults read it into small folios: 4 KiB ones, or larger ones
        // that are still not PMD-size (xfs on 6.12: 16-128 kB), mapped by PTEs.
        assert!(
            m["base_kb"].as_u64().unwrap() + m["pte_large_kb"].as_u64().unwrap() > 0,
            "{m:#}"
        );
    }
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
    let file = warmed_file(dir.path(), 4);
    let h = helper(&file, &["nohuge"]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "madv-nohugepage", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("nh in VmFlags"), "{m:#}");
    assert!(fix(&m).contains("MADV_NOHUGEPAGE"), "{m:#}");

    // Advice changed after the pages were mapped: PMD folios in the cache, PTEs in the process.
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
    assert_eq!(m["unit_mapped_kb"], 0);
    h.stop();

    // The fix: restart.
    let h = helper(&file, &[]);
    assert_ok(&mapping(h.pid(), &file));
    h.stop();
}

#[test]
fn windows_not_executed_yet_are_not_faulted_yet_not_mapped_before_warm() {
    // Warmed text of which the process has executed only the first window:
    // the others are not mapped at all, and the kernel maps each with a PMD
    // when it is first executed. Restarting would change nothing.
    let dir = common::scratch();
    let file = warmed_file(dir.path(), 3);
    let h = helper(&file, &["first=1"]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "not-faulted-yet", "{m:#}");
    assert!(m["fix"].is_null(), "{m:#}");
    assert!(evidence(&m).contains("2 of them are not mapped yet"), "{m:#}");
    assert_eq!(
        m["unit_mapped_kb"],
        common::pmd_kb(),
        "the executed window is PMD-mapped: {m:#}"
    );
    h.stop();
}

#[test]
fn thp_disabled_by_prctl_then_restarted_without() {
    let dir = common::scratch();
    let file = warmed_file(dir.path(), 2);
    let h = helper(&file, &["prctl"]);
    let v = explain_json(h.pid());
    assert_eq!(v["processes"][0]["thp_disabled"], true, "{v:#}");
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "thp-disabled-process", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("THP_enabled: 0"), "{m:#}");
    assert!(fix(&m).contains("PR_SET_THP_DISABLE"), "{m:#}");
    h.stop();

    let h = helper(&file, &[]);
    assert_ok(&mapping(h.pid(), &file));
    h.stop();
}

#[test]
fn text_on_tmpfs_names_the_filesystem() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let shmem = hugetext::kernel::shmem_mode();
    if !matches!(shmem, Some(Ok(m)) if !m.may_give_huge()) {
        common::skip_line(&format!(
            "skipped: shmem_enabled is {shmem:?}, tmpfs may give huge pages"
        ));
        return;
    }
    // shmem_enabled is the PMD size's switch; with 64 KiB pages tmpfs may
    // still give folios of the 2 MiB unit (measured on 7.3.4 arm64-64k):
    // then its text is rightly "ok", and this case does not arise.
    if common::fs_gives_pmd_folios(shm.path()) {
        common::skip_line("skipped: tmpfs gives folios of the unit of huge text on this kernel");
        return;
    }
    let file = common::scratch_file(shm.path(), "text.bin", windows_mib(2));
    let h = helper(&file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("tmpfs"), "{m:#}");
    assert!(fix(&m).contains("hugetext run --strategy copy"), "{m:#}");
    assert!(
        fix(&m).starts_with(&format!("move {} to a filesystem with large folios", s(&file))),
        "{m:#}"
    );
    h.stop();

    // The fix: move it to a filesystem with large folios. There it is first
    // read by exec faults (small folios), then warmed.
    let dir = common::scratch();
    if !common::fs_gives_pmd_folios(dir.path()) {
        common::skip_line("skipped (the fix): the scratch filesystem gives no PMD folios");
        return;
    }
    let moved = dir.path().join("text.bin");
    std::fs::copy(&file, &moved).unwrap();
    std::fs::remove_file(&file).unwrap();
    common::read_small(&moved);
    let h = helper(&moved, &[]);
    let m = mapping(h.pid(), &moved);
    small_folios_unless_khugepaged(&m, &moved, h.pid());
    h.stop();
    hugetext_ok(&["warm", moved.to_str().unwrap()]);
    let h = helper(&moved, &[]);
    assert_ok(&mapping(h.pid(), &moved));
    h.stop();
}

#[test]
fn text_on_btrfs_names_the_filesystem_then_run_copies_it() {
    let Some(fs) = common::loop_fs("btrfs") else { return };
    if common::fs_gives_pmd_folios(fs.path()) {
        common::skip_line("skipped: this kernel's btrfs gives PMD folios");
        return;
    }
    let file = common::scratch_file(fs.path(), "text.bin", windows_mib(2));
    let h = helper(&file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(m["evidence"].as_str().unwrap().contains("btrfs"), "{m:#}");
    h.stop();

    // A program there (bfd, not PIE: congruent at its fixed address).
    let p = common::copy_fixture(fs.path(), "bfd", "nopie");
    let r = common::Running::fixture(&p);
    let m = mapping(r.pid(), &p);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(
        fix(&m).ends_with("or start it with `hugetext run --strategy copy`"),
        "{m:#}"
    );
    r.stop();
    // The fix: start it with `hugetext run --strategy copy`.
    let r = common::run_waiting(&["--strategy", "copy"], &p);
    let copy = largest_copy(r.pid(), &p);
    assert_ok(&copy);
    common::remove_perf_map(r.child.id());
    r.stop();
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
    // Sizes as the running kernel has them.
    let (page_kb, pmd_w) = (common::page() / 1024, hugetext::units::human(common::unit()));
    assert!(t.contains(&format!(" whole {pmd_w} windows")), "{t}");
    for l in t.lines().filter(|l| l.contains(" kB pages")) {
        assert!(l.contains(&format!(" kB in {page_kb} kB pages")), "{t}");
    }
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
    common::scratch_file(&lower, "text.bin", windows_mib(2));
    let Some(ov) = Overlay::mount(&lower, dir.path()) else {
        return;
    };
    let file = ov.0.join("text.bin");
    // The helper's exec faults read the file into small folios.
    let h = helper(&file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "cache-small-folios", "{m:#}");
    assert!(fix(&m).starts_with(&format!("hugetext warm {}", s(&file))), "{m:#}");
    h.stop();

    hugetext_ok(&["warm", file.to_str().unwrap()]);
    let h = helper(&file, &[]);
    assert_ok(&mapping(h.pid(), &file));
    h.stop();
}

#[test]
fn overlayfs_over_tmpfs_names_the_layer_below() {
    let shmem = hugetext::kernel::shmem_mode();
    if !matches!(shmem, Some(Ok(m)) if !m.may_give_huge()) {
        common::skip_line(&format!(
            "skipped: shmem_enabled is {shmem:?}, tmpfs may give huge pages"
        ));
        return;
    }
    let dir = common::scratch();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    common::scratch_file(shm.path(), "text.bin", windows_mib(2));
    let Some(ov) = Overlay::mount(shm.path(), dir.path()) else {
        return;
    };
    let file = ov.0.join("text.bin");
    let h = helper(&file, &[]);
    let m = mapping(h.pid(), &file);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(
        m["evidence"].as_str().unwrap().contains("overlayfs over tmpfs"),
        "{m:#}"
    );
    h.stop();
}

#[test]
fn small_text_has_no_whole_window_and_no_fix() {
    // sleep's own text is a few dozen kB: no 2 MiB window fits in it.
    let out = common::hugetext(&["explain", "--json", "--stop", "--", "sleep", "30"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["processes"][0];
    let exe = s(&which("sleep"));
    let m = p["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == exe.as_str())
        .unwrap_or_else(|| panic!("{exe} not in {v:#}"));
    assert_eq!(reason(m), "no-whole-window", "{m:#}");
    assert!(m["size_kb"].as_u64().unwrap() < common::unit_kb(), "{m:#}");
    assert_eq!(
        (m["whole_windows"].as_u64(), m["gain_kb"].as_u64()),
        (Some(0), Some(0)),
        "{m:#}"
    );
    assert!(m["fix"].is_null(), "{m:#}");
    assert!(
        evidence(m).contains(&format!(
            "no whole {} window fits",
            hugetext::units::human(common::unit())
        )),
        "{m:#}"
    );
    // Nothing to gain from this mapping: the summary offers no fix for it.
    assert!(!p["summary"].as_str().unwrap().contains(&exe), "{p:#}");
}

/// The program `name` on PATH.
fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.exists()))
        .unwrap_or_else(|| panic!("{name} not on PATH"))
}

#[test]
fn copy_split_into_base_pages_then_restarted_with_run() {
    let dir = common::scratch();
    let p = common::copy_fixture(dir.path(), "lld", "pie");
    let r = common::run_waiting(&["--strategy", "copy"], &p);
    let copy = largest_copy(r.pid(), &p);
    assert_ok(&copy);
    // Make the copy not huge for real: the kernel splits its huge pages.
    let end = u64::from_str_radix(copy["end"].as_str().unwrap(), 16).unwrap();
    let events = split(r.pid(), start(&copy), end);
    let m = mappings(r.pid(), &p)
        .into_iter()
        .find(|m| m["start"] == copy["start"])
        .unwrap();
    let after = thp_events();
    assert_eq!(m["backing"], "anon-copy", "{m:#}");
    assert_eq!(reason(&m), "copy-not-huge", "{m:#}\n{events}\nthen {after:?}");
    // Split, and left split (aged: khugepaged collapses only windows with
    // a referenced page, which explain's own reads may make): not every
    // window huge any more.
    let whole_kb = m["whole_windows"].as_u64().unwrap() * common::unit_kb();
    assert!(
        m["unit_mapped_kb"].as_u64().unwrap() < whole_kb,
        "{m:#}\n{events}\nthen {after:?}"
    );
    assert!(m["gain_kb"].as_u64().unwrap() > 0, "{m:#}");
    assert!(fix(&m).contains("hugetext run"), "{m:#}");
    common::remove_perf_map(r.child.id());
    r.stop();

    // The fix: restart it with `hugetext run`.
    let r = common::run_waiting(&["--strategy", "copy"], &p);
    let copies: Vec<Value> = mappings(r.pid(), &p)
        .into_iter()
        .filter(|m| m["backing"] == "anon-copy")
        .collect();
    assert!(!copies.is_empty());
    for m in &copies {
        if m["whole_windows"].as_u64().unwrap() > 0 {
            assert_ok(m);
        }
    }
    common::remove_perf_map(r.child.id());
    r.stop();
}

#[test]
fn library_at_an_unaligned_base_with_the_loader_and_its_tunables() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::scratch();
    let lib = common::copy_fixture(dir.path(), "bfd", "libbig.so");
    let exe = common::copy_fixture(dir.path(), "bfd", "usebig");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let start_it = || {
        let mut cmd = Command::new(&exe);
        cmd.arg("wait").env("GLIBC_TUNABLES", "glibc.elf.thp=1");
        common::Running::start(cmd)
    };
    let r = start_it();
    let v = explain_json(r.pid());
    let p = &v["processes"][0];
    assert_eq!(p["exe"], s(&exe).as_str(), "{p:#}");
    assert_eq!(p["glibc_tunables"], "glibc.elf.thp=1", "{p:#}");
    let loader = p["loader"]["path"].as_str().unwrap();
    assert!(loader.contains("/ld-"), "{p:#}");
    // What the loader itself lists.
    let listed = Command::new(loader).arg("--list-tunables").output().unwrap();
    let knows = common::text(&listed.stdout).contains("glibc.elf.thp:");
    assert_eq!(p["loader"]["elf_thp"], knows, "{p:#}");

    let m = mapping(r.pid(), &lib);
    if (start(&m) - m["offset"].as_u64().unwrap()) % common::unit() == 0 {
        // Kernels that give the file large folios also place big file
        // mappings PMD-aligned (thp_get_unmapped_area), so ld.so's base is.
        assert!(
            !reason(&m).starts_with("layout") && reason(&m) != "base-unaligned",
            "{m:#}"
        );
        common::skip_line("skipped (layout part): the kernel placed libbig.so PMD-aligned");
        return;
    }
    assert_eq!(reason(&m), "base-unaligned", "{m:#}");
    if knows {
        // Set, and yet not aligned (this glibc aligns only under THP `always`).
        assert!(
            evidence(&m).contains("GLIBC_TUNABLES has glibc.elf.thp=1, but"),
            "{m:#}"
        );
    } else {
        assert!(!evidence(&m).contains("glibc.elf.thp"), "{m:#}");
    }
    assert_eq!(fix(&m), format!("hugetext align {}", s(&lib)));
    r.stop();

    // The fix, then warm (exec faults read the rewritten file into small folios).
    hugetext_ok(&["align", lib.to_str().unwrap()]);
    hugetext_ok(&["warm", lib.to_str().unwrap()]);
    let r = start_it();
    assert_ok(&mapping(r.pid(), &lib));
    r.stop();
}

#[test]
fn thp_disabled_except_advised_does_not_stop_pmd_mapped_file_text() {
    // What systemd's MemoryTHP=madvise sets (Linux 6.18 and later):
    // prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED).
    let dir = common::scratch();
    let probe = Command::new(cprogs().join("maptext"))
        .args(["/nonexistent", "advised"])
        .output()
        .unwrap();
    if common::text(&probe.stderr).contains("prctl advised") {
        common::skip_line("skipped: this kernel has no PR_THP_DISABLE_EXCEPT_ADVISED");
        return;
    }
    let file = warmed_file(dir.path(), 2);
    let h = helper(&file, &["advised"]);
    // /proc/PID/status does not show it, and the kernel still PMD-maps
    // PMD-size file folios (do_set_pmd() treats them as a forced collapse).
    assert_eq!(explain_json(h.pid())["processes"][0]["thp_disabled"], false);
    assert_ok(&mapping(h.pid(), &file));
    h.stop();
}

/// A process that kept hugetext's settings (`run --inherit`: its
/// environment still has the tunable `run` added) is reported with the
/// user's own `GLIBC_TUNABLES`, not hugetext's.
#[test]
fn explain_reports_the_user_s_tunables_not_hugetext_s() {
    common::preload();
    for (user, want) in [
        (None, Value::Null),
        (
            Some("glibc.malloc.arena_max=2"),
            Value::from("glibc.malloc.arena_max=2"),
        ),
    ] {
        let mut cmd = Command::new(common::bin());
        cmd.args(["run", "--inherit", "--", "sh", "-c", "exec sleep 60"])
            .env_remove("GLIBC_TUNABLES")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(u) = user {
            cmd.env("GLIBC_TUNABLES", u);
        }
        let mut child = common::spawn_retry(&mut cmd);
        let pid = child.id();
        // Until the shell has exec'd sleep (same pid); generous bound.
        let t0 = std::time::Instant::now();
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or(true, |c| c.trim() != "sleep") {
            assert!(t0.elapsed().as_secs() < 60, "sleep did not start");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let out = common::hugetext(&["explain", "--json", "--pid", &pid.to_string()]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            environ.windows(19).any(|w| w == b"optional_static_tls"),
            "the case needs hugetext's tunable in the environment"
        );
        assert!(out.status.success(), "{}", common::text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["processes"][0]["glibc_tunables"], want, "{user:?}");
    }
}

/// Text run from a huge tmpfs: explain reports its backing as shmem, PMD-
/// mapped by as much as smaps' ShmemPmdMapped, and nothing to fix.
#[test]
fn huge_tmpfs_text_is_shmem_and_pmd_mapped() {
    let Some((_fs, p, r, shmem_pmd)) = common::huge_tmpfs_text() else {
        return;
    };
    let m = mapping(r.pid(), &p);
    assert_eq!(m["backing"], "shmem", "{m:#}");
    assert_eq!(m["unit_mapped_kb"], shmem_pmd, "{m:#}");
    assert_ok(&m);
    let out = common::hugetext(&["explain", "--pid", &r.pid().to_string()]);
    assert!(
        common::text(&out.stdout).contains(&format!("{} (shmem)", s(&p))),
        "{}",
        common::text(&out.stdout)
    );
    r.stop();
}

/// Where the filesystem gives no PMD folios, a PIE whose text every process
/// maps congruently (aligned: p_align of the PMD size) can be shared from
/// one copy in the text store: explain names `hugetext warm --shmem`. A
/// fixed-address executable keeps today's advice. (A tmpfs without huge
/// pages is the filesystem without large folios here.)
#[test]
fn no_large_folios_and_shareable_advises_warm_shmem() {
    let Some(fs) = common::tmpfs("huge=never,size=96m") else {
        return;
    };
    if common::fs_gives_pmd_folios(fs.path()) {
        common::skip_line("skipped: tmpfs gives folios of the unit of huge text here (shmem_enabled=force?)");
        return;
    }
    let pie = common::aligned_fixture(fs.path(), "bfd", "pie");
    let r = common::Running::fixture(&pie);
    let m = mapping(r.pid(), &pie);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(
        fix(&m).starts_with(&format!("hugetext warm --shmem {}", s(&pie))),
        "{m:#}"
    );
    r.stop();

    let exe = common::copy_fixture(fs.path(), "bfd", "nopie");
    let r = common::Running::fixture(&exe);
    let m = mapping(r.pid(), &exe);
    assert_eq!(reason(&m), "fs-no-large-folios", "{m:#}");
    assert!(
        fix(&m).starts_with(&format!("move {} to a filesystem with large folios", s(&exe))),
        "{m:#}"
    );
    r.stop();
}

/// A PIE whose 5 MiB of text starts 4 KiB into the file (bfd, p_align
/// 4 KiB), which executes one `ret` per page of it, says "five" and
/// "ready", then waits for stdin to close.
fn five_mib_pie(dir: &Path) -> PathBuf {
    let c = dir.join("five.c");
    std::fs::write(
        &c,
        "#include <stdio.h>\n#include <unistd.h>\nextern char pad[];\n\
         int main(void) { for (long i = 0; i < 0x500000; i += 4096) ((void (*)(void))(pad + i))();\n\
         printf(\"five\\nready\\n\"); fflush(stdout); char c; return (int)read(0, &c, 1) < 0; }\n",
    )
    .unwrap();
    let asm = dir.join("pad.S");
    std::fs::write(
        &asm,
        "    .text\n    .globl pad\npad:\n    .fill 0x500000, 1, 0xc3\n    .section .note.GNU-stack,\"\",@progbits\n",
    )
    .unwrap();
    let exe = dir.join("five");
    let st = Command::new("gcc")
        .args([
            "-O1",
            "-fPIE",
            "-pie",
            "-fuse-ld=bfd",
            "-Wl,-z,max-page-size=4096",
            "-Wl,-z,separate-code",
        ])
        .arg(&c)
        .arg(&asm)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success(), "gcc five.c pad.S");
    exe
}

/// The gain explain promises for `align` is what `align` + `warm` then
/// PMD-map: the whole windows of the aligned layout, not of the address
/// range as loaded. Without address randomisation the PIE's base is
/// 0x555555554000: its 5 MiB of text at 0x555555555000 spans two whole
/// 2 MiB windows, but aligned (base 2 MiB-aligned, text at 0x1000) one.
#[test]
fn the_gain_promised_for_align_is_what_align_and_warm_pmd_map() {
    if common::unit() != 2 << 20 {
        common::skip_line("skipped: the layout arithmetic is for 2 MiB windows");
        return;
    }
    let dir = common::scratch();
    let exe = five_mib_pie(dir.path());
    let mut cmd = Command::new("setarch");
    cmd.arg("-R").arg(&exe);
    let r = common::Running::start(cmd);
    let m = mapping(r.pid(), &exe);
    r.stop();
    if landed_congruent(&m) {
        return;
    }
    assert_eq!(reason(&m), "base-unaligned", "{m:#}");
    assert_eq!(m["gain_kb"].as_u64(), Some(2048), "one window after align: {m:#}");
    assert_eq!(fix(&m), format!("hugetext align {}", s(&exe)));
    if m["whole_windows"].as_u64() == Some(2) {
        assert!(
            evidence(&m).contains("aligned, its segment holds 1 whole 2 MiB window (2 as loaded now)"),
            "{m:#}"
        );
    }
    // What align and warm then give: the window promised, PMD-mapped.
    hugetext_ok(&["align", exe.to_str().unwrap()]);
    hugetext_ok(&["warm", exe.to_str().unwrap()]);
    let r = common::Running::start(Command::new(&exe));
    let after = mapping(r.pid(), &exe);
    r.stop();
    assert_eq!(after["unit_mapped_kb"].as_u64(), Some(2048), "{after:#}");
}

/// A file a Debian package owns (gdb's) is not aligned in place: the fix
/// is `check`'s warning and a copy to align and start instead.
#[test]
fn a_package_s_file_gets_the_copy_recipe_not_an_in_place_align() {
    let gdb = Path::new("/usr/bin/gdb");
    if !gdb.exists() {
        common::skip_line("skipped: gdb not installed (scripts/install-deps.sh)");
        return;
    }
    let owner = hugetext::explain::dpkg_owner("/usr/bin/gdb");
    if owner.as_deref() != Some("gdb") {
        common::skip_line("skipped: /usr/bin/gdb is not dpkg's gdb package here");
        return;
    }
    let o = common::hugetext(&[
        "explain",
        "--json",
        "--stop",
        "--",
        "/usr/bin/gdb",
        "-q",
        "-nx",
        "-batch",
        "-ex",
        "shell exec sleep 30 </dev/null >/dev/null 2>&1",
    ]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = v["processes"][0]["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == "/usr/bin/gdb")
        .unwrap_or_else(|| panic!("no mapping of gdb: {v:#}"))
        .clone();
    if landed_congruent(&m) {
        return;
    }
    assert_eq!(reason(&m), "base-unaligned", "{m:#}");
    let want = format!(
        "align a copy, not the file of package gdb ({}): mkdir -p /usr/local/lib/hugetext && hugetext align -o /usr/local/lib/hugetext/gdb /usr/bin/gdb, then start /usr/local/lib/hugetext/gdb instead of /usr/bin/gdb",
        hugetext::elf::align::SYSTEM_FILE_WARNING
    );
    assert_eq!(fix(&m), want, "{m:#}");
}
