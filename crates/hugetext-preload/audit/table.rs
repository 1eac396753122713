// The contract between the audit module (`audit/auditor.rs`, built outside
// Cargo) and the preload (`src/audit.rs`): both `include!` this file, so
// the layout is written once. The module checks `magic` and `version`
// before it calls anything, which guards against a module and a preload
// of different builds.

/// The public head of glibc's `struct link_map` (<link.h>).
#[repr(C)]
#[allow(dead_code)]
pub struct LinkMap {
    l_addr: usize,
    l_name: *const core::ffi::c_char,
    l_ld: *const Dyn,
    l_next: *const LinkMap,
    l_prev: *const LinkMap,
}

/// An entry of a dynamic section (`Elf64_Dyn`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Dyn {
    tag: i64,
    val: u64,
}

/// What the preload exports as `hugetext_audit_v1` and the module calls
/// instead of loading a second copy of the library into its own link
/// namespace. Not part of the C API.
#[repr(C)]
pub struct AuditTableV1 {
    /// [`AUDIT_MAGIC`]: what the module checks before trusting the rest
    /// (read before the preload is relocated).
    magic: [u8; 16],
    /// [`AUDIT_VERSION`]: this layout.
    version: u32,
    /// Start-up is over: the seccomp state at start (mode + 1, filters +
    /// 1; 0: unknown), read by the module before any code of the program.
    start: extern "C" fn(usize, usize),
    /// `la_objopen`: the link map and its namespace.
    objopen: extern "C" fn(*const LinkMap, core::ffi::c_long),
    /// `la_objclose`: the link map's address.
    objclose: extern "C" fn(usize),
    /// `la_activity`: the flag.
    activity: extern "C" fn(core::ffi::c_uint),
}

/// [`AuditTableV1::magic`].
pub const AUDIT_MAGIC: [u8; 16] = *b"hugetext-audit\0\0";
/// [`AuditTableV1::version`].
pub const AUDIT_VERSION: u32 = 1;
