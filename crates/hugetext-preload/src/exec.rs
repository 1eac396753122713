//! Settings that travel at exec time. A launcher being followed (see
//! `via`) keeps a clean `environ` like any program (a language runtime
//! that copies the environment at start, python's `os.environ`, node's
//! `process.env`, perl's `%ENV`, sees nothing of hugetext), and the
//! preload's entries are added back to the environment of each program it
//! starts instead: this library interposes the exec family (`execve`,
//! `execv`, `execvp`, `execvpe`, `execl`, `execlp`, `execle`, `fexecve`),
//! `posix_spawn`, `posix_spawnp`, `system` and `popen`.
//!
//! The environment passed on is the caller's (whatever it is: `environ`,
//! a copy of `os.environ`, one it changed) with, added back:
//! `LD_PRELOAD` and `LD_AUDIT` naming this library first, then the
//! caller's own entries; `GLIBC_TUNABLES` with `run`'s addition after the
//! caller's own value (and `HUGETEXT_TUNABLES` describing that value, to
//! put back); the `HUGETEXT_*` settings from the saved copy
//! (`clean::saved`). Nothing is added by a process that is not a followed
//! launcher (the program, or one that turned out to be the program), nor
//! to an environment the caller cleared on purpose (`env -i`, `su -`): one
//! that keeps fewer than half of the entries this process started with
//! ([`cleared`]).
//!
//! Exec may be called in a child of `vfork`, or of `fork` in a
//! multithreaded parent, where only async-signal-safe functions may run:
//! the new environment is built without allocating, in a buffer on the
//! stack (or, for a very large environment, a fresh mapping: a system
//! call), and the C library's functions this code calls through were
//! looked up at start ([`resolve`]).

use core::ffi::{c_char, c_int, CStr};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use hugetext_abi::{env, settings};

use crate::reach::{self, Target};
use crate::{clean, config, sys, via};

extern "C" {
    static mut environ: *mut *mut c_char;
}

/// A C library function this library interposes, and where the next
/// definition (the C library's) lives.
struct Real {
    name: &'static CStr,
    at: AtomicUsize,
}

impl Real {
    const fn new(name: &'static CStr) -> Real {
        Real {
            name,
            at: AtomicUsize::new(0),
        }
    }

    /// The C library's definition (looked up once; 0 if it has none).
    fn get(&self) -> usize {
        match self.at.load(Relaxed) {
            0 => {
                // SAFETY: dlsym with a NUL-terminated name.
                let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
                self.at.store(p, Relaxed);
                p
            }
            p => p,
        }
    }
}

static EXECVPE: Real = Real::new(c"execvpe");
static FEXECVE: Real = Real::new(c"fexecve");
static SPAWN: Real = Real::new(c"posix_spawn");
static SPAWNP: Real = Real::new(c"posix_spawnp");
static SYSTEM: Real = Real::new(c"system");
static POPEN: Real = Real::new(c"popen");

/// Look up the C library's functions behind the interposed ones, at
/// start (single-threaded: `dlsym` is not async-signal-safe, and a child
/// of `vfork` must not call it).
pub fn resolve() {
    for r in [&EXECVPE, &FEXECVE, &SPAWN, &SPAWNP, &SYSTEM, &POPEN] {
        r.get();
    }
}

/// `-v` was given to this launcher: a cleared environment at exec is
/// named.
pub static VERBOSE: AtomicBool = AtomicBool::new(false);
/// `LD_PRELOAD`, `LD_AUDIT` and `GLIBC_TUNABLES` entries as `run` set them
/// (copies in memory of their own, 0 when unset), saved by [`save_loader`].
static LOADER: [AtomicUsize; 3] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
/// The initial environment block once cleaned (start, end) and the
/// number of entries in it: the environment this process started with.
static BLOCK: [AtomicUsize; 3] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];

fn cstr(p: *const c_char) -> &'static [u8] {
    // SAFETY: environment strings (or our saved copies) are NUL-terminated
    // and never freed while the process runs this code.
    unsafe { CStr::from_ptr(p).to_bytes() }
}

