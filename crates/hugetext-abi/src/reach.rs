//! Can a program reach anything hugetext does? A followed launcher (see
//! the preload's `via`) passes the preload on to every program it starts,
//! because any of them could be the next hop to the program with text.
//! Most of what a launcher script starts is a helper (`sed`, `date`,
//! `expr`): loading the preload and its audit module there costs each of
//! them about a fifth of a millisecond and buys nothing. A program is
//! judged here, from its file and its libraries' files, before it runs:
//! it can reach hugetext's work only if one of its objects has text of a
//! window's size ([`crate::geometry::MIN_UNIT`]), or imports a function
//! that starts a program or loads code ([`STARTS`]): the preload follows a
//! chain only through those functions anyway (it interposes them), and a
//! process can only load more text through `dlopen`.
//!
//! Pure functions over bytes read from the files: the ELF header and
//! program headers ([`head`]), the dynamic section ([`dynamic`]), its
//! string table ([`names_any`]), and glibc's `/etc/ld.so.cache`
//! ([`cache_paths`]). Anything not understood answers "it may reach":
//! being wrong that way costs only what following costs.

use crate::geometry::MIN_UNIT;

/// Functions through which a program starts another program or loads
/// code: the exec family, `posix_spawn`, `system`, `popen` and `wordexp`
/// (which run a shell), `dlopen`, `dlmopen`. An object whose dynamic
/// string table names one of them may reach what the preload does.
pub const STARTS: &[&[u8]] = &[
    b"execve",
    b"execv",
    b"execvp",
    b"execvpe",
    b"execl",
    b"execlp",
    b"execle",
    b"execveat",
    b"fexecve",
    b"posix_spawn",
    b"posix_spawnp",
    b"system",
    b"popen",
    b"wordexp",
    b"dlopen",
    b"dlmopen",
];

/// The C library's own objects define [`STARTS`] (the callers import
/// them) and are not judged: `libc.so.6`, `libdl.so.2` and the dynamic
/// loader.
pub fn is_c_library(name: &[u8]) -> bool {
    let base = name.rsplit(|&c| c == b'/').next().unwrap_or(name);
    base == b"libc.so.6" || base == b"libdl.so.2" || base.starts_with(b"ld-linux")
}

/// `e_machine` of the objects the preload is built for.
pub const MACHINE: u16 = if cfg!(target_arch = "aarch64") { 183 } else { 62 };

/// At most this many loadable segments are kept per object.
pub const MAX_LOADS: usize = 8;
/// At most this many `DT_NEEDED` entries per object are judged; more and
/// the object may reach.
pub const MAX_NEEDED: usize = 32;

/// What the first bytes of a file say (a value on the stack, used once:
/// the size of the larger variant does not matter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Head {
    /// Not judged: a script, not ELF, another machine, a static program
    /// (which passes the environment on as it is), headers outside the
    /// bytes read, a Go program (which starts programs by system call), or
    /// text of a window's size. It may reach.
    Reaches(Why),
    /// A dynamically linked ELF object of this machine, without text of a
    /// window's size.
    Elf(Elf),
}

/// Why [`head`] could not rule a file out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// `#!`: the interpreter runs, and it is judged when it is exec'd.
    Script,
    /// Not an ELF object of this machine, or headers not in the bytes read.
    Unknown,
    /// No `PT_INTERP`: a static program (or the loader itself).
    Static,
    /// A Go program (its build ID note): it execs by system call.
    Go,
    /// An executable segment of a window's size.
    Text,
}

/// Facts of a dynamically linked ELF object ([`head`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Elf {
    /// `PT_DYNAMIC`: file offset and size.
    pub dynamic: Option<(u64, u64)>,
    /// `PT_LOAD` segments: virtual address, file offset, file size.
    pub loads: [(u64, u64, u64); MAX_LOADS],
    /// How many of `loads` are used.
    pub n_loads: usize,
}

