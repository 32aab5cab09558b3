/*
 * common.h - pieces shared by the tumbler example workloads.
 *
 * Every workload burns CPU in "work units": a fixed, deterministic number of
 * iterations of a dependent integer loop, calibrated so that one unit takes
 * about 1 ms of CPU on the reference machine (2-core Xeon VM, gcc 12 -O2).
 * The count is fixed rather than time-based on purpose: a thread that is
 * placed badly (sharing a core, migrated away from its cache) really takes
 * longer, which is exactly what a load balancer is supposed to fix.
 *
 * This header must be included before any system header so that the feature
 * macros below take effect (pthread_setname_np is an extension on both glibc
 * and illumos).
 */
#ifndef TUMBLER_WORKLOADS_COMMON_H
#define TUMBLER_WORKLOADS_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* glibc: pthread_setname_np */
#endif
#ifndef __EXTENSIONS__
#define __EXTENSIONS__ 1 /* illumos: pthread_setname_np */
#endif

#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Loop iterations in one work unit.  Measured at ~408,000 iterations per ms
 * on the reference machine; override at build time with
 * `make WORK_UNIT_ITERS=n` to recalibrate for another machine.
 */
#ifndef WORK_UNIT_ITERS
#define WORK_UNIT_ITERS 400000ULL
#endif

/*
 * Per-thread state is padded to this many bytes so that two threads never
 * share a cache line (128 rather than 64 because adjacent-line prefetchers on
 * x86 pull lines in pairs).
 */
#define CACHE_PAD 128

/* Upper bounds that keep arithmetic and thread names sane. */
#define MAX_THREADS 1024
#define MAX_PHASES 100000000L
#define MAX_WORK 100000000L

/* ---- work loop ---------------------------------------------------------- */

/*
 * Run `iters` iterations of the xorshift64 recurrence starting from `state`
 * and return the new state.  Every iteration depends on the previous one, so
 * the compiler cannot vectorise, shorten or drop the loop as long as the
 * caller keeps the result (see work_publish).
 */
uint64_t work_iters(uint64_t state, uint64_t iters);

/* work_iters for `units` work units. */
uint64_t work_units(uint64_t state, uint64_t units);

/* A non-zero, per-thread starting value for the work loop. */
uint64_t work_seed(unsigned thread_index);

/*
 * Fold a thread's final loop state into a process-wide volatile sink.  Called
 * once per thread at the end, so it costs nothing in the hot path but makes
 * every loop result observable.
 */
void work_publish(uint64_t state);

/* ---- time and threads --------------------------------------------------- */

/* CLOCK_MONOTONIC in seconds. */
double monotonic_seconds(void);

/*
 * Name the calling thread "<prefix><index>" (e.g. "spmd-2") so that ps,
 * top -H and tumbler can tell the threads apart.  Names longer than the
 * 15-character kernel limit are truncated; failure is harmless and ignored.
 */
void name_current_thread(const char *prefix, unsigned index);

/* pthread_create or exit(1) with a message: a workload without all its
 * threads would measure something else. */
void start_thread(pthread_t *thread, void *(*body)(void *), void *arg);

/* pthread_join or exit(1). */
void join_thread(pthread_t thread);

/* Zeroed memory for `count` objects of `size` bytes, aligned to CACHE_PAD,
 * or exit(1). */
void *alloc_aligned_zeroed(size_t count, size_t size);

/* ---- command line ------------------------------------------------------- */

/*
 * The program name used in messages; set by cli_init from argv[0] with any
 * directory stripped.
 */
extern const char *program_name;

void cli_init(const char *argv0);

/*
 * Report a command-line error as ONE line on stderr (the message followed by
 * a hint to use --help) and exit with status 2.
 */
void cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/*
 * Handle getopt_long's error returns ('?' and ':') by calling cli_fail with a
 * readable message.  `optstring` is the one given to getopt_long; it must
 * start with ':' and opterr must be 0 so that getopt itself prints nothing.
 */
void cli_fail_getopt(int code, const char *optstring, char **argv)
    __attribute__((noreturn));

/*
 * The options every workload has, and their long names for getopt_long:
 * -t/--threads, -w/--work, -p/--phases and -h/--help.  A workload's
 * optstring starts with COMMON_OPTSTRING and its option table with
 * COMMON_LONG_OPTIONS, then adds its own.
 */
struct common_options {
    unsigned threads;
    uint64_t work;
    uint64_t phases;
};
#define COMMON_OPTSTRING ":t:w:p:h"
#define COMMON_LONG_OPTIONS                                 \
    {"threads", required_argument, NULL, 't'},              \
    {"work", required_argument, NULL, 'w'},                 \
    {"phases", required_argument, NULL, 'p'},               \
    {"help", no_argument, NULL, 'h'}

/*
 * Parse the command line: the common options into `common` (which holds
 * the workload's defaults), each of the workload's own to
 * `own(code, optarg, data)`; --help prints `usage()` and exits 0; a bad
 * option, value or operand is one line on stderr and exit status 2.
 */
void cli_parse(int argc, char **argv, const char *optstring, const struct option *options,
               struct common_options *common, void (*own)(int code, const char *arg, void *data),
               void (*usage)(void), void *data);

/* Reject positional arguments left after option parsing. */
void cli_no_operands(int argc, char **argv);

/* Parse a decimal integer in [min, max] for option `option` or cli_fail. */
long cli_parse_long(const char *option, const char *text, long min, long max);

/* Parse a finite decimal number in [min, max] for option `option` or
 * cli_fail. */
double cli_parse_double(const char *option, const char *text, double min, double max);

#endif /* TUMBLER_WORKLOADS_COMMON_H */
