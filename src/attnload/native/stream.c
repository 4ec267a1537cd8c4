/* StreamBase: the state of one response being read, and its per-chunk work, in C.
 *
 * Why: on one core the pure-Python hot loop (the plain-delta check, ITL stamping, token counting)
 * cost more CPU per token than the socket and the HTTP parser together (docs/performance.md,
 * "The compiled path"). This type does exactly what the pure-Python stream does, byte for byte:
 *
 *   consume  = attnload.client.stream.PyStream.consume: chunks whose bytes around the content equal
 *              the last plain delta's are stamped here; any other event goes, in order, to the Python
 *              subclass's _event(kind, data, at) (attnload.client.checks.StreamChecks._event), and a
 *              stream past its event budget to its _runaway().
 *   _stamp   = PyStream._stamp: time one content chunk, count its tokens, keep its text.
 *
 * The subclass is attnload.client.compiled.CStream; its read loop (pump) is in readloop.c. The
 * pure-Python code stays the reference; tests run both and compare (tests/test_fastpath.py).
 */
#include "fastpath.h"
#include <structmember.h>
#include <string.h>

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
stream_stamp(StreamBase *self, double at, Py_ssize_t tokens, PyObject *text)
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
stream_fast(StreamBase *self, PyObject *kind, PyObject *data, double at)
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
    int rc = stream_stamp(self, at, tokens, text);
    Py_XDECREF(text);
    return rc < 0 ? -1 : 1;
}

static PyObject *
stream_consume(StreamBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
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
    if (stream_consume_at(self, at) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* consume(at) on the stream's own fields; 0, or -1 with an exception set. */
int
stream_consume_at(StreamBase *self, double at)
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
        int fast = stream_fast(self, kind, data, at);
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
stream_stamp_method(StreamBase *self, PyObject *const *args, Py_ssize_t nargs)
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
    if (stream_stamp(self, at, tokens, args[2] == Py_None ? NULL : args[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Defaults set at allocation, so a subclass that never calls the base __init__ still has valid fields. */
static PyObject *
stream_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
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
stream_traverse(StreamBase *self, visitproc visit, void *arg)
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
stream_clear(StreamBase *self)
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
stream_dealloc(StreamBase *self)
{
    PyObject_GC_UnTrack(self);
    stream_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Members the Python side assigns must never hold NULL: a setter refuses deletion. */
#define OBJ_GETSET(name)                                                                      \
    static PyObject *stream_get_##name(StreamBase *self, void *c) { Py_INCREF(self->name); return self->name; } \
    static int stream_set_##name(StreamBase *self, PyObject *v, void *c) {                          \
        if (v == NULL) { PyErr_SetString(PyExc_AttributeError, "cannot delete " #name); return -1; } \
        Py_INCREF(v); Py_SETREF(self->name, v); return 0; }
OBJ_GETSET(sse)
OBJ_GETSET(first_at)
OBJ_GETSET(gaps)
OBJ_GETSET(chunk_tokens)
OBJ_GETSET(texts)
OBJ_GETSET(plain_head)

static PyObject *stream_get_plain_tail(StreamBase *self, void *c) { Py_INCREF(self->plain_tail); return self->plain_tail; }
static int
stream_set_plain_tail(StreamBase *self, PyObject *v, void *c)
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
stream_set_plain_head_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || (v != Py_None && !PyBytes_CheckExact(v))) {
        PyErr_SetString(PyExc_TypeError, "plain_head must be bytes or None");
        return -1;
    }
    return stream_set_plain_head(self, v, c);
}

static int
stream_set_gaps_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || !PyList_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "gaps must be a list");
        return -1;
    }
    return stream_set_gaps(self, v, c);
}

static int
stream_set_chunk_tokens_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || !PyList_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "chunk_tokens must be a list");
        return -1;
    }
    return stream_set_chunk_tokens(self, v, c);
}

