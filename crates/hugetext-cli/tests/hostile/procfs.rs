//! Hostile cases: procfs. Names are bytes to the kernel: a process (or a
//! file it maps) named in bytes that are not UTF-8 must not hide from
//! `inspect`, `explain` or the agent's metrics.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use hugetext_testkit as tk;
use serde_json::Value;
use tk::hugetext_json as json;

/// `raw` as the hugetext JSON and tables write it (bytes that are not
/// UTF-8, and control characters, as `\xNN`).
fn escaped(raw: &[u8]) -> String {
    hugetext::procfs::escape_name(raw)
}

/// A copy of `sleep` at `dir/<non-UTF-8 dir>/<non-UTF-8 name>`, run as the
/// unprivileged account; waits until it has exec'd.
fn start_hidden(dir: &Path) -> (Child, PathBuf) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sub = dir
        .canonicalize()
        .unwrap()
        .join(OsString::from_vec(b"lib\xc0".to_vec()));
    std::fs::create_dir(&sub).unwrap();
    let exe = sub.join(OsString::from_vec(b"bad\xff\xfe\x1b[2J".to_vec()));
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let mut child = tk::as_attacker()
        .arg(&exe)
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    for _ in 0..1000 {
        // Exec'd, its libraries loaded, and asleep in nanosleep: its text
        // has run, so it is resident.
        let asleep = hugetext::procfs::read_stat(pid).is_ok_and(|s| s.state == 'S');
        let loaded = hugetext::procfs::read_maps(Some(pid)).is_ok_and(|m| m.iter().any(|v| v.path.contains("libc.so")));
        if asleep && loaded && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe) {
            return (child, exe);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{} did not start", exe.display());
}

#[test]
fn a_process_named_in_non_utf8_bytes_is_seen_everywhere() {
    let dir = tk::scratch();
    let victim = tk::tree_state(Path::new("/usr/bin"));
    let (mut child, exe) = start_hidden(dir.path());
    let pid = child.id().to_string();
    use std::os::unix::ffi::OsStrExt;
    // The name is shorter than comm's 15 bytes.
    let comm = escaped(exe.file_name().unwrap().as_bytes());
    let path = escaped(exe.as_os_str().as_bytes());
    assert!(comm.contains("\\xff\\xfe\\x1b") && !comm.contains('\u{1b}'), "{comm}");

    // inspect --pid, as JSON and as a table (no raw control byte on the terminal).
    let v = json(&["inspect", "--pid", &pid, "--json"]);
    let p = &v["processes"][0];
    assert_eq!(p["comm"], comm.as_str(), "{p:#}");
    assert!(
        p["mappings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["path"] == path.as_str()),
        "{p:#}"
    );
    let o = tk::hugetext(&["inspect", "--pid", &pid]);
    assert!(o.status.success(), "{}", tk::text(&o.stderr));
    let table = tk::text(&o.stdout);
    assert!(table.contains(&comm) && !table.contains('\u{1b}'), "{table}");

    // explain --pid: the process and its program by name, lossless.
    let v = json(&["explain", "--pid", &pid, "--json"]);
    let p = &v["processes"][0];
    assert_eq!(p["comm"], comm.as_str(), "{p:#}");
    assert_eq!(p["exe"], path.as_str(), "{p:#}");
    assert_eq!(
        hugetext::procfs::name_path(p["exe"].as_str().unwrap()),
        exe,
        "the JSON name gives the bytes back"
    );

    // The system rollup counts it, and does not call it unreadable.
    let v = json(&["inspect", "--rollup", "--json"]);
    let procs = v["processes"].as_array().unwrap();
    assert!(procs
        .iter()
        .any(|p| p["pid"] == child.id() && p["comm"] == comm.as_str()));

    // The agent's page: its program is a series of its own.
    let page = hugetext::agent::scrape(
        &hugetext::agent::AgentMetrics::default(),
        &hugetext::agent::ScrapeInput {
            policy_files: Vec::new(),
            max_series: 100_000,
            folio_sizes: true,
            workloads: Vec::new(),
            shortfalls: Default::default(),
            store: hugetext::shmemstore::DEFAULT_ROOT.into(),
        },
    )
    .unwrap();
    // Prometheus label values escape the backslash once more.
    let label = format!("path=\"{}\"", path.replace('\\', "\\\\"));
    assert!(page.contains(&label), "{label} not in the page");

    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(tk::tree_state(Path::new("/usr/bin")), victim);
}

#[test]
fn rollup_and_agent_skip_nothing_for_a_non_utf8_name() {
    // The per-process count of "unreadable" in the system view: the hidden
    // process must not add to it.
    let count = || -> u64 {
        let o = tk::hugetext(&["inspect", "--rollup", "--json"]);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["skipped"]["unreadable"].as_u64().unwrap()
    };
    let before = count();
    let dir = tk::scratch();
    let (mut child, _exe) = start_hidden(dir.path());
    let during = count();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(during, before, "the process was counted as unreadable");
}
