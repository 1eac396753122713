//! The zero-copy route (`doctor`'s probe, `warm`, `inspect --file`,
//! `run --strategy file`) on filesystems other than the root ext4: xfs,
//! btrfs and a freshly made ext4, each a loop-mounted image made by the test
//! (common::loop_fs). Whether a filesystem gives PMD-order page-cache folios
//! is never assumed: every verdict hugetext prints is checked against an
//! independent fill (`pagecache::fill_huge`) and scan (`folio::scan_file`)
//! on the same filesystem.

use hugetext_testkit as common;

use common::Running;

use std::fs::File;
use std::path::Path;
use std::process::Output;

use hugetext::folio;
use hugetext::kernel::{self};
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn ok(out: Output, what: &str) -> Output {
    exits(out, 0, what)
}

/// `out` exited with `code`.
fn exits(out: Output, code: i32, what: &str) -> Output {
    assert!(
        out.status.code() == Some(code),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        common::text(&out.stdout),
        common::text(&out.stderr)
    );
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", common::text(&out.stdout)))
}

fn doctor_check(dir: &Path, id: &str) -> Value {
    let out = ok(
        common::hugetext(&["doctor", "--json", "--path", dir.to_str().unwrap()]),
        "doctor",
    );
    json(&out)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {}", common::text(&out.stdout)))
        .clone()
}

/// doctor's PMD-folio verdict for `dir`, checked against [`common::fs_gives_pmd_folios`]
/// there and against the filesystem type; returns it.
fn doctor_verdict(dir: &Path, fstype: &str) -> bool {
    let c = doctor_check(dir, "fs-large-folios");
    let value = c["value"].as_str().unwrap();
    assert!(value.starts_with(&format!("{fstype}: ")), "{c}");
    let doctor_yes = match c["status"].as_str().unwrap() {
        "ok" => true,
        "no" => false,
        s => panic!("unexpected status {s}: {c}"),
    };
    let experiment = common::fs_gives_pmd_folios(dir);
    assert_eq!(
        doctor_yes, experiment,
        "doctor says {c} but fill+scan says {experiment}"
    );
    // warm's own probe (an O_TMPFILE file) says the same.
    assert_eq!(hugetext::pagecache::probe_pmd_folios(dir), Some(experiment), "{fstype}");
    println!(
        "{fstype}: PMD-order page-cache folios: {}",
        if doctor_yes { "yes" } else { "no" }
    );
    doctor_yes
}

/// `warm --json P`, expecting exit status `code`: the file's entry.
fn warm_json(p: &Path, code: i32) -> Value {
    let out = exits(common::hugetext(&["warm", "--json", p.to_str().unwrap()]), code, "warm");
    json(&out)["files"][0].clone()
}

