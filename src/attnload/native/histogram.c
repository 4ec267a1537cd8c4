/* gap_pairs and record_pairs: the ITL samples of one response and their histogram update, in C.
 *
 *   gap_pairs     = the tuple built at the end of attnload.measure.recorder.split_gaps:
 *                   ((gap / n, n) for gap, n in zip(gaps, tokens)), with the same float division.
 *   record_pairs  = attnload.measure.histogram.LogHistogram.record_pairs on the histogram's fields,
 *                   with the same float operations, so both paths give equal buckets and sums.
 *
 * Why: every ITL sample of every response goes through both, on the same core as the client
 * (docs/performance.md, "The compiled path"). The Python stays the reference; tests compare.
 */
#include "fastpath.h"
#include <math.h>


PyObject *
gap_pairs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "gap_pairs(gaps: list, tokens: list)");
        return NULL;
    }
    PyObject *gaps = args[0], *tokens = args[1];
    Py_ssize_t n = PyList_GET_SIZE(gaps);
    if (PyList_GET_SIZE(tokens) < n)
        n = PyList_GET_SIZE(tokens);
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *count = PyList_GET_ITEM(tokens, i);
        PyObject *per = PyNumber_TrueDivide(PyList_GET_ITEM(gaps, i), count);  /* gap / n, exactly */
        if (per == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *pair = PyTuple_Pack(2, per, count);
        Py_DECREF(per);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, pair);
    }
    return out;
}

static int
bump(PyObject *buckets, long index, PyObject *n)
{
    PyObject *key = PyLong_FromLong(index);
    if (key == NULL)
        return -1;
    PyObject *old = PyDict_GetItemWithError(buckets, key);
    if (old == NULL && PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    PyObject *sum = old ? PyNumber_Add(old, n) : (Py_INCREF(n), n);
    if (sum == NULL) {
        Py_DECREF(key);
        return -1;
    }
    int rc = PyDict_SetItem(buckets, key, sum);
    Py_DECREF(key);
    Py_DECREF(sum);
    return rc;
}

/* record_pairs(buckets, samples, count, total, low, high, min_value, log_gamma) -> (count, total, low, high)
 * or None when a sample is not a (float, int) pair (the caller then takes the Python loop). Consecutive
 * samples in one bucket update the dict once, in the same order, so the dict equals the Python one. */
PyObject *
record_pairs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "record_pairs(buckets, samples, count, total, low, high, min, log_gamma)");
        return NULL;
    }
    PyObject *buckets = args[0];
    PyObject *seq = PySequence_Fast(args[1], "samples must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyFloat_CheckExact(PyTuple_GET_ITEM(pair, 0))
                || !PyLong_CheckExact(PyTuple_GET_ITEM(pair, 1))) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
    }
    PyObject *count = args[2];
    Py_INCREF(count);
    double total = PyFloat_AsDouble(args[3]), low = PyFloat_AsDouble(args[4]), high = PyFloat_AsDouble(args[5]);
    double min_value = PyFloat_AsDouble(args[6]), log_gamma = PyFloat_AsDouble(args[7]);
    if (PyErr_Occurred())
        goto fail;
    long pending_index = 0;
    PyObject *pending_n = NULL;  /* the pending bucket's summed count */
    for (Py_ssize_t i = 0; i < size; i++) {
        double value = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(items[i], 0));
        PyObject *n = PyTuple_GET_ITEM(items[i], 1);
        long index = (long)floor(log(value > min_value ? value : min_value) / log_gamma);
        if (pending_n != NULL && index != pending_index) {
            int rc = bump(buckets, pending_index, pending_n);
            Py_CLEAR(pending_n);
            if (rc < 0)
                goto fail;
        }
        if (pending_n == NULL) {
            pending_index = index;
            Py_INCREF(n);
            pending_n = n;
        } else {
            Py_SETREF(pending_n, PyNumber_Add(pending_n, n));
            if (pending_n == NULL)
                goto fail;
        }
        Py_SETREF(count, PyNumber_Add(count, n));
        if (count == NULL) {
            Py_XDECREF(pending_n);
            Py_DECREF(seq);
            return NULL;
        }
        double times = PyLong_AsDouble(n);
        if (times == -1.0 && PyErr_Occurred()) {
            Py_XDECREF(pending_n);
            goto fail;
        }
        total += value * times;
        if (value < low)
            low = value;
        if (value > high)
            high = value;
    }
    if (pending_n != NULL) {
        int rc = bump(buckets, pending_index, pending_n);
        Py_DECREF(pending_n);
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(seq);
    return Py_BuildValue("(Nddd)", count, total, low, high);
fail:
    Py_DECREF(count);
    Py_DECREF(seq);
    return NULL;
}
