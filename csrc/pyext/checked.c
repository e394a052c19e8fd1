/* revtape._checked: the checks of ctape.value_and_gradient(x, out=g) in C.
 *
 * The one place in revtape where C calls the Python C API (the VM never
 * does): a small extension module beside the cffi module revtape._vm, built
 * against the limited API of Python 3.11 (abi3).  compiled.py gives each
 * CompiledTape of one plain array input a State and calls
 *
 *     value_and_grad(state, x, out)
 *
 * first on every value_and_gradient call.  It accepts only the plain case --
 * x and out exact numpy arrays (out may be None: a new array is made) of
 * dtype float64 whose buffers are C-contiguous, 8-byte aligned, of the recorded shape
 * and of the program's lengths, out writeable and not overlapping x -- and
 * then runs rt_value_and_grad (the entry point of the cffi path and of
 * ctape.bind) with the GIL released.  It returns
 *
 *     (value, out)   the replay succeeded (the tape is marked as replayed),
 *     None           the arguments are not the plain case: nothing ran, the
 *                    Python path handles them (conversions, copies, errors),
 *     an int         the VM's status of a replay that failed (RT_BUSY, a
 *                    guard, a callback's error): compiled.py raises for it.
 *
 * Nothing is cached between calls: each call reads x's and out's buffers
 * afresh (dtype, strides, shape and writeability can all change in place).
 *
 * Trust: the State holds a buffer export of the rt_program struct itself
 * (ffi.buffer of the cffi object owning it) and a reference to the arena that
 * owns the struct's arrays, so the program outlives every State pointing at
 * it; the lengths handed to C are checked against the struct's own n_in and
 * n_grad on every call.  rt_value_and_grad is found by dlsym in the already
 * loaded revtape._vm (link()), never taken as a number from Python.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stddef.h>
#include <stdint.h>
#ifndef _WIN32
#include <dlfcn.h>
#include <sched.h>
#else
#define sched_yield() ((void)0)     /* never reached: link() finds no VM on Windows */
#endif

#include "vm.h"

typedef int (*vg_fn)(rt_program *p, const double *x, double *value, double *g);

/* rt_value_and_grad of the loaded revtape._vm; NULL until link() found it
 * (then value_and_grad accepts nothing and the Python path serves). */
static vg_fn vg_entry = NULL;
/* rt_forward: a Bound made with forward=True runs the forward sweep alone */
typedef int (*fw_fn)(rt_program *, const double *, double *);
static fw_fn fw_entry = NULL;

static PyObject *s_fast_marks, *s_replayed_by, *s_dtype;   /* interned attribute names */

typedef struct {
    PyObject_HEAD
    Py_buffer prog;          /* export of the rt_program struct (ffi.buffer(p)) */
    PyObject *arena;         /* owns the program's arrays; what the tape is marked with */
    PyObject *tape;          /* the tape to mark, or None */
    PyObject *ndarray;       /* numpy.ndarray: x and out must be exactly this type */
    PyObject *f64;           /* numpy.dtype(float64): x.dtype and out.dtype must be it */
    PyObject *empty;         /* numpy.empty, called with shape for out=None */
    PyObject *shape;         /* the input's shape as a tuple */
    PyObject *marker;        /* Python: marks a tape that has _fast_marks (see mark) */
    PyObject *on_hot;        /* Python: called on RT_OK_HOT (native="auto" got hot) */
    PyObject *marks;         /* the tape's _fast_marks when cell is held, else NULL */
    Py_buffer cell;          /* its int64 cell (valid while marks != NULL) */
    int64_t mark_id;         /* the arena's id in marks */
    Py_ssize_t ndim;
    Py_ssize_t dims[8];      /* recorded shape (ndim <= 8 accepted; more: no State) */
    PyObject *weaklist;      /* marks.binds holds States weakly */
} State;

static PyTypeObject *state_type = NULL;

static void state_forget_marks(State *s)
{
    if (s->marks != NULL) {
        PyBuffer_Release(&s->cell);
        Py_CLEAR(s->marks);
    }
}

static int state_traverse(State *s, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)s));
    Py_VISIT(s->prog.obj);
    Py_VISIT(s->arena);
    Py_VISIT(s->tape);
    Py_VISIT(s->ndarray);
    Py_VISIT(s->f64);
    Py_VISIT(s->empty);
    Py_VISIT(s->shape);
    Py_VISIT(s->marker);
    Py_VISIT(s->on_hot);
    Py_VISIT(s->marks);
    if (s->marks != NULL)
        Py_VISIT(s->cell.obj);
    return 0;
}

