//! AArch64 ELF files on any machine: `check` and `align` for the target's
//! huge unit (--page-size 4K: the 2 MiB PMD, 16K: the 32 MiB PMD, 64K: the
//! 2 MiB contiguous-PTE block, as the 512 MiB PMD is out of reach), the aligned
//! programs still run (natively on arm64, under qemu-user elsewhere), and a
//! file of another machine is reported by `check` and refused by `run`.
//!
//! The AArch64 programs are cross-built here with Debian's
//! gcc-aarch64-linux-gnu (ld.bfd, and lld), ~66 MiB of text so that both a
//! 2 MiB and a 32 MiB window fit whole.

use hugetext_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const EM_RISCV: u16 = 243;

const TEXT_MIB: u64 = 66;

/// `(linker, program)`: AArch64 PIEs linked by ld.bfd and lld, built once;
/// `None` (with a note) where no cross compiler is at hand and the tests
/// run from prebuilt binaries (the arm64 guests).
fn programs() -> Option<&'static [(String, PathBuf)]> {
    static P: OnceLock<Option<Vec<(String, PathBuf)>>> = OnceLock::new();
    P.get_or_init(|| {
        let cc = "aarch64-linux-gnu-gcc";
        let cc = if Command::new(cc).arg("--version").output().is_ok() {
            cc
        } else if cfg!(target_arch = "aarch64") && Command::new("gcc").arg("--version").output().is_ok() {
            "gcc"
        } else {
            assert!(
                common::prebuilt(),
                "{cc} missing: install gcc-aarch64-linux-gnu (scripts/install-deps.sh)"
            );
            common::skip_line("arm64: skipped: no AArch64 compiler here");
            return None;
        };
        let dir = common::target_profile_dir().join("../arm64");
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("big.S");
        std::fs::write(
            &src,
            format!(
                "    .text\n    .globl filler\n    .type filler, %function\n    .p2align 12\nfiller:\n\
                 \x20   .fill ({TEXT_MIB} << 20) / 4, 4, 0xd503201f\n    ret\n    .size filler, .-filler\n\
                 \x20   .section .note.GNU-stack,\"\",%progbits\n"
            ),
        )
        .unwrap();
        let main = dir.join("main.c");
        std::fs::write(
            &main,
            "#include <stdio.h>\nextern void filler(void);\nstatic const char msg[] = \"arm64 fixture\";\n\
             long counter = 41;\nint main(void) {\n  unsigned long h = 1469598103934665603UL;\n\
             \x20 for (const char *p = msg; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211UL;\n\
             \x20 h ^= (unsigned long)((const char *)filler - (const char *)main) + (unsigned long)counter;\n\
             \x20 filler();\n  printf(\"%s %lx\\n\", msg, h);\n  return 0;\n}\n",
        )
        .unwrap();
        // gcc finds ld.lld for -fuse-ld=lld through -B.
        let lldbin = dir.join("lldbin");
        std::fs::create_dir_all(&lldbin).unwrap();
        let _ = std::os::unix::fs::symlink("/usr/bin/ld.lld", lldbin.join("ld.lld"));
        let mut out = Vec::new();
        for linker in ["bfd", "lld"] {
            let exe = dir.join(format!("pie-{linker}"));
            let mut cmd = Command::new(cc);
            cmd.args(["-O2", "-fPIE", "-pie", "-o"]).arg(&exe).arg(&main).arg(&src);
            if linker == "lld" {
                cmd.arg("-fuse-ld=lld").arg("-B").arg(&lldbin);
            }
            let o = cmd.output().unwrap();
            assert!(
                o.status.success(),
                "{cc} ({linker}): {}",
                String::from_utf8_lossy(&o.stderr)
            );
            out.push((linker.to_string(), exe));
        }
        Some(out)
    })
    .as_deref()
}

