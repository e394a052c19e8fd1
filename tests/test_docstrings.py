"""Every public name is documented numpy-style: a docstring, and a Parameters
section wherever the name takes parameters (docs/api.md is generated from
these docstrings, so a missing one is a hole in the API reference too).
help() shows no private argument of a public name."""

import inspect
import pydoc

import numpy as np
import pytest

import revtape as rt

SECTION = "Parameters\n----------\n"


def _public_parameters(obj):
    """The parameters a user passes: no self, no private (leading underscore)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters.values() if p.name not in ("self", "cls")
            and not p.name.startswith("_")]


def _row(obj):
    """An op-table row of rt.special: a primitive taking *args, its arguments
    named by its docstring."""
    return getattr(obj, "op", None) is not None


def _names():
    """(qualified name, object) of rt.*, rt.special.*, rt.bijectors.* and rt.stats.*."""
    for n in rt.__all__:
        yield f"rt.{n}", getattr(rt, n)
    for space in (rt.special, rt.bijectors, rt.stats):
        for n in space.__all__:
            yield f"{space.__name__.replace('revtape', 'rt')}.{n}", getattr(space, n)


NAMES = list(_names())


@pytest.mark.parametrize("qual,obj", NAMES, ids=[q for q, _ in NAMES])
def test_every_public_name_has_a_docstring_with_its_parameters(qual, obj):
    if not (inspect.isroutine(obj) or inspect.isclass(obj) or inspect.ismodule(obj)):
        obj = type(obj)                 # NULL_TAPE, the distributions, the bijector objects
        assert obj.__dict__.get("__doc__"), f"{qual}'s class has no docstring of its own"
    doc = inspect.getdoc(obj)
    assert doc and len(doc) > 20, f"{qual} has no docstring"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return                          # errors and warnings take a message
    if inspect.ismodule(obj) or (inspect.isclass(obj) and qual.startswith(("rt.stats.",
                                                                          "rt.bijectors."))
                                 and qual != "rt.bijectors.interval"):
        return                          # a namespace, or an object whose class takes nothing
    if _public_parameters(obj) or _row(obj):
        assert SECTION in doc, f"{qual} takes parameters but its docstring has no Parameters section"
        names = [p.name.lstrip("*") for p in _public_parameters(obj)] if not _row(obj) else []
        for p in _public_parameters(obj) if not _row(obj) else []:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and inspect.isclass(obj):
                continue
            label = ("*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD
                     else "") + p.name
            section = doc.split(SECTION, 1)[1]
            assert any(line.startswith((label + " :", label + ",")) or
                       line.startswith(tuple(f"{o}, {label} :" for o in names))
                       for line in section.splitlines()), \
                f"{qual}: parameter {label} is not described under Parameters"


def test_the_row_functions_of_rt_special_name_their_arguments():
    for n in rt.special.__all__:
        f = getattr(rt.special, n)
        if _row(f):
            doc = inspect.getdoc(f)
            assert doc.startswith(f"scipy.special.{n}(") or n == "psi", n
            assert SECTION in doc and "Returns\n-------\n" in doc, n


@pytest.mark.parametrize("name", ["LogDensity", "compile", "grad", "value_and_grad",
                                  "GradientTape", "HessianTape", "JacobianTape"])
def test_help_shows_no_private_argument(name):
    text = pydoc.render_doc(getattr(rt, name), renderer=pydoc.plaintext)
    head = text.split("Methods defined here", 1)[0]
    assert "_tapes" not in text and "module docstring" not in head
    sig = inspect.signature(getattr(rt, name))
    assert not [p for p in sig.parameters if p.startswith("_")], sig


def test_the_log_density_documents_its_interface():
    doc = inspect.getdoc(rt.LogDensity)
    for word in ("f :", "x0 :", "names :", "bijectors :", "dimension :", "Examples"):
        assert word in doc, word
    ld = rt.LogDensity(lambda x: -0.5 * np.sum(x ** 2), np.zeros(2))
    # the docstring's example is what the object does
    v, g = ld.logdensity_and_gradient(np.array([1.0, 2.0]))
    assert (v, g.tolist(), ld.dimension, ld.names) == (-2.5, [-1.0, -2.0], 2, ["x[0]", "x[1]"])
    for m in ("logdensity", "logdensity_and_gradient", "gradient", "hvp", "hessian",
              "batch_logdensity", "batch_logdensity_and_gradient", "negative", "flatten",
              "unflatten", "constrain", "unconstrain", "grad_and_value"):
        assert inspect.getdoc(getattr(rt.LogDensity, m)), m
        assert inspect.getdoc(getattr(type(ld.negative()), m)), f"negative().{m}"
