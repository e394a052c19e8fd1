"""rt.LogDensity: the object a sampler or an optimiser is handed.

    ld = rt.LogDensity(logp, x0, names=None)
    ld.logdensity(x)                  # value
    ld.logdensity_and_gradient(x)     # (value, gradient): scipy (jac=True), littlemcmc
    ld.gradient(x), ld.hvp(x, v), ld.hessian(x)
    ld.dimension, ld.names, ld.x0
    ld.negative()                     # the same for -logp: minimisers, mici
    ld.grad_and_value(x)              # (gradient, value): mici's grad_neg_log_dens order
    ld.flatten(tree), ld.unflatten(x) # pytree x0 <-> the flat vector of dimension `dimension`
    ld.batch_logdensity(X), ld.batch_logdensity_and_gradient(X, threads=None)   # rows of X

Every method takes the flat float vector of length ``dimension``; a pytree
``x0`` (dict, namedtuple, nested lists and tuples of floats and arrays) is
laid out end to end in its leaf order (JAX's: sorted dict keys), and
``flatten``/``unflatten`` convert.  ``f`` is recorded once on that flat
vector and compiled; every call replays the compiled program in C through a
pre-bound fast path (``ctape.bind``).

Branches: if a point takes another branch of a comparison than the recording
did, that point is recorded too (up to 8 recorded branches, then every such
call is recorded afresh); values are always those of ``f`` as written.
Unlike ``rt.grad``, a LogDensity does not watch ``f`` for redefinitions: it
is a snapshot of ``f`` (and the data it closes over) when it was built.

Threads: each thread replays its own compiled copy, made on its first call
in that thread, so one LogDensity serves many chains at once.  Deep copies
and pickles carry the recorded tapes (pickle carries ``f`` by reference: a
module-level function, so that another process can record new branches).
"""

import copy
import threading

import numpy as np

from . import api as _api, pytree
from .hessian import Parts
from .recording import GradientTape, call_with
from .compiled import CompiledTape
from .errors import BranchChanged, InputError

MAX_BRANCHES = 8
_F64 = np.dtype(np.float64)
_copyto = np.copyto


class _ThreadState:
    """One thread's buffers and compiled copies, one per recorded branch."""

    __slots__ = ("x", "g", "programs")

    def __init__(self, dim):
        self.x = np.zeros(dim)
        self.g = np.zeros(dim)
        self.programs = []          # [(ctape, run)] by branch number


