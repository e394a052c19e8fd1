"""`import revtape` against `import numpy`, in fresh interpreters.

    python benchmarks/import_time.py [rounds]     # default 15 rounds

Each round starts two fresh interpreters, one running `import numpy`, one
running `import numpy; import revtape`, each timing its own import with
perf_counter (interpreter start-up excluded); a round's two processes run
back to back.  Reported: the minimum over the rounds of each (on a shared
machine the minimum is the round that found a core free) and their
difference, what revtape adds to numpy.  The target is a difference under
0.2 s with scipy installed (revtape does not import it).
"""

import os
import subprocess
import sys

TIMER = "import time; t = time.perf_counter(); {}; print(time.perf_counter() - t)"


def timed(stmt):
    out = subprocess.run([sys.executable, "-c", TIMER.format(stmt)], capture_output=True,
                         text=True, check=True, env=os.environ)
    return float(out.stdout)


def main(rounds=15):
    numpy_t, revtape_t = [], []
    for _ in range(rounds):
        numpy_t.append(timed("import numpy"))
        revtape_t.append(timed("import numpy; import revtape"))
    n, r = min(numpy_t), min(revtape_t)
    print(f"import numpy            {n * 1e3:7.1f} ms  (min of {rounds} fresh processes)")
    print(f"import numpy, revtape   {r * 1e3:7.1f} ms")
    print(f"revtape adds            {(r - n) * 1e3:7.1f} ms  (target: under 200 ms)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
