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
//!    `CONFIG_READ_ONLY_THP_FOR_FS`; detected at the first try);
//! 4. `copy`: anonymous 2 MiB-aligned `MADV_HUGEPAGE` memory, copy, `r-x`,
//!    then one `mremap(MREMAP_MAYMOVE|MREMAP_FIXED)` over the old windows, so
//!    code running there never sees a hole.
//!
//! Which routes a chunk of windows takes is decided by [`plan`], a pure
//! function of the facts gathered first (strategy, congruence, a refused
//! collapse, `HUGETEXT_GDB`, THP `never`, already PMD-mapped); each route is
//! one method of [`Pass`] (`route_already`, `route_file`, `route_collapse`,
//! `route_copy`).
//!
//! Every window is verified after each step: with `PAGEMAP_SCAN` (Linux
//! 6.7+), else with the per-VMA totals of `/proc/self/smaps` (smaps.rs: a
//! window counts as huge only when that is proved, so the routes may act on
//! windows that were huge already, which costs time, never correctness).
//! Without `MADV_POPULATE_READ` (before 5.14) pages are faulted in by
//! touching them. Any failure leaves the original mapping in place.

use crate::config::{Config, Strategy};
use crate::out::{line, Out};
use crate::perfmap::{self, ElfFile};
use crate::scan::{self, Scanner};
use crate::smaps::Smaps;
use crate::sys;
use crate::verify::Verifier;
use crate::zeroed::{Zeroable, Zeroed};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed};
use hugetext_abi::copyname;
use hugetext_abi::pattern;
use hugetext_abi::thp::ThpMode;

/// The kernel refused `MADV_POPULATE_READ` (EINVAL: before Linux 5.14);
/// remembered for later passes.
static NO_POPULATE: AtomicBool = AtomicBool::new(false);

/// What `MADV_DONTNEED` of a whole 2 MiB window does with the emptied page
/// table on this kernel: not known yet, frees it (`CONFIG_PT_RECLAIM`,
/// 6.14+), or keeps it (then the file route replaces windows with
/// `mmap(MAP_FIXED)`, [`Pass::replace`]). Found out at the first dropped
/// window that refaults huge, or small from a 2 MiB folio
/// ([`Pass::window`]); remembered for the process.
static PT: AtomicU8 = AtomicU8::new(PT_UNKNOWN);
const PT_UNKNOWN: u8 = 0;
const PT_FREED: u8 = 1;
const PT_KEPT: u8 = 2;
/// Evicted windows per pass that may refault small from small folios
/// without deciding it (a filesystem without large folios would otherwise
/// cost a probe per window)...
const MAX_CHECKS: u8 = 4;
/// ... and probes per pass in all (windows not evicted: another process
/// maps their page cache, or threads running the text kept it mapped).
const MAX_PROBES: u8 = 16;

const MAXC: usize = 1024;

/// Ranges this library moved into anonymous memory in earlier passes (the
/// kernel may not support naming them: CONFIG_ANON_VMA_NAME). Only touched
/// while holding the pass lock (`BUSY` in lib.rs), hence Relaxed.
static COPIED: [(AtomicUsize, AtomicUsize); 64] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; 64];

fn remember_copy(start: usize, end: usize) {
    for (s, e) in COPIED.iter() {
        if s.load(Relaxed) == 0 {
            s.store(start, Relaxed);
            e.store(end, Relaxed);
            return;
        }
    }
}

fn was_copied(start: usize, end: usize) -> bool {
    COPIED.iter().any(|(s, e)| {
        let (s, e) = (s.load(Relaxed), e.load(Relaxed));
        s != 0 && s <= start && end <= e
    })
}
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

