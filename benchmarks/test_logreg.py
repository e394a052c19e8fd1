import pytest

from conftest import COLUMNS

pytestmark = pytest.mark.benchmark(group="logreg")


@pytest.mark.parametrize("column", COLUMNS)
def test_logreg(bench_column, column):
    bench_column(column, "logreg", N=1000, D=20)
