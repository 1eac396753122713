//! Settings from the environment (`HUGETEXT_*`), read without allocating,
//! and the removal of this library from `LD_PRELOAD` so that the program's
//! children do not inherit it.

use core::ffi::c_char;

extern "C" {
    static mut environ: *mut *mut c_char;
}

use hugetext_abi::env;
/// Which zero-copy route `auto` tries first.
pub use hugetext_abi::env::Order;
/// Which routes may be used (auto: already → file → collapse → copy).
pub use hugetext_abi::env::Strategy;

/// The settings of one remap pass.
pub struct Config {
    /// `HUGETEXT_REPORT=json`: one machine-readable record per pass.
    pub report: bool,
    pub strategy: Strategy,
    /// `HUGETEXT_ORDER`: evict + refill or collapse in place first.
    pub order: Order,
    pub verbose: bool,
    /// gdb/perf-friendly: never move text to anonymous memory.
    pub gdb: bool,
    pub perf_map: bool,
    pub name_vmas: bool,
    pub inherit: bool,
    pub include: Option<&'static [u8]>,
    pub exclude: Option<&'static [u8]>,
    /// LD_PRELOAD names this library.
    pub preloaded: bool,
    pub disabled: bool,
    /// Malformed settings found (reported in verbose mode).
    pub bad_strategy: Option<&'static [u8]>,
    /// `HUGETEXT_ORDER` that could not be parsed (reported in verbose mode).
    pub bad_order: Option<&'static [u8]>,
    /// `HUGETEXT_COMPAT`: kernel features to act as if missing, to exercise
    /// the fallbacks older kernels need (testing and diagnosis).
    pub compat: Compat,
    /// Follow objects loaded after start (`HUGETEXT_LATE`, default on).
    pub late: bool,
    /// Minimum bytes in whole 2 MiB windows of a late object's text mapping.
    pub late_min: u64,
    /// `HUGETEXT_LATE_MIN` that could not be parsed (reported in verbose mode).
    pub bad_late_min: Option<&'static [u8]>,
    /// `HUGETEXT_HOT_LIST` (the hot-window list inline, what `run --hot`
    /// sets) or `HUGETEXT_HOT` (a file holding it): remap only those windows.
    pub hot: crate::hot::Setting,
}

/// Kernel features the pass must not use (`HUGETEXT_COMPAT`), as if the
/// kernel did not have them.
pub type Compat = hugetext_abi::compat::Compat<'static>;

fn cstr(p: *const c_char) -> &'static [u8] {
    // SAFETY: environment strings are NUL-terminated and live for the
    // whole process (we never free them).
    unsafe { core::ffi::CStr::from_ptr(p).to_bytes() }
}

/// Iterate `NAME=value` entries of the environment.
fn env_entries() -> impl Iterator<Item = &'static [u8]> {
    // SAFETY: `environ` is a NULL-terminated array maintained by libc; we
    // only read it here (the caller does not run concurrently with setenv in
    // a well-formed program; at start-up there is one thread).
    let mut p = unsafe { environ };
    // SAFETY: `p` walks that array up to its NULL terminator, never past
    // it; each entry is a NUL-terminated string (see `cstr`).
    core::iter::from_fn(move || unsafe {
        if p.is_null() || (*p).is_null() {
            return None;
        }
        let s = cstr(*p);
        p = p.add(1);
        Some(s)
    })
}

/// The value of `name` in the environment; this library's settings
/// (`HUGETEXT_*`) from the copy kept when they left the environment
/// (`clean`), once they have.
pub fn getenv(name: &[u8]) -> Option<&'static [u8]> {
    let value = |e: &'static [u8]| e.strip_prefix(name)?.strip_prefix(b"=");
    if name.starts_with(crate::clean::PREFIX) {
        if let Some(mut p) = crate::clean::saved() {
            // SAFETY: the saved table: NULL-terminated, its strings
            // NUL-terminated, never freed (`clean::save`).
            unsafe {
                while !(*p).is_null() {
                    if let Some(v) = value(cstr(*p)) {
                        return Some(v);
                    }
                    p = p.add(1);
                }
            }
            return None;
        }
    }
    env_entries().find_map(value)
}

