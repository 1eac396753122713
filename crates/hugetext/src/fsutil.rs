//! Replacing a file safely, and what a replacement affects.
//!
//! Both `align` (a rewritten ELF file) and `warm --replace` (a warmed
//! identical copy) put a new inode in place of an existing file. They share
//! the same steps, all here:
//!
//! 1. [`NewFile::beside`]: a temporary file in the target's directory (so the
//!    final rename is atomic), removed again if anything fails before
//!    [`NewFile::commit`];
//! 2. [`copy_metadata`]: the original's owner, then its mode (set-id bits
//!    after the `chown`, which clears them), then every extended attribute
//!    (`security.capability` among them; `chown` clears that too), then,
//!    optionally, its access and modification times;
//! 3. [`NewFile::commit`]: `fsync`, close, `rename` over the target, `fsync`
//!    the directory.
//!
//! Every name hugetext writes a file at goes through [`check_output`] first
//! (the rule: [`output_refusal`]), and [`NewFile::commit`] renames only
//! over what that check saw.
//!
//! [`ReplaceImpact::of`] says what a new inode at the file's name loses or
//! invalidates: IMA/EVM signatures, fs-verity protection, other hard links,
//! and the immutable/append-only flags that forbid the rename. The callers
//! phrase the refusals and warnings in their own terms.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxAttributes, StatxFlags};

/// What a name that hugetext is about to write holds, as `lstat` sees it
/// (links are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Nothing: a new file.
    Missing,
    /// A regular file owned by `uid`.
    Regular {
        /// Its owner.
        uid: u32,
    },
    /// A symbolic link.
    Symlink,
    /// A directory.
    Directory,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

impl Existing {
    fn of(m: &Metadata) -> Existing {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        match () {
            _ if t.is_symlink() => Existing::Symlink,
            _ if t.is_dir() => Existing::Directory,
            _ if t.is_char_device() => Existing::CharDevice,
            _ if t.is_block_device() => Existing::BlockDevice,
            _ if t.is_fifo() => Existing::Fifo,
            _ if t.is_socket() => Existing::Socket,
            _ => Existing::Regular { uid: m.uid() },
        }
    }
}

/// The facts [`output_refusal`] decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputFacts {
    /// What the name holds now.
    pub existing: Existing,
    /// Who writes (the effective uid).
    pub euid: u32,
    /// The directory's sticky bit (`/tmp`).
    pub dir_sticky: bool,
    /// The directory's owner.
    pub dir_uid: u32,
}

/// The rule for every file hugetext writes: a new name, or a regular file
/// the writer owns. Never a symbolic link (neither followed nor replaced), a
/// directory, a device, a FIFO or a socket. Root may also replace another
/// user's regular file, except in a sticky directory (`/tmp`) where the file
/// belongs neither to root nor to the directory's owner: such a file was put
/// there by someone else (the kernel's `protected_regular` rule, applied
/// whatever that sysctl says). `None` when writing may go ahead, else the
/// reason, in words that follow "NAME: refusing to write: ".
pub fn output_refusal(f: &OutputFacts) -> Option<String> {
    let not_regular = |what: &str| {
        Some(format!(
            "it is {what}, not a regular file; name a new file or a regular file"
        ))
    };
    match f.existing {
        Existing::Missing => None,
        Existing::Symlink => Some(
            "it is a symbolic link, which hugetext neither follows nor replaces; name the file itself or a new one"
                .into(),
        ),
        Existing::Directory => not_regular("a directory"),
        Existing::CharDevice => not_regular("a character device"),
        Existing::BlockDevice => not_regular("a block device"),
        Existing::Fifo => not_regular("a FIFO"),
        Existing::Socket => not_regular("a socket"),
        Existing::Regular { uid } if uid == f.euid => None,
        Existing::Regular { uid } if f.euid != 0 => Some(format!(
            "it belongs to uid {uid}, not to you (uid {}); remove it or name another file",
            f.euid
        )),
        Existing::Regular { uid } if f.dir_sticky && uid != f.dir_uid => Some(format!(
            "it belongs to uid {uid} in a sticky directory it does not own (as in /tmp), so someone else put it there; \
             remove it or name another file"
        )),
        Existing::Regular { .. } => None,
    }
}

