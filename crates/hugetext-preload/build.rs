//! Give libhugetext.so a SONAME, so that a program linked with `-lhugetext`
//! and the same library injected by `hugetext run` (LD_PRELOAD) are one
//! object in the process, not two copies.
//!
//! With GNU toolchains, link the unwinder Rust's standard library calls
//! (`_Unwind_*`) from libgcc_eh.a into the library instead of needing
//! libgcc_s.so.1: the dynamic loader then maps one object less at every
//! start, twice under `run` (the preload, and the auditor in its own
//! namespace): about 0.3 ms of CPU per process, which a chain of launchers
//! pays at every hop. The symbols stay local (the cdylib exports only the
//! C API and the audit hooks).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhugetext.so");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-lib=static:+whole-archive=gcc_eh");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
