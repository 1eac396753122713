//! libhugetext-audit.so: the rtld audit module (rtld-audit(7)) that
//! `hugetext run` names in `LD_AUDIT`. It is small on purpose: the dynamic
//! loader loads an audit module into a link namespace of its own in every
//! process, and with libhugetext.so there that cost the library's second
//! copy and a second C library (about 50 page faults per process, every hop
//! of a launcher chain). This module needs nothing (`no_std`, no C
//! library, no `DT_NEEDED`) and does no work of its own: it finds the
//! preload copy of libhugetext.so as the loader maps it and hands the
//! callbacks to that copy's `hugetext_audit_v1` table, which runs the pass
//! over objects loaded after start (`audit.rs` in the preload).
//!
//! * `la_objopen` of the preload (program namespace, start-up): the table's
//!   and the `hugetext_audited` flag's addresses are looked up in its
//!   dynamic symbol table (GNU hash), and the flag is set (the preload's
//!   constructor says "followed" with `-v`). Before start-up ends the
//!   preload is not relocated: nothing is called.
//! * The first `la_activity(LA_ACT_CONSISTENT)`: start-up is complete, no
//!   code of the program ran yet; the thread's seccomp state is read here
//!   (raw system calls: `prctl(PR_GET_SECCOMP)`, and the status file when
//!   that reports a filter), to be compared before each later pass.
//! * After it, every callback goes to the table; the first hands over the
//!   seccomp state at start.
//!
//! Built by `crates/hugetext/build.rs` with `rustc -C panic=abort` (a
//! `no_std` library cannot unwind) and linked with `-nostdlib`; the build
//! checks that it needs no symbol.
#![no_std]

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// Named by the unwind tables of the precompiled `core` (built to unwind);
/// never called: this library aborts rather than unwinds, and has no panic
/// path (the build checks it needs no symbol).
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}

include!("table.rs");

const LA_ACT_CONSISTENT: u32 = 0;

static STARTED: AtomicBool = AtomicBool::new(false);
/// The table's address (0: no preload copy of this build found).
static TABLE: AtomicUsize = AtomicUsize::new(0);
/// The table was handed the start-up state.
static HANDED: AtomicBool = AtomicBool::new(false);
/// Seccomp mode + 1 and filters + 1 at start (0: unknown).
static START_MODE: AtomicUsize = AtomicUsize::new(0);
static START_FILTERS: AtomicUsize = AtomicUsize::new(0);

/// rtld-audit: the interface version (up to 2; see `audit.rs`).
#[no_mangle]
pub extern "C" fn la_version(version: u32) -> u32 {
    if version < 2 {
        version
    } else {
        2
    }
}

/// rtld-audit: an object was mapped.
///
/// # Safety
/// Called by the dynamic loader with its link map.
#[no_mangle]
pub unsafe extern "C" fn la_objopen(map: *const LinkMap, lmid: core::ffi::c_long, _cookie: *mut usize) -> u32 {
    if map.is_null() {
        return 0;
    }
    if !STARTED.load(Relaxed) {
        // SAFETY: the loader's link map, valid for the call.
        let m = unsafe { &*map };
        if lmid == 0 && TABLE.load(Relaxed) == 0 && is_preload(m.l_name.cast()) {
            find_table(m);
        }
        return 0;
    }
    if let Some(t) = table() {
        (t.objopen)(map, lmid);
    }
    0
}

/// rtld-audit: an object is about to be unloaded.
///
/// # Safety
/// Called by the dynamic loader; `cookie` points at the link map address.
#[no_mangle]
pub unsafe extern "C" fn la_objclose(cookie: *mut usize) -> u32 {
    if cookie.is_null() || !STARTED.load(Relaxed) {
        return 0;
    }
    if let Some(t) = table() {
        // SAFETY: not null, the loader's cookie for this object.
        (t.objclose)(unsafe { *cookie });
    }
    0
}

/// rtld-audit: the list of objects is changing, or consistent again.
#[no_mangle]
pub extern "C" fn la_activity(_cookie: *mut usize, flag: u32) {
    if !STARTED.load(Relaxed) {
        if flag == LA_ACT_CONSISTENT {
            STARTED.store(true, Relaxed);
            let (mode, filters) = seccomp_state();
            START_MODE.store(mode, Relaxed);
            START_FILTERS.store(filters, Relaxed);
        }
        return;
    }
    if let Some(t) = table() {
        (t.activity)(flag);
    }
}

/// The preload's table once start-up is over, handed the start-up state
/// on first use.
fn table() -> Option<&'static AuditTableV1> {
    let a = TABLE.load(Relaxed);
    if a == 0 {
        return None;
    }
    // SAFETY: the address of the preload's `hugetext_audit_v1` (checked
    // for its magic and version when found); the preload is relocated
    // once start-up is over, and preloaded objects are never unloaded.
    let t = unsafe { &*(a as *const AuditTableV1) };
    // Callbacks come one at a time (the loader lock): a load and a store.
    // (No read-modify-write: on arm64 those call out to helpers that need
    // the C library.)
    if !HANDED.load(Relaxed) {
        HANDED.store(true, Relaxed);
        (t.start)(START_MODE.load(Relaxed), START_FILTERS.load(Relaxed));
    }
    Some(t)
}

