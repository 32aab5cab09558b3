/*
 * _rounds: a full round's per-thread passes in C (optional).
 *
 * A full round (controller.py) measures every thread of its targets over
 * the load window and hands the policy a view of each.  In Python those
 * passes cost more than the reads they follow: at 1,024 threads ~1.8 ms
 * of loads and ~1 ms of views and sums beside ~2.6 ms of schedstat reads
 * (issue 29, BENCHMARKS.md).  Here they are one C pass each, with exactly
 * the arithmetic of their Python versions, which stay the reference
 * (balance/threads.py, speedstep.py) and run when this module is not
 * built; tests run both on the same threads.
 *
 * The tracked threads are balance/threads.py's TrackedThread, a class with
 * __slots__: their slots are read and written at the offsets Python's own
 * member descriptors use (looked up once, at the first call with that
 * type), and through the ordinary attribute protocol for any other object.
 *
 * measure_threads(threads, pid, sample_threads, now, base_wall, base_threads,
 *                 runnable_share, TrackedThread, ThreadTimes)
 *     loads.py's LoadWindow._measure_threads: for each (tid, times) of the sample, the
 *     tracked thread (pid, tid) gets its CPU time over the last round and,
 *     over the load window (from the base sample, or from when it was first
 *     seen), its CPU received, runnable share and load (demand, engine/
 *     window.py).  Returns (measured, [TIDs not tracked or now naming
 *     another thread], done): ``done`` items of the sample were taken; from
 *     the first whose counters are not plain ints (|x| < 2**62), which is
 *     left as it was, the Python pass goes on.
 *
 * measure_columns(threads, now, run, lat, base_wall, base_run, base_lat,
 *                 runnable_share, TrackedThread)
 *     The same for a sample read as columns (platform/columns.py): ``threads``
 *     the tracked threads in the columns' order (loads.py checked they are
 *     the sample's), ``run`` and ``lat`` their times (array('q')), and
 *     ``base_run``/``base_lat`` the window's base sample's, when it holds the
 *     same threads in the same order (else None: each thread is measured
 *     from when it was first seen).  Returns how many threads, from the
 *     first, it measured: from the first whose counters are not plain ints
 *     (or that is not a TrackedThread), left as it was, the Python pass goes
 *     on.
 *
 * thread_views(threads, ThreadView, runnable_share)
 *     speedstep.py's view pass: of ``threads`` (TrackedThreads), those the
 *     policy decides on (measured, movable, with a domain they may use) and
 *     a ThreadView of each without switching rates; and the count of their
 *     always-runnable threads per domain.  Returns (measured, views,
 *     {domain: runnable threads}, fields): ``fields`` the views' tid, load,
 *     domain, eligible, runnable and pinned_cpu as lists (the engine's
 *     columns: engine/model.py, ThreadViews); or None when a value is not
 *     of the kind the fast pass knows (the Python pass then runs; nothing
 *     is changed).
 *
 * received(threads, domain_count)
 *     loads.py's LoadWindow.received_all: the CPU the threads received in each domain
 *     (summed in order, as Python adds them) and, last, by the movable
 *     threads with a domain they may use that are in none yet; or None as
 *     above.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <string.h>

#include "../platform/_slots.h"

#include "_tracked.h"

/* One thread of _measure_threads: 1 measured, 0 unknown, 2 not plain ints
 * (nothing changed: the Python pass takes it from here), -1 error. */
