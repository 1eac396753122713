//! `perf script` output as a profile source: samples recorded earlier
//! (`perf record -e cpu-clock`, or any event), with the mappings perf
//! recorded, so that addresses become file offsets as for a live process.
//!
//! Expected: `perf script --show-mmap-events -F pid,ip,dso` — sample lines
//! `PID IP (DSO)` and `PERF_RECORD_MMAP`/`MMAP2` lines, in time order.

use std::collections::HashMap;
use std::io::BufRead;

use super::attrib::Space;
use super::{Profile, Source, Tally};
use crate::procfs::Vma;
use crate::{Error, Result};

/// What one line of `perf script` output says.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A sample: pid and instruction pointer.
    Sample { pid: i32, ip: u64 },
    /// A mapping of pid (its path as [`crate::procfs::escape_name`] writes it).
    Mmap { pid: i32, vma: Vma },
    /// Anything else (headers, other records).
    Other,
}

/// The longest line read, bytes: far more than any line of
/// `perf script --show-mmap-events -F pid,ip,dso` (a path is at most 4 KiB).
/// A longer line is skipped without being held in memory, and counted.
pub const MAX_LINE: usize = 64 << 10;

/// Parse one line (bytes: paths are the kernel's bytes, not always UTF-8).
/// Pure.
pub fn parse_line(line: &[u8]) -> Line {
    let t = line.trim_ascii_start();
    let mut words = t.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty());
    let Some(pid) = words
        .next()
        .and_then(|w| std::str::from_utf8(w).ok()?.parse::<i32>().ok())
    else {
        return Line::Other;
    };
    match words.next() {
        Some(b"PERF_RECORD_MMAP2") | Some(b"PERF_RECORD_MMAP") => parse_mmap(pid, t).unwrap_or(Line::Other),
        Some(ip) if t.contains(&b'(') => match std::str::from_utf8(ip)
            .ok()
            .and_then(|ip| u64::from_str_radix(ip, 16).ok())
        {
            Some(ip) => Line::Sample { pid, ip },
            None => Line::Other,
        },
        _ => Line::Other,
    }
}

/// `PID PERF_RECORD_MMAP2 PID/TID: [0xSTART(0xLEN) @ 0xPGOFF MAJ:MIN INO GEN]: r-xp PATH`
/// (MMAP: `[0xSTART(0xLEN) @ 0xPGOFF]: x PATH`). The path is kept as
/// [`crate::procfs::escape_name`] writes it: lossless whatever its bytes.
fn parse_mmap(pid: i32, t: &[u8]) -> Option<Line> {
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let open = t.iter().position(|&b| b == b'[')?;
    let close = open + find(&t[open..], b"]:")?;
    // The bracket holds numbers only.
    let inside = std::str::from_utf8(&t[open + 1..close]).ok()?;
    let (range, rest) = inside.split_once(" @ ")?;
    let (start, len) = range.split_once('(')?;
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x").trim_end_matches(')'), 16).ok();
    let (start, len) = (hex(start)?, hex(len)?);
    let offset = hex(rest.split_whitespace().next()?)?;
    let tail = t[close + 2..].trim_ascii_start();
    let sp = tail.iter().position(|&b| b == b' ')?;
    let (prot, path) = (std::str::from_utf8(&tail[..sp]).ok()?, tail[sp + 1..].trim_ascii());
    let perms = match prot {
        "x" => "r-xp".to_string(),
        p => p.to_string(),
    };
    Some(Line::Mmap {
        pid,
        vma: Vma {
            start,
            end: start.checked_add(len)?,
            perms,
            offset,
            dev_major: 0,
            dev_minor: 0,
            inode: 1,
            path: crate::procfs::escape_name(path),
        },
    })
}

/// Read one line into `buf` (without its newline), at most `max` bytes.
/// `None` at the end of input; `Some(false)` for a longer line, which is
/// consumed to its end without being kept.
fn read_line(input: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut fits = true;
    let mut any = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(any.then_some(fits));
        }
        any = true;
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if fits && buf.len() + part.len() <= max {
            buf.extend_from_slice(part);
        } else if fits {
            fits = false;
            buf.clear();
        }
        let used = done.unwrap_or(chunk.len());
        input.consume(used);
        if done.is_some() {
            return Ok(Some(fits));
        }
    }
}

/// What [`read`] made of a `perf script` output.
#[derive(Debug)]
pub struct Read {
    pub profile: Profile,
    /// Lines longer than [`MAX_LINE`], skipped.
    pub long_lines: u64,
}

