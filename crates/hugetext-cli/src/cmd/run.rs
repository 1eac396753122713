//! `hugetext run`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::Result;
use hugetext::run::prerun;
use hugetext::run::remap::{self, Injectable, RunOptions, Strategy};
use hugetext::run::remap::{settings, Settings};

use super::exit_with;

const ENV_HELP: &str = "\
How it works: `hugetext run` replaces itself with PROGRAM (exec: same pid,
like `env` or `taskset`), with libhugetext.so injected through LD_PRELOAD.
Before main, the library remaps the text of the program and of every shared
library loaded at start, then removes itself from LD_PRELOAD and LD_AUDIT,
puts GLIBC_TUNABLES back as it was and removes every HUGETEXT_* variable
(also from /proc/PID/environ), so the program and its child processes see
the environment they would see without hugetext (unless --inherit). A wrapper without text of its own (a #! script's shell, env, a
version manager's shim) that execs the real program keeps the preload for
it, up to 8 wrappers in a row; -v names the chain. What a wrapper forks
(a helper it runs first) runs plain. The library is named in LD_AUDIT too,
so objects loaded later with dlopen (libjvm.so, Python extension modules,
plugins) are remapped after the loader maps them and before they are
relocated or run (--no-dlopen: not followed); GLIBC_TUNABLES then gets room
for the libraries' static TLS (glibc.rtld.optional_static_tls, which the
loader needs when an auditor is named). Any failure leaves the
original text in place; -v says why. A running program can do the same on demand with the
C API: hugetext_remap_text() in <hugetext.h>, linked with -lhugetext.

Exit status: PROGRAM's own (run replaces itself with it, so the convention of
`hugetext --help` applies to what happens before: its codes would be mistaken
for PROGRAM's); 127 if it cannot be found, 126 if it cannot be executed, 125
if hugetext itself fails (e.g. libhugetext.so not found, not an ELF shared
object, or built for another machine or ELF class than PROGRAM: said in one
line), 2 for bad
arguments. What the preload could not remap is not a failure: PROGRAM runs
with its text as it was (-v says why).

Environment (read by libhugetext.so inside the program; `run` sets the first
five from its options):
  HUGETEXT_STRATEGY=auto|file|collapse|shmem|copy   routes allowed (default auto)
  HUGETEXT_ORDER=file|collapse   which zero-copy route auto tries first on
                           windows not yet in 2 MiB folios: evict + refill
                           (default) or MADV_COLLAPSE in place. run sets it
                           from both routes' costs, measured once per boot on
                           the program's filesystem (-v prints them)
  HUGETEXT_INCLUDE=RE, HUGETEXT_EXCLUDE=RE    filter mappings by path
  HUGETEXT_VERBOSE=1       one line per text mapping and a summary on stderr
  HUGETEXT_REPORT=json     one machine-readable line per pass on stderr,
                           `hugetext-report: {...}` (bytes per route, times;
                           keys in doc/run.md), with or without -v
  HUGETEXT_INHERIT=1       keep the preload in LD_PRELOAD for child processes
                           (default: removed before main, children run plain)
  HUGETEXT_GDB=1           never copy text to anonymous memory, so debuggers,
                           profilers and core dumps see the file behind all code
  HUGETEXT_PERF_MAP=0      do not write /tmp/perf-PID.map for copied text
                           (kept an hour after the process ends, then
                           removed by a later run)
  HUGETEXT_NAME=0          do not name copied text [anon:hugetext:PATH]
  HUGETEXT_DISABLE=1       the preload does nothing
  HUGETEXT_LATE=0          do not follow objects loaded after start (dlopen);
                           what --no-dlopen sets (run then sets no LD_AUDIT)
  HUGETEXT_LATE_MIN=SIZE   leave objects loaded after start alone when their
                           text has fewer bytes in whole 2 MiB windows
                           (K, M, G suffixes; default 2M: one window)
  HUGETEXT_COMPAT=no-pagemap-scan,no-populate,no-pt-reclaim   (or `all`)
                           testing/diagnosis: act as if the kernel had no
                           PAGEMAP_SCAN (before 6.7: verify with smaps totals),
                           no MADV_POPULATE_READ (before 5.14: touch pages),
                           no page-table reclaim (before 6.14: MADV_DONTNEED
                           keeps the emptied table, so `file` replaces windows
                           with mmap MAP_FIXED); these fallbacks are used
                           automatically on such kernels. `warm` reads
                           no-populate too
  (A set-ID or file-capability program that calls hugetext_remap_text()
  ignores every HUGETEXT_* variable and writes no perf map.)
  HUGETEXT_HOT=FILE        remap only the 2 MiB windows a hot-window list names
                           (written by `hugetext profile --input PROFILE
                           --hot-out FILE`; opened without following a
                           symbolic link; a list that cannot be read leaves
                           all text as it is). --hot sets the list itself,
                           compiled from the profile, as HUGETEXT_HOT_LIST
  HUGETEXT_STORE=DIR       the text store of the shmem route (--store;
                           default /run/hugetext/text)
  HUGETEXT_PRELOAD=PATH    libhugetext.so to inject (default: next to the
                           hugetext binary, ../lib/hugetext/, /usr/local/lib)

