"""nutpie end to end on eight schools through revtape.interop.nutpie_model:
4 chains x (1000 tuning + 1000 draws), wall time and ESS per second.

    PYTHONPATH=src python benchmarks/nutpie_eight_schools.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))

import arviz as az  # noqa: E402
import nutpie  # noqa: E402

from revtape import interop  # noqa: E402
import eight_schools as es  # noqa: E402


def main():
    ld = es.log_density()
    model = interop.nutpie_model(ld)
    t = time.perf_counter()
    trace = nutpie.sample(model, draws=1000, tune=1000, chains=4, cores=2, seed=0,
                          progress_bar=False)
    wall = time.perf_counter() - t
    ess = az.ess(trace, var_names=["mu", "tau"])
    post = trace.posterior
    print(f"wall {wall:.2f} s; mean mu {float(post['mu'].mean()):.3f} (4.401), "
          f"tau {float(post['tau'].mean()):.3f} (3.575); ESS/s mu "
          f"{float(ess['mu']) / wall:.0f}, tau {float(ess['tau']) / wall:.0f}; "
          f"compiled copies {ld.copies_made}")


if __name__ == "__main__":
    main()
