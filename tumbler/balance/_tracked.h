/*
 * _tracked.h - balance/_rounds.c's access to TrackedThread and its counters:
 * the slots its passes read and write, the plain-counter checks and the
 * load arithmetic that the measure passes share (over a sample's mapping
 * and over its columns), so that both give the numbers of loads.py's
 * LoadWindow._py_measure_threads.
 *
 * Included by _rounds.c only: a header of static functions (as
 * ../platform/_slots.h), not a module of its own.
 */
#ifndef TUMBLER_TRACKED_H
#define TUMBLER_TRACKED_H

#include <Python.h>
#include <string.h>

#include "../platform/_slots.h"

/* TrackedThread's slots _rounds.c uses, in this order. */
enum { S_START, S_FIRST, S_PREV_WALL, S_PREV_RUN, S_EXEC_NS, S_WALL_NS, S_LOAD, S_CPU,
       S_RUNNABLE, S_DOMAIN, S_ELIGIBLE, S_UNMOVABLE, S_PINNED_CPU, S_TID, SLOT_COUNT };
static const char *slot_names[SLOT_COUNT] = {
    "start", "first", "prev_wall", "prev_run", "exec_ns", "wall_ns", "load", "cpu",
    "runnable", "domain", "eligible", "unmovable", "pinned_cpu", "tid"};
static PyObject *slot_strings[SLOT_COUNT];
static PyObject *str_start, *str_run_ns, *str_lat_ns;

/* TrackedThread's offsets, learnt once (../platform/_slots.h). */
static struct slot_cache slots;

/* Learn ``type``'s slot offsets: 1 done, 0 not a type with those object
 * slots (the attribute protocol is used then). */
static int learn_slots(PyTypeObject *type)
{
    return slots_learn(&slots, type, slot_strings, SLOT_COUNT);
}

/* A new reference to slot ``i`` of ``thread``; NULL with an exception if unset. */
static PyObject *get_slot(PyObject *thread, int fast, int i)
{
    if (!fast)
        return PyObject_GetAttr(thread, slot_strings[i]);
    PyObject *value = slot_at(&slots, thread, i);
    if (value == NULL) {
        PyErr_SetObject(PyExc_AttributeError, slot_strings[i]);
        return NULL;
    }
    return Py_NewRef(value);
}

/* Set slot ``i`` of ``thread`` to ``value`` (a new reference, stolen). */
static int set_slot(PyObject *thread, int fast, int i, PyObject *value)
{
    if (value == NULL)
        return -1;
    if (!fast) {
        int status = PyObject_SetAttr(thread, slot_strings[i], value);
        Py_DECREF(value);
        return status;
    }
    PyObject **place = (PyObject **)((char *)thread + slots.offsets[i]);
    PyObject *old = *place;
    *place = value;
    Py_XDECREF(old);
    return 0;
}

/* Integers of ns counters: |x| < 2**62 here, so their differences fit. */
#define COUNTER_LIMIT (1LL << 62)

/* a / b as Python's int / int: correctly rounded, exact for |a|, |b| <= 2**53. */
static PyObject *true_divide(long long a, long long b)
{
    const long long exact = 1LL << 53;

    if (a <= exact && a >= -exact && b <= exact && b >= -exact)
        return PyFloat_FromDouble((double)a / (double)b);
    PyObject *x = PyLong_FromLongLong(a), *y = x ? PyLong_FromLongLong(b) : NULL;
    PyObject *quotient = y ? PyNumber_TrueDivide(x, y) : NULL;
    Py_XDECREF(y);
    Py_XDECREF(x);
    return quotient;
}

/* Field ``index`` (or attribute ``name``) of a sample's times. */
static PyObject *times_field(PyObject *times, PyTypeObject *times_type, Py_ssize_t index,
                             PyObject *name)
{
    if (Py_IS_TYPE(times, times_type) && PyTuple_GET_SIZE(times) > index)
        return Py_NewRef(PyTuple_GET_ITEM(times, index));
    return PyObject_GetAttr(times, name);
}

/* ThreadTimes' fields: tid, start, name, run_ns, usr_ns, sys_ns, lat_ns, ... */
#define T_START 1
#define T_RUN 3
#define T_LAT 6

/* A plain counter: an exact int within COUNTER_LIMIT (1), anything else (0). */
static int plain(PyObject *object, long long *value)
{
    int overflow;

    if (!PyLong_CheckExact(object))
        return 0;
    long long v = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (overflow || v >= COUNTER_LIMIT || v <= -COUNTER_LIMIT)
        return 0;
    *value = v;
    return 1;
}

