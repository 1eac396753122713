//! `hugetext inspect`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, ContentArrangement, Table};
use hugetext::folio::{Class, Counts, Kind};
use hugetext::inspect::{self, FileView, FilesJson, Method, Options, Report, Target};
use hugetext::kernel;

use super::Bar;

/// The long help of `hugetext inspect`.
const LONG_ABOUT: &str = "\
Show how program text (or, with --all, all memory) is backed: folio sizes
and how each folio is mapped.

For every mapping in scope, every resident page is put in one class, with
the kernel's tools/mm/thpmaps names: `base-page` (an order-0 folio),
`thp-pte-aligned-<size>` (a whole large folio mapped by PTEs at a
virtual address aligned to its size), `thp-pte-unaligned-<size>` (whole,
not aligned: cannot be PMD- or contpte-mapped), `thp-pte-partial` (part of
a folio this mapping maps only in part), and `thp-pmd-aligned-<PMD size>`
(mapped by one PMD: one TLB entry for 2 MiB). Each is prefixed `file-`
(page cache: program text) or `anon-`.

Targets: --pid (repeatable), --cgroup (v1 or v2, recursive), --file (page
cache of files whether or not anyone maps them); none = the whole system.
System and cgroup views count text shared by many processes both per
mapping (\"mapped\") and once per file page (\"unique\").

Needs root (CAP_SYS_ADMIN) to see folio sizes; without it the kernel hides
page frame numbers and inspect falls back to smaps-only numbers (PMD- vs
PTE-mapped), clearly marked.";

#[derive(clap::Args, Debug)]
/// Arguments of `hugetext inspect`.
#[command(after_long_help = LONG_ABOUT)]
pub struct Args {
    /// Inspect this process (repeatable). A process that does not exist is an error.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..), conflicts_with_all = ["cgroup", "file"])]
    pub pid: Vec<i32>,

    /// Inspect every process in this cgroup and its descendants (v1 or v2),
    /// e.g. /sys/fs/cgroup/system.slice/nginx.service.
    #[arg(long, value_name = "PATH", conflicts_with = "file")]
    pub cgroup: Option<PathBuf>,

    /// Page-cache view of these files, whether or not anyone maps them:
    /// cached kB held in folios of each size. Reads nothing that is not cached.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub file: Vec<PathBuf>,

    /// Every mapping (anonymous and file-backed apart), not only executable ones.
    #[arg(long)]
    pub all: bool,

    /// Sum per process and in total instead of listing every mapping.
    #[arg(long)]
    pub rollup: bool,

    /// Also count naturally aligned, physically contiguous blocks of SIZE
    /// inside one folio (arm64 contpte: 64K; AMD PTE coalescing: 16K/32K).
    /// SIZE is a power-of-two number of pages, at least 2 pages, at most the
    /// PMD size, with an optional K/M suffix (repeatable). Default on arm64:
    /// the kernel's contpte block (64K with 4 KiB pages, 2M with 16 KiB or
    /// 64 KiB pages); elsewhere none.
    #[arg(long, value_name = "SIZE")]
    pub cont: Vec<String>,

    /// Print JSON (thpmaps' labels, values in kB) instead of tables.
    #[arg(long)]
    pub json: bool,

    /// Repeat every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS")]
    pub watch: Option<f64>,

    /// Also show classes whose value is 0 in tables (JSON always has them).
    #[arg(long)]
    pub inc_empty: bool,
}

/// Parse a `--cont` size into a folio order.
fn cont_order(s: &str) -> Result<u32> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult) = if let Some(n) = lower
        .strip_suffix("kib")
        .or(lower.strip_suffix("kb"))
        .or(lower.strip_suffix('k'))
    {
        (n, 1u64 << 10)
    } else if let Some(n) = lower
        .strip_suffix("mib")
        .or(lower.strip_suffix("mb"))
        .or(lower.strip_suffix('m'))
    {
        (n, 1 << 20)
    } else if let Some(n) = lower
        .strip_suffix("gib")
        .or(lower.strip_suffix("gb"))
        .or(lower.strip_suffix('g'))
    {
        (n, 1 << 30)
    } else {
        (lower.as_str(), 1)
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--cont {s}: not a size (give e.g. 64K or 2M)"))?;
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| anyhow::anyhow!("--cont {s}: too large"))?;
    let page = kernel::page_size() as u64;
    let pmd = kernel::pmd_size() as u64;
    if bytes < 2 * page || bytes % page != 0 || !(bytes / page).is_power_of_two() {
        bail!(
            "--cont {s}: must be a power-of-two number of pages, at least 2 pages ({} kB)",
            2 * page / 1024
        );
    }
    if bytes > pmd {
        bail!("--cont {s}: must be at most the PMD size ({} kB)", pmd / 1024);
    }
    Ok((bytes / page).trailing_zeros())
}

