"""Ctrl-C during a replay that runs a custom primitive's Python callback: the
call ends with KeyboardInterrupt and the tape keeps serving right results;
an interrupted replay never returns a number."""

import signal
import sys
import threading
import time

import numpy as np
import pytest

import revtape as rt


@rt.primitive
def cube_sum(x):
    return np.sum(x ** 3)


rt.defvjp(cube_sum, lambda ans, x: lambda g: 3.0 * g * x ** 2)


def model(x):
    # two PYCALLs: the second is entered by C after the first returned
    return cube_sum(x) + cube_sum(2.0 * x) + np.sum(x)


def expected(x):
    return 9.0 * np.sum(x ** 3) + np.sum(x), 27.0 * x ** 2 + 1.0


def _sigint_at_callback_entry(nth):
    """A trace function that delivers SIGINT as C enters the nth Python
    callback: the KeyboardInterrupt surfaces in the callback's frame before
    its first statement runs."""
    count = [0]

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "rt_py_callback":
            count[0] += 1
            if count[0] == nth:
                sys.settrace(None)
                signal.raise_signal(signal.SIGINT)
        return None
    return tracer


@pytest.mark.parametrize("entry,nth", [(e, n) for e in ("value_and_gradient", "bind")
                                       for n in (1, 2, 3, 4)]
                         + [("forward", 1), ("forward", 2)])
def test_sigint_as_c_enters_a_callback_raises_and_leaves_the_tape_usable(entry, nth):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ct = rt.compile(rt.GradientTape(model, np.ones(3)))
    x = np.array([0.5, -1.0, 2.0])
    f, g = expected(x)
    xb, gb = x.copy(), np.empty(3)
    run = ct.bind(xb, gb)
    call = {"value_and_gradient": lambda: ct.value_and_gradient(x),
            "forward": lambda: ct.forward(x), "bind": run}[entry]
    # a first replay at another point: a lost interrupt would leave its
    # outputs in the arena and the interrupted call would return them
    ct.value_and_gradient(np.array([3.0, 1.0, -2.0]))
    sys.settrace(_sigint_at_callback_entry(nth))
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        sys.settrace(None)
    v, gr = ct.value_and_gradient(x)                        # still usable, right results
    assert np.isclose(v, f) and np.allclose(gr, g)
    assert np.isclose(ct.forward(x), f)
    assert np.isclose(run(), f) and np.allclose(gb, g)


def test_interrupts_at_random_moments_never_give_a_wrong_number():
    """A thread interrupts the main thread at random moments of a loop of
    replays: each call either returns the right result or raises
    KeyboardInterrupt, and the last interrupt is never lost."""
    ct = rt.compile(rt.GradientTape(model, np.ones(3)))
    rng = np.random.default_rng(7)
    points = rng.normal(size=(50, 3))
    wrong = raised = 0
    for trial in range(40):
        delay = float(rng.uniform(0.0, 0.004))
        fired = threading.Event()

        def fire():
            time.sleep(delay)
            import _thread
            _thread.interrupt_main()
            fired.set()
        t = threading.Thread(target=fire)
        try:
            t.start()
            for k, x in enumerate(points):
                v, gr = ct.value_and_gradient(x)
                f, g = expected(x)
                wrong += not (np.isclose(v, f) and np.allclose(gr, g))
            fired.wait(5)
            # the interrupt came after the loop: it must still be delivered
            for _ in range(1000):
                time.sleep(0.001)
            pytest.fail("an interrupt was lost")
        except KeyboardInterrupt:
            raised += 1
        finally:
            t.join()
    assert wrong == 0 and raised == 40
    v, gr = ct.value_and_gradient(points[0])
    assert np.isclose(v, expected(points[0])[0])
