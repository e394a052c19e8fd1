"""CompiledTape: owns one verified C program and its arenas.

Everything the VM touches is owned here: the instruction words, the int side
table and the two float64 arenas are numpy arrays, and the rt_program struct
that points into them is a cffi-owned allocation freed with this object.  No
C code allocates, so dropping a CompiledTape frees everything.

Copies never share those buffers: ``copy.deepcopy`` deep-copies the tape and
compiles the copy afresh, and a pickle carries the program as plain data,
rebuilt and verified on load.  One CompiledTape serves one thread at a time;
the VM refuses a second concurrent replay of the same program (RT_BUSY) and
this raises ConcurrentUseError instead of racing.
"""

import copy as _copy
import dataclasses
import math
import threading
import time
import types
import weakref

import numpy as np

from ..lower import compiler
from ..core import pytree
from ..errors import (BranchChanged, BuildMismatchError, ConcurrentUseError, InputError,
                      OutputError, RevtapeError, VerificationError)
from ..errors import IndexInputError, PicklingError
from ..trace.hessian import HessianTape, Parts
from ..trace.guards import branch_changed
from ..trace.tape import NULL_TAPE, Tape
from ..trace.values import check_input, check_out, shape_of

try:
    from .._vm import ffi, lib
except ImportError as e:  # pragma: no cover - only without a built extension
    raise ImportError("revtape's C extension is not built; reinstall with "
                      "`pip install -e .` (it needs a C compiler)") from e

from ..lower import wide as _wide
from ..core import isa
from ..core import ops
from ..core import primitives as _prim

_prim._install_callback(ffi)

if ffi.string(lib.rt_op_table_hash()).decode() != ops.OP_TABLE_HASH:  # pragma: no cover
    raise BuildMismatchError("the built C extension comes from another op table; rebuild it "
                             "with `pip install -e .`")

# The VM's statuses as the extension defines them (generated from isa.STATUSES).
(RT_OK, RT_GUARD_FAILED, RT_BUSY, RT_UNVERIFIED, RT_BADARG, RT_NONFINITE, RT_CALLBACK_FAILED,
 RT_BAD_INDEX, RT_OK_HOT) = (getattr(lib, "RT_" + _name) for _name, _ in isa.STATUSES)
_F64 = np.dtype(np.float64)
_ND = np.ndarray
_empty = np.empty
_DOUBLES = ffi.typeof("double[]")
_from_buffer = ffi.from_buffer
_vg = lib.rt_value_and_grad
from functools import partial as _partial



def _link_checked():
    """revtape._checked (csrc/pyext/checked.c): value_and_gradient's checks in
    C, linked to this process's rt_value_and_grad; its value_and_grad, or a
    stand-in that accepts nothing when the module is missing (a build without
    it, a platform without dlopen) or was built from another rt_program."""
    try:
        from .. import _checked, _vm
    except ImportError:                                   # pragma: no cover
        return None, lambda state, x, out: None
    layout = (ffi.sizeof("rt_program"),) + tuple(
        ffi.offsetof("rt_program", f) for f in ("n_in", "n_grad", "out_len", "busy", "native"))
    if _checked.layout() != layout or not _checked.link(_vm.__file__):   # pragma: no cover
        return None, lambda state, x, out: None
    return _checked, _checked.value_and_grad


_checked, _checked_vg = _link_checked()


def _checked_marks(tape, arena, state):
    """checked.c's mark() when the tape has _fast_marks (a one-call bind
    exists): mark this replay, keep the arena's id named while the State
    lives, and give C the cell and the id to write from now on."""
    marks = tape._fast_marks
    marks.mark(arena)
    marks.bound(arena, state)
    return ffi.buffer(marks.cell), marks.id_of(arena)


def _hot_of(ref):
    """checked.c's on_hot: the native build of the CompiledTape behind a weak
    reference (the State, which the tape holds, must not hold the tape)."""
    def on_hot():
        ct = ref()
        if ct is not None:
            from . import native as _native
            _native.hot(ct)
    return on_hot


_ffi_new = ffi.new
_DOUBLE_P = ffi.typeof("double *")


def _new_double(_new=ffi.new, _t=ffi.typeof("double *")):
    return _new(_t)


