//! The remap pass: find this process's text, and make every whole 2 MiB
//! window of it huge-backed, trying in order (strategy `auto`):
//!
//! 1. already PMD-mapped → nothing to do;
//! 2. `file`, zero copy (congruent mappings only): `MADV_HUGEPAGE` on the
//!    mapping, then `MADV_POPULATE_READ` — enough when the page cache
//!    already holds 2 MiB folios (`hugetext warm`, or an earlier run); else
//!    drop this process's PTEs for the window (`MADV_DONTNEED`: the text is
//!    clean file data, it refaults identically), evict the small folios
//!    (`POSIX_FADV_DONTNEED`, which only evicts folios nobody maps) and
//!    populate again: readahead in a `VM_HUGEPAGE` mapping reads PMD-order
//!    folios, which this and every later process map with PMDs. Where
//!    `MADV_DONTNEED` leaves the emptied page table (kernels before 6.14;
//!    detected at the first window, `HUGETEXT_COMPAT=no-pt-reclaim`
//!    reproduces it), each window is also replaced by a new mapping of the
//!    same file range (`mmap(MAP_FIXED)`, which frees the table);
//! 3. `collapse`: `MADV_COLLAPSE` (file text needs
//!    `CONFIG_READ_ONLY_THP_FOR_FS` before Linux 7.x, and a filesystem with
//!    large folios from 7.x; detected at the first try). With
//!    `HUGETEXT_ORDER=collapse` (set by `run` where it measured collapse
//!    cheaper than evict + refill on the program's filesystem) it runs
//!    between step 2's cached-folio check and its eviction;
//! 4. `shmem`: map the windows from the file's copy in the text store (a
//!    huge tmpfs that `hugetext warm --shmem` fills), `MAP_PRIVATE |
//!    MAP_FIXED` over the text: 2 MiB shmem folios, shared by every
//!    process that maps the copy (see shmem.rs);
//! 5. `copy`: anonymous 2 MiB-aligned `MADV_HUGEPAGE` memory, copy, `r-x`,
//!    then one `mremap(MREMAP_MAYMOVE|MREMAP_FIXED)` over the old windows, so
//!    code running there never sees a hole.
//!
//! Which routes a chunk of windows takes is decided by [`plan`], a pure
//! function of the facts gathered first (strategy, congruence, a refused
//! collapse, `HUGETEXT_GDB`, THP `never`, already PMD-mapped); each route is
//! a function of its own module taking the [`Pass`] (`mapping::route_already`,
//! `file::route_file`, `collapse::route_collapse`, `shmem::route_shmem`,
//! `copy::route_copy`); the methods of `Pass` itself, which every route
//! shares (failures, notes, populating, measuring again), are all here.
//!
//! Every window is verified after each step: with `PAGEMAP_SCAN` (Linux
//! 6.7+), else with the per-VMA totals of `/proc/self/smaps` (smaps.rs: a
//! window counts as huge only when that is proved, so the routes may act on
//! windows that were huge already, which costs time, never correctness).
//! Without `MADV_POPULATE_READ` (before 5.14) pages are faulted in by
//! touching them. Any failure leaves the original mapping in place.

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::config::{Config, Strategy};
use crate::out::line;
use crate::scan;
use crate::sys;
use crate::verify::Verifier;
use crate::zeroed::{Zeroable, Zeroed};

mod collapse;
mod collect;
mod copy;
mod file;
mod mapping;
mod plan;
mod report;
mod shmem;

/// The kernel refused `MADV_POPULATE_READ` (EINVAL: before Linux 5.14);
/// remembered for later passes. Process-wide because it is a fact of the
/// kernel, not of one pass: every later pass of this copy of the library
/// skips the refused call. Read and written only here ([`Pass::populate`] and
/// the pass's start), under the pass lock (`BUSY` in lib.rs).
static NO_POPULATE: AtomicBool = AtomicBool::new(false);

const MAXC: usize = 1024;

const PATHS: usize = 192 * 1024;

/// A mapped file: (device as /proc/PID/maps shows it, inode).
pub type FileKey = ((u32, u32), u64);

