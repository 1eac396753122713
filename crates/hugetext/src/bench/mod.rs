//! Benchmarks: the seeds' micro-benchmarks (`exec`, `mprotect`, `readahead`)
//! and paired A/B runs of real programs (`ab`).
