"""Replaying random draws compiled, exactly as a re-run of f would draw them.

A draw recorded on a tape is a constant.  rt.grad can still compile such a
tape when every draw that reached it is one whose numbers depend only on the
bit generator's state and the size asked for (``standard_normal``,
``random``, ``standard_exponential`` of numpy's Generator): the constant
becomes an extra tape input that each call fills, in the recorded order,
with ``Generator(bitgen).<method>(size=shape)`` on the same bit generator --
the same numbers, and the same generator state afterwards, as running f.

Nothing is assumed about how f drew.  f is run a second time (R2) right after
the recording run (R1), and the plan is accepted only when

* R1 and R2 recorded the same instructions, and the same generators moved
  (the same objects: none was made during the run);
* the constants that differ between R1 and R2 are reproduced bit for bit, in
  some order, by calls of the methods above on copies of those generators
  started from R2's starting state;
* after those calls the copies are in exactly R2's final state (no draw went
  anywhere else: not into an index, a branch, or a transformed array).

Then the generators are put back in R1's final state (R2 never happened for
the user) and R1's tape is compiled with the draw constants as inputs.
Anything else stays eager (re-recorded on every call).
"""

import numpy as np

from .watch import Watcher, _freeze

# Methods whose output is a function of (bit generator state, size) only.
_METHODS = ("standard_normal", "random", "standard_exponential")
_MAX_DRAWS = 64


class DrawPlan:
    """The ordered draws that fill a compiled tape's extra inputs."""

    __slots__ = ("steps", "streams")

    def __init__(self, steps, streams):
        self.steps = steps          # [(Generator over the user's bit generator, method, size)]
        self.streams = streams      # the user's bit generators, for rollback

    def fill(self):
        return tuple(getattr(gen, m)(size=size) for gen, m, size in self.steps)

    def states(self):
        return [s.state for s in self.streams]

    def restore(self, states):
        for s, st in zip(self.streams, states):
            s.state = st


def _same_params(p, q):
    if p.keys() != q.keys():
        return False
    for k in p:
        a, b = p[k], q[k]
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                    and a.shape == b.shape and np.array_equal(a, b)):
                return False
        elif type(a) is not type(b) or a != b:
            return False
    return True


def _same_value(a, b):
    if type(a) is float and type(b) is float:
        return a == b or (a != a and b != b)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and a.tobytes() == b.tobytes()
    return False


def _differing_constants(t1, t2):
    """Node ids of constants whose values differ between two recordings of
    the same instructions, or None when the recordings are not alike."""
    if len(t1._vals) != len(t2._vals) or len(t1._instrs) != len(t2._instrs):
        return None
    if [t._id for t in t1._inputs] != [t._id for t in t2._inputs]:
        return None
    outs = set()
    for (op1, o1, a1, p1), (op2, o2, a2, p2) in zip(t1._instrs, t2._instrs):
        if op1 is not op2 or o1 != o2 or a1 != a2 or not _same_params(p1, p2):
            return None
        outs.add(o1)
    outs.update(t._id for t in t1._inputs)
    diff = []
    for nid, (a, b) in enumerate(zip(t1._vals, t2._vals)):
        if nid in outs:
            continue
        if type(a) is not type(b) or np.shape(a) != np.shape(b):
            return None
        if not _same_value(a, b):
            diff.append(nid)
    return diff


def _copy(bitgen, state):
    c = type(bitgen)()
    c.state = state
    return c


def plan(tape1, moved1, record):
    """(DrawPlan, the node ids of tape1 to make inputs, in draw order) or
    None.  `moved1` are the streams R1 advanced; `record(watcher)` runs f
    again on a fresh tape under `watcher` and returns that tape (R2)."""
    streams = list(moved1)
    if not streams or not all(isinstance(s, np.random.BitGenerator) for s in streams):
        return None
    after1 = [s.state for s in streams]
    w2 = Watcher()
    try:
        tape2 = record(w2)
        ok = True
    except Exception:           # f failed on a second run: it stays eager
        ok = False
    after2 = [s.state for s in streams]
    for s, st in zip(streams, after1):          # as if R2 never ran
        s.state = st
    if not ok or {id(s) for s in w2.moved} != {id(s) for s in streams}:
        return None
    nodes = _differing_constants(tape1, tape2)
    if not nodes or len(nodes) > _MAX_DRAWS:
        return None
    # Replay the draws on copies, from R2's starting state (R1's end state),
    # matching R2's constants bit for bit; each step takes the draw that
    # comes next from some generator.
    copies = [np.random.Generator(_copy(s, st)) for s, st in zip(streams, after1)]
    order, left = [], list(nodes)
    while left:
        step = None
        for i, gen in enumerate(copies):
            before = gen.bit_generator.state
            for nid in left:
                want = tape2._vals[nid]
                size = None if type(want) is float else want.shape
                for m in _METHODS:
                    got = getattr(gen, m)(size=size)
                    if type(want) is float:
                        got = float(got)
                    if _same_value(got, want):
                        step = (i, m, size, nid)
                        break
                    gen.bit_generator.state = before
                if step:
                    break
            if step:
                break
        if step is None:
            return None
        order.append(step)
        left.remove(step[3])
    if any(_freeze(c.bit_generator.state) != _freeze(st) for c, st in zip(copies, after2)):
        return None
    users = [np.random.Generator(s) for s in streams]
    steps = [(users[i], m, size) for i, m, size, _ in order]
    return DrawPlan(steps, streams), [nid for _, _, _, nid in order]
