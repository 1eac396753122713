//! `hugetext warm`.

use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> Result<u8> {
    bail!("`hugetext warm` is not built yet")
}
