"""The VM's scalar path (csrc/vm/scalar_path.c): one-element instructions run from a
dispatch index that rt_verify builds (vm.h: scalar_index, scalar_path), one
handler per instruction and adjoint-flag combination, adjacent plain
arithmetic paired into one handler (in the forward and, per flag
combination, in the reverse), every other instruction run by the
general sweep in runs.  Its bits must be the general sweeps': each test
compiles a tape twice and turns the scalar path off on one copy
(p.scalar_path = 0, the general sweeps), then compares bit patterns."""

import numpy as np
import pytest

import revtape as rt
from revtape.core import ops
from revtape._vm import ffi, lib
from revtape.bench import workloads as bench_workloads

from conftest import (all_same as _all_same, same_bits as _same, same_bits_nan as _same_nan,
                      scalar_families as _scalar_families, structure_families as _structure_families)


def _both(fa, fb, x, same):
    """fa(x) and fb(x) have the same bits, or both refuse the branch."""
    try:
        want = fb(x)
    except rt.BranchChanged as e:
        with pytest.raises(rt.BranchChanged) as got:
            fa(x)
        assert str(got.value) == str(e)
        return
    assert _all_same(fa(x), want, same)


def _twins(tape, scalar=True):
    """(scalar path, general sweeps): the same program compiled twice."""
    a, b = rt.compile(tape, native=False), rt.compile(tape, native=False)
    assert a._p.scalar_path == int(scalar)
    b._p.scalar_path = 0
    return a, b


def _check(tape, a, b, xs, rng, same=_same, ref=True):
    n = xs[0].size
    for x in xs:
        try:
            want = b.value_and_gradient(x)
        except rt.BranchChanged as e:
            with pytest.raises(rt.BranchChanged) as got:
                a.value_and_gradient(x)
            assert str(got.value) == str(e)
            continue
        assert _all_same(a.value_and_gradient(x), want, same)
        assert same(a.forward(x), b.forward(x))
        v = rng.normal(size=n)
        assert same(a.jvp(x, v), b.jvp(x, v))
        assert _all_same(a.vjp(x, 1.5), b.vjp(x, 1.5), same)
        if not ref:
            continue
        # and the reference replay (the executable specification), to rounding
        rv, rg = tape.value_and_gradient(x)
        va, ga = a.value_and_gradient(x)
        if np.isfinite(rv):
            assert va == pytest.approx(rv, rel=1e-12, abs=1e-12)
            np.testing.assert_allclose(ga, rg, rtol=1e-10, atol=1e-12)


def test_every_scalar_family_gives_the_general_sweeps_bits(rng):
    x0 = np.array([0.3, 0.55, 0.45])
    tape = rt.GradientTape(_scalar_families, x0)
    a, b = _twins(tape)
    xs = [x0 + 0.05 * rng.normal(size=3) for _ in range(4)]
    xs += [np.array([0.3, 0.55, 0.3]), np.array([0.3, 0.3, 0.5]),
           np.array([0.3, 0.55, 0.0]), np.array([0.3, 0.55, -0.0]),
           np.array([0.95, 0.5, 0.5])]                          # the guard fails
    # (no reference replay: it refuses gammainc's shape derivative)
    _check(tape, a, b, xs, rng, ref=False)
    bad = [np.array([0.0, -0.0, 0.45]), np.array([-0.0, 0.0, 0.5]),
           np.array([np.nan, 0.5, 0.4]), np.array([0.3, np.nan, 0.4]),
           np.array([0.3, np.inf, 0.4]), np.array([0.3, 0.5, -np.inf])]
    for x in bad:
        _both(a.value_and_gradient, b.value_and_gradient, x, _same_nan)
        _both(a.forward, b.forward, x, _same_nan)
    X = np.array(xs[:4] * 3)
    assert _all_same(a.batch_value_and_gradient(X, threads=2),
                     b.batch_value_and_gradient(X, threads=2))
    h = rt.HessianTape(lambda x: _scalar_families(x, skip=("gammainc", "gammaincc", "trigamma",
                                                               "jn", "yn", "iv", "ive")),
                       x0)
    ha, hb = _twins(h)
    for x in xs[:3]:
        v = rng.normal(size=3)
        assert _same(ha.hvp(x, v), hb.hvp(x, v)) and _same(ha.hessian(x), hb.hessian(x))


