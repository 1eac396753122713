//! Resolve a program's shared libraries the way glibc's ld.so does:
//! `PT_INTERP`, then `DT_NEEDED` breadth-first, each searched in
//! `DT_RPATH` (of the requesting object and its loaders, when it has no
//! `DT_RUNPATH`), `LD_LIBRARY_PATH`, `DT_RUNPATH` (of the requesting object
//! only), `/etc/ld.so.cache` (unless `DF_1_NODEFLIB`), then the default
//! directories. `$ORIGIN`, `$LIB` and `$PLATFORM` are expanded. A candidate
//! whose ELF class or machine differs from the program's is skipped, as ld.so
//! does. Already-loaded objects are matched by name, `DT_SONAME` and inode.
//!
//! Not modelled: `LD_PRELOAD`, `/etc/ld.so.preload`, `glibc-hwcaps`
//! subdirectories, `DT_AUXILIARY`/`DT_FILTER`, secure-execution rules for
//! set-id programs (LD_LIBRARY_PATH is always honoured here).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, ReadCache, ReadRef};

use super::layout::{Malformed, ParseResult};
use crate::{Error, Result};

/// glibc's default library directories (Debian multiarch first): the
/// preload's list too.
use hugetext_abi::reach::DEFAULT_DIRS;

/// The dynamic-linking facts of one object.
#[derive(Debug, Default, Clone)]
struct DynInfo {
    class64: bool,
    machine: u16,
    interp: Option<String>,
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
    soname: Option<String>,
    nodeflib: bool,
    /// Bytes of static TLS it needs: its `PT_TLS` segment's size rounded up
    /// to the segment's alignment (0: none).
    tls: u64,
    /// The file's device and inode.
    key: (u64, u64),
}

fn read_dyn(path: &Path) -> ParseResult<DynInfo> {
    let (file, md) =
        crate::openfile::open_regular_meta(path, crate::openfile::Follow::Yes).map_err(|e| Malformed(e.to_string()))?;
    read_dyn_meta(&file, &md)
}

/// Bytes [`AtPos`] reads at once: the ELF header and program headers, the
/// dynamic section, or the run of `DT_NEEDED` names, each in one `pread`.
const BLOCK: u64 = 16 << 10;
/// Blocks [`AtPos`] keeps.
const BLOCKS: usize = 4;

/// A file read with `pread` at a position kept here: `ReadCache` seeks
/// before each read it has not cached, and on a `File` every seek is a
/// system call (`run` reads the headers of each library a program loads).
/// Reads are served from the last few [`BLOCK`]-sized blocks read: the
/// header, program headers, dynamic section and names of a library take
/// 2–3 `pread`s instead of one per name.
struct AtPos<'a> {
    file: &'a File,
    pos: u64,
    /// The file's length, once known.
    len: Option<u64>,
    /// (offset, bytes) of the blocks read, newest first.
    blocks: Vec<(u64, Vec<u8>)>,
}

impl<'a> AtPos<'a> {
    fn new(file: &'a File, len: Option<u64>) -> Self {
        AtPos {
            file,
            pos: 0,
            len,
            blocks: Vec::with_capacity(BLOCKS),
        }
    }
}

impl std::io::Read for AtPos<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let pos = self.pos;
        let held = |(at, b): &(u64, Vec<u8>)| pos >= *at && pos < at + b.len() as u64;
        let i = match self.blocks.iter().position(held) {
            Some(i) => i,
            None if buf.len() as u64 >= BLOCK => {
                // A large read: straight into the caller's buffer.
                let n = self.file.read_at(buf, pos)?;
                self.pos += n as u64;
                return Ok(n);
            }
            None => {
                let mut b = vec![0u8; BLOCK as usize];
                let n = self.file.read_at(&mut b, pos)?;
                if n == 0 {
                    return Ok(0);
                }
                b.truncate(n);
                self.blocks.truncate(BLOCKS - 1);
                self.blocks.insert(0, (pos, b));
                0
            }
        };
        let (at, b) = &self.blocks[i];
        let from = (pos - at) as usize;
        let n = buf.len().min(b.len() - from);
        buf[..n].copy_from_slice(&b[from..from + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for AtPos<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        use std::io::SeekFrom;
        let (base, off) = match to {
            SeekFrom::Start(o) => (0, i128::from(o)),
            SeekFrom::End(o) => {
                let len = match self.len {
                    Some(l) => l,
                    None => *self.len.insert(self.file.metadata()?.len()),
                };
                (len, i128::from(o))
            }
            SeekFrom::Current(o) => (self.pos, i128::from(o)),
        };
        self.pos = u64::try_from(i128::from(base) + off)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start of the file"))?;
        Ok(self.pos)
    }
}

