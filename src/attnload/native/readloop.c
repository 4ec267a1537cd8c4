/* StreamBase.pump and its chunked framing: the read loop of a 200 stream, in C.
 *
 * Mirrors the loop of attnload.client.chat.ApiClient._exchange (each read, its stamp, the deadlines
 * and the stop conditions) and ApiClient._finish_framing (after [DONE]); ApiClient._pump calls it
 * and maps each PUMP_* to what that loop does at the same point.
 *
 * Why: with the per-chunk work in C (stream.c), most of what was left per token on one core was the
 * Python around it: ApiClient._exchange's loop, SocketReader.recv's bookkeeping, and llhttp's wrapper
 * with its body callback (docs/performance.md, "Where a chunk's microseconds go"). Once llhttp has
 * parsed a 200's head and its body is chunked (vLLM, SGLang and every uvicorn server), StreamBase.pump
 * runs that loop here:
 *
 *   wait      the connection's io watcher through the gevent hub, with the reader's own deadline
 *             timer (attnload.client.transport.SocketReader.recv: the same hub.wait, so kills,
 *             timeouts and other greenlets behave exactly as on the Python loop);
 *   read      one recv(2) into a buffer shared by the thread's connections (the GIL is held and
 *             nothing switches greenlets until the bytes are copied into the splitter);
 *   stamp     the clock right after that recv: time.perf_counter's clock and rounding, so TTFT and
 *             gaps are the same recv timestamps as on the Python loop;
 *   frame     chunk sizes, extensions, data, trailers: what llhttp accepts from such a server, and
 *             FramingError (the Python caller's "malformed HTTP response") for anything else;
 *   consume   the splitter (sse.c) and StreamBase.consume (stream.c).
 *
 * It returns to Python only when the answer ends, the client abandons it or a deadline passes,
 * with every failure an exception the caller classifies as before. After [DONE] it reads the few
 * bytes that end the HTTP message (ApiClient._finish_framing's budget of time and bytes) so the
 * connection stays reusable.
 */
#include "fastpath.h"
#include <errno.h>
#include <sys/socket.h>
#include <time.h>

#define RECV_BYTES 65536            /* attnload.client.transport.RECV_BYTES */
#define MAX_LINE_BYTES (64 << 10)   /* attnload.client.budget.MAX_HEADER_BYTES: a size line, or all trailers */

enum { PUMP_DONE, PUMP_DONE_OPEN, PUMP_COMPLETE, PUMP_EOF, PUMP_TIMEOUT, PUMP_ABANDON };
#define PUMP_GO_ON (-1)
#define PUMP_FAILED (-2)

PyObject *FramingError;
static _Thread_local char recv_buffer[RECV_BYTES];  /* per OS thread: each has its own hub */
static PyObject *S_SOCK, *S_HUB, *S_IO, *S_WAIT, *S_TIMER, *S_ARMED_UNTIL, *S_UNTIL, *S_WAITING, *S_ARM, *S_DONE_AT;

/* time.perf_counter() on Linux: CLOCK_MONOTONIC in nanoseconds, then _PyTime_AsSecondsDouble. */
static double
perf_counter(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    volatile double seconds;
    if (ns % 1000000000LL == 0) {
        seconds = (double)(ns / 1000000000LL);
    } else {
        seconds = (double)ns;
        seconds /= 1e9;
    }
    return seconds;
}

/* ------------------------------------------------------------------------------ chunked framing */

static int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int
malformed(const char *what)
{
    PyErr_SetString(FramingError, what);
    return -1;
}

