"""numpy's and scipy's API on tracked values.

functions.py holds the handlers numpy's protocols dispatch to
(__array_ufunc__, __array_function__); structure.py the structural
functions (sort, cumsum, einsum, ...), linalg.py np.linalg/scipy.linalg,
special.py scipy.special, scipy_dispatch.py the routing of scipy's own
functions to these when they see a tracked value."""
