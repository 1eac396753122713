//! Replacing a file safely, and what a replacement affects.
//!
//! Both `align` (a rewritten ELF file) and `warm --replace` (a warmed
//! identical copy) put a new inode in place of an existing file. They share
//! the same steps, all here:
//!
//! 1. [`NewFile::beside`]: a temporary file in the target's directory (so the
//!    final rename is atomic), without a name where the filesystem allows
//!    (`O_TMPFILE`), mode 0600 and no extended attributes, removed again if
//!    anything fails before the commit;
//! 2. [`NewFile::commit_keeping`]: `fsync`; a name for the file inside a
//!    private directory made for it beside the target (mode 0700: no other
//!    user can open, run or link what is in it); then [`copy_metadata`]:
//!    the original's owner, then its mode (set-id bits after the `chown`,
//!    which clears them), then every extended attribute
//!    (`security.capability` among them; `chown` clears that too), then,
//!    optionally, its access and modification times; `fsync`; then the
//!    rename out of the private directory over the target, an `fsync` of
//!    the target's directory, and the private directory's removal. A
//!    process killed at any point leaves the old file or the new one at the
//!    name, and at most a hidden temporary file, or a private directory,
//!    that [`remove_leftovers`] removes on the next run; a privileged file
//!    is never where another user can reach it.
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

/// A new file being written next to the file it will replace, then put in
/// place by [`commit`](NewFile::commit) (or
/// [`commit_keeping`](NewFile::commit_keeping)). Dropped without a commit,
/// it is removed.
///
/// Where the filesystem allows it, the file has no name while it is
/// written (`O_TMPFILE`): a process killed meanwhile leaves nothing behind
/// and the kernel frees its blocks. Elsewhere it has a hidden name (the
/// prefix and 12 random letters and digits). Named or not, it keeps its
/// creation mode (0600 unless given) and no extended attributes until the
/// commit: the original's owner, set-id bits and file capabilities come in
/// the commit's last steps, just before the file takes the target's name.
/// For as long as this process lives the file holds a shared `flock`, so
/// that [`remove_leftovers`] tells the file of a run that was killed (no
/// lock) from one being written now.
#[derive(Debug)]
pub struct NewFile {
    /// Open read-write until `finish_writing` or the commit closes it.
    file: Option<File>,
    /// Open read-only and locked, from `finish_writing` on.
    ro: Option<File>,
    /// Its name while it has one (removed when dropped); `None` while it
    /// has none (`O_TMPFILE`).
    name: Option<tempfile::TempPath>,
    dir: PathBuf,
    prefix: String,
    /// Its inode: what its name must still hold when it is opened again or
    /// renamed (another user who owns the directory could swap it).
    id: FileId,
}

impl NewFile {
    /// Create an empty file (mode 0600; its name, if it needs one, starts
    /// with `prefix`) in the directory of `target`.
    pub fn beside(target: &Output, prefix: &str) -> io::Result<NewFile> {
        NewFile::beside_with_mode(target, prefix, 0o600)
    }

    /// The same with `mode`, less the umask, as `open` gives a new file: for
    /// a file that does not take its mode from another one.
    ///
    /// A name is random (not one another user can guess and plant first)
    /// and the file is created with `O_CREAT|O_EXCL`, which never follows a
    /// link: it is a new inode of ours, or an error.
    pub fn beside_with_mode(target: &Output, prefix: &str, mode: u32) -> io::Result<NewFile> {
        NewFile::create(target, prefix, mode, true)
    }

