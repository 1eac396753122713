//! Gather the candidates: the text mappings of `/proc/self/maps` worth a
//! look, the files behind them (opened and checked to be the very file
//! mapped), and the ranges earlier passes copied.

use super::{in_scope, remap, window_bytes, Cand, Pass, Scope, State, MAXC, PATHS};
use crate::config::Config;
use crate::copies::was_copied;
use crate::out::line;
use crate::scan::{self, Scanner};
use crate::smaps::Smaps;
use crate::sys;
use crate::verify::Verifier;
use hugetext_abi::thp::ThpMode;
use hugetext_abi::{copyname, pattern};
pub(super) fn thp_never() -> bool {
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
    pub(super) fn path(&self, c: &Cand) -> &[u8] {
        &self.paths[c.path_at as usize..(c.path_at + c.path_len) as usize]
    }

    /// Read /proc/self/maps: text candidates and our own identity.
    pub(super) fn collect(&mut self, cfg: &Config, scope: &Scope) -> Result<(), isize> {
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
                            .size(scan::unit() as u64)
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

    /// Never touch this library's own code: drop the candidates that map
    /// its file (copies of other text stay).
    pub(super) fn skip_own(&mut self) {
        if !self.own_known {
            return;
        }
        let own = self.own;
        let mut w = 0;
        for i in 0..self.n {
            let c = self.cands[i];
            if !c.copied && (c.dev, c.ino) == own {
                continue;
            }
            self.cands[w] = c;
            w += 1;
        }
        self.n = w;
    }
}

/// Open the file behind `c` (checking it is the very file mapped, not one
/// renamed over it since). Returns the fd or `-errno`.
pub(super) fn open_mapped(st: &State, c: &Cand) -> isize {
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
pub(super) fn maps_dev(fd: i32) -> Option<(u32, u32)> {
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
pub(super) fn fs_name(fd: i32) -> &'static str {
    // SAFETY: zero is a valid `statfs`.
    let mut st: libc::statfs = unsafe { core::mem::zeroed() };
    if sys::fstatfs(fd, &mut st) < 0 {
        return "this filesystem";
    }
    hugetext_abi::fs::name(st.f_type as u64).unwrap_or("this filesystem")
}

/// The verifier of a pass: `PAGEMAP_SCAN` where the kernel has it (and
/// `HUGETEXT_COMPAT` allows it), else `/proc/self/smaps`; `Err(-errno)`
/// when neither can be read (text is then left as it is).
pub(super) fn open_verifier(cfg: &Config) -> Result<Verifier, isize> {
    let scan = match cfg.compat.no_pagemap_scan {
        true => Err(0),
        false => Scanner::open(),
    };
    if scan::is_contpte() {
        return open_cont_verifier(cfg, scan);
    }
    let e = match scan {
        Ok(s) => return Ok(Verifier::Scan(s)),
        Err(e) => e,
    };
    match Smaps::open() {
        Ok(s) => {
            if cfg.verbose {
                let mut o = line();
                if e == 0 {
                    o.s(hugetext_abi::settings::COMPAT).s("=no-pagemap-scan");
                } else {
                    o.s("PAGEMAP_SCAN is not available (Linux 6.7+)").err(e);
                }
                o.s(": verifying with the per-mapping totals of /proc/self/smaps");
            }
            Ok(Verifier::Smaps(s))
        }
        Err(e2) => {
            if cfg.verbose {
                line()
                    .s("cannot read this process's page tables (PAGEMAP_SCAN needs Linux 6.7; /proc/self/smaps")
                    .err(e2)
                    .s("); text left as it is");
            }
            Err(if e < 0 { e } else { e2 })
        }
    }
}

/// The contpte verifier (arm64, 64 KiB pages: see verify.rs): folio sizes
/// from pagemap PFNs and kpageflags where this process may read them, the
/// copy-on-write test from `PAGEMAP_SCAN` or smaps.
fn open_cont_verifier(cfg: &Config, scan: Result<Scanner, isize>) -> Result<Verifier, isize> {
    let pfn = crate::verify::Pfn::open();
    let (scan, smaps) = match scan {
        Ok(s) => (Some(s), None),
        Err(_) => match Smaps::open() {
            Ok(m) => (None, Some(m)),
            Err(e) => {
                if cfg.verbose {
                    line()
                        .s("cannot read this process's page tables (PAGEMAP_SCAN needs Linux 6.7; /proc/self/smaps")
                        .err(e)
                        .s("); text left as it is");
                }
                return Err(e);
            }
        },
    };
    if cfg.verbose {
        let mut o = line();
        o.s("unit of huge text: the ")
            .size(scan::unit() as u64)
            .s(" contiguous-PTE block of ")
            .size(scan::page() as u64)
            .s(" pages (the ")
            .size(scan::pmd() as u64)
            .s(" PMD is beyond the page cache's largest folio); ");
        if pfn.is_some() {
            o.s("verified per block with pagemap PFNs and /proc/kpageflags");
        } else {
            o.s("no PFN access (needs CAP_SYS_ADMIN): only the copy route, whose 2 MiB folios are proved as they are allocated (one write per block, then mincore), can be verified");
        }
    }
    let pagemap = sys::open(b"/proc/self/pagemap\0", libc::O_RDONLY | libc::O_CLOEXEC, 0) as i32;
    Ok(Verifier::Cont(crate::verify::Cont {
        pfn,
        pagemap,
        scan,
        smaps,
    }))
}

/// Can this process's anonymous memory get folios of the unit? PMD unit:
/// transparent_hugepage is not `never` ([`thp_never`]). Contpte unit (the
/// 2 MiB mTHP size, below the 512 MiB PMD): `hugepages-2048kB/enabled` is
/// `always` or `madvise` (the copy is `MADV_HUGEPAGE`), or `inherit` with
/// a top-level mode other than `never`; a kernel without that file (before
/// 6.8: no anonymous THP below the PMD) cannot.
pub(super) fn anon_unit_never() -> bool {
    if !scan::is_contpte() {
        return thp_never();
    }
    use hugetext_abi::thp::SizeMode;
    let mut path = [0u8; 80];
    let p = hugetext_abi::thp::ENABLED_2M_PATH.as_bytes();
    path[..p.len()].copy_from_slice(p);
    let fd = sys::open(&path[..=p.len()], libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if fd < 0 {
        return true;
    }
    let mut b = [0u8; 128];
    let n = sys::read(fd as i32, &mut b).max(0) as usize;
    sys::close(fd as i32);
    let top = if thp_never() { ThpMode::Never } else { ThpMode::Madvise };
    !SizeMode::parse(&b[..n]).is_some_and(|m| m.allows_madvised(top))
}

/// The descriptor of `c`'s file in `fd`, opened ([`open_mapped`]) at the
/// first route that needs it (the fd, or `-errno` when it cannot be).
pub(super) fn ensure_fd(p: &mut Pass, c: &Cand, fd: &mut isize) -> isize {
    if *fd == 0 {
        *fd = open_mapped(p.st, c);
    }
    *fd
}
