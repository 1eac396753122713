//! `hugetext warm`: fill the page cache with PMD-sized folios for programs'
//! text, and verify it.

use std::path::PathBuf;

use anyhow::{bail, Result};
use hugetext::warm::{self, Config, FileOutcome, FileReport, MemLimit, ReplaceAllow, WarmOptions};

use super::Bar;

mod shmem;

/// What `hugetext warm --help` prints after the options (the subcommand's
/// one-line summary is in main.rs).
const ABOUT: &str = "\
Puts programs' text into 2 MiB page-cache folios, so every process that maps it \
(now or later) gets it on PMD mappings: no copy, shared by all processes, demand paged.

For each file, the clean page cache of its read-only ELF segments (any other file: all \
of it) is evicted and read back through a MADV_HUGEPAGE mapping, bounded to the \
segments; then the folio sizes are read back and reported: kB in 2 MiB folios, \
eligible and PMD windows, what stayed small and why, and whether the windows will be \
PMD-mapped when the program runs. Text that no process can PMD-map (segments not 2 MiB-congruent, \
or a PIE with p_align < 2 MiB, which the kernel loads at a page-aligned base) is left as it is: \
filling it would only cost memory; run hugetext align first (--force fills it anyway). Pages that running processes \
map cannot be evicted: they are reported as blocked, with the processes' pids; \
--replace renames a warmed identical copy over such a file. MADV_COLLAPSE is used \
where the kernel allows it for file text.

Needs root (folio sizes come from /proc/kpageflags) and a filesystem with large folios \
(ext4 since Linux 6.16, xfs since 5.18); on others (tmpfs, btrfs) it says PMD folios \
are impossible. See doc/warm.md.

Exit status (as for every command that changes state, see `hugetext --help`): 0 done: \
a file was warmed (whatever stayed small is reported); 1 error: a file could not be \
warmed (the others still are); 2 nothing to do: no file has a whole 2 MiB window of \
text; 3 impossible here: this filesystem gives no PMD folios (route: none), or nothing \
was warmed (running processes map every window; stderr names them), or the text cannot be \
PMD-mapped when it runs (hugetext align). An error wins over \
done, done over impossible. Bad arguments: 2 (before anything is done).";

/// Arguments of `hugetext warm` (the long description is in [`ABOUT`]).
#[derive(clap::Args, Debug)]
#[command(after_long_help = ABOUT)]
pub struct Args {
    /// Files to warm: programs, shared libraries, or any regular file.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// Also warm every shared library the programs load (DT_NEEDED, resolved
    /// like ld.so: RPATH/RUNPATH, LD_LIBRARY_PATH, ld.so.cache, default dirs).
    #[arg(long)]
    pub deps: bool,

    /// Print the result as JSON: {"files":[{"path", "unit_folio_kb", "blocked_kb", ...}]}.
    #[arg(long)]
    pub json: bool,

    /// Read the files to warm (and options) from a TOML file, e.g.
    /// /etc/hugetext/warm.conf; see doc/warm.md. PATH arguments are added.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Memory guard: refuse to warm more than this, as a share of
    /// MemAvailable (50%) or a size (4G, 512M). Default 50%.
    #[arg(long, value_name = "PCT|SIZE")]
    pub max_mem: Option<MemLimit>,

    /// Files whose windows running processes block: write an identical copy
    /// (mode, owner, xattrs, capabilities, times kept), warm it and rename it
    /// over the original. Running processes keep the old file; new ones get
    /// huge folios.
    #[arg(long)]
    pub replace: bool,

    /// Let --replace proceed where it refuses by default.
    #[arg(long, value_enum, value_name = "WHAT", requires = "replace")]
    pub replace_allow: Vec<Allow>,

    /// Do not try MADV_COLLAPSE on windows that stayed small.
    #[arg(long)]
    pub no_collapse: bool,

    /// Fill 2 MiB folios even for text no process can PMD-map when it runs
    /// (segments not 2 MiB-congruent, or a PIE with p_align < 2 MiB). By
    /// default such a file is left as it is, with exit status 3 and advice
    /// to run `hugetext align` first.
    #[arg(long)]
    pub force: bool,

    /// Print a systemd .path unit that re-warms when any of the files (and
    /// the --config file) changes, and exit.
    #[arg(long)]
    pub path_unit: bool,

    /// Copy the files into the text store (a tmpfs mounted huge=within_size,
    /// mounted when absent) instead of the page cache: `hugetext run` then
    /// maps their text from there in 2 MiB pages shared by every process,
    /// on any filesystem. Needs root.
    #[arg(long, conflicts_with_all = ["replace", "force", "path_unit", "config", "no_collapse"])]
    pub shmem: bool,

    /// With --shmem: remove the files' entries from the store (all entries
    /// when no PATH is given).
    #[arg(long, requires = "shmem", conflicts_with = "list")]
    pub drop: bool,

    /// With --shmem: list the store's entries, their originals, sizes and
    /// whether they are stale (the original changed: never used).
    #[arg(long, requires = "shmem")]
    pub list: bool,

    /// The text store's directory.
    #[arg(long, value_name = "DIR", default_value = hugetext::shmemstore::DEFAULT_ROOT)]
    pub store: PathBuf,

    /// With --shmem: the size cap of the store when it is mounted now, as a
    /// share of RAM (25%) or a size (4G, 512M). Default 25%.
    #[arg(long, value_name = "PCT|SIZE", requires = "shmem")]
    pub shmem_size: Option<String>,
}

/// What `--replace-allow` can allow.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allow {
    /// Files with more than one hard link (the other names keep the old file).
    Hardlinked,
    /// Files a process has open for writing (its writes go to the old file).
    OpenForWrite,
    /// Signed files (IMA/EVM xattrs, fs-verity).
    Signed,
}

