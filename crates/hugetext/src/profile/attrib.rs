//! Attribution of code addresses to the file behind them: file, executable
//! segment, file offset, and whether the address lies in a PMD window that
//! hugetext would map (a whole window inside the segment's text at run
//! time), from `/proc/PID/maps` and the file's program headers.
//!
//! Text `run` copied into anonymous memory (`[anon:hugetext:PATH]`) is
//! attributed to PATH: the copy sits at the addresses of the text it
//! replaced, so the load bias of PATH's other mappings places it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::sync::Arc;

use crate::elf::{self, Segment};
use crate::procfs::{self, Vma};
use crate::Result;

/// What is known about one mapped file.
#[derive(Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// The path as the process's maps name it.
    pub path: String,
    /// GNU build-id in hex.
    pub build_id: Option<String>,
    /// Executable PT_LOAD segments.
    pub text: Vec<Segment>,
    /// Non-writable PT_LOAD segments (to find the load bias of a mapping).
    pub loads: Vec<Segment>,
}

/// A shared [`FileInfo`].
pub type FileRef = Arc<FileInfo>;

/// Where an address is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    pub file: FileRef,
    /// File offset of the address.
    pub offset: u64,
    /// In a whole PMD window of its segment's text at run time.
    pub huge: bool,
}

/// The GNU build-id of an ELF file, hex; `None` if it has none or is not ELF
/// (or not a regular file: a FIFO is not opened for reading).
pub fn build_id(path: &str) -> Option<String> {
    let f = crate::openfile::open_nonblocking(std::path::Path::new(path), crate::openfile::Follow::Yes).ok()?;
    f.metadata().ok()?.is_file().then(|| build_id_of(&f))?
}

/// [`build_id`] of a file already open: read as the preload reads it for
/// the hot list (`hugetext_abi::hot::build_id_with`, the program headers'
/// `PT_NOTE` segments), so a profile's files and the running program's
/// match by the same bytes.
pub fn build_id_of(f: &File) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mut id = [0u8; 64];
    let n = hugetext_abi::hot::build_id_with(|buf, off| f.read_exact_at(buf, off).is_ok(), &mut id)?;
    Some(id[..n].iter().map(|b| format!("{b:02x}")).collect())
}

/// Read `path`'s build-id and segments (`open` is where to read it: the
/// path itself, or through `/proc/PID/root`; both as maps names them,
/// [`procfs::escape_name`], so a name that is not UTF-8 is read as the bytes
/// it stands for). A file that is not ELF has none; what is not a regular
/// file (a FIFO, a device) is not read at all.
pub fn file_info(path: &str, open: &str) -> FileInfo {
    let at = procfs::name_path(open);
    let f = crate::openfile::open_nonblocking(&at, crate::openfile::Follow::Yes)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()));
    let segs = f
        .as_ref()
        .and_then(|f| elf::model_of(f, &at).ok())
        .map(|m| elf::text_segments_of(&m))
        .unwrap_or_default();
    FileInfo {
        path: path.to_string(),
        build_id: f.as_ref().and_then(build_id_of),
        text: segs.iter().filter(|s| s.is_executable()).copied().collect(),
        loads: segs,
    }
}

/// One file mapping (or text `run` copied).
#[derive(Debug, Clone)]
struct Region {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
    /// Text `run` copied into anonymous memory.
    copy: bool,
    /// Addresses in it are attributed (code); the others are kept for the
    /// load bias of their file's copies only.
    text: bool,
}

/// The code mappings of one process, and the files behind them.
///
/// Mappings are kept by start address and never overlap, so that one
/// mapping more ([`Space::map`]) or one address looked up
/// ([`Space::resolve`]) costs a logarithm of their number, not a pass over
/// all of them.
#[derive(Debug)]
pub struct Space {
    pid: Option<i32>,
    regions: BTreeMap<u64, Region>,
    /// Start addresses of the file-backed (not copied) regions of each path.
    by_path: HashMap<String, BTreeSet<u64>>,
    files: HashMap<String, FileRef>,
    pmd: u64,
}

