/* attnload.native._fastpath: the client's per-chunk work in C (docs/performance.md, "The compiled path").
 *
 * Why: on one core the pure-Python hot loop (SSE splitting, the plain-delta check, ITL stamping,
 * token counting, the ITL histogram update) cost more CPU per token than the socket and the HTTP
 * parser together. This module does exactly what the pure-Python code does, byte for byte:
 *
 *   Splitter            = attnload.client.sse.SseSplitter (same events, budgets and pending bytes);
 *                         errors are raised by the Python subclass's _overflow() and _dataless().
 *   StreamBase.consume     = the stream loop of attnload.client.chat._Run.consume: chunks whose bytes
 *                         around the content equal the last plain delta's are stamped here; any other
 *                         event goes, in order, to the Python subclass's _event(kind, data, at).
 *   gap_pairs           = the tuple built at the end of measure.recorder.split_gaps.
 *   record_pairs        = measure.histogram.LogHistogram.record_pairs (same float operations).
 *
 * The pure-Python code stays the reference; tests run both and compare (tests/test_fastpath.py).
 */
#include "fastpath.h"
#include <structmember.h>
#include <math.h>
#include <string.h>

static PyObject *MESSAGE;      /* b"message", shared by every event of the default type */
static PyObject *EMPTY_BYTES;  /* b"" */

/* ------------------------------------------------------------------------------------ Splitter */

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

static int
append_event(Splitter *self, PyObject *kind, const char *data, Py_ssize_t n)
{
    PyObject *bytes = n ? PyBytes_FromStringAndSize(data, n) : (Py_INCREF(EMPTY_BYTES), EMPTY_BYTES);
    if (bytes == NULL)
        return -1;
    PyObject *pair = PyTuple_Pack(2, kind, bytes);
    Py_DECREF(bytes);
    if (pair == NULL)
        return -1;
    int rc = PyList_Append(self->events, pair);
    Py_DECREF(pair);
    return rc;
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
    for (const char *line = block; line <= end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        Py_ssize_t size = stop - line;
        if (size >= 5 && memcmp(line, "data:", 5) == 0) {
            Py_ssize_t skip = (size > 5 && line[5] == ' ') ? 6 : 5;
            total += size - skip + (lines ? 1 : 0);
            lines++;
        } else if (size >= 6 && memcmp(line, "event:", 6) == 0) {
            const char *a = line + 6, *b = stop;
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
        line = nl + 1;
    }
    if (lines) {
        PyObject *data = PyBytes_FromStringAndSize(NULL, total);
        if (data == NULL) {
            Py_DECREF(kind);
            return -1;
        }
        char *out = PyBytes_AS_STRING(data);
        Py_ssize_t seen = 0;
        for (const char *line = block; line <= end;) {
            const char *nl = memchr(line, '\n', (size_t)(end - line));
            const char *stop = nl ? nl : end;
            Py_ssize_t size = stop - line;
            if (size >= 5 && memcmp(line, "data:", 5) == 0) {
                Py_ssize_t skip = (size > 5 && line[5] == ' ') ? 6 : 5;
                if (seen++)
                    *out++ = '\n';
                memcpy(out, line + skip, (size_t)(size - skip));
                out += size - skip;
            }
            if (nl == NULL)
                break;
            line = nl + 1;
        }
        PyObject *pair = PyTuple_Pack(2, kind, data);
        Py_DECREF(kind);
        Py_DECREF(data);
        if (pair == NULL)
            return -1;
        int rc = PyList_Append(self->events, pair);
        Py_DECREF(pair);
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

/* ------------------------------------------------------------------------------------ StreamBase */


/* ceil(bytes / 4) unless the text has words: str.split() semantics on a valid UTF-8 string */
static Py_ssize_t
count_tokens_ascii(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t words = 0;
    int in_word = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] == ' ') {  /* the only ASCII whitespace a plain JSON string can hold unescaped */
            in_word = 0;
        } else if (!in_word) {
            in_word = 1;
            words++;
        }
    }
    return words ? words : (n + 3) / 4;
}

