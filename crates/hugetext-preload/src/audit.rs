//! Objects loaded after start (`dlopen`): the rtld audit interface
//! (rtld-audit(7)). `hugetext run` names libhugetext.so in `LD_AUDIT` as well
//! as in `LD_PRELOAD`; the dynamic loader then loads a second copy of it, in
//! a link namespace of its own (its own statics, its own libc), and calls:
//!
//! * [`la_objopen`] for every object it maps: the object is remembered;
//! * [`la_activity`]`(LA_ACT_CONSISTENT)` once a `dlopen` has mapped the new
//!   objects and their dependencies, **before** it relocates them and runs
//!   their constructors, holding the loader lock (glibc elf/dl-open.c,
//!   `dl_open_worker_begin`): no thread can run the new text yet (dlsym and
//!   lazy binding see the objects only after relocation, `update_scopes`),
//!   and a second thread `dlopen`ing the same library waits for the lock and
//!   then finds it loaded. This is where the new objects' text is remapped;
//! * [`la_objclose`] before an object is unloaded, then
//!   `la_activity(LA_ACT_DELETE)` before its mappings are unmapped (also the
//!   anonymous copies moved over its text: ld.so unmaps the object's whole
//!   address range), then `LA_ACT_CONSISTENT` again. The perf map lines of
//!   the closed objects are dropped at `LA_ACT_DELETE` (at exit `_dl_fini`
//!   calls `la_objclose` without it, and the lines stay for `perf report`).
//!
//! The two copies share one pass lock: this copy finds the preload copy in
//! `la_objopen` (same file), and uses its `BUSY` flag at the same offset.
//! From `LA_ACT_ADD`/`LA_ACT_DELETE` to `LA_ACT_CONSISTENT` the lock is held,
//! so a `hugetext_remap_text()` call in another thread never works on
//! mappings the loader is creating or removing.
//!
//! A program that installs a seccomp filter after start (a sandbox) may
//! forbid what the pass needs, and a filter that kills the process for any
//! call it does not list would kill it for the pass's first `madvise`:
//! before each pass the calling thread's seccomp state is compared with the
//! one at start-up (`seccomp`), and once a filter was added this copy stays
//! passive (`-v` says so once).
//!
//! No `la_symbind*`/`la_pltenter` hooks: defining them would make the loader
//! route every PLT call through the auditor.

use core::ffi::{c_char, c_long, c_uint};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use crate::config::Config;
use crate::engine::{self, FileKey, Scope};
use crate::out::line;
use crate::zeroed::{Zeroable, Zeroed};
use crate::{maps, perfmap, sys};

include!("../audit/table.rs");

const LA_ACT_CONSISTENT: c_uint = 0;
const LA_ACT_ADD: c_uint = 1;
const LA_ACT_DELETE: c_uint = 2;
const DT_TEXTREL: i64 = 22;
const DT_FLAGS: i64 = 30;
const DF_TEXTREL: u64 = 4;

/// The first `LA_ACT_CONSISTENT` (start-up, handled by the preload's
/// constructor) has passed.
static STARTED: AtomicBool = AtomicBool::new(false);
/// The seccomp state of the thread that started the process, read at the
/// first `LA_ACT_CONSISTENT` (before any code of the program ran):
/// mode + 1 (0: unknown) and filters + 1 (0: unknown).
static START_MODE: AtomicUsize = AtomicUsize::new(0);
static START_FILTERS: AtomicUsize = AtomicUsize::new(0);
/// A seccomp filter was added after start: no more passes (for good).
static PASSIVE: AtomicBool = AtomicBool::new(false);
/// Link maps opened since the last `LA_ACT_CONSISTENT`.
const MAXP: usize = 512;
static PENDING: [AtomicUsize; MAXP] = [const { AtomicUsize::new(0) }; MAXP];
static NPENDING: AtomicUsize = AtomicUsize::new(0);
/// The address of the preload copy's pass lock, once found.
static SHARED: AtomicUsize = AtomicUsize::new(0);
/// The lock this copy holds from `LA_ACT_ADD`/`DELETE` to `CONSISTENT`
/// (address of the flag; 0: none).
static HELD: AtomicUsize = AtomicUsize::new(0);
/// Address ranges of late objects: (link map, first, end, closing).
const MAXS: usize = 1024;
#[allow(clippy::type_complexity)]
static SPANS: [(AtomicUsize, AtomicUsize, AtomicUsize, AtomicBool); MAXS] = [const {
    (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicBool::new(false),
    )
}; MAXS];
/// How many of [`SPANS`]' slots were ever used: every walk stops there, so
/// a process that loads nothing late never touches the table (32 KiB of
/// .bss: at exit, walking it whole cost a launcher 16 page faults).
static SPANS_USED: AtomicUsize = AtomicUsize::new(0);