/* Called by the cycle collector only on an unreachable State: no call of it
 * is running (a running call's caller holds it). */
static int state_clear(State *s)
{
    state_forget_marks(s);
    if (s->prog.obj != NULL)
        PyBuffer_Release(&s->prog);
    s->prog.obj = NULL;
    s->prog.buf = NULL;
    Py_CLEAR(s->arena);
    Py_CLEAR(s->tape);
    Py_CLEAR(s->ndarray);
    Py_CLEAR(s->f64);
    Py_CLEAR(s->empty);
    Py_CLEAR(s->shape);
    Py_CLEAR(s->marker);
    Py_CLEAR(s->on_hot);
    return 0;
}

static void state_dealloc(State *s)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)s);
    PyObject_GC_UnTrack(s);
    if (s->weaklist != NULL)
        PyObject_ClearWeakRefs((PyObject *)s);
    state_clear(s);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(s);
    Py_DECREF(tp);
}

static PyObject *state_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *program, *arena, *tape, *ndarray, *f64, *empty, *shape, *marker, *on_hot;
    Py_ssize_t i, n = 1;
    State *s;
    rt_program *p;
    static char *names[] = {"program", "arena", "tape", "ndarray", "f64", "empty", "shape",
                            "marker", "on_hot", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOO!OO:State", names, &program, &arena,
                                     &tape, &ndarray, &f64, &empty, &PyTuple_Type, &shape,
                                     &marker, &on_hot))
        return NULL;
    if (!PyType_Check(ndarray) || !PyCallable_Check(empty) || !PyCallable_Check(marker)
            || !PyCallable_Check(on_hot)) {
        PyErr_SetString(PyExc_TypeError, "State: ndarray must be a type; empty, marker and "
                        "on_hot callables");
        return NULL;
    }
    if (PyTuple_Size(shape) > 8) {
        PyErr_SetString(PyExc_ValueError, "State: more than 8 axes");
        return NULL;
    }
    s = (State *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0);
    if (s == NULL)
        return NULL;
    /* tp_alloc zeroed the object: every field is NULL until set */
    if (PyObject_GetBuffer(program, &s->prog, PyBUF_WRITABLE) < 0)
        goto fail;
    if (s->prog.len != (Py_ssize_t)sizeof(rt_program)
            || ((uintptr_t)s->prog.buf & 7) != 0) {
        PyErr_SetString(PyExc_ValueError, "State: program is not an rt_program struct");
        goto fail;
    }
    p = (rt_program *)s->prog.buf;
    s->ndim = PyTuple_Size(shape);
    for (i = 0; i < s->ndim; i++) {
        Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GetItem(shape, i));
        if (d < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "State: a negative axis length");
            goto fail;
        }
        s->dims[i] = d;
        n *= d;
    }
    if (p->out_len != 1 || p->n_in != n || p->n_grad != n) {
        PyErr_SetString(PyExc_ValueError, "State: the program is not a scalar function of "
                        "one input of this shape with its whole gradient");
        goto fail;
    }
    s->arena = Py_NewRef(arena);
    s->tape = Py_NewRef(tape);
    s->ndarray = Py_NewRef(ndarray);
    s->f64 = Py_NewRef(f64);
    s->empty = Py_NewRef(empty);
    s->shape = Py_NewRef(shape);
    s->marker = Py_NewRef(marker);
    s->on_hot = Py_NewRef(on_hot);
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

/* Whether a.dtype is numpy's native float64 (the identity compiled.py's
 * Python path checks too: a byte-swapped float64 or a dtype with metadata
 * is another object).  Buffers are exported without a format string: numpy
 * builds one afresh, with an allocation, on every export that asks. */
static int is_f64(const State *s, PyObject *a)
{
    PyObject *dt = PyObject_GetAttr(a, s_dtype);
    int ok = dt == s->f64;
    if (dt == NULL)
        PyErr_Clear();
    Py_XDECREF(dt);
    return ok;
}

/* Whether the buffer v is `want` float64 values in C order at an 8-byte
 * aligned address, shaped as recorded. */