/// [`read_dyn`] of a file already open.
fn read_dyn_of(file: &File) -> ParseResult<DynInfo> {
    let md = file.metadata().map_err(|e| Malformed(e.to_string()))?;
    read_dyn_meta(file, &md)
}

/// [`read_dyn`] of a file already open, with its metadata.
fn read_dyn_meta(file: &File, md: &std::fs::Metadata) -> ParseResult<DynInfo> {
    let cache = ReadCache::new(AtPos::new(file, Some(md.len())));
    let mut info = match super::layout::elf_class(&cache)? {
        true => read_dyn_generic::<elf::FileHeader64<Endianness>>(&cache),
        false => read_dyn_generic::<elf::FileHeader32<Endianness>>(&cache),
    }?;
    info.key = (md.dev(), md.ino());
    Ok(info)
}

fn read_dyn_generic<Elf: FileHeader<Endian = Endianness>>(data: &ReadCache<AtPos<'_>>) -> ParseResult<DynInfo> {
    let h = Elf::parse(data).map_err(|e| Malformed(e.to_string()))?;
    let endian = h.endian().map_err(|e| Malformed(e.to_string()))?;
    let mut info = DynInfo {
        class64: h.is_type_64(),
        machine: h.e_machine(endian),
        ..Default::default()
    };
    let phdrs = h.program_headers(endian, data).map_err(|e| Malformed(e.to_string()))?;
    // The string table (DT_STRTAB) is a vaddr: translate through PT_LOADs.
    let vaddr_to_off = |addr: u64| -> Option<u64> {
        phdrs.iter().filter(|p| p.p_type(endian) == elf::PT_LOAD).find_map(|p| {
            let v: u64 = p.p_vaddr(endian).into();
            let fsz: u64 = p.p_filesz(endian).into();
            let off: u64 = p.p_offset(endian).into();
            (addr >= v && addr < v + fsz).then(|| off + (addr - v))
        })
    };
    for p in phdrs {
        if p.p_type(endian) == elf::PT_TLS {
            let (size, align): (u64, u64) = (p.p_memsz(endian).into(), p.p_align(endian).into());
            info.tls = info.tls.saturating_add(size.next_multiple_of(align.max(1)));
        }
        if let Ok(Some(i)) = p.interpreter(endian, data) {
            info.interp = Some(String::from_utf8_lossy(i).into_owned());
        }
        let Some(entries) = super::layout::dynamic_entries::<Elf, _>(p, endian, data) else {
            continue;
        };
        let mut strtab = None;
        for &(tag, val) in &entries {
            if tag == u64::from(elf::DT_STRTAB) {
                strtab = vaddr_to_off(val);
            }
            if tag == u64::from(elf::DT_FLAGS_1) && val & u64::from(elf::DF_1_NODEFLIB) != 0 {
                info.nodeflib = true;
            }
        }
        let Some(strtab) = strtab else { continue };
        let string = |off: u64| -> Option<String> {
            let start = strtab.checked_add(off)?;
            let s = data.read_bytes_at_until(start..start.saturating_add(4096), 0).ok()?;
            Some(String::from_utf8_lossy(s).into_owned())
        };
        for (tag, val) in entries {
            let split = |s: String| -> Vec<String> { s.split(':').map(str::to_string).collect() };
            match tag {
                t if t == u64::from(elf::DT_NEEDED) => info.needed.extend(string(val)),
                t if t == u64::from(elf::DT_RPATH) => info.rpath.extend(string(val).map(split).unwrap_or_default()),
                t if t == u64::from(elf::DT_RUNPATH) => info.runpath.extend(string(val).map(split).unwrap_or_default()),
                t if t == u64::from(elf::DT_SONAME) => info.soname = string(val),
                _ => {}
            }
        }
    }
    Ok(info)
}

/// The value of `$LIB` for this system's ld.so.
fn dst_lib() -> &'static str {
    let multiarch = &DEFAULT_DIRS[0][1..];
    if Path::new(DEFAULT_DIRS[0]).is_dir() {
        multiarch
    } else {
        "lib64"
    }
}

/// Expand `$ORIGIN`, `$LIB`, `$PLATFORM` (also `${...}`) in one search-path entry.
fn expand(entry: &str, origin: &Path) -> String {
    let mut out = entry.to_string();
    for (name, value) in [
        ("ORIGIN", origin.to_string_lossy().into_owned()),
        ("LIB", dst_lib().to_string()),
        ("PLATFORM", "x86_64".to_string()),
    ] {
        out = out
            .replace(&format!("${{{name}}}"), &value)
            .replace(&format!("${name}"), &value);
    }
    out
}