/// The slots of [`SPANS`] in use or freed again.
#[allow(clippy::type_complexity)]
fn spans() -> &'static [(AtomicUsize, AtomicUsize, AtomicUsize, AtomicBool)] {
    &SPANS[..SPANS_USED.load(Relaxed).min(MAXS)]
}

extern "C" {
    /// The ELF header of this library: its load address (linker-defined).
    static __ehdr_start: u8;
}

fn own_base() -> usize {
    // SAFETY: only the address of the linker-defined symbol is taken.
    core::ptr::addr_of!(__ehdr_start) as usize
}

/// The address of the preload copy's [`crate::via::became_program`], once
/// found.
static BECAME_AT: AtomicUsize = AtomicUsize::new(0);

/// The pass lock of this process: the preload copy's when this copy is the
/// auditor and found it, else this copy's own.
pub fn lock_word() -> &'static AtomicBool {
    match SHARED.load(Relaxed) {
        0 => &crate::BUSY,
        // SAFETY: the preload copy's `BUSY`, at the same offset in the same
        // file mapped by the loader (checked in `find_preload`); the
        // library is never unloaded (preloaded objects are not dlclosed).
        p => unsafe { &*(p as *const AtomicBool) },
    }
}

/// Take the pass lock, waiting for a pass of another thread (which uses
/// raw system calls only and never waits for the loader lock) to end; give
/// up after ~10 s. Returns the flag taken.
fn lock_wait() -> Option<&'static AtomicBool> {
    let b = lock_word();
    for _ in 0..10_000 {
        if !b.swap(true, core::sync::atomic::Ordering::Acquire) {
            return Some(b);
        }
        sys::sleep_ns(1_000_000);
    }
    None
}

fn hold() {
    if HELD.load(Relaxed) == 0 {
        if let Some(b) = lock_wait() {
            HELD.store(b as *const AtomicBool as usize, Relaxed);
        }
    }
}

fn release() {
    let p = HELD.swap(0, Relaxed);
    if p != 0 {
        // SAFETY: the flag taken in `hold` (static, lives for the process).
        unsafe { &*(p as *const AtomicBool) }.store(false, core::sync::atomic::Ordering::Release);
    }
}

/// Is this copy of the library the auditor's (a link namespace other than
/// the program's)? Used by the constructor, which must not act there: the
/// loader has not even loaded the program's libraries yet.
pub fn in_audit_namespace() -> bool {
    extern "C" {
        fn dladdr1(
            addr: *const libc::c_void,
            info: *mut libc::Dl_info,
            extra: *mut *mut libc::c_void,
            flags: i32,
        ) -> i32;
        fn dlinfo(handle: *mut libc::c_void, request: i32, arg: *mut libc::c_void) -> i32;
    }
    const RTLD_DL_LINKMAP: i32 = 2;
    const RTLD_DI_LMID: i32 = 1;
    // SAFETY: plain calls into the C library with valid out-pointers; a
    // link map is a valid handle for dlinfo.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        let mut lm: *mut libc::c_void = core::ptr::null_mut();
        if dladdr1(own_base as *const libc::c_void, &mut info, &mut lm, RTLD_DL_LINKMAP) == 0 || lm.is_null() {
            return false;
        }
        let mut lmid: c_long = 0;
        dlinfo(lm, RTLD_DI_LMID, &mut lmid as *mut c_long as *mut libc::c_void) == 0 && lmid != 0
    }
}

/// No file (inode 0: never a mapped file's).
const NONE: FileKey = ((0, 0), 0);

