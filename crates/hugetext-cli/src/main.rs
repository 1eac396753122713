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
    /// Run a program with its text (and its libraries') remapped onto huge pages.
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
    let cli = Cli::parse();
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
