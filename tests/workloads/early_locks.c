/*
 * early_locks: lock contention in the first moments of a program only.
 *
 *   early_locks BUSY_MS LINGER_MS
 *
 * Four threads take one mutex in turn, each holding it while it spins
 * ~1 ms, for BUSY_MS; then each sleeps LINGER_MS, alive and idle, and the
 * program exits.  A tracer that attaches to the running program later than
 * BUSY_MS after its start sees no lock wait at all; the idle stretch lets
 * a tracer that was attached in time read the waits before the threads
 * exit (the probes drop a thread's totals when it exits).  Prints
 * "elapsed_s=S" like the example workloads.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"

#define THREADS 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long busy_ns, linger_ns, start_ns;

static void *worker(void *arg)
{
    (void)arg;
    while (clock_ns(CLOCK_MONOTONIC) - start_ns < busy_ns) {
        pthread_mutex_lock(&lock);
        long until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + 1000000L;
        while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < until)
            ;
        pthread_mutex_unlock(&lock);
    }
    struct timespec ts = { linger_ns / 1000000000L, linger_ns % 1000000000L };
    nanosleep(&ts, NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: early_locks BUSY_MS LINGER_MS\n");
        return 2;
    }
    busy_ns = atol(argv[1]) * 1000000L;
    linger_ns = atol(argv[2]) * 1000000L;
    start_ns = clock_ns(CLOCK_MONOTONIC);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, worker, NULL) != 0)
            return 1;
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    printf("elapsed_s=%.6f\n", (clock_ns(CLOCK_MONOTONIC) - start_ns) / 1e9);
    return 0;
}
