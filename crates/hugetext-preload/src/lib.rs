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
//! The library depends on libc for types and constants only: the work is
//! done with raw system calls, in fixed buffers, without allocating (see
//! `sys` for why). Settings come from `HUGETEXT_*` environment variables
//! (doc/run.md).

mod config;
mod engine;
mod maps;
mod out;
mod pattern;
mod perfmap;
mod scan;
mod smaps;
mod sys;
mod verify;
mod zeroed;

use core::ffi::{c_char, c_int, c_long};
use core::sync::atomic::{AtomicBool, Ordering};

/// One pass at a time per process.
static BUSY: AtomicBool = AtomicBool::new(false);

fn pass(cfg: &config::Config) -> isize {
    if BUSY.swap(true, Ordering::Acquire) {
        return -(libc::EBUSY as isize);
    }
    let r = engine::remap(cfg);
    BUSY.store(false, Ordering::Release);
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
extern "C" fn at_load(_argc: c_int, _argv: *const *const c_char, _envp: *const *const c_char) {
    let cfg = config::Config::from_env();
    if !cfg.preloaded || cfg.disabled {
        return;
    }
    if !cfg.inherit {
        config::strip_preload();
    }
    pass(&cfg);
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = at_load;
