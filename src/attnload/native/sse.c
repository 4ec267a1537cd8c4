/* Splitter: attnload.client.sse.SseSplitter in C (same events, budgets and pending bytes).
 *
 * Why: on one core, cutting SSE events in Python cost a large share of the client's CPU per token
 * (docs/performance.md, "The compiled path"). feed() gives byte for byte the (kind, data) pairs
 * SseSplitter.feed gives; the budgets' failures are raised by the Python subclass's _overflow(size)
 * and _dataless() (attnload.client.compiled.CompiledSseSplitter), so their messages are one code.
 * The pure-Python class stays the reference; tests run both and compare (tests/test_fastpath.py).
 */
#include "fastpath.h"
#include <structmember.h>
#include <string.h>

static int
splitter_reserve(Splitter *self, Py_ssize_t extra)
{
    Py_ssize_t need = self->len + extra;
    if (need <= self->cap)
        return 0;
    Py_ssize_t cap = self->cap ? self->cap : 256;
    while (cap < need)
        cap *= 2;
    char *buf = PyMem_Realloc(self->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->buf = buf;
    self->cap = cap;
    return 0;
}

static void
splitter_reset(Splitter *self)
{
    PyMem_Free(self->buf);
    self->buf = NULL;
    self->len = self->cap = 0;
}

/* Appends the event (kind, data) to self->events; the caller keeps its references. */
static int
append_pair(Splitter *self, PyObject *kind, PyObject *data)
{
    PyObject *pair = PyTuple_Pack(2, kind, data);
    if (pair == NULL)
        return -1;
    int rc = PyList_Append(self->events, pair);
    Py_DECREF(pair);
    return rc;
}

static int
append_event(Splitter *self, PyObject *kind, const char *data, Py_ssize_t n)
{
    PyObject *bytes = n ? PyBytes_FromStringAndSize(data, n) : (Py_INCREF(EMPTY_BYTES), EMPTY_BYTES);
    if (bytes == NULL)
        return -1;
    int rc = append_pair(self, kind, bytes);
    Py_DECREF(bytes);
    return rc;
}

/* The length of the line at ``line`` (up to its '\n' or ``end``); *nl is that '\n', or NULL for the last line. */
static Py_ssize_t
line_at(const char *line, const char *end, const char **nl)
{
    *nl = memchr(line, '\n', (size_t)(end - line));
    return (*nl ? *nl : end) - line;
}

/* Where a data line's value starts ("data:" and one optional space), or 0 for any other line. */
static Py_ssize_t
data_value_at(const char *line, Py_ssize_t size)
{
    if (size < 5 || memcmp(line, "data:", 5) != 0)
        return 0;
    return (size > 5 && line[5] == ' ') ? 6 : 5;
}

static int
is_bytes_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}

/* One block between blank lines: SseSplitter._event. */
static int
splitter_event(Splitter *self, const char *block, Py_ssize_t n)
{
    if (n >= 5 && memcmp(block, "data:", 5) == 0 && memchr(block, '\n', (size_t)n) == NULL) {
        Py_ssize_t skip = (n > 5 && block[5] == ' ') ? 6 : 5;
        return append_event(self, MESSAGE, block + skip, n - skip);
    }
    PyObject *kind = MESSAGE;
    Py_INCREF(kind);
    Py_ssize_t lines = 0, total = 0;
    const char *end = block + n;
    /* first pass: the data lines' total size; the last event: line names the kind */
    for (const char *line = block, *nl; line <= end; line = nl + 1) {
        Py_ssize_t size = line_at(line, end, &nl);
        Py_ssize_t skip = data_value_at(line, size);
        if (skip) {
            total += size - skip + (lines ? 1 : 0);
            lines++;
        } else if (size >= 6 && memcmp(line, "event:", 6) == 0) {
            const char *a = line + 6, *b = line + size;
            while (a < b && is_bytes_space(*a))
                a++;
            while (b > a && is_bytes_space(b[-1]))
                b--;
            Py_DECREF(kind);
            kind = PyBytes_FromStringAndSize(a, b - a);
            if (kind == NULL)
                return -1;
        }
        if (nl == NULL)
            break;
    }
    if (lines) {
        PyObject *data = PyBytes_FromStringAndSize(NULL, total);
        if (data == NULL) {
            Py_DECREF(kind);
            return -1;
        }
        char *out = PyBytes_AS_STRING(data);
        Py_ssize_t seen = 0;
        for (const char *line = block, *nl; line <= end; line = nl + 1) {
            Py_ssize_t size = line_at(line, end, &nl);
            Py_ssize_t skip = data_value_at(line, size);
            if (skip) {
                if (seen++)
                    *out++ = '\n';
                memcpy(out, line + skip, (size_t)(size - skip));
                out += size - skip;
            }
            if (nl == NULL)
                break;
        }
        int rc = append_pair(self, kind, data);
        Py_DECREF(kind);
        Py_DECREF(data);
        return rc;
    }
    Py_DECREF(kind);
    self->dropped++;
    if (self->dropped > self->max_dataless) {
        PyObject *r = PyObject_CallMethod((PyObject *)self, "_dataless", NULL);
        Py_XDECREF(r);
        return -1;  /* _dataless raises */
    }
    return 0;
}

static const char *
find_blank(const char *p, const char *end)
{
    while (p + 1 < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p - 1));
        if (nl == NULL)
            return NULL;
        if (nl[1] == '\n')
            return nl;
        p = nl + 1;
    }
    return NULL;
}