/// The files mapped at `addrs` in /proc/self/maps ([`NONE`] where none).
fn key_at(buf: &mut [u8], addrs: &[usize], keys: &mut [FileKey]) {
    for k in keys.iter_mut() {
        *k = NONE;
    }
    let _ = maps::for_each(buf, |l| {
        for (a, k) in addrs.iter().zip(keys.iter_mut()) {
            if l.start <= *a && *a < l.end && l.inode != 0 {
                *k = ((l.dev_major, l.dev_minor), l.inode);
            }
        }
    });
}

/// Remember the preload copy (the same file as this one, in the program's
/// namespace): share its pass lock.
fn find_preload(map: &LinkMap) {
    let own = own_base();
    let other = map.l_addr;
    if other == own || other == 0 || map.l_ld.is_null() {
        return;
    }
    // The same build (offsets agree) when the other copy's first mapping
    // starts at its load address and its headers, build ID note included,
    // are this copy's (compared in memory: no /proc read in every process).
    let Some(((start, _), _)) = phdr_facts(map, false) else {
        return;
    };
    if start != other {
        return;
    }
    let n = sys::page_size().min(4096);
    // SAFETY: the first `n` bytes of two mappings the loader made of whole
    // pages from offset 0 (this library's own, and the other copy's,
    // checked by `phdr_facts`): readable.
    let (a, b) = unsafe {
        (
            core::slice::from_raw_parts(own as *const u8, n),
            core::slice::from_raw_parts(other as *const u8, n),
        )
    };
    if a != b {
        return; // another build of the library: offsets differ
    }
    let mark = core::ptr::addr_of!(crate::MARK) as usize - own + other;
    // SAFETY: the same file is mapped at `other` (checked above), so its
    // read-only data is at the same offset.
    let same = unsafe { core::slice::from_raw_parts(mark as *const u8, crate::MARK.len()) } == crate::MARK;
    if !same {
        return;
    }
    SHARED.store(core::ptr::addr_of!(crate::BUSY) as usize - own + other, Relaxed);
    crate::clean::SAVED_AT.store(core::ptr::addr_of!(crate::clean::SAVED) as usize - own + other, Relaxed);
    BECAME_AT.store(crate::via::became_program as *const () as usize - own + other, Relaxed);
    let audited = core::ptr::addr_of!(crate::hugetext_audited) as usize - own + other;
    // SAFETY: the preload copy's `AUDITED` flag (its .bss, mapped and
    // writable; nothing else writes it).
    unsafe { &*(audited as *const AtomicBool) }.store(true, Relaxed);
}

fn is_hugetext(name: *const c_char) -> bool {
    if name.is_null() {
        return false;
    }
    // SAFETY: the loader's NUL-terminated object name.
    let n = unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes();
    hugetext_abi::env::is_hugetext_preload(n)
}

/// rtld-audit: the interface version. 0 (do not audit) under the kill
/// switch or `HUGETEXT_LATE=0`; otherwise the loader's own version, up to 2.
/// Versions 1 and 2 differ only in the aarch64 `la_pltenter` register layout,
/// a hook this module does not define, and glibc 2.35+ refuses version 1 on
/// aarch64 ("audit interface requires version 1 ... ignored").
#[no_mangle]
pub extern "C" fn la_version(version: c_uint) -> c_uint {
    let cfg = Config::from_env();
    if version == 0 || cfg.disabled || !cfg.late {
        return 0;
    }
    version.min(2)
}

/// rtld-audit: an object was mapped.
///
/// # Safety
/// Called by the dynamic loader with its link map.
#[no_mangle]
pub unsafe extern "C" fn la_objopen(map: *const LinkMap, lmid: c_long, _cookie: *mut usize) -> c_uint {
    if map.is_null() {
        return 0;
    }
    // SAFETY: `map` is not null, and the loader passes its own link map,
    // valid for the call.
    if lmid == 0 && SHARED.load(Relaxed) == 0 && is_hugetext(unsafe { (*map).l_name }) {
        // SAFETY: as above.
        find_preload(unsafe { &*map });
    }
    opened(map);
    0 // no symbol binding callbacks
}