/* RFC 9110 tchar: what a chunk extension's or a trailer field's name is made of */
static int
is_token(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
        || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* a field value's or a quoted string's text: visible ASCII, space, tab and obs-text */
static int
is_text(unsigned char c)
{
    return c == '\t' || (c >= ' ' && c != 0x7f);
}

/* One byte of a size line after its digits, or of a trailer: the grammar llhttp holds a server to. */
static int
frame_line_byte(StreamBase *self, unsigned char c)
{
    if (++self->line_bytes > MAX_LINE_BYTES)
        return malformed(self->framing >= CHUNK_TRAILER ? "chunk trailers too long" : "chunk extension too long");
    switch (self->framing) {
    case CHUNK_EXT_NAME:
        if (is_token(c))
            return 0;
        if (c == '\r' && self->name_bytes == 0)  /* llhttp takes ";;" and ";=", not a bare ";" */
            return malformed("empty chunk extension name");
        break;
    case CHUNK_EXT_TOKEN:
        if (is_token(c))
            return 0;
        break;
    case CHUNK_EXT_VALUE:
        if (c == '"') {
            self->framing = CHUNK_EXT_QUOTED;
            return 0;
        }
        if (c == ';' || c == '\r')  /* an empty value */
            break;
        if (!is_token(c))
            return malformed("invalid character in chunk extension value");
        self->framing = CHUNK_EXT_TOKEN;
        return 0;
    case CHUNK_EXT_QUOTED:
        if (c == '"')
            self->framing = CHUNK_EXT_END;
        else if (c == '\\')
            self->framing = CHUNK_EXT_ESCAPE;
        else if (!is_text(c))
            return malformed("invalid character in a quoted chunk extension");
        return 0;
    case CHUNK_EXT_ESCAPE:
        if (!is_text(c))
            return malformed("invalid character in a quoted chunk extension");
        self->framing = CHUNK_EXT_QUOTED;
        return 0;
    case CHUNK_EXT_END:
        break;
    case CHUNK_TRAILER_NAME:
        if (is_token(c))
            return 0;
        if (c != ':' || self->name_bytes == 0)
            return malformed("invalid chunk trailer");
        self->framing = CHUNK_TRAILER_VALUE;
        return 0;
    case CHUNK_TRAILER_VALUE:
        if (c == '\r')
            self->framing = CHUNK_TRAILER_LF;
        else if (!is_text(c))
            return malformed("invalid character in a chunk trailer");
        return 0;
    }
    /* the end of an extension name or value: another extension, or the end of the size line */
    if (c == ';') {
        self->framing = CHUNK_EXT_NAME;
        self->name_bytes = 0;
    } else if (c == '=' && self->framing == CHUNK_EXT_NAME) {
        self->framing = CHUNK_EXT_VALUE;
    } else if (c == '\r') {
        self->framing = CHUNK_SIZE_LF;
    } else {
        return malformed("invalid character in chunk extensions");
    }
    return 0;
}

/* Frame n body bytes: the chunks' data go to the splitter when `keep`, else are dropped (after [DONE]).
 * What llhttp accepts from a server, this accepts; anything else is FramingError, except bytes after
 * the body's end, which end the connection's reuse (ApiClient: the same on the llhttp path). */
static int
dechunk(StreamBase *self, const char *p, Py_ssize_t n, int keep)
{
    const char *end = p + n;
    for (; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        switch (self->framing) {
        case CHUNK_SIZE: {
            int digit = hex_value(c);
            if (digit >= 0) {
                if (self->chunk_left > (0xffffffffffffffffULL - (unsigned long long)digit) / 16)
                    return malformed("chunk size overflow");
                self->chunk_left = self->chunk_left * 16 + (unsigned long long)digit;
                self->size_digits++;
            } else if (self->size_digits == 0) {
                return malformed("invalid character in chunk size");
            } else if (c == '\r') {
                self->framing = CHUNK_SIZE_LF;
            } else if (c == ';') {
                self->framing = CHUNK_EXT_NAME;
                self->line_bytes = 0;
                self->name_bytes = 0;
            } else {
                return malformed("invalid character in chunk size");
            }
            break;
        }
        case CHUNK_EXT_NAME:
        case CHUNK_TRAILER_NAME:
            if (frame_line_byte(self, c) < 0)
                return -1;
            if (is_token(c))
                self->name_bytes++;
            break;
        case CHUNK_EXT_VALUE:
        case CHUNK_EXT_TOKEN:
        case CHUNK_EXT_QUOTED:
        case CHUNK_EXT_ESCAPE:
        case CHUNK_EXT_END:
        case CHUNK_TRAILER_VALUE:
            if (frame_line_byte(self, c) < 0)
                return -1;
            break;
        case CHUNK_SIZE_LF:
            if (c != '\n')
                return malformed("expected LF after chunk size");
            self->framing = self->chunk_left ? CHUNK_DATA : CHUNK_TRAILER;
            self->size_digits = 0;
            self->line_bytes = 0;
            break;
        case CHUNK_DATA: {
            Py_ssize_t take = end - p;
            if ((unsigned long long)take > self->chunk_left)
                take = (Py_ssize_t)self->chunk_left;
            if (keep && splitter_feed_bytes((Splitter *)self->sse, p, take) < 0)
                return -1;
            p += take - 1;
            self->chunk_left -= (unsigned long long)take;
            if (self->chunk_left == 0)
                self->framing = CHUNK_DATA_CR;
            break;
        }
        case CHUNK_DATA_CR:
        case CHUNK_DATA_LF:
            if (c != (self->framing == CHUNK_DATA_CR ? '\r' : '\n'))
                return malformed("expected CRLF after chunk data");
            self->framing = self->framing == CHUNK_DATA_CR ? CHUNK_DATA_LF : CHUNK_SIZE;
            break;
        case CHUNK_TRAILER:
            if (c == '\r') {
                self->framing = CHUNK_END_LF;
            } else {  /* the first byte of a trailer's name */
                self->framing = CHUNK_TRAILER_NAME;
                self->name_bytes = is_token(c);
                if (frame_line_byte(self, c) < 0)
                    return -1;
            }
            break;
        case CHUNK_TRAILER_LF:
        case CHUNK_END_LF:
            if (c != '\n')
                return malformed("expected LF in the chunked body's trailer");
            self->framing = self->framing == CHUNK_END_LF ? CHUNK_COMPLETE : CHUNK_TRAILER;
            break;
        case CHUNK_COMPLETE:  /* empty lines before a next response are skipped, as llhttp does */
            if (c != '\r' && c != '\n') {  /* not this response's: the answer stands, the connection goes */
                self->trailing = 1;
                return 0;
            }
            break;
        default:
            PyErr_SetString(PyExc_RuntimeError, "the body is not framed here (start_body first)");
            return -1;
        }
    }
    return 0;
}

static PyObject *
feed_view(StreamBase *self, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = dechunk(self, view.buf, view.len, !self->done);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *
stream_start_body(StreamBase *self, PyObject *data)
{
    if (!PyObject_TypeCheck(self->sse, &SplitterType)) {
        PyErr_SetString(PyExc_TypeError, "start_body needs the compiled splitter");
        return NULL;
    }
    if (self->framing != CHUNK_OFF) {
        PyErr_SetString(PyExc_RuntimeError, "the body is already framed here");
        return NULL;
    }
    self->framing = CHUNK_SIZE;
    self->chunk_left = 0;
    self->size_digits = 0;
    self->line_bytes = 0;
    self->trailing = 0;
    return feed_view(self, data);
}

PyObject *
stream_feed_body(StreamBase *self, PyObject *data)
{
    if (self->framing == CHUNK_OFF) {
        PyErr_SetString(PyExc_RuntimeError, "the body is not framed here (start_body first)");
        return NULL;
    }
    return feed_view(self, data);
}

/* ------------------------------------------------------------------------------------ the loop */

/* SocketReader.recv: arm its timer for `until` if needed, wait on the hub, then one recv(2).
 * The byte count (0: the peer closed), or -1 with an exception (TimeoutError from the timer,
 * GreenletExit from a stop, OSError from recv). */
static Py_ssize_t
wait_and_recv(PyObject *reader, PyObject *wait, PyObject *io, int fd, double until)
{
    PyObject *deadline = PyFloat_FromDouble(until);
    if (deadline == NULL || PyObject_SetAttr(reader, S_UNTIL, deadline) < 0) {
        Py_XDECREF(deadline);
        return -1;
    }
    PyObject *timer = PyObject_GetAttr(reader, S_TIMER);
    PyObject *armed = timer ? PyObject_GetAttr(reader, S_ARMED_UNTIL) : NULL;
    double armed_until = armed ? PyFloat_AsDouble(armed) : -1.0;
    int ok = armed != NULL && !PyErr_Occurred();
    if (ok && (timer == Py_None || until < armed_until)) {
        PyObject *r = PyObject_CallMethodOneArg(reader, S_ARM, deadline);
        ok = r != NULL;
        Py_XDECREF(r);
    }
    Py_XDECREF(timer);
    Py_XDECREF(armed);
    Py_DECREF(deadline);
    if (!ok)
        return -1;
    for (;;) {
        if (PyObject_SetAttr(reader, S_WAITING, Py_True) < 0)
            return -1;
        PyObject *woken = PyObject_CallOneArg(wait, io);
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        int cleared = PyObject_SetAttr(reader, S_WAITING, Py_False);
        if (type != NULL) {
            if (cleared < 0)
                PyErr_Clear();
            PyErr_Restore(type, value, traceback);
            return -1;
        }
        if (cleared < 0) {
            Py_XDECREF(woken);
            return -1;
        }
        Py_DECREF(woken);
        ssize_t n = recv(fd, recv_buffer, RECV_BYTES, 0);
        if (n >= 0)
            return n;
        if (errno == EINTR) {
            if (PyErr_CheckSignals() < 0)
                return -1;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
            PyErr_SetFromErrno(PyExc_OSError);  /* ConnectionResetError and kin, as socket.recv raises */
            return -1;
        }
        /* a spurious wake-up: wait again for the same deadline */
    }
}

/* After a read's bytes were framed: consume its events, then the first stop condition met, or PUMP_GO_ON. */
static int
after_read(StreamBase *self, double at, double abandon_chunks, double abandon_at)
{
    if (PyList_GET_SIZE(((Splitter *)self->sse)->events)) {
        if (stream_consume_at(self, at) < 0)
            return PUMP_FAILED;
        if (self->done) {  /* done_at as the Python loop sets it, before the bytes that end the message */
            PyObject *when = PyFloat_FromDouble(at);
            int rc = when ? PyObject_SetAttr((PyObject *)self, S_DONE_AT, when) : -1;
            Py_XDECREF(when);
            if (rc < 0)
                return PUMP_FAILED;
            return PUMP_GO_ON;  /* the loop reads what ends the message */
        }
        if ((double)PyList_GET_SIZE(self->chunk_tokens) >= abandon_chunks || at >= abandon_at)
            return PUMP_ABANDON;
    }
    return self->framing == CHUNK_COMPLETE ? PUMP_COMPLETE : PUMP_GO_ON;
}

static int
get_doubles(PyObject *const *args, double *out, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyFloat_AsDouble(args[i]);
        if (out[i] == -1.0 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* pump(reader, at, deadline, first_deadline, idle_s, abandon_chunks, abandon_at, tail_s) -> PUMP_*
 * `at` is when the bytes fed by start_body were read; [DONE]'s arrival is set as the stream's done_at. */
PyObject *
stream_pump(StreamBase *self, PyObject *const *args, Py_ssize_t nargs)
{
    double v[7];
    if (nargs != 8 || get_doubles(args + 1, v, 7) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError,
                            "pump(reader, at, deadline, first_deadline, idle_s, abandon_chunks, abandon_at, tail_s)");
        return NULL;
    }
    if (self->framing == CHUNK_OFF || !PyObject_TypeCheck(self->sse, &SplitterType)) {
        PyErr_SetString(PyExc_RuntimeError, "the body is not framed here (start_body first)");
        return NULL;
    }
    double at = v[0], deadline = v[1], first_deadline = v[2], idle_s = v[3];
    double abandon_chunks = v[4], abandon_at = v[5], tail_s = v[6];
    PyObject *reader = args[0];
    PyObject *sock = PyObject_GetAttr(reader, S_SOCK);
    int fd = sock ? PyObject_AsFileDescriptor(sock) : -1;
    Py_XDECREF(sock);
    PyObject *hub = fd >= 0 ? PyObject_GetAttr(reader, S_HUB) : NULL;
    PyObject *wait = hub ? PyObject_GetAttr(hub, S_WAIT) : NULL;
    PyObject *io = wait ? PyObject_GetAttr(reader, S_IO) : NULL;
    Py_XDECREF(hub);
    if (io == NULL) {
        Py_XDECREF(wait);
        return NULL;
    }
    double tail_until = 0.0;
    Py_ssize_t tail_left = RECV_BYTES;  /* _finish_framing's byte budget */
    int code = self->done ? PUMP_GO_ON : after_read(self, at, abandon_chunks, abandon_at);
    while (code == PUMP_GO_ON) {
        double now = perf_counter(), until;
        if (self->done) {
            if (self->framing == CHUNK_COMPLETE) {
                code = PUMP_DONE;
                break;
            }
            if (tail_until == 0.0)
                tail_until = now + tail_s;
            if (tail_left <= 0 || now >= tail_until) {
                code = PUMP_DONE_OPEN;
                break;
            }
            until = tail_until;
        } else {
            double limit = self->first_at == Py_None && first_deadline < deadline ? first_deadline : deadline;
            until = now + idle_s < limit ? now + idle_s : limit;
            if (until <= now) {
                code = PUMP_TIMEOUT;
                break;
            }
        }
        Py_ssize_t n = wait_and_recv(reader, wait, io, fd, until);
        if (n < 0) {
            if (self->done && PyErr_ExceptionMatches(PyExc_OSError)) {  /* the answer is complete: reuse is at stake */
                PyErr_Clear();
                code = PUMP_DONE_OPEN;
                break;
            }
            code = PUMP_FAILED;
            break;
        }
        at = perf_counter();
        if (n == 0) {
            code = self->done ? PUMP_DONE_OPEN : PUMP_EOF;
            break;
        }
        if (self->done) {
            tail_left -= n;
            if (dechunk(self, recv_buffer, n, 0) < 0) {
                if (!PyErr_ExceptionMatches(FramingError)) {
                    code = PUMP_FAILED;
                    break;
                }
                PyErr_Clear();
                code = PUMP_DONE_OPEN;
            }
            continue;
        }
        code = dechunk(self, recv_buffer, n, 1) < 0 ? PUMP_FAILED
                                                    : after_read(self, at, abandon_chunks, abandon_at);
    }
    Py_DECREF(wait);
    Py_DECREF(io);
    if (code == PUMP_FAILED)
        return NULL;
    return PyLong_FromLong(code);
}

int
readloop_init(PyObject *module)
{
    FramingError = PyErr_NewExceptionWithDoc("attnload.native._fastpath.FramingError",
                                             "A chunked body llhttp would reject (the caller's bad_response).",
                                             PyExc_ValueError, NULL);
    if (FramingError == NULL || PyModule_AddObjectRef(module, "FramingError", FramingError) < 0)
        return -1;
    struct { PyObject **name; const char *text; } names[] = {
        {&S_SOCK, "sock"}, {&S_HUB, "hub"}, {&S_IO, "io"}, {&S_WAIT, "wait"}, {&S_TIMER, "timer"},
        {&S_ARMED_UNTIL, "armed_until"}, {&S_UNTIL, "until"}, {&S_WAITING, "waiting"}, {&S_ARM, "_arm"}, {&S_DONE_AT, "done_at"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].name = PyUnicode_InternFromString(names[i].text);
        if (*names[i].name == NULL)
            return -1;
    }
    struct { const char *name; int value; } codes[] = {
        {"PUMP_DONE", PUMP_DONE}, {"PUMP_DONE_OPEN", PUMP_DONE_OPEN}, {"PUMP_COMPLETE", PUMP_COMPLETE},
        {"PUMP_EOF", PUMP_EOF}, {"PUMP_TIMEOUT", PUMP_TIMEOUT}, {"PUMP_ABANDON", PUMP_ABANDON},
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (PyModule_AddIntConstant(module, codes[i].name, codes[i].value) < 0)
            return -1;
    return 0;
}
