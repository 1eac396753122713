#!/usr/bin/env python3
"""The kernel matrix's bookkeeping (scripts/kernel-matrix.sh).

  matrix.py collect LOG PLAN META_JSON   console log -> one cell's result JSON (stdout)
  matrix.py summary CELL.json            print the cell; exit 1 if anything failed
  matrix.py doc CELL.json...             write doc/kernels.md and doc/kernels.json
  matrix.py doc --merge CELL.json...     the same, merging only the probes of these cells
                                         (a run with --probe) into the cells of doc/kernels.json
  matrix.py mprotect LOG...              the bench mprotect rounds of MATRIX_PART=mprotect guests

A cell passes when every planned test ran and passed under every THP mode,
and every probe finished. Probes report what the routes achieved (route,
PMD-mapped kB); they are facts, compared against what the docs promise by
the tests, not here.
"""
import json
import re
import sys
from pathlib import Path

# The preload's machine-readable record of a pass, never its human -v text.
from report import MIB, profile, routes_mib, start_pass

# hugetext's JSON keys of quantities in the unit of huge text were named
# pmd_* before (still written as aliases for a release): records from
# older runs have only the old names.
OLD_UNIT_KEYS = {
    "unit_folio_kb": "pmd_kb",
    "unit_mapped_kb": "pmd_kb",
    "unit_windows": "pmd_windows",
    "unit_windows_huge": "pmd_windows_huge",
    "unit_folio_pct": "pmd_folio_pct",
    "unit_mapped_pct": "pmd_mapped_pct",
}


def unit_key(d, key):
    """d[key], or the value under the key's old pmd_* name."""
    return d.get(key, d.get(OLD_UNIT_KEYS[key]))


def parse_plan(path):
    plan = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0].startswith("needs="):
            words = words[1:]
        key, *names = words
        plan.extend((key, n) for n in names)
    return plan


def collect(log, plan_path, meta):
    facts, outs = [], {}
    for raw in Path(log).read_bytes().decode("utf-8", "replace").splitlines():
        line = raw.rstrip("\r")
        # Kernel messages can share a console line with ours: find the marker.
        i = line.find("@@HT ")
        if i >= 0:
            try:
                facts.append(json.loads(line[i + 5 :]))
            except ValueError:
                pass
            continue
        i = line.find("@@OUT ")
        if i >= 0:
            head, _, text = line[i + 6 :].partition("|")
            thp, _, text = text.partition("|")
            outs.setdefault((head, thp), []).append(text)
    cell = dict(meta)
    guest = next((f for f in facts if f.get("kind") == "guest"), {})
    cell["guest"] = guest
    cell["finished"] = any(f.get("kind") == "done" for f in facts)
    errors = [f["reason"] for f in facts if f.get("kind") == "error"]
    cell["error"] = errors[0] if errors else None
    unsupported = [f["reason"] for f in facts if f.get("kind") == "unsupported"]
    cell["unsupported"] = unsupported[0] if unsupported else None
    modes = meta.get("thp", [])
    tests = {}
    for f in facts:
        if f.get("kind") == "test":
            tests[(f["thp"], f["suite"], f["test"])] = f
    cell["tests"] = []
    for mode in modes:
        for key, name in parse_plan(plan_path):
            f = tests.get((mode, key, name), {})
            t = {"thp": mode, "suite": key, "test": name, "result": f.get("result", "missing")}
            if "why" in f:
                t["why"] = f["why"]
            cell["tests"].append(t)
    cell["caps"] = {f["thp"]: f.get("caps", "") for f in facts if f.get("kind") == "caps"}
    cell["suites"] = [f for f in facts if f.get("kind") == "suite"]
    # Probes that report their time in the guest (kernel-bench).
    cell["probe_seconds"] = {f"{f['thp']}:{f['name']}": f["seconds"] for f in facts if f.get("kind") == "probe-time"}
    cell["probes"] = {}
    for f in facts:
        if f.get("kind") != "probe":
            continue
        text = outs.get((f["name"], f["thp"]), [])
        cell["probes"].setdefault(f["thp"], {})[f["name"]] = interpret(f["name"], f["rc"], text)
    return cell