static Py_ssize_t
count_tokens_unicode(PyObject *text, Py_ssize_t utf8_bytes)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), words = 0;
    int kind = PyUnicode_KIND(text), in_word = 0;
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) {
            in_word = 0;
        } else if (!in_word) {
            in_word = 1;
            words++;
        }
    }
    return words ? words : (utf8_bytes + 3) / 4;
}

static int
run_stamp(StreamBase *self, double at, Py_ssize_t tokens, PyObject *text)
{
    if (self->first_at == Py_None) {
        PyObject *first = PyFloat_FromDouble(at);
        if (first == NULL)
            return -1;
        Py_SETREF(self->first_at, first);
    } else {
        PyObject *gap = PyFloat_FromDouble(at - self->last_at);
        if (gap == NULL)
            return -1;
        int rc = PyList_Append(self->gaps, gap);
        Py_DECREF(gap);
        if (rc < 0)
            return -1;
    }
    self->last_at = at;
    PyObject *count = PyLong_FromSsize_t(tokens);
    if (count == NULL)
        return -1;
    int rc = PyList_Append(self->chunk_tokens, count);
    Py_DECREF(count);
    if (rc < 0)
        return -1;
    if (text != NULL && self->texts != Py_None)
        return PyList_Append(self->texts, text);
    return 0;
}

/* 1: stamped (or empty content, nothing to do); 0: not a fast-path chunk; -1: error */
static int
run_fast(StreamBase *self, PyObject *kind, PyObject *data, double at)
{
    if (self->plain_head == Py_None || !PyBytes_CheckExact(data))
        return 0;
    if (kind != MESSAGE && !(PyBytes_CheckExact(kind) && PyBytes_GET_SIZE(kind) == 7
                             && memcmp(PyBytes_AS_STRING(kind), "message", 7) == 0))
        return 0;
    Py_ssize_t lh = PyBytes_GET_SIZE(self->plain_head), lt = PyBytes_GET_SIZE(self->plain_tail);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    const char *p = PyBytes_AS_STRING(data);
    if (n < lh + lt || memcmp(p, PyBytes_AS_STRING(self->plain_head), (size_t)lh) != 0
            || memcmp(p + n - lt, PyBytes_AS_STRING(self->plain_tail), (size_t)lt) != 0)
        return 0;
    const unsigned char *raw = (const unsigned char *)p + lh;
    Py_ssize_t size = n - lh - lt;
    int ascii = 1;
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = raw[i];
        if (c < 0x20 || c == '"' || c == '\\')
            return 0;  /* escapes or control characters: the full path decides */
        if (c >= 0x80)
            ascii = 0;
    }
    if (size == 0)
        return 1;  /* empty content, finish_reason null: nothing to record */
    PyObject *text = NULL;
    Py_ssize_t tokens;
    if (ascii) {
        tokens = count_tokens_ascii(raw, size);
        if (self->texts != Py_None && (text = PyUnicode_DecodeASCII((const char *)raw, size, NULL)) == NULL)
            return -1;
    } else {
        text = PyUnicode_DecodeUTF8((const char *)raw, size, NULL);
        if (text == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return -1;
            PyErr_Clear();
            return 0;  /* invalid UTF-8: json.loads reports it, as the pure path does */
        }
        tokens = count_tokens_unicode(text, size);
    }
    if (tokens < 1)
        tokens = 1;
    int rc = run_stamp(self, at, tokens, text);
    Py_XDECREF(text);
    return rc < 0 ? -1 : 1;
}

