//! `hugetext check`: can these ELF files' text be PMD-mapped, and what would
//! `hugetext align` achieve?

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use hugetext::elf::{self, CheckReport};

/// Tell whether ELF files' text can be PMD-mapped (huge pages), and what
/// `hugetext align` would gain.
///
/// The PMD size is the target kernel's: the running kernel's for a file of
/// this machine (2 MiB on x86-64; 2 or 32 MiB on arm64 with 4 or 16 KiB
/// pages), else the one of the page size --page-size names. With 64 KiB pages
/// (a 512 MiB PMD no page-cache folio reaches) the unit is the 2 MiB
/// contiguous-PTE block instead. A file of another machine is said to be one.
///
/// For each PT_LOAD: flags, vaddr, file offset, file size, p_align, its skew
/// (p_vaddr - p_offset modulo the PMD size; 0 = congruent) and the whole PMD
/// windows it contains. Then whether the runtime load base keeps the
/// congruence (ET_EXEC: fixed; PIE: kernel >= 5.10 aligns to the largest
/// p_align; static PIE: kernel >= 6.11; shared library: glibc >= 2.35), the
/// bytes PMD-mappable now and after `align`, a verdict with reasons, and what
/// a rewrite would invalidate (signatures, IMA/EVM, appended data, hard links).
///
/// Only the headers are read, so checking thousands of files is fast.
///
/// Exit status: 0 when every file could be checked (whatever the verdicts),
/// 1 when at least one could not be read or is not a valid ELF file (each
/// such file gets one line on stderr, or an "error" entry with --json).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// ELF files to check.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print a JSON array with one object per file (fields include
    /// unit_mappable_bytes and unit_mappable_bytes_after_align).
    #[arg(long)]
    pub json: bool,
    /// Page size of the kernel the files are meant for: 4K, 16K or 64K
    /// (arm64). Default: the running kernel's for files of this machine,
    /// 4K for AArch64 files on another machine.
    #[arg(long, value_name = "SIZE", value_parser = elf::parse_page_size)]
    pub page_size: Option<u64>,
    /// The text store (`hugetext warm --shmem`) whose stale copies of the
    /// files are named on stderr.
    #[arg(long, value_name = "DIR", default_value = hugetext::shmemstore::DEFAULT_ROOT)]
    pub store: PathBuf,
}

const AFTER_HELP: &str = "\
The PMD size is the target kernel's (running kernel's, or the one --page-size implies:
4K -> 2 MiB, 16K -> 32 MiB; with 64K pages the 512 MiB PMD is out of reach and the unit is
the 2 MiB contiguous-PTE block, one TLB entry, instead: unit_kind contpte in the report).
For each PT_LOAD: flags, vaddr, file offset, file size, p_align, skew (p_vaddr - p_offset
mod PMD; 0 = congruent) and the whole PMD windows it contains; whether the runtime
load base keeps the congruence (ET_EXEC: fixed; PIE: kernel >= 5.10; static PIE: kernel
>= 6.11; shared library: glibc >= 2.35, each via the largest p_align); the bytes
PMD-mappable now and after `hugetext align`; a verdict (pmd-mappable, improvable,
not-improvable) with reasons; and what a rewrite would invalidate. Only headers are read.
A stale copy of a file in the text store (the file changed since `hugetext warm --shmem`
stored it; never used) is named on stderr. See doc/elf.md.

Exit status:
  0  every file was checked (whatever the verdicts)
  1  at least one file could not be read or is not valid ELF (one line each on stderr)";

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Entry {
    Report(Box<CheckReport>),
    Error { path: PathBuf, error: String },
}

pub fn run(args: Args) -> Result<u8> {
    let mut code = 0;
    let mut entries = Vec::new();
    let mut out = std::io::stdout().lock();
    for path in &args.files {
        match elf::check_file_for(path, args.page_size) {
            Ok(r) => {
                if args.json {
                    entries.push(Entry::Report(Box::new(r)));
                } else {
                    print_report(&mut out, &r)?;
                }
            }
            Err(e) => {
                code = 1;
                if args.json {
                    entries.push(Entry::Error {
                        path: path.clone(),
                        error: e.to_string(),
                    });
                } else {
                    out.flush()?;
                    eprintln!("hugetext: error: {e}");
                }
            }
        }
    }
    if args.json {
        serde_json::to_writer_pretty(
            &mut out,
            &hugetext::units::with_old_keys(serde_json::to_value(&entries)?),
        )?;
        writeln!(out)?;
    }
    out.flush()?;
    report_leftovers(&args.files);
    report_stale_store(&args.files, &args.store);
    Ok(code)
}

