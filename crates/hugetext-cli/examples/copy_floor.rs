//! The machine's floor for the `copy` route of `hugetext run`, and the ways
//! to fill new anonymous huge pages with a file's bytes, measured in one
//! process, interleaved (one run of each variant per round), medians in ms
//! per 100 MiB.
//!
//! ```sh
//! cargo build --release -p hugetext-cli --examples
//! target/release/examples/copy_floor [ROUNDS] [MIB] [DIR]   # defaults: 30 100 target
//! ```
//!
//! Every variant fills a fresh `MADV_HUGEPAGE` anonymous mapping (2 MiB
//! aligned), as the preload does, so the kernel allocates and zeroes a huge
//! page at the first write to each window, whatever writes it. The sources
//! are two scratch files of MIB MiB in DIR, one with its page cache in 2 MiB
//! folios (`huge`, as `hugetext warm` leaves it), one in 4 KiB folios
//! (`small`, as plain runs leave it); a mapping of one is congruent (address
//! minus offset a multiple of 2 MiB: PMD-mapped when the cache is huge,
//! bfd's layout) or not (lld's and mold's layout: 4 KiB page-table entries
//! whatever the cache).
//!
//! - `zero`: `MADV_POPULATE_WRITE` of the new mapping: fault + zero only;
//! - `memcpy only`: `memcpy` from anonymous huge pages into a mapping that
//!   is already populated: the copy without the zeroing;
//! - `floor`: fault + zero + `memcpy` from anonymous huge pages (a
//!   PMD-mapped source that costs nothing to read): what any copy into new
//!   anonymous huge pages costs at least on this machine; `/window`: 2 MiB
//!   at a time;
//! - `memcpy [not] congruent`: map the file (timed, with its `munmap`: the
//!   route's `mremap` unmaps the text's page tables too),
//!   `MADV_POPULATE_READ`, `memcpy`; `/window`: 2 MiB at a time;
//! - `pread`: `pread(2)` of the whole range into the new mapping; `/window`:
//!   2 MiB at a time;
//! - `populate+pread`: `MADV_POPULATE_WRITE` of the whole mapping, then
//!   `pread`.
//!
//! A benchmark, not a test: it asserts nothing.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

#[path = "support/floor.rs"]
mod floor;
use floor::{Anon, PMD};

const MADV_POPULATE_READ: i32 = 22;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// A read-only mapping of `len` bytes of `f` from offset 0 at an address
/// congruent to 0 modulo 2 MiB, or (not `congruent`) 4 KiB past such an
/// address, as lld and mold place text.
struct FileMap {
    at: usize,
    len: usize,
    res: usize,
}

