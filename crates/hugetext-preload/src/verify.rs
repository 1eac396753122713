//! What is huge-backed: `PAGEMAP_SCAN` (Linux 6.7+, per window), else
//! `/proc/self/smaps` totals (per VMA; see smaps.rs for what they prove).

use crate::scan::{self, Scanner};
use crate::smaps::Smaps;

/// The verifier of one pass.
pub enum Verifier {
    /// Exact, per window.
    Scan(Scanner),
    /// Per-VMA totals: a window is claimed only when its whole VMA is huge.
    Smaps(Smaps),
}

impl Verifier {
    /// True for the smaps fallback.
    pub fn is_smaps(&self) -> bool {
        matches!(self, Verifier::Smaps(_))
    }

    /// The windows of `[start, start + n·2M)` proved PMD-mapped (bit `i` =
    /// window `i`, `n <= 64`), and the PMD-mapped bytes of the accounting
    /// scope: with `PAGEMAP_SCAN`, those windows; with smaps, the whole
    /// range `[lo, hi)` (a text mapping: totals cannot be split into
    /// windows). Differences of the bytes between two calls with the same
    /// arguments are what happened in between.
    pub fn measure(&self, start: usize, n: usize, lo: usize, hi: usize) -> Result<(u64, u64), isize> {
        let pmd = scan::pmd();
        match self {
            Verifier::Scan(s) => {
                let m = s.huge_windows(start, n)?;
                Ok((m, m.count_ones() as u64 * pmd as u64))
            }
            Verifier::Smaps(s) => s.measure(start, n, lo, hi),
        }
    }

    /// The windows of `[start, start + n·2M)` proved PMD-mapped.
    pub fn huge_windows(&self, start: usize, n: usize) -> Result<u64, isize> {
        let pmd = scan::pmd();
        self.measure(start, n, start, start + n * pmd).map(|(m, _)| m)
    }

    /// PMD-mapped bytes of the whole windows `[ws, we)` (2 MiB-aligned).
    pub fn huge_bytes(&self, ws: usize, we: usize) -> Result<u64, isize> {
        let pmd = scan::pmd();
        match self {
            Verifier::Scan(_) => {
                let mut total = 0;
                for (a, n) in scan::windows(ws, we).batches(64) {
                    total += self.measure(a, n, a, a + n * pmd)?.1;
                }
                Ok(total)
            }
            Verifier::Smaps(s) => s.measure(ws, 0, ws, we).map(|(_, b)| b),
        }
    }

    /// Does `[start, end)` hold pages that are not the file's own
    /// (copy-on-write copies made by breakpoints or uprobes)?
    pub fn has_private_pages(&self, start: usize, end: usize) -> Result<bool, isize> {
        match self {
            Verifier::Scan(s) => s.has_private_pages(start, end),
            Verifier::Smaps(s) => s.has_private_pages(start, end),
        }
    }
}
