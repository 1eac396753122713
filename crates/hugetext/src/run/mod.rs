//! `run`: everything `hugetext run` does outside the program it starts.
//! The remapping itself happens inside the program, in the preload library
//! (crate `hugetext-preload`); ARCHITECTURE.md draws the whole flow.
//!
//! | module        | what it does for `run`                                             |
//! |---------------|--------------------------------------------------------------------|
//! | [`prerun`]    | what it can tell before exec: static, secure-execution, naming      |
//! | [`routecost`] | what evict + refill and collapse in place cost here: the route order |
//! | [`remap`]     | preload discovery, the environment, verification of a process      |
//! | [`auditmod`]  | the small audit module `run` names in `LD_AUDIT`                   |

pub mod auditmod;
#[allow(missing_docs)]
pub mod prerun;
pub mod remap;
pub mod routecost;
