//! The `shmem` route: map a mapping's whole windows from its file's copy
//! in the text store (`hugetext warm --shmem`), a tmpfs mounted
//! `huge=within_size` whose 2 MiB folios every process mapping the copy
//! shares.
//!
//! The copy is found from the original alone: its name is the identity of
//! the file open behind the mapping (`fstat` of the descriptor
//! [`open_mapped`] checked to be the mapped file: device, inode, size,
//! mtime, build-id; `hugetext_abi::store::entry_name`), so an original that
//! changed has no entry. The entry is opened once, `O_NOFOLLOW` relative
//! to the store directory's descriptor, and its `fstat` must show a regular
//! file owned by root, writable by nobody else, with one link and the
//! original's size (`entry_acceptable`); what is mapped is that descriptor,
//! never a path opened again. Each run of windows is replaced with one
//! `mmap(MAP_PRIVATE | MAP_FIXED)` of the same file range of the copy (the
//! same bytes: atomic for threads running the text, as [`file::replace`]
//! explains), then `MADV_HUGEPAGE` and populated, and verified like every
//! route: a window counts only when it is PMD-mapped.

use super::collect::ensure_fd;
use super::{runs, Cand, Chunk, Pass};
use crate::out::line;
use crate::scan;
use crate::sys;
use hugetext_abi::store::{self, Identity, NAME_MAX};

/// What the store has for the mapping being worked on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// Not looked up yet.
    Unknown,
    /// The copy, open.
    Open(i32),
    /// No store, or no entry for this file as it is now.
    Missing,
    /// An entry that must not be served (said once), or an error.
    Refused,
}

/// Route 4, `shmem` (congruent text only).
pub(super) fn route_shmem(p: &mut Pass, c: &Cand, w: &mut Chunk, fd: &mut isize, entry: &mut Entry) {
    if *entry == Entry::Unknown {
        *entry = open_entry(p, c, fd);
    }
    let Entry::Open(sfd) = *entry else {
        return;
    };
    let unit = scan::unit();
    let prot = libc::PROT_READ | libc::PROT_EXEC;
    let flags = libc::MAP_PRIVATE | libc::MAP_FIXED;
    for (i, k) in runs(w.all & !w.huge) {
        let (s, len) = (w.a + i * unit, k * unit);
        let off = Pass::file_off(c, s);
        let mask = sys::block_signals();
        // SAFETY: the same bytes as the text there: the same range of
        // a copy of the very file mapped (named from its identity,
        // checked in `open_entry`), `r-x` like the text; the mapping
        // has no copy-on-write pages (checked per mapping).
        let r = unsafe { sys::mmap_fixed(s, len, prot, flags, sfd, off) };
        if r < 0 {
            // Kernels before 6.12 may leave a hole (see `replace`).
            let mut v = [0u8; 1];
            for _ in 0..8 {
                if sys::mincore(s, 4096, &mut v) != -(libc::ENOMEM as isize) {
                    break;
                }
                // SAFETY: as above, into the hole the failed call left.
                unsafe { sys::mmap_fixed(s, len, prot, flags, sfd, off) };
            }
        }
        sys::restore_signals(mask);
        if r < 0 {
            return p.fail(c, "shmem route: mmap(MAP_FIXED) of the store copy", r);
        }
        let r = sys::advise(s, len, sys::Keep::Hugepage);
        if r < 0 {
            p.fail(c, "shmem route: madvise(MADV_HUGEPAGE)", r);
        }
        p.populate(s, len);
    }
    p.t.shmem += p.remeasure(c, w);
    if !w.done() {
        p.note(
            c,
            "shmem route: some windows of the store copy are not PMD-mapped (is the store a tmpfs mounted huge=within_size?)",
        );
    }
}

/// Find and open the store copy of the file behind `c`.
fn open_entry(p: &mut Pass, c: &Cand, fd: &mut isize) -> Entry {
    let f = ensure_fd(p, c, fd);
    if f < 0 {
        p.fail(c, "shmem route: cannot open the mapped file", f);
        return Entry::Refused;
    }
    let f = f as i32;
    // SAFETY: zero is a valid `stat`.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    if sys::fstat(f, &mut st) < 0 {
        return Entry::Refused;
    }
    let mut bid = [0u8; 64];
    let n = crate::hot::build_id_of(f, &mut bid);
    let id = Identity {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime_ns: store::mtime_ns(st.st_mtime, st.st_mtime_nsec),
        build_id: n.map(|n| &bid[..n]),
    };
    let mut nb = [0u8; NAME_MAX];
    let name = store::entry_name(&id, &mut nb);
    let mut cname = [0u8; NAME_MAX + 1];
    cname[..name.len()].copy_from_slice(name);
    let cname = &cname[..=name.len()];
    let mut dir = [0u8; 4097];
    let root = p.cfg.store;
    if root.len() >= dir.len() {
        return Entry::Missing;
    }
    dir[..root.len()].copy_from_slice(root);
    let d = sys::open(
        &dir[..=root.len()],
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    );
    if d < 0 {
        return Entry::Missing;
    }
    // No link followed, no FIFO to hang on.
    let e = sys::openat(
        d as i32,
        cname,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        0,
    );
    sys::close(d as i32);
    if e == -(libc::ENOENT as isize) {
        return Entry::Missing;
    }
    let refuse = |why: &str, err: isize| {
        if p.cfg.verbose {
            let mut o = line();
            o.bytes(p.st.path(c))
                .s(": text store entry ")
                .bytes(root)
                .s("/")
                .bytes(name)
                .s(" refused: ")
                .s(why);
            if err < 0 {
                o.err(err);
            }
            o.s("; not used");
        }
        Entry::Refused
    };
    if e < 0 {
        let why = match e == -(libc::ELOOP as isize) {
            true => "it is a symbolic link",
            false => "cannot open it",
        };
        return refuse(why, e);
    }
    let e = e as i32;
    // SAFETY: zero is a valid `stat`.
    let mut es: libc::stat = unsafe { core::mem::zeroed() };
    let checked = match sys::fstat(e, &mut es) {
        r if r < 0 => Err(("cannot fstat it", r)),
        _ => store::entry_acceptable(es.st_mode, es.st_uid, es.st_nlink as u64, es.st_size as u64, id.size)
            .map_err(|why| (why, 0)),
    };
    match checked {
        Ok(()) => Entry::Open(e),
        Err((why, err)) => {
            sys::close(e);
            refuse(why, err)
        }
    }
}

/// `-v`: what the store would save for a mapping that has no entry:
/// `bytes` of its windows not shared from the page cache.
pub(super) fn store_hint(p: &Pass, c: &Cand, bytes: u64) {
    if !p.cfg.verbose || bytes == 0 {
        return;
    }
    line()
        .bytes(p.st.path(c))
        .s(": no copy in the text store ")
        .bytes(p.cfg.store)
        .s(": `hugetext warm --shmem ")
        .bytes(p.st.path(c))
        .s("` would share ")
        .mib(bytes)
        .s(" of it between processes");
}
