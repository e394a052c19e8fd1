"""Smoke test of an installed revtape (a wheel in a fresh venv, run from a
directory without the source tree): the native tier finds its C in the
package, builds a hot tape both ways (native=True, and native="auto" once it
is hot), and the results are bit for bit the VM's.

    python tools/smoke_installed.py          # exit status 0: all good
"""
import os
import pathlib
import sys
import tempfile

import numpy as np


def main():
    with tempfile.TemporaryDirectory() as cache:
        os.environ["REVTAPE_CACHE_DIR"] = cache        # a cold cache: everything is built
        os.environ["REVTAPE_NATIVE"] = "1"
        os.environ["REVTAPE_NATIVE_CALLS"] = "20"
        import revtape as rt
        from revtape.runtime import native
        here = pathlib.Path(rt.__file__).resolve().parent
        assert "site-packages" in here.parts or os.environ.get("SMOKE_ANY_PATH"), (
            f"revtape was imported from {here}, not from an installation")
        assert native.CSRC == here / "_csrc", f"the C sources come from {native.CSRC}"

        def f(x):
            mu, tau = x[0], np.exp(x[1])
            theta = mu + tau * x[2:]
            y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
            s = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
            return -0.5 * np.sum(((y - theta) / s) ** 2) - 0.5 * np.sum(x[2:] ** 2) + x[1]

        x0 = np.linspace(-0.5, 0.7, 10)
        tape = rt.GradientTape(f, x0)
        vm = rt.compile(tape, native=False)
        nt = rt.compile(tape, native=True)
        auto = rt.compile(tape)
        x = x0 + 0.3
        for _ in range(40):
            auto.value_and_gradient(x)
        assert auto.wait_native(600), f"native='auto' ended {auto.native_state}"
        want = vm.value_and_gradient(x)
        for name, ct in (("native=True", nt), ("native='auto'", auto)):
            assert ct.native_state == "native", (name, ct.native_state)
            v, g = ct.value_and_gradient(x)
            assert v == want[0] and np.array_equal(g, want[1]), f"{name} differs from the VM"
        print(f"revtape {rt.__version__} from {here}: native=True and native='auto' are "
              f"native and bit-identical to the VM ({nt._native_path.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
