/*
 * pipeline - a pipeline of stages whose threads carry unequal, stable load.
 *
 * What it models: PARSEC ferret, whose intermediate stages (Segment, Extract,
 * Vector, Rank) run pools of identical threads at mean CPU utilisations of
 * 2%, 1%, 11% and 36% (Tumbler paper, Table I).  Why: the OS balances thread
 * counts, so it happily puts both heavy Rank threads in one CPU domain and
 * the light ones in the other; a load balancer has to group heavy with light
 * threads instead.
 *
 * Structure: S stages (S = number of --weights, default 4), each with
 * --threads identical threads, connected by bounded FIFO queues of
 * --queue items.  --phases is the number of items that flow through the
 * pipeline.  Stage 0 takes new items from the input (ferret's Load stage
 * folded in) and the last stage retires them (the Out stage folded in).
 * Processing one item in stage s costs
 *     work * weight_s / max(weights)
 * work units, so --work is the per-item cost of the heaviest stage and the
 * defaults (work 36, weights 2,1,11,36) cost 2, 1, 11 and 36 units per item.
 * Threads wait on condition variables when their queue is empty or full, so
 * light stages mostly sleep and each thread's utilisation tracks its weight.
 */
#include "common.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_THREADS 2
#define DEFAULT_WORK 36
#define DEFAULT_PHASES 160
#define DEFAULT_WEIGHTS "2,1,11,36"
#define DEFAULT_QUEUE 4
#define MAX_STAGES 64
#define MAX_QUEUE 1000000L
#define MAX_WEIGHT 1e6

struct pipeline_config {
    unsigned threads_per_stage;
    uint64_t work;   /* units per item in the heaviest stage */
    uint64_t items;  /* --phases */
    unsigned stages;
    double weights[MAX_STAGES];
    unsigned queue_capacity;
};

struct item {
    uint64_t id;
    uint64_t value; /* every stage folds its loop result in, like real data */
};

/* Bounded blocking FIFO between two stages.  Closed by the last producer
 * thread to finish, after which consumers drain it and stop. */
struct item_queue {
    _Alignas(CACHE_PAD) pthread_mutex_t mutex;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    struct item *slots;
    unsigned capacity;
    unsigned head;  /* next slot to pop */
    unsigned count;
    int closed;
};

struct stage {
    unsigned index;
    uint64_t item_iters;        /* cost of one item in loop iterations */
    struct item_queue *input;   /* NULL for stage 0 */
    struct item_queue *output;  /* NULL for the last stage */
    _Alignas(CACHE_PAD) atomic_uint running; /* threads not yet finished */
};

/* Shared by stage 0's threads: the next item id to admit.  Alone on its line
 * because it is written on every admission. */
struct item_source {
    _Alignas(CACHE_PAD) atomic_uint_fast64_t next_id;
    uint64_t total;
};

/* One per thread, padded so that the hot loop never shares a cache line. */
struct stage_thread {
    _Alignas(CACHE_PAD) unsigned index_in_stage;
    uint64_t items_done; /* checked after the run: nothing may be lost */
    struct stage *stage;
    struct item_source *source;
    pthread_t handle;
};

static void print_usage(void)
{
    printf("Usage: %s [OPTION]...\n"
           "A ferret-like pipeline: stages of identical threads with unequal per-item\n"
           "cost, connected by bounded queues.\n"
           "\n"
           "  -t, --threads N    threads per stage (default %d)\n"
           "  -w, --work N       work units one item costs in the heaviest stage;\n"
           "                     stage s costs work*weight_s/max(weights) units; 1 unit\n"
           "                     is a fixed loop of %llu iterations, about 1 ms of CPU\n"
           "                     (default %d)\n"
           "  -p, --phases N     number of items pushed through the pipeline\n"
           "                     (default %d)\n"
           "  -W, --weights LIST comma-separated per-item cost weights, one per stage;\n"
           "                     their count is the number of stages; the default\n"
           "                     follows ferret's Segment, Extract, Vector and Rank\n"
           "                     stages (default %s)\n"
           "  -q, --queue N      capacity of each queue between stages, in items\n"
           "                     (default %d)\n"
           "  -h, --help         print this help and exit\n"
           "\n"
           "Thread j of stage s is named stage<s>-<j> (both from 0).  Prints one line:\n"
           "workload=pipeline threads=N phases=N elapsed_s=S throughput=UNITS_PER_S\n"
           "stages=N total_threads=N weights=LIST work=N queue=N items_per_s=R\n"
           "(threads is per stage; throughput counts the units of all stages)\n",
           program_name, DEFAULT_THREADS, (unsigned long long)WORK_UNIT_ITERS, DEFAULT_WORK,
           DEFAULT_PHASES, DEFAULT_WEIGHTS, DEFAULT_QUEUE);
}

