"""Old home of the benchmark workloads, kept so ``from revtape import workloads``
still works: the module itself now lives with the benchmark
(:mod:`revtape.bench.workloads`), and this name is the same module object."""

import sys

from .bench import workloads as _workloads

sys.modules[__name__] = _workloads
