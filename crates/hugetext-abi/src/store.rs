//! The text store (`hugetext warm --shmem`): copies of programs and
//! libraries on a huge tmpfs, each named from its original's identity, so
//! that the preload's `shmem` route finds the copy of a mapped file by
//! `fstat` of the file alone and never serves a copy whose original
//! changed. The name is written here once, for both sides.

/// Where the store is mounted unless `--store` (or `HUGETEXT_STORE`) says
/// otherwise.
pub const DEFAULT_ROOT: &str = "/run/hugetext/text";

/// Bytes of the longest entry name: dev (16 hex digits), inode and size
/// (20 digits each), mtime (a sign and 19 digits), a build-id of up to 64
/// bytes in hex, and four dashes.
pub const NAME_MAX: usize = 16 + 20 + 20 + 20 + 128 + 4;

/// A build-id longer than this is cut (the preload reads at most 64 bytes).
pub const BUILD_ID_MAX: usize = 64;

/// What names a store entry: the original's `st_dev`, `st_ino`, `st_size`,
/// modification time in ns and GNU build-id (`None`: the file has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity<'a> {
    /// `st_dev` as `fstat` gives it.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_mtime * 10^9 + st_mtime_nsec`.
    pub mtime_ns: i64,
    /// The GNU build-id's bytes.
    pub build_id: Option<&'a [u8]>,
}

/// `st_mtime` and `st_mtime_nsec` as one number of ns.
pub fn mtime_ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

struct W<'a> {
    out: &'a mut [u8; NAME_MAX],
    n: usize,
}

impl W<'_> {
    fn byte(&mut self, b: u8) {
        if self.n < NAME_MAX {
            self.out[self.n] = b;
            self.n += 1;
        }
    }

    fn dec(&mut self, mut v: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &b in &d[i..] {
            self.byte(b);
        }
    }

    fn hex(&mut self, b: u8) {
        self.byte(HEX[(b >> 4) as usize]);
        self.byte(HEX[(b & 15) as usize]);
    }
}

/// The entry name of a file with identity `id`:
/// `<st_dev hex>-<st_ino>-<size>-<mtime_ns>-<build-id hex or none>`,
/// written into `out`; the written part.
pub fn entry_name<'a>(id: &Identity, out: &'a mut [u8; NAME_MAX]) -> &'a [u8] {
    let mut w = W { out, n: 0 };
    let mut started = false;
    for i in (0..16).rev() {
        let d = ((id.dev >> (4 * i)) & 15) as usize;
        if d == 0 && !started && i > 0 {
            continue;
        }
        started = true;
        w.byte(HEX[d]);
    }
    w.byte(b'-');
    w.dec(id.ino);
    w.byte(b'-');
    w.dec(id.size);
    w.byte(b'-');
    if id.mtime_ns < 0 {
        w.byte(b'-');
    }
    w.dec(id.mtime_ns.unsigned_abs());
    w.byte(b'-');
    match id.build_id.filter(|b| !b.is_empty()) {
        Some(b) => {
            for &x in &b[..b.len().min(BUILD_ID_MAX)] {
                w.hex(x);
            }
        }
        None => {
            for &b in b"none" {
                w.byte(b);
            }
        }
    }
    let n = w.n;
    &out[..n]
}

/// Whether an entry's `fstat` allows serving it: a regular file, owned by
/// root, writable by nobody else, one link, and the original's size.
/// `mode` is `st_mode`. Pure.
pub fn entry_acceptable(mode: u32, uid: u32, nlink: u64, size: u64, original_size: u64) -> Result<(), &'static str> {
    const S_IFMT: u32 = 0o170000;
    const S_IFREG: u32 = 0o100000;
    if mode & S_IFMT != S_IFREG {
        return Err("not a regular file");
    }
    if uid != 0 {
        return Err("not owned by root");
    }
    if mode & 0o022 != 0 {
        return Err("writable by group or others");
    }
    if nlink != 1 {
        return Err("more than one link");
    }
    if size != original_size {
        return Err("its size differs from the original's");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(id: &Identity) -> [u8; NAME_MAX] {
        let mut out = [0u8; NAME_MAX];
        let _ = entry_name(id, &mut out);
        out
    }

    #[test]
    fn names_follow_the_identity() {
        let mut out = [0u8; NAME_MAX];
        let id = Identity {
            dev: 0x803,
            ino: 1234,
            size: 16 << 20,
            mtime_ns: 1_700_000_000_123_456_789,
            build_id: Some(&[0xab, 0x01, 0xff]),
        };
        assert_eq!(
            entry_name(&id, &mut out),
            b"803-1234-16777216-1700000000123456789-ab01ff"
        );
        let none = Identity {
            build_id: None,
            dev: 0,
            mtime_ns: -5,
            ..id
        };
        assert_eq!(entry_name(&none, &mut out), b"0-1234-16777216--5-none");
        let big = Identity {
            dev: u64::MAX,
            ino: u64::MAX,
            size: u64::MAX,
            mtime_ns: i64::MIN,
            build_id: Some(&[0xee; 200]),
        };
        let n = entry_name(&big, &mut out).len();
        assert_eq!(n, NAME_MAX);
        assert!(n <= 255, "a file name");
        // Every field changes the name.
        let base = name(&id);
        for other in [
            Identity { dev: 0x804, ..id },
            Identity { ino: 1235, ..id },
            Identity { size: 1, ..id },
            Identity { mtime_ns: 1, ..id },
            Identity { build_id: None, ..id },
        ] {
            assert_ne!(name(&other), base);
        }
    }

    #[test]
    fn only_root_owned_single_link_read_only_files_of_the_size_are_served() {
        assert_eq!(entry_acceptable(0o100444, 0, 1, 10, 10), Ok(()));
        assert_eq!(entry_acceptable(0o100644, 0, 1, 10, 10), Ok(()));
        assert!(entry_acceptable(0o100444, 1000, 1, 10, 10).is_err());
        assert!(entry_acceptable(0o100666, 0, 1, 10, 10).is_err());
        assert!(entry_acceptable(0o100464, 0, 1, 10, 10).is_err());
        assert!(entry_acceptable(0o120777, 0, 1, 10, 10).is_err());
        assert!(entry_acceptable(0o010444, 0, 1, 10, 10).is_err());
        assert!(entry_acceptable(0o100444, 0, 2, 10, 10).is_err());
        assert!(entry_acceptable(0o100444, 0, 1, 11, 10).is_err());
    }
}