/// Copy the loader's variables as `run` set them (before they are put
/// back as the user had them). False when nothing could be kept: the
/// caller then leaves them in the environment.
pub fn save_loader() -> bool {
    let names: [&[u8]; 3] = [
        env::LD_PRELOAD.as_bytes(),
        env::LD_AUDIT.as_bytes(),
        env::GLIBC_TUNABLES.as_bytes(),
    ];
    let tunables = config::getenv(settings::TUNABLES.as_bytes()).is_some();
    let mut found: [Option<&'static [u8]>; 3] = [None; 3];
    // SAFETY: single-threaded start-up; `environ` is the NULL-terminated
    // array libc maintains.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let s = cstr(*p);
            for (i, n) in names.iter().enumerate() {
                if found[i].is_none() && s.strip_prefix(*n).is_some_and(|r| r.starts_with(b"=")) {
                    found[i] = Some(s);
                }
            }
            p = p.add(1);
        }
    }
    if !tunables {
        found[2] = None;
    }
    let bytes: usize = found.iter().flatten().map(|s| s.len() + 1).sum();
    if bytes == 0 {
        return true;
    }
    let mem = sys::anon_rw(bytes);
    if mem < 0 {
        return false;
    }
    let mut w = mem as usize;
    for (i, s) in found.iter().enumerate() {
        if let Some(s) = s {
            // SAFETY: a fresh mapping of `bytes` bytes (zeroed: each copy
            // is NUL-terminated), never unmapped.
            unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), w as *mut u8, s.len()) };
            LOADER[i].store(w, Relaxed);
            w += s.len() + 1;
        }
    }
    true
}

/// [`clean::clean`] for a launcher being followed: its `environ` and
/// initial block are cleaned as a program's are (a runtime that copies the
/// environment at start sees nothing of hugetext), after what `run` set
/// for the loader was kept ([`save_loader`]), so that the processes it
/// starts get it all back at exec. When nothing could be kept, the
/// variables stay in `environ` for its processes (`clean::hide`). Runs at
/// single-threaded start-up.
pub fn for_launcher() {
    if !save_loader() || !clean::save() {
        clean::hide();
        return;
    }
    config::strip_preload();
    if let Some((start, end)) = clean::clean() {
        note_block(start, end);
    }
}

/// Record the cleaned initial environment block `[start, end)`: what
/// [`cleared`] compares a new environment with.
fn note_block(start: usize, end: usize) {
    let mut n = 0;
    for_each_in_block(start, end, |_| {
        n += 1;
        true
    });
    BLOCK[0].store(start, Relaxed);
    BLOCK[1].store(end, Relaxed);
    BLOCK[2].store(n, Relaxed);
}

/// Call `f` on each non-empty string of the block until it returns false.
fn for_each_in_block(start: usize, end: usize, mut f: impl FnMut(&[u8]) -> bool) {
    let mut q = start;
    while q < end {
        // SAFETY: the block is the kernel-copied sequence of NUL-terminated
        // strings (NULs after them), the last ending before `end`.
        let s = unsafe { CStr::from_ptr(q as *const c_char) }.to_bytes();
        if !s.is_empty() && !f(s) {
            return;
        }
        q += s.len() + 1;
    }
}

/// Pure: did the caller clear the environment on purpose, keeping `kept`
/// of the `started` entries this process started with (`env -i`, `su -`
/// with its fresh `HOME`, `PATH`, `USER`)? Fewer than half kept.
pub fn cleared(started: usize, kept: usize) -> bool {
    started > 0 && kept * 2 < started
}

/// How many entries of `envp` are entries this process started with
/// (stopping once half are found).
///
/// # Safety
/// `envp` is a NULL-terminated array of NUL-terminated strings.
unsafe fn kept_of_start(envp: *const *const c_char) -> (usize, usize) {
    let (start, end, n) = (BLOCK[0].load(Relaxed), BLOCK[1].load(Relaxed), BLOCK[2].load(Relaxed));
    let mut kept = 0;
    let mut p = envp;
    // SAFETY: the caller's contract.
    unsafe {
        while !(*p).is_null() && kept * 2 < n {
            let a = *p as usize;
            if start <= a && a < end {
                kept += 1;
            } else {
                let e = cstr(*p);
                let mut same = false;
                for_each_in_block(start, end, |s| {
                    same = s == e;
                    !same
                });
                kept += usize::from(same);
            }
            p = p.add(1);
        }
    }
    (n, kept)
}