    /// [`beside_with_mode`](NewFile::beside_with_mode), unnamed only if
    /// `unnamed` (tests take the named route on any filesystem).
    fn create(target: &Output, prefix: &str, mode: u32, unnamed: bool) -> io::Result<NewFile> {
        let dir = dir_of(target.path());
        let (file, name) = match unnamed.then(|| unnamed_in(&dir, mode)).flatten() {
            Some(f) => (f, None),
            None => {
                let (f, p) = new_temp_in(&dir, prefix, mode)?;
                (f, Some(p))
            }
        };
        lock_shared(&file);
        let id = FileId::of(&file.metadata()?);
        stop_at("created");
        Ok(NewFile {
            file: Some(file),
            ro: None,
            name,
            dir,
            prefix: prefix.to_string(),
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
    /// puts it in place.
    pub fn finish_writing(&mut self) -> io::Result<File> {
        if self.ro.is_none() {
            let w = self.file.as_ref().expect("NewFile finished twice");
            w.sync_all()?;
            let ro = match &self.name {
                // Its only way in: this process's descriptor.
                None => File::open(fd_path(w))?,
                Some(p) => File::open(p)?,
            };
            if FileId::of(&ro.metadata()?) != self.id {
                return Err(swapped());
            }
            // Locked before the writable descriptor's lock goes with it.
            lock_shared(&ro);
            self.ro = Some(ro);
            self.file = None;
        }
        self.ro.as_ref().expect("set above").try_clone()
    }

    /// [`commit_keeping`](NewFile::commit_keeping) with nothing to keep:
    /// for a file of its own (a report, a plot).
    pub fn commit(self, target: &Output) -> io::Result<()> {
        self.commit_keeping(target, None)
    }

    /// Put the file in place of `target`, in this order: `fsync` and close
    /// the writable descriptor (a writable descriptor on a program makes
    /// `exec` fail with `ETXTBSY`); give the file `keep`'s owner, mode,
    /// extended attributes and times ([`copy_metadata`]) and `fsync` it;
    /// give it the target's name; `fsync` the directory. With `keep`, the
    /// file is first named (linked, or moved) in a [`PrivateDir`], still
    /// ours and unprivileged (so protected hardlinks never refuse the
    /// link), gets the original's owner, set-id bits and capabilities
    /// there, and leaves it only by the rename over the target: a process
    /// killed at any step leaves nothing privileged that another user can
    /// open, run or link. Without `keep`, a file without a name yet
    /// (`O_TMPFILE`) gets a hidden one for the instant before the rename.
    ///
    /// The name must still hold what [`check_output`] saw: for a new name,
    /// linking or renaming fails if anything appeared there meanwhile
    /// (`RENAME_NOREPLACE`); over a file, if another inode took its place.
    /// On error the new file is removed and `target` is as it was.
    pub fn commit_keeping(
        mut self,
        target: &Output,
        keep: Option<(&File, &Metadata, &MetadataCopy<'_>)>,
    ) -> io::Result<()> {
        stop_at("written");
        let ro = match self.ro.take() {
            Some(f) => f,
            None => {
                self.finish_writing()?;
                self.ro.take().expect("set by finish_writing")
            }
        };
        if let Some(p) = &self.name {
            let ours = std::fs::symlink_metadata(p)?;
            if !ours.file_type().is_file() || FileId::of(&ours) != self.id {
                return Err(swapped());
            }
        }
        let changed = || {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the name changed while the new file was being written; nothing was replaced, run again",
            )
        };
        let still_there = |id: FileId| -> io::Result<()> {
            let now = std::fs::symlink_metadata(target.path())?;
            if !now.file_type().is_file() || FileId::of(&now) != id {
                return Err(changed());
            }
            Ok(())
        };
        if let Some((from, meta, what)) = keep {
            // Named only inside a directory of ours that nobody else may
            // enter, before it gets any privilege (so that protected
            // hardlinks never apply: the file is still ours).
            let mut private = PrivateDir::create(&self.dir, &self.prefix)?;
            match self.name.take() {
                None => link_unnamed_at(&ro, &private.fd, PRIVATE_FILE)?,
                Some(name) => {
                    rustix::fs::renameat(rustix::fs::CWD, &*name, &private.fd, PRIVATE_FILE)?;
                    // Moved: no longer removed by that name.
                    let _ = name.keep();
                }
            }
            private.holds_file = true;
            let st = rustix::fs::statat(&private.fd, PRIVATE_FILE, AtFlags::SYMLINK_NOFOLLOW)?;
            if (st.st_dev, st.st_ino) != (self.id.dev, self.id.ino) {
                return Err(swapped());
            }
            stop_at("linked");
            copy_metadata(from, meta, &ro, what).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot give the new file the original's owner/mode/attributes ({e})"),
                )
            })?;
            ro.sync_all()?;
            stop_at("metadata");
            let to = target.path();
            match target.existing {
                None => rustix::fs::renameat_with(
                    &private.fd,
                    PRIVATE_FILE,
                    rustix::fs::CWD,
                    to,
                    rustix::fs::RenameFlags::NOREPLACE,
                )
                .map_err(|e| match e {
                    rustix::io::Errno::EXIST => changed(),
                    e => e.into(),
                })?,
                Some(id) => {
                    still_there(id)?;
                    rustix::fs::renameat(&private.fd, PRIVATE_FILE, rustix::fs::CWD, to)?;
                }
            }
            private.holds_file = false;
            stop_at("renamed");
            sync_dir(&self.dir)?;
            return private.remove();
        }
        ro.sync_all()?;
        stop_at("metadata");
        let name = match (self.name.take(), target.existing) {
            // A new name: linked there directly, never over anything.
            (None, None) => {
                return link_unnamed(&ro, target.path())
                    .map_err(|e| match e.kind() {
                        io::ErrorKind::AlreadyExists => changed(),
                        _ => e,
                    })
                    .and_then(|()| sync_dir(&self.dir));
            }
            (None, Some(_)) => self.link_hidden(&ro)?,
            (Some(name), _) => name,
        };
        stop_at("linked");
        match target.existing {
            None => name
                .persist_noclobber(target.path())
                .map_err(|e| match e.error.kind() {
                    io::ErrorKind::AlreadyExists => changed(),
                    _ => e.error,
                })?,
            Some(id) => {
                still_there(id)?;
                name.persist(target.path()).map_err(|e| e.error)?
            }
        }
        stop_at("renamed");
        sync_dir(&self.dir)
    }

