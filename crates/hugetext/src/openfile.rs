//! Opening a file named by a path that came from a user or from `/proc`
//! (a mapped file, a policy path): the one way hugetext opens such paths to
//! read them.
//!
//! Between the moment a path is checked and the moment it is opened, whoever
//! can write its directory can swap in something else. So the open itself
//! never blocks (`O_NONBLOCK`: a FIFO opens at once instead of waiting for a
//! writer), never leaks into children (`O_CLOEXEC`), and, for paths taken
//! from `/proc` (which the kernel already resolved), never follows a
//! symbolic link at the last component (`O_NOFOLLOW`); then the opened
//! descriptor, not the path, is checked (`fstat`: a regular file).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The message of [`open_regular`]'s error for a directory.
pub const IS_A_DIRECTORY: &str = "not a regular file (a directory)";

/// Whether a symbolic link at the path's last component is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// A path a user gave (a command-line argument, a configured file).
    Yes,
    /// A path from `/proc` or one already resolved: a link there was
    /// swapped in, and is refused.
    No,
}

/// Open `path` read-only as described in the module documentation. A path
/// that is not a regular file once opened is refused with an
/// [`io::ErrorKind::InvalidInput`] error saying what it is
/// ([`IS_A_DIRECTORY`] for a directory).
pub fn open_regular(path: &Path, follow: Follow) -> io::Result<File> {
    open_regular_meta(path, follow).map(|(f, _)| f)
}

/// [`open_regular`], with the metadata of the file opened (the `fstat`
/// that checked it: callers need not ask again).
pub fn open_regular_meta(path: &Path, follow: Follow) -> io::Result<(File, std::fs::Metadata)> {
    let f = open_nonblocking(path, follow).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) if follow == Follow::No => io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link where a regular file was expected: refused",
        ),
        _ => e,
    })?;
    let md = f.metadata()?;
    let ft = md.file_type();
    if ft.is_file() {
        return Ok((f, md));
    }
    if ft.is_dir() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, IS_A_DIRECTORY));
    }
    let what = if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file ({what})"),
    ))
}

/// Open `path` read-only without blocking, without following a last-component
/// link when `follow` is [`Follow::No`]; the caller checks what it opened
/// (e.g. with `fstat`). Prefer [`open_regular`].
pub fn open_nonblocking(path: &Path, follow: Follow) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    OpenOptions::new().read(true).custom_flags(flags).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_links_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for follow in [Follow::Yes, Follow::No] {
            let e = open_regular(&fifo, follow).unwrap_err();
            assert!(e.to_string().contains("a FIFO"), "{e}");
            let e = open_regular(dir.path(), follow).unwrap_err();
            assert_eq!(e.to_string(), IS_A_DIRECTORY);
        }
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(open_regular(&link, Follow::Yes).is_ok());
        let e = open_regular(&link, Follow::No).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(open_regular(&file, Follow::No).is_ok());
    }
}
