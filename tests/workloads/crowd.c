/*
 * crowd: many threads that together ask far more CPU than the machine has,
 * for the overload tests and benchmarks (issue 13: a balancer starved by
 * the program it balances).
 *
 *   crowd SECONDS THREADS CPUS [PERIOD_MS]
 *
 * Starts THREADS threads that together want CPUS CPUs: each spins
 * CPUS / THREADS of every PERIOD_MS period (default 100 ms; counted in its
 * own CPU time, so a thread that has to queue still asks for the same
 * work) and sleeps the rest, for SECONDS.  A longer period makes a crowd
 * that wakes rarely (benchmarks/service_load.py --period: 200 programs of
 * 100 threads waking every 100 ms were 200,000 wake-ups a second, more
 * than a small machine can run); the threads' first periods then begin
 * spread over one period, so they do not all wake at once.  Small stacks (64 KiB), so 10,000 threads cost
 * little memory.  The threads wait at a gate until all are created (busy
 * from birth, 10,000 of them took over 20 minutes to create at nice 0),
 * then start together; "ready N" is printed on stdout as they do.  Exits
 * 1 if a thread cannot be created.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

#define DEFAULT_PERIOD_NS 100000000L

static double run_seconds;
static long period_ns = DEFAULT_PERIOD_NS;
static long busy_ns;
static long stagger_ns;		/* a thread's first period begins index * this later */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_open = PTHREAD_COND_INITIALIZER;
static int started;

static void *worker(void *arg)
{
	long index = (long)arg;
	pthread_mutex_lock(&gate_lock);
	while (!started)
		pthread_cond_wait(&gate_open, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	long now = clock_ns(CLOCK_MONOTONIC), end = now + (long)(run_seconds * 1e9);
	sleep_ns(index * stagger_ns < end - now ? index * stagger_ns : end - now);
	while (clock_ns(CLOCK_MONOTONIC) < end)
		duty_period(clock_ns(CLOCK_MONOTONIC), period_ns, busy_ns, end, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: crowd SECONDS THREADS CPUS [PERIOD_MS]\n");
		return 2;
	}
	run_seconds = atof(argv[1]);
	long n = atol(argv[2]);
	double cpus = atof(argv[3]);
	if (n < 1 || cpus <= 0) {
		fprintf(stderr, "crowd: need THREADS >= 1 and CPUS > 0\n");
		return 2;
	}
	if (argc == 5) {
		double period_ms = atof(argv[4]);
		if (period_ms < 1 || period_ms > 3600e3) {
			fprintf(stderr, "crowd: need 1 <= PERIOD_MS <= 3600000\n");
			return 2;
		}
		period_ns = (long)(period_ms * 1e6);
		stagger_ns = period_ns / n;
	}
	busy_ns = (long)(period_ns * cpus / n);
	if (busy_ns > period_ns)
		busy_ns = period_ns;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_t *threads = calloc(n, sizeof(*threads));
	for (long i = 0; i < n; i++) {
		int err = pthread_create(&threads[i], &attr, worker, (void *)i);
		if (err) {
			fprintf(stderr, "crowd: thread %ld: %s\n", i, strerror(err));
			return 1;
		}
	}
	pthread_mutex_lock(&gate_lock);
	started = 1;
	pthread_cond_broadcast(&gate_open);
	pthread_mutex_unlock(&gate_lock);
	printf("ready %ld\n", n);
	fflush(stdout);
	for (long i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
