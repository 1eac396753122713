//! Following wrappers to the real program. Many programs are started
//! through a wrapper that execs them: a shell script (Debian's chromium),
//! a version manager's shim (pyenv, nvm), `env`. Such a process has no text
//! worth remapping (no whole PMD-size window in any executable mapping);
//! when the preload finds itself in one, it stays in the environment, so
//! that the program the wrapper execs loads it too, hop by hop (at most
//! `MAX_HOPS`), until a program with text: from there on the default
//! applies (its children run plain). `HUGETEXT_VIA` carries the wrapper's
//! pid, the hops so far and their names. A process that a wrapper forked
//! (a helper it runs before its exec) has another pid: it is a child, and
//! runs plain.

use core::ffi::{c_char, CStr};
use core::sync::atomic::Ordering::Relaxed;

use hugetext_abi::{env, settings};

use crate::out::{line, Out};
use crate::{config, engine, maps, perfmap, sys};

/// Where this process stands in a chain of wrappers (`HUGETEXT_VIA`).
pub struct Via {
    pub pid: u32,
    pub hops: u32,
    pub chain: &'static [u8],
}

/// What the preload does after its pass.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A wrapper: keep the preload for the program it execs.
    Follow,
    /// A program with text (or the last hop allowed): the default applies.
    Stop,
}

/// Pure: a process without text worth remapping is followed, within the
/// bound.
pub fn next(has_text: bool, hops: u32) -> Next {
    if !has_text && hops < env::MAX_HOPS {
        Next::Follow
    } else {
        Next::Stop
    }
}

impl Via {
    pub fn from_env() -> Via {
        let (pid, hops, chain) = env::parse_via(config::getenv(settings::VIA.as_bytes()).unwrap_or(b""));
        Via { pid, hops, chain }
    }

    /// A process a wrapper forked (then exec'd): its child, not the wrapper
    /// become the program (an exec keeps the pid).
    pub fn forked_by_wrapper(&self) -> bool {
        // Not knowing this process's pid (a seccomp filter), it may be one:
        // run plain, the safe side.
        self.pid != 0 && Some(self.pid) != perfmap::pid()
    }

