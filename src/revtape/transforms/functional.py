"""Helpers of the JAX-style transforms: pytree arguments, has_aux, and the
traced fallback that makes rt.grad(rt.grad(f)) work.

rt.grad (transforms.py) calls these; the cached transforms rt.jacobian(f),
rt.hessian(f), rt.hvp(f) and rt.jvp/rt.vjp live in cached.py.
"""

import numpy as np

from ..core import ops, pytree
from ..errors import InputError, OutputError, TapeMixError
from ..trace.replay import backprop
from ..trace.tape import Tape
from ..trace.values import shape_of

_GUARD = ops.OPS["guard"]


class Traced(Exception):
    """Raised by GradFunction._split when an argument is already tracked: the call
    happens while an outer tape records (rt.grad(rt.grad(f))), so the gradient
    is traced onto that tape instead of replayed from a cache."""


def is_tracked(v):
    return getattr(v, "_is_tracked", False)


def any_tracked(args, kwargs):
    return any(_holds_tracked(a, 0) for a in (*args, *kwargs.values()))


def _holds_tracked(a, depth):
    """a is tracked, or a container holding one.  Never raises (static
    arguments may be any object), and looks at most 256 items per container
    and 8 levels deep: a large static list costs nothing per call."""
    if getattr(a, "_is_tracked", False):
        return True
    if depth > 8:
        return False
    if isinstance(a, dict):
        items = a.values()
    elif isinstance(a, (list, tuple)):
        items = a
    else:
        return False
    for k, v in enumerate(items):
        if k >= 256:
            break
        if _holds_tracked(v, depth + 1):
            return True
    return False


# ---------------------------------------------------------------- pytree arguments

def tree_key(a):
    """(cache key part, leaves) of a differentiated pytree argument, in one walk:
    the key holds the containers (types, sorted dict keys) and each leaf's
    shape and dtype, as plain tuples that hash and compare in C.  The leaves
    come in pytree.flatten's order."""
    leaves = []
    return ("tree", _walk(a, leaves)), leaves


def _walk(x, leaves):
    t = type(x)
    if t is np.ndarray:
        if x.dtype.kind not in "biuf":
            raise InputError(f"a differentiated pytree holds real numbers; got an array of "
                             f"dtype {x.dtype}")
        leaves.append(x)
        return (x.shape, x.dtype.char)
    if t is float or t is int:
        leaves.append(x)
        return "f"
    if t is dict:
        keys = pytree._sorted_keys(x)
        return (dict, keys, tuple([_walk(x[k], leaves) for k in keys]))
    if t is tuple or (t is list and not pytree._is_scalar_list(x)):
        return (t, tuple([_walk(v, leaves) for v in x]))
    rule = None if t is list else pytree._node(x)
    if rule is None:
        if is_tracked(x):
            raise Traced()
        pytree.check_leaf(x)
        leaves.append(x)
        return ("a", np.shape(x)) if t is list or isinstance(x, np.ndarray) else "f"
    children, aux = rule[0](x)
    return (t, aux, tuple([_walk(c, leaves) for c in children]))


def track_arg(tape, a):
    """a tracked on tape: a leaf, or a pytree of tracked leaves."""
    if pytree.is_container(a):
        leaves, td = pytree.flatten(a)
        return pytree.unflatten(td, [tape.track(v) for v in leaves])
    return tape.track(a)


def layout_of(args, argnums):
    """Per differentiated argument, in argnums order (the order their leaves are
    tracked, and JAX's order of the returned gradients): None for a float or
    an array, (treedef, number of leaves) for a pytree; None for the whole
    call when no argument is a pytree."""
    out = []
    for i in argnums:
        a = args[i]
        if pytree.is_container(a):
            td = pytree.flatten(a)[1]
            out.append((td, td.n_leaves))
        else:
            out.append(None)
    return tuple(out) if any(e is not None for e in out) else None


def n_leaves(layout, argnums):
    """How many tape inputs the differentiated arguments are (layout_of's layout)."""
    if layout is None:
        return len(argnums)
    return sum(1 if e is None else e[1] for e in layout)


def regroup(grads, layout):
    """The flat per-leaf gradients as a tuple with one entry per differentiated argument."""
    flat = list(grads) if type(grads) is tuple else [grads]
    out, k = [], 0
    for e in layout:
        if e is None:
            out.append(flat[k])
            k += 1
        else:
            td, n = e
            out.append(pytree.unflatten(td, flat[k:k + n]))
            k += n
    return tuple(out)


# ---------------------------------------------------------------- outputs

def size1_scalar(out):
    """A differentiated output of size 1 but not 0-d ((1,), (1, 1)) as a
    scalar, as autograd's grad takes it; anything else as it is (a larger
    output is refused by the tape's scalar check)."""
    if is_tracked(out):
        shape = shape_of(out.value)
        if shape != () and all(n == 1 for n in shape):
            return ops.P.reshape(out, shape=())
        return out
    if isinstance(out, np.ndarray) and out.size == 1 and out.ndim:
        return out.reshape(())
    return out


# ---------------------------------------------------------------- has_aux

def split_aux(out):
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise OutputError("with has_aux=True the function must return a pair (output, aux), "
                          f"got {type(out).__name__}")
    return out[0], out[1]


