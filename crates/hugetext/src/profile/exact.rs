//! Instruction-exact profiles: the program runs under `qemu-user` with the
//! project's TCG plugin (`plugin/itrace.c`, built with the C compiler at run
//! time), which streams the executed instructions as runs per 4 KiB page
//! through a pipe. Each run is attributed to its file and fed to two
//! modelled iTLBs ([`super::tlb`]): one with every page 4 KiB, one with the
//! whole PMD windows of text on 2 MiB pages.
//!
//! qemu-user maps the guest's files at guest addresses (its guest base is 0
//! for a 64-bit guest on the same machine), so the qemu process's own
//! `/proc/PID/maps` places the guest's code. It follows the program's
//! threads and the processes it forks; a program it `exec`s runs natively,
//! unobserved.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use super::attrib::{Loc, Space};
use super::tlb::{self, Estimate, FileEstimate, Geometry, Itlb, Misses, Page};
use super::{Profile, Source, Tally};
use crate::{Error, Result};

/// The plugin's source (built with the C compiler on first use).
pub const PLUGIN_SOURCE: &str = include_str!("plugin/itrace.c");
/// The declarations of qemu's plugin API that the plugin includes
/// (`qemu-plugin.h`, written next to it; the kernel lab's counting plugin
/// includes it too).
pub const PLUGIN_HEADER: &str = include_str!("plugin/qemu-plugin.h");

/// Bits of a record that hold the instruction count (plugin/itrace.c).
const COUNT_BITS: u32 = 24;
/// The record the process qemu started writes last (plugin/itrace.c).
const END: u64 = u64::MAX;

/// Settings of an exact run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The qemu-user binary (default `qemu-ARCH` on PATH).
    pub qemu: Option<PathBuf>,
    /// The iTLB geometry modelled.
    pub geometry: Geometry,
    /// Cycles per page walk.
    pub walk_cycles: u32,
}

/// The qemu-user binary for this machine: `explicit`, or `qemu-ARCH` on PATH.
pub fn find_qemu(explicit: Option<&Path>) -> Result<PathBuf> {
    let name = format!("qemu-{}", std::env::consts::ARCH);
    let missing = |what: &str| {
        Error::Unsupported(format!(
            "{what}: --exact runs the program under qemu-user: install it (apt-get install qemu-user) or name it with --qemu"
        ))
    };
    match explicit {
        Some(p) if p.is_file() => Ok(p.to_path_buf()),
        Some(p) => Err(missing(&format!("{} not found", p.display()))),
        None => std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join(&name))
            .find(|p| p.is_file())
            .ok_or_else(|| missing(&format!("{name} not found on PATH"))),
    }
}

/// Build the plugin into `dir` with the C compiler (`$CC`, else `cc`).
pub fn build_plugin(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("itrace.c");
    let so = dir.join("itrace.so");
    let header = dir.join("qemu-plugin.h");
    std::fs::write(&header, PLUGIN_HEADER).map_err(|e| Error::io(&header, e))?;
    std::fs::write(&src, PLUGIN_SOURCE).map_err(|e| Error::io(&src, e))?;
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .output()
        .map_err(|e| {
            Error::Unsupported(format!(
                "{}: {e}: --exact builds its qemu plugin with a C compiler: install gcc (or set CC)",
                cc.to_string_lossy()
            ))
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Other(format!(
            "building the qemu plugin failed: {}",
            err.lines().next().unwrap_or("no message")
        )));
    }
    Ok(so)
}

