//! The `collapse` route: `MADV_COLLAPSE` on the windows left.

use super::{runs, Cand, Chunk, Pass};
use crate::config::Strategy;
use crate::out::line;
use crate::scan;
use crate::sys;
/// Route 3, `collapse`: `MADV_COLLAPSE` (file text needs
/// `CONFIG_READ_ONLY_THP_FOR_FS`; a refusal is remembered for the pass).
/// A transient failure ("not now": pages not yet on the LRU, no free
/// PMD-size block this instant) is tried again a little later, as the
/// library does.
pub(super) fn route_collapse(p: &mut Pass, c: &Cand, w: &mut Chunk) {
    use hugetext_abi::madv::{collapse_transient, COLLAPSE_RETRIES, COLLAPSE_RETRY_NS};
    let unit = scan::unit();
    let mut err = 0;
    for (i, k) in runs(w.all & !w.huge) {
        let mut r = sys::advise(w.a + i * unit, k * unit, sys::Keep::Collapse);
        for _ in 0..COLLAPSE_RETRIES {
            if r >= 0 || !collapse_transient(-r as i32) {
                break;
            }
            sys::sleep_ns(COLLAPSE_RETRY_NS);
            r = sys::advise(w.a + i * unit, k * unit, sys::Keep::Collapse);
        }
        if r == -(libc::EINVAL as isize) {
            p.t.collapse_unsupported = true;
            if p.cfg.verbose {
                line().s("MADV_COLLAPSE cannot collapse file text on this kernel (needs CONFIG_READ_ONLY_THP_FOR_FS)");
            }
            break;
        }
        if r < 0 {
            err = r;
        }
    }
    if err < 0 && p.cfg.strategy == Strategy::Collapse {
        p.fail(c, "collapse: madvise(MADV_COLLAPSE)", err);
    }
    p.t.collapse += p.remeasure(c, w);
}