/// One object found during resolution.
struct Loaded {
    path: PathBuf,
    info: DynInfo,
    /// Index of the object that loaded it (for the RPATH chain).
    parent: Option<usize>,
}

/// `/etc/ld.so.cache` as read ([`read_ld_so_cache`]): looked up by name
/// with the reader the preload uses too (`hugetext_abi::reach::cache_paths`:
/// glibc's "new" format, this machine's libc6 entries, no hardware
/// capability subdirectories).
#[derive(Debug, Default)]
pub struct LdCache(Vec<u8>);

impl LdCache {
    /// The paths the cache gives for the library file name `name`, in its
    /// order.
    pub fn paths(&self, name: &str) -> Vec<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = Vec::new();
        hugetext_abi::reach::cache_paths(&self.0, name.as_bytes(), hugetext_abi::reach::CACHE_FLAGS, |p| {
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(p)));
            false
        });
        out
    }
}

/// `/etc/ld.so.cache` ([`read_ld_so_cache`]), read once per process for as
/// long as the file stays the same (device, inode, size and modification
/// time): `run` resolves more than one set of libraries before it execs.
pub fn ld_so_cache() -> std::sync::Arc<LdCache> {
    use std::sync::{Arc, Mutex};
    type Key = (u64, u64, u64, i64, i64);
    static KEPT: Mutex<Option<(Key, Arc<LdCache>)>> = Mutex::new(None);
    const PATH: &str = "/etc/ld.so.cache";
    let key = std::fs::metadata(PATH)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()));
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if let (Some(k), Some((old, cache))) = (key, kept.as_ref()) {
        if *old == k {
            return Arc::clone(cache);
        }
    }
    let cache = Arc::new(read_ld_so_cache(Path::new(PATH)));
    *kept = key.map(|k| (k, Arc::clone(&cache)));
    cache
}

/// Read `/etc/ld.so.cache` (empty when it cannot be read: nothing is found
/// in it then).
pub fn read_ld_so_cache(path: &Path) -> LdCache {
    LdCache(std::fs::read(path).unwrap_or_default())
}

/// Resolve `exe`'s interpreter and every shared library it loads, each once,
/// as canonical paths: the interpreter first, then libraries in ld.so's
/// breadth-first load order.
///
/// Errors when `exe` cannot be read or is not ELF, or when a needed library
/// cannot be found (naming it and who needs it, like ld.so would).
/// A static executable yields an empty list.
pub fn resolve_deps(exe: &Path) -> Result<Vec<PathBuf>> {
    let file = crate::openfile::open_regular(exe, crate::openfile::Follow::Yes).map_err(|e| Error::io(exe, e))?;
    resolve_deps_of(&file, exe)
}

/// [`resolve_deps`] of a program already open as `file` (its path `exe`
/// only names it and gives `$ORIGIN`): its interpreter and `DT_NEEDED`
/// are read from `file`, not from whatever `exe` names by now.
pub fn resolve_deps_of(file: &File, exe: &Path) -> Result<Vec<PathBuf>> {
    resolve_objects(file, exe, true).map(|(paths, _)| paths)
}

/// The static TLS that `exe`'s interpreter and libraries loaded at start
/// need, in bytes (each `PT_TLS` segment's size rounded up to its
/// alignment), from one resolution ([`resolve_deps`]'s); the program's own
/// is not counted. Errors as [`resolve_deps`] does.
pub fn deps_static_tls(exe: &Path) -> Result<u64> {
    let file = crate::openfile::open_regular(exe, crate::openfile::Follow::Yes).map_err(|e| Error::io(exe, e))?;
    resolve_objects(&file, exe, false).map(|(_, tls)| tls)
}