static int plain_doubles(const State *s, const Py_buffer *v, int64_t want)
{
    Py_ssize_t i, step = 8;
    if (v->itemsize != 8)
        return 0;
    if (v->len != want * 8 || ((uintptr_t)v->buf & 7) != 0 || v->ndim != s->ndim)
        return 0;
    if (v->ndim > 0 && v->shape == NULL)
        return 0;
    for (i = 0; i < s->ndim; i++)
        if (v->shape[i] != s->dims[i])
            return 0;
    if (v->strides != NULL)
        for (i = s->ndim - 1; i >= 0; i--) {
            /* C order; an axis of length 1 may have any stride (numpy's
             * relaxed strides), and an empty array has no elements to place */
            if (v->shape[i] != 1 && v->strides[i] != step)
                return v->len == 0;
            step *= v->shape[i];
        }
    return 1;
}

/* Whether a BufferError/TypeError/ValueError from an export: the Python path
 * tells the caller what is wrong.  Anything else propagates. */
static int refused_export(void)
{
    if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError)
            || PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* tape._replayed_by = arena, or with a one-call bind of the tape around
 * (tape._fast_marks, compiled.py _FastMarks) the arena's id in its C cell --
 * compiled.py's _mark_replayed.  The cell and id come from Python once per
 * marks object (marker() also keeps the id of this State's arena named). */
static int mark(State *s)
{
    PyObject *marks, *rb, *got;
    int ret = 0;
    if (s->tape == Py_None)
        return 0;
    marks = PyObject_GetAttr(s->tape, s_fast_marks);
    if (marks == NULL)
        return -1;
    if (marks == Py_None) {
        Py_DECREF(marks);
        rb = PyObject_GetAttr(s->tape, s_replayed_by);
        if (rb == NULL)
            return -1;
        if (rb != s->arena)
            ret = PyObject_SetAttr(s->tape, s_replayed_by, s->arena);
        Py_DECREF(rb);
        return ret;
    }
    if (marks == s->marks) {
        Py_DECREF(marks);
        __atomic_store_n((int64_t *)s->cell.buf, s->mark_id, __ATOMIC_RELAXED);
        return 0;
    }
    /* a new marks object: marker(tape, arena, state) marks the replay and
     * returns (a buffer over the cell, the arena's id).  marker() is Python:
     * another thread may run this State's mark meanwhile, so the cache is
     * replaced only after it returned. */
    got = PyObject_CallFunctionObjArgs(s->marker, s->tape, s->arena, (PyObject *)s, NULL);
    if (got == NULL) {
        Py_DECREF(marks);
        return -1;
    }
    if (PyTuple_Check(got) && PyTuple_Size(got) == 2) {
        Py_buffer cell;
        int64_t id = PyLong_AsLongLong(PyTuple_GetItem(got, 1));
        if (id == -1 && PyErr_Occurred())
            PyErr_Clear();
        else if (id > 0 && PyObject_GetBuffer(PyTuple_GetItem(got, 0), &cell,
                                              PyBUF_WRITABLE) == 0) {
            if (cell.len == 8 && ((uintptr_t)cell.buf & 7) == 0) {
                state_forget_marks(s);
                s->cell = cell;
                s->marks = marks;          /* the reference GetAttr gave */
                s->mark_id = id;
                marks = NULL;
            } else
                PyBuffer_Release(&cell);
        } else
            PyErr_Clear();
    }
    Py_DECREF(got);
    Py_XDECREF(marks);
    return 0;                  /* marker() marked this replay either way */
}

/* value_and_grad's work: (value, out), None or a status (module docstring). */
static PyObject *checked_call(PyObject *state, PyObject *x, PyObject *out)
{
    State *s;
    rt_program *p;
    PyObject *made = NULL, *value, *res;
    Py_buffer vx, vo;
    double v = 0.0;
    int st;
    const char *xb, *ob;
    if (Py_TYPE(state) != state_type || vg_entry == NULL)
        Py_RETURN_NONE;
    s = (State *)state;
    p = (rt_program *)s->prog.buf;
    if (p == NULL)
        Py_RETURN_NONE;
    if ((PyObject *)Py_TYPE(x) != s->ndarray)
        Py_RETURN_NONE;
    if (out == Py_None) {
        out = made = PyObject_CallFunctionObjArgs(s->empty, s->shape, NULL);
        if (made == NULL)
            return NULL;
    }
    if ((PyObject *)Py_TYPE(out) != s->ndarray)
        goto not_plain;
    if (!is_f64(s, x))
        goto not_plain;
    if (PyObject_GetBuffer(x, &vx, PyBUF_STRIDES) < 0)
        goto refused;
    if (!plain_doubles(s, &vx, p->n_in)) {
        PyBuffer_Release(&vx);
        goto not_plain;
    }
    if (!is_f64(s, out)) {
        PyBuffer_Release(&vx);
        goto not_plain;
    }
    if (PyObject_GetBuffer(out, &vo, PyBUF_STRIDES | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vx);
        goto refused;
    }
    xb = (const char *)vx.buf;
    ob = (const char *)vo.buf;
    if (vo.readonly || !plain_doubles(s, &vo, p->n_grad)
            || (vx.len > 0 && vo.len > 0 && xb < ob + vo.len && ob < xb + vx.len)) {
        PyBuffer_Release(&vo);
        PyBuffer_Release(&vx);
        goto not_plain;
    }
    /* The exports keep both arrays' memory in place (numpy refuses to resize
     * an exported array) while another thread runs. */
    Py_BEGIN_ALLOW_THREADS
    st = vg_entry(p, (const double *)vx.buf, &v, (double *)vo.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vo);
    PyBuffer_Release(&vx);
    if (st != RT_OK && st != RT_OK_HOT) {
        Py_XDECREF(made);
        return PyLong_FromLong(st);
    }
    if (mark(s) < 0)
        goto error;
    if (st == RT_OK_HOT) {
        PyObject *r = PyObject_CallFunctionObjArgs(s->on_hot, NULL);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
    }
    value = PyFloat_FromDouble(v);
    if (value == NULL)
        goto error;
    res = PyTuple_Pack(2, value, out);
    Py_DECREF(value);
    Py_XDECREF(made);
    return res;
refused:
    if (!refused_export())
        goto error;
not_plain:
    Py_XDECREF(made);
    Py_RETURN_NONE;
error:
    Py_XDECREF(made);
    return NULL;
}

/* forward(state, x): ctape.forward's plain case (x a float64 array of the
 * recorded shape, C order, aligned; a scalar output) in one call: the forward
 * sweep alone (rt_forward).  Answers the value (a float), None for anything
 * else (the Python path serves), or a failed replay's status (an int). */
static PyObject *forward(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *s;
    rt_program *p;
    Py_buffer vx;
    double v = 0.0;
    int st;
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "forward(state, x) takes 2 arguments");
        return NULL;
    }
    if (Py_TYPE(args[0]) != state_type || fw_entry == NULL)
        Py_RETURN_NONE;
    s = (State *)args[0];
    p = (rt_program *)s->prog.buf;
    if (p == NULL || p->out_len != 1 || (PyObject *)Py_TYPE(args[1]) != s->ndarray
            || !is_f64(s, args[1]))
        Py_RETURN_NONE;
    if (PyObject_GetBuffer(args[1], &vx, PyBUF_STRIDES) < 0) {
        if (!refused_export())
            return NULL;
        Py_RETURN_NONE;
    }
    if (!plain_doubles(s, &vx, p->n_in)) {
        PyBuffer_Release(&vx);
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    st = fw_entry(p, (const double *)vx.buf, &v);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vx);
    if (st != RT_OK && st != RT_OK_HOT)
        return PyLong_FromLong(st);
    if (mark(s) < 0)
        return NULL;
    if (st == RT_OK_HOT) {
        PyObject *r = PyObject_CallFunctionObjArgs(s->on_hot, NULL);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    return PyFloat_FromDouble(v);
}