static int measure_one(PyObject *thread, int fast, PyObject *times, PyTypeObject *times_type,
                       PyObject *now_obj, long long now, long long base_wall,
                       PyObject *base_threads, PyObject *tid, double runnable_share,
                       shared_int *wall_ns)
{
    PyObject *start = NULL, *times_start = NULL, *run_obj = NULL, *lat_obj = NULL;
    PyObject *prev_run_obj = NULL, *prev_wall_obj = NULL, *first = NULL, *old = NULL;
    PyObject *old_start = NULL, *old_run_obj = NULL, *old_lat_obj = NULL;
    long long run_ns, prev_run, prev_wall, first_wall, old_wall, old_run, old_lat = 0;
    long long lat_ns = 0;
    int status = -1, same, from_base = 0, have_lat, have_old_lat;

    /* Everything read and checked first: nothing is changed unless all is plain. */
    start = get_slot(thread, fast, S_START);
    times_start = start ? times_field(times, times_type, T_START, str_start) : NULL;
    if (times_start == NULL)
        goto done;
    same = PyObject_RichCompareBool(start, times_start, Py_EQ);
    if (same <= 0) {
        status = same;              /* 0: a TID now naming another thread */
        goto done;
    }
    run_obj = times_field(times, times_type, T_RUN, str_run_ns);
    lat_obj = run_obj ? times_field(times, times_type, T_LAT, str_lat_ns) : NULL;
    prev_run_obj = lat_obj ? get_slot(thread, fast, S_PREV_RUN) : NULL;
    prev_wall_obj = prev_run_obj ? get_slot(thread, fast, S_PREV_WALL) : NULL;
    first = prev_wall_obj ? get_slot(thread, fast, S_FIRST) : NULL;
    if (first == NULL)
        goto done;
    old = PyDict_GetItemWithError(base_threads, tid);
    if (old == NULL && PyErr_Occurred())
        goto done;
    Py_XINCREF(old);
    status = 2;
    if (!PyTuple_CheckExact(first) || PyTuple_GET_SIZE(first) != 3
            || !plain(run_obj, &run_ns) || !plain(prev_run_obj, &prev_run)
            || !plain(prev_wall_obj, &prev_wall) || !plain_or_none(lat_obj, &lat_ns, &have_lat)
            || !plain(PyTuple_GET_ITEM(first, 0), &first_wall))
        goto done;
    if (old != NULL && first_wall < base_wall && base_wall < now) {
        old_start = times_field(old, times_type, T_START, str_start);
        from_base = old_start ? PyObject_RichCompareBool(old_start, times_start, Py_EQ) : -1;
        if (from_base < 0)
            goto failed;
    }
    if (from_base) {
        old_wall = base_wall;
        old_run_obj = times_field(old, times_type, T_RUN, str_run_ns);
        old_lat_obj = old_run_obj ? times_field(old, times_type, T_LAT, str_lat_ns) : NULL;
    } else {
        old_wall = first_wall;
        old_run_obj = Py_NewRef(PyTuple_GET_ITEM(first, 1));
        old_lat_obj = Py_NewRef(PyTuple_GET_ITEM(first, 2));
    }
    if (old_lat_obj == NULL)
        goto failed;
    if (!plain(old_run_obj, &old_run) || !plain_or_none(old_lat_obj, &old_lat, &have_old_lat))
        goto done;
    status = set_measured(thread, fast, now_obj, now, Py_NewRef(run_obj), run_ns, prev_run,
                          prev_wall, old_wall, old_run, have_lat && have_old_lat,
                          lat_ns - old_lat, runnable_share, wall_ns);
    goto done;
failed:
    status = -1;
done:
    Py_XDECREF(old_lat_obj);
    Py_XDECREF(old_run_obj);
    Py_XDECREF(old_start);
    Py_XDECREF(old);
    Py_XDECREF(first);
    Py_XDECREF(prev_wall_obj);
    Py_XDECREF(prev_run_obj);
    Py_XDECREF(lat_obj);
    Py_XDECREF(run_obj);
    Py_XDECREF(times_start);
    Py_XDECREF(start);
    return status;
}

