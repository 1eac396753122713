#!/usr/bin/python3
"""`hugetext run` on real programs (Debian's packages): text, route, huge-backed
and private MiB, start-up time plain vs under `run`, and whether the output,
the children's process titles and environments stay as they are.

    cargo build --release
    scripts/real-programs.py [PAIRS] [NAME...]      # default 5 pairs, every program

NAME: chromium firefox postgres mariadb clang java python. Programs that are
not installed are skipped with one line. Servers listen on 127.0.0.1 only and
run as their own users (postgres, mysql) in scratch data directories under
$HT_REAL_DIR (default /tmp/ht-real), made with initdb / mariadb-install-db.

For each program: one `hugetext run` start with HUGETEXT_REPORT=json (text
MiB in whole 2 MiB windows, route, huge-backed MiB, from the preload's
records, tests/vm/report.py, with objects loaded after start); PAIRS
interleaved pairs plain / `hugetext run` (no record; the order alternates), medians and the median of the per-pair ratios; one
long-lived instance of each kind ("hold") whose process tree's smaps give the
private MiB of executable anonymous memory (the text copies), plain and under
`run`, with chromium's `--type=` values and the children's environment.
Prints a Markdown table. A benchmark: it asserts nothing (the machine is
shared and noisy: compare ratios).
"""

import os
import re
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "vm"))
import report  # noqa: E402  (the one parser of the preload's record)

HT = os.environ.get("HUGETEXT", os.path.join(ROOT, "target/release/hugetext"))
W = os.environ.get("HT_REAL_DIR", "/tmp/ht-real")
PG = "/usr/lib/postgresql/15/bin"
PYSHIM = os.environ.get("PYTHON_SHIM", os.path.expanduser("~/.pyenv/shims/python3"))
PAGE = "file://" + os.path.join(W, "page.html")
LOADER_VARS = ("LD_PRELOAD=", "LD_AUDIT=", "GLIBC_TUNABLES=", "HUGETEXT_VIA=")


def as_user(user):
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def setup():
    os.makedirs(W, exist_ok=True)
    os.chmod(W, 0o755)
    # firefox-esr --profile DIR waits forever, headless, when DIR is missing.
    for d in ("ff", "ff-hold"):
        os.makedirs(os.path.join(W, d), exist_ok=True)
    with open(os.path.join(W, "page.html"), "w") as f:
        f.write('<html><body><p id="x">hello</p><script>document.getElementById("x").textContent += " from js";'
                "</script></body></html>\n")
    with open(os.path.join(W, "small.c"), "w") as f:
        f.write("#include <stdio.h>\nint fib(int n){return n<2?n:fib(n-1)+fib(n-2);}\n"
                'int main(void){printf("%d\\n", fib(20));return 0;}\n')
    with open(os.path.join(W, "Hello.java"), "w") as f:
        f.write('public class Hello { public static void main(String[] a) throws Exception {\n'
                '  System.out.println("hello " + Runtime.version());\n'
                '  if (a.length > 0) System.in.read(); } }\n')


def installed(p):
    return os.path.exists(p) or any(os.access(os.path.join(d, p), os.X_OK)
                                    for d in os.environ.get("PATH", "").split(":"))


def prepare_postgres():
    data = os.path.join(W, "pgdata")
    if not os.path.exists(os.path.join(data, "PG_VERSION")):
        os.makedirs(data, exist_ok=True)
        sh(["chown", "postgres:postgres", data])
        sh(as_user("postgres") + [f"{PG}/initdb", "-D", data, "-A", "trust", "-U", "postgres"])
    sock = os.path.join(W, "pgsock")
    os.makedirs(sock, exist_ok=True)
    sh(["chown", "postgres:postgres", sock])


def prepare_mariadb():
    data = os.path.join(W, "mydata")
    if not os.path.exists(os.path.join(data, "mysql")):
        os.makedirs(data, exist_ok=True)
        sh(["mariadb-install-db", "--user=mysql", f"--datadir={data}", "--skip-test-db",
            "--auth-root-authentication-method=socket"])
    sh(["chown", "-R", "mysql:mysql", data])
    # The socket and pid file in a directory mysql may write (W is root's).
    run_dir = os.path.join(W, "myrun")
    os.makedirs(run_dir, exist_ok=True)
    sh(["chown", "mysql:mysql", run_dir])


