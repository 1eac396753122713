//! Working memory that starts all-zero and is valid that way by
//! construction, the idea of object's `Pod`: fresh anonymous pages are zero,
//! and only types that declare all-zero bytes a valid value may live there.

use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use crate::sys;

/// All-zero bytes are a valid value of this type.
///
/// # Safety
/// Implement only for types made of integers, `bool`s, tuples, arrays and
/// structs of `Zeroable` types: no references, function pointers,
/// `NonZero*`, `char`, enums or `Option`s (whose all-zero bytes are not a
/// value, or whose layout Rust does not specify).
pub unsafe trait Zeroable: Sized {}

/// One `T` in its own private anonymous mapping, zero-filled by the kernel,
/// unmapped on drop: neither the calling thread's stack nor the heap is
/// involved, whatever the size of `T`.
pub struct Zeroed<T: Zeroable> {
    ptr: NonNull<T>,
}

impl<T: Zeroable> Zeroed<T> {
    const FITS_A_PAGE_ALIGNMENT: () = assert!(core::mem::align_of::<T>() <= 4096 && core::mem::size_of::<T>() > 0);

    /// Map it; `Err(-errno)` when the kernel gives no memory.
    pub fn map() -> Result<Zeroed<T>, isize> {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS_A_PAGE_ALIGNMENT;
        let m = sys::anon_rw(core::mem::size_of::<T>());
        if m < 0 {
            return Err(m);
        }
        match NonNull::new(m as *mut T) {
            Some(ptr) => Ok(Zeroed { ptr }),
            None => Err(-(libc::ENOMEM as isize)),
        }
    }
}

impl<T: Zeroable> Deref for Zeroed<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: `ptr` is our own mapping of size_of::<T>() bytes, page
        // aligned (>= align_of::<T>(), checked at compile time), filled with
        // zeros by the kernel, which is a valid `T` by `Zeroable`; it lives
        // until `self` is dropped.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: Zeroable> DerefMut for Zeroed<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: Zeroable> Drop for Zeroed<T> {
    fn drop(&mut self) {
        // SAFETY: our own mapping; the references `deref` gave out borrowed
        // `self`, which is going away.
        unsafe { sys::munmap(self.ptr.as_ptr() as usize, core::mem::size_of::<T>()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Counters {
        n: usize,
        seen: bool,
        pair: (u32, u64),
        big: [u8; 100_000],
    }
    // SAFETY: integers, a bool, a tuple of integers and an array of bytes.
    unsafe impl Zeroable for Counters {}

    #[test]
    fn starts_zero_and_is_writable() {
        let mut z = Zeroed::<Counters>::map().unwrap();
        assert_eq!((z.n, z.seen, z.pair), (0, false, (0, 0)));
        assert!(z.big.iter().all(|&b| b == 0));
        z.big[99_999] = 7;
        z.seen = true;
        assert!(z.seen && z.big[99_999] == 7);
    }
}
