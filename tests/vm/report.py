"""The machine-readable output the harness reads, never the human -v text.

The preload's record of a remap pass, as lab.py, matrix.py and
scripts/real-programs.py read it: with HUGETEXT_REPORT=json (which probe.sh
and lab-probe.sh set) the preload writes one line per pass, RECORD then a JSON
object of integers (crates/hugetext-abi/src/report.rs): bytes by route, times,
and with a hot-window list (`run --hot`) its totals `hot` and `cold`.

A profile's summary as probe.sh captures it: PROFILE then `hugetext profile
--json` on one line.
"""
import json

RECORD = "hugetext-report: "
PROFILE = "hugetext-profile: "
MIB = float(1 << 20)
ROUTES = ("already", "file", "collapse", "shmem", "copy")


def records(text):
    """The records in TEXT, parsed (a line that does not parse is skipped)."""
    out = []
    for line in text.splitlines():
        if line.startswith(RECORD):
            try:
                out.append(json.loads(line[len(RECORD):]))
            except ValueError:
                pass
    return out


def start_pass(text):
    """The last record of a pass at start (not over objects loaded later
    with dlopen), or None."""
    recs = [r for r in records(text) if not r.get("late")]
    return recs[-1] if recs else None


def routes_mib(rec):
    """MiB huge-backed by each route."""
    return {k: rec.get(k, 0) / MIB for k in ROUTES}


def totals(recs):
    """The sums over RECS (every process, every pass) of the byte keys:
    windows, huge, the routes, hot and cold."""
    keys = ("windows", "huge", *ROUTES, "hot", "cold")
    return {k: sum(r.get(k, 0) for r in recs) for k in keys}


def profile(text):
    """The last `profile --json` document in TEXT (after PROFILE), or None."""
    doc = None
    for line in text.splitlines():
        if line.startswith(PROFILE):
            try:
                doc = json.loads(line[len(PROFILE):])
            except ValueError:
                pass
    return doc
