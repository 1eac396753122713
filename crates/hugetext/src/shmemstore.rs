//! The text store: copies of programs and libraries on a tmpfs mounted
//! `huge=within_size`, which `run`'s `shmem` route maps over the text of
//! every process that runs them. tmpfs gives 2 MiB folios on every kernel
//! (4.8+) and filesystem, where the page cache of ext4 before 6.16 (and of
//! most others) has none; every process mapping a copy shares its folios.
//!
//! Each entry is named from its original's identity ([`entry_name`]:
//! device, inode, size, mtime in ns, build-id), so a changed original has
//! no entry and the preload never serves a stale copy; stale entries are
//! removed by the next `warm --shmem` ([`remove_stale`]) and shown by
//! [`list`]. Entries are written
//! by root through [`crate::fsutil::NewFile`] (a new inode, named by
//! `link`, never over anything), mode 0444, root-owned, in a root-owned
//! 0755 directory; the original's path is kept in the entry's
//! `trusted.hugetext.original` attribute (`user.` where `trusted.` cannot
//! be set), for [`list`] and [`remove`].
//!
//! The copy is the file as it is: a text segment's file offset and its
//! run-time address agree modulo 2 MiB exactly where they do in the
//! original, which is all a 2 MiB shmem folio needs to be PMD-mapped. So
//! only files whose text is 2 MiB-congruent and, for PIEs and shared
//! libraries, loaded at a 2 MiB-aligned base (`p_align` ≥ 2 MiB, which
//! glibc's loader and the kernel honour) are taken; others are refused,
//! naming `hugetext align`. (A fixed-address executable whose segments are
//! skewed would need a padded copy at other offsets: not made.)
//!
//! Store pages are Shmem: they stay in memory until the entry is removed
//! (or are swapped out), never dropped like page cache; the mount's size
//! caps them.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where the store is mounted unless `--store` says otherwise.
pub const DEFAULT_ROOT: &str = hugetext_abi::store::DEFAULT_ROOT;

/// The extended attribute holding an entry's original path.
pub const ORIGINAL_XATTR: &str = "trusted.hugetext.original";

/// Where it goes when `trusted.*` cannot be set (no `CAP_SYS_ADMIN`, as in
/// a container; tmpfs has `user.*` attributes from Linux 6.6).
pub const ORIGINAL_XATTR_USER: &str = "user.hugetext.original";

/// The mount option that gives a tmpfs 2 MiB folios for files' data.
pub const HUGE_OPTION: &str = "huge=within_size";

/// Default size cap of the store's mount: this share of RAM, in percent.
pub const DEFAULT_SIZE_PCT: u64 = 25;

/// Prefix of the hidden names of entries being written.
const TEMP_PREFIX: &str = ".hugetext-store-";

/// The store entry name of `file` as it is now:
/// `<st_dev hex>-<st_ino>-<size>-<mtime_ns>-<build-id hex or none>`. The
/// preload computes the same from the descriptor behind a mapping
/// (`hugetext_abi::store::entry_name`, the one writer of the name).
pub fn entry_name(file: &File) -> io::Result<String> {
    let m = file.metadata()?;
    let mut bid = [0u8; 64];
    let n = hugetext_abi::hot::build_id_with(|buf, off| file.read_exact_at(buf, off).is_ok(), &mut bid);
    let id = hugetext_abi::store::Identity {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: hugetext_abi::store::mtime_ns(m.mtime(), m.mtime_nsec()),
        build_id: n.map(|n| &bid[..n]),
    };
    let mut out = [0u8; hugetext_abi::store::NAME_MAX];
    let name = hugetext_abi::store::entry_name(&id, &mut out);
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// Is `name` an entry's name (not a file being written, not anything
/// else)?
fn is_entry_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('-').collect();
    // A negative mtime adds an empty part.
    (5..=6).contains(&parts.len())
        && parts[0].bytes().all(|b| b.is_ascii_hexdigit())
        && parts[1].bytes().all(|b| b.is_ascii_digit())
        && !parts[1].is_empty()
        && parts[2].bytes().all(|b| b.is_ascii_digit())
}

/// How the store's directory is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The filesystem type (`tmpfs` for a usable store).
    pub fstype: String,
    /// The superblock options (`huge=within_size`, `size=...`).
    pub options: String,
}

impl Mount {
    /// Does it give 2 MiB folios to files' data?
    pub fn is_huge(&self) -> bool {
        self.fstype == "tmpfs"
            && self
                .options
                .split(',')
                .any(|o| o == "huge=within_size" || o == "huge=always")
    }

