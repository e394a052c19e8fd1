"""revtape.interop.nutpie_model: nutpie samples a LogDensity with a pytree x0
and a bijector, from its own Rust threads, recovering known moments; the
variables follow x0's sorted keys; the compiled copies are made per chain
running at once, not per call."""

import numpy as np
import pytest

import revtape as rt
from revtape import bijectors as B
from revtape import interop
from revtape.interop import nutpie_bridge

nutpie = pytest.importorskip("nutpie", reason="nutpie is not installed "
                                              "(pip install \"revtape[nutpie]\")")


def logp(p):
    # a ~ N(2, 1), b ~ N([-1, 3], 0.5), tau ~ Exponential(1) (mean 1)
    return (-0.5 * (p["mu"] - 2.0) ** 2 - 2.0 * np.sum((p["b"] - np.array([-1.0, 3.0])) ** 2)
            - p["tau"])


def _ld():
    return rt.LogDensity(logp, {"tau": 1.0, "mu": 0.0, "b": np.zeros(2)},
                         bijectors={"tau": B.exp})


def test_variables_follow_the_leaf_order():
    assert nutpie_bridge.variables(_ld()) == [("b", (2,)), ("mu", ()), ("tau", ())]


def test_nutpie_recovers_known_moments():
    ld = _ld()
    model = interop.nutpie_model(ld)
    trace = nutpie.sample(model, draws=1000, tune=500, chains=2, seed=1, cores=2,
                          progress_bar=False)
    post = trace.posterior
    assert list(post.data_vars)[:3] == ["b", "mu", "tau"]
    assert float(post["mu"].mean()) == pytest.approx(2.0, abs=0.2)
    np.testing.assert_allclose(post["b"].mean(dim=("chain", "draw")).values, [-1.0, 3.0],
                               atol=0.1)
    assert float(post["tau"].mean()) == pytest.approx(1.0, abs=0.2)
    assert float(post["tau"].min()) > 0
    # thousands of calls from nutpie's threads: a copy per chain at most
    assert ld.copies_made <= 3


def test_nutpie_model_refuses_a_function():
    with pytest.raises(rt.InputError):
        interop.nutpie_model(logp)
