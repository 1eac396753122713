//! One line of `/proc/PID/maps` (or a VMA header line of smaps), parsed
//! from bytes without allocating:
//! `start-end perms offset maj:min inode   path`.

/// One line of `/proc/PID/maps`. `path` borrows from the line.
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
    /// Path or pseudo-name (`[vdso]`, `[anon:...]`), possibly empty; may end
    /// in [`DELETED_SUFFIX`] and may contain spaces.
    pub path: &'a [u8],
}

/// What the kernel appends to the path of a file unlinked since it was
/// mapped.
pub const DELETED_SUFFIX: &[u8] = b" (deleted)";

impl MapLine<'_> {
    /// Executable (`x` permission).
    pub fn is_exec(&self) -> bool {
        self.perms[2] == b'x'
    }

    /// The mapped file was unlinked (or replaced) since it was mapped.
    pub fn is_deleted(&self) -> bool {
        self.path.ends_with(DELETED_SUFFIX)
    }
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

/// Parse one line (without its newline); `None` for anything that is not a
/// maps line (e.g. the `Key:  N kB` lines of smaps).
pub fn parse_line(line: &[u8]) -> Option<MapLine<'_>> {
    let (range, rest) = field(line);
    let dash = range.iter().position(|&c| c == b'-')?;
    let start = usize::try_from(hex(&range[..dash])?).ok()?;
    let end = usize::try_from(hex(&range[dash + 1..])?).ok()?;
    let (perms, rest) = field(rest);
    let perms: [u8; 4] = perms.try_into().ok()?;
    let (off, rest) = field(rest);
    let offset = hex(off)?;
    let (dev, rest) = field(rest);
    let colon = dev.iter().position(|&c| c == b':')?;
    let dev_major = u32::try_from(hex(&dev[..colon])?).ok()?;
    let dev_minor = u32::try_from(hex(&dev[colon + 1..])?).ok()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_line_with_spaces_and_deleted_suffix() {
        let l = parse_line(b"7f12a4000000-7f12a5400000 r-xp 00200000 fd:01 1234567                    /usr/lib/x 86/libfoo.so (deleted)").unwrap();
        assert_eq!(l.start, 0x7f12a4000000);
        assert_eq!(l.end, 0x7f12a5400000);
        assert_eq!(&l.perms, b"r-xp");
        assert!(l.is_exec());
        assert_eq!(l.offset, 0x200000);
        assert_eq!((l.dev_major, l.dev_minor), (0xfd, 1));
        assert_eq!(l.inode, 1234567);
        assert_eq!(l.path, b"/usr/lib/x 86/libfoo.so (deleted)");
        assert!(l.is_deleted());
        let l = parse_line(b"7f00-7f10 r-xp 00001000 08:01 1234     /tmp/a b (deleted)").unwrap();
        assert_eq!((l.start, l.end, l.offset, l.inode), (0x7f00, 0x7f10, 0x1000, 1234));
        assert_eq!(l.path, b"/tmp/a b (deleted)");
        // Only the suffix counts, not the word anywhere in the path.
        let l = parse_line(b"7f00-7f10 r-xp 00001000 08:01 1234 /tmp/(deleted)/x").unwrap();
        assert!(!l.is_deleted());
        // Trailing spaces in a path are the file's.
        let l = parse_line(b"7f00-7f10 r--p 00000000 08:01 1 /tmp/x  ").unwrap();
        assert_eq!(l.path, b"/tmp/x  ");
    }

    #[test]
    fn pseudo_and_anonymous_lines() {
        let v = parse_line(b"7ffd1e5f0000-7ffd1e5f2000 r-xp 00000000 00:00 0                          [vdso]").unwrap();
        assert_eq!(v.path, b"[vdso]");
        let a = parse_line(b"7ffd1e5f0000-7ffd1e5f2000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(a.path, b"");
        let a = parse_line(b"7f00-7f10 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((a.path, a.inode), (&b""[..], 0));
        let n = parse_line(b"7f00-7f10 r-xp 00000000 00:00 0   [anon:hugetext:/usr/bin/x y]").unwrap();
        assert_eq!(n.path, b"[anon:hugetext:/usr/bin/x y]");
        let big = parse_line(b"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]").unwrap();
        assert_eq!(big.start, 0xffffffffff600000);
        // Devices above 0xff print with more digits.
        let d = parse_line(b"1000-2000 r--s 00000000 103:0a 9 /x").unwrap();
        assert_eq!((d.dev_major, d.dev_minor), (0x103, 0xa));
    }

    #[test]
    fn odd_inputs_are_rejected() {
        for bad in [
            &b""[..],
            b"garbage",
            b"   ",
            b"7f00 r-xp 00000000 00:00 0",
            b"7f00- r-xp 00000000 00:00 0",
            b"-7f10 r-xp 00000000 00:00 0",
            b"7f00-7f10 r-x 00000000 00:00 0",
            b"7f00-7f10 r-xpp 00000000 00:00 0",
            b"7f00-7f10 r-xp 0000000g 00:00 0",
            b"7f00-7f10 r-xp 00000000 0000 0",
            b"7f00-7f10 r-xp 00000000 00:00",
            b"7f00-7f10 r-xp 00000000 00:00 -1",
            b"7f00-7f10 r-xp 00000000 00:00 99999999999999999999",
            b"17f0000000000000000-7f10 r-xp 00000000 00:00 0",
            b"7f00-7f10 r-xp 00000000 100000000:00 0",
            b"Rss:                 123 kB",
            b"VmFlags: rd ex mr mw me sd",
        ] {
            assert_eq!(parse_line(bad), None, "{:?}", core::str::from_utf8(bad));
        }
    }
}
