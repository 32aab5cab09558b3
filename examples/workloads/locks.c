/*
 * locks - threads contending on a few mutexes: lock, compute on the shared
 * data, unlock, compute privately, repeat; a barrier ends every phase.
 *
 * What it models: high lock contention in the style of streamcluster, the
 * second cause of unequal load named in the Tumbler paper.  Why: threads that
 * block on a mutex keep dropping off and rejoining the runqueues, so their
 * CPU utilisation changes from moment to moment, the OS migrates them on
 * every wake-up, and a lock holder that lands on a crowded core stalls all
 * the waiters.  A balancer has to regroup such threads often.
 *
 * Each work unit is split into --acquires rounds.  One round: take one of
 * the --mutexes mutexes (chosen pseudo-randomly, deterministically seeded
 * per thread), run --critical loop iterations folded into the
 * data that mutex protects (so the data's cache line really moves between
 * cores), unlock, then run 1/--acquires of a unit outside the lock.  With
 * -t 1 nothing ever contends.
 */
#include "barrier.h"
#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_THREADS 4
#define DEFAULT_WORK 100
#define DEFAULT_PHASES 8
#define DEFAULT_MUTEXES 2
#define DEFAULT_CRITICAL 40000
#define DEFAULT_ACQUIRES 10
#define MAX_MUTEXES 4096
#define MAX_CRITICAL 1000000000L
#define MAX_ACQUIRES 100000L

struct locks_config {
    unsigned threads;
    uint64_t work;       /* units of non-critical work per phase per thread */
    uint64_t phases;
    unsigned mutexes;
    uint64_t critical;   /* loop iterations inside the lock per round */
    uint64_t acquires;   /* rounds (lock acquisitions) per work unit */
};

/* A mutex and the data it protects, alone on its cache lines: this is the
 * only memory the threads are meant to fight over. */
struct guarded_value {
    _Alignas(CACHE_PAD) pthread_mutex_t mutex;
    uint64_t value;
};

/* One per thread, padded so that private work never shares a cache line. */
struct locks_thread {
    _Alignas(CACHE_PAD) unsigned index;
    uint64_t acquisitions;
    uint64_t contended; /* acquisitions that found the mutex already held */
    uint64_t chooser;   /* xorshift state for pick_mutex */
    const struct locks_config *config;
    struct guarded_value *guarded;
    struct barrier *barrier;
    barrier_sense sense;
    pthread_t handle;
};

static void print_usage(void)
{
    printf("Usage: %s [OPTION]...\n"
           "Threads contending on a few mutexes (lock / compute / unlock / compute),\n"
           "with a barrier after every phase.\n"
           "\n"
           "  -t, --threads N    worker threads (default %d)\n"
           "  -w, --work N       work units per phase per thread done outside the\n"
           "                     locks; 1 unit is a fixed loop of %llu iterations,\n"
           "                     about 1 ms of CPU (default %d)\n"
           "  -p, --phases N     number of phases (default %d)\n"
           "  -m, --mutexes N    mutexes shared by all threads (default %d)\n"
           "  -c, --critical N   loop iterations inside the lock per acquisition\n"
           "                     (default %d, about %.0f us)\n"
           "  -a, --acquires N   lock acquisitions per work unit: each unit is split\n"
           "                     into N rounds of lock, critical loop, unlock and\n"
           "                     1/N unit of private work (default %d)\n"
           "  -h, --help         print this help and exit\n"
           "\n"
           "Each round takes a pseudo-randomly chosen mutex.  With -t 1 there is no\n"
           "contention.  Threads are named locks-0, locks-1, ...  Prints one line:\n"
           "workload=locks threads=N phases=N elapsed_s=S throughput=UNITS_PER_S\n"
           "mutexes=N critical=N acquires=N work=N acquisitions=N\n"
           "acquisitions_per_s=R contended=N contended_pct=P\n"
           "(throughput counts --work units; contended = acquisitions that found the\n"
           "mutex held by another thread)\n",
           program_name, DEFAULT_THREADS, (unsigned long long)WORK_UNIT_ITERS, DEFAULT_WORK,
           DEFAULT_PHASES, DEFAULT_MUTEXES, DEFAULT_CRITICAL,
           DEFAULT_CRITICAL * 1000.0 / (double)WORK_UNIT_ITERS, DEFAULT_ACQUIRES);
}