/// One entry of the environment passed on.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A whole entry (a NUL-terminated string of the caller or the saved
    /// copy), passed on as it is.
    Whole(&'a [u8]),
    /// A new entry: these parts joined.
    Joined(&'a [&'a [u8]]),
}

/// Run's values: the loader's variables as `run` set them (values only).
#[derive(Clone, Copy, Default)]
pub struct Loader<'a> {
    pub preload: Option<&'a [u8]>,
    pub audit: Option<&'a [u8]>,
    pub tunables: Option<&'a [u8]>,
}

fn value<'a>(e: &'a [u8], name: &str) -> Option<&'a [u8]> {
    e.strip_prefix(name.as_bytes())?.strip_prefix(b"=")
}

/// Pure: the environment a followed launcher passes on, from the
/// caller's `envp`, the saved `HUGETEXT_*` entries and `run`'s loader
/// values: `emit` gets each entry in order.
pub fn compose<'a, I>(caller: I, saved: &[&'a [u8]], run: Loader<'a>, mut emit: impl FnMut(Piece<'_>))
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    let of = |name: &str| caller.clone().find_map(|e| value(e, name));
    let mine = |name: &str| caller.clone().find(|e| value(e, name).is_some());
    for e in caller.clone() {
        let ours = e.starts_with(clean::PREFIX)
            || (run.preload.is_some() && value(e, env::LD_PRELOAD).is_some())
            || (run.audit.is_some() && value(e, env::LD_AUDIT).is_some())
            || (run.tunables.is_some() && value(e, env::GLIBC_TUNABLES).is_some());
        if !ours {
            emit(Piece::Whole(e));
        }
    }
    // The loader's lists: this library first, then the caller's own.
    for (name, run_value) in [(env::LD_PRELOAD, run.preload), (env::LD_AUDIT, run.audit)] {
        let Some(lib) = run_value.and_then(|v| env::preload_entries(v).find(|e| env::is_hugetext_preload(e))) else {
            if let (Some(_), Some(e)) = (run_value, mine(name)) {
                emit(Piece::Whole(e));
            }
            continue;
        };
        match (of(name), mine(name)) {
            (Some(v), Some(e)) if env::preload_entries(v).any(env::is_hugetext_preload) => emit(Piece::Whole(e)),
            (Some(v), _) if !v.is_empty() => emit(Piece::Joined(&[name.as_bytes(), b"=", lib, b":", v])),
            _ => emit(Piece::Joined(&[name.as_bytes(), b"=", lib])),
        }
    }
    // GLIBC_TUNABLES: run's addition after the caller's own value, and the
    // note that puts that value back.
    let note = saved
        .iter()
        .find_map(|e| value(e, settings::TUNABLES))
        .zip(run.tunables)
        .and_then(|(note, t)| {
            let keep = env::tunables_restore(note, Some(t))?;
            Some(match keep {
                None | Some(0) => t,
                Some(n) => &t[n + 1..],
            })
        });
    let mut handled_note = false;
    if let Some(added) = note {
        handled_note = true;
        let mut digits = [0u8; 20];
        match of(env::GLIBC_TUNABLES) {
            Some(v)
                if v.windows(env::STATIC_TLS_TUNABLE.len())
                    .any(|w| w == env::STATIC_TLS_TUNABLE.as_bytes()) =>
            {
                // Already there (the caller's own, or ours): as it is.
                emit(Piece::Whole(mine(env::GLIBC_TUNABLES).unwrap_or_default()));
            }
            Some(v) => {
                let sep: &[u8] = if v.is_empty() { b"" } else { b":" };
                emit(Piece::Joined(&[env::GLIBC_TUNABLES.as_bytes(), b"=", v, sep, added]));
                let n = decimal(v.len(), &mut digits);
                emit(Piece::Joined(&[settings::TUNABLES.as_bytes(), b"=", n]));
            }
            None => {
                emit(Piece::Joined(&[env::GLIBC_TUNABLES.as_bytes(), b"=", added]));
                emit(Piece::Joined(&[settings::TUNABLES.as_bytes(), b"=-"]));
            }
        }
    } else if let (Some(_), Some(e)) = (run.tunables, mine(env::GLIBC_TUNABLES)) {
        emit(Piece::Whole(e));
    }
    for e in saved {
        if !(handled_note && value(e, settings::TUNABLES).is_some()) {
            emit(Piece::Whole(e));
        }
    }
}

