/*
 * _columns: the engine's passes over a planning round's thread columns in
 * one C pass (optional; engine/columns.py's Python passes are the
 * reference, and run whenever this module is missing or says None).
 *
 * grouping.py's usual round (every thread placed, the groups kept) made a
 * dozen C-level passes over every thread's fields: the input's checks
 * (distinct TIDs, finite loads of known types, known domains, the distinct
 * eligible sets), the loads' minimum, the CV of the loads (math.fsum
 * twice) and each domain's summed load (math.fsum per domain), the kept
 * assignment (dict(zip())), and auto counted each domain's threads and
 * looked for runnable and pinned ones.  Each pass is 10-30 ns a thread, a few
 * times that right after the loop's sleep; together ~0.3-0.6 ms at 1,024
 * threads (BENCHMARKS.md, issue 29).  Pure arithmetic, no OS call: it
 * belongs to the engine.
 *
 * column_figures(tids, loads, domains, eligibles, domain_count[, runnables, pinned])
 *     tids, loads, domains, eligibles   lists of equal length, one entry
 *                                       per thread (Columns' fields)
 *     domain_count                      the number of domains, >= 1
 *     runnables, pinned                 the views' runnable shares and
 *                                       pinned CPUs (lists, or None)
 * returns (distinct_eligibles, arriving, thread_cv, domain_loads,
 * domain_threads, kept, runnable_max, pinned) -- the set of the eligible
 * values, whether some thread has no domain (None), variation.py's
 * cv_of_floats of the loads, each domain's math.fsum of its threads'
 * loads (a list), each domain's number of threads (a list),
 * dict(zip(tids, domains)) when no thread arrives (else None), the
 * largest runnable share when all are floats and none NaN (else None),
 * and how many threads are pinned (None without the lists) -- for input
 * every check of columns.py
 * passes on plainly: at least one thread, TIDs ints (distinct), loads
 * floats, not negative (then they are their own effective loads) and
 * below 2^400 (LOAD_LIMIT), domains None or ints in range, eligibles
 * None or frozensets.
 * For anything else it returns None (the Python passes then run, and
 * name the first invalid thread or take the careful path), and so it does
 * when an exact sum would overflow (math.fsum raises there, or returns
 * inf: the Python passes do what they do).
 *
 * The sums are math.fsum's: Shewchuk's non-overlapping partials (the
 * algorithm math.fsum documents), then the partials added from the top
 * with the half-even correction, which makes the result the correctly
 * rounded sum -- the same float math.fsum gives, to the last bit
 * (tests/engine/test_column_figures.py holds it to math.fsum).  The sum
 * of all the loads is made from the domains' partials, not load by load:
 * the same exact sum, at a few additions instead of one per thread.  Built
 * with -ffp-contract=off (setup.py): a product fused into a sum would not
 * be Python's.
 *
 * Eligible sets are looked at once per object in a row: the controller
 * gives the threads of one answer one frozenset (balance/threads.py,
 * eligible_for).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* Loads from this on take the Python passes: below it no sum of 2^60 loads,
 * or of their squared deviations, can overflow, where math.fsum would raise
 * or give inf. */
#define LOAD_LIMIT 0x1p400

/* An exact running sum: non-overlapping partials in increasing magnitude. */
#define INLINE_PARTIALS 32
typedef struct {
    double *partials;
    Py_ssize_t count, room;
    double inline_partials[INLINE_PARTIALS];
} exact_sum;

static void exact_start(exact_sum *sum)
{
    sum->partials = sum->inline_partials;
    sum->count = 0;
    sum->room = INLINE_PARTIALS;
}

static void exact_free(exact_sum *sum)
{
    if (sum->partials != sum->inline_partials)
        PyMem_Free(sum->partials);
    sum->partials = sum->inline_partials;
}

/* Add the finite ``value``; 0 on success, -1 when an intermediate sum is
 * not finite (no exception set) or memory ran out (MemoryError set). */
static int exact_add(exact_sum *sum, double value)
{
    double x = value;
    Py_ssize_t kept = 0;

    for (Py_ssize_t j = 0; j < sum->count; j++) {
        double y = sum->partials[j];
        if (fabs(x) < fabs(y)) {
            double swap = x;
            x = y;
            y = swap;
        }
        double high = x + y;
        double rounded_y = high - x;
        double low = y - rounded_y;
        if (low != 0.0)
            sum->partials[kept++] = low;
        x = high;
    }
    sum->count = kept;
    if (x == 0.0)
        return 0;
    if (!isfinite(x))
        return -1;
    if (sum->count == sum->room) {
        Py_ssize_t room = 2 * sum->room;
        double *grown = PyMem_Malloc(sizeof(double) * room);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(grown, sum->partials, sizeof(double) * sum->count);
        exact_free(sum);
        sum->partials = grown;
        sum->room = room;
    }
    sum->partials[sum->count++] = x;
    return 0;
}

