//! `hugetext completions SHELL`: shell completions generated from the CLI
//! definition (clap_complete), as the .deb ships them.

use anyhow::Result;

/// Arguments of `hugetext completions`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

pub fn run(args: Args, mut cmd: clap::Command) -> Result<u8> {
    clap_complete::generate(args.shell, &mut cmd, "hugetext", &mut std::io::stdout().lock());
    Ok(0)
}