def _aligned_zeros(n):
    """n zeros starting on a 64-byte line: the array kernels' AVX-512 loops
    split every load and store over two lines otherwise, and blocks.py
    places the tiled blocks' arrays on lines relative to the arena's start
    (rosenbrock-vec's bound replay: ~35 -> ~31 us)."""
    buf = np.zeros(n + 8)
    k = (-(buf.ctypes.data % 64) // 8) % 8
    return buf[k:k + n]


class CompiledTape:
    """A tape lowered to the C VM.  Same replay methods as Tape, run in C."""

    def __new__(cls, tape=None, *args, **kwargs):
        # A HessianTape's program is a CompiledHessian (below) however it is
        # built -- rt.compile, a deep copy, an unpickled copy (the pickle names
        # CompiledTape's _rebuild, so pickles of either kind stay one format)
        if cls is CompiledTape and isinstance(tape, HessianTape):
            cls = CompiledHessian
        return super().__new__(cls)

    def __init__(self, tape, guards=True, n_grad=None, _program=None, _pickled=False,
                 native="auto"):
        if native not in (False, True, "auto"):
            raise InputError(f"native must be False, True or 'auto', not {native!r}")
        if _program is None:
            _check_compilable(tape)
        self._tape = tape
        self._guards = guards
        self._n_grad_inputs = n_grad
        self._parts = getattr(tape, "_parts", None)   # a HessianTape of a tuple input
        self._treedef = getattr(tape, "_treedef", None)   # a pytree input (pytree.py)
        self._hess = None
        self._program = _program or compiler.compile_tape(tape, guards, n_grad)
        self._load(_pickled)
        # The native tier (native.py, README: Native tier): True builds it
        # now; "auto" starts on the VM and switches when the tape is hot.
        self._native = native
        self._native_state = "off"
        self._native_path = None
        self.native_compile_seconds = 0.0
        if native is True:
            from . import native as _native
            _native.attach(self)
        elif native == "auto":
            from . import native as _native
            _native.arm(self)

    # ------------------------------------------------ building
    def _load(self, pickled=False):
        prog = self._program
        if prog.format_version != compiler.FORMAT_VERSION or prog.op_table_hash != ops.OP_TABLE_HASH:
            raise BuildMismatchError(
                f"this program was built for format {prog.format_version} / op table "
                f"{prog.op_table_hash}, but this revtape has format {compiler.FORMAT_VERSION} / "
                f"{ops.OP_TABLE_HASH}; recompile it from its tape")
        _check_program(prog, self._tape, self._n_grad_inputs, pickled)
        self._check_kind(prog)
        # The verifier's word is only as good as the memory it read: the words
        # and the int table live in private bytes objects from here on, so
        # nothing (not even setflags(write=True) on ctape._code) can change
        # what C runs after it was checked.
        self._code = _frozen(prog.code, np.int32).reshape(-1, isa.WORDS)
        self._ints = _frozen(prog.ints, np.int32)
        # A private copy with immutable fields: every buffer handed to C is
        # sized from it, so changing ctape.program afterwards (it returns a
        # copy) cannot make Python pass C a buffer shorter than it writes.
        self._program = prog = dataclasses.replace(
            prog, code=self._code, ints=self._ints, inputs=tuple(prog.inputs),
            guards=tuple(prog.guards), out_shape=tuple(prog.out_shape))
        self._vals = _aligned_zeros(max(prog.n_vals, 1))
        self._vals[prog.n_in:prog.n_fixed] = prog.consts
        self._adj = _aligned_zeros(max(prog.n_vals, 1))
        p = ffi.new("rt_program *")
        keep = [ffi.from_buffer("int32_t[]", self._code),
                ffi.from_buffer("int32_t[]", self._ints),
                ffi.from_buffer("double[]", self._vals),
                ffi.from_buffer("double[]", self._adj)]
        p.code, p.ints, p.vals, p.adj = keep
        # The scalar path's dispatch index (vm.h), which rt_verify fills.
        keep.append(_scalar_index(p, self._code.shape[0]))
        p.n_instr = self._code.shape[0]
        p.n_ints = self._ints.size
        p.n_vals = prog.n_vals
        p.n_in, p.n_grad, p.n_fixed = prog.n_in, prog.n_grad, prog.n_fixed
        p.out_off, p.out_len = prog.out_off, prog.out_len
        # Python callbacks (custom primitives): this object's own table and
        # workspace, so a deep copy or an unpickled copy never calls into
        # another's arenas.  The handle points at the workspace, not at self
        # (no reference cycle).
        self._table = self._ws = self._ws_handle = None
        if prog.callbacks:
            p.callback = lib.rt_py_callback
            p.n_callbacks = len(prog.callbacks)
        self._workspaces = []        # batched replay: per-thread arenas, built on demand
        self._wide = None            # batched replay of scalar code: the wide form (or False)
        self._wide_arenas = []
        self._wide_pws = {}          # per thread count: the C array of the wide arenas' programs
        self._batch_last = (None,) * 4   # the last batch's (X, its pointer, out, its pointer)
        msg = ffi.new("char[]", 512)
        if lib.rt_verify(p, msg, 512) != RT_OK:
            raise VerificationError("the C verifier refused this program (it was not run): "
                                    + ffi.string(msg).decode(errors="replace"))
        if prog.callbacks:           # decoded from the words the verifier accepted
            self._table = _prim.CallbackTable(prog, self._code, self._ints)
            self._ws = _prim.Workspace(self._table, self._vals, self._adj)
            self._ws_handle = ffi.new_handle(self._ws)
            p.callback_ctx = self._ws_handle
        self._p = p
        self._vgf, self._fwf = lib.rt_value_and_grad, lib.rt_forward   # the native tier swaps these
        # What the tape reads its last compiled replay from (tape._replayed_by):
        # the program and its buffers, not this object, which holds the tape --
        # so no reference cycle keeps a dropped tape or CompiledTape alive.
        self._arena = _Arena(p, prog, keep)
        self._keep = keep
        self._batch_lock = threading.Lock()
        self._last_x = self._last_out = (None,)
        self._in_shapes = [shape for _, shape, _ in prog.inputs]
        self._in_float = [isf for _, _, isf in prog.inputs]
        self._single = len(prog.inputs) == 1
        self._x_shape = self._in_shapes[0] if self._single else None
        self._grad_shapes = _grad_shapes(prog, self._n_grad_inputs)
        self._g_len = prog.n_grad
        self._fast_shape = (self._x_shape if self._single and not self._in_float[0]
                            and self._value_and_gradient_is_fast and prog.out_shape == ()
                            and prog.n_grad == prog.n_in and self._treedef is None else None)
        # the strides of a C-contiguous array of that shape: what the pointer
        # caches compare against (strides can be changed in place)
        self._c_strides = (np.empty(self._fast_shape or 0, dtype=np.float64).strides
                           if self._fast_shape is not None else None)
        # value_and_gradient's checks and replay in one C call (revtape._checked)
        self._ck = None
        if _checked is not None and self._fast_shape is not None and len(self._fast_shape) <= 8:
            self._ck = _checked.State(ffi.buffer(p), self._arena, self._tape, _ND, _F64, _empty,
                                      tuple(self._fast_shape), _checked_marks,
                                      _hot_of(weakref.ref(self)))

    # the value and gradient are the program's output and input adjoints (a
    # HessianTape's program computes a gradient: its value sits elsewhere)
    _value_and_gradient_is_fast = True

    def _check_kind(self, prog):
        """What this kind of program needs beyond _check_program (CompiledHessian)."""

    # ------------------------------------------------ inspection
    @property
    def code(self):
        """A read-only view of this tape's own instruction words (n_instr x 6, int32)."""
        v = self._code.view()
        v.setflags(write=False)
        return v

    @property
    def tape(self):
        return self._tape

    @property
    def program(self):
        """The program as plain data (a copy: changing it changes nothing here)."""
        return _copy.copy(self._program)

    def __len__(self):
        return self._code.shape[0]

    def stats(self):
        """Counts of this program: tape instructions, instructions kept, program
        instructions, and how many of them call back into Python (primitives)."""
        out = dict(self._program.stats)
        out.setdefault("callback_instructions", len(self._program.callbacks))
        out["arena_values"] = self._program.n_vals
        return out

    def disassemble(self):
        """The program as text, one instruction a line: @out[n] = OP(@a, @b, @c)."""
        prog = self._program
        lines = [f"; {len(self)} instructions, arena {prog.n_vals} values "
                 f"(inputs [0,{prog.n_in}), constants [{prog.n_in},{prog.n_fixed})), "
                 f"output @{prog.out_off}[{prog.out_len}]"]
        for k, (op, n, out, a, b, c) in enumerate(self._code.tolist()):
            ins = isa.instr(op & isa.OPCODE_MASK)
            name = ins.name
            flags = op >> isa.FLAGS_SHIFT
            if ins.fmt == "guard":
                params = prog.guards[out][0]
                lines.append(f"{k:5d}  {name} @{a}, @{b} expect {bool(n)}   ; "
                             f"{params['where'][0]}:{params['where'][1]}")
                continue
            if ins.fmt == "block":          # tiled elementwise run (csrc/instr/block.h)
                lines.append(f"{k:5d}  {name} {out} instructions x {n} elements, tile {a}"
                             + (f", scratch @{b} mask {c:b}" if c else ""))
                continue
            operands = self._operands(ins, n, a, b, c)
            adj = f"  adj {flags:03b}" if flags else ""
            width = 1 if ins.out == "1" else n   # CSUM's n counts terms, SSD's elements
            lines.append(f"{k:5d}  @{out}[{width}] = {name}({operands}){adj}")
        return "\n".join(lines)

    def _operands(self, ins, n, a, b, c):
        """One instruction's operands in the disassembly, by its isa format."""
        prog = self._program
        if ins.fmt == "csum":
            return f"@{a}" + "".join(f" - @{~e}" if e < 0 else f" + @{e}"
                                     for e in self._ints[c:c + n].tolist())
        if ins.fmt == "linalg":
            nn, mm, bits, scratch = self._ints[c:c + 4].tolist()
            return (f"@{a}" + (f", @{b}" if ins.name in ("TRISOLVE", "SOLVE") else "")
                    + f"  N={nn} M={mm}" + (f" flags={bits:03b}" if bits else "")
                    + f" scratch @{scratch}")
        if ins.fmt == "pycall":
            site = prog.callbacks[a]
            args = self._ints[c:c + 3 * b].reshape(-1, 3).tolist() if b else []
            return (f"{site.prim._name}: " + ", ".join(f"@{off}[{size}]" for off, size, _ in args)
                    + "  ; calls back into Python")
        if ins.fmt:
            head = self._ints[c:c + 3].tolist() if ins.c == "ints" else []
            return ins.fmt.format(n=n, a=a, b=b, c=c, c2=c + 2, ints3=head,
                                  ints0=head[0] if head else None)
        return ", ".join(f"@{v}" for v in (a, b, c)[:ins.arity])

    def __repr__(self):
        return (f"<CompiledTape {len(self)} instructions, {self._program.n_vals} arena values, "
                f"guards {'on' if self._guards else 'off'}>")

    # ------------------------------------------------ input plumbing
    def _x_ptr(self, x):
        """A C pointer to x's values, laid end to end (a copy unless x is already a
        C-contiguous, aligned float64 array of the recorded shape)."""
        if self._treedef is not None:
            x = self._tree_leaves(x)
        if self._single:
            if (type(x) is not np.ndarray or x.dtype != _F64 or x.shape != self._x_shape
                    or not x.flags.c_contiguous or not x.flags.aligned):
                # np.frombuffer(..., offset=1) gives a misaligned float64 array: C
                # must never see a misaligned double*, so it is copied like any
                # other conversion
                x = check_input(x, self._x_shape)
                if self._in_float[0]:
                    x = np.array([x])
                else:
                    x = np.ascontiguousarray(x)
            return ffi.from_buffer("double[]", x)
        if not isinstance(x, (tuple, list)) or len(x) != len(self._in_shapes):
            raise InputError(f"this tape has {len(self._in_shapes)} inputs: pass a tuple of "
                             f"{len(self._in_shapes)} values")
        parts = [check_input(xi, s, isf) for xi, s, isf in zip(x, self._in_shapes, self._in_float)]
        # one new buffer, copied in by C under the busy flag: the arena is never
        # written from Python, so a concurrent caller cannot corrupt a replay
        return ffi.from_buffer("double[]", np.concatenate([np.ravel(v) for v in parts]
                                                          + [np.empty(0)]))

    def _tree_leaves(self, tree, what="input"):
        """A pytree input (or out=) as the leaf, or the tuple of leaves, it stands for."""
        leaves = pytree.leaves_of(self._treedef, tree, what)
        return leaves[0] if len(leaves) == 1 else tuple(leaves)

    def _layout(self):
        """The input's flat layout (hessian.Parts): flatten()/unflatten() go through it."""
        if self._parts is not None:
            return self._parts
        layout = self.__dict__.get("_flat_layout")
        if layout is None:
            layout = Parts([np.empty(s) if not f else 0.0
                            for s, f in zip(self._in_shapes, self._in_float)], self._treedef)
            layout.legacy_single = self._single and self._treedef is None
            self._flat_layout = layout
        return layout

    def flatten(self, x):
        """x (a float, an array, a tuple or a pytree shaped like the recording
        input) as one flat float64 vector: the layout bind() and the C program use."""
        layout = self._layout()
        if getattr(layout, "legacy_single", False):
            x = (x,)
        return layout.flatten(x)

    def unflatten(self, vec):
        """A flat vector (an input, or a gradient of a tape whose inputs are all
        differentiated) in the recording input's structure."""
        layout = self._layout()
        vec = np.asarray(vec, dtype=np.float64)
        if vec.shape != (layout.bounds[-1],):
            raise InputError(f"unflatten() takes a flat vector of length {layout.bounds[-1]}, "
                             f"got shape {vec.shape}")
        res = layout.split_result(vec, None)
        return res[0] if getattr(layout, "legacy_single", False) else res

    def _mark_replayed(self):
        tape = self._tape
        if tape is not None:
            if tape._fast_marks is None:
                tape._replayed_by = self._arena
            else:
                tape._fast_marks.mark(self._arena)

    def _status(self, status, xp=None, report=None):
        """Raise the error for a VM status.  Everything reported is read while a
        call owns the program: the arena itself may already hold another
        thread's replay."""
        if status == RT_OK:
            return
        if status == RT_OK_HOT:          # a successful call: start the native build
            from . import native as _native
            _native.hot(self)
            return
        if status == RT_GUARD_FAILED:
            raise self._branch_changed(xp, report)
        if status == RT_BUSY:
            raise ConcurrentUseError(
                "this CompiledTape is being replayed by another thread; give each thread its "
                "own copy (copy.deepcopy(ctape)) -- one CompiledTape serves one thread at a time")
        if status == RT_CALLBACK_FAILED:
            err = self._ws.take_error() if self._ws is not None else None
            raise err or RevtapeError("a Python callback failed")
        if status == RT_BADARG:
            raise OutputError("a gradient needs a scalar output; use jacobian()")
        if status == RT_BAD_INDEX:
            raise IndexInputError(
                "a gather index read from a tape input is not a whole number inside the "
                "indexed array (the replay stopped before reading outside it); write indices "
                "in range, as numpy's own indexing of the array produces them")
        raise RevtapeError(f"the VM refused the call (status {status})")

    def _branch_changed(self, xp, report):
        """The BranchChanged of a refused replay at xp.  Its guard number and
        operands come from rt_forward_report, which writes them into this
        call's own rt_report while it owns the program; a call that used
        another entry point replays the forward sweep at the same x once more
        to get them (it fails at the same guard)."""
        if report is None:
            if xp is None:
                # callers that replayed from the arena (x written there first) may
                # pass no pointer: NULL tells the VM to read the inputs in place
                xp = ffi.NULL
            report = ffi.new("rt_report *")
            st = _retry_busy(lambda: lib.rt_forward_report(self._p, xp, ffi.NULL, -1, report))
            if st != RT_GUARD_FAILED:
                return BranchChanged(
                    "the replay took another branch than the recording (a guard failed), "
                    "and the input changed before the guard could be reported; record a new "
                    "tape at this input or use rt.grad(f), which re-records")
        params = self._program.guards[report.guard][0]
        return branch_changed(params, float(report.operands[0]), float(report.operands[1]))

    def _grad_out(self, out):
        """A C-contiguous, aligned float64 buffer for the gradient (out itself
        when it is one, else a new array copied into out afterwards) and the
        user's out."""
        if out is None:
            return np.empty(self._g_len), None
        if self._treedef is not None:
            self._tree_leaves(out, "out=")       # checked here, written by _split_grad
            return np.empty(self._g_len), out
        if self._single and type(out) is np.ndarray:
            check_out(out, [np.empty(self._grad_shapes[0])])
            if out.flags.c_contiguous and out.flags.aligned:
                return out, out
            return np.empty(self._g_len), out
        check_out(out, [np.empty(s) for s in self._grad_shapes])
        return np.empty(self._g_len), out

    def _split_grad(self, flat, user_out):
        if user_out is not None and flat is user_out:
            return user_out
        if self._treedef is not None:
            return self._tree_split(flat, user_out)
        parts, k = [], 0
        for shape in self._grad_shapes:
            size = int(np.prod(shape, dtype=np.int64))
            parts.append(flat[k:k + size].reshape(shape))
            k += size
        if user_out is not None:
            outs = (user_out,) if len(parts) == 1 else user_out
            for o, p in zip(outs, parts):
                o[...] = p
            return user_out
        res = [float(p) if s == () and isf else p for p, s, isf in
               zip(parts, self._grad_shapes, self._in_float)]
        return res[0] if len(res) == 1 else tuple(res)

    def _tree_split(self, flat, user_out):
        layout = self._layout()
        if user_out is None:
            return layout.split_result(flat, None)
        leaves = pytree.leaves_of(self._treedef, user_out, "out=")
        check_out(leaves[0] if len(leaves) == 1 else tuple(leaves),
                  [np.empty(s) for s in layout.shapes])
        for o, p_ in zip(leaves, layout.split(flat)):
            o[...] = p_
        return user_out

    # ------------------------------------------------ replay
    def forward(self, x):
        """Replay the forward pass at x; returns the output."""
        prog = self._program
        y = np.empty(prog.out_len)
        xp = self._x_ptr(x)
        self._status(self._fwf(self._p, xp, ffi.from_buffer("double[]", y)), xp)
        self._mark_replayed()
        return float(y[0]) if prog.out_shape == () else y.reshape(prog.out_shape)

    __call__ = forward

    def value_and_gradient(self, x, out=None):
        """(value, gradient) at x; with out= the gradient is written there (no allocation)."""
        # The plain case -- x a float64 array of the recorded shape, C order,
        # aligned; out the same (writeable, apart from x) or None -- is checked
        # and replayed in one C call (csrc/pyext/checked.c), which reads both
        # buffers afresh every time.  It answers None for anything else: the
        # Python paths below convert, copy or raise.
        # (With revtape._checked, ctape.value_and_gradient is its builtin
        # method doing this same call without a Python frame: see the end of
        # this class.)
        return self._value_and_gradient_answer(x, out, _checked_vg(self._ck, x, out))

    def _value_and_gradient_answer(self, x, out, r):
        """value_and_gradient after revtape._checked answered r: r itself for a
        replay done, the error of a failed replay's status, or the Python path."""
        if r.__class__ is tuple:
            return r
        if r is not None:                    # the VM's status of a failed replay
            self._status(r, self._x_ptr(x))
        return self._value_and_gradient_py(x, out)

    def _value_and_gradient_py(self, x, out):
        # Without revtape._checked (and for an out overlapping x): one float64
        # array in, out= of the same shape.  Every check is an identity or
        # tuple comparison, and the C pointers of the last x and the last out
        # are reused while the caller passes the same arrays (the pointer
        # caches below).
        shape = self._fast_shape
        if shape is not None and type(x) is _ND and x.dtype is _F64 and x.shape == shape:
            # a cached pointer is reused only while its array keeps C strides;
            # a new pointer comes from from_buffer, which refuses anything
            # non-contiguous (then the checked path below copies)
            cs = self._c_strides
            if out is None:
                # a new array is aligned and writeable: no checks, no call
                g = _empty(shape)
                dest = (g, _from_buffer(_DOUBLES, g), _ffi_new(_DOUBLE_P))
            elif (type(out) is _ND and out.dtype is _F64 and out.shape == shape
                    and out.flags.writeable):
                dest = self._last_out
                if dest[0] is not out or out.strides != cs:
                    dest = self._new_out(out)
                    if dest is not None:
                        self._last_out = dest
            else:
                return self._value_and_gradient(x, out)
            last_x = self._last_x
            if last_x[0] is x and x.strides == cs:
                xp = last_x[1]
            else:
                xp = self._pointer_to_x(x)
            if xp is not None and dest is not None:
                st = self._vgf(self._p, xp, dest[2], dest[1])
                if st:
                    self._status(st, xp)
                self._mark_replayed()
                return dest[2][0], dest[0]
        return self._value_and_gradient(x, out)

    # The pointer caches.  A from_buffer cdata holds a buffer export of (and a
    # reference to) its array, so the memory it points to lives as long as the
    # cache entry, and numpy's resize() refuses an array anything else
    # references.  What can change in place is checked on every call above:
    # dtype, shape, strides (assigning x.strides or x.shape keeps the data
    # pointer but changes which elements the array means) and writeability.
    # Alignment cannot change in place and is checked when a pointer is made.
    # The data pointer itself changes in place only through
    # resize(refcheck=False) and ndarray.__setstate__, which leave every view
    # and buffer export of the array dangling (numpy's own views crash too);
    # revtape's cache is such an export.  Each cache is one tuple, replaced
    # whole: a thread never pairs one array with another array's pointer.  The
    # value cell belongs to out: two threads passing the same out already
    # share their results through it, and threads with their own out never do.
    def _pointer_to_x(self, x):
        if not x.flags.aligned:
            return None                          # the checked path copies it
        try:
            xp = _from_buffer(_DOUBLES, x)       # refuses a non-contiguous array
        except (ValueError, TypeError, BufferError):
            return None
        self._last_x = (x, xp)
        return xp

    @staticmethod
    def _new_out(out):
        """(out, its C pointer, a value cell), or None for an out C cannot write directly."""
        if not out.flags.aligned:
            return None
        try:
            return out, _from_buffer(_DOUBLES, out, require_writable=True), _new_double()
        except (ValueError, TypeError, BufferError):
            return None

    def _value_and_gradient(self, x, out):
        """Every other case: tuples, floats, conversions, errors."""
        g, user = self._grad_out(out)
        value = ffi.new("double *")      # per call: another thread's result never lands here
        xp = self._x_ptr(x)
        st = self._vgf(self._p, xp, value, ffi.from_buffer("double[]", g))
        if st:
            self._status(st, xp)
        self._mark_replayed()
        return value[0], self._split_grad(g, user)

    def gradient(self, x, out=None):
        return self.value_and_gradient(x, out)[1]

    def _value_gradient_extras(self, x):
        """(value, gradient, [extra output values]) of one replay: the values of
        tape._extra_ids (rt.grad's has_aux) read from the arena right after the
        sweep.  Two such calls exclude each other (ConcurrentUseError); a replay
        by another method of this same object from another thread between the
        sweep and the read is not excluded -- one CompiledTape serves one
        thread at a time, and rt.grad and the cached transforms give each
        thread its own."""
        lock = self.__dict__.get("_extras_lock")
        if lock is None:
            lock = self.__dict__.setdefault("_extras_lock", threading.Lock())
        if not lock.acquire(blocking=False):
            self._status(RT_BUSY)
        try:
            value, g = self.value_and_gradient(x)
            extras = self._extras()
        finally:
            lock.release()
        return value, g, extras

    def _extras(self):
        """The extra outputs' values left in the arena by the last replay (copies)."""
        vals = self._vals
        return [float(vals[off]) if shape == () else
                vals[off:off + int(np.prod(shape, dtype=np.int64))].reshape(shape).copy()
                for off, shape in self._program.extras]

    # ------------------------------------------------ batched replay
    def batch_value_and_gradient(self, X, out=None, threads=None):
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
                and (xs[0] >= _WIDE_MIN_ROWS and self._wide or self._use_wide(xs[0]))):
            # the common case (one array of points, scalar code) without the
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
                if n == 1:                  # no lists, no closure: ~2 us less a call
                    st = self._wide_run1(k, last[1], _from_buffer(_DOUBLES, values), last[3],
                                         ffi.NULL)
                else:
                    st = self._wide_par(n, 1, k, last[1], _from_buffer(_DOUBLES, values), last[3])
            finally:
                self._batch_lock.release()
            if st != RT_OK:
                self._status(st)
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

    def batch_forward(self, X, threads=None):
        """The output at every row of X (shape ``(k,) + input shape``):
        ``values[k]`` for a scalar output, ``(k,) + output shape`` otherwise."""
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

    def bind(self, x_buf, g_buf):
        """A no-argument callable for sampler loops: replays at whatever x_buf holds,
        writes the gradient into g_buf and returns the value.  Both buffers are
        checked once, here: run() does not look at them again, so they must
        stay as they were bound (shape, strides, writeability)."""
        if self._program.out_shape != ():
            raise OutputError(_BIND_NEEDS)
        # One array input binds buffers of its shape; any input (floats, tuples,
        # pytrees) binds flat vectors in the layout of ctape.flatten(x): the C
        # program reads its inputs from one contiguous run either way.
        prog = self._program
        flat_x, flat_g = (prog.n_in,), (prog.n_grad,)
        shaped = self._single and not self._in_float[0] and self._treedef is None
        for name, buf, flat in (("x_buf", x_buf, flat_x), ("g_buf", g_buf, flat_g)):
            if (type(buf) is not np.ndarray or buf.dtype != _F64
                    or (buf.shape != flat and not (shaped and buf.shape == self._x_shape))
                    or not buf.flags.c_contiguous):
                want = f"{self._x_shape} or {flat}" if shaped and self._x_shape != flat else flat
                raise InputError(f"{name} must be a C-contiguous float64 array of shape {want}"
                                 + ("" if shaped else " (the flat layout of ctape.flatten(x))"))
            if not buf.flags.aligned:
                raise InputError(f"{name} is not aligned for float64 (e.g. np.frombuffer at an "
                                 "offset that is not a multiple of 8): bind a copy, "
                                 "np.array(buf)")
        if not g_buf.flags.writeable:
            raise InputError("g_buf must be writeable")
        if np.shares_memory(x_buf, g_buf):
            raise InputError("x_buf and g_buf must not overlap")
        p, vg, status, tape, arena = self._p, self._vgf, self._status, self._tape, \
            self._arena
        if _BoundCall is not None:
            return self._bind_c(x_buf, g_buf)
        xp, gp = ffi.from_buffer("double[]", x_buf), ffi.from_buffer("double[]", g_buf)
        if self._one_call_ok():
            return self._bind_one_call(xp, gp)
        value = ffi.new("double *")
        # Arguments bound once; a partial of the native tier's partial is
        # flattened into one C-level call.
        vg = _partial(vg, p, xp, value, gp)

        def run(_pin):
            st = vg()
            if st:
                status(st, xp)
            if tape is not None:
                if tape._fast_marks is None:
                    tape._replayed_by = arena
                else:
                    tape._fast_marks.mark(arena)
            return value[0]

        run.ctape = self          # keeps the program (and the buffers, via xp/gp) alive
        # A bound method (a C-level call, as cheap as the plain function) whose
        # __self__ refuses to pickle with advice: the callable holds raw pointers
        # into this process's buffers.
        return types.MethodType(run, _BoundPin())

    def _one_call_ok(self):
        """Whether bind() may be one C call (rt_bound_value_and_grad): its
        value_and_grad can end only RT_OK, RT_OK_HOT or RT_BUSY, the statuses
        the C side handles without raising -- no guard (BranchChanged), no
        PYCALL (a callback's error), no checked kernel (IndexInputError)."""
        if self._p.guarded or self._ws is not None:
            return False
        kinds = {isa.instr(int(op) & isa.OPCODE_MASK).kernel
                 for op in np.unique(self._code[:, 0]).tolist()}
        return not kinds & {"checked", "callback"}

    def _fast_marks(self):
        """The tape's _FastMarks cell, made on first use: a bound call written
        in C marks each replay there, for rt.value(tape.output) to pull."""
        tape = self._tape
        marks = tape._fast_marks
        if marks is None:
            marks = tape._fast_marks = _FastMarks()
            if tape._replayed_by is not None:      # a compiled replay not yet pulled
                marks.mark(tape._replayed_by)
            tape._replayed_by = marks
        return marks

    def _bind_one_call(self, xp, gp):
        """bind() as a partial of one cffi call: no Python frame per call.
        The value comes back as the C function's return; a concurrent replay
        is waited for (README: Native tier); rt.value(tape.output) learns of
        each replay through the tape's _FastMarks cell, which C writes."""
        b = ffi.new("rt_bound *")
        b.p, b.x, b.g = self._p, xp, gp
        keep = [self, xp, gp]
        if self._p.hot_max_calls > 0:           # native="auto" is counting: hot() at the crossing
            h = ffi.new_handle(self)
            b.on_hot, b.hot_ctx = lib.rt_py_hot, h
            keep.append(h)
        tape = self._tape
        if tape is not None:
            marks = self._fast_marks()
            b.mark, b.mark_id = marks.cell, marks.id_of(self._arena)
            keep.append(marks)
        call = _OneCall(lib.rt_bound_value_and_grad, b, keep)
        if tape is not None:
            marks.bound(self._arena, call)
        return call

    def _bind_c(self, x_buf, g_buf):
        """bind() as checked.c's Bound (a _BoundCall): the call is C -- no Python
        frame, no cffi conversion -- with the semantics of the two Python-side
        binds below: RT_BUSY waited for where _bind_one_call waits (programs
        whose replay cannot run Python) and raised as ConcurrentUseError
        otherwise, RT_OK_HOT starting the native build, every other status
        raising through _status, each replay marked in the tape's _FastMarks."""
        cell, mark_id = None, 0
        tape = self._tape
        if tape is not None:
            marks = self._fast_marks()
            cell, mark_id = ffi.buffer(marks.cell), marks.id_of(self._arena)
        status = self._status

        def fail(st):
            # a guard's report replays at the bound x (the Bound's export holds it)
            status(st, ffi.from_buffer("double[]", x_buf))

        call = _BoundCall(ffi.buffer(self._p), self, x_buf, g_buf, cell, mark_id,
                          _partial(_bind_hot, self), fail, self._one_call_ok())
        if tape is not None:
            marks.bound(self._arena, call)
        return call

    def jacobian(self, x, out=None):
        """d output / d input at x (output.shape + input.shape): one reverse sweep per
        output element, all in C."""
        return self._jacobian(x, out, self._program.out_shape)

    def _jacobian(self, x, out, yshape, sweeps=lib.rt_jacobian):
        """J at x shaped yshape + input shapes, by one reverse sweep per row
        (rt_jacobian) or one tangent sweep per column (rt_jacobian_fwd)."""
        prog = self._program
        m, n = prog.out_len, prog.n_grad
        J = np.empty((m, n))
        xp = self._x_ptr(x)
        if sweeps is lib.rt_jacobian_fwd and not self.__dict__.get("_tangent_used"):
            self._note_tangent()
        self._status(sweeps(self._p, xp, ffi.NULL, ffi.from_buffer("double[]", J)), xp)
        self._mark_replayed()
        parts, k = [], 0
        for shape in self._grad_shapes:
            size = int(np.prod(shape, dtype=np.int64))
            parts.append(J[:, k:k + size].reshape(tuple(yshape) + tuple(shape)))
            k += size
        user_out = out
        if out is not None and self._treedef is not None:
            out = self._tree_leaves(out, "out=")
        if out is not None:
            outs = check_out(out, parts)
            for o, p_ in zip(outs, parts):
                o[...] = p_
            return user_out
        parts = [np.ascontiguousarray(p_) for p_ in parts]
        if self._treedef is not None:
            return pytree.unflatten(self._treedef, parts)
        return parts[0] if len(parts) == 1 else tuple(parts)

    def vjp(self, x, w):
        """w^T J at x: one reverse sweep seeded with w."""
        prog = self._program
        wv = np.ascontiguousarray(check_input(w, prog.out_shape), dtype=np.float64).reshape(-1)
        g = np.empty(self._g_len)
        xp = self._x_ptr(x)
        self._status(lib.rt_vjp(self._p, xp, ffi.from_buffer("double[]", wv),
                                ffi.NULL, ffi.from_buffer("double[]", g)), xp)
        self._mark_replayed()
        return self._split_grad(g, None)

    def jvp(self, x, v):
        """J v at x (shaped like the output): one forward and one tangent sweep
        (forward mode) in C.  v is shaped like the differentiated input(s)."""
        ydot = self._jvp_flat(x, v)
        shape = self._program.out_shape
        return float(ydot[0]) if shape == () else ydot.reshape(shape)

    def _jvp_flat(self, x, v):
        vflat = self._tangent_vector(v)
        ydot = np.empty(self._program.out_len)
        xp = self._x_ptr(x)
        if not self.__dict__.get("_tangent_used"):
            self._note_tangent()
        self._status(lib.rt_jvp(self._p, xp, ffi.from_buffer("double[]", vflat),
                                ffi.NULL, ffi.from_buffer("double[]", ydot)), xp)
        self._mark_replayed()
        return ydot

    def _note_tangent(self):
        """The first tangent sweep asked of this tape: native="auto" builds
        native code with a tangent sweep from now on (native.add_tangent)."""
        self._tangent_used = True
        if self._native_state == "native":
            from . import native as _native
            _native.add_tangent(self)

    def _tangent_vector(self, v):
        """v, shaped like the differentiated input(s), as one flat float64 vector."""
        # nan/inf tangents are values, as nan/inf inputs are
        if self._treedef is not None:
            v = self._tree_leaves(v, "tangent v")
        if len(self._grad_shapes) == 1 and self._single:
            vflat = v
            if not (type(v) is _ND and v.dtype is _F64 and v.shape == self._grad_shapes[0]
                    and v.flags.c_contiguous and v.flags.aligned):
                vflat = np.ravel(check_input(v, self._grad_shapes[0], self._in_float[0]))
        else:
            if not isinstance(v, (tuple, list)) or len(v) != len(self._grad_shapes):
                raise InputError(f"pass v as a tuple of {len(self._grad_shapes)} tangents, one "
                                 "per differentiated input")
            vflat = np.concatenate([np.ravel(check_input(vi, s, isf)) for vi, s, isf in
                                    zip(v, self._grad_shapes, self._in_float)] + [np.empty(0)])
        return vflat

    # Forward-over-reverse: the program of a HessianTape computes f's gradient
    # (the reverse pass, recorded), and tangent sweeps over it differentiate
    # that gradient in C.
    def hessian(self, x, out=None):
        """The Hessian at x (input.shape * 2): one tangent sweep of the gradient
        program per input element, in C."""
        h = self._hessian_program()
        # H is symmetric: reverse sweeps of the gradient program (one per row)
        # give it too, for primitives that have a VJP but no JVP
        sweeps = lib.rt_jacobian_fwd if h._tangents_defined() else lib.rt_jacobian
        if h._parts is not None:
            flat = h._parts.flatten(x)
            return h._parts.blocks(h._jacobian(flat, None, flat.shape, sweeps), out)
        return h._jacobian(x, out, h._grad_shapes[0], sweeps)

    def hvp(self, x, v):
        """H(x) v: one forward and one tangent sweep of the gradient program."""
        h = self._hessian_program()
        flat = h._jvp_flat if h._tangents_defined() else h._vjp_flat
        if h._parts is not None:
            hv = flat(h._parts.flatten(x), h._parts.flatten(v))
            return h._parts.split_result(hv, None)
        hv = flat(x, v)
        shape = h._grad_shapes[0]
        return float(hv[0]) if h._in_float[0] else hv.reshape(shape)

    def _tangents_defined(self):
        """Whether every Python callback on a tangent's path has a JVP rule."""
        table = self._table
        return table is None or all(
            site.has_jvp([need for _, _, need in operands])
            for site, _, _, _, operands in table.by_pc.values())

    def _vjp_flat(self, x, w):
        """v^T J at x with v shaped like the differentiated input (J square)."""
        wv = self._tangent_vector(w)
        g = np.empty(self._g_len)
        xp = self._x_ptr(x)
        self._status(lib.rt_vjp(self._p, xp, ffi.from_buffer("double[]", wv),
                                ffi.NULL, ffi.from_buffer("double[]", g)), xp)
        self._mark_replayed()
        return g

    def _hessian_program(self):
        """The compiled HessianTape of this gradient tape, built on first use."""
        if self._program.out_shape != () or self._tape is None:
            raise OutputError("hessian() and hvp() need a scalar output: use a GradientTape "
                              "or rt.HessianTape(f, x)")
        if self._hess is None:
            # native=True here builds the Hessian program's native code too
            self._hess = CompiledHessian(HessianTape._from_tape(self._tape), guards=self._guards,
                                         native=self._native)
        return self._hess

    # ------------------------------------------------ native tier
    @property
    def native_state(self):
        """Which code replays value_and_gradient, gradient and forward: "off" (the
        VM: native=False, REVTAPE_NATIVE=0, or a program the native tier does not
        take), "vm" (native="auto", not hot yet), "compiling" (hot: building in
        the background), "native", or "failed" (the build failed: the VM serves,
        with one NativeWarning)."""
        return self._native_state

    def wait_native(self, timeout=None):
        """Wait until a native="auto" build started by this tape's hotness has
        finished (or timeout seconds); True when native code is serving."""
        ev = self.__dict__.get("_native_event")
        if ev is not None and self._native_state == "compiling":
            ev.wait(timeout)
        return self._native_state == "native"

    # ------------------------------------------------ copy and pickle
    def __copy__(self):
        return self.__deepcopy__({})

    def __deepcopy__(self, memo):
        # Recompile from a deep copy of the tape: new words, new arenas, nothing
        # pointing at this object's buffers.
        tape = _copy.deepcopy(self._tape, memo)
        new = CompiledTape(tape, guards=self._guards, n_grad=self._n_grad_inputs,
                           native=self._native)
        memo[id(self)] = new
        return new

    def __reduce__(self):
        # A native mode other than the default ("auto") is a fifth argument;
        # the receiving process finds or builds the native code itself.
        return (_rebuild, (self._program.to_state(), self._tape, self._guards,
                           self._n_grad_inputs)
                + ((self._native,) if self._native != "auto" else ()))


