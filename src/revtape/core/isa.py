"""The C VM's instruction set: one descriptor per opcode, derived from the op table.

An instruction is RT_WORDS int32 words ``(op, n, out, a, b, c)`` with
``op = opcode | (adjoint flags << FLAGS_SHIFT)``.  What each word means is
declared once here, per opcode, and everything else reads it:

* ``python -m revtape.core.codegen`` writes it into csrc/generated/ops_generated.h (the word
  layout, the status codes and the ``RT_INSTRS`` descriptor rows), from which
  the C verifier checks every operand region, every parameter word and the
  allowed adjoint flags, and the sweeps get their case lists;
* the compiler (word layout), the compiled tape (statuses, through cffi's
  ``lib.RT_*``) and the disassembler (operand formats, arity) read it here.

Word kinds (the strings below, generated as ``RT_W_*``):

* ``n`` (word 1): ``count`` an element count >= 0, ``count1`` >= 1,
  ``expect`` a guard's expected result, 0 or 1;
* ``out`` (word 2): ``n`` / ``1`` / ``b`` the written arena region and its
  length, ``guard`` a guard number >= 0 (nothing written), ``custom``;
* ``a``, ``b``, ``c`` (words 3-5): ``-`` unused; ``n``, ``1``, ``n*b``, ``b``
  a read arena region of that length; ``len`` / ``len1`` an integer
  parameter >= 0 / >= 1 (named by ``b_label``); ``ints`` an offset into the
  side table; ``slot`` a callback slot; ``custom`` an arena region whose
  length the instruction's own C verify function works out.

``verify=True``: the instruction has a ``rt_verify_NAME`` in its C home
(csrc/instr/*.h) for what the table cannot say (index maps, shapes,
term lists); it runs after the table's checks and before the region checks.

``scalar=True`` (hand instructions): its C home also has one-element forms
``RT_SFWD`` / ``RT_SREV`` (its kernels' n == 1 case, or any n when its
output is one element; same bits), which the VM's scalar path runs
(``RT_SCALAR_HAND``); the generated elementwise rows and the guards have
theirs from the op table.
"""

from dataclasses import dataclass

from . import ops

WORDS = 6                   # op, n, out, a, b, c
FLAGS_SHIFT = 16            # op word: opcode in the low 16 bits, adjoint flags above
OPCODE_MASK = (1 << FLAGS_SHIFT) - 1
MAX_FLAGS = 7               # flag 1: a needs an adjoint, 2: b, 4: c

# The VM's return statuses, in value order (vm.h's contract).  Python reads
# them back from the extension (lib.RT_OK ...), never retypes them.
STATUSES = (
    ("OK", "success"),
    ("GUARD_FAILED", "failed_guard holds the guard number"),
    ("BUSY", "another thread is replaying this program"),
    ("UNVERIFIED", "rt_verify has not accepted this program"),
    ("BADARG", "e.g. value_and_grad on a non-scalar output"),
    ("NONFINITE", "reserved: no longer returned (nan/inf are values)"),
    ("CALLBACK_FAILED", "a PYCALL callback returned non-zero (the caller holds the error)"),
    ("BAD_INDEX", "a GATHER_IDX index value is not an integer in range"),
    ("OK_HOT", "RT_OK, and this call spent the native tier's hot budget (vm.h: hot_calls)"),
)

N_KINDS = ("count", "count1", "expect")
OUT_KINDS = ("n", "1", "b", "guard", "custom")
OPERAND_KINDS = ("-", "n", "1", "n*b", "b", "len", "len1", "ints", "slot", "custom")

# Where an instruction's kernels live: generated from an op row's C
# expressions, hand-written in csrc/instr/*.h, in csrc/instr/linalg/, a guard
# predicate, or a call back into Python.  "block": BLOCK / ENDBLOCK, which
# run the instructions between them tile by tile (csrc/instr/block.h).  "checked": hand-written kernels
# that check data the verifier cannot see (index values refilled per replay)
# and return a status, which the sweeps pass on.
KERNELS = ("generated", "hand", "checked", "linalg", "guard", "callback", "block")


@dataclass(frozen=True)
class Instr:
    name: str
    kernel: str
    n: str = "count"
    out: str = "n"
    a: str = "n"
    b: str = "-"
    c: str = "-"
    flags: int = 1              # adjoint flags the instruction may carry
    verify: bool = False        # extra checks in C: rt_verify_NAME
    b_label: str = ""           # what a `len` word b is, for messages
    fmt: str = ""               # operands in the disassembly ("" : @a, @b ... by arity)
    scalar: bool = False        # hand instruction with one-element forms (csrc/vm/scalar_path.c)
    opcode: int = -1

    @property
    def arity(self):
        """How many of a, b, c are arena operands (the disassembler's default)."""
        k = 0
        for w in (self.a, self.b, self.c):
            if w in ("n", "1", "n*b", "b", "custom"):
                k += 1
            else:
                break
        return k

    @property
    def differentiable(self):
        return self.flags != 0

    @property
    def blockable(self):
        """May be a member of a BLOCK: element i of the output depends on
        element i of each array operand only (one-element operands are read
        whole), so running it over a tile [t, t + T) is running it over its
        elements t .. t + T - 1.  Every operand is an arena region of n or 1."""
        return (self.kernel in ("generated", "hand") and self.n == "count" and self.out == "n"
                and not self.verify and self.a in ("n", "1")
                and all(w in ("n", "1", "-") for w in (self.b, self.c))
                and not self.name.startswith(("REDUCE_", "GATHER", "SCATTER")))


