"""`import revtape` does not import scipy; scipy's functions still work on
tracked values once the program imports scipy (core/lazyscipy.py).

Each check runs in a fresh interpreter: in this one, scipy is long imported."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

SRC = str(pathlib.Path(__file__).resolve().parents[2] / "src")


def run(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_numpy_only_use_never_imports_scipy():
    out = run("""
import sys
import numpy as np
import revtape as rt
assert 'scipy' not in sys.modules, 'import revtape imported scipy'
x = np.array([0.3, -1.2, 2.0])
g = rt.grad(lambda x: np.sum(np.exp(x) * np.sin(x)))(x)
np.testing.assert_allclose(g, np.exp(x) * (np.sin(x) + np.cos(x)), rtol=1e-13)
ct = rt.compile(rt.GradientTape(lambda x: np.sum(np.tanh(x) ** 2), x), native=False)
ct.value_and_gradient(x)
assert not [m for m in sys.modules if m.split('.')[0] == 'scipy'], 'a numpy-only gradient imported scipy'
print('ok')
""")
    assert out.strip() == "ok"


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy is not installed")
def test_scipy_imported_after_revtape_dispatches():
    out = run("""
import numpy as np
import revtape as rt
import scipy.special as sps              # after revtape: the routing installs now
from scipy.linalg import solve_triangular
x = np.array([0.7, 1.5, 3.25])
g = rt.grad(lambda x: np.sum(sps.gammaln(x)))(x)
np.testing.assert_allclose(g, sps.digamma(x), rtol=1e-13)      # d gammaln = digamma
g = rt.grad(lambda x: sps.logsumexp(x))(x)                        # a routed Python function
np.testing.assert_allclose(g, np.exp(x) / np.sum(np.exp(x)), rtol=1e-14)
g = rt.grad(lambda x: sps.gammainc(2.0, x))(1.5)                  # d/dx P(a, x)
np.testing.assert_allclose(g, 1.5 * np.exp(-1.5), rtol=1e-13)      # x^(a-1) e^-x / Gamma(a)
L = np.array([[2.0, 0, 0], [1, 3, 0], [0.5, -1, 4]])
g = rt.grad(lambda b: np.sum(solve_triangular(L, b, lower=True)))(x)
np.testing.assert_allclose(g, np.linalg.solve(L.T, np.ones(3)), rtol=1e-13)
print('ok')
""")
    assert out.strip() == "ok"


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy is not installed")
def test_scipy_imported_before_revtape_dispatches():
    out = run("""
import numpy as np
import scipy.special as sps
import revtape as rt
x = np.array([0.7, 1.5])
np.testing.assert_allclose(rt.grad(lambda x: np.sum(sps.gammaln(x)))(x), sps.digamma(x), rtol=1e-13)
print('ok')
""")
    assert out.strip() == "ok"


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy is not installed")
def test_rt_special_imports_scipy_at_first_use():
    # the reference forward of a scipy-backed row is scipy's own function
    out = run("""
import sys
import numpy as np
import revtape as rt
x = np.array([0.7, 1.5])
tape = rt.GradientTape(lambda x: np.sum(rt.special.gammaln(x)), x)
assert 'scipy.special' in sys.modules
import scipy.special as sps
v, g = tape.value_and_gradient(x)
assert v == np.sum(sps.gammaln(x)), v
print('ok')
""")
    assert out.strip() == "ok"
