//! `run`: locate the preload library (`libhugetext.so`), build the
//! environment that injects it into a program, and verify how a running
//! process's text ended up backed.
//!
//! The remapping itself happens inside the program, in the preload library
//! (crate `hugetext-preload`); this module is everything `hugetext run`
//! needs around it. See doc/run.md.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub use crate::error::LaunchError;
use crate::{procfs, Error, Result};
use hugetext_abi::env;
/// The preload's settings, one typed record ([`settings_environment`] writes it).
pub use hugetext_abi::settings::{self, Settings};

/// File name of the preload library.
pub const PRELOAD_NAME: &str = "libhugetext.so";

/// Environment variable that names the preload library explicitly.
pub use hugetext_abi::settings::PRELOAD as PRELOAD_ENV;

/// How the preload may make text huge-backed (`HUGETEXT_STRATEGY`; one
/// home with the preload: `hugetext_abi::env`).
pub use hugetext_abi::env::Strategy;

/// How many programs with text but no whole window one chain of launchers
/// may pass through (launchers themselves, a script's interpreter, `env`,
/// `su`, do not count).
pub use hugetext_abi::env::MAX_HOPS as MAX_WRAPPERS;

/// What `hugetext run` asks of the preload.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Which routes the preload may take (`HUGETEXT_STRATEGY`).
    pub strategy: Strategy,
    /// Only mappings whose path matches (preload regex subset).
    pub include: Option<String>,
    /// Skip mappings whose path matches.
    pub exclude: Option<String>,
    /// One line per mapping and a summary on stderr.
    pub verbose: bool,
    /// Keep the preload in `LD_PRELOAD` for child processes.
    pub inherit: bool,
    /// Never move text to anonymous memory (debuggers and profilers keep
    /// seeing the file behind every code address).
    pub gdb: bool,
}

/// Where `hugetext run` looks for the preload library, in order:
/// `$HUGETEXT_PRELOAD` (an explicit choice wins), next to the `hugetext`
/// binary (a cargo build or an unpacked release), `../lib/hugetext/` from the
/// binary's directory (an installed prefix), then `/usr/local/lib`.
fn preload_candidates(explicit: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = explicit {
        v.push(p.to_path_buf());
        return v;
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        v.push(dir.join(PRELOAD_NAME));
        v.push(dir.join("../lib/hugetext").join(PRELOAD_NAME));
    }
    v.push(Path::new("/usr/local/lib").join(PRELOAD_NAME));
    v
}

/// Find the preload library (see [`preload_candidates`]); `explicit` is the
/// value of `$HUGETEXT_PRELOAD` or `--preload`. The result is absolute.
pub fn find_preload(explicit: Option<&Path>) -> Result<PathBuf> {
    let exe = std::env::current_exe().ok();
    let cands = preload_candidates(explicit, exe.as_deref());
    for c in &cands {
        if c.is_file() {
            let abs = c.canonicalize().map_err(|e| Error::io(c, e))?;
            check_preload_path(&abs)?;
            return Ok(abs);
        }
    }
    if let Some(p) = explicit {
        return Err(Error::Invalid(format!(
            "{}: {} (from {PRELOAD_ENV} or --preload); point it at libhugetext.so",
            p.display(),
            not_a_preload(std::fs::metadata(p))
        )));
    }
    let looked: Vec<String> = cands.iter().map(|p| p.display().to_string()).collect();
    Err(Error::Other(format!(
        "cannot find {PRELOAD_NAME} (looked in {}); build it with `cargo build --release` or set {PRELOAD_ENV}=/path/to/{PRELOAD_NAME}",
        looked.join(", ")
    )))
}

/// Why a named preload that is not a regular file cannot be used, from
/// what `stat` (links followed) says of it: missing, unreadable, or a
/// device, directory, FIFO or socket. Pure.
fn not_a_preload(stat: std::io::Result<std::fs::Metadata>) -> String {
    use std::os::unix::fs::FileTypeExt;
    let m = match stat {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return "no such file".into(),
        Err(e) => return format!("cannot be read ({e})"),
    };
    let t = m.file_type();
    let what = match () {
        _ if t.is_dir() => "a directory",
        _ if t.is_char_device() => "a character device",
        _ if t.is_block_device() => "a block device",
        _ if t.is_fifo() => "a FIFO",
        _ if t.is_socket() => "a socket",
        _ => return "not a regular file".into(),
    };
    format!("{what}, not a shared object")
}

/// What the ELF header and program headers of a would-be preload say: its
/// `e_type`, whether it asks for an interpreter (`PT_INTERP`: an executable),
/// and `(e_machine, ELF64?)`. `None`: not ELF.
fn preload_facts(head: &[u8]) -> Option<(u16, bool, (u16, bool))> {
    use object::elf::{FileHeader32, FileHeader64, PT_INTERP};
    use object::read::elf::{FileHeader, ProgramHeader};
    fn facts<H: FileHeader<Endian = object::Endianness>>(head: &[u8], is_64: bool) -> Option<(u16, bool, (u16, bool))> {
        let h = H::parse(head).ok()?;
        let e = h.endian().ok()?;
        // Program headers past the bytes read count as none.
        let interp = h
            .program_headers(e, head)
            .map(|ph| ph.iter().any(|p| p.p_type(e) == PT_INTERP))
            .unwrap_or(false);
        Some((h.e_type(e), interp, (h.e_machine(e), is_64)))
    }
    match *head.get(4)? {
        object::elf::ELFCLASS64 => facts::<FileHeader64<object::Endianness>>(head, true),
        object::elf::ELFCLASS32 => facts::<FileHeader32<object::Endianness>>(head, false),
        _ => None,
    }
}