/// Which text mappings a pass handles.
pub struct Scope<'a> {
    /// `None`: every text mapping (the pass at start, and the C API);
    /// `Some`: only mappings of these files (objects loaded after start,
    /// [`crate::audit`]).
    pub only: Option<&'a [FileKey]>,
    /// Leave mappings with fewer bytes in whole 2 MiB windows alone
    /// (`HUGETEXT_LATE_MIN`, for objects loaded after start).
    pub min: u64,
}

impl Scope<'_> {
    pub const ALL: Scope<'static> = Scope { only: None, min: 0 };
}

/// Bytes of `[start, end)` in whole windows of the kernel's unit. A range
/// shorter than the smallest unit of any kernel
/// ([`hugetext_abi::geometry::MIN_UNIT`]) holds none: for it the PMD size
/// is not read (sysfs), which most of the text a process maps never needs.
pub fn window_bytes(start: usize, end: usize) -> u64 {
    if end.saturating_sub(start) < hugetext_abi::geometry::MIN_UNIT {
        return 0;
    }
    scan::windows(start, end).bytes() as u64
}

/// Does a late pass with `scope` handle a text mapping of `key` with
/// `windows` bytes in whole windows? (`Some(false)`: it is one of the new
/// objects but below the minimum.) A pure function of the facts.
fn in_scope(scope: &Scope, key: FileKey, windows: u64) -> Option<bool> {
    match scope.only {
        None => Some(true),
        Some(keys) if !keys.contains(&key) => None,
        Some(_) => Some(windows >= scope.min.max(1)),
    }
}

#[derive(Clone, Copy, Default)]
struct Cand {
    start: usize,
    end: usize,
    off: u64,
    dev: (u32, u32),
    ino: u64,
    path_at: u32,
    path_len: u32,
    /// An earlier pass already moved this text into anonymous memory.
    copied: bool,
}

/// Working memory, in its own [`Zeroed`] mapping so that neither the stack
/// of the calling thread nor the heap is involved; all-zero is the empty
/// state.
struct State {
    buf: [u8; 16384],
    cands: [Cand; MAXC],
    n: usize,
    paths: [u8; PATHS],
    plen: usize,
    /// (dev, ino) of this library's own file, when `own_known`.
    own: ((u32, u32), u64),
    own_known: bool,
    truncated: bool,
}

// SAFETY: integers, a bool and a tuple of integers: all-zero is a value.
unsafe impl Zeroable for Cand {}
// SAFETY: byte arrays, an array of `Cand` (Zeroable), integers, a tuple of
// integers and bools: all-zero is the empty state (no candidates, own file
// not known).
unsafe impl Zeroable for State {}

/// What a pass did, in bytes of whole 2 MiB windows.
#[derive(Default)]
struct Totals {
    windows: u64,
    already: u64,
    file: u64,
    collapse: u64,
    copy: u64,
    /// Bytes made huge by mapping the file's copy in the text store.
    shmem: u64,
    /// Bytes of the copies read from the file with `pread` (page cache in
    /// folios smaller than 2 MiB, [`copy::fill`]).
    copy_read: u64,
    /// Bytes of the copies copied from 2 MiB page-cache folios mapped with
    /// PMDs (the text itself, or a congruent mapping of its file).
    copy_pmd: u64,
    /// Time spent in each route, ns: already, file, collapse, copy, shmem.
    ns: [u64; 5],
    /// Time spent reading and parsing `/proc/self/maps`, ns.
    ns_maps: u64,
    /// Of the `copy` route's time: filling the copies (page-cache folios
    /// or `pread`, page faults and zeroing included), ns.
    ns_copy_fill: u64,
    /// [`Totals::ns_copy_fill`] as the thread's CPU time, ns.
    ns_copy_fill_cpu: u64,
    /// Of the `copy` route's time: allocating and zeroing the copies' huge
    /// pages before the fill (`MADV_POPULATE_WRITE`), ns, and as CPU time.
    ns_copy_zero: u64,
    ns_copy_zero_cpu: u64,
    /// Of the `copy` route's time: naming the copied code in the perf map
    /// (mapping the ELF file, reading its symbols, writing the lines), ns.
    ns_perf_map: u64,
    /// Time from the pass's start to its first route (settings, hot list,
    /// verifier, working memory, maps), ns.
    ns_setup: u64,
    /// Bytes of windows replaced with `mmap(MAP_FIXED)` ([`file::replace`]).
    replaced: u64,
    mappings: u32,
    small_mappings: u32,
    first_err: isize,
    collapse_unsupported: bool,
    /// [`Plan::cont_note`] said already.
    cont_noted: bool,
    perf_map_fd: isize,
    naming_failed: bool,
}

