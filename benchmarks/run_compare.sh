#!/bin/sh
# Run every `tumbler compare` case of BENCHMARKS.md and keep the JSON.
#   sh benchmarks/run_compare.sh [RUNS]      (default 5 runs per policy)
# Results go to benchmarks/results/<case>.json; benchmarks/report.py turns
# them into the tables of BENCHMARKS.md.  Run on an otherwise idle machine.
set -eu
cd "$(dirname "$0")/.."
RUNS=${1:-5}
W=examples/workloads
T=.venv/bin/tumbler
OUT=benchmarks/results
mkdir -p "$OUT"
make -s -C examples

run() {     # run NAME POLICIES [compare options] -- CMD...
    name=$1; policies=$2; shift 2
    echo "== $name" >&2
    $T compare --runs "$RUNS" --policies "$policies" --json -q "$@" > "$OUT/$name.json"
}

ALL=default,pinned,psets,tumbler,speed,auto
for mode in spin yield sleep; do
    run "spmd-3on2-$mode" "$ALL" -- $W/spmd -t 3 -b $mode
    run "spmd-2on2-$mode" "default,speed,auto" -- $W/spmd -t 2 -b $mode
    run "spmd-4on2-$mode" "default,speed,auto" -- $W/spmd -t 4 -b $mode
done
run pipeline-domains "$ALL" --domains 0/1 -- $W/pipeline
run skewed-domains "$ALL" --domains 0/1 -- $W/skewed
run locks "$ALL" -- $W/locks
run locks-domains "$ALL" --domains 0/1 -- $W/locks
