//! Hostile cases: bench.

#[allow(unused_imports)]
use hugetext_testkit as tk;