/// `v` in decimal, in `buf`. Pure.
fn decimal(mut v: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// The C strings of a NULL-terminated array, as byte slices.
///
/// # Safety
/// `p` is a NULL-terminated array of NUL-terminated strings that outlive
/// the iterator.
unsafe fn entries(p: *const *const c_char) -> impl Iterator<Item = &'static [u8]> + Clone {
    #[derive(Clone)]
    struct It(*const *const c_char);
    impl Iterator for It {
        type Item = &'static [u8];
        fn next(&mut self) -> Option<&'static [u8]> {
            // SAFETY: the function's contract: walking the array up to its
            // NULL terminator.
            unsafe {
                if (*self.0).is_null() {
                    return None;
                }
                let s = cstr(*self.0);
                self.0 = self.0.add(1);
                Some(s)
            }
        }
    }
    It(p)
}

/// Where the new environment is written: a pointer table, then strings.
struct Arena {
    table: usize,
    slots: usize,
    n: usize,
    bytes: usize,
    end: usize,
}

impl Arena {
    fn push(&mut self, piece: Piece<'_>) {
        if self.n + 1 >= self.slots {
            return; // counted beforehand: cannot happen
        }
        let p = match piece {
            Piece::Whole(s) => s.as_ptr() as usize,
            Piece::Joined(parts) => {
                let len: usize = parts.iter().map(|s| s.len()).sum();
                if self.bytes + len + 1 > self.end {
                    return;
                }
                let at = self.bytes;
                for s in parts {
                    // SAFETY: inside the arena (checked above), which no
                    // string of the caller's overlaps.
                    unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), self.bytes as *mut u8, s.len()) };
                    self.bytes += s.len();
                }
                // SAFETY: the byte after the string, inside the arena.
                unsafe { *(self.bytes as *mut u8) = 0 };
                self.bytes += 1;
                at
            }
        };
        // SAFETY: slot `n` of the table, below `slots`.
        unsafe {
            *((self.table + self.n * 8) as *mut usize) = p;
            *((self.table + (self.n + 1) * 8) as *mut usize) = 0;
        }
        self.n += 1;
    }
}

/// How `with_env` may place the new environment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// On this stack (the call returns only when it failed, or, for
    /// `posix_spawn`, once the child has its own copy).
    Stack,
    /// In a mapping of its own that outlives the call while other threads
    /// may read it (`environ` swapped around `system`, `popen`).
    Mapped,
}

/// Call `f` with the environment to pass on instead of `envp` (see the
/// module's doc): `envp` itself when there is nothing to add.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings.
pub unsafe fn with_env<R>(
    envp: *const *const c_char,
    room: Room,
    target: Target,
    f: impl FnOnce(*const *const c_char) -> R,
) -> R {
    if !crate::WRAPPER.load(Relaxed) || envp.is_null() {
        return f(envp);
    }
    // SAFETY: the caller's contract.
    let caller = unsafe { entries(envp) };
    let of = |name: &str| caller.clone().find_map(|e| value(e, name));
    let loading = reach::Loading {
        library_path: of("LD_LIBRARY_PATH"),
        own_preload: [env::LD_PRELOAD, env::LD_AUDIT]
            .iter()
            .any(|n| of(n).is_some_and(|v| !v.is_empty())),
        path: config::getenv(b"PATH"),
    };
    // SAFETY: the caller's contract.
    if !unsafe { reach::may_reach(target, &loading) } {
        if VERBOSE.load(Relaxed) {
            not_followed(target);
        }
        // Started as it would be without hugetext: the launcher's
        // environment is clean.
        return f(envp);
    }
    // SAFETY: the caller's contract.
    unsafe { in_launcher(envp, room, f) }
}

