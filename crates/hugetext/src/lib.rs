//! # hugetext
//!
//! Put program text on 2 MiB pages from user space, on the kernels people run,
//! and measure what it does.
//!
//! The library is organised by capability; the `hugetext` command is a thin
//! shell over it (ARCHITECTURE.md in the repository says which module may
//! import which):
//!
//! | module        | capability                                                          |
//! |---------------|---------------------------------------------------------------------|
//! | `agent`       | `agent`: Prometheus metrics at scrape time, and a policy kept warm (feature `agent`) |
//! | [`config`]    | the config file `warm` and `agent` read (TOML), the memory guard's limit |
//! | [`kernel`]    | kernel interfaces: version, page/PMD size, the unit of huge text, THP modes, syscalls |
//! | [`procfs`]    | `/proc/PID/{maps,smaps,fd}`, meminfo, processes, who maps a file     |
//! | [`folio`]     | folio scanning: pagemap + kpageflags, thpmaps-style classes          |
//! | [`inspect`]   | how processes', cgroups', files' and the system's text is backed     |
//! | [`doctor`]    | kernel capability report with what each finding means                |
//! | [`explain`]   | why each text mapping of a process is or is not PMD-mapped, and the fix |
//! | [`error`]     | the library's error type, and the facts' `FactError`                 |
//! | [`elf`]       | ELF eligibility (`check`), rewriter (`align`), DT_NEEDED deps         |
//! | [`fsutil`]    | the rule for every file written (`check_output`); safe file replacement: temp file, owner/mode/xattrs, rename; signatures |
//! | [`openfile`]  | opening a path named by a user or by `/proc`, the one way to read one |
//! | [`outcome`]   | the exit-status convention of commands that change state             |
//! | [`pagecache`] | evict and refill a file's page cache with PMD-order folios; the folio probe |
//! | [`warm`]      | `warm`: verified PMD page cache for programs and their libraries      |
//! | [`progress`]  | the one progress interface of `bench`, `warm` and `inspect`          |
//! | [`profile`]   | `profile`: hot text per 2 MiB window; the iTLB misses huge pages would save |
//! | [`run`]       | `run`: what it tells before exec, the route order, preload discovery, environment, verification |
//! | `bench`       | the kernel patches' benchmarks and paired A/B runs of real programs (feature `bench`) |
//! | [`units`]     | the byte formatter of reports and messages                           |
//!
//! Everything talks to the real kernel; nothing here mocks `/proc`.
//!
//! Cargo features: `agent` and `bench` (off by default; the `hugetext`
//! command turns both on) add those two modules and their dependencies (an
//! HTTP server, an async runtime, a plotting library); without them the
//! library is what `inspect`, `check`, `align`, `warm` and `run` need.

#![warn(missing_docs)]
// The modules marked `allow(missing_docs)` below still have public fields
// and variants without docs (253 when the lint came in); each loses the
// allow once they are written.

#[cfg(feature = "agent")]
#[allow(missing_docs)]
pub mod agent;
#[cfg(feature = "bench")]
#[allow(missing_docs)]
pub mod bench;
pub mod config;
pub mod doctor;
#[allow(missing_docs)]
pub mod elf;
#[allow(missing_docs)]
pub mod error;
#[allow(missing_docs)]
pub mod explain;
pub mod folio;
pub mod fsutil;
#[allow(missing_docs)]
pub mod inspect;
pub mod kernel;
pub mod openfile;
pub mod outcome;
pub mod pagecache;
pub mod perfmaps;
pub mod procfs;
#[allow(missing_docs)]
pub mod profile;
pub mod progress;
pub mod run;
pub mod shmemstore;
pub mod units;
#[allow(missing_docs)]
pub mod warm;

pub use error::{Error, ErrorKind, FactError, Result};
pub use outcome::Outcome;
