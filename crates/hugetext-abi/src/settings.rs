//! The settings `hugetext run` hands to libhugetext.so through the
//! environment: every `HUGETEXT_*` variable named once here, each with its
//! meaning (the one place it is documented), its parser and its formatter.
//!
//! The library builds one [`Settings`] and turns it into environment
//! variables in one function ([`Settings::write`] is the only formatter);
//! the preload reads them back with [`Settings::read`] (no allocation) and
//! then removes them from the program's environment. Test and benchmark
//! knobs live apart, in [`KNOBS`]: the product never reads them.

use crate::env::{parse_size, Order, Strategy, Tunables};

/// What every setting's name starts with (test knobs too).
pub const PREFIX: &str = "HUGETEXT_";

/// The name of [`Setting::Strategy`].
pub const STRATEGY: &str = "HUGETEXT_STRATEGY";
/// The name of [`Setting::Order`].
pub const ORDER: &str = "HUGETEXT_ORDER";
/// The name of [`Setting::Include`].
pub const INCLUDE: &str = "HUGETEXT_INCLUDE";
/// The name of [`Setting::Exclude`].
pub const EXCLUDE: &str = "HUGETEXT_EXCLUDE";
/// The name of [`Setting::Inherit`].
pub const INHERIT: &str = "HUGETEXT_INHERIT";
/// The name of [`Setting::Gdb`].
pub const GDB: &str = "HUGETEXT_GDB";
/// The name of [`Setting::Verbose`].
pub const VERBOSE: &str = "HUGETEXT_VERBOSE";
/// The name of [`Setting::Disable`].
pub const DISABLE: &str = "HUGETEXT_DISABLE";
/// The name of [`Setting::PerfMap`].
pub const PERF_MAP: &str = "HUGETEXT_PERF_MAP";
/// The name of [`Setting::Name`].
pub const NAME: &str = "HUGETEXT_NAME";
/// The name of [`Setting::Late`].
pub const LATE: &str = "HUGETEXT_LATE";
/// The name of [`Setting::LateMin`].
pub const LATE_MIN: &str = "HUGETEXT_LATE_MIN";
/// The name of [`Setting::Tunables`].
pub const TUNABLES: &str = "HUGETEXT_TUNABLES";
/// The name of [`Setting::Via`].
pub const VIA: &str = "HUGETEXT_VIA";
/// The name of [`Setting::Compat`].
pub const COMPAT: &str = "HUGETEXT_COMPAT";
/// The name of [`Setting::Hot`].
pub const HOT: &str = "HUGETEXT_HOT";
/// The name of [`Setting::HotList`].
pub const HOT_LIST: &str = "HUGETEXT_HOT_LIST";
/// The name of [`Setting::Report`].
pub const REPORT: &str = "HUGETEXT_REPORT";
/// The name of [`Setting::Preload`].
pub const PRELOAD: &str = "HUGETEXT_PRELOAD";
/// The name of [`Setting::Store`].
pub const STORE: &str = "HUGETEXT_STORE";

/// One product setting: what each means is [`Setting::meaning`], the one
/// place it is written (doc/run.md explains them for users).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// [`STRATEGY`]
    Strategy,
    /// [`ORDER`]
    Order,
    /// [`INCLUDE`]
    Include,
    /// [`EXCLUDE`]
    Exclude,
    /// [`INHERIT`]
    Inherit,
    /// [`GDB`]
    Gdb,
    /// [`VERBOSE`]
    Verbose,
    /// [`DISABLE`]
    Disable,
    /// [`PERF_MAP`]
    PerfMap,
    /// [`NAME`]
    Name,
    /// [`LATE`]
    Late,
    /// [`LATE_MIN`]
    LateMin,
    /// [`TUNABLES`]
    Tunables,
    /// [`VIA`]
    Via,
    /// [`COMPAT`]
    Compat,
    /// [`HOT`]
    Hot,
    /// [`HOT_LIST`]
    HotList,
    /// [`REPORT`]
    Report,
    /// [`PRELOAD`]
    Preload,
    /// [`STORE`]
    Store,
}

