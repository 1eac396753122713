//! Filesystem names by `statfs.f_type` magic (include/uapi/linux/magic.h
//! and the filesystems' own headers).

/// `f_type` is a `long` of which only the low 32 bits carry the magic (it
/// is sign-extended on some architectures).
pub const MAGIC_MASK: u64 = 0xffff_ffff;

/// `(magic, name)` of the filesystems hugetext names in messages.
pub const MAGICS: &[(u64, &str)] = &[
    (0xef53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683e, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0x8584_58f6, "ramfs"),
    (0x9584_58f6, "hugetlbfs"),
    (0x794c_7630, "overlayfs"),
    (0x6969, "nfs"),
    (0xff53_4d42, "cifs"),
    (0xfe53_4d42, "cifs"),
    (0xf2f5_2010, "f2fs"),
    (0x7371_7368, "squashfs"),
    (0xe0f5_e1e2, "erofs"),
    (0x2fc1_2fc1, "zfs"),
    (0x6573_5546, "fuse"),
    (0xca45_1a4e, "bcachefs"),
    (0x7363_6673, "ecryptfs"),
    (0x0100_2010, "exfat"),
    (0x2011_bab0, "exfat"),
    (0x4d44, "vfat"),
    (0x9660, "iso9660"),
];

/// The name of the filesystem whose `statfs.f_type` is `f_type`, e.g.
/// `ext4`; `None` for a magic not in [`MAGICS`].
pub fn name(f_type: u64) -> Option<&'static str> {
    let magic = f_type & MAGIC_MASK;
    MAGICS.iter().find(|&&(m, _)| m == magic).map(|&(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_magic() {
        assert_eq!(name(0xef53), Some("ext4"));
        assert_eq!(name(0x0102_1994), Some("tmpfs"));
        // Sign-extended 32-bit magic, as a 64-bit f_type can hold it.
        assert_eq!(name(0xffff_ffff_9123_683e), Some("btrfs"));
        assert_eq!(name(0x2011_bab0), Some("exfat"));
        assert_eq!(name(0x1234), None);
    }

    #[test]
    fn magics_are_unique() {
        for (i, (m, _)) in MAGICS.iter().enumerate() {
            assert!(MAGICS[i + 1..].iter().all(|(o, _)| o != m), "{m:#x} twice");
        }
    }
}
