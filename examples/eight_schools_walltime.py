"""Wall time of eight schools, one sampler at a time, three gradients.

    python examples/eight_schools_walltime.py [chains draws]

The same sampler (littlemcmc NUTS, nutpie NUTS) on the same model with the
gradient from revtape (compiled tape), from a hand-written numpy gradient
(revtape.bench.workloads.eight_schools().numpy_vg) and from JAX (jit of
value_and_grad) when JAX is installed.  Chains run one after another in
this process (cores=1) so the columns compare the gradient, not scheduling.
Times include tuning (as many tuning steps as draws).
"""

import sys
import time

import numpy as np

from revtape.bench.progress import progress
from revtape.bench.workloads import eight_schools

import eight_schools as es


def jax_value_and_grad():
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    Y, SIGMA = jnp.asarray(es.Y), jnp.asarray(es.SIGMA)

    def logp(x):
        mu, log_tau, eta = x[0], x[1], x[2:]
        tau = jnp.exp(log_tau)
        return (-0.5 * (mu / 5.0) ** 2 + log_tau - jnp.log1p((tau / 5.0) ** 2)
                - 0.5 * jnp.sum(eta ** 2) - 0.5 * jnp.sum(((Y - mu - tau * eta) / SIGMA) ** 2))
    vg = jax.jit(jax.value_and_grad(logp))

    def f(x):
        v, g = vg(x)
        return float(v), np.asarray(g)
    return f


def gradients():
    """name -> a factory of x -> (logp, gradient): one per chain (nutpie asks per chain)."""
    out = {"revtape": lambda: es.compiled_logp().value_and_gradient,
           "numpy (by hand)": lambda: eight_schools().numpy_vg}
    jvg = jax_value_and_grad()
    if jvg is not None:
        out["jax"] = lambda: jvg
    return out


def run_littlemcmc(make_vg, chains, draws, seed=0):
    import littlemcmc as lmc
    trace, _ = lmc.sample(make_vg(), model_ndim=es.DIM, draws=draws, tune=draws,
                          chains=chains, cores=1, random_seed=list(range(seed, seed + chains)),
                          progressbar=False)
    return trace


def run_nutpie(make_vg, chains, draws, seed=0):
    import nutpie
    from nutpie.compiled_pyfunc import from_pyfunc

    def make_expand_fn(seed1, seed2, chain):
        return lambda x: {"x": x.copy()}
    model = from_pyfunc(es.DIM, make_vg, make_expand_fn, [np.dtype("float64")], [(es.DIM,)],
                        ["x"])
    idata = nutpie.sample(model, draws=draws, tune=draws, chains=chains, seed=seed, cores=1,
                          progress_bar=False)
    return idata.posterior["x"].values


def table(chains=4, draws=1000, only=None):
    """{(sampler, gradient): (seconds, posterior mean of mu)} for the installed
    samplers (or those named in `only`)."""
    samplers = {}
    for name, run, module in (("littlemcmc", run_littlemcmc, "littlemcmc"),
                              ("nutpie", run_nutpie, "nutpie")):
        if only is not None and name not in only:
            continue
        try:
            __import__(module)
        except ImportError:
            continue
        samplers[name] = run
    results = {}
    # a bar on a terminal (tqdm installed) through the minutes-long runs; silent in logs
    runs = [(s, r, g, m) for s, r in samplers.items() for g, m in gradients().items()]
    for sname, run, gname, make_vg in progress(runs, desc="sampler x gradient"):
        make_vg()(np.zeros(es.DIM))                 # compile / jit outside the clock
        t = time.perf_counter()
        draws_ = run(make_vg, chains, draws)
        results[sname, gname] = (time.perf_counter() - t, float(np.mean(draws_[..., 0])))
    return results


if __name__ == "__main__":
    chains, draws = (int(a) for a in (sys.argv[1:3] or (4, 1000)))
    print(f"eight schools, {chains} chains x {draws} draws (+ {draws} tuning), cores=1")
    for (s, g), (sec, mu) in table(chains, draws).items():
        print(f"{s:11s} {g:16s} {sec:7.2f} s   mean mu {mu:.2f}")