if _checked is not None:
    # ctape.value_and_gradient becomes a builtin method bound to ctape
    # (checked.c's Method): the plain call runs no Python frame (~0.1 us of a
    # 0.5 us replay).  Class access still gives the Python function above.
    CompiledTape.value_and_gradient = _checked.install(
        CompiledTape.__dict__["value_and_gradient"], CompiledTape._value_and_gradient_answer)


class _OneCall(_partial):
    """ctape.bind(x_buf, g_buf) as one C call (a functools.partial of
    rt_bound_value_and_grad, called without a Python frame) where
    revtape._checked is missing (_BoundCall serves otherwise).  Holds the
    compiled tape, the buffers' pointers and the rt_bound struct alive;
    refuses to pickle, as every bound callable does."""

    def __new__(cls, fn, b, keep):
        self = super().__new__(cls, fn, b)
        self.ctape, self._keep = keep[0], keep
        return self

    def __reduce__(self):
        _BoundPin().__reduce__()

    def __deepcopy__(self, memo):
        return self


def _bind_hot(ct):
    """A C bound call's replay crossed native="auto"'s budget: queue the native
    build (as rt_py_hot: the VM keeps serving whatever happens)."""
    try:
        from . import native as _native
        _native.hot(ct)
    except Exception:            # noqa: BLE001 - the replay succeeded; it is returned
        pass