static PyObject *
run_consume(StreamBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *at_arg = nargs >= 1 ? args[0] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {  /* consume(at=..., origin=...) as the pure path allows */
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "at") == 0)
            at_arg = args[nargs + i];
        else if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "origin") != 0)
            at_arg = NULL;
    }
    if (at_arg == NULL || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "consume(at, origin)");
        return NULL;
    }
    double at = PyFloat_AsDouble(at_arg);
    if (at == -1.0 && PyErr_Occurred())
        return NULL;
    if (run_consume_at(self, at) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* consume(at) on the run's own fields; 0, or -1 with an exception set. */
int
run_consume_at(StreamBase *self, double at)
{
    PyObject *events;
    if (Py_IS_TYPE(self->sse, &SplitterType) || PyObject_TypeCheck(self->sse, &SplitterType)) {
        events = ((Splitter *)self->sse)->events;
        Py_INCREF(events);
    } else {
        events = PyObject_GetAttrString(self->sse, "events");
        if (events == NULL)
            return -1;
    }
    if (!PyList_Check(events)) {
        Py_DECREF(events);
        PyErr_SetString(PyExc_TypeError, "sse.events must be a list");
        return -1;
    }
    Py_ssize_t count = PyList_GET_SIZE(events);
    /* take the events out first, as the pure path does (events, sse.events = sse.events, []) */
    PyObject *taken = PyList_GetSlice(events, 0, count);
    if (taken == NULL || PyList_SetSlice(events, 0, count, NULL) < 0) {
        Py_XDECREF(taken);
        Py_DECREF(events);
        return -1;
    }
    Py_DECREF(events);
    self->events_left -= count;
    if (self->events_left < 0) {
        Py_DECREF(taken);
        PyObject *r = PyObject_CallMethod((PyObject *)self, "_runaway", NULL);
        Py_XDECREF(r);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyList_GET_ITEM(taken, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(taken);
            PyErr_SetString(PyExc_TypeError, "events are (kind, data) pairs");
            return -1;
        }
        PyObject *kind = PyTuple_GET_ITEM(pair, 0), *data = PyTuple_GET_ITEM(pair, 1);
        int fast = run_fast(self, kind, data, at);
        if (fast < 0) {
            Py_DECREF(taken);
            return -1;
        }
        if (fast)
            continue;
        PyObject *r = PyObject_CallMethod((PyObject *)self, "_event", "OOd", kind, data, at);
        if (r == NULL) {
            Py_DECREF(taken);
            return -1;
        }
        Py_DECREF(r);
    }
    Py_DECREF(taken);
    return 0;
}

static PyObject *
run_stamp_method(StreamBase *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_stamp(at, tokens, text)");
        return NULL;
    }
    double at = PyFloat_AsDouble(args[0]);
    if (at == -1.0 && PyErr_Occurred())
        return NULL;
    Py_ssize_t tokens = PyLong_AsSsize_t(args[1]);
    if (tokens == -1 && PyErr_Occurred())
        return NULL;
    if (run_stamp(self, at, tokens, args[2] == Py_None ? NULL : args[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Defaults set at allocation, so a subclass that never calls the base __init__ still has valid fields. */
static PyObject *
run_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    StreamBase *self = (StreamBase *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->gaps = PyList_New(0);
    self->chunk_tokens = PyList_New(0);
    if (self->gaps == NULL || self->chunk_tokens == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(Py_None);
    self->first_at = Py_None;
    Py_INCREF(Py_None);
    self->texts = Py_None;
    Py_INCREF(Py_None);
    self->plain_head = Py_None;
    Py_INCREF(EMPTY_BYTES);
    self->plain_tail = EMPTY_BYTES;
    Py_INCREF(Py_None);
    self->sse = Py_None;
    return (PyObject *)self;
}

static int
run_traverse(StreamBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->sse);
    Py_VISIT(self->first_at);
    Py_VISIT(self->gaps);
    Py_VISIT(self->chunk_tokens);
    Py_VISIT(self->texts);
    Py_VISIT(self->plain_head);
    Py_VISIT(self->plain_tail);
    return 0;
}

static int
run_clear(StreamBase *self)
{
    Py_CLEAR(self->sse);
    Py_CLEAR(self->first_at);
    Py_CLEAR(self->gaps);
    Py_CLEAR(self->chunk_tokens);
    Py_CLEAR(self->texts);
    Py_CLEAR(self->plain_head);
    Py_CLEAR(self->plain_tail);
    return 0;
}

static void
run_dealloc(StreamBase *self)
{
    PyObject_GC_UnTrack(self);
    run_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Members the Python side assigns must never hold NULL: a setter refuses deletion. */
#define OBJ_GETSET(name)                                                                      \
    static PyObject *run_get_##name(StreamBase *self, void *c) { Py_INCREF(self->name); return self->name; } \
    static int run_set_##name(StreamBase *self, PyObject *v, void *c) {                          \
        if (v == NULL) { PyErr_SetString(PyExc_AttributeError, "cannot delete " #name); return -1; } \
        Py_INCREF(v); Py_SETREF(self->name, v); return 0; }
OBJ_GETSET(sse)
OBJ_GETSET(first_at)
OBJ_GETSET(gaps)
OBJ_GETSET(chunk_tokens)
OBJ_GETSET(texts)
OBJ_GETSET(plain_head)

static PyObject *run_get_plain_tail(StreamBase *self, void *c) { Py_INCREF(self->plain_tail); return self->plain_tail; }
static int
run_set_plain_tail(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || !PyBytes_CheckExact(v)) {
        PyErr_SetString(PyExc_TypeError, "plain_tail must be bytes");
        return -1;
    }
    Py_INCREF(v);
    Py_SETREF(self->plain_tail, v);
    return 0;
}

static int
run_set_plain_head_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || (v != Py_None && !PyBytes_CheckExact(v))) {
        PyErr_SetString(PyExc_TypeError, "plain_head must be bytes or None");
        return -1;
    }
    return run_set_plain_head(self, v, c);
}

static int
run_set_gaps_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || !PyList_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "gaps must be a list");
        return -1;
    }
    return run_set_gaps(self, v, c);
}

