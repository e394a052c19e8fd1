"""Pytrees: nested dicts, lists, tuples and namedtuples of floats and arrays.

``flatten(tree) -> (leaves, treedef)`` and ``unflatten(treedef, leaves)``
turn a structured input into the tuple of leaves the tape machinery already
takes, and gradients back into the caller's structure.  The order of the
leaves follows JAX: depth first, left to right, dict entries in sorted key
order (an OrderedDict keeps its insertion order, as in JAX), ``None`` an
empty node with no leaves.  ``unflatten`` rebuilds the same container types
(a dict is rebuilt with its keys in sorted order, as JAX does; dicts compare
equal whatever their order).

``register_pytree_node(type, flatten_fn, unflatten_fn)`` adds a container
type: ``flatten_fn(obj) -> (children, aux)`` with hashable ``aux``,
``unflatten_fn(aux, children) -> obj``.

One departure from JAX, kept from revtape's array conventions: a non-empty
(nested) list of plain numbers is one leaf, an array -- ``{"w": [1.0, 2.0]}``
has one array leaf, while a list holding arrays or containers is a node.

Treedefs are hashable and compare by structure, so they serve as cache keys
(the cached transforms key on them; rt.grad builds an equivalent key of plain
tuples in one walk, functional.tree_key).
"""

import collections
from typing import Any, Callable, Iterable, TypeVar

import numpy as np

from ..errors import InputError

_REGISTRY = {}


class TreeDef:
    """The structure of a pytree: its container nodes, without the leaves."""

    __slots__ = ("kind", "aux", "children", "n_leaves", "_hash")

    def __init__(self, kind, aux, children):
        self.kind = kind              # None for a leaf, else the container type
        self.aux = aux
        self.children = tuple(children)
        self.n_leaves = 1 if kind is None else sum(c.n_leaves for c in self.children)
        self._hash = None

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind is other.kind and self.aux == other.aux
                and self.children == other.children)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((id(self.kind), _hashable(self.aux), self.children))
        return self._hash

    def __getstate__(self):
        return (self.kind, self.aux, self.children)

    def __setstate__(self, state):
        kind, aux, children = state
        self.__init__(kind, aux, children)

    def __repr__(self):
        return f"TreeDef({_show(self)})"


def _hashable(aux):
    try:
        hash(aux)
        return aux
    except TypeError:
        return id(aux)


def _show(td):
    if td.kind is None:
        return "*"
    inner = [_show(c) for c in td.children]
    if td.kind is tuple:
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
    if td.kind is list:
        return "[" + ", ".join(inner) + "]"
    if td.kind is type(None):
        return "None"
    if td.kind in (dict, collections.OrderedDict, collections.defaultdict):
        keys = td.aux if td.kind is not collections.defaultdict else td.aux[1]
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(keys, inner)) + "}"
    return f"{td.kind.__name__}(" + ", ".join(inner) + ")"


LEAF = TreeDef(None, None, ())


_Node = TypeVar("_Node")


def register_pytree_node(nodetype: type[_Node],
                         flatten_fn: Callable[[_Node], tuple[Iterable[Any], Any]],
                         unflatten_fn: Callable[[Any, Any], _Node]) -> None:
    """Treat `nodetype` as a container: flatten_fn(obj) -> (children, aux),
    unflatten_fn(aux, children) -> obj (JAX's register_pytree_node).

    Parameters
    ----------
    nodetype : type
        The class whose instances are containers in inputs, gradients and
        outputs (a dataclass of parameters, say).
    flatten_fn : callable
        ``flatten_fn(obj) -> (children, aux)``: the children (leaves or
        containers themselves) and static data that is not differentiated
        (hashable: it is part of the cache key).
    unflatten_fn : callable
        ``unflatten_fn(aux, children) -> obj``, the inverse.

    Examples
    --------
    >>> import dataclasses, revtape as rt
    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: float
    ...     y: float
    >>> rt.register_pytree_node(Point, lambda p: ((p.x, p.y), None),
    ...                         lambda aux, ch: Point(*ch))
    >>> rt.grad(lambda p: p.x * p.y)(Point(2.0, 3.0))
    Point(x=3.0, y=2.0)
    """
    _REGISTRY[nodetype] = (flatten_fn, unflatten_fn)


def _sorted_keys(d):
    try:
        return tuple(sorted(d))
    except TypeError:
        raise InputError("a dict in a pytree needs sortable keys (its leaves are ordered by "
                         f"sorted key, as in JAX); got keys {list(d)!r}") from None


register_pytree_node(tuple, lambda t: (t, None), lambda aux, ch: tuple(ch))
register_pytree_node(list, lambda t: (t, None), lambda aux, ch: list(ch))
register_pytree_node(type(None), lambda t: ((), None), lambda aux, ch: None)
register_pytree_node(dict, lambda d: ((d[k] for k in _sorted_keys(d)), _sorted_keys(d)),
                     lambda keys, ch: dict(zip(keys, ch)))