/// Why `facts` ([`preload_facts`] of a file) cannot be a preload: the
/// dynamic loader would print its own errors and run the program without
/// it. Pure.
fn preload_unfit(facts: Option<(u16, bool, (u16, bool))>) -> Option<&'static str> {
    match facts {
        None => Some("not an ELF file"),
        Some((t, _, _)) if t != object::elf::ET_DYN => Some("an ELF file but not a shared object"),
        Some((_, true, _)) => Some("an ELF executable (it has an interpreter), not a shared object"),
        Some(_) => None,
    }
}

/// Check that `path` can be preloaded: an ELF shared object (not a
/// script, not an executable). Returns its `(e_machine, ELF64?)` for the
/// comparison with the program's ([`crate::elf::preload_mismatch`]).
pub fn check_preload_file(path: &Path) -> Result<(u16, bool)> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)
        .and_then(|f| f.take(4096).read_to_end(&mut head))
        .map_err(|e| Error::io(path, e))?;
    let facts = preload_facts(&head);
    if let Some(why) = preload_unfit(facts) {
        return Err(Error::Invalid(format!(
            "{}: {why}, so it cannot be preloaded; point --preload (or {PRELOAD_ENV}) at libhugetext.so",
            path.display()
        )));
    }
    Ok(facts.expect("checked").2)
}

/// `LD_PRELOAD` splits on spaces and colons: such a path cannot be preloaded.
fn check_preload_path(p: &Path) -> Result<()> {
    if p.as_os_str().as_bytes().iter().any(|&c| c == b':' || c == b' ') {
        return Err(Error::Invalid(format!(
            "{}: the path contains ':' or a space, which LD_PRELOAD cannot express; install the library elsewhere",
            p.display()
        )));
    }
    Ok(())
}

/// Check that `re` is a regular expression the preload understands
/// ([`hugetext_abi::pattern::check`]: literals, `.`, bracket classes, the
/// escapes `\d \w \s` and escaped punctuation, `* + ?`, `^ $` and
/// top-level `|`; no groups, no counted repetition).
pub fn check_pattern(re: &str) -> Result<()> {
    use hugetext_abi::pattern::{self, PatternError};
    pattern::check(re.as_bytes()).map_err(|e| {
        Error::Invalid(match e {
            PatternError::Syntax(what) => format!("invalid regular expression {re:?}: {what}"),
            PatternError::Unsupported(what) => format!(
                "regular expression {re:?} uses {what}, which the preload does not support (supported: {})",
                pattern::SUPPORTED
            ),
        })
    })
}

/// The environment changes that inject the preload with `opts`: the
/// `LD_PRELOAD` pair to set, and `opts` in `settings` (written with
/// [`settings_environment`]). `current_preload` is the program's inherited
/// `LD_PRELOAD`; the preload goes first so its constructor sees the others'
/// libraries mapped (all libraries are mapped before any constructor runs
/// anyway).
pub fn environment<'a>(
    opts: &'a RunOptions,
    preload: &Path,
    current_preload: Option<&OsStr>,
    settings: &mut Settings<'a>,
) -> Result<(OsString, OsString)> {
    check_preload_path(preload)?;
    for re in [&opts.include, &opts.exclude].into_iter().flatten() {
        check_pattern(re)?;
    }
    let mut ld = OsString::from(preload.as_os_str());
    if let Some(cur) = current_preload.filter(|c| !c.is_empty()) {
        // The user's own list as it is (the preload takes out its own
        // entry and the `:` after it, leaving the user's value exactly);
        // an older hugetext is dropped from it.
        let older = env::preload_entries(cur.as_bytes()).any(env::is_hugetext_preload);
        for item in env::preload_entries(cur.as_bytes()).filter(|_| older) {
            if env::is_hugetext_preload(item) {
                continue;
            }
            ld.push(":");
            ld.push(OsStr::from_bytes(item));
        }
        if !older {
            ld.push(":");
            ld.push(cur);
        }
    }
    // Set even when empty or off: values inherited from the caller's
    // environment do not apply.
    let pattern = |re: &'a Option<String>| Some(re.as_deref().unwrap_or("").as_bytes());
    settings.strategy = Some(opts.strategy);
    settings.include = pattern(&opts.include);
    settings.exclude = pattern(&opts.exclude);
    settings.inherit = Some(opts.inherit);
    settings.gdb = Some(opts.gdb);
    // The slot the preload fills when it follows a wrapper's exec.
    settings.via = Some(b"");
    if opts.verbose {
        settings.verbose = Some(true);
    }
    Ok((OsString::from(env::LD_PRELOAD), ld))
}

/// The environment variables that give the preload `settings`: the one
/// place the library writes them ([`Settings::write`] formats each).
pub fn settings_environment(settings: &Settings) -> Vec<(OsString, OsString)> {
    use std::os::unix::ffi::OsStringExt;
    let mut vars = Vec::new();
    settings.write(|name, value| vars.push((OsString::from(name), OsString::from_vec(value.to_vec()))));
    vars
}

/// The environment that makes the preload follow objects loaded after start:
/// the library named in `LD_AUDIT` too (after entries that were there, less
/// an older hugetext: the pair returned), or `HUGETEXT_LATE=0` with
/// `--no-dlopen` (in `settings`).
pub fn late_environment(
    preload: &Path,
    off: bool,
    current: Option<&OsStr>,
    settings: &mut Settings,
) -> Option<(OsString, OsString)> {
    settings.late = Some(!off);
    if off {
        return None;
    }
    let mut v = OsString::new();
    let cur = current.map(|c| c.as_bytes()).filter(|c| !c.is_empty());
    match cur {
        // The user's own list as it is (see `environment`).
        Some(c) if !env::preload_entries(c).any(env::is_hugetext_preload) => {
            v.push(OsStr::from_bytes(c));
            v.push(":");
        }
        _ => {
            for item in cur.into_iter().flat_map(env::preload_entries) {
                if !env::is_hugetext_preload(item) {
                    v.push(OsStr::from_bytes(item));
                    v.push(":");
                }
            }
        }
    }
    v.push(preload.as_os_str());
    Some((OsString::from(env::LD_AUDIT), v))
}