/// The contpte block as a folio order, where the machine has one (arm64).
fn default_cont_order() -> Option<u32> {
    let block = kernel::cont_pte_size()?;
    Some((block / kernel::page_size()).trailing_zeros())
}

pub fn run(args: Args) -> Result<u8> {
    let mut cont_orders = args.cont.iter().map(|s| cont_order(s)).collect::<Result<Vec<_>>>()?;
    if args.cont.is_empty() {
        // arm64: the contpte view by default.
        cont_orders.extend(default_cont_order());
    }
    if let Some(w) = args.watch {
        if !(w.is_finite() && w > 0.0) {
            bail!("--watch {w}: give a positive number of seconds");
        }
    }
    loop {
        if !args.file.is_empty() {
            run_files(&args)?;
        } else {
            run_processes(&args, &cont_orders)?;
        }
        match args.watch {
            Some(secs) => {
                std::thread::sleep(Duration::from_secs_f64(secs));
                if !args.json {
                    println!();
                }
            }
            None => return Ok(0),
        }
    }
}

fn kb(pages: u64) -> u64 {
    pages * (kernel::page_size() as u64 / 1024)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    let p = part as f64 * 100.0 / whole as f64;
    if part > 0 && p < 0.5 {
        "<1%".into()
    } else {
        format!("{p:.0}%")
    }
}

fn size_label(kb: u64) -> String {
    format!("{kb}kB")
}

fn run_processes(args: &Args, cont_orders: &[u32]) -> Result<()> {
    let target = if !args.pid.is_empty() {
        Target::Pids(args.pid.clone())
    } else if let Some(c) = &args.cgroup {
        Target::Cgroup(c.clone())
    } else {
        Target::System
    };
    let opts = Options {
        target: target.clone(),
        all: args.all,
        cont_orders: cont_orders.to_vec(),
        mappings: !args.rollup,
        method: None,
    };
    let bar = if !matches!(target, Target::Pids(_)) {
        Bar::new("{spinner} scanning processes {pos}/{len} {wide_bar} {elapsed}")
    } else {
        Bar::hidden()
    };
    let t0 = Instant::now();
    let mut report = inspect::inspect(&opts, &bar).context("inspect")?;
    bar.finish();
    if !args.rollup {
        report.name_copies();
    }
    let elapsed = t0.elapsed();
    if report.method == Method::SmapsOnly {
        eprintln!(
            "hugetext: note: page frame numbers are hidden without CAP_SYS_ADMIN: smaps-only numbers \
             (PMD- vs PTE-mapped only, folio sizes unknown); run as root for folio sizes"
        );
    }
    let sk = &report.skipped;
    if sk.total() > 0 {
        eprintln!(
            "hugetext: note: skipped {} processes ({} kernel threads, {} zombies, {} unreadable, {} vanished)",
            sk.total(),
            sk.kernel_threads,
            sk.zombies,
            sk.unreadable,
            sk.vanished
        );
    }
    if args.json {
        print_json(&report.to_json(args.rollup, elapsed), args.watch.is_some())?;
    } else {
        print_tables(&report, args, elapsed);
    }
    Ok(())
}

