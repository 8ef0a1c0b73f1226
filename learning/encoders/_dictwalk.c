/* One walk of an event dict, from C: the names' UTF-8 bytes and the values as float64, written
 * into a learner's reused buffers for its compiled hashed row (learning/encoders/_walk.py holds
 * the contract, the same functions in Python, and the measurement that keeps this file).
 *
 * pack(mapping, limit, names, ends, values) -> int
 *     mapping: a dict (exactly) of 1 .. limit entries, every key a str (exactly) of valid
 *     Unicode, every value an int or a float (exactly; an int must convert to a float64).
 *     names, ends, values: bytearrays. Entry i's name is names[ends[i-1]:ends[i]] (ends[-1] = 0),
 *     ends[i] an int64 and values[i] a float64, both in native byte order, in the dict's order.
 *     Returns the entry count, NOT_WALKED when the mapping is not of that form (nothing is
 *     raised: the caller takes the precise path, which names the error) or NAMES_FULL when the
 *     names do not fit (the caller retries with a larger bytearray). The buffers are written
 *     before the result is known: their content is only defined after a count is returned.
 *
 * same(mapping, count, names, ends, values) -> bool
 *     Whether pack(mapping, ...) would write exactly the first count entries the buffers hold:
 *     the same names in the same order, byte for byte, and the same float64 values bit for bit.
 *
 * Invariant: neither function raises for any mapping, and neither reads or writes outside the
 * bytearrays it is given. Both hold references to the entry they read, so a finaliser run by an
 * allocation (the UTF-8 form of a non-ASCII name is made on first use) cannot free it; a dict
 * changed meanwhile is refused (its size no longer matches the entries walked).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NOT_WALKED (-1)
#define NAMES_FULL (-2)
#define ENTRY_BYTES ((Py_ssize_t)sizeof(int64_t))

/* The UTF-8 bytes of a plain str name; 0 for anything else (the error cleared). */
static int name_bytes(PyObject *key, const char **data, Py_ssize_t *size) {
    if (!PyUnicode_CheckExact(key)) {
        return 0;
    }
    *data = PyUnicode_AsUTF8AndSize(key, size);
    if (*data == NULL) {
        PyErr_Clear(); /* a lone surrogate: no UTF-8 bytes */
        return 0;
    }
    return 1;
}

/* The float64 of a plain int or float value; 0 for anything else (the error cleared). */
static int plain_value(PyObject *value, double *out) {
    if (PyFloat_CheckExact(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        return 1;
    }
    if (PyLong_CheckExact(value)) {
        double number = PyLong_AsDouble(value);
        if (number == -1.0 && PyErr_Occurred()) {
            PyErr_Clear(); /* an int beyond float64 */
            return 0;
        }
        *out = number;
        return 1;
    }
    return 0;
}

/* The bytearray argument at index i, or NULL with a TypeError. */
static PyObject *bytearray_argument(PyObject *const *args, Py_ssize_t i, const char *name) {
    PyObject *buffer = args[i];
    if (!PyByteArray_CheckExact(buffer)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bytearray, not %.80s", name,
                     Py_TYPE(buffer)->tp_name);
        return NULL;
    }
    return buffer;
}

typedef struct {
    char *names;
    Py_ssize_t names_size;
    char *ends;
    char *values;
    Py_ssize_t entries; /* the entries both ends and values have room for */
} Buffers;

/* The three bytearrays of args[2..4], or 0 with a TypeError. */
static int buffers_of(PyObject *const *args, Buffers *out) {
    PyObject *names = bytearray_argument(args, 2, "names");
    PyObject *ends = names ? bytearray_argument(args, 3, "ends") : NULL;
    PyObject *values = ends ? bytearray_argument(args, 4, "values") : NULL;
    if (values == NULL) {
        return 0;
    }
    Py_ssize_t end_room = PyByteArray_GET_SIZE(ends) / ENTRY_BYTES;
    Py_ssize_t value_room = PyByteArray_GET_SIZE(values) / ENTRY_BYTES;
    out->names = PyByteArray_AS_STRING(names);
    out->names_size = PyByteArray_GET_SIZE(names);
    out->ends = PyByteArray_AS_STRING(ends);
    out->values = PyByteArray_AS_STRING(values);
    out->entries = end_room < value_room ? end_room : value_room;
    return 1;
}

