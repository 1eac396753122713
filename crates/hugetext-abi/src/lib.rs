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
pub mod copyname;
pub mod env;
pub mod fs;
pub mod geometry;
pub mod hot;
pub mod kpf;
pub mod madv;
pub mod maps;
pub mod pagemap;
pub mod pagemap_scan;
pub mod pattern;
pub mod reach;
pub mod report;
pub mod settings;
pub mod smaps;
pub mod store;
pub mod thp;