/// A file's identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    /// Device number (`st_dev`).
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

impl FileId {
    /// The identity in `m`.
    pub fn of(m: &Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// A name checked by [`check_output`]: [`NewFile::commit`] puts the new file
/// there only if the name still holds what the check saw (nothing, or the
/// same regular file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    path: PathBuf,
    existing: Option<FileId>,
}

impl Output {
    /// The name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The regular file the name holds now, if any.
    pub fn existing(&self) -> Option<FileId> {
        self.existing
    }
}

/// Check that a file may be written at `path` ([`output_refusal`]); `lstat`
/// only, no link is followed. The refusal is an error of kind
/// `PermissionDenied` whose text is one line: "refusing to write: ...".
pub fn check_output(path: &Path) -> io::Result<Output> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let dir = std::fs::metadata(dir_of(path))?;
    let facts = OutputFacts {
        existing: m.as_ref().map_or(Existing::Missing, Existing::of),
        euid: rustix::process::geteuid().as_raw(),
        dir_sticky: dir.mode() & libc::S_ISVTX != 0,
        dir_uid: dir.uid(),
    };
    match output_refusal(&facts) {
        Some(why) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing to write: {why}"),
        )),
        None => Ok(Output {
            path: path.to_path_buf(),
            existing: m.as_ref().map(FileId::of),
        }),
    }
}

/// A new file being written next to the file it will replace. Dropped
/// without [`commit`](NewFile::commit), it is removed.
#[derive(Debug)]
pub struct NewFile {
    /// Open read-write until the commit closes it.
    file: Option<File>,
    /// Removes the file when dropped, unless persisted.
    path: tempfile::TempPath,
    dir: PathBuf,
    /// Its inode: what its name must still hold when it is opened again or
    /// renamed (another user who owns the directory could swap it).
    id: FileId,
}

impl NewFile {
    /// Create an empty file (mode 0600, a unique name starting with
    /// `prefix`) in the directory of `target`.
    pub fn beside(target: &Output, prefix: &str) -> io::Result<NewFile> {
        NewFile::beside_with_mode(target, prefix, 0o600)
    }

    /// The same with `mode`, less the umask, as `open` gives a new file: for
    /// a file that does not take its mode from another one.
    ///
    /// The name is random (not one another user can guess and plant first)
    /// and the file is created with `O_CREAT|O_EXCL`, which never follows a
    /// link: it is a new inode of ours, or an error.
    pub fn beside_with_mode(target: &Output, prefix: &str, mode: u32) -> io::Result<NewFile> {
        let dir = dir_of(target.path());
        let (file, path) = new_temp_in(&dir, prefix, mode)?;
        let id = FileId::of(&file.metadata()?);
        Ok(NewFile {
            file: Some(file),
            path,
            dir,
            id,
        })
    }

