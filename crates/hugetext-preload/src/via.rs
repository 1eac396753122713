//! Following launchers to the real program. Many programs are started
//! through a launcher: a shell script (Debian's chromium, `mysqld_safe`), a
//! version manager's shim (pyenv, nvm), `env`, `su`, `runuser`,
//! `start-stop-daemon`, `pg_ctl`; some exec the program, others fork a
//! child that does. A launcher has no text of its own worth remapping: no
//! whole PMD-size window in any executable mapping, and an executable with
//! less than `LAUNCHER_TEXT` of text. When the preload finds itself in
//! one, it stays in the environment, so that every process the launcher
//! starts (by exec or fork + exec) loads it too and is judged the same
//! way, until a program with text: its text is remapped and from there on
//! the default applies (its children run plain). A program with text but
//! no whole window (python3.11 as Debian builds it) has nothing to remap
//! and is followed like a launcher, but counts: at most `MAX_HOPS` of them
//! in one chain. `HUGETEXT_VIA` carries the last process's pid, the hops
//! and judged programs so far, and their names.

use core::ffi::{c_char, CStr};
use core::sync::atomic::Ordering::Relaxed;

use hugetext_abi::{env, settings};

use crate::out::{line, Out};
use crate::{config, engine, perfmap, sys};

/// Where this process stands in a chain of launchers (`HUGETEXT_VIA`).
pub struct Via {
    pub hops: u32,
    pub judged: u32,
    pub chain: &'static [u8],
}

/// What a process is, for the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No whole window and little text of its own: followed freely.
    Launcher,
    /// Text of its own (`LAUNCHER_TEXT` or more) but no whole window:
    /// nothing to remap; followed, counting against `MAX_HOPS`.
    Judged,
    /// A whole window somewhere: the program.
    Program,
}

/// Pure: what a process with (or without) a whole window and `own_text`
/// bytes of text in its executable is.
pub fn kind(window: bool, own_text: u64) -> Kind {
    if window {
        Kind::Program
    } else if own_text < env::LAUNCHER_TEXT {
        Kind::Launcher
    } else {
        Kind::Judged
    }
}

/// What the preload does after its pass.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Keep the preload for the processes this one starts.
    Follow,
    /// The chain ends here: the default applies.
    Stop(End),
}

/// Why a chain ends at a process.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// A program with text: the chain reached it.
    Program,
    /// `MAX_HOPS` programs with text but no whole window were followed.
    Judged,
    /// `MAX_LAUNCHERS` processes were followed (a loop of launchers).
    Hops,
}

/// Pure: is a process of `kind`, after `hops` followed of which `judged`
/// programs with text, followed?
pub fn next(kind: Kind, hops: u32, judged: u32) -> Next {
    match kind {
        Kind::Program => Next::Stop(End::Program),
        _ if hops >= env::MAX_LAUNCHERS => Next::Stop(End::Hops),
        Kind::Judged if judged >= env::MAX_HOPS => Next::Stop(End::Judged),
        _ => Next::Follow,
    }
}

impl Via {
    pub fn from_env() -> Via {
        let v = env::parse_via(config::getenv(settings::VIA.as_bytes()).unwrap_or(b""));
        Via {
            hops: v.hops,
            judged: v.judged,
            chain: v.chain,
        }
    }

