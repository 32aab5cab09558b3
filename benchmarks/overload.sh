#!/bin/sh
# Start-up and --duration of tumbler under overload (issue 13, defect 6):
# tests/workloads/crowd THREADS threads asking CPUS CPUs in all, then
# `tumbler --policy observe -p PID --duration 5`, REPS times.  Prints
# tumbler's wall time (as the user waits it), its summary line and the
# start-up line.
#
#   sh benchmarks/overload.sh THREADS CPUS REPS [tumbler command...]
set -eu
threads=$1 cpus=$2 reps=$3
shift 3
[ $# -gt 0 ] || set -- .venv/bin/tumbler
crowd=${TMPDIR:-/tmp}/tumbler-crowd
gcc -O2 -pthread -o "$crowd" tests/workloads/crowd.c
i=0
while [ $i -lt "$reps" ]; do
    i=$((i + 1))
    fifo=${TMPDIR:-/tmp}/tumbler-crowd.$$
    rm -f "$fifo"; mkfifo "$fifo"
    "$crowd" 600 "$threads" "$cpus" > "$fifo" &
    pid=$!
    read -r ready < "$fifo"
    rm -f "$fifo"
    start=$(date +%s.%N)
    "$@" --policy observe -p "$pid" --duration 5 2> "${TMPDIR:-/tmp}/tumbler-overload.err" || true
    end=$(date +%s.%N)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    printf 'run %d: %s; wall %.1f s; %s; %s\n' "$i" "$ready" "$(echo "$end - $start" | bc)" \
        "$(grep -o 'ran [^:]*: [0-9]* intervals ([0-9]* quiet), [0-9]* threads seen' \
            "${TMPDIR:-/tmp}/tumbler-overload.err")" \
        "$(grep -o 'start-up took [0-9.]* s' "${TMPDIR:-/tmp}/tumbler-overload.err" || echo 'start-up < 1 s')"
done
