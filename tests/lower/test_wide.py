"""Wide programs (src/revtape/lower/wide.py): batched replay of scalar code, B
rows at a time, gives the bits of single replays; programs with guards,
callbacks or too many slots take the row loop instead."""

import numpy as np
import pytest

import revtape as rt
from revtape.bench import workloads as W

import conftest as H     # module-level primitives: spawned workers import them by name
from conftest import same_bits, single_replays as _rows


@pytest.mark.parametrize("name,params,wide", [
    ("eight-schools", {}, True),                    # scalar code: AXPY, CSUM, SQUARE, DIV
    ("rosenbrock-loop", {"n": 30}, True),           # SQDIFF, AXPY, CSUM
    ("logreg", {"N": 50, "D": 4}, False),           # array instructions: the row loop
    ("chain", {"L": 50}, True),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_wide_and_row_paths_give_the_bits_of_single_replays(name, params, wide, threads):
    wl = W.ALL[name](**params)
    ctape = rt.compile(rt.GradientTape(wl.f, wl.x0))
    rng = np.random.default_rng(9)
    for k in (3, 16, 64, 131):                       # below, at and past the wide minimum
        X = wl.x0 + 0.3 * rng.normal(size=(k,) + wl.x0.shape)
        v_rows, g_rows = _rows(ctape, X)
        v, g = ctape.batch_value_and_gradient(X, threads=threads)
        assert same_bits(v, v_rows) and same_bits(g, g_rows)
        assert same_bits(ctape.batch_forward(X, threads=threads), v_rows)
    assert bool(ctape._wide) is wide


def test_programs_with_guards_or_callbacks_take_the_row_loop():
    def f(x):
        s = 0.0
        for xi in x:
            s = s + (xi * xi if xi > 0 else -xi)
        return s

    ctape = rt.compile(rt.GradientTape(f, np.ones(3)))
    X = np.abs(np.random.default_rng(10).normal(size=(40, 3))) + 0.1
    v, g = ctape.batch_value_and_gradient(X)
    assert same_bits(v, _rows(ctape, X)[0]) and ctape._wide is False
    cb = rt.compile(rt.GradientTape(lambda x: H.logsumexp(x) * x[0], np.ones(3)))
    v, g = cb.batch_value_and_gradient(X)
    assert same_bits(g, _rows(cb, X)[1]) and cb._wide is False


def test_long_scalar_programs_take_the_row_loop():
    wl = W.chain(L=20000)                       # 60000 slots: 64 lanes would be 30 MB an arena
    ctape = rt.compile(rt.GradientTape(wl.f, wl.x0))
    X = wl.x0 + np.linspace(0, 0.1, 16)[:, None]
    v, g = ctape.batch_value_and_gradient(X)
    assert ctape._wide is False
    assert same_bits(v, _rows(ctape, X)[0])