    /// The size cap in bytes, when the options say.
    pub fn size(&self) -> Option<u64> {
        let v = self.options.split(',').find_map(|o| o.strip_prefix("size="))?;
        hugetext_abi::env::parse_size(v.as_bytes())
    }
}

/// The mount whose mount point is exactly `dir`, from
/// `/proc/self/mountinfo` text (the last one: it hides the others).
pub fn mount_at(mountinfo: &str, dir: &Path) -> Option<Mount> {
    let unescape = |s: &str| {
        let mut out = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
                out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
                i += 4;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let want = dir.to_string_lossy();
    mountinfo.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let point = unescape(left.split(' ').nth(4)?);
        if point != want {
            return None;
        }
        let mut r = right.split(' ');
        let fstype = r.next()?.to_string();
        let _source = r.next()?;
        let options = r.next().unwrap_or("").to_string();
        Some(Mount { fstype, options })
    })
}

/// What [`ensure_mounted`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounted {
    /// It mounted the store now.
    pub now: bool,
    /// The size cap, bytes (when known).
    pub size: Option<u64>,
}

/// `pct` percent of RAM, bytes.
pub fn share_of_ram(pct: u64) -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024;
    total / 100 * pct
}

/// Parse a `--shmem-size`: a share of RAM (`25%`) or a size (`4G`, `512M`).
pub fn parse_size_cap(v: &str) -> Result<u64> {
    let bad = || {
        Error::Invalid(format!(
            "bad store size {v:?}: give a share of RAM (25%) or a size (4G, 512M)"
        ))
    };
    let n = match v.strip_suffix('%') {
        Some(p) => match p.parse::<u64>() {
            Ok(p) if (1..=100).contains(&p) => share_of_ram(p),
            _ => return Err(bad()),
        },
        None => hugetext_abi::env::parse_size(v.as_bytes()).ok_or_else(bad)?,
    };
    if n < 2 << 20 {
        return Err(bad());
    }
    Ok(n)
}

/// Make sure `root` is a tmpfs mounted `huge=within_size` (or `always`):
/// mount one there (the directory made first, root-owned 0755, capped at
/// `size` bytes) when nothing is mounted there and we are root. Errors
/// when something else is mounted there, or we are not root.
pub fn ensure_mounted(root: &Path, size: u64) -> Result<Mounted> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| Error::io("/proc/self/mountinfo", e))?;
    if let Some(m) = mount_at(&mi, root) {
        if m.is_huge() {
            open_the_way(root)?;
            return Ok(Mounted {
                now: false,
                size: m.size(),
            });
        }
        return Err(Error::Unsupported(format!(
            "{}: mounted as {} ({}), not a tmpfs with {HUGE_OPTION}: the store would hold no 2 MiB pages; \
             unmount it or name another directory with --store",
            root.display(),
            m.fstype,
            m.options
        )));
    }
    if !rustix::process::geteuid().is_root() {
        return Err(Error::Permission(format!(
            "{}: the text store is not mounted; as root, hugetext warm --shmem mounts it (a tmpfs with {HUGE_OPTION})",
            root.display()
        )));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(root)
        .map_err(|e| Error::io(root, e))?;
    open_the_way(root)?;
    let data = std::ffi::CString::new(format!("{HUGE_OPTION},size={size},mode=0755,uid=0,gid=0"))
        .map_err(|_| Error::Invalid("bad mount options".into()))?;
    let flags = rustix::mount::MountFlags::NODEV | rustix::mount::MountFlags::NOSUID;
    rustix::mount::mount("hugetext-text", root, "tmpfs", flags, data.as_c_str()).map_err(|e| Error::Sys {
        call: "mount(tmpfs)",
        source: e.into(),
    })?;
    Ok(Mounted {
        now: true,
        size: Some(size),
    })
}

use std::os::unix::fs::DirBuilderExt;

/// Every user's processes open store entries by path: each directory above
/// `root` must let others pass (`o+x`). One of root's own that does not
/// (such as `/run/hugetext`, 0700 when an older hugetext made it for its
/// caches) is opened for passing, not for listing (`go+x`); another
/// owner's is an error naming it.
fn open_the_way(root: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for dir in root.ancestors().skip(1) {
        let Ok(m) = std::fs::metadata(dir) else { continue };
        let mode = m.permissions().mode() & 0o7777;
        if mode & 0o001 != 0 {
            continue;
        }
        if m.uid() != 0 || !rustix::process::geteuid().is_root() {
            return Err(Error::Permission(format!(
                "{}: other users cannot pass this directory (mode {mode:04o}), so their programs cannot open the text \
                 store under it; chmod o+x it or name another store with --store",
                dir.display()
            )));
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011)).map_err(|e| Error::io(dir, e))?;
    }
    Ok(())
}