static PyObject *value_and_grad(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "value_and_grad(state, x, out) takes 3 arguments");
        return NULL;
    }
    return checked_call(args[0], args[1], args[2]);
}

/* ---------------------------------------------------------------- the method
 * CompiledTape.value_and_gradient as a descriptor (Method): ctape.value_and_
 * gradient is a builtin method bound to the CompiledTape, so the call
 * ctape.value_and_gradient(x, out=g) runs no Python frame when it is the
 * plain case.  Its state is ctape._ck; everything else goes to compiled.py:
 * `answer(ctape, x, out, r)` for a None or status answer, `full(ctape, *args,
 * **kwargs)` (the Python method, also what class access returns) for
 * arguments other than (x, out=None). */
static PyObject *m_full = NULL, *m_answer = NULL;
static PyObject *s_ck, *s_x, *s_out;

static int is_name(PyObject *k, PyObject *name)
{
    return k == name || PyUnicode_Compare(k, name) == 0;
}

static PyObject *method_full(PyObject *ct, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    Py_ssize_t i, nkw = kwnames == NULL ? 0 : PyTuple_Size(kwnames);
    PyObject *tup = PyTuple_New(nargs + 1), *kw = NULL, *res = NULL;
    if (tup == NULL)
        return NULL;
    PyTuple_SetItem(tup, 0, Py_NewRef(ct));
    for (i = 0; i < nargs; i++)
        PyTuple_SetItem(tup, i + 1, Py_NewRef(args[i]));
    if (nkw > 0) {
        kw = PyDict_New();
        if (kw == NULL)
            goto done;
        for (i = 0; i < nkw; i++)
            if (PyDict_SetItem(kw, PyTuple_GetItem(kwnames, i), args[nargs + i]) < 0)
                goto done;
    }
    res = PyObject_Call(m_full, tup, kw);
done:
    Py_DECREF(tup);
    Py_XDECREF(kw);
    return res;
}

