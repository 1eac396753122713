//! Build libhugetext-audit.so, the small audit module `hugetext run` names
//! in `LD_AUDIT` (`crates/hugetext-preload/audit/auditor.rs`), for the
//! target being built; `run::auditmod` carries its bytes.
//!
//! It is built here with `rustc` rather than as a workspace member: a
//! `no_std` library without a C library must not unwind (`-C panic=abort`),
//! and Cargo sets the panic strategy for the whole workspace, which unwinds.
//! Linked with `-nostdlib`: it needs no library, and this build fails when
//! it would need a symbol (the dynamic loader could not load it).
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../hugetext-preload/audit/auditor.rs");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", src.with_file_name("table.rs").display());
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("libhugetext-audit.so");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").unwrap();
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition",
        "2021",
        "--crate-type",
        "cdylib",
        "--crate-name",
        "hugetext_audit",
    ])
    .args([
        "-C",
        "panic=abort",
        "-C",
        "opt-level=2",
        "-C",
        "debuginfo=0",
        "-C",
        "strip=debuginfo",
    ])
    .args(["-C", "link-arg=-nostdlib", "-C", "link-arg=-Wl,-z,now"])
    .args(["-C", "link-arg=-Wl,-soname,libhugetext-audit.so"])
    .args(["--target", &target]);
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        cmd.arg("-C").arg(format!("linker={linker}"));
    }
    cmd.arg(&src).arg("-o").arg(&out);
    let st = cmd.status().expect("run rustc for libhugetext-audit.so");
    assert!(st.success(), "building libhugetext-audit.so failed");
    // It must need nothing: no undefined dynamic symbol.
    let bytes = std::fs::read(&out).unwrap();
    let file = object::File::parse(&*bytes).expect("libhugetext-audit.so is ELF");
    use object::{Object, ObjectSymbol};
    let undefined: Vec<String> = file
        .dynamic_symbols()
        .filter(|s| s.is_undefined())
        .filter_map(|s| s.name().ok().filter(|n| !n.is_empty()).map(str::to_string))
        .collect();
    assert!(
        undefined.is_empty(),
        "libhugetext-audit.so needs symbols it cannot have: {undefined:?}"
    );
}