impl Setting {
    /// Every product setting, in the order [`Settings::write`] writes them.
    pub const ALL: [Setting; 20] = [
        Setting::Strategy,
        Setting::Order,
        Setting::Include,
        Setting::Exclude,
        Setting::Inherit,
        Setting::Gdb,
        Setting::Verbose,
        Setting::Disable,
        Setting::PerfMap,
        Setting::Name,
        Setting::Late,
        Setting::LateMin,
        Setting::Tunables,
        Setting::Via,
        Setting::Compat,
        Setting::Hot,
        Setting::HotList,
        Setting::Report,
        Setting::Preload,
        Setting::Store,
    ];

    /// The variable's name.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Strategy => STRATEGY,
            Setting::Order => ORDER,
            Setting::Include => INCLUDE,
            Setting::Exclude => EXCLUDE,
            Setting::Inherit => INHERIT,
            Setting::Gdb => GDB,
            Setting::Verbose => VERBOSE,
            Setting::Disable => DISABLE,
            Setting::PerfMap => PERF_MAP,
            Setting::Name => NAME,
            Setting::Late => LATE,
            Setting::LateMin => LATE_MIN,
            Setting::Tunables => TUNABLES,
            Setting::Via => VIA,
            Setting::Compat => COMPAT,
            Setting::Hot => HOT,
            Setting::HotList => HOT_LIST,
            Setting::Report => REPORT,
            Setting::Preload => PRELOAD,
            Setting::Store => STORE,
        }
    }

    /// What it means, in one line (the values it takes).
    pub fn meaning(self) -> &'static str {
        match self {
            Setting::Strategy => "which routes may be used: auto, file, collapse, shmem or copy",
            Setting::Order => "which zero-copy route auto tries first: file (evict + refill) or collapse",
            Setting::Include => "only mappings whose path matches this pattern",
            Setting::Exclude => "skip mappings whose path matches this pattern",
            Setting::Inherit => "keep the preload for child processes (flag, default off)",
            Setting::Gdb => "never move text to anonymous memory (flag, default off)",
            Setting::Verbose => "one line per mapping and a summary on stderr (flag, default off)",
            Setting::Disable => "do nothing at load (flag, default off)",
            Setting::PerfMap => "write /tmp/perf-PID.map for copied text (flag, default on)",
            Setting::Name => "name copied text in /proc/PID/maps (flag, default on)",
            Setting::Late => "follow objects loaded after start (flag, default on)",
            Setting::LateMin => "late objects with fewer bytes in whole windows are left alone (size, K/M/G)",
            Setting::Tunables => "GLIBC_TUNABLES before run changed it: - (unset) or its length",
            Setting::Via => "the launchers followed so far: PID:HOPS:JUDGED:CHAIN (run sets it empty)",
            Setting::Compat => "kernel features to act as if missing: no-pagemap-scan, no-populate, no-pt-reclaim, all",
            Setting::Hot => "a file holding the hot-window list",
            Setting::HotList => "the hot-window list itself (what run --hot sets)",
            Setting::Report => "json: one machine-readable record per pass on stderr",
            Setting::Preload => "where run finds libhugetext.so (read by hugetext, not the preload)",
            Setting::Store => "the text store's directory for the shmem route (default /run/hugetext/text)",
        }
    }
}