def interpret(name, rc, lines):
    """What a probe's output says: route and PMD-mapped kB where it has them."""
    out = {"rc": rc}
    text = "\n".join(lines)
    if name in ("doctor", "warm", "warm-mapped", "warm-replace") or name.startswith("bench-exec"):
        try:
            # The JSON document, then whatever the command wrote to stderr
            # after it (warm's "nothing warmed" line when it exits 3).
            doc = json.JSONDecoder().raw_decode(text[text.index("{") :])[0]
        except ValueError:
            out["unparsed"] = lines[-3:]
            return out
        if name == "doctor":
            out["checks"] = {c["id"]: {"status": c["status"], "value": c["value"]} for c in doc.get("checks", [])}
        elif name.startswith("warm"):
            f = (doc.get("files") or [{}])[0]
            out.update(
                route=f.get("route"),
                pmd_kb=unit_key(f, "unit_folio_kb"),
                pmd_windows=unit_key(f, "unit_windows"),
                eligible_windows=f.get("eligible_windows"),
                notes=f.get("notes", []),
                collapse=doc.get("collapse"),
                replaced=f.get("replaced"),
                millis=f.get("millis"),
            )
            if f.get("millis") and f.get("pmd_kb"):
                out["ms_per_mib"] = f["millis"] / (f["pmd_kb"] / 1024.0)
        else:
            states, full = {}, {}
            for v, d in (doc.get("variants") or {}).items():
                runs = d.get("runs") or [{}]
                states[v] = unit_key(runs[0].get("state", {}), "unit_mapped_pct")
                full[v] = runs[0].get("state", {})
            out["pmd_mapped_pct"] = states
            # The whole state of the first run (folio sizes after the cold
            # sweep, shares, faults, pgpgin) and the unit it counts in.
            out["states"] = full
            out.update({k: doc.get(k) for k in ("unit", "unit_kb", "page_kb", "size_bytes", "filesystem")})
        return out
    if name == "kernel-bench":
        # scripts/kernel-bench.sh --quick: its table (times emulated)
        out["table"] = [line for line in lines if line.startswith("|")]
        return out
    if name == "read-ahead":
        out["kb"] = {d: int(kb) for d, kb in re.findall(r"^(\w+) (\d+)$", text, re.M)}
        return out
    if name.startswith("fixture-"):
        return fixture_probe(out, text)
    if name == "shmem-text":
        return shmem_probe(out, text)
    if name.endswith("-exec"):
        m = re.search(r"file_pmd_kb=(\d+) anon_huge_kb=(\d+)", text)
        if m:
            out.update(file_pmd_kb=int(m.group(1)), anon_huge_kb=int(m.group(2)))
        return out
    if name.startswith("run-"):
        r = start_pass(text)
        if r:
            routes = routes_mib(r)
            out.update(
                huge_mib=r["huge"] / MIB,
                text_mib=r["windows"] / MIB,
                routes=routes,
                route="+".join(k for k, v in routes.items() if v > 0) or "none",
                verified_with="smaps" if r["smaps"] else "pagemap-scan",
                replaced_mib=r["replaced"] / MIB,
            )
        else:
            out["unparsed"] = lines[-3:]
        return out
    return out


def fixture_probe(out, text):
    """A fixture probe (aarch64): smaps totals, and inspect's JSON with the
    PMD-mapped kB and the kB of contpte blocks (aligned, contiguous blocks of
    the contpte size inside one folio, mapped by PTEs)."""
    m = re.search(r"file_pmd_kb=(\d+) anon_huge_kb=(\d+)", text)
    if not m:
        out["unparsed"] = text.splitlines()[-3:]
        return out
    out.update(file_pmd_kb=int(m.group(1)), anon_huge_kb=int(m.group(2)))
    c = re.search(r"^cont=(\w+)$", text, re.M)
    out["cont"] = c.group(1) if c else None
    try:
        doc = json.loads(text[text.index("{", m.end()) :].splitlines()[0])
        total = doc["total"]
    except (ValueError, KeyError, IndexError):
        # inspect could not read this kernel: PMD kB from smaps only.
        out["contpte_kb"] = None
        out["pmd_kb"] = out["file_pmd_kb"] + out["anon_huge_kb"]
        return out
    # run --hot (fixture-hot-*): the pass's record (what run kept cold) and
    # the profile's summary (its samples).
    r = start_pass(text)
    if r and r.get("hot_list"):
        out.update(hot_mib=r["hot"] / MIB, cold_mib=r["cold"] / MIB)
    p = profile(text)
    if p and p.get("summary"):
        out.update(profile_samples=p["summary"]["total"], profile_windows=p["summary"]["windows_for"])
    out.update(
        page_size_kb=doc.get("page_size_kb"),
        pmd_size_kb=doc.get("pmd_size_kb"),
        method=doc.get("method"),
        text_kb=total.get("file_kb", 0) + total.get("anon_kb", 0),
        pmd_kb=sum(v for k, v in total.items() if "-thp-pmd-aligned-" in k),
        contpte_kb=sum(v for k, v in total.items() if "-cont-pte-aligned-" in k),
    )
    return out


