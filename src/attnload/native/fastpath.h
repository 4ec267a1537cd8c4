/* attnload.native._fastpath: what its sources share. One extension module, one file per Python it mirrors
 * (docs/performance.md, "The compiled path"):
 *
 *   sse.c        Splitter            attnload.client.sse.SseSplitter
 *   stream.c     StreamBase          attnload.client.stream.PyStream (consume, _stamp)
 *   readloop.c   StreamBase.pump     the read loop of attnload.client.chat.ApiClient._exchange
 *   histogram.c  gap_pairs,          attnload.measure.recorder.split_gaps,
 *                record_pairs        attnload.measure.histogram.LogHistogram.record_pairs
 *   decodefit.c  fit_pairs           attnload.measure.decodefit.request_fit
 *   module.c     the module itself: its types, functions and constants
 */
#ifndef ATTNLOAD_FASTPATH_H
#define ATTNLOAD_FASTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    char *buf;            /* the unfinished event's bytes (CRs normalised), PyMem: tracemalloc sees it */
    Py_ssize_t len, cap;
    int cr;               /* the last byte fed was a CR */
    PyObject *events;     /* list of (kind, data) not yet consumed */
    Py_ssize_t dropped;
    Py_ssize_t max_event_bytes;
    Py_ssize_t max_dataless;
} Splitter;

/* Where the chunked body of a 200 stream stands once the C side frames it (StreamBase.framing). */
enum {
    CHUNK_OFF = 0,     /* llhttp frames this response (the Python loop reads it) */
    CHUNK_SIZE,        /* hex digits of a chunk size */
    CHUNK_EXT_NAME,    /* after ';': an extension's name (a token) */
    CHUNK_EXT_VALUE,   /* after '=': a token or a quoted string */
    CHUNK_EXT_TOKEN,
    CHUNK_EXT_QUOTED,
    CHUNK_EXT_ESCAPE,  /* after a backslash in a quoted string */
    CHUNK_EXT_END,     /* after a quoted string: ';' or CR */
    CHUNK_SIZE_LF,
    CHUNK_DATA,
    CHUNK_DATA_CR,
    CHUNK_DATA_LF,
    CHUNK_TRAILER,     /* at the start of a trailer line, or of the final CRLF */
    CHUNK_TRAILER_NAME,
    CHUNK_TRAILER_VALUE,
    CHUNK_TRAILER_LF,
    CHUNK_END_LF,
    CHUNK_COMPLETE,
};

/* The state of one response being read: PyStream's fields, kept in C. */
typedef struct {
    PyObject_HEAD
    PyObject *sse;          /* the splitter whose events consume() reads */
    PyObject *first_at;     /* None or float */
    double last_at;
    PyObject *gaps;         /* list of float */
    PyObject *chunk_tokens; /* list of int */
    PyObject *texts;        /* None or list of str */
    PyObject *plain_head;   /* None or bytes: the bytes before the last plain delta's content */
    PyObject *plain_tail;   /* bytes after it */
    Py_ssize_t events_left;
    char done;
    int framing;            /* CHUNK_*: the chunked decoder's state */
    unsigned long long chunk_left;  /* the size being read, then the chunk's bytes still to come */
    int size_digits;
    Py_ssize_t name_bytes;  /* of the current extension's or trailer's name */
    Py_ssize_t line_bytes;  /* of the current size line, or of all trailers: bounded */
    char trailing;          /* bytes came after the body's end: the connection cannot be reused */
} StreamBase;

/* module.c */
extern PyObject *MESSAGE;      /* b"message", shared by every event of the default type */
extern PyObject *EMPTY_BYTES;  /* b"" */

/* sse.c */
extern PyTypeObject SplitterType;
int splitter_feed_bytes(Splitter *self, const char *data, Py_ssize_t n);

/* stream.c */
extern PyTypeObject StreamBaseType;
int stream_consume_at(StreamBase *self, double at);

/* readloop.c */
extern PyObject *FramingError;
PyObject *stream_start_body(StreamBase *self, PyObject *data);
PyObject *stream_feed_body(StreamBase *self, PyObject *data);
PyObject *stream_pump(StreamBase *self, PyObject *const *args, Py_ssize_t nargs);
int readloop_init(PyObject *module);

/* histogram.c */
PyObject *gap_pairs(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *record_pairs(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fit_pairs(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
