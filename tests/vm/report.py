"""The preload's machine-readable record of a remap pass, as lab.py and
matrix.py read it from a probe's output: with HUGETEXT_REPORT=json (which
probe.sh and lab-probe.sh set) the preload writes one line per pass, RECORD
then a JSON object of integers (crates/hugetext-abi/src/report.rs)."""
import json

RECORD = "hugetext-report: "
MIB = float(1 << 20)
ROUTES = ("already", "file", "collapse", "copy")


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
    return {k: rec[k] / MIB for k in ROUTES}
