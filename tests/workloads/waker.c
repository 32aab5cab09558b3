/*
 * waker: a neighbour that wakes often and runs little, for integration tests.
 *
 *   waker [PERIOD_US [SECONDS]]
 *
 * Sleeps PERIOD_US microseconds (default 300) in a loop, for SECONDS
 * (default: until killed).  Each wake-up on a busy CPU preempts what runs
 * there, so threads beside it that only compute are switched as often as
 * threads that yield to each other at barriers; it uses 3-5% of a CPU.
 */
#include <stdlib.h>
#include <time.h>

#include "clock.h"

int main(int argc, char **argv)
{
	long period_us = argc > 1 ? atol(argv[1]) : 300;
	double seconds = argc > 2 ? atof(argv[2]) : 0.0;
	struct timespec nap = { period_us / 1000000, (period_us % 1000000) * 1000 };
	long end = clock_ns(CLOCK_MONOTONIC) + (long)(seconds * 1e9);

	while (seconds <= 0.0 || clock_ns(CLOCK_MONOTONIC) < end)
		nanosleep(&nap, NULL);
	return 0;
}
