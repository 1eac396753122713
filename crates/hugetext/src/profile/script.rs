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
    /// A mapping of pid.
    Mmap { pid: i32, vma: Vma },
    /// Anything else (headers, other records).
    Other,
}

/// Parse one line. Pure.
pub fn parse_line(line: &str) -> Line {
    let t = line.trim_start();
    let mut words = t.split_whitespace();
    let Some(pid) = words.next().and_then(|w| w.parse::<i32>().ok()) else {
        return Line::Other;
    };
    match words.next() {
        Some("PERF_RECORD_MMAP2") | Some("PERF_RECORD_MMAP") => parse_mmap(pid, t).unwrap_or(Line::Other),
        Some(ip) if t.contains('(') => match u64::from_str_radix(ip, 16) {
            Ok(ip) => Line::Sample { pid, ip },
            Err(_) => Line::Other,
        },
        _ => Line::Other,
    }
}

/// `PID PERF_RECORD_MMAP2 PID/TID: [0xSTART(0xLEN) @ 0xPGOFF MAJ:MIN INO GEN]: r-xp PATH`
/// (MMAP: `[0xSTART(0xLEN) @ 0xPGOFF]: x PATH`).
fn parse_mmap(pid: i32, t: &str) -> Option<Line> {
    let open = t.find('[')?;
    let close = open + t[open..].find("]:")?;
    let inside = &t[open + 1..close];
    let (range, rest) = inside.split_once(" @ ")?;
    let (start, len) = range.split_once('(')?;
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x").trim_end_matches(')'), 16).ok();
    let (start, len) = (hex(start)?, hex(len)?);
    let offset = hex(rest.split_whitespace().next()?)?;
    let tail = t[close + 2..].trim_start();
    let (prot, path) = tail.split_once(' ')?;
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
            path: path.trim().to_string(),
        },
    })
}

/// The profile of a `perf script` output.
pub fn read(input: impl BufRead, name: &str) -> Result<Profile> {
    let pmd = super::window_size();
    let mut maps: HashMap<i32, (Vec<Vma>, Space, bool)> = HashMap::new();
    let mut tally = Tally::default();
    let (mut samples, mut mmaps) = (0u64, 0u64);
    for line in input.lines() {
        let line = line.map_err(|e| Error::io(name, e))?;
        match parse_line(&line) {
            Line::Mmap { pid, vma } => {
                mmaps += 1;
                let e = maps
                    .entry(pid)
                    .or_insert_with(|| (Vec::new(), Space::new(None, pmd), false));
                e.0.retain(|v| v.end <= vma.start || v.start >= vma.end);
                e.0.push(vma);
                e.2 = true;
            }
            Line::Sample { pid, ip } => {
                samples += 1;
                if ip >= 0xffff_8000_0000_0000 {
                    continue; // kernel
                }
                let loc = maps.get_mut(&pid).and_then(|(vmas, space, dirty)| {
                    if std::mem::take(dirty) {
                        space.set_maps(vmas, true);
                    }
                    space.resolve(ip)
                });
                tally.add(loc.as_ref(), 1);
            }
            Line::Other => {}
        }
    }
    if samples == 0 {
        return Err(Error::Invalid(format!(
            "{name}: no samples (expected the output of `perf script --show-mmap-events -F pid,ip,dso`)"
        )));
    }
    if mmaps == 0 {
        return Err(Error::Invalid(format!(
            "{name}: no mapping records: run perf script with --show-mmap-events (and -F pid,ip,dso)"
        )));
    }
    Ok(tally.finish(Source::PerfScript, "samples", pmd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse() {
        assert_eq!(
            parse_line("   26420     7f7f338223e0 (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)"),
            Line::Sample {
                pid: 26420,
                ip: 0x7f7f338223e0
            }
        );
        let m = parse_line(
            "26420 PERF_RECORD_MMAP2 26420/26420: [0x55fbe21a5000(0x16000) @ 0x4000 fe:00 247493 0]: r-xp /usr/bin/ls",
        );
        let Line::Mmap { pid, vma } = m else { panic!("{m:?}") };
        assert_eq!(pid, 26420);
        assert_eq!(
            (vma.start, vma.end, vma.offset),
            (0x55fbe21a5000, 0x55fbe21bb000, 0x4000)
        );
        assert_eq!((vma.perms.as_str(), vma.path.as_str()), ("r-xp", "/usr/bin/ls"));
        let m = parse_line("    0 PERF_RECORD_MMAP -1/0: [0xffffffff81000000(0x1209988) @ 0xffffffff81000000]: x [kernel.kallsyms]_text");
        assert!(matches!(m, Line::Mmap { .. }));
        assert_eq!(parse_line("# header"), Line::Other);
        assert_eq!(parse_line(""), Line::Other);
    }
}