/// A test or benchmark knob: never read by the product.
pub struct Knob {
    /// The variable's name.
    pub name: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// Skip rebuilding the fixtures and libhugetext.so in tests.
pub const TEST_PREBUILT: &str = "HUGETEXT_TEST_PREBUILT";
/// Stop a file rewrite after the named step (crash-safety tests).
pub const TEST_STOP_AT: &str = "HUGETEXT_TEST_STOP_AT";

/// The test and benchmark knobs (integration tests, benches, examples).
pub const KNOBS: &[Knob] = &[
    Knob {
        name: TEST_PREBUILT,
        meaning: "tests use the fixtures and libhugetext.so already built",
    },
    Knob {
        name: TEST_STOP_AT,
        meaning: "a file rewrite stops after the named step (crash-safety tests)",
    },
    Knob {
        name: "HUGETEXT_TEST_HELPER",
        meaning: "a test binary acts as the helper process it names",
    },
    Knob {
        name: "HUGETEXT_TEST_EXE",
        meaning: "a test binary acts as the program it names",
    },
    Knob {
        name: "HUGETEXT_BENCH_MIB",
        meaning: "warm bench: MiB of files",
    },
    Knob {
        name: "HUGETEXT_BENCH_ROUNDS",
        meaning: "warm bench: rounds",
    },
    Knob {
        name: "HUGETEXT_BENCH_FILES",
        meaning: "warm bench: files",
    },
    Knob {
        name: "HUGETEXT_BENCH_PATHS",
        meaning: "warm bench: files to warm instead of generated ones",
    },
    Knob {
        name: "HUGETEXT_BENCH_PROCS",
        meaning: "agent bench: processes",
    },
    Knob {
        name: "HUGETEXT_BENCH_REPS",
        meaning: "agent and inspect benches: repetitions",
    },
    Knob {
        name: "HUGETEXT_BENCH_ANON_MIB",
        meaning: "inspect bench: MiB of anonymous memory in the target",
    },
    Knob {
        name: "HUGETEXT_BENCH_TARGET",
        meaning: "inspect bench: the process acts as the target",
    },
    Knob {
        name: "HUGETEXT_LOAD_SECS",
        meaning: "agent load test: seconds",
    },
    Knob {
        name: "HUGETEXT_LOAD_RATE",
        meaning: "agent load test: processes per second",
    },
    Knob {
        name: "HUGETEXT_LOAD_PROCS",
        meaning: "agent load test: processes",
    },
    Knob {
        name: "HUGETEXT_BINS",
        meaning: "run_startup example: the programs to start",
    },
];

/// Every product setting, typed; `None`: unset (the default applies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings<'a> {
    /// [`STRATEGY`]
    pub strategy: Option<Strategy>,
    /// [`ORDER`]
    pub order: Option<Order>,
    /// [`INCLUDE`]
    pub include: Option<&'a [u8]>,
    /// [`EXCLUDE`]
    pub exclude: Option<&'a [u8]>,
    /// [`INHERIT`]
    pub inherit: Option<bool>,
    /// [`GDB`]
    pub gdb: Option<bool>,
    /// [`VERBOSE`]
    pub verbose: Option<bool>,
    /// [`DISABLE`]
    pub disable: Option<bool>,
    /// [`PERF_MAP`]
    pub perf_map: Option<bool>,
    /// [`NAME`]
    pub name: Option<bool>,
    /// [`LATE`]
    pub late: Option<bool>,
    /// [`LATE_MIN`]
    pub late_min: Option<u64>,
    /// [`TUNABLES`]
    pub tunables: Option<Tunables>,
    /// [`VIA`] (as it is: [`crate::env::parse_via`] reads it)
    pub via: Option<&'a [u8]>,
    /// [`COMPAT`] (as it is: [`crate::compat::Compat::parse`] reads it)
    pub compat: Option<&'a [u8]>,
    /// [`HOT`]
    pub hot: Option<&'a [u8]>,
    /// [`HOT_LIST`]
    pub hot_list: Option<&'a [u8]>,
    /// [`REPORT`]
    pub report: Option<bool>,
    /// [`PRELOAD`]
    pub preload: Option<&'a [u8]>,
    /// [`STORE`]
    pub store: Option<&'a [u8]>,
}

/// Values [`Settings::read`] could not parse (left unset there), for a
/// warning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Invalid<'a> {
    /// [`STRATEGY`]
    pub strategy: Option<&'a [u8]>,
    /// [`ORDER`]
    pub order: Option<&'a [u8]>,
    /// [`LATE_MIN`]
    pub late_min: Option<&'a [u8]>,
    /// [`TUNABLES`]
    pub tunables: Option<&'a [u8]>,
}

/// A boolean setting: empty, `0`, `no` and `false` are off, anything else on.
pub fn parse_flag(v: &[u8]) -> bool {
    !(v.is_empty() || v == b"0" || v.eq_ignore_ascii_case(b"no") || v.eq_ignore_ascii_case(b"false"))
}

