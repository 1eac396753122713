//! `hugetext doctor`.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use hugetext::doctor;

/// The long help of `hugetext doctor`.
const LONG_HELP: &str = "\
Report what this kernel can do for huge text, and what each finding means.

Checks the kernel version, page and PMD size, THP modes (global and per
size), and — by experiment on a 4 MiB scratch file in --path (removed
afterwards) — whether that filesystem gives PMD-order page-cache folios,
whether a later unadvised mapping gets them PMD-mapped, and whether
MADV_COLLAPSE works on file text (CONFIG_READ_ONLY_THP_FOR_FS). Also
pagemap PFN access (folio sizes in `inspect`), PAGEMAP_SCAN, and the glibc
version (p_align support for shared libraries).";

/// Arguments of `hugetext doctor`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// A directory (or a file, whose directory is used) on the filesystem to
    /// probe: where your programs and libraries live. Must be writable for
    /// the experiment.
    #[arg(long, value_name = "PATH", default_value = ".")]
    pub path: PathBuf,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<u8> {
    if !args.path.exists() {
        anyhow::bail!("{}: no such file or directory", args.path.display());
    }
    let findings = doctor::diagnose(&args.path);
    if args.json {
        let report = doctor::Report {
            path: args.path.clone(),
            checks: findings,
        };
        // Keys sorted, as they always were.
        println!(
            "{}",
            serde_json::to_string_pretty(&hugetext::units::with_old_keys(serde_json::to_value(&report)?))?
        );
        return Ok(0);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(vec!["check", "status", "found", "what it means"]);
    for f in &findings {
        t.add_row(vec![
            f.check.clone(),
            f.status.word().to_string(),
            f.value.clone(),
            f.meaning.clone(),
        ]);
    }
    if !std::io::stdout().is_terminal() {
        t.set_width(160);
    }
    println!("{t}");
    Ok(0)
}