/// Why a file cannot go into the store, or its text windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eligible {
    /// Storable.
    Yes {
        /// Whole windows of the huge unit in its text segments.
        windows: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// Nothing to share: no whole window of text.
    NoWindow,
    /// Cannot be shared from a copy as it is: the reason, naming the fix.
    Refused(String),
}

/// Whether `file` can be shared from a copy as it is (see the module
/// documentation).
pub fn eligible(file: &File, unit: u64) -> Eligible {
    let data = object::ReadCache::new(file);
    let m = match crate::elf::layout::Model::parse(&data) {
        Ok(m) => m,
        Err(_) => return Eligible::Refused("not an ELF file: only programs and shared libraries are stored".into()),
    };
    let dynamic = m.e_type == object::elf::ET_DYN;
    if !dynamic && m.e_type != object::elf::ET_EXEC {
        return Eligible::Refused("not an executable or shared library".into());
    }
    let (mut windows, mut skewed) = (0u64, false);
    for (_, p) in m.loads().filter(|(_, p)| p.executable()) {
        if !hugetext_abi::geometry::congruent(p.p_vaddr, p.p_offset, unit) {
            skewed = true;
        }
        windows += crate::elf::check::whole_windows(p.p_vaddr, p.p_filesz, unit);
    }
    if windows == 0 {
        return Eligible::NoWindow;
    }
    let size = crate::units::human(unit);
    if skewed && !dynamic {
        return Eligible::Refused(format!(
            "a fixed-address executable whose text offsets are not congruent with its addresses modulo {size}: \
             a copy would need padding, which the store does not make; run hugetext align on it"
        ));
    }
    if skewed {
        return Eligible::Refused(format!(
            "its text offsets are not congruent with its addresses modulo {size}: run hugetext align on it"
        ));
    }
    if dynamic && m.max_load_align() < unit {
        return Eligible::Refused(format!(
            "p_align is below {size}, so it is loaded at a base that differs between processes and its text \
             cannot be shared in {size} pages; run hugetext align on it"
        ));
    }
    Eligible::Yes {
        windows,
        bytes: windows * unit,
    }
}

/// What [`add`] did with one file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Added {
    /// The original.
    pub path: PathBuf,
    /// The entry's name in the store.
    pub entry: String,
    /// It was in the store already (unchanged original).
    pub existed: bool,
    /// Whole 2 MiB windows of text.
    pub windows: u64,
    /// Bytes of the copy (the whole file: the store's memory cost).
    pub bytes: u64,
    /// Text windows whose store pages are 2 MiB folios.
    pub huge_windows: u64,
}

/// Put `path` in the store at `root` (mounted), or find it there; then
/// count its text windows held in 2 MiB folios (from `/proc/kpageflags`).
/// `Ok(Err(why))`: the file is refused (not eligible).
pub fn add(root: &Path, path: &Path) -> Result<std::result::Result<Added, String>> {
    let unit = crate::kernel::unit_size() as u64;
    let real = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
    let orig = crate::openfile::open_regular(&real, crate::openfile::Follow::No).map_err(|e| Error::io(&real, e))?;
    let windows = match eligible(&orig, unit) {
        Eligible::Yes { windows, .. } => windows,
        Eligible::NoWindow => {
            return Ok(Err(format!(
                "no whole {} window of text: nothing to share",
                crate::units::human(unit)
            )))
        }
        Eligible::Refused(why) => return Ok(Err(why)),
    };
    let name = entry_name(&orig).map_err(|e| Error::io(&real, e))?;
    let target = root.join(&name);
    let existed = match std::fs::symlink_metadata(&target) {
        Ok(m) => {
            let ok = is_ours(&m);
            if !ok {
                // Not one of ours: replaced below.
                std::fs::remove_file(&target).map_err(|e| Error::io(&target, e))?;
            }
            ok
        }
        Err(_) => false,
    };
    if !existed {
        write_copy(&orig, &real, &target)?;
    }
    let entry =
        crate::openfile::open_regular(&target, crate::openfile::Follow::No).map_err(|e| Error::io(&target, e))?;
    let huge_windows = huge_text_windows(&orig, &entry, &target, unit)?;
    Ok(Ok(Added {
        path: real,
        entry: name,
        existed,
        windows,
        bytes: entry.metadata().map_err(|e| Error::io(&target, e))?.len(),
        huge_windows,
    }))
}