def _pair_ops(x):
    """Every ordered pair of the paired handlers (SQUARE, NEG, ADD, SUB, MUL,
    DIV, AXPY, SQDIFF) with every adjoint-flag combination: operands that are
    inputs (flags on) or constants (flags off), and aliased operands."""
    c = 0.75
    forms = [lambda u, v: u ** 2, lambda u, v: -u, lambda u, v: u + v, lambda u, v: c + v,
             lambda u, v: u - c, lambda u, v: u * v, lambda u, v: c * v, lambda u, v: u * c,
             lambda u, v: u * u,
             lambda u, v: u / v, lambda u, v: c / v, lambda u, v: u / c,
             lambda u, v: u + v * c, lambda u, v: u + c * v, lambda u, v: c + u * v,
             lambda u, v: (u - v) ** 2, lambda u, v: (c - v) ** 2, lambda u, v: (u - c) ** 2]
    tot = 0.0
    k = 0
    for f in forms:
        for g in forms:
            u, v = x[k % 4], x[(k + 1) % 4]
            tot = tot + g(f(u, v), v) * x[(k + 2) % 4]
            k += 1
    return tot


def test_pairs_of_every_paired_handler_and_flag_give_the_general_sweeps_bits(rng):
    x0 = np.array([0.6, 1.3, -0.8, 0.4])
    tape = rt.GradientTape(_pair_ops, x0)
    a, b = _twins(tape)
    names = {ops.VM_OPCODES[w & 0xFFFF] for w in a.code[:, 0]}
    assert {"SQUARE", "NEG", "ADD_VV", "SUB_VV", "MUL_VV", "DIV_VV", "AXPY", "SQDIFF"} <= names
    flags = {(ops.VM_OPCODES[w & 0xFFFF], w >> 16) for w in a.code[:, 0]}
    assert {("MUL_VV", 1), ("MUL_VV", 2), ("MUL_VV", 3), ("AXPY", 5), ("AXPY", 7)} <= flags
    xs = [x0 + 0.1 * rng.normal(size=4) for _ in range(3)]
    xs += [np.array([0.0, -0.0, 1.0, 2.0]), np.array([0.75, 0.75, -0.0, 0.0])]
    _check(tape, a, b, xs, rng)
    bad = [np.array([np.inf, 1.0, 2.0, 3.0]), np.array([0.0, np.nan, 1.0, -1.0]),
           np.array([1e308, 1e308, -1e308, 0.5])]
    for x in bad:
        _both(a.value_and_gradient, b.value_and_gradient, x, _same_nan)


def test_mixed_programs_run_their_array_code_in_runs(rng):
    """Array instructions, reductions, linalg, gathers and a guard between
    scalar code: the general sweep runs them from the scalar path."""
    x0 = np.linspace(0.2, 0.8, 6)

    def f(x):
        t = _structure_families(x)
        for i in range(5):
            t = t + (x[i] - x[i + 1] ** 2) ** 2 * t / (1.0 + x[i])
        return t

    tape = rt.GradientTape(f, x0)
    a, b = _twins(tape)
    xs = [x0 + 0.04 * rng.normal(size=6) for _ in range(3)] + [np.array([0.95, .3, .4, .5, .6, .7])]
    _check(tape, a, b, xs, rng)
    X = np.array(xs[:3] * 2)
    assert _all_same(a.batch_value_and_gradient(X, threads=2),
                     b.batch_value_and_gradient(X, threads=2))


def test_array_programs_keep_the_general_sweeps(rng):
    """No one-element instruction: scalar_path stays 0 (the index is not read)."""
    tape = rt.GradientTape(lambda x: np.sum(np.exp(x) * x), np.linspace(0.1, 1.0, 8))
    a = rt.compile(tape, native=False)
    assert a._p.scalar_path == 0


