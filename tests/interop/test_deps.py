"""A bridge whose library is missing says what to install."""

import sys

import pytest

import revtape as rt
from revtape import interop
from revtape.interop import _deps


def test_missing_library_names_the_extra():
    with pytest.raises(interop.MissingPackageError, match=r'pip install "revtape\[nothere\]"'):
        _deps.require("revtape_no_such_module", "nothere")
    assert issubclass(interop.MissingPackageError, rt.RevtapeError)
    assert issubclass(interop.MissingPackageError, ImportError)


def test_to_jax_without_jax(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)     # import jax raises ImportError
    with pytest.raises(interop.MissingPackageError, match=r'revtape\[jax\]'):
        interop.to_jax(lambda x: x[0], x0=[1.0])


def test_pytensor_op_without_pytensor(monkeypatch):
    from revtape.interop import pytensor_bridge
    monkeypatch.setattr(pytensor_bridge, "_OPS", None)      # the Op classes not made yet
    monkeypatch.setitem(sys.modules, "pytensor", None)
    ld = rt.LogDensity(lambda x: -0.5 * (x[0] ** 2), [1.0])
    with pytest.raises(interop.MissingPackageError, match=r'revtape\[pytensor\]'):
        interop.pytensor_op(ld)
