//! Real programs (compilers, interpreters, servers) run with hugetext, and
//! the agent under load: slow, so a binary of their own.

mod agent_load;
mod programs;