def prepare_java():
    if not os.path.exists(os.path.join(W, "Hello.class")):
        sh(["javac", "-d", W, os.path.join(W, "Hello.java")])


def programs():
    chrome = ["chromium", "--headless", "--no-sandbox"]
    ff = ["firefox-esr", "--headless", "--no-remote"]
    my = os.path.join(W, "mydata")
    return [
        dict(name="chromium", need="chromium", kind="exit",
             start=chrome + [f"--user-data-dir={W}/chromium", "--dump-dom", PAGE],
             hold=chrome + [f"--user-data-dir={W}/chromium-hold", "--remote-debugging-port=0", PAGE],
             settle=5, shown="chromium --headless --no-sandbox --dump-dom file:///... (Debian's sh wrapper)"),
        dict(name="firefox", need="firefox-esr", kind="exit", env={"HOME": W},
             start=ff + ["--profile", f"{W}/ff", "--screenshot", f"{W}/ff.png", PAGE],
             hold=ff + ["--profile", f"{W}/ff-hold", PAGE], settle=8,
             shown="firefox-esr --headless --screenshot out.png file:///..."),
        dict(name="postgres", need=f"{PG}/postgres", kind="server", prepare=prepare_postgres,
             start=as_user("postgres") + [f"{PG}/postgres", "-D", f"{W}/pgdata", "-p", "54329",
                                          "-c", "listen_addresses=127.0.0.1", "-k", f"{W}/pgsock"],
             ready="ready to accept connections", stop=signal.SIGINT,
             shown="setpriv (postgres) postgres -D pgdata: start to \"ready to accept connections\""),
        dict(name="mariadb", need="/usr/sbin/mariadbd", kind="server", prepare=prepare_mariadb,
             start=as_user("mysql") + ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={my}",
                                       f"--socket={W}/myrun/my.sock", "--port=33069", "--bind-address=127.0.0.1",
                                       f"--pid-file={W}/myrun/my.pid", "--innodb-buffer-pool-size=64M"],
             ready="ready for connections", stop=signal.SIGTERM,
             shown="setpriv (mysql) mariadbd --datadir=...: start to \"ready for connections\""),
        dict(name="clang", need="clang", kind="exit",
             start=["clang", "-O2", "-c", f"{W}/small.c", "-o", f"{W}/small.o"],
             hold=["clang", "-x", "c", "-c", "-", "-o", f"{W}/hold.o"], settle=2,
             shown="clang -O2 -c small.c"),
        dict(name="java", need="java", kind="exit", prepare=prepare_java,
             start=["java", "-cp", W, "Hello"], hold=["java", "-cp", W, "Hello", "hold"], settle=3,
             shown="java -cp . Hello"),
        dict(name="python", need=PYSHIM, kind="exit",
             start=[PYSHIM, "-c", "import numpy; numpy.ones(4).dot(numpy.ones(4))"],
             hold=[PYSHIM, "-c", "import numpy, sys; sys.stdin.read()"], settle=3,
             shown="python3 (pyenv shim) -c 'import numpy'"),
    ]


def environ_of(p):
    e = dict(os.environ)
    e.update(p.get("env", {}))
    return e


def remove_perf_maps(pids):
    for pid in pids:
        try:
            os.unlink(f"/tmp/perf-{pid}.map")
        except OSError:
            pass


def unlock_profiles():
    """firefox-esr waits forever (headless: no dialog to answer) when its
    profile holds the lock of an instance that was killed: remove stale
    locks before every start (no firefox of ours runs at that point)."""
    for d in ("ff", "ff-hold"):
        for f in ("lock", ".parentlock", "parent.lock"):
            try:
                os.unlink(os.path.join(W, d, f))
            except OSError:
                pass


