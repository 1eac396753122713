//! The ranges this library copied into anonymous memory, remembered for
//! later passes and for the verifier: the kernel may not support naming
//! them (CONFIG_ANON_VMA_NAME), so a copy cannot always be recognised in
//! `/proc/self/maps` by its name. Below both the engine (which records
//! copies) and `verify` (which asks whether a range is one).

use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::Relaxed;

/// Ranges this library moved into anonymous memory in earlier passes.
/// Process-wide because a copy outlives the pass that made it: later passes
/// of this copy of the library and the verifier must recognise it where the
/// kernel cannot name it. Only touched while holding the pass lock (`BUSY`
/// in lib.rs), hence Relaxed.
static COPIED: [(AtomicUsize, AtomicUsize); 64] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; 64];

/// Remember `[start, end)` as a copy (dropped when all 64 slots are taken).
pub(crate) fn remember_copy(start: usize, end: usize) {
    for (s, e) in COPIED.iter() {
        if s.load(Relaxed) == 0 {
            s.store(start, Relaxed);
            e.store(end, Relaxed);
            return;
        }
    }
}

/// Is `[start, end)` inside a range [`remember_copy`] recorded?
pub(crate) fn was_copied(start: usize, end: usize) -> bool {
    COPIED.iter().any(|(s, e)| {
        let (s, e) = (s.load(Relaxed), e.load(Relaxed));
        s != 0 && s <= start && end <= e
    })
}
