//! `hugetext inspect`.

use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> Result<u8> {
    bail!("`hugetext inspect` is not built yet")
}
