"""Gaussian-process marginal likelihood (Cholesky-based), n = 50 and 200:
revtape's compiled value-and-gradient next to the textbook numpy/scipy
(LAPACK) analytic one and the installed peers.  Each benchmark first checks
value and gradient against the analytic reference (1e-8 relative, as the
bench does).

    pytest benchmarks/test_gp.py --benchmark-only --benchmark-group-by=param:n
"""

import pytest

from conftest import COLUMNS

pytestmark = pytest.mark.benchmark(group="gp")


@pytest.mark.parametrize("n", [50, 200])
@pytest.mark.parametrize("column", COLUMNS)
def test_gp(bench_column, column, n):
    bench_column(column, "gp", n=n)