static int
run_set_chunk_tokens_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || !PyList_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "chunk_tokens must be a list");
        return -1;
    }
    return run_set_chunk_tokens(self, v, c);
}

static int
run_set_texts_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || (v != Py_None && !PyList_Check(v))) {
        PyErr_SetString(PyExc_TypeError, "texts must be a list or None");
        return -1;
    }
    return run_set_texts(self, v, c);
}

static PyObject *run_get_framed(StreamBase *self, void *c) { return PyBool_FromLong(self->framing != CHUNK_OFF); }
static PyObject *run_get_body_complete(StreamBase *self, void *c) { return PyBool_FromLong(self->framing == CHUNK_COMPLETE); }
static PyObject *run_get_trailing(StreamBase *self, void *c) { return PyBool_FromLong(self->trailing); }
static PyObject *run_get_done(StreamBase *self, void *c) { return PyBool_FromLong(self->done); }
static int
run_set_done(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete done");
        return -1;
    }
    int truth = PyObject_IsTrue(v);
    if (truth < 0)
        return -1;
    self->done = (char)truth;
    return 0;
}

static PyGetSetDef run_getset[] = {
    {"sse", (getter)run_get_sse, (setter)run_set_sse, "the splitter feeding this run", NULL},
    {"first_at", (getter)run_get_first_at, (setter)run_set_first_at, "recv time of the first content", NULL},
    {"gaps", (getter)run_get_gaps, (setter)run_set_gaps_checked, "gaps between content chunks (s)", NULL},
    {"chunk_tokens", (getter)run_get_chunk_tokens, (setter)run_set_chunk_tokens_checked, "tokens per chunk", NULL},
    {"texts", (getter)run_get_texts, (setter)run_set_texts_checked, "content pieces, when kept", NULL},
    {"plain_head", (getter)run_get_plain_head, (setter)run_set_plain_head_checked, NULL, NULL},
    {"plain_tail", (getter)run_get_plain_tail, (setter)run_set_plain_tail, NULL, NULL},
    {"done", (getter)run_get_done, (setter)run_set_done, "[DONE] seen", NULL},
    {"framed", (getter)run_get_framed, NULL, "the chunked body is framed here, not by llhttp", NULL},
    {"body_complete", (getter)run_get_body_complete, NULL, "the chunked body framed here has ended", NULL},
    {"trailing", (getter)run_get_trailing, NULL, "bytes came after that body's end", NULL},
    {NULL}
};

static PyMemberDef run_members[] = {
    {"last_at", T_DOUBLE, offsetof(StreamBase, last_at), 0, "recv time of the last content"},
    {"events_left", T_PYSSIZET, offsetof(StreamBase, events_left), 0, "events this response may still carry"},
    {NULL}
};

