//! The kernel facts and `/proc` parsers that both the `hugetext` library and
//! the preload library (`libhugetext.so`) need, written once, and the
//! environment interface between them (`env`).
//!
//! `no_std`, no dependencies, no allocation and no `unsafe`: the preload
//! runs code from here in its critical section (see its `sys` module), where
//! only its own text, its stack and raw system calls may be touched. Numbers
//! come from the Linux UAPI headers named at each item; everything else is
//! a pure function over bytes.

#![no_std]
#![forbid(unsafe_code)]

pub mod compat;
pub mod env;
pub mod fs;
pub mod kpf;
pub mod madv;
pub mod maps;
pub mod pagemap;
pub mod pagemap_scan;
pub mod smaps;

/// Size of a PMD mapping on x86_64 and on aarch64 with 4 KiB pages (2 MiB).
/// The library reads the running kernel's value (`kernel::pmd_size`); the
/// preload works in this unit.
pub const PMD_SIZE: usize = 2 << 20;