static PyObject *measure_threads(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *threads, *pid, *sample_threads, *now_obj, *base_wall_obj, *base_threads;
    PyTypeObject *thread_type, *times_type;
    double runnable_share;
    long long now, base_wall;

    if (!PyArg_ParseTuple(args, "O!OO!OOO!dO!O!:measure_threads", &PyDict_Type, &threads,
                          &pid, &PyDict_Type, &sample_threads, &now_obj, &base_wall_obj,
                          &PyDict_Type, &base_threads, &runnable_share, &PyType_Type,
                          &thread_type, &PyType_Type, &times_type))
        return NULL;
    PyObject *unknown = PyList_New(0);
    if (unknown == NULL)
        return NULL;
    Py_ssize_t position = 0, measured = 0, done = 0;
    if (!plain(now_obj, &now) || !plain(base_wall_obj, &base_wall))
        return Py_BuildValue("(nNn)", measured, unknown, done);
    int fast = learn_slots(thread_type);
    if (fast < 0) {
        Py_DECREF(unknown);
        return NULL;
    }
    PyObject *tid, *times;
    shared_int wall_ns = {0, NULL};
    while (PyDict_Next(sample_threads, &position, &tid, &times)) {
        PyObject *key = PyTuple_Pack(2, pid, tid);
        PyObject *thread = key ? PyDict_GetItemWithError(threads, key) : NULL;
        Py_XDECREF(key);
        int status = 0;
        if (thread == NULL && (key == NULL || PyErr_Occurred()))
            status = -1;
        else if (thread != NULL) {
            Py_INCREF(thread);
            Py_INCREF(tid);
            Py_INCREF(times);
            status = measure_one(thread, fast && Py_IS_TYPE(thread, thread_type), times,
                                 times_type, now_obj, now, base_wall, base_threads, tid,
                                 runnable_share, &wall_ns);
            Py_DECREF(times);
            Py_DECREF(tid);
            Py_DECREF(thread);
        }
        if (status < 0) {
            Py_XDECREF(wall_ns.object);
            Py_DECREF(unknown);
            return NULL;
        }
        if (status == 2)
            break;                  /* the Python pass goes on from this thread */
        done++;
        if (status == 1)
            measured++;
        else if (PyList_Append(unknown, tid) < 0) {
            Py_XDECREF(wall_ns.object);
            Py_DECREF(unknown);
            return NULL;
        }
    }
    Py_XDECREF(wall_ns.object);
    return Py_BuildValue("(nNn)", measured, unknown, done);
}

/* The views' fields thread_views gives as columns too (engine/model.py,
 * ThreadViews.fields): tid, load, domain, eligible, runnable, pinned_cpu. */
#define FIELD_COUNT 6
static const int view_field[FIELD_COUNT] = {0, 1, 2, 3, 7, 4};