    /// Give the unnamed file `ro` a hidden name in the directory (the
    /// prefix and 12 random characters), removed when dropped.
    fn link_hidden(&self, ro: &File) -> io::Result<tempfile::TempPath> {
        for _ in 0..16 {
            let p = self.dir.join(format!("{}{}", self.prefix, random_chars()));
            match link_unnamed(ro, &p) {
                Ok(()) => return tempfile::TempPath::try_from_path(p),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "cannot find a free temporary name in this directory",
        ))
    }
}

/// `fsync` a directory, so that a rename or link in it is durable (where
/// the directory cannot be opened, the rename stands and is not forced to
/// disk).
fn sync_dir(dir: &Path) -> io::Result<()> {
    if let Ok(d) = File::open(dir) {
        d.sync_all()?;
    }
    Ok(())
}

/// The name of an open file under `/proc/self/fd`.
fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(f)))
}

/// The name of the new file inside its [`PrivateDir`].
const PRIVATE_FILE: &str = "file";

/// A directory of ours in the target's directory (same filesystem, so the
/// final rename is atomic), where the new file is named while it gets the
/// original's owner, set-id bits and capabilities: mode 0700, so no other
/// user can open, run or hard-link what is inside (no search permission).
/// Its name is a temporary one ([`is_temp_name`]); it holds a shared `flock`
/// while this process lives, like a [`NewFile`], so that [`remove_leftovers`]
/// removes it (and the file in it) only when the run that made it was
/// killed. Dropped, it is removed with what it holds.
struct PrivateDir {
    fd: rustix::fd::OwnedFd,
    path: PathBuf,
    /// Whether [`PRIVATE_FILE`] is in it.
    holds_file: bool,
}