/// `warm` of the bfd/nopie fixture (in small folios) on `dir`: every
/// eligible window becomes one PMD folio, a running instance has its text
/// PMD-mapped, and `inspect --file` counts the same folios.
fn warm_reaches_every_window(dir: &Path, fstype: &str) {
    let prog = common::copy_fixture(dir, "bfd", "nopie");
    common::read_small(&prog);
    let before = folio::scan_file(&prog, None).unwrap();
    // x86-64 reads exec faults in 4 KiB folios. arm64 7.x reads them in
    // 64 KiB folios, and under THP always some windows may already be PMD
    // folios (the kernel's own share, measured in the 7.x arm64 guest on
    // xfs): warm must still reach every window.
    if cfg!(target_arch = "x86_64") {
        assert!(before.unit_windows.is_empty(), "not small before warm: {before:?}");
    }
    let w = warm_json(&prog, 0);
    assert_eq!(w["filesystem"], fstype, "{w:#}");
    assert_eq!(w["route"], "pmd-readahead", "{w:#}");
    let eligible = w["eligible_windows"].as_u64().unwrap();
    assert!(eligible * common::pmd() >= 16 << 20, "{w:#}");
    assert_eq!(w["unit_windows"], eligible, "not 100% of eligible windows: {w:#}");
    assert_eq!(w["mappable_windows"], eligible, "ET_EXEC text is congruent: {w:#}");
    // At least those windows: under THP always on 7.x the kernel may also
    // hold the file's tail in a PMD folio of its own (measured once in the
    // 7.x ext4 guest: 20476 kB for 9 windows, 2044 kB past the last one).
    assert!(
        w["unit_folio_kb"].as_u64().unwrap() >= eligible * common::pmd_kb(),
        "{w:#}"
    );

    // inspect --file agrees: the same kB in 2 MiB folios, the same windows.
    let out = ok(
        common::hugetext(&["inspect", "--json", "--file", prog.to_str().unwrap()]),
        "inspect --file",
    );
    let i = &json(&out)["files"][0];
    assert_eq!(
        i["folios"][format!("{}kB", common::pmd_kb())],
        w["unit_folio_kb"],
        "inspect {i:#} vs warm {w:#}"
    );
    assert_eq!(i["unit_windows_huge"], w["unit_windows"], "inspect {i:#} vs warm {w:#}");
    assert!(i["cached_kb"].as_u64().unwrap() >= w["cached_kb"].as_u64().unwrap());

    // A plain running instance maps the warmed folios with PMDs.
    let r = Running::fixture(&prog);
    let (file_pmd, anon, _) = r.huge_of(&prog);
    assert!(file_pmd >= 16 * MIB, "FilePmdMapped {} KiB on {fstype}", file_pmd >> 10);
    assert_eq!(file_pmd, eligible * common::pmd(), "every warmed window is PMD-mapped");
    assert_eq!(anon, 0);
    r.stop();
}

/// `run --strategy file` of a fresh copy (small folios, as exec leaves them):
/// the text becomes huge through the page cache, with no anonymous memory.
fn run_file_strategy_is_huge(dir: &Path) {
    run_file_strategy_is_huge_with(dir, None);
}

/// The same with `HUGETEXT_COMPAT=compat`; with `no-pt-reclaim` the page
/// cache is put in 4 KiB folios first (so the route drops and refaults) and
/// the windows must have been replaced with `mmap(MAP_FIXED)`.
fn run_file_strategy_is_huge_with(dir: &Path, compat: Option<&str>) {
    let prog = common::copy_fixture(dir, "bfd", "nopie");
    let keeps_tables = compat.is_some_and(|c| c.contains("no-pt-reclaim"));
    if keeps_tables {
        common::read_small(&prog);
    }
    let r = common::run_waiting_recorded(compat, &["--strategy", "file"], &prog);
    let (file_pmd, anon, private_anon) = r.huge_of(&prog);
    let err = r.stop();
    assert!(file_pmd >= 16 * MIB, "FilePmdMapped {} KiB: {err}", file_pmd >> 10);
    assert_eq!(anon + private_anon, 0, "the file route adds no anonymous memory: {err}");
    let want = common::text_window_bytes(&prog);
    let rec = common::start_record(&err);
    let n = |k: &str| rec[k].as_u64().unwrap_or_else(|| panic!("{k}: {rec}"));
    assert_eq!((n("windows"), n("huge")), (want, want), "{rec}");
    // Every window is huge, by the file route, or already (THP always on a
    // kernel that collapses file text: khugepaged may have collapsed a
    // window of the small-folio copy before the route came to it).
    let in_place = || hugetext::pagecache::collapse_supported(dir).unwrap().is_available();
    let file_or_already =
        n("file") == want || (in_place() && n("collapse") == 0 && n("copy") == 0 && n("file") + n("already") == want);
    assert!(file_or_already, "expected file {want}: {rec}");
    if keeps_tables {
        // Every window, except where the kernel collapses file text in place
        // (7.x): khugepaged (THP always) may map a window whose page cache is
        // already a PMD folio with a PMD before the route replaces it.
        assert!(n("replaced") == want || (in_place() && n("replaced") > 0), "{rec}");
    }
}

// ---------------------------------------------------------------------------
// xfs

#[test]
fn xfs_doctor_reports_pmd_folios() {
    let Some(fs) = common::loop_fs("xfs") else { return };
    assert!(
        doctor_verdict(fs.path(), "xfs"),
        "xfs has large folios since Linux 5.18"
    );
    assert_eq!(doctor_check(fs.path(), "pmd-map")["status"], "ok");
}

