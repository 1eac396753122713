//! Progress bars: drawn on stderr when it is a terminal (a real pty from
//! `script` from bsdutils), never when stderr is a pipe or file, and never on
//! stdout (so `--json` and tables stay clean).

use hugetext_testkit as common;

use std::process::Command;

/// indicatif redraws its line with carriage return + "erase line".
const REDRAW: &str = "\r\x1b[2K";

/// Run `hugetext ARGS` with stdout to /dev/null and stderr on a pty; return
/// what the terminal saw.
fn on_a_terminal(args: &[&str]) -> String {
    let mut line = common::bin().to_string_lossy().into_owned();
    for a in args {
        line.push(' ');
        line.push_str(a);
    }
    line.push_str(" >/dev/null");
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .expect("script (Debian package bsdutils)");
    assert!(out.status.success(), "{line}: {}", common::text(&out.stderr));
    common::text(&out.stdout)
}

/// The same with stderr on a pipe: (stdout, stderr).
fn on_a_pipe(args: &[&str]) -> (String, String) {
    let out = common::hugetext(args);
    assert!(out.status.success(), "{args:?}: {}", common::text(&out.stderr));
    (common::text(&out.stdout), common::text(&out.stderr))
}

fn files(dir: &std::path::Path, n: usize, mib: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            common::scratch_file(dir, &format!("f{i}"), mib)
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn warm_draws_a_bar_only_on_a_terminal() {
    let dir = common::scratch();
    let paths = files(dir.path(), 5, 8);
    let mut args = vec!["warm"];
    args.extend(paths.iter().map(String::as_str));
    let tty = on_a_terminal(&args);
    assert!(
        tty.contains(REDRAW) && tty.contains("warm"),
        "no progress bar on a terminal: {tty:?}"
    );
    let mut json = args.clone();
    json.insert(1, "--json");
    let (out, err) = on_a_pipe(&json);
    assert!(
        !err.contains('\r') && !out.contains('\r'),
        "bar drawn on a pipe: {err:?}"
    );
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is clean JSON");
}

#[test]
fn system_inspect_draws_a_bar_only_on_a_terminal() {
    let tty = on_a_terminal(&["inspect", "--rollup"]);
    assert!(
        tty.contains("scanning processes"),
        "no progress bar on a terminal: {tty:?}"
    );
    let (out, err) = on_a_pipe(&["inspect", "--rollup", "--json"]);
    assert!(
        !err.contains("scanning processes") && !out.contains('\r'),
        "bar drawn on a pipe: {err:?}"
    );
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is clean JSON");
}

#[test]
fn bench_draws_a_bar_only_on_a_terminal() {
    let dir = common::scratch();
    let d = dir.path().to_str().unwrap();
    let args = [
        "bench",
        "exec",
        "--size",
        "8M",
        "--runs",
        "1",
        "--random-passes",
        "1",
        "--dir",
        d,
    ];
    let tty = on_a_terminal(&args);
    assert!(tty.contains(REDRAW), "no progress bar on a terminal: {tty:?}");
    let mut json = args.to_vec();
    json.push("--json");
    let (out, err) = on_a_pipe(&json);
    assert!(
        !err.contains('\r') && !out.contains('\r'),
        "bar drawn on a pipe: {err:?}"
    );
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is clean JSON");
}