def run_exit(cmd, env, limit=180):
    """Run to exit; a start that takes over `limit` seconds (firefox-esr
    --screenshot sometimes waits forever, plain or not) is killed with its
    process group and returns ms None."""
    unlock_profiles()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, subprocess.CompletedProcess(cmd, -9, out, err)
    ms = (time.perf_counter() - t) * 1000
    return ms, subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def server_log(name):
    return os.path.join(W, f"{name}.log")


def run_server(p, cmd, env, while_up=None):
    """Start, wait for the ready line in its log, (measure), stop."""
    log = server_log(p["name"])
    with open(log, "wb") as f:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=f)
        ms = None
        deadline = t + 120
        while time.perf_counter() < deadline and proc.poll() is None:
            with open(log, "rb") as r:
                if p["ready"].encode() in r.read():
                    ms = (time.perf_counter() - t) * 1000
                    break
            time.sleep(0.002)
        extra = while_up(proc.pid) if (while_up and ms is not None) else None
        if proc.poll() is None:
            proc.send_signal(p["stop"])
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    remove_perf_maps([proc.pid])
    with open(log, "rb") as r:
        text = r.read().decode(errors="replace")
    return ms, text, extra


def tree(root):
    """root and its descendants."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def smaps_text(pid):
    """(private kB of executable anonymous mappings, huge kB of executable mappings)."""
    priv = huge = 0
    cur = None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    perms, path = head[1], (head[5] if len(head) > 5 else "")
                    cur = dict(x="x" in perms, anon=path == "" or path.startswith("[anon:"))
                elif cur and cur["x"] and head[0] in ("Private_Clean:", "Private_Dirty:") and cur["anon"]:
                    priv += int(head[1])
                elif cur and cur["x"] and head[0] in ("AnonHugePages:", "FilePmdMapped:"):
                    huge += int(head[1])
    except OSError:
        pass
    return priv, huge


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return [e.decode(errors="replace") for e in f.read().split(b"\0")]
    except OSError:
        return []


def stat_fields(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


def execd(pid):
    """True when pid exec'd a program after its fork: another executable or
    another environment block (env_start, stat field 50) than its parent's."""
    me = stat_fields(pid)
    if len(me) < 48:
        return True
    parent = me[1]
    up = stat_fields(parent)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        pexe = os.readlink(f"/proc/{parent}/exe")
    except OSError:
        return True
    return exe != pexe or len(up) < 48 or up[47] != me[47]


def observe(root):
    pids = tree(root)
    priv = huge = 0
    for pid in pids:
        p, h = smaps_text(pid)
        priv += p
        huge += h
    # chromium's children rewrite their title: one string, words joined by spaces.
    types = sorted(w.decode(errors="replace") for pid in pids for a in cmdline(pid) for w in a.split(b" ")
                   if w.startswith(b"--type="))
    # Only processes that were exec'd have an environment of their own in
    # /proc/PID/environ: a child that only forked (postgres backends) shows
    # its parent's start-up strings, whatever the parent's environ says now.
    leaked = sorted({v for pid in pids if pid != root and execd(pid) for v in environ(pid)
                     if v.startswith(LOADER_VARS)})
    return dict(pids=len(pids), private_mib=priv / 1024, huge_mib=huge / 1024, types=types, leaked=leaked)


def hold(p, cmd, env):
    if p["kind"] == "server":
        _, _, seen = run_server(p, cmd, env, while_up=lambda pid: (time.sleep(1), observe(pid))[1])
        return seen
    unlock_profiles()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(p["settle"])
    seen = observe(proc.pid)
    pids = tree(proc.pid)
    proc.stdin.close()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    remove_perf_maps(pids)
    return seen


def facts(stderr):
    """Sums of the preload's records (every process, its pass at start and
    over objects loaded later), MiB: text, huge-backed, route."""
    t = report.totals(report.records(stderr))
    route = " + ".join(f"{k} {t[k] / report.MIB:.0f}" for k in report.ROUTES if t[k] > 0) or "none"
    return t["windows"] / report.MIB, t["huge"] / report.MIB, route


