#!/usr/bin/env python3
"""The instruction counter's output (qcount.c, qemu's -D log) into a cell's
JSON, with the counter's self-check.

  counts.py merge RESULT.json COUNTS.txt ARCH LOG
        adds "counts" to RESULT.json: the counter's intervals, its self-check,
        and, for each `bench mprotect --ranges --markers` the probe ran
        (@@OUT count-mprotect lines of the console LOG), the instructions per
        call of each case; exit 1 when the self-check fails
  counts.py show COUNTS.txt
        the parsed counts as JSON
  counts.py mprotect RESULT.json...
        a markdown table of the mprotect cases' kernel instructions per call,
        one column pair per cell

The self-check (marker.c's `selftest`, run by the guest's /init whenever the
counter is loaded): the user-space loop counts exactly its instructions
(2N+1 on x86-64, 2N+2 on aarch64, N = 1000000), twice; and the same probe
run twice (500 mprotect() calls of 64 KiB of 4 KiB pages) gives the same
kernel instructions per call (median) within 0.1%.
"""
import json
import os
import sys

LOOP_N = 1000000
EXPECTED_LOOP = {"x86_64": 2 * LOOP_N + 1, "aarch64": 2 * LOOP_N + 2}
TOLERANCE = 0.001


def parse(path):
    ids, vcpus, complete = {}, [], False
    with open(path, errors="replace") as f:
        for line in f:
            w = line.split()
            if not w or w[0] != "qcount":
                continue
            if w[1:] == ["end"]:
                complete = True
                continue
            kv = {}
            for item in w[1:]:
                k, _, v = item.partition("=")
                kv[k] = int(v)
            if "id" in kv:
                ids[str(kv.pop("id"))] = kv
            elif "vcpu" in kv:
                vcpus.append(kv)
    return {"complete": complete, "ids": ids, "vcpus": vcpus}


def selfcheck(counts, arch):
    why = []
    ids = counts["ids"]
    if not counts["complete"]:
        why.append("the counter's log has no end line (qemu did not exit normally)")
    want = EXPECTED_LOOP.get(arch)
    for i in ("16000", "16001"):
        c = ids.get(i)
        if c is None or c["intervals"] != 1:
            why.append(f"loop {i}: {0 if c is None else c['intervals']} intervals, not 1")
        elif c["user_sum"] != want:
            why.append(f"loop {i}: {c['user_sum']} user instructions, not {want}")
    a, b = ids.get("16002"), ids.get("16003")
    if not a or not b or a["intervals"] < 400 or b["intervals"] < 400:
        why.append("mprotect probe: fewer than 400 of 500 intervals counted")
    else:
        x, y = a["kernel_median"], b["kernel_median"]
        if x == 0 or abs(x - y) > TOLERANCE * max(x, y):
            why.append(f"mprotect probe: kernel instructions per call {x} and {y} differ by more than 0.1%")
    return {"ok": not why, "why": why,
            "loop_expected": want,
            "mprotect_kernel_per_call": [ids.get(i, {}).get("kernel_median") for i in ("16002", "16003")]}


def bench_outputs(log):
    """The JSON documents of the probes named count-mprotect* in a console log."""
    bodies = {}
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.startswith("@@OUT count-mprotect"):
                continue
            head, _, rest = line[len("@@OUT "):].partition("|")
            _, _, text = rest.partition("|")
            bodies.setdefault(head, []).append(text)
    out = {}
    for name, lines in bodies.items():
        body = "\n".join(lines)
        try:
            out[name] = json.JSONDecoder().raw_decode(body[body.index("{"):])[0]
        except ValueError:
            out[name] = None
    return out


def per_call(counts, bench):
    """Instructions per mprotect() call of each range case: the median over
    its calls (a timer interrupt or preemption lands in few of them)."""
    cases = []
    for c in bench.get("cases", []):
        ids = c.get("marker_ids") or {}
        row = {"name": c["name"], "bytes": c["bytes"], "calls": c["calls"], "verified": c["verified"]}
        for way in ("to_read_only", "to_read_write"):
            k = counts["ids"].get(str(ids.get(way)))
            row[way] = None if k is None else {
                "intervals": k["intervals"], "migrated": k["migrated"],
                "kernel_median": k["kernel_median"], "kernel_min": k["kernel_min"],
                "user_median": k["user_median"]}
        cases.append(row)
    return {"kernel": bench.get("kernel"), "filesystem": bench.get("filesystem"), "cases": cases}


def mprotect_table(results):
    cells = []
    for r in results:
        with open(r) as f:
            d = json.load(f)
        m = d.get("counts", {}).get("mprotect")
        if m:
            cells.append((d.get("kernel_pkg") or d.get("cell"), m))
    if not cells:
        print("no cell has mprotect counts", file=sys.stderr)
        return 1
    head = "| range (4 KiB pages) | " + " | ".join(
        f"{k}: to read-only | {k}: to read-write" for k, _ in cells) + " |"
    print(head)
    print("|---" * (1 + 2 * len(cells)) + "|")
    names = [c["name"] for c in cells[0][1]["cases"]]
    for n in names:
        row = [n]
        for _, m in cells:
            c = next((c for c in m["cases"] if c["name"] == n), None)
            for way in ("to_read_only", "to_read_write"):
                v = c and c.get(way)
                row.append("–" if not v else f"{v['kernel_median']:,}")
        print("| " + " | ".join(row) + " |")
    return 0


def main(argv):
    if len(argv) == 6 and argv[1] == "merge":
        res, log, arch, console = argv[2:]
        counts = parse(log)
        counts["selfcheck"] = selfcheck(counts, arch)
        for name, bench in bench_outputs(console).items():
            if bench is not None:
                counts[name.replace("count-", "", 1)] = per_call(counts, bench)
        with open(res) as f:
            doc = json.load(f)
        doc["counts"] = counts
        with open(res + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(res + ".tmp", res)
        if not counts["selfcheck"]["ok"]:
            for w in counts["selfcheck"]["why"]:
                print(f"instruction counter self-check failed: {w}", file=sys.stderr)
            return 1
        return 0
    if len(argv) == 3 and argv[1] == "show":
        json.dump(parse(argv[2]), sys.stdout, indent=1)
        print()
        return 0
    if len(argv) >= 3 and argv[1] == "mprotect":
        return mprotect_table(argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