if _checked is not None:
    class _BoundCall(_checked.Bound):
        """ctape.bind(x_buf, g_buf) as checked.c's Bound: a call with no Python
        frame.  Refuses to pickle, as every bound callable does; deepcopy gives
        itself (it holds the buffers, which a copy could not share safely)."""

        __slots__ = ()

        def __reduce__(self):
            _BoundPin().__reduce__()

        def __deepcopy__(self, memo):
            return self
else:                                                     # pragma: no cover
    _BoundCall = None


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


@ffi.def_extern()
def rt_py_hot(ctx):
    """A one-call bind crossed native="auto"'s budget: queue the native build."""
    try:
        from . import native as _native
        _native.hot(ffi.from_handle(ctx))
    except BaseException:        # noqa: BLE001 - C called us; the VM keeps serving
        pass


_BIND_NEEDS = "bind() needs a gradient tape (scalar output)"
_NO_BATCH = ("batched replay of a HessianTape is not supported; batch the compiled "
             "GradientTape of the same function instead")


class CompiledHessian(CompiledTape):
    """A HessianTape's program: it computes f's gradient (the reverse pass,
    recorded) as its output, with f's value beside it in the arena.  Its
    value_and_gradient/forward give f's value and gradient; hessian() and hvp()
    run tangent (or reverse) sweeps over the gradient.  rt.compile(htape) and
    CompiledTape(htape) build one; it is a CompiledTape in every other way."""

    _value_and_gradient_is_fast = False
    _tangent_program = True      # hessian()/hvp() are tangent sweeps: native="auto" builds them

    def _check_kind(self, prog):
        if not 0 <= prog.value_off < prog.n_vals:
            _refuse("a HessianTape program without the offset of f's value")
        parts = getattr(self._tape, "_parts", None)
        if parts is not None:
            try:
                total = sum(math.prod(s) for s in parts.shapes)
            except Exception:                                       # noqa: BLE001
                _refuse("its tape's input parts are malformed")
            if total != prog.n_in:
                _refuse("its tape's input parts do not add up to the program's input")

    def forward(self, x):
        """f's value at x."""
        return self._value_and_gradient(x, None)[0]

    __call__ = forward

    def _value_and_gradient(self, x, out):
        parts = self._parts
        if parts is not None:
            value, g = self._flat_value_and_gradient(parts.flatten(x))
            return value, parts.split_result(g, out)
        if out is not None:
            check_out(out, [np.empty(self._grad_shapes[0])])
        value, g = self._flat_value_and_gradient(x)
        if out is not None:
            out[...] = g
            g = out
        return value, g

    def _flat_value_and_gradient(self, x):
        # f's value sits beside the output (the gradient) in the arena: the VM
        # copies both out while this call owns the program, so a concurrent
        # caller gets ConcurrentUseError, never another thread's numbers.
        prog = self._program
        y = np.empty(prog.out_len)
        report = ffi.new("rt_report *")
        xp = self._x_ptr(x)
        st = lib.rt_forward_report(self._p, xp, ffi.from_buffer("double[]", y), prog.value_off,
                                   report)
        if st:
            self._status(st, xp, report)
        self._mark_replayed()
        g = float(y[0]) if prog.out_shape == () else y.reshape(prog.out_shape)
        return float(report.picked), g

    def _hessian_program(self):
        return self

    def batch_value_and_gradient(self, X, out=None, threads=None):
        raise OutputError(_NO_BATCH)

    def batch_forward(self, X, threads=None):
        raise OutputError(_NO_BATCH)

    def bind(self, x_buf, g_buf):
        raise OutputError(_BIND_NEEDS)

    def jacobian(self, x, out=None):
        raise OutputError("use hessian() on a HessianTape")

    def jvp(self, x, v):
        raise OutputError("a HessianTape's tangent is its Hessian: use hvp()")