class LogDensity:
    """A compiled log density of a flat parameter vector (see the module docstring)."""

    def __init__(self, f, x0, *, names=None, _tapes=None):
        self.f = f
        leaves, treedef = pytree.input_structure(x0)
        self._tree = treedef is not None or isinstance(x0, tuple)
        leaves = [np.array(v, dtype=np.float64) if not isinstance(v, (float, int, np.floating,
                                                                       np.integer)) else float(v)
                  for v in leaves]
        self._x0_tree = pytree.unflatten(treedef, leaves) if treedef is not None else (
            tuple(leaves) if self._tree else leaves[0])
        self._parts = Parts(leaves, treedef)
        self.x0 = self.flatten(x0)
        self.dimension = int(self.x0.size)
        self.names = self._names(names, treedef, leaves)
        self._plain_vector = (not self._tree and isinstance(leaves[0], np.ndarray)
                              and leaves[0].ndim == 1)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tapes = list(_tapes) if _tapes is not None else [self._record(self.x0)]
        self._program(self._state(), 0)     # compiled now: a bad program fails here, not mid-run

    def _names(self, names, treedef, leaves):
        if names is not None:
            names = [str(n) for n in names]
            if len(names) != self.dimension:
                raise InputError(f"names has {len(names)} entries for a dimension of "
                                 f"{self.dimension}")
            return names
        paths = (pytree.leaf_paths(treedef) if treedef is not None else
                 [f"x[{i}]" for i in range(len(leaves))] if self._tree else ["x"])
        out = []
        for path, leaf in zip(paths, leaves):
            shape = np.shape(leaf)
            if shape == ():
                out.append(path)
            else:
                out.extend(f"{path}[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape))
        return out

    # ------------------------------------------------ layout
    def flatten(self, x):
        """A parameter in x0's structure as the flat float64 vector the methods take."""
        return self._parts.flatten(x if self._tree else (x,))

    def unflatten(self, x):
        """A flat vector (a point, or a gradient) in x0's structure."""
        x = self._vector(x)
        res = self._parts.split_result(x, None)
        return res if self._tree else res[0]

    def _model(self, z):
        if self._plain_vector:
            return self.f(z)
        parts = self._parts.split(z)
        if not self._tree:
            return self.f(parts[0])
        return call_with(self.f, self._parts.tree(parts))

    def _record(self, x):
        return GradientTape(self._model, x)

    def _vector(self, x):
        arr = x if type(x) is np.ndarray and x.dtype == np.float64 else np.asarray(x, np.float64)
        if arr.shape != (self.dimension,):
            raise InputError(f"pass a flat vector of length {self.dimension} (got shape "
                             f"{arr.shape}); ld.flatten(tree) converts a structured parameter")
        return arr

    # ------------------------------------------------ per-thread programs
    def _state(self):
        st = getattr(self._local, "state", None)
        if st is None:
            st = self._local.state = _ThreadState(self.dimension)
        return st

    def _program(self, st, k):
        """This thread's compiled copy of recorded branch k (made on first use)."""
        while len(st.programs) <= k:
            tape = copy.deepcopy(self._tapes[len(st.programs)])
            ctape = CompiledTape(tape)
            st.programs.append((ctape, ctape.bind(st.x, st.g)))
        return st.programs[k]

    def _replay(self, x, use):
        """use(ctape, run) on the first recorded branch that holds at x."""
        st = self._state()
        st.x[...] = self._vector(x)
        k = 0
        while True:
            if k >= len(self._tapes):
                k = self._new_branch(st.x)
                if k is None:
                    return None
            try:
                return use(*self._program(st, k), st)
            except BranchChanged:
                k += 1

    def _new_branch(self, x):
        with self._lock:
            if len(self._tapes) >= MAX_BRANCHES:
                return None
            self._tapes.append(self._record(x.copy()))
            return len(self._tapes) - 1

    def _fresh(self, x):
        """Past MAX_BRANCHES: record at x and answer from the recording itself."""
        tape = self._record(self._vector(x).copy())
        return tape.value_and_gradient_recorded()

    # ------------------------------------------------ the interface
    def logdensity_and_gradient(self, x):
        """(log density, gradient) at the flat vector x, value first."""
        st = getattr(self._local, "state", None)
        if (st is not None and st.programs and type(x) is np.ndarray and x.dtype is _F64
                and x.shape == st.x.shape):
            # the sampler loop: copy x into the bound buffer, one C call
            _copyto(st.x, x)
            try:
                return st.programs[0][1](), st.g.copy()
            except BranchChanged:
                pass                        # another branch: the general path below
        res = self._replay(x, lambda ctape, run, st: (run(), st.g.copy()))
        return res if res is not None else self._fresh(x)

    def logdensity(self, x):
        """The log density at x (a forward sweep only)."""
        res = self._replay(x, lambda ctape, run, st: ctape.forward(st.x))
        return res if res is not None else self._fresh(x)[0]

    __call__ = logdensity

    def gradient(self, x):
        return self.logdensity_and_gradient(x)[1]

    def grad_and_value(self, x):
        """(gradient, value): the order mici's grad_neg_log_dens may return."""
        v, g = self.logdensity_and_gradient(x)
        return g, v

    def hvp(self, x, v):
        """Hessian-vector product at x (forward-over-reverse in C), e.g. scipy's hessp."""
        v = self._vector(v)
        res = self._replay(x, lambda ctape, run, st: ctape.hvp(st.x, v))
        if res is None:
            return _api.hvp(self._model, self._vector(x), v)
        return res

    def hessian(self, x):
        res = self._replay(x, lambda ctape, run, st: ctape.hessian(st.x))
        if res is None:
            return _api.hessian(self._model, self._vector(x))
        return res

    # ------------------------------------------------ batches (ctape.batch_*)
    def _rows(self, X):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.dimension:
            raise InputError(f"pass X of shape (k, {self.dimension}): one flat point a row "
                             f"(got shape {X.shape})")
        return X

    def batch_logdensity_and_gradient(self, X, threads=None):
        """(values[k], gradients[k, dimension]) at the rows of X, in one C call per
        thread (``threads=n`` splits the rows); ensemble and SMC samplers,
        multi-start optimisation."""
        X = self._rows(X)
        ctape = self._program(self._state(), 0)[0]
        try:
            return ctape.batch_value_and_gradient(X, threads=threads)
        except BranchChanged:
            # some row takes another branch: row by row, recording what it needs
            pairs = [self.logdensity_and_gradient(x) for x in X]
            return (np.array([v for v, _ in pairs]),
                    np.array([g for _, g in pairs]).reshape(X.shape))

    def batch_logdensity(self, X, threads=None):
        """values[k] at the rows of X (forward sweeps only): emcee's vectorize=True."""
        X = self._rows(X)
        ctape = self._program(self._state(), 0)[0]
        try:
            return ctape.batch_forward(X, threads=threads)
        except BranchChanged:
            return np.array([self.logdensity(x) for x in X])

    def negative(self):
        """A view computing -log density (and its derivatives), for minimisers and mici."""
        return NegativeLogDensity(self)

    def mici_kwargs(self):
        """neg_log_dens= and grad_neg_log_dens= for a mici system:
        ``mici.systems.EuclideanMetricSystem(**ld.mici_kwargs())``."""
        neg = self.negative()
        return {"neg_log_dens": neg.logdensity, "grad_neg_log_dens": neg.grad_and_value}

    def __repr__(self):
        return (f"<rt.LogDensity of {getattr(self.f, '__name__', self.f)!s}: dimension "
                f"{self.dimension}, {len(self._tapes)} recorded branch(es)>")

    # ------------------------------------------------ copy and pickle
    def __deepcopy__(self, memo):
        new = LogDensity(self.f, self._x0_tree, names=self.names,
                         _tapes=copy.deepcopy(self._tapes, memo))
        memo[id(self)] = new
        return new

    def __copy__(self):
        return self.__deepcopy__({})

    def __reduce__(self):
        return (_rebuild, (self.f, self._x0_tree, self.names, list(self._tapes)))


def _rebuild(f, x0, names, tapes):
    return LogDensity(f, x0, names=names, _tapes=tapes)


class NegativeLogDensity:
    """-log density of a LogDensity, with the same methods (and its own negative())."""

    def __init__(self, base):
        self.base = base

    dimension = property(lambda self: self.base.dimension)
    names = property(lambda self: self.base.names)
    x0 = property(lambda self: self.base.x0)

    def logdensity(self, x):
        return -self.base.logdensity(x)

    __call__ = logdensity

    def logdensity_and_gradient(self, x):
        v, g = self.base.logdensity_and_gradient(x)
        np.negative(g, out=g)
        return -v, g

    def gradient(self, x):
        return self.logdensity_and_gradient(x)[1]

    def grad_and_value(self, x):
        v, g = self.logdensity_and_gradient(x)
        return g, v

    def hvp(self, x, v):
        return -self.base.hvp(x, v)

    def batch_logdensity_and_gradient(self, X, threads=None):
        v, g = self.base.batch_logdensity_and_gradient(X, threads)
        return -v, -g

    def batch_logdensity(self, X, threads=None):
        return -self.base.batch_logdensity(X, threads)

    def hessian(self, x):
        return -self.base.hessian(x)

    def negative(self):
        return self.base

    def flatten(self, x):
        return self.base.flatten(x)

    def unflatten(self, x):
        return self.base.unflatten(x)

    def __repr__(self):
        return f"<negative of {self.base!r}>"

    def __reduce__(self):
        return (NegativeLogDensity, (self.base,))
