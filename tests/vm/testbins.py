#!/usr/bin/env python3
"""Read `cargo test --no-run --message-format=json` on stdin; print one line
per integration-test binary: PACKAGE/TARGET EXECUTABLE."""
import json
import sys

for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg["profile"]["test"] or msg["target"]["kind"] != ["test"]:
        continue
    # package_id: "path+file:///…/crates/hugetext-cli#hugetext-cli@0.1.0" or "…#0.1.0"
    pid = msg["package_id"]
    name = pid.split("#")[1].split("@")[0] if "@" in pid.split("#")[-1] else pid.split("#")[0].rstrip("/").split("/")[-1]
    print(f"{name}/{msg['target']['name']} {msg['executable']}")