static PyObject *thread_views(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *threads, *sequence, *measured = NULL, *views = NULL, *runnable = NULL;
    PyObject *fields[FIELD_COUNT] = {NULL};
    PyTypeObject *view_type;
    double runnable_share;
    Py_ssize_t made = 0;

    if (!PyArg_ParseTuple(args, "OO!d:thread_views", &threads, &PyType_Type, &view_type,
                          &runnable_share))
        return NULL;
    if (!PyType_IsSubtype(view_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "thread_views: ThreadView must be a tuple type");
        return NULL;
    }
    sequence = PySequence_Fast(threads, "thread_views: threads must be iterable");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(sequence);
    PyObject **items = PySequence_Fast_ITEMS(sequence);
    /* Sized for every thread, filled in order, cut to the views made. */
    measured = PyList_New(count);
    views = measured ? PyList_New(count) : NULL;
    runnable = views ? PyDict_New() : NULL;
    if (runnable == NULL)
        goto error;
    for (int f = 0; f < FIELD_COUNT; f++)
        if ((fields[f] = PyList_New(count)) == NULL)
            goto error;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *thread = items[i];
        if (learn_slots(Py_TYPE(thread)) != 1 || Py_TYPE(thread) != slots.type)
            goto unusual;
        PyObject *load = BORROWED(thread, S_LOAD), *eligible = BORROWED(thread, S_ELIGIBLE);
        PyObject *unmovable = BORROWED(thread, S_UNMOVABLE);
        PyObject *share = BORROWED(thread, S_RUNNABLE), *domain = BORROWED(thread, S_DOMAIN);
        if (load == NULL || eligible == NULL || unmovable == NULL || share == NULL
                || domain == NULL || BORROWED(thread, S_TID) == NULL
                || BORROWED(thread, S_PINNED_CPU) == NULL || BORROWED(thread, S_EXEC_NS) == NULL
                || BORROWED(thread, S_WALL_NS) == NULL)
            goto unusual;
        if (load == Py_None)
            continue;
        if (unmovable != Py_False) {
            if (unmovable == Py_True)
                continue;
            goto unusual;
        }
        if (!PyFrozenSet_CheckExact(eligible) || PySet_GET_SIZE(eligible) == 0) {
            if (eligible == Py_None || (PyFrozenSet_CheckExact(eligible)))
                continue;       /* no domain it may use: left alone */
            goto unusual;
        }
        PyObject *view = view_type->tp_alloc(view_type, 10);
        if (view == NULL)
            goto error;
        PyTuple_SET_ITEM(view, 0, Py_NewRef(BORROWED(thread, S_TID)));
        PyTuple_SET_ITEM(view, 1, Py_NewRef(load));
        PyTuple_SET_ITEM(view, 2, Py_NewRef(domain));
        PyTuple_SET_ITEM(view, 3, Py_NewRef(eligible));
        PyTuple_SET_ITEM(view, 4, Py_NewRef(BORROWED(thread, S_PINNED_CPU)));
        PyTuple_SET_ITEM(view, 5, Py_NewRef(BORROWED(thread, S_EXEC_NS)));
        PyTuple_SET_ITEM(view, 6, Py_NewRef(BORROWED(thread, S_WALL_NS)));
        PyTuple_SET_ITEM(view, 7, Py_NewRef(share));
        PyTuple_SET_ITEM(view, 8, Py_NewRef(Py_None));
        PyTuple_SET_ITEM(view, 9, Py_NewRef(Py_None));
        /* Ints, floats, None and a frozenset of domain indices, no
         * __dict__: no reference cycle can pass through a view, and the
         * cyclic GC need not walk 10,000 of them (as _steady.c's
         * ThreadTimes; CPython untracks a tuple itself only when every
         * item is untracked, and a frozenset never is). */
        if (view_type->tp_dictoffset == 0)
            PyObject_GC_UnTrack(view);
        PyList_SET_ITEM(views, made, view);
        PyList_SET_ITEM(measured, made, Py_NewRef(thread));
        for (int f = 0; f < FIELD_COUNT; f++)
            PyList_SET_ITEM(fields[f], made, Py_NewRef(PyTuple_GET_ITEM(view, view_field[f])));
        made++;
        /* (thread.runnable or 0) >= RUNNABLE_SHARE */
        int is_runnable;
        if (share == Py_None)
            is_runnable = 0.0 >= runnable_share;
        else if (PyFloat_CheckExact(share))
            is_runnable = PyFloat_AS_DOUBLE(share) >= runnable_share;
        else
            goto unusual;
        if (is_runnable) {
            PyObject *counted = PyDict_GetItemWithError(runnable, domain);
            long so_far = 0;
            if (counted == NULL && PyErr_Occurred())
                goto error;
            if (counted != NULL)
                so_far = PyLong_AsLong(counted);
            PyObject *next = PyLong_FromLong(so_far + 1);
            if (next == NULL || PyDict_SetItem(runnable, domain, next) < 0) {
                Py_XDECREF(next);
                goto error;
            }
            Py_DECREF(next);
        }
    }
    Py_DECREF(sequence);
    if (PyList_SetSlice(measured, made, count, NULL) < 0
            || PyList_SetSlice(views, made, count, NULL) < 0)
        goto failed;
    for (int f = 0; f < FIELD_COUNT; f++)
        if (PyList_SetSlice(fields[f], made, count, NULL) < 0)
            goto failed;
    return Py_BuildValue("(NNN(NNNNNN))", measured, views, runnable, fields[0], fields[1],
                         fields[2], fields[3], fields[4], fields[5]);
unusual:
    Py_DECREF(sequence);
    Py_DECREF(measured);
    Py_DECREF(views);
    Py_DECREF(runnable);
    for (int f = 0; f < FIELD_COUNT; f++)
        Py_DECREF(fields[f]);
    Py_RETURN_NONE;
error:
    Py_DECREF(sequence);
failed:
    Py_XDECREF(measured);
    Py_XDECREF(views);
    Py_XDECREF(runnable);
    for (int f = 0; f < FIELD_COUNT; f++)
        Py_XDECREF(fields[f]);
    return NULL;
}