/// Bytes of static TLS (each `PT_TLS` segment's size rounded up to its
/// alignment) of a 64-bit ELF file; 0 for anything else.
fn tls_bytes(path: &Path) -> u64 {
    use object::elf;
    use object::read::elf::{FileHeader, ProgramHeader};
    // Only the header and the program headers are read (libLLVM is 110 MB:
    // reading it whole cost every `run` of clang 100 ms).
    let Ok(file) = crate::openfile::open_regular(path, crate::openfile::Follow::Yes) else {
        return 0;
    };
    let data = object::ReadCache::new(&file);
    let Ok(h) = elf::FileHeader64::<object::Endianness>::parse(&data) else {
        return 0;
    };
    let Ok(endian) = h.endian() else { return 0 };
    let Ok(phdrs) = h.program_headers(endian, &data) else {
        return 0;
    };
    phdrs
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_TLS)
        .map(|p| p.p_memsz(endian).next_multiple_of(p.p_align(endian).max(1)))
        .sum()
}

/// Static TLS that the program's libraries loaded at start (and the
/// preload) need, in bytes. With an auditor, glibc sets up the static TLS
/// block before it loads them (it needs TLS for the auditor's own libc), so
/// their initial-exec TLS must fit in the block's optional surplus
/// (`glibc.rtld.optional_static_tls`, 512 bytes by default): rustc's
/// librustc_driver needs 23 KiB and would fail to start ("cannot allocate
/// memory in static TLS block"). 0 when the libraries cannot be resolved.
pub fn initial_static_tls(program: &Path, preload: &Path) -> u64 {
    let Ok(deps) = crate::elf::deps::deps_static_tls(program) else {
        return 0;
    };
    deps + tls_bytes(preload)
}

/// Static TLS room `run` asks for when the program is a `#!` script: the
/// program it leads to is not known before it runs, so room for what large
/// programs' libraries need (rustc's `librustc_driver` has 23 KiB). Only
/// reserved address space in each thread's TLS block: pages never touched
/// cost no memory.
pub const WRAPPED_STATIC_TLS: u64 = 32 << 10;

/// glibc's default `glibc.rtld.optional_static_tls`.
const OPTIONAL_STATIC_TLS: u64 = 512;

/// The `GLIBC_TUNABLES` value that makes room for `need` bytes of the
/// libraries' static TLS ([`initial_static_tls`]) on top of the default
/// surplus, keeping what `current` sets (a value the user chose for the
/// same tunable wins). `None`: nothing to change.
fn tunables_with_static_tls(current: Option<&OsStr>, need: u64) -> Option<OsString> {
    const NAME: &str = env::STATIC_TLS_TUNABLE;
    let cur = current.map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    if need == 0 || cur.split(':').any(|t| t.split('=').next() == Some(NAME)) {
        return None;
    }
    let add = format!("{NAME}={}", OPTIONAL_STATIC_TLS + need);
    Some(OsString::from(if cur.is_empty() {
        add
    } else {
        format!("{cur}:{add}")
    }))
}

/// The environment for [`tunables_with_static_tls`]: the new
/// `GLIBC_TUNABLES` and, so that the preload can put the old value back for
/// the program's children, what it was (in `settings`: unset, or the length
/// of the old value). `None`: nothing to change.
pub fn tunables_environment(
    current: Option<&OsStr>,
    need: u64,
    settings: &mut Settings,
) -> Option<(OsString, OsString)> {
    let t = tunables_with_static_tls(current, need)?;
    settings.tunables = Some(current.map_or(env::Tunables::Unset, |c| env::Tunables::Len(c.len())));
    Some((OsString::from(env::GLIBC_TUNABLES), t))
}

/// Why a path cannot be executed (the reason in
/// [`LaunchError::NotExecutable`]).
#[derive(Debug, thiserror::Error)]
enum NotExecutable {
    #[error("{0}")]
    Stat(std::io::Error),
    #[error("is a directory")]
    Directory,
    #[error("not a regular file")]
    NotRegular,
    #[error("permission denied (not executable)")]
    NoExecBit,
}

fn executable(p: &Path) -> std::result::Result<(), NotExecutable> {
    let md = std::fs::metadata(p).map_err(NotExecutable::Stat)?;
    if md.is_dir() {
        return Err(NotExecutable::Directory);
    }
    if !md.is_file() {
        return Err(NotExecutable::NotRegular);
    }
    if md.permissions().mode() & 0o111 == 0 {
        return Err(NotExecutable::NoExecBit);
    }
    Ok(())
}

/// Resolve `program` like `execvp`: a name with a `/` is used as is,
/// otherwise the first executable file of that name in `path` (`$PATH`).
pub fn resolve_program(program: &OsStr, path: Option<&OsStr>) -> std::result::Result<PathBuf, LaunchError> {
    let shown = program.to_string_lossy().into_owned();
    if program.is_empty() {
        return Err(LaunchError::NotFound(shown));
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        if !p.exists() {
            return Err(LaunchError::NoSuchFile(shown));
        }
        executable(&p).map_err(|why| LaunchError::NotExecutable(shown, why.to_string()))?;
        return Ok(p);
    }
    let path = path.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    let mut denied = None;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let cand = dir.join(program);
        if !cand.exists() {
            continue;
        }
        match executable(&cand) {
            Ok(()) => return Ok(cand),
            Err(why) => {
                denied.get_or_insert(why);
            }
        }
    }
    match denied {
        Some(why) => Err(LaunchError::NotExecutable(shown, why.to_string())),
        None => Err(LaunchError::NotFound(shown)),
    }
}

