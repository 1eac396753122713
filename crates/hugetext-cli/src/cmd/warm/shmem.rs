//! `hugetext warm --shmem`: fill, list or empty the text store.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use hugetext::outcome::Outcome;
use hugetext::shmemstore::{self as store, Entry, State};
use hugetext::units::human;

use super::Args;

pub fn run(args: &Args) -> Result<u8> {
    let root = std::path::absolute(&args.store)?;
    if args.list {
        return list(&root, args.json);
    }
    if args.drop {
        return drop_entries(&root, &args.paths);
    }
    if args.paths.is_empty() {
        bail!("nothing to store: give files (PATH...)");
    }
    let size = match &args.shmem_size {
        Some(s) => store::parse_size_cap(s)?,
        None => store::share_of_ram(store::DEFAULT_SIZE_PCT),
    };
    let mounted = store::ensure_mounted(&root, size)?;
    if mounted.now {
        let why = match &args.shmem_size {
            Some(s) => format!("--shmem-size {s}"),
            None => format!("{}% of RAM", store::DEFAULT_SIZE_PCT),
        };
        println!(
            "mounted the text store at {} (tmpfs, {}, size {}: {why})",
            root.display(),
            store::HUGE_OPTION,
            human(size)
        );
    }
    let stale = store::remove_stale(&root)?;
    for e in &stale {
        println!("removed stale entry {} ({})", e.name, original_words(e));
    }
    let mut outcome = Outcome::NothingToDo;
    let mut added = Vec::new();
    for (path, planned) in store::expand(&args.paths, args.deps) {
        if let Err(e) = planned {
            eprintln!("hugetext: error: {e}");
            outcome = outcome.and(Outcome::Error);
            continue;
        }
        match store::add(&root, &path) {
            Err(e) => {
                eprintln!("hugetext: error: {e}");
                outcome = outcome.and(Outcome::Error);
            }
            Ok(Err(why)) => {
                eprintln!("hugetext: {}: not stored: {why}", path.display());
                let o = match why.starts_with("no whole") {
                    true => Outcome::NothingToDo,
                    false => Outcome::Impossible,
                };
                outcome = outcome.and(o);
            }
            Ok(Ok(a)) => {
                if !args.json {
                    print_added(&root, &a);
                }
                outcome = outcome.and(Outcome::Done);
                added.push(a);
            }
        }
    }
    if args.json {
        let v = serde_json::json!({
            "store": root,
            "mounted_now": mounted.now,
            "size_cap": mounted.size,
            "removed_stale": stale,
            "files": added,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else if !added.is_empty() {
        let total: u64 = added.iter().filter(|a| !a.existed).map(|a| a.bytes).sum();
        let cap = mounted
            .size
            .map(|s| format!(" (its cap: {})", human(s)))
            .unwrap_or_default();
        println!(
            "memory: {} more in the store{cap}: Shmem, kept in memory (or swapped out), never dropped like page cache; \
             hugetext warm --shmem --drop frees it",
            human(total)
        );
    }
    Ok(outcome.exit_code())
}

fn print_added(root: &Path, a: &store::Added) {
    let (unit, _) = hugetext::kernel::huge_unit();
    let w = hugetext::units::human(unit as u64);
    println!(
        "{}: {} {}",
        a.path.display(),
        if a.existed {
            "in the text store already as"
        } else {
            "copied into the text store as"
        },
        root.join(&a.entry).display()
    );
    let huge = if a.huge_windows == a.windows {
        format!("all in {w} pages")
    } else {
        format!(
            "{} of them in {w} pages (the rest small: is the store full, or memory fragmented?)",
            a.huge_windows
        )
    };
    println!(
        "  {} text windows ({}), {huge}; the copy holds {} of Shmem",
        a.windows,
        human(a.windows * unit as u64),
        human(a.bytes)
    );
}

fn original_words(e: &Entry) -> String {
    match (&e.original, e.state) {
        (Some(o), State::Stale) => format!("{} changed or is gone", o.display()),
        (Some(o), _) => o.display().to_string(),
        (None, _) => "original not recorded".into(),
    }
}

fn list(root: &Path, json: bool) -> Result<u8> {
    let entries = match std::fs::metadata(root) {
        Ok(_) => store::list(root)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => bail!("{}: {e}", root.display()),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "store": root, "entries": entries }))?
        );
        return Ok(0);
    }
    if entries.is_empty() {
        println!("{}: no entries", root.display());
        return Ok(0);
    }
    for e in &entries {
        let state = match e.state {
            State::Valid => "valid",
            State::Stale => "stale (original changed or gone: not used)",
            State::Unknown => "original not recorded (removed by the next warm --shmem)",
        };
        let orig = e
            .original
            .as_deref()
            .map(|o| o.display().to_string())
            .unwrap_or_else(|| "-".into());
        println!("{orig}  {}  {}  {state}", human(e.bytes), e.name);
    }
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    println!("{} entries, {} of Shmem", entries.len(), human(total));
    Ok(0)
}

fn drop_entries(root: &Path, paths: &[PathBuf]) -> Result<u8> {
    if !root.exists() {
        println!("{}: no text store", root.display());
        return Ok(Outcome::NothingToDo.exit_code());
    }
    let wanted: Vec<PathBuf> = paths
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let gone = store::remove(root, |e| {
        wanted.is_empty() || e.original.as_ref().is_some_and(|o| wanted.contains(o))
    })?;
    for e in &gone {
        println!("removed {} ({})", e.name, original_words(e));
    }
    let freed: u64 = gone.iter().map(|e| e.bytes).sum();
    println!("{} entries removed, {} freed", gone.len(), human(freed));
    Ok(match gone.is_empty() {
        true => Outcome::NothingToDo,
        false => Outcome::Done,
    }
    .exit_code())
}
