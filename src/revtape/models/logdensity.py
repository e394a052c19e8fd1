"""rt.LogDensity: the object a sampler or an optimiser is handed.

    ld = rt.LogDensity(logp, x0, names=None, bijectors=None)
    ld.logdensity(x)                  # value
    ld.logdensity_and_gradient(x)     # (value, gradient): scipy (jac=True), littlemcmc
    ld.gradient(x), ld.hvp(x, v), ld.hessian(x)
    ld.dimension, ld.names, ld.x0
    ld.negative()                     # the same for -logp: minimisers, mici
    ld.grad_and_value(x)              # (gradient, value): mici's grad_neg_log_dens order
    ld.flatten(tree), ld.unflatten(x) # pytree x0 <-> the flat vector of dimension `dimension`
    ld.batch_logdensity(X), ld.batch_logdensity_and_gradient(X, threads=None)   # rows of X
    ld.constrain(y), ld.unconstrain(tree)   # with bijectors: sampling space <-> f's space

Every method takes the flat float vector of length ``dimension``; a pytree
``x0`` (dict, namedtuple, nested lists and tuples of floats and arrays) is
laid out end to end in its leaf order (JAX's: sorted dict keys), and
``flatten``/``unflatten`` convert.  ``f`` is recorded once on that flat
vector and compiled; every call replays the compiled program in C through a
pre-bound fast path (``ctape.bind``).

Constraints: ``bijectors=`` gives a ``revtape.bijectors`` bijector (or any
object with forward / inverse / forward_log_det_jacobian) per leaf of x0, in
x0's structure or a prefix of it: ``{"tau": bijectors.exp}`` transforms that
leaf and leaves the rest alone (a dict may name a subset of x0's keys; a
bijector where x0 has a subtree applies to each of its leaves; None is the
identity).  x0 is then given in f's (constrained) space, and the object is
the log density of the unconstrained parameter y, as samplers want it:
``f(forward(y)) + sum of forward_log_det_jacobian(y)``, recorded and compiled
as one program.  ``ld.x0`` and every method's x are the flat unconstrained
vector (a simplex of K entries takes K-1 coordinates, a Cholesky factor its
free triangle), ``ld.constrain(y)`` maps a point or an array of draws
(..., dimension) back to x0's structure, ``ld.unconstrain(tree)`` goes the
other way; ``flatten``/``unflatten`` only lay out the unconstrained leaves.
A transformed leaf's names carry the bijector: "tau__exp", "w__simplex[0]".

Branches: if a point takes another branch of a comparison than the recording
did, that point is recorded too (up to 8 recorded branches, then every such
call is recorded afresh); values are always those of ``f`` as written.
Unlike ``rt.grad``, a LogDensity does not watch ``f`` for redefinitions: it
is a snapshot of ``f`` (and the data it closes over) when it was built.

Threads: a call takes a compiled copy from the object's pool of idle copies
and gives it back on return; a copy is made only when every existing one is
in use, so there are as many copies as calls ever ran at once, whatever
made the threads: Python's threads, thread pools, and threads of C, Rust or
numba code that take the GIL for each call (whose Python thread state, and
with it any threading.local, is new at every call).  One LogDensity serves
many chains at once, and short-lived threads leave nothing behind.  Deep copies
and pickles carry the recorded tapes (pickle carries ``f`` by reference: a
module-level function, so that another process can record new branches).
"""

import collections
import copy
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..transforms import api as _api
from ..core import pytree
from ..core.apitypes import ArrayLike, FloatArray, Function, PyTree
from ..trace.hessian import Parts
from ..trace.recording import GradientTape, call_with
from ..runtime.compiled import CompiledTape
from ..errors import BranchChanged, InputError

MAX_BRANCHES = 8
_F64 = np.dtype(np.float64)
_copyto = np.copyto


