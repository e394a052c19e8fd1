"""The long scalar chain at L = 1e3 and 1e4 (one group per length); 1e5 and up
only from `python -m revtape bench`, where slow peers are budgeted."""

import pytest

from conftest import COLUMNS

CHAIN_COLUMNS = COLUMNS + ["jax-scan"]


@pytest.mark.parametrize("L", [
    pytest.param(1000, marks=pytest.mark.benchmark(group="chain-1000")),
    pytest.param(10_000, marks=pytest.mark.benchmark(group="chain-10000")),
])
@pytest.mark.parametrize("column", CHAIN_COLUMNS)
def test_chain(bench_column, column, L):
    if column == "jax" and L > 1000:
        pytest.skip("unrolled JAX jit of a 1e4-step loop takes minutes to compile; see jax-scan")
    bench_column(column, "chain", L=L)
