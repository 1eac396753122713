//! Shared by the `copy_floor` and `run_startup` examples: fresh anonymous
//! huge-page memory and the machine's floor for filling it.
#![allow(dead_code)] // each example uses part of it

use std::time::Instant;

pub const PMD: usize = 2 << 20;
pub const MADV_POPULATE_WRITE: i32 = 23;

/// A 2 MiB-aligned anonymous `MADV_HUGEPAGE` mapping of `len` bytes
/// (the library's, unmapped on drop).
pub type Anon = hugetext::kernel::Mapping;

/// A fresh [`Anon`] of `len` bytes, untouched.
pub fn anon(len: usize) -> Anon {
    Anon::anon_huge(len).expect("mmap of anonymous huge-page memory")
}

/// Fault in (allocate and zero) every huge page of `a` at once.
pub fn populate_write(a: &Anon) {
    a.madvise(0, a.len(), MADV_POPULATE_WRITE).expect("MADV_POPULATE_WRITE");
}

/// `len` bytes of pseudo-random data (not zero: no shortcut anywhere) in
/// anonymous huge pages: the source of [`floor_ms`].
pub fn random_source(len: usize) -> Anon {
    let a = anon(len);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (0..len).step_by(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // SAFETY: our own writable mapping of `len` bytes.
        unsafe { ((a.addr() + i) as *mut u64).write(x) };
    }
    a
}

/// The floor of any copy into new anonymous huge pages, in ms: a fresh
/// `MADV_HUGEPAGE` mapping of `src.len` bytes filled with `memcpy` from
/// `src` (PMD-mapped, costs nothing to read), so the kernel allocates and
/// zeroes each huge page at its first write and the copy follows.
pub fn floor_ms(src: &Anon) -> f64 {
    let d = anon(src.len());
    let t = Instant::now();
    // SAFETY: our own mappings, `len` bytes each.
    unsafe { std::ptr::copy_nonoverlapping(src.addr() as *const u8, d.as_ptr(), src.len()) };
    t.elapsed().as_secs_f64() * 1e3
}
