"""Multivariate normal log density (n = 100, m = 20 observations), gradient
w.r.t. the mean and the Cholesky factor: revtape's compiled value-and-gradient
next to the numpy/scipy (LAPACK) analytic one and the installed peers.  Each
benchmark first checks value and gradient against it (1e-8 relative).

    pytest benchmarks/test_mvn.py --benchmark-only
"""

import pytest

from conftest import COLUMNS

pytestmark = pytest.mark.benchmark(group="mvn")


@pytest.mark.parametrize("column", COLUMNS)
def test_mvn(bench_column, column):
    bench_column(column, "mvn")
