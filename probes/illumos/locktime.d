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
 * What LCK is (usr/src/uts/common/os/msacct.c): a system call that
 * blocks on user-level synchronisation first switches the LWP to the
 * LMS_USER_LOCK microstate -- lwp_park() (usr/src/uts/common/syscall/
 * lwpsys.c), lwp_mutex_timedlock(), lwp_rwlock_lock() and lwp_cond_wait()
 * (usr/src/uts/common/syscall/lwp_sobj.c) do.  When it then sleeps,
 * new_mstate(LMS_SLEEP) remembers that state, and restore_mstate(), as the
 * LWP goes back on a CPU, charges the sleep to it: from new_mstate(LMS_SLEEP)
 * to t_waitrq, the moment the LWP was put on a run queue.  The rest, until
 * it runs, is LAT (runqlat.d); time in LMS_USER_LOCK while still running
 * is SYS.  libc parks in lwp_park() for contended process-private mutexes,
 * rwlocks and condition variables (cond_sleep_queue() in usr/src/lib/libc/
 * port/threads/synch.c), and calls lwp_cond_wait() for process-shared
 * condition variables and for those used with priority-inheritance,
 * priority-ceiling or process-shared mutexes (cond_sleep_kernel()), so LCK
 * -- and ns= below -- includes time waiting on condition variables, not
 * just lock contention.  Semaphores (lwp_sema_timedwait()) are SLP.
 *
 * How: the same two moments.  sched:::sleep fires in the LWP just before
 * new_mstate(LMS_SLEEP) in every way to sleep (cv_block() in usr/src/uts/
 * common/os/condvar.c, lwp_block() in lwp_sobj.c, turnstile_block() in
 * usr/src/uts/common/os/turnstile.c); a sleep is counted when the LWP is in
 * LMS_USER_LOCK then (curthread->t_mstate, which is what the kernel
 * remembers).  sched:::enqueue (args[0] the LWP, fired by whoever made it
 * runnable) fires in setbackdq()/setfrontdq() (usr/src/uts/common/disp/
 * disp.c) right after they set t_waitrq; only the first enqueue after the
 * sleep counts, as only the first sets t_waitrq (a priority change while
 * queued dequeues and enqueues it again).  sched:::on-cpu, in the LWP
 * itself, ends the sleep's bookkeeping.  sched:::wakeup is not used: it
 * does not fire for every way out of such a sleep -- a timeout or a signal
 * ends a process-shared lock's sleep through setrun() and lwp_unsleep()
 * (lwp_sobj.c), a priority-inheritance mutex's through turnstile_unsleep(),
 * neither of which fires it, while the enqueue fires on every path.
 * Unlike plockstat(8)'s mutex-block/mutex-blocked, whose time ends when the
 * thread runs again and so includes its wait for a CPU, and which does not
 * see condition variables, this is the figure prstat -mL shows as LCK.
 *
 * Sleeps count as they go, as pr_ltime does (prgetusage() in usr/src/uts/
 * common/fs/proc/prsubr.c adds the current sleep of an LWP asleep in the
 * user-lock state): the sleep adds -timestamp to @lock_ns and the enqueue
 * adds its timestamp, so a value v >= 0 is the sleep time so far and v < 0
 * means "asleep since -v - (sleep time before)"; the sleep time up to a
 * moment T (ns, gethrtime(), the clock of timestamp and of CLOCK_MONOTONIC)
 * is v + T.  Every marker line ends with the timestamp it was printed at.
 * The values printed are those of dtrace's last aggregation snapshot
 * (aggrate), taken up to one switchrate period (20 ms here) after the
 * marker's timestamp: a sleep that begins or ends in between shows that
 * much early in the print, and the next print puts it right.
 *
 * A sleep in progress when tracing starts shows no sched:::sleep; its end
 * is its LWP's first event.  tumbler(8) lists the LWPs it knows at the
 * TUMBLER-PRELUDE mark (locktime_unseen[pid, lwpid] = 1 and a 0 in
 * @lock_seen); the first sched:::off-cpu of such an LWP (which leaves a
 * CPU before any sleep) or sched:::enqueue of it (which ends a sleep)
 * puts its timestamp in @lock_seen.  A reader that saw, in the LWP's
 * lwpsinfo after the start, the LWP asleep in a user-lock wait, and no
 * event of it before, knows it has been asleep in that wait since the
 * start, up to @lock_seen (its enqueue: t_waitrq) or now -- tumbler(8)
 * counts it so.  Run by hand, with no LWP listed, such a sleep is not
 * counted.
 *
 * Fields: ns = user-lock sleep in nanoseconds (as above), count = such
 * sleeps begun, seen = the first event of a listed LWP (0: none yet; 0
 * for LWPs not listed).
 *
 * The aggregations are CUMULATIVE since the start, keyed by [pid, tid]; they
 * are printed every PERIOD_MS and once more at exit, one line per thread in
 * the format below, each time followed by "tumbler-probe locktime period"
 * (or "... final").  A reader gets an interval's values by subtracting two
 * prints.  "tumbler-probe locktime ready NS" is printed by BEGIN, once every
 * probe is enabled, with the time counting started.  The same format comes from runqlat.d and migrations.d,
 * which can run in the same dtrace (several -s options, one -p).
 *
 * Example of usage:
 *
 * # dtrace -q -p 4242 -s locktime.d 1000
 * tumbler-probe locktime ready 25012345678
 * locktime pid=4242 tid=2 ns=1498734201 count=522 seen=0
 * locktime pid=4242 tid=3 ns=-26001265799 count=518 seen=0
 * tumbler-probe locktime period 27012377812
 * ^C
 *
 * Here LWP 3 is asleep now; its sleep time at the print is
 * -26001265799 + 27012377812 ns = 1.011 s.
 *
 * Needs root or the dtrace_kernel privilege (args[] of the LWP another
 * thread enqueues, curthread->t_mstate: see probes/README.md), which a
 * non-global zone cannot have.  Not yet run on an illumos machine: checked
 * only against the illumos-gate sources named above.
 */

