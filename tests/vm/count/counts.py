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
  counts.py readahead RESULT.json...
        a markdown table of the readahead cases (tests/vm/count/rahead.c):
        kernel instructions per MiB read, each repetition, one row per cell
        and case; with the xa_lock acquisitions and contentions per MiB where
        the guest kernel has CONFIG_LOCK_STAT
  counts.py split COUNTS.txt ID THREADS REPS [N]
        the kernel instructions by kernel function (qcount's syms= and
        split=) of one readahead case (rahead.c's ID, THREADS, REPS: the
        ids of repetition R are ID + 2 (R - 1) .. + THREADS - 1), one column
        per repetition: the N functions (default 25) whose counts differ
        most between repetitions, and the spread of the whole
  counts.py fns COUNTS.txt ID THREADS REPS FN,FN,... [MIB]
        the same case's kernel instructions per MiB (MIB read in all,
        default 256) in the functions named, summed, each repetition

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
            if w[1] == "split":
                continue  # per-function lines: split()
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


def readahead_outputs(log):
    """The lines of the count-readahead* probes (rahead.c) in a console log:
    one row per thread and repetition, and the lock_stat lines per
    repetition."""
    rows, locks = [], {}
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.startswith("@@OUT count-readahead"):
                continue
            head, _, rest = line[len("@@OUT "):].partition("|")
            _, _, text = rest.partition("|")
            w = text.split()
            if not w:
                continue
            kv = dict(x.partition("=")[::2] for x in w[1:] if "=" in x)
            if w[0] == "rahead":
                row = {"probe": head, "mode": kv["mode"]}
                for k in ("threads", "mib", "rep", "id", "calls", "inserted_pages"):
                    row[k] = int(kv[k])
                row["seconds"] = float(kv["seconds"])
                rows.append(row)
            elif w[0] == "lockstat" and len(w) >= 15:
                # class-name: con-bounces contentions wait(min max total avg)
                # acq-bounces acquisitions hold(min max total avg)
                name = w[2].rstrip(":")
                f2 = w[3:]
                locks.setdefault((head, kv["rep"]), []).append(
                    {"class": name, "contentions": int(f2[1]), "acquisitions": int(f2[7])})
    return rows, locks


def readahead(counts, rows, locks):
    """Kernel instructions per MiB of each readahead case: every 2 MiB call
    counted, summed over the calls of each thread (kernel_sum), and the
    median call; with the xa_lock class of most acquisitions (the file's
    i_pages) where lock_stat was there."""
    out = []
    for r in rows:
        k = counts["ids"].get(str(r["id"]))
        part = r["mib"] / r["threads"]
        row = dict(r)
        if k is not None:
            row.update({"intervals": k["intervals"], "migrated": k["migrated"],
                        "kernel_sum": k["kernel_sum"], "kernel_median_call": k["kernel_median"],
                        "kernel_per_mib": round(k["kernel_sum"] / part),
                        "kernel_per_mib_median_call": round(k["kernel_median"] * r["calls"] / part)})
            if "kernel_irq_sum" in k:
                row["kernel_irq_sum"] = k["kernel_irq_sum"]
                row["kernel_own_per_mib"] = round((k["kernel_sum"] - k["kernel_irq_sum"]) / part)
            for w in range(4):
                if f"watch{w}_sum" in k:
                    row[f"watch{w}_sum"] = k[f"watch{w}_sum"]
        ls = locks.get((r["probe"], str(r["rep"])))
        if ls:
            top = max(ls, key=lambda c: c["acquisitions"])
            row["xa_lock"] = {"class": top["class"], "acquisitions": top["acquisitions"],
                              "contentions": top["contentions"],
                              "acquisitions_per_mib": round(top["acquisitions"] / r["mib"], 1),
                              "contentions_per_mib": round(top["contentions"] / r["mib"], 2),
                              "classes": ls}
        out.append(row)
    return out