impl PrivateDir {
    /// Make one in `dir`, its name `prefix` and 12 random characters.
    fn create(dir: &Path, prefix: &str) -> io::Result<PrivateDir> {
        use rustix::fs::{Mode, OFlags};
        for _ in 0..16 {
            let path = dir.join(format!("{prefix}{}", random_chars()));
            match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
            let fd = rustix::fs::open(
                &path,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let st = rustix::fs::fstat(&fd)?;
            if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o7777 != 0o700 {
                // Not the directory just made: someone swapped it.
                return Err(swapped());
            }
            // Waits for a concurrent run's removal of leftovers, which may
            // have taken this still unlocked directory for one: then it is
            // gone (no links), and another is made.
            let _ = rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockShared);
            if rustix::fs::fstat(&fd)?.st_nlink == 0 {
                continue;
            }
            return Ok(PrivateDir {
                fd,
                path,
                holds_file: false,
            });
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "cannot find a free temporary name in this directory",
        ))
    }

    /// Remove it (empty by now).
    fn remove(mut self) -> io::Result<()> {
        self.holds_file = false;
        let r = rustix::fs::unlinkat(rustix::fs::CWD, &self.path, AtFlags::REMOVEDIR);
        self.path = PathBuf::new();
        r.map_err(io::Error::from)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if self.path.as_os_str().is_empty() {
            return;
        }
        if self.holds_file {
            let _ = rustix::fs::unlinkat(&self.fd, PRIVATE_FILE, AtFlags::empty());
        }
        let _ = rustix::fs::unlinkat(rustix::fs::CWD, &self.path, AtFlags::REMOVEDIR);
    }
}

/// Give the file open as `f` (unnamed: `O_TMPFILE`) the name `name` in the
/// directory open as `dir`.
fn link_unnamed_at(f: &File, dir: &rustix::fd::OwnedFd, name: &str) -> io::Result<()> {
    rustix::fs::linkat(rustix::fs::CWD, fd_path(f), dir, name, AtFlags::SYMLINK_FOLLOW).map_err(io::Error::from)
}

/// Give the file open as `f` (unnamed: `O_TMPFILE`) the name `to`; fails
/// with `AlreadyExists` if the name exists.
fn link_unnamed(f: &File, to: &Path) -> io::Result<()> {
    rustix::fs::linkat(
        rustix::fs::CWD,
        fd_path(f),
        rustix::fs::CWD,
        to,
        AtFlags::SYMLINK_FOLLOW,
    )
    .map_err(io::Error::from)
}

/// A new file without a name in `dir` (`O_TMPFILE`, `mode` less the umask),
/// or `None` where the filesystem or kernel has none, or `/proc` (through
/// which it is linked into place) is missing.
fn unnamed_in(dir: &Path, mode: u32) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(mode)
        .open(dir)
        .ok()?;
    fd_path(&f).exists().then_some(f)
}

/// Take a shared `flock` on `f`, held until every descriptor of that open
/// file is closed (the process's end included): [`remove_leftovers`] removes
/// only what it can lock exclusively. Where the filesystem has no `flock`,
/// nothing is locked, and [`remove_leftovers`] leaves the files alone.
fn lock_shared(f: &File) {
    let _ = rustix::fs::flock(f.as_fd(), rustix::fs::FlockOperation::NonBlockingLockShared);
}

/// 12 random letters and digits.
fn random_chars() -> String {
    const SET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut b = [0u8; 12];
    // SAFETY: `b` is a writable buffer of the length given.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Unique enough with the clock; the link fails, never overwrites,
        // on a clash.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 64)).to_le_bytes()[..12]
            .try_into()
            .expect("12 bytes");
    }
    b.iter().map(|x| SET[*x as usize % SET.len()] as char).collect()
}

