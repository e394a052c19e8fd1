"""Matrix products and factorisations (revtape.bench.matrix): the MNIST MLP,
np.sum(X @ W) from 32 to 1000, cholesky/solve/eigh at n = 50/100/200 and the
GP at n = 200, each as numpy's analytic gradient, revtape on its own kernels
(REVTAPE_BLAS=off), revtape through BLAS/LAPACK (auto) and JAX (the MLP, when
installed).  Each column is checked against numpy's gradient first.

    OPENBLAS_NUM_THREADS=1 pytest benchmarks/test_matrix.py --benchmark-only --benchmark-group-by=param:case
"""

import pytest

from revtape.bench import matrix

pytest.importorskip("scipy", reason="the numpy references and the BLAS path use scipy")

CASES = {f"{c.group} {c.label}": c for c in matrix.cases()}
COLUMNS = ("numpy", "revtape-own", "revtape-blas", "jax")


@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matrix(benchmark, case, column):
    c = CASES[case]
    cols = matrix._columns(c)
    if column not in cols:
        pytest.skip("jax is not installed" if column == "jax" and c.jax_vg else
                    f"no {column} column for {case}")
    call, vg = cols[column]
    matrix._verify(column, vg, c, c.numpy_vg(c.x))
    benchmark.extra_info.update({"column": column, "case": case})
    benchmark(call)
