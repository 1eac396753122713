//! A clean world for the program: once the preload has read its settings,
//! the `HUGETEXT_*` variables leave the environment, and so do they (with
//! what was taken out of `LD_PRELOAD`, `LD_AUDIT` and `GLIBC_TUNABLES`)
//! from the initial environment block on the stack, the bytes
//! `/proc/PID/environ` shows (mm->env_start..env_end, which a process
//! cannot move without CAP_SYS_RESOURCE: the strings that stay are moved
//! together, `environ` points at their new places, and the tail is NULs).
//!
//! The settings stay readable by this library (objects loaded after start
//! are remapped with them): a copy of the `HUGETEXT_*` entries is kept in
//! memory of its own ([`saved`]), which the auditor's copy of the library
//! reads too (`audit::saved_word`).

use core::ffi::c_char;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::sys;

extern "C" {
    static mut environ: *mut *mut c_char;
}

/// The prefix of this library's settings.
pub const PREFIX: &[u8] = hugetext_abi::settings::PREFIX.as_bytes();

/// The address of the saved settings (a NULL-terminated array of
/// NUL-terminated `NAME=value` strings), 0 until [`clean`] ran.
pub static SAVED: AtomicUsize = AtomicUsize::new(0);

/// The address of the preload copy's [`SAVED`], once the auditor copy
/// found it (`audit::find_preload` sets it).
pub static SAVED_AT: AtomicUsize = AtomicUsize::new(0);

/// Where this process's saved settings are published ([`SAVED`]): the
/// preload copy's word when this copy is the auditor and found it.
fn saved_word() -> &'static AtomicUsize {
    match SAVED_AT.load(Relaxed) {
        0 => &SAVED,
        // SAFETY: the preload copy's `SAVED`, at the same offset in the
        // same file (checked in `audit::find_preload`), never unloaded.
        p => unsafe { &*(p as *const AtomicUsize) },
    }
}

/// The saved settings of this process, if the environment was cleaned.
pub fn saved() -> Option<*const *const c_char> {
    match saved_word().load(Relaxed) {
        0 => None,
        p => Some(p as *const *const c_char),
    }
}

fn cstr(p: *const c_char) -> &'static [u8] {
    // SAFETY: environment strings (or our saved copies) are NUL-terminated
    // and never freed.
    unsafe { core::ffi::CStr::from_ptr(p).to_bytes() }
}

/// Copy the `HUGETEXT_*` entries of the environment into a fresh mapping
/// and publish it in [`SAVED`]. False when nothing could be saved.
pub fn save() -> bool {
    if SAVED.load(Relaxed) != 0 {
        return true;
    }
    // SAFETY: single-threaded start-up; `environ` is the NULL-terminated
    // array libc maintains.
    let env = unsafe { environ };
    if env.is_null() {
        return false;
    }
    let (mut n, mut bytes) = (0usize, 0usize);
    let mut p = env;
    // SAFETY: walking the array up to its NULL terminator.
    unsafe {
        while !(*p).is_null() {
            let s = cstr(*p);
            if s.starts_with(PREFIX) {
                n += 1;
                bytes += s.len() + 1;
            }
            p = p.add(1);
        }
    }
    let table = (n + 1) * core::mem::size_of::<usize>();
    let len = table + bytes;
    let mem = sys::anon_rw(len);
    if mem < 0 {
        return false;
    }
    let base = mem as usize;
    let (mut i, mut w) = (0usize, base + table);
    let mut p = env;
    // SAFETY: a fresh mapping of `len` bytes (zeroed: the table's last slot
    // is its NULL), filled with `n` pointers and `bytes` bytes; never
    // unmapped.
    unsafe {
        while !(*p).is_null() {
            let s = cstr(*p);
            if s.starts_with(PREFIX) && i < n {
                core::ptr::copy_nonoverlapping(s.as_ptr(), w as *mut u8, s.len());
                *((w + s.len()) as *mut u8) = 0;
                *((base + i * core::mem::size_of::<usize>()) as *mut usize) = w;
                w += s.len() + 1;
                i += 1;
            }
            p = p.add(1);
        }
    }
    SAVED.store(base, Relaxed);
    true
}

/// Remove every `HUGETEXT_*` entry from `environ`.
fn remove_settings() {
    // SAFETY: single-threaded start-up; entries are shifted down within
    // the NULL-terminated array.
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return;
        }
        while !(*p).is_null() {
            if cstr(*p).starts_with(PREFIX) {
                let mut q = p;
                loop {
                    *q = *q.add(1);
                    if (*q).is_null() {
                        break;
                    }
                    q = q.add(1);
                }
            } else {
                p = p.add(1);
            }
        }
    }
}

/// `env_start` and `env_end` of this process (fields 50 and 51 of
/// `/proc/self/stat`).
fn env_block() -> Option<(usize, usize)> {
    let mut buf = [0u8; 1024];
    let mut r = None;
    crate::maps::for_each_line(b"/proc/self/stat\0", &mut buf, |l| {
        r = block_of_stat(l);
        false
    })
    .ok()?;
    r
}