def shmem_probe(out, text):
    """The shmem-text probe: 4 processes of an aligned PIE run from a
    huge=within_size tmpfs; per process kB ShmemPmdMapped and kB private of
    its text, and meminfo's ShmemHugePages while they ran."""
    procs = [
        {"shmem_pmd_kb": int(h), "private_kb": int(p), "text_kb": int(t)}
        for h, p, t in re.findall(r"^proc=\d+ shmem_pmd_kb=(\d+) private_kb=(\d+) text_kb=(\d+)$", text, re.M)
    ]
    if not procs:
        out["unparsed"] = text.splitlines()[-3:]
        return out
    way = re.search(r"^way=(\S+)$", text, re.M)
    meminfo = re.search(r"^shmem_huge_pages_kb=(\d+)$", text, re.M)
    out.update(
        way=way.group(1) if way else None,
        processes=procs,
        shmem_huge_pages_kb=int(meminfo.group(1)) if meminfo else None,
    )
    return out


def shmem_cell(p):
    """doc/kernels.md's shmem column: kB ShmemPmdMapped per process (the
    same in all: one number), their private kB, ShmemHugePages."""
    s = p.get("shmem-text")
    if not s:
        return "—"
    procs = s.get("processes")
    if not procs:
        return f"failed (rc {s.get('rc')})"
    pmd = sorted({q["shmem_pmd_kb"] for q in procs})
    private = sum(q["private_kb"] for q in procs)
    run = s.get("run")
    when = f" (run {run['date']}, {run['release']})" if run else ""
    return (
        f"{len(procs)} × {'/'.join(str(k) for k in pmd)} kB, {private} kB private; "
        f"ShmemHugePages {s.get('shmem_huge_pages_kb', '?')} kB{when}"
    )


def failures(cell):
    bad = []
    if cell.get("error"):
        bad.append(f"guest error: {cell['error']}")
    if not cell.get("finished"):
        bad.append("guest did not finish")
    missing = [t for t in cell.get("tests", []) if t["result"] == "missing"]
    if not cell.get("finished") and missing:
        # Cut short: one line, not one per test that never ran.
        bad.append(f"{len(missing)} planned tests never ran (from {missing[0]['thp']}: {missing[0]['suite']})")
    for t in cell.get("tests", []):
        if t["result"] not in ("ok", "ignored", "n/a") and (cell.get("finished") or t["result"] != "missing"):
            bad.append(f"{t['thp']}: {t['suite']}::{t['test']} {t['result']}")
    for mode, probes in cell.get("probes", {}).items():
        for name, p in probes.items():
            if p.get("rc") not in (0, 2, 3) or "unparsed" in p:
                bad.append(f"{mode}: probe {name} rc={p.get('rc')} {p.get('unparsed', '')}")
    return bad


def summary(path):
    cell = json.loads(Path(path).read_text())
    if cell.get("unsupported"):
        # A kernel without what the cell needs is a fact about the kernel,
        # not a failure of hugetext: say so and go on.
        print(f"{cell['cell']}: unsupported: {cell['unsupported']}")
        return 0
    ok = sum(1 for t in cell["tests"] if t["result"] == "ok")
    na = [t.get("why", "n/a") for t in cell["tests"] if t["result"] == "n/a"]
    why = ", ".join(f"{na.count(w)} {w}" for w in sorted(set(na)))
    bad = failures(cell)
    print(
        f"{cell['cell']} ({cell.get('guest', {}).get('release', '?')}): {ok} of {len(cell['tests']) - len(na)} tests passed"
        + (f" ({len(na)} n/a: {why})" if na else "")
        + f", {cell['seconds']} s"
    )
    for mode, probes in cell.get("probes", {}).items():
        print(f"  THP {mode}: " + "; ".join(describe(n, p) for n, p in probes.items() if n != "doctor"))
    for b in bad:
        print(f"  FAILED {b}")
    print(f"{ok} passed, {len(bad)} failed")
    return 1 if bad else 0


