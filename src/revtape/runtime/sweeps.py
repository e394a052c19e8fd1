"""CompiledTape's derivatives beyond the gradient, each a C sweep or one per
row or column: the Jacobian, vector-Jacobian and Jacobian-vector products,
and (forward over reverse, on the compiled HessianTape of a gradient tape)
the Hessian and Hessian-vector products."""

from typing import Any

import numpy as np

from .vm import ffi, lib
from ..core import pytree
from ..core.apitypes import PyTree
from ..trace.values import check_input, check_out


class Sweeps:
    """CompiledTape's Jacobians, VJPs, JVPs and Hessians (a mixin of compiled.CompiledTape)."""

    def jacobian(self, x: PyTree, out: PyTree = None) -> Any:
        """d output / d input at x (output.shape + input.shape): one reverse sweep per
        output element, all in C."""
        return self._jacobian(x, out, self._program.out_shape)

    def _jacobian(self, x, out, yshape, sweeps=lib.rt_jacobian):
        """J at x shaped yshape + input shapes, by one reverse sweep per row
        (rt_jacobian) or one tangent sweep per column (rt_jacobian_fwd)."""
        prog = self._program
        m, n = prog.out_len, prog.n_grad
        J = np.empty((m, n))
        xp = self._x_ptr(x)
        if sweeps is lib.rt_jacobian_fwd and not self.__dict__.get("_tangent_used"):
            self._note_tangent()
        self._status(sweeps(self._p, xp, ffi.NULL, ffi.from_buffer("double[]", J)), xp)
        self._mark_replayed()
        parts, k = [], 0
        for shape in self._grad_shapes:
            size = int(np.prod(shape, dtype=np.int64))
            parts.append(J[:, k:k + size].reshape(tuple(yshape) + tuple(shape)))
            k += size
        user_out = out
        if out is not None and self._treedef is not None:
            out = self._tree_leaves(out, "out=")
        if out is not None:
            outs = check_out(out, parts)
            for o, p_ in zip(outs, parts):
                o[...] = p_
            return user_out
        # (np.ascontiguousarray would make a 0-d block, a float input's
        # derivative of a scalar output, 1-d)
        parts = [p_ if p_.flags.c_contiguous else p_.copy() for p_ in parts]
        if self._treedef is not None:
            return pytree.unflatten(self._treedef, parts)
        return parts[0] if len(parts) == 1 else tuple(parts)

    def vjp(self, x: PyTree, w: PyTree) -> Any:
        """w^T J at x: one reverse sweep seeded with w."""
        prog = self._program
        wv = np.ascontiguousarray(check_input(w, prog.out_shape), dtype=np.float64).reshape(-1)
        g = np.empty(self._g_len)
        xp = self._x_ptr(x)
        self._status(lib.rt_vjp(self._p, xp, ffi.from_buffer("double[]", wv),
                                ffi.NULL, ffi.from_buffer("double[]", g)), xp)
        self._mark_replayed()
        return self._split_grad(g, None)

    def jvp(self, x: PyTree, v: PyTree) -> Any:
        """J v at x (shaped like the output): one forward and one tangent sweep
        (forward mode) in C.  v is shaped like the differentiated input(s)."""
        ydot = self._jvp_flat(x, v)
        shape = self._program.out_shape
        return float(ydot[0]) if shape == () else ydot.reshape(shape)

    def _jvp_flat(self, x, v):
        vflat = self._tangent_vector(v)
        ydot = np.empty(self._program.out_len)
        xp = self._x_ptr(x)
        if not self.__dict__.get("_tangent_used"):
            self._note_tangent()
        self._status(lib.rt_jvp(self._p, xp, ffi.from_buffer("double[]", vflat),
                                ffi.NULL, ffi.from_buffer("double[]", ydot)), xp)
        self._mark_replayed()
        return ydot

    # Forward-over-reverse: the program of a HessianTape computes f's gradient
    # (the reverse pass, recorded), and tangent sweeps over it differentiate
    # that gradient in C.
    def hessian(self, x: PyTree, out: PyTree = None) -> Any:
        """The Hessian at x (input.shape * 2): one tangent sweep of the gradient
        program per input element, in C."""
        h = self._hessian_program()
        # H is symmetric: reverse sweeps of the gradient program (one per row)
        # give it too, for primitives that have a VJP but no JVP
        sweeps = lib.rt_jacobian_fwd if h._tangents_defined() else lib.rt_jacobian
        if h._parts is not None:
            flat = h._parts.flatten(x)
            return h._parts.blocks(h._jacobian(flat, None, flat.shape, sweeps), out)
        return h._jacobian(x, out, h._grad_shapes[0], sweeps)

    def hvp(self, x: PyTree, v: PyTree) -> Any:
        """H(x) v: one forward and one tangent sweep of the gradient program."""
        h = self._hessian_program()
        flat = h._jvp_flat if h._tangents_defined() else h._vjp_flat
        if h._parts is not None:
            hv = flat(h._parts.flatten(x), h._parts.flatten(v))
            return h._parts.split_result(hv, None)
        hv = flat(x, v)
        shape = h._grad_shapes[0]
        return float(hv[0]) if h._in_float[0] else hv.reshape(shape)

    def _tangents_defined(self):
        """Whether every Python callback on a tangent's path has a JVP rule."""
        table = self._table
        return table is None or all(
            site.has_jvp([need for _, _, need in operands])
            for site, _, _, _, operands in table.by_pc.values())

    def _vjp_flat(self, x, w):
        """v^T J at x with v shaped like the differentiated input (J square)."""
        wv = self._tangent_vector(w)
        g = np.empty(self._g_len)
        xp = self._x_ptr(x)
        self._status(lib.rt_vjp(self._p, xp, ffi.from_buffer("double[]", wv),
                                ffi.NULL, ffi.from_buffer("double[]", g)), xp)
        self._mark_replayed()
        return g
