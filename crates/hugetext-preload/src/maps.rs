//! Parse `/proc/self/maps` with a fixed buffer and raw `read()`.

use crate::sys;

/// One line of `/proc/self/maps`. `path` borrows from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapLine<'a> {
    pub start: usize,
    pub end: usize,
    /// `rwxp` / `r-xs` ...
    pub perms: [u8; 4],
    pub offset: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// Path or pseudo-name (`[vdso]`, `[anon:...]`), possibly empty.
    pub path: &'a [u8],
}

fn hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | d as u64;
    }
    Some(v)
}

fn dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(v)
}

/// Split off the next space-separated field.
fn field(s: &[u8]) -> (&[u8], &[u8]) {
    let s = trim_start(s);
    match s.iter().position(|&c| c == b' ') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, &[]),
    }
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [b' ', rest @ ..] = s {
        s = rest;
    }
    s
}

/// Parse one line (without its newline).
pub fn parse_line(line: &[u8]) -> Option<MapLine<'_>> {
    let (range, rest) = field(line);
    let dash = range.iter().position(|&c| c == b'-')?;
    let start = hex(&range[..dash])? as usize;
    let end = hex(&range[dash + 1..])? as usize;
    let (perms, rest) = field(rest);
    let perms: [u8; 4] = perms.try_into().ok()?;
    let (off, rest) = field(rest);
    let offset = hex(off)?;
    let (dev, rest) = field(rest);
    let colon = dev.iter().position(|&c| c == b':')?;
    let dev_major = hex(&dev[..colon])? as u32;
    let dev_minor = hex(&dev[colon + 1..])? as u32;
    let (ino, rest) = field(rest);
    let inode = dec(ino)?;
    let path = trim_start(rest);
    Some(MapLine {
        start,
        end,
        perms,
        offset,
        dev_major,
        dev_minor,
        inode,
        path,
    })
}

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
    fn parses_file_and_pseudo_lines() {
        let l = parse_line(b"7f12a4000000-7f12a5400000 r-xp 00200000 fd:01 1234567                    /usr/lib/x 86/libfoo.so (deleted)").unwrap();
        assert_eq!(l.start, 0x7f12a4000000);
        assert_eq!(l.end, 0x7f12a5400000);
        assert_eq!(&l.perms, b"r-xp");
        assert_eq!(l.offset, 0x200000);
        assert_eq!((l.dev_major, l.dev_minor), (0xfd, 1));
        assert_eq!(l.inode, 1234567);
        assert_eq!(l.path, b"/usr/lib/x 86/libfoo.so (deleted)");
        let v = parse_line(b"7ffd1e5f0000-7ffd1e5f2000 r-xp 00000000 00:00 0                          [vdso]").unwrap();
        assert_eq!(v.path, b"[vdso]");
        let a = parse_line(b"7ffd1e5f0000-7ffd1e5f2000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(a.path, b"");
        assert!(parse_line(b"garbage").is_none());
    }

    #[test]
    fn reads_own_maps_with_a_tiny_buffer() {
        let mut big = [0u8; 65536];
        let mut small = [0u8; 200];
        let (mut n1, mut n2) = (0, 0);
        for_each(&mut big, |_| n1 += 1).unwrap();
        for_each(&mut small, |_| n2 += 1).unwrap();
        assert!(n1 > 5);
        // With 200 bytes some long lines are skipped, never misparsed.
        assert!(n2 <= n1 + 2 && n2 > 0);
    }
}