def describe(name, p):
    if "route" in p and "huge_mib" in p:
        return f"{name} {p['route']} {p['huge_mib']:.0f}/{p['text_mib']:.0f} MiB"
    if name.startswith("warm") and "route" in p:
        per = f", {p['ms_per_mib']:.2f} ms/MiB" if p.get("ms_per_mib") else ""
        return f"{name} {p.get('route')} {p.get('pmd_kb')} kB{per}"
    if name.startswith("fixture-") and "pmd_kb" in p:
        return f"{name} PMD {p['pmd_kb']} kB, contpte {p.get('contpte_kb', '?')} kB"
    if name == "shmem-text" and p.get("processes"):
        return f"{name} {shmem_cell({name: p})}"
    if "file_pmd_kb" in p:
        return f"{name} {p['file_pmd_kb']} kB"
    if name == "bench-exec":
        return "bench " + ",".join(f"{k}={v}" for k, v in p.get("pmd_mapped_pct", {}).items())
    return f"{name} rc={p.get('rc')}"


def own_share(p, plain):
    """What a plain exec gets with no hugetext step: kB PMD-mapped, and on
    arm64 the kB of contpte blocks of the lld fixture (its own probe)."""
    out = f"{plain.get('file_pmd_kb', '?')} kB PMD"
    fx = p.get("fixture-plain-lld") or {}
    if fx.get("contpte_kb") is not None:
        out += f", {fx['contpte_kb']}/{fx.get('text_kb', '?')} kB contpte"
    return out


def check_of(probes, cid):
    return probes.get("doctor", {}).get("checks", {}).get(cid, {})


def merge_probes(new, old):
    """Put the probes of the cells `new` (a run with another --probe and
    usually an empty plan) into the same cells of `old` (doc/kernels.json):
    each probe replaces the one of its name under its THP mode and carries
    the date and kernel release of the run it comes from; the tests and
    every other probe keep their last full run. A cell `old` lacks is
    refused: a probe-only run is not a cell's result."""
    by = {c["cell"]: c for c in old}
    for c in new:
        o = by.get(c["cell"])
        if o is None:
            sys.exit(f"matrix.py: {c['cell']}: not in doc/kernels.json: --merge adds probes to cells run in full before")
        for mode, probes in c.get("probes", {}).items():
            for name, p in probes.items():
                p = dict(p, run={"date": c.get("date"), "release": c.get("guest", {}).get("release")})
                o.setdefault("probes", {}).setdefault(mode, {})[name] = p
    return old


