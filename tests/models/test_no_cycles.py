"""Nothing revtape makes needs the cyclic collector: with gc disabled (as
latency-sensitive samplers run), dropped rt.grad variants and LogDensity
objects are freed by reference counting alone, so memory does not grow."""

import gc
import tracemalloc
import weakref

import numpy as np

import revtape as rt


def f(x):
    return np.sum(np.sin(x) * x) + x[0] ** 2


def _garbage_cycles(make, n):
    """Cycles the collector finds after n rounds of make() with gc disabled."""
    gc.collect()
    gc.disable()
    try:
        for i in range(n):
            make(i)
        return gc.collect()
    finally:
        gc.enable()


def _grad_variant(i):
    g = rt.grad(f)
    g(np.ones(2 + i % 7))          # one variant (a guard function, a compiled tape)


def _log_density(i):
    ld = rt.LogDensity(lambda x: -0.5 * np.sum((x - i) ** 2), np.zeros(3))
    ld.logdensity_and_gradient(np.ones(3))


def test_rt_grad_variants_are_freed_without_the_collector():
    assert _garbage_cycles(_grad_variant, 1000) == 0


def test_evicted_variants_of_one_rt_grad_are_freed_without_the_collector():
    g = rt.grad(f)

    def make(i):
        g(np.ones(1 + i % 40))     # more shapes than the variant cache keeps: evictions
    assert _garbage_cycles(make, 400) == 0
    grad = g(np.array([0.5, -1.0]))
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(grad, np.sin(x) + x * np.cos(x) + np.array([2 * x[0], 0.0]))


def test_dropped_log_densities_are_freed_without_the_collector():
    assert _garbage_cycles(_log_density, 1000) == 0


def test_a_dropped_log_density_dies_at_once_and_memory_stays_flat():
    gc.disable()
    try:
        ld = rt.LogDensity(lambda x: -0.5 * np.sum(x ** 2), np.zeros(4))
        ld.logdensity_and_gradient(np.ones(4))
        tapes = [weakref.ref(t) for t in ld._tapes]
        dead = weakref.ref(ld)
        del ld
        assert dead() is None and all(t() is None for t in tapes)
        for i in range(50):                       # warm up the allocator
            _log_density(i)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(300):
            _log_density(i)
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    finally:
        gc.enable()
    assert grown < 256 * 1024, f"{grown} bytes kept by 300 dropped LogDensity objects"
