"""A tape's pickled state, checked before it becomes a tape.

A pickle is the one way a tape's instructions reach this process without
being recorded here (LogDensity pickles carry tapes, and CompiledTape
pickles recompile from theirs), so its state is untrusted: whatever it
holds must raise VerificationError here rather than an AttributeError or
IndexError deep inside a replay or the compiler, or compile into another
function than the one pickled.  Two checks:

- the structure: the fields a tape has, of their types; every instruction
  an op-table row with an output id and operand ids among the tape's nodes,
  operands recorded before the output that uses them; inputs and output
  handles on nodes of the tape;
- a digest of the content (values, instructions, input and output ids)
  taken when pickling and compared on load: a pickle changed after it was
  written (a flipped byte, a constant edited) is refused instead of
  replaying a different function.  It detects change, it does not
  authenticate: unpickling runs whatever code the pickle names, so a pickle
  is only ever as trustworthy as its source."""

import hashlib
import numbers
import pickle

import numpy as np

from ..core import ops
from ..errors import VerificationError

# the fields every tape's state carries and the types they may hold
_FIELDS = {"_vals": list, "_instrs": list, "_inputs": list, "_outs": list, "_recording": bool,
           "_n_guards": int}


def _refuse(why):
    raise VerificationError(f"this tape pickle is inconsistent ({why}); it was changed after "
                            "it was written or by another revtape: pickle the tape again")


def _canon(obj, h):
    """Feed obj to h by value: a tuple subclass that pickles as a plain
    tuple (guards._Where) digests as one, so a state digests the same before
    and after the round trip."""
    if isinstance(obj, np.ndarray):
        h.update(b"a" + repr((obj.dtype.str, obj.shape)).encode()
                 + np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, (tuple, list)):
        h.update(b"(%d" % len(obj))
        for e in obj:
            _canon(e, h)
    elif isinstance(obj, dict):
        h.update(b"{%d" % len(obj))
        for k in sorted(obj, key=repr):
            _canon(k, h)
            _canon(obj[k], h)
    elif obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        h.update(type(obj).__name__.encode() + repr(obj).encode())
    else:                          # e.g. a PYCALL's CallSite: as it pickles
        h.update(b"p" + pickle.dumps(obj, protocol=4))


def digest(state):
    """The content digest of a tape state (what __getstate__ stores)."""
    h = hashlib.sha256(ops.OP_TABLE_HASH.encode())
    for v in state["_vals"]:
        if isinstance(v, np.ndarray):
            h.update(b"a" + repr((v.dtype.str, v.shape)).encode() + np.ascontiguousarray(v).tobytes())
        else:
            h.update(b"f" + repr(v).encode())
    for op, out, args, params in state["_instrs"]:
        h.update(repr((op.name, out, tuple(args))).encode())
        _canon(params, h)
    h.update(repr([t._id for t in state["_inputs"]]).encode())
    h.update(repr([t._id for t in state["_outs"]]).encode())
    h.update(repr((state["_recording"], state["_n_guards"])).encode())
    return h.hexdigest()


def check(state):
    """Raise VerificationError unless state is a consistent tape state whose
    digest matches its content."""
    if not isinstance(state, dict) or not all(type(k) is str for k in state):
        _refuse("the state is not a dict of named fields")
    for name, typ in _FIELDS.items():
        if name not in state:
            _refuse(f"no {name}")
        if type(state[name]) is not typ:
            _refuse(f"{name} is a {type(state[name]).__name__}, not a {typ.__name__}")
    if type(state.get("_digest")) is not str:
        _refuse("no content digest")
    vals = state["_vals"]
    n = len(vals)
    for v in vals:
        if isinstance(v, np.ndarray):
            if v.dtype != np.float64:
                _refuse(f"a value of dtype {v.dtype}")
        elif type(v) is not float:
            _refuse(f"a value is a {type(v).__name__}")
    guards = 0
    for k, ins in enumerate(state["_instrs"]):
        if type(ins) is not tuple or len(ins) != 4:
            _refuse(f"instruction {k} is not an (op, out, args, params) tuple")
        op, out, args, params = ins
        if type(op) is not ops.Op or ops.op_named(op.name) is not op:
            _refuse(f"instruction {k}'s op is not a row of this op table")
        if type(args) is not tuple or not all(type(a) is int and 0 <= a < n for a in args):
            _refuse(f"instruction {k} has operands outside the tape's {n} nodes")
        if type(out) is not int or not -1 <= out < n:
            _refuse(f"instruction {k} writes node {out!r}, not one of the tape's {n}")
        if out == -1:
            guards += 1
        elif any(a >= out for a in args):
            _refuse(f"instruction {k} reads a node recorded after its output")
        if not isinstance(params, dict) or not all(type(p) is str for p in params):
            _refuse(f"instruction {k}'s static arguments are not a dict of names")
    if guards != state["_n_guards"]:
        _refuse(f"{state['_n_guards']} guards counted, {guards} recorded")
    for what in ("_inputs", "_outs"):
        for t in state[what]:
            i = getattr(t, "_id", None)
            if not isinstance(i, numbers.Integral) or isinstance(i, bool) or not 0 <= i < n:
                _refuse(f"an entry of {what} is not a node of the tape")
    try:
        same = digest(state) == state["_digest"]
    except Exception as e:                      # noqa: BLE001 - unpicklable params and the like
        _refuse(f"its content cannot be read back ({type(e).__name__})")
    if not same:
        _refuse("its content does not match the digest taken when it was pickled")
