//! Read `/proc/self/maps` (and other `/proc` files, line by line) with a
//! fixed buffer and raw `read()`; lines are parsed by `hugetext_abi::maps`.

use crate::sys;

pub use hugetext_abi::maps::{parse_line, MapLine};

/// Call `f` for every line of `/proc/self/maps`, reading through `buf`
/// (lines longer than `buf` are skipped). Returns `-errno` if the file
/// cannot be opened or read.
pub fn for_each(buf: &mut [u8], mut f: impl FnMut(&MapLine<'_>)) -> Result<(), isize> {
    for_each_line(b"/proc/self/maps\0", buf, |l| {
        if let Some(l) = parse_line(l) {
            f(&l);
        }
        true
    })
}

/// Call `f` for every line (without its newline) of the file at `path`
/// (NUL-terminated), reading it with raw `read()` through `buf`; lines
/// longer than `buf` are skipped. `f` returns false to stop reading (the
/// kernel then generates no more of a `/proc` file). Returns `-errno` if the
/// file cannot be opened or read.
pub fn for_each_line(path: &[u8], buf: &mut [u8], mut f: impl FnMut(&[u8]) -> bool) -> Result<(), isize> {
    let fd = sys::open(path, libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if fd < 0 {
        return Err(fd);
    }
    let fd = fd as i32;
    let mut fill = 0usize;
    let mut skipping = false;
    let result = 'read: loop {
        let r = sys::read(fd, &mut buf[fill..]);
        if r == -(libc::EINTR as isize) {
            continue;
        }
        if r < 0 {
            break Err(r);
        }
        let eof = r == 0;
        fill += r as usize;
        let mut pos = 0;
        while let Some(nl) = buf[pos..fill].iter().position(|&c| c == b'\n') {
            if !skipping && !f(&buf[pos..pos + nl]) {
                break 'read Ok(());
            }
            skipping = false;
            pos += nl + 1;
        }
        if eof {
            if pos < fill && !skipping {
                f(&buf[pos..fill]);
            }
            break Ok(());
        }
        if pos == 0 && fill == buf.len() {
            // A line longer than the buffer: drop it.
            skipping = true;
            fill = 0;
            continue;
        }
        buf.copy_within(pos..fill, 0);
        fill -= pos;
    };
    sys::close(fd);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_maps_with_a_tiny_buffer() {
        let mut big = [0u8; 65536];
        let mut small = [0u8; 200];
        let count = |buf: &mut [u8]| {
            let mut n = 0;
            for_each(buf, |_| n += 1).unwrap();
            n
        };
        // Other test threads map and unmap memory meanwhile, also between
        // the small read's many read() calls: a maps file that changes can
        // show a line twice. Judge a try only when the maps were the same
        // before and after it; a wrong count in every quiet try fails.
        let mut last = (0, 0);
        for _ in 0..50 {
            let n1 = count(&mut big);
            let n2 = count(&mut small);
            if count(&mut big) != n1 {
                continue;
            }
            assert!(n1 > 5);
            last = (n1, n2);
            // With 200 bytes some long lines are skipped, never misparsed.
            if n2 <= n1 + 2 && n2 > 0 {
                return;
            }
        }
        panic!("tiny-buffer read found {} lines of {}", last.1, last.0);
    }
}
