//! Hot windows only: with a hot-window list (`HUGETEXT_HOT_LIST`, which
//! `hugetext run --hot` compiles from a profile, or `HUGETEXT_HOT`, a file
//! holding it), a pass remaps only the 2 MiB windows the list names and
//! leaves the others as they are. The list's format and the matching are
//! in `hugetext_abi::hot`; here: reading it without allocating, finding a
//! mapping's build-id, and the mask of a chunk's hot windows.
//!
//! Secure-execution mode ignores both variables (see `config`). The file is
//! opened `O_NOFOLLOW | O_NONBLOCK` (no symlink, no FIFO to hang on) and
//! must be a regular file of at most `MAX_LEN` bytes.
//!
//! One pass at a time per process (the pass lock), so the state below is
//! only touched by the thread holding it.

use core::cell::UnsafeCell;

use hugetext_abi::hot::{self as list, Match, MAX_LEN};

use crate::out::{line, Out};
use crate::sys;

/// Where the list comes from.
#[derive(Clone, Copy)]
pub enum Setting {
    None,
    Inline(&'static [u8]),
    File(&'static [u8]),
}

impl Setting {
    /// The inline list wins over the file.
    pub fn from(inline: Option<&'static [u8]>, file: Option<&'static [u8]>) -> Setting {
        match (inline, file) {
            (Some(v), _) => Setting::Inline(v),
            (None, Some(p)) => Setting::File(p),
            (None, None) => Setting::None,
        }
    }
}

/// The list read for this pass, and the current mapping's hot ranges.
struct State {
    buf: [u8; MAX_LEN],
    /// The list's bytes: `buf[..len]`, or the inline value.
    text: Option<&'static [u8]>,
    /// The current mapping: its hot ranges (`None`: no list, all windows),
    /// its start address and file offset.
    cur: Option<&'static [u8]>,
    start: usize,
    off: u64,
    /// Bytes of whole windows left alone (cold), and of hot windows.
    skipped: u64,
    hot: u64,
}

struct Cell(UnsafeCell<State>);
// SAFETY: only the thread holding the pass lock touches it (module doc).
unsafe impl Sync for Cell {}

/// The hot list of the pass running now. Process-wide (one static, owned by
/// this module and reached only through its functions) because the preload
/// allocates nothing and the list's buffer (`MAX_LEN`, 64 KiB) belongs on
/// neither the stack of the thread running the pass nor the heap: `load`
/// fills it at the start of each pass, the engine asks `select` per mapping
/// and `mask` per chunk, and the report reads the totals.
static STATE: Cell = Cell(UnsafeCell::new(State {
    buf: [0; MAX_LEN],
    text: None,
    cur: None,
    start: 0,
    off: 0,
    skipped: 0,
    hot: 0,
}));

fn state() -> &'static mut State {
    // SAFETY: the pass lock serialises every caller (module doc); no
    // reference outlives one call of this module's functions.
    unsafe { &mut *STATE.0.get() }
}

/// Read the list for a pass. Err(-errno) when it is set but cannot be used:
/// the pass then leaves all text as it is (said in verbose mode).
pub fn load(setting: Setting, verbose: bool) -> Result<(), isize> {
    let st = state();
    (st.text, st.cur, st.skipped, st.hot) = (None, None, 0, 0);
    let (text, name, shown): (&'static [u8], &str, &[u8]) = match setting {
        Setting::None => return Ok(()),
        Setting::Inline(v) => (v, hugetext_abi::settings::HOT_LIST, b""),
        Setting::File(p) => match read_file(p, &mut st.buf) {
            // SAFETY: `buf` is static; it is rewritten only by the next
            // `load`, under the pass lock, after this pass is done with it.
            Ok(n) => (
                unsafe { &*(&st.buf[..n] as *const [u8]) },
                hugetext_abi::settings::HOT,
                p,
            ),
            Err((e, why)) => return Err(refuse(verbose, p, why, e)),
        },
    };
    match list::parse(text) {
        Ok(l) if l.pmd == crate::scan::unit() as u64 => {
            st.text = Some(text);
            Ok(())
        }
        Ok(_) => Err(refuse(
            verbose,
            shown,
            "its windows are of another size than this machine's unit of huge text",
            0,
        )),
        Err(why) => Err(refuse(
            verbose,
            if shown.is_empty() { name.as_bytes() } else { shown },
            why,
            0,
        )),
    }
}

fn refuse(verbose: bool, what: &[u8], why: &str, e: isize) -> isize {
    if verbose {
        let mut o = line();
        o.bytes(what).s(": ").s(why);
        if e < 0 {
            o.err(e);
        }
        o.s("; text left as it is");
    }
    if e < 0 {
        e
    } else {
        -(libc::EINVAL as isize)
    }
}

/// Read the file at `p` (no symlink, regular, at most `MAX_LEN` bytes).
fn read_file(p: &[u8], buf: &mut [u8]) -> Result<usize, (isize, &'static str)> {
    let mut path = [0u8; 4097];
    if p.len() >= path.len() {
        return Err((-(libc::ENAMETOOLONG as isize), "cannot open"));
    }
    path[..p.len()].copy_from_slice(p);
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let fd = sys::open(&path[..=p.len()], flags, 0);
    if fd < 0 {
        return Err((fd, "cannot open (a symbolic link is refused)"));
    }
    let fd = fd as i32;
    // SAFETY: zero is a valid `stat`.
    let mut s: libc::stat = unsafe { core::mem::zeroed() };
    let r = match sys::fstat(fd, &mut s) {
        e if e < 0 => Err((e, "cannot stat")),
        _ if s.st_mode & libc::S_IFMT != libc::S_IFREG => Err((0, "not a regular file")),
        _ if s.st_size as u64 > MAX_LEN as u64 => Err((0, "larger than 64 KiB: not a hot-window list")),
        _ => read_all(fd, buf),
    };
    sys::close(fd);
    r
}

fn read_all(fd: i32, buf: &mut [u8]) -> Result<usize, (isize, &'static str)> {
    let mut n = 0;
    while n < buf.len() {
        match sys::read(fd, &mut buf[n..]) {
            0 => return Ok(n),
            r if r == -(libc::EINTR as isize) => {}
            r if r < 0 => return Err((r, "cannot read")),
            r => n += r as usize,
        }
    }
    Err((0, "larger than 64 KiB: not a hot-window list"))
}

/// Choose the hot ranges of the text mapping `path` at `start`, file offset
/// `off`, with `windows` bytes in whole windows. False: none of its windows
/// is hot, leave it alone (said in verbose mode).
pub fn select(path: &[u8], start: usize, off: u64, windows: u64, verbose: bool) -> bool {
    let st = state();
    st.cur = None;
    let Some(text) = st.text else {
        return true;
    };
    let Ok(l) = list::parse(text) else {
        return true; // checked by `load`
    };
    let mut id = [0u8; 64];
    let mut hex = [0u8; 128];
    let id = read_build_id(path, &mut id).map(|b| list::hex(b, &mut hex) as &[u8]);
    match list::find(l.entries(), id, path) {
        Match::Hot(e) => {
            (st.cur, st.start, st.off) = (Some(e.ranges), start, off);
            true
        }
        m => {
            st.skipped += windows;
            if verbose && windows > 0 {
                let why = match m {
                    Match::OtherBuild => "its build-id is not the profile's (another build): left alone",
                    _ => "no hot windows in the profile: left alone",
                };
                line()
                    .bytes(path)
                    .s(": ")
                    .mib(windows)
                    .s(" of text in whole windows, ")
                    .s(why);
            }
            false
        }
    }
}

/// The hot windows among the `n` windows of the current mapping from
/// address `a` (all of them without a list); counts the others as skipped.
pub fn mask(a: usize, n: usize) -> u64 {
    let st = state();
    let all = if n >= 64 { !0 } else { (1u64 << n) - 1 };
    let Some(r) = st.cur else {
        return all;
    };
    let unit = crate::scan::unit() as u64;
    let m = list::window_mask(r, st.off + (a - st.start) as u64, n, unit) & all;
    st.hot += m.count_ones() as u64 * unit;
    st.skipped += (all & !m).count_ones() as u64 * unit;
    m
}

/// The pass's bytes of hot windows and of cold windows left alone, when a
/// list was read (`None`: no list, every window was in scope).
pub fn totals() -> Option<(u64, u64)> {
    let st = state();
    st.text.map(|_| (st.hot, st.skipped))
}

/// "; hot windows 8.0 MiB, cold windows left alone 92.0 MiB" when a list
/// was read.
pub fn summary<const N: usize>(o: &mut Out<N>) {
    if let Some((hot, cold)) = totals() {
        o.s("; hot windows ").mib(hot).s(", cold windows left alone ").mib(cold);
    }
}

/// The GNU build-id of the file at `path`, read with a few `pread`s.
fn read_build_id<'a>(path: &[u8], out: &'a mut [u8; 64]) -> Option<&'a [u8]> {
    let mut p = [0u8; 4097];
    if path.len() >= p.len() || path.ends_with(hugetext_abi::maps::DELETED_SUFFIX) {
        return None;
    }
    p[..path.len()].copy_from_slice(path);
    let fd = sys::open(
        &p[..=path.len()],
        libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        0,
    );
    if fd < 0 {
        return None;
    }
    let fd = fd as i32;
    let n = build_id_of(fd, out);
    sys::close(fd);
    n.map(|n| &out[..n])
}

pub(crate) fn build_id_of(fd: i32, out: &mut [u8; 64]) -> Option<usize> {
    list::build_id_with(
        |buf, off| {
            // SAFETY: `buf` is ours and writable for its whole length.
            let r = unsafe { sys::pread(fd, buf.as_mut_ptr() as usize, buf.len(), off) };
            r == buf.len() as isize
        },
        out,
    )
}