/* A plain counter or None (``*known`` 0). */
static int plain_or_none(PyObject *object, long long *value, int *known)
{
    *known = object != Py_None;
    return !*known || plain(object, value);
}

/* The int of a round's wall time since the last sample, shared by the
 * threads that have the same (all the threads of one sample, usually):
 * one object a round, not one a thread (made and freed each round). */
typedef struct {
    long long value;
    PyObject *object;           /* NULL until the first; the caller frees it */
} shared_int;

/* A new reference to an int of ``value``, from ``shared`` when it holds one. */
static PyObject *shared_int_of(shared_int *shared, long long value)
{
    if (shared->object == NULL || shared->value != value) {
        PyObject *made = PyLong_FromLongLong(value);
        if (made == NULL)
            return NULL;
        Py_XSETREF(shared->object, made);
        shared->value = value;
    }
    return Py_NewRef(shared->object);
}

/* The arithmetic of loads.py's LoadWindow._py_measure_threads for one
 * thread, everything read and checked: its CPU time over the last round
 * and, from ``old_wall``/``old_run`` (the window's base or its first
 * sighting), its CPU received, runnable share (``lat_known``: both run-queue
 * waits known, ``lat_delta`` their difference) and load.  ``run_obj``: the
 * new reference prev_run takes (stolen).  1 measured, -1 error. */
static int set_measured(PyObject *thread, int fast, PyObject *now_obj, long long now,
                        PyObject *run_obj, long long run_ns, long long prev_run,
                        long long prev_wall, long long old_wall, long long old_run,
                        int lat_known, long long lat_delta, double runnable_share,
                        shared_int *wall_ns)
{
    PyObject *cpu = NULL;

    if (run_obj == NULL)
        return -1;
    if (set_slot(thread, fast, S_EXEC_NS,
                 PyLong_FromLongLong(run_ns > prev_run ? run_ns - prev_run : 0)) < 0
            || set_slot(thread, fast, S_WALL_NS, shared_int_of(wall_ns, now - prev_wall)) < 0
            || set_slot(thread, fast, S_PREV_WALL, Py_NewRef(now_obj)) < 0
            || set_slot(thread, fast, S_PREV_RUN, Py_NewRef(run_obj)) < 0) {
        Py_DECREF(run_obj);
        return -1;
    }
    Py_DECREF(run_obj);
    long long wall = now - old_wall;
    if (wall <= 0)
        return 1;                   /* measured, not over a span */
    long long run = run_ns > old_run ? run_ns - old_run : 0;
    cpu = true_divide(run, wall);
    if (cpu == NULL || set_slot(thread, fast, S_CPU, Py_NewRef(cpu)) < 0)
        goto failed;
    if (lat_known) {
        PyObject *runnable = true_divide(run + (lat_delta > 0 ? lat_delta : 0), wall);
        if (runnable == NULL || set_slot(thread, fast, S_RUNNABLE, Py_NewRef(runnable)) < 0) {
            Py_XDECREF(runnable);
            goto failed;
        }
        /* demand (engine/window.py) */
        double share = PyFloat_AS_DOUBLE(runnable), got = PyFloat_AS_DOUBLE(cpu);
        PyObject *load;
        if (share >= runnable_share)
            load = share < 1.0 ? Py_NewRef(runnable) : PyFloat_FromDouble(1.0);
        else
            load = got < 1.0 ? Py_NewRef(cpu) : PyFloat_FromDouble(1.0);
        Py_DECREF(runnable);
        if (set_slot(thread, fast, S_LOAD, load) < 0)
            goto failed;
    } else if (set_slot(thread, fast, S_LOAD, Py_NewRef(cpu)) < 0)
        goto failed;
    Py_DECREF(cpu);
    return 1;
failed:
    Py_XDECREF(cpu);
    return -1;
}

/* The value of slot ``i``, borrowed (the thread holds it), of a known-type thread. */
#define BORROWED(thread, i) slot_at(&slots, (thread), (i))

/* A C-contiguous array('q') (NULL for None: ``view->buf`` left NULL). */
static int q_column(PyObject *object, Py_buffer *view)
{
    view->buf = NULL;
    if (object == Py_None)
        return 0;
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || strcmp(view->format, "q") != 0) {
        PyBuffer_Release(view);
        view->buf = NULL;
        PyErr_SetString(PyExc_TypeError, "measure_columns: expected an array('q')");
        return -1;
    }
    return 0;
}

/* A plain counter from a column (|x| < COUNTER_LIMIT). */
#define PLAIN_VALUE(v) ((v) < COUNTER_LIMIT && (v) > -COUNTER_LIMIT)

#endif /* TUMBLER_TRACKED_H */
