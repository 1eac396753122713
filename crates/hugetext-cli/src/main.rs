//! The `hugetext` command: a thin shell over the `hugetext` library.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;

/// The exit-status convention (README.md, "Exit status"), shown by
/// `hugetext --help` and in the man page.
const EXIT_STATUS: &str = "\
Exit status of the commands that change state (align, warm):
  0  done: it did what was asked
  1  error: it failed; what could be left unchanged was
  2  nothing to do: already as asked, or nothing it applies to
  3  impossible here: the kernel, the filesystem or the file rules it out (the reason
     is printed)
Over several files, an error wins, then done, then impossible. Bad arguments exit 2
before anything is done. `run` exits with PROGRAM's status (127/126 when it cannot be
found or executed, 125 when hugetext fails before it starts). The reading commands
(inspect, doctor, explain, check, profile, bench) exit 0 or 1 (bench ab: the command's own status when
it fails). `agent` exits 0 when a signal stops it, 1 when it cannot start (bad config, address
in use).";

/// Put program text on 2 MiB pages, from user space, and measure it.
///
/// hugetext shows how code is backed (inspect, doctor), makes ELF files
/// PMD-mappable (check, align), fills the page cache with 2 MiB folios so
/// every later process maps its text with PMDs (warm), remaps a program's
/// text at start (run), measures the effect (bench), and exports it all to
/// Prometheus while keeping programs warm (agent).
#[derive(Parser, Debug)]
#[command(name = "hugetext", version, propagate_version = true, after_help = EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show how text (or all memory) of processes, cgroups, files or the system is backed.
    Inspect(cmd::inspect::Args),
    /// Report what this kernel can do for huge text, and what it means for you.
    Doctor(cmd::doctor::Args),
    /// Say why each text mapping of a process is or is not on huge pages, and the command that fixes it.
    Explain(cmd::explain::Args),
    /// Tell whether ELF files' text can be PMD-mapped, and what `align` would gain.
    Check(cmd::check::Args),
    /// Rewrite an ELF file so its read-only segments can be PMD-mapped.
    Align(cmd::align::Args),
    /// Fill the page cache with PMD-sized folios for programs' text.
    Warm(cmd::warm::Args),
    /// Which text is hot, per 2 MiB window, and the iTLB misses huge pages would save.
    Profile(cmd::profile::Args),
    #[command(about = RUN_ABOUT)]
    Run(cmd::run::Args),
    /// Serve Prometheus metrics about huge-page text, and keep a policy's programs warm.
    Agent(cmd::agent::Args),
    /// Benchmarks: the Linux large-folio patches' micro-benchmarks and A/B runs of real programs.
    Bench(cmd::bench::Args),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(cmd::completions::Args),
    /// Print the man page (roff) to stdout.
    #[command(hide = true)]
    Man,
}

/// What `hugetext run` does (its line in `--help`).
const RUN_ABOUT: &str = "Run a program with its text (and its libraries') remapped onto huge pages";

/// The command line. `hugetext run` starts every program it wraps, so its
/// own start counts: its parser is built alone, as the whole command's
/// `run` (building every subcommand's arguments took a fifth of `run`'s
/// page faults).
fn parse() -> Cli {
    parse_from(std::env::args_os().collect()).unwrap_or_else(|e| e.exit())
}

/// [`parse`] of `args` (the program's name first).
fn parse_from(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    use clap::{Args, FromArgMatches};
    if !matches!(args.get(1), Some(a) if a == "run") {
        return Cli::try_parse_from(args);
    }
    let run = cmd::run::Args::augment_args(clap::Command::new("run"))
        .about(RUN_ABOUT)
        .long_about(None);
    let matches = clap::Command::new("hugetext")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .subcommand_required(true)
        .subcommand(run)
        .try_get_matches_from(args)?;
    let sub = matches.subcommand_matches("run").expect("the one subcommand, required");
    Ok(Cli {
        command: Command::Run(cmd::run::Args::from_arg_matches(sub)?),
    })
}

/// The routes `hugetext run --strategy` accepts, as its parser lists them
/// (what `bench startup` measures by default).
fn run_routes() -> Vec<String> {
    let cli = Cli::command();
    cli.find_subcommand("run")
        .and_then(|run| run.get_arguments().find(|a| a.get_id() == "strategy"))
        .map(|a| {
            a.get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn main() -> ExitCode {
    cmd::install_handlers();
    let cli = parse();
    let result = match cli.command {
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Align(a) => cmd::align::run(a),
        Command::Warm(a) => cmd::warm::run(a),
        Command::Profile(a) => cmd::profile::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Bench(a) => cmd::bench::run(a, &run_routes()),
        Command::Completions(a) => cmd::completions::run(a, Cli::command()),
        Command::Man => cmd::man(Cli::command()),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = cmd::exit_code_of(&e);
            eprintln!("hugetext: error: {}", cmd::one_line(&e));
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run`'s parser built alone answers as the whole command does: the
    /// same arguments, the same help, version and errors.
    #[test]
    fn run_alone_parses_as_the_whole_command() {
        let cases: &[&[&str]] = &[
            &["run", "--", "/bin/true"],
            &[
                "run",
                "-v",
                "--strategy",
                "copy",
                "--include",
                "lib.*",
                "--",
                "prog",
                "-x",
                "--y",
            ],
            &["run", "--inherit", "--no-dlopen", "--hot", "p.hot", "--", "prog"],
            &["run", "--help"],
            &["run", "-h"],
            &["run", "--version"],
            &["run"],
            &["run", "--strategy", "bogus", "--", "x"],
            &["run", "--bogus"],
        ];
        for case in cases {
            let argv: Vec<std::ffi::OsString> = std::iter::once("hugetext")
                .chain(case.iter().copied())
                .map(Into::into)
                .collect();
            let alone = parse_from(argv.clone());
            let whole = Cli::try_parse_from(argv);
            match (alone, whole) {
                (Ok(a), Ok(w)) => assert_eq!(format!("{a:?}"), format!("{w:?}"), "{case:?}"),
                (Err(a), Err(w)) => {
                    assert_eq!(a.kind(), w.kind(), "{case:?}");
                    assert_eq!(a.render().to_string(), w.render().to_string(), "{case:?}");
                }
                (a, w) => panic!("{case:?}: alone {a:?}, whole {w:?}"),
            }
        }
    }
}