#[test]
fn xfs_warm_reaches_every_window_and_inspect_agrees() {
    let Some(fs) = common::loop_fs("xfs") else { return };
    warm_reaches_every_window(fs.path(), "xfs");
}

#[test]
fn xfs_run_file_strategy_is_huge() {
    let Some(fs) = common::loop_fs("xfs") else { return };
    run_file_strategy_is_huge(fs.path());
}

/// As on a kernel without page-table reclaim (before 6.14), where xfs is
/// the filesystem with large folios (since 5.18).
#[test]
fn xfs_run_file_strategy_without_page_table_reclaim() {
    let Some(fs) = common::loop_fs("xfs") else { return };
    run_file_strategy_is_huge_with(fs.path(), Some("no-pt-reclaim"));
}

// ---------------------------------------------------------------------------
// btrfs: whatever this kernel's btrfs does, hugetext must say it right.

#[test]
fn btrfs_doctor_warm_and_run_say_what_the_kernel_does() {
    let Some(fs) = common::loop_fs("btrfs") else { return };
    says_what_the_kernel_does(fs.path(), "btrfs");
}

/// On any filesystem: with large folios, warm reaches every window and the
/// file route is huge; without, doctor, warm and run say it is impossible
/// here and what to do, and `run` copies.
fn says_what_the_kernel_does(dir: &Path, fstype: &str) {
    if doctor_verdict(dir, fstype) {
        warm_reaches_every_window(dir, fstype);
        run_file_strategy_is_huge(dir);
        return;
    }
    let prog = common::copy_fixture(dir, "bfd", "nopie");
    common::read_small(&prog);
    let p = prog.to_str().unwrap();

    // Readahead gives no PMD folios, but MADV_COLLAPSE builds them (7.x
    // with 16 KiB pages: its MADV_HUGEPAGE readahead stops at 2 MiB, below
    // the 32 MiB PMD): warm and run collapse the text in place.
    if hugetext::pagecache::collapse_supported(dir).unwrap().is_available() {
        let w = warm_json(&prog, 0);
        assert_eq!(w["unit_windows"], w["eligible_windows"], "{w:#}");
        assert!(w["notes"].to_string().contains("MADV_COLLAPSE collapsed"), "{w:#}");
        let m = doctor_check(dir, "fs-large-folios")["meaning"].to_string();
        assert!(m.contains("MADV_COLLAPSE builds them"), "{m}");
        common::read_small(&prog);
        let r = common::run_waiting(&["-v"], &prog);
        let (file_pmd, anon, _) = r.huge_of(&prog);
        let err = r.stop();
        assert_eq!(anon, 0, "{err}");
        assert!(file_pmd >= common::text_window_bytes(&prog), "{err}");
        return;
    }

    // warm: exit 3, impossible here (the exit-status convention), route
    // none, and one note saying it is impossible and what to do.
    let w = warm_json(&prog, 3);
    assert_eq!(w["filesystem"], fstype, "{w:#}");
    assert_eq!(w["route"], "none", "{w:#}");
    assert_eq!(w["unit_windows"], 0);
    let eligible = w["eligible_windows"].as_u64().unwrap();
    assert!(eligible * common::pmd() >= 16 << 20, "{w:#}");
    assert_eq!(
        w["small"]["no_large_folios_kb"].as_u64().unwrap(),
        eligible * common::pmd_kb(),
        "{w:#}"
    );
    let impossible = |notes: &str| notes.contains(&format!("PMD folios are impossible on this filesystem ({fstype})"));
    assert!(impossible(&w["notes"].to_string()), "{w:#}");
    let out = exits(common::hugetext(&["warm", p]), 3, "warm");
    let human = common::text(&out.stdout);
    let note = human
        .lines()
        .find(|l| impossible(l))
        .unwrap_or_else(|| panic!("{human}"));
    assert!(
        note.contains("xfs") && note.contains("hugetext run"),
        "says what to do: {note}"
    );

    // The same verdict while a running process maps the text (the pages
    // cannot be evicted): not "wait until it exits" or --replace, which
    // would not help on this filesystem.
    let r = Running::fixture(&prog);
    // (btrfs's st_dev is not the device maps lines show; the pid is found anyway.)
    let pids = hugetext::warm::mapping_pids(&prog).unwrap();
    assert!(pids.iter().any(|p| p.pid == r.pid()), "{pids:?}");
    let w = warm_json(&prog, 3);
    assert_eq!(w["route"], "none", "{w:#}");
    assert!(impossible(&w["notes"].to_string()), "{w:#}");
    assert!(!w["notes"].to_string().contains("--replace"), "{w:#}");
    let out = exits(
        common::hugetext(&["warm", "--json", "--replace", p]),
        3,
        "warm --replace",
    );
    let w = &json(&out)["files"][0];
    assert_eq!(w["replaced"], false, "a copy would be just as small: {w:#}");
    assert!(impossible(&w["notes"].to_string()), "{w:#}");
    r.stop();

    // run --strategy auto falls back to the copy and says why.
    let r = common::run_waiting(&["-v"], &prog);
    let (file_pmd, anon, _) = r.huge_of(&prog);
    let err = r.stop();
    assert_eq!(file_pmd, 0, "{err}");
    assert!(anon >= 16 * MIB, "copy route: AnonHugePages {} KiB: {err}", anon >> 10);
    let want = common::mib(common::text_window_bytes(&prog));
    assert!(err.contains(&format!("copy {want}")), "expected copy {want}: {err}");
    let why = err
        .lines()
        .find(|l| l.contains("file route"))
        .unwrap_or_else(|| panic!("no word on the file route: {err}"));
    assert!(why.contains("no large folios") && why.contains(fstype), "{why}");
}