    /// Record this process as the next hop in `HUGETEXT_VIA` (a new
    /// string in fresh memory, put in the variable's slot of the
    /// environment, which the processes it starts inherit). False when the
    /// environment has no such slot (not started by `run`). The chain's
    /// names are only said with `-v` (`named`): without it they are not
    /// looked up (no `/proc/self/exe` link read, no script opened), so that
    /// a launcher pays as little as it can.
    pub fn follow(&self, argv: &[*const c_char], kind: Kind, named: bool) -> bool {
        let Some(slot) = config::slot(settings::VIA) else {
            return false;
        };
        let Some(pid) = perfmap::pid() else {
            return false;
        };
        let mut name = Out::<1100>::new(-1);
        if named {
            name_self(&mut name, argv);
        }
        let mut o = Out::<4096>::new(-1);
        o.s(settings::VIA)
            .s("=")
            .u(u64::from(pid))
            .s(":")
            .u(self.hops as u64 + 1)
            .s(":")
            .u(self.judged as u64 + u64::from(kind == Kind::Judged))
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
        let mem = sys::anon_rw(s.len());
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

/// (Does any executable mapping other than this library's hold a whole
/// PMD-size window?, bytes of text of the executable: the executable
/// mappings of the object that holds the entry point). Read from the
/// loaded objects' program headers (`dl_iterate_phdr`: no /proc read in
/// every process `run` reaches): at start-up the text mappings are the
/// loader's, one per readable, executable and not writable `PT_LOAD`, each
/// a `r-xp` line of /proc/self/maps.
pub fn text_facts() -> (bool, u64) {
    struct Facts {
        me: usize,
        entry: usize,
        page: usize,
        window: bool,
        own: u64,
    }
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> i32 {
        const PF_X: u32 = 1;
        const PF_W: u32 = 2;
        const PF_R: u32 = 4;
        // SAFETY: the C library passes a valid info for the call, and
        // `data` is the `Facts` `text_facts` passed.
        let (info, f) = unsafe { (&*info, &mut *(data as *mut Facts)) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: the object's program headers, as the loader keeps them.
        let phdrs = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let text = |p: &&libc::Elf64_Phdr| p.p_type == libc::PT_LOAD && p.p_flags & (PF_R | PF_W | PF_X) == PF_R | PF_X;
        let range = |p: &libc::Elf64_Phdr| {
            let a = (info.dlpi_addr as usize).wrapping_add(p.p_vaddr as usize);
            (
                a & !(f.page - 1),
                a.wrapping_add(p.p_memsz as usize).next_multiple_of(f.page),
            )
        };
        if phdrs.iter().filter(text).any(|p| {
            let (s, e) = range(p);
            s <= f.me && f.me < e
        }) {
            return 0; // this library
        }
        let mut holds_entry = false;
        let mut bytes = 0u64;
        for p in phdrs.iter().filter(text) {
            let (s, e) = range(p);
            f.window |= engine::window_bytes(s, e) > 0;
            holds_entry |= s <= f.entry && f.entry < e;
            bytes += (e - s) as u64;
        }
        if holds_entry && f.own == 0 {
            f.own = bytes;
        }
        0
    }
    let mut f = Facts {
        me: text_facts as *const () as usize,
        // SAFETY: getauxval has no preconditions.
        entry: unsafe { libc::getauxval(libc::AT_ENTRY) } as usize,
        page: sys::page_size(),
        window: false,
        own: 0,
    };
    // SAFETY: `each` matches the callback type and only reads what the C
    // library passes; `f` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut f as *mut Facts as *mut libc::c_void) };
    (f.window, f.own)
}

/// Pure: the option by which a launcher (named by the file name of its
/// executable) starts its command with a cleared environment, where the
/// preload cannot follow: `env -i`, `su -`/`-l`/`--login`, the same of
/// `runuser`, and `sudo` (which resets the environment and removes the
/// loader's variables).
pub fn clears_environment<'a>(exe: &[u8], args: impl Iterator<Item = &'a [u8]>) -> Option<&'a [u8]> {
    let base = &exe[exe.iter().rposition(|&c| c == b'/').map_or(0, |i| i + 1)..];
    let mut args = args.peekable();
    match base {
        b"env" => {
            while let Some(a) = args.next() {
                match a {
                    b"-i" | b"--ignore-environment" | b"-" => return Some(a),
                    b"-u" | b"--unset" | b"-C" | b"--chdir" | b"-S" | b"--split-string" => {
                        args.next();
                    }
                    b"--" => return None,
                    _ if a.starts_with(b"--") => {}
                    _ if a.len() > 1 && a[0] == b'-' => {
                        // A cluster of short options: -i among them, up to
                        // one that takes a value.
                        for &c in &a[1..] {
                            match c {
                                b'i' => return Some(a),
                                b'u' | b'C' | b'S' => break,
                                _ => {}
                            }
                        }
                    }
                    // NAME=VALUE, then the command.
                    _ if a.contains(&b'=') => {}
                    _ => return None,
                }
            }
            None
        }
        b"su" | b"runuser" => {
            while let Some(a) = args.next() {
                match a {
                    b"-" | b"-l" | b"--login" => return Some(a),
                    b"-c"
                    | b"--command"
                    | b"-s"
                    | b"--shell"
                    | b"-u"
                    | b"--user"
                    | b"-g"
                    | b"--group"
                    | b"-G"
                    | b"--supp-group"
                    | b"-w"
                    | b"--whitelist-environment"
                    | b"--session-command" => {
                        args.next();
                    }
                    b"--" => return None,
                    _ => {}
                }
            }
            None
        }
        b"sudo" => Some(b"sudo"),
        _ => None,
    }
}

/// Is this process's executable a Go program (a `Go` build-id note, which
/// Go's linker writes)? Go starts processes with the execve system call,
/// which the preload cannot interpose (`exec`), with the environment it
/// read from the initial array at start. Reads the program headers and
/// notes the loader mapped.
pub fn go_program() -> bool {
    // SAFETY: getauxval has no preconditions.
    let (phdr, phnum) = unsafe { (libc::getauxval(libc::AT_PHDR), libc::getauxval(libc::AT_PHNUM)) };
    if phdr == 0 || phnum == 0 || phnum > 256 {
        return false;
    }
    // SAFETY: the executable's program headers, mapped by the kernel at
    // AT_PHDR (AT_PHNUM of them).
    let ph = unsafe { core::slice::from_raw_parts(phdr as usize as *const libc::Elf64_Phdr, phnum as usize) };
    let Some(bias) = ph
        .iter()
        .find(|p| p.p_type == libc::PT_PHDR)
        .map(|p| (phdr as usize).wrapping_sub(p.p_vaddr as usize))
    else {
        return false;
    };
    let loaded = |a: u64, n: u64| {
        ph.iter()
            .any(|p| p.p_type == libc::PT_LOAD && p.p_vaddr <= a && a.saturating_add(n) <= p.p_vaddr + p.p_filesz)
    };
    ph.iter()
        .filter(|p| p.p_type == libc::PT_NOTE && p.p_filesz < 1 << 16 && loaded(p.p_vaddr, p.p_filesz))
        .any(|p| {
            // SAFETY: inside a loaded segment of the executable (checked
            // above), mapped readable for as long as the process runs.
            let notes = unsafe {
                core::slice::from_raw_parts(bias.wrapping_add(p.p_vaddr as usize) as *const u8, p.p_filesz as usize)
            };
            hugetext_abi::reach::has_go_note(notes)
        })
}

/// This process's executable (`/proc/self/exe`).
pub fn exe(o: &mut Out<1100>) {
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

/// The launcher's arguments named the cleared environment its command
/// starts with (`clears_environment`, with `-v`): the exec that passes it
/// on says nothing more (`exec`).
pub static NAMED_LOSS: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Where a process that loaded the preload without `--inherit` stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// A launcher (or a program with text but no whole window) being
    /// followed: no pass, the preload stays for the processes it starts.
    Wrapper,
    /// The program (or where the chain ends): the pass ran, the default
    /// applies.
    Program,
}

/// The start-up decision around the pass, for a process that loaded the
/// preload without `--inherit`, exec'd by a launcher or forked by one (the
/// same rule applies to both): a launcher keeps the preload for what it
/// starts, without a pass of its own (nothing to remap, nothing to report
/// but the hop and what happens to objects it loads after start, `late`);
/// a program with text (or where the chain ends) runs the pass, removes
/// the preload, and with `-v` names the chain that led to it, or says why
/// the chain ends there.
pub fn at_start(cfg: &config::Config, argv: &[*const c_char], late: &str, pass: impl FnOnce()) -> Start {
    let via = Via::from_env();
    let (window, own) = text_facts();
    let kind = kind(window, own);
    let next = next(kind, via.hops, via.judged);
    if next == Next::Follow && via.follow(argv, kind, cfg.verbose) {
        if cfg.verbose {
            let mut name = Out::<1100>::new(-1);
            name_self(&mut name, argv);
            let mut o = line();
            o.s("pid ").pid(perfmap::pid()).s(": ").bytes(name.contents());
            match kind {
                Kind::Judged => o
                    .s(" has ")
                    .mib(own)
                    .s(" of text but no whole window: nothing to remap, the preload stays for the processes it starts (program with text ")
                    .u(via.judged as u64 + 1)
                    .s(" of at most ")
                    .u(env::MAX_HOPS as u64)
                    .s("); objects it dlopens "),
                _ => o
                    .s(" has no text of its own to remap: a launcher, the preload stays for the processes it starts (hop ")
                    .u(via.hops as u64 + 1)
                    .s("); objects it dlopens "),
            };
            o.s(late);
            drop(o);
            let mut exe_path = Out::<1100>::new(-1);
            exe(&mut exe_path);
            let args = argv.iter().skip(1).map(|&a| {
                // SAFETY: the process's NUL-terminated arguments.
                unsafe { CStr::from_ptr(a) }.to_bytes()
            });
            if let Some(opt) = clears_environment(exe_path.contents(), args) {
                NAMED_LOSS.store(true, Relaxed);
                line()
                    .s("pid ")
                    .pid(perfmap::pid())
                    .s(": ")
                    .bytes(name.contents())
                    .s(" (")
                    .bytes(opt)
                    .s(") starts its command with a cleared environment: the preload cannot follow, the chain ends here");
            }
            if go_program() {
                line()
                    .s("pid ")
                    .pid(perfmap::pid())
                    .s(": ")
                    .bytes(name.contents())
                    .s(" is a Go program: it starts processes with the execve system call (os/exec, syscall.Exec), which the preload cannot interpose, so it keeps hugetext's variables in its environment for them to inherit");
            }
            exe_path.clear();
            name.clear();
        }
        return Start::Wrapper;
    }
    pass();
    config::strip_preload();
    config::remove(settings::VIA);
    if cfg.verbose {
        let mut name = Out::<1100>::new(-1);
        exe(&mut name);
        match next {
            Next::Stop(End::Judged) => {
                line()
                    .s("pid ")
                    .pid(perfmap::pid())
                    .s(": ")
                    .bytes(name.contents())
                    .s(" has text but no whole window, and ")
                    .u(env::MAX_HOPS as u64)
                    .s(" such programs were followed: the chain ends here, the processes it starts run plain");
            }
            Next::Stop(End::Hops) => {
                line()
                    .s("pid ")
                    .pid(perfmap::pid())
                    .s(": ")
                    .bytes(name.contents())
                    .s(": ")
                    .u(env::MAX_LAUNCHERS as u64)
                    .s(" processes were followed: the chain ends here, the processes it starts run plain");
            }
            _ => {}
        }
        if via.hops > 0 {
            let mut o = line();
            o.s("pid ")
                .pid(perfmap::pid())
                .s(": via ")
                .u(via.hops as u64)
                .s(if via.hops == 1 { " wrapper: " } else { " wrappers: " })
                .bytes(via.chain)
                .s(" -> ")
                .bytes(name.contents());
        }
        name.clear();
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
    fn launchers_are_followed_freely_judged_programs_up_to_the_bound() {
        assert_eq!(kind(true, 0), Kind::Program);
        assert_eq!(kind(false, env::LAUNCHER_TEXT - 1), Kind::Launcher);
        assert_eq!(kind(false, env::LAUNCHER_TEXT), Kind::Judged);
        assert_eq!(next(Kind::Launcher, env::MAX_HOPS + 5, env::MAX_HOPS), Next::Follow);
        assert_eq!(next(Kind::Launcher, env::MAX_LAUNCHERS, 0), Next::Stop(End::Hops));
        assert_eq!(next(Kind::Judged, 20, env::MAX_HOPS - 1), Next::Follow);
        assert_eq!(next(Kind::Judged, 20, env::MAX_HOPS), Next::Stop(End::Judged));
        assert_eq!(next(Kind::Program, 0, 0), Next::Stop(End::Program));
    }

    fn clears(exe: &str, args: &[&str]) -> Option<String> {
        clears_environment(exe.as_bytes(), args.iter().map(|a| a.as_bytes()))
            .map(|o| String::from_utf8_lossy(o).into_owned())
    }

    #[test]
    fn launchers_that_clear_the_environment_are_named() {
        assert_eq!(clears("/usr/bin/env", &["-i", "prog"]).as_deref(), Some("-i"));
        assert_eq!(clears("/usr/bin/env", &["-u", "X", "-", "prog"]).as_deref(), Some("-"));
        assert_eq!(clears("/usr/bin/env", &["-vi", "prog"]).as_deref(), Some("-vi"));
        assert_eq!(clears("/usr/bin/env", &["A=1", "prog", "-i"]), None);
        assert_eq!(clears("/usr/bin/env", &["-u", "-i", "prog"]), None);
        assert_eq!(
            clears("/usr/bin/su", &["-", "postgres", "-c", "x"]).as_deref(),
            Some("-")
        );
        assert_eq!(clears("/usr/bin/su", &["-c", "-l", "postgres"]), None);
        assert_eq!(clears("/usr/sbin/runuser", &["-u", "x", "--", "-l"]), None);
        assert_eq!(
            clears("/usr/sbin/runuser", &["--login", "x"]).as_deref(),
            Some("--login")
        );
        assert_eq!(clears("/usr/bin/sudo", &["prog"]).as_deref(), Some("sudo"));
        assert_eq!(clears("/usr/bin/bash", &["-i"]), None);
    }
}
