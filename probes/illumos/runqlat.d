#!/usr/sbin/dtrace -qs
/*
 * runqlat.d	Run-queue latency per thread (LWP) of one process: the time
 *		its threads spend runnable on a dispatch queue, waiting for a
 *		CPU (the per-thread view of the LAT microstate of prstat -mL).
 *		For illumos, uses DTrace.  Part of tumbler.
 *
 * USAGE: dtrace -q -p PID -s runqlat.d PERIOD_MS
 *
 *   PID        the process to trace ($target; dtrace exits when it exits).
 *   PERIOD_MS  print the cumulative aggregations every PERIOD_MS
 *              milliseconds (10 ms granularity).
 *
 * The pattern of usr/src/cmd/dtrace/demo/sched/qtime.d, summed per thread
 * until it runs: sched:::enqueue (args[0] the LWP, args[1] its process)
 * starts a wait, sched:::dequeue ends it and adds it to the thread's queued
 * time, sched:::on-cpu (which fires in the thread that goes on the CPU, so
 * pid and tid are its own) counts the queued time as one wait.  The
 * dispatcher fires dequeue when it picks a thread (disp() in
 * usr/src/uts/common/disp/disp.c), so a normal wait is enqueue..dequeue.
 * Without the dequeue clause an LWP taken off its queue and stopped (a /proc
 * stop, which dtrace -p itself causes, or a debugger) would keep its enqueue
 * time and the whole stop would count as run-queue latency; with it, only
 * the time on a queue counts, before and after the stop.  A thread moved
 * between queues (dequeue then enqueue: a priority change, a new processor
 * set) adds both parts.
 *
 * Waits count as they go, as pr_wtime does (prgetusage() in usr/src/uts/
 * common/fs/proc/prsubr.c adds the wait of an LWP on a queue since
 * t_waitrq): the enqueue adds -timestamp to @runq_ns and the dequeue (or
 * the on-cpu of a thread that ran without one) adds its timestamp, so a
 * value v >= 0 is the queued time so far and v < 0 means "queued since
 * -v - (queued time before)"; the queued time up to a moment T (ns,
 * gethrtime(), the clock of timestamp and of CLOCK_MONOTONIC) is v + T.
 * Every marker line ends with the timestamp it was printed at; the values
 * are those of dtrace's last aggregation snapshot, taken up to one
 * switchrate period (20 ms here) after it (see locktime.d).  @runq_count
 * counts the waits that ended with the thread on a CPU.
 *
 * The aggregations are CUMULATIVE since the start, keyed by [pid, tid]; they
 * are printed every PERIOD_MS and once more at exit, one line per thread in
 * the format below, each time followed by "tumbler-probe runqlat period"
 * (or "... final").  A reader gets an interval's values by subtracting two
 * prints.  "tumbler-probe runqlat ready NS" is printed by BEGIN, once every
 * probe is enabled, with the time counting started.  Can run in the same dtrace as locktime.d and
 * migrations.d (several -s options, one -p).
 *
 * Example of usage:
 *
 * # dtrace -q -p 4242 -s runqlat.d 1000
 * tumbler-probe runqlat ready 25012345678
 * runqlat pid=4242 tid=1 ns=20480 count=3
 * runqlat pid=4242 tid=2 ns=331052774 count=84
 * runqlat pid=4242 tid=3 ns=-26677661798 count=84
 * tumbler-probe runqlat period 27012377812
 * ^C
 *
 * Needs root or the dtrace_kernel privilege: the sched provider is at the
 * dtrace_user level, but args[] of another thread (enqueue, dequeue) is
 * kernel memory of that thread (see probes/README.md).
 */

#pragma D option quiet
#pragma D option switchrate=50hz
#pragma D option aggrate=50hz
#pragma D option dynvarsize=8m

/* when each LWP was put on a queue (0: not on one); signed for -ts */
int64_t runqlat_ts[int];

dtrace:::BEGIN
{
	printf("tumbler-probe runqlat ready %d\n", timestamp);
}

sched:::enqueue
/args[1]->pr_pid == $target && runqlat_ts[args[0]->pr_lwpid] == 0/
{
	runqlat_ts[args[0]->pr_lwpid] = timestamp;
	@runq_ns[args[1]->pr_pid, args[0]->pr_lwpid] =
	    sum(-runqlat_ts[args[0]->pr_lwpid]);
}

sched:::dequeue
/args[1]->pr_pid == $target && runqlat_ts[args[0]->pr_lwpid]/
{
	@runq_ns[args[1]->pr_pid, args[0]->pr_lwpid] = sum(timestamp);
	runqlat_ts[args[0]->pr_lwpid] = 0;
	runqlat_queued[args[0]->pr_lwpid] = 1;
}

/* runqlat_ts is still set here only if the thread ran without a dequeue */
sched:::on-cpu
/pid == $target && runqlat_ts[tid]/
{
	@runq_ns[pid, tid] = sum(timestamp);
	runqlat_ts[tid] = 0;
	runqlat_queued[tid] = 1;
}

sched:::on-cpu
/pid == $target && runqlat_queued[tid]/
{
	@runq_count[pid, tid] = count();
	runqlat_queued[tid] = 0;
}

proc:::lwp-exit
/pid == $target/
{
	runqlat_ts[tid] = 0;
	runqlat_queued[tid] = 0;
}

profile:::tick-10ms
/++runqlat_ticks >= $1 / 10/
{
	runqlat_ticks = 0;
	printa("runqlat pid=%d tid=%d ns=%@d count=%@d\n", @runq_ns, @runq_count);
	printf("tumbler-probe runqlat period %d\n", timestamp);
}

dtrace:::END
{
	printa("runqlat pid=%d tid=%d ns=%@d count=%@d\n", @runq_ns, @runq_count);
	printf("tumbler-probe runqlat final %d\n", timestamp);
	trunc(@runq_ns);
	trunc(@runq_count);
}
