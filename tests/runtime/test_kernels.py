"""The VM's vectorised array kernels (csrc/kernels/kernels.c): every elementwise op
over an array gives the same bits as the same op written as scalar code (the
VM's inline n == 1 path, compiled apart from the kernels), zero adjoints stay
zero through inf/nan partials, operand adjoints that alias each other receive
their terms in the order of the one-loop sweep, and the verifier refuses a
program whose output overlaps an operand (the kernels' `restrict` rests on it)."""

import numpy as np
import pytest

import revtape as rt
from revtape.lower import compiler

from conftest import BINARY, UNARY, bits

N = 37          # odd and not a multiple of any vector width: the loop tails run too


def assert_bits(actual, expected):
    np.testing.assert_array_equal(bits(actual), bits(expected))


def _weights(rng, n):
    """Output adjoints with exact zeros in them (azmul must skip those)."""
    w = rng.standard_normal(n)
    w[::5] = 0.0
    w[1::7] = -0.0
    return w


def _array_and_scalar_forms(fn, k):
    """fn over a length-k array, and fn element by element as scalar code."""
    return (lambda x: fn(x),
            lambda x: np.stack([fn(x[i]) for i in range(k)]))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_array_kernel_equals_its_scalar_form_bit_for_bit(name, rng):
    fn, _, sample = UNARY[name]
    x = np.asarray(sample(rng, (N,)), dtype=np.float64)
    w = _weights(rng, N)
    f_arr, f_sc = _array_and_scalar_forms(fn, N)
    c_arr = rt.compile(rt.JacobianTape(f_arr, x))
    c_sc = rt.compile(rt.JacobianTape(f_sc, x))
    assert c_arr.program.stats["program_instructions"] == 1
    for k in range(3):
        xk = x * (1.0 + 0.01 * k)
        assert_bits(c_arr.forward(xk), c_sc.forward(xk))
        assert_bits(c_arr.vjp(xk, w), c_sc.vjp(xk, w))
        assert_bits(c_arr.jvp(xk, w), c_sc.jvp(xk, w))     # tangent sweep, zeros in w


_FORMS = {
    # the binary opcode variants: array-array, array-scalar, scalar-array
    "VV": (lambda fn: lambda x: fn(x[:N], x[N:]),
           lambda fn: lambda x: np.stack([fn(x[i], x[N + i]) for i in range(N)]), 2 * N),
    "VS": (lambda fn: lambda x: fn(x[:N], x[N]),
           lambda fn: lambda x: np.stack([fn(x[i], x[N]) for i in range(N)]), N + 1),
    "SV": (lambda fn: lambda x: fn(x[0], x[1:]),
           lambda fn: lambda x: np.stack([fn(x[0], x[1 + i]) for i in range(N)]), N + 1),
}


@pytest.mark.parametrize("form", sorted(_FORMS))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_array_kernel_equals_its_scalar_form_bit_for_bit(name, form, rng):
    fn, _, _, sample = BINARY[name]
    arr, sc, size = _FORMS[form]
    if form == "VV":
        a, b = sample(rng, (N,), (N,))
        x = np.concatenate([a, b])
    elif form == "VS":
        a, b = sample(rng, (N,), ())
        x = np.concatenate([a, [b]])
    else:
        a, b = sample(rng, (), (N,))
        x = np.concatenate([[a], b])
    w = _weights(rng, N)
    c_arr = rt.compile(rt.JacobianTape(arr(fn), x))
    c_sc = rt.compile(rt.JacobianTape(sc(fn), x))
    assert c_arr.program.stats["program_instructions"] == 1
    assert_bits(c_arr.forward(x), c_sc.forward(x))
    # tangents with exact zeros, on one operand only and on both
    for v in (_weights(rng, x.size), np.where(np.arange(x.size) < size - N, 0.0, 1.5),
              np.where(np.arange(x.size) < size - N, 0.7, 0.0)):
        assert_bits(c_arr.jvp(x, v), c_sc.jvp(x, v))
    expected = c_sc.vjp(x, w)
    if form != "VV":
        # the scalar operand's adjoint: the kernel sums its N terms left to
        # right and adds the sum once (scalar code adds them one by one,
        # last element first); each term is what one element's scalar
        # instruction gives alone.  A vectorised (reassociated) sum fails.
        k = N if form == "VS" else 0
        s = 0.0
        for i in range(N):
            s += c_sc.vjp(x, np.where(np.arange(N) == i, w, 0.0))[k]
        expected[k] = 0.0 + s
    assert_bits(c_arr.vjp(x, w), expected)


