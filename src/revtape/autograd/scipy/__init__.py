"""scipy's namespaces for programs written for autograd:
``import revtape.autograd.scipy.special``, ``.stats``, ``.linalg``,
``.signal``, ``.integrate``.  The functions are scipy's, which revtape routes
to its own rules when an argument is tracked; one it does not differentiate
raises rt.UnsupportedError naming it."""

from . import integrate, linalg, signal, special, stats  # noqa: F401
