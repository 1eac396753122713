//! `hugetext explain`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use hugetext::explain::{self, Report, SystemFacts};
use hugetext::{elf, procfs, run::remap};

use super::exit_with;

/// The long help of `hugetext explain`.
const LONG_HELP: &str = "\
For the executable and every library's text mapping: how it is backed now (kB
PMD-mapped, in large folios mapped by 4 KiB page-table entries, in base pages;
file or anonymous copy from `hugetext run`) and, for what is not PMD-mapped,
the first reason that applies in the order the kernel decides, with the
evidence and the one command that fixes it:

  thp-never              THP enabled=never (stops run's anonymous copies; file text is
                         PMD-mapped regardless)
  thp-disabled-process   prctl(PR_SET_THP_DISABLE): THP_enabled: 0 in /proc/PID/status
                         (names the systemd unit when it has MemoryTHP=disable)
  madv-nohugepage        MADV_NOHUGEPAGE on the mapping (nh in smaps VmFlags)
  no-whole-window        the mapping holds no whole 2 MiB window
  layout-skewed          p_vaddr - p_offset not a multiple of 2 MiB (lld, mold) -> align
  base-unaligned         small p_align, loaded at a base that breaks congruence -> align
                         (or, for a library, GLIBC_TUNABLES=glibc.elf.thp=1 where the
                         program's ld.so knows it and THP is always)
  fs-no-large-folios     the filesystem gives no 2 MiB page-cache folios -> move it, or run
  cache-small-folios     the page cache holds the text in small folios -> warm
  mapped-before-warm     2 MiB folios in the cache, mapped by PTEs -> restart, or run
  not-faulted-yet        2 MiB folios in the cache, the rest not mapped yet: the first
                         execution maps each window with a PMD (nothing to do)
  copy-not-huge          an anonymous copy from `run` that is not in huge pages
  ok                     every whole 2 MiB window is PMD-mapped

In a virtual machine it also says what the guest can see (hypervisor flag,
itlb_multihit) and what that means. doc/explain.md describes each reason and
the JSON.

With `-- PROGRAM [ARGS]`, PROGRAM is started, explained once it has loaded its
libraries and its text stops faulting in, and then left to run: hugetext waits
for it and exits with its status (127/126 if it cannot be found or executed),
or, with --stop, ends it and exits 0. Otherwise explain exits 0, or 1 on error
(a missing pid, a zombie, a kernel thread, no permission).

Needs root for the page-cache facts (folio sizes) and the filesystem
experiment (a 2 MiB unnamed temporary file next to each program's file).";

/// Arguments of `hugetext explain`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// Explain this process (repeatable).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..), conflicts_with = "cgroup")]
    pub pid: Vec<i32>,

    /// Explain every process in this cgroup and its descendants (v1 or v2).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// With PROGRAM: end it after explaining instead of waiting for it.
    #[arg(long)]
    pub stop: bool,

    /// Print JSON (a stable reason code per mapping) instead of text.
    #[arg(long)]
    pub json: bool,

    /// Start PROGRAM with ARGS and explain it.
    #[arg(last = true, value_name = "PROGRAM [ARGS]", conflicts_with_all = ["pid", "cgroup"])]
    pub command: Vec<OsString>,
}

pub fn run(args: Args) -> Result<u8> {
    if !args.command.is_empty() {
        return run_program(&args);
    }
    let (pids, strict) = match (&args.cgroup, args.pid.is_empty()) {
        (Some(c), _) => (procfs::cgroup_pids(c)?, false),
        (None, false) => (args.pid.clone(), true),
        (None, true) => {
            return Err(exit_with(
                2,
                "name what to explain: --pid PID, --cgroup PATH or -- PROGRAM [ARGS]",
            ))
        }
    };
    let (facts, skipped) = explain::gather(&pids, strict)?;
    let report = explain::report(&SystemFacts::gather(), &facts);
    print(&report, args.json)?;
    if skipped > 0 && !args.json {
        eprintln!("note: {skipped} processes skipped (kernel threads, zombies, exited or unreadable)");
    }
    Ok(0)
}

fn run_program(args: &Args) -> Result<u8> {
    let path = remap::resolve_program(&args.command[0], std::env::var_os("PATH").as_deref())?;
    let libs = elf::resolve_deps(&path).unwrap_or_default();
    let mut child = Command::new(&path)
        .arg0(&args.command[0])
        .args(&args.command[1..])
        .spawn()
        .map_err(|e| exit_with(126, format!("{}: cannot execute: {e}", path.display())))?;
    let pid = child.id() as i32;
    let ended = |child: &mut std::process::Child| -> anyhow::Error {
        let st = child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
        exit_with(
            1,
            format!("{}: exited ({st}) before it could be explained", path.display()),
        )
    };
    if explain::wait_loaded(pid, &libs, Duration::from_secs(10)).is_err() {
        return Err(ended(&mut child));
    }
    let facts = match explain::gather(&[pid], true) {
        Ok((f, _)) => f,
        Err(_) if matches!(child.try_wait(), Ok(Some(_))) => return Err(ended(&mut child)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e.into());
        }
    };
    let report = explain::report(&SystemFacts::gather(), &facts);
    print(&report, args.json)?;
    if args.stop {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let _ = child.wait();
        return Ok(0);
    }
    let st = child.wait()?;
    use std::os::unix::process::ExitStatusExt;
    Ok(st
        .code()
        .map_or_else(|| 128 + st.signal().unwrap_or(0) as u8, |c| c as u8))
}

use std::os::unix::process::CommandExt;

fn print(r: &Report, json: bool) -> Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&hugetext::units::with_old_keys(serde_json::to_value(r)?))?
        );
        return Ok(());
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    // The running kernel's sizes (4 kB and 2 MiB on x86-64; 16 kB and 32 MiB
    // on a 16 KiB-page arm64 kernel) and its unit of huge text (the PMD, or
    // the 2 MiB contpte block with 64 KiB pages, whose windows `explain`
    // counts and whose mapped kB `unit_mapped_kb` holds).
    let page_kb = hugetext::kernel::page_size() / 1024;
    let (unit, kind) = hugetext::kernel::huge_unit();
    let unit_w = hugetext::units::human(unit as u64);
    for p in &r.processes {
        println!("{}", p.summary);
        for m in &p.mappings {
            let backing = match (m.backing, &m.store_copy) {
                ("anon-copy", _) => " (anonymous copy)".to_string(),
                ("shmem", Some(c)) => format!(" (shmem: {})", c.describe()),
                ("shmem", None) => " (shmem)".to_string(),
                _ => String::new(),
            };
            println!("  {}{backing} {}-{}", m.path, m.start, m.end);
            let mut now = format!("    now: {} kB {}", m.unit_mapped_kb, kind.mapped());
            if m.pte_large_kb > 0 {
                now.push_str(&format!(", {} kB in large folios mapped by PTEs", m.pte_large_kb));
            }
            if m.base_kb > 0 {
                now.push_str(&format!(", {} kB in {page_kb} kB pages", m.base_kb));
            }
            if m.pte_unknown_kb > 0 {
                now.push_str(&format!(
                    ", {} kB mapped by PTEs (folio sizes need root)",
                    m.pte_unknown_kb
                ));
            }
            println!("{now}; {} whole {unit_w} windows", m.whole_windows);
            let code = serde_json::to_value(m.verdict.reason)?;
            println!("    {}: {}", code.as_str().unwrap_or("?"), m.verdict.evidence);
            if let Some(f) = &m.verdict.fix {
                println!("    fix: {f}");
            }
        }
    }
    Ok(())
}
