/*
 * _window: engine/window.py's summarize_window in one C pass (optional).
 *
 * A quiet round (controller.py) decides from a few sums over the threads
 * of its target: each domain's summed load over the load window, the CV of
 * the thread loads, and per domain how many threads it holds and how many
 * stay runnable.  In Python those passes over 64 threads cost ~100-170 us
 * right after a 100 ms sleep; here a few microseconds.  Pure arithmetic, no
 * OS call: it belongs to the engine.
 *
 * A thread's load is its demand as in window.py (demand): min(1, (CPU time +
 * run-queue wait) / span) for a thread runnable at least runnable_share of
 * the time, else min(1, CPU time / span).
 *
 * summarize_window(run, lat, base_run, base_lat, span_ns, domain_of,
 *                  capacities, runnable_share)
 *     run, lat, base_run, base_lat   buffers of int64 ('q'): CPU time and
 *                                    run-queue wait now and at the start of
 *                                    the load window, one entry per thread
 *     span_ns                        the window's length, > 0: an int, or a
 *                                    buffer of int64 ('q'), one per thread
 *                                    (threads of several processes)
 *     domain_of                      buffer of int32 ('i'): each thread's domain,
 *                                    -1 for one that counts nowhere
 *     capacities                     buffer of int32 ('i'): CPUs per domain
 *     runnable_share                 as in window.py
 * returns (domain_loads, thread_cv, spread, threads, runnable, crowded,
 * domain_cpu) -- domain_cpu: the CPU the threads of each domain received
 * (CPUs, summed), what measured capacity subtracts from the CPUs' busy time --
 * exactly the arithmetic of window.py's py_summarize_window except that
 * sums are compensated (Neumaier) instead of math.fsum: they agree to the
 * last bit or two.  Bad arguments raise ValueError or TypeError.
 *
 * domain_figures(threads, count, ThreadView, runnable_share, sleeps_per_second)
 *     merging.py's pass over every thread (_py_domain_figures, the
 *     reference): per domain the CPU its threads got, the speeds of its
 *     always-runnable threads not known to sleep, and the run-queue wait of
 *     its threads that block, summed in the threads' order as Python's
 *     floats add; or None when a view holds a value of a kind it does not
 *     take (the Python pass then runs).
 *
 * Why the spread and the crowded count are here too: right after a 100 ms
 * sleep, the engine's cv() of two floats costs ~75 us of CPU (~3 us in a
 * loop) -- every C function it touches is out of the caches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* A running sum with Neumaier's compensation. */
typedef struct {
    double sum, compensation;
} exact_sum;

static void add(exact_sum *total, double value)
{
    double t = total->sum + value;

    if (fabs(total->sum) >= fabs(value))
        total->compensation += (total->sum - t) + value;
    else
        total->compensation += (value - t) + total->sum;
    total->sum = t;
}

static double result(const exact_sum *total)
{
    return total->sum + total->compensation;
}