/// The file a maps line names: a path, or PATH of `[anon:hugetext:PATH]`.
fn region_of(v: &Vma, exec_only: bool) -> Option<Region> {
    let (path, copy) = if v.path.starts_with('/') {
        (v.path.trim_end_matches(" (deleted)").to_string(), false)
    } else {
        let p = hugetext_abi::copyname::parse_str(&v.path)?;
        (p.to_string(), true)
    };
    Some(Region {
        start: v.start,
        end: v.end,
        offset: v.offset,
        path,
        copy,
        text: copy || !exec_only || v.is_exec(),
    })
}

impl Space {
    /// An empty space for process `pid` (files are read through its root).
    pub fn new(pid: Option<i32>, pmd: u64) -> Space {
        Space {
            pid,
            regions: BTreeMap::new(),
            by_path: HashMap::new(),
            files: HashMap::new(),
            pmd,
        }
    }

    /// Re-read the process's maps. `exec_only`: only executable mappings
    /// (a native process), with the text `run` copied found as
    /// [`crate::run::remap::text_mappings`] finds it (named, or unnamed next to
    /// its file's mappings); else every file mapping (qemu-user maps the
    /// guest's text without PROT_EXEC).
    pub fn refresh(&mut self, exec_only: bool) -> Result<()> {
        let vmas = procfs::read_maps(self.pid)?;
        self.set_maps(&vmas, exec_only);
        if let (true, Some(pid)) = (exec_only, self.pid) {
            for m in crate::run::remap::text_mappings(pid).unwrap_or_default() {
                if m.copied {
                    self.insert(Region {
                        start: m.start,
                        end: m.end,
                        offset: 0,
                        path: m.path,
                        copy: true,
                        text: true,
                    });
                }
            }
        }
        Ok(())
    }

    /// Use these maps lines.
    pub fn set_maps(&mut self, vmas: &[Vma], exec_only: bool) {
        self.regions.clear();
        self.by_path.clear();
        for v in vmas {
            self.map(v, exec_only);
        }
    }

    /// One mapping more (a `perf script` mmap record, in time order): it
    /// replaces every mapping it overlaps, as `mmap` does.
    pub fn map(&mut self, v: &Vma, exec_only: bool) {
        self.unmap(v.start, v.end);
        if let Some(r) = region_of(v, exec_only) {
            self.insert(r);
        }
    }

    /// Forget the regions that overlap `[start, end)`.
    fn unmap(&mut self, start: u64, end: u64) {
        let before = self
            .regions
            .range(..start)
            .next_back()
            .filter(|(_, r)| r.end > start)
            .map(|(&s, _)| s);
        let inside: Vec<u64> = self.regions.range(start..end).map(|(&s, _)| s).collect();
        for s in before.into_iter().chain(inside) {
            if let Some(r) = self.regions.remove(&s) {
                if let Some(set) = self.by_path.get_mut(&r.path) {
                    set.remove(&s);
                    if set.is_empty() {
                        self.by_path.remove(&r.path);
                    }
                }
            }
        }
    }

    fn insert(&mut self, r: Region) {
        self.unmap(r.start, r.end);
        if !r.copy {
            self.by_path.entry(r.path.clone()).or_default().insert(r.start);
        }
        self.regions.insert(r.start, r);
    }

    fn file(&mut self, path: &str) -> FileRef {
        let pid = self.pid;
        self.files
            .entry(path.to_string())
            .or_insert_with(|| {
                let via_root = pid.map(|p| format!("/proc/{p}/root{path}"));
                let open = via_root.filter(|p| procfs::name_path(p).exists());
                Arc::new(file_info(path, open.as_deref().unwrap_or(path)))
            })
            .clone()
    }

    /// Where `addr` is, if a file backs it.
    pub fn resolve(&mut self, addr: u64) -> Option<Loc> {
        let r = self.regions.range(..=addr).next_back()?.1;
        if addr >= r.end || !r.text {
            return None;
        }
        let r = r.clone();
        let file = self.file(&r.path);
        let bias = if r.copy {
            // The first of its file's mappings that places it.
            self.by_path
                .get(&r.path)
                .into_iter()
                .flatten()
                .filter_map(|s| self.regions.get(s))
                .find_map(|o| bias_of(&file, o))
        } else {
            bias_of(&file, &r)
        };
        let placed = bias.and_then(|b| place(&file, addr, b, self.pmd));
        match placed {
            Some((offset, huge)) => Some(Loc { file, offset, huge }),
            None if !r.copy => Some(Loc {
                file,
                offset: addr - r.start + r.offset,
                huge: false,
            }),
            None => None,
        }
    }
}