impl Totals {
    /// Bytes huge-backed after the pass, whichever route made them so.
    fn huge(&self) -> u64 {
        self.already + self.file + self.collapse + self.copy + self.shmem
    }
}

/// Maximal runs of set bits in `mask`: (first window, count).
fn runs(mut mask: u64) -> impl Iterator<Item = (usize, usize)> {
    let mut base = 0usize;
    core::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let skip = mask.trailing_zeros() as usize;
        mask >>= skip;
        let len = (!mask).trailing_zeros() as usize;
        let first = base + skip;
        mask = if len >= 64 { 0 } else { mask >> len };
        base = first + len;
        Some((first, len))
    })
}

fn full(n: usize) -> u64 {
    if n >= 64 {
        !0
    } else {
        (1u64 << n) - 1
    }
}

/// A chunk of (up to 64) windows of one text mapping and what is known of
/// them (not to be confused with `hugetext_abi::geometry::Windows`, the
/// geometry of a whole range).
struct Chunk {
    /// First window (2 MiB-aligned).
    a: usize,
    /// Number of windows (`<= 64`).
    n: usize,
    /// `full(n)`.
    all: u64,
    /// Bit `i`: window `i` proved huge.
    huge: u64,
    /// Huge bytes of the accounting scope at the last measure
    /// ([`Verifier::measure`]).
    hb: u64,
}

impl Chunk {
    fn done(&self) -> bool {
        self.huge & self.all == self.all
    }
}

/// What the route choice for a chunk depends on, gathered before any route
/// runs.
#[derive(Clone, Copy, Debug)]
struct Facts {
    strategy: Strategy,
    /// `HUGETEXT_ORDER`: which zero-copy route comes first.
    order: crate::config::Order,
    /// Address − file offset is a multiple of 2 MiB.
    congruent: bool,
    /// Every window is PMD-mapped already.
    all_huge: bool,
    /// `MADV_COLLAPSE` refused file text earlier in this pass (kernels
    /// without `CONFIG_READ_ONLY_THP_FOR_FS`, or before 6.1).
    collapse_refused: bool,
    /// `HUGETEXT_GDB`: never move text to anonymous memory.
    gdb: bool,
    /// transparent_hugepage `never` (contpte unit: the 2 MiB mTHP size
    /// off): anonymous memory cannot be huge.
    no_anon_thp: bool,
    /// The unit is a contiguous-PTE block (arm64, 64 KiB pages).
    contpte: bool,
    /// The verifier sees the folios behind file text (contpte unit: PFN
    /// access).
    sees_folios: bool,
}

/// Whether the `copy` route runs, or why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyPlan {
    /// The strategy does not allow it.
    No,
    Yes,
    /// Allowed but impossible or unwanted here: the note to print.
    Skip(&'static str),
}

/// The routes to try on a chunk, in this order, each only while windows
/// are left that are not huge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    file: bool,
    collapse: bool,
    /// `collapse` before the eviction step of `file` (`HUGETEXT_ORDER`);
    /// cached 2 MiB folios are mapped first either way.
    collapse_first: bool,
    /// Say that only `copy` could help (`file` or `collapse` asked for, text
    /// not congruent).
    not_congruent: bool,
    /// Why a zero-copy route asked for cannot reach a contpte unit, to say
    /// once per pass.
    cont_note: Option<&'static str>,
    /// Map windows from the file's copy in the text store (after the
    /// zero-copy routes, before `copy`).
    shmem: bool,
    copy: CopyPlan,
}

