"""The benchmark's HMC sampler (src/revtape/bench/hmc.py)."""


def test_hmc_sampler_is_deterministic():
    from revtape.bench import workloads as W
    from revtape.bench.hmc import hmc

    wl = W.eight_schools()
    a, acc = hmc(wl.numpy_vg, wl.x0, 50)
    b, _ = hmc(wl.numpy_vg, wl.x0, 50)
    assert a.shape == (50, 10) and (a == b).all()
    assert 0.5 < acc <= 1.0
