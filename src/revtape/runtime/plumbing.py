"""How a CompiledTape's inputs and results meet the flat buffers C reads and
writes: inputs (an array, floats, a tuple, a pytree) laid end to end in one
float64 run, gradients and tangents in the flat layout of the differentiated
inputs, and flat results split back into the recording input's structure."""

import numpy as np

from .vm import _F64, _ND, ffi
from ..core import pytree
from ..core.apitypes import ArrayLike, FloatArray, PyTree
from ..errors import InputError
from ..trace.hessian import Parts
from ..trace.values import check_input, check_out


def _grad_shapes(prog, n_grad_inputs):
    n = len(prog.inputs) if n_grad_inputs is None else n_grad_inputs
    return [shape for _, shape, _ in prog.inputs[:n]]


class Plumbing:
    """CompiledTape's input and output plumbing (a mixin of compiled.CompiledTape)."""

    def _init_plumbing(self, prog):
        """The input and gradient layouts of prog, as the plumbing reads them."""
        self._in_shapes = [shape for _, shape, _ in prog.inputs]
        self._in_float = [isf for _, _, isf in prog.inputs]
        self._single = len(prog.inputs) == 1
        self._x_shape = self._in_shapes[0] if self._single else None
        self._grad_shapes = _grad_shapes(prog, self._n_grad_inputs)
        self._g_len = prog.n_grad

    def _x_ptr(self, x):
        """A C pointer to x's values, laid end to end (a copy unless x is already a
        C-contiguous, aligned float64 array of the recorded shape)."""
        if self._treedef is not None:
            x = self._tree_leaves(x)
        if self._single:
            if (type(x) is not np.ndarray or x.dtype != _F64 or x.shape != self._x_shape
                    or not x.flags.c_contiguous or not x.flags.aligned):
                # np.frombuffer(..., offset=1) gives a misaligned float64 array: C
                # must never see a misaligned double*, so it is copied like any
                # other conversion
                x = check_input(x, self._x_shape)
                if self._in_float[0]:
                    x = np.array([x])
                else:
                    x = np.ascontiguousarray(x)
            return ffi.from_buffer("double[]", x)
        if not isinstance(x, (tuple, list)) or len(x) != len(self._in_shapes):
            raise InputError(f"this tape has {len(self._in_shapes)} inputs: pass a tuple of "
                             f"{len(self._in_shapes)} values")
        parts = [check_input(xi, s, isf) for xi, s, isf in zip(x, self._in_shapes, self._in_float)]
        # one new buffer, copied in by C under the busy flag: the arena is never
        # written from Python, so a concurrent caller cannot corrupt a replay
        return ffi.from_buffer("double[]", np.concatenate([np.ravel(v) for v in parts]
                                                          + [np.empty(0)]))

    def _tree_leaves(self, tree, what="input"):
        """A pytree input (or out=) as the leaf, or the tuple of leaves, it stands for."""
        leaves = pytree.leaves_of(self._treedef, tree, what)
        return leaves[0] if len(leaves) == 1 else tuple(leaves)

    def _layout(self):
        """The input's flat layout (hessian.Parts): flatten()/unflatten() go through it."""
        if self._parts is not None:
            return self._parts
        layout = self.__dict__.get("_flat_layout")
        if layout is None:
            layout = Parts([np.empty(s) if not f else 0.0
                            for s, f in zip(self._in_shapes, self._in_float)], self._treedef)
            layout.legacy_single = self._single and self._treedef is None
            self._flat_layout = layout
        return layout

    def flatten(self, x: PyTree) -> FloatArray:
        """x (a float, an array, a tuple or a pytree shaped like the recording
        input) as one flat float64 vector: the layout bind() and the C program use."""
        layout = self._layout()
        if getattr(layout, "legacy_single", False):
            x = (x,)
        return layout.flatten(x)

    def unflatten(self, vec: ArrayLike) -> PyTree:
        """A flat vector (an input, or a gradient of a tape whose inputs are all
        differentiated) in the recording input's structure."""
        layout = self._layout()
        vec = np.asarray(vec, dtype=np.float64)
        if vec.shape != (layout.bounds[-1],):
            raise InputError(f"unflatten() takes a flat vector of length {layout.bounds[-1]}, "
                             f"got shape {vec.shape}")
        res = layout.split_result(vec, None)
        return res[0] if getattr(layout, "legacy_single", False) else res

    def _grad_out(self, out):
        """A C-contiguous, aligned float64 buffer for the gradient (out itself
        when it is one, else a new array copied into out afterwards) and the
        user's out."""
        if out is None:
            return np.empty(self._g_len), None
        if self._treedef is not None:
            self._tree_leaves(out, "out=")       # checked here, written by _split_grad
            return np.empty(self._g_len), out
        if self._single and type(out) is np.ndarray:
            check_out(out, [np.empty(self._grad_shapes[0])])
            if out.flags.c_contiguous and out.flags.aligned:
                return out, out
            return np.empty(self._g_len), out
        check_out(out, [np.empty(s) for s in self._grad_shapes])
        return np.empty(self._g_len), out

    def _split_grad(self, flat, user_out):
        if user_out is not None and flat is user_out:
            return user_out
        if self._treedef is not None:
            return self._tree_split(flat, user_out)
        parts, k = [], 0
        for shape in self._grad_shapes:
            size = int(np.prod(shape, dtype=np.int64))
            parts.append(flat[k:k + size].reshape(shape))
            k += size
        if user_out is not None:
            outs = (user_out,) if len(parts) == 1 else user_out
            for o, p in zip(outs, parts):
                o[...] = p
            return user_out
        res = [float(p) if s == () and isf else p for p, s, isf in
               zip(parts, self._grad_shapes, self._in_float)]
        return res[0] if len(res) == 1 else tuple(res)

    def _tree_split(self, flat, user_out):
        layout = self._layout()
        if user_out is None:
            return layout.split_result(flat, None)
        leaves = pytree.leaves_of(self._treedef, user_out, "out=")
        check_out(leaves[0] if len(leaves) == 1 else tuple(leaves),
                  [np.empty(s) for s in layout.shapes])
        for o, p_ in zip(leaves, layout.split(flat)):
            o[...] = p_
        return user_out

    def _tangent_vector(self, v):
        """v, shaped like the differentiated input(s), as one flat float64 vector."""
        # nan/inf tangents are values, as nan/inf inputs are
        if self._treedef is not None:
            v = self._tree_leaves(v, "tangent v")
        if len(self._grad_shapes) == 1 and self._single:
            vflat = v
            if not (type(v) is _ND and v.dtype is _F64 and v.shape == self._grad_shapes[0]
                    and v.flags.c_contiguous and v.flags.aligned):
                vflat = np.ravel(check_input(v, self._grad_shapes[0], self._in_float[0]))
        else:
            if not isinstance(v, (tuple, list)) or len(v) != len(self._grad_shapes):
                raise InputError(f"pass v as a tuple of {len(self._grad_shapes)} tangents, one "
                                 "per differentiated input")
            vflat = np.concatenate([np.ravel(check_input(vi, s, isf)) for vi, s, isf in
                                    zip(v, self._grad_shapes, self._in_float)] + [np.empty(0)])
        return vflat