/// Bytes of `[start, end)` in whole PMD-size windows.
pub fn window_bytes(start: usize, end: usize) -> u64 {
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
    /// Bytes of the copies read from the file with `pread` (page cache in
    /// folios smaller than 2 MiB, [`Pass::fill`]).
    copy_read: u64,
    /// Bytes of the copies copied from 2 MiB page-cache folios mapped with
    /// PMDs (the text itself, or a congruent mapping of its file).
    copy_pmd: u64,
    /// Time spent in each route, ns: already, file, collapse, copy.
    ns: [u64; 4],
    /// Bytes of windows replaced with `mmap(MAP_FIXED)` ([`Pass::replace`]).
    replaced: u64,
    mappings: u32,
    small_mappings: u32,
    first_err: isize,
    collapse_unsupported: bool,
    perf_map_fd: isize,
    naming_failed: bool,
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

fn thp_never() -> bool {
    let fd = sys::open(
        b"/sys/kernel/mm/transparent_hugepage/enabled\0",
        libc::O_RDONLY | libc::O_CLOEXEC,
        0,
    );
    if fd < 0 {
        return true; // no THP support built in
    }
    let mut b = [0u8; 128];
    let n = sys::read(fd as i32, &mut b).max(0) as usize;
    sys::close(fd as i32);
    ThpMode::parse(&b[..n]) == Some(ThpMode::Never)
}

impl State {
    fn path(&self, c: &Cand) -> &[u8] {
        &self.paths[c.path_at as usize..(c.path_at + c.path_len) as usize]
    }

    /// Read /proc/self/maps: text candidates and our own identity.
    fn collect(&mut self, cfg: &Config, scope: &Scope) -> Result<(), isize> {
        let me = remap as *const () as usize;
        let State {
            buf,
            cands,
            n,
            paths,
            plen,
            own,
            own_known,
            truncated,
        } = self;
        crate::maps::for_each(buf, |l| {
            if l.start <= me && me < l.end {
                *own = ((l.dev_major, l.dev_minor), l.inode);
                *own_known = true;
            }
            if &l.perms != b"r-xp" {
                return; // writable, execute-only, shared, or not code
            }
            let copied = copyname::is_copy(l.path) || (l.path.is_empty() && was_copied(l.start, l.end));
            if !copied && !l.path.starts_with(b"/") {
                return; // [vdso], anonymous (JIT) code
            }
            if scope.only.is_some() && copied {
                return; // a late pass handles new objects only
            }
            match in_scope(
                scope,
                ((l.dev_major, l.dev_minor), l.inode),
                window_bytes(l.start, l.end),
            ) {
                None => return,
                Some(true) => {}
                Some(false) => {
                    if cfg.verbose && window_bytes(l.start, l.end) > 0 {
                        line()
                            .bytes(l.path)
                            .s(": ")
                            .mib(window_bytes(l.start, l.end))
                            .s(" of text in whole ")
                            .size(scan::pmd() as u64)
                            .s(" windows, below HUGETEXT_LATE_MIN=")
                            .mib(scope.min)
                            .s(": left alone");
                    }
                    return;
                }
            }
            if !copied {
                if cfg.include.is_some_and(|re| !pattern::is_match(re, l.path)) {
                    return;
                }
                if cfg.exclude.is_some_and(|re| pattern::is_match(re, l.path)) {
                    return;
                }
            }
            if *n >= MAXC || *plen + l.path.len() + 1 > PATHS {
                *truncated = true;
                return;
            }
            paths[*plen..*plen + l.path.len()].copy_from_slice(l.path);
            paths[*plen + l.path.len()] = 0;
            cands[*n] = Cand {
                start: l.start,
                end: l.end,
                off: l.offset,
                dev: (l.dev_major, l.dev_minor),
                ino: l.inode,
                path_at: *plen as u32,
                path_len: l.path.len() as u32,
                copied,
            };
            *plen += l.path.len() + 1;
            *n += 1;
        })
    }
}

/// Open the file behind `c` (checking it is the very file mapped, not one
/// renamed over it since). Returns the fd or `-errno`.
fn open_mapped(st: &State, c: &Cand) -> isize {
    let p = st.path(c);
    if p.ends_with(hugetext_abi::maps::DELETED_SUFFIX) {
        return -(libc::ENOENT as isize);
    }
    // The path is stored NUL-terminated.
    let with_nul = &st.paths[c.path_at as usize..=(c.path_at + c.path_len) as usize];
    let fd = sys::open(with_nul, libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if fd < 0 {
        return fd;
    }
    // SAFETY: zero is a valid `stat`.
    let mut s: libc::stat = unsafe { core::mem::zeroed() };
    let ok = sys::fstat(fd as i32, &mut s) >= 0
        && s.st_ino == c.ino
        && ((libc::major(s.st_dev), libc::minor(s.st_dev)) == c.dev || maps_dev(fd as i32) == Some(c.dev));
    if !ok {
        sys::close(fd as i32);
        return -(libc::ESTALE as isize);
    }
    fd
}

/// The device `/proc/self/maps` shows for the file open at `fd` (its
/// superblock's). On btrfs `st_dev` is the subvolume's anonymous device
/// instead, so it never equals the maps line's: map the file's first page
/// and look at that line.
fn maps_dev(fd: i32) -> Option<(u32, u32)> {
    let a = sys::mmap(4096, libc::PROT_READ, libc::MAP_PRIVATE, fd, 0);
    if a < 0 {
        return None;
    }
    let mut buf = [0u8; 2048];
    let mut dev = None;
    let _ = crate::maps::for_each(&mut buf, |l| {
        if l.start == a as usize {
            dev = Some((l.dev_major, l.dev_minor));
        }
    });
    // SAFETY: our own mapping made above; nothing refers to it.
    unsafe { sys::munmap(a as usize, 4096) };
    dev
}

/// The name of the filesystem holding `fd`, for messages.
fn fs_name(fd: i32) -> &'static str {
    // SAFETY: zero is a valid `statfs`.
    let mut st: libc::statfs = unsafe { core::mem::zeroed() };
    if sys::fstatfs(fd, &mut st) < 0 {
        return "this filesystem";
    }
    hugetext_abi::fs::name(st.f_type as u64).unwrap_or("this filesystem")
}

/// The windows of one chunk of a text mapping and what is known of them.
struct Windows {
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

impl Windows {
    fn done(&self) -> bool {
        self.huge == self.all
    }
}

/// What the route choice for a chunk depends on, gathered before any route
/// runs.
#[derive(Clone, Copy, Debug)]
struct Facts {
    strategy: Strategy,
    /// Address − file offset is a multiple of 2 MiB.
    congruent: bool,
    /// Every window is PMD-mapped already.
    all_huge: bool,
    /// `MADV_COLLAPSE` refused file text earlier in this pass (kernels
    /// without `CONFIG_READ_ONLY_THP_FOR_FS`, or before 6.1).
    collapse_refused: bool,
    /// `HUGETEXT_GDB`: never move text to anonymous memory.
    gdb: bool,
    /// transparent_hugepage `never`: anonymous memory cannot be huge.
    no_anon_thp: bool,
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
    /// Say that only `copy` could help (`file` or `collapse` asked for, text
    /// not congruent).
    not_congruent: bool,
    copy: CopyPlan,
}

/// Choose the routes for a chunk: a pure function of the facts.
fn plan(f: &Facts) -> Plan {
    use Strategy::*;
    if f.all_huge {
        return Plan {
            file: false,
            collapse: false,
            not_congruent: false,
            copy: CopyPlan::No,
        };
    }
    let s = f.strategy;
    Plan {
        file: f.congruent && matches!(s, Auto | File),
        collapse: f.congruent && !f.collapse_refused && matches!(s, Auto | Collapse),
        not_congruent: !f.congruent && matches!(s, File | Collapse),
        copy: match s {
            File | Collapse => CopyPlan::No,
            Auto | Copy if f.gdb => {
                CopyPlan::Skip("gdb-friendly mode (HUGETEXT_GDB=1): not copying text to anonymous memory")
            }
            Auto | Copy if f.no_anon_thp => {
                CopyPlan::Skip("copy route skipped: transparent_hugepage is `never`, anonymous memory cannot be huge")
            }
            Auto | Copy => CopyPlan::Yes,
        },
    }
}

/// How the file route drops and refaults one window, from what is known of
/// this kernel's `MADV_DONTNEED` ([`PT`]) and the pass's probe budget:
/// (measure it to find out whether the emptied page table stays, replace
/// the window with `mmap(MAP_FIXED)` because it does).
fn window_mode(pt: u8, checks: u8, probes: u8) -> (bool, bool) {
    let detect = pt == PT_UNKNOWN && checks < MAX_CHECKS && probes < MAX_PROBES;
    (detect, pt == PT_KEPT)
}

struct Pass<'a> {
    cfg: &'a Config,
    st: &'a State,
    scan: Verifier,
    t: Totals,
    no_anon_thp: bool,
    /// Fault pages in by touching them (no `MADV_POPULATE_READ`).
    touch: bool,
    /// Evicted windows that refaulted small from small folios ([`Pass::window`]).
    checks: u8,
    /// Fresh-mapping probes made ([`Pass::cache_is_pmd`]).
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
            self.touch = true;
            NO_POPULATE.store(true, Relaxed);
        }
        // SAFETY: callers pass whole windows of a text mapping (`r-x`, the
        // file's own pages), mapped for the whole call.
        unsafe { sys::touch(addr, len) };
        0
    }

    /// Measure the windows of `w` again: add the proved windows to
    /// `w.huge` and return the huge-backed bytes gained since the last
    /// measure (`w.hb`; with smaps, bytes of the whole mapping: only this
    /// chunk's windows are being worked on, so the gain is theirs). A loss
    /// (a huge window dropped and refaulted small) is not subtracted, so a
    /// window is never counted twice.
    fn remeasure(&self, c: &Cand, w: &mut Windows) -> u64 {
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

    /// 2b for the window at `s`: drop this process's PTEs, evict the page
    /// cache, fault it back through `MADV_HUGEPAGE`; where `MADV_DONTNEED`
    /// leaves the emptied page table behind, also replace the window's
    /// mapping so that the refault can install a PMD (see
    /// [`Pass::replace`]). Whether it does is found out here, at the first
    /// window that tells (process-wide, see [`PT`]). Returns (0 or
    /// `-errno`, whether the page cache was evicted, what failed).
    fn window(&mut self, c: &Cand, f: i32, s: usize) -> (isize, bool, &'static str) {
        let pmd = scan::pmd();
        let off = Self::file_off(c, s);
        let (detect, replace) = window_mode(PT.load(Relaxed), self.checks, self.probes);
        // The window's huge bytes before (outside the critical section: smaps
        // may be the verifier).
        let before = match detect {
            true => self.scan.measure(s, 1, c.start, c.end).ok(),
            false => None,
        };
        let (r, gone, what) = self.refault(f, s, off, replace);
        if r < 0 {
            return (r, gone, what);
        }
        let Some((_, bytes_before)) = before else {
            return (r, gone, what);
        };
        // Dropped and faulted back through MADV_HUGEPAGE: not PMD-mapped now
        // means that the page cache holds small folios (the filesystem or
        // memory gave no large one, or they could not be evicted: mapped by
        // another process, or by a thread of ours between drop and evict),
        // or that it holds one 2 MiB folio and the fault found a page table
        // and could not install a PMD. A fresh mapping of the same file range
        // tells which. (Not only evicted windows: a thread running the text
        // may fault the window back in after the eviction — from a 2 MiB
        // folio, which a kept table then maps with PTEs.)
        let huge_now = match self.scan.measure(s, 1, c.start, c.end) {
            Ok((m, b)) => m & 1 != 0 || b >= bytes_before + pmd as u64,
            Err(_) => return (r, gone, what),
        };
        if huge_now {
            PT.store(PT_FREED, Relaxed);
            return (r, gone, what);
        }
        self.probes += 1;
        if !self.cache_is_pmd(f, off) {
            // Evicted and read back small: the filesystem or memory gave no
            // large folio. (Not evicted: most likely a thread of ours kept
            // small folios mapped; that says nothing about the kernel.)
            if gone {
                self.checks += 1;
            }
            return (r, gone, what);
        }
        PT.store(PT_KEPT, Relaxed);
        if self.cfg.verbose {
            let mut o = line();
            o.s("the page cache holds ")
                .size(scan::pmd() as u64)
                .s(" folios but this process's mapping stayed in ")
                .size(scan::page() as u64)
                .s(" pages: ")
                .s("MADV_DONTNEED left the emptied page table (as kernels before 6.14 do");
            if self.cfg.compat.no_pt_reclaim {
                o.s("; here because of HUGETEXT_COMPAT=no-pt-reclaim");
            }
            o.s("); replacing windows with mmap(MAP_FIXED) from now on");
        }
        // Redo this window with the replacement (its 2 MiB folio, unmapped
        // again, is evicted and read once more: one window, once per process).
        let (r, _, what) = self.refault(f, s, off, true);
        (r, gone, what)
    }

    /// The critical section of one window (see [`Pass::window`]).
    fn refault(&mut self, f: i32, s: usize, off: u64, replace: bool) -> (isize, bool, &'static str) {
        let pmd = scan::pmd();
        // One byte per page of the window (the rest stays 0).
        let mut resident = [0u8; scan::MAX_PMD_PAGES];
        let mask = sys::block_signals();
        // Critical section: only raw syscalls and this library's own code
        // until the window is refaulted.
        // SAFETY: the window is text of a private file mapping with no
        // copy-on-write pages (checked per mapping: `has_private_pages`), so
        // dropping its PTEs loses nothing: it refaults the same bytes from
        // the file.
        let r = unsafe {
            // Two calls of 1 MiB: the kernel reclaims a page table only when
            // one call empties all of it (mm/pt_reclaim.c,
            // reclaim_pt_is_enabled: end - start >= PMD_SIZE), so the table
            // stays, as on every kernel before 6.14.
            if self.cfg.compat.no_pt_reclaim {
                match sys::madvise(s, pmd / 2, sys::MADV_DONTNEED) {
                    0 => sys::madvise(s + pmd / 2, pmd / 2, sys::MADV_DONTNEED),
                    e => e,
                }
            } else {
                sys::madvise(s, pmd, sys::MADV_DONTNEED)
            }
        };
        // MADV_DONTNEED also decides, before the mapping is replaced, that
        // the window may be dropped at all: it refuses mlocked text (EINVAL),
        // which a new mapping would silently unlock.
        let (mut r, mut what) = (r, "file route: madvise(MADV_DONTNEED)");
        let mut gone = false;
        if r == 0 {
            sys::fadvise(f, off, pmd as u64, sys::POSIX_FADV_DONTNEED);
            // With our PTEs gone, mincore reports the page cache.
            gone = sys::mincore(s, pmd, &mut resident) == 0 && resident.iter().all(|b| b & 1 == 0);
            // Replaced after the eviction: a thread faulting the old window
            // from now on reads a 2 MiB folio (the old VMA is VM_HUGEPAGE),
            // which the replacement then maps with a PMD; only a fault in the
            // two syscalls between the new mapping and its MADV_HUGEPAGE can
            // still read small folios (measured: the file route then wins
            // under the C API threads test about as often as without it).
            if replace {
                (r, what) = self.replace(f, s, off);
            }
        }
        if r == 0 {
            (r, what) = (self.populate(s, pmd), "file route: madvise(MADV_POPULATE_READ)");
        }
        sys::restore_signals(mask);
        (r, gone, what)
    }

    /// Replace the window `[s, s + 2M)` with one new private mapping of the
    /// same range of the same file (`f`: opened and checked to be the
    /// mapped file by [`open_mapped`]), `r-x` like every candidate, then
    /// `MADV_HUGEPAGE` it (`VM_HUGEPAGE` is per VMA). Called in the critical
    /// section, after `MADV_DONTNEED` and the eviction.
    ///
    /// Why: before Linux 6.14 (`CONFIG_PT_RECLAIM`, x86-64 only; and even
    /// then not when a zap skips an entry) `MADV_DONTNEED` leaves the
    /// emptied PTE table in place, and a fault with a page table present
    /// maps 4 KiB pages (`do_set_pmd()` needs `pmd_none`). An mmap with
    /// `MAP_FIXED` unmaps the old VMA first, and `munmap` frees the page
    /// tables of the range between the neighbouring VMAs: in mm/vma.c
    /// (6.12+), `vms_gather_munmap_vmas()` splits the text VMA at the window's
    /// edges, sets `unmap_start`/`unmap_end` to the neighbours'
    /// `vm_end`/`vm_start` (= the window), and `vms_clear_ptes()` calls
    /// `free_pgtables()` with that floor and ceiling: the PTE table covering
    /// exactly this 2 MiB-aligned window is freed (older kernels: the same
    /// through `unmap_region()` in mm/mmap.c). It is atomic for the other
    /// threads: `vm_mmap_pgoff()` holds the mmap write lock from before the
    /// unmap until the new VMA is inserted (`mmap_region()` never downgrades
    /// it, unlike `munmap(2)`), and the old VMA is write-locked
    /// (`vma_start_write()`) before it is detached, so a thread executing
    /// there faults, waits for the lock, and finds the new mapping: the same
    /// bytes.
    ///
    /// What the new VMA keeps and loses. Kept: prot `r-x`, `MAP_PRIVATE`,
    /// file and offset (maps shows the same path, inode and offsets), and
    /// the content: the route only runs on text with no copy-on-write pages
    /// (checked per mapping; a `MAP_FIXED` would discard them), and uprobes
    /// are re-inserted by `uprobe_mmap()`. `MAP_DENYWRITE` is ignored for
    /// user mmaps, and since 5.15 no VMA denies writes (the executable's
    /// `ETXTBSY` comes from `mm->exe_file`, untouched); before 5.15 the
    /// loader's other `VM_DENYWRITE` segments of the file keep `ETXTBSY`.
    /// Lost: per-VMA state set by the program on its own text — `madvise`
    /// hints (`MADV_DONTDUMP`, `MADV_RANDOM`…), `mbind` policy, protection
    /// keys, userfaultfd registration; `VM_LOCKED` cannot be lost (see
    /// above). The struct file is ours, not the loader's, so the kernel
    /// cannot merge the new VMA with the rest of the text (`is_mergeable_vma`
    /// compares `vm_file`): the text shows as up to three lines in
    /// /proc/PID/maps (head, the replaced windows — adjacent ones merge —
    /// and tail), all naming the file. mseal'ed text fails with `EPERM`
    /// before anything is unmapped.
    ///
    /// Failure: since 6.12 ("Avoid MAP_FIXED gap exposure") a failing
    /// `MAP_FIXED` mmap restores the old mapping. Older kernels unmap first
    /// and may then fail allocating the new VMA (`ENOMEM`, in practice only
    /// for a task being OOM-killed), leaving a hole: map the range again.
    fn replace(&mut self, f: i32, s: usize, off: u64) -> (isize, &'static str) {
        let pmd = scan::pmd();
        let prot = libc::PROT_READ | libc::PROT_EXEC;
        let flags = libc::MAP_PRIVATE | libc::MAP_FIXED;
        // SAFETY: the same bytes as before, the window's range of the very
        // file mapped there (`open_mapped` checked it), `r-x` like the text.
        let r = unsafe { sys::mmap_fixed(s, pmd, prot, flags, f, off) };
        if r < 0 {
            let mut v = [0u8; 1];
            for _ in 0..8 {
                if sys::mincore(s, 4096, &mut v) != -(libc::ENOMEM as isize) {
                    break; // still mapped
                }
                // SAFETY: as above, into the hole the failed call left.
                unsafe { sys::mmap_fixed(s, pmd, prot, flags, f, off) };
            }
            return (r, "file route: mmap(MAP_FIXED) of the window");
        }
        self.t.replaced += pmd as u64;
        (
            sys::advise(s, pmd, sys::Keep::Hugepage),
            "file route: madvise(MADV_HUGEPAGE) of the replaced window",
        )
    }

    /// Does the page cache hold one 2 MiB folio for the file range at `off`
    /// (2 MiB-aligned)? Map it at a fresh 2 MiB-aligned address, where no
    /// page table exists yet, and load one byte: a PMD folio is then mapped
    /// with a PMD (`do_set_pmd()`), small folios with PTEs. Read-only, and
    /// the pages are resident (just populated): nothing is read from disk.
    fn cache_is_pmd(&self, f: i32, off: u64) -> bool {
        let pmd = scan::pmd();
        let m = sys::mmap(
            2 * pmd,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if m < 0 {
            return false;
        }
        let p = (m as usize + pmd - 1) & !(pmd - 1);
        // SAFETY: [p, p + 2M) lies inside our own PROT_NONE reservation.
        let ok = unsafe { sys::mmap_fixed(p, pmd, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_FIXED, f, off) } >= 0
            && sys::advise(p, pmd, sys::Keep::Hugepage) == 0
            && {
                // SAFETY: the first page of the file range just mapped
                // PROT_READ at `p`, inside the file (`off` is a window of it).
                unsafe { sys::touch(p, 4096) };
                self.scan.huge_windows(p, 1) == Ok(1)
            };
        // SAFETY: our reservation and the probe mapping in it; nothing
        // refers to them.
        unsafe { sys::munmap(m as usize, 2 * pmd) };
        ok
    }

    /// One text mapping.
    fn mapping(&mut self, c: &Cand) {
        let w = scan::windows(c.start, c.end);
        let (ws, we, pmd) = (w.start(), w.end(), w.pmd());
        if w.is_empty() {
            self.t.small_mappings += 1;
            return;
        }
        self.t.mappings += 1;
        let total = w.bytes() as u64;
        self.t.windows += total;
        let before = (self.t.already, self.t.file, self.t.collapse, self.t.copy);
        if c.copied {
            if let Ok(b) = self.scan.huge_bytes(ws, we) {
                self.t.already += b;
            }
            return;
        }
        match self.scan.has_private_pages(c.start, c.end) {
            Ok(false) => {}
            Ok(true) => {
                self.note(
                    c,
                    "text was modified in memory (debugger breakpoint or uprobe): left alone",
                );
                return;
            }
            Err(e) => return self.fail(c, self.verifier_name(), e),
        }
        let congruent = (c.start as u64).wrapping_sub(c.off) % pmd as u64 == 0;
        let mut fd: isize = 0; // 0 = not opened yet
        let mut elf: Option<ElfFile> = None;
        let mut advised = false;
        for (a, n) in w.batches(64) {
            self.chunk(c, a, n, a == ws, congruent, &mut fd, &mut elf, &mut advised);
        }
        drop(elf);
        if fd > 0 {
            sys::close(fd as i32);
        }
        if self.cfg.verbose {
            let (al, fi, co, cp) = (
                self.t.already - before.0,
                self.t.file - before.1,
                self.t.collapse - before.2,
                self.t.copy - before.3,
            );
            let mut o = line();
            o.bytes(self.st.path(c))
                .s(": ")
                .mib(al + fi + co + cp)
                .s(" of ")
                .mib(total)
                .s(" huge (");
            o.s("already ")
                .mib(al)
                .s(", file ")
                .mib(fi)
                .s(", collapse ")
                .mib(co)
                .s(", copy ")
                .mib(cp)
                .s(")");
            if !congruent {
                o.s("; not congruent: address - file offset is not a multiple of ")
                    .size(scan::pmd() as u64);
            }
        }
    }

    fn ensure_fd(&mut self, c: &Cand, fd: &mut isize) -> isize {
        if *fd == 0 {
            *fd = open_mapped(self.st, c);
        }
        *fd
    }

    /// Up to 64 windows of one text mapping: measure them (the `already`
    /// route), let [`plan`] choose the routes from the facts, and run them
    /// in order until every window is huge.
    #[allow(clippy::too_many_arguments)]
    fn chunk(
        &mut self,
        c: &Cand,
        a: usize,
        n: usize,
        first: bool,
        congruent: bool,
        fd: &mut isize,
        elf: &mut Option<ElfFile>,
        advised: &mut bool,
    ) {
        let t0 = sys::now_ns();
        let w = self.route_already(c, a, n, first);
        self.t.ns[0] += sys::now_ns() - t0;
        let Some(mut w) = w else {
            return;
        };
        let plan = plan(&Facts {
            strategy: self.cfg.strategy,
            congruent,
            all_huge: w.done(),
            collapse_refused: self.t.collapse_unsupported,
            gdb: self.cfg.gdb,
            no_anon_thp: self.no_anon_thp,
        });
        if plan.file {
            let t0 = sys::now_ns();
            self.route_file(c, &mut w, fd, advised);
            self.t.ns[1] += sys::now_ns() - t0;
            if w.done() {
                return;
            }
        }
        if plan.collapse {
            let t0 = sys::now_ns();
            self.route_collapse(c, &mut w);
            self.t.ns[2] += sys::now_ns() - t0;
            if w.done() {
                return;
            }
        }
        if plan.not_congruent && self.cfg.verbose {
            line()
                .bytes(self.st.path(c))
                .s(": not congruent (address - file offset is not a multiple of ")
                .size(scan::pmd() as u64)
                .s("): only `copy` can make it huge");
        }
        match plan.copy {
            CopyPlan::No => {}
            CopyPlan::Skip(why) => self.note(c, why),
            CopyPlan::Yes => {
                let t0 = sys::now_ns();
                self.route_copy(c, &mut w, fd, elf);
                self.t.ns[3] += sys::now_ns() - t0;
            }
        }
    }

    /// Route 1, already huge: measure the windows `[a, a + n·2M)` and count
    /// what is PMD-mapped before any route runs. `None` when they cannot be
    /// measured (reported).
    fn route_already(&mut self, c: &Cand, a: usize, n: usize, first: bool) -> Option<Windows> {
        // `huge`: windows proved huge; `hb`: huge bytes of the accounting
        // scope (Verifier::measure), the base of every route's gain.
        let (huge, hb) = match self.scan.measure(a, n, c.start, c.end) {
            Ok(v) => v,
            Err(e) => {
                self.fail(c, self.verifier_name(), e);
                return None;
            }
        };
        // With smaps the scope is the whole mapping: count it once.
        if first || !self.scan.is_smaps() {
            self.t.already += hb;
        }
        Some(Windows {
            a,
            n,
            all: full(n),
            huge,
            hb,
        })
    }

    /// Route 2, `file`, zero copy (congruent text only).
    fn route_file(&mut self, c: &Cand, w: &mut Windows, fd: &mut isize, advised: &mut bool) {
        let pmd = scan::pmd();
        let (a, all) = (w.a, w.all);
        if !*advised {
            *advised = true;
            let r = sys::advise(c.start, c.end - c.start, sys::Keep::Hugepage);
            if r < 0 {
                self.fail(c, "file route: madvise(MADV_HUGEPAGE)", r);
            }
        }
        // 2a: the page cache may already hold 2 MiB folios.
        for (i, k) in runs(all & !w.huge) {
            self.populate(a + i * pmd, k * pmd);
        }
        self.t.file += self.remeasure(c, w);
        // 2b: drop, evict, refault.
        if w.done() {
            return;
        }
        let f = self.ensure_fd(c, fd);
        if f < 0 {
            return self.fail(c, "file route: cannot open the mapped file", f);
        }
        // Dirty folios (a freshly written binary) cannot be evicted: write
        // them back first (no-op when clean).
        sys::fdatasync(f as i32);
        let mut err = 0;
        // Windows whose page cache was gone after the eviction (nobody else
        // maps it): if they refault small, the filesystem gives no large
        // folios.
        let mut evicted = 0u64;
        let mut what = "";
        // Window by window, so that other threads running this text have as
        // little time as possible to fault a small page back in between drop
        // and refault; a window they did spoil gets two more tries.
        for _attempt in 0..3 {
            for (i, k) in runs(all & !w.huge) {
                for win in i..i + k {
                    let (r, gone, at) = self.window(c, f as i32, a + win * pmd);
                    if gone {
                        evicted |= 1u64 << win;
                    }
                    if r < 0 {
                        (err, what) = (r, at);
                        break;
                    }
                }
                if err < 0 {
                    break;
                }
            }
            if err < 0 {
                self.fail(c, what, err);
            }
            let gain = self.remeasure(c, w);
            self.t.file += gain;
            let progress = gain > 0;
            if w.done() || err < 0 || !progress {
                break;
            }
        }
        let small = all & !w.huge;
        if small != 0 && err == 0 {
            if small & !evicted == 0 {
                if self.cfg.verbose {
                    line()
                        .bytes(self.st.path(c))
                        .s(": file route: evicted and read back through MADV_HUGEPAGE, the page cache stayed in small folios: ")
                        .s(fs_name(f as i32))
                        .s(" has no large folios on this kernel (ext4 has them from Linux 6.16, xfs from 5.18)");
                }
            } else if small & evicted == 0 {
                self.note(
                    c,
                    "file route: some windows stayed small: their page cache is mapped (by this process's running threads or another process), so it cannot be evicted",
                );
            } else {
                self.note(
                    c,
                    "file route: some windows stayed small (their page cache is mapped by another process, or the filesystem has no large folios)",
                );
            }
        }
    }

    /// Route 3, `collapse`: `MADV_COLLAPSE` (file text needs
    /// `CONFIG_READ_ONLY_THP_FOR_FS`; a refusal is remembered for the pass).
    fn route_collapse(&mut self, c: &Cand, w: &mut Windows) {
        let pmd = scan::pmd();
        let mut err = 0;
        for (i, k) in runs(w.all & !w.huge) {
            let r = sys::advise(w.a + i * pmd, k * pmd, sys::Keep::Collapse);
            if r == -(libc::EINVAL as isize) {
                self.t.collapse_unsupported = true;
                if self.cfg.verbose {
                    line().s(
                        "MADV_COLLAPSE cannot collapse file text on this kernel (needs CONFIG_READ_ONLY_THP_FOR_FS)",
                    );
                }
                break;
            }
            if r < 0 {
                err = r;
            }
        }
        if err < 0 && self.cfg.strategy == Strategy::Collapse {
            self.fail(c, "collapse: madvise(MADV_COLLAPSE)", err);
        }
        self.t.collapse += self.remeasure(c, w);
    }

    /// Route 4, `copy`: every window not yet huge into anonymous huge
    /// pages ([`Pass::copy`]).
    fn route_copy(&mut self, c: &Cand, w: &mut Windows, fd: &mut isize, elf: &mut Option<ElfFile>) {
        let pmd = scan::pmd();
        let f = self.ensure_fd(c, fd);
        if self.cfg.perf_map && elf.is_none() && f > 0 {
            *elf = ElfFile::map(f as i32).ok();
        }
        for (i, k) in runs(w.all & !w.huge) {
            self.copy(c, f, w.a + i * pmd, k, elf.as_ref());
        }
        self.t.copy += self.remeasure(c, w);
    }

    /// Copy `k` windows at `dst` into anonymous huge pages and move them over
    /// the original with one mremap per run of huge windows.
    fn copy(&mut self, c: &Cand, fd: isize, dst: usize, k: usize, elf: Option<&ElfFile>) {
        let pmd = scan::pmd();
        let len = k * pmd;
        let m = sys::mmap(
            len + pmd,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if m < 0 {
            return self.fail(c, "copy: mmap", m);
        }
        let m = m as usize;
        let new = (m + pmd - 1) & !(pmd - 1);
        // SAFETY (every munmap and the mprotect of this function): the
        // ranges are parts of our own fresh mapping `m`, which nothing else
        // refers to, until mremap moves them over the text.
        unsafe {
            if new > m {
                sys::munmap(m, new - m);
            }
            if m + pmd > new {
                sys::munmap(new + len, m + pmd - new);
            }
        }
        let r = sys::advise(new, len, sys::Keep::Hugepage);
        if r < 0 {
            // SAFETY: see above.
            unsafe { sys::munmap(new, len) };
            return self.fail(c, "copy: madvise(MADV_HUGEPAGE)", r);
        }
        let off = c.off + (dst - c.start) as u64;
        self.fill(fd, off, dst, new, len);
        let mut hm = self.scan.huge_windows(new, k).unwrap_or(0);
        if hm != full(k) {
            // The fault could not get a huge page at once: compact and collapse.
            sys::advise(new, len, sys::Keep::Collapse);
            hm = self.scan.huge_windows(new, k).unwrap_or(0);
        }
        if hm == 0 {
            // SAFETY: see above.
            unsafe { sys::munmap(new, len) };
            return self.fail(c, "copy: no huge page could be allocated", -(libc::ENOMEM as isize));
        }
        // SAFETY: see above.
        let r = unsafe { sys::mprotect(new, len, libc::PROT_READ | libc::PROT_EXEC) };
        if r < 0 {
            // SAFETY: see above.
            unsafe { sys::munmap(new, len) };
            return self.fail(c, "copy: mprotect", r);
        }
        if self.cfg.name_vmas {
            let mut name = [0u8; copyname::BUF_LEN];
            copyname::write(self.st.path(c), &mut name);
            let r = sys::prctl(
                sys::PR_SET_VMA,
                sys::PR_SET_VMA_ANON_NAME,
                new,
                len,
                name.as_ptr() as usize,
            );
            if r < 0 && !self.t.naming_failed {
                self.t.naming_failed = true;
                if self.cfg.verbose {
                    line()
                        .s("cannot name the copied text in /proc/PID/maps (kernel without CONFIG_ANON_VMA_NAME?)")
                        .err(r);
                }
            }
        }
        for (i, kk) in runs(full(k) & !hm) {
            // SAFETY: see above.
            unsafe { sys::munmap(new + i * pmd, kk * pmd) };
        }
        for (i, kk) in runs(hm) {
            let (from, to, l) = (new + i * pmd, dst + i * pmd, kk * pmd);
            // SAFETY: moves our copy (the same bytes, `r-x`) over the text
            // windows in one step: code running there keeps finding the
            // same instructions; `from` is ours.
            let r = unsafe { sys::mremap(from, l, l, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, to) };
            if r < 0 {
                // SAFETY: see above.
                unsafe { sys::munmap(from, l) };
                self.fail(c, "copy: mremap", r);
                continue;
            }
            remember_copy(to, to + l);
            if let Some(e) = elf {
                self.perf_symbols(c, e, to, l);
            }
        }
        if hm != full(k) {
            self.note(
                c,
                "copy: some windows got no huge page (memory fragmented?) and were left in place",
            );
        }
    }

    /// Fill `new` with the `len` bytes of text at `dst`, file offset `off`:
    /// from the file open on `fd` if `fd > 0` ([`Pass::fill_from_file`]),
    /// and what is left (no fd, or a read failed or stopped short) copied
    /// from the mapped text. The text was checked unmodified
    /// ([`Pass::mapping`]: no private pages), so the file holds the same
    /// bytes.
    fn fill(&mut self, fd: isize, off: u64, dst: usize, new: usize, len: usize) {
        let done = if fd > 0 {
            self.fill_from_file(fd as i32, off, new, len)
        } else {
            0
        };
        if done == len {
            return;
        }
        let (dst, new, len) = (dst + done, new + done, len - done);
        // Map the rest of the source in one call (the kernel's fault-around,
        // no trap per 64 KiB). Without it the copy below faults it in.
        if !self.touch && sys::advise(dst, len, sys::Keep::PopulateRead) == -(libc::EINVAL as isize) {
            self.touch = true;
            NO_POPULATE.store(true, Relaxed);
        }
        // SAFETY: `dst..dst+len` is readable text of this process (r-x, and
        // verified unmodified); `new..new+len` is our fresh writable mapping.
        unsafe { core::ptr::copy_nonoverlapping(dst as *const u8, new as *mut u8, len) };
    }

    /// Fill `new` with the `len` bytes at offset `off` of the file open on
    /// `fd`, the cheapest way the page cache allows, never faulting the text
    /// itself (measured with the `copy_floor` example; the kernel zeroes
    /// each new huge page at its first write whatever fills it): map the
    /// file range again at a congruent address (address − offset a multiple
    /// of 2 MiB, which the text of lld and mold output is not) and probe each
    /// 2 MiB block of it with one load ([`Pass::cache_is_pmd`]'s way). The
    /// bytes that 2 MiB folios hold, now mapped with PMDs, are copied from
    /// there (memory speed); the others are `pread` straight into the new
    /// huge pages (from smaller folios, reading beats mapping them in 4 KiB
    /// pages and copying). Returns the bytes filled from the start of `new`
    /// (less than `len` when a read failed or stopped short).
    fn fill_from_file(&mut self, fd: i32, off: u64, new: usize, len: usize) -> usize {
        let pmd = scan::pmd();
        let head = (off % pmd as u64) as usize;
        let base = off - head as u64;
        // File 2 MiB blocks the range touches (`<= 65`).
        let blocks = (head + len).div_ceil(pmd);
        // A mask of the blocks held by 2 MiB folios, when it can be learned
        // cheaply (PAGEMAP_SCAN, MADV_POPULATE_READ not refused).
        let mut huge = [0u64; 2];
        let mut view = 0usize;
        let res = if self.touch || self.scan.is_smaps() {
            -1
        } else {
            sys::mmap(
                blocks * pmd + pmd,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if res >= 0 {
            let t = (res as usize + pmd - 1) & !(pmd - 1);
            // SAFETY: `[t, t + blocks·2M)` lies inside our own PROT_NONE
            // reservation `res`, which nothing else uses.
            let m = unsafe {
                sys::mmap_fixed(
                    t,
                    blocks * pmd,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    fd,
                    base,
                )
            };
            if m >= 0 && sys::advise(t, blocks * pmd, sys::Keep::Hugepage) == 0 {
                view = t;
                for b in 0..blocks {
                    // SAFETY: the first page of block `b`, mapped PROT_READ
                    // just above, inside the file: it is at or before
                    // `off + len`, within the text.
                    unsafe { sys::touch(t + b * pmd, 4096) };
                }
                for (i, m) in huge.iter_mut().enumerate() {
                    let n = blocks.saturating_sub(i * 64).min(64);
                    if n > 0 {
                        *m = self.scan.huge_windows(t + i * 64 * pmd, n).unwrap_or(0);
                    }
                }
            }
        }
        let is_pmd = |b: usize| view != 0 && huge[b / 64] & (1 << (b % 64)) != 0;
        // Runs of blocks of one kind, in order: copy or read.
        let mut done = 0;
        let mut b = 0;
        while b < blocks {
            let kind = is_pmd(b);
            let mut e = b + 1;
            while e < blocks && is_pmd(e) == kind {
                e += 1;
            }
            // The bytes of `new` that blocks `[b, e)` hold.
            let lo = (b * pmd).saturating_sub(head);
            let hi = (e * pmd - head).min(len);
            if kind {
                // SAFETY: `view + head + lo..hi` is our own mapping of the
                // file, PMD-mapped (2 MiB folios, resident); `new + lo..hi`
                // is our fresh writable mapping.
                unsafe {
                    core::ptr::copy_nonoverlapping((view + head + lo) as *const u8, (new + lo) as *mut u8, hi - lo)
                };
                self.t.copy_pmd += (hi - lo) as u64;
                done = hi;
            } else {
                let r = self.read(fd, off + lo as u64, new + lo, hi - lo);
                self.t.copy_read += r as u64;
                done = lo + r;
                if done < hi {
                    break;
                }
            }
            b = e;
        }
        if res >= 0 {
            // SAFETY: our reservation and the view in it; nothing refers to
            // them (the copy is done).
            unsafe { sys::munmap(res as usize, blocks * pmd + pmd) };
        }
        done
    }

    /// `pread` `len` bytes at `off` of `fd` into `new` (our fresh writable
    /// mapping). Returns the bytes read (fewer on error or end of file).
    fn read(&mut self, fd: i32, off: u64, new: usize, len: usize) -> usize {
        let mut done = 0;
        while done < len {
            // SAFETY: `new + done..new + len` is our fresh writable mapping,
            // which nothing else uses yet.
            let r = unsafe { sys::pread(fd, new + done, len - done, off + done as u64) };
            if r == -(libc::EINTR as isize) {
                continue;
            }
            if r <= 0 {
                break;
            }
            done += r as usize;
        }
        done
    }

    fn perf_symbols(&mut self, c: &Cand, e: &ElfFile, at: usize, len: usize) {
        if self.t.perf_map_fd == 0 {
            self.t.perf_map_fd = match perfmap::open_map() {
                Ok(fd) => fd as isize,
                Err(why) => {
                    if self.cfg.verbose {
                        why.say();
                    }
                    -1
                }
            };
        }
        if self.t.perf_map_fd < 0 {
            return;
        }
        let Some(bias) = e.bias(c.start, c.off) else { return };
        let mut out = Out::<8192>::new(self.t.perf_map_fd as i32);
        e.write_symbols(bias, at as u64, (at + len) as u64, &mut out);
    }
}

/// "; time per route: copy 78.0 MiB in 22.51 ms (0.289 ms/MiB; source: 60.0
/// MiB copied from 2 MiB page-cache folios, 18.0 MiB read with pread)" for
/// each route that ran: the bytes it made huge, its time and the time per
/// MiB (a route that made nothing huge in under 10 µs is left out); for
/// `copy`, where its bytes came from.
fn route_times<const N: usize>(o: &mut Out<N>, t: &Totals) {
    let names = ["already", "file", "collapse", "copy"];
    let bytes = [t.already, t.file, t.collapse, t.copy];
    let mut first = true;
    for i in 0..4 {
        if t.ns[i] == 0 || (bytes[i] == 0 && t.ns[i] < 10_000) {
            continue; // did not run, or only measured in no time
        }
        o.s(if first { "; time per route: " } else { ", " })
            .s(names[i])
            .s(" ")
            .mib(bytes[i])
            .s(" in ")
            .ms(t.ns[i]);
        first = false;
        if bytes[i] > 0 {
            // Thousandths of a ms per MiB.
            let per = (t.ns[i] as u128 * (1 << 20) / bytes[i] as u128 / 1000) as u64;
            o.s(" (").u(per / 1000).s(".");
            for d in [100, 10, 1] {
                o.u(per % 1000 / d % 10);
            }
            o.s(" ms/MiB");
            if i == 3 {
                let mapped = bytes[i].saturating_sub(t.copy_pmd + t.copy_read);
                let mut sep = "; source: ";
                for (b, what) in [
                    (t.copy_pmd, [" copied from ", " page-cache folios"]),
                    (t.copy_read, [" read with pread", ""]),
                    (mapped, [" copied from the text mapped in ", " pages"]),
                ] {
                    if b >= 1 << 16 {
                        o.s(sep).mib(b).s(what[0]);
                        if !what[1].is_empty() {
                            let unit = if what[1].contains("cache") {
                                scan::pmd()
                            } else {
                                scan::page()
                            };
                            o.size(unit as u64).s(what[1]);
                        }
                        sep = ", ";
                    }
                }
            }
            o.s(")");
        }
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
    scan::pmd();
    let t0 = sys::now_ns();
    if let Some(s) = cfg.bad_strategy {
        if cfg.verbose {
            line()
                .s("unknown HUGETEXT_STRATEGY=")
                .bytes(s)
                .s(" (expected auto, file, collapse or copy); using auto");
        }
    }
    if let Some(w) = cfg.compat.unknown {
        if cfg.verbose {
            line()
                .s("unknown word in HUGETEXT_COMPAT: ")
                .bytes(w)
                .s(" (expected ")
                .s(hugetext_abi::compat::WORDS)
                .s("); ignored");
        }
    }
    let thp_off = sys::prctl(sys::PR_GET_THP_DISABLE, 0, 0, 0, 0) > 0;
    let scan = match cfg.compat.no_pagemap_scan {
        true => Err(0),
        false => Scanner::open(),
    };
    let scan = match scan {
        Ok(s) => Verifier::Scan(s),
        Err(e) => match Smaps::open() {
            Ok(s) => {
                if cfg.verbose {
                    let mut o = line();
                    if e == 0 {
                        o.s("HUGETEXT_COMPAT=no-pagemap-scan");
                    } else {
                        o.s("PAGEMAP_SCAN is not available (Linux 6.7+)").err(e);
                    }
                    o.s(": verifying with the per-mapping totals of /proc/self/smaps");
                }
                Verifier::Smaps(s)
            }
            Err(e2) => {
                if cfg.verbose {
                    line()
                        .s("cannot read this process's page tables (PAGEMAP_SCAN needs Linux 6.7; /proc/self/smaps")
                        .err(e2)
                        .s("); text left as it is");
                }
                return if e < 0 { e } else { e2 };
            }
        },
    };
    let touch = cfg.compat.no_populate || NO_POPULATE.load(Relaxed);
    if cfg.compat.no_populate && cfg.verbose {
        line().s("HUGETEXT_COMPAT=no-populate: faulting text in by touching every page, not MADV_POPULATE_READ");
    }
    if cfg.compat.no_pt_reclaim && cfg.verbose {
        line().s("HUGETEXT_COMPAT=no-pt-reclaim: dropping windows with two MADV_DONTNEED calls, which leave the emptied page table as kernels before 6.14 do");
    }
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
    let result = match st.collect(cfg, scope) {
        Err(e) => {
            if cfg.verbose {
                line().s("cannot read /proc/self/maps").err(e).s("; text left as it is");
            }
            e
        }
        Ok(()) => {
            if st.own_known {
                let own = st.own;
                // Never touch this library's own code.
                let n = st.n;
                let mut w = 0;
                for i in 0..n {
                    let c = st.cands[i];
                    if !c.copied && (c.dev, c.ino) == own {
                        continue;
                    }
                    st.cands[w] = c;
                    w += 1;
                }
                st.n = w;
            }
            if st.truncated && cfg.verbose {
                line()
                    .s("too many text mappings: only the first ")
                    .u(st.n as u64)
                    .s(" are handled");
            }
            let st: &State = st;
            let mut pass = Pass {
                cfg,
                st,
                scan,
                t: Totals::default(),
                no_anon_thp: thp_never(),
                touch,
                checks: 0,
                probes: 0,
            };
            if thp_off && cfg.verbose {
                line().s("huge pages are disabled for this process (prctl PR_SET_THP_DISABLE): text left as it is");
            }
            for i in 0..st.n {
                let c = st.cands[i];
                if thp_off {
                    // Count only.
                    pass.t.windows += window_bytes(c.start, c.end);
                    continue;
                }
                pass.mapping(&c);
            }
            if pass.t.perf_map_fd > 0 {
                sys::close(pass.t.perf_map_fd as i32);
            }
            let t = &pass.t;
            let huge = t.already + t.file + t.collapse + t.copy;
            // A late pass whose objects were all filtered out says nothing.
            if cfg.verbose && (scope.only.is_none() || t.windows > 0) {
                let mut o = line();
                let (outer, own) = perfmap::map_pid();
                o.s("pid ").u(own as u64);
                if outer != own {
                    o.s(" (pid ").u(outer as u64).s(" outside its pid namespace)");
                }
                if scope.only.is_some() {
                    o.s(", loaded after start (dlopen)");
                }
                o.s(": ").mib(huge).s(" of ").mib(t.windows);
                o.s(" text in whole ")
                    .size(scan::pmd() as u64)
                    .s(" windows is huge-backed (already ")
                    .mib(t.already);
                o.s(", file ")
                    .mib(t.file)
                    .s(", collapse ")
                    .mib(t.collapse)
                    .s(", copy ")
                    .mib(t.copy);
                o.s(") in ")
                    .ms(sys::now_ns() - t0)
                    .s("; ")
                    .u(t.small_mappings as u64)
                    .s(" text mappings have no whole ")
                    .size(scan::pmd() as u64)
                    .s(" window");
                if pass.scan.is_smaps() {
                    o.s("; verified with /proc/self/smaps totals");
                }
                if pass.touch {
                    o.s("; pages touched, no MADV_POPULATE_READ");
                }
                if t.replaced > 0 {
                    o.s("; ")
                        .mib(t.replaced)
                        .s(" in windows replaced with mmap(MAP_FIXED) (MADV_DONTNEED keeps page tables)");
                }
                route_times(&mut o, t);
            }
            if huge == 0 && t.first_err < 0 {
                t.first_err
            } else if huge == 0 && thp_off {
                -(libc::EPERM as isize)
            } else {
                huge as isize
            }
        }
    };
    drop(mem);
    result
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
        let p = scan::pmd();
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

    fn facts(strategy: Strategy) -> Facts {
        Facts {
            strategy,
            congruent: true,
            all_huge: false,
            collapse_refused: false,
            gdb: false,
            no_anon_thp: false,
        }
    }

    const NOTHING: Plan = Plan {
        file: false,
        collapse: false,
        not_congruent: false,
        copy: CopyPlan::No,
    };

    #[test]
    fn auto_tries_file_collapse_then_copy_on_congruent_text() {
        let p = plan(&facts(Strategy::Auto));
        assert_eq!(
            p,
            Plan {
                file: true,
                collapse: true,
                not_congruent: false,
                copy: CopyPlan::Yes
            }
        );
    }

    #[test]
    fn only_copy_helps_text_that_is_not_congruent() {
        let f = Facts {
            congruent: false,
            ..facts(Strategy::Auto)
        };
        assert_eq!(
            plan(&f),
            Plan {
                copy: CopyPlan::Yes,
                ..NOTHING
            }
        );
        for s in [Strategy::File, Strategy::Collapse] {
            let f = Facts { strategy: s, ..f };
            assert_eq!(
                plan(&f),
                Plan {
                    not_congruent: true,
                    ..NOTHING
                },
                "{s:?}"
            );
        }
        let f = Facts {
            strategy: Strategy::Copy,
            ..f
        };
        assert_eq!(plan(&f).copy, CopyPlan::Yes);
    }

    #[test]
    fn a_refused_collapse_is_not_tried_again() {
        // Kernels without CONFIG_READ_ONLY_THP_FOR_FS, or before 6.1.
        let f = Facts {
            collapse_refused: true,
            ..facts(Strategy::Auto)
        };
        assert_eq!(
            plan(&f),
            Plan {
                file: true,
                copy: CopyPlan::Yes,
                ..NOTHING
            }
        );
        let f = Facts {
            strategy: Strategy::Collapse,
            ..f
        };
        assert_eq!(plan(&f), NOTHING);
        let f = Facts {
            collapse_refused: false,
            ..f
        };
        assert_eq!(
            plan(&f),
            Plan {
                collapse: true,
                ..NOTHING
            }
        );
    }

    #[test]
    fn already_pmd_mapped_needs_no_route() {
        for s in [Strategy::Auto, Strategy::File, Strategy::Collapse, Strategy::Copy] {
            for congruent in [true, false] {
                let f = Facts {
                    all_huge: true,
                    congruent,
                    ..facts(s)
                };
                assert_eq!(plan(&f), NOTHING, "{s:?} congruent={congruent}");
            }
        }
    }

    #[test]
    fn copy_is_skipped_with_a_reason() {
        let gdb = Facts {
            gdb: true,
            ..facts(Strategy::Copy)
        };
        assert!(matches!(plan(&gdb).copy, CopyPlan::Skip(m) if m.contains("HUGETEXT_GDB")));
        assert!(!plan(&gdb).file && !plan(&gdb).collapse);
        let never = Facts {
            no_anon_thp: true,
            ..facts(Strategy::Auto)
        };
        let p = plan(&never);
        assert!(p.file && p.collapse);
        assert!(matches!(p.copy, CopyPlan::Skip(m) if m.contains("`never`")));
        // The file and collapse strategies never copy, so say nothing.
        let f = Facts {
            gdb: true,
            no_anon_thp: true,
            ..facts(Strategy::File)
        };
        assert_eq!(plan(&f).copy, CopyPlan::No);
    }

    #[test]
    fn windows_are_replaced_where_dontneed_keeps_page_tables() {
        // Not known yet: find out (while the budget lasts), do not replace.
        assert_eq!(window_mode(PT_UNKNOWN, 0, 0), (true, false));
        assert_eq!(window_mode(PT_UNKNOWN, MAX_CHECKS - 1, MAX_PROBES - 1), (true, false));
        assert_eq!(window_mode(PT_UNKNOWN, MAX_CHECKS, 0), (false, false));
        assert_eq!(window_mode(PT_UNKNOWN, 0, MAX_PROBES), (false, false));
        // Kernels before 6.14 (or HUGETEXT_COMPAT=no-pt-reclaim): replace.
        assert_eq!(window_mode(PT_KEPT, 0, 0), (false, true));
        // 6.14+ with CONFIG_PT_RECLAIM: neither.
        assert_eq!(window_mode(PT_FREED, 0, 0), (false, false));
    }
}