/// Remember an object just mapped, for the next consistent state.
fn opened(map: *const LinkMap) {
    let n = NPENDING.load(Relaxed);
    if n < MAXP {
        PENDING[n].store(map as usize, Relaxed);
        NPENDING.store(n + 1, Relaxed);
    }
}

/// rtld-audit: an object is about to be unloaded (`dlclose`, or exit).
///
/// # Safety
/// Called by the dynamic loader; `cookie` points at the link map address.
#[no_mangle]
pub unsafe extern "C" fn la_objclose(cookie: *mut usize) -> c_uint {
    if cookie.is_null() {
        return 0;
    }
    // SAFETY: not null, and the loader's cookie for this object.
    closing(unsafe { *cookie });
    0
}

/// An object (link map `lm`) is about to be unloaded.
fn closing(lm: usize) {
    // An object removed before the consistent state that would have
    // handled it (a dlopen that failed after mapping it): forget it, its
    // link map is about to be freed.
    let n = NPENDING.load(Relaxed).min(MAXP);
    if let Some(i) = (0..n).find(|&i| PENDING[i].load(Relaxed) == lm) {
        PENDING[i].store(PENDING[n - 1].load(Relaxed), Relaxed);
        NPENDING.store(n - 1, Relaxed);
    }
    for (m, _, _, closing) in spans() {
        if m.load(Relaxed) == lm {
            closing.store(true, Relaxed);
        }
    }
}

/// rtld-audit: the loader's list of objects is changing (`ADD`, `DELETE`)
/// or consistent again.
#[no_mangle]
pub extern "C" fn la_activity(_cookie: *mut usize, flag: c_uint) {
    if !STARTED.load(Relaxed) {
        if flag == LA_ACT_CONSISTENT {
            // Start-up: the preload's constructor handles these objects.
            STARTED.store(true, Relaxed);
            NPENDING.store(0, Relaxed);
            if let Some((mode, filters)) = crate::seccomp::start_state() {
                START_MODE.store(usize::from(mode) + 1, Relaxed);
                START_FILTERS.store(filters.map_or(0, |f| f as usize + 1), Relaxed);
            }
        }
        return;
    }
    activity(flag);
}

/// The loader's list of objects changes (`flag`), after start-up.
fn activity(flag: c_uint) {
    let passive = PASSIVE.load(Relaxed);
    match flag {
        LA_ACT_ADD if !passive => hold(),
        LA_ACT_DELETE if !passive => {
            hold();
            forget_closing();
        }
        LA_ACT_CONSISTENT => {
            let n = NPENDING.swap(0, Relaxed).min(MAXP);
            if n > 0 && !passive {
                if HELD.load(Relaxed) == 0 {
                    hold();
                }
                // Objects without a whole window of text (most of what
                // programs `dlopen`) are judged from their own program
                // headers, with no system call: neither the seccomp state
                // nor the pass's scratch memory is needed for them. For the
                // others: the loader has just opened, read and closed their
                // files in this thread, the calls `sandboxed` makes.
                if !all_small(n) && !sandboxed() {
                    late(n);
                }
            }
            release();
        }
        _ => {}
    }
}

/// The table of this library that libhugetext-audit.so, the small audit
/// module `hugetext run` names in `LD_AUDIT`, calls instead of loading a
/// second copy of this library into its own link namespace (see
/// `crates/hugetext-preload/audit/auditor.rs`). It runs the same pass as
/// the `la_*` hooks above, in this (the preload) copy: one copy's lock,
/// perf map and settings. Not part of the C API. The layout
/// (`AuditTableV1`) is in `audit/table.rs`, which the module includes too.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static hugetext_audit_v1: AuditTableV1 = AuditTableV1 {
    magic: AUDIT_MAGIC,
    version: AUDIT_VERSION,
    start: v1_start,
    objopen: v1_objopen,
    objclose: v1_objclose,
    activity: v1_activity,
};

extern "C" fn v1_start(mode1: usize, filters1: usize) {
    STARTED.store(true, Relaxed);
    NPENDING.store(0, Relaxed);
    START_MODE.store(mode1, Relaxed);
    START_FILTERS.store(filters1, Relaxed);
    BECAME_AT.store(crate::via::became_program as *const () as usize, Relaxed);
}

