//! The marker instructions of the kernel lab's instruction counter (a qemu
//! TCG plugin, `tests/vm/count/qcount.c`): no-ops that carry an operation
//! (open or close an interval) and a 14-bit id, which the plugin recognises
//! when the guest executes them; everything the vCPU executes between an
//! open and a close of the same id is counted, kernel and user apart.
//!
//! - x86-64: `nopl 0x4854XXXX(%rax)`, the displacement `0x4854 << 16 | op << 14 | id`;
//! - aarch64: `movk xzr, #(op << 14 | id), lsl #48` (a write to the zero register).
//!
//! Outside such a guest they do nothing. Each (op, id) is one instruction
//! followed by a return in a page of code written once and made
//! read-execute, so a marker costs a call and a return.

use crate::{Error, Result};

/// Ids below this are the benchmarks'; the lab's helper uses the others.
pub const MAX_ID: u16 = 256;

const OPEN: u32 = 1;
const CLOSE: u32 = 2;
/// Bytes per (op, id) entry of the code page.
const ENTRY: usize = 8;

/// The code page: one entry per (op, id).
#[derive(Debug)]
pub struct Markers {
    code: crate::kernel::Mapping,
}

#[cfg(target_arch = "aarch64")]
extern "C" {
    fn __clear_cache(start: *mut libc::c_char, end: *mut libc::c_char);
}

impl Markers {
    /// Write the marker instructions for ids `0..MAX_ID`.
    pub fn new() -> Result<Markers> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            return Err(Error::Unsupported(
                "counting markers exist for x86-64 and aarch64 only".into(),
            ));
        }
        let len = 2 * MAX_ID as usize * ENTRY;
        let pages = len.div_ceil(crate::kernel::page_size()) * crate::kernel::page_size();
        let code = crate::kernel::Mapping::anon_aligned(
            pages,
            libc::PROT_READ | libc::PROT_WRITE,
            crate::kernel::page_size(),
        )?;
        for op in [OPEN, CLOSE] {
            for id in 0..u32::from(MAX_ID) {
                let bytes = encode(op, id);
                // SAFETY: the entry lies inside our fresh read-write mapping.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), code.as_ptr().add(offset(op, id)), ENTRY);
                }
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the range is our mapping.
        unsafe {
            __clear_cache(code.as_ptr().cast(), code.as_ptr().add(len).cast());
        }
        // SAFETY: our own mapping; nothing else refers to it.
        if unsafe { libc::mprotect(code.as_ptr().cast(), pages, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            return Err(Error::last_os("mprotect (markers)"));
        }
        Ok(Markers { code })
    }

    /// Open the interval `id` on the CPU this runs on.
    #[inline(always)]
    pub fn open(&self, id: u16) {
        self.call(OPEN, id);
    }

    /// Close the interval `id`.
    #[inline(always)]
    pub fn close(&self, id: u16) {
        self.call(CLOSE, id);
    }

    fn call(&self, op: u32, id: u16) {
        assert!(id < MAX_ID);
        // SAFETY: the entry is a no-op followed by a return, in our
        // read-execute page (written in `new`).
        unsafe {
            let f: extern "C" fn() = std::mem::transmute(self.code.as_ptr().add(offset(op, u32::from(id))));
            f();
        }
    }
}

fn offset(op: u32, id: u32) -> usize {
    ((op - 1) as usize * MAX_ID as usize + id as usize) * ENTRY
}

/// One entry: the marker and a return, padded to [`ENTRY`] bytes.
fn encode(op: u32, id: u32) -> [u8; ENTRY] {
    let v = op << 14 | id;
    if cfg!(target_arch = "aarch64") {
        let movk = 0xf2e0_001f_u32 | v << 5;
        let ret = 0xd65f_03c0_u32;
        let mut b = [0u8; ENTRY];
        b[..4].copy_from_slice(&movk.to_le_bytes());
        b[4..].copy_from_slice(&ret.to_le_bytes());
        b
    } else {
        let d = (0x4854_0000 | v).to_le_bytes();
        [0x0f, 0x1f, 0x80, d[0], d[1], d[2], d[3], 0xc3]
    }
}

/// Pin the calling thread to the CPU it runs on, so that an interval opens
/// and closes on the same vCPU.
pub fn pin_here() -> Result<()> {
    // SAFETY: plain syscalls on our own thread with a local cpu_set_t.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu < 0 {
            return Err(Error::last_os("sched_getcpu"));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(Error::last_os("sched_setaffinity"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_no_ops_outside_the_counter() {
        let m = Markers::new().unwrap();
        for id in [0, 1, MAX_ID - 1] {
            m.open(id);
            m.close(id);
        }
    }

    #[test]
    fn encodings_match_the_plugin() {
        // x86-64 nopl 0x48544005(%rax); aarch64 movk xzr, #0x4005, lsl #48
        if cfg!(target_arch = "aarch64") {
            assert_eq!(u32::from_le_bytes(encode(1, 5)[..4].try_into().unwrap()), 0xf2e8_00bf);
        } else {
            assert_eq!(encode(1, 5), [0x0f, 0x1f, 0x80, 0x05, 0x40, 0x54, 0x48, 0xc3]);
        }
    }
}