class _BoundPin:
    """The __self__ of a ctape.bind(...) callable: pickling it fails with advice."""

    __slots__ = ()

    def __reduce__(self):
        raise PicklingError("a ctape.bind(x_buf, g_buf) callable holds C pointers into this "
                            "process's buffers and cannot be pickled; pickle the compiled tape "
                            "(ctape) instead and call bind() again on the loaded copy")

    def __deepcopy__(self, memo):
        return self


def _check_compilable(tape):
    """A clear error for everything rt.compile cannot take (instead of an
    AttributeError from deep inside the compiler)."""
    if isinstance(tape, CompiledTape):
        raise InputError("this is already a CompiledTape; use it as it is (copy.deepcopy(ctape) "
                         "gives an independent copy)")
    if tape is NULL_TAPE:
        raise InputError("rt.NULL_TAPE (the tape of untracked values) cannot be compiled; "
                         "record a tape with rt.GradientTape(f, x) or rt.Tape()")
    if not isinstance(tape, Tape):
        what = ("a function" if callable(tape) else f"a {type(tape).__name__}")
        raise InputError(f"rt.compile takes a finished tape, not {what}; record one with "
                         "rt.GradientTape(f, x) (or use rt.grad(f), which records and compiles)")
    if tape.recording:
        raise InputError("this tape is still recording; call tape.finish(output) before "
                         "rt.compile(tape)")
    if tape.output is None:
        raise OutputError("this tape has no output; call tape.finish(output) before rt.compile")
    if not tape.inputs:
        raise InputError("this tape has no inputs: there is nothing to replay at or "
                         "differentiate; register inputs with tape.track(x) before computing")