extern "C" fn v1_objopen(map: *const LinkMap, _lmid: c_long) {
    if !map.is_null() {
        opened(map);
    }
}

extern "C" fn v1_objclose(lm: usize) {
    closing(lm);
}

extern "C" fn v1_activity(flag: c_uint) {
    if STARTED.load(Relaxed) {
        activity(flag);
    }
}

/// Has the calling thread gained a seccomp filter since start-up? Then
/// become passive for good (and say so once with `-v`).
fn sandboxed() -> bool {
    let known = |v: usize| v.checked_sub(1);
    let start =
        known(START_MODE.load(Relaxed)).map(|m| (m as u8, known(START_FILTERS.load(Relaxed)).map(|f| f as u32)));
    let now = crate::seccomp::state();
    if !crate::seccomp::changed(start, now) {
        return false;
    }
    PASSIVE.store(true, Relaxed);
    if Config::from_env().verbose {
        let mut o = line();
        match now {
            None => o.s("cannot read this thread's seccomp state in /proc/thread-self/status"),
            Some(_) => o.s("a seccomp filter was installed after start (a sandbox)"),
        };
        o.s(": objects loaded after start (dlopen) are left alone from now on, as the filter may kill the process for the calls a remap makes");
    }
    true
}

/// Drop the perf map lines of the objects being unloaded. Rewriting the
/// map takes calls `dlclose` itself does not make (`getpid`, `fstat`,
/// `pread`, ...): only when this copy wrote to the map, and not once a
/// seccomp filter was added (a program that loads its plugins, then
/// sandboxes itself, then unloads one).
fn forget_closing() {
    let closing = spans()
        .iter()
        .any(|(m, _, _, c)| m.load(Relaxed) != 0 && c.load(Relaxed));
    let rewrite = closing && perfmap::opened() && !sandboxed();
    for (m, lo, hi, closing) in spans() {
        if closing.swap(false, Relaxed) {
            if rewrite {
                perfmap::drop_range(lo.load(Relaxed) as u64, hi.load(Relaxed) as u64);
            }
            m.store(0, Relaxed);
        }
    }
}

fn remember_span(lm: usize, lo: usize, hi: usize) {
    let free = spans()
        .iter()
        .find(|(m, ..)| m.load(Relaxed) == lm)
        .or_else(|| spans().iter().find(|(m, ..)| m.load(Relaxed) == 0))
        .or_else(|| {
            // A slot never used yet. Only the thread holding the pass lock
            // (the loader's, which calls us) gets here.
            let n = SPANS_USED.load(Relaxed);
            let slot = SPANS.get(n)?;
            SPANS_USED.store(n + 1, Relaxed);
            Some(slot)
        });
    if let Some((m, l, h, c)) = free {
        l.store(lo, Relaxed);
        h.store(hi, Relaxed);
        c.store(false, Relaxed);
        m.store(lm, Relaxed);
    }
}

