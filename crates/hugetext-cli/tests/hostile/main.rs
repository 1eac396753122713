//! Hostile local users and hostile input, one module per area: every case
//! runs the attack (as the unprivileged `ht-attacker` account where it
//! matters, created by the test), then asserts the refusal or the survival,
//! and that nothing outside the case's scratch directory changed.

mod agent;
mod align;
mod bench;
mod explain;
mod hot;
mod preload;
mod procfs;
mod profile;
mod routecost;
mod store;
mod warm;