/* Fill config->weights and config->stages from "w0,w1,...". */
static void parse_weights(const char *text, struct pipeline_config *config)
{
    const char *cursor = text;
    unsigned count = 0;

    for (;;) {
        char field[64];
        size_t length = strcspn(cursor, ",");

        if (count == MAX_STAGES)
            cli_fail("too many stages in --weights '%s' (at most %d)", text, MAX_STAGES);
        if (length == 0 || length >= sizeof field)
            cli_fail("invalid value '%s' for --weights (expected positive numbers "
                     "separated by commas)",
                     text);
        memcpy(field, cursor, length);
        field[length] = '\0';
        config->weights[count] = cli_parse_double("--weights", field, 0.0, MAX_WEIGHT);
        if (config->weights[count] <= 0.0)
            cli_fail("invalid weight '%s' in --weights (must be greater than 0)", field);
        count++;
        if (cursor[length] == '\0')
            break;
        cursor += length + 1;
    }
    config->stages = count;
}

static void own_option(int code, const char *arg, void *data)
{
    struct pipeline_config *config = data;

    if (code == 'W')
        parse_weights(arg, config);
    else if (code == 'q')
        config->queue_capacity = (unsigned)cli_parse_long("--queue", arg, 1, MAX_QUEUE);
}

static void parse_args(int argc, char **argv, struct pipeline_config *config)
{
    static const struct option options[] = {
        COMMON_LONG_OPTIONS,
        {"weights", required_argument, NULL, 'W'},
        {"queue", required_argument, NULL, 'q'},
        {NULL, 0, NULL, 0},
    };
    struct common_options common = {DEFAULT_THREADS, DEFAULT_WORK, DEFAULT_PHASES};

    config->queue_capacity = DEFAULT_QUEUE;
    parse_weights(DEFAULT_WEIGHTS, config);
    cli_parse(argc, argv, COMMON_OPTSTRING "W:q:", options, &common, own_option, print_usage,
              config);
    config->threads_per_stage = common.threads;     /* --threads: per stage */
    config->work = common.work;
    config->items = common.phases;                  /* --phases: items */
    if ((uint64_t)config->threads_per_stage * config->stages > MAX_THREADS)
        cli_fail("%u stages of %u threads is more than %d threads", config->stages,
                 config->threads_per_stage, MAX_THREADS);
}

static double max_weight(const struct pipeline_config *config)
{
    double heaviest = 0.0;

    for (unsigned s = 0; s < config->stages; s++)
        if (config->weights[s] > heaviest)
            heaviest = config->weights[s];
    return heaviest;
}

/* Work units one item costs in stage s. */
static double stage_item_units(const struct pipeline_config *config, unsigned s)
{
    return (double)config->work * config->weights[s] / max_weight(config);
}

/* ---- bounded queue ------------------------------------------------------ */

static void die_on(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "%s: %s: %s\n", program_name, what, strerror(rc));
        exit(1);
    }
}

static void queue_init(struct item_queue *queue, unsigned capacity)
{
    die_on(pthread_mutex_init(&queue->mutex, NULL), "pthread_mutex_init");
    die_on(pthread_cond_init(&queue->not_empty, NULL), "pthread_cond_init");
    die_on(pthread_cond_init(&queue->not_full, NULL), "pthread_cond_init");
    queue->slots = alloc_aligned_zeroed(capacity, sizeof *queue->slots);
    queue->capacity = capacity;
    queue->head = 0;
    queue->count = 0;
    queue->closed = 0;
}

static void queue_destroy(struct item_queue *queue)
{
    (void)pthread_cond_destroy(&queue->not_full);
    (void)pthread_cond_destroy(&queue->not_empty);
    (void)pthread_mutex_destroy(&queue->mutex);
    free(queue->slots);
}