/// Say on stderr which of `files` have a stale copy in the text store at
/// `root` (the file changed since it was stored: `run` never maps it, but
/// it holds memory until the next `warm --shmem` drops it).
fn report_stale_store(files: &[PathBuf], root: &std::path::Path) {
    use hugetext::shmemstore::{self as store, State};
    let Ok(entries) = store::list(root) else { return };
    let at = match root == std::path::Path::new(store::DEFAULT_ROOT) {
        true => String::new(),
        false => format!(" --store {}", root.display()),
    };
    for f in files {
        let Ok(real) = std::fs::canonicalize(f) else { continue };
        for e in entries
            .iter()
            .filter(|e| e.state == State::Stale && e.original.as_deref() == Some(real.as_path()))
        {
            eprintln!(
                "hugetext: warning: {}: its copy in the text store ({}, {}) is stale: the file changed since it was \
                 stored, so `run` does not use it; `hugetext warm --shmem{at} {}` drops it and stores the file \
                 anew (`hugetext warm --shmem{at} --drop {}` only drops it)",
                f.display(),
                root.join(&e.name).display(),
                hugetext::units::human(e.bytes),
                f.display(),
                f.display()
            );
        }
    }
}

/// Say on stderr which directories of `files` hold hidden temporary files
/// that killed hugetext runs left (`align` there removes them): each
/// directory looked at once.
fn report_leftovers(files: &[PathBuf]) {
    let dirs: std::collections::BTreeSet<PathBuf> = files.iter().map(|f| hugetext::fsutil::dir_of(f)).collect();
    for dir in dirs {
        let left = hugetext::fsutil::leftovers(&dir, false);
        if left.is_empty() {
            continue;
        }
        let names: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "hugetext: warning: {}: hidden temporary files of an interrupted hugetext run ({}); `hugetext align` of a file there removes them",
            dir.display(),
            names.join(", ")
        );
    }
}

use hugetext::units::mib;

fn print_report(out: &mut impl Write, r: &CheckReport) -> Result<()> {
    let kind = r.kind.as_str();
    writeln!(
        out,
        "{}: {} {} {}, {} bytes, max p_align {:#x}",
        r.path.display(),
        r.class,
        r.machine,
        kind,
        r.file_size,
        r.max_p_align
    )?;
    let unit = match r.target.unit_kind {
        elf::HugeUnit::Pmd => String::new(),
        elf::HugeUnit::Contpte => format!(
            "; huge unit: the {} contiguous-PTE block (one TLB entry; no page-cache folio reaches a {} PMD)",
            hugetext::units::human(r.target.unit),
            hugetext::units::human(r.target.pmd_size)
        ),
    };
    writeln!(
        out,
        "  target: {}, {} pages, {} PMD{}{unit}",
        r.target.machine,
        hugetext::units::human(r.target.page_size),
        hugetext::units::human(r.target.pmd_size),
        if r.target.foreign { " (not this machine)" } else { "" }
    )?;
    let now_head = match r.target.unit_kind {
        elf::HugeUnit::Pmd => "PMD now",
        elf::HugeUnit::Contpte => "cont now",
    };
    if !r.segments.is_empty() {
        writeln!(
            out,
            "  {:>3} {:<4} {:>18} {:>12} {:>12} {:>9} {:>9} {:>7}  {:>9}",
            "#", "flg", "vaddr", "offset", "filesz", "p_align", "skew", "windows", now_head
        )?;
        for s in &r.segments {
            writeln!(
                out,
                "  {:>3} {:<4} {:>#18x} {:>#12x} {:>#12x} {:>#9x} {:>#9x} {:>7}  {:>9}",
                s.index,
                s.flags,
                s.vaddr,
                s.offset,
                s.filesz,
                s.p_align,
                s.skew,
                s.whole_windows,
                mib(s.unit_mappable_bytes)
            )?;
            writeln!(out, "      {}", s.note)?;
        }
    }
    writeln!(out, "  base: {}", r.base_note)?;
    let verdict = r.verdict.as_str();
    writeln!(
        out,
        "  verdict: {verdict}: {} now {}, after align {}",
        r.target.unit_kind.mappable(),
        mib(r.unit_mappable_bytes),
        mib(r.unit_mappable_bytes_after_align)
    )?;
    for reason in &r.reasons {
        writeln!(out, "    - {reason}")?;
    }
    for w in &r.warnings {
        writeln!(out, "    ! {w}")?;
    }
    Ok(())
}
