#!/usr/sbin/dtrace -qs
/*
 * migrations.d	CPU migrations per thread (LWP) of one process, and how many
 *		of them crossed from one CPU domain to another.
 *		For illumos, uses DTrace.  Part of tumbler.
 *
 * USAGE: dtrace -q -p PID -s migrations.d PERIOD_MS
 *
 *   PID        the process to trace ($target; dtrace exits when it exits).
 *   PERIOD_MS  print the cumulative aggregations every PERIOD_MS
 *              milliseconds (10 ms granularity).
 *
 * sched:::on-cpu fires in the thread going on a CPU; self->last holds the
 * CPU it ran on before, plus one (0 = not seen yet), so a thread's first
 * on-cpu after the start is not a migration.  A migration is counted when
 * the thread runs on its new CPU.  proc:::lwp-exit, which fires in the
 * exiting LWP itself (lwp_exit() in usr/src/uts/common/os/lwp.c, and
 * proc_exit() in exit.c for the last one), frees self->last: a thread-local
 * is dynamic variable space until it is assigned 0, and a program that
 * keeps creating short-lived threads would otherwise fill dynvarsize and
 * make dtrace drop data ("dynamic variable drops").
 *
 * CPU domains: dom[cpu] = domain index + 1.  A migration counts in
 * @cross_domain when both CPUs have a domain and the domains differ.  As
 * shipped the array is empty (no cross-domain counts); tumbler(8) adds one
 * line per CPU at the TUMBLER-PRELUDE mark, e.g. "dom[0] = 1; dom[1] = 2;".
 *
 * The aggregations are CUMULATIVE since the start, keyed by [pid, tid]; they
 * are printed every PERIOD_MS and once more at exit, one line per thread in
 * the format below, each time followed by "tumbler-probe migrations period
 * NS" (or "... final NS"), NS the timestamp it was printed at.  A reader
 * gets an interval's values by subtracting two prints.  "tumbler-probe
 * migrations ready NS" is printed by BEGIN, once every probe is enabled.  Can run in the same dtrace as locktime.d and runqlat.d
 * (several -s options, one -p).
 *
 * Example of usage (with the domains of CPUs 0-3 and 4-7 added):
 *
 * # dtrace -q -p 4242 -s migrations.d 1000
 * tumbler-probe migrations ready 25012345678
 * migrations pid=4242 tid=2 count=31 cross=4
 * migrations pid=4242 tid=3 count=12 cross=0
 * tumbler-probe migrations period 27012377812
 * ^C
 *
 * Needs root or the dtrace_kernel privilege, as tumbler asks for it for
 * every script (see probes/README.md).
 */

#pragma D option quiet
#pragma D option switchrate=50hz
#pragma D option aggrate=50hz
#pragma D option dynvarsize=8m

int dom[int];

/*
 * Declared: the first clause's predicate reads self->last before any clause
 * assigns it, and dtrace cooks predicates in program order, so without the
 * declaration it refuses the script ("self->last has not yet been declared
 * or assigned"; usr/src/lib/libdtrace/common/dt_cook.c, dt_cook_var).
 */
self int last;

dtrace:::BEGIN
{
	/* TUMBLER-PRELUDE */
	printf("tumbler-probe migrations ready %d\n", timestamp);
}

sched:::on-cpu
/pid == $target && self->last && self->last != cpu + 1/
{
	@migrations[pid, tid] = count();
}

sched:::on-cpu
/pid == $target && self->last && self->last != cpu + 1 &&
    dom[self->last - 1] && dom[cpu] && dom[self->last - 1] != dom[cpu]/
{
	@cross_domain[pid, tid] = count();
}

sched:::on-cpu
/pid == $target/
{
	self->last = cpu + 1;
}

proc:::lwp-exit
/pid == $target/
{
	self->last = 0;
}

profile:::tick-10ms
/++migrations_ticks >= $1 / 10/
{
	migrations_ticks = 0;
	printa("migrations pid=%d tid=%d count=%@d cross=%@d\n",
	    @migrations, @cross_domain);
	printf("tumbler-probe migrations period %d\n", timestamp);
}

dtrace:::END
{
	printa("migrations pid=%d tid=%d count=%@d cross=%@d\n",
	    @migrations, @cross_domain);
	printf("tumbler-probe migrations final %d\n", timestamp);
	trunc(@migrations);
	trunc(@cross_domain);
}
