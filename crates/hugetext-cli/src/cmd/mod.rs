//! One module per subcommand. Each has an `Args` (clap) and a `run` that
//! returns the process exit code.

use anyhow::Result;

pub mod agent;
pub mod align;
pub mod bench;
pub mod check;
pub mod completions;
pub mod doctor;
pub mod explain;
pub mod inspect;
pub mod profile;
pub mod run;
pub mod warm;

/// A `--min-pct`-style percentage ("99" or "99%", in (0, 100]) as a
/// fraction, for clap's `value_parser`.
pub(crate) fn parse_percent(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage"))?;
    if !(v > 0.0 && v <= 100.0) {
        return Err("must be in (0, 100]".into());
    }
    Ok(v / 100.0)
}

/// The library's [`Progress`](hugetext::progress::Progress) drawn as a bar
/// on stderr when it is a terminal; silent otherwise (notes still print).
pub struct Bar {
    bar: Option<indicatif::ProgressBar>,
    note_prefix: &'static str,
}

impl Bar {
    /// A bar with this indicatif template, drawn only on a terminal.
    pub fn new(template: &str) -> Bar {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return Bar::hidden();
        }
        let pb = indicatif::ProgressBar::new(0);
        pb.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb.enable_steady_tick(std::time::Duration::from_millis(200));
        Bar {
            bar: Some(pb),
            note_prefix: "note: ",
        }
    }

    /// No bar.
    pub fn hidden() -> Bar {
        Bar {
            bar: None,
            note_prefix: "note: ",
        }
    }

    /// Print notes with this prefix (default `note: `).
    pub fn notes_as(mut self, prefix: &'static str) -> Bar {
        self.note_prefix = prefix;
        self
    }

    /// Clear the bar (before results or errors are printed).
    pub fn finish(&self) {
        if let Some(pb) = &self.bar {
            pb.finish_and_clear();
        }
    }
}

impl hugetext::progress::Progress for Bar {
    fn start(&self, total: u64) {
        if let Some(pb) = &self.bar {
            pb.set_length(total);
        }
    }
    fn step(&self, msg: &str) {
        self.advance(1, msg);
    }
    fn advance(&self, amount: u64, msg: &str) {
        if let Some(pb) = &self.bar {
            pb.inc(amount);
            pb.set_message(msg.to_string());
        }
    }
    fn note(&self, msg: &str) {
        let line = format!("{}{msg}", self.note_prefix);
        match &self.bar {
            Some(pb) => pb.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}

/// An error that carries a specific exit code (e.g. 126/127 for `run`,
/// the verdict codes of `align`).
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub msg: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Exit {}

/// Fail with a message and a specific exit code.
pub fn exit_with(code: u8, msg: impl Into<String>) -> anyhow::Error {
    Exit { code, msg: msg.into() }.into()
}

/// Exit code for an error: the one it carries; 127/126 when a program to
/// run cannot be found or executed (`run`, `bench ab`); else 1.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    if let Some(x) = e.downcast_ref::<Exit>() {
        return x.code;
    }
    match e.downcast_ref::<hugetext::Error>() {
        Some(hugetext::Error::Launch(l)) => l.exit_code(),
        _ => e
            .downcast_ref::<hugetext::run::remap::LaunchError>()
            .map_or(1, |l| l.exit_code()),
    }
}

/// Render an error chain on one line: "outer: inner: root".
pub fn one_line(e: &anyhow::Error) -> String {
    let mut s = String::new();
    for (i, cause) in e.chain().enumerate() {
        let text = cause.to_string().replace('\n', " ");
        if i > 0 {
            if s.contains(&text) {
                continue;
            }
            s.push_str(": ");
        }
        s.push_str(&text);
    }
    s
}

/// Process-wide setup: restore default SIGPIPE (so `hugetext … | head` ends
/// quietly) and turn any panic into one line instead of a backtrace.
pub fn install_handlers() {
    // SAFETY: resetting a signal disposition to default has no preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("hugetext: internal error: {msg}{at} (this is a bug; please report it)");
    }));
}

/// `hugetext man`: write the man page generated from the CLI definition.
pub fn man(cmd: clap::Command) -> Result<u8> {
    let mut out = std::io::stdout().lock();
    let mut cmd = cmd;
    cmd.build();
    render_man(&cmd, "hugetext", &mut out)?;
    Ok(0)
}

/// Render `cmd` as page `name`, then each visible subcommand (recursively) as
/// `name-sub`, the way git's and cargo's man pages are named.
fn render_man(cmd: &clap::Command, name: &str, out: &mut dyn std::io::Write) -> Result<()> {
    let page = cmd.clone().name(name.to_string()).bin_name(name.replace('-', " "));
    clap_mangen::Man::new(page).render(out)?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        render_man(sub, &format!("{name}-{}", sub.get_name()), out)?;
    }
    Ok(())
}
