"""Threads Python did not create, calling back into Python once per call.

A sampler written in Rust or C (nutpie, a numba-compiled loop) owns its
threads and takes the GIL around each call into Python
(PyGILState_Ensure / PyGILState_Release).  Each such call makes a new
Python thread state and drops it on return, so anything kept per Python
thread state (threading.local) is gone at the next call.  ctypes callbacks
do exactly this when C calls them from a thread without a thread state;
this module compiles a tiny C loop that calls a callback n times from a
new pthread (or from the calling thread, which has a thread state: the
baseline).

    lib = foreign_threads.load()          # None (and a reason) without a C compiler
    lib.run(callback, n_calls, n_threads) # n_threads new pthreads, each calling n_calls times
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

_SRC = r"""
#include <pthread.h>
#include <stdint.h>
typedef void (*rt_cb)(int64_t);
struct job { rt_cb cb; int64_t n; };
static void *loop(void *arg) {
    struct job *j = (struct job *)arg;
    for (int64_t i = 0; i < j->n; i++) j->cb(i);
    return 0;
}
/* n_threads new pthreads, each calling cb n times; 0 on success */
int run(rt_cb cb, int64_t n, int n_threads) {
    pthread_t t[64];
    struct job j = {cb, n};
    if (n_threads < 1 || n_threads > 64) return -1;
    for (int k = 0; k < n_threads; k++)
        if (pthread_create(&t[k], 0, loop, &j)) return -2;
    for (int k = 0; k < n_threads; k++) pthread_join(t[k], 0);
    return 0;
}
/* the same loop on the calling thread */
int run_here(rt_cb cb, int64_t n) { struct job j = {cb, n}; loop(&j); return 0; }
"""

CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int64)
_cache = {}


def load():
    """(lib, None), or (None, why) when no C compiler is found or it fails."""
    if "lib" in _cache:
        return _cache["lib"]
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None or sys.platform == "win32":
        _cache["lib"] = (None, "no C compiler (cc) to build the foreign-thread helper")
        return _cache["lib"]
    d = tempfile.mkdtemp(prefix="rt_foreign_")
    src, so = os.path.join(d, "ft.c"), os.path.join(d, "ft.so")
    with open(src, "w") as fh:
        fh.write(_SRC)
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", src, "-o", so],
                       capture_output=True, text=True)
    if r.returncode:
        _cache["lib"] = (None, f"the C compiler failed: {r.stderr[:200]}")
        return _cache["lib"]
    lib = ctypes.CDLL(so)        # CDLL: the GIL is released for the call
    lib.run.argtypes = [CALLBACK, ctypes.c_int64, ctypes.c_int]
    lib.run_here.argtypes = [CALLBACK, ctypes.c_int64]
    _cache["lib"] = (lib, None)
    return _cache["lib"]


def call_from_c_threads(fn, n_calls, n_threads=1):
    """fn(i) called n_calls times from each of n_threads new C threads; the
    first exception fn raised is re-raised here."""
    lib, why = load()
    if lib is None:
        raise RuntimeError(why)
    errors = []

    def cb(i):
        try:
            fn(i)
        except BaseException as e:          # noqa: BLE001 -- carried back to the caller
            errors.append(e)

    c = CALLBACK(cb)
    if lib.run(c, n_calls, n_threads):
        raise RuntimeError("pthread_create failed")
    if errors:
        raise errors[0]


def call_from_this_thread(fn, n_calls):
    """fn(i) called n_calls times by the same C loop, on this (Python) thread."""
    lib, why = load()
    if lib is None:
        raise RuntimeError(why)
    c = CALLBACK(fn)
    lib.run_here(c, n_calls)