def doc(paths, merge=False):
    cells = [json.loads(Path(p).read_text()) for p in paths]
    if merge:
        cells = merge_probes(cells, json.loads(Path("doc/kernels.json").read_text()))
    # Cells not run this time keep their last results (x86-64 and aarch64
    # cells are separate runs).
    ran = {c["cell"] for c in cells}
    old = Path("doc/kernels.json")
    if old.exists():
        cells += [c for c in json.loads(old.read_text()) if c["cell"] not in ran]
    order = {k: i for i, k in enumerate(["5.10", "6.1", "6.12", "7.x", "6.12-arm64", "6.12-arm64-16k", "6.12-arm64-64k", "7.x-arm64", "7.x-arm64-16k", "7.x-arm64-64k"])}
    cells.sort(key=lambda c: (order.get(c["cell"].split(":")[0], 9), c["cell"]))
    Path("doc/kernels.json").write_text(json.dumps(cells, indent=1, sort_keys=True) + "\n")
    rows = []
    for c in cells:
        k, fs = c["cell"].split(":")
        rel = c.get("guest", {}).get("release", "?")
        if c.get("unsupported"):
            rows.append(f"| {k} ({rel}) | {fs} | — | unsupported: {c['unsupported']} |" + " |" * 12)
            continue
        for mode, p in sorted(c.get("probes", {}).items()):
            tests = [t for t in c["tests"] if t["thp"] == mode and t["result"] != "n/a"]
            passed = sum(1 for t in tests if t["result"] == "ok")
            na = sum(1 for t in c["tests"] if t["thp"] == mode and t["result"] == "n/a")
            ran = f"{passed}/{len(tests)}" + (f" (+{na} n/a)" if na else "")
            lf = check_of(p, "fs-large-folios").get("value", "?")
            scan = check_of(p, "pagemap-scan").get("value", "?")
            col = check_of(p, "madv-collapse").get("status", "?")
            warm = p.get("warm", {})
            we = p.get("warm-exec", {})
            plain = p.get("plain-exec", {})

            def replaced(r):
                return f" ({r['replaced_mib']:.0f} replaced)" if r.get("replaced_mib") else ""

            def run(n, p=p):
                r = p.get(n, {})
                return f"{r['route']} {r['huge_mib']:.0f}/{r['text_mib']:.0f}" if "route" in r else "?"

            rows.append(
                f"| {k} ({rel}; run {c.get('date', '?')}) | {fs} | {mode} | {ran} | {lf.split(' (')[0]} | {scan} | {col} | "
                f"{own_share(p, plain)} | {warm.get('route', '?')}: {we.get('file_pmd_kb', '?')} | "
                f"{run('run-file-aligned')}{replaced(p.get('run-file-aligned', {}))} | {run('run-auto-aligned')} | {run('run-copy-aligned')} | "
                f"{run('run-collapse-aligned')} | "
                f"{run('run-auto-unaligned')} | {run('run-auto-dso')} | {shmem_cell(p)} |"
            )
    fixture_rows = []
    for c in cells:
        k, fs = c["cell"].split(":")
        rel = c.get("guest", {}).get("release", "?")
        for mode, p in sorted(c.get("probes", {}).items()):
            for linker in ("bfd", "lld", "mold"):
                got = {w: p.get(f"fixture-{w}-{linker}") for w in ("plain", "warm", "alignwarm", "run", "hot")}
                if not any(got.values()):
                    continue
                size = next((g for g in got.values() if g and g.get("page_size_kb")), {})

                def kb(g):
                    if not g:
                        return "—"
                    cont = g.get("contpte_kb")
                    hot = ""
                    if g.get("hot_mib") is not None:
                        hot = f" (hot {g['hot_mib']:.0f} MiB, cold {g['cold_mib']:.0f} MiB; {g.get('profile_samples', '?')} samples)"
                    return f"{g.get('pmd_kb', '?')} / {'not measured' if cont is None else cont}{hot}"

                fixture_rows.append(
                    f"| {k} ({rel}) | {size.get('page_size_kb', '?')} KiB / {size.get('pmd_size_kb', '?')} kB "
                    f"| {fs} | {mode} | {linker} PIE "
                    f"| {(got['plain'] or got['run'] or {}).get('text_kb', '?')} "
                    f"| {kb(got['plain'])} | {kb(got['warm'])} | {kb(got['alignwarm'])} | {kb(got['run'])} | {kb(got['hot'])} |"
                )
    fixtures_md = ""
    if fixture_rows:
        fixtures_md = """
## arm64: PMD and contpte per fixture

On the aarch64 kernels, each fixture (a PIE with about 70 MiB of text, linked
by the linker of its row; a fresh, evicted copy each time) is started four
ways: a plain exec, `hugetext warm` then a plain exec and `hugetext align`,
`warm`, then a plain exec (both where the filesystem gives large folios),
and `hugetext run`. The PIEs' `p_align` is 64 KiB, so the kernel places them
64 KiB-aligned: their text can be PMD-mapped only after `align` (or by `run`'s
copy), and contpte blocks of 2 MiB (16 and 64 KiB pages) need a 2 MiB-aligned
base too. Each cell is kB PMD-mapped / kB of
contpte blocks, read by `hugetext inspect --cont` while the program waits:
naturally aligned, physically contiguous blocks of the contpte size (64 KiB
with 4 KiB pages, 2 MiB with 16 and 64 KiB pages) inside one folio, mapped by
page table entries, which the arm64 kernel maps with the contiguous bit. With
64 KiB pages the PMD is 512 MiB, which no page-cache folio reaches: there the
2 MiB contpte block is the unit of huge text, and `run` copies into 2 MiB
anonymous folios (`hugepages-2048kB` enabled). **run --hot** (lld only): a
sampled profile of the fixture's own run (`hugetext profile`, cpu-clock),
then `run --hot` with it: only the windows holding 99% of the samples are
copied ("—" where the cell ran before this column existed). The fixture
calls each of its stubs once, so a few dozen samples fall all over its text:
how many windows are hot depends on where they fell; what the column shows is
that `run` copies exactly the profile's hot windows (hot MiB = contpte kB).

| kernel | page / PMD size | fs | THP | fixture | text kB | plain exec | warm, exec | align, warm, exec | run | run --hot |
|---|---|---|---|---|---|---|---|---|---|---|
""" + "\n".join(fixture_rows) + "\n"
    fixtures_md += bench_64k(cells)
    date = max((c.get("date", "") for c in cells), default="")
    accel = sorted({c.get("accel", "?") for c in cells})
    secs = sum(c.get("seconds", 0) for c in cells)
    md = f"""# Kernel matrix

What hugetext does on the kernels people run, measured by booting Debian's
cloud kernels in qemu and running the kernel-facing tests
([tests/vm/plan.txt](../tests/vm/plan.txt)) and route probes
([tests/vm/probe.sh](../tests/vm/probe.sh)) inside them. Generated by
`scripts/kernel-matrix.sh --all --write-doc` (x86-64) and `--arm64 --write-doc`
(aarch64, `qemu-system-aarch64 -M virt`) on {date} (qemu {', '.join(accel)},
2 vCPUs, 3 GiB; {secs} s of guest time in all). The raw results are in
[kernels.json](kernels.json).

Each guest formats a virtio disk with the filesystem of its row, puts the
test binaries and fixtures on it, and runs the tests once per THP mode.
Sizes are MiB huge-backed / MiB of text in whole 2 MiB windows, or kB
`FilePmdMapped`, of an lld-linked 20 MiB-text PIE after `hugetext align`
(`aligned`), the same PIE unaligned (`unaligned`), and a bfd-linked program
with a 20 MiB-text shared library (`DSO`); every file a fresh, evicted copy.
The kernels are the newest Debian cloud kernel of each series: `5.10`
(Debian 11), `6.1` (Debian 12), `6.12` (Debian 12 security), `7.x` (Debian 13
backports). On the aarch64 kernels (`6.12-arm64`, `7.x-arm64`: 4 KiB pages;
`6.12-arm64-16k`, `7.x-arm64-16k`: 16 KiB pages, 32 MiB PMD) the fixtures are the same programs built for aarch64 with
70 MiB of text, and "whole 2 MiB windows" are whole PMD windows. Debian
ships no arm64 kernel with 64 KiB pages: `6.12-arm64-64k` and
`7.x-arm64-64k` are Debian's linux-source-6.12 and -7.3 built with
`scripts/kernel-64k.sh --version 6.12|7.3` (PMD 512 MiB) and booted with
`--kernel`; there the unit of huge text is the 2 MiB contpte block, and
"whole 2 MiB windows" are whole blocks.

| kernel | fs | THP | tests passed | large folios | PAGEMAP_SCAN | MADV_COLLAPSE | plain exec: the kernel's own share | warm: route, then exec kB PMD | run file, aligned | run auto, aligned | run copy, aligned | run collapse, aligned | run auto, unaligned | run auto, DSO | huge tmpfs: 4 processes, kB ShmemPmdMapped each |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + """

