//! Shared by the `copy_floor` and `run_startup` examples: fresh anonymous
//! huge-page memory and the machine's floor for filling it.
#![allow(dead_code)] // each example uses part of it

use std::time::Instant;

pub const PMD: usize = 2 << 20;
pub const MADV_POPULATE_WRITE: i32 = 23;

/// A 2 MiB-aligned anonymous `MADV_HUGEPAGE` mapping of `len` bytes.
pub struct Anon {
    pub at: usize,
    pub len: usize,
}

impl Anon {
    pub fn new(len: usize) -> Anon {
        // SAFETY: a fresh private anonymous mapping; the unaligned head and
        // tail are our own and unmapped at once.
        unsafe {
            let m = libc::mmap(
                std::ptr::null_mut(),
                len + PMD,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            assert!(m != libc::MAP_FAILED);
            let m = m as usize;
            let at = (m + PMD - 1) & !(PMD - 1);
            if at > m {
                libc::munmap(m as *mut _, at - m);
            }
            libc::munmap((at + len) as *mut _, m + PMD - at);
            assert_eq!(libc::madvise(at as *mut _, len, libc::MADV_HUGEPAGE), 0);
            Anon { at, len }
        }
    }

    pub fn populate_write(&self) {
        // SAFETY: our own mapping.
        let r = unsafe { libc::madvise(self.at as *mut _, self.len, MADV_POPULATE_WRITE) };
        assert_eq!(r, 0, "MADV_POPULATE_WRITE");
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.at as *mut _, self.len) };
    }
}

/// `len` bytes of pseudo-random data (not zero: no shortcut anywhere) in
/// anonymous huge pages: the source of [`floor_ms`].
pub fn random_source(len: usize) -> Anon {
    let a = Anon::new(len);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (0..len).step_by(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // SAFETY: our own writable mapping of `len` bytes.
        unsafe { ((a.at + i) as *mut u64).write(x) };
    }
    a
}

/// The floor of any copy into new anonymous huge pages, in ms: a fresh
/// `MADV_HUGEPAGE` mapping of `src.len` bytes filled with `memcpy` from
/// `src` (PMD-mapped, costs nothing to read), so the kernel allocates and
/// zeroes each huge page at its first write and the copy follows.
pub fn floor_ms(src: &Anon) -> f64 {
    let d = Anon::new(src.len);
    let t = Instant::now();
    // SAFETY: our own mappings, `len` bytes each.
    unsafe { std::ptr::copy_nonoverlapping(src.at as *const u8, d.at as *mut u8, src.len) };
    t.elapsed().as_secs_f64() * 1e3
}