/// Room for any formatted number ([`Settings::format`]).
pub type Buf = [u8; 20];

/// `n` in decimal at the end of `buf`.
fn decimal(mut n: u64, buf: &mut Buf) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

impl<'a> Settings<'a> {
    /// Set `s` from its variable's value `v`; `Err(())` (and `s` left as
    /// it was) when `v` is not a value of it.
    #[allow(clippy::result_unit_err)]
    pub fn parse(&mut self, s: Setting, v: &'a [u8]) -> Result<(), ()> {
        match s {
            Setting::Strategy => self.strategy = Some(Strategy::parse(v).ok_or(())?),
            Setting::Order => self.order = Some(Order::parse(v).ok_or(())?),
            Setting::Include => self.include = Some(v),
            Setting::Exclude => self.exclude = Some(v),
            Setting::Inherit => self.inherit = Some(parse_flag(v)),
            Setting::Gdb => self.gdb = Some(parse_flag(v)),
            Setting::Verbose => self.verbose = Some(parse_flag(v)),
            Setting::Disable => self.disable = Some(parse_flag(v)),
            Setting::PerfMap => self.perf_map = Some(parse_flag(v)),
            Setting::Name => self.name = Some(parse_flag(v)),
            Setting::Late => self.late = Some(parse_flag(v)),
            Setting::LateMin => self.late_min = Some(parse_size(v).ok_or(())?),
            Setting::Tunables => self.tunables = Some(Tunables::parse(v).ok_or(())?),
            Setting::Via => self.via = Some(v),
            Setting::Compat => self.compat = Some(v),
            Setting::Hot => self.hot = Some(v),
            Setting::HotList => self.hot_list = Some(v),
            Setting::Report => self.report = Some(crate::report::wanted(v)),
            Setting::Preload => self.preload = Some(v),
            Setting::Store => self.store = Some(v),
        }
        Ok(())
    }

