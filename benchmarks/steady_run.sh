#!/bin/sh
# tumbler on a steady 64-thread program for 10 minutes: its RSS and CPU
# time every 60 s, then its exit summary.
#   sh benchmarks/steady_run.sh
# Quiet rounds carry such a run (tumbler/balance/controller.py): does memory stay flat?
# The program is the ``threads`` helper benchmarks/overhead.py builds in /tmp.
set -eu
cd "$(dirname "$0")/.."
[ -x /tmp/threads ] || .venv/bin/python -c 'import sys; sys.path.insert(0, "benchmarks")
import overhead; overhead.build_helper("/tmp")'
.venv/bin/tumbler --interval 100 --domains 0/1 exec -- /tmp/threads duty 64 600 1 2 3 \
    > /tmp/steady_run.out 2> /tmp/steady_run.err &
tumbler=$!
tick=$(getconf CLK_TCK)
sleep 1
t=0
while [ -r /proc/$tumbler/status ] && [ $t -lt 600 ]; do
    rss=$(awk '/VmRSS/ {print $2}' /proc/$tumbler/status 2>/dev/null || true)
    cpu=$(awk -v t="$tick" '{printf "%.2f", ($14 + $15) / t}' /proc/$tumbler/stat \
          2>/dev/null || true)
    echo "t=$t s rss_kib=$rss cpu_s=$cpu"
    sleep 60
    t=$((t + 60))
done
wait $tumbler
cat /tmp/steady_run.err