    /// The open file (read-write).
    ///
    /// # Panics
    /// After [`finish_writing`](NewFile::finish_writing) (a caller bug).
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("NewFile written to after finish_writing")
    }

    /// Where the file is now.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory it is in (the target's).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Flush the content and metadata to disk.
    pub fn sync(&self) -> io::Result<()> {
        self.file().sync_all()
    }

    /// `fsync` the file and close it (a writable descriptor keeps
    /// `MADV_COLLAPSE` away and makes `exec` fail with `ETXTBSY`); returns
    /// the file opened again read-only. [`commit`](NewFile::commit) still
    /// renames it.
    pub fn finish_writing(&mut self) -> io::Result<File> {
        if let Some(f) = self.file.take() {
            f.sync_all()?;
        }
        let ro = File::open(&self.path)?;
        if FileId::of(&ro.metadata()?) != self.id {
            return Err(swapped());
        }
        Ok(ro)
    }

    /// `fsync` the file (unless [`finish_writing`](NewFile::finish_writing)
    /// did), close it, rename it over `target` and `fsync` the
    /// directory so the rename is durable. Closing before the rename matters:
    /// a writable descriptor on a program makes `exec` fail with `ETXTBSY`.
    /// The name must still hold what [`check_output`] saw: for a new name,
    /// the rename fails if anything appeared there meanwhile
    /// (`RENAME_NOREPLACE`); over a file, if another inode took its place.
    /// On error the file is removed and `target` is as it was.
    pub fn commit(mut self, target: &Output) -> io::Result<()> {
        if let Some(f) = self.file.take() {
            f.sync_all()?;
        }
        let NewFile { path, dir, id, .. } = self;
        let ours = std::fs::symlink_metadata(&path)?;
        if !ours.file_type().is_file() || FileId::of(&ours) != id {
            return Err(swapped());
        }
        let changed = || {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the name changed while the new file was being written; nothing was replaced, run again",
            )
        };
        match target.existing {
            None => path
                .persist_noclobber(target.path())
                .map_err(|e| match e.error.kind() {
                    io::ErrorKind::AlreadyExists => changed(),
                    _ => e.error,
                })?,
            Some(id) => {
                let now = std::fs::symlink_metadata(target.path())?;
                if !now.file_type().is_file() || FileId::of(&now) != id {
                    return Err(changed());
                }
                path.persist(target.path()).map_err(|e| e.error)?
            }
        }
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// The error for a temporary file whose name no longer holds it.
fn swapped() -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        "the temporary file was replaced by someone else; nothing was replaced",
    )
}

/// A new file in `dir`: a random name starting with `prefix` (12 random
/// bytes: not one another user can guess and create first), created
/// `O_CREAT|O_EXCL` (never through a link) with `mode` less the umask;
/// removed when the returned path is dropped.
fn new_temp_in(dir: &Path, prefix: &str, mode: u32) -> io::Result<(File, tempfile::TempPath)> {
    use std::os::unix::fs::PermissionsExt;
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .rand_bytes(12)
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?
        .into_parts())
}

/// A scratch file for a probe that needs a name on `dir`'s filesystem
/// (mode 0600; see [`NewFile::beside_with_mode`] for the name): removed
/// when the returned path is dropped.
pub fn scratch_file_in(dir: &Path, prefix: &str) -> io::Result<(File, tempfile::TempPath)> {
    new_temp_in(dir, prefix, 0o600)
}

/// The directory a file is in (`.` for a bare name).
pub fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// What [`copy_metadata`] copies besides mode and extended attributes.
#[derive(Debug, Clone, Default)]
pub struct MetadataCopy<'a> {
    /// Failing to give the new file the original's owner is an error (a
    /// replacement); otherwise the owner stays ours (a new, separate file).
    pub owner_required: bool,
    /// Also copy the access and modification times (an identical copy).
    pub times: bool,
    /// Extended attributes not to copy (e.g. a stale `security.ima`).
    pub skip_xattrs: &'a [String],
}

/// Give `to` the owner, mode (set-id bits included), extended attributes
/// (file capabilities included) and optionally times of `from`, whose
/// metadata is `meta`. Errors are one line naming what could not be kept.
pub fn copy_metadata(from: &File, meta: &Metadata, to: &File, what: &MetadataCopy<'_>) -> io::Result<()> {
    let uid = rustix::fs::Uid::from_raw(meta.uid());
    let gid = rustix::fs::Gid::from_raw(meta.gid());
    match rustix::fs::fchown(to.as_fd(), Some(uid), Some(gid)) {
        Ok(()) => {}
        Err(_) if !what.owner_required => {}
        Err(e) => {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "cannot keep owner {}:{} ({e}); run as root or as the owner",
                    meta.uid(),
                    meta.gid()
                ),
            ))
        }
    }
    // After chown, which clears set-id bits and capabilities.
    rustix::fs::fchmod(to.as_fd(), rustix::fs::Mode::from_raw_mode(meta.mode() & 0o7777))?;
    for name in list_xattrs(from)? {
        if what.skip_xattrs.contains(&name) {
            continue;
        }
        let value = get_xattr(from, &name)?;
        rustix::fs::fsetxattr(to.as_fd(), name.as_str(), &value, rustix::fs::XattrFlags::empty()).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot copy extended attribute {name} ({e})"),
            )
        })?;
    }
    if what.times {
        let ts = |s: i64, ns: i64| rustix::fs::Timespec {
            tv_sec: s,
            tv_nsec: ns as _,
        };
        let times = rustix::fs::Timestamps {
            last_access: ts(meta.atime(), meta.atime_nsec()),
            last_modification: ts(meta.mtime(), meta.mtime_nsec()),
        };
        rustix::fs::futimens(to.as_fd(), &times)?;
    }
    Ok(())
}