@pytest.mark.parametrize("fn,x", [
    (np.sqrt, [0.0, 4.0, 0.0, 9.0, 1.0]),           # d sqrt = 0.5 / f = inf at 0
    (np.log, [0.0, 2.0, 0.0, 3.0, 1.0]),            # 1 / x = inf at 0
    (np.reciprocal, [1e-320, 2.0, 1e-320, 3.0, 1.0]),   # -(f * f) = -inf
    (lambda x: x ** 0.5 * 1.0, [0.0, 1.0, 0.0, 2.0, 3.0]),
])
def test_a_zero_adjoint_stays_zero_through_an_infinite_partial(fn, x):
    x = np.array(x)
    w = np.array([0.0, 1.0, 0.0, 2.0, -1.0])        # zero exactly where the partial is inf
    ct = rt.compile(rt.JacobianTape(fn, x))
    g = ct.vjp(x, w)
    assert np.all(np.isfinite(g)), g
    assert g[0] == 0.0 and g[2] == 0.0
    assert not np.signbit(g[0]) and not np.signbit(g[2])
    assert_bits(g, rt.compile(rt.JacobianTape(_array_and_scalar_forms(fn, 5)[1], x)).vjp(x, w))
    t = ct.jvp(x, w)                                # forward mode: the same rule
    assert np.all(np.isfinite(t)) and t[0] == 0.0 and t[2] == 0.0, t


def _one_loop_mul_reverse(d, w, x, a, b, n):
    """The reverse of out = x[a:a+n] * x[b:b+n] as one loop in element order
    (the sweep before vectorisation): the oracle for aliasing operands."""
    d = d.copy()
    for i in range(n):
        g = w[i]
        if g != 0.0:
            d[a + i] += g * x[b + i]
            d[b + i] += g * x[a + i]
    return d


@pytest.mark.parametrize("a,b", [(1, 0), (0, 1), (0, 0), (2, 0), (0, 3), (5, 0)])
def test_aliasing_operand_adjoints_add_in_the_one_loop_order(a, b, rng):
    # out = x[a:a+n] * x[b:b+n] + x[a:a+n] ** 2: the square's reverse runs
    # first and leaves d[x] non-zero, so the order of the product's two terms
    # per slot shows in the last bit
    n = 40
    m = n + max(a, b)
    x = rng.standard_normal(m)
    w = _weights(rng, n)
    f = lambda x: x[a:a + n] * x[b:b + n] + x[a:a + n] ** 2
    ct = rt.compile(rt.JacobianTape(f, x))
    ops_used = [line.split("=")[1].split("(")[0].strip()
                for line in ct.disassemble().splitlines()[1:]]
    assert "MUL_VV" in ops_used
    for k in range(5):
        xk = x + 0.1 * k
        d = np.zeros(m)
        d[a:a + n] += w * 1.0 * (2.0 * xk[a:a + n])     # ADD's reverse (g * 1.0), then SQUARE's
        d[a:a + n] = np.where(w != 0.0, d[a:a + n], 0.0)
        expected = _one_loop_mul_reverse(d, w * 1.0, xk, a, b, n)
        assert_bits(ct.vjp(xk, w), expected)


def _refused(ct, row, col, val):
    state = ct.program.to_state()
    code = state["code"].copy()
    code[row, col] = val
    state["code"] = code
    from revtape.runtime.compiled import CompiledTape
    with pytest.raises(rt.VerificationError) as e:
        CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
    return str(e.value)


def test_verifier_refuses_an_output_that_overlaps_its_operand():
    x = np.linspace(0.1, 1.0, 8)
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(np.sin(x * np.exp(x))), x))
    code = ct.program.code
    names = [line.split("=")[1].split("(")[0].strip()
             for line in ct.disassemble().splitlines()[1:]]
    k_exp, k_mul, k_sin = names.index("EXP"), names.index("MUL_VV"), names.index("SIN")
    exp_out, mul_out = code[k_exp, 2], code[k_mul, 2]
    # in place (out == a), shifted by one (partial overlap), and over operand b
    assert "overlaps operand a" in _refused(ct, k_sin, 2, mul_out)
    assert "overlaps operand a" in _refused(ct, k_sin, 2, mul_out + 1)
    assert "overlaps operand b" in _refused(ct, k_mul, 2, exp_out + 3)
    assert f"instruction {k_sin}" in _refused(ct, k_sin, 2, mul_out)
    # scalar code too: the verifier cannot tell which instructions are scalar
    cs = rt.compile(rt.GradientTape(lambda x: np.sin(np.exp(x[0]) * x[1]), x))
    names = [line.split("=")[1].split("(")[0].strip()
             for line in cs.disassemble().splitlines()[1:]]
    k_sin = names.index("SIN")
    assert "overlaps operand a" in _refused(cs, k_sin, 2, cs.program.code[k_sin, 3])