/// `-v`: a program the launcher starts without the preload.
fn not_followed(target: Target) {
    let name = match target {
        Target::Path(p) | Target::Search(p) if !p.is_null() => cstr(p),
        _ => b"a program",
    };
    crate::out::line()
        .s("pid ")
        .pid(crate::perfmap::pid())
        .s(": ")
        .bytes(name)
        .s(" starts without the preload: it and its libraries have less than 2 MiB of text each, and none starts programs or loads code");
}

/// [`with_env`] in a followed launcher: apart, so that the buffer on the
/// stack is a frame of its own that a process which is not a launcher
/// never makes (a thread with a small stack calling `posix_spawn`).
///
/// # Safety
/// `envp` is a NULL-terminated array of NUL-terminated strings.
#[inline(never)]
unsafe fn in_launcher<R>(envp: *const *const c_char, room: Room, f: impl FnOnce(*const *const c_char) -> R) -> R {
    let Some(saved) = clean::saved() else {
        return f(envp);
    };
    // SAFETY: the caller's contract.
    let (started, kept) = unsafe { kept_of_start(envp) };
    if cleared(started, kept) {
        if VERBOSE.load(Relaxed) && !via::NAMED_LOSS.swap(true, Relaxed) {
            let mut name = crate::out::Out::<1100>::new(-1);
            via::exe(&mut name);
            crate::out::line()
                .s("pid ")
                .pid(crate::perfmap::pid())
                .s(": ")
                .bytes(name.contents())
                .s(" starts a program with a cleared environment: the preload cannot follow, the chain ends here");
            name.clear();
        }
        return f(envp);
    }
    let loaded = |i: usize| match LOADER[i].load(Relaxed) {
        0 => None,
        p => value(
            cstr(p as *const c_char),
            [env::LD_PRELOAD, env::LD_AUDIT, env::GLIBC_TUNABLES][i],
        ),
    };
    let run = Loader {
        preload: loaded(0),
        audit: loaded(1),
        tunables: loaded(2),
    };
    let mut saved_list = [&b""[..]; 64];
    let mut n_saved = 0;
    // SAFETY: the saved table: NULL-terminated, never freed.
    for e in unsafe { entries(saved) } {
        if n_saved < saved_list.len() {
            saved_list[n_saved] = e;
            n_saved += 1;
        }
    }
    let saved = &saved_list[..n_saved];
    // SAFETY: the caller's contract.
    let caller = unsafe { entries(envp) };
    let (mut slots, mut bytes) = (1usize, 0usize);
    compose(caller.clone(), saved, run, |p| {
        slots += 1;
        if let Piece::Joined(parts) = p {
            bytes += parts.iter().map(|s| s.len()).sum::<usize>() + 1;
        }
    });
    let need = slots * 8 + bytes;
    // Not zeroed, and used from its top end, next to the caller's frame:
    // only what is written is touched (each page of a child's stack first
    // touched is a page fault).
    let mut stack = core::mem::MaybeUninit::<[usize; 2048]>::uninit();
    let room_on_stack = core::mem::size_of_val(&stack);
    let (base, mapped) = if room == Room::Stack && need <= room_on_stack {
        ((stack.as_mut_ptr() as usize + room_on_stack - need) & !7, 0)
    } else {
        let len = need.next_multiple_of(4096);
        let mem = sys::anon_rw(len);
        if mem < 0 {
            return f(envp);
        }
        (mem as usize, len)
    };
    let mut a = Arena {
        table: base,
        slots,
        n: 0,
        bytes: base + slots * 8,
        end: base + need,
    };
    compose(caller, saved, run, |p| a.push(p));
    let r = f(base as *const *const c_char);
    if mapped > 0 && (room == Room::Stack || clean::single_threaded()) {
        // SAFETY: our own mapping, which nothing refers to any more: the
        // call failed (exec) or returned (spawn), or no other thread runs.
        unsafe { sys::munmap(base, mapped) };
    }
    r
}

type ExecvpeFn = unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

fn raw_execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: the execve system call with the caller's pointers (the C
    // library's execve is this call).
    unsafe { libc::syscall(libc::SYS_execve, path, argv, envp) as c_int }
}