/// (env_start, env_end) from a `/proc/PID/stat` line. Pure.
fn block_of_stat(l: &[u8]) -> Option<(usize, usize)> {
    // Fields 3.. follow the command name, which may hold spaces and
    // parentheses.
    let i = l.iter().rposition(|&c| c == b')')?;
    let mut f = l[i + 1..].split(|&c| c == b' ').filter(|f| !f.is_empty()).skip(47);
    let dec = |s: &[u8]| -> Option<usize> {
        s.iter().try_fold(0usize, |v, &c| {
            c.is_ascii_digit()
                .then(|| v.checked_mul(10)?.checked_add((c - b'0') as usize))?
        })
    };
    let (a, z) = (dec(f.next()?)?, dec(f.next()?)?);
    (a != 0 && a < z).then_some((a, z))
}

/// Rewrite the initial environment block: the strings `environ` still
/// names in it (and, with `tunables_back`, the loader's copy of
/// `GLIBC_TUNABLES`, as the program sees it), moved together in their
/// order, `environ` pointed at them, NULs after. Left as it is when the
/// entries are not in increasing order of address (something rearranged
/// them: moving could overwrite one). Returns the block once rewritten.
fn compact(tunables_back: bool) -> Option<(usize, usize)> {
    let (start, end) = env_block()?;
    // SAFETY: single-threaded start-up. The block is the process's own
    // stack memory (writable); entries inside it are the kernel-copied
    // strings, and each is copied to an address not above its own (the
    // order check), so no string is overwritten before it moves.
    unsafe {
        let env = environ;
        if env.is_null() {
            return None;
        }
        let mut last = 0usize;
        let mut p = env;
        while !(*p).is_null() {
            let a = *p as usize;
            if start <= a && a < end {
                if a <= last {
                    return None;
                }
                last = a;
            }
            p = p.add(1);
        }
        let mut w = start;
        let mut p = env;
        while !(*p).is_null() {
            let a = *p as usize;
            if start <= a && a < end {
                let n = cstr(*p).len() + 1;
                if a + n > end {
                    return None;
                }
                core::ptr::copy(a as *const u8, w as *mut u8, n);
                *p = w as *mut c_char;
                w += n;
            } else if tunables_back && cstr(*p).starts_with(b"GLIBC_TUNABLES=") {
                // The loader's copy (glibc before 2.40 points the entry at
                // it): its bytes go where the original was, if they fit
                // before the next string still to move; the entry keeps
                // pointing at the copy.
                let n = cstr(*p).len() + 1;
                let mut q = p.add(1);
                let mut limit = end;
                while !(*q).is_null() {
                    let b = *q as usize;
                    if start <= b && b < end {
                        limit = b;
                        break;
                    }
                    q = q.add(1);
                }
                if w + n <= limit {
                    core::ptr::copy_nonoverlapping(*p as *const u8, w as *mut u8, n);
                    w += n;
                }
            }
            p = p.add(1);
        }
        core::ptr::write_bytes(w as *mut u8, 0, end - w);
    }
    Some((start, end))
}

/// With `--inherit` the environment is left as it is, but glibc before
/// 2.40 points the `GLIBC_TUNABLES` entry of `environ` at the loader's own
/// copy, outside the initial block: a program that measures the room for
/// its process title over its arguments and the environment strings that
/// follow them (chromium, postgres, nginx: contiguous strings only) stops
/// there. When the block still holds the same bytes (the original string,
/// which the loader copied without changing), the entry points back at
/// them. Runs at single-threaded start-up.
pub fn tunables_in_block() {
    let Some((start, end)) = env_block() else { return };
    // SAFETY: single-threaded start-up; `environ` is the NULL-terminated
    // array libc maintains. The block `[start, end)` is the kernel-copied
    // sequence of NUL-terminated strings, the last ending before `end`:
    // each string read from a string start stays inside it.
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return;
        }
        while !(*p).is_null() && !cstr(*p).starts_with(b"GLIBC_TUNABLES=") {
            p = p.add(1);
        }
        if (*p).is_null() {
            return;
        }
        let a = *p as usize;
        if start <= a && a < end {
            return;
        }
        let want = cstr(*p);
        let mut q = start;
        while q < end {
            let s = cstr(q as *const c_char);
            if s == want {
                *p = q as *mut c_char;
                return;
            }
            q += s.len() + 1;
        }
    }
}

/// Does this process run one thread (`Threads:` of `/proc/self/status`)?
pub fn single_threaded() -> bool {
    let mut buf = [0u8; 512];
    let mut one = false;
    let _ = crate::maps::for_each_line(b"/proc/self/status\0", &mut buf, |l| {
        match l.strip_prefix(b"Threads:") {
            Some(v) => {
                one = v.iter().filter(|c| !c.is_ascii_whitespace()).eq(b"1".iter());
                false
            }
            None => true,
        }
    });
    one
}

/// [`clean`] for a process that may run other threads by now (a wrapper
/// that turned out to be the program when text it loaded later was
/// remapped): the strings of the initial block are moved only while no
/// other thread can be reading them.
pub fn clean_later() {
    if save() {
        remove_settings();
        if single_threaded() {
            compact(true);
        }
    }
}

