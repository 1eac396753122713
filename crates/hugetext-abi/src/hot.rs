//! The hot-window list: which 2 MiB windows of which files to remap, compiled
//! from a profile (`hugetext run --hot`, `hugetext profile --hot-out`) into a
//! form the preload reads without allocating.
//!
//! ```text
//! hugetext-hot 1 2097152
//! 8f3c…e1 0-4194304,10485760-12582912 /usr/bin/app
//! - 2097152-4194304 /opt/lib/libplain.so
//! ```
//!
//! The first line: magic, version, the PMD size the windows are counted in.
//! Then one line per file: its GNU build-id in hex (`-` when it has none),
//! its hot file-offset ranges `[start, end)` in decimal, comma-separated,
//! and its path (the rest of the line). A file is matched by build-id
//! first, then by path ([`find`]).

/// First word of the list.
pub const MAGIC: &[u8] = b"hugetext-hot";
/// The version this library writes and reads.
pub const VERSION: u32 = 1;
/// The largest list the preload reads.
pub const MAX_LEN: usize = 64 * 1024;

/// One file's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Build-id in lowercase hex, if the file has one.
    pub build_id: Option<&'a [u8]>,
    /// `start-end,start-end…`: read with [`ranges`].
    pub ranges: &'a [u8],
    pub path: &'a [u8],
}

/// A parsed list: its PMD size and its file lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct List<'a> {
    pub pmd: u64,
    body: &'a [u8],
}

impl<'a> List<'a> {
    /// The file lines (malformed ones skipped).
    pub fn entries(&self) -> impl Iterator<Item = Entry<'a>> + Clone {
        self.body.split(|&b| b == b'\n').filter_map(entry)
    }
}

/// Check the first line; Err says why the list cannot be used.
pub fn parse(text: &[u8]) -> Result<List<'_>, &'static str> {
    let nl = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
    let (head, body) = (&text[..nl], &text[(nl + 1).min(text.len())..]);
    let mut words = head.split(|&b| b == b' ');
    if words.next() != Some(MAGIC) {
        return Err("not a hugetext hot-window list (first line is not `hugetext-hot 1 PMD`)");
    }
    if words.next().and_then(number) != Some(VERSION as u64) {
        return Err("hot-window list of another version (this preload reads version 1)");
    }
    match words.next().and_then(number) {
        Some(pmd) if pmd.is_power_of_two() && pmd >= 4096 => Ok(List { pmd, body }),
        _ => Err("hot-window list without a valid PMD size"),
    }
}

fn entry(line: &[u8]) -> Option<Entry<'_>> {
    let mut it = line.splitn(3, |&b| b == b' ');
    let id = it.next()?;
    let ranges = it.next()?;
    let path = it.next()?;
    if id.is_empty() || path.is_empty() {
        return None;
    }
    Some(Entry {
        build_id: (id != b"-").then_some(id),
        ranges,
        path,
    })
}

fn number(w: &[u8]) -> Option<u64> {
    if w.is_empty() || w.len() > 20 {
        return None;
    }
    w.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit()
            .then(|| acc.checked_mul(10)?.checked_add((b - b'0') as u64))
            .flatten()
    })
}

/// The `[start, end)` ranges of an entry (malformed ones skipped).
pub fn ranges(r: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    r.split(|&b| b == b',').filter_map(|p| {
        let dash = p.iter().position(|&b| b == b'-')?;
        let (s, e) = (number(&p[..dash])?, number(&p[dash + 1..])?);
        (s < e).then_some((s, e))
    })
}

/// How a mapped file matched the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match<'a> {
    /// Same build-id (or, for a file without one, same path).
    Hot(Entry<'a>),
    /// Same path, another build-id: the profile is of another build.
    OtherBuild,
    /// Not in the list: no hot windows.
    Cold,
}

/// Find the file with `build_id` (hex, if it has one) at `path`: by
/// build-id first, then by path. Pure.
pub fn find<'a>(entries: impl Iterator<Item = Entry<'a>> + Clone, build_id: Option<&[u8]>, path: &[u8]) -> Match<'a> {
    if let Some(id) = build_id {
        if let Some(e) = entries.clone().find(|e| e.build_id == Some(id)) {
            return Match::Hot(e);
        }
    }
    match entries.into_iter().find(|e| e.path == path) {
        Some(e) if e.build_id.is_none() || build_id.is_none() => Match::Hot(e),
        Some(_) => Match::OtherBuild,
        None => Match::Cold,
    }
}

