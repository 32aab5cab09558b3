#!/usr/sbin/dtrace -qs
/*
 * locktime.d	User-lock sleep time per thread (LWP) of one process, measured
 *		as the kernel charges the LCK microstate of prstat -mL
 *		(pr_ltime).  For illumos, uses DTrace.  Part of tumbler.
 *
 * USAGE: dtrace -q -p PID -s locktime.d PERIOD_MS
 *
 *   PID        the process to trace ($target; dtrace exits when it exits).
 *   PERIOD_MS  print the cumulative aggregations every PERIOD_MS
 *              milliseconds (10 ms granularity).
 *
 * What LCK is: the kernel switches an LWP to the LMS_USER_LOCK microstate
 * in the system calls that block on user-level synchronisation --
 * lwp_park() (usr/src/uts/common/syscall/lwpsys.c), lwp_mutex_timedlock()
 * and lwp_rwlock_lock() (usr/src/uts/common/syscall/lwp_sobj.c) -- and the
 * time it then sleeps, until it is woken and put on a run queue, is LCK.
 * libc parks in lwp_park() for contended process-private mutexes and
 * rwlocks, and ALSO for condition variables (cond_sleep_queue() in
 * usr/src/lib/libc/port/threads/synch.c), so LCK -- and ns= below --
 * includes time waiting on a condition variable, not just lock contention.
 * The wait for a CPU after the wakeup is LAT (runqlat.d), not LCK.
 *
 * How: self->locktime_in marks an LWP inside lwp_park (subcode 0, park),
 * lwp_mutex_timedlock or lwp_rwlock_sys (subcodes 0 and 1, rdlock and
 * wrlock); sched:::sleep in such a call starts a wait, sched:::wakeup
 * (args[0] the LWP, fired by the waker, also for a timeout or a signal)
 * ends it, and sched:::on-cpu, in the thread itself, adds it to the
 * totals.  A sleep whose wakeup was not seen is dropped, not counted up
 * to on-cpu (that would add the CPU wait).  Unlike plockstat(8)'s
 * mutex-block/mutex-blocked, whose time ends when the thread runs again
 * and so includes its wait for a CPU, and which does not see condition
 * variables, this is the figure prstat -mL shows as LCK.
 *
 * Fields: ns = user-lock sleep in nanoseconds, count = such sleeps.
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
 * Needs root or the dtrace_kernel privilege (the sched provider), which a
 * non-global zone cannot have.  Not yet run on an illumos machine: checked
 * only against the illumos-gate sources named above.
 */

#pragma D option quiet
#pragma D option switchrate=20hz
#pragma D option aggrate=20hz
#pragma D option dynvarsize=8m

dtrace:::BEGIN
{
	printf("tumbler-probe locktime ready\n");
}

syscall::lwp_park:entry
/pid == $target && arg0 == 0/
{
	self->locktime_in = 1;
}

syscall::lwp_mutex_timedlock:entry
/pid == $target/
{
	self->locktime_in = 1;
}

syscall::lwp_rwlock_sys:entry
/pid == $target && arg0 <= 1/
{
	self->locktime_in = 1;
}

syscall::lwp_park:return,
syscall::lwp_mutex_timedlock:return,
syscall::lwp_rwlock_sys:return
/self->locktime_in/
{
	self->locktime_in = 0;
}

sched:::sleep
/self->locktime_in/
{
	locktime_ts[tid] = timestamp;
	locktime_woke[tid] = 0;
}

sched:::wakeup
/args[1]->pr_pid == $target && locktime_ts[args[0]->pr_lwpid]/
{
	locktime_woke[args[0]->pr_lwpid] = timestamp;
}

sched:::on-cpu
/pid == $target && locktime_ts[tid] && locktime_woke[tid]/
{
	@lock_ns[pid, tid] = sum(locktime_woke[tid] - locktime_ts[tid]);
	@lock_count[pid, tid] = count();
}

/* the sleep is over (counted above, or its wakeup missed), or the LWP exits */
sched:::on-cpu,
proc:::lwp-exit
/pid == $target && locktime_ts[tid]/
{
	locktime_ts[tid] = 0;
	locktime_woke[tid] = 0;
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