static PyObject *method_call(PyObject *ct, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_Size(kwnames), i;
    PyObject *x = NULL, *out = Py_None, *state, *r, *res;
    if (nargs > 2 || nargs + nkw > 2)
        return method_full(ct, args, nargs, kwnames);
    if (nargs >= 1)
        x = args[0];
    if (nargs == 2)
        out = args[1];
    for (i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GetItem(kwnames, i);
        if (nargs < 2 && is_name(k, s_out))
            out = args[nargs + i];
        else if (nargs < 1 && is_name(k, s_x))
            x = args[nargs + i];
        else
            return method_full(ct, args, nargs, kwnames);
    }
    if (x == NULL)
        return method_full(ct, args, nargs, kwnames);
    state = PyObject_GetAttr(ct, s_ck);
    if (state == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        state = Py_NewRef(Py_None);
    }
    r = checked_call(state, x, out);
    Py_DECREF(state);
    if (r == NULL || PyTuple_Check(r))
        return r;
    res = PyObject_CallFunctionObjArgs(m_answer, ct, x, out, r, NULL);
    Py_DECREF(r);
    return res;
}

static PyMethodDef method_def = {
    "value_and_gradient", (PyCFunction)(void (*)(void))method_call,
    METH_FASTCALL | METH_KEYWORDS,
    "value_and_gradient($self, x, out=None)\n--\n\n"
    "(value, gradient) at x; with out= the gradient is written there (no allocation)."
};

typedef struct {
    PyObject_HEAD
} Method;

static PyObject *method_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)self;
    (void)type;
    if (obj == NULL || obj == Py_None || m_full == NULL)
        return Py_NewRef(m_full != NULL ? m_full : Py_None);
    return PyCFunction_NewEx(&method_def, obj, NULL);
}

static PyType_Slot method_slots[] = {
    {Py_tp_descr_get, method_get},
    {Py_tp_doc, "CompiledTape.value_and_gradient: a builtin method bound to the tape "
                "(see install)"},
    {0, NULL}
};

static PyType_Spec method_spec = {
    "revtape._checked.Method", sizeof(Method), 0, Py_TPFLAGS_DEFAULT, method_slots
};

/* install(full, answer) -> the Method descriptor for CompiledTape. */
static PyObject *install(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *tp;
    (void)module;
    if (nargs != 2 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "install(full, answer) takes two callables");
        return NULL;
    }
    Py_XDECREF(m_full);
    Py_XDECREF(m_answer);
    m_full = Py_NewRef(args[0]);
    m_answer = Py_NewRef(args[1]);
    tp = PyType_FromSpec(&method_spec);
    if (tp == NULL)
        return NULL;
    {
        PyObject *m = PyObject_CallNoArgs(tp);
        Py_DECREF(tp);
        return m;
    }
}

/* ---------------------------------------------------------------- the bound call
 * ctape.bind(x_buf, g_buf) as an object whose call is C (Bound): no Python
 * frame and no cffi argument conversion per call, the GIL released around
 * the replay as everywhere else.  compiled.py checks the buffers' dtype and
 * shape with the messages users see; Bound re-checks what C relies on --
 * the exports' lengths against the program's n_in/n_grad, alignment, C
 * order, g writeable, no overlap -- and holds both exports (the arrays stay
 * alive and numpy refuses to resize them) and the program's export for as
 * long as it lives.  Its call:
 *
 *   - runs rt_value_and_grad at the bound pointers; RT_BUSY (another thread
 *     holds the program) is waited for when `wait` is true (programs whose
 *     replay cannot run Python, as rt_bound_value_and_grad waits) and
 *     otherwise reported like any other status;
 *   - RT_OK_HOT (native="auto" crossed its budget) calls on_hot();
 *   - any other status calls fail(status), which raises the error the
 *     Python paths raise (compiled.py CompiledTape._status);
 *   - after a successful replay stores mark_id into the tape's _FastMarks
 *     cell (rt.value(tape.output) reads which arena the replay ran in);
 *   - returns the value as a float. */
