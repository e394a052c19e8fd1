"""A compiled program's memory: its private, read-only words, its aligned
arenas, the rt_program struct that points into them, and what a tape reads
its last compiled replay from (_Arena, _FastMarks).

Everything the VM touches is a numpy array or a cffi allocation owned here
(no C code allocates), so dropping the owner frees everything."""

import weakref

import numpy as np

from .afterfork import track_program
from .vm import RT_BUSY, _retry_busy, ffi, lib
from ..errors import ConcurrentUseError


def _frozen(a, dtype):
    """A read-only copy of a whose memory is a bytes object: numpy cannot make
    it writeable again (setflags(write=True) raises), unlike an array that owns
    its memory."""
    return np.frombuffer(np.ascontiguousarray(a, dtype=dtype).tobytes(), dtype=dtype)


def _aligned_zeros(n, align=64):
    """n zeroed float64 values starting on an `align`-byte boundary: the array
    kernels' AVX-512 loops split every load and store over two lines
    otherwise, blocks.py places the tiled blocks' arrays on lines relative to
    the arena's start (rosenbrock-vec's bound replay: ~35 -> ~31 us), and a
    wide program's lanes run in whole vector registers (batch.c)."""
    buf = np.zeros(n + align // 8)
    start = (-buf.ctypes.data % align) // 8
    return buf[start:start + n]


def _scalar_index(p, n_instr):
    """The scalar path's dispatch index of p (vm.h: scalar_index, n_instr + 2
    entries that rt_verify fills from the words it accepts), set on p; the
    caller keeps the returned buffer alive with p."""
    buf = ffi.new("uint32_t[]", n_instr + 2)
    p.scalar_index = buf
    return buf


def program_struct(prog, code, ints, vals, adj):
    """The rt_program of prog over its words, int table and arenas (not yet
    verified), and the cffi objects it points into, to be kept alive with it."""
    p = track_program(ffi.new("rt_program *"))
    keep = [ffi.from_buffer("int32_t[]", code),
            ffi.from_buffer("int32_t[]", ints),
            ffi.from_buffer("double[]", vals),
            ffi.from_buffer("double[]", adj)]
    p.code, p.ints, p.vals, p.adj = keep
    # The scalar path's dispatch index (vm.h), which rt_verify fills.
    keep.append(_scalar_index(p, code.shape[0]))
    p.n_instr = code.shape[0]
    p.n_ints = ints.size
    p.n_vals = prog.n_vals
    p.n_in, p.n_grad, p.n_fixed = prog.n_in, prog.n_grad, prog.n_fixed
    p.out_off, p.out_len = prog.out_off, prog.out_len
    if prog.callbacks:
        p.callback = lib.rt_py_callback
        p.n_callbacks = len(prog.callbacks)
    return p, keep


class _Arena:
    """A compiled program and its arena as a tape sees them: tape._replayed_by
    holds this (not the CompiledTape, which holds the tape), and rt.value
    reads the last replay's inputs and output from it, lazily."""

    __slots__ = ("p", "program", "keep", "mark_id")

    def __init__(self, p, program, keep):
        self.p, self.program, self.keep = p, program, keep
        self.mark_id = 0                   # its number in the tape's _FastMarks

    def read_replay(self):
        """(flat inputs, flat output, program) of the last complete replay, read
        while owning the program so that no concurrent replay is half-read."""
        prog = self.program
        x, y = np.empty(prog.n_in), np.empty(prog.out_len)
        xp, yp = ffi.from_buffer("double[]", x), ffi.from_buffer("double[]", y)
        st = _retry_busy(lambda: lib.rt_read_io(self.p, xp, yp))
        if st == RT_BUSY:
            raise ConcurrentUseError("another thread kept replaying this tape's compiled "
                                     "program; read values after its replays finish")
        return x, y, prog


class _FastMarks:
    """tape._replayed_by once a one-call bind of the tape exists: C writes the
    id of the arena each bound replay ran in into `cell`, the Python replay
    paths write theirs (mark) or 0 (clear: the tape's own reference replay),
    and rt.value reads the arena the cell names.  An arena is held while a
    bound call of it lives or while the cell names it (as _replayed_by held
    the last arena), so `ctape.bind(x, g)()` on a temporary ctape still
    reports its replay."""

    __slots__ = ("cell", "arenas", "binds")

    def __init__(self):
        self.cell = ffi.new("int64_t[1]")
        self.arenas = [None]                 # id -> _Arena (or None once let go)
        self.binds = {}                      # id -> WeakSet of its live bound calls

    def id_of(self, arena):
        i = arena.mark_id
        if not (0 < i < len(self.arenas) and self.arenas[i] is arena):
            cur = self.cell[0]
            for j in range(1, len(self.arenas)):      # let go of arenas nothing can name
                if j != cur and not self.binds.get(j):
                    self.arenas[j] = None
            self.arenas.append(arena)
            i = arena.mark_id = len(self.arenas) - 1
        return i

    def bound(self, arena, call):
        self.binds.setdefault(self.id_of(arena), weakref.WeakSet()).add(call)

    def mark(self, arena):
        self.cell[0] = self.id_of(arena) if isinstance(arena, _Arena) else 0

    def clear(self):
        self.cell[0] = 0

    def read_replay(self):
        """The last compiled replay (as _Arena.read_replay), or None when the
        tape's own values are the last replay; consumed once read."""
        i = self.cell[0]
        arena = self.arenas[i] if 0 < i < len(self.arenas) else None
        if arena is None:
            return None
        got = arena.read_replay()
        if self.cell[0] == i:
            self.cell[0] = 0
        return got


def _checked_marks(tape, arena, state):
    """checked.c's mark() when the tape has _fast_marks (a one-call bind
    exists): mark this replay, keep the arena's id named while the State
    lives, and give C the cell and the id to write from now on."""
    marks = tape._fast_marks
    marks.mark(arena)
    marks.bound(arena, state)
    return ffi.buffer(marks.cell), marks.id_of(arena)