#pragma D option quiet
#pragma D option switchrate=50hz
#pragma D option aggrate=50hz
#pragma D option dynvarsize=8m

/* usr/src/uts/common/sys/msacct.h */
inline int LMS_USER_LOCK = 6;

/* when each LWP's user-lock sleep began (0: not in one); signed for -ts */
int64_t locktime_ts[int];
/* listed LWPs no event has shown yet: [pid, lwpid] */
int locktime_unseen[int, int];

dtrace:::BEGIN
{
	/* TUMBLER-PRELUDE */
	printf("tumbler-probe locktime ready %d\n", timestamp);
}

/* a listed LWP's first event: it leaves a CPU, or a sleep of it ends */
sched:::off-cpu
/pid == $target && locktime_unseen[pid, tid]/
{
	locktime_unseen[pid, tid] = 0;
	@lock_seen[pid, tid] = sum(timestamp);
}

sched:::enqueue
/args[1]->pr_pid == $target && locktime_unseen[args[1]->pr_pid, args[0]->pr_lwpid]/
{
	locktime_unseen[args[1]->pr_pid, args[0]->pr_lwpid] = 0;
	@lock_seen[args[1]->pr_pid, args[0]->pr_lwpid] = sum(timestamp);
}

proc:::lwp-exit
/pid == $target && locktime_unseen[pid, tid]/
{
	locktime_unseen[pid, tid] = 0;
}

sched:::sleep
/pid == $target && curthread->t_mstate == LMS_USER_LOCK/
{
	locktime_ts[tid] = timestamp;
	locktime_queued[tid] = 0;
	@lock_ns[pid, tid] = sum(-locktime_ts[tid]);
	@lock_count[pid, tid] = count();
}

/* the first enqueue ends the sleep: t_waitrq */
sched:::enqueue
/args[1]->pr_pid == $target && locktime_ts[args[0]->pr_lwpid] &&
    locktime_queued[args[0]->pr_lwpid] == 0/
{
	locktime_queued[args[0]->pr_lwpid] = timestamp;
	@lock_ns[args[1]->pr_pid, args[0]->pr_lwpid] = sum(timestamp);
}

/* the sleep is over (counted above), or the LWP exits */
sched:::on-cpu,
proc:::lwp-exit
/pid == $target && locktime_ts[tid]/
{
	locktime_ts[tid] = 0;
	locktime_queued[tid] = 0;
}

profile:::tick-10ms
/++locktime_ticks >= $1 / 10/
{
	locktime_ticks = 0;
	printa("locktime pid=%d tid=%d ns=%@d count=%@d seen=%@d\n", @lock_ns, @lock_count,
	    @lock_seen);
	printf("tumbler-probe locktime period %d\n", timestamp);
}

dtrace:::END
{
	printa("locktime pid=%d tid=%d ns=%@d count=%@d seen=%@d\n", @lock_ns, @lock_count,
	    @lock_seen);
	printf("tumbler-probe locktime final %d\n", timestamp);
	trunc(@lock_ns);
	trunc(@lock_count);
	trunc(@lock_seen);
}