/// Is `name` (the loader's object name) a libhugetext.so?
fn is_preload(name: *const u8) -> bool {
    if name.is_null() {
        return false;
    }
    // Its length, and where its last component starts.
    let (mut len, mut base) = (0, 0);
    loop {
        // SAFETY: the loader's NUL-terminated object name, read up to
        // its NUL.
        match unsafe { *name.add(len) } {
            0 => break,
            b'/' => base = len + 1,
            _ => {}
        }
        len += 1;
    }
    let want = b"libhugetext.so";
    let n = len - base;
    if n < want.len() {
        return false;
    }
    let mut i = 0;
    while i < want.len() {
        // SAFETY: within the name (n >= want.len()).
        if unsafe { *name.add(base + i) } != unsafe { *want.as_ptr().add(i) } {
            return false;
        }
        i += 1;
    }
    // "libhugetext.so" or "libhugetext.so.N".
    // SAFETY: within the name, or its NUL.
    n == want.len() || unsafe { *name.add(base + want.len()) } == b'.'
}

/// Find the table (and the flag) in the preload's dynamic symbols; set the
/// flag. Only data is read and one byte of the preload's .bss written.
fn find_table(m: &LinkMap) {
    let Some(t) = lookup(m, b"hugetext_audit_v1\0") else {
        return;
    };
    // SAFETY: a symbol the preload defines: its table, in memory mapped
    // by the loader (read before relocation: the magic and version are
    // plain bytes).
    let ok = unsafe {
        let p = t as *const u8;
        (0..16).all(|i| *p.add(i) == *AUDIT_MAGIC.as_ptr().add(i))
            && core::ptr::read_unaligned(p.add(16) as *const u32) == AUDIT_VERSION
    };
    if !ok {
        return; // another build of the library
    }
    if let Some(f) = lookup(m, b"hugetext_audited\0") {
        // SAFETY: the preload's `hugetext_audited` flag, an atomic byte in
        // its writable data (mapped; not a relocation target).
        unsafe { &*(f as *const AtomicBool) }.store(true, Relaxed);
    }
    TABLE.store(t, Relaxed);
}

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;

/// The address of dynamic symbol `name` (NUL-terminated) of the object
/// `m`, through its GNU hash table; `None` when it has none or the
/// symbol is undefined there.
fn lookup(m: &LinkMap, name: &[u8]) -> Option<usize> {
    if m.l_ld.is_null() || m.l_addr == 0 {
        return None;
    }
    let (mut strtab, mut symtab, mut hash) = (0usize, 0usize, 0usize);
    for i in 0..512 {
        // SAFETY: the object's mapped dynamic section, DT_NULL-terminated.
        let d = unsafe { *m.l_ld.add(i) };
        // The loader may have made the pointers absolute in place.
        let at = |v: u64| -> usize {
            let v = v as usize;
            if v < m.l_addr {
                m.l_addr + v
            } else {
                v
            }
        };
        match d.tag {
            DT_NULL => break,
            DT_STRTAB => strtab = at(d.val),
            DT_SYMTAB => symtab = at(d.val),
            DT_GNU_HASH => hash = at(d.val),
            _ => {}
        }
    }
    if strtab == 0 || symtab == 0 || hash == 0 {
        return None;
    }
    let mut h: u32 = 5381;
    for &c in name.iter().take_while(|&&c| c != 0) {
        h = h.wrapping_mul(33).wrapping_add(u32::from(c));
    }
    let word = |a: usize| -> u32 {
        // SAFETY: within the object's GNU hash table (mapped read-only
        // data), at offsets its header gives.
        unsafe { core::ptr::read_unaligned(a as *const u32) }
    };
    let (nbuckets, symoffset, bloom_size) = (word(hash) as usize, word(hash + 4) as usize, word(hash + 8) as usize);
    if nbuckets == 0 {
        return None;
    }
    let buckets = hash + 16 + bloom_size * core::mem::size_of::<usize>();
    let chains = buckets + nbuckets * 4;
    let first = word(buckets + (h as usize % nbuckets) * 4) as usize;
    if first < symoffset {
        return None;
    }
    // A chain ends at an entry with its low bit set; 65,536 at most.
    for idx in first..first + (1 << 16) {
        let ch = word(chains + (idx - symoffset) * 4);
        if ch | 1 == h | 1 {
            // Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx
            // u16, st_value u64, st_size u64.
            let sym = symtab + idx * 24;
            let st_name = word(sym) as usize;
            // SAFETY: within the symbol table entry.
            let (shndx, value) = unsafe {
                (
                    core::ptr::read_unaligned((sym + 6) as *const u16),
                    core::ptr::read_unaligned((sym + 8) as *const u64),
                )
            };
            if shndx != 0 && same(strtab + st_name, name) {
                return Some(m.l_addr + value as usize);
            }
        }
        if ch & 1 != 0 {
            break;
        }
    }
    None
}