register_pytree_node(collections.OrderedDict, lambda d: (d.values(), tuple(d)),
                     lambda keys, ch: collections.OrderedDict(zip(keys, ch)))
register_pytree_node(
    collections.defaultdict,
    lambda d: ((d[k] for k in _sorted_keys(d)), (d.default_factory, _sorted_keys(d))),
    lambda aux, ch: collections.defaultdict(aux[0], zip(aux[1], ch)))


def _node(x):
    """(flatten_fn, unflatten_fn) of x's container type, or None for a leaf."""
    t = type(x)
    rule = _REGISTRY.get(t)
    if rule is None and isinstance(x, tuple) and hasattr(t, "_fields"):
        rule = _REGISTRY[t] = (lambda nt: (tuple(nt), None),
                               lambda aux, ch, t=t: t(*ch))
    return rule


def is_container(x):
    return _node(x) is not None


def flatten(tree):
    """(list of leaves, TreeDef).  A non-empty (nested) list of plain numbers is
    one leaf -- numpy's array-like, an array input as before pytrees."""
    leaves = []
    return leaves, _flatten(tree, leaves)


def _flatten(x, leaves):
    rule = None if _is_scalar_list(x) else _node(x)
    if rule is None:
        leaves.append(x)
        return LEAF
    children, aux = rule[0](x)
    return TreeDef(type(x), aux, [_flatten(c, leaves) for c in children])


def unflatten(treedef, leaves):
    """The tree of shape `treedef` holding `leaves` (in flatten's order)."""
    it = iter(leaves)
    out = _unflatten(treedef, it)
    if next(it, _END) is not _END:
        raise InputError(f"too many leaves for {treedef}")
    return out


_END = object()


def _unflatten(td, it):
    if td.kind is None:
        v = next(it, _END)
        if v is _END:
            raise InputError(f"too few leaves for this structure")
        return v
    return _REGISTRY[td.kind][1](td.aux, [_unflatten(c, it) for c in td.children])


def _is_scalar_list(x):
    """A (nested) list of plain numbers: numpy's array-like, kept an array input."""
    if type(x) is not list or not x:
        return False
    return all(isinstance(v, (int, float, np.integer, np.floating)) or _is_scalar_list(v)
               for v in x)


def input_structure(x):
    """(leaves, treedef or None) of a differentiated input.

    None means the conventions revtape had before pytrees, kept as they were:
    a float or array (a list of plain numbers counts as an array), or a plain
    tuple of them.  Anything else that holds a container (a dict, a
    namedtuple, a list of arrays, nested tuples) is a pytree."""
    if _is_scalar_list(x):
        return [x], None
    rule = _node(x)
    if rule is None:
        return [x], None
    if type(x) is tuple and all(_node(v) is None or _is_scalar_list(v) for v in x):
        return list(x), None
    leaves, td = flatten(x)
    for v in leaves:
        check_leaf(v)
    return leaves, td


def check_leaf(v):
    if isinstance(v, (float, int, np.floating, np.integer, np.ndarray)) or _is_scalar_list(v) \
            or getattr(v, "_is_tracked", False):
        return
    raise InputError(f"a differentiated pytree holds floats and float arrays as leaves; got a "
                     f"{type(v).__name__} ({v!r:.60}). Pass it as a separate, non-differentiated "
                     "argument, or register its type with rt.register_pytree_node")


def leaves_of(treedef, tree, what="input"):
    """The leaves of `tree`, which must have the structure `treedef`.  Read
    along treedef, so a list of plain numbers fits a list node as well as an
    array leaf (a tree of float gradients is a valid input again)."""
    leaves = []
    if not _leaves_along(treedef, tree, leaves):
        raise InputError(f"this {what} must have the structure it was recorded with, "
                         f"{treedef}; got {flatten(tree)[1]}")
    return leaves


def _leaves_along(td, x, leaves):
    if td.kind is None:
        leaves.append(x)
        return True
    if type(x) is not td.kind:
        return False
    children, aux = _node(x)[0](x)
    children = list(children)
    if aux != td.aux or len(children) != len(td.children):
        return False
    return all(_leaves_along(c, v, leaves) for c, v in zip(td.children, children))


def leaf_paths(treedef, root=""):
    """A readable path per leaf: dict keys and namedtuple fields joined by
    dots, sequence positions in brackets ("theta", "b[1]", "n.mu")."""
    if treedef.kind is None:
        return [root]
    kind = treedef.kind
    if kind in (dict, collections.OrderedDict):
        labels = [str(k) for k in treedef.aux]
    elif kind is collections.defaultdict:
        labels = [str(k) for k in treedef.aux[1]]
    elif hasattr(kind, "_fields"):
        labels = list(kind._fields)
    else:
        labels = [f"[{i}]" for i in range(len(treedef.children))]
    out = []
    for label, child in zip(labels, treedef.children):
        if label.startswith("["):
            path = (root or "x") + label
        else:
            path = f"{root}.{label}" if root else label
        out.extend(leaf_paths(child, path))
    return out


__all__ = ["TreeDef", "flatten", "unflatten", "register_pytree_node", "is_container"]
