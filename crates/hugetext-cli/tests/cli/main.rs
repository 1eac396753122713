//! The CLI's integration tests against the real kernel, one module per
//! command or area (`cargo test --release -p hugetext-cli --test cli run::`
//! runs one of them). The other binaries hold what must not share a
//! process or a run with these: `hostile` (attacks, as the unprivileged
//! `ht-attacker`), `containers` (podman, the .deb and the DaemonSet),
//! `real_programs` (slow real programs) and `thp_modes` (tests that switch
//! the system's THP modes and put them back).

#[path = "../support/explain.rs"]
mod explain_support;
#[path = "../support/podman.rs"]
mod podman_support;

mod agent;
mod align;
mod arm64;
mod bench;
mod check;
mod deps;
mod doctor;
mod explain;
mod filesystems;
mod hot;
mod hugeunit;
mod inspect;
mod late_load;
mod man;
mod profile;
mod progress;
mod run;
mod warm;