static PyMethodDef run_methods[] = {
    {"consume", (PyCFunction)(void (*)(void))run_consume, METH_FASTCALL | METH_KEYWORDS,
     "Handle the parsed events; all arrived in the recv that returned at `at`."},
    {"_stamp", (PyCFunction)(void (*)(void))run_stamp_method, METH_FASTCALL,
     "Time one content chunk, count its tokens, keep its text (None: not kept)."},
    {"start_body", (PyCFunction)run_start_body, METH_O,
     "Frame this 200's chunked body here from now on, starting with the body bytes read with the head."},
    {"feed_body", (PyCFunction)run_feed_body, METH_O, "More bytes of the chunked body framed here."},
    {"pump", (PyCFunction)(void (*)(void))run_pump, METH_FASTCALL,
     "pump(reader, at, deadline, first_deadline, idle_s, abandon_chunks, abandon_at, tail_s) -> PUMP_*"},
    {NULL}
};

static PyTypeObject StreamBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "attnload.native._fastpath.StreamBase",
    .tp_basicsize = sizeof(StreamBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The per-chunk state of one response; subclass it with _event(kind, data, at) and _runaway().",
    .tp_new = run_new,
    .tp_dealloc = (destructor)run_dealloc,
    .tp_traverse = (traverseproc)run_traverse,
    .tp_clear = (inquiry)run_clear,
    .tp_methods = run_methods,
    .tp_members = run_members,
    .tp_getset = run_getset,
};

/* ------------------------------------------------------------------------------ module functions */

static PyObject *
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
 * or None when a sample is not a (float, int) pair (the caller then takes the Python loop). Runs of
 * samples in one bucket update the dict once, in the same order, so the dict equals the Python one. */
static PyObject *
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
    long run_index = 0;
    PyObject *run_n = NULL;  /* the pending bucket's summed count */
    for (Py_ssize_t i = 0; i < size; i++) {
        double value = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(items[i], 0));
        PyObject *n = PyTuple_GET_ITEM(items[i], 1);
        long index = (long)floor(log(value > min_value ? value : min_value) / log_gamma);
        if (run_n != NULL && index != run_index) {
            int rc = bump(buckets, run_index, run_n);
            Py_CLEAR(run_n);
            if (rc < 0)
                goto fail;
        }
        if (run_n == NULL) {
            run_index = index;
            Py_INCREF(n);
            run_n = n;
        } else {
            Py_SETREF(run_n, PyNumber_Add(run_n, n));
            if (run_n == NULL)
                goto fail;
        }
        Py_SETREF(count, PyNumber_Add(count, n));
        if (count == NULL) {
            Py_XDECREF(run_n);
            Py_DECREF(seq);
            return NULL;
        }
        double times = PyLong_AsDouble(n);
        if (times == -1.0 && PyErr_Occurred()) {
            Py_XDECREF(run_n);
            goto fail;
        }
        total += value * times;
        if (value < low)
            low = value;
        if (value > high)
            high = value;
    }
    if (run_n != NULL) {
        int rc = bump(buckets, run_index, run_n);
        Py_DECREF(run_n);
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

static PyMethodDef module_methods[] = {
    {"gap_pairs", (PyCFunction)(void (*)(void))gap_pairs, METH_FASTCALL,
     "((gap / n, n) for gap, n in zip(gaps, tokens)) as a tuple"},
    {"record_pairs", (PyCFunction)(void (*)(void))record_pairs, METH_FASTCALL,
     "LogHistogram.record_pairs on its fields; None when a sample is not (float, int)"},
    {NULL}
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT, "attnload.native._fastpath", "The client's per-chunk work in C.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&SplitterType) < 0 || PyType_Ready(&StreamBaseType) < 0)
        return NULL;
    MESSAGE = PyBytes_FromString("message");
    EMPTY_BYTES = PyBytes_FromStringAndSize("", 0);
    if (MESSAGE == NULL || EMPTY_BYTES == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&fastpath_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&SplitterType);
    Py_INCREF(&StreamBaseType);
    if (PyModule_AddObject(module, "Splitter", (PyObject *)&SplitterType) < 0
            || PyModule_AddObject(module, "StreamBase", (PyObject *)&StreamBaseType) < 0 || fastread_init(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
