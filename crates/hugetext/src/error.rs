//! The library's error type. Every variant renders as one clear line that says
//! what went wrong and, where there is one, what to do about it.

use std::path::PathBuf;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors the library reports. `Display` is always a single line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a named path.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("{call}: {source}")]
    Sys {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A process does not exist (or vanished while being read).
    #[error("no process with pid {0}")]
    NoProcess(i32),
    /// An operation needs a privilege the caller lacks.
    #[error("{0}")]
    Permission(String),
    /// The kernel lacks a feature the operation needs.
    #[error("{0}")]
    Unsupported(String),
    /// A file is not a usable ELF object, or is malformed.
    #[error("{}: {msg}", path.display())]
    Elf { path: PathBuf, msg: String },
    /// Bad input from the user (arguments, config).
    #[error("{0}")]
    Invalid(String),
    /// A program to run cannot be found or executed (exit status 127 or
    /// 126, [`LaunchError::exit_code`]).
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Anything else, already phrased for the user.
    #[error("{0}")]
    Other(String),
}

/// Why a program cannot be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Exit status 127.
    #[error("{0}: command not found")]
    NotFound(String),
    /// Exit status 127.
    #[error("{0}: no such file")]
    NoSuchFile(String),
    /// Exit status 126.
    #[error("{0}: cannot execute: {1}")]
    NotExecutable(String, String),
}

impl LaunchError {
    /// The conventional shell exit status: 127 not found, 126 not executable.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::NotFound(_) | LaunchError::NoSuchFile(_) => 127,
            LaunchError::NotExecutable(..) => 126,
        }
    }
}

impl Error {
    /// Wrap an `io::Error` with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Wrap the current `errno` after a failed system call.
    pub fn last_os(call: &'static str) -> Self {
        Error::Sys {
            call,
            source: std::io::Error::last_os_error(),
        }
    }
}

/// An [`Error`] kept as a fact: its kind and its line. For the fact structs
/// that must be `Clone` and `Eq` (which [`Error`], holding an `io::Error`, is
/// not), such as why a probe or a page-cache read could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FactError {
    pub kind: ErrorKind,
    /// The error's one line, as [`Error`] renders it.
    pub message: String,
}

/// What kind of [`Error`] a [`FactError`] was, to match on rather than on
/// its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// An I/O error or a failed system call, with its errno when the
    /// operating system gave one.
    Io(Option<rustix::io::Errno>),
    NoProcess,
    Permission,
    Unsupported,
    Elf,
    Invalid,
    Launch,
    Other,
}

impl From<&Error> for FactError {
    fn from(e: &Error) -> Self {
        let kind = match e {
            Error::Io { source, .. } | Error::Sys { source, .. } => {
                ErrorKind::Io(rustix::io::Errno::from_io_error(source))
            }
            Error::NoProcess(_) => ErrorKind::NoProcess,
            Error::Permission(_) => ErrorKind::Permission,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::Elf { .. } => ErrorKind::Elf,
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Launch(_) => ErrorKind::Launch,
            Error::Other(_) => ErrorKind::Other,
        };
        FactError {
            kind,
            message: e.to_string(),
        }
    }
}

impl From<Error> for FactError {
    fn from(e: Error) -> Self {
        FactError::from(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::io::Errno;

    #[test]
    fn fact_error_keeps_the_kind_the_errno_and_the_line() {
        let e = Error::io("/srv/x", std::io::Error::from_raw_os_error(Errno::ROFS.raw_os_error()));
        let f = FactError::from(&e);
        assert_eq!(f.kind, ErrorKind::Io(Some(Errno::ROFS)));
        assert_eq!(f.to_string(), e.to_string());
        let no_errno = FactError::from(Error::io("/srv/x", std::io::Error::other("short read")));
        assert_eq!(no_errno.kind, ErrorKind::Io(None));
        let u = FactError::from(Error::Unsupported("no MADV_COLLAPSE".into()));
        assert_eq!(
            (u.kind, u.message.as_str()),
            (ErrorKind::Unsupported, "no MADV_COLLAPSE")
        );
        assert_eq!(FactError::from(Error::Other("x".into())).kind, ErrorKind::Other);
    }
}
