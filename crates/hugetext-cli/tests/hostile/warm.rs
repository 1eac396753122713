//! Hostile cases: warm.

#[allow(unused_imports)]
use hugetext_testkit as tk;