/* The correctly rounded value of the sum (round half to even). */
static double exact_result(const exact_sum *sum)
{
    Py_ssize_t n = sum->count;
    const double *p = sum->partials;
    double high = 0.0, low = 0.0;

    if (n == 0)
        return 0.0;
    high = p[--n];
    /* From the top down while the partials add exactly. */
    while (n > 0) {
        double x = high, y = p[--n];
        high = x + y;
        double rounded_y = high - x;
        low = y - rounded_y;
        if (low != 0.0)
            break;
    }
    /* ``low`` was rounded away half-way between two floats: the partials
     * below it, of its sign, tip it over (half-even would go the other way
     * without them). */
    if (n > 0 && ((low < 0.0 && p[n - 1] < 0.0) || (low > 0.0 && p[n - 1] > 0.0))) {
        double twice = low * 2.0;
        double x = high + twice;
        double back = x - high;
        if (twice == back)
            high = x;
    }
    return high;
}

/* The list of ``count`` floats ``values``, or NULL. */
static PyObject *float_list(const double *values, Py_ssize_t count)
{
    PyObject *list = PyList_New(count);

    for (Py_ssize_t i = 0; list != NULL && i < count; i++) {
        PyObject *item = PyFloat_FromDouble(values[i]);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyObject *int_list(const Py_ssize_t *values, Py_ssize_t count)
{
    PyObject *list = PyList_New(count);

    for (Py_ssize_t i = 0; list != NULL && i < count; i++) {
        PyObject *item = PyLong_FromSsize_t(values[i]);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* A dict of ``count`` items to be: presized where Python offers it (its
 * growing from 8 entries cost half of dict(zip()) at 10,000 threads). */
static PyObject *dict_for(Py_ssize_t count)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(count);
#else
    (void)count;
    return PyDict_New();
#endif
}

/* dict(zip(keys, values)) of two lists of one length, the keys distinct. */
static PyObject *zipped_dict(PyObject *keys, PyObject *values)
{
    Py_ssize_t count = PyList_GET_SIZE(keys);
    PyObject *made = dict_for(count);

    for (Py_ssize_t i = 0; made != NULL && i < count; i++)
        if (PyDict_SetItem(made, PyList_GET_ITEM(keys, i), PyList_GET_ITEM(values, i)) < 0)
            Py_CLEAR(made);
    return made;
}

/* The largest of ``shares`` (a list of ``count``) if every one is a float
 * and none NaN -- then no share is at least a number above it --, else
 * None (and None without the list). */
static PyObject *plain_max(PyObject *shares, Py_ssize_t count)
{
    double largest = -INFINITY;

    if (shares == Py_None || !PyList_Check(shares) || PyList_GET_SIZE(shares) != count)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *share = PyList_GET_ITEM(shares, i);
        if (!PyFloat_CheckExact(share) || isnan(PyFloat_AS_DOUBLE(share)))
            Py_RETURN_NONE;
        if (PyFloat_AS_DOUBLE(share) > largest)
            largest = PyFloat_AS_DOUBLE(share);
    }
    return PyFloat_FromDouble(largest);
}

/* How many of ``values`` (a list of ``count``) are not None; None without
 * the list. */
static PyObject *not_none(PyObject *values, Py_ssize_t count)
{
    Py_ssize_t found = 0;

    if (values == Py_None || !PyList_Check(values) || PyList_GET_SIZE(values) != count)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < count; i++)
        found += PyList_GET_ITEM(values, i) != Py_None;
    return PyLong_FromSsize_t(found);
}

/* Whether the TIDs (exact ints) are distinct: one set of them. */
static int distinct_tids(PyObject *tids, int *distinct)
{
    PyObject *seen = PySet_New(tids);

    if (seen == NULL)
        return -1;
    *distinct = PySet_GET_SIZE(seen) == PyList_GET_SIZE(tids);
    Py_DECREF(seen);
    return 0;
}

static PyObject *column_figures(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *tids, *loads, *domains, *eligibles, *distinct = NULL, *last_eligible = NULL;
    PyObject *loads_list = NULL, *threads_list = NULL, *runnables = Py_None, *pinned = Py_None;
    int domain_count, arriving = 0, ascending = 1, unusual = 1;
    double *values = NULL, thread_cv = 0.0, *domain_loads = NULL;
    exact_sum total, squares, unplaced, *sums = NULL;
    Py_ssize_t *threads = NULL;
    long long last_tid = 0;

    if (!PyArg_ParseTuple(args, "O!O!O!O!i|OO:column_figures", &PyList_Type, &tids,
                          &PyList_Type, &loads, &PyList_Type, &domains, &PyList_Type,
                          &eligibles, &domain_count, &runnables, &pinned))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(tids);
    if (n == 0 || domain_count < 1 || PyList_GET_SIZE(loads) != n
            || PyList_GET_SIZE(domains) != n || PyList_GET_SIZE(eligibles) != n)
        Py_RETURN_NONE;
    exact_start(&total);
    exact_start(&squares);
    exact_start(&unplaced);
    values = PyMem_Malloc(sizeof(double) * n);
    sums = PyMem_Malloc(sizeof(exact_sum) * domain_count);
    for (int d = 0; sums != NULL && d < domain_count; d++)
        exact_start(&sums[d]);      /* before any exit: the cleanup frees them */
    threads = PyMem_Calloc(domain_count, sizeof(Py_ssize_t));
    domain_loads = PyMem_Malloc(sizeof(double) * domain_count);
    distinct = PySet_New(NULL);
    if (values == NULL || sums == NULL || threads == NULL || domain_loads == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (distinct == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *tid = PyList_GET_ITEM(tids, i), *load = PyList_GET_ITEM(loads, i);
        PyObject *domain = PyList_GET_ITEM(domains, i), *eligible = PyList_GET_ITEM(eligibles, i);
        int overflow;

        if (!PyLong_CheckExact(tid) || !PyFloat_CheckExact(load))
            goto done;
        long long tid_value = PyLong_AsLongLongAndOverflow(tid, &overflow);
        if (overflow)
            goto done;
        if (i > 0 && tid_value <= last_tid)
            ascending = 0;
        last_tid = tid_value;
        double x = PyFloat_AS_DOUBLE(load);
        if (!(x >= 0.0 && x < LOAD_LIMIT))
            goto done;          /* invalid, a negative load counted as 0, or huge */
        values[i] = x;
        if (domain == Py_None) {
            arriving = 1;
            if (exact_add(&unplaced, x) < 0)
                goto done;
        }
        else {
            if (!PyLong_CheckExact(domain))
                goto done;
            long index = PyLong_AsLongAndOverflow(domain, &overflow);
            if (overflow || index < 0 || index >= domain_count)
                goto done;
            if (exact_add(&sums[index], x) < 0)
                goto done;
            threads[index]++;
        }
        /* Threads share their eligible set's object, mostly: one look each. */
        if (eligible != last_eligible) {
            if (eligible != Py_None && !PyFrozenSet_CheckExact(eligible))
                goto done;
            if (PySet_Add(distinct, eligible) < 0)
                goto done;
            last_eligible = eligible;
        }
    }
    if (!ascending) {
        int unique;
        if (distinct_tids(tids, &unique) < 0)
            goto done;
        if (!unique)
            goto done;
    }
    /* The sum of every load: of the domains' exact sums (and the
     * unplaced threads'), partial by partial -- exact too. */
    for (int d = 0; d <= domain_count; d++) {
        exact_sum *part = d < domain_count ? &sums[d] : &unplaced;
        for (Py_ssize_t j = 0; j < part->count; j++)
            if (exact_add(&total, part->partials[j]) < 0)
                goto done;
    }
    /* variation.py's cv_of_floats. */
    if (n >= 2) {
        double mean = exact_result(&total) / (double)n;
        if (mean > 0.0) {
            for (Py_ssize_t i = 0; i < n; i++) {
                double deviation = values[i] - mean;
                double square = deviation * deviation;
                if (!isfinite(square) || exact_add(&squares, square) < 0)
                    goto done;
            }
            thread_cv = sqrt(exact_result(&squares) / (double)n) / mean;
        }
    }
    for (int d = 0; d < domain_count; d++)
        domain_loads[d] = exact_result(&sums[d]);
    unusual = 0;
done:
    if (sums != NULL)
        for (int d = 0; d < domain_count; d++)
            exact_free(&sums[d]);
    exact_free(&total);
    exact_free(&squares);
    exact_free(&unplaced);
    PyObject *result = NULL;
    if (!unusual) {
        PyObject *kept = arriving ? Py_NewRef(Py_None) : zipped_dict(tids, domains);
        PyObject *largest = kept ? plain_max(runnables, n) : NULL;
        PyObject *pinned_count = largest ? not_none(pinned, n) : NULL;
        loads_list = pinned_count ? float_list(domain_loads, domain_count) : NULL;
        threads_list = loads_list ? int_list(threads, domain_count) : NULL;
        if (threads_list != NULL)
            result = Py_BuildValue("(OOdNNNNN)", distinct, arriving ? Py_True : Py_False,
                                   thread_cv, loads_list, threads_list, kept, largest,
                                   pinned_count);
        else {
            Py_XDECREF(loads_list);
            Py_XDECREF(pinned_count);
            Py_XDECREF(largest);
            Py_XDECREF(kept);
        }
    }
    else if (!PyErr_Occurred())
        result = Py_NewRef(Py_None);
    else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();          /* a value that cannot be hashed: the Python passes say so */
        result = Py_NewRef(Py_None);
    }
    Py_XDECREF(distinct);
    PyMem_Free(values);
    PyMem_Free(sums);
    PyMem_Free(threads);
    PyMem_Free(domain_loads);
    return result;
}

static PyMethodDef columns_methods[] = {
    {"column_figures", column_figures, METH_VARARGS,
     "column_figures(tids, loads, domains, eligibles, domain_count[, runnables, pinned])\n"
     "    -> (distinct_eligibles, arriving, thread_cv, domain_loads, domain_threads,"
     " kept, runnable_max, pinned) or None\n\nSee engine/columns.py (ColumnFigures)."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef columns_module = {
    PyModuleDef_HEAD_INIT, "_columns",
    "engine/columns.py's passes over a round's thread columns in C (optional).", -1,
    columns_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__columns(void)
{
    return PyModule_Create(&columns_module);
}
