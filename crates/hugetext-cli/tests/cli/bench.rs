//! `hugetext bench` against the real kernel: JSON shapes, the verified
//! memory state of every variant and A/B side, and bad input. Sizes are
//! small so the whole file runs in well under a minute; the real
//! measurements live in doc/bench.md.

use common::{json_of, keys};
use hugetext_testkit as common;

use serde_json::Value;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `bench ab` evicts and refills the page cache of every file its command
/// maps, libc included: two `ab` runs at once would evict each other's
/// sides between preparing and verifying them. The `ab` tests take turns.
fn ab_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// kB in folios of every size (a `folios_kb` object: size -> kB).
fn folios_total_kb(folios: &Value) -> u64 {
    folios.as_object().unwrap().values().map(|x| x.as_u64().unwrap()).sum()
}

/// Every ratio in `ratios` has a median inside its 95% interval, one ratio
/// per run, and a verdict; returns their names.
fn check_ratios(ratios: &Value, runs: usize) -> Vec<String> {
    let mut names = Vec::new();
    for (name, r) in ratios.as_object().unwrap() {
        let m = num(&r["median"]);
        let ci = r["ci95"].as_array().unwrap_or_else(|| panic!("{name}: {r}"));
        assert_eq!(ci.len(), 2, "{name}: {r}");
        let (lo, hi) = (num(&ci[0]), num(&ci[1]));
        assert!(m > 0.0 && lo <= m && m <= hi, "{name}: the CI contains the median: {r}");
        assert_eq!(r["runs"].as_array().unwrap().len(), runs, "{name}: {r}");
        assert!(
            ["faster", "slower", "unresolved"].contains(&r["verdict"].as_str().unwrap()),
            "{name}: {r}"
        );
        names.push(name.clone());
    }
    names.sort();
    names
}

