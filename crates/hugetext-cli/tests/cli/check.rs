//! `hugetext check` on the real fixtures and on every ELF file of the
//! machine's /usr/bin and /usr/lib.

use hugetext_testkit as common;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;

const MIB: u64 = 1 << 20;

fn check_json(files: &[&Path]) -> (i32, Vec<Value>, String) {
    let mut args = vec!["check".to_string(), "--json".to_string()];
    args.extend(files.iter().map(|p| p.to_str().unwrap().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = common::hugetext(&args);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (
        out.status.code().unwrap_or(-1),
        v.as_array().unwrap().clone(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn one(path: &Path) -> Value {
    let (code, v, err) = check_json(&[path]);
    assert_eq!(code, 0, "{err}");
    v.into_iter().next().unwrap()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn fixtures_report_what_align_can_do() {
    for linker in ["bfd", "lld", "mold"] {
        for name in ["pie", "nopie", "libbig.so"] {
            let r = one(&common::fixture(linker, name));
            let text = r["segments"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["executable"] == true && u(s, "whole_windows") > 0)
                .unwrap();
            // ~20 MiB of text: 9 whole windows (18 MiB) whatever the layout.
            assert_eq!(u(text, "whole_windows"), 9, "{linker}/{name}");
            assert_eq!(u(&r, "unit_mappable_bytes_after_align"), 18 * MIB, "{linker}/{name}");
            let skew = u(text, "skew");
            if linker == "bfd" {
                assert_eq!(skew, 0, "GNU ld text is congruent");
            } else {
                assert_eq!(skew, 0x1000, "{linker} text is skewed by one page");
            }
            let now = u(&r, "unit_mappable_bytes");
            if linker == "bfd" && name == "nopie" {
                assert_eq!(now, 18 * MIB);
                assert_eq!(r["verdict"], "pmd-mappable");
                assert_eq!(r["reason_codes"], serde_json::json!(["already-pmd-mappable"]));
                assert_eq!(r["base"], "fixed");
            } else {
                assert_eq!(now, 0, "{linker}/{name}");
                assert_eq!(r["verdict"], "improvable");
                assert!(!r["reasons"].as_array().unwrap().is_empty());
                // One stable code per reason, the padding among them.
                let codes = r["reason_codes"].as_array().unwrap();
                assert_eq!(codes.len(), r["reasons"].as_array().unwrap().len());
                assert!(
                    codes.iter().any(|c| c == "align-pads" || c == "align-raises-p-align"),
                    "{codes:?}"
                );
            }
        }
        let small = one(&common::fixture(linker, "small"));
        assert_eq!(small["verdict"], "not-improvable");
        assert_eq!(small["reason_codes"][0], "no-whole-window");
        assert_eq!(u(&small, "unit_mappable_bytes_after_align"), 0);
        assert!(small["reasons"][0]
            .as_str()
            .unwrap()
            .contains(&format!("whole {} window", hugetext::units::human(common::pmd()))));
    }
    let pie = one(&common::fixture("bfd", "pie"));
    assert_eq!(pie["kind"], "pie");
    assert_eq!(pie["base"], "not-aligned");
    assert_eq!(one(&common::fixture("bfd", "libbig.so"))["kind"], "shared-library");
}

#[test]
fn human_output_and_errors() {
    let out = common::hugetext(&["check", common::fixture("lld", "pie").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verdict: improvable"), "{text}");
    assert!(text.contains("0x1000"), "{text}");

    let dir = common::scratch();
    let junk = dir.path().join("junk");
    fs::write(&junk, b"#!/bin/sh\necho hi\n").unwrap();
    let pie = common::fixture("mold", "pie");
    let out = common::hugetext(&["check", junk.to_str().unwrap(), pie.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "one bad file among good ones exits 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not an ELF file"), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("verdict"),
        "the good file is still reported"
    );
}

fn is_elf(p: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(p).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"\x7fELF"
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            walk(&e.path(), out);
        } else if ft.is_file() && is_elf(&e.path()) {
            out.push(e.path());
        }
    }
}

/// Every ELF file in /usr/bin and /usr/lib: no panic, no crash, every file
/// either reported (with reasons when it cannot be PMD-mapped) or refused
/// with a one-line explanation.
#[test]
fn sweep_usr_bin_and_usr_lib() {
    let t0 = Instant::now();
    let mut files = Vec::new();
    walk(Path::new("/usr/bin"), &mut files);
    walk(Path::new("/usr/lib"), &mut files);
    let found = t0.elapsed();
    assert!(files.len() > 100, "only {} ELF files found", files.len());
    let t1 = Instant::now();
    let (mut reports, mut errors, mut improvable, mut mappable) = (0, 0, 0, 0);
    for chunk in files.chunks(400) {
        let refs: Vec<&Path> = chunk.iter().map(PathBuf::as_path).collect();
        let (code, entries, err) = check_json(&refs);
        assert!(code == 0 || code == 1, "check crashed (exit {code}): {err}");
        assert!(!err.contains("internal error") && !err.contains("panicked"), "{err}");
        assert_eq!(entries.len(), chunk.len());
        for e in &entries {
            if let Some(msg) = e.get("error") {
                errors += 1;
                let msg = msg.as_str().unwrap();
                assert!(!msg.is_empty() && !msg.contains('\n'), "{e}");
                continue;
            }
            reports += 1;
            let verdict = e["verdict"].as_str().unwrap();
            assert!(
                !e["reasons"].as_array().unwrap().is_empty() || verdict == "improvable",
                "no reason given: {e}"
            );
            assert!(
                u(e, "unit_mappable_bytes") <= u(e, "unit_mappable_bytes_after_align"),
                "{e}"
            );
            match verdict {
                "improvable" => improvable += 1,
                "pmd-mappable" => mappable += 1,
                _ => {}
            }
        }
    }
    eprintln!(
        "sweep: {} ELF files ({:.2?} to find), checked in {:.2?}: {reports} reports ({mappable} PMD-mappable, {improvable} improvable), {errors} refused with a reason",
        files.len(),
        found,
        t1.elapsed()
    );
}

/// A copy of a fixture whose text PT_LOAD is duplicated (into the
/// GNU_STACK slot of its program header table) counts the text once: it
/// counted 36 MiB "after align" for 18 MiB of text.
#[test]
fn a_duplicated_text_segment_is_counted_once() {
    let dir = common::scratch();
    let dup = dir.path().join("dup");
    fs::copy(common::fixture("lld", "pie"), &dup).unwrap();
    let mut d = fs::read(&dup).unwrap();
    let phoff = u64::from_le_bytes(d[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes(d[56..58].try_into().unwrap()) as usize;
    let ph = |i: usize| phoff + 56 * i;
    let ptype = |d: &[u8], i: usize| u32::from_le_bytes(d[ph(i)..ph(i) + 4].try_into().unwrap());
    let text = (0..phnum)
        .find(|&i| ptype(&d, i) == 1 && d[ph(i) + 4] & 1 == 1)
        .unwrap();
    let stack = (0..phnum).find(|&i| ptype(&d, i) == 0x6474_e551).unwrap();
    d.copy_within(ph(text)..ph(text) + 56, ph(stack));
    fs::write(&dup, d).unwrap();

    let orig = one(&common::fixture("lld", "pie"));
    let v = one(&dup);
    assert_eq!(v["segments"].as_array().unwrap().len(), 5, "{v}");
    assert!(u(&orig, "unit_mappable_bytes_after_align") >= 16 * MIB, "{orig}");
    assert_eq!(
        u(&v, "unit_mappable_bytes_after_align"),
        u(&orig, "unit_mappable_bytes_after_align"),
        "{v}"
    );
    // Aligned, the same: counted once now too.
    let aligned = dir.path().join("aligned");
    let out = common::hugetext(&["align", dup.to_str().unwrap(), "-o", aligned.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        u(&one(&aligned), "unit_mappable_bytes"),
        u(&orig, "unit_mappable_bytes_after_align")
    );
}
