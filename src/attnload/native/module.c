/* attnload.native._fastpath: the module that joins the C sources (fastpath.h says which file mirrors
 * which Python). attnload.native chooses between it and the pure-Python path, once per process.
 */
#include "fastpath.h"

PyObject *MESSAGE;
PyObject *EMPTY_BYTES;

static PyMethodDef module_methods[] = {
    {"gap_pairs", (PyCFunction)(void (*)(void))gap_pairs, METH_FASTCALL,
     "((gap / n, n) for gap, n in zip(gaps, tokens)) as a tuple"},
    {"record_pairs", (PyCFunction)(void (*)(void))record_pairs, METH_FASTCALL,
     "LogHistogram.record_pairs on its fields; None when a sample is not (float, int)"},
    {"fit_pairs", (PyCFunction)(void (*)(void))fit_pairs, METH_FASTCALL,
     "one answer's decode-fit sums and position bins (decodefit.request_fit); None when a sample is not (float, int)"},
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
            || PyModule_AddObject(module, "StreamBase", (PyObject *)&StreamBaseType) < 0 || readloop_init(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