/// What a new object's own program headers say, read in memory (no
/// `/proc`): its address range (every `PT_LOAD`, page-rounded) and whether
/// a text segment (readable and executable, not writable: a `r-xp` mapping)
/// holds a whole window (asked only with `text`: that reads the PMD size).
/// `None` when they cannot be read safely: the loader
/// does not name the start of the object's first mapping, no ELF header is
/// there, its program headers end past that first page, or they do not
/// place the first segment at that start. The caller then reads
/// /proc/self/maps instead.
fn phdr_facts(map: &LinkMap, text: bool) -> Option<((usize, usize), bool)> {
    const PT_LOAD: u32 = 1;
    const PF_X: u32 = 1;
    const PF_W: u32 = 2;
    const PF_R: u32 = 4;
    extern "C" {
        fn dladdr(addr: *const libc::c_void, info: *mut libc::Dl_info) -> i32;
    }
    // SAFETY: a plain call with a valid out-pointer; the loader lock it
    // takes is recursive and held by this thread in the audit callbacks.
    let base = unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if map.l_ld.is_null() || dladdr(map.l_ld as *const libc::c_void, &mut info) == 0 {
            return None;
        }
        info.dli_fbase as usize
    };
    let page = sys::page_size();
    if base == 0 || base % page != 0 {
        return None;
    }
    let u16_at = |a: usize| {
        // SAFETY: callers read within the first page at `base`, the start
        // of a mapping the loader made (at least one page, readable).
        unsafe { core::ptr::read_unaligned(a as *const u16) }
    };
    let u32_at = |a: usize| {
        // SAFETY: as above.
        unsafe { core::ptr::read_unaligned(a as *const u32) }
    };
    let u64_at = |a: usize| {
        // SAFETY: as above.
        unsafe { core::ptr::read_unaligned(a as *const u64) }
    };
    // The ELF header: magic, 64-bit class, this byte order.
    if u32_at(base) != u32::from_le_bytes(*b"\x7fELF") || u16_at(base + 4) & 0xff != 2 {
        return None;
    }
    let (phoff, phentsize, phnum) = (
        u64_at(base + 32) as usize,
        u16_at(base + 54) as usize,
        u16_at(base + 56) as usize,
    );
    if phentsize != 56 || phnum == 0 || phoff.checked_add(phnum * phentsize)? > page {
        return None;
    }
    let bias = map.l_addr;
    let (mut lo, mut hi, mut big, mut first) = (usize::MAX, 0usize, false, None);
    for i in 0..phnum {
        let ph = base + phoff + i * phentsize;
        if u32_at(ph) != PT_LOAD {
            continue;
        }
        let flags = u32_at(ph + 4);
        let vaddr = u64_at(ph + 16) as usize;
        let memsz = u64_at(ph + 40) as usize;
        let start = bias.checked_add(vaddr)? & !(page - 1);
        let end = bias
            .checked_add(vaddr)?
            .checked_add(memsz)?
            .checked_next_multiple_of(page)?;
        first.get_or_insert(start);
        lo = lo.min(start);
        hi = hi.max(end);
        big |= text && flags & (PF_R | PF_W | PF_X) == PF_R | PF_X && engine::window_bytes(start, end) > 0;
    }
    (first == Some(base) && lo < hi).then_some(((lo, hi), big))
}

/// At most this many new objects are judged by [`all_small`] (on the
/// stack of the thread that called `dlopen`, which may be small); more go
/// through [`late`].
const FEW: usize = 32;

/// Do the first `n` pending objects' own program headers show that none
/// has a whole window of text? Then their address ranges are remembered
/// (for the perf map lines of `dlclose`) and nothing else is to be done.
/// Reads memory only: no system call.
fn all_small(n: usize) -> bool {
    if n > FEW {
        return false;
    }
    let mut spans = [(0usize, 0usize, 0usize); FEW];
    for (i, s) in spans[..n].iter_mut().enumerate() {
        let lm = PENDING[i].load(Relaxed);
        // SAFETY: a link map the loader passed to `la_objopen`; objects
        // are not freed before the consistent state that follows.
        match phdr_facts(unsafe { &*(lm as *const LinkMap) }, true) {
            Some(((lo, hi), false)) => *s = (lm, lo, hi),
            _ => return false,
        }
    }
    for &(lm, lo, hi) in &spans[..n] {
        remember_span(lm, lo, hi);
    }
    true
}

struct Late {
    buf: [u8; 16384],
    ld: [usize; MAXP],
    keys: [FileKey; MAXP],
    span: [(usize, usize); MAXP],
    /// The object has a text mapping with a whole 2 MiB window.
    big: [bool; MAXP],
    only: [FileKey; MAXP],
}

// SAFETY: a byte array and arrays of integers and tuples of integers:
// all-zero is a value.
unsafe impl Zeroable for Late {}

/// Does the object's dynamic section ask for text relocations?
///
/// # Safety
/// `ld` is the object's mapped dynamic section (DT_NULL-terminated).
unsafe fn has_textrel(ld: *const Dyn) -> bool {
    for i in 0..4096 {
        // SAFETY: the caller's contract: a DT_NULL-terminated dynamic
        // section, read no further than its DT_NULL.
        let d = unsafe { *ld.add(i) };
        match d.tag {
            0 => return false,
            DT_TEXTREL => return true,
            DT_FLAGS if d.val & DF_TEXTREL != 0 => return true,
            _ => {}
        }
    }
    false
}