/// An entry as the store writes them: a regular file of root's, written
/// by no one else, with one name.
fn is_ours(m: &std::fs::Metadata) -> bool {
    m.file_type().is_file() && m.uid() == 0 && m.mode() & 0o022 == 0 && m.nlink() == 1
}

/// Whether the store at `root` holds a valid copy of `path` as it is now
/// (its entry exists and is one the store wrote), without copying or
/// measuring anything: what a caller checks before [`add`].
pub fn has_entry(root: &Path, path: &Path) -> Result<bool> {
    let f = crate::openfile::open_regular(path, crate::openfile::Follow::No).map_err(|e| Error::io(path, e))?;
    let name = entry_name(&f).map_err(|e| Error::io(path, e))?;
    Ok(std::fs::symlink_metadata(root.join(name)).is_ok_and(|m| is_ours(&m)))
}

/// Write the copy of `orig` (at `real`) as `target`: sized first (so that
/// `huge=within_size` gives every window a 2 MiB folio as it is written),
/// mode 0444, the original's path in [`ORIGINAL_XATTR`].
fn write_copy(orig: &File, real: &Path, target: &Path) -> Result<()> {
    let err = |e: io::Error| Error::io(target, e);
    let out = crate::fsutil::check_output(target).map_err(err)?;
    let new = crate::fsutil::NewFile::beside_with_mode(&out, TEMP_PREFIX, 0o444).map_err(err)?;
    let size = orig.metadata().map_err(|e| Error::io(real, e))?.len();
    {
        let mut f = new.file();
        f.set_len(size).map_err(err)?;
        let mut r = orig;
        // From the start: reading the ELF headers moved the position.
        io::Seek::seek(&mut r, io::SeekFrom::Start(0)).map_err(|e| Error::io(real, e))?;
        let n = io::copy(&mut r, &mut f).map_err(err)?;
        if n != size {
            return Err(Error::Other(format!(
                "{}: changed while it was copied into the store; run again",
                real.display()
            )));
        }
        f.set_permissions(std::fs::Permissions::from_mode(0o444)).map_err(err)?;
        use std::os::unix::ffi::OsStrExt;
        // Without the attribute (a tmpfs without xattrs) the entry is still
        // served, but `list` cannot name its original and the next `warm
        // --shmem` removes it.
        let path = real.as_os_str().as_bytes();
        let none = rustix::fs::XattrFlags::empty();
        if rustix::fs::fsetxattr(f, ORIGINAL_XATTR, path, none).is_err() {
            let _ = rustix::fs::fsetxattr(f, ORIGINAL_XATTR_USER, path, none);
        }
    }
    new.commit(&out).map_err(err)
}

/// Of the text windows of `orig`, how many the copy `entry` holds in
/// folios of the huge unit.
fn huge_text_windows(orig: &File, entry: &File, path: &Path, unit: u64) -> Result<u64> {
    let f = crate::folio::scan_open(entry, path, None)?;
    let data = object::ReadCache::new(orig);
    let Ok(m) = crate::elf::layout::Model::parse(&data) else {
        return Ok(0);
    };
    let mut n = 0;
    for (_, p) in m.loads().filter(|(_, p)| p.executable()) {
        let w = hugetext_abi::geometry::Windows::<u64>::new(p.p_offset, p.p_offset + p.p_filesz, unit);
        n += (0..w.count()).filter(|&i| f.unit_windows.contains(&w.at(i))).count() as u64;
    }
    Ok(n)
}

/// The state of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// The original is as it was copied: served.
    Valid,
    /// The original changed (or is gone): never served, removed by the
    /// next `warm --shmem`.
    Stale,
    /// The entry does not name its original, so it cannot be checked
    /// here (the preload still serves it while its name matches a file):
    /// removed by the next `warm --shmem`.
    Unknown,
}

/// One entry of the store.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Entry {
    /// Its name in the store.
    pub name: String,
    /// The original's path, as recorded.
    pub original: Option<PathBuf>,
    /// Bytes.
    pub bytes: u64,
    /// Valid, stale or unknown.
    pub state: State,
}