/// The profile of a `perf script` output. Linear in its lines: a mapping
/// record or a sample costs a logarithm of the mappings of its process.
pub fn read(mut input: impl BufRead, name: &str) -> Result<Read> {
    let pmd = super::window_size();
    let mut spaces: HashMap<i32, Space> = HashMap::new();
    let mut tally = Tally::default();
    let (mut samples, mut mmaps, mut long_lines) = (0u64, 0u64, 0u64);
    let mut line = Vec::new();
    while let Some(fits) = read_line(&mut input, &mut line, MAX_LINE).map_err(|e| Error::io(name, e))? {
        if !fits {
            long_lines += 1;
            continue;
        }
        match parse_line(&line) {
            Line::Mmap { pid, vma } => {
                mmaps += 1;
                spaces
                    .entry(pid)
                    .or_insert_with(|| Space::new(None, pmd))
                    .map(&vma, true);
            }
            Line::Sample { pid, ip } => {
                samples += 1;
                if ip >= 0xffff_8000_0000_0000 {
                    continue; // kernel
                }
                let loc = spaces.get_mut(&pid).and_then(|space| space.resolve(ip));
                tally.add(loc.as_ref(), 1);
            }
            Line::Other => {}
        }
    }
    let skipped = match long_lines {
        0 => String::new(),
        n => format!(" ({n} lines longer than {} KiB skipped)", MAX_LINE >> 10),
    };
    if samples == 0 {
        return Err(Error::Invalid(format!(
            "{name}: no samples{skipped} (expected the output of `perf script --show-mmap-events -F pid,ip,dso`)"
        )));
    }
    if mmaps == 0 {
        return Err(Error::Invalid(format!(
            "{name}: no mapping records{skipped}: run perf script with --show-mmap-events (and -F pid,ip,dso)"
        )));
    }
    Ok(Read {
        profile: tally.finish(Source::PerfScript, "samples", pmd),
        long_lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse() {
        assert_eq!(
            parse_line(b"   26420     7f7f338223e0 (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)"),
            Line::Sample {
                pid: 26420,
                ip: 0x7f7f338223e0
            }
        );
        let m = parse_line(
            b"26420 PERF_RECORD_MMAP2 26420/26420: [0x55fbe21a5000(0x16000) @ 0x4000 fe:00 247493 0]: r-xp /usr/bin/ls",
        );
        let Line::Mmap { pid, vma } = m else { panic!("{m:?}") };
        assert_eq!(pid, 26420);
        assert_eq!(
            (vma.start, vma.end, vma.offset),
            (0x55fbe21a5000, 0x55fbe21bb000, 0x4000)
        );
        assert_eq!((vma.perms.as_str(), vma.path.as_str()), ("r-xp", "/usr/bin/ls"));
        let m = parse_line(b"    0 PERF_RECORD_MMAP -1/0: [0xffffffff81000000(0x1209988) @ 0xffffffff81000000]: x [kernel.kallsyms]_text");
        assert!(matches!(m, Line::Mmap { .. }));
        assert_eq!(parse_line(b"# header"), Line::Other);
        assert_eq!(parse_line(b""), Line::Other);
    }

    #[test]
    fn a_path_that_is_not_utf8_is_kept_losslessly() {
        let m = parse_line(b"7 PERF_RECORD_MMAP2 7/7: [0x1000(0x1000) @ 0 fe:00 9 0]: r-xp /lib/caf\xe9\\x.so");
        let Line::Mmap { vma, .. } = m else { panic!("{m:?}") };
        assert_eq!(vma.path, "/lib/caf\\xe9\\\\x.so");
        assert_eq!(crate::procfs::name_bytes(&vma.path), b"/lib/caf\xe9\\x.so");
        assert!(matches!(
            parse_line(b"7 1010 (/lib/caf\xe9.so)"),
            Line::Sample { pid: 7, ip: 0x1010 }
        ));
    }

    #[test]
    fn long_lines_are_skipped_whole() {
        let text = [&b"short\n"[..], &[b'x'; 100], b"\nlast"].concat();
        // A reader that hands out 7 bytes at a time.
        let mut input = std::io::BufReader::with_capacity(7, &text[..]);
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while let Some(fits) = read_line(&mut input, &mut buf, 10).unwrap() {
            lines.push((fits, String::from_utf8(buf.clone()).unwrap()));
        }
        assert_eq!(
            lines,
            [(true, "short".into()), (false, String::new()), (true, "last".into())]
        );
    }
}