#[test]
fn exec_json_shape_and_verified_states() {
    let dir = common::scratch();
    let d = dir.path().to_str().unwrap();
    let v = json_of(&common::hugetext(&[
        "bench", "exec", "--size", "32M", "--runs", "2", "--dir", d, "--json",
    ]));
    assert_eq!(v["size_bytes"], 32 << 20);
    // The JSON keys of before, plus `ratios` and `stopped`.
    assert_eq!(
        keys(&v),
        [
            "dir",
            "filesystem",
            "kernel",
            "notes",
            "page_kb",
            "pages",
            "random_calls",
            "random_passes",
            "ratios",
            "runs",
            "seed",
            "size_bytes",
            "stopped",
            "targets",
            "unit",
            "unit_kb",
            "variants"
        ]
    );
    let unit_kb = v["unit_kb"].as_u64().unwrap();
    assert_eq!(unit_kb * 1024, hugetext::kernel::unit_size() as u64);
    assert_eq!(
        v["page_kb"].as_u64().unwrap() * 1024,
        hugetext::kernel::page_size() as u64
    );
    let units = 32 * 1024 / unit_kb;
    // Folios of the unit are there (the test needs large-folios): warm
    // filled every window, and nothing else can go short.
    assert_eq!(v["notes"], serde_json::json!([]), "{v}");
    assert_eq!(keys(&v["variants"]), ["baseline", "huge", "warm"]);
    assert_eq!(
        keys(&v["targets"]),
        [
            "cold_huge_over_baseline",
            "random_huge_over_baseline",
            "random_warm_over_baseline",
            "warm_total_over_baseline_cold"
        ]
    );
    assert_eq!(v["runs"], 2);
    assert_eq!(v["stopped"], "runs");
    // Every ratio the table prints, paired run by run, with a CI that
    // contains its median.
    assert_eq!(
        check_ratios(&v["ratios"], 2),
        [
            "cold_huge_over_baseline",
            "cold_warm_over_baseline",
            "random_huge_over_baseline",
            "random_warm_over_baseline",
            "warm_total_over_baseline_cold"
        ]
    );
    // Two runs are too few for a verdict.
    assert_eq!(v["ratios"]["random_huge_over_baseline"]["verdict"], "unresolved");
    let khugepaged = hugetext::kernel::thp_enabled().as_deref() == Some("always")
        && hugetext::pagecache::collapse_supported(dir.path()).is_ok_and(|c| c.is_available());
    for name in ["baseline", "huge", "warm"] {
        let var = &v["variants"][name];
        let mut expect = vec!["cold_ms", "random_ms", "runs", "stats"];
        let mut expect_stats = vec!["cold_ms", "random_ms"];
        if name == "warm" {
            expect.push("warm_ms");
            expect_stats.extend(["warm_ms", "warm_plus_cold_ms"]);
        }
        assert_eq!(keys(var), expect, "{name}");
        assert_eq!(keys(&var["stats"]), expect_stats, "{name}");
        assert!(
            num(&var["cold_ms"]) > 0.0 && num(&var["random_ms"]) > 0.0,
            "{name}: {var}"
        );
        let runs = var["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "one record per run");
        for s in ["cold_ms", "random_ms"] {
            let st = &var["stats"][s];
            assert!(num(&st["min"]) <= num(&st["median"]) && num(&st["median"]) <= num(&st["max"]));
            assert_eq!(st["runs"].as_array().unwrap().len(), 2);
        }
        for r in runs {
            let mut run_keys = vec!["cold_ms", "position", "random_ms", "random_passes_ms", "run", "state"];
            if name == "warm" {
                run_keys.push("warm_ms");
            }
            assert_eq!(keys(r), run_keys, "{name}");
            assert_eq!(
                keys(&r["state"]),
                [
                    "cached_before_kb",
                    "cold_faults",
                    "cold_major_faults",
                    "folios_kb",
                    "pgpgin_kb",
                    // The old names, kept for one release.
                    "pmd_folio_pct",
                    "pmd_mapped_pct",
                    "unit_folio_pct",
                    "unit_mapped_pct"
                ]
            );
            let passes: Vec<f64> = r["random_passes_ms"].as_array().unwrap().iter().map(num).collect();
            assert_eq!(passes.len(), 3, "default: 3 passes of the random phase");
            assert_eq!(
                num(&r["random_ms"]),
                passes.iter().copied().fold(f64::INFINITY, f64::min)
            );
            let state = &r["state"];
            // Everything was cached after the sweep.
            let total = folios_total_kb(&state["folios_kb"]);
            assert_eq!(total, 32 * 1024, "{name}: {state}");
            let (pmd_folios, pmd_mapped) = (num(&state["unit_folio_pct"]), num(&state["unit_mapped_pct"]));
            let faults = state["cold_faults"].as_u64().unwrap();
            assert!(state["cold_major_faults"].as_u64().unwrap() <= faults, "{state}");
            if name != "warm" {
                // Evicted first (cached_before_kb is checked below for the
                // baseline, by the benchmark itself for huge), so the sweep
                // read the whole file from the disk; other readers on the
                // machine may add to the machine-wide counter.
                assert!(state["pgpgin_kb"].as_u64().unwrap() >= 32 * 1024, "{name}: {state}");
            }
            if name == "baseline" {
                // Exec faults read 4 KiB folios on x86 (doc/kernel-facts.md §1),
                // unless khugepaged collapses them meanwhile: under THP
                // `always` where file text collapses in place (7.x), it may.
                assert_eq!(state["cached_before_kb"], 0);
                if !khugepaged {
                    assert_eq!(pmd_folios, 0.0, "{state}");
                    assert_eq!(pmd_mapped, 0.0, "{state}");
                    // Small mappings: more than one fault per unit (fault-around
                    // maps at most 64 KiB per fault; one page with 64 KiB pages).
                    assert!(faults > units, "{state}");
                }
            } else {
                assert_eq!(pmd_folios, 100.0, "{name}: {state}");
                assert_eq!(pmd_mapped, 100.0, "{name}: {state}");
                // PMD-mapped a unit at a time: a fault per PMD, a few more
                // where a fault raced the folio's read (a retried fault counts
                // twice). Contpte blocks are mapped by as many faults as the
                // kernel's fault path takes (what the 64 KiB table reports).
                if v["unit"] == "pmd" {
                    assert!(faults >= units / 2 && faults <= 2 * units + 4, "{name}: {state}");
                }
            }
        }
        // Variants rotate: each takes a different position in the 2 runs.
        let pos: Vec<u64> = runs.iter().map(|r| r["position"].as_u64().unwrap()).collect();
        assert_ne!(pos[0], pos[1], "{name}");
    }
    assert!(num(&v["variants"]["warm"]["warm_ms"]) > 0.0);
    assert!(v["variants"]["baseline"].get("warm_ms").is_none());
    assert!(num(&v["targets"]["random_huge_over_baseline"]) > 0.0);
    assert!(num(&v["targets"]["warm_total_over_baseline_cold"]) > 0.0);
    // The per-run ratio is the variants' runs divided, run by run.
    let runs_of = |name: &str, q: &str| -> Vec<f64> {
        v["variants"][name]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| num(&r[q]))
            .collect()
    };
    let (b, h) = (runs_of("baseline", "random_ms"), runs_of("huge", "random_ms"));
    let per_run: Vec<f64> = v["ratios"]["random_huge_over_baseline"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(num)
        .collect();
    for i in 0..2 {
        assert!((per_run[i] - h[i] / b[i]).abs() < 1e-9, "{per_run:?} {b:?} {h:?}");
    }
    // The stub files were removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn exec_tables_and_tmpfs_refusal() {
    let dir = common::scratch();
    let out = common::hugetext(&[
        "bench",
        "exec",
        "--size",
        "4M",
        "--runs",
        "5",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("| Phase") && text.contains("| Cold fault") && text.contains("| Random"),
        "{text}"
    );
    assert!(text.contains("| huge/base") && text.contains("| warm/base"), "{text}");
    // One verdict line per ratio, stating only what its interval supports.
    let verdicts: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("was faster: ") || l.contains("was slower: ") || l.contains("no difference resolved: "))
        .collect();
    assert_eq!(verdicts.len(), 5, "{text}");
    assert!(
        verdicts.iter().any(|l| l.starts_with("random calls, huge/baseline: ")),
        "{text}"
    );
    // Measured ratios only, no goals (the first line holds the scratch
    // path, which is under target/).
    let (head, rest) = text.split_once('\n').unwrap();
    assert!(!head.contains("seed"), "{head}");
    for word in ["target", "aim", "seed", "met"] {
        assert!(!rest.contains(word), "{word:?} in {text}");
    }

    if std::path::Path::new("/dev/shm").is_dir() {
        let out = common::hugetext(&["bench", "exec", "--size", "4M", "--dir", "/dev/shm"]);
        assert!(!out.status.success());
        let e = stderr(&out);
        assert!(
            e.starts_with("hugetext: error:") && e.contains("tmpfs") && e.contains("--dir"),
            "{e}"
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    }
    let out = common::hugetext(&["bench", "exec", "--size", "1M", "--dir", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("at least one PMD"), "{}", stderr(&out));
}

#[test]
fn exec_until_ci_stops_at_the_width_or_the_time_budget() {
    let dir = common::scratch();
    let d = dir.path().to_str().unwrap();
    // A width every interval meets: stops as soon as an interval counts (5 runs).
    let v = json_of(&common::hugetext(&[
        "bench",
        "exec",
        "--size",
        "4M",
        "--runs",
        "2",
        "--until-ci",
        "100",
        "--max-time",
        "5m",
        "--dir",
        d,
        "--json",
    ]));
    assert_eq!(v["stopped"], "ci", "{}", v["ratios"]);
    assert_eq!(v["runs"], 5);
    check_ratios(&v["ratios"], 5);
    // A width no interval meets: the time budget ends it.
    let out = common::hugetext(&[
        "bench",
        "exec",
        "--size",
        "4M",
        "--runs",
        "5",
        "--until-ci",
        "0.000001",
        "--max-time",
        "2s",
        "--dir",
        d,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("budget ran out"), "{text}");
    // --max-time only means something with --until-ci.
    let out = common::hugetext(&["bench", "exec", "--max-time", "5s", "--dir", d]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = common::hugetext(&["bench", "exec", "--until-ci", "0", "--size", "4M", "--dir", d]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("positive"), "{}", stderr(&out));
}

#[test]
fn mprotect_json_shape_and_states() {
    let v = json_of(&common::hugetext(&[
        "bench", "mprotect", "--size", "64M", "--loops", "2", "--runs", "2", "--json",
    ]));
    assert_eq!(
        keys(&v),
        [
            "cases",
            "kernel",
            "loops",
            "mthp_64k_enabled",
            "ratios",
            "runs",
            "size_bytes",
            "stopped",
            "sysfs_changed",
            "thp_enabled"
        ]
    );
    assert_eq!(keys(&v["cases"]), ["mthp-64k", "pmd-thp-pte-mapped", "small-4k"]);
    assert_eq!(
        keys(&v["cases"]["small-4k"]),
        ["description", "mprotect_seconds", "seconds", "state", "stats"]
    );
    assert_eq!(keys(&v["cases"]["small-4k"]["stats"]), ["mprotect_seconds", "seconds"]);
    let ratios = check_ratios(&v["ratios"], 2);
    assert!(
        ratios.contains(&"pmd_thp_pte_mapped_over_small_4k".to_string())
            && ratios.contains(&"pmd_thp_pte_mapped_over_small_4k_in_mprotect".to_string()),
        "{ratios:?}"
    );
    let pte = &v["cases"]["pmd-thp-pte-mapped"];
    assert!(num(&pte["seconds"]) > 0.0 && num(&pte["mprotect_seconds"]) > 0.0);
    // PMD THPs after touching, all PTE-mapped while looping, still 2 MiB folios.
    assert_eq!(pte["state"]["anon_huge_kb_after_touch"], 64 * 1024, "{pte}");
    assert_eq!(pte["state"]["anon_huge_kb_during"], 0, "{pte}");
    assert_eq!(pte["state"]["folios_kb"]["2048"], 64 * 1024, "{pte}");
    assert_eq!(pte["state"]["verified"], true);
    let small = &v["cases"]["small-4k"];
    assert!(num(&small["seconds"]) > 0.0);
    assert_eq!(small["state"]["folios_kb"]["4"], 64 * 1024, "{small}");
    let mthp = &v["cases"]["mthp-64k"];
    let enabled =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled").unwrap_or_default();
    if enabled.contains("[never]") {
        assert!(mthp["seconds"].is_null(), "{mthp}");
        assert_eq!(ratios.len(), 2, "no mTHP ratio without the case: {ratios:?}");
        let why = mthp["not_available"].as_str().unwrap();
        assert!(
            why.contains("hugepages-64kB/enabled=never") && why.contains("echo madvise >"),
            "{why}"
        );
    } else {
        assert!(num(&mthp["seconds"]) > 0.0, "{mthp}");
        assert_eq!(mthp["state"]["verified"], true, "{mthp}");
        assert!(ratios.contains(&"mthp_64k_over_small_4k".to_string()), "{ratios:?}");
    }
    assert_eq!(v["sysfs_changed"], false);
}

/// The reported regression's small-page ranges: six cases (anonymous and
/// file, 400 KiB, 1 MiB, 4 MiB), every call timed, on verified 4 KiB pages,
/// and with --markers the counter's ids (the markers are no-ops here).
#[test]
fn mprotect_ranges_json_shape_and_states() {
    let dir = common::scratch();
    let d = dir.path().to_str().unwrap();
    let v = json_of(&common::hugetext(&[
        "bench",
        "mprotect",
        "--ranges",
        "--calls",
        "20",
        "--markers",
        "--dir",
        d,
        "--json",
    ]));
    assert_eq!(keys(&v), ["cases", "filesystem", "kernel", "markers", "thp_enabled"]);
    assert_eq!(v["markers"], true);
    let cases = v["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["anon-400k", "anon-1m", "anon-4m", "file-400k", "file-1m", "file-4m"]
    );
    let mut ids = std::collections::BTreeSet::new();
    for c in cases {
        assert_eq!(c["calls"], 20, "{c}");
        for way in ["to_read_only", "to_read_write"] {
            assert!(num(&c[way]["median_us"]) > 0.0 && num(&c[way]["min_us"]) > 0.0, "{c}");
            assert!(ids.insert(c["marker_ids"][way].as_u64().unwrap()), "ids repeat: {c}");
        }
        // Every page of the range mapped, in 4 KiB folios (root reads PFNs).
        assert_eq!(
            folios_total_kb(&c["folios_kb"]),
            c["bytes"].as_u64().unwrap() / 1024,
            "{c}"
        );
        assert_eq!(c["verified"], true, "{c}");
    }
    // Without --markers: no ids.
    let v = json_of(&common::hugetext(&[
        "bench", "mprotect", "--ranges", "--calls", "2", "--dir", d, "--json",
    ]));
    assert_eq!(v["markers"], false);
    assert!(v["cases"][0].get("marker_ids").is_none(), "{v}");
    // --calls 0 is refused with one line.
    let out = common::hugetext(&["bench", "mprotect", "--ranges", "--calls", "0", "--dir", d]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--calls must be at least 1"), "{}", stderr(&out));
}

#[test]
fn readahead_json_shape() {
    let dir = common::scratch();
    let v = json_of(&common::hugetext(&[
        "bench",
        "readahead",
        "--threads",
        "2",
        "--size",
        "8M",
        "--runs",
        "2",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["threads"], 2);
    assert!(v["kernel"].as_str().unwrap().contains('.'));
    assert_eq!(
        keys(&v),
        [
            "chunk_bytes",
            "configs",
            "dir",
            "filesystem",
            "kernel",
            "ratios",
            "read_ahead_kb",
            "runs",
            "shared_over_distinct",
            "size_per_thread_bytes",
            "stopped",
            "threads"
        ]
    );
    assert_eq!(keys(&v["configs"]), ["distinct-files", "shared-file"]);
    assert_eq!(check_ratios(&v["ratios"], 2), ["shared_over_distinct"]);
    for cfg in ["distinct-files", "shared-file"] {
        let c = &v["configs"][cfg];
        assert!(num(&c["mb_per_s"]) > 0.0, "{c}");
        assert_eq!(keys(c), ["folios_kb", "mb_per_s", "median_ms", "stats"]);
        // All data ended up in the page cache.
        let total = folios_total_kb(&c["folios_kb"]);
        assert_eq!(total, 16 * 1024, "{cfg}: {c}");
    }
    assert!(num(&v["shared_over_distinct"]) > 0.0);
}

#[test]
fn ab_json_shape_verified_sides_and_plot() {
    let _turn = ab_turn();
    // A non-PIE GNU ld program with ~20 MiB of text: congruent, 9 windows.
    let exe = common::fixture("bfd", "nopie");
    let dir = common::scratch();
    let svg = dir.path().join("ab.svg");
    // Under umask 022 the plot is 0644 like any new file (it was 0600).
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["bench", "ab", "--runs", "2", "--json", "--plot"])
        .arg(&svg)
        .arg("--")
        .arg(&exe);
    // SAFETY: umask is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::umask(0o022);
            Ok(())
        });
    }
    let v = json_of(&cmd.output().unwrap());
    for side in ["small", "huge"] {
        assert!(num(&v[side]["median_s"]) > 0.0, "{v}");
        assert_eq!(v[side]["runs_s"].as_array().unwrap().len(), 2);
    }
    let ratio = num(&v["ratio"]);
    assert!((ratio - num(&v["huge"]["median_s"]) / num(&v["small"]["median_s"])).abs() < 1e-9);
    let ci = v["ci95"].as_array().unwrap();
    assert_eq!(ci.len(), 2);
    assert!(num(&ci[0]) <= ratio && ratio <= num(&ci[1]), "{ci:?} {ratio}");
    // The fixture itself was found, with its text, and is PMD-mappable.
    let files = v["files"].as_array().unwrap();
    let me = files
        .iter()
        .find(|f| f["path"] == exe.to_str().unwrap())
        .unwrap_or_else(|| panic!("{files:?}"));
    assert_eq!(me["source"], "maps");
    assert_eq!(me["congruent"], true);
    let windows = me["unit_windows"].as_u64().unwrap();
    assert!(windows >= 8, "{me}");
    assert_eq!(me["mappable_windows"], windows, "{me}");
    // Both sides manage what `hugetext warm` warms: the read-only segments,
    // which include the text.
    let managed = me["managed_ranges"].as_array().unwrap();
    let text = me["text_ranges"].as_array().unwrap();
    assert!(
        text.iter().all(|t| managed
            .iter()
            .any(|m| m[0].as_u64() <= t[0].as_u64() && t[1].as_u64() <= m[1].as_u64())),
        "{me}"
    );
    assert!(
        files.iter().any(|f| f["path"].as_str().unwrap().contains("libc.so")),
        "libraries are managed too"
    );
    // Every run's state was verified: small has no text in PMD folios,
    // huge has every whole window of the fixture in one.
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2);
    for p in pairs {
        assert!(p["order"] == "small,huge" || p["order"] == "huge,small");
        let (s, h) = (&p["small"]["state"], &p["huge"]["state"]);
        assert_eq!(s["unit_folio_kb"], 0, "{s}");
        // Fully cached, give or take one base page: under the full suite
        // one 4 KiB page of the text was once found uncached at the check
        // (22008 of 22012 kB), which no side's timing notices.
        let (cached, text) = (s["cached_kb"].as_u64().unwrap(), s["text_kb"].as_u64().unwrap());
        assert!(
            cached <= text && cached + common::page() / 1024 >= text,
            "small side fully cached: {s}"
        );
        assert!(h["unit_windows"].as_u64().unwrap() >= windows, "{h}");
        assert!(num(&h["text_unit_pct"]) > 80.0, "{h}");
        assert_eq!(p["small"]["side"], "small");
    }
    // iTLB: a count or a reason, never silence.
    if v["itlb"]["supported"] == false {
        assert!(v["itlb"]["reason"].as_str().unwrap().contains("not"));
        assert!(v["small"]["itlb_misses"].is_null());
    } else {
        assert!(v["small"]["itlb_misses"].is_number());
    }
    assert!(v["failure"].is_null());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&svg).unwrap().permissions().mode() & 0o777, 0o644);
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("small folios") && plot.contains("PMD folios"));
}

