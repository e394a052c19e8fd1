"""A compiled program as text (ctape.disassemble()), one instruction a line,
each written by its isa format."""

from ..core import isa


def disassemble(prog, code, ints):
    """prog's words `code` (n_instr x 6) as text: @out[n] = OP(@a, @b, @c)."""
    lines = [f"; {code.shape[0]} instructions, arena {prog.n_vals} values "
             f"(inputs [0,{prog.n_in}), constants [{prog.n_in},{prog.n_fixed})), "
             f"output @{prog.out_off}[{prog.out_len}]"]
    for k, (op, n, out, a, b, c) in enumerate(code.tolist()):
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
        operands = _operands(prog, ints, ins, n, a, b, c)
        adj = f"  adj {flags:03b}" if flags else ""
        width = 1 if ins.out == "1" else n   # CSUM's n counts terms, SSD's elements
        lines.append(f"{k:5d}  @{out}[{width}] = {name}({operands}){adj}")
    return "\n".join(lines)


def _operands(prog, ints, ins, n, a, b, c):
    """One instruction's operands in the disassembly, by its isa format."""
    if ins.fmt == "csum":
        return f"@{a}" + "".join(f" - @{~e}" if e < 0 else f" + @{e}"
                                 for e in ints[c:c + n].tolist())
    if ins.fmt == "linalg":
        nn, mm, bits, scratch = ints[c:c + 4].tolist()
        return (f"@{a}" + (f", @{b}" if ins.name in ("TRISOLVE", "SOLVE") else "")
                + f"  N={nn} M={mm}" + (f" flags={bits & 7:03b}" if bits & 7 else "")
                + f" scratch @{scratch}" + ("  BLAS" if bits & 8 else ""))
    if ins.fmt == "pycall":
        site = prog.callbacks[a]
        args = ints[c:c + 3 * b].reshape(-1, 3).tolist() if b else []
        return (f"{site.prim._name}: " + ", ".join(f"@{off}[{size}]" for off, size, _ in args)
                + "  ; calls back into Python")
    if ins.fmt:
        head = ints[c:c + 3].tolist() if ins.c == "ints" else []
        text = ins.fmt.format(n=n, a=a, b=b, c=c, c2=c + 2, ints3=head,
                              ints0=head[0] if head else None)
        return text + ("  BLAS" if ins.name == "MATMUL" and ints[c + 3] else "")
    return ", ".join(f"@{v}" for v in (a, b, c)[:ins.arity])
