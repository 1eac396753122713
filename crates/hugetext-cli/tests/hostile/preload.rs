//! Hostile cases: preload.

#[allow(unused_imports)]
use hugetext_testkit as tk;