def _scalar_index(p, n_instr):
    """The scalar path's dispatch index of p (vm.h: scalar_index, n_instr + 2
    entries that rt_verify fills from the words it accepts), set on p; the
    caller keeps the returned buffer alive with p."""
    buf = ffi.new("uint32_t[]", n_instr + 2)
    p.scalar_index = buf
    return buf


class _BatchArena:
    """Arenas of one extra batch thread: its own values and adjoints (constants
    copied in) and its own rt_program over the shared, read-only words."""

    def __init__(self, ct):
        prog = ct._program
        self.vals = ct._vals.copy()
        self.adj = np.zeros_like(ct._adj)
        self.ws = self.handle = None
        p = ffi.new("rt_program *")
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
        msg = ffi.new("char[]", 512)
        if lib.rt_verify(p, msg, 512) != RT_OK:  # pragma: no cover - the same words passed
            raise VerificationError(ffi.string(msg).decode(errors="replace"))
        self.p = p


_WIDE_B = lib.RT_SOA_LANES   # rows per dispatch of a wide program (csrc/vm/soa.c)
_WIDE_MIN_ROWS = 16   # fewer rows: the row loop (a wide block would be mostly padding)
_WIDE_MAX_VALUES = 1 << 21   # per arena (16 MB): larger programs take the row loop
_WIDE_MAX_PAR = lib.RT_SOA_MAX_PAR   # threads a wide batch uses at most


