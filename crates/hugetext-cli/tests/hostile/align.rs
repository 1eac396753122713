//! Hostile cases: align.

#[allow(unused_imports)]
use hugetext_testkit as tk;
