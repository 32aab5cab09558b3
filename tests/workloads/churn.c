/*
 * churn: thread churn and exec, for reliability tests and the soak benchmark.
 *
 *   churn [-d SECONDS] [-r RATE] [-V] [-w] [PCT ...]
 *
 * One long-lived thread per PCT spins PCT% of every 20 ms period (CPU time,
 * as in duty.c) until the program ends; with -V each one picks a new duty
 * cycle between PCT/4 and PCT every 2 s (seeded, so runs repeat).  Meanwhile
 * the main thread creates and joins short threads, RATE a second (default
 * 1000) in batches of 10, for SECONDS (default 10): exactly RATE * SECONDS of
 * them, however long that takes, so the count never depends on the
 * machine's speed.  Then it prints "churn: N threads created" on stdout and
 * exits -- or, with -w, keeps the long-lived threads running until stdin
 * reaches end of file.
 *
 *   churn -x leader|thread PROG [ARG ...]
 *
 * Starts four threads spinning 50% of the time, prints "churn: ready",
 * waits for a line on stdin, and then execs PROG from the main thread
 * (leader) or from thread churn-N (thread), N being the number on that
 * line.  Linux then kills every other thread; when a non-leader execs, it
 * takes over the leader's thread id, keeping its own affinity mask.
 *
 * Long-lived threads are named churn-0, churn-1, ...; short ones churn-s.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define PERIOD_NS 20000000L
#define BATCH 10

static volatile int stop_long;
static volatile int exec_thread = -1;	/* exec mode: this long-lived thread execs */
static void do_exec(void);

static long now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

struct long_arg {
	int index;
	long pct;
	int vary;
};

static void *long_lived(void *p)
{
	struct long_arg *arg = p;
	unsigned int seed = 12345u + (unsigned int)arg->index;
	long pct = arg->pct;
	long next_change = now_ns() + 2000000000L;
	while (!stop_long) {
		if (arg->index == exec_thread)
			do_exec();
		long period_start = now_ns();
		if (arg->vary && period_start >= next_change) {
			long low = arg->pct / 4;
			pct = low + (long)(rand_r(&seed) % (unsigned int)(arg->pct - low + 1));
			next_change = period_start + 2000000000L;
		}
		duty_period(period_start, PERIOD_NS, PERIOD_NS * pct / 100, 0, &stop_long);
	}
	return NULL;
}

static void *short_lived(void *p)
{
	volatile unsigned long x = 0;
	(void)p;
	for (int i = 0; i < 2000; i++)	/* a few microseconds of work */
		x += (unsigned long)i;
	return NULL;
}

static int churn_main(int argc, char **argv)
{
	double seconds = 10;
	long rate = 1000;
	int vary = 0, wait_stdin = 0, opt;
	while ((opt = getopt(argc, argv, "d:r:Vw")) != -1) {
		switch (opt) {
		case 'd': seconds = atof(optarg); break;
		case 'r': rate = atol(optarg); break;
		case 'V': vary = 1; break;
		case 'w': wait_stdin = 1; break;
		default:
			fprintf(stderr, "usage: churn [-d SECONDS] [-r RATE] [-V] [-w] [PCT ...]\n"
				"       churn -x leader|thread PROG [ARG ...]\n");
			return 2;
		}
	}
	if (seconds < 0 || rate < BATCH) {
		fprintf(stderr, "churn: need SECONDS >= 0 and RATE >= %d\n", BATCH);
		return 2;
	}
	int nlong = argc - optind;
	pthread_t *longs = calloc(nlong ? nlong : 1, sizeof(*longs));
	struct long_arg *args = calloc(nlong ? nlong : 1, sizeof(*args));
	for (int i = 0; i < nlong; i++) {
		char name[16];
		args[i].index = i;
		args[i].pct = atol(argv[optind + i]);
		args[i].vary = vary;
		if (pthread_create(&longs[i], NULL, long_lived, &args[i]) != 0) {
			fprintf(stderr, "churn: pthread_create failed\n");
			return 1;
		}
		snprintf(name, sizeof(name), "churn-%d", i % 100000);
		pthread_setname_np(longs[i], name);
	}

	long total = (long)(seconds * rate);
	long batch_ns = 1000000000L * BATCH / rate;
	long start = now_ns(), created = 0;
	while (created < total) {
		pthread_t batch[BATCH];
		int n = 0;
		for (; n < BATCH && created < total; n++, created++) {
			int err;
			while ((err = pthread_create(&batch[n], NULL, short_lived, NULL)) == EAGAIN)
				sleep_ns(1000000L);
			if (err != 0) {
				fprintf(stderr, "churn: pthread_create: %s\n", strerror(err));
				return 1;
			}
			pthread_setname_np(batch[n], "churn-s");
		}
		for (int i = 0; i < n; i++)
			pthread_join(batch[i], NULL);
		long ahead = start + (created / BATCH) * batch_ns - now_ns();
		if (ahead > 0)
			sleep_ns(ahead);
	}
	printf("churn: %ld threads created\n", created);
	fflush(stdout);

	if (wait_stdin) {
		char buf[256];
		while (fread(buf, 1, sizeof(buf), stdin) > 0)
			;
	}
	stop_long = 1;
	for (int i = 0; i < nlong; i++)
		pthread_join(longs[i], NULL);
	return 0;
}

/* -- exec mode ------------------------------------------------------------- */

static char **exec_argv;

static void do_exec(void)
{
	execvp(exec_argv[0], exec_argv);
	fprintf(stderr, "churn: exec %s: %s\n", exec_argv[0], strerror(errno));
	exit(127);
}

static int exec_main(int argc, char **argv)
{
	if (argc < 4 || (strcmp(argv[2], "leader") != 0 && strcmp(argv[2], "thread") != 0)) {
		fprintf(stderr, "usage: churn -x leader|thread PROG [ARG ...]\n");
		return 2;
	}
	exec_argv = &argv[3];
	static struct long_arg args[4];
	pthread_t threads[4];
	for (int i = 0; i < 4; i++) {
		char name[16];
		args[i].index = i;
		args[i].pct = 50;
		pthread_create(&threads[i], NULL, long_lived, &args[i]);
		snprintf(name, sizeof(name), "churn-%d", i);
		pthread_setname_np(threads[i], name);
	}
	printf("churn: ready\n");
	fflush(stdout);
	char line[64];
	if (fgets(line, sizeof(line), stdin) == NULL)
		return 1;
	if (strcmp(argv[2], "thread") == 0)
		exec_thread = atoi(line) % 4;	/* long_lived() of that one execs */
	else
		do_exec();
	for (int i = 0; i < 4; i++)
		pthread_join(threads[i], NULL);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "-x") == 0)
		return exec_main(argc, argv);
	return churn_main(argc, argv);
}