def measure(p, pairs):
    env = environ_of(p)
    run = [HT, "run", "--"]
    # The recorded start: the preload's machine-readable record of each pass.
    recorded = dict(env, **{"HUGETEXT_REPORT": "json"})
    if p.get("prepare"):
        p["prepare"]()
    one = (lambda cmd: run_server(p, cmd, env)[:2]) if p["kind"] == "server" else \
        (lambda cmd: (lambda ms, r: (ms, r))(*run_exit(cmd, env)))
    # Warm-up (page cache), then the recorded start.
    one(p["start"])
    if p["kind"] == "server":
        _, err = run_server(p, run + p["start"], recorded)[:2]
        same = None
    else:
        _, plain_r = run_exit(p["start"], env)
        _, r = run_exit(run + p["start"], recorded)
        err = r.stderr.decode(errors="replace")
        same = r.stdout == plain_r.stdout and r.returncode == plain_r.returncode
    text, huge, route = facts(err)
    times = {"plain": [], "run": []}
    ratios = []
    for i in range(pairs):
        order = [("plain", p["start"]), ("run", run + p["start"])]
        if i % 2:
            order.reverse()
        got = {}
        for k, cmd in order:
            ms = one(cmd)[0]
            got[k] = ms
            if ms is not None:
                times[k].append(ms)
        if got["plain"] and got["run"]:
            ratios.append(got["run"] / got["plain"])
    # A server that did not get ready in the hold run: nothing observed.
    none = dict(pids=0, private_mib=float("nan"), huge_mib=float("nan"), types=[], leaked=[])
    held = {k: hold(p, c, env) or none for k, c in (("plain", p.get("hold", p["start"])),
                                            ("run", run + p.get("hold", p["start"])))}
    return dict(text=text, huge=huge, route=route, same=same, err=err,
                plain_ms=median(times["plain"]), run_ms=median(times["run"]),
                ratio=median(ratios), held=held, timeouts=2 * pairs - len(times["plain"]) - len(times["run"]))


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    args = sys.argv[1:]
    pairs = int(args.pop(0)) if args and args[0].isdigit() else 5
    setup()
    rows = []
    for p in programs():
        if args and p["name"] not in args:
            continue
        if not installed(p["need"]):
            print(f"# {p['name']}: skipped, {p['need']} is not installed", file=sys.stderr)
            continue
        print(f"# {p['name']}: {pairs} pairs ...", file=sys.stderr)
        m = measure(p, pairs)
        for line in m["err"].splitlines():
            if line.startswith("hugetext:") and "warning" in line:
                print(f"#   {line[:300]}", file=sys.stderr)
        h = m["held"]
        notes = []
        if m["same"] is not None:
            notes.append("same output" if m["same"] else "OUTPUT DIFFERS")
        if h["plain"]["types"] or h["run"]["types"]:
            same_t = h["plain"]["types"] == h["run"]["types"]
            notes.append(("same" if same_t else "DIFFERENT") + f" --type= values ({len(h['run']['types'])})")
        # What the children see under `run` and not plain (firefox-esr sets
        # LD_PRELOAD=libmozsandbox.so for its content processes itself).
        extra = sorted({v.split("=")[0] for v in set(h["run"]["leaked"]) - set(h["plain"]["leaked"])})
        notes.append("children's environment as plain" if not extra else "children also see " + ",".join(extra))
        notes.append(f"{h['run']['pids']} processes")
        if m["timeouts"]:
            notes.append(f"{m['timeouts']} starts killed after 180 s")
        rows.append((p["shown"], m["text"], m["route"], m["huge"], m["plain_ms"], m["run_ms"], m["ratio"],
                     h["plain"]["private_mib"], h["run"]["private_mib"], "; ".join(notes)))
        print_table(rows[-1:], pairs)  # as it comes (a benchmark of several minutes)
        print("", flush=True)
    print_table(rows, pairs)


def print_table(rows, pairs):
    print(f"| program | text MiB (whole windows) | route (MiB) | huge-backed MiB | start plain ms | "
          f"start `run` ms | ratio (median of {pairs} pairs) | private text MiB plain / `run` | notes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.1f} | {r[2]} | {r[3]:.1f} | {r[4]:.0f} | {r[5]:.0f} | {r[6]:.2f} | "
              f"{r[7]:.1f} / {r[8]:.1f} | {r[9]} |")


if __name__ == "__main__":
    main()