#[test]
fn ab_hot_is_a_third_side_with_only_the_hot_windows_in_pmd_folios() {
    let _turn = ab_turn();
    // The hotcold fixture: 100 MiB of text, hot path 8 MiB (4 windows).
    let exe = common::hotcold();
    let dir = common::scratch();
    let path = exe.to_str().unwrap();
    let pf = common::hotcold_profile(dir.path());
    let out = common::hugetext(&[
        "bench",
        "ab",
        "--runs",
        "2",
        "--json",
        "--hot",
        pf.to_str().unwrap(),
        "--",
        path,
        "1000",
    ]);
    let v = json_of(&out);
    let hot = &v["hot"];
    assert!(num(&hot["side"]["median_s"]) > 0.0, "{v}");
    assert_eq!(hot["side"]["runs_s"].as_array().unwrap().len(), 2);
    let ci = hot["ci95"].as_array().unwrap();
    assert!(
        num(&ci[0]) <= num(&hot["ratio"]) && num(&hot["ratio"]) <= num(&ci[1]),
        "{hot}"
    );
    for p in v["pairs"].as_array().unwrap() {
        assert_eq!(p["order"].as_str().unwrap().split(',').count(), 3, "{p}");
        let st = &p["hot"]["state"];
        assert_eq!(st["unit_windows"], 4, "only the hot windows are in PMD folios: {st}");
        assert!(p["huge"]["state"]["unit_windows"].as_u64().unwrap() >= 49, "{p}");
        assert_eq!(p["small"]["state"]["unit_folio_kb"], 0, "{p}");
    }
}