class _ThreadState:
    """One call's buffers and compiled copies, one per recorded branch; held
    by one call at a time (LogDensity._idle)."""

    __slots__ = ("x", "g", "programs", "forwards")

    def __init__(self, dim):
        self.x = np.zeros(dim)
        self.g = np.zeros(dim)
        self.programs = []          # [(ctape, run)] by branch number: value and gradient
        self.forwards = []          # [value()] by branch number: the forward sweep alone


class _Model:
    """The function a LogDensity records: f on the unflattened (and
    constrained) parameter.  Its own object holding only what it reads, so
    that the tapes recorded from it do not hold the LogDensity (a bound
    method would: a cycle that only the cyclic collector frees)."""

    def __init__(self, ld):
        self.f = ld.f
        self._plain_vector = ld._plain_vector
        self._parts = ld._parts
        self._transformed = ld._transformed
        self._bij = ld._bij
        self._tree = ld._tree

    def __call__(self, z):
        if self._plain_vector:
            return self.f(z)
        parts = self._parts.split(z)
        if self._transformed:
            # f on the constrained leaves, plus each map's log|det Jacobian|:
            # the density of the unconstrained parameter
            logjac = []
            xs = []
            for bij, p in zip(self._bij, parts):
                if bij is None:
                    xs.append(p)
                else:
                    xs.append(bij.forward(p))
                    logjac.append(bij.forward_log_det_jacobian(p))
            out = self.f(xs[0]) if not self._tree else call_with(self.f, self._parts.tree(tuple(xs)))
            for term in logjac:
                out = out + term
            return out
        if not self._tree:
            return self.f(parts[0])
        return call_with(self.f, self._parts.tree(parts))