def aux_spec(tape, aux):
    """Record aux's tracked leaves as extra outputs of tape; returns the spec
    that rebuilds aux from a replay's extra values (plain leaves kept as they are)."""
    leaves, td = pytree.flatten(aux)
    ids, items = [], []
    for v in leaves:
        if is_tracked(v) and v._id >= 0 and v._tape is tape:
            items.append(len(ids))
            ids.append(v._id)
        else:
            items.append(("const", v.value if is_tracked(v) else v))
    tape._extra_ids = ids
    return td, items


class AuxReplay:
    """A has_aux variant's replay: ((value, aux), grads) of one compiled replay,
    aux rebuilt from the program's extra outputs.  A plain object (not a
    closure) so that variants deep-copy and pickle."""

    __slots__ = ("ctape", "spec")

    def __init__(self, ctape, spec):
        self.ctape = ctape
        self.spec = spec

    def __call__(self, x):
        value, grads, extras = self.ctape._value_gradient_extras(x)
        return (value, build_aux(self.spec, extras)), grads

    def __reduce__(self):
        return (AuxReplay, (self.ctape, self.spec))


def build_aux(spec, extras):
    td, items = spec
    return pytree.unflatten(td, [extras[i] if type(i) is int else i[1] for i in items])


def plain_aux(aux):
    leaves, td = pytree.flatten(aux)
    return pytree.unflatten(td, [v.value if is_tracked(v) else v for v in leaves])


# ---------------------------------------------------------------- traced (nested) calls

def traced_value_and_grads(fun, args, kwargs, argnums, has_aux):
    """Value and gradients of fun at tracked arguments, recorded onto their tape.

    fun is recorded on a fresh tape at the arguments' plain values, then that
    recording's forward and reverse passes are run again on the outer tape's
    tracked values (as HessianTape does): the gradient comes out as tracked
    values whose own derivatives the outer transform takes.  Returns
    (value, tuple of per-argument gradients, aux or None)."""
    argnums = tuple(i % len(args) for i in argnums)
    inner = Tape()
    env_in = {}                      # inner input id -> outer value (tracked or plain)
    tapes = set()
    per_arg = {}                     # argument number -> (layout entry, inner ids of its leaves)

    def track(v, ids):
        if is_tracked(v) and v._id >= 0:
            tapes.add(v._tape)
        t = inner.track(v.value if is_tracked(v) else v)
        env_in[t._id] = v
        if ids is not None:
            ids.append(t._id)
        return t

    iargs = list(args)
    for i, a in enumerate(args):
        diff = i in argnums
        ids = [] if diff else None
        if pytree.is_container(a) and (diff or _holds_tracked(a, 0)):
            leaves, td = pytree.flatten(a)
            iargs[i] = pytree.unflatten(td, [track(v, ids) if (diff or is_tracked(v)) else v
                                             for v in leaves])
            entry = (td, td.n_leaves)
        elif diff or is_tracked(a):
            iargs[i] = track(a, ids)
            entry = None
        if diff:
            per_arg[i] = (entry, ids)
    ikw = {k: (track(v, None) if is_tracked(v) else v) for k, v in kwargs.items()}
    if len(tapes) > 1:
        raise TapeMixError("a transform was called with tracked values of two tapes")
    outer = next(iter(tapes), None)
    layout = [per_arg[i][0] for i in argnums]            # argnums order, as JAX returns them
    diff_ids = [nid for i in argnums for nid in per_arg[i][1]]
    try:
        out = fun(*iargs, **ikw)
    except TapeMixError as e:
        raise TapeMixError(f"{e}. A function differentiated inside another transform's recording "
                           "(rt.grad(rt.grad(f))) must take the values it differentiates as "
                           "arguments, not read the outer function's tracked values from a "
                           "closure") from None
    aux = None
    if has_aux:
        out, aux = split_aux(out)
    inner.finish(size1_scalar(out))
    inner._scalar_output()
    env = list(inner.values)
    for nid, v in env_in.items():
        env[nid] = v
    for op, o, ids, params in inner.instructions:
        if op is _GUARD:
            a, b = env[ids[0]], env[ids[1]]
            if outer is not None and (is_tracked(a) or is_tracked(b)):
                outer.copy_guard(a, b, params)
            continue
        env[o] = ops.apply(op, [env[k] for k in ids], params)
    active = set(diff_ids)
    for op, o, ids, params in inner.instructions:
        if o >= 0 and op.diff and any(k in active for k in ids):
            active.add(o)
    adj = backprop(inner.instructions, env, inner.output_id, 1.0, active)
    grads = []
    for nid in diff_ids:
        rec = inner.values[nid]
        g = adj.get(nid)
        if g is None:
            g = 0.0 if type(rec) is float else np.zeros(np.shape(rec))
        elif shape_of(g) != shape_of(rec):
            g = ops.broadcast_to(g, shape_of(rec))
        grads.append(g)
    value = env[inner.output_id]
    if has_aux:
        leaves, td = pytree.flatten(aux)
        aux = pytree.unflatten(td, [env[v._id] if is_tracked(v) and v._tape is inner and v._id >= 0
                                    else v for v in leaves])
    return value, regroup(tuple(grads), layout), aux
