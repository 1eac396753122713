//! Hostile local users and hostile input, one module per area: every case
//! runs the attack (as the unprivileged `ht-attacker` account where it
//! matters, created by the test), then asserts the refusal or the survival,
//! and that nothing outside the case's scratch directory changed.

#[path = "hostile/agent.rs"]
mod agent;
#[path = "hostile/align.rs"]
mod align;
#[path = "hostile/bench.rs"]
mod bench;
#[path = "hostile/explain.rs"]
mod explain;
#[path = "hostile/hot.rs"]
mod hot;
#[path = "hostile/preload.rs"]
mod preload;
#[path = "hostile/procfs.rs"]
mod procfs;
#[path = "hostile/profile.rs"]
mod profile;
#[path = "hostile/routecost.rs"]
mod routecost;
#[path = "hostile/store.rs"]
mod store;
#[path = "hostile/warm.rs"]
mod warm;