/// How to run an AArch64 program here: natively on arm64, else qemu-user
/// with Debian's cross libc.
fn runner(exe: &Path) -> Command {
    if cfg!(target_arch = "aarch64") {
        return Command::new(exe);
    }
    let q = "qemu-aarch64";
    assert!(
        Command::new(q).arg("--version").output().is_ok(),
        "{q} missing: install qemu-user (scripts/install-deps.sh)"
    );
    let mut c = Command::new(q);
    c.args(["-L", "/usr/aarch64-linux-gnu"]).arg(exe);
    c
}

fn output_of(exe: &Path) -> String {
    let o = runner(exe).output().unwrap();
    assert!(
        o.status.success(),
        "{}: {}",
        exe.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn check(page: Option<&str>, file: &Path) -> Value {
    let mut args = vec!["check", "--json"];
    if let Some(p) = page {
        args.extend(["--page-size", p]);
    }
    let f = file.to_str().unwrap();
    args.push(f);
    let o = common::hugetext(&args);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0].clone()
}

/// `(p_offset, p_vaddr, p_align)` of the executable PT_LOAD, as readelf
/// prints them.
fn text_load(file: &Path) -> (u64, u64, u64) {
    let o = Command::new("readelf")
        .arg("-lW")
        .arg(file)
        .output()
        .expect("readelf (binutils)");
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("LOAD") && l.contains("R E"))
        .unwrap_or_else(|| panic!("no executable LOAD in readelf -l {}:\n{text}", file.display()));
    let f: Vec<&str> = line.split_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    (hex(f[1]), hex(f[2]), hex(f[f.len() - 1]))
}

