/*
 * lockwait: threads that block on user-level locks when told to, and say
 * when, for the tests of the lock probes.
 *
 *   lockwait            (commands on stdin, one a line)
 *
 * Threads, each announced on stdout as "NAME TID" once it exists:
 *
 *   held    blocks at once in pthread_mutex_lock on a mutex main holds,
 *           until "release held"
 *   cond    an idle worker, memcached-like: waits on a condition variable
 *           for work that comes only with "release cond"
 *   late    blocks in pthread_mutex_lock on a mutex main holds when told
 *           "block late", until "release late"
 *   waitv   blocks at once in futex_waitv(2) (what Wine uses; glibc does
 *           not), until "release waitv"
 *   never   never touches a lock: sleeps 2 ms, spins 1 ms, over and over
 *
 * A thread released prints "NAME BEGIN_NS END_NS": when it called into the
 * lock and when it came back (CLOCK_MONOTONIC, the clock of bpftrace's
 * nsecs), then sleeps in pause(2), which is no lock wait, and stays alive:
 * the probes drop a thread's totals when it exits.  "late" also prints
 * "late calling NS" just before it calls into the lock.  Releasing held or
 * late, main prints "NAME released BEFORE_NS AFTER_NS", its clock just
 * before and just after the unlock that wakes it.  Output is written with
 * write(2), never stdio, whose own lock would be a futex.  EOF on stdin
 * ends the program.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t late_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond_work = PTHREAD_COND_INITIALIZER;
static int work;
static int late_pipe[2];
static uint32_t waitv_word;
static volatile unsigned long sink;

static void say(const char *fmt, const char *name, long long a, long long b)
{
    char line[128];
    int n = snprintf(line, sizeof line, fmt, name, a, b);
    if (write(1, line, n) != n)
        _exit(1);
}

static void announce(const char *name)
{
    say("%s %lld\n", name, (long long)syscall(SYS_gettid), 0);
}

static void rest(const char *name, long long begin)
{
    say("%s %lld %lld\n", name, begin, clock_ns(CLOCK_MONOTONIC));
    for (;;)
        pause();
}

static void *held(void *arg)
{
    announce("held");
    long long begin = clock_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&held_lock);
    pthread_mutex_unlock(&held_lock);
    rest("held", begin);
    return arg;
}

static void *cond(void *arg)
{
    announce("cond");
    long long begin = clock_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&cond_lock);
    while (!work)
        pthread_cond_wait(&cond_work, &cond_lock);
    pthread_mutex_unlock(&cond_lock);
    rest("cond", begin);
    return arg;
}

static void *late(void *arg)
{
    char c;
    announce("late");
    if (read(late_pipe[0], &c, 1) != 1)
        _exit(1);
    long long begin = clock_ns(CLOCK_MONOTONIC);
    say("%s calling %lld\n", "late", begin, 0);
    pthread_mutex_lock(&late_lock);
    pthread_mutex_unlock(&late_lock);
    rest("late", begin);
    return arg;
}

static void *waitv(void *arg)
{
    struct futex_waitv w = { .val = 0, .uaddr = (uintptr_t)&waitv_word,
                             .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG };
    announce("waitv");
    long long begin = clock_ns(CLOCK_MONOTONIC);
    while (__atomic_load_n(&waitv_word, __ATOMIC_ACQUIRE) == 0)
        syscall(SYS_futex_waitv, &w, 1, 0, NULL, CLOCK_MONOTONIC);
    rest("waitv", begin);
    return arg;
}

static void *never(void *arg)
{
    struct timespec nap = { 0, 2000000 };
    announce("never");
    for (;;) {
        nanosleep(&nap, NULL);
        long long until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + 1000000;
        while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < until)
            sink++;
    }
    return arg;
}

int main(void)
{
    void *(*bodies[])(void *) = { held, cond, late, waitv, never };
    char line[64];
    pthread_t t;

    pthread_mutex_lock(&held_lock);
    pthread_mutex_lock(&late_lock);
    if (pipe(late_pipe) != 0)
        return 1;
    for (unsigned i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        if (pthread_create(&t, NULL, bodies[i], NULL) != 0)
            return 1;
    /* stdin is read with read(2): main's own waits are no lock waits */
    int len = 0;
    char c;
    while (read(0, &c, 1) == 1) {
        if (c != '\n') {
            if (len < (int)sizeof line - 1)
                line[len++] = c;
            continue;
        }
        line[len] = 0;
        len = 0;
        long long before = clock_ns(CLOCK_MONOTONIC);
        if (strcmp(line, "release held") == 0) {
            pthread_mutex_unlock(&held_lock);
            say("%s released %lld %lld\n", "held", before, clock_ns(CLOCK_MONOTONIC));
        } else if (strcmp(line, "release cond") == 0) {
            pthread_mutex_lock(&cond_lock);
            work = 1;
            pthread_cond_signal(&cond_work);
            pthread_mutex_unlock(&cond_lock);
        } else if (strcmp(line, "block late") == 0) {
            if (write(late_pipe[1], "x", 1) != 1)
                return 1;
        } else if (strcmp(line, "release late") == 0) {
            pthread_mutex_unlock(&late_lock);
            say("%s released %lld %lld\n", "late", before, clock_ns(CLOCK_MONOTONIC));
        } else if (strcmp(line, "release waitv") == 0) {
            __atomic_store_n(&waitv_word, 1, __ATOMIC_RELEASE);
            syscall(SYS_futex, &waitv_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        }
    }
    return 0;
}
