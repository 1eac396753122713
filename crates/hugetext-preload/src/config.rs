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
/// Which routes may be used (auto: already → file → collapse → shmem → copy).
pub use hugetext_abi::env::Strategy;
use hugetext_abi::settings::{self, Invalid, Settings};

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
    /// `HUGETEXT_STORE`: the text store's directory (the `shmem` route).
    pub store: &'static [u8],
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
        let (s, bad) = Settings::read(|name| if secure { None } else { getenv(name.as_bytes()) });
        Config::from_settings(&s, &bad, secure)
    }

    /// The pass's settings from what `run` wrote ([`Settings`]), with the
    /// defaults for those unset; `secure`: no perf map.
    pub fn from_settings(s: &Settings<'static>, bad: &Invalid<'static>, secure: bool) -> Config {
        let nonempty = |v: Option<&'static [u8]>| v.filter(|s| !s.is_empty());
        let preloaded = getenv(env::LD_PRELOAD.as_bytes())
            .map(|v| env::preload_entries(v).any(env::is_hugetext_preload))
            .unwrap_or(false);
        Config {
            report: s.report.unwrap_or(false),
            strategy: s.strategy.unwrap_or_default(),
            order: s.order.unwrap_or_default(),
            verbose: s.verbose.unwrap_or(false),
            gdb: s.gdb.unwrap_or(false),
            perf_map: !secure && s.perf_map.unwrap_or(true),
            name_vmas: s.name.unwrap_or(true),
            inherit: s.inherit.unwrap_or(false),
            include: nonempty(s.include),
            exclude: nonempty(s.exclude),
            preloaded,
            disabled: s.disable.unwrap_or(false),
            bad_strategy: bad.strategy,
            bad_order: bad.order,
            compat: s.compat.map(Compat::parse).unwrap_or_default(),
            late: s.late.unwrap_or(true),
            late_min: s.late_min.unwrap_or(env::LATE_MIN_DEFAULT),
            bad_late_min: bad.late_min,
            hot: crate::hot::Setting::from(nonempty(s.hot_list), nonempty(s.hot)),
            store: nonempty(s.store).unwrap_or(hugetext_abi::store::DEFAULT_ROOT.as_bytes()),
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

/// The environment slot of the variable `name`, if set.
pub fn slot(name: &str) -> Option<*mut *mut c_char> {
    // SAFETY: `environ` is the NULL-terminated array libc maintains; read
    // at start-up, single-threaded (see `env_entries`).
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return None;
        }
        while !(*p).is_null() {
            if cstr(*p)
                .strip_prefix(name.as_bytes())
                .is_some_and(|r| r.starts_with(b"="))
            {
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

/// Remove the variable `name` from the environment, if set.
pub fn remove(name: &str) {
    if let Some(p) = slot(name) {
        // SAFETY: a slot just found, at start-up.
        unsafe { remove_at(p) };
    }
}

/// Put `GLIBC_TUNABLES` back as `HUGETEXT_TUNABLES` says it was before
/// `run` added room for static TLS: unset, or its first bytes (a value
/// shortened in place). Then remove `HUGETEXT_TUNABLES`. A value that does
/// not end as `run` left it is not touched.
pub fn restore_tunables() {
    let Some(note) = getenv(settings::TUNABLES.as_bytes()) else {
        return;
    };
    let var = env::GLIBC_TUNABLES;
    match (env::tunables_restore(note, getenv(var.as_bytes())), slot(var)) {
        // SAFETY: a slot just found, at start-up.
        (Some(None), Some(p)) => unsafe { remove_at(p) },
        // SAFETY: the value has more than `n` bytes (`tunables_restore`
        // found `run`'s addition after them): the NUL lands inside it.
        (Some(Some(n)), Some(p)) => unsafe { *(*p).add(var.len() + 1 + n) = 0 },
        _ => {}
    }
    remove(settings::TUNABLES);
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

    /// What the library writes (`Settings::write`, as `hugetext run` does
    /// through `remap::settings_environment`) is what the pass reads.
    #[test]
    fn config_reads_what_run_writes() {
        use hugetext_abi::env::Tunables;
        let written = Settings {
            strategy: Some(Strategy::Collapse),
            order: Some(Order::Collapse),
            include: Some(b"libfoo"),
            exclude: Some(b"^/usr/lib/.*\\.so$"),
            inherit: Some(true),
            gdb: Some(true),
            verbose: Some(true),
            disable: Some(true),
            perf_map: Some(false),
            name: Some(false),
            late: Some(false),
            late_min: Some(6 << 20),
            tunables: Some(Tunables::Len(24)),
            via: Some(b""),
            compat: Some(b"no-populate,no-pt-reclaim"),
            hot: Some(b"/tmp/hot"),
            hot_list: Some(b"hugetext-hot 1 2097152\n"),
            report: Some(true),
            preload: Some(b"/opt/libhugetext.so"),
            store: Some(b"/srv/store"),
        };
        let mut env: Vec<(&'static str, &'static [u8])> = Vec::new();
        written.write(|name, v| env.push((name, Vec::leak(v.to_vec()))));
        assert_eq!(env.len(), settings::Setting::ALL.len());
        let (s, bad) = Settings::read(|name| env.iter().find(|(n, _)| *n == name).map(|(_, v)| *v));
        assert_eq!(s, written);
        let c = Config::from_settings(&s, &bad, false);
        assert!(c.report && c.verbose && c.gdb && c.inherit && c.disabled);
        assert!(!c.perf_map && !c.name_vmas && !c.late);
        assert_eq!(
            (c.strategy, c.order, c.late_min),
            (Strategy::Collapse, Order::Collapse, 6 << 20)
        );
        assert_eq!((c.include, c.exclude), (written.include, written.exclude));
        assert!(c.compat.no_populate && c.compat.no_pt_reclaim && !c.compat.no_pagemap_scan);
        assert!(matches!(c.hot, crate::hot::Setting::Inline(v) if Some(v) == written.hot_list));
        assert!(c.bad_strategy.is_none() && c.bad_order.is_none() && c.bad_late_min.is_none());
        assert_eq!(c.store, b"/srv/store");
        // Nothing written: the defaults.
        let none = Config::from_settings(&Settings::default(), &Invalid::default(), false);
        assert!(!none.report && !none.verbose && !none.disabled && none.perf_map && none.name_vmas && none.late);
        assert_eq!((none.strategy, none.order), (Strategy::Auto, Order::File));
        assert_eq!(none.late_min, env::LATE_MIN_DEFAULT);
        assert_eq!(none.store, hugetext_abi::store::DEFAULT_ROOT.as_bytes());
        assert!(matches!(none.hot, crate::hot::Setting::None));
        // Secure execution: no perf map whatever the setting.
        assert!(!Config::from_settings(&Settings::default(), &Invalid::default(), true).perf_map);
    }

    #[test]
    fn only_our_entries_and_their_separator_go() {
        assert_eq!(stripped("/l/libhugetext.so: libm.so.6"), (" libm.so.6".into(), 1));
        assert_eq!(stripped("a.so b.so:/l/libhugetext.so"), ("a.so b.so".into(), 2));
        assert_eq!(stripped("/l/libhugetext.so"), ("".into(), 0));
        assert_eq!(stripped("a.so::b.so"), ("a.so::b.so".into(), 2));
    }
}
