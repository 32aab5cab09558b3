/*
 * _steady: the Linux backend's steady-state sample in one C call, and
 * three system calls (the end of this comment).
 *
 * tumbler samples every thread of its target every round.  From the second
 * round on the usual sample is: for every known thread, one pread(2) of its
 * kept-open /proc/PID/task/TID/schedstat ("run_ns wait_ns timeslices\n"),
 * two numbers parsed, one ThreadTimes built.  This module does those
 * steps in C: for 10,000 threads a sample takes ~57 ms instead of ~80, and
 * for 64 threads managed at 100 ms tumbler spends 50-180 us less CPU per
 * interval (BENCHMARKS.md, "Overhead at commit f173ebf").
 *
 * It is optional: linux/threads.py falls back to its Python version of the same
 * steps when the module was not built (no compiler or no Python headers at
 * install time), and the tests run both on the same real threads.
 *
 * steady_times(files, pid, tids, zero_ok, ThreadTimes, no_micro)
 *     files     dict (pid, tid) -> object with int attribute schedstat_fd
 *               and attributes start and name (threads.ThreadFiles)
 *     tids      iterable of the thread IDs to read
 *     zero_ok   false: a run time of 0 makes the answer None (is schedstat
 *               accounted at all? linux/threads.py then reads stat to find out)
 *     ThreadTimes, no_micro: the named tuple type to build and its default
 *               ``micro`` value
 * returns {tid: ThreadTimes(tid, start, name, run_ns, None, None, lat_ns,
 *          None, "?", no_micro)}, or None when anything is unusual (a TID
 *          without files or without an open schedstat fd, a failed or odd
 *          read): the caller's per-thread path then handles each thread and
 *          says why.  Errors other than those (a bad argument, no memory)
 *          raise.
 *
 * read_columns(task_fd, fds, run, lat, zero_ok=True, moved=None, turns=1, turn=0)
 *     task_fd   kept-open fd of /proc/PID/task: its link count is 2 + the
 *               number of threads
 *     fds       array('i') of kept-open schedstat fds, one per thread
 *     run, lat  writable array('q') as long as fds: filled with each
 *               thread's run and wait time (ns)
 *     zero_ok   false: a run time of 0 makes the answer None (as for
 *               steady_times; checked here, not by a pass over ``run``)
 *     moved     None, or a writable array('b') as long as fds: rotation
 *               (linux/rotation.py).  Thread i is read only if moved[i]
 *               or i % turns == turn; a thread not read keeps the values
 *               the caller left in run and lat (its last read); a thread
 *               read gets moved[i] = whether its run time changed.
 * returns the CLOCK_MONOTONIC time in ns (time.monotonic_ns()'s clock)
 *          taken after the thread count was checked and before the
 *          reads, or None when the process no longer has exactly
 *          len(fds) threads or a read failed or was odd (a thread exited:
 *          its fd reads as an error).  With ``moved``: (that time, the
 *          run time the threads read got since their last read, ns, the
 *          number of threads read, how many of them had moved).  The controller's quiet rounds
 *          (balance/quiet.py) read this way: no Python object per thread.
 *
 * And three system calls Python's os module lacks, which otherwise come
 * through ctypes: importing it costs ~4 ms of CPU, taken from the command
 * on a full machine while ``tumbler exec`` starts balancing (BENCHMARKS.md,
 * "What exec imports").  Each has its ctypes twin for when this module was
 * not built (procfs.py, switches.py).
 *
 * open_cpu_switches(cpu) -> fd
 *     perf_event_open(2) of a software counter of every context switch on
 *     ``cpu`` (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, pid -1,
 *     no group, close-on-exec; read_format 0: a read gives the u64 count);
 *     OSError with the errno (EACCES: no CAP_PERFMON, ENODEV: CPU off-line,
 *     ENOSYS: no perf events)
 * set_child_subreaper(on) -> bool
 *     prctl(PR_SET_CHILD_SUBREAPER, on): whether the kernel took it
 * current_cpu() -> int or None
 *     sched_getcpu(3) (the vDSO on x86_64): the CPU the caller runs on
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/perf_event.h>

#include "../_slots.h"

#if PY_VERSION_HEX < 0x030A0000          /* Py_NewRef came with 3.10 */
static inline PyObject *Py_NewRef(PyObject *object)
{
    Py_INCREF(object);
    return object;
}
#endif

/* One schedstat line is three decimal u64s: 62 bytes at most. */
#define SCHEDSTAT_MAX 128

/* Attribute names and the unknown state, made once (module init). */
static PyObject *str_schedstat_fd, *str_start, *str_name, *str_unknown_state;

