//! The name the preload gives the anonymous memory it copies text into,
//! so that `/proc/PID/maps` (and `hugetext inspect`/`explain`) can tell
//! whose text it is: `hugetext:PATH`, shown by the kernel as
//! `[anon:hugetext:PATH]` (`PR_SET_VMA_ANON_NAME`, `CONFIG_ANON_VMA_NAME`).

/// What every name starts with.
pub const PREFIX: &str = "hugetext:";

/// How `/proc/PID/maps` shows a named anonymous mapping: this, the name,
/// and `]`.
pub const MAPS_PREFIX: &str = "[anon:hugetext:";

/// The longest name the kernel accepts (`ANON_VMA_NAME_MAX_LEN` is 80,
/// counting the terminating NUL).
pub const MAX_LEN: usize = 79;

/// Room for a name and its NUL.
pub const BUF_LEN: usize = MAX_LEN + 1;

/// Can `c` stand in an anonymous VMA name? (The kernel refuses
/// non-printable characters and `[ ] \ $ \``.)
pub const fn allowed(c: u8) -> bool {
    c >= 0x20 && c < 0x7f && !matches!(c, b'[' | b']' | b'\\' | b'$' | b'`')
}

/// Write the name for text copied from `path` into `buf`, NUL-terminated:
/// the prefix and the last bytes of the path that fit, with characters the
/// kernel refuses replaced by `?`. Returns the name's length (without the
/// NUL).
pub fn write(path: &[u8], buf: &mut [u8; BUF_LEN]) -> usize {
    let p = PREFIX.as_bytes();
    buf[..p.len()].copy_from_slice(p);
    let tail = &path[path.len().saturating_sub(MAX_LEN - p.len())..];
    for (d, &c) in buf[p.len()..].iter_mut().zip(tail) {
        *d = if allowed(c) { c } else { b'?' };
    }
    let n = p.len() + tail.len();
    buf[n] = 0;
    n
}

/// The path in a `/proc/PID/maps` name of copied text (`[anon:hugetext:
/// PATH]`), or `None` when the name is not one.
pub fn parse(maps_name: &[u8]) -> Option<&[u8]> {
    maps_name.strip_prefix(MAPS_PREFIX.as_bytes())?.strip_suffix(b"]")
}

/// [`parse`] for a name already known to be text.
pub fn parse_str(maps_name: &str) -> Option<&str> {
    parse(maps_name.as_bytes()).and_then(|p| core::str::from_utf8(p).ok())
}

/// Is this `/proc/PID/maps` name one of copied text?
pub fn is_copy(maps_name: &[u8]) -> bool {
    parse(maps_name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_parse() {
        let mut buf = [0u8; BUF_LEN];
        let n = write(b"/usr/bin/x[1]", &mut buf);
        assert_eq!(&buf[..=n], b"hugetext:/usr/bin/x?1?\0");
        let long = [b'a'; 200];
        let n = write(&long, &mut buf);
        assert_eq!((n, buf[n]), (MAX_LEN, 0));
        assert_eq!(parse(b"[anon:hugetext:/x/y]"), Some(&b"/x/y"[..]));
        assert_eq!(parse(b"[anon:other]"), None);
        assert_eq!(parse(b"[anon:hugetext:/x"), None);
        assert!(!is_copy(b"/usr/lib/libc.so.6"));
        assert_eq!(parse_str("[anon:hugetext:/é]"), Some("/é"));
    }
}