/// [`resolve_deps_of`], with the static TLS of what it found
/// ([`deps_static_tls`]). `canonical`: the paths returned are canonical
/// (else as found: the static TLS needs no `realpath` of each library).
fn resolve_objects(file: &File, exe: &Path, canonical: bool) -> Result<(Vec<PathBuf>, u64)> {
    let exe_canon = exe.canonicalize().map_err(|e| Error::io(exe, e))?;
    let info = read_dyn_of(file).map_err(|e| Error::Elf {
        path: exe.into(),
        msg: e.0,
    })?;
    let ld_library_path = ld_library_path();
    let cache = ld_so_cache();
    let mut tls = 0u64;
    let mut result: Vec<PathBuf> = Vec::new();
    let mut seen_files: HashSet<(u64, u64)> = HashSet::new();
    // `key`: the file's (device, inode) when it was read already.
    let mut push = |p: &Path, key: Option<(u64, u64)>, result: &mut Vec<PathBuf>| -> Result<()> {
        let canon = match canonical {
            true => p.canonicalize().map_err(|e| Error::io(p, e))?,
            false => p.to_path_buf(),
        };
        let key = match key {
            Some(k) => k,
            None => {
                let m = std::fs::metadata(&canon).map_err(|e| Error::io(&canon, e))?;
                (m.dev(), m.ino())
            }
        };
        if seen_files.insert(key) {
            result.push(canon);
        }
        Ok(())
    };
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut objs: Vec<Loaded> = Vec::new();
    let (want64, want_machine) = (info.class64, info.machine);
    if let Some(interp) = &info.interp {
        let i = read_dyn(Path::new(interp)).ok();
        push(Path::new(interp), i.as_ref().map(|i| i.key), &mut result)?;
        // ld.so is loaded under its own name: a DT_NEEDED of it matches.
        if let Some(i) = i {
            tls = tls.saturating_add(i.tls);
            if let Some(s) = &i.soname {
                names.insert(s.clone(), usize::MAX);
            }
        }
        names.insert(interp.clone(), usize::MAX);
        if let Some(base) = Path::new(interp).file_name() {
            names.insert(base.to_string_lossy().into_owned(), usize::MAX);
        }
    }
    objs.push(Loaded {
        path: exe_canon.clone(),
        info,
        parent: None,
    });
    let mut inodes: HashMap<(u64, u64), usize> = HashMap::new();
    inodes.insert(objs[0].info.key, 0);
    let mut queue = VecDeque::from([0usize]);
    while let Some(idx) = queue.pop_front() {
        let needed = objs[idx].info.needed.clone();
        for name in needed {
            if names.contains_key(&name) {
                continue;
            }
            let found = search(&name, idx, &objs, &ld_library_path, &cache, want64, want_machine);
            let Some((path, dinfo)) = found else {
                return Err(Error::Other(format!(
                    "{}: cannot find {name} (needed by {}); ld.so would fail too",
                    exe.display(),
                    objs[idx].path.display()
                )));
            };
            let key = dinfo.key;
            if let Some(&existing) = inodes.get(&key) {
                names.insert(name, existing);
                continue;
            }
            let new_idx = objs.len();
            names.insert(name, new_idx);
            if let Some(s) = &dinfo.soname {
                names.entry(s.clone()).or_insert(new_idx);
            }
            inodes.insert(key, new_idx);
            push(&path, Some(key), &mut result)?;
            tls = tls.saturating_add(dinfo.tls);
            objs.push(Loaded {
                path,
                info: dinfo,
                parent: Some(idx),
            });
            queue.push_back(new_idx);
        }
    }
    Ok((result, tls))
}

/// Find one DT_NEEDED `name` requested by `objs[req]`.
fn search(
    name: &str,
    req: usize,
    objs: &[Loaded],
    ld_library_path: &[String],
    cache: &LdCache,
    want64: bool,
    want_machine: u16,
) -> Option<(PathBuf, DynInfo)> {
    let try_path = |p: &Path| -> Option<(PathBuf, DynInfo)> {
        let info = read_dyn(p).ok()?;
        (info.class64 == want64 && info.machine == want_machine).then(|| (p.to_path_buf(), info))
    };
    if name.contains('/') {
        return try_path(Path::new(name));
    }
    let origin_of = |i: usize| objs[i].path.parent().map(Path::to_path_buf).unwrap_or_default();
    let in_dirs = |dirs: &[String], origin: &Path| -> Option<(PathBuf, DynInfo)> {
        dirs.iter().find_map(|d| {
            let d = expand(d, origin);
            let d = if d.is_empty() { ".".to_string() } else { d };
            try_path(&Path::new(&d).join(name))
        })
    };
    // DT_RPATH of the requester and its loaders, unless the requester has DT_RUNPATH.
    if objs[req].info.runpath.is_empty() {
        let mut cur = Some(req);
        while let Some(i) = cur {
            if let Some(hit) = in_dirs(&objs[i].info.rpath, &origin_of(i)) {
                return Some(hit);
            }
            cur = objs[i].parent;
        }
    }
    // LD_LIBRARY_PATH ($ORIGIN there refers to the executable).
    if let Some(hit) = in_dirs(ld_library_path, &origin_of(0)) {
        return Some(hit);
    }
    if let Some(hit) = in_dirs(&objs[req].info.runpath, &origin_of(req)) {
        return Some(hit);
    }
    if objs[req].info.nodeflib {
        return None;
    }
    if let Some(hit) = cache.paths(name).iter().find_map(|p| try_path(p)) {
        return Some(hit);
    }
    DEFAULT_DIRS.iter().find_map(|d| try_path(&Path::new(d).join(name)))
}