/// The interpreter line of a `#!` script (`/bin/sh`, `/usr/bin/env bash`),
/// `None` for anything else.
pub fn script_interpreter(program: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::with_capacity(256);
    std::fs::File::open(program)
        .ok()?
        .take(256)
        .read_to_end(&mut head)
        .ok()?;
    let line = head.strip_prefix(b"#!")?.split(|&c| c == b'\n').next()?;
    let line = String::from_utf8_lossy(line).trim().to_string();
    (!line.is_empty()).then_some(line)
}

/// Whether the dynamic loader will honour `LD_PRELOAD` for a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injectable {
    /// A dynamically linked ELF program (or a script: its interpreter is).
    Yes,
    /// Statically linked: there is no dynamic loader to inject anything.
    Static,
}

/// Look at a program's ELF header to tell whether the preload can reach it
/// (secure execution: [`crate::run::prerun::secure_exec`]). Files that are not
/// ELF (scripts) count as injectable.
pub fn injectable(program: &Path) -> Injectable {
    use object::elf::{FileHeader64, PT_INTERP};
    use object::read::elf::{FileHeader, ProgramHeader};
    use std::io::Read;
    let mut head = Vec::with_capacity(65536);
    let Ok(f) = std::fs::File::open(program) else {
        return Injectable::Yes;
    };
    if f.take(65536).read_to_end(&mut head).is_err() {
        return Injectable::Yes;
    }
    let Ok(hdr) = FileHeader64::<object::Endianness>::parse(head.as_slice()) else {
        return Injectable::Yes;
    };
    let Ok(endian) = hdr.endian() else {
        return Injectable::Yes;
    };
    let Ok(phdrs) = hdr.program_headers(endian, head.as_slice()) else {
        return Injectable::Yes;
    };
    if phdrs.iter().any(|p| p.p_type(endian) == PT_INTERP) {
        Injectable::Yes
    } else {
        Injectable::Static
    }
}

/// One executable mapping of a process, as `/proc/PID/smaps` shows it
/// ([`procfs::read_smaps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextMapping {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// The file behind the code. For text the preload copied into anonymous
    /// memory: the name it gave (`[anon:hugetext:PATH]`), or, on kernels
    /// without anonymous VMA names, the file of the adjacent text mapping.
    pub path: String,
    /// True for text that now lives in anonymous memory (the `copy` route).
    pub copied: bool,
    /// `FilePmdMapped`, bytes.
    pub file_pmd: u64,
    /// `AnonHugePages`, bytes.
    pub anon_huge: u64,
    /// `Private_Clean + Private_Dirty`, bytes.
    pub private: u64,
    /// `Pss`, bytes.
    pub pss: u64,
    /// `Anonymous`, bytes: memory private to this process (copied text).
    pub anonymous: u64,
}

impl TextMapping {
    /// Bytes of this mapping backed by PMD-mapped huge pages.
    pub fn huge(&self) -> u64 {
        self.file_pmd + self.anon_huge
    }
}

/// The executable (`r-x`) mappings of process `pid`, from its smaps.
///
/// Text the preload copied is named `[anon:hugetext:PATH]` where the kernel
/// has anonymous VMA names. Where it has not (`CONFIG_ANON_VMA_NAME` is off
/// in Debian's kernels), an unnamed `r-x` anonymous mapping is a candidate
/// copy of file P when it directly follows or precedes text of P (a copy
/// that starts the segment leaves no file-backed head), or lies between two
/// mappings of P (the loader's mappings of P on either side), and it is
/// counted as P's text only when its bytes are P's bytes at the file
/// offsets P's program headers put there ([`copy_proven`]): anonymous
/// executable memory that merely sits next to a library (a JIT's code
/// buffer) is left out.
pub fn text_mappings(pid: i32) -> Result<Vec<TextMapping>> {
    text_mappings_proved_by(pid, |smaps, t| copy_proven(pid, smaps, t))
}

/// [`text_mappings`], each unnamed candidate copy kept when `prove` says so
/// (given the process's smaps and the candidate): [`copy_proven`], or a
/// verdict it gave before.
pub fn text_mappings_proved_by(
    pid: i32,
    mut prove: impl FnMut(&[(procfs::Vma, procfs::SmapsStats)], &TextMapping) -> bool,
) -> Result<Vec<TextMapping>> {
    let smaps = procfs::read_smaps(Some(pid))?;
    let mut v = text_mappings_in(&smaps);
    v.retain(|t| {
        let unnamed = smaps.iter().any(|(m, _)| m.start == t.start && m.path.is_empty());
        !(t.copied && unnamed) || prove(&smaps, t)
    });
    Ok(v)
}

/// The mapping of file `path` nearest to `[start, end)` (where several are,
/// the loader's mappings of the same object usually): the file a copy
/// there was made from, read through `/proc/PID/map_files`.
pub fn file_mapping<'a>(
    vmas: &'a [(procfs::Vma, procfs::SmapsStats)],
    path: &str,
    start: u64,
    end: u64,
) -> Option<&'a procfs::Vma> {
    vmas.iter()
        .map(|(m, _)| m)
        .filter(|m| m.path == path)
        .min_by_key(|m| distance(m.start, m.end, start, end))
}

/// Bytes between two address ranges (0 when they touch or overlap).
fn distance(a0: u64, a1: u64, b0: u64, b1: u64) -> u64 {
    b0.saturating_sub(a1).max(a0.saturating_sub(b1))
}

