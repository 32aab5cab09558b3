/*
 * hog: a program any user can run that costs a balancer much (issue 47):
 * many threads asleep, threads born and ended all the time, a few busy.
 *
 *   hog SECONDS ASLEEP BORN_PER_S BUSY
 *
 * Starts BUSY threads that spin, ASLEEP threads that wait in pause() for
 * good (64 KiB stacks: 16,000 of them cost little memory), and then, from
 * the main thread, BORN_PER_S short threads a second (each ends at once),
 * for SECONDS.  Prints "ready" on stdout once every long-lived thread is
 * made.  Exits 1 if a thread cannot be made.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *asleep(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static void *busy(void *arg)
{
	volatile unsigned long n = 0;
	(void)arg;
	for (;;)
		n++;
	return NULL;
}

static void *born(void *arg)
{
	(void)arg;
	return NULL;
}

static int start(void *(*body)(void *), int detached)
{
	pthread_attr_t attr;
	pthread_t thread;
	int err;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	if (detached)
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&thread, &attr, body, NULL);
	pthread_attr_destroy(&attr);
	return err;
}

int main(int argc, char **argv)
{
	double seconds;
	long asleep_count, born_per_s, busy_count, i;
	struct timespec now, end, gap;

	if (argc != 5) {
		fprintf(stderr, "usage: hog SECONDS ASLEEP BORN_PER_S BUSY\n");
		return 2;
	}
	seconds = atof(argv[1]);
	asleep_count = atol(argv[2]);
	born_per_s = atol(argv[3]);
	busy_count = atol(argv[4]);
	for (i = 0; i < busy_count; i++)
		if (start(busy, 1)) {
			perror("hog: busy thread");
			return 1;
		}
	for (i = 0; i < asleep_count; i++)
		if (start(asleep, 1)) {
			perror("hog: asleep thread");
			return 1;
		}
	printf("ready\n");
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)seconds;
	gap.tv_sec = 0;
	gap.tv_nsec = born_per_s > 0 ? 1000000000L / born_per_s : 100000000L;
	if (born_per_s >= 1 && gap.tv_nsec >= 1000000000L) {
		gap.tv_sec = 1;
		gap.tv_nsec = 0;
	}
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			return 0;
		if (born_per_s > 0 && start(born, 1)) {
			perror("hog: short thread");
			return 1;
		}
		nanosleep(&gap, NULL);
	}
}