def readahead_table(results):
    """watch0 and watch1, where the run had them, are _raw_spin_lock_irq()'s
    and queued_spin_lock_slowpath()'s entries (QCOUNT_WATCH, in that order:
    tests/vm/README.md)."""
    print("| cell | case | repetition | pages inserted | kernel instructions per MiB, "
          "interrupts apart | with the interrupts that landed in the calls | `_raw_spin_lock_irq()` per MiB "
          "| spin-lock slow paths per MiB | xa_lock acquisitions per MiB (lock_stat) | contentions per MiB (lock_stat) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    n = 0
    for r in results:
        with open(r) as f:
            d = json.load(f)
        cell = d.get("kernel_pkg") or d.get("cell")
        for row in d.get("counts", {}).get("readahead", []):
            if row["threads"] > 1 and row["id"] % 2:
                continue  # the second thread: its sum is in the first's row below
            same = [x for x in d["counts"]["readahead"] if x["probe"] == row["probe"] and x["rep"] == row["rep"]]
            if any("kernel_sum" not in x for x in same):
                continue
            total = sum(x["kernel_sum"] for x in same)
            own = (f"{round(sum(x['kernel_sum'] - x['kernel_irq_sum'] for x in same) / row['mib']):,}"
                   if all("kernel_irq_sum" in x for x in same) else "–")
            w = ["–", "–"]
            for i in (0, 1):
                if all(f"watch{i}_sum" in x for x in same):
                    w[i] = f"{sum(x[f'watch{i}_sum'] for x in same) / row['mib']:.1f}"
            case = f"{row['threads']} thread{'s' if row['threads'] > 1 else ''}" + (
                "" if row["threads"] == 1 else (", halves of one file" if row["mode"] == "halves" else ", a file each"))
            lk = row.get("xa_lock")
            print(f"| {cell} | {case} | {row['rep']} | {row['inserted_pages']:,} | {own} | {round(total / row['mib']):,} "
                  f"| {w[0]} | {w[1]} | {lk['acquisitions_per_mib'] if lk else '–'} "
                  f"| {lk['contentions_per_mib'] if lk else '–'} |")
            n += 1
    if not n:
        print("no cell has readahead counts", file=sys.stderr)
        return 1
    # each case over its repetitions: the median and the spread
    print()
    print("| cell | case | repetitions | kernel instructions per MiB, interrupts apart: median | least | most "
          "| spread (most - least) / least |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        with open(r) as f:
            d = json.load(f)
        cell = d.get("kernel_pkg") or d.get("cell")
        rows = d.get("counts", {}).get("readahead", [])
        for probe in dict.fromkeys(x["probe"] for x in rows):
            per_rep = {}
            for x in rows:
                if x["probe"] == probe and "kernel_irq_sum" in x:
                    per_rep.setdefault(x["rep"], []).append(x)
            own = sorted(sum(x["kernel_sum"] - x["kernel_irq_sum"] for x in xs) / xs[0]["mib"]
                         for xs in per_rep.values())
            if not own:
                continue
            x0 = next(x for x in rows if x["probe"] == probe)
            case = f"{x0['threads']} thread{'s' if x0['threads'] > 1 else ''}" + (
                "" if x0["threads"] == 1 else (", halves of one file" if x0["mode"] == "halves" else ", a file each"))
            med = own[(len(own) - 1) // 2]
            print(f"| {cell} | {case} | {len(own)} | {round(med):,} | {round(own[0]):,} | {round(own[-1]):,} "
                  f"| {(own[-1] - own[0]) / own[0]:.2%} |")
    return 0


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


def split_counts(path):
    """id -> {function: kernel instructions} from qcount's split lines."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            w = line.split()
            if len(w) == 5 and w[:2] == ["qcount", "split"]:
                kv = dict(x.partition("=")[::2] for x in w[2:])
                out.setdefault(int(kv["id"]), {})[kv["fn"]] = int(kv["kernel"])
    return out


def split(path, base, threads, reps, top=25):
    by_id = split_counts(path)
    per_rep = []
    for r in range(reps):
        fns = {}
        for t in range(threads):
            for fn, n in by_id.get(base + 2 * r + t, {}).items():
                fns[fn] = fns.get(fn, 0) + n
        per_rep.append(fns)
    if not any(per_rep):
        print(f"no split counts for ids {base}.. in {path}", file=sys.stderr)
        return 1
    totals = [sum(x.values()) for x in per_rep]
    names = set().union(*per_rep)
    spread = {fn: max(x.get(fn, 0) for x in per_rep) - min(x.get(fn, 0) for x in per_rep) for fn in names}
    lo, hi = min(totals), max(totals)
    print(f"ids {base}.., {threads} thread(s), {reps} repetitions: kernel instructions outside interrupts "
          f"{' / '.join(f'{x:,}' for x in totals)}; spread {hi - lo:,} ({(hi - lo) / lo:.2%} of the least)")
    print("| function | " + " | ".join(f"rep {r + 1}" for r in range(reps)) + " | max - min | share of the whole's spread |")
    print("|---|" + "---|" * (reps + 2))
    for fn in sorted(names, key=lambda f: -spread[f])[:top]:
        share = spread[fn] / (hi - lo) if hi > lo else 0
        print(f"| `{fn}` | " + " | ".join(f"{x.get(fn, 0):,}" for x in per_rep) + f" | {spread[fn]:,} | {share:.0%} |")
    return 0


def fns(path, base, threads, reps, names, mib):
    """The kernel instructions per MiB of the functions NAMES (summed), each
    repetition of one readahead case."""
    by_id = split_counts(path)
    want = set(names.split(","))
    per_rep = []
    for r in range(reps):
        n = sum(c for t in range(threads) for fn, c in by_id.get(base + 2 * r + t, {}).items() if fn in want)
        per_rep.append(n / mib)
    if not any(per_rep):
        print(f"no split counts of those functions for ids {base}.. in {path}", file=sys.stderr)
        return 1
    lo, hi = min(per_rep), max(per_rep)
    print(f"ids {base}.., {threads} thread(s): {' / '.join(f'{round(x):,}' for x in per_rep)} per MiB; "
          f"spread {(hi - lo) / lo:.3%}")
    return 0


def main(argv):
    if len(argv) == 6 and argv[1] == "merge":
        res, log, arch, console = argv[2:]
        counts = parse(log)
        counts["selfcheck"] = selfcheck(counts, arch)
        for name, bench in bench_outputs(console).items():
            if bench is not None:
                counts[name.replace("count-", "", 1)] = per_call(counts, bench)
        rows, locks = readahead_outputs(console)
        if rows:
            counts["readahead"] = readahead(counts, rows, locks)
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
    if len(argv) >= 3 and argv[1] == "readahead":
        return readahead_table(argv[2:])
    if len(argv) in (6, 7) and argv[1] == "split":
        return split(argv[2], *(int(x) for x in argv[3:]))
    if len(argv) in (7, 8) and argv[1] == "fns":
        return fns(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), argv[6], int(argv[7]) if len(argv) == 8 else 256)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