/// Bit `i` set: the `i`-th of `n` (`<= 64`) run-time windows, the first at
/// file offset `first_off`, overlaps a hot range. (Where text is congruent
/// a run-time window is exactly one file window; otherwise it overlaps two.)
pub fn window_mask(r: &[u8], first_off: u64, n: usize, pmd: u64) -> u64 {
    let mut m = 0u64;
    for i in 0..n.min(64) {
        let s = first_off + i as u64 * pmd;
        if ranges(r).any(|(a, b)| a < s + pmd && s < b) {
            m |= 1 << i;
        }
    }
    m
}

/// ELF constants for [`build_id`].
pub mod elf {
    pub const PT_NOTE: u32 = 4;
    pub const NT_GNU_BUILD_ID: u32 = 3;
}

/// The program headers of a 64-bit little-endian ELF file from its first
/// 64 bytes: (offset, entry size, count).
pub fn phdrs(ehdr: &[u8]) -> Option<(u64, usize, usize)> {
    if ehdr.len() < 64 || &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 || ehdr[5] != 1 {
        return None;
    }
    let off = u64::from_le_bytes(ehdr[32..40].try_into().ok()?);
    let size = u16::from_le_bytes([ehdr[54], ehdr[55]]) as usize;
    let num = u16::from_le_bytes([ehdr[56], ehdr[57]]) as usize;
    (size >= 56).then_some((off, size, num))
}

/// A `PT_NOTE` program header's (file offset, size), else None.
pub fn note_segment(ph: &[u8]) -> Option<(u64, u64)> {
    if ph.len() < 56 || u32::from_le_bytes(ph[0..4].try_into().ok()?) != elf::PT_NOTE {
        return None;
    }
    let off = u64::from_le_bytes(ph[8..16].try_into().ok()?);
    let size = u64::from_le_bytes(ph[32..40].try_into().ok()?);
    Some((off, size))
}

/// The GNU build-id's bytes in a note segment's contents.
pub fn build_id(notes: &[u8]) -> Option<&[u8]> {
    let mut p = 0usize;
    let align4 = |n: usize| (n + 3) & !3;
    while p + 12 <= notes.len() {
        let word = |i: usize| u32::from_le_bytes([notes[i], notes[i + 1], notes[i + 2], notes[i + 3]]) as usize;
        let (namesz, descsz, ty) = (word(p), word(p + 4), word(p + 8));
        let name = p + 12;
        let desc = name.checked_add(align4(namesz))?;
        let end = desc.checked_add(align4(descsz))?;
        if desc + descsz > notes.len() {
            return None;
        }
        if ty as u32 == elf::NT_GNU_BUILD_ID && namesz == 4 && &notes[name..name + 4] == b"GNU\0" {
            return Some(&notes[desc..desc + descsz]);
        }
        p = end;
    }
    None
}

/// The GNU build-id of an ELF file read through `read` (fill the buffer
/// from the file offset; `false`: could not), copied into `out`; its
/// length. Looks at the first 64 program headers and the first 1024
/// bytes of each `PT_NOTE` segment: the preload and the library read it
/// the same way.
pub fn build_id_with(mut read: impl FnMut(&mut [u8], u64) -> bool, out: &mut [u8; 64]) -> Option<usize> {
    let mut eh = [0u8; 64];
    if !read(&mut eh, 0) {
        return None;
    }
    let (phoff, size, num) = phdrs(&eh)?;
    let mut ph = [0u8; 56];
    let mut notes = [0u8; 1024];
    for i in 0..num.min(64) {
        if !read(&mut ph, phoff + (i * size) as u64) {
            return None;
        }
        let Some((off, len)) = note_segment(&ph) else {
            continue;
        };
        let len = (len as usize).min(notes.len());
        if !read(&mut notes[..len], off) {
            continue;
        }
        if let Some(id) = build_id(&notes[..len]) {
            let n = id.len().min(out.len());
            out[..n].copy_from_slice(&id[..n]);
            return Some(n);
        }
    }
    None
}