typedef struct {
    PyObject_HEAD
    rt_program *p;           /* prog.buf */
    double *x, *g;           /* xb.buf, gb.buf */
    int64_t *cell;           /* cellb.buf or NULL */
    int64_t mark_id;
    int wait;
    int forward;             /* the forward sweep alone (rt_forward); g unused */
    Py_buffer prog, xb, gb, cellb;
    PyObject *ctape;         /* what the call serves (its `ctape` attribute) */
    PyObject *on_hot;        /* callable or None */
    PyObject *fail;          /* callable(status): raises */
    PyObject *weaklist;      /* _FastMarks.binds holds bound calls weakly */
} Bound;

static int bound_traverse(Bound *b, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)b));
    Py_VISIT(b->prog.obj);
    Py_VISIT(b->xb.obj);
    Py_VISIT(b->gb.obj);
    Py_VISIT(b->cellb.obj);
    Py_VISIT(b->ctape);
    Py_VISIT(b->on_hot);
    Py_VISIT(b->fail);
    return 0;
}

/* Run only on an unreachable Bound (no call of it is running): the pointers
 * go with the exports, and a call after this (nothing can make one) finds
 * p == NULL. */
static int bound_clear(Bound *b)
{
    b->p = NULL;
    b->x = b->g = NULL;
    b->cell = NULL;
    if (b->cellb.obj != NULL)
        PyBuffer_Release(&b->cellb);
    if (b->gb.obj != NULL)
        PyBuffer_Release(&b->gb);
    if (b->xb.obj != NULL)
        PyBuffer_Release(&b->xb);
    if (b->prog.obj != NULL)
        PyBuffer_Release(&b->prog);
    Py_CLEAR(b->ctape);
    Py_CLEAR(b->on_hot);
    Py_CLEAR(b->fail);
    return 0;
}

static void bound_dealloc(Bound *b)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)b);
    PyObject_GC_UnTrack(b);
    if (b->weaklist != NULL)
        PyObject_ClearWeakRefs((PyObject *)b);
    bound_clear(b);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(b);
    Py_DECREF(tp);
}

/* Whether the export v is n float64 values at an 8-byte aligned address
 * (the request asked for C-contiguity; the length is checked here). */
static int flat_doubles(const Py_buffer *v, int64_t n)
{
    return v->len == n * 8 && ((uintptr_t)v->buf & 7) == 0;
}