/* Add the bytes of one read (or one chunk of it); 0, or -1 with an exception set. */
int
splitter_feed_bytes(Splitter *self, const char *data, Py_ssize_t n)
{
    /* one whole one-line event per read: most reads */
    if (self->len == 0 && !self->cr && n >= 8 && memcmp(data, "data: ", 6) == 0 && data[n - 1] == '\n'
            && data[n - 2] == '\n' && memchr(data, '\n', (size_t)(n - 2)) == NULL
            && memchr(data, '\r', (size_t)n) == NULL)
        return append_event(self, MESSAGE, data + 6, n - 8);
    Py_ssize_t old = self->len;
    if (splitter_reserve(self, n) < 0)
        return -1;
    char *out = self->buf + self->len;
    if (self->cr || memchr(data, '\r', (size_t)n) != NULL) {
        const char *p = data, *end = data + n;
        if (self->cr && p < end && *p == '\n')
            p++;  /* the LF of a CRLF whose CR ended the previous read */
        self->cr = p < end && end[-1] == '\r';
        while (p < end) {
            char c = *p++;
            if (c == '\r') {
                *out++ = '\n';
                if (p < end && *p == '\n')
                    p++;
            } else {
                *out++ = c;
            }
        }
    } else {
        memcpy(out, data, (size_t)n);
        out += n;
    }
    self->len = out - self->buf;
    if (self->len == old)
        return 0;
    const char *buf = self->buf, *end = buf + self->len;
    const char *start = buf;
    const char *from = buf + (old ? old - 1 : 0);  /* the kept bytes held no blank line */
    int completed = 0;
    for (;;) {
        const char *blank = find_blank(from, end);
        if (blank == NULL)
            break;
        if (splitter_event(self, start, blank - start) < 0) {
            Py_ssize_t used = blank + 2 - buf;  /* keep the buffer consistent: drop what was parsed */
            memmove(self->buf, self->buf + used, (size_t)(self->len - used));
            self->len -= used;
            return -1;
        }
        start = from = blank + 2;
        completed = 1;
    }
    if (completed) {
        Py_ssize_t used = start - buf;
        memmove(self->buf, self->buf + used, (size_t)(self->len - used));
        self->len -= used;
    } else if (old && self->len > self->max_event_bytes) {
        Py_ssize_t size = self->len;
        splitter_reset(self);
        PyObject *r = PyObject_CallMethod((PyObject *)self, "_overflow", "n", size);
        Py_XDECREF(r);
        return -1;  /* _overflow raises */
    }
    return 0;
}

static PyObject *
splitter_feed(Splitter *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = splitter_feed_bytes(self, view.buf, view.len);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
splitter_discard(Splitter *self, PyObject *Py_UNUSED(ignored))
{
    if (PyList_SetSlice(self->events, 0, PyList_GET_SIZE(self->events), NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
splitter_pending(Splitter *self, void *Py_UNUSED(closure))
{
    return PyBytes_FromStringAndSize(self->buf ? self->buf : "", self->len);
}

static PyObject *
splitter_get_events(Splitter *self, void *Py_UNUSED(closure))
{
    Py_INCREF(self->events);
    return self->events;
}

static int
splitter_set_events(Splitter *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL || !PyList_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "events must be a list");
        return -1;
    }
    Py_INCREF(value);
    Py_SETREF(self->events, value);
    return 0;
}

static PyObject *
splitter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Splitter *self = (Splitter *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->events = PyList_New(0);
    if (self->events == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->max_event_bytes = 1 << 20;
    self->max_dataless = 4096;
    return (PyObject *)self;
}

static int
splitter_init(Splitter *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_event_bytes", "max_dataless", NULL};
    Py_ssize_t max_event_bytes = 1 << 20, max_dataless = 4096;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|nn", kwlist, &max_event_bytes, &max_dataless))
        return -1;
    self->max_event_bytes = max_event_bytes;
    self->max_dataless = max_dataless;
    return 0;
}

static int
splitter_traverse(Splitter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->events);
    return 0;
}

static int
splitter_clear(Splitter *self)
{
    Py_CLEAR(self->events);
    return 0;
}

static void
splitter_dealloc(Splitter *self)
{
    PyObject_GC_UnTrack(self);
    splitter_clear(self);
    PyMem_Free(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef splitter_methods[] = {
    {"feed", (PyCFunction)splitter_feed, METH_O, "Add the bytes of one read; complete events go to events."},
    {"discard", (PyCFunction)splitter_discard, METH_NOARGS, "Forget the parsed events not yet consumed."},
    {NULL}
};

static PyMemberDef splitter_members[] = {
    {"dropped", T_PYSSIZET, offsetof(Splitter, dropped), 0, "blocks without a data field"},
    {"max_event_bytes", T_PYSSIZET, offsetof(Splitter, max_event_bytes), 0, NULL},
    {"max_dataless", T_PYSSIZET, offsetof(Splitter, max_dataless), 0, NULL},
    {NULL}
};

static PyGetSetDef splitter_getset[] = {
    {"pending", (getter)splitter_pending, NULL, "bytes after the last complete event", NULL},
    {"events", (getter)splitter_get_events, (setter)splitter_set_events, "parsed (kind, data) pairs", NULL},
    {NULL}
};

PyTypeObject SplitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "attnload.native._fastpath.Splitter",
    .tp_basicsize = sizeof(Splitter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SseSplitter in C (attnload.client.sse): subclass it with _overflow(size) and _dataless().",
    .tp_new = splitter_new,
    .tp_init = (initproc)splitter_init,
    .tp_dealloc = (destructor)splitter_dealloc,
    .tp_traverse = (traverseproc)splitter_traverse,
    .tp_clear = (inquiry)splitter_clear,
    .tp_methods = splitter_methods,
    .tp_members = splitter_members,
    .tp_getset = splitter_getset,
};