/// Is the NUL-terminated string at `a` `name` (NUL-terminated)?
fn same(a: usize, name: &[u8]) -> bool {
    for (i, &c) in name.iter().enumerate() {
        // (An iterator: no bounds check, no panic path.)
        // SAFETY: a string of the object's string table: read up to its
        // NUL, or the first byte that differs.
        if unsafe { *((a + i) as *const u8) } != c {
            return false;
        }
    }
    true
}

/// The calling thread's seccomp (mode + 1, filters + 1), 0 where unknown.
/// Mode 0 (no filter, the common case) costs one `prctl`.
fn seccomp_state() -> (usize, usize) {
    const PR_GET_SECCOMP: usize = 21;
    let mode = sys::call(sys::PRCTL, [PR_GET_SECCOMP, 0, 0, 0, 0, 0]);
    if mode == 0 {
        return (1, 0);
    }
    // A filter (or a filter's answer to prctl): the status file says the
    // mode and the count.
    let mut buf = core::mem::MaybeUninit::<[u8; 4096]>::uninit();
    let p = buf.as_mut_ptr() as *mut u8;
    let mut fd = sys::call(
        sys::OPENAT,
        [AT_FDCWD, c"/proc/thread-self/status".as_ptr() as usize, 0, 0, 0, 0],
    );
    if fd < 0 {
        fd = sys::call(
            sys::OPENAT,
            [AT_FDCWD, c"/proc/self/status".as_ptr() as usize, 0, 0, 0, 0],
        );
    }
    if fd < 0 {
        return (0, 0);
    }
    let mut n = 0usize;
    while n < 4096 {
        let r = sys::call(sys::READ, [fd as usize, p as usize + n, 4096 - n, 0, 0, 0]);
        if r <= 0 {
            break;
        }
        n += r as usize;
    }
    sys::call(sys::CLOSE, [fd as usize, 0, 0, 0, 0, 0]);
    // SAFETY: the first `n` bytes were written by read(2).
    let text = unsafe { core::slice::from_raw_parts(p, n) };
    let mode = field(text, b"Seccomp:").map_or(0, |m| m + 1);
    let filters = field(text, b"Seccomp_filters:").map_or(0, |f| f + 1);
    (mode, filters)
}

const AT_FDCWD: usize = -100isize as usize;

/// The decimal number after `key` at the start of a line of `text`.
/// (Iterators only: no bounds check, no panic path in this library.)
fn field(text: &[u8], key: &[u8]) -> Option<usize> {
    for l in text.split(|&c| c == b'\n') {
        let Some(rest) = l.strip_prefix(key) else {
            continue;
        };
        let mut v: usize = 0;
        let mut digits = 0;
        for &c in rest {
            match c {
                b'0'..=b'9' if digits < 9 => {
                    v = v * 10 + usize::from(c - b'0');
                    digits += 1;
                }
                b' ' | b'\t' if digits == 0 => {}
                _ => break,
            }
        }
        return (digits > 0).then_some(v);
    }
    None
}

/// Raw system calls: no C library in this namespace.
mod sys {
    #[cfg(target_arch = "x86_64")]
    pub const PRCTL: usize = 157;
    #[cfg(target_arch = "x86_64")]
    pub const OPENAT: usize = 257;
    #[cfg(target_arch = "x86_64")]
    pub const READ: usize = 0;
    #[cfg(target_arch = "x86_64")]
    pub const CLOSE: usize = 3;
    #[cfg(target_arch = "aarch64")]
    pub const PRCTL: usize = 167;
    #[cfg(target_arch = "aarch64")]
    pub const OPENAT: usize = 56;
    #[cfg(target_arch = "aarch64")]
    pub const READ: usize = 63;
    #[cfg(target_arch = "aarch64")]
    pub const CLOSE: usize = 57;

    /// System call `nr` with six arguments; the raw result (a negative
    /// errno on failure).
    #[cfg(target_arch = "x86_64")]
    pub fn call(nr: usize, a: [usize; 6]) -> isize {
        let r: isize;
        // SAFETY: the calls made here (prctl, openat, read into a buffer
        // of the caller's, close) touch only memory they are given.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") nr as isize => r,
                in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
                in("r10") a[3], in("r8") a[4], in("r9") a[5],
                lateout("rcx") _, lateout("r11") _,
                options(nostack),
            );
        }
        r
    }

    #[cfg(target_arch = "aarch64")]
    pub fn call(nr: usize, a: [usize; 6]) -> isize {
        let r: isize;
        // SAFETY: as above.
        unsafe {
            core::arch::asm!(
                "svc 0",
                in("x8") nr,
                inlateout("x0") a[0] as isize => r,
                in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
                options(nostack),
            );
        }
        r
    }
}