static void own_option(int code, const char *arg, void *data)
{
    struct locks_config *config = data;

    if (code == 'm')
        config->mutexes = (unsigned)cli_parse_long("--mutexes", arg, 1, MAX_MUTEXES);
    else if (code == 'c')
        config->critical = (uint64_t)cli_parse_long("--critical", arg, 0, MAX_CRITICAL);
    else if (code == 'a')
        config->acquires = (uint64_t)cli_parse_long("--acquires", arg, 1, MAX_ACQUIRES);
}

static void parse_args(int argc, char **argv, struct locks_config *config)
{
    static const struct option options[] = {
        COMMON_LONG_OPTIONS,
        {"mutexes", required_argument, NULL, 'm'},
        {"critical", required_argument, NULL, 'c'},
        {"acquires", required_argument, NULL, 'a'},
        {NULL, 0, NULL, 0},
    };
    struct common_options common = {DEFAULT_THREADS, DEFAULT_WORK, DEFAULT_PHASES};

    config->mutexes = DEFAULT_MUTEXES;
    config->critical = DEFAULT_CRITICAL;
    config->acquires = DEFAULT_ACQUIRES;
    cli_parse(argc, argv, COMMON_OPTSTRING "m:c:a:", options, &common, own_option, print_usage,
              config);
    config->threads = common.threads;
    config->work = common.work;
    config->phases = common.phases;
}

static void lock_or_die(pthread_mutex_t *mutex)
{
    int rc = pthread_mutex_lock(mutex);

    if (rc != 0) {
        fprintf(stderr, "%s: pthread_mutex_lock: %s\n", program_name, strerror(rc));
        exit(1);
    }
}

/* Take `guarded`'s mutex, noting whether someone else held it. */
static void acquire(struct locks_thread *self, struct guarded_value *guarded)
{
    int rc = pthread_mutex_trylock(&guarded->mutex);

    if (rc == EBUSY) {
        self->contended++;
        lock_or_die(&guarded->mutex);
    } else if (rc != 0) {
        fprintf(stderr, "%s: pthread_mutex_trylock: %s\n", program_name, strerror(rc));
        exit(1);
    }
    self->acquisitions++;
}

/*
 * Which mutex the next round takes: pseudo-random per thread (a private
 * xorshift stream) rather than round-robin, because threads running in
 * lockstep with a fixed rotation would never pick the same mutex at the same
 * time and the contention would vanish.
 */
static struct guarded_value *pick_mutex(struct locks_thread *self)
{
    self->chooser = work_iters(self->chooser, 1);
    return &self->guarded[(self->chooser >> 32) % self->config->mutexes];
}

/* One lock / critical work / unlock / private work round. */
static uint64_t run_round(struct locks_thread *self, uint64_t state, uint64_t private_iters)
{
    const struct locks_config *config = self->config;
    struct guarded_value *guarded = pick_mutex(self);

    acquire(self, guarded);
    /* Critical work reads and rewrites the protected value, so the result
     * depends on every previous holder: the lock is genuinely needed. */
    guarded->value = work_iters(guarded->value ^ state, config->critical) | 1;
    state ^= guarded->value;
    pthread_mutex_unlock(&guarded->mutex);

    return work_iters(state | 1, private_iters);
}