# Hand-written instructions (not one per op row), in opcode order
# (ops.VM_STRUCT): their layouts.  A new hand instruction is a row here, a
# name in ops.VM_STRUCT and a section in csrc/instr/ (CONTRIBUTING.md).
HAND = {
    "GATHER": dict(a="b", b="len", c="ints", verify=True, b_label="input length",
                   fmt="@{a}[ints {c}..]"),
    "SCATTER_ADD": dict(out="b", a="n", b="len", c="ints", verify=True,
                        b_label="output length", fmt="@{a}[{n}] -> ints {c}.."),
    "SCATTER": dict(out="b", a="n", b="len", c="ints", verify=True,
                    b_label="output length", fmt="@{a}[{n}] -> ints {c}.."),
    "MATMUL": dict(a="custom", b="custom", c="ints", flags=3, verify=True,
                   fmt="@{a}, @{b}  {ints3}"),
    "CLIP": dict(a="n", b="1", c="1"),
    "AXPY": dict(a="n", b="1", c="n", flags=7, scalar=True),
    "SQDIFF": dict(a="n", b="n", flags=3, scalar=True),
    "CSUM": dict(n="count1", out="1", a="1", c="ints", flags=3, verify=True, fmt="csum",
                 scalar=True),
    "PYCALL": dict(kernel="callback", a="slot", b="len", c="ints", verify=True,
                   b_label="operand count", fmt="pycall"),
    "GAXPY": dict(a="custom", b="1", c="ints", flags=7, verify=True,
                  fmt="@{a}[ints {c2}..], @{b}, @{ints0}"),
    "SSD": dict(out="1", a="n", b="n", flags=3),
    "GATHER_IDX": dict(kernel="checked", a="b", b="len", c="n", b_label="input length",
                       fmt="@{a}[@{c}..]"),
    # A fused, tiled elementwise block (csrc/instr/block.h): BLOCK (n
    # elements, out = m members, a = tile, b = scratch, c = tile-local mask)
    # is followed by its m member instructions and ENDBLOCK with the same
    # words.  Forward and tangent run the members tile by tile from BLOCK,
    # reverse runs their reverses tile by tile from ENDBLOCK; members never
    # run on their own.
    "BLOCK": dict(kernel="block", n="count1", out="custom", a="-", flags=1, verify=True,
                  fmt="block"),
    "ENDBLOCK": dict(kernel="block", n="count1", out="custom", a="-", flags=1, verify=True,
                     fmt="block"),
}


def _derive():
    table = []
    for op in ops.OPS.values():
        fam, up = op.family, op.name.upper()
        if fam in (ops.UNARY, ops.UNARY_ND):
            table.append(Instr(up, "generated", flags=int(fam == ops.UNARY)))
        elif fam in (ops.BINARY, ops.BINARY_ND):
            fl = 3 if fam == ops.BINARY else 0
            table += [Instr(f"{up}_VV", "generated", a="n", b="n", flags=fl),
                      Instr(f"{up}_VS", "generated", a="n", b="1", flags=fl),
                      Instr(f"{up}_SV", "generated", a="1", b="n", flags=fl)]
        elif fam == ops.WHERE:
            # the condition (a) is never differentiated
            table += [Instr("WHERE_VV", "hand", a="n", b="n", c="n", flags=6),
                      Instr("WHERE_VS", "hand", a="n", b="n", c="1", flags=6),
                      Instr("WHERE_SV", "hand", a="n", b="1", c="n", flags=6)]
        elif fam == ops.REDUCE:
            # max/min of nothing has no value: segments of at least one
            seg = "len1" if op.name in ("max", "min") else "len"
            table.append(Instr(f"REDUCE_{up}", "hand", a="n*b", b=seg, flags=int(op.diff),
                               b_label="segment length", fmt="@{a}, segment {b}"))
        elif fam == ops.GUARD:
            table += [Instr(f"GUARD_{p.upper()}", "guard", n="expect", out="guard", a="1",
                            b="1", flags=0, fmt="guard") for p in ops.GUARD_PREDICATES]
        elif fam == ops.LINALG:
            table.append(Instr(up, "linalg", a="custom", b="custom", c="ints", flags=3,
                               verify=True, fmt="linalg"))
    for name in ops.VM_STRUCT:
        table.append(Instr(name, **{"kernel": "hand", **HAND[name]}))
    out = {}
    for code, ins in enumerate(table):
        out[ins.name] = Instr(**{**ins.__dict__, "opcode": code})
    return out


INSTRS = _derive()
BY_OPCODE = tuple(INSTRS.values())


def _check():
    # The descriptor rows are the opcodes, in opcode order: a hand
    # instruction named in ops.VM_STRUCT without a row here (or the reverse)
    # fails at import, not in the C build.
    names = [i.name for i in BY_OPCODE]
    if names != list(ops.VM_OPCODES):
        raise AssertionError(f"isa.INSTRS does not list ops.VM_OPCODES in order: "
                             f"{sorted(set(names) ^ set(ops.VM_OPCODES))}")
    for ins in BY_OPCODE:
        assert ins.kernel in KERNELS and ins.n in N_KINDS and ins.out in OUT_KINDS, ins
        assert all(w in OPERAND_KINDS for w in (ins.a, ins.b, ins.c)), ins
        assert 0 <= ins.flags <= MAX_FLAGS, ins
        assert ins.b_label or ins.b not in ("len", "len1"), ins


_check()


def instr(opcode):
    """The descriptor of an opcode number."""
    return BY_OPCODE[opcode]
