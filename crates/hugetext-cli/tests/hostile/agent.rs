//! Hostile cases: agent.

#[allow(unused_imports)]
use hugetext_testkit as tk;