/// The load biases that the mappings `(start, end, offset)` of one file
/// imply, given all its PT_LOAD `loads` (writable ones too: a mapping of
/// the data segment places the text as well as one of the text does),
/// nearest to `[start, end)` first, without repeats. A file mapped at
/// offset 0 is not needed: text copied into anonymous memory may have
/// replaced the mapping that held the ELF header (text that starts the
/// file, as ld.bfd's `-z noseparate-code` lays it out), and any other
/// mapping of the file places it. A mapping at an offset two segments share
/// (the page where one ends and the next begins) gives a bias for each.
/// Pure.
pub fn load_biases(
    maps: &[(u64, u64, u64)],
    loads: &[crate::elf::Segment],
    page: u64,
    start: u64,
    end: u64,
) -> Vec<u64> {
    let mut near: Vec<_> = maps.to_vec();
    near.sort_by_key(|&(s, e, _)| distance(s, e, start, end));
    let mut out = Vec::new();
    for (s, _, off) in near {
        for b in loads.iter().filter_map(|l| l.bias_of_mapping(s, off, page)) {
            if !out.contains(&b) {
                out.push(b);
            }
        }
    }
    out
}

/// Whether the bytes of the anonymous mapping `t` of process `pid` are the
/// bytes of file `t.path` that its executable segment puts at those
/// addresses: the load bias from the file's remaining mappings and its
/// program headers ([`load_biases`], a few tried, nearest first), then one
/// page per huge-page window and the last page compared between
/// `/proc/PID/mem` and the file (opened through `/proc/PID/map_files`, so
/// the very file the process maps). `false` when anything cannot be read.
pub fn copy_proven(pid: i32, vmas: &[(procfs::Vma, procfs::SmapsStats)], t: &TextMapping) -> bool {
    let Some(near) = file_mapping(vmas, &t.path, t.start, t.end) else {
        return false;
    };
    let file_path = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", near.start, near.end));
    let Ok(loads) = crate::elf::load_segments(&file_path) else {
        return false;
    };
    let page = crate::kernel::page_size() as u64;
    // The same file (a path can name a replaced one too).
    let maps: Vec<_> = vmas
        .iter()
        .map(|(m, _)| m)
        .filter(|m| {
            m.path == t.path && (m.dev_major, m.dev_minor, m.inode) == (near.dev_major, near.dev_minor, near.inode)
        })
        .map(|m| (m.start, m.end, m.offset))
        .collect();
    let (Ok(file), Ok(mem)) = (
        std::fs::File::open(&file_path),
        std::fs::File::open(format!("/proc/{pid}/mem")),
    ) else {
        return false;
    };
    load_biases(&maps, &loads, page, t.start, t.end)
        .into_iter()
        .take(4)
        .any(|base| copy_matches(&file, &mem, &loads, base, page, t))
}

/// [`copy_proven`] at one load bias `base`: `t` lies in an executable
/// segment placed there, and the sampled pages of it match the file.
fn copy_matches(
    file: &std::fs::File,
    mem: &std::fs::File,
    loads: &[crate::elf::Segment],
    base: u64,
    page: u64,
    t: &TextMapping,
) -> bool {
    use std::os::unix::fs::FileExt;
    let Some(seg) = loads.iter().find(|s| {
        let lo = base.wrapping_add(s.vaddr);
        s.is_executable() && lo <= t.start && t.end <= (lo + s.file_size).div_ceil(page) * page
    }) else {
        return false;
    };
    let off_of = |addr: u64| addr - base.wrapping_add(seg.vaddr) + seg.offset;
    let seg_end = seg.offset + seg.file_size;
    let unit = crate::kernel::pmd_size() as u64;
    let mut at: Vec<u64> = (t.start..t.end).step_by(unit as usize).collect();
    at.push(t.end.saturating_sub(page).max(t.start));
    let (mut a, mut b) = (vec![0u8; page as usize], vec![0u8; page as usize]);
    let mut compared = 0;
    for addr in at {
        let off = off_of(addr);
        let n = (seg_end.saturating_sub(off)).min(page) as usize;
        if n == 0 {
            continue;
        }
        if mem.read_exact_at(&mut a[..n], addr).is_err() || file.read_exact_at(&mut b[..n], off).is_err() {
            return false;
        }
        if a[..n] != b[..n] {
            return false;
        }
        compared += 1;
    }
    compared > 0
}

