/*
 * spmd - phases of equal work per thread separated by a barrier.
 *
 * What it models: the SPMD style of OpenMP/MPI/UPC codes (compute phase,
 * barrier, repeat).  Why: with more threads than cores the OS keeps some
 * cores doubly loaded, and because every phase waits for the slowest thread,
 * the whole program runs at the speed of the most crowded core.  The default
 * (3 threads on a 2-core machine, spin barriers) is the case from the
 * speed-balancing paper: Linux leaves two threads sharing one core for good,
 * so each 0.12 s phase takes 0.24 s (~4.8 s in total) while rotating the
 * threads fairly would need only 3 * 0.12 / 2 s per phase (~3.6 s).  The
 * barrier flavour (-b) decides what the OS can see: spinning and yielding
 * waiters look busy, sleeping ones look idle.
 */
#include "barrier.h"
#include "common.h"

#include <stdlib.h>

#define DEFAULT_THREADS 3
#define DEFAULT_WORK 120
#define DEFAULT_PHASES 20
#define DEFAULT_BARRIER BARRIER_SPIN

struct spmd_config {
    unsigned threads;
    uint64_t work;   /* units per phase per thread */
    uint64_t phases;
    enum barrier_kind barrier;
};

static void print_usage(void)
{
    printf("Usage: %s [OPTION]...\n"
           "Phases of equal CPU work per thread, separated by a barrier (SPMD).\n"
           "\n"
           "  -t, --threads N    worker threads (default %d)\n"
           "  -w, --work N       work units per phase per thread; 1 unit is a fixed\n"
           "                     loop of %llu iterations, about 1 ms of CPU (default %d)\n"
           "  -p, --phases N     number of phases (default %d)\n"
           "  -b, --barrier KIND barrier between phases: spin (busy-wait on an atomic\n"
           "                     sense-reversing barrier), yield (the same, calling\n"
           "                     sched_yield while waiting) or sleep\n"
           "                     (pthread_barrier_wait) (default %s)\n"
           "  -h, --help         print this help and exit\n"
           "\n"
           "Threads are named spmd-0, spmd-1, ...  Prints one line:\n"
           "workload=spmd threads=N phases=N elapsed_s=S throughput=UNITS_PER_S\n"
           "barrier=KIND work=N\n",
           program_name, DEFAULT_THREADS, (unsigned long long)WORK_UNIT_ITERS, DEFAULT_WORK,
           DEFAULT_PHASES, barrier_kind_name(DEFAULT_BARRIER));
}

static void own_option(int code, const char *arg, void *data)
{
    struct spmd_config *config = data;

    if (code == 'b')
        config->barrier = barrier_kind_parse("--barrier", arg);
}

static void parse_args(int argc, char **argv, struct spmd_config *config)
{
    static const struct option options[] = {
        COMMON_LONG_OPTIONS,
        {"barrier", required_argument, NULL, 'b'},
        {NULL, 0, NULL, 0},
    };
    struct common_options common = {DEFAULT_THREADS, DEFAULT_WORK, DEFAULT_PHASES};

    config->barrier = DEFAULT_BARRIER;
    cli_parse(argc, argv, COMMON_OPTSTRING "b:", options, &common, own_option, print_usage,
              config);
    config->threads = common.threads;
    config->work = common.work;
    config->phases = common.phases;
}

/* Run all phases on all threads, each doing `work` units per phase;
 * returns the wall time from the first pthread_create to the last
 * pthread_join. */
static double run_spmd(const struct spmd_config *config)
{
    uint64_t *iters = alloc_aligned_zeroed(config->threads, sizeof *iters);
    double elapsed;

    for (unsigned i = 0; i < config->threads; i++)
        iters[i] = config->work * WORK_UNIT_ITERS;
    elapsed = run_phases("spmd-", config->threads, iters, config->phases, 0, config->barrier);
    free(iters);
    return elapsed;
}

int main(int argc, char **argv)
{
    struct spmd_config config;
    double elapsed, total_units;

    cli_init(argv[0]);
    parse_args(argc, argv, &config);

    elapsed = run_spmd(&config);
    total_units = (double)config.threads * (double)config.phases * (double)config.work;
    printf("workload=spmd threads=%u phases=%llu elapsed_s=%.6f throughput=%.2f "
           "barrier=%s work=%llu\n",
           config.threads, (unsigned long long)config.phases, elapsed,
           elapsed > 0 ? total_units / elapsed : 0.0, barrier_kind_name(config.barrier),
           (unsigned long long)config.work);
    return 0;
}
