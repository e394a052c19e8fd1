import pytest

from conftest import COLUMNS


@pytest.mark.benchmark(group="rosenbrock-loop")
@pytest.mark.parametrize("column", COLUMNS)
def test_rosenbrock_loop(bench_column, column):
    bench_column(column, "rosenbrock-loop", n=100)


@pytest.mark.benchmark(group="rosenbrock-vec")
@pytest.mark.parametrize("column", [c for c in COLUMNS])
def test_rosenbrock_vec(bench_column, column):
    bench_column(column, "rosenbrock-vec", n=10_000)
