/*
 * skewed - identical threads given an uneven share of the input, joined at a
 * barrier after every phase.
 *
 * What it models: a data-parallel program whose static partitioning does not
 * match the cost of the data (fluidanimate-like imbalance plus barriers), the
 * first cause of unequal per-thread load named in the Tumbler paper.  Why:
 * counting threads per core says nothing about where the load is.  With the
 * defaults (4 threads, skew 0.5) the per-phase shares are 1 : 1.5 : 2 : 2.5,
 * so on two CPU domains the grouping {0,3} | {1,2} is perfectly balanced
 * (3.5 : 3.5) while {0,1} | {2,3} is not (2.5 : 4.5); since every phase waits
 * for the slowest domain, the grouping decides the run time.
 *
 * Share formula: thread i of T gets
 *     units_i = T * work * (1 + skew * i) / sum_j (1 + skew * j)
 * work units per phase, so the total per phase is always T * work.
 *
 * With --rotate N the shares move one thread along every N phases (thread i
 * then does the share of thread (i + phase / N) mod T): each thread's load
 * varies in time while the total does not -- the Tumbler paper's threads of
 * time-varying load, which a balancer has to follow and regroup.
 */
#include "barrier.h"
#include "common.h"

#include <stdlib.h>

#define DEFAULT_THREADS 4
#define DEFAULT_WORK 100
#define DEFAULT_PHASES 20
#define DEFAULT_SKEW 0.5
#define MAX_SKEW 1000.0
#define DEFAULT_BARRIER BARRIER_SLEEP
#define DEFAULT_ROTATE 0

struct skewed_config {
    unsigned threads;
    uint64_t work;   /* mean units per phase per thread */
    uint64_t phases;
    double skew;
    uint64_t rotate;  /* phases between share moves; 0: never */
    enum barrier_kind barrier;
};

static void print_usage(void)
{
    printf("Usage: %s [OPTION]...\n"
           "Identical threads with an uneven share of the work, joined at a barrier\n"
           "after every phase.\n"
           "\n"
           "  -t, --threads N    worker threads (default %d)\n"
           "  -w, --work N       mean work units per phase per thread; 1 unit is a\n"
           "                     fixed loop of %llu iterations, about 1 ms of CPU\n"
           "                     (default %d)\n"
           "  -p, --phases N     number of phases (default %d)\n"
           "  -s, --skew X       unevenness, X >= 0: thread i of T does\n"
           "                     T*work*(1+X*i)/sum_j(1+X*j) units per phase, so the\n"
           "                     total per phase stays T*work; 0 means equal shares\n"
           "                     (default %g)\n"
           "  -b, --barrier KIND barrier between phases: spin, yield or sleep\n"
           "                     (pthread_barrier_wait) (default %s)\n"
           "  -r, --rotate N     every N phases the shares move one thread along\n"
           "                     (thread i does thread i+1's share, the last thread\n"
           "                     thread 0's): loads that vary in time; 0 never\n"
           "                     (default %d)\n"
           "  -h, --help         print this help and exit\n"
           "\n"
           "Threads are named skewed-0, skewed-1, ... (thread 0 has the smallest\n"
           "share).  Prints one line:\n"
           "workload=skewed threads=N phases=N elapsed_s=S throughput=UNITS_PER_S\n"
           "skew=X barrier=KIND work=N min_units=U max_units=U rotate=N\n",
           program_name, DEFAULT_THREADS, (unsigned long long)WORK_UNIT_ITERS, DEFAULT_WORK,
           DEFAULT_PHASES, DEFAULT_SKEW, barrier_kind_name(DEFAULT_BARRIER), DEFAULT_ROTATE);
}

static void own_option(int code, const char *arg, void *data)
{
    struct skewed_config *config = data;

    if (code == 's')
        config->skew = cli_parse_double("--skew", arg, 0.0, MAX_SKEW);
    else if (code == 'b')
        config->barrier = barrier_kind_parse("--barrier", arg);
    else if (code == 'r')
        config->rotate = (uint64_t)cli_parse_long("--rotate", arg, 0, MAX_PHASES);
}

static void parse_args(int argc, char **argv, struct skewed_config *config)
{
    static const struct option options[] = {
        COMMON_LONG_OPTIONS,
        {"skew", required_argument, NULL, 's'},
        {"barrier", required_argument, NULL, 'b'},
        {"rotate", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    struct common_options common = {DEFAULT_THREADS, DEFAULT_WORK, DEFAULT_PHASES};

    config->skew = DEFAULT_SKEW;
    config->barrier = DEFAULT_BARRIER;
    config->rotate = DEFAULT_ROTATE;
    cli_parse(argc, argv, COMMON_OPTSTRING "s:b:r:", options, &common, own_option, print_usage,
              config);
    config->threads = common.threads;
    config->work = common.work;
    config->phases = common.phases;
}

/* Thread i's share of one phase, in work units (see the header comment). */
static double share_units(const struct skewed_config *config, unsigned index)
{
    double threads = config->threads;
    double weight_sum = threads + config->skew * threads * (threads - 1.0) / 2.0;

    return threads * (double)config->work * (1.0 + config->skew * index) / weight_sum;
}

/* Run all phases on all threads, each doing its share; returns the wall
 * time from the first pthread_create to the last pthread_join. */
static double run_skewed(const struct skewed_config *config)
{
    uint64_t *iters = alloc_aligned_zeroed(config->threads, sizeof *iters);
    double elapsed;

    for (unsigned i = 0; i < config->threads; i++)
        iters[i] = (uint64_t)(share_units(config, i) * (double)WORK_UNIT_ITERS + 0.5);
    elapsed = run_phases("skewed-", config->threads, iters, config->phases, config->rotate,
                         config->barrier);
    free(iters);
    return elapsed;
}

int main(int argc, char **argv)
{
    struct skewed_config config;
    double elapsed, total_units;

    cli_init(argv[0]);
    parse_args(argc, argv, &config);

    elapsed = run_skewed(&config);
    total_units = (double)config.threads * (double)config.phases * (double)config.work;
    printf("workload=skewed threads=%u phases=%llu elapsed_s=%.6f throughput=%.2f "
           "skew=%g barrier=%s work=%llu min_units=%.2f max_units=%.2f rotate=%llu\n",
           config.threads, (unsigned long long)config.phases, elapsed,
           elapsed > 0 ? total_units / elapsed : 0.0, config.skew,
           barrier_kind_name(config.barrier), (unsigned long long)config.work,
           share_units(&config, 0), share_units(&config, config.threads - 1),
           (unsigned long long)config.rotate);
    return 0;
}
