/*
 * barrier.c - spin, yield and sleep barriers; see barrier.h for why all three
 * exist.
 */
#include "barrier.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Tell the core we are spinning: saves power and, on SMT, hands issue slots
 * to the sibling thread that is doing real work. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

enum barrier_kind barrier_kind_parse(const char *option, const char *text)
{
    if (strcmp(text, "spin") == 0)
        return BARRIER_SPIN;
    if (strcmp(text, "yield") == 0)
        return BARRIER_YIELD;
    if (strcmp(text, "sleep") == 0)
        return BARRIER_SLEEP;
    cli_fail("invalid value '%s' for %s (expected spin, yield or sleep)", text, option);
}

const char *barrier_kind_name(enum barrier_kind kind)
{
    switch (kind) {
    case BARRIER_SPIN:
        return "spin";
    case BARRIER_YIELD:
        return "yield";
    case BARRIER_SLEEP:
        return "sleep";
    }
    return "unknown";
}

void barrier_init(struct barrier *barrier, enum barrier_kind kind, unsigned parties)
{
    barrier->kind = kind;
    barrier->parties = parties;
    atomic_init(&barrier->remaining, parties);
    atomic_init(&barrier->sense, 0);
    if (kind == BARRIER_SLEEP) {
        int rc = pthread_barrier_init(&barrier->sleeping, NULL, parties);

        if (rc != 0) {
            fprintf(stderr, "%s: pthread_barrier_init: %s\n", program_name, strerror(rc));
            exit(1);
        }
    }
}

void barrier_destroy(struct barrier *barrier)
{
    if (barrier->kind == BARRIER_SLEEP)
        (void)pthread_barrier_destroy(&barrier->sleeping);
}

/* The last thread to arrive resets the counter and flips the shared sense,
 * which releases everyone waiting for that sense value. */
static void busy_barrier_wait(struct barrier *barrier, barrier_sense *sense, int yield)
{
    int my_sense = !*sense;

    *sense = my_sense;
    if (atomic_fetch_sub_explicit(&barrier->remaining, 1, memory_order_acq_rel) == 1) {
        atomic_store_explicit(&barrier->remaining, barrier->parties, memory_order_relaxed);
        atomic_store_explicit(&barrier->sense, my_sense, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&barrier->sense, memory_order_acquire) != my_sense) {
        if (yield)
            sched_yield();
        else
            cpu_relax();
    }
}

void barrier_wait(struct barrier *barrier, barrier_sense *sense)
{
    switch (barrier->kind) {
    case BARRIER_SPIN:
        busy_barrier_wait(barrier, sense, 0);
        break;
    case BARRIER_YIELD:
        busy_barrier_wait(barrier, sense, 1);
        break;
    case BARRIER_SLEEP:
        (void)pthread_barrier_wait(&barrier->sleeping);
        break;
    }
}
