/* fit_pairs: one answer's least-squares sums over (position, windowed ITL) and its position-bin sketch, in C.
 *
 *   fit_pairs = the loop of attnload.measure.decodefit.request_fit, with the same float operations in
 *               the same order, so both paths give equal sums and bins.
 *
 * Why: it runs over every ITL sample of every answer, beside record_pairs (histogram.c), on the client's
 * core; the client's cost per token must not grow (docs/microscope.md).
 */
#include "fastpath.h"
#include <math.h>

#define BINS_PER_OCTAVE 8
#define KEY_SPAN 16384
#define ITL_OFFSET 7168
#define MAX_ITL_S 1e3
#define STRAY_RATIO 1.05
#define STRAY_WINDOWS 4
#define SETTLE_WINDOWS 8

static int
bump_bin(PyObject *bins, long long key, long long n)
{
    PyObject *k = PyLong_FromLongLong(key);
    if (k == NULL)
        return -1;
    PyObject *old = PyDict_GetItemWithError(bins, k);
    if (old == NULL && PyErr_Occurred()) {
        Py_DECREF(k);
        return -1;
    }
    long long before = old ? PyLong_AsLongLong(old) : 0;
    if (before == -1 && PyErr_Occurred()) {
        Py_DECREF(k);
        return -1;
    }
    PyObject *sum = PyLong_FromLongLong(before + n);
    if (sum == NULL) {
        Py_DECREF(k);
        return -1;
    }
    int rc = PyDict_SetItem(bins, k, sum);
    Py_DECREF(k);
    Py_DECREF(sum);
    return rc;
}

typedef struct {
    long long n;
    double sx, sy, sxx, sxy, syy;
    double last;          /* the last added window's mean ITL (0: none yet) */
    long long first_kept; /* the first added window's first position (-1: none) */
    int settling;         /* windows left out while the answer settles (-1: settled) */
} Sums;

typedef struct {
    long long tokens, first;
    double gap, sx, sxx;
} Window;

/* _offer of decodefit.py: one window's tokens into the sums, each at its position with the window's mean;
 * 1 when done with (added, or left out while the answer settles), 0 when it grows, -1 on an error. */
static int
offer(Sums *sums, const Window *w, PyObject *bins, double min_value, double log_gamma, long long window_tokens,
      int last_one)
{
    double mean = w->gap / (double)w->tokens;
    double last = sums->last;
    int strays = mean > last * STRAY_RATIO || mean * STRAY_RATIO < last;
    if (sums->settling >= 0) {
        if ((last <= 0.0 || strays) && (last_one || sums->settling < SETTLE_WINDOWS)) {
            sums->last = mean;
            sums->settling += 1;
            return 1;
        }
        sums->settling = -1;
    } else if (!last_one && w->tokens < STRAY_WINDOWS * window_tokens && strays) {
        return 0;
    }
    sums->last = mean;
    if (sums->first_kept < 0 || w->first < sums->first_kept)
        sums->first_kept = w->first;
    sums->n += w->tokens;
    sums->sx += w->sx;
    sums->sy += mean * (double)w->tokens;
    sums->sxx += w->sxx;
    sums->sxy += mean * w->sx;
    sums->syy += mean * mean * (double)w->tokens;
    double clamped = mean > min_value ? mean : min_value;
    clamped = clamped < MAX_ITL_S ? clamped : MAX_ITL_S;
    long long key = (long long)floor(log2((double)w->first) * BINS_PER_OCTAVE) * KEY_SPAN + ITL_OFFSET;
    key += (long long)floor(log(clamped) / log_gamma);
    return bump_bin(bins, key, w->tokens) < 0 ? -1 : 1;
}

/* fit_pairs(samples, prompt_tokens, completion_tokens, bins, window_tokens, min_value, log_gamma)
 *   -> (n, sx, sy, sxx, sxy, syy, lo, hi), bins updated in place; None when a sample is not a
 *   (float, int) pair or a count is out of range (the caller then takes the Python loop). */
PyObject *
fit_pairs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyTuple_Check(args[0]) || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "fit_pairs(samples: tuple, prompt, completion, bins: dict, window, min, log_gamma)");
        return NULL;
    }
    PyObject *samples = args[0], *bins = args[3];
    long long prompt = PyLong_AsLongLong(args[1]), completion = PyLong_AsLongLong(args[2]);
    long long window_tokens = PyLong_AsLongLong(args[4]);
    double min_value = PyFloat_AsDouble(args[5]), log_gamma = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (prompt < 0 || prompt > (1LL << 30) || completion > (1LL << 30) || window_tokens < 1)
        Py_RETURN_NONE;
    Py_ssize_t size = PyTuple_GET_SIZE(samples);
    long long total = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *pair = PyTuple_GET_ITEM(samples, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyFloat_CheckExact(PyTuple_GET_ITEM(pair, 0))
                || !PyLong_CheckExact(PyTuple_GET_ITEM(pair, 1)))
            Py_RETURN_NONE;
        long long k = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
        if ((k == -1 && PyErr_Occurred()) || k < 0 || k > (1LL << 24)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        total += k;
    }
    long long position = prompt + (completion - total > 1 ? completion - total : 1);
    Sums sums = {0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1, 0};
    Window w = {0, position, 0.0, 0.0, 0.0};
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *pair = PyTuple_GET_ITEM(samples, i);
        double value = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(pair, 0));
        long long k = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
        w.tokens += k;
        w.gap += value * (double)k;
        w.sx += (double)(k * position) + (double)(k * (k - 1)) / 2.0;
        w.sxx += (double)(k * position * position + position * k * (k - 1)) + (double)((k - 1) * k * (2 * k - 1)) / 6.0;
        position += k;
        if (w.tokens >= window_tokens) {
            int done = offer(&sums, &w, bins, min_value, log_gamma, window_tokens, 0);
            if (done < 0)
                return NULL;
            if (done)
                w = (Window){0, position, 0.0, 0.0, 0.0};
        }
    }
    if (w.tokens && offer(&sums, &w, bins, min_value, log_gamma, window_tokens, 1) < 0)
        return NULL;
    double lo = sums.first_kept < 0 ? INFINITY : (double)sums.first_kept;
    return Py_BuildValue("(Lddddddd)", sums.n, sums.sx, sums.sy, sums.sxx, sums.sxy, sums.syy, lo, (double)(position - 1));
}