    /// The value to give `s`'s variable; `None`: leave it unset. Numbers
    /// are written into `buf`.
    pub fn format<'b>(&'b self, s: Setting, buf: &'b mut Buf) -> Option<&'b [u8]> {
        let flag = |b: bool| -> &'static [u8] {
            match b {
                true => b"1",
                false => b"0",
            }
        };
        Some(match s {
            Setting::Strategy => self.strategy?.as_str().as_bytes(),
            Setting::Order => self.order?.as_str().as_bytes(),
            Setting::Include => self.include?,
            Setting::Exclude => self.exclude?,
            Setting::Inherit => flag(self.inherit?),
            Setting::Gdb => flag(self.gdb?),
            Setting::Verbose => flag(self.verbose?),
            Setting::Disable => flag(self.disable?),
            Setting::PerfMap => flag(self.perf_map?),
            Setting::Name => flag(self.name?),
            Setting::Late => flag(self.late?),
            Setting::LateMin => decimal(self.late_min?, buf),
            Setting::Tunables => match self.tunables? {
                Tunables::Unset => b"-",
                Tunables::Len(n) => decimal(n as u64, buf),
            },
            Setting::Via => self.via?,
            Setting::Compat => self.compat?,
            Setting::Hot => self.hot?,
            Setting::HotList => self.hot_list?,
            Setting::Report => match self.report? {
                true => b"json",
                false => b"",
            },
            Setting::Preload => self.preload?,
            Setting::Store => self.store?,
        })
    }

    /// Every setting that is set, as `(name, value)`: the one writer.
    pub fn write(&self, mut out: impl FnMut(&'static str, &[u8])) {
        for s in Setting::ALL {
            let mut buf = Buf::default();
            if let Some(v) = self.format(s, &mut buf) {
                out(s.name(), v);
            }
        }
    }

    /// The settings from `get` (a variable's value by name; return `None`
    /// for every name to ignore the environment), and the values that
    /// could not be parsed. Allocates nothing.
    pub fn read(get: impl Fn(&'static str) -> Option<&'a [u8]>) -> (Settings<'a>, Invalid<'a>) {
        let mut s = Settings::default();
        let mut bad = Invalid::default();
        for which in Setting::ALL {
            let Some(v) = get(which.name()) else { continue };
            if s.parse(which, v).is_err() {
                match which {
                    Setting::Strategy => bad.strategy = Some(v),
                    Setting::Order => bad.order = Some(v),
                    Setting::LateMin => bad.late_min = Some(v),
                    Setting::Tunables => bad.tunables = Some(v),
                    _ => {}
                }
            }
        }
        (s, bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting set to a value other than its default.
    pub(crate) fn every() -> Settings<'static> {
        Settings {
            strategy: Some(Strategy::Copy),
            order: Some(Order::Collapse),
            include: Some(b"libfoo"),
            exclude: Some(b"^/usr/lib/.*\\.so$"),
            inherit: Some(true),
            gdb: Some(true),
            verbose: Some(true),
            disable: Some(false),
            perf_map: Some(false),
            name: Some(false),
            late: Some(false),
            late_min: Some(6 << 20),
            tunables: Some(Tunables::Len(24)),
            via: Some(b"12:1:/bin/sh (sh)"),
            compat: Some(b"no-populate,no-pt-reclaim"),
            hot: Some(b"/tmp/hot list"),
            hot_list: Some(b"hugetext-hot 1 2097152\n- 0,2097152 /bin/x\n"),
            report: Some(true),
            preload: Some(b"/opt/lib/libhugetext.so"),
            store: Some(b"/srv/text store"),
        }
    }

    fn round_trip(s: &Settings<'static>) {
        // The written pairs, kept in a fixed table (no allocation here).
        let mut names: [&str; 20] = [""; 20];
        let mut values = [[0u8; 64]; 20];
        let mut lens = [0usize; 20];
        let mut n = 0;
        s.write(|name, v| {
            names[n] = name;
            values[n][..v.len()].copy_from_slice(v);
            lens[n] = v.len();
            n += 1;
        });
        let get = |name: &str| (0..n).find(|&i| names[i] == name).map(|i| &values[i][..lens[i]]);
        let (back, bad) = Settings::read(get);
        assert_eq!(bad, Invalid::default());
        assert_eq!(back, *s);
        for which in Setting::ALL {
            let (mut a, mut b) = (Buf::default(), Buf::default());
            assert_eq!(back.format(which, &mut a), s.format(which, &mut b), "{}", which.name());
        }
    }

    #[test]
    fn every_setting_round_trips() {
        round_trip(&every());
        round_trip(&Settings::default());
        let mut s = every();
        s.tunables = Some(Tunables::Unset);
        s.late_min = Some(0);
        s.strategy = Some(Strategy::Auto);
        s.order = Some(Order::File);
        s.report = Some(false);
        s.inherit = Some(false);
        s.disable = Some(true);
        round_trip(&s);
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut all = Setting::ALL
            .map(|s| s.name())
            .into_iter()
            .chain(KNOBS.iter().map(|k| k.name));
        while let Some(a) = all.next() {
            assert!(a.starts_with(PREFIX), "{a}");
            assert!(a.bytes().all(|c| c.is_ascii_uppercase() || c == b'_'), "{a}");
            assert!(!all.clone().any(|b| b == a), "{a} twice");
        }
        for s in Setting::ALL {
            assert!(!s.meaning().is_empty());
        }
    }

    #[test]
    fn bad_values_are_reported_and_left_unset() {
        let get = |name: &str| -> Option<&'static [u8]> {
            match name {
                STRATEGY => Some(b"fast"),
                ORDER => Some(b"copy"),
                LATE_MIN => Some(b"2MiB"),
                TUNABLES => Some(b"2k"),
                VERBOSE => Some(b"no"),
                _ => None,
            }
        };
        let (s, bad) = Settings::read(get);
        assert_eq!(
            bad,
            Invalid {
                strategy: Some(b"fast"),
                order: Some(b"copy"),
                late_min: Some(b"2MiB"),
                tunables: Some(b"2k")
            }
        );
        assert_eq!((s.strategy, s.order, s.late_min, s.tunables), (None, None, None, None));
        assert_eq!(s.verbose, Some(false));
    }
}
