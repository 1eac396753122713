//! The environment interface between `hugetext run` (which writes it) and
//! libhugetext.so (which reads it): the loader's variables, strategy words
//! and which `LD_PRELOAD` entries are this library. The `HUGETEXT_*`
//! settings themselves are named in [`crate::settings`]. See doc/run.md.

/// The first line libhugetext.so writes into a perf map it creates
/// (`/tmp/perf-PID.map`): a one-byte symbol at address 0, which no process
/// maps, so perf names nothing with it. `run` removes maps that start with
/// it once their process has ended and they are [`PERF_MAP_KEEP_SECS`] old.
pub const PERF_MAP_MARK: &[u8] = b"0 1 hugetext-perf-map-v1\n";
/// How long a perf map of an ended process is kept (1 hour): `perf report`
/// run after the program still names its copied code.
pub const PERF_MAP_KEEP_SECS: u64 = 3600;
/// The dynamic loader's list of libraries to preload.
pub const LD_PRELOAD: &str = "LD_PRELOAD";
/// The dynamic loader's list of audit libraries (rtld-audit(7)): `run` names
/// libhugetext.so there too, so that it sees objects loaded after start.
pub const LD_AUDIT: &str = "LD_AUDIT";
/// Default of `HUGETEXT_LATE_MIN`: 2 MiB, the smallest PMD size, so any object with
/// one whole window (whatever the kernel's PMD size) qualifies.
pub const LATE_MIN_DEFAULT: u64 = 2 << 20;

/// The loader's tunables (`GLIBC_TUNABLES`): `run` adds room for static TLS
/// there when it names an auditor; the preload puts the value back.
pub const GLIBC_TUNABLES: &str = "GLIBC_TUNABLES";
/// The tunable `run` adds ([`GLIBC_TUNABLES`]).
pub const STATIC_TLS_TUNABLE: &str = "glibc.rtld.optional_static_tls";

/// What `GLIBC_TUNABLES` was before `run` added [`STATIC_TLS_TUNABLE`]
/// (`HUGETEXT_TUNABLES`): `-` (unset), or the length in bytes of its value,
/// a prefix of the new one. The preload restores it for the program's
/// children and removes the variable ([`tunables_restore`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tunables {
    /// `-`: it was unset.
    Unset,
    /// Its value was this many bytes.
    Len(usize),
}

impl Tunables {
    /// Parse the note: `-` or decimal digits; `None` for anything else.
    pub fn parse(v: &[u8]) -> Option<Tunables> {
        match v {
            b"-" => Some(Tunables::Unset),
            n => Some(Tunables::Len(
                usize::try_from(parse_size(n).filter(|_| n.iter().all(u8::is_ascii_digit))?).ok()?,
            )),
        }
    }
}

/// How to put `GLIBC_TUNABLES` back, from the [`Tunables`] note and its
/// current value: `Some(None)` unset it, `Some(Some(n))` keep its first `n`
/// bytes; `None` when the note does not describe the value (left as it is):
/// what follows the kept bytes must be the one [`STATIC_TLS_TUNABLE`]
/// setting `run` appended (after a `:` when something is kept).
pub fn tunables_restore(note: &[u8], cur: Option<&[u8]>) -> Option<Option<usize>> {
    let cur = cur?;
    let keep = match Tunables::parse(note)? {
        Tunables::Unset => None,
        Tunables::Len(n) => Some(n),
    };
    let added = match keep {
        None => cur,
        Some(0) => cur,
        Some(n) => cur.get(n..)?.strip_prefix(b":")?,
    };
    let value = added.strip_prefix(STATIC_TLS_TUNABLE.as_bytes())?.strip_prefix(b"=")?;
    (!value.is_empty() && value.iter().all(u8::is_ascii_digit)).then_some(keep)
}

/// How many programs with text but no whole window (judged: nothing to
/// remap, so followed like a launcher) one chain may pass through.
/// Launchers (see [`LAUNCHER_TEXT`]) do not count.
pub const MAX_HOPS: u32 = 8;

/// How many processes one chain may follow in all (launchers included):
/// a bound that only a loop of launchers reaches.
pub const MAX_LAUNCHERS: u32 = 64;

/// A process whose executable has less text than this (bytes) and no
/// whole PMD-size window in any executable mapping is a launcher (a
/// shell, `env`, `su`, `runuser`, `pg_ctl`): it passes the preload on to
/// the processes it starts without counting against [`MAX_HOPS`].
pub const LAUNCHER_TEXT: u64 = 2 << 20;

/// A `HUGETEXT_VIA` value: where a process stands in a chain of followed
/// launchers. Written `PID:HOPS:JUDGED:CHAIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ViaValue<'a> {
    /// The pid of the last process followed.
    pub pid: u32,
    /// Processes followed so far (launchers and judged programs).
    pub hops: u32,
    /// Programs with text but no whole window followed so far.
    pub judged: u32,
    /// Their names, `" -> "`-separated.
    pub chain: &'a [u8],
}