struct Pass<'a> {
    cfg: &'a Config,
    st: &'a State,
    scan: Verifier,
    t: Totals,
    no_anon_thp: bool,
    /// Fault pages in by touching them (no `MADV_POPULATE_READ`).
    touch: bool,
    /// Evicted windows that refaulted small from small folios ([`file::window`]).
    checks: u8,
    /// Fresh-mapping probes made ([`file::cache_is_pmd`]).
    probes: u8,
}

impl Pass<'_> {
    fn fail(&mut self, c: &Cand, what: &str, e: isize) {
        if self.t.first_err == 0 {
            self.t.first_err = e;
        }
        if self.cfg.verbose {
            line()
                .bytes(self.st.path(c))
                .s(": ")
                .s(what)
                .err(e)
                .s("; text left in place");
        }
    }

    fn note(&self, c: &Cand, what: &str) {
        if self.cfg.verbose {
            line().bytes(self.st.path(c)).s(": ").s(what);
        }
    }

    /// What verification failed, for messages.
    fn verifier_name(&self) -> &'static str {
        if self.scan.is_smaps() {
            "reading /proc/self/smaps"
        } else if self.scan.is_cont() {
            "reading pagemap"
        } else {
            "PAGEMAP_SCAN"
        }
    }

    /// `MADV_POPULATE_READ`, or, where the kernel has none (EINVAL) or
    /// `HUGETEXT_COMPAT=no-populate`, a load from every page. Raw syscalls
    /// and this library's code only: used in the critical section.
    fn populate(&mut self, addr: usize, len: usize) -> isize {
        if !self.touch {
            let r = sys::advise(addr, len, sys::Keep::PopulateRead);
            if r != -(libc::EINVAL as isize) {
                return r;
            }
            self.populate_refused();
        }
        // SAFETY: callers pass whole windows of a text mapping (`r-x`, the
        // file's own pages), mapped for the whole call.
        unsafe { sys::touch(addr, len) };
        0
    }

    /// The kernel refused `MADV_POPULATE_READ`: fault pages in by touching
    /// them from now on, in this pass and the process's later ones.
    fn populate_refused(&mut self) {
        self.touch = true;
        NO_POPULATE.store(true, Relaxed);
    }

    /// Measure the windows of `w` again: add the proved windows to
    /// `w.huge` and return the huge-backed bytes gained since the last
    /// measure (`w.hb`; with smaps, bytes of the whole mapping: only this
    /// chunk's windows are being worked on, so the gain is theirs). A loss
    /// (a huge window dropped and refaulted small) is not subtracted, so a
    /// window is never counted twice.
    fn remeasure(&self, c: &Cand, w: &mut Chunk) -> u64 {
        match self.scan.measure(w.a, w.n, c.start, c.end) {
            Ok((m, b)) => {
                w.huge |= m;
                let gain = b.saturating_sub(w.hb);
                w.hb = w.hb.max(b);
                gain
            }
            Err(_) => 0,
        }
    }

    fn file_off(c: &Cand, addr: usize) -> u64 {
        c.off + (addr - c.start) as u64
    }

    /// Every candidate mapping (only counted when THP is disabled for this
    /// process), then the summary; returns what [`remap_in`] does.
    fn run(&mut self, scope: &Scope, thp_off: bool, t0: u64) -> isize {
        if thp_off && self.cfg.verbose {
            line().s("huge pages are disabled for this process (prctl PR_SET_THP_DISABLE): text left as it is");
        }
        let st = self.st;
        for c in &st.cands[..st.n] {
            if thp_off {
                self.t.windows += window_bytes(c.start, c.end);
            } else {
                mapping::mapping(self, c);
            }
        }
        if self.t.perf_map_fd > 0 {
            sys::close(self.t.perf_map_fd as i32);
        }
        // A late pass whose objects were all filtered out says nothing.
        if self.cfg.verbose && (scope.only.is_none() || self.t.windows > 0) {
            report::summary(self, scope, t0);
        }
        if self.cfg.report && (scope.only.is_none() || self.t.windows > 0) {
            report::record(self, scope, t0);
        }
        outcome(&self.t, thp_off)
    }
}

