"""The package is typed (py.typed, PEP 561): a user's program on the public API
passes ``mypy --strict`` and runs; one that passes a wrong type fails with the
errors a user needs; every public name has a type a checker can see, and
every public function and method is annotated.

mypy runs as a user's would, with revtape found on the path as an installed
package (the checkout's src/ on PYTHONPATH: mypy reads the package but reports
no errors inside it, as for any installed library).
"""

import inspect
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import tomllib

import pytest

import revtape as rt

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    """One cache for the module's runs: numpy's and revtape's types are read once."""
    return tmp_path_factory.mktemp("mypy_cache")


def _mypy(tmp_path, cache, name, text):
    """Run mypy --strict on one script in tmp_path: (exit code, output)."""
    pytest.importorskip("mypy", reason="mypy is not installed (it is in the test extra)")
    script = tmp_path / name
    script.write_text(textwrap.dedent(text))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                        "--cache-dir", str(cache), "--hide-error-context",
                        "--show-error-codes", name],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


USER_OK = '''"""A user's program on revtape's public API: mypy --strict passes it, and it runs."""
from __future__ import annotations

import copy
import pickle
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

import revtape as rt
from revtape.autograd import grad as ag_grad

Vec = NDArray[np.float64]


def f(x: Vec) -> Any:
    return np.sum(np.sin(x) * x) + rt.special.gammaln(x[0] + 2.0)


def logp(x: Vec) -> Any:
    return np.sum(rt.stats.norm.logpdf(x, loc=0.5, scale=2.0)) + rt.stats.gamma.logpdf(x[0] ** 2 + 1.0, 2.0)


x0 = np.array([0.3, -0.2, 1.5])

tape: rt.GradientTape = rt.GradientTape(f, x0)
ctape: rt.CompiledTape = rt.compile(tape, guards=True, native=False)
value, g = ctape.value_and_gradient(x0)
out = np.empty(3)
ctape.gradient(x0, out=out)
fwd = ctape.forward(x0)


def gradient_for_scipy(x: Vec) -> Vec:
    return ctape.gradient(x)              # an array's gradient is an array


def value_for_scipy(x: Vec) -> float:
    return ctape.value_and_gradient(x)[0]


run = ctape.bind(x0.copy(), np.empty(3))
v_bound: float = run()
values, grads = ctape.batch_value_and_gradient(np.stack([x0, x0]))
H = ctape.hessian(x0)
hv = ctape.hvp(x0, np.ones(3))
state: str = ctape.native_state
assert not ctape.wait_native(0.0)
assert ctape.stats()["program_instructions"] >= 1

g1: Vec = rt.gradient(f, x0)
v1, g2 = rt.value_and_gradient(f, x0)
J = rt.jacobian(lambda x: np.sin(x) * x, x0)
H2 = rt.hessian(f, x0)
gf = rt.grad(f)
g3 = gf(x0)
vg = rt.value_and_grad(logp, argnums=0, on_stale="raise", cache_size=None)
v3, g4 = vg(x0)
info = gf.cache_info()
gf.clear_cache()
jv = rt.jvp(f, (x0,), (np.ones(3),))
y, vjp_fun = rt.vjp(lambda x: np.sin(x), x0)
(ct,) = vjp_fun(np.ones(3))
Hf = rt.hessian(f)
H3 = Hf(x0)

t = rt.Tape()
a = t.track(2.0)
t.finish(a * a + 1.0)
assert t.recording is False and rt.istracked(t.output)
assert rt.value(t.output) == 5.0 and rt.tape_of(t.output) is t
assert rt.tape_of(1.0) is rt.NULL_TAPE
listing: list[str] = t.listing()
ht = rt.HessianTape(f, x0)
jt = rt.JacobianTape(lambda x: x * 2.0, x0)


@rt.primitive
def cube(x: Vec) -> Vec:
    return x ** 3


rt.defvjp(cube, lambda ans, x: lambda g: 3.0 * x ** 2 * g)
rt.defjvp(cube, lambda g, ans, x: 3.0 * x ** 2 * g)
g5 = rt.grad(lambda x: np.sum(cube(x)))(x0)
g6 = rt.grad(lambda x: np.sum(rt.stop_gradient(x) * x))(x0)


class Point(NamedTuple):
    x: float
    y: float


class Pair:
    def __init__(self, a: float, b: float) -> None:
        self.a, self.b = a, b


rt.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda aux, ch: Pair(*ch))
gp = rt.grad(lambda p: p.a * p.b)(Pair(2.0, 3.0))
gq = rt.grad(lambda p: p.x * p.y)(Point(2.0, 3.0))
arr = rt.array([1.0, 2.0])

ld = rt.LogDensity(logp, x0, names=["a", "b", "c"])
lv, lg = ld.logdensity_and_gradient(x0)
total: float = ld.logdensity(x0) + lv
dim: int = ld.dimension
names: list[str] = ld.names
neg = ld.negative()
nv: float = neg.logdensity(x0)
ld2 = copy.deepcopy(ld)
ld3 = pickle.loads(pickle.dumps(ld))
b = rt.bijectors.interval(0.0, 1.0)
u = b.forward(0.3) + rt.bijectors.exp.forward_log_det_jacobian(0.2)
s1 = rt.special.expit(np.zeros(2))
s2: float = rt.special.gammaln(3.5)
s3 = rt.special.xlogy(2.0, 3.0) + rt.special.logsumexp(np.zeros(3))
ag = ag_grad(lambda x: np.sum(x ** 2))(x0)

try:
    rt.compile(rt.Tape())
except rt.RevtapeError as e:
    message: str = str(e)
'''