/// Load bias of a file-backed mapping: its start minus the link-time
/// address of its first byte. Pure.
fn bias_of(f: &FileInfo, r: &Region) -> Option<u64> {
    let s = f
        .loads
        .iter()
        .find(|s| s.offset <= r.offset && r.offset < s.offset + s.file_size.max(1))?;
    Some(r.start.wrapping_sub(s.vaddr + (r.offset - s.offset)))
}

/// File offset of `addr` in an executable segment of `f` loaded at `bias`,
/// and whether it lies in a whole PMD window of that segment's text. Pure.
fn place(f: &FileInfo, addr: u64, bias: u64, pmd: u64) -> Option<(u64, bool)> {
    let lv = addr.wrapping_sub(bias);
    let s = f.text.iter().find(|s| s.vaddr <= lv && lv < s.vaddr + s.file_size)?;
    let (lo, hi) = (bias.wrapping_add(s.vaddr), bias.wrapping_add(s.vaddr + s.file_size));
    let w = addr / pmd * pmd;
    Some((s.offset + (lv - s.vaddr), w >= lo && w + pmd <= hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 2 << 20;

    /// The GNU build-id as an ELF reader independent of the one the
    /// preload and [`build_id_of`] share reads it (`object`: the note
    /// sections).
    fn build_id_by_object(path: &std::path::Path) -> Option<String> {
        use object::Object;
        let data = std::fs::read(path).unwrap();
        let obj = object::File::parse(&*data).ok()?;
        let id = obj.build_id().ok()??;
        Some(id.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The hot list matches files by build-id: the library writes the ids
    /// into profiles, the preload reads them from the running program's
    /// files. Both read through `hugetext_abi::hot::build_id_with`; this
    /// holds that reader to an independent one on every fixture (gcc with
    /// ld.bfd, lld and mold: PIE, non-PIE, DSO) and on programs built here
    /// static, without a build-id and with other build-id styles.
    #[test]
    fn build_ids_agree_with_an_independent_reader_on_every_fixture() {
        let mut files: Vec<std::path::PathBuf> = Vec::new();
        for linker in ["bfd", "lld", "mold"] {
            for name in ["pie", "nopie", "small", "usebig", "libbig.so"] {
                files.push(hugetext_testkit::fixture(linker, name));
            }
        }
        let dir = hugetext_testkit::scratch();
        let src = dir.path().join("m.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let builds: &[(&str, &[&str])] = &[
            ("static", &["-static"]),
            ("static-pie", &["-static-pie"]),
            ("no-build-id", &["-Wl,--build-id=none"]),
            ("md5", &["-Wl,--build-id=md5"]),
            ("uuid", &["-Wl,--build-id=uuid"]),
            ("lld-sha1", &["-fuse-ld=lld", "-Wl,--build-id=sha1"]),
        ];
        let mut built = 0;
        for (name, flags) in builds {
            let out = dir.path().join(name);
            let ok = std::process::Command::new("cc")
                .args(*flags)
                .arg("-o")
                .arg(&out)
                .arg(&src)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                files.push(out);
                built += 1;
            } else {
                eprintln!("skipped: cc {flags:?} does not link here");
            }
        }
        let (mut with, mut without) = (0, 0);
        // The preload's side: the abi reader through plain preads, as
        // `hot::build_id_of` calls it on the program's descriptor.
        let preload_side = |p: &std::path::Path| {
            use std::os::unix::fs::FileExt;
            let f = File::open(p).unwrap();
            let mut id = [0u8; 64];
            let n = hugetext_abi::hot::build_id_with(
                |buf, off| f.read_at(buf, off).is_ok_and(|n| n == buf.len()),
                &mut id,
            )?;
            Some(id[..n].iter().map(|b| format!("{b:02x}")).collect::<String>())
        };
        for f in &files {
            let ours = build_id(f.to_str().unwrap());
            assert_eq!(ours, preload_side(f), "{}: library and preload disagree", f.display());
            assert_eq!(ours, build_id_by_object(f), "{}", f.display());
            match ours {
                Some(id) => {
                    assert!(id.len() >= 16, "{}: {id}", f.display());
                    with += 1;
                }
                None => without += 1,
            }
        }
        assert!(with >= 15, "{with} of {} files have a build-id", files.len());
        if built == builds.len() {
            assert_eq!(without, 1, "only the --build-id=none program has none");
        }
        // Not ELF, not a regular file: none, and no error.
        assert_eq!(build_id("/etc/passwd"), None);
        assert_eq!(build_id("/dev/null"), None);
    }

    fn seg(offset: u64, vaddr: u64, size: u64, flags: u32) -> Segment {
        Segment {
            index: 0,
            offset,
            file_size: size,
            vaddr,
            mem_size: size,
            flags,
            align: M,
        }
    }

    fn info() -> FileInfo {
        // r-- [0, 4K) at 0; r-x [M, 3.5 M) at M (congruent; M = one PMD).
        let loads = vec![seg(0, 0, 4096, 4), seg(M, M, 5 * M / 2, 5)];
        FileInfo {
            path: "/x".into(),
            build_id: None,
            text: vec![loads[1]],
            loads,
        }
    }

    #[test]
    fn place_gives_offsets_and_whole_windows() {
        let f = info();
        let base = 0x7f00_0000_0000;
        // Text at base + [M, 3.5 M) (M = one PMD): windows 1 and 2 are whole, 3 is not.
        assert_eq!(place(&f, base + M + 5, base, M), Some((M + 5, true)));
        assert_eq!(place(&f, base + 2 * M + 7, base, M), Some((2 * M + 7, true)));
        assert_eq!(place(&f, base + 3 * M + 7, base, M), Some((3 * M + 7, false)));
        assert_eq!(place(&f, base + 100, base, M), None);
        // A base off by one page: no whole window.
        assert_eq!(place(&f, base + 4096 + M + 5, base + 4096, M), Some((M + 5, false)));
    }

    #[test]
    fn copies_take_the_bias_of_their_files_other_mappings() {
        let mut s = Space::new(None, M);
        let base = 0x5500_0000_0000u64;
        s.files.insert("/x".into(), Arc::new(info()));
        let line = |a: u64, b: u64, perms: &str, off: u64, path: &str| {
            procfs::parse_vma_line(&format!("{a:x}-{b:x} {perms} {off:08x} 08:01 12 {path}")).unwrap()
        };
        s.set_maps(
            &[
                line(base, base + 4096, "r--p", 0, "/x"),
                line(base + M, base + 2 * M, "r-xp", 0, "[anon:hugetext:/x]"),
                line(base + 2 * M, base + 9 * M / 2, "r-xp", 2 * M, "/x"),
            ],
            true,
        );
        let l = s.resolve(base + M + 12).unwrap();
        assert_eq!((l.file.path.as_str(), l.offset, l.huge), ("/x", M + 12, true));
        let l = s.resolve(base + 2 * M + 12).unwrap();
        assert_eq!((l.offset, l.huge), (2 * M + 12, true));
        assert!(s.resolve(base + 5 * M).is_none());
        assert!(s.resolve(1).is_none());
    }

    #[test]
    fn a_new_mapping_replaces_what_it_overlaps() {
        let mut s = Space::new(None, M);
        let vma = |a: u64, b: u64, perms: &str, path: &str| {
            procfs::parse_vma_line(&format!("{a:x}-{b:x} {perms} 00000000 08:01 12 {path}")).unwrap()
        };
        s.map(&vma(0x10000, 0x30000, "r-xp", "/a"), true);
        s.map(&vma(0x40000, 0x50000, "r-xp", "/b"), true);
        assert_eq!(s.resolve(0x20000).unwrap().file.path, "/a");
        // Overlapping the tail of /a and the head of /b: both go.
        s.map(&vma(0x28000, 0x44000, "r-xp", "/c"), true);
        assert_eq!(s.resolve(0x29000).unwrap().file.path, "/c");
        assert!(s.resolve(0x10000).is_none());
        assert!(s.resolve(0x48000).is_none());
        // Data is not code, and an anonymous mapping unmaps what it covers.
        s.map(&vma(0x60000, 0x70000, "r--p", "/d"), true);
        assert!(s.resolve(0x60000).is_none());
        s.map(&vma(0x28000, 0x30000, "rw-p", ""), true);
        assert!(s.resolve(0x29000).is_none());
        assert_eq!(s.regions.len(), 1);
        assert_eq!(s.by_path.keys().collect::<Vec<_>>(), ["/d"]);
    }
}
