//! `hugetext agent`: serve Prometheus metrics about huge-page text and keep
//! the programs a policy names warm (the library's `agent` module).

use std::path::PathBuf;

use anyhow::Result;
use hugetext::agent::{self, Agent, Options};

/// What `hugetext agent --help` prints after the options.
const ABOUT: &str = "\
A long-running daemon. GET /metrics returns a page built at scrape time by the \
code behind `hugetext inspect`: text bytes by kind (file, anon) and class (base page, \
PTE-mapped large folio by size, PMD-mapped) and the PMD-mapped ratio, per file mapped as \
text and per cgroup (never per pid; at most max_series series per family, the rest \
counted in hugetext_series_dropped_total); the page-cache state of the policy's files; \
the kernel's file-THP counters from /proc/vmstat; the agent's scrape duration, errors \
and actions; in the OpenMetrics format to a scraper that asks for it (Prometheus \
does), else in the classic Prometheus text format. GET /healthz returns ok.

With --config (the warm config file; its [agent] table adds globs, an auto rule, the \
rate limit and the listen address), the agent keeps the listed programs warm: when a \
process exits or a listed file changes (package upgrade), it warms each file no running \
process maps, within the memory guard (max_mem) and the rate limit, and logs and counts \
each action. It never touches a running process and never replaces a file.

SIGHUP reloads the config (a bad one is reported and the old one stays in force); \
SIGTERM and SIGINT stop it. It needs no root: run it as a user of its own with four \
capabilities (CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_NET_ADMIN; the \
systemd unit does); with fewer it still serves, and says at startup which capability \
each missing feature needs. At most 128 connections (fewer under a low open-file \
limit), each closed after 10 s without a whole request header. See doc/agent.md.";

/// Arguments of `hugetext agent`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = ABOUT)]
pub struct Args {
    /// The config file: the programs to keep warm and the [agent] settings
    /// (TOML, the format of `warm --config`); e.g. /etc/hugetext/warm.conf.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Where to serve /metrics and /healthz [default: the config's listen,
    /// else 127.0.0.1:9437].
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,

    /// Check the config and print the policy's files, then exit.
    #[arg(long)]
    pub check_config: bool,
}

pub fn run(args: Args) -> Result<u8> {
    if args.check_config {
        let cfg = agent::load_config(args.config.as_deref())?;
        let mut keeper = agent::actions::Keeper::new(&cfg);
        let found = keeper.candidates_until(&cfg, &|| false);
        for f in &found.files {
            println!("{}", f.display());
        }
        for m in &found.missing {
            eprintln!("hugetext: note: {m}: no such file");
        }
        for c in &found.cut_short {
            eprintln!("hugetext: note: {c}");
        }
        return Ok(0);
    }
    let a = Agent::start(&Options {
        config: args.config,
        listen: args.listen,
    })?;
    for line in a.startup_report() {
        agent::actions::log(&line);
    }
    a.run_until_signalled()?;
    Ok(0)
}