/// [`text_mappings`] of smaps already read.
pub fn text_mappings_in(vmas: &[(procfs::Vma, procfs::SmapsStats)]) -> Vec<TextMapping> {
    let file_of = |i: usize| -> Option<&str> {
        let n = vmas[i].0.path.as_str();
        n.starts_with('/').then_some(n)
    };
    // Unnamed r-x anonymous mappings (copied text on such kernels).
    let unnamed = |i: usize| vmas[i].0.path.is_empty() && vmas[i].0.perms.starts_with("r-x");
    let mut out = Vec::new();
    let mut prev_file: Option<(u64, String)> = None; // (end, path) of the previous text mapping
    for (i, (vma, s)) in vmas.iter().enumerate() {
        let exec = vma.perms.starts_with("r-x");
        let name = &vma.path;
        let (start, end) = (vma.start, vma.end);
        let label = if name.starts_with('/') {
            prev_file = Some((end, name.clone()));
            exec.then(|| (name.clone(), false))
        } else if exec && !name.starts_with("[v") {
            let copied = if let Some(p) = hugetext_abi::copyname::parse_str(name) {
                Some(p.to_string())
            } else if name.is_empty() {
                prev_file
                    .as_ref()
                    .filter(|(pe, _)| *pe == start)
                    .map(|(_, p)| p.clone())
                    .or_else(|| {
                        // Skipping other unnamed text (consecutive copied
                        // windows): directly followed by text of the file
                        // (the copy starts the segment), or between two
                        // mappings of the same file.
                        let j = (i + 1..vmas.len()).find(|&j| !unnamed(j))?;
                        let after = file_of(j)?;
                        let contiguous = (i..j).all(|k| vmas[k].0.end == vmas[k + 1].0.start);
                        if contiguous && vmas[j].0.perms.starts_with("r-x") {
                            return Some(after.to_string());
                        }
                        // Directly followed by a later part of the file and
                        // no mapping of its start anywhere: the copy took
                        // the place of the text that starts the file (the
                        // ELF header in the text segment) and ends on a
                        // window boundary, followed by the file's data. (A
                        // JIT buffer placed just below a library meets the
                        // library's first mapping, at offset 0.)
                        let start_mapped = vmas.iter().any(|(m, _)| m.path == after && m.offset == 0);
                        if contiguous && vmas[j].0.offset > 0 && !start_mapped {
                            return Some(after.to_string());
                        }
                        let before = (0..i).rev().find(|&k| !unnamed(k)).and_then(file_of)?;
                        (before == after).then(|| before.to_string())
                    })
            } else {
                None
            };
            prev_file = copied.as_ref().map(|p| (end, p.clone()));
            copied.map(|p| (p, true))
        } else {
            prev_file = None;
            None
        };
        if let Some((path, copied)) = label {
            out.push(TextMapping {
                start,
                end,
                path,
                copied,
                file_pmd: s.file_pmd_kb * 1024,
                anon_huge: s.anon_huge_kb * 1024,
                private: s.private_kb * 1024,
                pss: s.pss_kb * 1024,
                anonymous: s.anonymous_kb * 1024,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_preload_that_is_no_file_says_what_it_is() {
        assert_eq!(
            not_a_preload(std::fs::metadata("/dev/zero")),
            "a character device, not a shared object"
        );
        assert_eq!(
            not_a_preload(std::fs::metadata("/")),
            "a directory, not a shared object"
        );
        assert_eq!(not_a_preload(std::fs::metadata("/nonexistent/x")), "no such file");
        let e = find_preload(Some(Path::new("/dev/zero"))).unwrap_err().to_string();
        assert!(
            e.starts_with("/dev/zero: a character device") && !e.contains("no such"),
            "{e}"
        );
    }

    #[test]
    fn a_preload_must_be_an_elf_shared_object() {
        use object::elf::{EM_X86_64, ET_DYN, ET_EXEC};
        let m = (EM_X86_64, true);
        assert_eq!(preload_unfit(Some((ET_DYN, false, m))), None);
        assert!(preload_unfit(None).unwrap().contains("not an ELF"));
        assert!(preload_unfit(Some((ET_EXEC, false, m)))
            .unwrap()
            .contains("not a shared object"));
        assert!(preload_unfit(Some((ET_DYN, true, m))).unwrap().contains("interpreter"));
        assert_eq!(preload_facts(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn pattern_errors_are_one_line_and_say_what() {
        let e = check_pattern("(a").unwrap_err().to_string();
        assert!(
            !e.contains('\n') && e.contains("a group") && e.contains("supported:"),
            "{e}"
        );
        let e = check_pattern("[z-a]").unwrap_err().to_string();
        assert!(
            e.starts_with("invalid regular expression \"[z-a]\": invalid range"),
            "{e}"
        );
    }

    /// Whatever the preload's language accepts, `regex` reads as a valid
    /// regular expression too, with the same matches on sample paths.
    #[test]
    fn pattern_language_agrees_with_regex() {
        let paths = ["/usr/lib/libc.so.6", "/x/libbig.so", "/opt/a-b/[x]", "", "/lib/lib_x9"];
        for re in [
            "libbig",
            "^/usr/.*/libc",
            "so\\.\\d$",
            "[]x]",
            "[^a-z]",
            "[a-]",
            "a|",
            "lib[a-c_]+",
            "\\[x\\]",
            "a?b",
            "^$",
            "[\\d.]+",
            "[-a]",
            "x*|^/o",
        ] {
            check_pattern(re).unwrap_or_else(|e| panic!("{re}: {e}"));
            let r = regex::Regex::new(re).unwrap_or_else(|e| panic!("{re}: {e}"));
            for p in paths {
                let ours = hugetext_abi::pattern::is_match(re.as_bytes(), p.as_bytes());
                assert_eq!(ours, r.is_match(p), "{re} on {p}");
            }
        }
        for re in ["*", "a**", "[z-a]", "[", "\\", "a{2}"] {
            assert!(check_pattern(re).is_err(), "{re} accepted");
        }
    }

    #[test]
    fn audit_list_names_the_library_once() {
        let lib = Path::new("/opt/h/libhugetext.so");
        let mut s = Settings::default();
        let mut audit = |cur: Option<&str>, off| {
            late_environment(lib, off, cur.map(OsStr::new), &mut s).map(|(n, v)| {
                assert_eq!(n, "LD_AUDIT");
                v
            })
        };
        assert_eq!(audit(None, false).unwrap(), "/opt/h/libhugetext.so");
        assert_eq!(
            audit(Some("/a/libaudit.so:/old/libhugetext.so"), false).unwrap(),
            "/a/libaudit.so:/opt/h/libhugetext.so"
        );
        // A user's library whose name only starts like ours stays.
        assert_eq!(
            audit(Some("/opt/libhugetextual.so"), false).unwrap(),
            "/opt/libhugetextual.so:/opt/h/libhugetext.so"
        );
        let get = |s: &Settings| {
            let v = settings_environment(s);
            v.iter().find(|(n, _)| n == settings::LATE).map(|(_, x)| x.clone())
        };
        let mut s = Settings::default();
        late_environment(lib, false, None, &mut s);
        assert_eq!(get(&s).unwrap(), "1");
        assert_eq!(
            late_environment(lib, true, Some(OsStr::new("/a/libaudit.so")), &mut s),
            None
        );
        assert_eq!(get(&s).unwrap(), "0");
    }

    #[test]
    fn static_tls_room_is_added_unless_the_user_chose() {
        let t = |c: Option<&str>, n| tunables_with_static_tls(c.map(OsStr::new), n);
        assert_eq!(t(None, 0), None);
        assert_eq!(t(None, 24000).unwrap(), "glibc.rtld.optional_static_tls=24512");
        assert_eq!(
            t(Some("glibc.malloc.arena_max=2"), 100).unwrap(),
            "glibc.malloc.arena_max=2:glibc.rtld.optional_static_tls=612"
        );
        assert_eq!(t(Some("glibc.rtld.optional_static_tls=4096"), 100), None);
        // What the preload needs to put it back.
        let e = |c: Option<&str>| {
            let mut s = Settings::default();
            let pair = tunables_environment(c.map(OsStr::new), 100, &mut s);
            let v = settings_environment(&s);
            let note = v.iter().find(|(n, _)| n == settings::TUNABLES).map(|(_, x)| x.clone());
            pair.map(|(n, t)| {
                assert_eq!(n, env::GLIBC_TUNABLES);
                (note.unwrap().into_string().unwrap(), t.into_string().unwrap())
            })
        };
        for cur in [None, Some(""), Some("glibc.malloc.arena_max=2")] {
            let (note, new) = e(cur).unwrap();
            let back = env::tunables_restore(note.as_bytes(), Some(new.as_bytes())).unwrap();
            assert_eq!(back.map(|n| &new[..n]), cur, "{note} {new}");
        }
        assert!(e(Some("glibc.rtld.optional_static_tls=4096")).is_none());
        // This test binary: libc's TLS at least.
        let me = std::env::current_exe().unwrap();
        assert!(initial_static_tls(&me, Path::new("/nonexistent")) > 0);
        // One resolution that reads each library's PT_TLS with its dynamic
        // section gives what reading each resolved file again gives.
        for prog in [me.as_path(), Path::new("/bin/sh"), Path::new("/usr/bin/python3")] {
            let Ok(deps) = crate::elf::deps::resolve_deps(prog) else {
                continue;
            };
            let each: u64 = deps.iter().map(|d| tls_bytes(d)).sum();
            assert_eq!(
                initial_static_tls(prog, Path::new("/nonexistent")),
                each,
                "{}",
                prog.display()
            );
        }
        assert_eq!(tls_bytes(Path::new("/nonexistent")), 0);
    }

    #[test]
    fn environment_puts_the_preload_first_and_drops_old_copies() {
        let opts = RunOptions {
            strategy: Strategy::Copy,
            verbose: true,
            ..Default::default()
        };
        let mut s = Settings::default();
        let ld = environment(
            &opts,
            Path::new("/opt/ht/libhugetext.so"),
            Some(OsStr::new("/old/libhugetext.so libfoo.so:/x/libbar.so")),
            &mut s,
        )
        .unwrap();
        let env = settings_environment(&s);
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(ld.0, "LD_PRELOAD");
        assert_eq!(ld.1, "/opt/ht/libhugetext.so:libfoo.so:/x/libbar.so");
        assert_eq!(get(settings::STRATEGY).unwrap(), "copy");
        assert_eq!(get(settings::VERBOSE).unwrap(), "1");
        assert_eq!(get(settings::INCLUDE).unwrap(), "");
        assert_eq!(get(settings::VIA).unwrap(), "");
        assert_eq!(get(settings::GDB).unwrap(), "0");
        assert!(environment(&opts, Path::new("/a b/libhugetext.so"), None, &mut s).is_err());
    }

    #[test]
    fn resolves_like_execvp() {
        let p = resolve_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin:/usr/bin"))).unwrap();
        assert!(p.ends_with("sh"));
        assert_eq!(
            resolve_program(OsStr::new("no-such-cmd-xyz"), Some(OsStr::new("/bin")))
                .unwrap_err()
                .exit_code(),
            127
        );
        assert_eq!(
            resolve_program(OsStr::new("/no/such/file"), None)
                .unwrap_err()
                .exit_code(),
            127
        );
        assert_eq!(
            resolve_program(OsStr::new("/etc/passwd"), None)
                .unwrap_err()
                .exit_code(),
            126
        );
        assert_eq!(resolve_program(OsStr::new("/etc"), None).unwrap_err().exit_code(), 126);
    }

    /// Without anonymous VMA names: unnamed `r-x` anonymous memory between
    /// two mappings of one file (after a hole, as a segment copied whole
    /// leaves it), or directly followed by a file's text, is a candidate
    /// copy of that file ([`text_mappings_in`]); between two files' data,
    /// nobody's. [`text_mappings`] keeps a candidate only with the proof of
    /// its bytes: a page of zeros (here) is no copy of anything.
    /// The load bias comes from any remaining mapping of the file, its
    /// offset matched against every PT_LOAD (the data segment's too):
    /// ld.bfd's non-PIE aarch64 program whose text starts the file at 32
    /// MiB, 16 KiB pages, after the copy route replaced its two whole 32
    /// MiB windows (no mapping at offset 0 is left), and a PIE of which
    /// only the data mapping is left.
    #[test]
    fn load_bias_from_any_mapping_of_the_file() {
        use crate::elf::Segment;
        let seg = |offset, vaddr, file_size, flags| Segment {
            index: 0,
            offset,
            file_size,
            vaddr,
            mem_size: file_size,
            flags,
            align: 0x10000,
        };
        let (rx, rw) = (
            object::elf::PF_R | object::elf::PF_X,
            object::elf::PF_R | object::elf::PF_W,
        );
        let page = 0x4000;
        let exec = [
            seg(0, 0x200_0000, 0x460_2a80, rx),
            seg(0x460_fde8, 0x661_fde8, 0x270, rw),
        ];
        let maps = [
            (0x661_c000, 0x662_0000, 0x460_c000), // data
            (0x600_0000, 0x660_4000, 0x400_0000), // the text's tail
        ];
        assert_eq!(load_biases(&maps, &exec, page, 0x200_0000, 0x600_0000), vec![0]);
        assert_eq!(load_biases(&maps[..1], &exec, page, 0x200_0000, 0x600_0000), vec![0]);
        // A PIE at 0x5555_0000_0000: text at 0x3000 (mapped from offset 0
        // with 16 KiB pages), data on a page the text ends on.
        let pie = [
            seg(0x3000, 0x13000, 0x10_0000, rx),
            seg(0x10_3000, 0x12_3000, 0x100, rw),
        ];
        let b = 0x5555_0000_0000u64;
        // The data mapping starts at the page of 0x12_3000.
        let data = (b + 0x12_0000, b + 0x12_4000, 0x10_0000);
        assert_eq!(
            load_biases(&[data], &pie, page, b + 0x14000, b + 0x10_0000),
            vec![b + 0x1_0000, b],
            "both segments hold that page: a bias for each, to be tried"
        );
        let text = (b + 0x10000, b + 0x14000, 0);
        assert_eq!(load_biases(&[data, text], &pie, page, b + 0x14000, b + 0x10_0000)[0], b);
        assert!(load_biases(&[(b, b + page, 0x80_0000)], &pie, page, b, b + page).is_empty());
    }

    #[test]
    fn unnamed_copy_between_mappings_of_one_file_is_its_text() {
        use std::os::fd::AsRawFd;
        let page = crate::kernel::page_size();
        let me = std::env::current_exe().unwrap().canonicalize().unwrap();
        let f = std::fs::File::open(&me).unwrap();
        let other = std::fs::File::open("/bin/sh").unwrap();
        let check = |second: &std::fs::File, prot: i32| -> Option<TextMapping> {
            // The reservation, unmapped whole when it is dropped.
            let reserved = crate::kernel::Mapping::anon_aligned(4 * page, libc::PROT_NONE, page).unwrap();
            let base = reserved.addr();
            // SAFETY: fresh mappings inside the reservation.
            unsafe {
                let at = |i: usize| (base + i * page) as *mut libc::c_void;
                let fixed = libc::MAP_PRIVATE | libc::MAP_FIXED;
                assert_ne!(
                    libc::mmap(at(0), page, libc::PROT_READ, fixed, f.as_raw_fd(), 0),
                    libc::MAP_FAILED
                );
                libc::munmap(at(1), page);
                let anon = libc::mmap(
                    at(2),
                    page,
                    libc::PROT_READ | libc::PROT_EXEC,
                    fixed | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(anon, libc::MAP_FAILED);
                assert_ne!(
                    libc::mmap(at(3), page, prot, fixed, second.as_raw_fd(), 0),
                    libc::MAP_FAILED
                );
                let me = std::process::id() as i32;
                let found = text_mappings_in(&procfs::read_smaps(Some(me)).unwrap())
                    .into_iter()
                    .find(|m| m.start == anon as u64);
                let proven = text_mappings(me).unwrap().into_iter().find(|m| m.start == anon as u64);
                assert_eq!(proven, None, "zeros are not the file's bytes: {found:?}");
                found
            }
        };
        let m = check(&f, libc::PROT_READ).expect("the unnamed copy between two mappings of the file");
        assert!(m.copied && Path::new(&m.path) == me, "{m:?}");
        assert_eq!(
            check(&other, libc::PROT_READ),
            None,
            "between two different files: not attributed"
        );
        let sh = Path::new("/bin/sh").canonicalize().unwrap();
        let m = check(&other, libc::PROT_READ | libc::PROT_EXEC).expect("directly followed by text of a file");
        assert!(m.copied && Path::new(&m.path) == sh, "{m:?}");
    }

    /// Text that starts the file and ends on a window boundary, copied
    /// whole: the copy is followed by the file's data (not text) and no
    /// mapping of the file's start is left. It is a candidate of that file;
    /// unnamed text just below a file's first mapping (offset 0) is not.
    #[test]
    fn unnamed_copy_of_the_start_of_a_file_before_its_data_is_its_text() {
        use std::os::fd::AsRawFd;
        let page = crate::kernel::page_size();
        // A file of our own, which nothing else maps.
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("lib.so");
        std::fs::write(&path, vec![0x90u8; 4 * page]).unwrap();
        let path = path.canonicalize().unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let at_offset = |offset: usize| -> Option<TextMapping> {
            // The reservation, unmapped whole when it is dropped.
            let reserved = crate::kernel::Mapping::anon_aligned(3 * page, libc::PROT_NONE, page).unwrap();
            let base = reserved.addr();
            // SAFETY: fresh mappings inside the reservation.
            unsafe {
                let at = |i: usize| (base + i * page) as *mut libc::c_void;
                let fixed = libc::MAP_PRIVATE | libc::MAP_FIXED;
                libc::munmap(at(0), page);
                let anon = libc::mmap(
                    at(1),
                    page,
                    libc::PROT_READ | libc::PROT_EXEC,
                    fixed | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(anon, libc::MAP_FAILED);
                let data = libc::mmap(at(2), page, libc::PROT_READ, fixed, f.as_raw_fd(), offset as i64);
                assert_ne!(data, libc::MAP_FAILED);
                let me = std::process::id() as i32;
                text_mappings_in(&procfs::read_smaps(Some(me)).unwrap())
                    .into_iter()
                    .find(|m| m.start == anon as u64)
            }
        };
        let m = at_offset(2 * page).expect("the copy before the file's data");
        assert!(m.copied && Path::new(&m.path) == path, "{m:?}");
        assert_eq!(at_offset(0), None, "below the file's first mapping: not attributed");
    }

    #[test]
    fn reads_own_text_mappings() {
        let maps = text_mappings(std::process::id() as i32).unwrap();
        let me = std::env::current_exe().unwrap().canonicalize().unwrap();
        assert!(maps.iter().any(|m| Path::new(&m.path) == me), "{maps:?}");
        assert_eq!(injectable(&me), Injectable::Yes);
    }
}
