/*
 * _slots.h - reading a Python class's __slots__ from C at their offsets.
 *
 * The C passes (platform/linux/_steady.c, balance/_rounds.c) read and write
 * attributes of objects of one class thousands of times a round.  Python's
 * own member descriptors say where each slot lies in the object; learnt
 * once per class, a slot is then one load.  An object of any other class
 * goes through the attribute protocol instead (the callers check).
 *
 * Included by both modules (each keeps its own cache): a header of static
 * functions, not a module of its own.
 */
#ifndef TUMBLER_SLOTS_H
#define TUMBLER_SLOTS_H

#include <Python.h>
#include <structmember.h>
#include <string.h>

/* The most slots one cache knows. */
#define SLOTS_MAX 32

/* The class whose slot offsets are known, and them. */
struct slot_cache {
    PyTypeObject *type;
    Py_ssize_t offsets[SLOTS_MAX];
};

/* Learn the offsets of ``type``'s slots ``names[0..count)`` into ``cache``:
 * 1 done (or known already), 0 ``type`` does not have all of them as
 * object slots (nothing learnt; the attribute protocol is used then). */
static int slots_learn(struct slot_cache *cache, PyTypeObject *type,
                       PyObject *const *names, int count)
{
    Py_ssize_t found[SLOTS_MAX];

    if (type == cache->type)
        return 1;
    if (count > SLOTS_MAX)
        return 0;
    for (int i = 0; i < count; i++) {
        PyObject *descr = PyObject_GetAttr((PyObject *)type, names[i]);
        if (descr == NULL) {
            PyErr_Clear();
            return 0;
        }
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type)
            && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok)
            found[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!ok)
            return 0;
    }
    memcpy(cache->offsets, found, sizeof found[0] * count);
    Py_XDECREF(cache->type);
    Py_INCREF(type);
    cache->type = type;
    return 1;
}

/* A borrowed reference to slot ``i`` of ``object`` (of the cache's class);
 * NULL, with no exception set, when the slot is unset. */
static inline PyObject *slot_at(const struct slot_cache *cache, PyObject *object, int i)
{
    return *(PyObject **)((char *)object + cache->offsets[i]);
}

#endif /* TUMBLER_SLOTS_H */