/// `bytes` as lowercase hex into `out`; the written part.
pub fn hex<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a [u8] {
    const D: &[u8; 16] = b"0123456789abcdef";
    let n = bytes.len().min(out.len() / 2);
    for (i, b) in bytes[..n].iter().enumerate() {
        out[2 * i] = D[(b >> 4) as usize];
        out[2 * i + 1] = D[(b & 15) as usize];
    }
    &out[..2 * n]
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 2 << 20;
    const LIST: &[u8] =
        b"hugetext-hot 1 2097152\nabcd 0-4194304,10485760-12582912 /usr/bin/app\n- 2097152-4194304 /lib/with space.so\n";

    #[test]
    fn a_list_parses_and_files_match_by_build_id_then_path() {
        let list = parse(LIST).unwrap();
        assert_eq!(list.pmd, M);
        let v: alloc_free::Vec3 = list.entries().collect();
        assert_eq!(v.1, 2);
        assert_eq!(v.0[1].path, b"/lib/with space.so");
        assert_eq!(v.0[0].build_id, Some(&b"abcd"[..]));
        let e = list.entries();
        // A copy elsewhere with the same build-id.
        assert!(matches!(find(e.clone(), Some(b"abcd"), b"/tmp/copy"), Match::Hot(x) if x.path == b"/usr/bin/app"));
        assert_eq!(find(e.clone(), Some(b"ffff"), b"/usr/bin/app"), Match::OtherBuild);
        assert!(matches!(
            find(e.clone(), Some(b"ffff"), b"/lib/with space.so"),
            Match::Hot(_)
        ));
        assert!(matches!(find(e.clone(), None, b"/usr/bin/app"), Match::Hot(_)));
        assert_eq!(find(e, Some(b"abcd0"), b"/other"), Match::Cold);
    }

    #[test]
    fn bad_lists_are_refused() {
        assert!(parse(b"{\"format\":\"hugetext-profile\"}").is_err());
        assert!(parse(b"hugetext-hot 2 2097152\n")
            .unwrap_err()
            .contains("another version"));
        assert!(parse(b"hugetext-hot 1 3000\n").is_err());
        assert!(parse(b"").is_err());
    }

    #[test]
    fn windows_overlapping_hot_ranges_are_hot() {
        let r = b"0-4194304,10485760-12582912";
        assert_eq!(ranges(r).count(), 2);
        // Congruent: windows at file offsets 0, 2M, 4M, 6M, 8M, 10M.
        assert_eq!(window_mask(r, 0, 6, M), 0b100011);
        // Not congruent: window i spans [1M + i·2M, 3M + i·2M).
        assert_eq!(window_mask(r, M / 2, 6, M), 0b110011);
        assert_eq!(window_mask(b"junk,5-1", 0, 4, M), 0);
    }

    #[test]
    fn the_build_id_is_found_in_the_notes() {
        let mut notes = [0u8; 64];
        // An ABI tag note first, then the build-id.
        notes[0..12].copy_from_slice(&[4, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0]);
        notes[12..16].copy_from_slice(b"GNU\0");
        notes[32..44].copy_from_slice(&[4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0]);
        notes[44..48].copy_from_slice(b"GNU\0");
        notes[48..52].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(build_id(&notes[..52]), Some(&[0xde, 0xad, 0xbe, 0xef][..]));
        assert_eq!(build_id(&notes[..50]), None);
        let mut out = [0u8; 8];
        assert_eq!(hex(&[0xde, 0xad, 0x0b, 0xef], &mut out), b"dead0bef");
    }

    mod alloc_free {
        use super::super::Entry;
        /// Collect up to three entries without an allocator.
        pub struct Vec3<'a>(pub [Entry<'a>; 3], pub usize);
        impl<'a> FromIterator<Entry<'a>> for Vec3<'a> {
            fn from_iter<I: IntoIterator<Item = Entry<'a>>>(it: I) -> Self {
                let empty = Entry {
                    build_id: None,
                    ranges: b"",
                    path: b"",
                };
                let mut v = Vec3([empty; 3], 0);
                for e in it.into_iter().take(3) {
                    v.0[v.1] = e;
                    v.1 += 1;
                }
                v
            }
        }
    }
}