/// Run one pass. Returns the bytes of text (whole 2 MiB windows of
/// executable mappings) huge-backed after the pass, or `-errno` when nothing
/// is huge-backed and something failed.
pub fn remap(cfg: &Config) -> isize {
    remap_in(cfg, &Scope::ALL)
}

/// [`remap`] limited to the mappings `scope` names.
pub fn remap_in(cfg: &Config, scope: &Scope) -> isize {
    // The PMD size is known before any critical section.
    scan::unit();
    let t0 = sys::now_ns();
    report::config_notes(cfg);
    if let Err(e) = crate::hot::load(cfg.hot, cfg.verbose) {
        return e;
    }
    let thp_off = sys::thp_disabled();
    let scan = match collect::open_verifier(cfg) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let touch = cfg.compat.no_populate || NO_POPULATE.load(Relaxed);
    report::compat_notes(cfg);
    let mut mem = match Zeroed::<State>::map() {
        Ok(m) => m,
        Err(e) => {
            if cfg.verbose {
                line().s("cannot allocate working memory").err(e);
            }
            return e;
        }
    };
    let st: &mut State = &mut mem;
    let t_maps = sys::now_ns();
    if let Err(e) = st.collect(cfg, scope) {
        if cfg.verbose {
            line().s("cannot read /proc/self/maps").err(e).s("; text left as it is");
        }
        return e;
    }
    st.skip_own();
    if st.truncated && cfg.verbose {
        line()
            .s("too many text mappings: only the first ")
            .u(st.n as u64)
            .s(" are handled");
    }
    let mut pass = Pass {
        cfg,
        st,
        scan,
        t: Totals {
            ns_maps: sys::now_ns().saturating_sub(t_maps),
            ns_setup: sys::now_ns().saturating_sub(t0),
            ..Totals::default()
        },
        no_anon_thp: collect::anon_unit_never(),
        touch,
        checks: 0,
        probes: 0,
    };
    pass.run(scope, thp_off, t0)
}

/// The pass's result: the bytes made (or found) huge, else its first error,
/// else `-EPERM` when THP is disabled for the process. Pure.
fn outcome(t: &Totals, thp_off: bool) -> isize {
    let huge = t.huge();
    if huge == 0 && t.first_err < 0 {
        t.first_err
    } else if huge == 0 && thp_off {
        -(libc::EPERM as isize)
    } else {
        huge as isize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_scope_takes_new_objects_above_the_minimum() {
        let a: FileKey = ((8, 1), 42);
        let b: FileKey = ((8, 1), 43);
        let keys = [a];
        let late = Scope {
            only: Some(&keys),
            min: 2 << 20,
        };
        assert_eq!(in_scope(&late, a, 4 << 20), Some(true));
        assert_eq!(in_scope(&late, a, 2 << 20), Some(true));
        assert_eq!(in_scope(&late, a, 0), Some(false));
        assert_eq!(in_scope(&late, b, 64 << 20), None);
        let big = Scope {
            only: Some(&keys),
            min: 8 << 20,
        };
        assert_eq!(in_scope(&big, a, 6 << 20), Some(false));
        assert_eq!(in_scope(&Scope::ALL, b, 0), Some(true));
        // In units of the running kernel's PMD size, whatever it is.
        let p = scan::unit();
        assert_eq!(window_bytes(0x1000, 3 * p - 0x1000), p as u64);
        assert_eq!(window_bytes(p, 3 * p), 2 * p as u64);
        assert_eq!(window_bytes(0x1000, 2 * p - 0x1000), 0);
    }

    #[test]
    fn runs_of_bits() {
        let v: Vec<_> = runs(0b1110_0110).collect();
        assert_eq!(v, vec![(1, 2), (5, 3)]);
        let v: Vec<_> = runs(!0).collect();
        assert_eq!(v, vec![(0, 64)]);
        let v: Vec<_> = runs(1 << 63).collect();
        assert_eq!(v, vec![(63, 1)]);
        assert_eq!(runs(0).count(), 0);
    }
}