/* Block until there is room, then append `item`. */
static void queue_push(struct item_queue *queue, struct item item)
{
    die_on(pthread_mutex_lock(&queue->mutex), "pthread_mutex_lock");
    while (queue->count == queue->capacity)
        die_on(pthread_cond_wait(&queue->not_full, &queue->mutex), "pthread_cond_wait");
    queue->slots[(queue->head + queue->count) % queue->capacity] = item;
    queue->count++;
    pthread_cond_signal(&queue->not_empty);
    pthread_mutex_unlock(&queue->mutex);
}

/* Block until an item is available and take it; returns 0 once the queue is
 * closed and drained. */
static int queue_pop(struct item_queue *queue, struct item *item)
{
    int got_item = 0;

    die_on(pthread_mutex_lock(&queue->mutex), "pthread_mutex_lock");
    while (queue->count == 0 && !queue->closed)
        die_on(pthread_cond_wait(&queue->not_empty, &queue->mutex), "pthread_cond_wait");
    if (queue->count > 0) {
        *item = queue->slots[queue->head];
        queue->head = (queue->head + 1) % queue->capacity;
        queue->count--;
        got_item = 1;
        pthread_cond_signal(&queue->not_full);
    }
    pthread_mutex_unlock(&queue->mutex);
    return got_item;
}

/* No more pushes will come: wake every consumer so it can drain and stop. */
static void queue_close(struct item_queue *queue)
{
    die_on(pthread_mutex_lock(&queue->mutex), "pthread_mutex_lock");
    queue->closed = 1;
    pthread_cond_broadcast(&queue->not_empty);
    pthread_mutex_unlock(&queue->mutex);
}

/* ---- stages ------------------------------------------------------------- */

/* Admit the next input item, or return 0 when all have been admitted. */
static int source_next(struct item_source *source, struct item *item)
{
    uint64_t id = atomic_fetch_add_explicit(&source->next_id, 1, memory_order_relaxed);

    if (id >= source->total)
        return 0;
    item->id = id;
    item->value = work_seed((unsigned)id);
    return 1;
}

static int next_item(struct stage_thread *self, struct item *item)
{
    if (self->stage->input == NULL)
        return source_next(self->source, item);
    return queue_pop(self->stage->input, item);
}

static void *stage_thread_main(void *arg)
{
    struct stage_thread *self = arg;
    struct stage *stage = self->stage;
    char name_prefix[16];
    uint64_t retired = 0; /* checksum of the items this thread retired */
    struct item item;

    snprintf(name_prefix, sizeof name_prefix, "stage%u-", stage->index);
    name_current_thread(name_prefix, self->index_in_stage);

    while (next_item(self, &item)) {
        item.value = work_iters(item.value | 1, stage->item_iters);
        self->items_done++;
        if (stage->output != NULL)
            queue_push(stage->output, item);
        else
            retired ^= item.value; /* the Out stage: retire the item */
    }
    work_publish(retired);

    /* The last thread of a stage to finish tells the next stage that no more
     * items will come. */
    if (atomic_fetch_sub_explicit(&stage->running, 1, memory_order_acq_rel) == 1 &&
        stage->output != NULL)
        queue_close(stage->output);
    return NULL;
}

struct pipeline {
    struct stage *stages;
    struct item_queue *queues; /* queues[s] connects stage s to stage s + 1 */
    struct stage_thread *threads;
    struct item_source *source;
    unsigned thread_count;
};

