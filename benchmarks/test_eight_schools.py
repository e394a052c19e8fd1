import pytest

from conftest import COLUMNS

pytestmark = pytest.mark.benchmark(group="eight-schools")


@pytest.mark.parametrize("column", COLUMNS)
def test_eight_schools(bench_column, column):
    bench_column(column, "eight-schools")
