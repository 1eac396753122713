#!/usr/bin/env python3
"""Benchmark of `hugetext run --hot` against the whole-text copy route on the
hotcold fixture (tests/fixtures/hotcold.c: 100 MiB of text, hot path 8 MiB).

    scripts/bench-hot.py [--pairs N] [--calls N] [--hugetext PATH]

In one run, paired and alternating order (whole-first, hot-first, ...):
  1. private memory: smaps Private of the text's anonymous copies, with the
     program waiting (`hotcold wait`);
  2. start-up: wall time of `hugetext run --strategy copy [--hot P] --
     hotcold 0` (the remap before main, then exit);
  3. random calls on the hot set: the fixture's own timing of CALLS calls
     (`ns=`), whole vs hot.
Prints medians per side, the median of the per-pair ratios hot/whole, and for
(3) a 95% percentile-bootstrap interval of that ratio.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(tmp):
    exe = os.path.join(tmp, "hotcold")
    subprocess.run(["gcc", "-O2", "-Wl,-z,max-page-size=0x200000", "-o", exe,
                    os.path.join(ROOT, "tests/fixtures/hotcold.c")], check=True)
    return exe


def run_args(ht, profile):
    a = [ht, "run", "--strategy", "copy"]
    return a + (["--hot", profile] if profile else []) + ["--"]


def private_kib(ht, exe, profile):
    p = subprocess.Popen(run_args(ht, profile) + [exe, "wait"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    p.stdout.readline()
    p.stdout.readline()
    total, cur = 0, None
    with open(f"/proc/{p.pid}/smaps") as f:
        for line in f:
            w = line.split()
            if "-" in w[0] and len(w) >= 5 and not w[0].endswith(":"):
                # an anonymous r-x mapping: a copy of the text
                cur = w[1] == "r-xp" and (len(w) == 5 or w[5].startswith("[anon:hugetext"))
            elif cur and w[0] in ("Private_Clean:", "Private_Dirty:"):
                total += int(w[1])
    p.stdin.close()
    p.wait()
    return total


def startup_s(ht, exe, profile):
    t = time.perf_counter()
    subprocess.run(run_args(ht, profile) + [exe, "0"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def calls_ns(ht, exe, profile, calls):
    o = subprocess.run(run_args(ht, profile) + [exe, str(calls)], check=True,
                       capture_output=True, text=True).stdout
    return int(o.split("ns=")[1].split()[0])


def paired(n, f):
    whole, hot = [], []
    for i in range(n):
        order = [None, "hot"] if i % 2 == 0 else ["hot", None]
        r = {}
        for side in order:
            r[side] = f(side)
        whole.append(r[None])
        hot.append(r["hot"])
    return whole, hot


def ci95(whole, hot, seed=0xab):
    rng = random.Random(seed)
    ratios = [h / w for w, h in zip(whole, hot, strict=True)]
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(10000))
    return statistics.median(ratios), meds[249], meds[9749]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--calls", type=int, default=20_000_000)
    ap.add_argument("--hugetext", default=os.path.join(ROOT, "target/release/hugetext"))
    a = ap.parse_args()
    ht = a.hugetext
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        prof = os.path.join(tmp, "hotcold.json")
        subprocess.run([ht, "profile", "--frequency", "4999", "-o", prof, "--", exe, "30000000"],
                       check=True, stdout=subprocess.DEVNULL)
        def side(s):
            return prof if s else None
        for name, f, unit in [
            ("private memory of the copies", lambda s: private_kib(ht, exe, side(s)), "KiB"),
            ("start-up (run to exit)", lambda s: startup_s(ht, exe, side(s)) * 1000, "ms"),
            (f"{a.calls:,} random calls on the hot set", lambda s: calls_ns(ht, exe, side(s), a.calls) / 1e6, "ms"),
        ]:
            whole, hot = paired(a.pairs, f)
            r, lo, hi = ci95(whole, hot)
            print(f"{name}: whole {statistics.median(whole):,.1f} {unit}, hot {statistics.median(hot):,.1f} {unit} "
                  f"(medians of {a.pairs} pairs); hot/whole median of ratios {r:.4f}, 95% CI [{lo:.4f}, {hi:.4f}]; "
                  f"whole/hot {1 / r:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