#[test]
fn ab_tables_for_a_tiny_command() {
    let _turn = ab_turn();
    let out = common::hugetext(&["bench", "ab", "--runs", "1", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("| Side") && text.contains("| small") && text.contains("| huge"),
        "{text}"
    );
    assert!(text.contains("huge/small wall time ="), "{text}");
    assert!(text.contains("no managed file has a whole"), "{text}");
}

#[test]
fn ab_bad_input() {
    // No command.
    let out = common::hugetext(&["bench", "ab", "--runs", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no command given"), "{}", stderr(&out));
    // Not found / not executable, as a shell says it.
    let out = common::hugetext(&["bench", "ab", "--", "no-such-command-for-hugetext"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    assert!(stderr(&out).contains("not found"));
    let out = common::hugetext(&["bench", "ab", "--", "/etc/passwd"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
}

#[test]
fn ab_failing_command_reports_its_status() {
    let _turn = ab_turn();
    // Fails in the warm-up run: its exit status and stderr are passed on.
    let out = common::hugetext(&[
        "bench",
        "ab",
        "--runs",
        "2",
        "--json",
        "--",
        "sh",
        "-c",
        "echo boom >&2; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("status 3") && e.contains("warm-up") && e.contains("boom"),
        "{e}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["failure"]["exit_status"], 3);
    assert_eq!(v["failure"]["run"], "warm-up");

    // Succeeds in the warm-up run, then fails in the first timed run.
    let dir = common::scratch();
    let flag = dir.path().join("ran");
    let script = format!("test -e '{}' && exit 4; touch '{}'", flag.display(), flag.display());
    let out = common::hugetext(&["bench", "ab", "--runs", "2", "--json", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["failure"]["exit_status"], 4);
    assert!(v["failure"]["run"].as_str().unwrap().starts_with("pair 1,"), "{v}");
    assert!(v["pairs"].as_array().unwrap().is_empty());

    // Killed by a signal: 128 + signal.
    let out = common::hugetext(&["bench", "ab", "--runs", "1", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert!(stderr(&out).contains("signal 9"));
}

#[test]
fn ab_says_when_another_process_keeps_text_mapped() {
    let _turn = ab_turn();
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    // (Not the fixture the other ab test uses: tests run in parallel.)
    let exe = common::fixture("lld", "nopie");
    // Another process of the same program maps its text for the whole run:
    // those pages cannot be evicted, so neither side is clean.
    let mut other = Command::new(&exe)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(other.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().trim() == "ready"),
        "the fixture never said ready"
    );
    let out = common::hugetext(&["bench", "ab", "--runs", "1", "--json", "--", exe.to_str().unwrap()]);
    drop(other.stdin.take());
    other.wait().unwrap();
    let v = json_of(&out);
    let p = &v["pairs"][0];
    assert!(p["small"]["state"]["mapped_by_others_kb"].as_u64().unwrap() > 0, "{p}");
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("mapped by other processes")),
        "{notes:?}"
    );
}

/// `--size 1T` needs 3 TiB of stub files: refused in one line before
/// anything is written (it started writing them).
#[test]
fn exec_size_that_does_not_fit_is_refused_before_writing() {
    let dir = common::scratch();
    let before = common::tree_state(dir.path());
    let out = common::hugetext(&["bench", "exec", "--size", "1T", "--dir", dir.path().to_str().unwrap()]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains("--size needs") && e.contains("free"), "{e}");
    assert_eq!(common::tree_state(dir.path()), before, "something was written");
}

/// The `.hugetext-bench-*` directories under `dir`.
fn bench_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".hugetext-bench-"))
        .collect()
}

/// SIGINT, SIGTERM or SIGHUP while `bench exec` runs: its scratch files are
/// removed, and the signal still ends it (they were left behind).
#[test]
fn exec_stopped_by_a_signal_leaves_no_scratch_files() {
    use std::os::unix::process::ExitStatusExt;
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let dir = common::scratch();
        let mut child = std::process::Command::new(common::bin())
            .args(["bench", "exec", "--size", "64M", "--runs", "100", "--dir"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Mid-run: once the stub files are being written.
        let start = std::time::Instant::now();
        while !bench_dirs(dir.path())
            .iter()
            .any(|d| std::fs::read_dir(d).unwrap().next().is_some())
        {
            assert!(start.elapsed().as_secs() < 60, "no stub file appeared");
            assert!(child.try_wait().unwrap().is_none(), "bench exec ended early");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.signal(), Some(sig), "{}", stderr(&out));
        assert_eq!(bench_dirs(dir.path()), Vec::<std::path::PathBuf>::new(), "signal {sig}");
    }
}

/// Windows of `f` each in one PMD folio.
fn pmd_windows_of(f: &std::path::Path) -> Vec<u64> {
    hugetext::folio::scan_file(f, None).unwrap().unit_windows
}

/// After `hugetext warm f`, `bench ab -- ./f` leaves f warm (it left it all
/// in 4 KiB folios), and says so; a file that was not warm is not left
/// warm by a last huge run.
#[test]
fn ab_puts_files_back_in_the_folio_state_found() {
    let _turn = ab_turn();
    let dir = common::scratch();
    if !common::fs_gives_pmd_folios(dir.path()) {
        common::skip_line("skipped: the scratch filesystem gives no PMD page-cache folios");
        return;
    }
    let exe = common::copy_fixture(dir.path(), "bfd", "nopie");
    let warm = common::hugetext(&["warm", exe.to_str().unwrap()]);
    assert!(warm.status.success(), "{}", stderr(&warm));
    let warmed = pmd_windows_of(&exe);
    assert!(warmed.len() >= 8, "warm gave {warmed:?}");
    let v = json_of(&common::hugetext(&[
        "bench",
        "ab",
        "--runs",
        "2",
        "--json",
        "--",
        exe.to_str().unwrap(),
    ]));
    assert_eq!(pmd_windows_of(&exe), warmed, "the warmed file was not left warm");
    let r = &v["restored"];
    assert!(r["unit_windows_found"].as_u64().unwrap() >= warmed.len() as u64, "{r}");
    assert_eq!(r["unit_windows_restored"], r["unit_windows_found"], "{r}");
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("back in the folio state found")),
        "{notes:?}"
    );

    // Not warm before (evicted): still not warm after a pair whose last
    // run is the huge one.
    hugetext::pagecache::evict(&std::fs::File::open(&exe).unwrap(), 0..0).unwrap();
    let v = json_of(&common::hugetext(&[
        "bench",
        "ab",
        "--runs",
        "1",
        "--seed",
        "2",
        "--json",
        "--",
        exe.to_str().unwrap(),
    ]));
    assert_eq!(
        v["pairs"][0]["order"], "small,huge",
        "the seed no longer ends on the huge side"
    );
    assert_eq!(pmd_windows_of(&exe), Vec::<u64>::new());
}

/// `bench startup`'s variants of one round, and its numbers' shape: the
/// plumbing, not the numbers.
fn startup_variants(v: &Value) -> Vec<&str> {
    v["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect()
}

#[test]
fn startup_measures_plain_warm_and_each_route_with_its_breakdown() {
    let _turn = ab_turn();
    // ~20 MiB of congruent text (9 windows): the file route has windows to
    // fill and the copy route windows to copy.
    let exe = common::fixture("bfd", "nopie");
    let out = common::hugetext(&[
        "bench",
        "startup",
        "--runs",
        "2",
        "--routes",
        "file,copy",
        "--json",
        "--",
        exe.to_str().unwrap(),
    ]);
    let v = json_of(&out);
    assert_eq!(startup_variants(&v), ["plain", "warm", "run-file", "run-copy"], "{v}");
    assert_eq!(v["until"], "exit");
    for x in v["variants"].as_array().unwrap() {
        let name = x["name"].as_str().unwrap();
        assert_eq!(x["runs"].as_array().unwrap().len(), 2, "{name}: {x}");
        assert!(num(&x["median_ms"]) > 0.0, "{name}: {x}");
        if name == "plain" {
            assert!(x["ratio"].is_null() && x["added_ms"].is_null(), "{x}");
            // Every start of plain began from small folios.
            for r in x["runs"].as_array().unwrap() {
                assert_eq!(r["state"]["unit_folio_kb"], 0, "{r}");
                assert!(r["pass"].is_null(), "{r}");
            }
            continue;
        }
        let r = &x["ratio"];
        let (m, ci) = (num(&r["median"]), r["ci95"].as_array().unwrap());
        assert!(num(&ci[0]) <= m && m <= num(&ci[1]), "{name}: {r}");
        assert!(x["added_ms"].is_number() && x["cpu_ratio"]["median"].is_number(), "{x}");
    }
    let by = |n: &str| {
        v["variants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .unwrap()
            .clone()
    };
    assert!(
        num(&by("warm")["text_unit_pct"]) > 50.0,
        "warm starts from PMD folios: {v}"
    );
    // The preload's own record splits run's time: the file route made the
    // fixture's windows huge from small folios, the copy route copied them.
    let file = &by("run-file");
    assert_eq!(file["zero_copy"], true);
    let b = &file["breakdown"];
    assert!(num(&b["file_mib"]) >= 16.0, "{b}");
    assert!(
        num(&b["file_ms"]) > 0.0 && num(&b["pass_ms"]) >= num(&b["file_ms"]),
        "{b}"
    );
    assert!(
        num(&b["setup_ms"]) >= num(&b["maps_ms"]) && num(&b["maps_ms"]) > 0.0,
        "{b}"
    );
    let copy = &by("run-copy");
    assert_eq!(copy["zero_copy"], false);
    let b = &copy["breakdown"];
    assert!(num(&b["copy_mib"]) >= 16.0, "{b}");
    assert!(
        num(&b["copy_ms_per_mib"]) > 0.0 && num(&b["copy_over_floor"]) > 0.0,
        "{b}"
    );
    let floor = &v["copy_floor"];
    assert!(
        num(&floor["fresh_ms_per_mib"]) > 0.0 && num(&floor["warm_ms_per_mib"]) > 0.0,
        "{floor}"
    );
    assert!(floor["bytes"].as_u64().unwrap() >= 16 << 20, "{floor}");
    for r in copy["runs"].as_array().unwrap() {
        assert!(r["pass"]["passes"].as_u64().unwrap() >= 1, "{r}");
        // The floor is measured at every start that copied, for its bytes,
        // and the fill's CPU time is in the preload's record.
        assert!(r["pass"]["ns_copy_fill_cpu"].as_u64().unwrap() > 0, "{r}");
        // The huge pages' zeroing is timed apart from the fill, in the
        // preload and in the floor.
        assert!(r["pass"]["ns_copy_zero_cpu"].as_u64().unwrap() > 0, "{r}");
        assert!(num(&r["floor"]["zero_cpu_ms_per_mib"]) > 0.0, "{r}");
        let f = &r["floor"];
        assert!(f["bytes"].as_u64().unwrap() >= 16 << 20, "{r}");
        assert!(num(&f["cpu_ms_per_mib"]) > 0.0 && num(&f["ms_per_mib"]) > 0.0, "{r}");
    }
    // The fill against the floor in CPU time, paired start by start.
    let x = &b["fill_over_floor_cpu"];
    let (m, ci) = (num(&x["median"]), x["ci95"].as_array().unwrap());
    assert!(m > 0.0 && num(&ci[0]) <= m && m <= num(&ci[1]), "{b}");
    assert_eq!(x["runs"].as_array().unwrap().len(), 2, "{b}");
    assert!(
        num(&b["fill_cpu_ms_per_mib"]) > 0.0 && num(&b["floor_cpu_ms_per_mib"]) > 0.0,
        "{b}"
    );
    // Plain starts copy nothing: no floor measured for them.
    for r in by("plain")["runs"].as_array().unwrap() {
        assert!(r["floor"].is_null(), "{r}");
    }
}

#[test]
fn startup_routes_default_to_what_run_accepts_and_bad_input_is_one_line() {
    // Every route `run --strategy` lists is measured by default.
    let help = common::hugetext(&["run", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for route in ["auto", "file", "collapse", "copy"] {
        assert!(help.contains(route), "{help}");
    }
    let out = common::hugetext(&["bench", "startup", "--routes", "teleport", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("teleport") && e.contains("file") && e.lines().count() == 1,
        "{e}"
    );
    let out = common::hugetext(&["bench", "startup"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    let out = common::hugetext(&["bench", "startup", "--user", "no-such-user-here", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no-such-user-here"), "{}", stderr(&out));
    // A command that fails says so in one line, not a panic.
    let out = common::hugetext(&["bench", "startup", "--runs", "1", "--routes", "file", "--", "false"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.lines().count() <= 3 && !e.contains("panicked"), "{e}");
}

/// `bench startup --runs 2 --routes file READY... --json -- /bin/sh -c
/// SCRIPT` (a "server"), its JSON report, which says start-up ends at ready.
fn startup_of_a_server(ready: &[&str], script: &str) -> Value {
    let mut args = vec!["bench", "startup", "--runs", "2", "--routes", "file"];
    args.extend_from_slice(ready);
    args.extend_from_slice(&["--timeout", "60s", "--json", "--", "/bin/sh", "-c", script]);
    let v = json_of(&common::hugetext(&args));
    assert_eq!(v["until"], "ready");
    v
}

#[test]
fn startup_until_ready_times_a_server_to_its_probe_and_stops_it() {
    let _turn = ab_turn();
    let dir = common::scratch();
    let flag = dir.path().join("ready");
    let f = flag.to_str().unwrap();
    // A "server": ready once it has created the flag; SIGTERM removes it.
    let script = format!("trap 'rm -f {f}; exit 0' TERM; sleep 0.05; touch {f}; while :; do sleep 0.05; done");
    let probe = format!("test -e {f}");
    let t = std::time::Instant::now();
    let v = startup_of_a_server(&["--ready", &probe], &script);
    assert_eq!(startup_variants(&v), ["plain", "warm", "run-file"]);
    for x in v["variants"].as_array().unwrap() {
        // At least the server's own 50 ms before it is ready.
        assert!(num(&x["min_ms"]) >= 50.0, "{x}");
    }
    assert!(!flag.exists(), "every server was stopped (SIGTERM ran its trap)");
    assert!(t.elapsed() < std::time::Duration::from_secs(120), "{:?}", t.elapsed());
}

/// `--ready-file LOG TEXT`: a "server" that logs its readiness after 50 ms
/// into a log that already holds the line from an earlier start. The old
/// line does not count (each start-up takes at least the 50 ms), the new
/// one does (the bench does not wait for its timeout), and each server is
/// stopped.
#[test]
fn startup_until_a_file_holds_a_text_counts_only_what_the_start_wrote() {
    let _turn = ab_turn();
    let dir = common::scratch();
    let log = dir.path().join("err.log");
    std::fs::write(&log, "an earlier start: ready for connections\n").unwrap();
    let stopped = dir.path().join("stopped");
    let (l, s) = (log.to_str().unwrap(), stopped.to_str().unwrap());
    let script = format!(
        "trap 'echo >> {s}; exit 0' TERM; echo starting >> {l}; sleep 0.05; \
         echo 'ready for connections' >> {l}; while :; do sleep 0.05; done"
    );
    let v = startup_of_a_server(&["--ready-file", l, "ready for connections"], &script);
    assert_eq!(v["ready"], format!("{l} holds \"ready for connections\""));
    let variants = v["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 3, "{v}");
    for x in variants {
        assert!(num(&x["min_ms"]) >= 50.0, "the earlier start's line counted: {x}");
        assert!(num(&x["max_ms"]) < 30_000.0, "ready was missed: {x}");
    }
    // The discovery run and 2 rounds of 3 variants: every server stopped.
    let stops = std::fs::read_to_string(&stopped).unwrap_or_default().lines().count();
    assert!(stops >= 6, "{stops} servers stopped by SIGTERM");
}

/// scripts/kernel-bench.sh, the real-machine kit of the kernel series, end
/// to end in its CI form (--quick: lld's fixture, 3 runs) on a private copy
/// of the fixture: every route measured, a JSON document and a table, and
/// hardware counters either numbers or "unavailable: REASON", never a zero
/// standing in for a missing counter.
#[test]
fn kernel_bench_kit_quick_end_to_end() {
    let _turn = ab_turn();
    let dir = common::scratch();
    let fx = dir.path().join("fx/lld");
    std::fs::create_dir_all(&fx).unwrap();
    std::fs::copy(common::fixture("lld", "pie"), fx.join("pie")).unwrap();
    let out_dir = dir.path().join("out");
    let script = common::root().join("scripts/kernel-bench.sh");
    let run = |extra: &[&str]| {
        std::process::Command::new("bash")
            .arg(&script)
            .args(["--hugetext", common::bin().to_str().unwrap()])
            .args(["--fixtures", dir.path().join("fx").to_str().unwrap()])
            .args(["--out", out_dir.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--quick"]);
    assert!(out.status.success(), "failed: {}\n{}", out.status, stderr(&out));
    let v: Value = serde_json::from_slice(&std::fs::read(out_dir.join("kernel-bench.json")).unwrap()).unwrap();
    assert_eq!(v["quick"], true);
    assert_eq!(v["runs"], 3);
    assert!(["stock", "patched"].contains(&v["kind"].as_str().unwrap()), "{v}");
    let hw = v["hardware_counters"].as_str().unwrap();
    let results = v["results"].as_array().unwrap();
    let routes: Vec<&str> = results.iter().map(|r| r["route"].as_str().unwrap()).collect();
    assert_eq!(routes, ["plain", "madvise", "warm", "run"], "{v}");
    for r in results {
        assert_eq!(r["program"], "fixture-lld", "{r}");
        assert_eq!(r["ok"], true, "{r}");
        assert!(num(&r["wall_ms"]) >= 0.0 && num(&r["cold_ms"]) > 0.0, "{r}");
        // The evicted 20 MiB fixture is read back from disk on its cold start.
        assert!(num(&r["cold_read_kb"]) >= 16.0 * 1024.0, "{r}");
        for k in ["cycles", "itlb_misses", "itlb_walks"] {
            match &r[k] {
                Value::String(s) => assert!(s.starts_with("unavailable: "), "{k}: {r}"),
                Value::Number(n) => {
                    assert_eq!(hw, "available", "{k} counted while unavailable: {r}");
                    assert!(n.as_u64().unwrap() > 0, "{k} zero: {r}");
                }
                other => panic!("{k}: {other}"),
            }
        }
        assert!(
            r["text_pmd_kb"].is_u64(),
            "the fixture waits, so its text is read: {r}\n{}",
            stderr(&out)
        );
    }
    let table = std::fs::read_to_string(out_dir.join("kernel-bench.md")).unwrap();
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| fixture-lld |")).count(),
        4,
        "{table}"
    );
    // Bad input: one line, status 2.
    let out = run(&["--runs", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("--runs"), "{}", stderr(&out));
}
