/*
 * barrier.h - the three barrier flavours the speed-balancing paper contrasts
 * (Hofmeyr et al., "Load Balancing on Speed"), because they interact with an
 * OS load balancer in different ways:
 *
 *   spin   busy-waits: a waiting thread stays runnable and burns its core, so
 *          the OS sees a full runqueue and never moves a straggler onto it.
 *   yield  busy-waits with sched_yield(): still runnable and still counted as
 *          load, but gives the core to a co-runner when there is one.
 *   sleep  pthread_barrier_wait: waiting threads leave the runqueue, so the OS
 *          balancer can pull stragglers onto the idle cores.
 */
#ifndef TUMBLER_WORKLOADS_BARRIER_H
#define TUMBLER_WORKLOADS_BARRIER_H

#include "common.h"

#include <stdatomic.h>

enum barrier_kind { BARRIER_SPIN, BARRIER_YIELD, BARRIER_SLEEP };

struct barrier {
    enum barrier_kind kind;
    unsigned parties;
    /* Sense-reversing centralized barrier for spin/yield.  The counter and
     * the sense flag live on separate cache lines: arrivals hammer the
     * counter while waiters only read the flag. */
    _Alignas(CACHE_PAD) atomic_uint remaining;
    _Alignas(CACHE_PAD) atomic_int sense;
    /* Used for the sleep kind. */
    _Alignas(CACHE_PAD) pthread_barrier_t sleeping;
};

/* Each thread keeps its own sense flag, starting at 0, in its padded state. */
typedef int barrier_sense;

/* Parse "spin", "yield" or "sleep" for `option`; cli_fail otherwise. */
enum barrier_kind barrier_kind_parse(const char *option, const char *text);

const char *barrier_kind_name(enum barrier_kind kind);

/* Set up `barrier` for `parties` threads; exits on failure. */
void barrier_init(struct barrier *barrier, enum barrier_kind kind, unsigned parties);

void barrier_destroy(struct barrier *barrier);

/* Block (in the barrier's own way) until all parties have arrived. */
void barrier_wait(struct barrier *barrier, barrier_sense *sense);

/*
 * The SPMD skeleton spmd and skewed share: `threads` threads named
 * "<name_prefix><i>", thread i doing `iters[i]` iterations of the work loop
 * per phase, then waiting at a barrier of `kind`, for `phases` phases.  With
 * `rotate_every` N > 0 the shares move one thread along every N phases
 * (thread i does iters[(i + phase / N) % threads]): a load that varies in
 * time; 0 keeps them where they are.
 * Returns the wall time from the first pthread_create to the last
 * pthread_join.
 */
double run_phases(const char *name_prefix, unsigned threads, const uint64_t *iters,
                  uint64_t phases, uint64_t rotate_every, enum barrier_kind kind);

#endif /* TUMBLER_WORKLOADS_BARRIER_H */
