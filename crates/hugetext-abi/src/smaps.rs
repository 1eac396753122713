//! Counter lines of `/proc/PID/smaps`: `Key:   123 kB`.

/// The value of `line` in kB if it is the counter `key` (given with its
/// colon, `b"FilePmdMapped:"`); `None` for another key or no number.
pub fn kb_field(line: &[u8], key: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(key)?;
    let mut v: u64 = 0;
    let mut digits = 0;
    for &c in rest.iter().skip_while(|&&c| c == b' ' || c == b'\t') {
        if !c.is_ascii_digit() {
            break;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
        digits += 1;
    }
    (digits > 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kb_fields() {
        assert_eq!(kb_field(b"FilePmdMapped:     4096 kB", b"FilePmdMapped:"), Some(4096));
        assert_eq!(kb_field(b"AnonHugePages:         0 kB", b"AnonHugePages:"), Some(0));
        assert_eq!(kb_field(b"Anonymous:  12 kB", b"AnonHugePages:"), None);
        assert_eq!(kb_field(b"Swap: kB", b"Swap:"), None);
        assert_eq!(kb_field(b"Swap:\t7 kB", b"Swap:"), Some(7));
        assert_eq!(kb_field(b"Swap: 99999999999999999999 kB", b"Swap:"), None);
    }
}
