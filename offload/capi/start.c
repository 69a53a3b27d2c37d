/* The drop-in library's start (offload/capi/build.py puts it first in the library's C
 * source, after the generated `offload_paths`, the module search path): the library's own
 * interpreter for a C program, and fork() with that interpreter running. */
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* fork() in a C program while other threads run in the library's interpreter: the forking
   thread takes the GIL first (no other thread holds it, or the interpreter's own locks,
   at the fork), and the child gives the interpreter its after-fork treatment (the
   runtime's hooks: the child starts with an empty runtime), as os.fork does. A module
   another thread is importing at the fork (a plugin, while the runtime starts) would
   stay locked for ever in the child, so the fork waits, a bounded time, until no other
   thread is importing (offload.runtime.imports_in_flight, the rule of the runtime's own
   before-fork hook, which waits first), asked again once the GIL and the import lock
   are held, so no import can start between the answer and the fork. */
static int offload_importing_elsewhere(void) {
    PyObject *name = PyUnicode_FromString("offload.runtime");
    PyObject *rt = name ? PyImport_GetModule(name) : NULL;    /* loaded, not imported here */
    Py_XDECREF(name);
    if (rt == NULL) {
        PyErr_Clear();
        return 0;                     /* no runtime yet: nothing of offload's is starting */
    }
    PyObject *r = PyObject_CallMethod(rt, "imports_in_flight", NULL);
    Py_DECREF(rt);
    if (r == NULL) {
        PyErr_Clear();
        return 0;
    }
    int yes = PyObject_IsTrue(r);
    Py_DECREF(r);
    return yes > 0;
}
static PyGILState_STATE offload_fork_gil;
static void offload_before_fork(void) {
    offload_fork_gil = PyGILState_Ensure();
    for (int waited_ms = 0;; waited_ms++) {
        PyOS_BeforeFork();
        if (waited_ms >= 10000 || !offload_importing_elsewhere())
            break;                    /* (an import stuck 10 s: fork as the program asks) */
        PyOS_AfterFork_Parent();
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
    }
}
static void offload_after_fork_parent(void) {
    PyOS_AfterFork_Parent();
    PyGILState_Release(offload_fork_gil);
}
static void offload_after_fork_child(void) {
    PyOS_AfterFork_Child();
    PyGILState_Release(offload_fork_gil);
}
__attribute__((constructor)) static void offload_start_python(void) {
    if (Py_IsInitialized()) {         /* loaded into a Python program: use its interpreter */
#if PY_VERSION_HEX < 0x030C0000
        /* cffi's embedding start-up spins on PyCapsule_Type.tp_version_tag as a lock and
           asserts it is 0 or its own mark; once Python code has looked an attribute up on
           a capsule the tag is set, so clear it (a method-cache invalidation, harmless) */
        PyGILState_STATE gil = PyGILState_Ensure();
        PyType_Modified(&PyCapsule_Type);
        PyGILState_Release(gil);
#endif
        return;
    }
    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.install_signal_handlers = 0;
    /* the isolated configuration reads no PYTHON* variable; these two are debugging aids
       a C program's user sets to see where its threads are (a hang, a crash) */
    const char *fh = getenv("PYTHONFAULTHANDLER");
    config.faulthandler = fh != NULL && *fh != '\0';
    const char *it = getenv("PYTHONPROFILEIMPORTTIME");    /* and where start-up goes */
    config.import_time = it != NULL && *it != '\0';
    config.site_import = 0;           /* the search path is given: site.py adds nothing */
    config.module_search_paths_set = 1;
    for (const char *const *p = offload_paths; *p; ++p) {
        wchar_t *w = Py_DecodeLocale(*p, NULL);
        if (w) {
            PyWideStringList_Append(&config.module_search_paths, w);
            PyMem_RawFree(w);
        }
    }
    PyStatus st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st))
        return;                       /* cffi reports it at the first call */
    /* tell the exports the interpreter is the library's own (a C program) */
    PyRun_SimpleString("import sys; sys._offload_capi_owns_python = True");
    pthread_atfork(offload_before_fork, offload_after_fork_parent, offload_after_fork_child);
    PyEval_SaveThread();              /* let any thread take the GIL */
}
