//! What the `explain` test binaries share: the C helper that maps a file as
//! text, `explain --json` and the mapping of one file in it.
#![allow(dead_code)]

use hugetext_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The C test programs (tests/fixtures/mkctests.sh).
pub fn cprogs() -> &'static Path {
    common::cprogs()
}

/// Start `maptext FILE OPTS` (crates/hugetext-cli/tests/c/maptext.c): maps
/// `file` read+exec at a PMD-aligned address congruent with offset 0,
/// touches every page and waits; a `hugepage` line on its stdin switches the
/// mapping to MADV_HUGEPAGE. Options: `prctl` (PR_SET_THP_DISABLE), `advised`
/// (PR_THP_DISABLE_EXCEPT_ADVISED), `nohuge` (MADV_NOHUGEPAGE), `first=N`
/// (touch only the first N PMD windows: the others stay unmapped).
pub fn helper(file: &Path, opts: &[&str]) -> common::Running {
    let mut cmd = Command::new(cprogs().join("maptext"));
    cmd.arg(file).args(opts);
    common::Running::start(cmd)
}

/// `hugetext explain --json --pid PID`, which must succeed.
pub fn explain_json(pid: i32) -> Value {
    let out = common::hugetext(&["explain", "--json", "--pid", &pid.to_string()]);
    assert!(
        out.status.success(),
        "explain failed: {}\n{}",
        common::text(&out.stderr),
        common::text(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The mappings of `file` in process `pid`'s explanation.
pub fn mappings(pid: i32, file: &Path) -> Vec<Value> {
    let v = explain_json(pid);
    let want = s(file);
    let p = &v["processes"][0];
    assert_eq!(p["pid"], pid);
    assert!(
        p["summary"].as_str().unwrap().starts_with(&format!("pid {pid} (")),
        "{p:#}"
    );
    let ms: Vec<Value> = p["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["path"] == want.as_str())
        .cloned()
        .collect();
    assert!(!ms.is_empty(), "{want} not in {v:#}");
    ms
}

/// The mapping of `file` with the most whole windows in process `pid`'s explanation.
pub fn mapping(pid: i32, file: &Path) -> Value {
    mappings(pid, file)
        .into_iter()
        .max_by_key(|m| m["whole_windows"].as_u64().unwrap())
        .unwrap()
}

/// True when the loader happened to place the mapping PMD-congruent with
/// its file offset (a 4 KiB-aligned base does so 1 time in 512 on x86-64): a
/// skewed layout then does not show.
pub fn landed_congruent(m: &Value) -> bool {
    let yes = (start(m) - m["offset"].as_u64().unwrap()) % common::unit() == 0;
    if yes {
        common::skip_line("skipped: the loader placed the text PMD-congruent by chance");
    }
    yes
}

/// Sizes of the scratch files, in MiB: `n` windows of the unit of huge text.
pub use common::unit_windows_mib as windows_mib;

pub fn start(m: &Value) -> u64 {
    u64::from_str_radix(m["start"].as_str().unwrap(), 16).unwrap()
}

pub fn reason(m: &Value) -> &str {
    m["reason"].as_str().unwrap()
}

pub fn fix(m: &Value) -> &str {
    m["fix"].as_str().unwrap_or("")
}

pub fn evidence(m: &Value) -> &str {
    m["evidence"].as_str().unwrap()
}

pub fn s(p: &Path) -> String {
    p.canonicalize().unwrap().to_string_lossy().into_owned()
}

/// `ok`, and every whole window PMD-mapped.
pub fn assert_ok(m: &Value) {
    assert_eq!(reason(m), "ok", "{m:#}");
    let windows = m["whole_windows"].as_u64().unwrap();
    assert!(
        windows > 0 && m["unit_mapped_kb"].as_u64().unwrap() >= windows * common::unit_kb(),
        "{m:#}"
    );
}

pub fn hugetext_ok(args: &[&str]) {
    let out = common::hugetext(args);
    assert!(
        out.status.success(),
        "hugetext {args:?}: {}\n{}",
        common::text(&out.stderr),
        common::text(&out.stdout)
    );
}

/// A scratch file of `windows` whole PMD windows of RET instructions, in
/// PMD-size page-cache folios.
pub fn warmed_file(dir: &Path, windows: u64) -> PathBuf {
    let p = common::scratch_file(dir, "text.bin", windows_mib(windows));
    ensure_warm(&p);
    p
}

/// `hugetext warm FILE` until every window of it is one PMD-size page-cache
/// folio (3 tries): the precondition of a test about mapping warmed text.
/// On a busy machine a PMD-size allocation can fail, or memory pressure can
/// evict a folio between `warm` and the mapping.
pub fn ensure_warm(p: &Path) {
    for _ in 0..3 {
        hugetext_ok(&["warm", p.to_str().unwrap()]);
        let f = hugetext::folio::scan_file(p, None).unwrap();
        if f.unit_windows.len() as u64 == f.total_windows {
            return;
        }
    }
    panic!("{}: warm left windows in small folios three times", p.display());
}

/// Split the huge pages of process `pid` in `start..end` into base pages,
/// for real and from outside, and keep them split: per PMD window,
/// `process_madvise(MADV_COLD)` on the whole window (ages it: the PMD's
/// young bit, the folio's referenced flag), on one base page of it (the
/// kernel splits a PMD-mapped anonymous THP that the advice covers only in
/// part, `madvise_cold_or_pageout_pte_range()`; the PTEs it makes are old,
/// as the PMD was), then on the whole window again (ages what the split
/// left). khugepaged collapses only windows with a referenced page
/// (`SCAN_LACK_REFERENCED_PAGE`), so it leaves them split while nothing
/// runs that text. Without the ageing it put them back within one of its
/// passes: 8 windows a pass, every 10 s, whatever their size, so both 32
/// MiB windows of the copy on a 16 KiB-page arm64 kernel. Returns what the
/// kernel counted meanwhile ([`thp_events`]), for assertion messages.
pub fn split(pid: i32, start: u64, end: u64) -> String {
    let (unit, page) = (common::unit(), hugetext::kernel::page_size() as u64);
    let before = thp_events();
    // SAFETY: plain syscalls; the iovec points into the target process, which
    // the kernel reads, not this one.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        let cold = |at: u64, len: u64| {
            let iov = libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: len as usize,
            };
            let r = libc::syscall(
                libc::SYS_process_madvise,
                fd,
                &iov as *const libc::iovec,
                1,
                libc::MADV_COLD,
                0,
            );
            assert_eq!(r as u64, len, "process_madvise: {}", std::io::Error::last_os_error());
        };
        let mut w = start.next_multiple_of(unit);
        while w + unit <= end {
            cold(w, unit);
            cold(w + page, page);
            cold(w, unit);
            w += unit;
        }
        libc::close(fd);
    }
    let after = thp_events();
    let delta: Vec<String> = after
        .iter()
        .zip(&before)
        .filter(|(a, b)| a.1 != b.1)
        .map(|(a, b)| format!("{} +{}", a.0, a.1 - b.1))
        .collect();
    format!(
        "while splitting, /proc/vmstat: {}",
        if delta.is_empty() {
            "no THP events".into()
        } else {
            delta.join(", ")
        }
    )
}

/// The THP split and collapse counters of /proc/vmstat, and khugepaged's
/// `pages_collapsed`: what the kernel did to huge pages, named.
pub fn thp_events() -> Vec<(String, u64)> {
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    let mut v: Vec<(String, u64)> = vmstat
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| k.starts_with("thp_split") || k.starts_with("thp_collapse"))
        .filter_map(|(k, n)| Some((k.to_string(), n.trim().parse().ok()?)))
        .collect();
    let collapsed = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/khugepaged/pages_collapsed");
    if let Some(n) = collapsed.ok().and_then(|s| s.trim().parse().ok()) {
        v.push(("khugepaged_pages_collapsed".into(), n));
    }
    v
}