/// A pipe (read end, write end), both close-on-exec.
fn pipe() -> Result<(File, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os("pipe2"));
    }
    // SAFETY: two fresh fds we own.
    unsafe { Ok((File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// The two modelled iTLBs and the counts per file.
struct Model {
    geometry: Geometry,
    small: Itlb,
    huge: Itlb,
    /// Per file (index 0: no file): path, instructions, small misses, huge misses.
    files: Vec<(String, u64, Misses, Misses, bool)>,
    pmd_shift: u32,
}

/// One 4 KiB code page seen: where it is, and what ran there.
struct Slot {
    loc: Option<Loc>,
    /// Index in [`Model::files`].
    file: usize,
    /// The page as the huge model sees it.
    huge_page: Page,
    count: u64,
}

impl Model {
    fn new(g: Geometry, pmd: u64) -> Model {
        Model {
            geometry: g,
            small: Itlb::new(&g),
            huge: Itlb::new(&g),
            files: vec![(String::new(), 0, Misses::default(), Misses::default(), false)],
            pmd_shift: pmd.trailing_zeros(),
        }
    }

    /// The slot of 4 KiB page `page` at `loc`.
    fn slot(&mut self, page: u64, loc: Option<Loc>) -> Slot {
        let huge_page = match &loc {
            Some(l) if l.huge => Page::Huge((page << 12) >> self.pmd_shift),
            _ => Page::Small(page),
        };
        let file = match &loc {
            None => 0,
            Some(l) => match self.files.iter().position(|f| f.0 == l.file.path) {
                Some(i) => i,
                None => {
                    self.files
                        .push((l.file.path.clone(), 0, Misses::default(), Misses::default(), false));
                    self.files.len() - 1
                }
            },
        };
        Slot {
            loc,
            file,
            huge_page,
            count: 0,
        }
    }

    /// `n` instructions executed in `page` (one fetch stream).
    fn run(&mut self, page: u64, slot: &mut Slot, n: u64) {
        slot.count += n;
        let (s, h) = (self.small.access(Page::Small(page)), self.huge.access(slot.huge_page));
        let f = &mut self.files[slot.file];
        f.1 += n;
        f.2.count(s);
        f.3.count(h);
        f.4 |= matches!(slot.huge_page, Page::Huge(_));
    }

    fn estimate(self, walk_cycles: u32) -> Estimate {
        let g = self.geometry;
        let est = |path: String, n: u64, s: Misses, h: Misses, own_huge: bool| FileEstimate {
            path,
            instructions: n,
            small: s,
            huge: h,
            small_cycles: s.cycles(&g, walk_cycles),
            huge_cycles: h.cycles(&g, walk_cycles),
            own_huge,
        };
        let (mut n, mut s, mut h, mut any) = (0, Misses::default(), Misses::default(), false);
        for f in &self.files {
            n += f.1;
            any |= f.4;
            s.l1 += f.2.l1;
            s.walks += f.2.walks;
            h.l1 += f.3.l1;
            h.walks += f.3.walks;
        }
        let mut files: Vec<FileEstimate> = self
            .files
            .into_iter()
            .skip(1)
            .map(|(p, n, s, h, own)| est(p, n, s, h, own))
            .collect();
        files.sort_by(|a, b| b.small.l1.cmp(&a.small.l1).then_with(|| a.path.cmp(&b.path)));
        Estimate {
            model: g.name.into(),
            core: g.core.into(),
            source: g.source.into(),
            walk_cycles,
            l2_hit_cycles: g.l2_hit_cycles,
            all: est(String::new(), n, s, h, any),
            files,
        }
    }
}

/// What an exact run gives.
#[derive(Debug)]
pub struct Outcome {
    /// Unit: instructions, with the iTLB estimate.
    pub profile: Profile,
    pub status: ExitStatus,
    /// The plugin's END record came: the program's own process was followed
    /// to its exit. Not so when it was killed, or closed or replaced the
    /// plugin's descriptor (the profile stops there).
    pub complete: bool,
}

/// Run `command` under qemu-user with the plugin.
pub fn run(command: &[OsString], opts: &Options) -> Result<Outcome> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| Error::Invalid("no command to profile".into()))?;
    let qemu = find_qemu(opts.qemu.as_deref())?;
    let path = crate::run::remap::resolve_program(prog, std::env::var_os("PATH").as_deref())?;
    let dir = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let plugin = build_plugin(dir.path())?;
    let (rd, wr) = pipe()?;
    let wfd = wr.as_raw_fd();
    let mut cmd = Command::new(&qemu);
    cmd.arg("-plugin")
        .arg(format!("{},fd={wfd}", plugin.display()))
        .arg("-0")
        .arg(prog)
        .arg(&path)
        .args(args);
    // SAFETY: fcntl on an inherited fd between fork and exec is
    // async-signal-safe; it clears close-on-exec so qemu inherits the pipe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(wfd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Other(format!("{}: cannot start: {e}", qemu.display())))?;
    drop(wr);
    let pmd = super::window_size();
    let mut space = Space::new(Some(child.id() as i32), pmd);
    let mut model = Model::new(opts.geometry, pmd);
    let mut slots: Vec<Slot> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut input = BufReader::with_capacity(1 << 16, rd);
    let mut rec = [0u8; 8];
    let mut complete = false;
    while input.read_exact(&mut rec).is_ok() {
        let v = u64::from_le_bytes(rec);
        if v == END {
            complete = true;
            continue;
        }
        let (page, n) = (v >> COUNT_BITS, v & ((1 << COUNT_BITS) - 1));
        if n == 0 {
            continue;
        }
        let i = *index.entry(page).or_insert_with(|| {
            let loc = space.resolve(page << 12).or_else(|| {
                let _ = space.refresh(false);
                space.resolve(page << 12)
            });
            slots.push(model.slot(page, loc));
            slots.len() - 1
        });
        model.run(page, &mut slots[i], n);
    }
    let status = child.wait().map_err(|e| Error::Sys {
        call: "wait",
        source: e,
    })?;
    let mut tally = Tally::default();
    for s in &slots {
        tally.add(s.loc.as_ref(), s.count);
    }
    if tally.total == 0 {
        return Err(Error::Other(format!(
            "{} ran no instruction under {} (exit {status}): is it a program for this machine?",
            path.display(),
            qemu.display()
        )));
    }
    let mut p = tally.finish(Source::Exact, "instructions", pmd);
    p.itlb = Some(model.estimate(opts.walk_cycles));
    p.command = command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    Ok(Outcome {
        profile: p,
        status,
        complete,
    })
}

/// The default geometry: the first of [`tlb::GEOMETRIES`] (Skylake).
pub fn default_geometry() -> Geometry {
    tlb::GEOMETRIES[0]
}