def test_the_package_ships_py_typed():
    assert (SRC / "revtape" / "py.typed").is_file()
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["revtape"]
    assert "include src/revtape/py.typed" in (ROOT / "MANIFEST.in").read_text()
    assert any("mypy" in dep for dep in meta["project"]["optional-dependencies"]["test"])


def test_a_user_program_passes_mypy_strict_and_runs(tmp_path, mypy_cache):
    code, out = _mypy(tmp_path, mypy_cache, "user_ok.py", USER_OK)
    assert code == 0, out
    # the types it was checked against are the ones it runs with
    r = subprocess.run([sys.executable, "user_ok.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert r.returncode == 0, r.stdout + r.stderr


USER_AUTOGRAD = '''"""A program written for autograd, with its imports renamed."""
from typing import Any

import revtape.autograd.numpy as np
from revtape.autograd import grad, hessian, value_and_grad
from revtape.autograd.misc import flatten
from revtape.autograd.misc.optimizers import adam
from revtape.autograd.test_util import check_grads
import revtape.autograd.scipy.special as sps


def f(x: Any) -> Any:
    return np.sum(np.tanh(x) ** 2) + sps.gammaln(x[0] + 2.0)


x = np.array([0.1, 0.2])
g = grad(f)(x)
v, g2 = value_and_grad(f)(x)
H = hessian(f)(x)
check_grads(f, modes=["rev"], order=1)(x)
flat, unflat = flatten({"a": np.ones(2)})
xo = adam(lambda x, i: grad(f)(x), np.ones(2), num_iters=3)
assert H.shape == (2, 2) and xo.shape == (2,)
'''


def test_an_autograd_program_passes_mypy_strict_and_runs(tmp_path, mypy_cache):
    code, out = _mypy(tmp_path, mypy_cache, "user_autograd.py", USER_AUTOGRAD)
    assert code == 0, out
    r = subprocess.run([sys.executable, "user_autograd.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert r.returncode == 0, r.stdout + r.stderr


USER_WRONG = """\
import numpy as np
import revtape as rt

def f(x: np.ndarray) -> float:
    return 0.0

x0 = np.ones(3)
tape = rt.GradientTape(f, x0)
rt.compile(f)
rt.compile(tape, native="yes")
rt.grad(f, argnums="0")
rt.grad(f, on_stale="ignore")
rt.grad(3.0)
ld = rt.LogDensity(f, x0, names=3)
n: str = ld.dimension
v: str = rt.compile(tape).value_and_gradient(x0)[0]
rt.stats.norm.logpdf(x0, sigma=2.0)
rt.bijectors.interval(0.0)
"""

# line -> (error code, what the message must say)
EXPECTED = {
    9: ("arg-type", 'Argument 1 to "compile" has incompatible type'),
    10: ("arg-type", 'Argument "native" to "compile" has incompatible type "Literal[\'yes\']"'),
    11: ("arg-type", 'Argument "argnums" to "grad" has incompatible type "str"'),
    12: ("arg-type", 'Argument "on_stale" to "grad" has incompatible type'),
    13: ("arg-type", 'Argument 1 to "grad" has incompatible type "float"'),
    14: ("arg-type", 'Argument "names" to "LogDensity" has incompatible type "int"'),
    15: ("assignment", '(expression has type "int", variable has type "str")'),
    16: ("assignment", '(expression has type "float", variable has type "str")'),
    17: ("call-arg", 'Unexpected keyword argument "sigma" for "logpdf"'),
    18: ("call-arg", 'Missing positional argument "b" in call to "interval"'),
}


def test_a_program_passing_wrong_types_fails_mypy(tmp_path, mypy_cache):
    code, out = _mypy(tmp_path, mypy_cache, "user_wrong.py", USER_WRONG)
    assert code == 1, out
    errors = {}
    for m in re.finditer(r"^user_wrong\.py:(\d+): error: (.*)  \[([a-z-]+)\]$", out, re.M):
        errors.setdefault(int(m.group(1)), []).append((m.group(3), m.group(2)))
    assert sorted(errors) == sorted(EXPECTED), out
    for line, (code_, text) in EXPECTED.items():
        assert any(c == code_ and text in msg for c, msg in errors[line]), (line, errors[line])


def _public_names():
    """(qualified name, object) of every public name: rt.*, the namespaces'
    names, revtape.interop's and revtape.autograd's."""
    import revtape.autograd as ag
    import revtape.interop as interop
    spaces = [("rt", rt), ("rt.special", rt.special), ("rt.stats", rt.stats),
              ("rt.bijectors", rt.bijectors), ("revtape.interop", interop),
              ("revtape.autograd", ag)]
    for prefix, mod in spaces:
        for n in mod.__all__:
            if prefix == "rt" and n in ("special", "stats", "bijectors"):
                continue
            yield f"{prefix}.{n}", n, prefix


def test_every_public_name_has_a_type_a_checker_sees(tmp_path, mypy_cache):
    names = list(_public_names())
    lines = ["import revtape as rt", "import revtape.interop", "import revtape.autograd", ""]
    lines += [f"reveal_type({q})" for q, _, _ in names]
    code, out = _mypy(tmp_path, mypy_cache, "reveal.py", "\n".join(lines) + "\n")
    assert code == 0, out
    revealed = re.findall(r"^reveal\.py:(\d+): note: Revealed type is \"(.*)\"$", out, re.M)
    assert len(revealed) == len(names), out
    untyped = [names[int(ln) - 5][0] for ln, t in revealed if t == "Any"]
    assert not untyped, f"public names a type checker sees as Any: {untyped}"


def _unannotated(fn, skip_first):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def _classes():
    import numpy as np
    f = lambda x: np.sum(x * x)  # noqa: E731
    ld = rt.LogDensity(f, np.ones(2))
    return [rt.Tape, rt.GradientTape, rt.JacobianTape, rt.HessianTape, rt.CompiledTape,
            rt.LogDensity, type(ld.negative()), type(rt.grad(f)), type(rt.hessian(f)),
            rt.bijectors.Bijector, *{type(getattr(rt.bijectors, n)) for n in rt.bijectors.__all__},
            *{type(getattr(rt.stats, n)) for n in rt.stats.__all__}]


def test_every_public_function_and_method_is_annotated():
    missing = []
    for qual, n, prefix in _public_names():
        obj = getattr(rt if prefix == "rt" else sys.modules[
            {"rt.special": "revtape.special", "rt.stats": "revtape.stats",
             "rt.bijectors": "revtape.bijectors"}.get(prefix, prefix)], n)
        # a row of rt.special (its type is declared, see the reveal test) and
        # autograd's operators (typed by the decorator that makes them) carry
        # no signature of their own
        if inspect.isfunction(obj) and not hasattr(obj, "op") and "__wrapped__" not in vars(obj):
            missing += [f"{qual}: {m}" for m in _unannotated(obj, False)]
    for cls in _classes():
        for n, attr in vars(cls).items():
            if n.startswith("_") and n != "__init__" and n != "__call__":
                continue
            if isinstance(attr, property):
                if attr.fget.__annotations__.get("return") is None:
                    missing.append(f"{cls.__qualname__}.{n}: return")
            elif inspect.isfunction(attr):
                missing += [f"{cls.__qualname__}.{n}: {m}" for m in _unannotated(attr, True)]
    assert not missing, "unannotated: " + ", ".join(missing)
