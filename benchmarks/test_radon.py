"""Radon hierarchical regression (919 houses, 85 counties, gathers by the
county index, scales through the log bijector): revtape's compiled
value-and-gradient next to the hand-written C (csrc/bench/reference.c,
ref_radon_vg), numpy references and the installed peers.  Each benchmark
first checks value and gradient against the numpy reference (1e-8 relative).

    pytest benchmarks/test_radon.py --benchmark-only
"""

import pytest

from conftest import COLUMNS

pytestmark = pytest.mark.benchmark(group="radon")


@pytest.mark.parametrize("column", COLUMNS)
def test_radon(bench_column, column):
    bench_column(column, "radon")
