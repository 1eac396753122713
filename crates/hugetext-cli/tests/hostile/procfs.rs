//! Hostile cases: procfs.

#[allow(unused_imports)]
use hugetext_testkit as tk;
