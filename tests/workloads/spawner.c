/*
 * spawner: threads and processes born of other threads, for the tests of
 * what tumbler puts back (a new thread or child inherits its creator's CPU
 * affinity mask).
 *
 *   spawner SPINNERS SPAWN_MS LIFE_S RUN_S STATUS [fork]
 *
 * Starts SPINNERS threads that spin (spawner-0, spawner-1, ...).  Every
 * SPAWN_MS milliseconds a new thread (spawner-s) is created that sleeps for
 * LIFE_S seconds and ends -- by spawner-0 between its spins when SPINNERS
 * is at least 1, else by the main thread.  With "fork", a child process is
 * forked instead, which sleeps LIFE_S seconds and exits.  After RUN_S
 * seconds (0: never) the program exits with STATUS.  It prints "spawner:
 * ready" on stdout once every spinner runs.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long spawn_ms;
static int life_s;
static int use_fork;
static volatile int started;

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void *sleeper(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "spawner-s");
	sleep(life_s);
	return NULL;
}

static void spawn_one(void)
{
	if (use_fork) {
		pid_t pid = fork();
		if (pid == 0) {
			sleep(life_s);
			_exit(0);
		}
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		return;
	}
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	if (pthread_create(&t, &attr, sleeper, NULL) != 0)
		perror("spawner: pthread_create");
	pthread_attr_destroy(&attr);
}

static void *spinner(void *arg)
{
	long index = (long)arg;
	char name[16];
	snprintf(name, sizeof name, "spawner-%ld", index);
	pthread_setname_np(pthread_self(), name);
	__sync_fetch_and_add(&started, 1);
	long long next = now_ms() + spawn_ms;
	volatile unsigned long spins = 0;
	for (;;) {
		for (int i = 0; i < 100000; i++)
			spins++;
		if (index == 0 && now_ms() >= next) {
			spawn_one();
			next += spawn_ms;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: spawner SPINNERS SPAWN_MS LIFE_S RUN_S STATUS [fork]\n");
		return 2;
	}
	int spinners = atoi(argv[1]);
	spawn_ms = atol(argv[2]);
	life_s = atoi(argv[3]);
	int run_s = atoi(argv[4]);
	int status = atoi(argv[5]);
	use_fork = argc > 6 && strcmp(argv[6], "fork") == 0;
	signal(SIGCHLD, SIG_DFL);
	for (long i = 0; i < spinners; i++) {
		pthread_t t;
		pthread_create(&t, NULL, spinner, (void *)i);
	}
	while (started < spinners)
		usleep(1000);
	printf("spawner: ready\n");
	fflush(stdout);
	long long end = run_s > 0 ? now_ms() + run_s * 1000LL : -1;
	long long next = now_ms() + spawn_ms;
	for (;;) {
		long long t = now_ms();
		if (end >= 0 && t >= end)
			exit(status);
		if (spinners == 0 && t >= next) {
			spawn_one();
			next += spawn_ms;
		}
		usleep(5000);
	}
}