pub fn run(args: Args) -> Result<u8> {
    if args.shmem {
        return shmem::run(&args);
    }
    let cfg = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let mut paths = cfg.paths.clone();
    paths.extend(args.paths.iter().cloned());
    if paths.is_empty() {
        bail!("nothing to warm: give files (PATH...) or --config FILE");
    }
    let deps = args.deps || cfg.deps;
    let max_mem = args.max_mem.or(cfg.max_mem).unwrap_or_default();
    let opts = WarmOptions {
        no_collapse: args.no_collapse,
        force: args.force,
        replace: args.replace || cfg.replace,
        replace_allow: ReplaceAllow {
            hardlinked: args.replace_allow.contains(&Allow::Hardlinked),
            open_for_write: args.replace_allow.contains(&Allow::OpenForWrite),
            signed: args.replace_allow.contains(&Allow::Signed),
        },
    };

    let plans = warm::plan_all(&paths, deps);
    // The `hot` key: only the profile's hot windows.
    let plans = match cfg.hot_windows()? {
        Some(hot) => plans
            .into_iter()
            .map(|(p, t)| (p, t.map(|t| warm::restrict_to_hot(t, &hot))))
            .collect(),
        None => plans,
    };
    if args.path_unit {
        let files: Vec<PathBuf> = plans
            .iter()
            .filter(|(_, t)| t.is_ok())
            .map(|(p, _)| p.clone())
            .collect();
        print!("{}", warm::path_unit(args.config.as_deref(), &files));
        return Ok(0);
    }
    let total: u64 = plans
        .iter()
        .filter_map(|(_, t)| t.as_ref().ok())
        .map(|t| t.bytes())
        .sum();
    warm::check_memory(total, max_mem)?;

    let bar = if plans.len() >= 4 || total >= 256 << 20 {
        Bar::new("warm {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}")
    } else {
        Bar::hidden()
    }
    .notes_as("hugetext: error: ");
    let report = warm::warm_all(plans, &opts, &bar);
    bar.finish();

    if args.json {
        // Keys sorted, as they always were.
        println!(
            "{}",
            serde_json::to_string_pretty(&hugetext::units::with_old_keys(serde_json::to_value(&report)?))?
        );
    } else {
        for f in &report.files {
            if let FileOutcome::Warmed(rep) = f {
                print_human(rep);
            }
        }
    }
    for f in &report.files {
        if let Some(why) = match f {
            FileOutcome::Warmed(rep) => rep.nothing_warmed(),
            FileOutcome::Failed { .. } => None,
        } {
            eprintln!("hugetext: {why}");
        }
    }
    Ok(report.outcome().exit_code())
}

fn mib(kb: u64) -> String {
    warm::human(kb * 1024)
}

fn print_human(r: &FileReport) {
    let kind = if r.elf { "ELF" } else { "file" };
    let route = match r.route {
        warm::Route::PmdReadahead => "PMD readahead",
        warm::Route::PmdReadaheadCollapse => "PMD readahead + MADV_COLLAPSE",
        warm::Route::Replace => "replaced by a warmed copy",
        warm::Route::None => "none possible",
        warm::Route::NeedsAlign => "none: not PMD-mappable at run time, align first",
    };
    println!(
        "{} ({kind}, {}, route: {route}, {:.0} ms)",
        r.path.display(),
        r.filesystem,
        r.millis
    );
    // The unit of huge text: the PMD, or the contpte block (64 KiB pages).
    let (unit, kind) = hugetext::kernel::huge_unit();
    let (unit_w, mappable) = (hugetext::units::human(unit as u64), kind.mappable());
    let windows = if r.eligible_windows == 0 {
        format!("no whole {unit_w} window")
    } else {
        format!(
            "{}/{} eligible windows, {} {mappable} at run time",
            r.unit_windows, r.eligible_windows, r.mappable_windows
        )
    };
    println!(
        "  {} cached: {} in {unit_w} folios ({windows}), {} small",
        mib(r.cached_kb),
        mib(r.unit_folio_kb),
        mib(r.small_kb)
    );
    if r.small_kb > 0 {
        let s = &r.small;
        let mut parts = Vec::new();
        for (kb, what) in [
            (s.head_tail_kb, "segment heads/tails"),
            (s.blocked_kb, "blocked by running processes"),
            (s.no_large_folios_kb, "no large folios on this filesystem"),
            (s.other_kb, "other"),
        ] {
            if kb > 0 {
                parts.push(format!("{} {what}", mib(kb)));
            }
        }
        println!("  small: {}", parts.join(", "));
        if let Some(c) = r.contpte_kb {
            println!(
                "  contpte-able: {} of the small folios can be mapped with contiguous PTEs",
                mib(c)
            );
        }
    }
    for rr in &r.ranges {
        let g = &rr.range;
        let seg = match (&g.flags, g.vaddr) {
            (Some(fl), Some(va)) => format!("segment {fl} offset {:#x} vaddr {va:#x}", g.offset),
            _ => format!("offset {:#x}", g.offset),
        };
        let rt = match g.runtime {
            warm::Runtime::Congruent => mappable.to_string(),
            warm::Runtime::LoadAddress => format!("{mappable} if loaded {unit_w}-aligned"),
            warm::Runtime::Incongruent => format!("not {mappable} (hugetext align)"),
            warm::Runtime::NotElf => "whole file".to_string(),
        };
        println!(
            "  {seg} size {}: {}/{} windows in {unit_w} folios; {rt}",
            warm::human(g.len),
            rr.unit_windows,
            rr.eligible_windows
        );
    }
    for n in &r.notes {
        println!("  note: {n}");
    }
}