static int
stream_set_texts_checked(StreamBase *self, PyObject *v, void *c)
{
    if (v == NULL || (v != Py_None && !PyList_Check(v))) {
        PyErr_SetString(PyExc_TypeError, "texts must be a list or None");
        return -1;
    }
    return stream_set_texts(self, v, c);
}

static PyObject *stream_get_framed(StreamBase *self, void *c) { return PyBool_FromLong(self->framing != CHUNK_OFF); }
static PyObject *stream_get_body_complete(StreamBase *self, void *c) { return PyBool_FromLong(self->framing == CHUNK_COMPLETE); }
static PyObject *stream_get_trailing(StreamBase *self, void *c) { return PyBool_FromLong(self->trailing); }
static PyObject *stream_get_done(StreamBase *self, void *c) { return PyBool_FromLong(self->done); }
static int
stream_set_done(StreamBase *self, PyObject *v, void *c)
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

static PyGetSetDef stream_getset[] = {
    {"sse", (getter)stream_get_sse, (setter)stream_set_sse, "the splitter feeding this stream", NULL},
    {"first_at", (getter)stream_get_first_at, (setter)stream_set_first_at, "recv time of the first content", NULL},
    {"gaps", (getter)stream_get_gaps, (setter)stream_set_gaps_checked, "gaps between content chunks (s)", NULL},
    {"chunk_tokens", (getter)stream_get_chunk_tokens, (setter)stream_set_chunk_tokens_checked, "tokens per chunk", NULL},
    {"texts", (getter)stream_get_texts, (setter)stream_set_texts_checked, "content pieces, when kept", NULL},
    {"plain_head", (getter)stream_get_plain_head, (setter)stream_set_plain_head_checked, NULL, NULL},
    {"plain_tail", (getter)stream_get_plain_tail, (setter)stream_set_plain_tail, NULL, NULL},
    {"done", (getter)stream_get_done, (setter)stream_set_done, "[DONE] seen", NULL},
    {"framed", (getter)stream_get_framed, NULL, "the chunked body is framed here, not by llhttp", NULL},
    {"body_complete", (getter)stream_get_body_complete, NULL, "the chunked body framed here has ended", NULL},
    {"trailing", (getter)stream_get_trailing, NULL, "bytes came after that body's end", NULL},
    {NULL}
};

static PyMemberDef stream_members[] = {
    {"last_at", T_DOUBLE, offsetof(StreamBase, last_at), 0, "recv time of the last content"},
    {"events_left", T_PYSSIZET, offsetof(StreamBase, events_left), 0, "events this response may still carry"},
    {NULL}
};

static PyMethodDef stream_methods[] = {
    {"consume", (PyCFunction)(void (*)(void))stream_consume, METH_FASTCALL | METH_KEYWORDS,
     "Handle the parsed events; all arrived in the recv that returned at `at`."},
    {"_stamp", (PyCFunction)(void (*)(void))stream_stamp_method, METH_FASTCALL,
     "Time one content chunk, count its tokens, keep its text (None: not kept)."},
    {"start_body", (PyCFunction)stream_start_body, METH_O,
     "Frame this 200's chunked body here from now on, starting with the body bytes read with the head."},
    {"feed_body", (PyCFunction)stream_feed_body, METH_O, "More bytes of the chunked body framed here."},
    {"pump", (PyCFunction)(void (*)(void))stream_pump, METH_FASTCALL,
     "pump(reader, at, deadline, first_deadline, idle_s, abandon_chunks, abandon_at, tail_s) -> PUMP_*"},
    {NULL}
};

PyTypeObject StreamBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "attnload.native._fastpath.StreamBase",
    .tp_basicsize = sizeof(StreamBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The per-chunk state of one response; subclass it with _event(kind, data, at) and _runaway().",
    .tp_new = stream_new,
    .tp_dealloc = (destructor)stream_dealloc,
    .tp_traverse = (traverseproc)stream_traverse,
    .tp_clear = (inquiry)stream_clear,
    .tp_methods = stream_methods,
    .tp_members = stream_members,
    .tp_getset = stream_getset,
};