fn fail(errno: c_int) -> c_int {
    // SAFETY: errno of the calling thread.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// Interposed `execve`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { with_env(envp, Room::Stack, Target::Path(path), |e| raw_execve(path, argv, e)) }
}

/// Interposed `execv`: `execve` with `environ`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract; `environ` as libc keeps it.
    unsafe { execve(path, argv, environ as *const *const c_char) }
}

/// Interposed `execvpe`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let real = EXECVPE.get();
    if real == 0 {
        return fail(libc::ENOSYS);
    }
    // SAFETY: the C library's execvpe, looked up by name.
    let real: ExecvpeFn = unsafe { core::mem::transmute::<usize, ExecvpeFn>(real) };
    // SAFETY: the caller's contract.
    unsafe { with_env(envp, Room::Stack, Target::Search(file), |e| real(file, argv, e)) }
}

/// Interposed `execvp`: `execvpe` with `environ`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract; `environ` as libc keeps it.
    unsafe { execvpe(file, argv, environ as *const *const c_char) }
}

/// Interposed `fexecve`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    let real = FEXECVE.get();
    if real == 0 {
        return fail(libc::ENOSYS);
    }
    // SAFETY: the C library's fexecve, looked up by name.
    let real: F = unsafe { core::mem::transmute::<usize, F>(real) };
    // SAFETY: the caller's contract.
    unsafe { with_env(envp, Room::Stack, Target::Fd(fd), |e| real(fd, argv, e)) }
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

/// `posix_spawn` or `posix_spawnp` (`real`) with the environment to pass
/// on (the call returns once the child has exec'd or failed to).
///
/// # Safety
/// The C library's contract.
unsafe fn spawn(
    real: &Real,
    pid: *mut libc::pid_t,
    path: *const c_char,
    fa: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let f = real.get();
    if f == 0 {
        return libc::ENOSYS;
    }
    // SAFETY: the C library's function, looked up by name.
    let f: SpawnFn = unsafe { core::mem::transmute::<usize, SpawnFn>(f) };
    let target = match core::ptr::eq(real, &SPAWNP) {
        true => Target::Search(path),
        false => Target::Path(path),
    };
    // SAFETY: the caller's contract.
    unsafe {
        with_env(envp.cast(), Room::Stack, target, |e| {
            f(pid, path, fa, attr, argv, e.cast())
        })
    }
}

/// Interposed `posix_spawn`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    fa: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { spawn(&SPAWN, pid, path, fa, attr, argv, envp) }
}

/// Interposed `posix_spawnp`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    fa: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { spawn(&SPAWNP, pid, file, fa, attr, argv, envp) }
}

/// Run `f` (the C library's `system` or `popen`, which spawn the shell
/// through the library's internal posix_spawn with `environ`) with
/// `environ` pointing at the environment to pass on, then back.
///
/// Threads: the swap is one aligned pointer store each way. Another
/// thread reading the environment meanwhile (`getenv`) sees the old array
/// or the new one, both whole and valid: the new one lives in a mapping
/// of its own that is unmapped afterwards only when this process runs a
/// single thread (otherwise it is left: one small mapping per call in a
/// multithreaded launcher). A thread changing the environment meanwhile
/// (`setenv`, `putenv`, which POSIX does not make thread-safe with other
/// environment access anyway) may have its change undone when `environ`
/// is put back.
///
/// # Safety
/// The C library's contract.
unsafe fn with_environ<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: `environ` as libc keeps it; see above for threads.
    unsafe {
        let old = environ;
        with_env(old as *const *const c_char, Room::Mapped, Target::Shell, |e| {
            if e == old as *const *const c_char {
                return f();
            }
            environ = e as *mut *mut c_char;
            let r = f();
            if environ == e as *mut *mut c_char {
                environ = old;
            }
            r
        })
    }
}

/// Interposed `system`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn system(cmd: *const c_char) -> c_int {
    type F = unsafe extern "C" fn(*const c_char) -> c_int;
    let real = SYSTEM.get();
    if real == 0 {
        return -1;
    }
    // SAFETY: the C library's system, looked up by name.
    let real: F = unsafe { core::mem::transmute::<usize, F>(real) };
    if cmd.is_null() {
        // SAFETY: the caller's contract.
        return unsafe { real(cmd) };
    }
    // SAFETY: the caller's contract.
    unsafe { with_environ(|| real(cmd)) }
}