/// A boolean setting's value, `default` when unset.
fn flag(v: Option<&[u8]>, default: bool) -> bool {
    match v {
        None => default,
        Some(v) => !(v.is_empty() || v == b"0" || v.eq_ignore_ascii_case(b"no") || v.eq_ignore_ascii_case(b"false")),
    }
}

/// Secure-execution mode: the kernel set `AT_SECURE` (a set-user-ID or
/// set-group-ID program, or one with file capabilities), so the
/// environment comes from a less privileged user. (`getauxval` reads the
/// auxiliary vector libc saved at start: no system call.)
pub fn secure() -> bool {
    // SAFETY: plain libc call without pointers.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

impl Config {
    /// The settings from the environment; in secure-execution mode every
    /// `HUGETEXT_*` variable is ignored (the defaults apply) and no perf map
    /// is written (it would tell the user where the text lies).
    pub fn from_env() -> Config {
        Config::read(secure())
    }

    fn read(secure: bool) -> Config {
        let get = |name: &str| if secure { None } else { getenv(name.as_bytes()) };
        let (strategy, bad_strategy) = match get(env::STRATEGY) {
            None => (Strategy::Auto, None),
            Some(v) => match Strategy::parse(v) {
                Some(s) => (s, None),
                None => (Strategy::Auto, Some(v)),
            },
        };
        let (order, bad_order) = match get(env::ORDER) {
            None => (Order::File, None),
            Some(v) => match Order::parse(v) {
                Some(o) => (o, None),
                None => (Order::File, Some(v)),
            },
        };
        let nonempty = |v: Option<&'static [u8]>| v.filter(|s| !s.is_empty());
        let preloaded = getenv(env::LD_PRELOAD.as_bytes())
            .map(|v| env::preload_entries(v).any(env::is_hugetext_preload))
            .unwrap_or(false);
        let (late_min, bad_late_min) = match get(env::LATE_MIN) {
            None => (env::LATE_MIN_DEFAULT, None),
            Some(v) => match env::parse_size(v) {
                Some(n) => (n, None),
                None => (env::LATE_MIN_DEFAULT, Some(v)),
            },
        };
        Config {
            report: get(hugetext_abi::report::VAR).is_some_and(hugetext_abi::report::wanted),
            strategy,
            order,
            verbose: flag(get(env::VERBOSE), false),
            gdb: flag(get(env::GDB), false),
            perf_map: !secure && flag(get(env::PERF_MAP), true),
            name_vmas: flag(get(env::NAME), true),
            inherit: flag(get(env::INHERIT), false),
            include: nonempty(get(env::INCLUDE)),
            exclude: nonempty(get(env::EXCLUDE)),
            preloaded,
            disabled: flag(get(env::DISABLE), false),
            bad_strategy,
            bad_order,
            compat: get(hugetext_abi::compat::VAR).map(Compat::parse).unwrap_or_default(),
            late: flag(get(env::LATE), true),
            late_min,
            bad_late_min,
            hot: crate::hot::Setting::from(
                nonempty(get(hugetext_abi::hot::LIST_VAR)),
                nonempty(get(hugetext_abi::hot::VAR)),
            ),
        }
    }
}

/// Remove every `libhugetext*` entry from `LD_PRELOAD` and `LD_AUDIT`,
/// editing the environment strings in place (they only get shorter;
/// nothing allocated), and put `GLIBC_TUNABLES` back as it was before `run`
/// ([`restore_tunables`]). An emptied variable is removed from the
/// environment. (The dynamic loader has read all three before any
/// constructor runs.)
pub fn strip_preload() {
    strip(b"LD_PRELOAD=");
    strip(b"LD_AUDIT=");
    restore_tunables();
}

/// The environment slot of `var` (`NAME=`), if set.
pub fn slot(var: &[u8]) -> Option<*mut *mut c_char> {
    // SAFETY: `environ` is the NULL-terminated array libc maintains; read
    // at start-up, single-threaded (see `env_entries`).
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return None;
        }
        while !(*p).is_null() {
            if cstr(*p).starts_with(var) {
                return Some(p);
            }
            p = p.add(1);
        }
    }
    None
}

