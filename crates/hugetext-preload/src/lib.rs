//! libhugetext.so: the preload library behind `hugetext run`, and the C API
//! declared in `include/hugetext.h`.
//!
//! * Injected with `LD_PRELOAD` (what `hugetext run` does), its ELF
//!   constructor remaps the text of the executable and of every shared
//!   library loaded at start onto 2 MiB pages before `main` (and before the
//!   constructors of the program itself) runs.
//! * Linked with `-lhugetext`, `hugetext_remap_text()` does the same work on
//!   demand, from any thread of a running program. The constructor then does
//!   nothing unless the library is also named in `LD_PRELOAD`.
//!
//! * Named in `LD_AUDIT` as well (what `hugetext run` does), a second copy
//!   loaded by the dynamic loader as an auditor remaps the text of objects
//!   loaded after start (`dlopen`) before they are relocated (see `audit`).
//!
//! The library depends on libc for types and constants only: the work is
//! done with raw system calls, in fixed buffers, without allocating (see
//! `sys` for why). Settings come from `HUGETEXT_*` environment variables
//! (doc/run.md).

mod audit;
mod clean;
mod config;
mod copies;
mod engine;
mod exec;
mod hot;
mod maps;
mod out;
mod perfmap;
mod reach;
mod scan;
mod seccomp;
mod smaps;
mod sys;
mod verify;
mod via;
mod zeroed;

use core::ffi::{c_char, c_int, c_long};
use core::sync::atomic::{AtomicBool, Ordering};

/// One pass at a time per process. The auditor's copy of the library
/// uses the preload copy's flag ([`audit::lock_word`]).
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set when an audit module follows the process's later `dlopen`s: the
/// auditor's copy of this library, or libhugetext-audit.so (which finds
/// it by name, hence exported; not part of the C API).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static hugetext_audited: AtomicBool = AtomicBool::new(false);
/// Set when this process started as a wrapper (no text in whole windows;
/// the preload passed on to what it execs: `exec`). Cleared by
/// [`via::became_program`].
static WRAPPER: AtomicBool = AtomicBool::new(false);
/// Recognises this very build of the library from the auditor's copy.
static MARK: [u8; 24] = *b"hugetext pass lock v1\0\0\0";

fn pass(cfg: &config::Config) -> isize {
    let busy = audit::lock_word();
    if busy.swap(true, Ordering::Acquire) {
        return -(libc::EBUSY as isize);
    }
    // The kernel's PMD size, read before any critical section.
    scan::init_geometry();
    let r = engine::remap(cfg);
    busy.store(false, Ordering::Release);
    r
}

/// Remap this process's executable text onto 2 MiB pages (see
/// `include/hugetext.h`). Returns the bytes of text huge-backed after the
/// call, or a negative errno (`-EBUSY` if another thread is in the call).
#[no_mangle]
pub extern "C" fn hugetext_remap_text() -> c_long {
    let cfg = config::Config::from_env();
    pass(&cfg) as c_long
}

/// The ELF constructor: runs when the dynamic loader initialises this
/// library, after every library the program needs at start is mapped.
extern "C" fn at_load(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    if audit::in_audit_namespace() {
        return; // the auditor's copy: see `audit`
    }
    // The exec family is interposed in every process that loads this
    // copy: what it calls through is looked up while that is safe.
    exec::resolve();
    let cfg = config::Config::from_env();
    if !cfg.preloaded || cfg.disabled {
        return;
    }
    // Before the pass: it takes libhugetext.so out of LD_AUDIT.
    let late = late_state(&cfg);
    if cfg.inherit {
        pass(&cfg);
        // Process titles over argv and the environment keep their room.
        clean::tunables_in_block();
    } else {
        let argv: &[*const c_char] = match argv.is_null() || argc <= 0 {
            true => &[],
            // SAFETY: the loader passes the process's argc and argv.
            false => unsafe { core::slice::from_raw_parts(argv, argc as usize) },
        };
        match via::at_start(&cfg, argv, late, || {
            pass(&cfg);
        }) {
            via::Start::Program => {}
            // A Go launcher reads its environment from the initial array
            // (not through the C library) and starts processes with the
            // execve system call, which `exec` cannot interpose: it keeps
            // the variables in that array, so what it starts inherits
            // them, while its /proc/PID/environ shows none of them.
            via::Start::Wrapper if via::go_program() => {
                clean::hide();
                return;
            }
            // A launcher's hop line said what happens to what it dlopens
            // (a program with all its text in libraries it loads later
            // looks like a launcher).
            via::Start::Wrapper => {
                WRAPPER.store(true, Ordering::Relaxed);
                exec::VERBOSE.store(cfg.verbose, Ordering::Relaxed);
                // Its environment is clean; the processes it starts get
                // the settings back at exec (`exec`).
                exec::for_launcher();
                return;
            }
        }
    }
    if cfg.verbose {
        out::line().s("objects loaded after start (dlopen) ").s(late);
    }
    if !cfg.inherit {
        // Last: `cfg` and the wrapper chain point into the environment.
        let _ = clean::clean();
    }
}

/// What happens to objects this process loads after start, for `-v`.
fn late_state(cfg: &config::Config) -> &'static str {
    let named_in_audit = config::getenv(hugetext_abi::env::LD_AUDIT.as_bytes())
        .is_some_and(|v| hugetext_abi::env::preload_entries(v).any(hugetext_abi::env::is_hugetext_preload));
    if hugetext_audited.load(Ordering::Relaxed) {
        "are followed (LD_AUDIT)"
    } else if !cfg.late {
        "are not followed: HUGETEXT_LATE=0"
    } else if !named_in_audit {
        "are not followed: LD_AUDIT does not name libhugetext.so"
    } else {
        "are not followed: the dynamic loader did not load libhugetext.so from LD_AUDIT (secure-execution mode, or a C library without the rtld audit interface)"
    }
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = at_load;