Strategies, per whole 2 MiB window of each executable mapping (`auto` tries
them in this order; a window that is already PMD-mapped is left alone):
  file      zero copy: drop the window's page-table entries, evict its small
            page-cache folios, refault through MADV_HUGEPAGE so the page cache
            holds 2 MiB folios shared with every other process (where
            MADV_DONTNEED keeps page tables, the window is also replaced by a
            new mapping of the same file range: maps may then show the text
            as up to three lines, all naming the file). Needs
            (address - file offset) to be a multiple of 2 MiB (see `hugetext
            align`) and nobody else mapping those pages.
  collapse  MADV_COLLAPSE (file text needs CONFIG_READ_ONLY_THP_FOR_FS).
  shmem     map the windows from the file's copy in the text store (a tmpfs
            mounted huge=within_size, filled by `hugetext warm --shmem`):
            2 MiB shmem pages shared by every process, on any filesystem
            and kernel. Used only while the original is unchanged (the copy
            is named by its device, inode, size, mtime and build-id) and
            only a root-owned copy nobody else can write. Needs the text
            congruent, like file.
  copy      copy into anonymous 2 MiB pages, make them r-x, and move them over
            the text with one mremap: private memory per process.

Hot windows only (--hot PROFILE): the profile (`hugetext profile -o`) names
the windows that hold the samples; run remaps those holding --hot-share of
them (default 99%) and leaves the others as they are: with the copy route,
private memory and start-up time follow the hot text, not the whole text.
Files are matched by GNU build-id, then by path (a file whose build-id
differs from the profile's is left alone); files not in the profile are left
alone. -v prints the MiB of hot windows remapped and of cold windows left.

Examples:
  hugetext run -v -- ./server --port 8080
  hugetext profile -o app.json -- ./app --typical-load
  hugetext run --hot app.json --strategy copy -v -- ./app
  hugetext run --strategy file --exclude 'libc\\.so' -- python3 app.py";

/// Which routes the preload may use: one of the strategies the abi lists
/// once (`Strategy::ALL`); the values `--strategy` accepts are their words.
#[derive(Clone, Copy, Debug)]
pub struct StrategyArg(pub Strategy);

/// `Strategy::ALL`, as the values clap lists.
static STRATEGIES: [StrategyArg; Strategy::ALL.len()] = {
    let mut all = [StrategyArg(Strategy::Auto); Strategy::ALL.len()];
    let mut i = 0;
    while i < all.len() {
        all[i] = StrategyArg(Strategy::ALL[i]);
        i += 1;
    }
    all
};

impl clap::ValueEnum for StrategyArg {
    fn value_variants<'a>() -> &'a [Self] {
        &STRATEGIES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let help = match self.0 {
            Strategy::Auto => "already huge, else file, else collapse, else shmem, else copy (per window of the unit of huge text: the PMD, 2 MiB on x86-64; the 2 MiB contpte block on arm64 with 64 KiB pages)",
            Strategy::File => "zero copy through 2 MiB page-cache folios (shared, no extra memory)",
            Strategy::Collapse => "MADV_COLLAPSE of file text (needs CONFIG_READ_ONLY_THP_FOR_FS before 7.x; PMD-size folios only, so never with 64 KiB pages)",
            Strategy::Shmem => "map the text from its copy in the text store (`hugetext warm --shmem`): 2 MiB shmem pages shared by every process, on any filesystem",
            Strategy::Copy => "copy into anonymous huge pages, mremap over the text (private memory; with 64 KiB pages 2 MiB mTHP, hugepages-2048kB/enabled not never)",
        };
        Some(clap::builder::PossibleValue::new(self.0.as_str()).help(help))
    }
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Self {
        s.0
    }
}

/// Arguments of `hugetext run`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = ENV_HELP, override_usage = "hugetext run [OPTIONS] -- PROGRAM [ARGS]...")]
pub struct Args {
    /// Routes the preload may use
    #[arg(long, alias = "route", value_enum, default_value = "auto", env = settings::STRATEGY)]
    pub strategy: StrategyArg,

    /// The text store the shmem route maps copies from (filled by `hugetext warm --shmem`)
    #[arg(long, value_name = "DIR", env = settings::STORE, default_value = hugetext::shmemstore::DEFAULT_ROOT)]
    pub store: PathBuf,

    /// Only remap mappings whose file path matches RE (literals . [..] \d \w \s * + ? ^ $ |)
    #[arg(long, value_name = "RE", env = settings::INCLUDE)]
    pub include: Option<String>,

    /// Leave mappings whose file path matches RE alone
    #[arg(long, value_name = "RE", env = settings::EXCLUDE)]
    pub exclude: Option<String>,

    /// Report on stderr, per text mapping, what was done and why not
    #[arg(short, long)]
    pub verbose: bool,

    /// Let child processes inherit the preload (default: they do not)
    #[arg(long)]
    pub inherit: bool,

    /// gdb/perf-friendly: never copy text to anonymous memory (zero-copy routes only)
    #[arg(long)]
    pub gdb: bool,

    /// Do not follow libraries loaded after start (dlopen): no LD_AUDIT
    #[arg(long)]
    pub no_dlopen: bool,

    /// The libhugetext.so to inject
    #[arg(long, value_name = "PATH", env = settings::PRELOAD)]
    pub preload: Option<PathBuf>,

    /// Remap only the windows holding the hot share of this profile's samples (`hugetext profile -o`)
    #[arg(long, value_name = "PROFILE")]
    pub hot: Option<PathBuf>,

    /// With --hot: the share of the profile's samples the remapped windows hold
    #[arg(long, value_name = "PCT", default_value = "99", requires = "hot", value_parser = super::parse_percent)]
    pub hot_share: f64,

    /// The program to run, and its arguments
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

pub fn run(args: Args) -> Result<u8> {
    let opts = RunOptions {
        strategy: args.strategy.into(),
        include: args.include,
        exclude: args.exclude,
        verbose: args.verbose,
        inherit: args.inherit,
        gdb: args.gdb,
    };
    for re in [&opts.include, &opts.exclude].into_iter().flatten() {
        remap::check_pattern(re).map_err(|e| exit_with(2, e.to_string()))?;
    }
    let preload = remap::find_preload(args.preload.as_deref()).map_err(|e| exit_with(125, e.to_string()))?;
    let hot = hot_list(args.hot.as_deref(), args.hot_share, args.verbose)?;
    let (program, rest) = args.command.split_first().expect("clap requires PROGRAM");
    let path_var = std::env::var_os("PATH");
    let resolved = remap::resolve_program(program, path_var.as_deref())?;
    let machines = (
        hugetext::elf::machine_of(&resolved).unwrap_or(None),
        Some(remap::check_preload_file(&preload).map_err(|e| exit_with(125, e.to_string()))?),
    );
    if let Some(why) = hugetext::elf::preload_mismatch(machines.0, machines.1) {
        return Err(exit_with(
            125,
            format!(
                "{}: {why} ({}; give one built for the program's machine with --preload)",
                program.to_string_lossy(),
                preload.display()
            ),
        ));
    }
    let shown = program.to_string_lossy();
    // A launcher that runs its command in another root (chroot, nsenter,
    // unshare): the preload must exist there, or the loader of every
    // program inside complains and nothing is remapped.
    let new_root = prerun::new_root(program, rest);
    if let Some(root) = &new_root {
        if !prerun::exists_in_root(root, &preload) {
            eprintln!("hugetext: {}", prerun::root_line(&shown, root, &preload));
            let err = std::process::Command::new(&resolved).arg0(program).args(rest).exec();
            return Err(match err.kind() {
                std::io::ErrorKind::NotFound => exit_with(127, format!("{shown}: cannot execute: {err}")),
                _ => exit_with(126, format!("{shown}: cannot execute: {err}")),
            });
        }
    }
    if remap::injectable(&resolved) == Injectable::Static {
        // The advice names the file (a bare name found on PATH is no path
        // `warm` or `align` can open).
        let file = resolved.display().to_string();
        let advice = prerun::static_advice(&file, prerun::file_text(&resolved).as_ref());
        eprintln!("hugetext: warning: {shown} is statically linked: libhugetext.so cannot be injected, it runs unchanged; {advice}");
    }
    if let Some(facts) = prerun::exec_facts(&resolved) {
        match prerun::secure_exec(&facts) {
            Some(why) => eprintln!("hugetext: warning: {}", prerun::secure_warning(&shown, why)),
            None if args.verbose => {
                if let Some(note) = prerun::not_secure_note(&shown, &facts) {
                    eprintln!("hugetext: {note}");
                }
            }
            None => {}
        }
    }
    let script = remap::script_interpreter(&resolved);
    if args.verbose {
        if let Some(interp) = &script {
            eprintln!(
                "hugetext: {} is a script for {interp}: the preload follows launchers without text of their own, and the processes they start, to the program that has text (at most {} programs with text but no whole window on the way)",
                resolved.display(),
                remap::MAX_WRAPPERS
            );
        }
    }
    if args.verbose && args.inherit {
        match &script {
            Some(_) => {
                eprintln!("hugetext: --inherit: what each child process costs depends on the program the script runs")
            }
            None => {
                let files = prerun::start_text(&resolved);
                let cost = prerun::copy_cost(&files, opts.strategy, opts.gdb);
                eprintln!(
                    "hugetext: {}",
                    prerun::inherit_cost_line(&resolved.display().to_string(), &files, cost)
                );
            }
        }
    }
    // Perf maps of processes that ended long ago: a few per run.
    let stamp = prerun::reap_stamp();
    let reaped = prerun::reap_perf_maps(
        std::path::Path::new("/tmp"),
        stamp.as_deref(),
        std::time::SystemTime::now(),
    )
    .unwrap_or(0);
    if args.verbose && reaped > 0 {
        eprintln!("hugetext: removed {reaped} perf maps (/tmp/perf-PID.map) of processes that ended over an hour ago");
    }
    // The preload's settings, written once below (`settings_environment`);
    // `env` gathers the loader's variables.
    let mut settings = Settings::default();
    let mut env = vec![remap::environment(
        &opts,
        &preload,
        std::env::var_os("LD_PRELOAD").as_deref(),
        &mut settings,
    )
    .map_err(|e| exit_with(125, e.to_string()))?];
    if naming(args.verbose) {
        settings.name = Some(false);
    }
    if opts.strategy == remap::Strategy::Auto {
        if let Some((order, line)) = hugetext::run::routecost::for_program(&resolved) {
            if args.verbose {
                eprintln!("hugetext: {line}");
            }
            settings.order = Some(order);
        }
    }
    settings.hot_list = hot.as_deref().map(str::as_bytes);
    let store = std::path::absolute(&args.store)?;
    if store != std::path::Path::new(hugetext::shmemstore::DEFAULT_ROOT) {
        use std::os::unix::ffi::OsStrExt;
        settings.store = Some(store.as_os_str().as_bytes());
    }
    // The small audit module (it needs no library), kept in the runtime
    // directory; libhugetext.so itself where it cannot be kept, or where
    // the program runs in another root (which has the preload, bound in,
    // but not the runtime directory).
    let module = match (args.no_dlopen, &new_root) {
        (false, None) => hugetext::run::auditmod::path(),
        _ => None,
    };
    // An auditor the loader cannot load is ignored with ld.so's own message:
    // say it in one line up front and name no LD_AUDIT instead.
    let missing = match (args.no_dlopen, &script, &module) {
        (false, None, None) => prerun::audit_missing(&resolved, &preload),
        _ => Vec::new(),
    };
    if let Some(line) = prerun::audit_line(&preload, &missing) {
        eprintln!("hugetext: {line}");
    }
    let no_audit = args.no_dlopen || !missing.is_empty();
    env.extend(remap::late_environment(
        module.as_deref().unwrap_or(&preload),
        no_audit,
        std::env::var_os("LD_AUDIT").as_deref(),
        &mut settings,
    ));
    if !no_audit {
        // Room in the static TLS block for the libraries loaded at start
        // (glibc sets it up before loading them when an auditor is named).
        // (A script leads to a program known only when it runs.)
        let need = match script {
            Some(_) => remap::WRAPPED_STATIC_TLS,
            None => remap::initial_static_tls(&resolved, &preload),
        };
        env.extend(remap::tunables_environment(
            std::env::var_os("GLIBC_TUNABLES").as_deref(),
            need,
            &mut settings,
        ));
    }
    env.extend(remap::settings_environment(&settings));
    let err = std::process::Command::new(&resolved)
        .arg0(program)
        .args(rest)
        .envs(env)
        .exec();
    Err(match err.kind() {
        std::io::ErrorKind::NotFound => exit_with(127, format!("{shown}: cannot execute: {err}")),
        _ => exit_with(126, format!("{shown}: cannot execute: {err}")),
    })
}

/// `--hot PROFILE`: the hot-window list the preload reads, compiled from the
/// profile (exit 125 when it cannot be read); `-v` says what it holds.
fn hot_list(profile: Option<&std::path::Path>, share: f64, verbose: bool) -> Result<Option<String>> {
    let Some(path) = profile else {
        return Ok(None);
    };
    let (list, files) = hugetext::profile::load_hot_list(path, share).map_err(|e| exit_with(125, e.to_string()))?;
    let window = hugetext::profile::window_size();
    if verbose {
        let bytes: u64 = files.iter().flat_map(|f| &f.ranges).map(|r| r[1] - r[0]).sum();
        eprintln!(
            "hugetext: {}: {} windows in {} files hold {}% of the profile's samples ({} MiB): only they are remapped",
            path.display(),
            bytes / window,
            files.len(),
            share * 100.0,
            bytes >> 20
        );
    }
    Ok(Some(list))
}

/// Once per run, not in every process: where the kernel cannot name
/// anonymous memory, the preload is told not to try (true), and `-v` says
/// so.
fn naming(verbose: bool) -> bool {
    if !prerun::naming_off() {
        return false;
    }
    if verbose {
        eprintln!(
            "hugetext: this kernel cannot name anonymous memory (built without CONFIG_ANON_VMA_NAME): text copied to anonymous memory shows unnamed in /proc/PID/maps"
        );
    }
    true
}