class LogDensity:
    """A compiled log density of a flat parameter vector: the object a sampler
    or an optimiser is handed.

    ``f`` is recorded once at x0 (on the flat vector) and compiled; every call
    replays the compiled program in C through a pre-bound fast path.  A point
    that takes another branch of a comparison than the recording is recorded
    too (up to 8 branches, then such points are recorded afresh each call).
    Unlike ``rt.grad``, a LogDensity does not watch ``f`` for redefinitions:
    it is a snapshot of ``f`` and the data it closes over.  One object serves
    many threads at once (a pool of compiled copies); it deep-copies and
    pickles (``f`` by reference: a module-level function).

    Parameters
    ----------
    f : callable
        The log density, of a point in x0's structure; returns a scalar.
    x0 : float, ndarray, tuple or pytree
        The recording point.  A pytree (dict, namedtuple, nested lists and
        tuples of floats and arrays) is laid out end to end in its leaf order
        (sorted dict keys, as JAX); every method takes that flat vector of
        length ``dimension`` (``flatten``/``unflatten`` convert).
    names : sequence of str, optional
        One name per coordinate of the flat vector; default from x0's
        structure (``"x[0]"``, ``"mu"``, ``"w[1,2]"``, a transformed leaf's
        with its bijector: ``"tau__exp"``).
    bijectors : pytree of bijectors, optional
        A ``rt.bijectors`` bijector (or any object with forward, inverse and
        forward_log_det_jacobian) per leaf of x0, in x0's structure or a prefix
        of it (``{"tau": rt.bijectors.exp}``; None is the identity).  x0 is
        then given in f's (constrained) space and the object is the density
        of the unconstrained parameter y, ``f(forward(y)) + sum of
        forward_log_det_jacobian(y)``; ``x0`` and every method's x are the
        flat unconstrained vector (``constrain``/``unconstrain`` map).

    Attributes
    ----------
    dimension : int
        The length of the flat vector.
    names : list of str
        The coordinates' names.
    x0 : ndarray
        The recording point as the flat (unconstrained) vector.

    Raises
    ------
    InputError
        names has the wrong length, or x0 is outside a bijector's support.

    Examples
    --------
    >>> import numpy as np, revtape as rt
    >>> ld = rt.LogDensity(lambda x: -0.5 * np.sum(x ** 2), np.zeros(2))
    >>> ld.logdensity_and_gradient(np.array([1.0, 2.0]))
    (-2.5, array([-1., -2.]))
    >>> ld.dimension, ld.names
    (2, ['x[0]', 'x[1]'])
    """

    f: Function
    dimension: int
    names: list[str]
    x0: FloatArray
    bijectors: Any
    copies_made: int

    def __init__(self, f: Function, x0: PyTree, *, names: Sequence[str] | None = None,
                 bijectors: Any = None) -> None:
        self._build(f, x0, names, bijectors, None)

    def _build(self, f, x0, names, bijectors, tapes):
        """__init__, and a copy's or an unpickled object's construction with the
        tapes it carries (tapes: None records at x0)."""
        self.f = f
        leaves, treedef = pytree.input_structure(x0)
        self._tree = treedef is not None or isinstance(x0, tuple)
        leaves = [_leaf(v) for v in leaves]
        self._x0_tree = pytree.unflatten(treedef, leaves) if treedef is not None else (
            tuple(leaves) if self._tree else leaves[0])
        self.bijectors = bijectors
        paths = self._paths(treedef, leaves)
        self._bij = _spread_bijectors(bijectors, x0, treedef, len(leaves))
        # the constrained leaves' shapes (constrain() rebuilds them) and the
        # unconstrained leaves, which lay out the flat vector
        self._x_shapes = [np.shape(v) for v in leaves]
        self._x_floats = [np.ndim(v) == 0 for v in leaves]
        uleaves = [v if b is None else _unconstrained_x0(b, v, path)
                   for b, v, path in zip(self._bij, leaves, paths)]
        self._parts = Parts(uleaves, treedef)
        self.x0 = self._parts.flatten(pytree.unflatten(treedef, uleaves) if treedef is not None
                                      else tuple(uleaves))
        self.dimension = int(self.x0.size)
        self.names = self._names(names, [p if b is None else f"{p}__{_bij_name(b)}"
                                         for p, b in zip(paths, self._bij)], uleaves)
        self._transformed = any(b is not None for b in self._bij)
        self._plain_vector = (not self._tree and not self._transformed
                              and isinstance(leaves[0], np.ndarray) and leaves[0].ndim == 1)
        self._model = _Model(self)
        self._lock = threading.Lock()
        # Idle per-call states.  A pool rather than per-thread state: a
        # thread state that C made for one call (PyGILState_Ensure) is gone
        # at the next, and a table keyed by thread id would grow with every
        # short-lived thread.  list.pop and list.append are atomic, so taking
        # and giving back needs no lock.
        self._idle = []
        self.copies_made = 0        # compiled copies made for the pool (copy 0 included)
        self._tapes = list(tapes) if tapes is not None else [self._record(self.x0)]
        st = self._new_state()
        self._program(st, 0)        # compiled now: a bad program fails here, not mid-run
        self._idle.append(st)

    def _paths(self, treedef, leaves):
        return (pytree.leaf_paths(treedef) if treedef is not None else
                [f"x[{i}]" for i in range(len(leaves))] if self._tree else ["x"])

    def _names(self, names, paths, leaves):
        if names is not None:
            names = [str(n) for n in names]
            if len(names) != self.dimension:
                raise InputError(f"names has {len(names)} entries for a dimension of "
                                 f"{self.dimension}")
            return names
        out = []
        for path, leaf in zip(paths, leaves):
            shape = np.shape(leaf)
            if shape == ():
                out.append(path)
            else:
                out.extend(f"{path}[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape))
        return out

    # ------------------------------------------------ layout
    def flatten(self, x: PyTree) -> FloatArray:
        """A parameter in x0's structure as the flat float64 vector the methods take."""
        return self._parts.flatten(x if self._tree else (x,))

    def unflatten(self, x: ArrayLike) -> PyTree:
        """A flat vector (a point, or a gradient) in x0's structure."""
        x = self._vector(x)
        res = self._parts.split_result(x, None)
        return res if self._tree else res[0]

    def constrain(self, y: ArrayLike) -> PyTree:
        """The flat unconstrained vector y (or draws of shape (..., dimension))
        in x0's structure and space: each transformed leaf through its
        bijector's forward.  Draws give leaves of shape (...,) + the leaf's shape."""
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 0 or y.shape[-1] != self.dimension:
            raise InputError(f"pass a flat vector of length {self.dimension}, or draws of shape "
                             f"(..., {self.dimension}) (got shape {y.shape})")
        lead = y.shape[:-1]
        rows = y.reshape(-1, self.dimension)
        b = self._parts.bounds
        leaves = []
        for i, (bij, shape, isf) in enumerate(zip(self._bij, self._x_shapes, self._x_floats)):
            block = rows[:, b[i]:b[i + 1]].reshape((len(rows),) + self._parts.shapes[i])
            if bij is not None:
                # row by row: the matrix bijectors take one point at a time
                block = np.array([np.asarray(bij.forward(r), dtype=np.float64) for r in block])
                block = block.reshape((len(rows),) + shape)
            leaf = block.reshape(lead + shape)
            leaves.append(float(leaf) if isf and not lead else np.array(leaf))
        return self._structure(leaves)

    def unconstrain(self, x: PyTree) -> FloatArray:
        """A point in x0's structure and space as the flat unconstrained vector
        (each transformed leaf through its bijector's inverse)."""
        if self._parts.treedef is not None:
            leaves = pytree.leaves_of(self._parts.treedef, x)
        else:
            leaves = list(x) if self._tree else [x]
            if len(leaves) != len(self._bij):
                raise InputError(f"pass a tuple of {len(self._bij)} values, shaped like x0")
        ys = []
        for bij, v, shape in zip(self._bij, leaves, self._x_shapes):
            v = np.asarray(v, dtype=np.float64)
            if v.shape != shape:
                raise InputError(f"a leaf of shape {v.shape} where x0 has shape {shape}")
            ys.append(v if bij is None else np.asarray(bij.inverse(v), dtype=np.float64))
        return self.flatten(self._structure(ys))

    def _structure(self, leaves):
        if self._parts.treedef is not None:
            return pytree.unflatten(self._parts.treedef, leaves)
        return tuple(leaves) if self._tree else leaves[0]

    def _record(self, x):
        return GradientTape(self._model, x)

    def _vector(self, x):
        arr = x if type(x) is np.ndarray and x.dtype == np.float64 else np.asarray(x, np.float64)
        if arr.shape != (self.dimension,):
            raise InputError(f"pass a flat vector of length {self.dimension} (got shape "
                             f"{arr.shape}); ld.flatten(tree) converts a structured parameter")
        return arr

    # ------------------------------------------------ per-call programs
    def _new_state(self):
        return _ThreadState(self.dimension)

    def _take(self):
        """An idle state, or a new one when all are in use (give it back with
        self._idle.append)."""
        try:
            return self._idle.pop()
        except IndexError:
            return self._new_state()

    def _program(self, st, k):
        """st's compiled copy of recorded branch k (made on first use)."""
        while len(st.programs) <= k:
            tape = copy.deepcopy(self._tapes[len(st.programs)])
            ctape = CompiledTape(tape)
            st.programs.append((ctape, ctape.bind(st.x, st.g)))
            st.forwards.append(ctape._bind_forward(st.x))
            with self._lock:
                self.copies_made += 1
        return st.programs[k]

    def _replay(self, x, use):
        """use(ctape, run, st) on the first recorded branch that holds at x."""
        st = self._take()
        try:
            return self._replay_on(st, x, use)
        finally:
            self._idle.append(st)

    def _replay_on(self, st, x, use):
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
    def logdensity_and_gradient(self, x: ArrayLike) -> tuple[float, FloatArray]:
        """(log density, gradient) at the flat vector x, value first (scipy's
        jac=True, littlemcmc).

        Parameters
        ----------
        x : array_like
            The flat (unconstrained) vector, of length ``dimension``.

        Returns
        -------
        (float, ndarray)
            The log density and its gradient (a new array).  nan and inf points
            give nan/-inf values, never an exception.
        """
        idle = self._idle
        try:
            st = idle.pop()
        except IndexError:
            st = self._new_state()
        try:
            if (st.programs and type(x) is np.ndarray and x.dtype is _F64
                    and x.shape == st.x.shape):
                # the sampler loop: copy x into the bound buffer, one C call
                _copyto(st.x, x)
                try:
                    return st.programs[0][1](), st.g.copy()
                except BranchChanged:
                    pass                    # another branch: the general path below
            res = self._replay_on(st, x, lambda ctape, run, st: (run(), st.g.copy()))
        finally:
            idle.append(st)
        return res if res is not None else self._fresh(x)

    def logdensity(self, x: ArrayLike) -> float:
        """The log density at x (a forward sweep only: no reverse sweep, the
        adjoints untouched)."""
        idle = self._idle
        try:
            st = idle.pop()
        except IndexError:
            st = self._new_state()
        try:
            if (st.forwards and type(x) is np.ndarray and x.dtype is _F64
                    and x.shape == st.x.shape):
                _copyto(st.x, x)
                try:
                    return st.forwards[0]()
                except BranchChanged:
                    pass
            res = self._replay_on(st, x, lambda ctape, run, st: next(
                f for (c, _), f in zip(st.programs, st.forwards) if c is ctape)())
        finally:
            idle.append(st)
        return res if res is not None else self._fresh(x)[0]

    __call__ = logdensity

    def gradient(self, x: ArrayLike) -> FloatArray:
        """The gradient at the flat vector x (a new array)."""
        return self.logdensity_and_gradient(x)[1]

    def grad_and_value(self, x: ArrayLike) -> tuple[FloatArray, float]:
        """(gradient, value): the order mici's grad_neg_log_dens may return."""
        v, g = self.logdensity_and_gradient(x)
        return g, v

    def hvp(self, x: ArrayLike, v: ArrayLike) -> FloatArray:
        """Hessian-vector product at x (forward-over-reverse in C), e.g. scipy's hessp."""
        v = self._vector(v)
        res = self._replay(x, lambda ctape, run, st: ctape.hvp(st.x, v))
        if res is None:
            return _api.hvp(self._model, self._vector(x), v)
        return res

    def hessian(self, x: ArrayLike) -> FloatArray:
        """The Hessian at x, (dimension, dimension): tangent sweeps of the gradient program in C."""
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

    def batch_logdensity_and_gradient(self, X: ArrayLike, threads: int | None = None
                                      ) -> tuple[FloatArray, FloatArray]:
        """(values[k], gradients[k, dimension]) at the rows of X, in one C call per
        thread (``threads=n`` splits the rows); ensemble and SMC samplers,
        multi-start optimisation."""
        if not (type(X) is np.ndarray and X.dtype is _F64 and X.ndim == 2
                and X.shape[1] == self.dimension):
            X = self._rows(X)
        idle = self._idle
        try:
            st = idle.pop()
        except IndexError:
            st = self._new_state()
        try:
            ctape = st.programs[0][0] if st.programs else self._program(st, 0)[0]
            return ctape.batch_value_and_gradient(X, threads=threads)
        except BranchChanged:
            pass
        finally:
            idle.append(st)
        # some row takes another branch: row by row, recording what it needs
        pairs = [self.logdensity_and_gradient(x) for x in X]
        return (np.array([v for v, _ in pairs]),
                np.array([g for _, g in pairs]).reshape(X.shape))

    def batch_logdensity(self, X: ArrayLike, threads: int | None = None) -> FloatArray:
        """values[k] at the rows of X (forward sweeps only): emcee's vectorize=True."""
        if not (type(X) is np.ndarray and X.dtype is _F64 and X.ndim == 2
                and X.shape[1] == self.dimension):
            X = self._rows(X)
        idle = self._idle
        try:
            st = idle.pop()
        except IndexError:
            st = self._new_state()
        try:
            ctape = st.programs[0][0] if st.programs else self._program(st, 0)[0]
            return ctape.batch_forward(X, threads=threads)
        except BranchChanged:
            pass
        finally:
            idle.append(st)
        return np.array([self.logdensity(x) for x in X])

    def negative(self) -> "NegativeLogDensity":
        """A view computing -log density (and its derivatives), for minimisers and mici."""
        return NegativeLogDensity(self)

    def mici_kwargs(self) -> dict[str, Callable[..., Any]]:
        """neg_log_dens= and grad_neg_log_dens= for a mici system:
        ``mici.systems.EuclideanMetricSystem(**ld.mici_kwargs())``."""
        neg = self.negative()
        return {"neg_log_dens": neg.logdensity, "grad_neg_log_dens": neg.grad_and_value}

    def __repr__(self):
        return (f"<rt.LogDensity of {getattr(self.f, '__name__', self.f)!s}: dimension "
                f"{self.dimension}, {len(self._tapes)} recorded branch(es)>")

    # ------------------------------------------------ copy and pickle
    def __deepcopy__(self, memo):
        new = LogDensity.__new__(LogDensity)
        new._build(self.f, self._x0_tree, self.names, copy.deepcopy(self.bijectors, memo),
                   copy.deepcopy(self._tapes, memo))
        memo[id(self)] = new
        return new

    def __copy__(self):
        return self.__deepcopy__({})

    def __reduce__(self):
        return (_rebuild, (self.f, self._x0_tree, self.names, list(self._tapes),
                           self.bijectors))


def _rebuild(f, x0, names, tapes, bijectors=None):
    ld = LogDensity.__new__(LogDensity)
    ld._build(f, x0, names, bijectors, tapes)
    return ld


def _leaf(v):
    if isinstance(v, (float, int, np.floating, np.integer)):
        return float(v)
    return np.array(v, dtype=np.float64)


def _is_bijector(b):
    return all(callable(getattr(b, m, None))
               for m in ("forward", "inverse", "forward_log_det_jacobian"))


def _bij_name(b):
    return getattr(b, "name", None) or type(b).__name__.lower()


def _spread_bijectors(spec, x0, treedef, n_leaves):
    """One bijector (or None) per leaf of x0, from a spec in x0's structure or a prefix of it."""
    if spec is None:
        return [None] * n_leaves
    if _is_bijector(spec):
        return [spec] * n_leaves
    if treedef is None:
        if isinstance(x0, tuple) and isinstance(spec, (tuple, list)) and len(spec) == n_leaves:
            return [_one(b, f"bijectors[{i}]") for i, b in enumerate(spec)]
        raise InputError(f"bijectors= takes a bijector, None, or (for a tuple x0) one of them "
                         f"per entry; got {spec!r:.80}")
    out = []
    _spread(spec, treedef, "bijectors", out)
    return out


def _one(b, where):
    if b is None or _is_bijector(b):
        return b
    raise InputError(f"{where} is a {type(b).__name__}, not a bijector (an object with forward, "
                     "inverse and forward_log_det_jacobian, e.g. revtape.bijectors.exp) or None")


def _spread(spec, td, where, out):
    if spec is None or _is_bijector(spec):
        out.extend([spec] * td.n_leaves)
        return
    if td.kind is None:
        _one(spec, where)
    if td.kind in (dict, collections.OrderedDict, collections.defaultdict) and isinstance(spec, dict):
        keys = td.aux[1] if td.kind is collections.defaultdict else td.aux
        unknown = [k for k in spec if k not in keys]
        if unknown:
            raise InputError(f"{where} names {unknown!r}, which x0 does not have (its keys: "
                             f"{list(keys)!r})")
        for k, child in zip(keys, td.children):
            _spread(spec.get(k), child, f"{where}[{k!r}]", out)
        return
    if isinstance(spec, (tuple, list)) and isinstance(td.kind, type) and \
            issubclass(td.kind, (tuple, list)) and len(spec) == len(td.children):
        for i, (b, child) in enumerate(zip(spec, td.children)):
            _spread(b, child, f"{where}[{i}]", out)
        return
    raise InputError(f"{where} ({spec!r:.60}) does not follow x0's structure there ({td}): give "
                     "a bijector or None per leaf, in x0's containers or a prefix of them")


def _unconstrained_x0(b, v, path):
    """The leaf's unconstrained value, refusing a start outside the bijector's image."""
    with np.errstate(all="ignore"):
        y = np.asarray(b.inverse(v), dtype=np.float64)
        back = np.asarray(b.forward(y), dtype=np.float64)
    if not np.all(np.isfinite(y)) or back.shape != np.shape(v) or not np.allclose(
            back, v, rtol=1e-8, atol=1e-12):
        raise InputError(f"x0's {path} = {v!r:.60} is not inside the support of its bijector "
                         f"{b!r} (its inverse gives {y!r:.60}): start at a point that "
                         "satisfies the constraint")
    return float(y) if y.ndim == 0 else y


class NegativeLogDensity:
    """-log density of a LogDensity, with the same methods (and its own negative())."""

    def __init__(self, base: LogDensity) -> None:
        self.base = base

    @property
    def dimension(self) -> int:
        """The length of the flat vector."""
        return self.base.dimension

    @property
    def names(self) -> list[str]:
        """The coordinates' names."""
        return self.base.names

    @property
    def x0(self) -> FloatArray:
        """The recording point, flat."""
        return self.base.x0

    def logdensity(self, x: ArrayLike) -> float:
        """-log density at x."""
        return -self.base.logdensity(x)

    __call__ = logdensity

    def logdensity_and_gradient(self, x: ArrayLike) -> tuple[float, FloatArray]:
        """(-log density, its gradient) at x."""
        v, g = self.base.logdensity_and_gradient(x)
        np.negative(g, out=g)
        return -v, g

    def gradient(self, x: ArrayLike) -> FloatArray:
        """The gradient at the flat vector x (a new array)."""
        return self.logdensity_and_gradient(x)[1]

    def grad_and_value(self, x: ArrayLike) -> tuple[FloatArray, float]:
        """(gradient, value) of -log density: mici's grad_neg_log_dens."""
        v, g = self.logdensity_and_gradient(x)
        return g, v

    def hvp(self, x: ArrayLike, v: ArrayLike) -> FloatArray:
        """-H(x) v."""
        return -self.base.hvp(x, v)

    def batch_logdensity_and_gradient(self, X: ArrayLike, threads: int | None = None
                                      ) -> tuple[FloatArray, FloatArray]:
        """(-values[k], -gradients[k, dimension]) at the rows of X."""
        v, g = self.base.batch_logdensity_and_gradient(X, threads)
        return -v, -g

    def batch_logdensity(self, X: ArrayLike, threads: int | None = None) -> FloatArray:
        """-values[k] at the rows of X."""
        return -self.base.batch_logdensity(X, threads)

    def hessian(self, x: ArrayLike) -> FloatArray:
        """-H(x)."""
        return -self.base.hessian(x)

    def negative(self) -> LogDensity:
        """The LogDensity this is the negative of."""
        return self.base

    def flatten(self, x: PyTree) -> FloatArray:
        """As LogDensity.flatten."""
        return self.base.flatten(x)

    def unflatten(self, x: ArrayLike) -> PyTree:
        """As LogDensity.unflatten."""
        return self.base.unflatten(x)

    def constrain(self, y: ArrayLike) -> PyTree:
        """As LogDensity.constrain."""
        return self.base.constrain(y)

    def unconstrain(self, x: PyTree) -> FloatArray:
        """As LogDensity.unconstrain."""
        return self.base.unconstrain(x)

    def __repr__(self):
        return f"<negative of {self.base!r}>"

    def __reduce__(self):
        return (NegativeLogDensity, (self.base,))