// ---------------------------------------------------------------------------
// ext4 from a fresh image: the control; must match the root ext4.

#[test]
fn ext4_image_matches_root_ext4() {
    let Some(fs) = common::loop_fs("ext4") else { return };
    let root = common::scratch();
    let on_image = doctor_verdict(fs.path(), "ext4");
    if hugetext::fsutil::fs_name_at(root.path()).unwrap() == "ext4" {
        let on_root = doctor_verdict(root.path(), "ext4");
        assert_eq!(on_image, on_root, "a fresh ext4 behaves like the root ext4");
    }
    // What the docs say: ext4 has large folios from Linux 6.16 on, up to
    // 2048 blocks: PMD-size ones only where the PMD is no larger (not with
    // 4 KiB blocks under a 16 KiB-page arm64 kernel's 32 MiB PMD).
    let block = {
        let c = std::ffi::CString::new(fs.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statfs is plain data; all-zero is a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a statfs buffer of ours.
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
        st.f_bsize as u64
    };
    let capped = hugetext::doctor::ext4_folio_cap_below("ext4", block, kernel::pmd_size()).is_some();
    assert_eq!(
        on_image,
        kernel::KernelVersion::current().at_least(6, 16) && !capped,
        "ext4 large folios ({block}-byte blocks)"
    );
    says_what_the_kernel_does(fs.path(), "ext4");
}

// ---------------------------------------------------------------------------
// The filesystem the tests run on (in the kernel matrix: the disk under test).

#[test]
fn scratch_filesystem_says_what_the_kernel_does() {
    let dir = common::scratch();
    let fstype = hugetext::fsutil::fs_name_at(dir.path()).unwrap();
    says_what_the_kernel_does(dir.path(), &fstype);
}

// ---------------------------------------------------------------------------
// tmpfs (no image needed): with shmem_enabled=never, never PMD folios.

#[test]
fn tmpfs_doctor_agrees_with_the_experiment() {
    let shm = Path::new("/dev/shm");
    if !File::open(shm).is_ok_and(|d| hugetext::fsutil::fs_name(&d) == "tmpfs") {
        common::skip_line("skipped: /dev/shm is not tmpfs here");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let large = doctor_verdict(dir.path(), "tmpfs");
    if kernel::shmem_mode() == Some(Ok(hugetext_abi::thp::ShmemMode::Never)) {
        assert!(!large, "shmem_enabled=never gives tmpfs no PMD folios");
    }
}