How to read it:

- **large folios**: whether the filesystem gives 2 MiB page-cache folios
  (`hugetext doctor`, by experiment). Where it says no, `warm` and the `file`
  route cannot work (`warm` says "route: none possible" and exits 3), and
  `run`'s `auto` takes the `copy` route: anonymous huge pages, private to the
  process.
- **PAGEMAP_SCAN** (6.7+): without it `inspect` and the preload read smaps
  instead; the numbers are the same.
- **MADV_COLLAPSE** of file text (doctor's experiment: small folios,
  collapsed, then faulted again): up to 6.x it needs
  `CONFIG_READ_ONLY_THP_FOR_FS`, which Debian's cloud kernels do not set;
  since 7.x the kernel collapses the page cache of any file whose mapping
  supports PMD folios (ext4 since 6.16, xfs); 5.10 has no `MADV_COLLAPSE`
  at all. **run collapse** is `run --strategy collapse` on the aligned PIE.
- **plain exec: the kernel's own share**: no hugetext step at all, kB
  `FilePmdMapped` of the aligned PIE; on aarch64 also the kB of contpte
  blocks of the lld fixture out of its text kB (the arm64 exec fault path
  reads text in 64 KiB folios since 7.x, which the kernel maps with the
  contiguous bit). x86-64 exec faults read small folios: nothing is
  PMD-mapped.
- **run file**, "(N replaced)": kernels before 6.14 keep an emptied page
  table after `MADV_DONTNEED`, so a dropped window would refault in 4 KiB
  pages; the preload detects that and replaces each window with one
  `mmap(MAP_FIXED)` of the same file range (see [run.md](run.md)). N MiB of
  text went through that replacement, detected at run time, not forced.