@pytest.mark.parametrize("name", ["eight-schools", "rosenbrock-loop", "chain", "radon", "logreg"])
def test_benchmark_workloads_give_the_general_sweeps_bits(name, rng):
    factory = {w.__name__.replace("_", "-"): w for w in
               (bench_workloads.eight_schools, bench_workloads.rosenbrock_loop,
                bench_workloads.chain, bench_workloads.radon, bench_workloads.logreg)}[name]
    wl = factory() if name not in ("chain",) else factory(L=50)
    tape = rt.GradientTape(wl.f, wl.x0)
    a, b = rt.compile(tape, native=False), rt.compile(tape, native=False)
    b._p.scalar_path = 0
    n = wl.x0.size
    xs = [wl.x0 + 0.05 * rng.normal(size=n) for _ in range(2)]
    _check(tape, a, b, xs, rng)
    xb, g1, g2 = xs[0].copy(), np.empty(n), np.empty(n)
    assert _same(a.bind(xb, g1)(), b.bind(xb, g2)()) and _same(g1, g2)


def test_guard_failure_reports_the_same_guard_and_keeps_the_last_replay():
    def f(x):
        y = x[0] * x[1] + x[2]
        if y > 1.0:
            return y * y - x[0]
        return y + x[1] / x[2]

    x0 = np.array([0.5, 0.5, 0.5])
    tape = rt.GradientTape(f, x0)
    a, b = _twins(tape)
    a.value_and_gradient(x0)
    b.value_and_gradient(x0)
    bad = np.array([2.0, 2.0, 0.5])
    msgs = []
    for ct in (a, b):
        with pytest.raises(rt.BranchChanged) as e:
            ct.value_and_gradient(bad)
        msgs.append(str(e.value))
        with pytest.raises(rt.BranchChanged):
            ct.forward(bad)
        # the refused replay left the previous one in place
        assert _same(ct.forward(x0), f(x0))
    assert msgs[0] == msgs[1]


def test_verify_builds_the_index_whatever_the_buffer_held(rng):
    """The index is derived by rt_verify from the words it accepted: junk in
    the buffer beforehand changes nothing, and a refused program leaves the
    scalar path off (no sweep runs it)."""
    x0 = np.array([0.3, 0.55, 0.45])
    tape = rt.GradientTape(_scalar_families, x0)
    a = rt.compile(tape, native=False)
    want = a.value_and_gradient(x0)
    p = a._p
    n = p.n_instr
    ix = np.frombuffer(ffi.buffer(p.scalar_index, (n + 2) * 4), dtype=np.uint32)
    built = ix.copy()
    ix[:] = rng.integers(0, 2 ** 32, size=n + 2, dtype=np.uint32)   # junk
    msg = ffi.new("char[]", 256)
    assert lib.rt_verify(p, msg, 256) == 0 and p.scalar_path == 1
    assert np.array_equal(ix, built)
    assert _all_same(a.value_and_gradient(x0), want)
    # a program the verifier refuses: scalar_path 0, and every entry point refuses
    code = np.array(a._code)
    code[3, 2] = p.n_vals + 5                       # an output outside the arena
    q = ffi.new("rt_program *")
    keep = [ffi.from_buffer("int32_t[]", code), ffi.from_buffer("double[]", np.zeros(p.n_vals)),
            ffi.from_buffer("double[]", np.zeros(p.n_vals)), ffi.new("uint32_t[]", n + 2)]
    q.code, q.ints, q.n_instr, q.n_ints = keep[0], p.ints, n, p.n_ints
    q.vals, q.adj, q.n_vals, q.scalar_index = keep[1], keep[2], p.n_vals, keep[3]
    q.n_in, q.n_grad, q.n_fixed, q.out_off, q.out_len = p.n_in, p.n_grad, p.n_fixed, p.out_off, 1
    q.scalar_path = 1                               # a caller's stale value
    assert lib.rt_verify(q, msg, 256) != 0 and q.scalar_path == 0
    assert b"outside" in ffi.string(msg) or ffi.string(msg)
    value = ffi.new("double *")
    g = np.empty(p.n_grad)
    assert lib.rt_value_and_grad(q, ffi.NULL, value, ffi.from_buffer("double[]", g)) == \
        lib.RT_UNVERIFIED


