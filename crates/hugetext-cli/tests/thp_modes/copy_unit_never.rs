//! `run`'s copy route where anonymous memory cannot get folios of the unit
//! of huge text, set and restored by the test (in the `thp_modes` binary, so
//! that nothing else of the suite runs meanwhile; see explain_thp_never.rs). The unit's switch: transparent_hugepage `enabled`
//! where the unit is the PMD; the 2 MiB mTHP size's own
//! `hugepages-2048kB/enabled` where it is the 2 MiB contiguous-PTE block
//! (arm64, 64 KiB pages), which the preload and `doctor` name with the
//! command that turns it on.

use hugetext_testkit as common;

const TOP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const SIZE_2M: &str = "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled";

/// Writes `never` to a THP switch; puts the previous word back when dropped.
struct Never {
    path: &'static str,
    previous: String,
}

impl Never {
    fn set(path: &'static str) -> Never {
        let text = std::fs::read_to_string(path).unwrap();
        let previous = text
            .split('[')
            .nth(1)
            .and_then(|r| r.split(']').next())
            .unwrap()
            .to_string();
        std::fs::write(path, "never").unwrap();
        Never { path, previous }
    }
}

impl Drop for Never {
    fn drop(&mut self) {
        std::fs::write(self.path, &self.previous).expect("restore the THP switch");
    }
}

#[test]
fn copy_route_says_how_to_get_folios_of_the_unit_when_they_are_off() {
    let _one = crate::one_at_a_time();
    if hugetext::kernel::thp_enabled().is_none() {
        common::skip_line("skipped: no THP on this kernel");
        return;
    }
    let contpte = common::contpte_unit();
    if contpte && !std::path::Path::new(SIZE_2M).exists() {
        common::skip_line("skipped: no 2 MiB anonymous THP size on this kernel (Linux 6.8+)");
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip_line("skipped: needs root to switch THP off");
        return;
    }
    let dir = common::scratch();
    let prog = common::copy_fixture(dir.path(), "lld", "pie");
    let _never = Never::set(if contpte { SIZE_2M } else { TOP });
    let out = common::output_without_perf_map(
        std::process::Command::new(common::bin())
            .args(["run", "-v", "--strategy", "copy", "--no-dlopen", "--"])
            .arg(&prog)
            .env("HUGETEXT_REPORT", "json"),
    );
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let err = common::text(&out.stderr);
    let want = if contpte {
        "copy route skipped: 2 MiB anonymous folios are off (/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled is `never`, or `inherit` with transparent_hugepage `never`); as root: echo madvise > /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"
    } else {
        "copy route skipped: transparent_hugepage is `never`, anonymous memory cannot be huge"
    };
    assert!(err.contains(want), "no `{want}` in: {err}");
    let rec = err
        .lines()
        .find_map(|l| l.strip_prefix(hugetext_abi::report::PREFIX))
        .expect("a record");
    let rec: serde_json::Value = serde_json::from_str(rec).unwrap();
    assert_eq!(rec["copy"], 0, "{rec}");
    assert_eq!(rec["unit"], common::unit(), "{rec}");
    assert_eq!(rec["contpte"], contpte as u64, "{rec}");
    if contpte {
        // doctor says the same, with the same command.
        let d = common::hugetext(&["doctor", "--json", "--path", dir.path().to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
        let f = v
            .as_array()
            .or_else(|| v["checks"].as_array())
            .and_then(|a| a.iter().find(|f| f["id"] == "copy-unit").cloned())
            .unwrap_or_else(|| panic!("no copy-unit finding: {v:#}"));
        assert_eq!(f["status"], "warn", "{f:#}");
        assert!(
            f["meaning"]
                .as_str()
                .unwrap()
                .contains("echo madvise > /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"),
            "{f:#}"
        );
    }
}