- **huge tmpfs**: the aligned PIE on a tmpfs mounted `huge=within_size`
  (the text store's mount, `/run/hugetext/text`), four processes of it
  running: kB of each one's text `ShmemPmdMapped`, the kB of text private
  to them all together, and `ShmemHugePages` while they ran; stored with
  `hugetext warm --shmem` and run with `hugetext run --strategy shmem`
  where the guest's hugetext has them. Shared huge text needs no large
  folios in the disk's filesystem: shmem has had PMD folios since 4.8.
  "(run DATE, KERNEL)": this probe ran on its own then (`--merge-doc`),
  the row's other columns come from the row's date. "—": the cell ran
  before this column existed.
- **kernel**: the package, and the day its cell last ran: each row keeps
  the results of its cell's last run, so a row run before a fix still shows
  the failures of that day (`--all` / `--arm64` refresh every row).
- **tests passed**: "n/a" counts tests that need a capability this kernel
  or disk lacks, found by `hugetext doctor` in the guest (PMD-order
  page-cache folios, `MADV_COLLAPSE` of file text, `PAGEMAP_SCAN`, anonymous
  VMA names; see [tests/vm/README.md](../tests/vm/README.md)); what
  hugetext must say and do without them is tested by the others.
""" + fixtures_md + COUNTS_MD
    Path("doc/kernels.md").write_text(md)


def folio_mix(folios):
    """'2048 kB: 100%' style: each folio size's share of the cached kB."""
    total = sum(folios.values()) or 1
    parts = sorted(((int(k), v) for k, v in folios.items()), reverse=True)
    return ", ".join(f"{k} kB {v * 100 / total:.0f}%" for k, v in parts if v) or "none"


# The guest instruction counts (scripts/kernel-matrix.sh --count), measured
# by hand runs: their tables and how to reproduce them are in doc/kernel.md.
COUNTS_MD = """
## Instructions counted in the guests (`--count`)

Where the times above are emulated (TCG), `scripts/kernel-matrix.sh
--count` counts what the guest kernel executed for one operation
([tests/vm/README.md](../tests/vm/README.md)); counts show CPU work, no
cache or TLB effect. Per operation, x86-64 (the tables, their cells and
how to reproduce them: [kernel.md](kernel.md)):

- `mprotect()` of ranges of 4 KiB pages, Debian's kernels: 7.3.4 executes
  1.6-2.5 times the kernel instructions of 6.12.117 per call (4 MiB
  anonymous to read-only: 150,643 → 359,824), with mainline's small-folio
  fix for it, which 7.3.4 has, included.
- `readahead(2)` of 256 MiB from a cold page cache, the lab's 7.3.4, stock
  and with the 7.x series (its batched page-cache insertion): 642,000 →
  622,000 kernel instructions per MiB on xfs, 582,000 → 562,000 on ext4
  (1 thread; 2 threads alike: 3-5% less), and the page cache's lock taken
  257 → 17 times per MiB. Emulated times of the same runs: 0.23-2.8 s per
  256 MiB, as the host's load fell, which say nothing.
"""

BENCH_VARIANTS = (("baseline", "plain exec mapping"), ("huge", "MADV_HUGEPAGE"), ("warm", "`hugetext warm` first"))


def bench_64k_rows(k, rel, fs, p):
    """The rows of one cell's probes (one THP mode) on a 64 KiB-page kernel:
    the benchmark at the fixed readahead windows where the probe ran it so,
    else at the window the kernel booted with; then the fixture's `run`."""
    rows = []
    fixed = [n for n in ("bench-exec-ra128", "bench-exec-ra8192") if p.get(n)]
    for name in fixed or ["bench-exec"]:
        b = p.get(name) or {}
        if b.get("unit") != "contpte" or b.get("page_kb") != 64:
            continue
        if name == "bench-exec":
            ra_note = str(((p.get("read-ahead") or {}).get("kb") or {}).get("vda", "?"))
        else:
            ra_note = name.rsplit("ra", 1)[1]
        for v, label in BENCH_VARIANTS:
            st = (b.get("states") or {}).get(v)
            if st:
                rows.append(
                    f"| {k} ({rel}) | {fs} | {ra_note} kB | {label} | {folio_mix(st.get('folios_kb', {}))} "
                    f"| {unit_key(st, 'unit_folio_pct') or 0:.0f}% | {unit_key(st, 'unit_mapped_pct') or 0:.0f}% "
                    f"| {st.get('cold_faults', '?')} ({st.get('cold_major_faults', '?')}) | {st.get('pgpgin_kb', '?')} |"
                )
    r = p.get("fixture-run-lld") or {}
    if r.get("contpte_kb") is not None and (p.get("bench-exec") or {}).get("page_kb") == 64:
        rows.append(
            f"| {k} ({rel}) | {fs} | — | `hugetext run` (lld PIE, {r.get('text_kb', '?')} kB text) "
            f"| anonymous 2 MiB folios | — | {r['contpte_kb'] * 100 / (r.get('text_kb') or 1):.0f}% ({r['contpte_kb']} kB) | — | — |"
        )
    return rows


def bench_64k(cells):
    """The exec-readahead benchmark on the 64 KiB-page kernels: what each
    variant's cold sweep left (folio sizes, contpte-mapped share, faults,
    kB read), with the fixture's `run` beside it."""
    rows = []
    for c in cells:
        k, fs = c["cell"].split(":")
        rel = c.get("guest", {}).get("release", "?")
        for _mode, p in sorted(c.get("probes", {}).items()):
            rows += bench_64k_rows(k, rel, fs, p)
    if not rows:
        return ""
    size = next(
        (c["probes"][m]["bench-exec"].get("size_bytes") for c in cells for m in c.get("probes", {})
         if (c["probes"][m].get("bench-exec") or {}).get("unit") == "contpte"),
        0,
    )
    return f"""
## arm64 with 64 KiB pages: the exec-readahead benchmark

The Linux "improve large folio readahead for exec memory" patches were
measured on arm64 with 64 KiB base pages (Neoverse V2, a 512 MB executable on
ext4): cold faults took 50% less time and random calls 23% less. There the
PMD is 512 MiB, above the page cache's largest folio, and the unit that one
TLB entry maps is the 2 MiB contpte block (32 × 64 KiB). Debian ships no
64 KiB kernel; `scripts/kernel-64k.sh --version 7.3|6.12` builds one from
Debian's source, and `scripts/kernel-matrix.sh --kernel
7.x-arm64-64k=IMAGE --cell 7.x-arm64-64k:ext4` boots it. In each guest
`hugetext bench exec --size {size >> 20}M --runs 1` sweeps a file of AArch64
`ret` stubs cold, one call per page, three ways, with the readahead window
of the disk set to 128 kB (what 6.12 gives the virtio disk) and to 8192 kB
(what 7.3 gives it): the exec and mmap readahead paths read up to that
window, so the kernels are compared at the same one. Times under qemu TCG
are emulated, so the table gives what the kernel did, as counts: the page
cache's folio sizes after the sweep (share of the cached kB), the share in
folios of 2 MiB or more, the share mapped as whole 2 MiB contpte blocks of
one folio each (pagemap and `/proc/kpageflags`), the sweep's page faults
(major in brackets; fault-around is one page with 64 KiB pages, so a
fault per page is the base-page rate) and the kB read from the disk
(`pgpgin`). The last row of each cell is `hugetext run` on the lld-linked
fixture: its text copied into 2 MiB anonymous folios, the share of its text
contpte-mapped. [kernel-facts.md §7](kernel-facts.md) reads these counts
against the two kernels' `mm/filemap.c`.

| kernel | fs | readahead | variant | page cache after the cold sweep | in ≥2 MiB folios | contpte-mapped | faults (major) | kB read |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"


def mprotect(logs):
    """One line per `bench mprotect` round in the console logs of guests
    booted with MATRIX_PART=mprotect (probe.sh): the time in mprotect() of
    PTE-mapped PMD THPs and of 64 KiB mTHPs over 4 KiB pages (medians of
    the round's runs) and whether each case's folios were verified."""
    for log in logs:
        text = Path(log).read_text(errors="replace").splitlines()
        for r in (1, 2):
            pre = f"@@OUT bench-mprotect-{r}|always|"
            body = "\n".join(line[len(pre):] for line in text if line.startswith(pre))
            try:
                d = json.JSONDecoder().raw_decode(body[body.index("{"):])[0]
            except ValueError:
                print(f"{log}: round {r}: no bench output")
                continue
            ratio = d["ratios"]
            states = ", ".join(
                f"{k} {'/'.join(v['state']['folios_kb'])} kB folios {'verified' if v['state']['verified'] else 'NOT verified'}"
                for k, v in d["cases"].items()
            )
            print(
                f"{d['kernel']} round {r}: in mprotect, PTE-mapped PMD THP / 4 KiB "
                f"{ratio['pmd_thp_pte_mapped_over_small_4k_in_mprotect']['median']:.3f}, 64 KiB mTHP / 4 KiB "
                f"{ratio['mthp_64k_over_small_4k_in_mprotect']['median']:.3f} (TCG: emulated time); {states}"
            )
    return 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "collect":
        meta = json.loads(argv[4])
        print(json.dumps(collect(argv[2], argv[3], meta), sort_keys=True))
        return 0
    if len(argv) == 3 and argv[1] == "summary":
        return summary(argv[2])
    if len(argv) >= 4 and argv[1:3] == ["doc", "--merge"]:
        doc(argv[3:], merge=True)
        return 0
    if len(argv) >= 3 and argv[1] == "doc":
        doc(argv[2:])
        return 0
    if len(argv) >= 3 and argv[1] == "mprotect":
        return mprotect(argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
