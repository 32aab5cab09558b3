#!/bin/sh
# Set up, then run tumbler on a bundled workload with unequal thread loads
# (the ferret-like pipeline) with each core its own domain, logging each
# interval to demo.jsonl, and show the last intervals of the log.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
echo "== tumbler --domains 0/1 --log demo.jsonl exec -- examples/workloads/pipeline"
.venv/bin/tumbler --domains 0/1 --log demo.jsonl exec -- examples/workloads/pipeline
echo "== last intervals of demo.jsonl (thread CV, chosen interval, per-domain loads, moves)"
.venv/bin/python - <<'PY'
import json
rounds = [json.loads(line) for line in open("demo.jsonl")]
for r in rounds[-5:]:
    print("round %3d  cv %.2f  next %4d ms  loads %s  spread %.2f  moves %d  %s" % (
        r["round"], r["thread_cv"], r["interval_ms"],
        "/".join("%.2f" % x for x in r["domain_loads"]), r["domain_spread"],
        len(r["moves"]), r["reason"]))
PY
echo "== tumbler plot demo.jsonl -o demo.svg (per-domain load, tolerance band, moves, CV)"
.venv/bin/tumbler plot demo.jsonl -o demo.svg
echo "demo.svg written"
