//! `hugetext explain` with THP `enabled=never`, set and restored by the
//! test. It is in the `thp_modes` binary so that nothing else of the suite
//! runs while THP is `never`: `cargo test` runs test binaries one after
//! another (scripts/test.sh, the kernel matrix's guests), and the tests of
//! this binary take `one_at_a_time`. The previous mode is restored by a
//! guard's `Drop`, so also when an assertion fails.

use hugetext_testkit as common;

use crate::explain_support;
use explain_support::*;

const ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// Sets THP `enabled` to a mode; puts the previous one back when dropped.
struct ThpMode {
    previous: String,
}

impl ThpMode {
    fn set(mode: &str) -> ThpMode {
        let previous = hugetext::kernel::thp_enabled().expect("no THP on this kernel");
        std::fs::write(ENABLED, mode).unwrap();
        ThpMode { previous }
    }
}

impl Drop for ThpMode {
    fn drop(&mut self) {
        std::fs::write(ENABLED, &self.previous).expect("restore THP enabled");
    }
}

#[test]
fn thp_never_file_text_and_run_copies() {
    let _one = crate::one_at_a_time();
    if hugetext::kernel::thp_enabled().is_none() {
        common::skip_line("skipped: no THP on this kernel");
        return;
    }
    let dir = common::scratch();
    // Made before THP is off: a copy from `run` (in huge pages), a warmed file,
    // a file whose page cache holds small folios.
    let prog = common::copy_fixture(dir.path(), "lld", "pie");
    let r = common::run_waiting(&["--strategy", "copy"], &prog);
    let warm = warmed_file(dir.path(), 2);
    let cold = common::scratch_file(dir.path(), "cold.bin", windows_mib(2));
    common::read_small(&cold);

    let never = ThpMode::set("never");
    assert_eq!(explain_json(r.pid())["system"]["thp_enabled"], "never");

    // File text: `never` does not stop the kernel from PMD-mapping PMD-size
    // page-cache folios (do_set_pmd() looks at the process and the mapping).
    ensure_warm(&warm);
    let h = helper(&warm, &[]);
    assert_ok(&mapping(h.pid(), &warm));
    h.stop();
    // Small folios are small folios: warm, and warm works under `never` too.
    let h = helper(&cold, &[]);
    let m = mapping(h.pid(), &cold);
    assert_eq!(reason(&m), "cache-small-folios", "{m:#}");
    assert!(fix(&m).starts_with(&format!("hugetext warm {}", s(&cold))), "{m:#}");
    h.stop();
    ensure_warm(&cold);
    let h = helper(&cold, &[]);
    assert_ok(&mapping(h.pid(), &cold));
    h.stop();

    // The copy stays in the huge pages it got before.
    let copy = largest_copy(r.pid(), &prog);
    assert_ok(&copy);
    // Once in base pages (the kernel splits them), `never` is the reason.
    let end = u64::from_str_radix(copy["end"].as_str().unwrap(), 16).unwrap();
    split(r.pid(), start(&copy), end);
    let this = |r: &common::Running| {
        mappings(r.pid(), &prog)
            .into_iter()
            .find(|m| m["start"] == copy["start"])
            .unwrap()
    };
    let m = this(&r);
    assert_eq!(reason(&m), "thp-never", "{m:#}");
    assert!(evidence(&m).contains("[never]"), "{m:#}");
    assert_eq!(fix(&m), "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
    // While `never`, run leaves the text in place and says why.
    let r2 = common::run_waiting(&["--strategy", "copy", "-v"], &prog);
    assert!(
        mappings(r2.pid(), &prog).iter().all(|m| m["backing"] == "file"),
        "run copied under never"
    );
    common::remove_perf_map(r2.child.id());
    r2.stop();

    // The fix. The copy stays in base pages: the next reason is the copy itself.
    std::fs::write("/sys/kernel/mm/transparent_hugepage/enabled", "madvise").unwrap();
    let m = this(&r);
    assert_eq!(reason(&m), "copy-not-huge", "{m:#}");
    assert!(fix(&m).contains("hugetext run"), "{m:#}");
    common::remove_perf_map(r.child.id());
    r.stop();
    // Its fix: restart it with `hugetext run`.
    let r = common::run_waiting(&["--strategy", "copy"], &prog);
    let copy = largest_copy(r.pid(), &prog);
    assert_ok(&copy);
    common::remove_perf_map(r.child.id());
    r.stop();
    drop(never);
}