static PyObject *received(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *threads, *sequence;
    Py_ssize_t domain_count;

    if (!PyArg_ParseTuple(args, "On:received", &threads, &domain_count))
        return NULL;
    if (domain_count < 0 || domain_count > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "received: bad domain count");
        return NULL;
    }
    sequence = PySequence_Fast(threads, "received: threads must be iterable");
    if (sequence == NULL)
        return NULL;
    double *sums = PyMem_Calloc(domain_count + 1, sizeof(double));
    if (sums == NULL) {
        Py_DECREF(sequence);
        return PyErr_NoMemory();
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(sequence);
    PyObject **items = PySequence_Fast_ITEMS(sequence), *result = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *thread = items[i];
        if (learn_slots(Py_TYPE(thread)) != 1 || Py_TYPE(thread) != slots.type)
            goto unusual;
        PyObject *domain = BORROWED(thread, S_DOMAIN), *cpu = BORROWED(thread, S_CPU);
        if (domain == NULL || cpu == NULL)
            goto unusual;
        if (cpu == Py_None)
            continue;
        if (!PyFloat_CheckExact(cpu))
            goto unusual;
        if (domain == Py_None) {
            /* In none yet, where the OS runs it; not an outsider's (allowed
             * only CPUs outside the domains) nor someone else's placement. */
            PyObject *eligible = BORROWED(thread, S_ELIGIBLE);
            PyObject *unmovable = BORROWED(thread, S_UNMOVABLE);
            if (eligible == NULL || !PyFrozenSet_CheckExact(eligible)
                    || (unmovable != Py_False && unmovable != Py_True))
                goto unusual;
            if (PySet_GET_SIZE(eligible) > 0 && unmovable == Py_False)
                sums[domain_count] += PyFloat_AS_DOUBLE(cpu);
            continue;
        }
        if (!PyLong_CheckExact(domain))
            goto unusual;
        Py_ssize_t index = PyLong_AsSsize_t(domain);
        if (index < 0 || index >= domain_count) {
            PyErr_Clear();
            goto unusual;
        }
        sums[index] += PyFloat_AS_DOUBLE(cpu);
    }
    result = PyList_New(domain_count + 1);
    for (Py_ssize_t d = 0; result != NULL && d <= domain_count; d++) {
        PyObject *sum = PyFloat_FromDouble(sums[d]);
        if (sum == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, d, sum);
    }
    PyMem_Free(sums);
    Py_DECREF(sequence);
    return result;
unusual:
    PyMem_Free(sums);
    Py_DECREF(sequence);
    Py_RETURN_NONE;
}