/// The `PT_INTERP` of `path` (its dynamic loader), if it is a dynamic ELF
/// program.
pub fn interpreter(path: &Path) -> Option<String> {
    read_dyn(path).ok()?.interp
}

/// `LD_LIBRARY_PATH` as the dynamic loader splits it.
pub fn ld_library_path() -> Vec<String> {
    std::env::var("LD_LIBRARY_PATH")
        .map(|v| {
            v.split([':', ';'])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The libraries `obj` needs (`DT_NEEDED`, and theirs) that the dynamic
/// loader cannot find when it loads `obj` into a link namespace of its own,
/// as it loads an `LD_AUDIT` module: nothing is loaded there yet, so every
/// name, libc and ld.so included, is searched in `LD_LIBRARY_PATH`
/// (`ld_library_path`), the `cache` (`/etc/ld.so.cache`) and the loader's
/// system directories `dirs` (ld.so itself is recognised only once found
/// there). Names that are paths are taken as they are.
pub fn missing_in_new_namespace(
    obj: &Path,
    ld_library_path: &[String],
    cache: &LdCache,
    dirs: &[PathBuf],
) -> Vec<String> {
    let Ok(root) = read_dyn(obj) else { return Vec::new() };
    let (want64, machine) = (root.class64, root.machine);
    let fits = |p: &Path| read_dyn(p).ok().filter(|i| i.class64 == want64 && i.machine == machine);
    let find = |name: &str| -> Option<DynInfo> {
        if name.contains('/') {
            return fits(Path::new(name));
        }
        let lib_dirs = ld_library_path.iter().map(PathBuf::from);
        let cached = cache.paths(name).into_iter();
        let system = dirs.iter().map(|d| d.join(name));
        lib_dirs
            .map(|d| d.join(name))
            .chain(cached)
            .chain(system)
            .find_map(|p| fits(&p))
    };
    let (mut seen, mut missing) = (HashSet::new(), Vec::new());
    let mut queue = VecDeque::from([root]);
    while let Some(info) = queue.pop_front() {
        for name in info.needed {
            if !seen.insert(name.clone()) {
                continue;
            }
            match find(&name) {
                Some(i) => queue.push_back(i),
                None => missing.push(name),
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache as the C library's own tool reads it: every entry
    /// `ldconfig -p` lists for this machine's libc6 (no hardware capability
    /// subdirectories) is found, with the same paths in the same order.
    #[test]
    fn the_cache_gives_what_ldconfig_lists() {
        let Ok(out) = std::process::Command::new("ldconfig").arg("-p").output() else {
            eprintln!("no ldconfig: skipped");
            return;
        };
        let tag = if cfg!(target_arch = "aarch64") {
            "(libc6,AArch64)"
        } else {
            "(libc6,x86-64)"
        };
        let mut want: Vec<(String, Vec<PathBuf>)> = Vec::new();
        for l in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
            let Some((name, rest)) = l.trim().split_once(' ') else {
                continue;
            };
            let Some((flags, path)) = rest.split_once(" => ") else {
                continue;
            };
            if flags != tag {
                continue;
            }
            match want.iter_mut().find(|(n, _)| n == name) {
                Some((_, paths)) => paths.push(path.into()),
                None => want.push((name.to_string(), vec![path.into()])),
            }
        }
        assert!(want.len() > 10, "ldconfig -p listed {} libraries", want.len());
        let cache = read_ld_so_cache(Path::new("/etc/ld.so.cache"));
        for (name, paths) in &want {
            assert_eq!(&cache.paths(name), paths, "{name}");
        }
        assert!(cache.paths("libno-such-library-here.so.1").is_empty());
    }

    #[test]
    fn expands_dynamic_string_tokens() {
        let o = Path::new("/opt/app/bin");
        assert_eq!(expand("$ORIGIN/../lib", o), "/opt/app/bin/../lib");
        assert_eq!(expand("${ORIGIN}/x:$PLATFORM", o), "/opt/app/bin/x:x86_64");
        assert!(expand("/usr/$LIB", o).starts_with("/usr/lib"));
    }

    #[test]
    fn reads_this_machines_ld_so_cache() {
        let cache = read_ld_so_cache(Path::new("/etc/ld.so.cache"));
        let libc = cache.paths("libc.so.6");
        assert!(libc.iter().any(|p| p.exists()), "{libc:?}");
        assert!(read_ld_so_cache(Path::new("/nonexistent"))
            .paths("libc.so.6")
            .is_empty());
    }
}