static PyObject *bound_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *program, *ctape, *x, *g, *cell, *on_hot, *fail;
    long long mark_id;
    int wait, forward = 0;
    Bound *b;
    const char *xs, *gs;
    static char *names[] = {"program", "ctape", "x", "g", "cell", "mark_id", "on_hot", "fail",
                            "wait", "forward", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOLOOp|p:Bound", names, &program, &ctape, &x,
                                     &g, &cell, &mark_id, &on_hot, &fail, &wait, &forward))
        return NULL;
    if (forward && fw_entry == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Bound: rt_forward is not linked");
        return NULL;
    }
    if (!PyCallable_Check(fail) || (on_hot != Py_None && !PyCallable_Check(on_hot))) {
        PyErr_SetString(PyExc_TypeError, "Bound: fail must be callable, on_hot callable or None");
        return NULL;
    }
    if (vg_entry == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Bound: rt_value_and_grad is not linked");
        return NULL;
    }
    b = (Bound *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0);
    if (b == NULL)
        return NULL;
    /* tp_alloc zeroed the object: every field is NULL until set */
    if (PyObject_GetBuffer(program, &b->prog, PyBUF_WRITABLE) < 0)
        goto fail;
    if (b->prog.len != (Py_ssize_t)sizeof(rt_program) || ((uintptr_t)b->prog.buf & 7) != 0) {
        PyErr_SetString(PyExc_ValueError, "Bound: program is not an rt_program struct");
        goto fail;
    }
    b->p = (rt_program *)b->prog.buf;
    if (b->p->out_len != 1) {
        PyErr_SetString(PyExc_ValueError, "Bound: the program's output is not a scalar");
        goto fail;
    }
    if (PyObject_GetBuffer(x, &b->xb, PyBUF_C_CONTIGUOUS) < 0)
        goto fail;
    if (PyObject_GetBuffer(g, &b->gb, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        goto fail;
    xs = (const char *)b->xb.buf;
    gs = (const char *)b->gb.buf;
    if (!flat_doubles(&b->xb, b->p->n_in) || !flat_doubles(&b->gb, b->p->n_grad)
            || b->gb.readonly
            || (b->xb.len > 0 && b->gb.len > 0 && xs < gs + b->gb.len && gs < xs + b->xb.len)) {
        PyErr_SetString(PyExc_ValueError, "Bound: x and g must be aligned float64 buffers of "
                        "the program's input and gradient lengths, g writeable, not overlapping");
        goto fail;
    }
    b->x = (double *)b->xb.buf;
    b->g = (double *)b->gb.buf;
    if (cell != Py_None) {
        if (PyObject_GetBuffer(cell, &b->cellb, PyBUF_WRITABLE) < 0)
            goto fail;
        if (b->cellb.len != 8 || ((uintptr_t)b->cellb.buf & 7) != 0 || mark_id <= 0) {
            PyErr_SetString(PyExc_ValueError, "Bound: cell must be one int64, mark_id > 0");
            goto fail;
        }
        b->cell = (int64_t *)b->cellb.buf;
        b->mark_id = (int64_t)mark_id;
    }
    b->wait = wait;
    b->forward = forward;
    b->ctape = Py_NewRef(ctape);
    b->on_hot = Py_NewRef(on_hot);
    b->fail = Py_NewRef(fail);
    return (PyObject *)b;
fail:
    Py_DECREF(b);
    return NULL;
}

static PyObject *bound_call(PyObject *self, PyObject *args, PyObject *kw)
{
    Bound *b = (Bound *)self;
    rt_program *p = b->p;
    double v = 0.0;
    int st;
    if (PyTuple_Size(args) != 0 || (kw != NULL && PyDict_Size(kw) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a bound call takes no arguments: it replays at "
                        "whatever x_buf holds");
        return NULL;
    }
    if (p == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this bound call was cleared");
        return NULL;
    }
    /* The exports keep both arrays' memory in place while the GIL is off. */
    Py_BEGIN_ALLOW_THREADS
    st = b->forward ? fw_entry(p, b->x, &v) : vg_entry(p, b->x, &v, b->g);
    if (st == RT_BUSY && b->wait) {
        /* the replay holding the program is C that finishes (wait is set only
         * for programs that never call Python): wait, as rt_bound_value_and_grad */
        int spins = 0;
        while ((st = b->forward ? fw_entry(p, b->x, &v) : vg_entry(p, b->x, &v, b->g))
               == RT_BUSY)
            if (++spins > 100)
                sched_yield();
    }
    Py_END_ALLOW_THREADS
    if (st == RT_OK || st == RT_OK_HOT) {
        if (b->cell != NULL)
            __atomic_store_n(b->cell, b->mark_id, __ATOMIC_RELAXED);
        if (st == RT_OK_HOT && b->on_hot != Py_None) {
            PyObject *r = PyObject_CallNoArgs(b->on_hot);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
        }
        return PyFloat_FromDouble(v);
    }
    {
        PyObject *r = PyObject_CallFunction(b->fail, "i", st);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        PyErr_Format(PyExc_RuntimeError, "the VM refused a bound call (status %d)", st);
        return NULL;
    }
}

static PyMemberDef bound_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(Bound, weaklist), READONLY, NULL},
    {"ctape", T_OBJECT, offsetof(Bound, ctape), READONLY,
     "the CompiledTape this call replays"},
    {NULL, 0, 0, 0, NULL}
};

static PyType_Slot bound_slots[] = {
    {Py_tp_new, bound_new},
    {Py_tp_dealloc, bound_dealloc},
    {Py_tp_traverse, bound_traverse},
    {Py_tp_clear, bound_clear},
    {Py_tp_call, bound_call},
    {Py_tp_members, bound_members},
    {Py_tp_doc, "Bound(program, ctape, x, g, cell, mark_id, on_hot, fail, wait, forward=False): "
                "ctape.bind(x_buf, g_buf)'s callable (built by compiled.py); forward=True "
                "runs the forward sweep alone (g unused)"},
    {0, NULL}
};

static PyType_Spec bound_spec = {
    "revtape._checked.Bound", sizeof(Bound), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE, bound_slots
};

/* link(path): find rt_value_and_grad in the already loaded library at path
 * (revtape._vm's file).  RTLD_NOLOAD: nothing is loaded that Python's import
 * did not load already.  Returns whether the checked path is on. */