def test_sum_is_numpys_pairwise_sum_bit_for_bit(rng):
    # REDUCE_SUM's kernel reproduces numpy's 8-accumulator pairwise blocks;
    # vectorised, each accumulator must still add its own elements in order
    for n in list(range(1, 300)) + [1000, 4099, 10000]:
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, size=n)
        ct = rt.compile(rt.GradientTape(lambda x: np.sum(x), x))
        assert_bits(ct.value_and_gradient(x)[0], np.sum(x))
        rows = rt.compile(rt.JacobianTape(lambda x: np.sum(x.reshape(-1, n), axis=1),
                                          np.concatenate([x, x[::-1]])))
        assert_bits(rows.forward(np.concatenate([x, x[::-1]])),
                    np.sum(np.concatenate([x, x[::-1]]).reshape(-1, n), axis=1))


@pytest.mark.parametrize("b,c", [(0, 0), (1, 0), (0, 1), (3, 0), (0, 40)])
def test_where_adjoints_add_in_the_one_loop_order(b, c, rng):
    n = 40
    m = n + max(b, c)
    x = rng.standard_normal(m)
    w = _weights(rng, n)
    f = lambda x: np.where(x[:n] > 0.0, x[b:b + n], x[c:c + n]) + x[b:b + n] ** 2
    ct = rt.compile(rt.JacobianTape(f, x))
    assert "WHERE_VV" in ct.disassemble()
    for k in range(4):
        xk = x + 0.3 * k
        d = np.zeros(m)
        d[b:b + n] += np.where(w != 0.0, w * (2.0 * xk[b:b + n]), -0.0)
        for i in range(n):                  # WHERE's reverse, element by element
            if w[i] != 0.0:
                d[(b if xk[i] > 0.0 else c) + i] += w[i]
        assert_bits(ct.vjp(xk, w), d)
        assert_bits(ct.forward(xk), np.where(xk[:n] > 0.0, xk[b:b + n], xk[c:c + n])
                    + xk[b:b + n] ** 2)


@pytest.mark.parametrize("form", ["VS", "SV"])
def test_where_with_a_scalar_branch_sums_its_adjoint_left_to_right(form, rng):
    n = 37
    x = rng.standard_normal(n + 1) * 10.0 ** rng.integers(-3, 4, size=n + 1)
    w = _weights(rng, n) * 10.0 ** rng.integers(-3, 4, size=n)
    if form == "VS":
        f = lambda x: np.where(x[:n] > 0.0, x[:n], x[n])
    else:
        f = lambda x: np.where(x[:n] > 0.0, x[n], x[:n])
    ct = rt.compile(rt.JacobianTape(f, x))
    assert f"WHERE_{form}" in ct.disassemble()
    vec = (x[:n] > 0.0) if form == "VS" else (x[:n] <= 0.0)
    d = np.zeros(n + 1)
    d[:n] = np.where(vec & (w != 0.0), w, 0.0) + 0.0
    s = 0.0
    for i in range(n):
        if w[i] != 0.0 and not vec[i]:
            s += w[i]
    d[n] += s
    assert_bits(ct.vjp(x, w), d)


def test_clip_kernel_at_the_bounds_and_nan_bounds(rng):
    n = 37
    x = rng.uniform(-2.0, 2.0, size=n)
    x[3], x[7], x[11] = -1.0, 1.0, 1.0         # exactly at the bounds: zero gradient
    w = _weights(rng, n)
    ct = rt.compile(rt.JacobianTape(lambda x: np.clip(x, -1.0, 1.0), x))
    assert "CLIP" in ct.disassemble()
    y = np.clip(x, -1.0, 1.0)
    assert_bits(ct.forward(x), y)
    assert_bits(ct.vjp(x, w), np.where((w != 0.0) & (y != -1.0) & (y != 1.0), w, 0.0) + 0.0)
    # lo > hi gives hi everywhere, as np.clip
    ct2 = rt.compile(rt.JacobianTape(lambda x: np.clip(x, 1.0, -1.0), x))
    assert_bits(ct2.forward(x), np.clip(x, 1.0, -1.0))
