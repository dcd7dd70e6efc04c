"""Matrix multiplication as a graph operation."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cudnn_py.clib.loader import library
from cudnn_py.errors import InvalidValueError

from ..descriptors import BackendDescriptor
from ..errors import GraphNotSupportedError
from .base import Builder, LowerContext, Op, version_text

if TYPE_CHECKING:  # pragma: no cover
    from .base import Tensor

__all__ = ["Matmul", "MatmulBuilders", "BROADCAST_SINCE"]

#: the oldest cuDNN whose matmul engines were verified to broadcast a batch dim (docs/graph_operations.md)
BROADCAST_SINCE = (9, 19, 0)


class Matmul(Op):
    """c = a @ b over the last two dims (batch dims broadcast)."""

    kind, backend, attrs = "matmul", "OPERATION_MATMUL", {"a": "adesc", "b": "bdesc", "c": "cdesc"}

    def lower(self, ctx: LowerContext) -> None:
        mm = BackendDescriptor("MATMUL", comp_type=self.params["compute_dtype"]).finalize()
        self.add_to(ctx, mm, desc=mm)


class MatmulBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` method that adds a matmul."""

    def matmul(self, a: Tensor, b: Tensor, *, compute_dtype: Any = None, name: str | None = None) -> Tensor:
        """c = a @ b over the last two dims; batch dims broadcast (size 1 against n). Same rank (>= 2) needed.
        Returns c (virtual)."""
        a, b = self._own(a, "a"), self._own(b, "b")
        self._same_dtype("matmul", a, b)
        if a.ndim < 2 or a.ndim != b.ndim:
            raise InvalidValueError(f"matmul needs a and b of the same rank >= 2, got {a.shape} and {b.shape}")
        if a.shape[-1] != b.shape[-2]:
            raise InvalidValueError(f"matmul: a is {a.shape} and b is {b.shape}; a's last dim must equal b's "
                                    f"second-last")
        batch = []
        for i, (m, n) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
            if m != n and 1 not in (m, n):
                raise InvalidValueError(f"matmul: batch dim {i} does not broadcast ({m} vs {n})")
            batch.append(max(m, n))
        if a.shape[:-2] != b.shape[:-2]:
            loaded = library().version
            if loaded < BROADCAST_SINCE:
                v = version_text(loaded)
                raise GraphNotSupportedError(self.name, [f"matmul({a.describe()}, {b.describe()})"], [], [(
                    f"cuDNN {v} (loaded)", f"a batch dim broadcasts (size 1 against n), which cuDNN {v} computes "
                    f"wrongly (output elements left unwritten, measured on 9.14); verified from cuDNN "
                    f"{version_text(BROADCAST_SINCE)}: expand the operand to the full batch")])
        c = self.virtual((*batch, a.shape[-2], b.shape[-1]), name=name and f"{name}.c")
        self.add_op(Matmul({"a": a, "b": b}, {"c": c}, {"compute_dtype": self._compute(compute_dtype)}, name))
        return c
