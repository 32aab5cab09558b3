/*
 * common.c - work loop, clock, thread and command-line helpers shared by the
 * tumbler example workloads.  See common.h for what each piece is for.
 */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *program_name = "workload";

/* Written once per thread at exit; volatile so the stores cannot be dropped,
 * atomic so that concurrent publishers do not race. */
static volatile atomic_uint_least64_t work_sink;

/* ---- work loop ---------------------------------------------------------- */

uint64_t work_iters(uint64_t state, uint64_t iters)
{
    for (uint64_t i = 0; i < iters; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
    }
    return state;
}

uint64_t work_units(uint64_t state, uint64_t units)
{
    return work_iters(state, units * WORK_UNIT_ITERS);
}

uint64_t work_seed(unsigned thread_index)
{
    /* xorshift must never start at 0 (it would stay 0); the odd constant
     * keeps every thread's sequence distinct and non-zero. */
    return 0x9E3779B97F4A7C15ULL * (uint64_t)(thread_index + 1) | 1;
}

void work_publish(uint64_t state)
{
    /* The value is never inspected; only the dependency on `state` matters,
     * so relaxed ordering is enough. */
    atomic_fetch_xor_explicit(&work_sink, state, memory_order_relaxed);
}

/* ---- time and threads --------------------------------------------------- */

double monotonic_seconds(void)
{
    struct timespec now;

    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) {
        fprintf(stderr, "%s: clock_gettime(CLOCK_MONOTONIC): %s\n", program_name,
                strerror(errno));
        exit(1);
    }
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

void name_current_thread(const char *prefix, unsigned index)
{
    char name[16]; /* 15 characters plus NUL: the Linux limit */

    snprintf(name, sizeof name, "%s%u", prefix, index);
    (void)pthread_setname_np(pthread_self(), name);
}

void start_thread(pthread_t *thread, void *(*body)(void *), void *arg)
{
    int rc = pthread_create(thread, NULL, body, arg);

    if (rc != 0) {
        fprintf(stderr, "%s: pthread_create: %s\n", program_name, strerror(rc));
        exit(1);
    }
}

void join_thread(pthread_t thread)
{
    int rc = pthread_join(thread, NULL);

    if (rc != 0) {
        fprintf(stderr, "%s: pthread_join: %s\n", program_name, strerror(rc));
        exit(1);
    }
}

void *alloc_aligned_zeroed(size_t count, size_t size)
{
    void *memory = NULL;
    size_t bytes;
    int rc;

    if (count == 0)
        count = 1;
    if (size != 0 && count > SIZE_MAX / size) {
        fprintf(stderr, "%s: allocation too large\n", program_name);
        exit(1);
    }
    bytes = count * size;
    rc = posix_memalign(&memory, CACHE_PAD, bytes);
    if (rc != 0) {
        fprintf(stderr, "%s: posix_memalign: %s\n", program_name, strerror(rc));
        exit(1);
    }
    memset(memory, 0, bytes);
    return memory;
}

/* ---- command line ------------------------------------------------------- */

void cli_init(const char *argv0)
{
    const char *slash;

    if (argv0 == NULL || *argv0 == '\0')
        return;
    slash = strrchr(argv0, '/');
    program_name = slash != NULL ? slash + 1 : argv0;
}

void cli_fail(const char *fmt, ...)
{
    va_list args;

    fprintf(stderr, "%s: ", program_name);
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, " (try '%s --help')\n", program_name);
    exit(2);
}

void cli_fail_getopt(int code, const char *optstring, char **argv)
{
    /* With a leading ':' in the optstring getopt returns ':' for a missing
     * argument and '?' otherwise.  For '?', optopt is 0 for an unknown long
     * option (argv[optind - 1] is then the offending word), a known short
     * option's character when a long option was given an argument it does
     * not take, and the unknown character otherwise. */
    if (code == ':')
        cli_fail("option '%s' requires an argument", argv[optind - 1]);
    if (optopt == 0)
        cli_fail("unknown option '%s'", argv[optind - 1]);
    if (optopt != ':' && strchr(optstring, optopt) != NULL)
        cli_fail("option '%s' does not take an argument", argv[optind - 1]);
    cli_fail("unknown option '-%c'", optopt);
}

void cli_no_operands(int argc, char **argv)
{
    if (optind < argc)
        cli_fail("unexpected argument '%s'", argv[optind]);
}

long cli_parse_long(const char *option, const char *text, long min, long max)
{
    char *end;
    long value;

    errno = 0;
    value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || value < min || value > max)
        cli_fail("invalid value '%s' for %s (expected an integer from %ld to %ld)", text,
                 option, min, max);
    return value;
}

double cli_parse_double(const char *option, const char *text, double min, double max)
{
    char *end;
    double value;

    errno = 0;
    value = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(value) || value < min ||
        value > max)
        cli_fail("invalid value '%s' for %s (expected a number from %g to %g)", text, option,
                 min, max);
    return value;
}

void cli_parse(int argc, char **argv, const char *optstring, const struct option *options,
               struct common_options *common, void (*own)(int code, const char *arg, void *data),
               void (*usage)(void), void *data)
{
    int code;

    opterr = 0;
    while ((code = getopt_long(argc, argv, optstring, options, NULL)) != -1) {
        switch (code) {
        case 't':
            common->threads = (unsigned)cli_parse_long("--threads", optarg, 1, MAX_THREADS);
            break;
        case 'w':
            common->work = (uint64_t)cli_parse_long("--work", optarg, 0, MAX_WORK);
            break;
        case 'p':
            common->phases = (uint64_t)cli_parse_long("--phases", optarg, 1, MAX_PHASES);
            break;
        case 'h':
            usage();
            exit(0);
        case '?':
        case ':':
            cli_fail_getopt(code, optstring, argv);
        default:
            own(code, optarg, data);
        }
    }
    cli_no_operands(argc, argv);
}