static PyObject *measure_columns(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *threads, *now_obj, *base_wall_obj, *objects[4], *sequence;
    PyTypeObject *thread_type;
    Py_buffer views[4];
    double runnable_share;
    long long now, base_wall;
    Py_ssize_t done = 0, count, i;
    int got = 0;
    shared_int wall_ns = {0, NULL};

    if (!PyArg_ParseTuple(args, "OOOOOOOdO!:measure_columns", &threads, &now_obj,
                          &objects[0], &objects[1], &base_wall_obj, &objects[2], &objects[3],
                          &runnable_share, &PyType_Type, &thread_type))
        return NULL;
    sequence = PySequence_Fast(threads, "measure_columns: threads must be a sequence");
    if (sequence == NULL)
        return NULL;
    for (; got < 4; got++) {
        if (got < 2 && objects[got] == Py_None) {
            PyErr_SetString(PyExc_TypeError, "measure_columns: run and lat must be columns");
            goto error;
        }
        if (q_column(objects[got], &views[got]) < 0)
            goto error;
    }
    count = PySequence_Fast_GET_SIZE(sequence);
    if (views[0].len != 8 * count || views[1].len != 8 * count
            || (views[2].buf == NULL) != (views[3].buf == NULL)
            || (views[2].buf != NULL && (views[2].len != 8 * count
                                          || views[3].len != 8 * count))) {
        PyErr_SetString(PyExc_ValueError, "measure_columns: columns differ in length");
        goto error;
    }
    if (!plain(now_obj, &now) || !plain(base_wall_obj, &base_wall)
            || learn_slots(thread_type) != 1)
        goto finished;
    const long long *run = views[0].buf, *lat = views[1].buf;
    const long long *base_run = views[2].buf, *base_lat = views[3].buf;
    PyObject **items = PySequence_Fast_ITEMS(sequence);
    for (i = 0; i < count; i++, done++) {
        PyObject *thread = items[i];
        if (!Py_IS_TYPE(thread, thread_type) || slots.type != thread_type)
            break;
        PyObject *prev_run_obj = BORROWED(thread, S_PREV_RUN);
        PyObject *prev_wall_obj = BORROWED(thread, S_PREV_WALL);
        PyObject *first = BORROWED(thread, S_FIRST);
        long long prev_run, prev_wall, first_wall, old_wall, old_run, old_lat = 0;
        int have_old_lat = 1;
        if (prev_run_obj == NULL || prev_wall_obj == NULL || first == NULL
                || !PyTuple_CheckExact(first) || PyTuple_GET_SIZE(first) != 3
                || !PLAIN_VALUE(run[i]) || !PLAIN_VALUE(lat[i])
                || !plain(prev_run_obj, &prev_run) || !plain(prev_wall_obj, &prev_wall)
                || !plain(PyTuple_GET_ITEM(first, 0), &first_wall))
            break;
        if (base_run != NULL && first_wall < base_wall && base_wall < now) {
            old_wall = base_wall;
            old_run = base_run[i];
            old_lat = base_lat[i];
            if (!PLAIN_VALUE(old_run) || !PLAIN_VALUE(old_lat))
                break;
        } else {            /* first seen after the base sample (or this is the only one) */
            old_wall = first_wall;
            if (!plain(PyTuple_GET_ITEM(first, 1), &old_run)
                    || !plain_or_none(PyTuple_GET_ITEM(first, 2), &old_lat, &have_old_lat))
                break;
        }
        if (set_measured(thread, 1, now_obj, now, PyLong_FromLongLong(run[i]), run[i], prev_run,
                         prev_wall, old_wall, old_run, have_old_lat, lat[i] - old_lat,
                         runnable_share, &wall_ns) < 0)
            goto error;
    }
finished:
    Py_XDECREF(wall_ns.object);
    while (got > 0)
        if (views[--got].buf != NULL)
            PyBuffer_Release(&views[got]);
    Py_DECREF(sequence);
    return PyLong_FromSsize_t(done);
error:
    Py_XDECREF(wall_ns.object);
    while (got > 0)
        if (views[--got].buf != NULL)
            PyBuffer_Release(&views[got]);
    Py_DECREF(sequence);
    return NULL;
}

static PyMethodDef rounds_methods[] = {
    {"measure_threads", measure_threads, METH_VARARGS,
     "measure_threads(threads, pid, sample_threads, now, base_wall, base_threads,\n"
     "                runnable_share, TrackedThread, ThreadTimes) -> (measured, unknown)"},
    {"measure_columns", measure_columns, METH_VARARGS,
     "measure_columns(threads, now, run, lat, base_wall, base_run, base_lat,\n"
     "                runnable_share, TrackedThread) -> threads measured"},
    {"thread_views", thread_views, METH_VARARGS,
     "thread_views(threads, ThreadView, runnable_share)\n"
     "    -> (measured, views, runnable, fields) or None"},
    {"received", received, METH_VARARGS,
     "received(threads, domain_count) -> [CPUs per domain..., CPUs in none] or None"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef rounds_module = {
    PyModuleDef_HEAD_INIT, "_rounds",
    "A full round's per-thread passes in C (optional; see balance/threads.py).",
    -1, rounds_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__rounds(void)
{
    if (str_start == NULL) {
        for (int i = 0; i < SLOT_COUNT; i++)
            if ((slot_strings[i] = PyUnicode_InternFromString(slot_names[i])) == NULL)
                return NULL;
        str_start = PyUnicode_InternFromString("start");
        str_run_ns = PyUnicode_InternFromString("run_ns");
        str_lat_ns = PyUnicode_InternFromString("lat_ns");
        if (!str_start || !str_run_ns || !str_lat_ns)
            return NULL;
    }
    return PyModule_Create(&rounds_module);
}
