"""What every graph operation is: tensors by role, hashable parameters, and its own lowering to finalized
``CUDNN_BACKEND_OPERATION_*`` descriptors in a :class:`LowerContext` (docs/graph_operations.md: adding one).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from cudnn_py import capi

from ..descriptors import BackendDescriptor

if TYPE_CHECKING:  # pragma: no cover
    from ..graph import Graph, Tensor as Tensor  # re-exported for the builder mixins' annotations

__all__ = ["Op", "LowerContext", "Builder", "backend_dims", "loaded_version", "version_text"]


def loaded_version() -> tuple[int, int, int]:
    """The loaded cuDNN's (major, minor, patch)."""
    from cudnn_py.clib.loader import library
    return library().version


def version_text(v: Sequence[int]) -> str:
    return ".".join(map(str, v))


def backend_dims(shape: Sequence[int], strides: Sequence[int]) -> tuple[list[int], list[int]]:
    """Dims/strides as cuDNN sees them: padded with leading 1s to at least 3 dims (matmul needs a batch)."""
    shape, strides = list(shape), list(strides)
    while len(shape) < 3:
        strides.insert(0, shape[0] * strides[0])
        shape.insert(0, 1)
    return shape, strides


class Op:
    """One node of a graph: ``inputs``/``outputs`` map roles to tensors; ``params`` holds hashable settings (they key
    the plan cache). Subclasses set ``kind`` and implement :meth:`lower`, most through :meth:`add_to`."""

    kind: ClassVar[str] = ""
    backend: ClassVar[str] = ""
    #: role -> the operation descriptor's tensor attribute (a role not listed is its own attribute's name)
    attrs: ClassVar[dict[str, str]] = {}

    def __init__(self, inputs: dict[str, "Tensor"], outputs: dict[str, "Tensor"], params: dict[str, Any] | None = None,
                 name: str | None = ""):
        self.inputs, self.outputs = dict(inputs), dict(outputs)
        self.params = dict(params or {})
        self.name = name or self.kind

    def key(self) -> tuple:
        """The operation's identity for the plan cache: kind, tensor uids by role, parameters."""
        return (self.kind, tuple((r, t.uid) for r, t in self.inputs.items()),
                tuple((r, t.uid) for r, t in self.outputs.items()),
                tuple(sorted(((k, repr(v)) for k, v in self.params.items()))))

    def describe(self) -> str:
        """``kind[mode](role=tensor, ...) -> role=tensor``, for errors and printing."""
        ins = ", ".join(f"{r}={t.describe()}" for r, t in self.inputs.items())
        outs = ", ".join(f"{r}={t.describe()}" for r, t in self.outputs.items())
        p = self.params.get("mode")
        label = f"{self.kind}[{getattr(p, 'name', p)}]" if p is not None else self.kind
        return f"{label}({ins}) -> {outs}"

    def excluded_engines(self) -> dict[int, str]:
        """Engines (global index -> why) measured to answer wrong for this operation; plan building skips them."""
        return {}

    def lower(self, ctx: "LowerContext") -> None:
        """Add this operation's finalized backend operation descriptor(s) to ``ctx``."""
        raise NotImplementedError(f"{type(self).__name__} has no lowering")

    def set_tensors(self, d: BackendDescriptor, ctx: "LowerContext") -> None:
        """Set each tensor, inputs then outputs, as its role's attribute of ``d``."""
        for role, t in (*self.inputs.items(), *self.outputs.items()):
            d.set(self.attrs.get(role, role), ctx.tensor(t), attr_type="BACKEND_DESCRIPTOR")

    def add_to(self, ctx: "LowerContext", *helpers: BackendDescriptor, **settings: Any) -> None:
        """Add the finalized ``backend`` operation descriptor with ``settings`` and the tensors to ``ctx`` (keeping
        the ``helpers`` it references alive)."""
        d = BackendDescriptor(self.backend, **settings)
        self.set_tensors(d, ctx)
        ctx.add(d.finalize(), *helpers)

    def __repr__(self):
        return f"<{type(self).__name__} {self.describe()}>"


class Builder:
    """The base of the builder mixins: declares, for type checkers, the Graph members their methods use."""

    if TYPE_CHECKING:  # pragma: no cover
        name: str
        ops: list[Op]
        io_dtype: capi.cudnnDataType_t
        # builder methods of other mixins that a builder composes
        mul: Any
        scale: Any
        reduction: Any
        matmul: Any
        conv_fprop: Any

        def _own(self, t: Any, what: str) -> "Tensor": ...
        def virtual(self, shape: Sequence[int], strides: Sequence[int] | None = None, name: str | None = None,
                     like: "Tensor | None" = None) -> "Tensor": ...
        def add_op(self, op: Op) -> None: ...
        def _compute(self, compute_dtype: Any) -> capi.cudnnDataType_t: ...
        def _same_dtype(self, kind: str, *ts: "Tensor") -> None: ...
        def _axis(self, a: Any, ndim: int, what: str) -> int: ...
        def scalar(self, value: float, dtype: Any = None, name: str | None = None, ndim: int = 4) -> "Tensor": ...
        def tensor(self, shape: Sequence[int], dtype: Any = None, strides: Sequence[int] | None = None,
                   name: str | None = None, layout: str | None = None) -> "Tensor": ...


class LowerContext:
    """Lowering state of one graph for one handle: tensor descriptors by uid, the operation descriptors in order,
    and the helper descriptors they reference."""

    def __init__(self, graph: "Graph", handle=None):
        self.graph, self.handle = graph, handle
        self.operations: list[BackendDescriptor] = []
        self.kept: list[BackendDescriptor] = []
        self._tensors: dict[tuple, BackendDescriptor] = {}

    def tensor(self, t: "Tensor") -> BackendDescriptor:
        """The finalized ``TENSOR`` descriptor of ``t`` (made once per tensor)."""
        return self.view(t, t.shape, t.strides)

    def view(self, t: "Tensor", shape: Sequence[int], strides: Sequence[int]) -> BackendDescriptor:
        """A ``TENSOR`` descriptor for ``t``'s memory (same uid) seen with other dims/strides (K transposed)."""
        key = (t.uid, tuple(shape), tuple(strides))
        d = self._tensors.get(key)
        if d is None:
            dims, st = backend_dims(shape, strides)
            d = BackendDescriptor("TENSOR", data_type=t.dtype, dimensions=dims, strides=st, unique_id=t.uid,
                                  byte_alignment=max(4, t.np_dtype.itemsize) if t.is_by_value else 16,
                                  is_virtual=t.is_virtual)
            if t.is_by_value:
                d.set("is_by_value", True)
            if t.ragged_offset is not None:
                d.set("ragged_offset_desc", self.tensor(t.ragged_offset))
            d.finalize()
            self._tensors[key] = d
        return d

    def virtual(self, shape: Sequence[int], dtype=None, strides: Sequence[int] | None = None,
                name: str = "") -> "Tensor":
        """A new virtual tensor private to a composite operation's subgraph (default: intermediate dtype, packed)."""
        from ..graph import Tensor, packed_strides
        g = self.graph
        uid = g.new_uid()
        dt = g.intermediate_dtype if dtype is None else dtype
        return Tensor(g, uid, name or f"sub{uid}", tuple(shape),
                      tuple(strides) if strides is not None else packed_strides(shape), dt, True)

    def add(self, op_desc: BackendDescriptor, *helpers: BackendDescriptor) -> None:
        """Append a finalized operation descriptor, keeping the helpers it references alive."""
        self.operations.append(op_desc)
        self.kept.extend(helpers)