    /// Record this process as the next wrapper in `HUGETEXT_VIA` (a new
    /// string in fresh memory, put in the variable's slot of the
    /// environment, which the program reads when it execs). False when the
    /// environment has no such slot (not started by `run`).
    pub fn follow(&self, argv: &[*const c_char]) -> bool {
        let Some(slot) = config::slot(settings::VIA) else {
            return false;
        };
        // What tells the program exec'd from a child forked on the way.
        let Some(pid) = perfmap::pid() else {
            return false;
        };
        let mut name = Out::<1100>::new(-1);
        name_self(&mut name, argv);
        let mut o = Out::<4096>::new(-1);
        o.s(settings::VIA)
            .s("=")
            .u(u64::from(pid))
            .s(":")
            .u(self.hops as u64 + 1)
            .s(":");
        if !self.chain.is_empty() {
            // Names too long for the buffer are elided, never cut.
            if self.chain.len() + name.contents().len() + 64 < o.room() {
                o.bytes(self.chain);
            } else {
                o.s("...");
            }
            o.s(" -> ");
        }
        o.bytes(name.contents()).s("\0");
        let s = o.contents();
        let mem = sys::mmap(
            s.len(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if mem < 0 {
            return false;
        }
        // SAFETY: a fresh private mapping of `s.len()` bytes, never unmapped
        // (the environment refers to it until exec); `slot` is the
        // variable's entry in `environ`, at single-threaded start-up.
        unsafe {
            core::ptr::copy_nonoverlapping(s.as_ptr(), mem as *mut u8, s.len());
            *slot = mem as *mut c_char;
        }
        true
    }
}

/// Does any executable mapping other than this library's hold a whole
/// PMD-size window? (Unreadable maps: assume so, and follow nothing.)
pub fn has_text() -> bool {
    let me = has_text as *const () as usize;
    let mut buf = [0u8; 4096];
    let mut found = false;
    let r = maps::for_each(&mut buf, |l| {
        let own = l.start <= me && me < l.end;
        found |= &l.perms == b"r-xp" && !own && engine::window_bytes(l.start, l.end) > 0;
    });
    found || r.is_err()
}

/// This process's executable (`/proc/self/exe`).
fn exe(o: &mut Out<1100>) {
    let mut buf = [0u8; 512];
    let n = sys::readlink(b"/proc/self/exe\0", &mut buf);
    if n > 0 {
        o.bytes(&buf[..n as usize]);
    } else {
        o.s("?");
    }
}

/// "SCRIPT (INTERPRETER)" when one of the first arguments is a `#!` script
/// (the kernel runs `INTERPRETER [ARG] SCRIPT ...`), else the executable.
fn name_self(o: &mut Out<1100>, argv: &[*const c_char]) {
    for &a in argv.iter().skip(1).take(2) {
        // SAFETY: the process's NUL-terminated arguments.
        let arg = unsafe { CStr::from_ptr(a) };
        if arg.to_bytes().len() < 512 && starts_with_hashbang(arg.to_bytes_with_nul()) {
            let mut path = Out::<1100>::new(-1);
            exe(&mut path);
            let p = path.contents();
            let base = &p[p.iter().rposition(|&c| c == b'/').map_or(0, |i| i + 1)..];
            o.bytes(arg.to_bytes()).s(" (").bytes(base).s(")");
            path.clear();
            return;
        }
    }
    exe(o);
}

fn starts_with_hashbang(path: &[u8]) -> bool {
    let fd = sys::open(path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC, 0);
    if fd < 0 {
        return false;
    }
    let mut head = [0u8; 2];
    let n = sys::read(fd as i32, &mut head);
    sys::close(fd as i32);
    n == 2 && &head == b"#!"
}

/// Where a process that loaded the preload without `--inherit` stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// A process a wrapper forked: it runs plain, nothing more to say.
    Plain,
    /// A wrapper: no pass (it has no text in whole windows), the preload
    /// stays for the program it execs.
    Wrapper,
    /// The program (or the last hop): the pass ran, the default applies.
    Program,
}

/// The start-up decision around the pass, for a process that loaded the
/// preload without `--inherit`: a wrapper's forked child runs plain; a
/// wrapper keeps the preload for what it execs, without a pass of its own
/// (nothing to remap, nothing to report but the hop and what happens to
/// objects it loads after start, `late`); a program with text
/// (or the last hop) runs the pass, removes the preload, and with `-v`
/// names the chain that led to it.
pub fn at_start(cfg: &config::Config, argv: &[*const c_char], late: &str, pass: impl FnOnce()) -> Start {
    let via = Via::from_env();
    if via.forked_by_wrapper() {
        crate::PLAIN.store(true, Relaxed);
        config::strip_preload();
        config::remove(settings::VIA);
        return Start::Plain;
    }
    let has_text = has_text();
    if next(has_text, via.hops) == Next::Follow && via.follow(argv) {
        if cfg.verbose {
            let mut name = Out::<1100>::new(-1);
            name_self(&mut name, argv);
            line()
                .s("pid ")
                .pid(perfmap::pid())
                .s(": ")
                .bytes(name.contents())
                .s(" has no text in whole windows: if it execs a program, the preload stays for it (wrapper ")
                .u(via.hops as u64 + 1)
                .s(" of at most ")
                .u(env::MAX_HOPS as u64)
                .s("); objects it dlopens ")
                .s(late);
            name.clear();
        }
        return Start::Wrapper;
    }
    pass();
    config::strip_preload();
    config::remove(settings::VIA);
    if cfg.verbose && via.hops > 0 {
        let mut o = line();
        o.s("pid ")
            .pid(perfmap::pid())
            .s(": via ")
            .u(via.hops as u64)
            .s(if via.hops == 1 { " wrapper: " } else { " wrappers: " })
            .bytes(via.chain)
            .s(" -> ");
        let mut name = Out::<1100>::new(-1);
        exe(&mut name);
        o.bytes(name.contents());
        name.clear();
        if !has_text {
            o.s(" (the last wrapper followed; it has no text in whole windows either)");
        }
    }
    Start::Program
}

/// A process that started as a wrapper has just had text remapped that it
/// loaded after start (a program whose text is all in libraries it
/// `dlopen`s, as firefox-esr's in libxul): it is the program, not a
/// wrapper, so from now on its children start as they would without
/// hugetext: the preload leaves the environment and `GLIBC_TUNABLES` is put
/// back, as at the start of a program. Runs in the preload's copy (its libc
/// owns `environ`), called by the auditor's copy right after the pass.
pub extern "C" fn became_program() {
    if !crate::WRAPPER.swap(false, Relaxed) {
        return;
    }
    config::strip_preload();
    config::remove(settings::VIA);
    if config::Config::from_env().verbose {
        line()
            .s("pid ")
            .pid(perfmap::pid())
            .s(": text loaded after start was remapped: not a wrapper after all; the processes it starts from now on run without the preload");
    }
    crate::clean::clean_later();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_are_followed_up_to_the_bound() {
        assert_eq!(next(false, 0), Next::Follow);
        assert_eq!(next(false, env::MAX_HOPS - 1), Next::Follow);
        assert_eq!(next(false, env::MAX_HOPS), Next::Stop);
        assert_eq!(next(true, 0), Next::Stop);
    }
}
