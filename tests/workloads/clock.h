/*
 * clock.h: the clocks and the duty cycle the test workloads share
 * (the C files of this folder; benchmarks/overhead.py builds its helper with it).
 */
#ifndef WORKLOAD_CLOCK_H
#define WORKLOAD_CLOCK_H

#include <errno.h>
#include <time.h>

/* `clock` in nanoseconds: CLOCK_MONOTONIC for wall time,
 * CLOCK_THREAD_CPUTIME_ID for the calling thread's CPU time. */
static inline long clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Sleep `ns` nanoseconds (none if not positive), through signals. */
static inline void sleep_ns(long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
	while (ns > 0 && nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/*
 * One duty period of `period_ns` begun at `period_start` (CLOCK_MONOTONIC):
 * spin until the thread has used `busy_ns` more CPU time -- CPU time, not
 * wall time, so a thread that has to share its CPU still asks for the same
 * work -- or until the wall clock reaches `end_ns` (0: no end) or `*stop`
 * is set (NULL: never), then sleep what is left of the period.
 */
static inline void duty_period(long period_start, long period_ns, long busy_ns, long end_ns,
			       volatile int *stop)
{
	long busy_until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + busy_ns;
	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < busy_until
	       && (end_ns == 0 || clock_ns(CLOCK_MONOTONIC) < end_ns)
	       && (stop == NULL || !*stop))
		;
	sleep_ns(period_ns - (clock_ns(CLOCK_MONOTONIC) - period_start));
}

#endif
