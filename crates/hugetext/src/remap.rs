//! `run`: locate the preload library, build the environment for the program,
//! and verify how a running process's text ended up backed.
