"""Reductions as graph operations."""
from __future__ import annotations

from typing import Sequence

from cudnn_py import capi
from cudnn_py.core.args import enum_member, shape_arg
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..descriptors import BackendDescriptor
from .base import Builder, LowerContext, Op

__all__ = ["Reduction", "ReductionBuilders", "reduction_mode"]


def reduction_mode(mode) -> capi.cudnnReduceTensorOp_t:
    """A ``cudnnReduceTensorOp_t`` from a member, its value or a name ('add', 'max', 'avg', ...)."""
    return enum_member(capi.cudnnReduceTensorOp_t, mode, "CUDNN_REDUCE_TENSOR_", "reduction mode")


class Reduction(Op):
    """y = reduce(x) to y's shape (dims of size 1 are reduced)."""

    kind, backend, attrs = "reduction", "OPERATION_REDUCTION", {"x": "xdesc", "y": "ydesc"}

    def lower(self, ctx: LowerContext) -> None:
        red = BackendDescriptor("REDUCTION", operator=self.params["mode"],
                                comp_type=self.params["compute_dtype"]).finalize()
        self.add_to(ctx, red, desc=red)


class ReductionBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` method that adds a reduction."""

    def reduction(self, x, mode="add", *, axes: Sequence[int] | None = None, out_shape=None, compute_dtype=None,
                  name: str | None = None):
        """Reduce x over ``axes`` (kept as size-1 dims) or to ``out_shape``; mode: a ``cudnnReduceTensorOp_t``
        or 'add', 'mul', 'min', 'max', 'amax', 'avg', 'norm1', 'norm2'. Returns y (virtual)."""
        x = self._own(x, "x")
        op = reduction_mode(mode)
        if (axes is None) == (out_shape is None):
            raise InvalidValueError("reduction needs exactly one of axes= or out_shape=")
        if axes is not None:  # (then out_shape is None)
            if isinstance(axes, (int, str, bytes)) or not hasattr(axes, "__iter__"):
                raise InvalidTypeError(f"axes must be a sequence of ints, got {axes!r}")
            ax = {self._axis(a, x.ndim, "axes") for a in axes}
            out_shape = tuple(1 if i in ax else s for i, s in enumerate(x.shape))
        out_shape = shape_arg(out_shape, "out_shape")
        if len(out_shape) != x.ndim or any(o not in (1, s) for o, s in zip(out_shape, x.shape)):
            raise InvalidValueError(f"reduction output shape {out_shape} must keep x's rank with dims 1 or x's "
                                    f"{x.shape}")
        y = self.virtual(out_shape, name=name and f"{name}.y")
        self.add_op(Reduction({"x": x}, {"y": y}, {"mode": op, "compute_dtype": self._compute(compute_dtype)}, name))
        return y
