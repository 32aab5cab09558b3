/*
 * _grouping: the per-thread passes of wave grouping and slot mapping in C
 * (optional; wave.py and mapping.py do the same in Python without it).
 *
 * Issue 3 asks for wave grouping + mapping of 64 threads in at most 30 us
 * (the paper's C code took 28).  In Python they take 20-26 us in this VM's
 * fast minutes and 34-37 in its slow ones (BENCHMARKS.md), most of it in
 * sorting by load and counting, slot by slot, the threads already in each
 * domain.  These two functions do those passes in one call each.
 *
 * wave_deal(loads, groups)
 *     loads    dict tid -> load, tids exact ints (as C long long), loads
 *              exact finite floats
 *     groups   the number of groups, >= 1
 * returns wave.py's wave_groups(sort_by_load(loads), groups): the tids by
 *          descending load (equal loads in ascending tid order) dealt like
 *          a wave into ``groups`` lists -- or None when a tid or a load is
 *          of another kind (the Python path then handles them).
 *
 * kept_counts(slots, current, domain_count)
 *     slots    sequence of lists of tids
 *     current  dict tid -> domain index now (None or absent: not placed)
 * returns, per slot, the list of how many of its threads are in each
 *          domain 0..domain_count-1 now (mapping.py's _kept_counts of each
 *          slot) -- or None when a domain is not None nor an exact int.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

typedef struct {
    double load;
    long long tid;
    PyObject *key;          /* borrowed from the dict */
} entry;

/* Descending load, then ascending tid: sort_by_load's order.  Inline, in
 * a merge sort of our own: qsort's call per comparison made sorting 10,000
 * threads slower than Python's own sort. */
static inline int before(const entry *a, const entry *b)
{
    return a->load > b->load || (a->load == b->load && a->tid < b->tid);
}

/* Sort entries[0..count) into order, using scratch (as large). */
static void merge_sort(entry *entries, entry *scratch, Py_ssize_t count)
{
    if (count <= 16) {          /* insertion sort for short runs */
        for (Py_ssize_t i = 1; i < count; i++) {
            entry item = entries[i];
            Py_ssize_t j = i;
            while (j > 0 && before(&item, &entries[j - 1])) {
                entries[j] = entries[j - 1];
                j--;
            }
            entries[j] = item;
        }
        return;
    }
    Py_ssize_t half = count / 2;
    merge_sort(entries, scratch, half);
    merge_sort(entries + half, scratch, count - half);
    if (!before(&entries[half], &entries[half - 1]))
        return;                 /* already in order */
    memcpy(scratch, entries, half * sizeof *entries);
    Py_ssize_t left = 0, right = half, out = 0;
    while (left < half && right < count)
        entries[out++] = before(&entries[right], &scratch[left]) ? entries[right++]
                                                                 : scratch[left++];
    while (left < half)
        entries[out++] = scratch[left++];
}

static PyObject *wave_deal(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *loads, *key, *value, *groups_list = NULL;
    Py_ssize_t groups, position = 0, count, i = 0;
    entry *entries;

    if (!PyArg_ParseTuple(args, "O!n:wave_deal", &PyDict_Type, &loads, &groups))
        return NULL;
    if (groups < 1) {
        PyErr_SetString(PyExc_ValueError, "wave_deal: groups must be >= 1");
        return NULL;
    }
    count = PyDict_Size(loads);
    entries = PyMem_Malloc((count ? 2 * count : 1) * sizeof *entries);     /* + scratch */
    if (entries == NULL)
        return PyErr_NoMemory();
    while (PyDict_Next(loads, &position, &key, &value)) {
        int overflow = 0;
        if (!PyLong_CheckExact(key) || !PyFloat_CheckExact(value))
            goto other_kinds;
        entries[i].tid = PyLong_AsLongLongAndOverflow(key, &overflow);
        entries[i].load = PyFloat_AS_DOUBLE(value);
        if (overflow || (entries[i].tid == -1 && PyErr_Occurred())
                || !isfinite(entries[i].load)) {
            PyErr_Clear();
            goto other_kinds;
        }
        entries[i++].key = key;
    }
    merge_sort(entries, entries + count, count);
    groups_list = PyList_New(groups);
    for (Py_ssize_t g = 0; groups_list != NULL && g < groups; g++) {
        /* Group g: sorted positions g, 2k-1-g, 2k+g, 4k-1-g, ... (wave.py). */
        Py_ssize_t stride = 2 * groups, size = 0;
        PyObject *group;
        for (Py_ssize_t p = g; p < count; p += stride)
            size += 1 + (p + stride - 1 - 2 * g < count);
        group = PyList_New(size);
        if (group == NULL) {
            Py_CLEAR(groups_list);
            break;
        }
        Py_ssize_t at = 0;
        for (Py_ssize_t p = g; p < count; p += stride) {
            Py_ssize_t back = p + stride - 1 - 2 * g;
            Py_INCREF(entries[p].key);
            PyList_SET_ITEM(group, at++, entries[p].key);
            if (back < count) {
                Py_INCREF(entries[back].key);
                PyList_SET_ITEM(group, at++, entries[back].key);
            }
        }
        PyList_SET_ITEM(groups_list, g, group);
    }
    PyMem_Free(entries);
    return groups_list;
other_kinds:
    PyMem_Free(entries);
    Py_RETURN_NONE;
}

