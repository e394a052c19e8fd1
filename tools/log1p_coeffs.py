"""Where csrc/kernels/vecmath.h's rt_log1p constants come from, and its accuracy.

    python tools/log1p_coeffs.py            # the fit: P0..P6, ln2 split, seams
    python tools/log1p_coeffs.py --check    # max ulp error of the VM's log1p
                                            # against mpmath (needs a built VM)

Development tool only (needs mpmath; revtape itself does not).  P is a
Chebyshev fit (mpmath.chebyfit, near-minimax) of
g(z) = (2 atanh(sqrt z) / sqrt z - 2) / z on [0, 0.1716^2 * 1.0005]: with
s = f / (2 + f), z = s^2 and |f| bounded by the reduction to
m in [sqrt(2)/2, sqrt(2)), |s| <= 0.17158, log(1 + f) = 2s + s z g(z)."""

import math
import sys

import mpmath as mp

mp.mp.dps = 60


def g(z):
    if z == 0:
        return mp.mpf(2) / 3
    r = mp.sqrt(z)
    return (2 * mp.atanh(r) / r - 2) / z


def fit():
    zmax = mp.mpf(0.1716) ** 2 * mp.mpf("1.0005")
    poly, err = mp.chebyfit(g, [0, zmax], 7, error=True)
    print("max |P - g| on the interval:", mp.nstr(err, 5))
    for i, c in enumerate(poly[::-1]):
        print(f"P{i} = {float(c)!r}")
    ln2 = mp.log(2)
    hi = math.ldexp(math.floor(math.ldexp(float(ln2), 42)), -42)     # 42 fraction bits
    print("LN2_HI =", hi.hex(), " LN2_LO =", float(ln2 - hi).hex())
    print("seams: sqrt(2)/2 - 1 =", repr(float(mp.sqrt(2) / 2 - 1)),
          " sqrt(2) - 1 =", repr(float(mp.sqrt(2) - 1)))


def check(n=100_000, seed=5):
    import numpy as np
    import revtape as rt
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.exp2(rng.uniform(-60, 1023, n)), -np.exp2(rng.uniform(-60, 0, n)),
                        rng.uniform(-0.3, 0.42, n), rng.uniform(-0.6, 3, n),
                        rng.uniform(0.3, 0.5, n), rng.uniform(-0.35, -0.25, n)])
    ct = rt.compile(rt.JacobianTape(np.log1p, np.full(len(x), 0.5)), native=False)
    got = ct.forward(x)
    worst, at, libm = 0.0, None, 0.0
    for t, v in zip(x.tolist(), got.tolist()):
        true = mp.log1p(mp.mpf(t))
        ulp = math.ulp(float(true))
        e = abs(float((mp.mpf(v) - true) / ulp))
        libm = max(libm, abs(float((mp.mpf(math.log1p(t)) - true) / ulp)))
        if e > worst:
            worst, at = e, t
    print(f"{len(x)} points: rt_log1p max {worst:.3f} ulp (at x = {at!r}); libm max {libm:.3f} ulp")


if __name__ == "__main__":
    check() if "--check" in sys.argv else fit()