impl FileMap {
    fn new(f: &File, len: usize, congruent: bool) -> FileMap {
        // SAFETY: reserve address space, then map the file over part of our
        // own reservation.
        unsafe {
            let res = libc::mmap(
                std::ptr::null_mut(),
                len + 2 * PMD,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            assert!(res != libc::MAP_FAILED);
            let res = res as usize;
            let at = ((res + PMD - 1) & !(PMD - 1)) + if congruent { 0 } else { 4096 };
            let m = libc::mmap(
                at as *mut _,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                f.as_raw_fd(),
                0,
            );
            assert_eq!(m as usize, at);
            libc::madvise(at as *mut _, len, libc::MADV_HUGEPAGE);
            FileMap { at, len, res }
        }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: our own reservation, which holds the mapping.
        unsafe { libc::munmap(self.res as *mut _, self.len + 2 * PMD) };
    }
}

fn pread_all(f: &File, dst: usize, len: usize, off: u64) {
    let mut done = 0;
    while done < len {
        // SAFETY: `dst..dst+len` is our own writable mapping.
        let r = unsafe {
            libc::pread(
                f.as_raw_fd(),
                (dst + done) as *mut _,
                len - done,
                (off + done as u64) as i64,
            )
        };
        assert!(r > 0, "pread");
        done += r as usize;
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A scratch file of `mib` MiB of pseudo-random bytes (not zero: no
/// shortcut anywhere), already unlinked, its page cache in 2 MiB folios
/// (`huge`) or 4 KiB folios.
fn source(dir: &std::path::Path, mib: usize, huge: bool) -> File {
    let path = dir.join(format!("copy_floor.{}.{huge}.bin", std::process::id()));
    {
        let mut f = File::create(&path).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..mib {
            for c in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            f.write_all(&buf).unwrap();
        }
        f.sync_all().unwrap();
    }
    let f = File::open(&path).unwrap();
    let _ = std::fs::remove_file(&path); // the open file stays
    hugetext::pagecache::evict(&f, 0..0).unwrap();
    if huge {
        hugetext::pagecache::fill_huge(&f, 0..(mib << 20) as u64).unwrap();
    } else {
        hugetext::pagecache::fill_small(&f, 0..(mib << 20) as u64).unwrap();
    }
    f
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(30);
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "target".into()));
    let len = mib << 20;
    assert!(len % PMD == 0, "MIB must be a multiple of 2");
    let (huge, small) = (source(&dir, mib, true), source(&dir, mib, false));
    // A PMD-mapped copy of the bytes: the free source of `floor`.
    let src = floor::anon(len);
    pread_all(&huge, src.addr(), len, 0);
    let check = |dst: &Anon| {
        // SAFETY: both ours, `len` bytes each.
        let same = unsafe { libc::memcmp(dst.addr() as *const _, src.addr() as *const _, len) } == 0;
        assert!(same, "copy differs");
    };
    let check = &check;
    // The fill of a fresh mapping, timed with it.
    let timed = |fill: &dyn Fn(&Anon)| {
        let d = floor::anon(len);
        let t = Instant::now();
        fill(&d);
        let r = ms(t);
        check(&d);
        r
    };
    let memcpy = |from: usize, to: usize, n: usize| {
        // SAFETY: our own mappings, `n` bytes each.
        unsafe { std::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, n) }
    };
    let populate_read = |at: usize, n: usize| {
        // SAFETY: our own mapping; populating keeps the contents.
        unsafe { libc::madvise(at as *mut _, n, MADV_POPULATE_READ) };
    };
    // memcpy from a mapping of `f`, after MADV_POPULATE_READ: whole, or
    // window by window.
    // (The mapping is made and unmapped inside the timed part.)
    let from_map = |f: &File, congruent: bool, window: bool| {
        timed(&|d: &Anon| {
            let m = FileMap::new(f, len, congruent);
            let step = if window { PMD } else { len };
            for w in (0..len).step_by(step) {
                populate_read(m.at + w, step);
                memcpy(m.at + w, d.addr() + w, step);
            }
        })
    };
    let read = |f: &File, window: bool| {
        timed(&|d: &Anon| {
            let step = if window { PMD } else { len };
            for w in (0..len).step_by(step) {
                pread_all(f, d.addr() + w, step, w as u64);
            }
        })
    };
    type Variant<'a> = (&'static str, &'static str, Box<dyn Fn() -> f64 + 'a>);
    let (h, s) = (&huge, &small);
    let variants: Vec<Variant> = vec![
        (
            "zero",
            "-",
            Box::new(|| {
                let d = floor::anon(len);
                let t = Instant::now();
                floor::populate_write(&d);
                ms(t)
            }),
        ),
        (
            "memcpy only",
            "-",
            Box::new(|| {
                let d = floor::anon(len);
                floor::populate_write(&d);
                let t = Instant::now();
                memcpy(src.addr(), d.addr(), len);
                let r = ms(t);
                check(&d);
                r
            }),
        ),
        ("floor", "-", Box::new(|| floor::floor_ms(&src))),
        (
            "floor/window",
            "-",
            Box::new(|| {
                timed(&|d: &Anon| {
                    for w in (0..len).step_by(PMD) {
                        memcpy(src.addr() + w, d.addr() + w, PMD)
                    }
                })
            }),
        ),
        ("memcpy congruent", "huge", Box::new(|| from_map(h, true, false))),
        ("memcpy/window congruent", "huge", Box::new(|| from_map(h, true, true))),
        ("memcpy congruent", "small", Box::new(|| from_map(s, true, false))),
        ("memcpy not congruent", "huge", Box::new(|| from_map(h, false, false))),
        ("memcpy not congruent", "small", Box::new(|| from_map(s, false, false))),
        ("pread", "huge", Box::new(|| read(h, false))),
        ("pread/window", "huge", Box::new(|| read(h, true))),
        ("pread", "small", Box::new(|| read(s, false))),
        ("pread/window", "small", Box::new(|| read(s, true))),
        (
            "populate+pread",
            "small",
            Box::new(|| {
                timed(&|d: &Anon| {
                    floor::populate_write(d);
                    pread_all(s, d.addr(), len, 0)
                })
            }),
        ),
    ];
    let mut got = vec![Vec::new(); variants.len()];
    for round in 0..=rounds {
        for (i, (_, _, run)) in variants.iter().enumerate() {
            let v = run();
            if round > 0 {
                got[i].push(v); // round 0 warms up
            }
        }
    }
    let floor = median(got[2].clone());
    println!("{mib} MiB, {rounds} rounds, medians; ratio: to `floor` (fault + zero + memcpy from huge pages)");
    println!(
        "{:<24} {:<6} {:>10} {:>14} {:>7}",
        "variant", "cache", "ms", "ms per 100 MiB", "ratio"
    );
    for (i, (name, cache, _)) in variants.iter().enumerate() {
        let m = median(got[i].clone());
        println!(
            "{:<24} {:<6} {:>10.2} {:>14.2} {:>7.2}",
            name,
            cache,
            m,
            m * 100.0 / mib as f64,
            m / floor
        );
    }
}