# The reverse pairs' list (csrc/vm/scalar_path.c RT_RPAIR_OPS): (op, flags) and a form that
# records exactly that one instruction from inputs u, v, w and a constant.
_C = 0.75
_RPAIR_FORMS = [
    (("SQUARE", 1), lambda u, v, w: u ** 2), (("NEG", 1), lambda u, v, w: -u),
    (("EXP", 1), lambda u, v, w: np.exp(u)), (("LOG", 1), lambda u, v, w: np.log(u)),
    (("ADD_VV", 1), lambda u, v, w: u + _C), (("ADD_VV", 2), lambda u, v, w: _C + u),
    (("ADD_VV", 3), lambda u, v, w: u + v),
    (("SUB_VV", 1), lambda u, v, w: u - _C), (("SUB_VV", 2), lambda u, v, w: _C - u),
    (("SUB_VV", 3), lambda u, v, w: u - v),
    (("MUL_VV", 1), lambda u, v, w: u * _C), (("MUL_VV", 2), lambda u, v, w: _C * u),
    (("MUL_VV", 3), lambda u, v, w: u * v),
    (("DIV_VV", 1), lambda u, v, w: u / _C),
    (("AXPY", 5), lambda u, v, w: u + _C * v), (("AXPY", 7), lambda u, v, w: u + v * w),
    (("SQDIFF", 2), lambda u, v, w: (_C - u) ** 2), (("SQDIFF", 3), lambda u, v, w: (u - v) ** 2),
]


def _rpair_groups(x, aliased=False):
    """For every ordered pair (P, Q) of the reverse-pair list: P, Q, then two
    SINs (no reverse pair) and the AXPY that adds sin(p) * sin(q) to the total,
    so that, taken greedily from the end, each Q pairs with its P.  aliased:
    u, v and w are one input (x * x, x - x, ...)."""
    tot = x[0] * 0.5
    k = 0
    for _, fp in _RPAIR_FORMS:
        for _, fq in _RPAIR_FORMS:
            args = [x[(k + i) % x.size] for i in (0, 1, 2)]
            if aliased:
                args = [args[0]] * 3
            p = fp(*args)
            q = fq(*args[::-1])
            tot = tot + np.sin(p) * np.sin(q)
            k += 1
    return tot