static void pipeline_init(struct pipeline *pipeline, const struct pipeline_config *config)
{
    unsigned per_stage = config->threads_per_stage;

    pipeline->thread_count = config->stages * per_stage;
    pipeline->stages = alloc_aligned_zeroed(config->stages, sizeof *pipeline->stages);
    pipeline->queues = alloc_aligned_zeroed(config->stages, sizeof *pipeline->queues);
    pipeline->threads =
        alloc_aligned_zeroed(pipeline->thread_count, sizeof *pipeline->threads);
    pipeline->source = alloc_aligned_zeroed(1, sizeof *pipeline->source);
    atomic_init(&pipeline->source->next_id, 0);
    pipeline->source->total = config->items;

    for (unsigned s = 0; s + 1 < config->stages; s++)
        queue_init(&pipeline->queues[s], config->queue_capacity);
    for (unsigned s = 0; s < config->stages; s++) {
        struct stage *stage = &pipeline->stages[s];

        stage->index = s;
        stage->item_iters =
            (uint64_t)(stage_item_units(config, s) * (double)WORK_UNIT_ITERS + 0.5);
        stage->input = s > 0 ? &pipeline->queues[s - 1] : NULL;
        stage->output = s + 1 < config->stages ? &pipeline->queues[s] : NULL;
        atomic_init(&stage->running, per_stage);
        for (unsigned j = 0; j < per_stage; j++) {
            struct stage_thread *thread = &pipeline->threads[s * per_stage + j];

            thread->index_in_stage = j;
            thread->stage = stage;
            thread->source = pipeline->source;
        }
    }
}

static void pipeline_destroy(struct pipeline *pipeline, const struct pipeline_config *config)
{
    for (unsigned s = 0; s + 1 < config->stages; s++)
        queue_destroy(&pipeline->queues[s]);
    free(pipeline->source);
    free(pipeline->threads);
    free(pipeline->queues);
    free(pipeline->stages);
}

/* Every stage must have processed every item exactly once; anything else is
 * a bug in the queues, and the timing would be meaningless. */
static void check_all_items_processed(const struct pipeline *pipeline,
                                      const struct pipeline_config *config)
{
    for (unsigned s = 0; s < config->stages; s++) {
        uint64_t done = 0;

        for (unsigned j = 0; j < config->threads_per_stage; j++)
            done += pipeline->threads[s * config->threads_per_stage + j].items_done;
        if (done != config->items) {
            fprintf(stderr, "%s: internal error: stage %u processed %llu of %llu items\n",
                    program_name, s, (unsigned long long)done,
                    (unsigned long long)config->items);
            exit(1);
        }
    }
}

/* Push every item through; returns the wall time from the first
 * pthread_create to the last pthread_join. */
static double run_pipeline(const struct pipeline_config *config)
{
    struct pipeline pipeline;
    double start, elapsed;

    pipeline_init(&pipeline, config);
    start = monotonic_seconds();
    /* Start the last stage first so consumers are waiting when items come. */
    for (unsigned i = pipeline.thread_count; i-- > 0;)
        start_thread(&pipeline.threads[i].handle, stage_thread_main, &pipeline.threads[i]);
    for (unsigned i = 0; i < pipeline.thread_count; i++)
        join_thread(pipeline.threads[i].handle);
    elapsed = monotonic_seconds() - start;
    check_all_items_processed(&pipeline, config);
    pipeline_destroy(&pipeline, config);
    return elapsed;
}

/* The weights as "w0,w1,..." with no spaces, so the result line stays
 * parseable whatever the user typed. */
static void format_weights(const struct pipeline_config *config, char *buffer, size_t size)
{
    size_t used = 0;

    buffer[0] = '\0';
    for (unsigned s = 0; s < config->stages && used < size; s++) {
        int n = snprintf(buffer + used, size - used, "%s%g", s > 0 ? "," : "",
                         config->weights[s]);

        if (n < 0)
            break;
        used += (size_t)n;
    }
}

int main(int argc, char **argv)
{
    struct pipeline_config config;
    double elapsed, units_per_item = 0.0;
    char weights[MAX_STAGES * 16];

    cli_init(argv[0]);
    parse_args(argc, argv, &config);

    elapsed = run_pipeline(&config);
    for (unsigned s = 0; s < config.stages; s++)
        units_per_item += stage_item_units(&config, s);
    format_weights(&config, weights, sizeof weights);
    printf("workload=pipeline threads=%u phases=%llu elapsed_s=%.6f throughput=%.2f "
           "stages=%u total_threads=%u weights=%s work=%llu queue=%u items_per_s=%.2f\n",
           config.threads_per_stage, (unsigned long long)config.items, elapsed,
           elapsed > 0 ? (double)config.items * units_per_item / elapsed : 0.0,
           config.stages, config.stages * config.threads_per_stage, weights,
           (unsigned long long)config.work, config.queue_capacity,
           elapsed > 0 ? (double)config.items / elapsed : 0.0);
    return 0;
}