/// The entries of the store at `root` and whether each is still valid.
pub fn list(root: &Path) -> Result<Vec<Entry>> {
    let rd = std::fs::read_dir(root).map_err(|e| Error::io(root, e))?;
    let mut out = Vec::new();
    for d in rd.flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        if !is_entry_name(&name) {
            continue;
        }
        let Ok(m) = d.metadata() else { continue };
        let f = crate::openfile::open_regular(&d.path(), crate::openfile::Follow::No).ok();
        let original = f.as_ref().and_then(|f| {
            crate::fsutil::get_xattr(f, ORIGINAL_XATTR)
                .or_else(|_| crate::fsutil::get_xattr(f, ORIGINAL_XATTR_USER))
                .ok()
                .map(|v| PathBuf::from(std::ffi::OsString::from(String::from_utf8_lossy(&v).into_owned())))
        });
        let state = match &original {
            None => State::Unknown,
            Some(o) => match crate::openfile::open_regular(o, crate::openfile::Follow::No)
                .ok()
                .and_then(|f| entry_name(&f).ok())
            {
                Some(now) if now == name => State::Valid,
                _ => State::Stale,
            },
        };
        out.push(Entry {
            name,
            original,
            bytes: m.len(),
            state,
        });
    }
    out.sort_by(|a, b| a.original.cmp(&b.original).then(a.name.cmp(&b.name)));
    Ok(out)
}

/// Remove the entries `which` selects (and files left by writes that were
/// killed); the removed entries.
pub fn remove(root: &Path, which: impl Fn(&Entry) -> bool) -> Result<Vec<Entry>> {
    crate::fsutil::remove_leftovers(root);
    let mut gone = Vec::new();
    for e in list(root)? {
        if which(&e) {
            let p = root.join(&e.name);
            std::fs::remove_file(&p).map_err(|err| Error::io(&p, err))?;
            gone.push(e);
        }
    }
    Ok(gone)
}

/// [`remove`] the entries that must never be served (stale or unknown).
pub fn remove_stale(root: &Path) -> Result<Vec<Entry>> {
    remove(root, |e| e.state != State::Valid)
}

/// The files to store: `paths`, and with `deps` the libraries each
/// program loads; each once.
pub fn expand(paths: &[PathBuf], deps: bool) -> Vec<(PathBuf, Result<()>)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let mut push = |p: PathBuf, r: Result<()>, out: &mut Vec<(PathBuf, Result<()>)>| {
        let key = std::fs::metadata(&p).map(|m| (m.dev(), m.ino())).ok();
        let new = match key {
            Some(k) => seen.insert(k),
            None => true,
        };
        if new {
            out.push((p, r));
        }
    };
    for p in paths {
        push(p.clone(), Ok(()), &mut out);
        if deps {
            match crate::elf::deps::resolve_deps(p) {
                Ok(libs) => {
                    for l in libs {
                        push(l, Ok(()), &mut out);
                    }
                }
                Err(e) => out.push((p.clone(), Err(e))),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_point_is_found_and_its_huge_option_read() {
        let mi = "\
25 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw
30 25 0:26 / /run rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=1624k,mode=755
41 30 0:40 / /run/hugetext/text rw,nosuid,nodev - tmpfs hugetext-text rw,size=4194304k,mode=755,huge=within_size
42 25 0:41 / /srv/my\\040store rw - tmpfs x rw,size=2048k
";
        let m = mount_at(mi, Path::new("/run/hugetext/text")).unwrap();
        assert!(m.is_huge());
        assert_eq!(m.size(), Some(4194304 << 10));
        let run = mount_at(mi, Path::new("/run")).unwrap();
        assert!(!run.is_huge());
        assert!(mount_at(mi, Path::new("/run/hugetext")).is_none());
        let spaced = mount_at(mi, Path::new("/srv/my store")).unwrap();
        assert_eq!(spaced.fstype, "tmpfs");
        assert!(!spaced.is_huge());
    }

    #[test]
    fn entry_names_are_told_from_other_files() {
        assert!(is_entry_name("803-1234-16777216-1700000000123456789-ab01ff"));
        assert!(is_entry_name("0-1-2--5-none"));
        assert!(!is_entry_name(".hugetext-store-abcdef"));
        assert!(!is_entry_name("lost+found"));
    }

    #[test]
    fn the_name_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"not elf").unwrap();
        let f = File::open(&p).unwrap();
        let a = entry_name(&f).unwrap();
        let m = f.metadata().unwrap();
        assert!(a.starts_with(&format!("{:x}-{}-7-", m.dev(), m.ino())), "{a}");
        assert!(a.ends_with("-none"), "{a}");
        // A new mtime: a new name.
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::options().write(true).open(&p).unwrap().set_modified(t).unwrap();
        assert_ne!(entry_name(&File::open(&p).unwrap()).unwrap(), a);
    }

    #[test]
    fn size_caps_parse() {
        assert_eq!(parse_size_cap("512M").unwrap(), 512 << 20);
        assert!(parse_size_cap("25%").unwrap() > 0);
        for bad in ["0%", "101%", "x", "1K", ""] {
            assert!(parse_size_cap(bad).is_err(), "{bad}");
        }
    }
}
