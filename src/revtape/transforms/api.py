"""The one-shot functions rt.gradient, value_and_gradient, jacobian, hessian
and hvp (a function, a tape or a compiled tape; without x, jacobian/hessian/hvp
give the cached transforms of cached.py).  The tapes they record live in
trace/recording.py (GradientTape, JacobianTape) and trace/hessian.py
(HessianTape).
"""

import functools
import sys

from ..errors import UnsupportedError
from . import outputs

from ..trace.hessian import HessianTape
from ..trace.recording import GradientTape, JacobianTape, _once
from ..trace.tape import Tape


def _tape_like(obj):
    if isinstance(obj, Tape):
        return True
    # revtape.runtime.compiled is not imported here: it needs the C extension,
    # and rt.gradient(f, x) with a plain function must work without it.  A
    # CompiledTape can only exist once that module has been imported.
    compiled = sys.modules.get("revtape.runtime.compiled")
    return compiled is not None and isinstance(obj, compiled.CompiledTape)


def gradient(f, x, out=None):
    """Gradient of scalar f at x (f a function, a tape or a compiled tape)."""
    if _tape_like(f):
        return f.gradient(x, out)
    return _once(GradientTape, f, x).value_and_gradient_recorded(out)[1]


def value_and_gradient(f, x, out=None):
    """(f(x), gradient at x) for a function, a tape or a compiled tape."""
    if _tape_like(f):
        return f.value_and_gradient(x, out)
    return _once(GradientTape, f, x).value_and_gradient_recorded(out)


def _transform(f, kind, x):
    """rt.jacobian(f) / hessian(f) / hvp(f) without x: the cached transform."""
    if _tape_like(f) or x is not None:
        raise TypeError(f"rt.{kind}(tape) needs x: rt.{kind}(tape, x, ...)")
    from .cached import CachedTransform   # above this module (it compiles); no cycle
    return CachedTransform(f, kind)


def jacobian(f, x=None, out=None):
    """Jacobian of f at x, shaped output.shape + input.shape.  Without x, the
    cached, compiled, guarded transform: rt.jacobian(f)(x).  For an f
    returning a pytree (tuple, list, dict), that structure of Jacobians."""
    if x is None:
        return _transform(f, "jacobian", x)
    if _tape_like(f):
        return f.jacobian(x, out)
    if not callable(f):
        return _once(JacobianTape, f, x)          # refuses it, saying what to pass
    specs = []

    @functools.wraps(f)          # the signature too: call_with reads it
    def packed(*args):
        flat, spec = outputs.pack(f(*args))
        specs.append(spec)
        return flat

    tape = _once(JacobianTape, packed, x)
    if specs and specs[0] is not None:
        # f returned a container: its structure of Jacobians (outputs.py)
        if out is not None:
            raise UnsupportedError("jacobian(out=...) takes arrays; for a function returning "
                                   "a container call it without out=")
        return outputs.unpack_jacobian(specs[0], tape.jacobian(x), tape._treedef)
    return tape.jacobian(x, out)


def hessian(f, x=None, out=None):
    """Hessian of scalar f at x, shaped input.shape + input.shape.  Without x,
    the cached transform: rt.hessian(f)(x)."""
    if x is None:
        return _transform(f, "hessian", x)
    if _tape_like(f):
        return f.hessian(x, out)
    return _once(HessianTape, f, x).hessian(x, out)


def hvp(f, x=None, v=None):
    """Hessian-vector product H(x) v.  Without x, the cached transform:
    rt.hvp(f)(x, v), as fast as ctape.hvp after its first call."""
    if x is None and v is None:
        return _transform(f, "hvp", None)
    if v is None:
        raise TypeError("rt.hvp(f, x, v) needs v (or call rt.hvp(f)(x, v))")
    if _tape_like(f):
        return f.hvp(x, v)
    return _once(HessianTape, f, x).hvp(x, v)
