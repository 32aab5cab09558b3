/*
 * barrier.c - spin, yield and sleep barriers; see barrier.h for why all three
 * exist.  Also the phases-and-barrier skeleton spmd and skewed run.
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

/* One per thread of run_phases, padded so that the hot loop never shares a
 * cache line. */
struct phase_thread {
    _Alignas(CACHE_PAD) unsigned index;
    barrier_sense sense;
    unsigned threads;
    const uint64_t *iters;      /* every thread's, for rotation */
    uint64_t rotate_every;      /* 0: thread i always does iters[i] */
    uint64_t phases;
    const char *name_prefix;
    struct barrier *barrier;
    pthread_t handle;
};

static void *phase_thread_main(void *arg)
{
    struct phase_thread *self = arg;
    uint64_t state = work_seed(self->index);

    name_current_thread(self->name_prefix, self->index);
    for (uint64_t phase = 0; phase < self->phases; phase++) {
        uint64_t turn = self->rotate_every ? phase / self->rotate_every : 0;

        state = work_iters(state, self->iters[(self->index + turn) % self->threads]);
        barrier_wait(self->barrier, &self->sense);
    }
    work_publish(state);
    return NULL;
}

double run_phases(const char *name_prefix, unsigned threads, const uint64_t *iters,
                  uint64_t phases, uint64_t rotate_every, enum barrier_kind kind)
{
    struct phase_thread *workers = alloc_aligned_zeroed(threads, sizeof *workers);
    struct barrier *barrier = alloc_aligned_zeroed(1, sizeof *barrier);
    double start, elapsed;

    barrier_init(barrier, kind, threads);
    for (unsigned i = 0; i < threads; i++) {
        workers[i].index = i;
        workers[i].threads = threads;
        workers[i].iters = iters;
        workers[i].rotate_every = rotate_every;
        workers[i].phases = phases;
        workers[i].name_prefix = name_prefix;
        workers[i].barrier = barrier;
    }

    start = monotonic_seconds();
    for (unsigned i = 0; i < threads; i++)
        start_thread(&workers[i].handle, phase_thread_main, &workers[i]);
    for (unsigned i = 0; i < threads; i++)
        join_thread(workers[i].handle);
    elapsed = monotonic_seconds() - start;

    barrier_destroy(barrier);
    free(barrier);
    free(workers);
    return elapsed;
}
