//! Hostile cases: agent.

use hugetext_testkit as tk;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Tries N TCP connections to ADDR, says how many opened and how many
/// failed, and holds them (sending nothing) until its stdin closes.
const HOLD_CONNECTIONS: &str = r#"
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
socks, failed = [], 0
for i in range(int(sys.argv[2])):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, int(port)))
        socks.append(s)
    except OSError:
        failed += 1
print(len(socks), failed, flush=True)
sys.stdin.read()
"#;

/// A child killed when dropped (also when the test fails midway).
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// GET /metrics once: the status, or the error (refused, timed out).
fn scrape(addr: &str, timeout: Duration) -> Result<u16, String> {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut r = http
        .get(format!("http://{addr}/metrics"))
        .call()
        .map_err(|e| e.to_string())?;
    let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
    if r.status() == 200 && !body.contains("hugetext_system_text_bytes") {
        return Err(format!("not a page: {body}"));
    }
    Ok(r.status().as_u16())
}

/// A page within `within`, retrying after errors and 503s; the last
/// failure otherwise.
fn scrape_within(addr: &str, within: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    loop {
        let left = within.saturating_sub(t.elapsed());
        let last = match scrape(addr, left.max(Duration::from_millis(100))) {
            Ok(200) => return Ok(t.elapsed()),
            Ok(code) => format!("status {code}"),
            Err(e) => e,
        };
        if t.elapsed() >= within {
            return Err(last);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn count(dir: String) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// The agent under `ulimit -n 1024` (systemd's default): 600 idle
/// connections from another local user must not stop root's scrapes, and
/// once they close, threads and descriptors come back down. (Before: one
/// thread per connection and no idle timeout; about 513 connections used up
/// the descriptors and the listener refused everything, for good.)
#[test]
fn six_hundred_idle_connections_from_another_user_do_not_stop_scrapes() {
    tk::attacker();
    let scratch = tk::scratch();
    let conf = scratch.path().join("agent.conf");
    std::fs::write(&conf, "paths = []\n").unwrap();
    let before = tk::tree_state(scratch.path());
    let addr = free_addr();
    let agent = Kid(Command::new("prlimit")
        .arg("--nofile=1024")
        .arg("--")
        .arg(tk::bin())
        .args(["agent", "--listen", &addr, "--config"])
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let pid = agent.0.id();
    scrape_within(&addr, Duration::from_secs(20)).expect("agent up");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max open files") && l.split_whitespace().nth(3) == Some("1024")),
        "{limits}"
    );
    let (threads0, fds0) = (count(format!("/proc/{pid}/task")), count(format!("/proc/{pid}/fd")));

    let mut hold = tk::as_attacker();
    hold.args(["/usr/bin/python3", "-c", HOLD_CONNECTIONS, &addr, "600"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut attacker = Kid(hold.spawn().unwrap());
    let mut line = String::new();
    BufReader::new(attacker.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (opened, failed) = line.trim().split_once(' ').unwrap();
    eprintln!("attacker: {opened} connections open, {failed} refused or timed out");

    // Attacked: every scrape answers, soon; threads and descriptors bounded.
    for _ in 0..5 {
        let took = scrape_within(&addr, Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("no page while 600 idle connections are open: {e}"));
        eprintln!("page in {:.0} ms under attack", took.as_secs_f64() * 1e3);
    }
    assert_eq!(failed, "0", "the listener refused connections");
    let (threads1, fds1) = (count(format!("/proc/{pid}/task")), count(format!("/proc/{pid}/fd")));
    assert!(threads1 <= threads0 + 10, "threads {threads0} -> {threads1}");
    assert!(fds1 <= 256, "descriptors {fds0} -> {fds1}");

    // The attacker leaves: back to normal.
    drop(attacker.0.stdin.take());
    assert!(attacker.0.wait().unwrap().success());
    let t = Instant::now();
    loop {
        scrape_within(&addr, Duration::from_secs(15)).expect("a page after the attack");
        let (th, fd) = (count(format!("/proc/{pid}/task")), count(format!("/proc/{pid}/fd")));
        if th <= threads0 + 8 && fd <= fds0 + 2 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "threads {threads0} -> {th}, descriptors {fds0} -> {fd} after the attack"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(agent);
    assert_eq!(tk::tree_state(scratch.path()), before);
}

/// A connection that sends nothing is closed by the agent within its
/// header timeout (10 s), so connections fewer than the cap cannot be held
/// for ever either. (Before: never closed.)
#[test]
fn a_connection_that_sends_nothing_is_closed() {
    tk::attacker();
    let scratch = tk::scratch();
    let before = tk::tree_state(scratch.path());
    let addr = free_addr();
    let _agent = Kid(Command::new(tk::bin())
        .args(["agent", "--listen", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    scrape_within(&addr, Duration::from_secs(20)).expect("agent up");
    // As the other user: connect, send nothing, report when the agent hangs up.
    let script = r#"
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.settimeout(30)
t = time.monotonic()
try:
    closed = s.recv(1) == b""
except socket.timeout:
    closed = False
except OSError:
    closed = True
print("closed" if closed else "open", round(time.monotonic() - t, 1), flush=True)
"#;
    let out = tk::as_attacker()
        .args(["/usr/bin/python3", "-c", script, &addr])
        .output()
        .unwrap();
    let said = tk::text(&out.stdout);
    let mut it = said.split_whitespace();
    assert_eq!(it.next(), Some("closed"), "{said}{}", tk::text(&out.stderr));
    let secs: f64 = it.next().unwrap().parse().unwrap();
    assert!(secs < 20.0, "held {secs} s");
    scrape_within(&addr, Duration::from_secs(15)).expect("a page afterwards");
    assert_eq!(tk::tree_state(scratch.path()), before);
}
