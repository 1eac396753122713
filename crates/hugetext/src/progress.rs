//! Progress of long operations (`bench`, `warm`, a system-wide `inspect`):
//! the library never prints; the CLI implements [`Progress`] with a bar.

/// Receives progress while a long operation runs.
pub trait Progress: Sync {
    /// The operation will take `total` units (steps, or bytes for `warm`).
    fn start(&self, total: u64);
    /// One unit is done; `msg` says what comes next or what was done.
    fn step(&self, msg: &str);
    /// `amount` units are done (`warm`: the bytes of one file); by default
    /// one [`Progress::step`].
    fn advance(&self, amount: u64, msg: &str) {
        let _ = amount;
        self.step(msg);
    }
    /// A note for the user (a skipped case, a file that failed), printed
    /// above the bar.
    fn note(&self, _msg: &str) {}
}

/// No progress reporting.
impl Progress for () {
    fn start(&self, _total: u64) {}
    fn step(&self, _msg: &str) {}
}