impl Elf {
    /// The file offset of `len` bytes at virtual address `vaddr`, when
    /// they lie in one segment's file bytes.
    pub fn offset_of(&self, vaddr: u64, len: u64) -> Option<u64> {
        self.loads[..self.n_loads].iter().find_map(|&(va, off, filesz)| {
            let end = vaddr.checked_add(len)?;
            (va <= vaddr && end <= va.checked_add(filesz)?).then(|| off + (vaddr - va))
        })
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Pure: judge a file from its first bytes `b` (a few KiB: the ELF
/// header, the program headers and the notes usually sit there): a
/// program (`exe`: one without `PT_INTERP` is static, static-pie
/// included) or a library. Only 64-bit little-endian objects of `machine`
/// are judged.
pub fn head(b: &[u8], machine: u16, exe: bool) -> Head {
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    const PT_NOTE: u32 = 4;
    const PF_X: u32 = 1;
    if b.starts_with(b"#!") {
        return Head::Reaches(Why::Script);
    }
    let unknown = Head::Reaches(Why::Unknown);
    if !b.starts_with(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) || u16_at(b, 18) != Some(machine) {
        return unknown;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(b, 32), u16_at(b, 54), u16_at(b, 56)) else {
        return unknown;
    };
    if phentsize != 56 {
        return unknown;
    }
    let mut elf = Elf::default();
    let (mut interp, mut go) = (false, false);
    for i in 0..phnum as u64 {
        let Some(at) = phoff.checked_add(i * 56).and_then(|a| usize::try_from(a).ok()) else {
            return unknown;
        };
        let (Some(kind), Some(flags), Some(off), Some(vaddr), Some(filesz)) = (
            u32_at(b, at),
            u32_at(b, at + 4),
            u64_at(b, at + 8),
            u64_at(b, at + 16),
            u64_at(b, at + 32),
        ) else {
            return unknown;
        };
        match kind {
            PT_INTERP => interp = true,
            PT_DYNAMIC => elf.dynamic = Some((off, filesz)),
            PT_LOAD => {
                if flags & PF_X != 0 && filesz >= MIN_UNIT as u64 {
                    return Head::Reaches(Why::Text);
                }
                if elf.n_loads == MAX_LOADS {
                    return unknown;
                }
                elf.loads[elf.n_loads] = (vaddr, off, filesz);
                elf.n_loads += 1;
            }
            PT_NOTE => {
                let notes = usize::try_from(off)
                    .ok()
                    .zip(usize::try_from(filesz).ok())
                    .and_then(|(o, n)| b.get(o..o.checked_add(n)?));
                match notes {
                    Some(n) => go |= has_go_note(n),
                    None => return unknown,
                }
            }
            _ => {}
        }
    }
    if go {
        Head::Reaches(Why::Go)
    } else if (exe && !interp) || elf.dynamic.is_none() {
        Head::Reaches(Why::Static)
    } else {
        Head::Elf(elf)
    }
}

/// Pure: does a notes segment hold Go's build ID note (owner "Go", type
/// 4)?
pub fn has_go_note(mut b: &[u8]) -> bool {
    let up = |n: usize| n.div_ceil(4) * 4;
    while let (Some(namesz), Some(descsz), Some(kind)) = (u32_at(b, 0), u32_at(b, 4), u32_at(b, 8)) {
        let (namesz, descsz) = (namesz as usize, descsz as usize);
        // "Go" and its NUL, padded (Go's linker writes a name size of 4).
        let name = b
            .get(12..12 + namesz.min(b.len()))
            .map(|n| n.split(|&c| c == 0).next().unwrap_or(n));
        if kind == 4 && name == Some(b"Go".as_slice()) {
            return true;
        }
        let Some(rest) = b.get(12 + up(namesz) + up(descsz)..) else {
            return false;
        };
        b = rest;
    }
    false
}

/// The dynamic section's facts ([`dynamic`]): string offsets are into the
/// object's dynamic string table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    /// `DT_STRTAB` (a virtual address) and `DT_STRSZ`.
    pub strtab: u64,
    /// Size of the string table.
    pub strsz: u64,
    /// `DT_NEEDED` names.
    pub needed: [u32; MAX_NEEDED],
    /// How many of `needed` are used.
    pub n_needed: usize,
    /// `DT_RUNPATH`.
    pub runpath: Option<u32>,
    /// `DT_RPATH`.
    pub rpath: Option<u32>,
    /// `DF_1_NODEFLIB`: the default directories are not searched.
    pub nodeflib: bool,
}

/// Pure: parse a dynamic section `b`; `None` when it does not end (no
/// `DT_NULL` in `b`), has more than [`MAX_NEEDED`] needed libraries or no
/// string table.
pub fn dynamic(b: &[u8]) -> Option<Dynamic> {
    const DT_NULL: u64 = 0;
    const DT_NEEDED: u64 = 1;
    const DT_STRTAB: u64 = 5;
    const DT_STRSZ: u64 = 10;
    const DT_RPATH: u64 = 15;
    const DT_RUNPATH: u64 = 29;
    const DT_FLAGS_1: u64 = 0x6fff_fffb;
    const DF_1_NODEFLIB: u64 = 0x800;
    let mut d = Dynamic::default();
    let (mut strtab, mut strsz) = (None, None);
    let mut at = 0;
    loop {
        let (tag, val) = (u64_at(b, at)?, u64_at(b, at + 8)?);
        at += 16;
        let small = u32::try_from(val).ok();
        match tag {
            DT_NULL => break,
            DT_NEEDED => {
                if d.n_needed == MAX_NEEDED {
                    return None;
                }
                d.needed[d.n_needed] = small?;
                d.n_needed += 1;
            }
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            DT_RPATH => d.rpath = Some(small?),
            DT_RUNPATH => d.runpath = Some(small?),
            DT_FLAGS_1 => d.nodeflib = val & DF_1_NODEFLIB != 0,
            _ => {}
        }
    }
    d.strtab = strtab?;
    d.strsz = strsz?;
    Some(d)
}

/// Pure: the NUL-terminated string at `off` of a string table.
pub fn str_at(table: &[u8], off: u32) -> Option<&[u8]> {
    let rest = table.get(off as usize..)?;
    Some(&rest[..rest.iter().position(|&c| c == 0)?])
}

/// Pure: does the string table name any of `names` exactly (a whole
/// NUL-delimited string)? Imported and defined names alike: an object
/// defining one of [`STARTS`] is the C library, which is not judged.
pub fn names_any(table: &[u8], names: &[&[u8]]) -> bool {
    table.split(|&c| c == 0).any(|s| names.contains(&s))
}

/// `ld.so.cache` flags of this machine's libraries: `FLAG_ELF_LIBC6` with
/// `FLAG_X8664_LIB64` or `FLAG_AARCH64_LIB64`.
pub const CACHE_FLAGS: u32 = if cfg!(target_arch = "aarch64") { 0x0a03 } else { 0x0303 };

/// Pure: call `f` with each path `/etc/ld.so.cache` (its bytes `data`)
/// gives for the library file name `name` with `flags`, in the file's
/// order, until `f` returns true; true then. glibc's "new" format
/// (`glibc-ld.so.cache1.1`), alone or after the old one (glibc 2.31 and
/// older write both), its strings addressed from its own header as the
/// loader reads them; entries for hardware capability subdirectories
/// (`glibc-hwcaps`) are skipped.
pub fn cache_paths(data: &[u8], name: &[u8], flags: u32, mut f: impl FnMut(&[u8]) -> bool) -> bool {
    const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    const OLD: &[u8] = b"ld.so-1.7.0";
    const HWCAP_EXTENSION: u64 = 1 << 62;
    let start = if data.starts_with(MAGIC) {
        0
    } else if data.starts_with(OLD) {
        let Some(n) = u32_at(data, 12) else { return false };
        let after = (16 + n as usize * 12).next_multiple_of(8);
        match data.get(after..after + MAGIC.len()) {
            Some(m) if m == MAGIC => after,
            _ => return false,
        }
    } else {
        return false;
    };
    let Some(n) = u32_at(data, start + 20) else {
        return false;
    };
    let entries = start + 48;
    // The new format's string offsets count from its header, which
    // follows the old format's entries in a file with both.
    let strings = &data[start..];
    // Most entries are another library: compare the name and its NUL
    // first, and find the end of the path only for a match (a whole scan
    // of both strings of every entry took a millisecond for postgres's 45
    // libraries against a cache of 848 entries).
    for i in 0..n as usize {
        let e = entries + i * 24;
        let Some(fl) = u32_at(data, e) else {
            return false;
        };
        if fl != flags {
            continue;
        }
        let (Some(key), Some(value), Some(hwcap)) = (u32_at(data, e + 4), u32_at(data, e + 8), u64_at(data, e + 16))
        else {
            return false;
        };
        let k = key as usize;
        let same = strings.get(k..k + name.len()) == Some(name) && strings.get(k + name.len()) == Some(&0);
        if !same || hwcap & HWCAP_EXTENSION != 0 {
            continue;
        }
        if let Some(v) = str_at(strings, value) {
            if f(v) {
                return true;
            }
        }
    }
    false
}

/// glibc's default library directories (Debian multiarch first), after
/// the cache.
pub const DEFAULT_DIRS: &[&str] = if cfg!(target_arch = "aarch64") {
    &[
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ]
} else {
    &[
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ]
};

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn elf(kind: u16, phdrs: &[(u32, u32, u64, u64, u64)]) -> [u8; 1024] {
        let mut b = [0u8; 1024];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&kind.to_le_bytes());
        b[18..20].copy_from_slice(&MACHINE.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        for (i, &(t, fl, off, va, sz)) in phdrs.iter().enumerate() {
            let a = 64 + i * 56;
            b[a..a + 4].copy_from_slice(&t.to_le_bytes());
            b[a + 4..a + 8].copy_from_slice(&fl.to_le_bytes());
            b[a + 8..a + 16].copy_from_slice(&off.to_le_bytes());
            b[a + 16..a + 24].copy_from_slice(&va.to_le_bytes());
            b[a + 32..a + 40].copy_from_slice(&sz.to_le_bytes());
        }
        b
    }

    #[test]
    fn heads_tell_what_may_reach() {
        assert_eq!(head(b"#!/bin/sh\n", MACHINE, true), Head::Reaches(Why::Script));
        assert_eq!(head(b"hello", MACHINE, true), Head::Reaches(Why::Unknown));
        // A PIE with an interpreter, small text: judged further.
        let pie = elf(
            3,
            &[(3, 4, 0, 0, 28), (1, 5, 0, 0, 0x1000), (2, 6, 0x2000, 0x3000, 0x100)],
        );
        let Head::Elf(e) = head(&pie, MACHINE, true) else {
            panic!()
        };
        assert_eq!(e.dynamic, Some((0x2000, 0x100)));
        assert_eq!(e.offset_of(0x800, 8), Some(0x800));
        assert_eq!(e.offset_of(0x1000, 8), None);
        assert_eq!(head(&pie, MACHINE + 1, true), Head::Reaches(Why::Unknown));
        // Text of a window's size.
        let big = elf(3, &[(3, 4, 0, 0, 28), (1, 5, 0, 0, MIN_UNIT as u64)]);
        assert_eq!(head(&big, MACHINE, false), Head::Reaches(Why::Text));
        // A static executable; static-pie (a dynamic section, no
        // interpreter) is static as a program, judged as a library.
        assert_eq!(
            head(&elf(2, &[(1, 5, 0, 0, 0x1000)]), MACHINE, true),
            Head::Reaches(Why::Static)
        );
        let lib = elf(3, &[(1, 5, 0, 0, 0x1000), (2, 6, 0x2000, 0x3000, 0x100)]);
        assert_eq!(head(&lib, MACHINE, true), Head::Reaches(Why::Static));
        assert!(matches!(head(&lib, MACHINE, false), Head::Elf(_)));
        // Program headers past the bytes read.
        assert_eq!(head(&pie[..100], MACHINE, true), Head::Reaches(Why::Unknown));
    }

    #[test]
    fn go_notes_are_found_in_the_head() {
        let mut b = elf(
            3,
            &[(3, 4, 0, 0, 28), (4, 4, 512, 512, 24), (2, 6, 0x2000, 0x3000, 0x100)],
        );
        b[512..524].copy_from_slice(&[4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0]);
        b[524..528].copy_from_slice(b"Go\0\0");
        assert_eq!(head(&b, MACHINE, true), Head::Reaches(Why::Go));
        b[524..528].copy_from_slice(b"GNU\0");
        assert!(matches!(head(&b, MACHINE, true), Head::Elf(_)));
    }

    #[test]
    fn go_programs_are_known_by_their_build_id_note() {
        fn note(owner: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
            let mut v = Vec::new();
            v.extend((owner.len() as u32).to_le_bytes());
            v.extend((desc.len() as u32).to_le_bytes());
            v.extend(kind.to_le_bytes());
            v.extend(owner);
            v.resize(v.len().div_ceil(4) * 4, 0);
            v.extend(desc);
            v.resize(v.len().div_ceil(4) * 4, 0);
            v
        }
        let gnu = note(b"GNU\0", 3, &[7; 20]);
        let go = note(b"Go\0", 4, b"abc/def");
        assert!(has_go_note(&[gnu.clone(), go.clone()].concat()));
        assert!(has_go_note(&go));
        // As Go's linker writes it: the name padded into its size.
        assert!(has_go_note(&note(b"Go\0\0", 4, b"abc/def")));
        assert!(!has_go_note(&gnu));
        assert!(!has_go_note(&note(b"Go\0", 3, b"x")));
        assert!(!has_go_note(&go[..10]));
        assert!(!has_go_note(&[]));
    }

    #[test]
    fn dynamic_sections_and_names() {
        let mut d = Vec::new();
        for (t, v) in [
            (1u64, 1u64),
            (1, 11),
            (5, 0x400),
            (10, 40),
            (29, 22),
            (0x6fff_fffb, 0x800),
            (0, 0),
        ] {
            d.extend(t.to_le_bytes());
            d.extend(v.to_le_bytes());
        }
        let dy = dynamic(&d).unwrap();
        assert_eq!((dy.n_needed, dy.needed[1], dy.strtab, dy.strsz), (2, 11, 0x400, 40));
        assert_eq!(dy.runpath, Some(22));
        assert!(dy.nodeflib);
        assert_eq!(dynamic(&d[..d.len() - 16]), None, "no DT_NULL");
        let table = b"\0libx.so\0liby.so.1\0$ORIGIN\0execvpe\0";
        assert_eq!(str_at(table, 1), Some(&b"libx.so"[..]));
        assert!(names_any(table, STARTS));
        assert!(!names_any(b"\0execvpex\0xexecv\0", STARTS));
        assert!(is_c_library(b"/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!is_c_library(b"libcrypt.so.1"));
    }

    /// The bytes a launcher reads are the user's: every prefix of a real
    /// program, and bytes flipped in it, are judged without a panic, and
    /// a cut-off head is never taken for a judged object.
    #[test]
    fn truncated_and_garbled_heads_are_judged_without_panic() {
        let real = std::fs::read("/bin/true").unwrap();
        let real = &real[..real.len().min(4096)];
        for n in 0..real.len() {
            let h = head(&real[..n], MACHINE, true);
            if n < 64 {
                assert!(matches!(h, Head::Reaches(_)), "{n} bytes: {h:?}");
            }
        }
        let mut b = real.to_vec();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x as usize) % b.len();
            b[i] ^= (x >> 32) as u8;
            let _ = head(&b, MACHINE, x & 1 == 0);
            let _ = dynamic(&b[i..]);
            let _ = cache_paths(&b, b"libc.so.6", CACHE_FLAGS, |_| false);
        }
    }

    /// A new-format cache: `libx.so` → `/l/libx.so` for another machine's
    /// flags, then for this machine's; string offsets from its header.
    fn new_format() -> Vec<u8> {
        let mut c = Vec::from(&b"glibc-ld.so.cache1.1"[..]);
        c.resize(20, 0);
        c.extend(2u32.to_le_bytes());
        c.resize(48, 0);
        let strings = 48 + 2 * 24;
        let name = strings as u32;
        let path = name + 8;
        for flags in [CACHE_FLAGS ^ 0x0100, CACHE_FLAGS] {
            c.extend(flags.to_le_bytes());
            c.extend(name.to_le_bytes());
            c.extend(path.to_le_bytes());
            c.extend(0u32.to_le_bytes());
            c.extend(0u64.to_le_bytes());
        }
        c.extend(b"libx.so\0/l/libx.so\0");
        c
    }

    /// The format glibc 2.31 and older write: the old format (here one
    /// entry of 12 bytes, naming other strings), then the new one at the
    /// next multiple of 8, whose string offsets count from its own header.
    #[test]
    fn the_cache_after_the_old_format_is_read_from_its_own_header() {
        let mut c = Vec::from(&b"ld.so-1.7.0"[..]);
        c.resize(12, 0);
        c.extend(1u32.to_le_bytes());
        c.extend([3u32, 0, 0].iter().flat_map(|v| v.to_le_bytes()));
        c.resize(32, 0);
        c.extend(new_format());
        let mut seen = Vec::new();
        assert!(!cache_paths(&c, b"libx.so", CACHE_FLAGS, |p| {
            seen.push(p.to_vec());
            false
        }));
        assert_eq!(seen, [b"/l/libx.so".to_vec()]);
        assert!(!cache_paths(&c[..40], b"libx.so", CACHE_FLAGS, |_| true));
    }

    #[test]
    fn the_cache_gives_paths_for_this_machine_only() {
        let c = new_format();
        let mut seen = Vec::new();
        assert!(!cache_paths(&c, b"libx.so", CACHE_FLAGS, |p| {
            seen.push(p.to_vec());
            false
        }));
        assert_eq!(seen, [b"/l/libx.so".to_vec()]);
        assert!(cache_paths(&c, b"libx.so", CACHE_FLAGS, |_| true));
        assert!(!cache_paths(&c, b"liby.so", CACHE_FLAGS, |_| true));
        assert!(!cache_paths(&c[..60], b"libx.so", CACHE_FLAGS, |_| true));
    }
}