/* Take a C-contiguous buffer of ``count`` items of format ``format``. */
static int get_column(PyObject *object, Py_buffer *view, const char *format,
                      Py_ssize_t itemsize, const char *what)
{
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != itemsize || view->format == NULL
            || strcmp(view->format, format) != 0) {
        PyErr_Format(PyExc_TypeError, "summarize_window: %s must be an array('%s')",
                     what, format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* engine/variation.py's cv: population stddev / mean; 0 for fewer than 2
 * values or a mean that is not positive. */
static double coefficient_of_variation(const double *values, Py_ssize_t n)
{
    exact_sum total = {0, 0}, squares = {0, 0};

    if (n < 2)
        return 0.0;
    for (Py_ssize_t i = 0; i < n; i++)
        add(&total, values[i]);
    double mean = result(&total) / (double)n;
    if (!(mean > 0.0))
        return 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double deviation = values[i] - mean;
        add(&squares, deviation * deviation);
    }
    return sqrt(result(&squares) / (double)n) / mean;
}

static PyObject *int_tuple(const long *values, int count)
{
    PyObject *tuple = PyTuple_New(count);

    for (int i = 0; tuple != NULL && i < count; i++) {
        PyObject *item = PyLong_FromLong(values[i]);
        if (item == NULL) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

static PyObject *summarize(const int64_t *run, const int64_t *lat, const int64_t *base_run,
                           const int64_t *base_lat, Py_ssize_t n, double span,
                           const int64_t *spans, const int32_t *domain_of,
                           const int32_t *capacities, int domain_count, double share)
{
    exact_sum *sums = PyMem_Calloc(domain_count, sizeof *sums);
    exact_sum *cpu_sums = PyMem_Calloc(domain_count, sizeof *cpu_sums);
    long *threads = PyMem_Calloc(domain_count, sizeof *threads);
    long *runnable = PyMem_Calloc(domain_count, sizeof *runnable);
    double *loads = PyMem_Calloc(n ? n : 1, sizeof *loads);
    double *per_cpu = PyMem_Calloc(domain_count, sizeof *per_cpu);
    PyObject *domain_loads = NULL, *domain_cpu = NULL, *answer = NULL;
    long crowded = 0;
    Py_ssize_t counted = 0;                 /* threads with a domain */

    if (!sums || !cpu_sums || !threads || !runnable || !loads || !per_cpu) {
        PyErr_NoMemory();
        goto done;
    }
    for (int d = 0; d < domain_count; d++) {
        if (capacities[d] < 1) {
            PyErr_SetString(PyExc_ValueError, "summarize_window: a domain has no CPUs");
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int domain = domain_of[i];
        int64_t ran = run[i] > base_run[i] ? run[i] - base_run[i] : 0;
        int64_t waited = lat[i] > base_lat[i] ? lat[i] - base_lat[i] : 0;

        if (domain == -1)
            continue;                       /* outside every domain: nowhere */
        if (domain < 0 || domain >= domain_count) {
            PyErr_Format(PyExc_ValueError, "summarize_window: domain %d out of range", domain);
            goto done;
        }
        double over = spans != NULL ? (double)spans[i] : span;
        if (!(over > 0.0)) {
            PyErr_SetString(PyExc_ValueError, "summarize_window: span_ns must be positive");
            goto done;
        }
        double wanted = (double)(ran + waited) / over;
        /* demand (window.py, demand): the runnable share of an
           always-runnable thread, else the CPU it got; capped at one CPU */
        double load = wanted >= share ? wanted : (double)ran / over;
        if (load > 1.0)
            load = 1.0;
        loads[counted++] = load;
        add(&sums[domain], load);
        add(&cpu_sums[domain], (double)ran / over);
        threads[domain]++;
        if (wanted >= share)
            runnable[domain]++;
    }
    domain_loads = PyTuple_New(domain_count);
    for (int d = 0; domain_loads != NULL && d < domain_count; d++) {
        PyObject *item = PyFloat_FromDouble(result(&sums[d]));
        if (item == NULL) {
            Py_CLEAR(domain_loads);
            break;
        }
        PyTuple_SET_ITEM(domain_loads, d, item);
        per_cpu[d] = result(&sums[d]) / capacities[d];      /* grouping.spread */
        if (runnable[d] > capacities[d])
            crowded++;
    }
    domain_cpu = domain_loads != NULL ? PyTuple_New(domain_count) : NULL;
    for (int d = 0; domain_cpu != NULL && d < domain_count; d++) {
        PyObject *item = PyFloat_FromDouble(result(&cpu_sums[d]));
        if (item == NULL) {
            Py_CLEAR(domain_cpu);
            break;
        }
        PyTuple_SET_ITEM(domain_cpu, d, item);
    }
    if (domain_cpu == NULL)
        Py_CLEAR(domain_loads);
    if (domain_loads != NULL)
        answer = Py_BuildValue("(NddNNlN)", domain_loads, coefficient_of_variation(loads, counted),
                               coefficient_of_variation(per_cpu, domain_count),
                               int_tuple(threads, domain_count),
                               int_tuple(runnable, domain_count), crowded, domain_cpu);
done:
    PyMem_Free(sums);
    PyMem_Free(cpu_sums);
    PyMem_Free(threads);
    PyMem_Free(runnable);
    PyMem_Free(loads);
    PyMem_Free(per_cpu);
    return answer;
}

static PyObject *summarize_window(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *objects[7];
    static const char *names[7] = {"run", "lat", "base_run", "base_lat", "domain_of",
                                   "capacities", "span_ns"};
    static const char *formats[7] = {"q", "q", "q", "q", "i", "i", "q"};
    Py_buffer views[7];
    PyObject *span_object;
    long long span_ns = 0;
    int taken = 0, columns = 6;
    double share;
    PyObject *answer = NULL;

    if (!PyArg_ParseTuple(args, "OOOOOOOd:summarize_window", &objects[0], &objects[1],
                          &objects[2], &objects[3], &span_object, &objects[4], &objects[5],
                          &share))
        return NULL;
    /* One span for every thread (one process), or a column of them (the
       threads of several processes, each over its own window). */
    if (PyLong_Check(span_object)) {
        span_ns = PyLong_AsLongLong(span_object);
        if (span_ns == -1 && PyErr_Occurred())
            return NULL;
        if (span_ns <= 0) {
            PyErr_SetString(PyExc_ValueError, "summarize_window: span_ns must be positive");
            return NULL;
        }
    } else {
        objects[6] = span_object;
        columns = 7;
    }
    for (; taken < columns; taken++)
        if (get_column(objects[taken], &views[taken], formats[taken], formats[taken][0] == 'q'
                       ? 8 : 4, names[taken]) < 0)
            goto done;
    Py_ssize_t count = views[0].len / 8, domain_count = views[5].len / 4;
    for (int i = 1; i < columns; i++) {
        if (i != 5 && views[i].len / views[i].itemsize != count) {
            PyErr_SetString(PyExc_ValueError, "summarize_window: columns differ in length");
            goto done;
        }
    }
    if (domain_count < 1 || domain_count > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "summarize_window: need at least one domain");
        goto done;
    }
    answer = summarize(views[0].buf, views[1].buf, views[2].buf, views[3].buf, count,
                       (double)span_ns, columns == 7 ? views[6].buf : NULL, views[4].buf,
                       views[5].buf, (int)domain_count, share);
done:
    while (taken > 0)
        PyBuffer_Release(&views[--taken]);
    return answer;
}

/* An exact int that is a double exactly (|x| <= 2**53): 1, else 0. */
static int exact_int(PyObject *object, double *value)
{
    int overflow;

    if (!PyLong_CheckExact(object))
        return 0;
    long long v = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (overflow || v > (1LL << 53) || v < -(1LL << 53))
        return 0;
    *value = (double)v;
    return 1;
}

/* The views' fields domain_figures reads, by position (engine/model.py). */
enum { V_LOAD = 1, V_DOMAIN = 2, V_EXEC_NS = 5, V_WALL_NS = 6, V_RUNNABLE = 7, V_SLEEPS = 8,
       V_FIELDS = 9 };

static PyObject *domain_figures(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *threads, *sequence, *speeds = NULL, *got = NULL, *waited = NULL;
    PyTypeObject *view_type;
    Py_ssize_t count;
    double runnable_share, sleeps_limit, *sums = NULL;

    if (!PyArg_ParseTuple(args, "OnO!dd:domain_figures", &threads, &count, &PyType_Type,
                          &view_type, &runnable_share, &sleeps_limit))
        return NULL;
    if (count < 0 || count > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "domain_figures: bad domain count");
        return NULL;
    }
    sequence = PySequence_Fast(threads, "domain_figures: threads must be iterable");
    if (sequence == NULL)
        return NULL;
    sums = PyMem_Calloc(2 * count + 1, sizeof(double));     /* got, then waited */
    speeds = sums ? PyDict_New() : NULL;
    if (speeds == NULL)
        goto error;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    PyObject **items = PySequence_Fast_ITEMS(sequence);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *view = items[i];
        if (!Py_IS_TYPE(view, view_type) || PyTuple_GET_SIZE(view) <= V_FIELDS)
            goto unusual;
        PyObject *domain = PyTuple_GET_ITEM(view, V_DOMAIN);
        if (domain == Py_None)
            continue;
        if (!PyLong_CheckExact(domain))
            goto unusual;
        Py_ssize_t index = PyLong_AsSsize_t(domain);
        if (index == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            continue;               /* far out of range: in none of the domains */
        }
        double wall, spent;
        if (index < 0 || index >= count)
            continue;
        if (!exact_int(PyTuple_GET_ITEM(view, V_WALL_NS), &wall)
                || !exact_int(PyTuple_GET_ITEM(view, V_EXEC_NS), &spent))
            goto unusual;
        if (wall <= 0.0)
            continue;
        /* thread_speed: min(1.0, max(0.0, exec / wall)), int / int exact
         * in doubles here (both within 2**53: correctly rounded either way). */
        double speed = spent / wall;
        speed = speed > 0.0 ? speed : 0.0;
        speed = speed < 1.0 ? speed : 1.0;
        sums[index] += speed;
        PyObject *runnable = PyTuple_GET_ITEM(view, V_RUNNABLE);
        if (runnable == Py_None)
            continue;
        PyObject *load = PyTuple_GET_ITEM(view, V_LOAD);
        PyObject *sleeps = PyTuple_GET_ITEM(view, V_SLEEPS);
        if (!PyFloat_CheckExact(runnable) || !PyFloat_CheckExact(load)
                || (sleeps != Py_None && !PyFloat_CheckExact(sleeps)))
            goto unusual;
        double share = PyFloat_AS_DOUBLE(runnable), cpu = PyFloat_AS_DOUBLE(load);
        if (share >= runnable_share) {
            if (sleeps != Py_None && !(PyFloat_AS_DOUBLE(sleeps) < sleeps_limit))
                continue;
            PyObject *list = PyDict_GetItemWithError(speeds, domain);
            if (list == NULL) {
                if (PyErr_Occurred())
                    goto error;
                list = PyList_New(0);
                if (list == NULL || PyDict_SetItem(speeds, domain, list) < 0) {
                    Py_XDECREF(list);
                    goto error;
                }
                Py_DECREF(list);    /* the dict holds it */
            }
            PyObject *value = PyFloat_FromDouble(speed);
            if (value == NULL || PyList_Append(list, value) < 0) {
                Py_XDECREF(value);
                goto error;
            }
            Py_DECREF(value);
        } else if (share > cpu)
            sums[count + index] += share - cpu;
    }
    got = PyList_New(count);
    waited = got ? PyList_New(count) : NULL;
    for (Py_ssize_t d = 0; waited != NULL && d < count; d++) {
        PyObject *a = PyFloat_FromDouble(sums[d]), *b = PyFloat_FromDouble(sums[count + d]);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto error;
        }
        PyList_SET_ITEM(got, d, a);
        PyList_SET_ITEM(waited, d, b);
    }
    if (waited == NULL)
        goto error;
    PyMem_Free(sums);
    Py_DECREF(sequence);
    return Py_BuildValue("(NNN)", got, speeds, waited);
unusual:
    PyMem_Free(sums);
    Py_DECREF(sequence);
    Py_DECREF(speeds);
    Py_RETURN_NONE;
error:
    PyMem_Free(sums);
    Py_DECREF(sequence);
    Py_XDECREF(speeds);
    Py_XDECREF(got);
    Py_XDECREF(waited);
    return NULL;
}

static PyMethodDef window_methods[] = {
    {"summarize_window", summarize_window, METH_VARARGS,
     "summarize_window(run, lat, base_run, base_lat, span_ns, domain_of, capacities,\n"
     "                 runnable_share)\n"
     "    -> (domain_loads, thread_cv, spread, threads, runnable, crowded, domain_cpu)\n\n"
     "See engine/window.py."},
    {"domain_figures", domain_figures, METH_VARARGS,
     "domain_figures(threads, count, ThreadView, runnable_share, sleeps_per_second)\n"
     "    -> (got, speeds, waited) or None\n\n"
     "See engine/merging.py (_domain_figures)."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef window_module = {
    PyModuleDef_HEAD_INIT, "_window",
    "engine/window.py's summarize_window in C (optional).", -1, window_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__window(void)
{
    return PyModule_Create(&window_module);
}