/// The pass over the `n` objects opened since the last consistent state.
fn late(n: usize) {
    let cfg = Config::from_env();
    if cfg.disabled || !cfg.late {
        return;
    }
    if let Some(v) = cfg.bad_late_min {
        if cfg.verbose {
            line()
                .s("cannot parse HUGETEXT_LATE_MIN=")
                .bytes(v)
                .s(" (bytes, or with a K, M or G suffix); using the default: one whole window");
        }
    }
    let Ok(mut mem) = Zeroed::<Late>::map() else { return };
    let st: &mut Late = &mut mem;
    let mut lms = [0usize; MAXP];
    for i in 0..n {
        lms[i] = PENDING[i].load(Relaxed);
        // SAFETY: a link map the loader passed to `la_objopen`; objects are
        // not freed before the consistent state that follows.
        st.ld[i] = unsafe { (*(lms[i] as *const LinkMap)).l_ld } as usize;
    }
    // Each object's range and text from its own program headers: a
    // program that dlopens many small objects (Python's extension modules)
    // reads /proc/self/maps only for those with a whole window of text.
    let mut known = true;
    for (i, &lm) in lms[..n].iter().enumerate() {
        // SAFETY: as above.
        match phdr_facts(unsafe { &*(lm as *const LinkMap) }, true) {
            Some((span, big)) => (st.span[i], st.big[i]) = (span, big),
            None => known = false,
        }
    }
    if known && !st.big[..n].contains(&true) {
        for (&lm, &(lo, hi)) in lms[..n].iter().zip(&st.span[..n]) {
            remember_span(lm, lo, hi);
        }
        return;
    }
    key_at(&mut st.buf, &st.ld[..n], &mut st.keys[..n]);
    if !known {
        // The address range of each object: every line of its file (the
        // text, and the data around it).
        for s in st.span[..n].iter_mut() {
            *s = (usize::MAX, 0);
        }
        for b in st.big[..n].iter_mut() {
            *b = false;
        }
        let Late {
            buf, keys, span, big, ..
        } = st;
        let _ = maps::for_each(buf, |l| {
            let k = ((l.dev_major, l.dev_minor), l.inode);
            for i in 0..n {
                if keys[i] == k && k != NONE {
                    span[i] = (span[i].0.min(l.start), span[i].1.max(l.end));
                    big[i] |= &l.perms == b"r-xp" && engine::window_bytes(l.start, l.end) > 0;
                }
            }
        });
    }
    let mut m = 0;
    #[allow(clippy::needless_range_loop)] // five arrays indexed alike
    for i in 0..n {
        let k = st.keys[i];
        if k == NONE {
            continue;
        }
        remember_span(lms[i], st.span[i].0, st.span[i].1);
        if !st.big[i] {
            continue; // no whole 2 MiB window of text: nothing to do
        }
        // SAFETY: `ld` is the object's dynamic section, mapped (it lies in
        // the mapping that gave `k`).
        if unsafe { has_textrel(st.ld[i] as *const Dyn) } {
            if cfg.verbose {
                // SAFETY: as above, the loader's link map.
                let name = unsafe { (*(lms[i] as *const LinkMap)).l_name };
                let mut o = line();
                if !name.is_null() {
                    // SAFETY: the loader's NUL-terminated object name.
                    o.bytes(unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes());
                }
                o.s(": has text relocations (DT_TEXTREL): the loader writes into its text, left alone");
            }
            continue;
        }
        if !st.only[..m].contains(&k) {
            st.only[m] = k;
            m += 1;
        }
    }
    if m == 0 {
        return;
    }
    let scope = Scope {
        only: Some(&st.only[..m]),
        min: cfg.late_min,
    };
    crate::scan::init_geometry();
    if engine::remap_in(&cfg, &scope) > 0 {
        let f = BECAME_AT.load(Relaxed);
        if f != 0 {
            // SAFETY: the preload copy's `became_program` (the same file
            // at `other`, checked where the address was taken): code of a
            // `extern "C" fn()`; it runs with the loader lock held, as this
            // pass does.
            let f: extern "C" fn() = unsafe { core::mem::transmute(f) };
            f();
        }
    }
}
