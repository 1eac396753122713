//! Give libhugetext.so a SONAME, so that a program linked with `-lhugetext`
//! and the same library injected by `hugetext run` (LD_PRELOAD) are one
//! object in the process, not two copies.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhugetext.so");
    println!("cargo:rerun-if-changed=build.rs");
}