/* The type of ``files``' entries (threads.ThreadFiles, a class with
 * __slots__) whose slots schedstat_fd, start and name are read at the
 * offsets of Python's own member descriptors, learnt once; any other
 * object through the attribute protocol. */
static struct slot_cache files_slots;

static int learn_files_type(PyTypeObject *type)
{
    PyObject *names[3] = {str_schedstat_fd, str_start, str_name};
    return slots_learn(&files_slots, type, names, 3);
}

/* Attribute ``i`` (0 schedstat_fd, 1 start, 2 name) of an entry, a new reference. */
static PyObject *files_attr(PyObject *entry, int i, PyObject *name)
{
    if (learn_files_type(Py_TYPE(entry)) == 1) {
        PyObject *value = slot_at(&files_slots, entry, i);
        if (value == NULL) {
            PyErr_SetObject(PyExc_AttributeError, name);
            return NULL;
        }
        return Py_NewRef(value);
    }
    return PyObject_GetAttr(entry, name);
}

/* Parse a decimal u64 after optional spaces; -1 if there is none or it overflows. */
static int parse_u64(const char **cursor, const char *end, unsigned long long *value)
{
    const char *s = *cursor;
    unsigned long long v = 0;

    while (s < end && *s == ' ')
        s++;
    if (s >= end || *s < '0' || *s > '9')
        return -1;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        unsigned digit = (unsigned)(*s - '0');
        if (v > (~0ULL - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    *cursor = s;
    *value = v;
    return 0;
}

/* Read run and wait time from fd; -1 on a failed, empty or odd read. */
static int read_schedstat(int fd, unsigned long long *run_ns, unsigned long long *lat_ns)
{
    char buf[SCHEDSTAT_MAX];
    ssize_t got = pread(fd, buf, sizeof buf, 0);
    const char *cursor = buf;

    if (got <= 0)
        return -1;
    if (parse_u64(&cursor, buf + got, run_ns) || parse_u64(&cursor, buf + got, lat_ns))
        return -1;
    return 0;
}

/* A record (a named tuple of ints, strings, None and the shared empty
 * ``micro`` mapping, without a __dict__) can hold nothing that holds it
 * back: no reference cycle can pass through it, so the cyclic GC need not
 * track it.  Tracked, every sample's 10,000 of them were traversed by each
 * collection while the load window kept them (a few rounds): 13% of a
 * full round at 10,000 threads (BENCHMARKS.md, issue 29).  CPython untracks
 * such tuples itself only when all their items are untracked, which the
 * mapping never is. */
static void untrack_record(PyObject *record)
{
    if (Py_TYPE(record)->tp_dictoffset == 0)
        PyObject_GC_UnTrack(record);
}

/* Build ThreadTimes(tid, start, name, run, None, None, lat, None, "?", no_micro). */
static PyObject *thread_times(PyTypeObject *type, PyObject *tid, PyObject *start,
                              PyObject *name, PyObject *run, PyObject *lat, PyObject *no_micro)
{
    /* What tuple.__new__(type, items) does for a tuple subclass. */
    PyObject *times = type->tp_alloc(type, 10);

    if (times == NULL)
        return NULL;
    PyTuple_SET_ITEM(times, 0, Py_NewRef(tid));
    PyTuple_SET_ITEM(times, 1, Py_NewRef(start));
    PyTuple_SET_ITEM(times, 2, Py_NewRef(name));
    PyTuple_SET_ITEM(times, 3, Py_NewRef(run));
    PyTuple_SET_ITEM(times, 4, Py_NewRef(Py_None));
    PyTuple_SET_ITEM(times, 5, Py_NewRef(Py_None));
    PyTuple_SET_ITEM(times, 6, Py_NewRef(lat));
    PyTuple_SET_ITEM(times, 7, Py_NewRef(Py_None));
    PyTuple_SET_ITEM(times, 8, Py_NewRef(str_unknown_state));
    PyTuple_SET_ITEM(times, 9, Py_NewRef(no_micro));
    untrack_record(times);
    return times;
}

/* The times of one thread into ``result``: 1 done, 0 unusual (answer None), -1 error. */
static int add_thread(PyObject *result, PyObject *files, PyObject *pid, PyObject *tid,
                      int zero_ok, PyTypeObject *type, PyObject *no_micro)
{
    PyObject *key, *entry, *fd_obj = NULL, *start = NULL, *name = NULL, *run = NULL, *lat = NULL;
    PyObject *times = NULL;
    unsigned long long run_ns, lat_ns;
    long fd;
    int status = -1;

    key = PyTuple_Pack(2, pid, tid);
    if (key == NULL)
        return -1;
    entry = PyDict_GetItemWithError(files, key);        /* borrowed */
    Py_DECREF(key);
    if (entry == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(entry);               /* ours while its attributes are read */
    fd_obj = files_attr(entry, 0, str_schedstat_fd);
    if (fd_obj == NULL || fd_obj == Py_None) {          /* None: fds ran out, read by path */
        status = fd_obj == NULL ? -1 : 0;
        goto done;
    }
    fd = PyLong_AsLong(fd_obj);
    if (fd == -1 && PyErr_Occurred())
        goto done;
    if (fd < 0 || fd > INT_MAX || read_schedstat((int)fd, &run_ns, &lat_ns) < 0
            || (run_ns == 0 && !zero_ok)) {
        status = 0;
        goto done;
    }
    start = files_attr(entry, 1, str_start);
    name = start ? files_attr(entry, 2, str_name) : NULL;
    run = name ? PyLong_FromUnsignedLongLong(run_ns) : NULL;
    lat = run ? PyLong_FromUnsignedLongLong(lat_ns) : NULL;
    times = lat ? thread_times(type, tid, start, name, run, lat, no_micro) : NULL;
    if (times != NULL && PyDict_SetItem(result, tid, times) == 0)
        status = 1;
done:
    Py_XDECREF(times);
    Py_XDECREF(lat);
    Py_XDECREF(run);
    Py_XDECREF(name);
    Py_XDECREF(start);
    Py_XDECREF(fd_obj);
    Py_DECREF(entry);
    return status;
}

static PyObject *steady_times(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *files, *pid, *tids, *no_micro, *iterator, *tid, *result;
    PyTypeObject *type;
    int zero_ok, status = 1;

    if (!PyArg_ParseTuple(args, "O!OOpO!O:steady_times", &PyDict_Type, &files, &pid, &tids,
                          &zero_ok, &PyType_Type, &type, &no_micro))
        return NULL;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "steady_times: ThreadTimes must be a tuple type");
        return NULL;
    }
    /* Sized for every thread at once: no resizing as it fills. */
    Py_ssize_t expected = PyObject_LengthHint(tids, 0);
    if (expected < 0)
        return NULL;
    result = _PyDict_NewPresized(expected);
    iterator = result ? PyObject_GetIter(tids) : NULL;
    if (iterator == NULL) {
        Py_XDECREF(result);
        return NULL;
    }
    while (status == 1 && (tid = PyIter_Next(iterator)) != NULL) {
        status = add_thread(result, files, pid, tid, zero_ok, type, no_micro);
        Py_DECREF(tid);
    }
    Py_DECREF(iterator);
    if (status < 0 || PyErr_Occurred()) {
        Py_DECREF(result);
        return NULL;
    }
    if (status == 0) {
        Py_DECREF(result);
        Py_RETURN_NONE;
    }
    return result;
}

/* Take a C-contiguous buffer of format ``format`` (``writable``: for filling). */
static int get_column(PyObject *object, Py_buffer *view, const char *format,
                      Py_ssize_t itemsize, int writable)
{
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT
                           | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != itemsize || view->format == NULL
            || strcmp(view->format, format) != 0) {
        PyErr_Format(PyExc_TypeError, "read_columns: expected an array('%s')", format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *read_columns(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *objects[3], *moved_object = Py_None;
    Py_buffer fds, run, lat, moved;
    struct stat task;
    struct timespec now;
    int task_fd, ok = 1, zero_ok = 1, rotating;
    Py_ssize_t turns = 1, turn = 0, read_count = 0, moved_count = 0;
    long long gained = 0;

    if (!PyArg_ParseTuple(args, "iOOO|pOnn:read_columns", &task_fd, &objects[0], &objects[1],
                          &objects[2], &zero_ok, &moved_object, &turns, &turn))
        return NULL;
    rotating = moved_object != Py_None;
    if (turns < 1 || turn < 0 || turn >= turns) {
        PyErr_SetString(PyExc_ValueError, "read_columns: need 0 <= turn < turns");
        return NULL;
    }
    if (get_column(objects[0], &fds, "i", sizeof(int), 0) < 0)
        return NULL;
    if (get_column(objects[1], &run, "q", 8, 1) < 0) {
        PyBuffer_Release(&fds);
        return NULL;
    }
    if (get_column(objects[2], &lat, "q", 8, 1) < 0) {
        PyBuffer_Release(&run);
        PyBuffer_Release(&fds);
        return NULL;
    }
    if (rotating && get_column(moved_object, &moved, "b", 1, 1) < 0) {
        PyBuffer_Release(&lat);
        PyBuffer_Release(&run);
        PyBuffer_Release(&fds);
        return NULL;
    }
    Py_ssize_t count = fds.len / (Py_ssize_t)sizeof(int);
    if (run.len != count * 8 || lat.len != count * 8 || (rotating && moved.len != count)) {
        PyErr_SetString(PyExc_ValueError, "read_columns: columns differ in length");
        ok = -1;
    }
    /* procfs counts 2 + the threads (see linux/threads.py's thread_count). */
    if (ok == 1 && (fstat(task_fd, &task) < 0 || task.st_nlink < 3
                    || (Py_ssize_t)task.st_nlink - 2 != count
                    || clock_gettime(CLOCK_MONOTONIC, &now) < 0))
        ok = 0;
    const int *fd = fds.buf;
    long long *run_ns = run.buf, *lat_ns = lat.buf;
    signed char *was_moved = rotating ? moved.buf : NULL;
    for (Py_ssize_t i = 0; ok == 1 && i < count; i++) {
        unsigned long long r, l;
        if (rotating && !was_moved[i] && i % turns != turn)
            continue;               /* asleep at its last read, and not its turn */
        if (fd[i] < 0 || read_schedstat(fd[i], &r, &l) < 0 || r > LLONG_MAX || l > LLONG_MAX
                || (r == 0 && !zero_ok))
            ok = 0;
        else {
            if (rotating) {
                was_moved[i] = (long long)r != run_ns[i];
                moved_count += was_moved[i];
                gained += (long long)r - run_ns[i];
                read_count++;
            }
            run_ns[i] = (long long)r;
            lat_ns[i] = (long long)l;
        }
    }
    if (rotating)
        PyBuffer_Release(&moved);
    PyBuffer_Release(&lat);
    PyBuffer_Release(&run);
    PyBuffer_Release(&fds);
    if (ok < 0)
        return NULL;
    if (ok == 0)
        Py_RETURN_NONE;
    long long at = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    if (rotating)
        return Py_BuildValue("(LLnn)", at, gained, read_count, moved_count);
    return PyLong_FromLongLong(at);
}

static PyObject *open_cpu_switches(PyObject *module, PyObject *arg)
{
    int overflow;
    long cpu = PyLong_AsLongAndOverflow(arg, &overflow);
    if (cpu == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || cpu < 0 || cpu > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "no such CPU: %R", arg);
        return NULL;
    }
#ifdef SYS_perf_event_open
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_CONTEXT_SWITCHES;
    long fd = syscall(SYS_perf_event_open, &attr, -1, (int)cpu, -1, PERF_FLAG_FD_CLOEXEC);
#else
    long fd = -1;
    errno = ENOSYS;
#endif
    if (fd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    PyObject *result = PyLong_FromLong(fd);
    if (result == NULL)
        close((int)fd);
    return result;
}

static PyObject *set_child_subreaper(PyObject *module, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    return PyBool_FromLong(prctl(PR_SET_CHILD_SUBREAPER, on, 0, 0, 0) == 0);
}

static PyObject *current_cpu(PyObject *module, PyObject *unused)
{
    int cpu = sched_getcpu();
    if (cpu < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(cpu);
}

static PyMethodDef steady_methods[] = {
    {"read_columns", read_columns, METH_VARARGS,
     "read_columns(task_fd, fds, run, lat, zero_ok=True, moved=None, turns=1, turn=0)"
     " -> monotonic ns, (ns, gained ns, threads read, moved) with moved, or None\n\n"
     "Check the thread count, fill run and lat from every kept-open schedstat fd;\n"
     "see the module comment."},
    {"steady_times", steady_times, METH_VARARGS,
     "steady_times(files, pid, tids, zero_ok, ThreadTimes, no_micro) -> dict or None\n\n"
     "Read every thread's kept-open schedstat fd; see the module comment."},
    {"open_cpu_switches", open_cpu_switches, METH_O,
     "open_cpu_switches(cpu) -> fd of a counter of every context switch on cpu"},
    {"set_child_subreaper", set_child_subreaper, METH_O,
     "set_child_subreaper(on) -> whether prctl(PR_SET_CHILD_SUBREAPER, on) succeeded"},
    {"current_cpu", current_cpu, METH_NOARGS,
     "current_cpu() -> sched_getcpu(), None if it failed"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef steady_module = {
    PyModuleDef_HEAD_INIT, "_steady",
    "The Linux backend's steady-state sample in C (optional; see linux/threads.py).",
    -1, steady_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__steady(void)
{
    if (str_schedstat_fd == NULL) {
        str_schedstat_fd = PyUnicode_InternFromString("schedstat_fd");
        str_start = PyUnicode_InternFromString("start");
        str_name = PyUnicode_InternFromString("name");
        str_unknown_state = PyUnicode_InternFromString("?");
        if (!str_schedstat_fd || !str_start || !str_name || !str_unknown_state)
            return NULL;
    }
    return PyModule_Create(&steady_module);
}
