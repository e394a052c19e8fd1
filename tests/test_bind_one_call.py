"""ctape.bind(x, g) as one C call -- checked.c's Bound (runtime/bound.py: _BoundCall)
or, without revtape._checked, a partial of rt_bound_value_and_grad
(runtime/bound.py: _OneCall): the programs it serves, its bits, rt.value after it,
threads, pickling.  Every test runs on both paths (the `path` fixture)."""

import copy
import pickle
import threading

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import bound
from revtape.bench import workloads


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


@pytest.fixture(params=["c", "cffi"], autouse=True)
def path(request, monkeypatch):
    """"c": checked.c's Bound serves bind(); "cffi": the module is taken away
    and bind() falls back to the cffi partial (or the Python frame)."""
    if request.param == "c" and bound._BoundCall is None:
        pytest.skip("revtape._checked is not built")
    if request.param == "cffi":
        monkeypatch.setattr(bound, "_BoundCall", None)
    return request.param


def _one_call(path):
    return bound._BoundCall if path == "c" else bound._OneCall


def _guarded(x):
    return np.sum(x ** 2) if x[0] > 0 else np.sum(x)


@pytest.mark.parametrize("make", [workloads.eight_schools, lambda: workloads.rosenbrock_loop(n=20),
                                  lambda: workloads.logreg(N=50, D=5)],
                         ids=["eight-schools", "rosenbrock-loop", "logreg"])
def test_one_call_bind_gives_the_checked_calls_bits(make, rng, path):
    wl = make()
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    xb, gb = wl.x0.copy(), np.empty_like(wl.x0)
    run = ct.bind(xb, gb)
    assert isinstance(run, _one_call(path))
    for k in range(5):
        xb[:] = wl.x0 + 0.3 * rng.normal(size=xb.size)
        if k == 4:
            xb[0] = np.nan                    # nan flows as a value, not as an error
        v = run()
        assert type(v) is float
        v2, g2 = ct.value_and_gradient(xb)
        assert _bits(v) == _bits(v2) and np.array_equal(_bits(gb), _bits(g2))


def test_programs_that_can_raise_keep_the_python_bound_call(path):
    ct = rt.compile(rt.GradientTape(_guarded, np.array([1.0, 2.0])))
    xb, gb = np.array([1.0, 2.0]), np.empty(2)
    run = ct.bind(xb, gb)
    # the C call raises through CompiledTape._status; the cffi partial cannot
    assert isinstance(run, bound._BoundCall) if path == "c" else \
        not isinstance(run, bound._OneCall)
    assert run() == 5.0
    xb[0] = -1.0
    with pytest.raises(rt.BranchChanged):
        run()


def test_rt_value_follows_the_last_replay_whichever_path_made_it(path):
    f = lambda x: np.sum(np.sin(x) * x)
    x0, x1, x2, x3 = (np.array(v) for v in ([0.1, 0.2], [1.0, -2.0], [0.5, 0.25], [3.0, 1.0]))
    tape = rt.GradientTape(f, x0)
    ct, other = rt.compile(tape), rt.compile(tape)
    ct.gradient(x1)                                   # not yet pulled when bind() starts
    xb, g = x2.copy(), np.empty(2)
    run = ct.bind(xb, g)
    assert isinstance(run, _one_call(path))
    assert rt.value(tape.output) == f(x1)             # the replay before bind()
    run()
    assert rt.value(tape.output) == pytest.approx(f(x2))
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x2)
    other.gradient(x3)                                # another arena of the same tape
    assert rt.value(tape.output) == pytest.approx(f(x3))
    run()                                             # ... and back
    assert rt.value(tape.output) == pytest.approx(f(x2))
    tape.forward(x0)                                  # the reference replay
    assert rt.value(tape.output) == pytest.approx(f(x0))
    xb[:] = x1
    run()
    assert rt.value(tape.output) == pytest.approx(f(x1))
    ct.value_and_gradient(x3, out=np.empty(2))        # the checked fast path marks too
    assert rt.value(tape.output) == pytest.approx(f(x3))
    ct.batch_value_and_gradient(np.array([x0, x2]))   # a batch leaves its last row
    assert rt.value(tape.output) == pytest.approx(f(x2))
    # copies never carry the C cell: theirs is their own
    t2 = copy.deepcopy(tape)
    assert t2._fast_marks is None and rt.value(t2.output) == pytest.approx(f(x2))
    t3 = pickle.loads(pickle.dumps(tape))
    assert rt.value(t3.output) == pytest.approx(f(x2))


def test_threads_sharing_a_ctape_through_one_call_binds_wait_instead_of_raising(rng):
    wl = workloads.rosenbrock_loop(n=30)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    xs = [wl.x0 + 0.1 * k for k in range(3)]
    want = [ct.value_and_gradient(x) for x in xs]
    wrong, errors = [], []

    def work(k):
        xb, gb = xs[k].copy(), np.empty_like(xs[k])
        run = ct.bind(xb, gb)
        try:
            for i in range(3000):
                v = run()
                if v != want[k][0] or not np.array_equal(gb, want[k][1]):
                    wrong.append(k)
                if i % 7 == 0:                        # the checked path, concurrently
                    try:
                        ct.value_and_gradient(xs[k])
                    except rt.ConcurrentUseError:
                        pass
        except Exception as e:                        # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and not wrong


def test_a_one_call_bind_refuses_to_pickle_and_deep_copies_as_itself():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(2)))
    run = ct.bind(np.ones(2), np.empty(2))
    with pytest.raises(rt.PicklingError, match="pickle the compiled tape"):
        pickle.dumps(run)
    assert copy.deepcopy(run) is run and run.ctape is ct


def test_a_temporary_ctapes_bound_replay_stays_readable_and_arenas_do_not_pile_up():
    f = lambda x: np.sum(x ** 3)
    tape = rt.GradientTape(f, np.ones(3))
    for k in range(40):
        x = np.full(3, 1.0 + k)
        rt.compile(tape).bind(x.copy(), np.empty(3))()     # ctape and callable dropped
        np.testing.assert_array_equal(rt.value(tape.inputs[0]), x)
        assert rt.value(tape.output) == f(x)
    held = [a for a in tape._fast_marks.arenas if a is not None]
    assert len(held) <= 2, f"{len(held)} arenas of dropped compiled tapes are still held"