/// The largest anonymous copy `run` made of `file` in process `pid` (the
/// one holding the most whole windows).
pub fn largest_copy(pid: i32, file: &Path) -> Value {
    mappings(pid, file)
        .into_iter()
        .filter(|m| m["backing"] == "anon-copy")
        .max_by_key(|m| m["whole_windows"].as_u64().unwrap())
        .expect("run made no copy")
}

/// Whether the kernel collapses file text in small folios in place on the
/// filesystem of `dir` (MADV_COLLAPSE tried on a scratch file there, as
/// explain tries it).
pub fn collapses_in_place(dir: &Path) -> bool {
    hugetext::pagecache::collapse_supported(dir).unwrap().is_available()
}

/// Text read into small folios and mapped by a running process: explain
/// says cache-small-folios, with the fix that fits the kernel (collapse in
/// place while it runs, or warm once it exits). Where file text collapses in
/// place, khugepaged may get there first under THP `always` (7.x): then the
/// windows it has done are PMD-mapped or PMD folios. Returns false in that
/// case.
pub fn small_folios_unless_khugepaged(m: &Value, file: &Path, pid: i32) -> bool {
    let in_place = collapses_in_place(file.parent().unwrap());
    if in_place && reason(m) != "cache-small-folios" {
        assert!(
            matches!(reason(m), "ok" | "mapped-before-warm" | "not-faulted-yet"),
            "{m:#}"
        );
        return false;
    }
    assert_eq!(reason(m), "cache-small-folios", "{m:#}");
    let want = if in_place {
        format!(
            "hugetext warm {} (MADV_COLLAPSE collapses the small folios in place while pid {pid} (",
            s(file)
        )
    } else {
        format!("hugetext warm {} after pid {pid} (", s(file))
    };
    assert!(fix(m).starts_with(&want), "{m:#}");
    if in_place {
        // khugepaged may have collapsed some windows already.
        assert!(
            evidence(m).contains("khugepaged") || hugetext::kernel::thp_enabled().as_deref() != Some("always"),
            "{m:#}"
        );
    } else {
        assert_eq!(m["unit_mapped_kb"], 0, "{m:#}");
    }
    true
}