static int check_arguments(Py_ssize_t nargs, const char *function) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "%s takes 5 arguments (%zd given)", function, nargs);
        return 0;
    }
    return 1;
}

static PyObject *pack(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (!check_arguments(nargs, "pack")) {
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Buffers buffers;
    if (!buffers_of(args, &buffers)) {
        return NULL;
    }
    PyObject *mapping = args[0];
    if (!PyDict_CheckExact(mapping)) {
        return PyLong_FromLong(NOT_WALKED);
    }
    Py_ssize_t count = PyDict_GET_SIZE(mapping);
    if (count == 0 || count > limit || count > buffers.entries) {
        return PyLong_FromLong(NOT_WALKED);
    }
    Py_ssize_t position = 0, i = 0, used = 0;
    PyObject *key, *value;
    long result = NOT_WALKED;
    while (PyDict_Next(mapping, &position, &key, &value)) {
        Py_INCREF(key);
        Py_INCREF(value);
        const char *data;
        Py_ssize_t size;
        double number;
        int plain = i < count && name_bytes(key, &data, &size) && plain_value(value, &number);
        int fits = plain && size <= buffers.names_size - used;
        if (fits) {
            memcpy(buffers.names + used, data, (size_t)size);
            used += size;
            int64_t end = used;
            memcpy(buffers.ends + i * ENTRY_BYTES, &end, sizeof end);
            memcpy(buffers.values + i * ENTRY_BYTES, &number, sizeof number);
            i++;
        }
        Py_DECREF(value);
        Py_DECREF(key);
        if (!fits) {
            return PyLong_FromLong(plain ? NAMES_FULL : NOT_WALKED);
        }
    }
    if (i == count && PyDict_GET_SIZE(mapping) == count) {
        result = (long)count;
    }
    return PyLong_FromLong(result);
}

static PyObject *same(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (!check_arguments(nargs, "same")) {
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Buffers buffers;
    if (!buffers_of(args, &buffers)) {
        return NULL;
    }
    PyObject *mapping = args[0];
    if (!PyDict_CheckExact(mapping) || count <= 0 || PyDict_GET_SIZE(mapping) != count ||
        count > buffers.entries) {
        Py_RETURN_FALSE;
    }
    Py_ssize_t position = 0, i = 0;
    int64_t start = 0;
    PyObject *key, *value;
    int equal = 1;
    while (equal && PyDict_Next(mapping, &position, &key, &value)) {
        Py_INCREF(key);
        Py_INCREF(value);
        const char *data;
        Py_ssize_t size;
        double number;
        int64_t end;
        double held;
        equal = i < count && name_bytes(key, &data, &size) && plain_value(value, &number);
        if (equal) {
            memcpy(&end, buffers.ends + i * ENTRY_BYTES, sizeof end);
            memcpy(&held, buffers.values + i * ENTRY_BYTES, sizeof held);
            equal = start <= end && end <= buffers.names_size && end - start == size &&
                    memcmp(buffers.names + start, data, (size_t)size) == 0 &&
                    memcmp(&held, &number, sizeof held) == 0;
            start = end;
            i++;
        }
        Py_DECREF(value);
        Py_DECREF(key);
    }
    if (equal && i == count && PyDict_GET_SIZE(mapping) == count) {
        Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL,
     "pack(mapping, limit, names, ends, values) -> entries, NOT_WALKED or NAMES_FULL"},
    {"same", (PyCFunction)(void (*)(void))same, METH_FASTCALL,
     "same(mapping, count, names, ends, values) -> whether pack would write these entries"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "learning.encoders._dictwalk",
    "One walk of an event dict from C (see learning/encoders/_walk.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__dictwalk(void) {
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(created, "NOT_WALKED", NOT_WALKED) < 0 ||
        PyModule_AddIntConstant(created, "NAMES_FULL", NAMES_FULL) < 0) {
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