static PyObject *link_vm(PyObject *module, PyObject *path)
{
    (void)module;
#ifdef _WIN32
    (void)path;
    Py_RETURN_FALSE;
#else
    PyObject *bytes;
    void *h, *f;
    if (!PyUnicode_FSConverter(path, &bytes))
        return NULL;
    h = dlopen(PyBytes_AsString(bytes), RTLD_NOW | RTLD_NOLOAD);
    Py_DECREF(bytes);
    if (h == NULL)
        Py_RETURN_FALSE;
    f = dlsym(h, "rt_value_and_grad");
    /* the handle stays open: the loaded module is never unloaded anyway */
    if (f == NULL)
        Py_RETURN_FALSE;
    vg_entry = (vg_fn)f;
    fw_entry = (fw_fn)dlsym(h, "rt_forward");     /* NULL: Bound(forward=True) refuses */
    Py_RETURN_TRUE;
#endif
}

/* layout(): sizeof(rt_program) and the offsets of the fields this module
 * or the VM's locking reads, as this module was compiled; compiled.py
 * compares them with cffi's view of vm.h (a stale build is not used). */
static PyObject *layout(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("(nnnnnn)", (Py_ssize_t)sizeof(rt_program),
                         (Py_ssize_t)offsetof(rt_program, n_in),
                         (Py_ssize_t)offsetof(rt_program, n_grad),
                         (Py_ssize_t)offsetof(rt_program, out_len),
                         (Py_ssize_t)offsetof(rt_program, busy),
                         (Py_ssize_t)offsetof(rt_program, native));
}

static PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_FASTCALL,
     "install(full, answer) -> the descriptor serving CompiledTape.value_and_gradient"},
    {"layout", layout, METH_NOARGS, "layout() -> (sizeof(rt_program), offsets of n_in, "
     "n_grad, out_len, busy, native)"},
    {"forward", (PyCFunction)(void (*)(void))forward, METH_FASTCALL,
     "forward(state, x) -> the value (the forward sweep alone), None (not the plain case: "
     "nothing ran) or the VM's status of a failed replay"},
    {"value_and_grad", (PyCFunction)(void (*)(void))value_and_grad, METH_FASTCALL,
     "value_and_grad(state, x, out) -> (value, out), None (not the plain case: nothing ran) "
     "or the VM's status of a failed replay"},
    {"link", link_vm, METH_O,
     "link(path): use rt_value_and_grad of the loaded library at path; True when found"},
    {NULL, NULL, 0, NULL}
};

static PyMemberDef state_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(State, weaklist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}
};

static PyType_Slot state_slots[] = {
    {Py_tp_new, state_new},
    {Py_tp_dealloc, state_dealloc},
    {Py_tp_traverse, state_traverse},
    {Py_tp_clear, state_clear},
    {Py_tp_members, state_members},
    {Py_tp_doc, "State(program, arena, tape, ndarray, f64, empty, shape, marker, on_hot): what "
                "value_and_grad needs of one CompiledTape (built by compiled.py)"},
    {0, NULL}
};

static PyType_Spec state_spec = {
    "revtape._checked.State", sizeof(State), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, state_slots
};

static int exec_module(PyObject *m)
{
    s_fast_marks = PyUnicode_InternFromString("_fast_marks");
    s_replayed_by = PyUnicode_InternFromString("_replayed_by");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_ck = PyUnicode_InternFromString("_ck");
    s_x = PyUnicode_InternFromString("x");
    s_out = PyUnicode_InternFromString("out");
    if (s_ck == NULL || s_x == NULL || s_out == NULL)
        return -1;
    if (s_fast_marks == NULL || s_replayed_by == NULL || s_dtype == NULL)
        return -1;
    state_type = (PyTypeObject *)PyType_FromSpec(&state_spec);
    if (state_type == NULL)
        return -1;
    if (PyModule_AddObjectRef(m, "State", (PyObject *)state_type) < 0)
        return -1;
    {
        PyObject *bt = PyType_FromSpec(&bound_spec);
        int r;
        if (bt == NULL)
            return -1;
        r = PyModule_AddObjectRef(m, "Bound", bt);
        Py_DECREF(bt);
        return r;
    }
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "revtape._checked",
    "ctape.value_and_gradient(x, out=g)'s argument checks in C (csrc/pyext/checked.c)",
    0, methods, module_slots, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__checked(void)
{
    return PyModuleDef_Init(&module_def);
}