/// A copy of `src` with its ELF `e_machine` set to `machine`.
fn with_machine(src: &Path, dir: &Path, machine: u16) -> PathBuf {
    let mut data = std::fs::read(src).unwrap();
    data[18..20].copy_from_slice(&machine.to_le_bytes());
    let p = dir.join(format!("machine-{machine}"));
    std::fs::write(&p, data).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

#[test]
fn align_aarch64_for_4k_and_16k_pages() {
    let Some(progs) = programs() else { return };
    let dir = common::scratch();
    for (linker, exe) in progs {
        let want = output_of(exe);
        for (page, pmd) in [("4K", 2u64 << 20), ("16K", 32 << 20)] {
            let before = check(Some(page), exe);
            assert_eq!(before["machine"], "AArch64");
            assert_eq!(before["target"]["pmd_size"], pmd, "{before:#}");
            assert_eq!(before["verdict"], "improvable", "{linker} {page}: {before:#}");
            let out = dir.path().join(format!("{linker}-{page}"));
            let o = common::hugetext(&[
                "align",
                "--page-size",
                page,
                "-o",
                out.to_str().unwrap(),
                exe.to_str().unwrap(),
            ]);
            assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
            let (off, vaddr, align) = text_load(&out);
            assert_eq!(align, pmd, "{linker} {page}: p_align");
            assert_eq!((vaddr - off) % pmd, 0, "{linker} {page}: text congruent modulo the PMD");
            let after = check(Some(page), &out);
            assert_eq!(after["verdict"], "pmd-mappable", "{linker} {page}: {after:#}");
            assert_eq!(after["unit_mappable_bytes"], before["unit_mappable_bytes_after_align"]);
            // ~66 MiB of text: at least one whole 32 MiB window, 31 of 2 MiB.
            assert!(after["unit_mappable_bytes"].as_u64().unwrap() >= (TEXT_MIB - 2 * pmd / (1 << 20)) << 20);
            assert_eq!(
                output_of(&out),
                want,
                "{linker} {page}: the aligned program prints the same"
            );
        }
    }
}

#[test]
fn align_aarch64_for_64k_pages_to_the_contpte_block() {
    let Some(progs) = programs() else { return };
    let dir = common::scratch();
    let block = 2u64 << 20;
    for (linker, exe) in progs {
        let want = output_of(exe);
        // 64 KiB pages: a 512 MiB PMD no page-cache folio reaches; the unit
        // is the 2 MiB contiguous-PTE block.
        let before = check(Some("64K"), exe);
        assert_eq!(before["target"]["pmd_size"], 512u64 << 20, "{before:#}");
        assert_eq!(before["target"]["unit"], block, "{before:#}");
        assert_eq!(before["target"]["unit_kind"], "contpte", "{before:#}");
        assert_eq!(before["verdict"], "improvable", "{linker}: {before:#}");
        let out = dir.path().join(format!("{linker}-64K"));
        let o = common::hugetext(&[
            "align",
            "--page-size",
            "64K",
            "-o",
            out.to_str().unwrap(),
            exe.to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
        assert!(text.contains("contpte-mappable"), "{text}");
        let (off, vaddr, align) = text_load(&out);
        assert_eq!(align, block, "{linker}: p_align");
        assert_eq!((vaddr - off) % block, 0, "{linker}: text congruent modulo 2 MiB");
        let after = check(Some("64K"), &out);
        assert_eq!(after["verdict"], "pmd-mappable", "{linker}: {after:#}");
        assert_eq!(after["unit_mappable_bytes"], before["unit_mappable_bytes_after_align"]);
        assert!(
            after["unit_mappable_bytes"].as_u64().unwrap() >= (TEXT_MIB - 4) << 20,
            "{after:#}"
        );
        let human = common::hugetext(&["check", "--page-size", "64K", out.to_str().unwrap()]);
        let human = String::from_utf8_lossy(&human.stdout);
        assert!(
            human.contains("contiguous-PTE block") && human.contains("contpte-mappable now"),
            "{human}"
        );
        assert_eq!(
            output_of(&out),
            want,
            "{linker} 64K: the aligned program prints the same"
        );
    }
}

#[test]
fn pages_a_target_cannot_have_are_refused() {
    let Some(progs) = programs() else { return };
    let exe = &progs[0].1;
    let dir = common::scratch();
    // x86-64 has 4 KiB pages only; 8K is no page size: one line each.
    let x86 = with_machine(exe, dir.path(), EM_X86_64);
    let o = common::hugetext(&["check", "--page-size", "16K", x86.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("x86-64 has 4 KiB pages only") && err.lines().count() == 1,
        "{err}"
    );
    let o = common::hugetext(&["align", "--page-size", "8K", exe.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("give 4K, 16K or 64K"));
}

/// A copy of the hugetext binary itself, made to claim another machine:
/// works on any host, no cross compiler needed.
fn foreign(dir: &Path, machine: u16) -> PathBuf {
    with_machine(&common::bin(), dir, machine)
}

fn other_machine() -> (u16, &'static str) {
    if cfg!(target_arch = "aarch64") {
        (EM_X86_64, "x86-64")
    } else {
        (EM_AARCH64, "AArch64")
    }
}

#[test]
fn check_says_a_file_is_for_another_machine() {
    let dir = common::scratch();
    let (m, name) = other_machine();
    let r = check(None, &foreign(dir.path(), m));
    assert_eq!(r["machine"], name);
    assert_eq!(r["target"]["foreign"], true);
    let note = r["warnings"][0].as_str().unwrap();
    assert!(note.contains(name) && note.contains("does not run here"), "{r:#}");
    // The running machine's own files carry no such note.
    let own = check(None, &common::bin());
    assert_eq!(own["target"]["foreign"], false);
    assert_eq!(own["target"]["pmd_size"], common::pmd());
    assert_eq!(own["target"]["page_size"], hugetext::kernel::page_size() as u64);
    // A machine align does not handle: reported, and refused with the reason.
    let rv = foreign(dir.path(), EM_RISCV);
    let r = check(None, &rv);
    assert_eq!(r["verdict"], "not-improvable");
    assert!(r["reasons"][0]
        .as_str()
        .unwrap()
        .contains("RISC-V ELF: hugetext aligns x86-64 and AArch64 files only"));
    let o = common::hugetext(&["align", "--dry-run", rv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stdout).contains("RISC-V"));
}

#[test]
fn run_refuses_a_program_of_another_machine() {
    let dir = common::scratch();
    let (m, name) = other_machine();
    let prog = foreign(dir.path(), m);
    let o = Command::new(common::bin())
        .args(["run", "--preload"])
        .arg(common::preload())
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("program is {name} ELF64")) && err.contains("cannot load into this program"),
        "{err}"
    );
}