/// Test hook: with `HUGETEXT_TEST_STOP_AT=STEP` in the environment, the
/// process stops itself (`SIGSTOP`) at that step of writing a new file
/// (`created`, `written`, `linked`, `metadata`, `renamed`), so that a test
/// can kill it exactly there.
fn stop_at(step: &str) {
    if std::env::var_os(hugetext_abi::settings::TEST_STOP_AT).is_some_and(|v| v == step) {
        // SAFETY: raise() has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
}

/// Whether `name` is one hugetext gives its temporary files: it starts with
/// a dot, has `hugetext-` in its prefix, and ends with `-` and 12 random
/// letters and digits (`.hugetext-align-Ab3…`, `.prog.hugetext-Xy9…`).
/// Pure.
pub fn is_temp_name(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    let Some(prefix) = name.len().checked_sub(12).and_then(|n| name.get(..n)) else {
        return false;
    };
    let random = &name[prefix.len()..];
    name.starts_with('.')
        && prefix.ends_with('-')
        && prefix.contains("hugetext-")
        && random.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Remove from `dir` the temporary files of hugetext runs that were killed
/// before they could remove them. Only files that are provably such
/// leftovers go: a temporary name ([`is_temp_name`]), a regular file with
/// one link, owned by the caller (or, for root, set-id or with file
/// capabilities: what a killed root run makes of another user's program),
/// and no live hugetext process holding its lock; or a private directory
/// of such a name, the caller's, mode 0700, holding nothing or only the
/// new file (one link), unlocked. Returns the names
/// removed; what cannot be read or locked is left alone. With `remove`
/// false, only finds them.
pub fn remove_leftovers(dir: &Path) -> Vec<PathBuf> {
    leftovers(dir, true)
}

/// The leftovers [`remove_leftovers`] would remove, removed if `remove`.
pub fn leftovers(dir: &Path, remove: bool) -> Vec<PathBuf> {
    let euid = rustix::process::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        if !is_temp_name(&e.file_name()) {
            continue;
        }
        let p = e.path();
        if is_leftover(&p, euid) && (!remove || std::fs::remove_file(&p).is_ok()) {
            removed.push(p);
        } else if let Some(d) = leftover_dir(&p, euid) {
            if !remove || remove_leftover_dir(&p, &d).is_ok() {
                removed.push(p);
            }
        }
    }
    removed
}

/// Whether `p` is a leftover [`remove_leftovers`] may remove; it is then
/// locked (by a descriptor closed on return: no live process of ours took
/// it meanwhile, since ours hold the lock from before the name appears).
fn is_leftover(p: &Path, euid: u32) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return false;
    };
    if !m.file_type().is_file() || m.nlink() != 1 {
        return false;
    }
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(p)
    else {
        return false;
    };
    let Ok(fm) = f.metadata() else {
        return false;
    };
    if FileId::of(&fm) != FileId::of(&m) {
        return false;
    }
    let privileged = || fm.mode() & 0o6000 != 0 || get_xattr(&f, "security.capability").is_ok();
    if fm.uid() != euid && !(euid == 0 && privileged()) {
        return false;
    }
    rustix::fs::flock(f.as_fd(), rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// Whether `p` is the [`PrivateDir`] of a killed run that
/// [`remove_leftovers`] may remove, with or without the new file in it: a
/// directory owned by the caller, mode 0700, holding nothing but
/// [`PRIVATE_FILE`] (a regular file with one link), and no live hugetext
/// process holding its lock. Returns it open and locked.
fn leftover_dir(p: &Path, euid: u32) -> Option<rustix::fd::OwnedFd> {
    use rustix::fs::{FileType, Mode, OFlags};
    let m = std::fs::symlink_metadata(p).ok()?;
    if !m.file_type().is_dir() || m.uid() != euid || m.mode() & 0o7777 != 0o700 {
        return None;
    }
    let fd = rustix::fs::open(
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if (st.st_dev, st.st_ino) != (m.dev(), m.ino()) {
        return None;
    }
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
    let dir = rustix::fs::Dir::read_from(&fd).ok()?;
    for e in dir {
        let e = e.ok()?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if name != PRIVATE_FILE.as_bytes() {
            return None;
        }
        let f = rustix::fs::statat(&fd, PRIVATE_FILE, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if FileType::from_raw_mode(f.st_mode) != FileType::RegularFile || f.st_nlink != 1 {
            return None;
        }
    }
    Some(fd)
}

/// Remove the leftover [`PrivateDir`] `p`, open (and locked) as `fd`.
fn remove_leftover_dir(p: &Path, fd: &rustix::fd::OwnedFd) -> io::Result<()> {
    match rustix::fs::unlinkat(fd, PRIVATE_FILE, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    rustix::fs::unlinkat(rustix::fs::CWD, p, AtFlags::REMOVEDIR).map_err(io::Error::from)
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
/// (mode 0600; see [`NewFile::beside_with_mode`] for the name), locked
/// like a [`NewFile`]: removed when the returned path is dropped.
pub fn scratch_file_in(dir: &Path, prefix: &str) -> io::Result<(File, tempfile::TempPath)> {
    let (f, p) = new_temp_in(dir, prefix, 0o600)?;
    lock_shared(&f);
    Ok((f, p))
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
///
/// What needs `to` to be ours (the mode but set-id bits, extended
/// attributes, times) is done before the `chown`, so that a root without
/// `CAP_FOWNER` can still replace another user's file; set-id bits and file
/// capabilities, which the `chown` clears, after it.
pub fn copy_metadata(from: &File, meta: &Metadata, to: &File, what: &MetadataCopy<'_>) -> io::Result<()> {
    const CAPABILITY: &str = "security.capability";
    let copy_xattr = |name: &str| -> io::Result<()> {
        let value = get_xattr(from, name)?;
        rustix::fs::fsetxattr(to.as_fd(), name, &value, rustix::fs::XattrFlags::empty()).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot copy extended attribute {name} ({e})"),
            )
        })
    };
    let mode = meta.mode() & 0o7777;
    rustix::fs::fchmod(to.as_fd(), rustix::fs::Mode::from_raw_mode(mode & !0o6000))?;
    let names: Vec<String> = list_xattrs(from)?
        .into_iter()
        .filter(|n| !what.skip_xattrs.contains(n))
        .collect();
    for name in names.iter().filter(|n| *n != CAPABILITY) {
        copy_xattr(name)?;
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
    if mode & 0o6000 != 0 {
        rustix::fs::fchmod(to.as_fd(), rustix::fs::Mode::from_raw_mode(mode))?;
    }
    if names.iter().any(|n| n == CAPABILITY) {
        copy_xattr(CAPABILITY)?;
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

/// Where measurements and answers worth keeping across runs are kept:
/// root's `/run/hugetext`; for other users `$XDG_RUNTIME_DIR/hugetext`,
/// else (a daemon's account, `runuser`, `su`, cron: no login session)
/// `/run/user/UID/hugetext` when that directory is the user's, else
/// `/tmp/hugetext-UID`. Created mode 0700 (root's 0711). A directory that
/// is a link, someone else's (another user may have made
/// `/tmp/hugetext-UID` first), or writable by others is not used (`None`):
/// then nothing is kept, and `run` asks and measures again at each start.
pub fn runtime_dir() -> Option<PathBuf> {
    let euid = rustix::process::geteuid().as_raw();
    let dir = match euid {
        0 => PathBuf::from("/run/hugetext"),
        _ => match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d).join("hugetext"),
            None => {
                let session = PathBuf::from(format!("/run/user/{euid}"));
                match own_private_dir(&session, euid) {
                    true => session.join("hugetext"),
                    false => PathBuf::from(format!("/tmp/hugetext-{euid}")),
                }
            }
        },
    };
    // Root's is also the way to the text store (/run/hugetext/text), which
    // every user's processes open: passable by others, its files 0600.
    let mode = if euid == 0 { 0o711 } else { 0o700 };
    use std::os::unix::fs::DirBuilderExt;
    let _ = std::fs::DirBuilder::new().mode(mode).create(&dir);
    own_private_dir(&dir, euid).then_some(dir)
}

/// Is `dir` a directory (not a link to one) owned by `uid` that no one
/// else may write?
fn own_private_dir(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == uid && m.permissions().mode() & 0o022 == 0)
}

/// The text of a file kept by [`keep`]: a regular file of ours (never a
/// link, a FIFO, or another user's) of at most `max` bytes, else `None`.
/// The caller still checks what it says.
pub fn read_kept(path: &Path, max: u64) -> Option<String> {
    String::from_utf8(read_kept_bytes(path, max)?.0).ok()
}

/// [`read_kept`]'s bytes, with the file's metadata: `path` must be a
/// regular file of this user's, not a link, of at most `max` bytes.
pub fn read_kept_bytes(path: &Path, max: u64) -> Option<(Vec<u8>, std::fs::Metadata)> {
    use std::io::Read;
    let f = crate::openfile::open_regular(path, crate::openfile::Follow::No).ok()?;
    let m = f.metadata().ok()?;
    if m.uid() != rustix::process::geteuid().as_raw() || m.len() > max {
        return None;
    }
    let mut b = Vec::with_capacity(m.len() as usize);
    f.take(max).read_to_end(&mut b).ok()?;
    Some((b, m))
}

/// Keep `bytes` at `path` (a new file renamed over the old one, through
/// [`check_output`]); a failure only means working it out again next time.
pub fn keep(path: &Path, prefix: &str, bytes: &[u8]) {
    use std::io::Write;
    let write = || -> io::Result<()> {
        let out = check_output(path)?;
        let new = NewFile::beside(&out, prefix)?;
        new.file().write_all(bytes)?;
        new.commit(&out)
    };
    let _ = write();
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
        for unnamed in [true, false] {
            let n = NewFile::create(&out, ".x-", 0o600, unnamed).unwrap();
            assert_eq!(n.file().metadata().unwrap().permissions().mode() & 0o777, 0o600);
            // Named only where the filesystem has no O_TMPFILE (or the
            // test asks for a name).
            assert_eq!(n.name.is_none(), unnamed, "ext4 and xfs have O_TMPFILE");
            drop(n);
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
            assert_eq!(std::fs::read(&target).unwrap(), b"old");

            let out = check_output(&target).unwrap();
            let mut n = NewFile::create(&out, ".x-", 0o600, unnamed).unwrap();
            n.file().write_all(b"new").unwrap();
            let ro = n.finish_writing().unwrap();
            assert_eq!(getfl(&ro) & libc::O_ACCMODE, libc::O_RDONLY);
            n.commit(&out).unwrap();
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
            assert_eq!(std::fs::read(&target).unwrap(), b"new");
            std::fs::write(&target, b"old").unwrap();
        }
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
    fn temporary_names_are_told_from_others() {
        let t = |n: &str| is_temp_name(std::ffi::OsStr::new(n));
        assert!(t(".hugetext-align-Ab3dEf6hIj9K"));
        assert!(t(".prog.hugetext-Ab3dEf6hIj9K"));
        assert!(t(".hugetext-collapse-probe-000000000000"));
        assert!(!t("hugetext-align-Ab3dEf6hIj9K"), "not hidden");
        assert!(!t(".hugetext-align-Ab3dEf6hIj9"), "11 characters");
        assert!(!t(".hugetext-align-Ab3dEf6hIj9.K"));
        assert!(!t(".other-Ab3dEf6hIj9K"));
        assert!(!t(".hugetext-align-"));
        assert!(!t(".hugetext-alignAb3dEf6hIj9KL"));
    }

    /// A killed run's file is removed by the next; a live one's, a user's
    /// file of a like name, and another user's are not.
    #[test]
    fn only_unlocked_leftovers_of_ours_are_removed() {
        let dir = scratch();
        let target = dir.path().join("t");
        std::fs::write(&target, b"old").unwrap();
        let out = check_output(&target).unwrap();
        // A killed run: a temporary name nobody holds a lock on.
        let dead = dir.path().join(".hugetext-align-DeadDeadDead");
        std::fs::write(&dead, b"x").unwrap();
        std::fs::set_permissions(&dead, std::fs::Permissions::from_mode(0o4755)).unwrap();
        // A live one (the named route, so that it is visible).
        let live = NewFile::create(&out, ".hugetext-align-", 0o600, false).unwrap();
        let live_name = live.name.as_ref().unwrap().to_path_buf();
        let (_probe, probe) = scratch_file_in(dir.path(), ".hugetext-doctor-").unwrap();
        // Not ours: other names, another user's unprivileged file, a link.
        let user = dir.path().join(".hugetext-align-notes");
        std::fs::write(&user, b"mine").unwrap();
        let theirs = dir.path().join(".hugetext-align-TheirsTheirs");
        std::fs::write(&theirs, b"x").unwrap();
        rustix::fs::chown(&theirs, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
        let linked = dir.path().join(".hugetext-align-LinkedLinked");
        std::fs::write(&linked, b"x").unwrap();
        std::fs::hard_link(&linked, dir.path().join("kept")).unwrap();

        // Private directories of killed runs, with the new file in it or
        // without; a live run's; a user's directory of a like name.
        let private = |name: &str, mode: u32| {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
            d
        };
        let dead_full = private(".hugetext-align-FullFullFull", 0o700);
        std::fs::write(dead_full.join(PRIVATE_FILE), b"x").unwrap();
        std::fs::set_permissions(dead_full.join(PRIVATE_FILE), std::fs::Permissions::from_mode(0o4755)).unwrap();
        let dead_empty = private(".hugetext-align-EmptyEmptyEm", 0o700);
        let open_dir = private(".hugetext-align-OpenOpenOpen", 0o755);
        let other_file = private(".hugetext-align-OtherOtherOt", 0o700);
        std::fs::write(other_file.join("notes"), b"mine").unwrap();
        let live_dir = PrivateDir::create(dir.path(), ".hugetext-align-").unwrap();

        let mut removed = remove_leftovers(dir.path());
        removed.sort();
        let mut want = vec![dead.clone(), dead_full.clone(), dead_empty.clone()];
        want.sort();
        assert_eq!(removed, want);
        assert!(!dead.exists() && !dead_full.exists() && !dead_empty.exists());
        for p in [
            &live_name,
            &probe.to_path_buf(),
            &user,
            &theirs,
            &linked,
            &target,
            &open_dir,
            &other_file,
            &live_dir.path,
        ] {
            assert!(p.exists(), "{} removed", p.display());
        }
        let live_dir_path = live_dir.path.clone();
        drop(live_dir);
        assert!(!live_dir_path.exists());
        drop(live);
        assert!(!live_name.exists());
    }

    #[test]
    fn privileges_come_only_at_the_commit() {
        let dir = scratch();
        let src = dir.path().join("prog");
        std::fs::write(&src, b"old").unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let f = File::open(&src).unwrap();
        rustix::fs::fsetxattr(f.as_fd(), "user.keep", b"1", rustix::fs::XattrFlags::empty()).unwrap();
        let meta = f.metadata().unwrap();
        for unnamed in [true, false] {
            let out = check_output(&src).unwrap();
            let mut n = NewFile::create(&out, ".hugetext-align-", 0o600, unnamed).unwrap();
            n.file().write_all(b"new").unwrap();
            let ro = n.finish_writing().unwrap();
            assert_eq!(ro.metadata().unwrap().mode() & 0o7777, 0o600);
            assert!(list_xattrs(&ro).unwrap().is_empty());
            let keep = MetadataCopy {
                owner_required: true,
                ..Default::default()
            };
            n.commit_keeping(&out, Some((&f, &meta, &keep))).unwrap();
            let m = std::fs::metadata(&src).unwrap();
            assert_eq!(m.mode() & 0o7777, 0o4755);
            assert_eq!(get_xattr(&File::open(&src).unwrap(), "user.keep").unwrap(), b"1");
            assert_eq!(std::fs::read(&src).unwrap(), b"new");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        }
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
        let mut n = NewFile::create(&out, ".x-", 0o600, false).unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, b"planted").unwrap();
        std::fs::rename(&other, n.name.as_ref().unwrap()).unwrap();
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