@pytest.mark.parametrize("aliased", [False, True])
def test_reverse_pairs_of_every_listed_handler_give_the_general_sweeps_bits(rng, aliased):
    x0 = np.linspace(0.6, 1.4, 7)
    tape = rt.GradientTape(lambda x: _rpair_groups(x, aliased), x0)
    a, b = _twins(tape)
    code = np.asarray(a.code)
    n_forms = len(_RPAIR_FORMS)
    ops_flags = [(ops.VM_OPCODES[w & 0xFFFF], int(w >> 16)) for w in code[:, 0]]
    # the program is the groups the test means: P, Q, SIN, SIN, AXPY each
    # (aliased, some forms carry fewer flags: x * x is MUL_VV 3 still, x - x SUB_VV 3)
    start = next(i for i, (op, _) in enumerate(ops_flags) if op != "MUL_VV")
    got = [ops_flags[start + 5 * g: start + 5 * g + 2] for g in range(n_forms ** 2)]
    if not aliased:
        want = [[fp, fq] for fp, _ in _RPAIR_FORMS for fq, _ in _RPAIR_FORMS]
        assert got == want
    assert all(ops_flags[start + 5 * g + 2][0] == "SIN" for g in range(n_forms ** 2))
    # every group's Q entry holds its own pair handler (csrc/vm/scalar_path.c: reverse handler
    # in bits 16..31), one per ordered pair of (op, flags)
    n = a._p.n_instr
    ix = np.frombuffer(ffi.buffer(a._p.scalar_index, (n + 2) * 4), dtype=np.uint32)
    rev = {}
    for g in range(n_forms ** 2):
        q_pc = start + 5 * g + 1
        rev.setdefault(tuple(got[g]), set()).add(int(ix[q_pc + 1] >> 16))
    assert all(len(s) == 1 for s in rev.values())
    assert len({s.pop() for s in rev.values()}) == len(rev)
    if not aliased:
        assert len(rev) == n_forms ** 2
    xs = [x0 + 0.05 * rng.normal(size=7) for _ in range(3)]
    xs += [np.array([1.0, 0.75, 0.75, 1.0, 2.0, 0.5, 1.0])]     # zero adjoints, c - u = 0
    _check(tape, a, b, xs, rng)
    bad = [np.array([0.0, -0.0, 1.0, 2.0, 0.5, 1.0, 1.0]),
           np.array([np.inf, 1.0, 2.0, 3.0, 0.5, 1.0, 1.0]),
           np.array([0.5, np.nan, 1.0, -1.0, 0.5, 1.0, 1.0]),
           np.array([1e308, 1e308, -1e308, 0.5, 0.5, 1.0, 1.0])]
    for x in bad:
        _both(a.value_and_gradient, b.value_and_gradient, x, _same_nan)
        _both(lambda x: a.vjp(x, -2.0), lambda x: b.vjp(x, -2.0), x, _same_nan)


# Consumers of a value p (as a pair's later instruction, whose write to p's
# slot the earlier one takes its adjoint from): unary, binary with p as
# either operand, and p on both sides (two writes to p's slot).
_CONSUMERS = [lambda p, u: p ** 2, lambda p, u: -p, lambda p, u: np.exp(p),
              lambda p, u: p + u, lambda p, u: u + p, lambda p, u: p - u, lambda p, u: u - p,
              lambda p, u: p * u, lambda p, u: u * p, lambda p, u: p / _C,
              lambda p, u: p * p, lambda p, u: p - p, lambda p, u: p + p]


def _linked_groups(x):
    """Every listed form P followed by every consumer Q of its result, then a
    SIN and the AXPY that adds it: taken greedily from the end, Q pairs with
    P (where the compiler did not fuse them into one instruction)."""
    tot = x[0] * 0.5
    k = 0
    for _, fp in _RPAIR_FORMS:
        for fq in _CONSUMERS:
            u, v, w = (x[(k + i) % x.size] for i in (0, 1, 2))
            q = fq(fp(u, v, w), w)
            tot = tot + np.sin(q) * x[(k + 3) % x.size]
            k += 1
    return tot


def test_reverse_pairs_pass_the_later_write_to_the_earlier_instruction_with_its_bits(rng):
    x0 = np.linspace(0.6, 1.4, 7)
    tape = rt.GradientTape(_linked_groups, x0)
    a, b = _twins(tape)
    xs = [x0 + 0.05 * rng.normal(size=7) for _ in range(3)]
    xs += [np.array([1.0, 0.75, 0.75, 1.0, 2.0, 0.5, 1.0]),        # zero adjoints: skips
           np.array([0.0, -0.0, 1.0, 0.0, 0.5, -0.0, 1.0])]
    _check(tape, a, b, xs, rng)
    bad = [np.array([np.inf, 1.0, 2.0, 3.0, 0.5, 1.0, 1.0]),
           np.array([0.5, np.nan, 1.0, -1.0, 0.5, 1.0, 1.0]),
           np.array([1e308, 1e308, -1e308, 0.5, 0.5, 1.0, 1.0])]
    for x in bad:
        _both(a.value_and_gradient, b.value_and_gradient, x, _same_nan)
        _both(lambda x: a.vjp(x, -2.0), lambda x: b.vjp(x, -2.0), x, _same_nan)