static PyObject *kept_counts(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *slots, *current, *sequence, *answer = NULL;
    Py_ssize_t domain_count;

    if (!PyArg_ParseTuple(args, "OO!n:kept_counts", &slots, &PyDict_Type, &current,
                          &domain_count))
        return NULL;
    if (domain_count < 0) {
        PyErr_SetString(PyExc_ValueError, "kept_counts: domain_count must be >= 0");
        return NULL;
    }
    sequence = PySequence_Fast(slots, "kept_counts: slots must be a sequence");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t slot_count = PySequence_Fast_GET_SIZE(sequence);
    Py_ssize_t *counts = PyMem_Calloc(domain_count ? domain_count : 1, sizeof *counts);
    answer = counts ? PyList_New(slot_count) : PyErr_NoMemory();
    for (Py_ssize_t s = 0; answer != NULL && s < slot_count; s++) {
        PyObject *slot = PySequence_Fast(PySequence_Fast_GET_ITEM(sequence, s),
                                         "kept_counts: a slot must be a sequence");
        PyObject *row = NULL;
        int other_kind = 0;
        if (slot == NULL) {
            Py_CLEAR(answer);
            break;
        }
        for (Py_ssize_t d = 0; d < domain_count; d++)
            counts[d] = 0;
        for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(slot); t++) {
            PyObject *domain = PyDict_GetItemWithError(current,
                                                       PySequence_Fast_GET_ITEM(slot, t));
            if (domain == NULL) {
                if (PyErr_Occurred()) {
                    other_kind = -1;
                    break;
                }
                continue;                   /* not placed */
            }
            if (domain == Py_None)
                continue;
            if (!PyLong_CheckExact(domain)) {
                other_kind = 1;
                break;
            }
            Py_ssize_t index = PyLong_AsSsize_t(domain);
            if (index == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                continue;                   /* out of any range: counts nowhere */
            }
            if (index >= 0 && index < domain_count)
                counts[index]++;
        }
        Py_DECREF(slot);
        if (other_kind) {
            Py_CLEAR(answer);
            if (other_kind > 0) {
                PyMem_Free(counts);
                Py_DECREF(sequence);
                Py_RETURN_NONE;
            }
            break;
        }
        row = PyList_New(domain_count);
        for (Py_ssize_t d = 0; row != NULL && d < domain_count; d++) {
            PyObject *number = PyLong_FromSsize_t(counts[d]);
            if (number == NULL)
                Py_CLEAR(row);
            else
                PyList_SET_ITEM(row, d, number);
        }
        if (row == NULL) {
            Py_CLEAR(answer);
            break;
        }
        PyList_SET_ITEM(answer, s, row);
    }
    PyMem_Free(counts);
    Py_DECREF(sequence);
    return answer;
}

static PyMethodDef grouping_methods[] = {
    {"wave_deal", wave_deal, METH_VARARGS,
     "wave_deal(loads, groups) -> list of lists or None\n\n"
     "wave_groups(sort_by_load(loads), groups) for int tids and float loads."},
    {"kept_counts", kept_counts, METH_VARARGS,
     "kept_counts(slots, current, domain_count) -> list of lists or None\n\n"
     "Per slot, how many of its threads are in each domain now."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef grouping_module = {
    PyModuleDef_HEAD_INIT, "_grouping",
    "Wave grouping's and slot mapping's per-thread passes in C (optional).", -1,
    grouping_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__grouping(void)
{
    return PyModule_Create(&grouping_module);
}