def _aligned_zeros(n, align=64):
    """n zeroed float64 values starting on an `align`-byte boundary (whole
    vector registers per lane run in csrc/vm/soa.c)."""
    buf = np.zeros(n + align // 8)
    start = (-buf.ctypes.data % align) // 8
    return buf[start:start + n]


class _WideArena:
    """A wide program (see _wide.py) and its arenas, for one batch thread."""

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
        p = ffi.new("rt_program *")
        self._keep = [ffi.from_buffer("int32_t[]", code), ffi.from_buffer("int32_t[]", self.ints),
                      ffi.from_buffer("double[]", self.vals), ffi.from_buffer("double[]", self.adj)]
        p.code, p.ints, p.vals, p.adj = self._keep
        self.first_p = ffi.from_buffer("uint8_t[]", first)
        self.zero_p = ffi.from_buffer("int32_t[]", zero) if zero.size else ffi.NULL
        p.n_instr, p.n_ints, p.n_vals = code.shape[0], 0, n_slots * B
        p.n_in, p.n_grad, p.n_fixed = prog.n_in * B, prog.n_grad * B, prog.n_fixed * B
        p.out_off, p.out_len = prog.out_off * B, B
        msg = ffi.new("char[]", 512)
        if lib.rt_verify(p, msg, 512) != RT_OK:
            raise VerificationError("the C verifier refused a wide program (it was not run): "
                                    + ffi.string(msg).decode(errors="replace"))
        self.p = p

    def run(self, ct, with_grad, k, xp, values, G, row):
        """rt_batch_soa over k rows at xp into values / G (cffi buffers)."""
        prog = ct._program
        return lib.rt_batch_soa(self.p, prog.n_in, ct._g_len, prog.out_off, with_grad,
                                self.first_p, self.zero_p, self.zero.size, k, xp, values, G, row)


def array_threads(threads=None, min_elements=None):
    """Threads for the large array instructions of one replay, process-wide.

    An elementwise instruction, a scalar operand's adjoint sum or a
    matrix-vector product over at least ``min_elements`` elements (default
    32768) splits over the calling thread and the C worker pool, with the
    same bits as on one thread (csrc/runtime/par.h).  ``threads`` caps the threads
    (1: never split; default: $REVTAPE_THREADS, else the CPUs the process
    may use).  None leaves a setting unchanged.  Returns the settings now in
    force, ``(threads, min_elements)``."""
    for name, val in (("threads", threads), ("min_elements", min_elements)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
            raise InputError(f"array_threads: {name} must be an int >= 1 or None, not {val!r}")
    if threads is not None and threads > 64:
        raise InputError(f"array_threads: at most 64 threads, not {threads}")
    mn = ffi.new("int64_t *")
    n = lib.rt_par_config(threads or 0, min_elements or 0, mn)
    return int(n), int(mn[0])


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


def _rebuild(state, tape, guards, n_grad, native="auto"):
    # Everything here may come from an untrusted pickle: check types before use.
    if not isinstance(state, dict) or not all(type(k) is str for k in state):
        _refuse("the program state is not a dict of named fields")
    try:
        prog = compiler.Program.from_state(state)
    except TypeError as e:
        _refuse(f"the program state has unknown or missing fields ({e})")
    if tape is not None and not isinstance(tape, Tape):
        _refuse(f"the tape is a {type(tape).__name__}, not a revtape Tape")
    if not isinstance(guards, bool):
        _refuse("guards is not a bool")
    if not (isinstance(native, bool) or native == "auto"):
        _refuse("native is not a bool or 'auto'")
    return CompiledTape(tape, guards=guards, n_grad=n_grad, _program=prog, _pickled=True,
                        native=native)


# ---------------------------------------------------------------- loading checks

_MAX_OFFSET = 2 ** 31 - 1          # offsets are int32 words
# Arena values any pickle may ask for without carrying data that justifies
# them (2 x 8 MiB); beyond that, a pickle must carry its tape, whose recorded
# values are at least as large as every intermediate the program computes
# (broadcast temporaries included: at most 3 per instruction, each no larger
# than the instruction's output).
_FREE_ARENA = 1 << 20
_GUARD_CODES = {code: name[len("GUARD_"):].lower() for code, name in enumerate(ops.VM_OPCODES)
                if name.startswith("GUARD_")}


def _refuse(msg):
    raise VerificationError(f"refusing this compiled program: {msg} (a corrupt or crafted "
                            "pickle? recompile it from its tape)")


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _shape(v, what):
    if not isinstance(v, tuple) or not all(_is_int(d) and d >= 0 for d in v):
        _refuse(f"{what} is not a tuple of non-negative ints")
    return tuple(int(d) for d in v)


def _check_program(prog, tape, n_grad_inputs, pickled):
    """Check every number the C side or the Python plumbing trusts against the
    others, before the verifier runs: the verifier checks the program against
    its header (n_in, n_vals, ...), and this checks the header against the
    buffers Python will hand to C (inputs, out=, tangents) and against the
    tape.  Normalises prog's fields to plain Python values."""
    _check_header(prog)
    _check_inputs(prog, n_grad_inputs)
    _check_guards(prog)
    if not -1 <= prog.value_off < max(prog.n_vals, 1):
        _refuse("the offset of f's value is outside the arena")
    _check_arena(prog, tape, pickled)


def _check_header(prog):
    """The sizes (0 <= n_grad <= n_in <= n_fixed <= n_vals) and the buffers'
    types and shapes agree."""
    for name in ("n_in", "n_grad", "n_fixed", "n_vals", "out_off", "value_off"):
        v = getattr(prog, name)
        if not _is_int(v):
            _refuse(f"{name} is a {type(v).__name__}, not an int")
        setattr(prog, name, int(v))
    if not 0 <= prog.n_grad <= prog.n_in <= prog.n_fixed <= prog.n_vals <= _MAX_OFFSET:
        _refuse(f"need 0 <= n_grad ({prog.n_grad}) <= n_in ({prog.n_in}) <= n_fixed "
                f"({prog.n_fixed}) <= n_vals ({prog.n_vals}) <= 2**31 - 1")
    for name, dtype, ndim in (("code", np.int32, 2), ("ints", np.int32, 1),
                              ("consts", np.float64, 1)):
        a = getattr(prog, name)
        if type(a) is not np.ndarray or a.dtype != dtype or a.ndim != ndim:
            _refuse(f"{name} is not a {ndim}-d {np.dtype(dtype)} array")
    if prog.code.shape[1] != isa.WORDS:
        _refuse(f"code has {prog.code.shape[1]} words per instruction, not {isa.WORDS}")
    if prog.consts.shape[0] != prog.n_fixed - prog.n_in:
        _refuse(f"{prog.consts.shape[0]} constants for a constant pool of "
                f"{prog.n_fixed - prog.n_in}")
    prog.out_shape = _shape(prog.out_shape, "the output shape")
    if math.prod(prog.out_shape) > prog.n_vals:
        _refuse("the output is larger than the arena")


def _check_inputs(prog, n_grad_inputs):
    """The inputs are laid end to end from offset 0, n_in values in all, and
    the differentiated ones hold n_grad."""
    inputs = prog.inputs
    if not isinstance(inputs, (list, tuple)):
        _refuse("inputs is not a list")
    checked, off = [], 0
    for entry in inputs:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            _refuse("an input is not (offset, shape, is_float)")
        o, shape, isf = entry
        shape = _shape(shape, "an input shape")
        if not _is_int(o) or o != off or not isinstance(isf, bool) or (isf and shape != ()):
            _refuse("the input layout is not consecutive (offset, shape, is_float) entries")
        checked.append((off, shape, isf))
        off += math.prod(shape)
        if off > prog.n_in:
            break
    if off != prog.n_in:
        _refuse(f"the inputs hold {off} values but n_in is {prog.n_in}")
    prog.inputs = checked
    if n_grad_inputs is not None and not (_is_int(n_grad_inputs)
                                          and 0 <= n_grad_inputs <= len(checked)):
        _refuse("the number of differentiated inputs is out of range")
    n_diff = len(checked) if n_grad_inputs is None else int(n_grad_inputs)
    if sum(math.prod(s) for _, s, _ in checked[:n_diff]) != prog.n_grad:
        _refuse(f"the differentiated inputs hold a different number of values than n_grad "
                f"({prog.n_grad})")


def _check_guards(prog):
    """Every guard entry is well formed and every guard instruction names an
    entry that agrees with it."""
    guards = prog.guards
    if not isinstance(guards, (list, tuple)):
        _refuse("guards is not a list")
    for entry in guards:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or not isinstance(entry[0], dict):
            _refuse("a guard is not (params, offset, offset)")
        params = entry[0]
        where = params.get("where")
        if (params.get("pred") not in ops.GUARD_PREDICATES
                or not isinstance(params.get("expected"), bool)
                or not _is_int(params.get("index"))
                or not isinstance(where, tuple) or len(where) != 2
                or not isinstance(where[0], str) or not _is_int(where[1])):
            _refuse("a guard's parameters are malformed")
    opcodes = prog.code[:, 0] & 0xFFFF
    for k in np.flatnonzero(np.isin(opcodes, list(_GUARD_CODES))).tolist():
        number, expected = int(prog.code[k, 2]), int(prog.code[k, 1])
        if not 0 <= number < len(guards):
            _refuse(f"instruction {k} names guard {number} of {len(guards)}")
        params = guards[number][0]
        if params["pred"] != _GUARD_CODES[int(opcodes[k])] or int(params["expected"]) != expected:
            _refuse(f"instruction {k} disagrees with the guard it names")


def _check_arena(prog, tape, pickled):
    """The tape travelling with the program is its own, and a pickle asks for
    no more arena than the data it carries justifies (_FREE_ARENA)."""
    recorded = 0
    if tape is not None:
        _check_tape(prog, tape)
        if pickled and prog.n_vals > _FREE_ARENA + prog.consts.size:
            try:
                recorded = sum(np.size(v) for v in tape.values)
            except Exception:                                   # noqa: BLE001
                _refuse("the tape's recorded values are not numbers")
    if pickled and prog.n_vals > _FREE_ARENA + prog.consts.size + 4 * recorded:
        _refuse(f"it asks for arenas of {prog.n_vals} values ({16 * prog.n_vals / 2**20:.0f} "
                f"MiB) but carries data for {prog.consts.size + recorded} values")


def _check_tape(prog, tape):
    """The tape travelling with a program must be the one it was compiled from
    (same inputs and output): replays report their values into it."""
    try:
        ins = [tape.values[i] for i in tape.input_ids]
        out = tape.values[tape.output_id]
    except Exception:                                           # noqa: BLE001
        _refuse("its tape is malformed")
    if tape.recording:
        _refuse("its tape is still recording")
    if len(ins) != len(prog.inputs) or any(
            tuple(shape_of(v)) != s or (type(v) is float) != isf
            for v, (_, s, isf) in zip(ins, prog.inputs)):
        _refuse("its tape's inputs differ from the program's")
    if tuple(shape_of(out)) != prog.out_shape:
        _refuse("its tape's output differs from the program's")


def _frozen(a, dtype):
    """A read-only copy of a whose memory is a bytes object: numpy cannot make
    it writeable again (setflags(write=True) raises), unlike an array that owns
    its memory."""
    return np.frombuffer(np.ascontiguousarray(a, dtype=dtype).tobytes(), dtype=dtype)


def _retry_busy(call, budget=2.0):
    """call() until it does not return RT_BUSY (a concurrent replay holds the
    program for one replay's time), for at most `budget` seconds."""
    st = call()
    deadline = None
    while st == RT_BUSY:
        now = time.monotonic()
        if deadline is None:
            deadline = now + budget
        elif now > deadline:
            break
        time.sleep(0.0002)
        st = call()
    return st


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


def _grad_shapes(prog, n_grad_inputs):
    n = len(prog.inputs) if n_grad_inputs is None else n_grad_inputs
    return [shape for _, shape, _ in prog.inputs[:n]]


__all__ = ["CompiledTape", "CompiledHessian"]