/// Save the settings, then take them (and what `run` added to the loader's
/// variables: see `config::strip_preload`) out of the environment and of
/// the initial environment block. Runs at single-threaded start-up.
/// Returns the block once rewritten.
pub fn clean() -> Option<(usize, usize)> {
    if !save() {
        // Without a copy, objects loaded later would lose the settings:
        // leave them.
        return None;
    }
    remove_settings();
    compact(true)
}

/// Is the environment entry `s` one `run` set or changed for the preload:
/// a setting, a loader list naming libhugetext.so, or `GLIBC_TUNABLES`
/// when `run` changed it (`tunables`: `HUGETEXT_TUNABLES` is set)? Pure.
fn ours(s: &[u8], tunables: bool) -> bool {
    use hugetext_abi::env::{is_hugetext_preload, preload_entries};
    let loader = |name: &[u8]| {
        s.strip_prefix(name)
            .and_then(|r| r.strip_prefix(b"="))
            .is_some_and(|v| preload_entries(v).any(is_hugetext_preload))
    };
    s.starts_with(PREFIX)
        || loader(b"LD_PRELOAD")
        || loader(b"LD_AUDIT")
        || (tunables && s.starts_with(b"GLIBC_TUNABLES="))
}

/// A launcher being followed whose settings could not be kept apart
/// (`exec::for_launcher`) keeps the preload's variables in `environ` (the
/// processes it starts inherit them), but `/proc/PID/environ` of a
/// process that lives as long as its server (`mysqld_safe`, a shell
/// waiting for its child) shows them no more: they are copied to memory
/// of their own, `environ` pointed at the copies, and the initial block
/// rewritten without them. Runs at single-threaded start-up.
pub fn hide() {
    // SAFETY: single-threaded start-up; `environ` is the NULL-terminated
    // array libc maintains.
    let env = unsafe { environ };
    if env.is_null() {
        return;
    }
    // `run` changed GLIBC_TUNABLES when it set HUGETEXT_TUNABLES (the
    // user's own value, kept to put back).
    let tunables = {
        let name = hugetext_abi::settings::TUNABLES.as_bytes();
        let mut p = env;
        let mut found = false;
        // SAFETY: walking the NULL-terminated array up to its terminator.
        unsafe {
            while !found && !(*p).is_null() {
                found = cstr(*p).strip_prefix(name).is_some_and(|r| r.starts_with(b"="));
                p = p.add(1);
            }
        }
        found
    };
    let mut bytes = 0usize;
    let mut p = env;
    // SAFETY: walking the array up to its NULL terminator.
    unsafe {
        while !(*p).is_null() {
            let s = cstr(*p);
            if ours(s, tunables) {
                bytes += s.len() + 1;
            }
            p = p.add(1);
        }
    }
    if bytes == 0 {
        return;
    }
    let mem = sys::anon_rw(bytes);
    if mem < 0 {
        return;
    }
    let mut w = mem as usize;
    let mut p = env;
    // SAFETY: a fresh mapping of `bytes` bytes, filled with the NUL-
    // terminated entries counted above (the environment did not change
    // in between), never unmapped: the environment refers to it until
    // exec.
    unsafe {
        while !(*p).is_null() {
            let s = cstr(*p);
            if ours(s, tunables) {
                core::ptr::copy_nonoverlapping(s.as_ptr(), w as *mut u8, s.len());
                *((w + s.len()) as *mut u8) = 0;
                *p = w as *mut c_char;
                w += s.len() + 1;
            }
            p = p.add(1);
        }
    }
    compact(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_run_put_in_the_environment_is_ours() {
        assert!(ours(b"HUGETEXT_VIA=1:1:0:sh", false));
        assert!(ours(b"LD_PRELOAD=/opt/ht/libhugetext.so libm.so.6", false));
        assert!(ours(b"LD_AUDIT=/opt/ht/libhugetext.so", false));
        assert!(ours(b"GLIBC_TUNABLES=glibc.rtld.optional_static_tls=33280", true));
        assert!(!ours(b"GLIBC_TUNABLES=glibc.malloc.arena_max=2", false));
        assert!(!ours(b"LD_PRELOAD=libm.so.6", false));
        assert!(!ours(b"LD_PRELOAD=/x/libhugetextual.so", false));
        assert!(!ours(b"PATH=/usr/bin", true));
        // Not a setting: the prefix inside another name.
        assert!(!ours(concat!("MY_", "HUGETEXT", "_NOTE=1").as_bytes(), true));
    }

    #[test]
    fn env_block_fields_of_stat() {
        let mut l = b"12 (a) b) c) S".to_vec();
        for i in 4..=52 {
            l.extend_from_slice(
                format!(
                    " {}",
                    if i == 50 {
                        1000
                    } else if i == 51 {
                        2000
                    } else {
                        i
                    }
                )
                .as_bytes(),
            );
        }
        assert_eq!(block_of_stat(&l), Some((1000, 2000)));
        assert_eq!(block_of_stat(b"12 (a) S 1 2"), None);
    }
}
