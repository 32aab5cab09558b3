/*
 * duty: threads with fixed, unequal CPU duty cycles, for integration tests.
 *
 *   duty SECONDS PCT [PCT ...]
 *
 * Thread i spins PCT[i]% of every 20 ms period and sleeps the rest, for
 * SECONDS.  Unlike barrier workloads, each thread's load stays the same
 * wherever it runs (as long as its CPU is not saturated), so a balancer's
 * grouping of these threads has a known right answer: with 80 60 40 20 on
 * two one-CPU domains, {80,20} and {60,40} carry 1.0 CPU each.
 * Threads are named duty-0, duty-1, ... and print nothing.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"

#define PERIOD_NS 20000000L

static double run_seconds;

static void *worker(void *arg)
{
	long pct = (long)arg;
	long end = clock_ns(CLOCK_MONOTONIC) + (long)(run_seconds * 1e9);
	while (clock_ns(CLOCK_MONOTONIC) < end)
		duty_period(clock_ns(CLOCK_MONOTONIC), PERIOD_NS, PERIOD_NS * pct / 100, end, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: duty SECONDS PCT [PCT ...]\n");
		return 2;
	}
	run_seconds = atof(argv[1]);
	int n = argc - 2;
	pthread_t *threads = calloc(n, sizeof(*threads));
	for (int i = 0; i < n; i++) {
		char name[16];
		pthread_create(&threads[i], NULL, worker, (void *)atol(argv[i + 2]));
		snprintf(name, sizeof(name), "duty-%d", i);
		pthread_setname_np(threads[i], name);
	}
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
