"""Smoke test of an installed revtape (a wheel in a fresh environment).

Run it from a directory outside the source tree (.ci/run does): it fails
when the `revtape` it imports comes from a checkout, so a passing run shows
the installed package works on its own.  It checks the import, a gradient
against its analytic formula, a compiled replay bit-identical to the
reference replay, and, when the installed package can build native code, that
a hot tape turns native with the VM's bits.  Exit status 0 means all ran.

    python tools/smoke_installed.py
"""

import os
import pathlib
import sys
import warnings

import numpy as np


def f(x):
    # exp, log1p, sin, a sum and a product: a few kernels of each kind
    return np.sum(np.exp(0.1 * x) * np.sin(x)) + np.log1p(x @ x)


def f_grad(x):
    # d/dx sum(exp(0.1 x) sin x) + log1p(x.x)
    return np.exp(0.1 * x) * (0.1 * np.sin(x) + np.cos(x)) + 2 * x / (1 + x @ x)


def check_installed(rt):
    where = pathlib.Path(rt.__file__).resolve()
    print("revtape", rt.__version__, "from", where.parent)
    if "site-packages" not in where.parts and "dist-packages" not in where.parts:
        sys.exit(f"revtape was imported from {where}, not from an installed package")
    if (where.parents[1] / "setup.py").exists():
        sys.exit(f"revtape at {where} sits in a source tree")


def check_gradient(rt, x):
    g = rt.grad(f)(x)
    np.testing.assert_allclose(g, f_grad(x), rtol=1e-12, atol=1e-14)
    print("gradient: matches the analytic formula")


def check_compiled(rt, x):
    tape = rt.GradientTape(f, x)
    ctape = rt.compile(tape, native=False)
    for xi in (x, x[::-1].copy(), x + 0.25):
        v_ref, g_ref = tape.value_and_gradient(xi)
        v_vm, g_vm = ctape.value_and_gradient(xi)
        assert v_vm == v_ref and np.array_equal(g_vm, g_ref), (v_vm, v_ref, g_vm - g_ref)
    print("compiled: C VM bit-identical to the reference replay")


def check_native(rt, x):
    """A hot tape (native="auto") turns native in the background, same bits."""
    from revtape.runtime import native
    reason = native.unavailable_reason() if hasattr(native, "unavailable_reason") else None
    if reason is None:
        try:
            rt.compile(rt.GradientTape(f, x), native=True)
        except rt.RevtapeError as e:   # NativeCompileError: no compiler, no C sources
            reason = str(e)
    if reason is not None:
        print(f"native: SKIPPED ({reason})")
        return
    tape = rt.GradientTape(f, x)
    vm = rt.compile(tape, native=False)
    hot = rt.compile(tape, native="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # a silent fall-back would be a failure here
        for i in range(3000):
            hot.value_and_gradient(x + 1e-3 * i)
        assert hot.wait_native(120), f"a hot tape did not turn native: {hot.native_state}"
    for xi in (x, x + 0.5, -x):
        v_n, g_n = hot.value_and_gradient(xi)
        v_vm, g_vm = vm.value_and_gradient(xi)
        assert v_n == v_vm and np.array_equal(g_n, g_vm), (v_n, v_vm)
    print("native: a hot tape turned native, bit-identical to the VM")


def main():
    if os.path.exists("setup.py") and os.path.isdir("src/revtape"):
        sys.exit("run this from outside the source tree")
    import revtape as rt
    check_installed(rt)
    x = np.linspace(-1.0, 2.0, 7)
    check_gradient(rt, x)
    check_compiled(rt, x)
    check_native(rt, x)
    print("smoke test: ok")


if __name__ == "__main__":
    main()
