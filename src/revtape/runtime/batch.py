"""CompiledTape's batched replay: the value and gradient (or the output) at
every row of a stack of inputs, one C call per thread with the GIL released.

Rows replay either through the program itself, one row after another on
per-thread arenas (_BatchArena), or, for scalar code, through its wide form
(lower/wide.py): the same instructions over RT_SOA_LANES rows at a time in
one program of lane vectors (_WideArena), split over C's pool of threads."""

import threading
from functools import partial as _partial
from typing import Any

import numpy as np

from .afterfork import track_locks, track_program
from .arena import _aligned_zeros, _frozen, _scalar_index
from .vm import (RT_BUSY, RT_CALLBACK_FAILED, RT_GUARD_FAILED, RT_OK, _DOUBLES, _F64, _ND,
                 _from_buffer, ffi, lib, verify)
from ..core import isa
from ..core import primitives as _prim
from ..core import pytree
from ..core.apitypes import FloatArray, PyTree
from ..errors import BranchChanged, InputError, OutputError, RevtapeError
from ..lower import wide as _wide

_WIDE_B = lib.RT_SOA_LANES   # rows per dispatch of a wide program (csrc/vm/batch.c)
_WIDE_MIN_ROWS = 16   # fewer rows: the row loop (a wide block would be mostly padding)
_WIDE_MAX_VALUES = 1 << 21   # per arena (16 MB): larger programs take the row loop
_WIDE_MAX_PAR = lib.RT_SOA_MAX_PAR   # threads a wide batch uses at most


