#!/usr/sbin/dtrace -qs
/*
 * locktime.d	User-level lock wait time per thread (LWP) of one process:
 *		the time its threads spend blocked in libc mutexes and
 *		reader/writer locks (the per-thread view of the LCK microstate
 *		of prstat -mL).  For illumos, uses DTrace.  Part of tumbler.
 *
 * USAGE: dtrace -q -p PID -s locktime.d PERIOD_MS
 *
 *   PID        the process to trace ($target; -p grabs it, which the
 *              plockstat provider needs; dtrace exits when it exits).
 *   PERIOD_MS  print the cumulative aggregations every PERIOD_MS
 *              milliseconds (10 ms granularity).
 *
 * plockstat$target:::mutex-block / mutex-blocked and rw-block / rw-blocked
 * (arg0 = the lock), as in plockstat(8) -C, keyed by thread and lock in
 * self->.  Every block counts, also one that ended in an error (the thread
 * waited all the same).  Spinning in adaptive mutexes is CPU time, not wait,
 * and is not counted.  A wait is counted when it ends.
 *
 * The aggregations are CUMULATIVE since the start, keyed by [pid, tid]; they
 * are printed every PERIOD_MS and once more at exit, one line per thread in
 * the format below, each time followed by "tumbler-probe locktime period"
 * (or "... final").  A reader gets an interval's values by subtracting two
 * prints.  "tumbler-probe locktime ready" is printed by BEGIN, once every
 * probe is enabled.  The same format comes from runqlat.d and migrations.d,
 * which can run in the same dtrace (several -s options, one -p).
 *
 * Example of usage:
 *
 * # dtrace -q -p 4242 -s locktime.d 1000
 * tumbler-probe locktime ready
 * locktime pid=4242 tid=2 ns=1498734201 count=522
 * locktime pid=4242 tid=3 ns=1520003399 count=517
 * tumbler-probe locktime period
 * ^C
 *
 * Needs root, or the dtrace_proc and dtrace_user privileges and the right to
 * control the process.
 */

#pragma D option quiet
#pragma D option switchrate=20hz
#pragma D option aggrate=20hz
#pragma D option dynvarsize=8m

dtrace:::BEGIN
{
	printf("tumbler-probe locktime ready\n");
}

plockstat$target:::mutex-block
{
	self->locktime_mtx[arg0] = timestamp;
}

plockstat$target:::mutex-blocked
/self->locktime_mtx[arg0]/
{
	@lock_ns[pid, tid] = sum(timestamp - self->locktime_mtx[arg0]);
	@lock_count[pid, tid] = count();
	self->locktime_mtx[arg0] = 0;
}

plockstat$target:::rw-block
{
	self->locktime_rw[arg0] = timestamp;
}

plockstat$target:::rw-blocked
/self->locktime_rw[arg0]/
{
	@lock_ns[pid, tid] = sum(timestamp - self->locktime_rw[arg0]);
	@lock_count[pid, tid] = count();
	self->locktime_rw[arg0] = 0;
}

profile:::tick-10ms
/++locktime_ticks >= $1 / 10/
{
	locktime_ticks = 0;
	printa("locktime pid=%d tid=%d ns=%@d count=%@d\n", @lock_ns, @lock_count);
	printf("tumbler-probe locktime period\n");
}

dtrace:::END
{
	printa("locktime pid=%d tid=%d ns=%@d count=%@d\n", @lock_ns, @lock_count);
	printf("tumbler-probe locktime final\n");
	trunc(@lock_ns);
	trunc(@lock_count);
}