static void *locks_thread_main(void *arg)
{
    struct locks_thread *self = arg;
    const struct locks_config *config = self->config;
    uint64_t rounds_per_phase = config->work * config->acquires;
    uint64_t private_iters = WORK_UNIT_ITERS / config->acquires;
    uint64_t state = work_seed(self->index);

    name_current_thread("locks-", self->index);
    for (uint64_t phase = 0; phase < config->phases; phase++) {
        for (uint64_t r = 0; r < rounds_per_phase; r++)
            state = run_round(self, state, private_iters);
        barrier_wait(self->barrier, &self->sense);
    }
    work_publish(state);
    return NULL;
}

static struct guarded_value *create_guarded_values(unsigned count)
{
    struct guarded_value *guarded = alloc_aligned_zeroed(count, sizeof *guarded);

    for (unsigned i = 0; i < count; i++) {
        int rc = pthread_mutex_init(&guarded[i].mutex, NULL);

        if (rc != 0) {
            fprintf(stderr, "%s: pthread_mutex_init: %s\n", program_name, strerror(rc));
            exit(1);
        }
        guarded[i].value = work_seed(MAX_THREADS + i);
    }
    return guarded;
}

static void destroy_guarded_values(struct guarded_value *guarded, unsigned count)
{
    for (unsigned i = 0; i < count; i++) {
        work_publish(guarded[i].value);
        (void)pthread_mutex_destroy(&guarded[i].mutex);
    }
    free(guarded);
}

struct locks_totals {
    double elapsed;
    uint64_t acquisitions;
    uint64_t contended;
};

/* Run all phases on all threads; the elapsed time spans the first
 * pthread_create to the last pthread_join. */
static struct locks_totals run_locks(const struct locks_config *config)
{
    struct locks_thread *threads = alloc_aligned_zeroed(config->threads, sizeof *threads);
    struct guarded_value *guarded = create_guarded_values(config->mutexes);
    struct barrier *barrier = alloc_aligned_zeroed(1, sizeof *barrier);
    struct locks_totals totals = {0};
    double start;

    barrier_init(barrier, BARRIER_SLEEP, config->threads);
    for (unsigned i = 0; i < config->threads; i++) {
        threads[i].index = i;
        threads[i].chooser = work_seed(2 * MAX_THREADS + i);
        threads[i].config = config;
        threads[i].guarded = guarded;
        threads[i].barrier = barrier;
    }

    start = monotonic_seconds();
    for (unsigned i = 0; i < config->threads; i++)
        start_thread(&threads[i].handle, locks_thread_main, &threads[i]);
    for (unsigned i = 0; i < config->threads; i++)
        join_thread(threads[i].handle);
    totals.elapsed = monotonic_seconds() - start;

    for (unsigned i = 0; i < config->threads; i++) {
        totals.acquisitions += threads[i].acquisitions;
        totals.contended += threads[i].contended;
    }
    barrier_destroy(barrier);
    free(barrier);
    destroy_guarded_values(guarded, config->mutexes);
    free(threads);
    return totals;
}

int main(int argc, char **argv)
{
    struct locks_config config;
    struct locks_totals totals;
    double total_units;

    cli_init(argv[0]);
    parse_args(argc, argv, &config);

    totals = run_locks(&config);
    total_units = (double)config.threads * (double)config.phases * (double)config.work;
    printf("workload=locks threads=%u phases=%llu elapsed_s=%.6f throughput=%.2f "
           "mutexes=%u critical=%llu acquires=%llu work=%llu acquisitions=%llu "
           "acquisitions_per_s=%.2f contended=%llu contended_pct=%.2f\n",
           config.threads, (unsigned long long)config.phases, totals.elapsed,
           totals.elapsed > 0 ? total_units / totals.elapsed : 0.0, config.mutexes,
           (unsigned long long)config.critical, (unsigned long long)config.acquires,
           (unsigned long long)config.work, (unsigned long long)totals.acquisitions,
           totals.elapsed > 0 ? (double)totals.acquisitions / totals.elapsed : 0.0,
           (unsigned long long)totals.contended,
           totals.acquisitions > 0
               ? 100.0 * (double)totals.contended / (double)totals.acquisitions
               : 0.0);
    return 0;
}