/// The names of the extended attributes of an open file (empty where the
/// filesystem has none).
pub fn list_xattrs(file: &File) -> io::Result<Vec<String>> {
    let mut buf = vec![0u8; 4096];
    let n = loop {
        match rustix::fs::flistxattr(file.as_fd(), &mut buf[..]) {
            Ok(n) => break n,
            Err(rustix::io::Errno::RANGE) => {
                let need = rustix::fs::flistxattr_query(file.as_fd())?;
                buf.resize(need.max(buf.len() * 2), 0);
            }
            Err(rustix::io::Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        }
    };
    Ok(buf[..n]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

/// The value of one extended attribute of an open file.
pub fn get_xattr(file: &File, name: &str) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        match rustix::fs::fgetxattr(file.as_fd(), name, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(rustix::io::Errno::RANGE) => {
                let need = rustix::fs::fgetxattr_query(file.as_fd(), name)?;
                buf.resize(need.max(buf.len() * 2), 0);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A signature over a file that a new inode in its place invalidates or
/// loses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// `security.ima`: a hash or signature of the content.
    Ima,
    /// `security.evm`: an HMAC or signature over the attributes.
    Evm,
    /// fs-verity: the inode's content is Merkle-tree protected; a new inode
    /// is not.
    Verity,
}

impl Signature {
    /// The extended attribute that holds it, if it is one.
    pub fn xattr(self) -> Option<&'static str> {
        match self {
            Signature::Ima => Some("security.ima"),
            Signature::Evm => Some("security.evm"),
            Signature::Verity => None,
        }
    }
}

/// What putting a new inode in place of a file affects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaceImpact {
    /// Signatures the replacement invalidates or loses (fs-verity, IMA, EVM
    /// in that order).
    pub signatures: Vec<Signature>,
    /// Hard links to the file (`st_nlink`): the other names keep the old
    /// inode.
    pub links: u64,
    /// `chattr +i`: the name cannot be replaced.
    pub immutable: bool,
    /// `chattr +a`: the name cannot be replaced.
    pub append_only: bool,
}

impl ReplaceImpact {
    /// Look at an open file. Attributes that cannot be read (no xattr or
    /// statx support) count as absent.
    pub fn of(file: &File) -> io::Result<ReplaceImpact> {
        let links = file.metadata()?.nlink();
        let attrs = rustix::fs::statx(file.as_fd(), "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS)
            .map(|st| st.stx_attributes & st.stx_attributes_mask)
            .unwrap_or(StatxAttributes::empty());
        let xattrs = list_xattrs(file).unwrap_or_default();
        let signatures = [Signature::Verity, Signature::Ima, Signature::Evm]
            .into_iter()
            .filter(|s| match s.xattr() {
                Some(x) => xattrs.iter().any(|n| n == x),
                None => attrs.contains(StatxAttributes::VERITY),
            })
            .collect();
        Ok(ReplaceImpact {
            signatures,
            links,
            immutable: attrs.contains(StatxAttributes::IMMUTABLE),
            append_only: attrs.contains(StatxAttributes::APPEND),
        })
    }

    /// The extended attributes a content change makes stale (not to be
    /// copied to a rewritten file).
    pub fn stale_xattrs(&self) -> Vec<String> {
        self.signatures
            .iter()
            .filter_map(|s| s.xattr())
            .map(String::from)
            .collect()
    }
}

/// The filesystem type name for a `statfs` magic number, e.g. `ext4`
/// (the table is `hugetext_abi::fs`, shared with the preload).
pub fn fs_type_name(magic: u64) -> String {
    match hugetext_abi::fs::name(magic) {
        Some(name) => name.to_string(),
        None => format!("unknown (magic {:#x})", magic & hugetext_abi::fs::MAGIC_MASK),
    }
}

/// The filesystem type name of the filesystem holding `path` (`statfs`).
pub fn fs_name_at(path: &Path) -> crate::Result<String> {
    let st = rustix::fs::statfs(path).map_err(|e| crate::Error::io(path, e.into()))?;
    Ok(fs_type_name(st.f_type as u64))
}

/// Memory-backed filesystems (tmpfs, ramfs): files live only in the page
/// cache, so it cannot be evicted and re-read in other folio sizes.
pub fn is_memory_fs(name: &str) -> bool {
    matches!(name, "tmpfs" | "ramfs")
}

/// The filesystem type name of an open file (`fstatfs`), `unknown` if it
/// cannot be told.
pub fn fs_name(f: &File) -> String {
    match rustix::fs::fstatfs(f.as_fd()) {
        Ok(st) => fs_type_name(st.f_type as u64),
        Err(_) => "unknown".into(),
    }
}

/// For a file under an overlayfs mount, the file in the layer it comes
/// from (the upper directory first, then the lower ones, as overlayfs looks
/// them up), found from `/proc/self/mountinfo`; `None` when `path` is not on
/// an overlay or no layer has it. Mapping an overlay file maps that file, so
/// its filesystem decides the page-cache folio sizes.
pub fn overlay_layer_of(path: &Path) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    overlay_layer_in(&info, path, |p| p.exists())
}

/// [`overlay_layer_of`] over the text of a mountinfo file; `exists` says
/// whether a candidate file exists. Pure but for `exists`.
pub fn overlay_layer_in(mountinfo: &str, path: &Path, exists: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let unescape = |s: &str| s.replace("\\040", " ");
    // The overlay mount with the longest mount point that holds `path`.
    let (mnt, opts) = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mnt = PathBuf::from(unescape(pre.split_whitespace().nth(4)?));
            let mut post = post.split_whitespace();
            (post.next()? == "overlay" && path.starts_with(&mnt)).then(|| (mnt, post.nth(1).unwrap_or("").to_string()))
        })
        .max_by_key(|(m, _)| m.as_os_str().len())?;
    let rel = path.strip_prefix(&mnt).ok()?;
    let mut layers: Vec<PathBuf> = Vec::new();
    for o in opts.split(',') {
        if let Some(u) = o.strip_prefix("upperdir=") {
            layers.insert(0, PathBuf::from(unescape(u)));
        } else if let Some(l) = o.strip_prefix("lowerdir=").or_else(|| o.strip_prefix("lowerdir+=")) {
            layers.extend(
                l.split(':')
                    .filter(|d| !d.is_empty())
                    .map(|d| PathBuf::from(unescape(d))),
            );
        }
    }
    layers.into_iter().map(|d| d.join(rel)).find(|p| exists(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    /// A scratch directory in the target directory (on disk, not tmpfs).
    fn scratch() -> tempfile::TempDir {
        let exe = std::env::current_exe().unwrap();
        tempfile::Builder::new()
            .prefix(".fsutil-test-")
            .tempdir_in(exe.parent().unwrap())
            .unwrap()
    }

    #[test]
    fn new_file_is_removed_unless_committed() {
        let dir = scratch();
        let target = dir.path().join("t");
        std::fs::write(&target, b"old").unwrap();
        let out = check_output(&target).unwrap();
        let n = NewFile::beside(&out, ".x-").unwrap();
        let p = n.path().to_path_buf();
        assert!(p.exists() && p.parent() == Some(dir.path()));
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        drop(n);
        assert!(!p.exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"old");

        let mut n = NewFile::beside(&out, ".x-").unwrap();
        n.file().write_all(b"new").unwrap();
        let p = n.path().to_path_buf();
        let ro = n.finish_writing().unwrap();
        assert_eq!(getfl(&ro) & libc::O_ACCMODE, libc::O_RDONLY);
        n.commit(&out).unwrap();
        assert!(!p.exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(dir_of(Path::new("bare")), Path::new("."));
    }

    #[test]
    fn output_rule_allows_new_and_own_regular_files_only() {
        let facts = |existing, euid, dir_sticky, dir_uid| OutputFacts {
            existing,
            euid,
            dir_sticky,
            dir_uid,
        };
        let ok = |f: OutputFacts| output_refusal(&f).is_none();
        assert!(ok(facts(Existing::Missing, 1000, true, 0)));
        assert!(ok(facts(Existing::Regular { uid: 1000 }, 1000, true, 0)));
        for e in [
            Existing::Symlink,
            Existing::Directory,
            Existing::CharDevice,
            Existing::BlockDevice,
            Existing::Fifo,
            Existing::Socket,
        ] {
            assert!(!ok(facts(e, 0, false, 0)), "{e:?} accepted");
            assert!(!ok(facts(e, 1000, false, 1000)), "{e:?} accepted");
        }
        // Another user's file: refused, except to root outside a sticky
        // directory, or when it belongs to the sticky directory's owner.
        assert!(!ok(facts(Existing::Regular { uid: 0 }, 1000, false, 1000)));
        assert!(ok(facts(Existing::Regular { uid: 1000 }, 0, false, 0)));
        assert!(!ok(facts(Existing::Regular { uid: 1000 }, 0, true, 0)));
        assert!(ok(facts(Existing::Regular { uid: 1000 }, 0, true, 1000)));
        let why = output_refusal(&facts(Existing::Symlink, 0, false, 0)).unwrap();
        assert!(why.contains("symbolic link") && !why.contains('\n'), "{why}");
    }

    #[test]
    fn commit_renames_only_over_what_was_checked() {
        use std::os::unix::fs::symlink;
        let dir = scratch();
        let new = dir.path().join("new");
        let out = check_output(&new).unwrap();
        let n = NewFile::beside(&out, ".x-").unwrap();
        // Something appears at the name after the check: not replaced.
        symlink("/etc/hostname", &new).unwrap();
        let e = n.commit(&out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert!(std::fs::symlink_metadata(&new).unwrap().file_type().is_symlink());
        // An existing file swapped for another inode: not replaced either.
        let old = dir.path().join("old");
        std::fs::write(&old, b"1").unwrap();
        let out = check_output(&old).unwrap();
        let n = NewFile::beside(&out, ".x-").unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, b"2").unwrap();
        std::fs::rename(&other, &old).unwrap();
        assert!(n.commit(&out).is_err());
        assert_eq!(std::fs::read(&old).unwrap(), b"2");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "temporary file left");
        // The check itself refuses links and devices, without following.
        assert!(check_output(&new)
            .unwrap_err()
            .to_string()
            .starts_with("refusing to write: "));
        assert!(check_output(Path::new("/dev/null")).is_err());
    }

    #[test]
    fn a_swapped_temporary_file_is_neither_reopened_nor_renamed() {
        let dir = scratch();
        let target = dir.path().join("t");
        std::fs::write(&target, b"old").unwrap();
        let out = check_output(&target).unwrap();
        let mut n = NewFile::beside(&out, ".x-").unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, b"planted").unwrap();
        std::fs::rename(&other, n.path()).unwrap();
        assert!(n.finish_writing().is_err());
        assert!(n.commit(&out).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
    }

    #[test]
    fn a_new_file_with_a_mode_gets_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch();
        let out = check_output(&dir.path().join("plot.svg")).unwrap();
        let n = NewFile::beside_with_mode(&out, ".x-", 0o666).unwrap();
        let umask = current_umask();
        assert_eq!(
            n.file().metadata().unwrap().permissions().mode() & 0o777,
            0o666 & !umask
        );
    }

    /// The process's umask, from /proc (reading it with umask(2) changes it).
    fn current_umask() -> u32 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let v = s.lines().find_map(|l| l.strip_prefix("Umask:")).unwrap();
        u32::from_str_radix(v.trim(), 8).unwrap()
    }

    fn getfl(f: &File) -> i32 {
        rustix::fs::fcntl_getfl(f.as_fd()).unwrap().bits() as i32
    }

    #[test]
    fn metadata_copy_keeps_setid_xattrs_and_times_and_skips_what_is_asked() {
        let dir = scratch();
        let src = dir.path().join("src");
        std::fs::write(&src, b"x").unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o2755)).unwrap();
        let f = File::open(&src).unwrap();
        rustix::fs::fsetxattr(f.as_fd(), "user.keep", b"1", rustix::fs::XattrFlags::empty()).unwrap();
        rustix::fs::fsetxattr(f.as_fd(), "user.drop", b"2", rustix::fs::XattrFlags::empty()).unwrap();
        let old = rustix::fs::Timespec {
            tv_sec: 1_000_000,
            tv_nsec: 5,
        };
        rustix::fs::futimens(
            f.as_fd(),
            &rustix::fs::Timestamps {
                last_access: old,
                last_modification: old,
            },
        )
        .unwrap();
        let meta = f.metadata().unwrap();

        let n = NewFile::beside(&check_output(&src).unwrap(), ".x-").unwrap();
        let skip = ["user.drop".to_string()];
        copy_metadata(
            &f,
            &meta,
            n.file(),
            &MetadataCopy {
                owner_required: true,
                times: true,
                skip_xattrs: &skip,
            },
        )
        .unwrap();
        let m = n.file().metadata().unwrap();
        assert_eq!(m.mode() & 0o7777, 0o2755);
        assert_eq!((m.uid(), m.gid()), (meta.uid(), meta.gid()));
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000, 5));
        assert_eq!(get_xattr(n.file(), "user.keep").unwrap(), b"1");
        assert!(!list_xattrs(n.file()).unwrap().contains(&"user.drop".to_string()));
    }

    #[test]
    fn impact_sees_links_and_ima() {
        let dir = scratch();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(
            ReplaceImpact::of(&f).unwrap(),
            ReplaceImpact {
                links: 1,
                ..Default::default()
            }
        );
        std::fs::hard_link(&p, dir.path().join("g")).unwrap();
        rustix::fs::fsetxattr(f.as_fd(), "security.ima", &[4, 1, 2], rustix::fs::XattrFlags::empty()).unwrap();
        let i = ReplaceImpact::of(&f).unwrap();
        assert_eq!((i.links, i.signatures.as_slice()), (2, &[Signature::Ima][..]));
        assert_eq!(i.stale_xattrs(), vec!["security.ima".to_string()]);
    }

    #[test]
    fn finds_the_overlay_layer_a_file_comes_from() {
        let info = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    90 22 0:39 / /srv/merged rw - overlay overlay rw,lowerdir=/l1:/l2,upperdir=/up,workdir=/w\n";
        let only = |want: &'static str| move |p: &Path| p == Path::new(want);
        let f = Path::new("/srv/merged/bin/x");
        assert_eq!(
            overlay_layer_in(info, f, only("/l2/bin/x")),
            Some(PathBuf::from("/l2/bin/x"))
        );
        assert_eq!(overlay_layer_in(info, f, |_| true), Some(PathBuf::from("/up/bin/x")));
        assert_eq!(overlay_layer_in(info, Path::new("/usr/bin/x"), |_| true), None);
    }

    #[test]
    fn names_filesystems() {
        assert_eq!(fs_type_name(0xef53), "ext4");
        assert_eq!(fs_type_name(0x0102_1994), "tmpfs");
        assert!(fs_type_name(0x1234).starts_with("unknown"));
        assert_eq!(
            fs_name(&File::open("/proc/self/status").unwrap()),
            "unknown (magic 0x9fa0)"
        );
    }
}