/// Parse a `HUGETEXT_VIA` value; all zero and empty for an empty or
/// malformed one.
pub fn parse_via(v: &[u8]) -> ViaValue<'_> {
    let num = |f: &[u8]| -> Option<u32> {
        let n = parse_size(f).filter(|_| f.iter().all(u8::is_ascii_digit))?;
        u32::try_from(n).ok()
    };
    let mut it = v.splitn(4, |&c| c == b':');
    match (
        it.next().and_then(num),
        it.next().and_then(num),
        it.next().and_then(num),
        it.next(),
    ) {
        (Some(pid), Some(hops), Some(judged), Some(chain)) => ViaValue {
            pid,
            hops,
            judged,
            chain,
        },
        _ => ViaValue::default(),
    }
}

/// Parse a size: decimal bytes with an optional `K`, `M` or `G` suffix
/// (binary units, either case). `None` for anything else.
pub fn parse_size(v: &[u8]) -> Option<u64> {
    let (digits, shift) = match v.last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 10),
        b'm' | b'M' => (&v[..v.len() - 1], 20),
        b'g' | b'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    n.checked_mul(1 << shift)
}

/// How the preload may make text huge-backed (`HUGETEXT_STRATEGY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Per 2 MiB window: already huge, else `file`, else `collapse`, else
    /// `shmem`, else `copy`.
    #[default]
    Auto,
    /// Zero copy: refault the file's text through 2 MiB page-cache folios.
    File,
    /// `MADV_COLLAPSE` (file text needs `CONFIG_READ_ONLY_THP_FOR_FS`).
    Collapse,
    /// Map the windows from the file's copy in the text store (a huge
    /// tmpfs filled by `hugetext warm --shmem`): shared 2 MiB shmem pages.
    Shmem,
    /// Copy into anonymous 2 MiB pages and `mremap` them over the text.
    Copy,
}

impl Strategy {
    /// Every strategy, `auto` first.
    pub const ALL: [Strategy; 5] = [
        Strategy::Auto,
        Strategy::File,
        Strategy::Collapse,
        Strategy::Shmem,
        Strategy::Copy,
    ];

    /// The word for `HUGETEXT_STRATEGY`.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::File => "file",
            Strategy::Collapse => "collapse",
            Strategy::Shmem => "shmem",
            Strategy::Copy => "copy",
        }
    }

    /// Parse the value of `HUGETEXT_STRATEGY`: empty means `auto`; `None` for an
    /// unknown word.
    pub fn parse(v: &[u8]) -> Option<Strategy> {
        Some(match v {
            b"" | b"auto" => Strategy::Auto,
            b"file" => Strategy::File,
            b"collapse" => Strategy::Collapse,
            b"shmem" => Strategy::Shmem,
            b"copy" => Strategy::Copy,
            _ => return None,
        })
    }
}

/// Which zero-copy route the `auto` strategy tries first on windows whose
/// page cache is not in 2 MiB folios yet (`HUGETEXT_ORDER`): `run` sets it
/// from the two routes' costs measured on the program's filesystem
/// (`hugetext doctor` shows them). Either way, cached 2 MiB folios are
/// mapped first and `copy` comes last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    /// Evict the small folios and read the window back in one 2 MiB folio,
    /// then `MADV_COLLAPSE` what stayed small.
    #[default]
    File,
    /// `MADV_COLLAPSE` in place first (no I/O; works where other processes
    /// map the page cache), then evict + refill what stayed small.
    Collapse,
}

impl Order {
    /// The word for `HUGETEXT_ORDER`.
    pub fn as_str(self) -> &'static str {
        match self {
            Order::File => "file",
            Order::Collapse => "collapse",
        }
    }

    /// Parse the value of `HUGETEXT_ORDER`: empty means `file`; `None` for an
    /// unknown word.
    pub fn parse(v: &[u8]) -> Option<Order> {
        Some(match v {
            b"" | b"file" => Order::File,
            b"collapse" => Order::Collapse,
            _ => return None,
        })
    }
}

/// The separators of `LD_PRELOAD` entries (ld.so accepts both).
pub fn is_preload_separator(c: u8) -> bool {
    c == b':' || c == b' '
}

/// The non-empty entries of an `LD_PRELOAD` value.
pub fn preload_entries(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&c| is_preload_separator(c)).filter(|e| !e.is_empty())
}

/// Is this `LD_PRELOAD` or `LD_AUDIT` entry (a path or a file name) one of
/// hugetext's: a file named `libhugetext.so`, or `libhugetext.so.` and a
/// version, or the audit module `run` writes ([`AUDIT_MODULE_PREFIX`]`…`
/// `.so`)? Another library whose name merely starts the same
/// (`libhugetextual.so`) is not.
pub fn is_hugetext_preload(entry: &[u8]) -> bool {
    let base = match entry.iter().rposition(|&c| c == b'/') {
        Some(i) => &entry[i + 1..],
        None => entry,
    };
    base == b"libhugetext.so"
        || base.starts_with(b"libhugetext.so.")
        || (base.starts_with(AUDIT_MODULE_PREFIX.as_bytes()) && base.ends_with(b".so"))
}

