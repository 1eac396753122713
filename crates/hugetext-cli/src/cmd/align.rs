//! `hugetext align`: rewrite an ELF file so its read-only segments can be
//! PMD-mapped.

use std::path::PathBuf;

use anyhow::Result;
use hugetext::elf::{self, AlignOptions, AlignStatus};

use hugetext::units::mib;

/// Rewrite an ELF file so its read-only segments can be PMD-mapped.
///
/// x86-64 and AArch64 (little-endian ELF64) files; PMD is the target kernel's
/// PMD size: 2 MiB on x86-64, on arm64 2 MiB with 4 KiB pages and 32 MiB with
/// 16 KiB pages (--page-size); with 64 KiB pages, whose 512 MiB PMD no
/// page-cache folio reaches, the 2 MiB contiguous-PTE block.
///
/// * A congruent read-only segment (p_vaddr = p_offset modulo PMD, the GNU
///   ld layout) of a PIE or shared library gets p_align = PMD, so the kernel
///   (PIE, Linux >= 5.10) or ld.so (glibc >= 2.35) places it PMD-aligned.
/// * A skewed one (lld, mold: vaddr - offset = one page) gets zero padding
///   inserted in the file before it, and every later file offset (e_phoff,
///   e_shoff, p_offset, sh_offset) moves by that much. Virtual addresses never
///   change. The padding is a hole where the filesystem allows.
///
/// The new file is written next to the target, re-parsed and compared byte by
/// byte with the original, given its owner, mode and extended attributes
/// (including file capabilities), then renamed over the target: the original
/// is never modified in place, so a running program keeps working and any
/// failure (disk full, no permission) leaves it as it was. Signed files
/// (signature sections, appended signatures, IMA/EVM xattrs) are refused
/// unless --force.
///
/// Exit status (as for every command that changes state, see `hugetext --help`):
///   0  done: rewritten (with --dry-run: would be rewritten)
///   1  error (not ELF, truncated, I/O, no permission, disk full); nothing changed
///   2  nothing to do: already PMD-mappable
///   3  impossible here: cannot be improved, or refused (the reason is printed)
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The ELF file to align (rewritten in place unless -o is given; a
    /// symlink is followed and stays a symlink).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Write the aligned file here and leave FILE untouched. OUT must be a
    /// new name or a regular file you own (root: not another user's file in
    /// a sticky directory such as /tmp); a symlink, directory, device, FIFO
    /// or socket is refused.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Only say what would be done.
    #[arg(long)]
    pub dry_run: bool,
    /// Rewrite signed files too (their signature becomes invalid).
    #[arg(long)]
    pub force: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// Page size of the kernel the file is meant for: 4K, 16K or 64K
    /// (arm64); its PMD size is the alignment. Default: the running
    /// kernel's for a file of this machine, 4K for an AArch64 file on
    /// another machine (said in a note).
    #[arg(long, value_name = "SIZE", value_parser = elf::parse_page_size)]
    pub page_size: Option<u64>,
}

const AFTER_HELP: &str = "\
What it does (x86-64 and AArch64 files; PMD = the target kernel's PMD size: 2 MiB on
x86-64 and arm64 with 4K pages, 32 MiB with --page-size 16K; with 64K pages the 2 MiB
contiguous-PTE block, as the 512 MiB PMD is out of reach):
  * congruent read-only segments (p_vaddr = p_offset mod PMD, GNU ld) of a PIE or
    shared library get p_align = PMD, so the kernel (PIE, Linux >= 5.10) or ld.so
    (glibc >= 2.35) places them PMD-aligned;
  * skewed ones (lld, mold: vaddr - offset = one page) get zero padding inserted before
    them and every later file offset (e_phoff, e_shoff, p_offset, sh_offset) moved;
    virtual addresses never change; the padding is a hole where possible.
The new file is written next to the target (unnamed, or hidden and mode 0600),
re-parsed and compared byte by byte with the original, given its owner, mode and
xattrs (file capabilities included) only as its last step, then renamed over it: a
running program keeps working, and any failure (disk full, no permission, a kill)
leaves the original as it was. Hidden temporary files of killed runs in that
directory are removed by the next align. Signed files (signature sections, appended
signatures, IMA/EVM xattrs) are refused unless --force. -o OUT must be a new name or
a regular file you own: a symlink, directory, device, FIFO or socket is refused (exit 1).
With --json, an error is a JSON object too ({\"status\": \"error\", \"error\": ...}).
See doc/elf.md.

Exit status (as for every command that changes state, see `hugetext --help`):
  0  done: rewritten (with --dry-run: would be rewritten)
  1  error (not ELF, truncated, I/O, no permission, disk full); nothing changed
  2  nothing to do: already PMD-mappable
  3  impossible here: cannot be improved, or refused (the reason is printed)";

pub fn run(args: Args) -> Result<u8> {
    let opts = AlignOptions {
        output: args.output.clone(),
        dry_run: args.dry_run,
        force: args.force,
        page_size: args.page_size,
    };
    let o = match elf::align_file(&args.file, &opts) {
        Ok(o) => o,
        Err(e) if args.json => return print_json_error(&args, &e),
        Err(e) => return Err(e.into()),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&hugetext::units::with_old_keys(serde_json::to_value(&o)?))?
        );
        return Ok(o.status.exit_code());
    }
    let name = args.file.display();
    match o.status {
        AlignStatus::Rewritten | AlignStatus::WouldRewrite => {
            let verb = if o.status == AlignStatus::Rewritten {
                "aligned"
            } else {
                "would align"
            };
            let dest = if args.output.is_some() {
                format!(" -> {}", o.output.display())
            } else {
                String::new()
            };
            println!(
                "{verb} {name}{dest}: {} {} -> {}",
                o.before.target.unit_kind.mappable(),
                mib(o.before.unit_mappable_bytes),
                mib(o.before.unit_mappable_bytes_after_align)
            );
            for r in &o.reasons {
                println!("  - {r}");
            }
            if o.status == AlignStatus::Rewritten {
                println!(
                    "  file grew by {} bytes ({} bytes on disk)",
                    o.grew_by, o.grew_on_disk_by
                );
            } else {
                println!("  file would grow by {} bytes", o.grew_by);
            }
        }
        AlignStatus::NothingToDo => {
            println!(
                "nothing to do for {name}: already {} ({})",
                o.before.target.unit_kind.mappable(),
                mib(o.before.unit_mappable_bytes)
            );
        }
        AlignStatus::Cannot => {
            println!("cannot align {name}: {}", o.reasons.join("; "));
        }
    }
    for w in &o.warnings {
        eprintln!("hugetext: warning: {name}: {w}");
    }
    Ok(o.status.exit_code())
}

/// `--json` on an error: `{"status": "error", "input": ..., "error": ...}`
/// on stdout (the line on stderr too), exit status 1.
fn print_json_error(args: &Args, e: &hugetext::Error) -> Result<u8> {
    let v = serde_json::json!({
        "status": "error",
        "input": args.file,
        "output": args.output.as_ref().unwrap_or(&args.file),
        "error": e.to_string(),
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    eprintln!("hugetext: error: {e}");
    Ok(1)
}