/// Interposed `popen`.
///
/// # Safety
/// The C library's contract.
#[no_mangle]
pub unsafe extern "C" fn popen(cmd: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    type F = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;
    let real = POPEN.get();
    if real == 0 {
        fail(libc::ENOSYS);
        return core::ptr::null_mut();
    }
    // SAFETY: the C library's popen, looked up by name.
    let real: F = unsafe { core::mem::transmute::<usize, F>(real) };
    // SAFETY: the caller's contract.
    unsafe { with_environ(|| real(cmd, mode)) }
}

/// `execl`, `execlp` and `execle` are C variadic functions, which stable
/// Rust cannot define; on x86-64 and AArch64 Linux a variadic call passes
/// pointer arguments exactly as a call of a function with that many
/// pointer parameters does (registers first, then the stack in order), so
/// these are defined with [`LIST`] pointer parameters after the first and
/// read up to the list's NULL (and, for `execle`, the environment after
/// it). Parameters past the caller's last argument read the caller's own
/// stack frame, which is mapped, and are never used. A list longer than
/// that fails with `E2BIG` (the C library's own limit is the kernel's).
pub const LIST: usize = 31;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod list {
    use super::*;

    /// What the list form stands for.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Form {
        L,
        Lp,
        Le,
    }

    /// The list `a` (an argv array up to its NULL) run as `form`.
    ///
    /// # Safety
    /// The C library's contract for the list form.
    unsafe fn run(form: Form, path: *const c_char, a: &[*const c_char; LIST]) -> c_int {
        let Some(end) = a.iter().position(|p| p.is_null()) else {
            return fail(libc::E2BIG);
        };
        let argv = a.as_ptr();
        // SAFETY: `a[..=end]` is a NULL-terminated argv; the caller's
        // contract for the rest.
        unsafe {
            match form {
                Form::L => execv(path, argv),
                Form::Lp => execvp(path, argv),
                Form::Le => match a.get(end + 1) {
                    Some(&envp) => execve(path, argv, envp as *const *const c_char),
                    None => fail(libc::E2BIG),
                },
            }
        }
    }

    macro_rules! list_form {
        ($name:ident, $form:expr) => {
            /// Interposed list form of exec (see [`LIST`]).
            ///
            /// # Safety
            /// The C library's contract.
            #[no_mangle]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "C" fn $name(
                path: *const c_char,
                a0: *const c_char,
                a1: *const c_char,
                a2: *const c_char,
                a3: *const c_char,
                a4: *const c_char,
                a5: *const c_char,
                a6: *const c_char,
                a7: *const c_char,
                a8: *const c_char,
                a9: *const c_char,
                a10: *const c_char,
                a11: *const c_char,
                a12: *const c_char,
                a13: *const c_char,
                a14: *const c_char,
                a15: *const c_char,
                a16: *const c_char,
                a17: *const c_char,
                a18: *const c_char,
                a19: *const c_char,
                a20: *const c_char,
                a21: *const c_char,
                a22: *const c_char,
                a23: *const c_char,
                a24: *const c_char,
                a25: *const c_char,
                a26: *const c_char,
                a27: *const c_char,
                a28: *const c_char,
                a29: *const c_char,
                a30: *const c_char,
            ) -> c_int {
                let a = [
                    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21,
                    a22, a23, a24, a25, a26, a27, a28, a29, a30,
                ];
                // SAFETY: the caller's contract.
                unsafe { run($form, path, &a) }
            }
        };
    }

    list_form!(execl, Form::L);
    list_form!(execlp, Form::Lp);
    list_form!(execle, Form::Le);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composed(caller: &[&str], saved: &[&str], run: Loader<'_>) -> Vec<String> {
        let saved: Vec<&[u8]> = saved.iter().map(|s| s.as_bytes()).collect();
        let mut out = Vec::new();
        compose(caller.iter().map(|s| s.as_bytes()), &saved, run, |p| {
            out.push(match p {
                Piece::Whole(s) => String::from_utf8_lossy(s).into_owned(),
                Piece::Joined(parts) => parts.iter().map(|s| String::from_utf8_lossy(s)).collect(),
            })
        });
        out
    }

    const LIB: &str = "/opt/ht/libhugetext.so";

    #[test]
    fn a_launchers_children_get_the_settings_back_with_the_callers_own_entries() {
        let run = Loader {
            preload: Some(b"/opt/ht/libhugetext.so:libm.so.6"),
            audit: Some(LIB.as_bytes()),
            tunables: Some(b"glibc.malloc.arena_max=2:glibc.rtld.optional_static_tls=33280"),
        };
        let saved = ["HUGETEXT_VIA=1:1:0:", "HUGETEXT_TUNABLES=24"];
        // The caller's environment as the launcher has it: the user's own
        // LD_PRELOAD and GLIBC_TUNABLES, one more variable of its own.
        let got = composed(
            &[
                "PATH=/usr/bin",
                "LD_PRELOAD=libm.so.6",
                "GLIBC_TUNABLES=glibc.malloc.arena_max=2",
                "MINE=1",
            ],
            &saved,
            run,
        );
        assert_eq!(
            got,
            [
                "PATH=/usr/bin",
                "MINE=1",
                &format!("LD_PRELOAD={LIB}:libm.so.6"),
                &format!("LD_AUDIT={LIB}"),
                "GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.rtld.optional_static_tls=33280",
                "HUGETEXT_TUNABLES=24",
                "HUGETEXT_VIA=1:1:0:",
            ]
        );
        // A caller that dropped the user's tunables and preload: only ours,
        // and the note says there was no value.
        let got = composed(&["PATH=/usr/bin"], &saved, run);
        assert_eq!(
            got,
            [
                "PATH=/usr/bin",
                &format!("LD_PRELOAD={LIB}"),
                &format!("LD_AUDIT={LIB}"),
                "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=33280",
                "HUGETEXT_TUNABLES=-",
                "HUGETEXT_VIA=1:1:0:",
            ]
        );
        // Never twice: entries already there (a copy of the environment
        // made before the preload cleaned it) stay as they are.
        let got = composed(
            &[
                &format!("LD_PRELOAD={LIB}"),
                "HUGETEXT_VIA=0:0:0:",
                "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=33280",
            ],
            &saved,
            run,
        );
        assert_eq!(
            got,
            [
                &format!("LD_PRELOAD={LIB}"),
                &format!("LD_AUDIT={LIB}"),
                "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=33280",
                "HUGETEXT_VIA=1:1:0:",
            ]
        );
    }

    #[test]
    fn without_tunables_run_changed_the_callers_are_kept() {
        let run = Loader {
            preload: Some(LIB.as_bytes()),
            audit: None,
            tunables: None,
        };
        let got = composed(
            &["GLIBC_TUNABLES=glibc.malloc.arena_max=2", "LD_AUDIT=/x/audit.so"],
            &["HUGETEXT_STRATEGY=copy"],
            run,
        );
        assert_eq!(
            got,
            [
                "GLIBC_TUNABLES=glibc.malloc.arena_max=2",
                "LD_AUDIT=/x/audit.so",
                &format!("LD_PRELOAD={LIB}"),
                "HUGETEXT_STRATEGY=copy",
            ]
        );
    }

    #[test]
    fn an_environment_cleared_on_purpose_is_recognised() {
        // env -i: nothing kept.
        assert!(cleared(30, 0));
        // su -: TERM kept, HOME/PATH/USER/SHELL fresh.
        assert!(cleared(30, 1));
        assert!(cleared(5, 2));
        // A shell that exports a few variables of its own, or su without
        // `-` (HOME, SHELL, USER, LOGNAME changed).
        assert!(!cleared(30, 26));
        assert!(!cleared(10, 6));
        assert!(!cleared(4, 2));
        // Started with nothing: nothing to compare with.
        assert!(!cleared(0, 0));
    }

    #[test]
    fn decimal_numbers() {
        let mut b = [0u8; 20];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(1234, &mut b), b"1234");
    }
}