class Batches:
    """CompiledTape's batched replay (a mixin of compiled.CompiledTape)."""

    def _init_batches(self):
        """No batch has run: the extra arenas are built on demand."""
        self._workspaces = []        # batched replay: per-thread arenas, built on demand
        self._wide = None            # batched replay of scalar code: the wide form (or False)
        self._wide_arenas = []
        self._wide_pws = {}          # per thread count: the C array of the wide arenas' programs
        self._batch_last = (None,) * 4   # the last batch's (X, its pointer, out, its pointer)
        self._batch_lock = threading.Lock()
        track_locks(self)

    def batch_value_and_gradient(self, X: PyTree, out: PyTree = None,
                                 threads: int | None = None) -> tuple[FloatArray, Any]:
        """Value and gradient at every row of X: ``(values[k], grads[(k,) + input
        shape])`` for X of shape ``(k,) + input shape`` (a tuple of such stacks for
        a tuple input; the gradients are then a tuple).  One C call per thread,
        with the GIL released; ``threads=n`` splits the rows over n threads, each
        replaying on its own arenas.  Every row's results are bit for bit those
        of ``value_and_gradient`` at that row; nan/inf rows give nan/inf results."""
        fs = self._fast_shape
        # (a float64 dtype that is not numpy's own object, e.g. one with
        # metadata, takes the general path: same results)
        if (fs is not None and (threads is None or (type(threads) is int and threads >= 1))
                and type(X) is _ND and X.dtype is _F64 and len(xs := X.shape) == len(fs) + 1
                and xs[1:] == fs and (fx := X.flags).c_contiguous and fx.aligned
                and ((wide := bool(xs[0] >= _WIDE_MIN_ROWS and self._wide
                                   or self._use_wide(xs[0])))
                     or threads is None or threads == 1)):
            # the common case (one array of points; scalar code in its wide
            # form, or any program's row loop on one thread) without the
            # general path's per-call work: ~1 us instead of ~15
            k = xs[0]
            if out is None:
                out = np.empty(xs)
            elif (type(out) is not _ND or (out.dtype is not _F64 and out.dtype != _F64)
                  or out.shape != xs
                  or not out.flags.carray):      # C-contiguous, aligned and writeable
                raise InputError(f"out= must be a writeable, aligned, C-contiguous float64 array "
                                 f"of shape {X.shape}")
            values = np.empty(k)
            n = 1 if threads is None else min(threads, k)
            if not self._batch_lock.acquire(False):
                self._status(RT_BUSY)
            try:
                # X and out passed the checks above (dtype, shape, aligned,
                # C-contiguous, writeable) on this call: the pointers of the
                # same arrays last call are still theirs
                last = self._batch_last
                if last[0] is not X or last[2] is not out:
                    last = self._batch_last = (X, _from_buffer(_DOUBLES, X), out,
                                               _from_buffer(_DOUBLES, out))
                # a wide program refuses only whole calls (no guards, no
                # callbacks): no row cell to read back
                if not wide:
                    row = ffi.new("int64_t *")
                    st = lib.rt_batch_value_and_grad(self._p, k, last[1],
                                                     _from_buffer(_DOUBLES, values), last[3], row)
                elif n == 1:                # no lists, no closure: ~2 us less a call
                    st = self._wide_run1(k, last[1], _from_buffer(_DOUBLES, values), last[3],
                                         ffi.NULL)
                else:
                    st = self._wide_par(n, 1, k, last[1], _from_buffer(_DOUBLES, values), last[3])
            finally:
                self._batch_lock.release()
            if st != RT_OK:
                if wide:
                    self._status(st)
                else:
                    r = row[0]
                    self._batch_error(st, None, r, last[1] + r * self._program.n_in)
            if k and not wide:
                self._mark_replayed()
            return values, out
        if self._program.out_shape != ():
            raise OutputError("batch_value_and_gradient() needs a gradient tape (scalar "
                              "output); use batch_forward() for other outputs")
        Xf, k = self._batch_rows(X)
        values = np.empty(k)
        G, user = self._batch_grad_out(out, k)
        g_len = self._g_len
        if self._use_wide(k):
            self._batch_run(Xf, k, threads, lambda arena, r0, r1, xp, row: arena.run(
                self, 1, r1 - r0, xp, ffi.from_buffer("double[]", values[r0:r1]),
                ffi.from_buffer("double[]", G[r0:r1]) if g_len else ffi.NULL, row), wide=True,
                par=lambda n, xp: self._wide_par(
                    n, 1, k, xp, ffi.from_buffer("double[]", values),
                    ffi.from_buffer("double[]", G) if g_len else ffi.NULL))
            return values, self._batch_split(G, user, k)
        vg = lib.rt_batch_value_and_grad
        self._batch_run(Xf, k, threads, lambda p, r0, r1, xp, row: vg(
            p, r1 - r0, xp, ffi.from_buffer("double[]", values[r0:r1]),
            ffi.from_buffer("double[]", G[r0:r1]) if g_len else ffi.NULL, row))
        return values, self._batch_split(G, user, k)

    def batch_forward(self, X: PyTree, threads: int | None = None) -> FloatArray:
        """The output at every row of X (shape ``(k,) + input shape``):
        ``values[k]`` for a scalar output, ``(k,) + output shape`` otherwise."""
        fs = self._fast_shape
        if (fs is not None and (threads is None or threads == 1 and type(threads) is int)
                and type(X) is _ND and X.dtype is _F64 and len(xs := X.shape) == len(fs) + 1
                and xs[1:] == fs and (fx := X.flags).c_contiguous and fx.aligned):
            # one float64 array of points, a scalar output, one thread: what
            # emcee's vectorize=True hands over at every step, without the
            # general path's per-call work (~3 us instead of ~20 on 32 rows)
            return self._batch_forward1(X, xs[0])
        prog = self._program
        Xf, k = self._batch_rows(X)
        Y = np.empty((k, prog.out_len))
        if prog.out_len == 1 and self._use_wide(k):
            self._batch_run(Xf, k, threads, lambda arena, r0, r1, xp, row: arena.run(
                self, 0, r1 - r0, xp, ffi.from_buffer("double[]", Y[r0:r1]), ffi.NULL, row),
                wide=True, par=lambda n, xp: self._wide_par(
                    n, 0, k, xp, ffi.from_buffer("double[]", Y), ffi.NULL))
            return Y.reshape((k,) + tuple(prog.out_shape))
        fwd = lib.rt_batch_forward
        self._batch_run(Xf, k, threads, lambda p, r0, r1, xp, row: fwd(
            p, r1 - r0, xp, ffi.from_buffer("double[]", Y[r0:r1]) if prog.out_len else ffi.NULL,
            row))
        return Y.reshape((k,) + tuple(prog.out_shape))

    def _batch_rows(self, X):
        """X as a C-contiguous (k, n_in) float64 array, and k."""
        shapes = self._in_shapes
        if self._treedef is not None:      # a pytree of stacks, shaped like the input
            X = self._tree_leaves(X, "batch input")
        if self._single:
            parts = (X,)
        else:
            if not isinstance(X, (tuple, list)) or len(X) != len(shapes):
                raise InputError(f"this tape has {len(shapes)} inputs: pass X as a tuple of "
                                 f"{len(shapes)} stacked arrays, the i-th of shape (k,) + the "
                                 "i-th input's shape")
            parts = tuple(X)
        arrs, k = [], None
        for i, (xi, shape) in enumerate(zip(parts, shapes)):
            if getattr(xi, "_is_tracked", False):
                raise InputError("replay inputs are plain floats or arrays, not tracked values")
            try:
                a = np.asarray(xi)
            except Exception as e:
                raise InputError(f"batch input could not be read as an array: {e}") from None
            which = "" if self._single else f" {i}"
            if a.dtype.kind not in "biuf":
                raise InputError(f"batch input{which} must be real numbers, got dtype {a.dtype}")
            if a.ndim < 1 or a.shape[1:] != tuple(shape):
                raise InputError(f"batch input{which} has shape {a.shape}; it must be (k,) + "
                                 f"{tuple(shape)}: one row per point, each shaped like the "
                                 "recording input")
            if k is not None and a.shape[0] != k:
                raise InputError(f"batch inputs have {k} and {a.shape[0]} rows; every input "
                                 "needs the same number of rows")
            k = a.shape[0]
            arrs.append(a.reshape(k, int(np.prod(shape, dtype=np.int64))))
        Xf = np.ascontiguousarray(arrs[0] if len(arrs) == 1 else np.concatenate(arrs, axis=1),
                                  dtype=np.float64)
        # C never sees a misaligned double* (np.frombuffer at an odd offset)
        return (Xf if Xf.flags.aligned else Xf.copy()), k

    def _batch_grad_out(self, out, k):
        if out is None:
            return np.empty((k, self._g_len)), None
        if self._treedef is not None:
            raise InputError("batched replay of a pytree input takes no out=; call it without "
                             "out= (or bind flat buffers: ctape.flatten)")
        if self._single and len(self._grad_shapes) == 1:
            shape = (k,) + tuple(self._grad_shapes[0])
            if (type(out) is not np.ndarray or out.dtype != _F64 or out.shape != shape
                    or not out.flags.carray):      # C-contiguous, aligned and writeable
                raise InputError(f"out= must be a writeable, aligned, C-contiguous float64 "
                                 f"array of shape {shape}")
            return out.reshape(k, self._g_len), out
        shapes = [(k,) + tuple(s) for s in self._grad_shapes]
        if not isinstance(out, (tuple, list)) or len(out) != len(shapes):
            raise InputError(f"out= must be a tuple of {len(shapes)} arrays shaped {shapes}")
        for o, shp in zip(out, shapes):
            if (type(o) is not np.ndarray or o.dtype != _F64 or o.shape != shp
                    or not o.flags.writeable):
                raise InputError(f"out= must be a tuple of writeable float64 arrays shaped {shapes}")
        return np.empty((k, self._g_len)), out

    def _batch_split(self, G, user, k):
        if user is not None and not isinstance(user, (tuple, list)):
            return user
        parts, a = [], 0
        for shape in self._grad_shapes:
            size = int(np.prod(shape, dtype=np.int64))
            parts.append(G[:, a:a + size].reshape((k,) + tuple(shape)))
            a += size
        if user is not None:
            for o, p_ in zip(user, parts):
                o[...] = p_
            return user
        if self._treedef is not None:      # stacks in the input's pytree structure
            return pytree.unflatten(self._treedef, parts)
        return parts[0] if len(parts) == 1 else tuple(parts)

    def _use_wide(self, k):
        """Whether to replay k rows through this program's wide form (scalar code)."""
        if k < _WIDE_MIN_ROWS:
            return False
        if self._wide is None:
            form = _wide.scalar_form(self._code, self._ints, self._program.n_vals)
            # a long scalar program would need 64 copies of a large arena: the
            # row loop then (its dispatch cost is small next to such a program's work)
            self._wide = False if form is None or form[1] * _WIDE_B > _WIDE_MAX_VALUES else form
        return self._wide is not False

    def _batch_run(self, Xf, k, threads, call, wide=False, par=None):
        """Run call(program, first row, end row, X pointer, row cell) over the rows,
        split over `threads` threads; raises the first row's error.  A wide run
        on several threads is par(threads, X pointer) instead: the C pool."""
        if threads is None:
            threads = 1
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise InputError(f"threads= must be a positive integer (or None), got {threads!r}")
        n = max(1, min(int(threads), k))
        if not self._batch_lock.acquire(blocking=False):
            self._status(RT_BUSY)
        if wide and n > 1:
            try:
                st = par(n, ffi.from_buffer("double[]", Xf))
            finally:
                self._batch_lock.release()
            if st != RT_OK:
                self._status(st)
            return
        try:
            bounds = [k * j // n for j in range(n + 1)]
            n_in = self._program.n_in
            xp = ffi.from_buffer("double[]", Xf)
            # the calling thread takes the last rows, on this tape's own arena,
            # so that afterwards rt.value(tape.output) reports row k - 1
            if wide:
                arenas = [self._wide_arena(j) for j in range(n)]
            else:
                arenas = [self._batch_arena(j) for j in range(n - 1)] + [None]
            rows = [ffi.new("int64_t *") for _ in range(n)]

            def chunk(j):
                p = arenas[j] if wide else self._p if arenas[j] is None else arenas[j].p
                r0, r1 = bounds[j], bounds[j + 1]
                return call(p, r0, r1, xp + r0 * n_in, rows[j])

            statuses = _split(n, chunk)
        finally:
            self._batch_lock.release()
        for j, st in enumerate(statuses):
            if st != RT_OK:
                row = bounds[j] + rows[j][0]
                self._batch_error(st, arenas[j], row, xp + row * n_in)
        if k and not wide:
            self._mark_replayed()

    def _batch_forward1(self, X, k):
        """batch_forward of k rows of X (checked by the caller: float64,
        C-contiguous, aligned, shaped (k,) + the input's shape) on the calling
        thread: through the wide form when the program is scalar code and k
        fills lanes, else the row loop on this tape's own arena."""
        values = np.empty(k)
        wide = k >= _WIDE_MIN_ROWS and (self._wide or self._use_wide(k))
        row = ffi.new("int64_t *")
        if not self._batch_lock.acquire(False):
            self._status(RT_BUSY)
        try:
            xp = _from_buffer(_DOUBLES, X)
            if wide:
                st = self._wide_fwd1(k, xp, _from_buffer(_DOUBLES, values), ffi.NULL, ffi.NULL)
            else:
                st = lib.rt_batch_forward(self._p, k, xp, _from_buffer(_DOUBLES, values), row)
        finally:
            self._batch_lock.release()
        if st != RT_OK:
            if wide:                        # (refuses whole calls only: no row to report)
                self._status(st)
            else:
                r = row[0]
                self._batch_error(st, None, r, xp + r * self._program.n_in)
        if k and not wide:
            self._mark_replayed()
        return values

    @property
    def _wide_fwd1(self):
        """rt_batch_soa without the gradient on the first wide arena, its
        fixed arguments bound: call(k, X, values, NULL, row)."""
        run = self.__dict__.get("_wide_fwd1_fn")
        if run is None:
            a, prog = self._wide_arena(0), self._program
            run = self._wide_fwd1_fn = _partial(lib.rt_batch_soa, a.p, prog.n_in, self._g_len,
                                                prog.out_off, 0, a.first_p, a.zero_p, a.zero.size)
        return run

    @property
    def _wide_run1(self):
        """rt_batch_soa with value and gradient on the first wide arena, its
        fixed arguments bound: call(k, X, values, G, row)."""
        run = self.__dict__.get("_wide_run1_fn")
        if run is None:
            a, prog = self._wide_arena(0), self._program
            run = self._wide_run1_fn = _partial(lib.rt_batch_soa, a.p, prog.n_in, self._g_len,
                                                prog.out_off, 1, a.first_p, a.zero_p, a.zero.size)
        return run

    def _wide_par(self, n, with_grad, k, xp, values, G):
        """rt_batch_soa_par over k rows on n wide arenas (the calling thread and
        n - 1 pool threads in C, sharing the rows block by block)."""
        n = min(n, _WIDE_MAX_PAR)
        pws = self._wide_pws.get(n)
        if pws is None:
            arenas = [self._wide_arena(j) for j in range(n)]
            pws = self._wide_pws[n] = ffi.new("rt_program *[]", [a.p for a in arenas])
        a0 = self._wide_arenas[0]
        prog = self._program
        return lib.rt_batch_soa_par(pws, n, prog.n_in, self._g_len, prog.out_off, with_grad,
                                    a0.first_p, a0.zero_p, a0.zero.size, k, xp, values, G)

    def _batch_arena(self, j):
        """The j-th extra pair of arenas for batched replay (built on first use)."""
        while len(self._workspaces) <= j:
            self._workspaces.append(_BatchArena(self))
        arena = self._workspaces[j]
        # the native tier's sweeps serve every arena (they read the arenas
        # through the rt_program they are given); installed after the arena
        # was built, they are picked up by the next batch
        if arena.p.native != self._p.native:
            lib.rt_set_native(arena.p, self._p.native)
        return arena

    def _wide_arena(self, j):
        while len(self._wide_arenas) <= j:
            self._wide_arenas.append(_WideArena(self, self._wide, _WIDE_B))
        return self._wide_arenas[j]

    def _batch_error(self, st, arena, row, x_row):
        ws = self._ws if arena is None else getattr(arena, "ws", None)
        if st == RT_GUARD_FAILED:
            # the arena may already hold another replay (this tape's own arena
            # is free for other threads once the batch returned): the guard is
            # reported by replaying the failing row again (see _branch_changed)
            e = self._branch_changed(x_row, None)
            err = BranchChanged(f"batch row {row}: {e}", guard=e.guard, where=e.where,
                                operands=e.operands)
            err.row = row
            raise err
        if st == RT_CALLBACK_FAILED and ws is not None:
            raise (ws.take_error(any_thread=arena is not None)
                   or RevtapeError("a Python callback failed"))
        self._status(st)


class _BatchArena:
    """Arenas of one extra batch thread: its own values and adjoints (constants
    copied in) and its own rt_program over the shared, read-only words."""

    def __init__(self, ct):
        self.vals = ct._vals.copy()
        self.adj = np.zeros_like(ct._adj)
        self.ws = self.handle = None
        p = track_program(ffi.new("rt_program *"))
        self._keep = [ffi.from_buffer("double[]", self.vals), ffi.from_buffer("double[]", self.adj)]
        p.code, p.ints = ct._keep[0], ct._keep[1]
        p.vals, p.adj = self._keep
        self._keep.append(_scalar_index(p, ct._p.n_instr))
        for f in ("n_instr", "n_ints", "n_vals", "n_in", "n_grad", "n_fixed", "out_off",
                  "out_len", "n_callbacks", "callback"):
            setattr(p, f, getattr(ct._p, f))
        if ct._table is not None:
            self.ws = _prim.Workspace(ct._table, self.vals, self.adj)
            self.handle = ffi.new_handle(self.ws)
            p.callback_ctx = self.handle
        verify(p, "")          # (the same words passed: it cannot refuse them)
        self.p = p


class _WideArena:
    """A wide program (lower/wide.py) and its arenas, for one batch thread."""

    def __init__(self, ct, form, B):
        prog = ct._program
        form, n_slots = form
        if not ct._wide_arenas:
            # private read-only memory, like the program's own words
            words, first, zero = _wide.soa_program(form, prog.n_in, prog.n_fixed, prog.n_grad,
                                                   prog.out_off, B)
            code = _frozen(np.array(words, dtype=np.int32).reshape(-1, isa.WORDS),
                           np.int32).reshape(-1, isa.WORDS)
            first = _frozen(np.array(first, dtype=np.uint8), np.uint8)
            zero = _frozen(np.array(zero, dtype=np.int32), np.int32)
        else:                                          # shared, read-only
            code, first, zero = (getattr(ct._wide_arenas[0], n) for n in ("code", "first", "zero"))
        self.code, self.first, self.zero = code, first, zero
        self.ints = np.zeros(1, dtype=np.int32)
        self.vals = _aligned_zeros(max(n_slots * B, 1))
        self.vals[:prog.n_fixed * B] = np.repeat(ct._vals[:prog.n_fixed], B)   # constants
        self.adj = _aligned_zeros(self.vals.size)
        p = track_program(ffi.new("rt_program *"))
        self._keep = [ffi.from_buffer("int32_t[]", code), ffi.from_buffer("int32_t[]", self.ints),
                      ffi.from_buffer("double[]", self.vals), ffi.from_buffer("double[]", self.adj)]
        p.code, p.ints, p.vals, p.adj = self._keep
        self.first_p = ffi.from_buffer("uint8_t[]", first)
        self.zero_p = ffi.from_buffer("int32_t[]", zero) if zero.size else ffi.NULL
        p.n_instr, p.n_ints, p.n_vals = code.shape[0], 0, n_slots * B
        p.n_in, p.n_grad, p.n_fixed = prog.n_in * B, prog.n_grad * B, prog.n_fixed * B
        p.out_off, p.out_len = prog.out_off * B, B
        verify(p, "the C verifier refused a wide program (it was not run): ")
        self.p = p

    def run(self, ct, with_grad, k, xp, values, G, row):
        """rt_batch_soa over k rows at xp into values / G (cffi buffers)."""
        prog = ct._program
        return lib.rt_batch_soa(self.p, prog.n_in, ct._g_len, prog.out_off, with_grad,
                                self.first_p, self.zero_p, self.zero.size, k, xp, values, G, row)


_pool = [None, 0]
_pool_lock = threading.Lock()


def _split(n, run):
    """[run(0), ..., run(n - 1)]: the first n - 1 chunks on the shared pool, the
    last on the calling thread (which would otherwise only wait); every
    chunk has finished when this returns, also when one raised."""
    futures = [_executor(n - 1).submit(run, j) for j in range(n - 1)] if n > 1 else []
    try:
        last = run(n - 1)
    finally:
        statuses = [f.result() for f in futures]
    return statuses + [last]


def _executor(n):
    """A shared pool of at least n worker threads for batched replay."""
    from concurrent.futures import ThreadPoolExecutor
    with _pool_lock:
        if _pool[1] < n:
            # a smaller pool is dropped, not shut down: a batch that already
            # holds it can still submit, and its idle workers exit once it is
            # garbage (ThreadPoolExecutor's weak reference)
            _pool[0], _pool[1] = ThreadPoolExecutor(max_workers=n,
                                                    thread_name_prefix="revtape-batch"), n
        return _pool[0]
