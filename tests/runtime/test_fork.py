"""A child forked while another thread replays a CompiledTape: it does not
inherit the program as taken (the busy flag of a thread that does not exist
there) and replays it right away, by every entry point."""

import os
import sys
import threading
import time

import numpy as np
import pytest

import revtape as rt

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@rt.primitive
def slow_square_sum(x):
    # a callback that holds the replay long enough for the fork to land in it
    time.sleep(0.05)
    return np.sum(x ** 2)


rt.defvjp(slow_square_sum, lambda ans, x: lambda g: 2.0 * g * x)


def f(x):
    return slow_square_sum(x) + np.sum(np.sin(x))


def _child_exit_code(work):
    pid = os.fork()
    if pid == 0:                                   # the child: report by exit code only
        code = 3
        try:
            code = work()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"


@pytest.mark.parametrize("entry", ["value_and_gradient", "forward", "bind", "batch"])
def test_a_child_forked_during_another_threads_replay_can_replay(entry):
    x = np.array([0.3, -0.7, 1.1])
    ct = rt.compile(rt.GradientTape(f, x))
    want_v, want_g = np.sum(x ** 2) + np.sum(np.sin(x)), 2 * x + np.cos(x)
    in_replay, stop = threading.Event(), threading.Event()

    def busy():
        while not stop.is_set():
            in_replay.set()
            if entry == "batch":
                ct.batch_value_and_gradient(np.stack([x, x]))
            else:
                ct.value_and_gradient(x)
    t = threading.Thread(target=busy)
    t.start()
    try:
        in_replay.wait(5)
        time.sleep(0.02)                          # inside the slow callback now
        xb, gb = x.copy(), np.empty(3)

        def work():
            if entry == "value_and_gradient":
                v, g = ct.value_and_gradient(x)
            elif entry == "forward":
                v, g = ct.forward(x), want_g
            elif entry == "bind":
                v, g = ct.bind(xb, gb)(), gb
            else:
                vs, gs = ct.batch_value_and_gradient(np.stack([x, x, x]))
                v, g = vs[2], gs[2]
            return 0 if np.isclose(v, want_v) and np.allclose(g, want_g) else 4
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # fork with threads
            code = _child_exit_code(work)
    finally:
        stop.set()
        t.join()
    assert code == 0, f"child: {code} (3: raised, e.g. ConcurrentUseError; 4: wrong result)"