/// The file name of the small audit module `hugetext run` names in
/// `LD_AUDIT` starts with this (then its content's hash, then `.so`).
pub const AUDIT_MODULE_PREFIX: &str = "libhugetext-audit-";

/// FNV-1a, 64 bits. Pure. Names the audit module by its content (after
/// [`AUDIT_MODULE_PREFIX`]); the preload keys library names with it.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn via_is_pid_hops_judged_chain() {
        let v = |pid, hops, judged, chain: &'static [u8]| ViaValue {
            pid,
            hops,
            judged,
            chain,
        };
        assert_eq!(parse_via(b""), ViaValue::default());
        assert_eq!(parse_via(b"12:1:0:/usr/bin/x (sh)"), v(12, 1, 0, b"/usr/bin/x (sh)"));
        assert_eq!(parse_via(b"12:2:1:/a:b (sh) -> /c"), v(12, 2, 1, b"/a:b (sh) -> /c"));
        assert_eq!(parse_via(b"12:x:0:/a"), ViaValue::default());
        assert_eq!(parse_via(b"12k:1:0:/a"), ViaValue::default());
        assert_eq!(parse_via(b"12:1:/a"), ViaValue::default());
    }

    #[test]
    fn tunables_are_put_back_as_they_were() {
        let v = b"glibc.malloc.arena_max=2:glibc.rtld.optional_static_tls=612";
        assert_eq!(tunables_restore(b"24", Some(v)), Some(Some(24)));
        assert_eq!(
            tunables_restore(b"-", Some(b"glibc.rtld.optional_static_tls=612")),
            Some(None)
        );
        // Set but empty before: kept, empty.
        assert_eq!(
            tunables_restore(b"0", Some(b"glibc.rtld.optional_static_tls=612")),
            Some(Some(0))
        );
        // Anything else is left alone.
        assert_eq!(tunables_restore(b"23", Some(v)), None);
        assert_eq!(tunables_restore(b"-", Some(v)), None);
        assert_eq!(tunables_restore(b"2k", Some(v)), None);
        assert_eq!(tunables_restore(b"-", None), None);
        assert_eq!(tunables_restore(b"99", Some(v)), None);
    }

    #[test]
    fn strategy_words_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.as_str().as_bytes()), Some(s));
        }
        assert_eq!(Strategy::parse(b""), Some(Strategy::Auto));
        assert_eq!(Strategy::parse(b"Copy"), None);
        assert_eq!(Strategy::parse(b"copy "), None);
    }

    #[test]
    fn order_words_round_trip() {
        for o in [Order::File, Order::Collapse] {
            assert_eq!(Order::parse(o.as_str().as_bytes()), Some(o));
        }
        assert_eq!(Order::parse(b""), Some(Order::File));
        assert_eq!(Order::parse(b"copy"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"4096"), Some(4096));
        assert_eq!(parse_size(b"2M"), Some(2 << 20));
        assert_eq!(parse_size(b"6m"), Some(6 << 20));
        assert_eq!(parse_size(b"1G"), Some(1 << 30));
        assert_eq!(parse_size(b"512k"), Some(512 << 10));
        for bad in [&b""[..], b"M", b"-1", b"2 M", b"2MiB", b"0x10", b"99999999999999999999"] {
            assert_eq!(parse_size(bad), None, "{:?}", core::str::from_utf8(bad));
        }
        assert_eq!(parse_size(b"17179869184G"), None);
    }

    #[test]
    fn preload_entries_and_ours() {
        let v = b"/a/libx.so: libhugetext.so::/usr/lib/libhugetext.so.0 /opt/libhugetextual.so";
        let e: [&[u8]; 4] = [
            b"/a/libx.so",
            b"libhugetext.so",
            b"/usr/lib/libhugetext.so.0",
            b"/opt/libhugetextual.so",
        ];
        assert!(preload_entries(v).eq(e.iter().copied()));
        assert!(!is_hugetext_preload(b"/a/libx.so"));
        assert!(is_hugetext_preload(b"libhugetext.so"));
        assert!(is_hugetext_preload(b"/usr/lib/libhugetext.so.0"));
        assert!(!is_hugetext_preload(b"/libhugetext/libfoo.so"));
        assert!(!is_hugetext_preload(b"/opt/libhugetextual.so"));
        assert!(!is_hugetext_preload(b"libhugetext.sox"));
        assert!(!is_hugetext_preload(b"/opt/libhugetext"));
        assert!(is_hugetext_preload(b"/run/hugetext/libhugetext-audit-0123abcd.so"));
        assert!(!is_hugetext_preload(b"/run/hugetext/libhugetext-audit-0123abcd.sox"));
        assert!(!is_hugetext_preload(b"/opt/libhugetext-auditor.so"));
        assert_eq!(preload_entries(b" : ").count(), 0);
    }
}
