//! Tests that switch the system's THP modes and restore them: a binary of
//! its own so that no other test runs meanwhile (`cargo test` runs test
//! binaries one after another), and its tests take `one_at_a_time` so that
//! they do not run alongside each other either.

use std::sync::{Mutex, MutexGuard};

#[path = "../support/explain.rs"]
mod explain_support;

mod copy_unit_never;
mod explain_thp_never;

/// Held by each test of this binary for as long as it has a mode switched.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}