/// Print a JSON report: one line per report with --watch, else pretty.
/// Keys come out sorted, as they always have.
fn print_json(report: &impl serde::Serialize, one_line: bool) -> Result<()> {
    let v = hugetext::units::with_old_keys(serde_json::to_value(report)?);
    if one_line {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

fn new_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    for i in 1..header.len() {
        if let Some(col) = t.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn kinds_of(report: &Report, c: &Counts) -> Vec<Kind> {
    let mut v = vec![Kind::File];
    if report.all || c.total(Kind::Shmem) > 0 {
        v.push(Kind::Shmem);
    }
    if report.all || c.total(Kind::Anon) > 0 {
        v.push(Kind::Anon);
    }
    v
}

/// kB of every kind.
fn all_kb(c: &Counts) -> u64 {
    kb(Kind::ALL.iter().map(|&k| c.total(k)).sum())
}

fn print_tables(report: &Report, args: &Args, elapsed: Duration) {
    let what = if report.all {
        "all mappings"
    } else {
        "executable mappings"
    };
    let how = match report.method {
        Method::PagemapScan => "pagemap + kpageflags + PAGEMAP_SCAN",
        Method::PagemapSmaps => "pagemap + kpageflags + smaps",
        Method::SmapsOnly => "SMAPS ONLY: no PFN access, folio sizes unknown",
    };
    if !args.rollup {
        for p in &report.processes {
            if p.mappings.is_empty() {
                continue;
            }
            println!("pid {} ({}): {what}", p.pid, p.comm);
            let mut t = new_table(&["mapping", "class", "kB", "% of kind"]);
            if let Some(c) = t.column_mut(1) {
                c.set_cell_alignment(CellAlignment::Left);
            }
            for m in &p.mappings {
                let v = &m.vma;
                let mut first = true;
                for kind in kinds_of(report, &m.counts) {
                    let tot = m.counts.total(kind);
                    if tot == 0 {
                        continue;
                    }
                    for (label, val) in report.labelled(&m.counts, kind, args.inc_empty) {
                        let name = if first {
                            format!(
                                "{:x}-{:x} {} {:#x}\n{}\n{} kB {}",
                                v.start,
                                v.end,
                                v.perms,
                                v.offset,
                                match (&m.copy_of, &m.store_copy, v.path.is_empty()) {
                                    (Some(file), _, _) => format!("{file} (anonymous copy)"),
                                    (None, Some(c), _) => format!("{} ({})", v.path, c.describe()),
                                    (None, None, true) => "[anon]".to_string(),
                                    (None, None, false) => v.path.clone(),
                                },
                                all_kb(&m.counts),
                                "resident"
                            )
                        } else {
                            String::new()
                        };
                        first = false;
                        t.add_row(vec![name, label, val.to_string(), pct(val, kb(tot))]);
                    }
                }
            }
            println!("{t}");
        }
    } else {
        let mut t = new_table(&[
            "pid",
            "command",
            "file kB",
            "PMD-mapped",
            "large folios (PTE)",
            "base pages",
            "partial",
            "shmem kB (PMD-mapped)",
            "anon kB",
        ]);
        if let Some(c) = t.column_mut(1) {
            c.set_cell_alignment(CellAlignment::Left);
        }
        for p in &report.processes {
            let c = &p.counts;
            let f = c.total(Kind::File);
            let large: u64 = c
                .classes(Kind::File, false)
                .into_iter()
                .filter(|cl| matches!(cl, Class::PteAligned(_) | Class::PteUnaligned(_)))
                .map(|cl| c.get(Kind::File, cl))
                .sum();
            let unknown = report.method == Method::SmapsOnly;
            t.add_row(vec![
                p.pid.to_string(),
                p.comm.clone(),
                kb(f).to_string(),
                pct(c.get(Kind::File, Class::PmdAligned), f),
                if unknown { "?".into() } else { pct(large, f) },
                if unknown {
                    "?".into()
                } else {
                    pct(c.get(Kind::File, Class::BasePage), f)
                },
                if unknown {
                    "?".into()
                } else {
                    pct(c.get(Kind::File, Class::Partial), f)
                },
                match c.total(Kind::Shmem) {
                    0 => "0".into(),
                    sh => format!("{} ({})", kb(sh), pct(c.get(Kind::Shmem, Class::PmdAligned), sh)),
                },
                kb(c.total(Kind::Anon)).to_string(),
            ]);
        }
        println!("processes: {what} ({} inspected)", report.processes.len());
        println!("{t}");
    }
    // Totals: folios by size as a percentage of all mapped text.
    let tot = &report.total;
    let mut t = new_table(&["class", "mapped kB", "% mapped", "unique kB", "% unique"]);
    if let Some(c) = t.column_mut(0) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    for kind in kinds_of(report, tot) {
        let all = tot.total(kind);
        let uniq = report.unique.as_ref().filter(|_| kind != Kind::Anon);
        let uall = uniq.map(|u| u.total(kind)).unwrap_or(0);
        let mut labels = report.labelled(tot, kind, args.inc_empty);
        // Classes that appear only in the unique view (cannot happen, but be exact).
        if let Some(u) = uniq {
            for (l, _) in report.labelled(u, kind, args.inc_empty) {
                if !labels.iter().any(|(x, _)| *x == l) {
                    labels.push((l, 0));
                }
            }
        }
        let ulabels: Vec<(String, u64)> = uniq.map(|u| report.labelled(u, kind, true)).unwrap_or_default();
        for (label, v) in labels {
            let u = ulabels.iter().find(|(l, _)| *l == label).map(|(_, x)| *x);
            t.add_row(vec![
                label,
                v.to_string(),
                pct(v, kb(all)),
                u.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                u.map(|x| pct(x, kb(uall))).unwrap_or_else(|| "-".into()),
            ]);
        }
        t.add_row(vec![
            format!("{}: all mapped", kind.name()),
            kb(all).to_string(),
            "100%".into(),
            uniq.map(|_| kb(uall).to_string()).unwrap_or_else(|| "-".into()),
            uniq.map(|_| "100%".to_string()).unwrap_or_else(|| "-".into()),
        ]);
    }
    println!(
        "total: {what} of {} processes, {} kB mapped ({how}; {:.1} ms)",
        report.processes.len(),
        all_kb(tot),
        elapsed.as_secs_f64() * 1e3
    );
    println!("{t}");
}

fn run_files(args: &Args) -> Result<()> {
    let mut views: Vec<FileView> = Vec::new();
    for p in &args.file {
        views.push(inspect::inspect_file(p)?);
    }
    let pfn = views.iter().all(|v| v.folios_kb.is_some());
    if !pfn {
        eprintln!(
            "hugetext: note: page frame numbers are hidden without CAP_SYS_ADMIN: cached kB only \
             (from mincore), folio sizes unknown; run as root for folio sizes"
        );
    }
    if args.json {
        print_json(&FilesJson::of(&views), args.watch.is_some())?;
        return Ok(());
    }
    let mut sizes: Vec<u64> = views
        .iter()
        .filter_map(|v| v.folios_kb.as_ref())
        .flat_map(|f| f.keys().copied())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut header: Vec<String> = vec!["file".into(), "size kB".into(), "cached kB".into()];
    header.extend(sizes.iter().map(|s| format!("in {} folios", size_label(*s))));
    header.push(match hugetext::kernel::huge_unit() {
        (_, hugetext::elf::HugeUnit::Pmd) => "PMD windows in one folio".into(),
        (unit, _) => format!("{} windows in one folio", size_label(unit as u64 / 1024)),
    });
    let contpte = views.iter().any(|v| v.contpte_kb.is_some());
    if contpte {
        header.push("contpte-able kB".into());
    }
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let mut t = new_table(&hdr);
    if let Some(c) = t.column_mut(0) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    for v in &views {
        let mut row = vec![
            v.path.display().to_string(),
            v.size.div_ceil(1024).to_string(),
            v.cached_kb.to_string(),
        ];
        for s in &sizes {
            row.push(match &v.folios_kb {
                Some(f) => {
                    let n = f.get(s).copied().unwrap_or(0);
                    format!("{n} ({})", pct(n, v.cached_kb))
                }
                None => "?".into(),
            });
        }
        row.push(if pfn {
            format!("{}/{}", v.unit_windows_huge, v.unit_windows)
        } else {
            "?".into()
        });
        if contpte {
            row.push(
                v.contpte_kb
                    .map_or("?".into(), |k| format!("{k} ({})", pct(k, v.cached_kb))),
            );
        }
        t.add_row(row);
    }
    println!("{t}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::cont_order;

    #[test]
    fn cont_sizes() {
        assert_eq!(cont_order("64K").unwrap(), 4);
        assert_eq!(cont_order("64kB").unwrap(), 4);
        assert_eq!(cont_order("8k").unwrap(), 1);
        assert_eq!(cont_order("2M").unwrap(), 9);
        assert_eq!(cont_order("65536").unwrap(), 4);
        for bad in ["4K", "3K", "48K", "4M", "abc", "", "-64K", "99999999999999999999G"] {
            let e = cont_order(bad).unwrap_err().to_string();
            assert!(e.starts_with("--cont"), "{bad}: {e}");
        }
    }
}
