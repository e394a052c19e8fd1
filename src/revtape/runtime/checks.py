"""The checks a compiled program passes before the C verifier sees it.

The verifier checks a program against its header (n_in, n_vals, ...); these
check the header against the buffers Python hands to C (inputs, out=,
tangents), against the tape travelling with it, and against this build
(format, op table).  Everything may come from an untrusted pickle: types are
checked before use, and every failure is a VerificationError (or a
BuildMismatchError for a program of another build) that says what to do.
"""

import math

import numpy as np

from ..core import isa
from ..core import ops
from ..errors import BuildMismatchError, VerificationError
from ..lower import compiler
from ..trace.values import shape_of

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


def _check_build(prog):
    """The program was lowered by this revtape: its format and op table."""
    if prog.format_version != compiler.FORMAT_VERSION or prog.op_table_hash != ops.OP_TABLE_HASH:
        raise BuildMismatchError(
            f"this program was built for format {prog.format_version} / op table "
            f"{prog.op_table_hash}, but this revtape has format {compiler.FORMAT_VERSION} / "
            f"{ops.OP_TABLE_HASH}; recompile it from its tape")


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