/// Remove the entry at `p` from the environment: shift the rest of the
/// array down.
///
/// # Safety
/// `p` is a slot of `environ` ([`slot`]), at single-threaded start-up.
unsafe fn remove_at(p: *mut *mut c_char) {
    let mut q = p;
    // SAFETY: the caller's contract: `p` is a slot of the null-terminated
    // `environ` array, so every slot up to its null is valid, and nothing
    // else reads the environment at single-threaded start-up.
    unsafe {
        loop {
            *q = *q.add(1);
            if (*q).is_null() {
                break;
            }
            q = q.add(1);
        }
    }
}

/// Remove `var` (`NAME=`) from the environment, if set.
pub fn remove(var: &[u8]) {
    if let Some(p) = slot(var) {
        // SAFETY: a slot just found, at start-up.
        unsafe { remove_at(p) };
    }
}

/// Put `GLIBC_TUNABLES` back as `HUGETEXT_TUNABLES` says it was before
/// `run` added room for static TLS: unset, or its first bytes (a value
/// shortened in place). Then remove `HUGETEXT_TUNABLES`. A value that does
/// not end as `run` left it is not touched.
pub fn restore_tunables() {
    let Some(note) = getenv(env::TUNABLES.as_bytes()) else {
        return;
    };
    let var = b"GLIBC_TUNABLES=";
    match (
        env::tunables_restore(note, getenv(env::GLIBC_TUNABLES.as_bytes())),
        slot(var),
    ) {
        // SAFETY: a slot just found, at start-up.
        (Some(None), Some(p)) => unsafe { remove_at(p) },
        // SAFETY: the value has more than `n` bytes (`tunables_restore`
        // found `run`'s addition after them): the NUL lands inside it.
        (Some(Some(n)), Some(p)) => unsafe { *(*p).add(var.len() + n) = 0 },
        _ => {}
    }
    remove(b"HUGETEXT_TUNABLES=");
}

/// Take this library's entries out of `var` (`NAME=`) in place, each with
/// one separator next to it (the one `run` added): the user's own entries
/// and separators stay exactly as they were.
fn strip(var: &[u8]) {
    // SAFETY: single-threaded start-up (called from the constructor only);
    // the environment array and its strings are writable process memory.
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return;
        }
        while !(*p).is_null() {
            let s = (*p).cast::<u8>();
            let len = cstr(*p).len();
            let bytes = core::slice::from_raw_parts_mut(s, len + 1);
            if bytes.starts_with(var) {
                let (w, kept) = strip_value(bytes, var.len(), len);
                bytes[w] = 0;
                if kept == 0 {
                    remove_at(p);
                    continue;
                }
            }
            p = p.add(1);
        }
    }
}

/// Compact `b[start..len]` (a list of entries), leaving out this library's
/// entries, each with the separator after it (or, for the last, before
/// it). Returns (the end of what is kept, the entries kept). Pure.
fn strip_value(b: &mut [u8], start: usize, len: usize) -> (usize, usize) {
    let (mut r, mut w, mut kept) = (start, start, 0);
    while r < len {
        if env::is_preload_separator(b[r]) {
            b[w] = b[r];
            w += 1;
            r += 1;
            continue;
        }
        let mut e = r;
        while e < len && !env::is_preload_separator(b[e]) {
            e += 1;
        }
        if env::is_hugetext_preload(&b[r..e]) {
            r = e;
            if r < len {
                r += 1;
            } else if w > start && env::is_preload_separator(b[w - 1]) {
                w -= 1;
            }
        } else {
            b.copy_within(r..e, w);
            w += e - r;
            r = e;
            kept += 1;
        }
    }
    (w, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripped(v: &str) -> (String, usize) {
        let mut b = v.as_bytes().to_vec();
        let (w, k) = strip_value(&mut b, 0, v.len());
        (String::from_utf8(b[..w].to_vec()).unwrap(), k)
    }

    #[test]
    fn only_our_entries_and_their_separator_go() {
        assert_eq!(stripped("/l/libhugetext.so: libm.so.6"), (" libm.so.6".into(), 1));
        assert_eq!(stripped("a.so b.so:/l/libhugetext.so"), ("a.so b.so".into(), 2));
        assert_eq!(stripped("/l/libhugetext.so"), ("".into(), 0));
        assert_eq!(stripped("a.so::b.so"), ("a.so::b.so".into(), 2));
    }
}
