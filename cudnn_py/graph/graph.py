"""The graph builder: tensors and operations in Python, lowered to a backend operation graph on build.

::

    g = cdp.Graph(io_dtype="float16", compute_dtype="float32")
    x = g.tensor((8, 64, 56, 56), name="x", layout="NHWC")
    w = g.tensor((64, 64, 3, 3), name="w", layout="NHWC")
    b = g.tensor((1, 64, 1, 1), name="b")
    y = g.relu(g.add(g.conv_fprop(x, w, padding=1), b)).set_output(True)
    g.build(h)                                  # heuristics -> first plan that builds (cached)
    g.execute(h, {x: xa, w: wa, b: ba, y: ya})  # or by name: {"x": xa, ...}

Tensors get unique ids automatically; intermediates are virtual until ``set_output(True)``. Shapes are checked
and output shapes inferred in Python, so a wrong graph fails before cuDNN is asked.
"""
from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np
import numpy.typing as npt

from cudnn_py import capi
from cudnn_py.core import conv_layout
from cudnn_py.core.args import int_tuple, shape_arg
from cudnn_py.core.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.core.strided import check_layout
from cudnn_py.errors import ClosedError, InvalidStateError, InvalidTypeError, InvalidValueError
from cudnn_py.core.handle import Handle, handle_arg

from .descriptors import BackendDescriptor
from .ops import (ConvBuilders, LowerContext, MatmulBuilders, NormBuilders, Op, PointwiseBuilders, QuantBuilders,
                  ReductionBuilders, ResampleBuilders, ReshapeBuilders, RngBuilders, SdpaBuilders)

__all__ = ["Graph", "Tensor"]

_DT = capi.cudnnDataType_t
#: (operation kind, input role) -> the output role it alone reaches element by element: running statistics
_ELEMENTWISE = {(kind, f"running_{s}"): f"next_running_{s}" for kind in ("norm_forward", "bn_finalize")
                for s in ("mean", "var")}
#: what a dtype argument takes: a cudnnDataType_t, a NumPy dtype or its name ("float16", "bfloat16", ...)
DataTypeLike = Union[npt.DTypeLike, capi.cudnnDataType_t]
#: what a ``handle`` argument takes: a Handle, or a raw ``cudnnHandle_t`` its owner manages
HandleLike = Union[Handle, capi.cudnnHandle_t, ctypes.c_void_p]

if TYPE_CHECKING:  # pragma: no cover
    from .execute import Executor
    from .plans import Plan


def graph_handle(handle: Any) -> HandleLike:
    """``handle`` checked: an open :class:`~cudnn_py.Handle` or a raw ``cudnnHandle_t`` (its owner manages it)."""
    if isinstance(handle, (capi.cudnnHandle_t, ctypes.c_void_p)):
        return handle
    handle = handle_arg(handle)
    if getattr(handle, "closed", False):
        raise ClosedError("the Handle is closed; use an open one")
    return handle


def packed_strides(shape: Sequence[int], layout: str | None = None) -> tuple[int, ...]:
    """Row-major strides; ``layout='NHWC'`` (channels last) for 4-D/5-D shapes given in N, C, spatial order."""
    if layout is not None and not isinstance(layout, str):
        raise InvalidTypeError(f"layout must be a string ('NCHW', 'NHWC') or None, got {type(layout).__name__}")
    name = "NCHW" if layout is None else layout.upper()
    channels_last = len(shape) >= 3 and name not in ("NCHW", "NCDHW", "ROW_MAJOR")
    if channels_last and name not in ("NHWC", "NDHWC", "CHANNELS_LAST"):
        raise InvalidValueError(f"layout must be 'NCHW' or 'NHWC' (or None), got {layout!r}")
    return conv_layout.packed_strides([max(int(n), 1) for n in shape], channels_last)


class Tensor:
    """A graph tensor: shape, strides (in elements), dtype, unique id, name, virtual/by-value flags."""

    __slots__ = ("graph", "uid", "name", "shape", "strides", "dtype", "is_virtual", "is_by_value", "value",
                 "ragged_offset", "_dtype_set")

    def __init__(self, graph, uid, name, shape, strides, dtype, virtual, by_value=False, value=None,
                 dtype_set=True):
        self.graph, self.uid, self.name = graph, uid, name
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), dtype
        self.is_virtual, self.is_by_value, self.value = virtual, by_value, value
        self.ragged_offset: Tensor | None = None
        self._dtype_set = dtype_set

    def set_output(self, is_output: bool = True) -> "Tensor":
        """Make this intermediate a real (non-virtual) output with device memory; returns self."""
        self.graph._check_open()
        self.is_virtual = not is_output
        if is_output and not self._dtype_set:
            self.dtype = self.graph.io_dtype
        return self

    def set_dtype(self, dtype) -> "Tensor":
        """Give this tensor its own dtype (before the graph is built); returns self."""
        self.graph._check_open()
        self.dtype, self._dtype_set = cudnn_dtype(dtype), True
        return self

    def set_name(self, name: str) -> "Tensor":
        """Rename this tensor (names are unique in a graph); returns self."""
        self.graph._rename(self, name)
        return self

    def set_ragged_offset(self, offsets: "Tensor") -> "Tensor":
        """Pack this (B, ...) tensor's batches back to back ("ragged", e.g. THD attention): ``offsets`` is an int32
        or int64 graph input of shape (B + 1, 1, ...) holding each batch's start, in elements; returns self."""
        self.graph._check_open()
        o = self.graph._own(offsets, "offsets")
        if o.is_virtual or o.is_by_value or o.dtype not in (_DT.CUDNN_DATA_INT32, _DT.CUDNN_DATA_INT64):
            raise InvalidTypeError(f"ragged offsets must be an int32/int64 input tensor, got {o.describe()}")
        if o.ndim != self.ndim or o.shape[0] != self.shape[0] + 1 or any(s != 1 for s in o.shape[1:]):
            raise InvalidValueError(f"ragged offsets of {self.name} {self.shape} must have shape "
                             f"{(self.shape[0] + 1,) + (1,) * (self.ndim - 1)}, got {o.shape}")
        self.ragged_offset = o
        return self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def np_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    def key(self) -> tuple:
        """What identifies this tensor in a graph's structure (the plan-cache key)."""
        return (self.uid, self.shape, self.strides, int(self.dtype), self.is_virtual, self.is_by_value, self.value,
                None if self.ragged_offset is None else self.ragged_offset.uid)

    def describe(self) -> str:
        kind = "virtual " if self.is_virtual else ("scalar " if self.is_by_value else "")
        return f"{self.name}:{kind}{list(self.shape)} {self.dtype.name[len('CUDNN_DATA_'):].lower()}"

    def __repr__(self):
        return f"<Tensor {self.describe()} uid={self.uid} strides={list(self.strides)}>"


class Graph(ConvBuilders, MatmulBuilders, PointwiseBuilders, ReductionBuilders, NormBuilders, SdpaBuilders,
            ResampleBuilders, RngBuilders, ReshapeBuilders, QuantBuilders):  # the builder methods: one mixin per module
    """An operation graph under construction (see the module doc). ``io_dtype`` is the default dtype of tensors
    and outputs, ``compute_dtype`` of operations, ``intermediate_dtype`` of virtual tensors."""

    def __init__(self, io_dtype: DataTypeLike = "float32", compute_dtype: DataTypeLike = "float32",
                 intermediate_dtype: DataTypeLike | None = None, name: str = "graph") -> None:
        self.io_dtype = cudnn_dtype(io_dtype)
        self.compute_dtype = cudnn_dtype(compute_dtype)
        self.intermediate_dtype = self._compute(intermediate_dtype)
        self.name = name
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self._names: dict[str, Tensor] = {}
        self._next_uid = 1
        self._scalar_bufs: dict[int, np.ndarray] = {}
        self._frozen = False
        self.plans: list = []        # filled by build(); plans[0] is the one execute() uses
        self._lowered: tuple | None = None

    # -- tensors ------------------------------------------------------------------------------------------------
    def freeze(self) -> None:
        """Refuse further changes: plans made for this structure must not change under it."""
        self._frozen = True

    def _check_open(self):
        if self._frozen:
            raise InvalidStateError(f"graph {self.name!r} is built; build a new Graph to change it")

    def new_uid(self) -> int:
        """A fresh tensor uid (for the builders and lowering)."""
        self._next_uid += 1
        return self._next_uid - 1

    def _new(self, prefix: str, name: str | None, *args: Any, **kw: Any) -> Tensor:
        """A new tensor of this graph with a fresh uid, named ``<prefix><uid>`` unless ``name`` is given."""
        uid = self.new_uid()
        t = Tensor(self, uid, name or f"{prefix}{uid}", *args, **kw)
        self._rename(t, t.name)
        self.tensors.append(t)
        return t

    def _rename(self, t: Tensor, name: str):
        if not isinstance(name, str) or not name:
            raise InvalidTypeError(f"a tensor name must be a non-empty str, got {name!r}")
        if name in self._names and self._names[name] is not t:
            raise InvalidValueError(f"graph {self.name!r} already has a tensor named {name!r}")
        self._names.pop(t.name, None)
        t.name = name
        self._names[name] = t

    def tensor(self, shape: Sequence[int], dtype=None, strides: Sequence[int] | None = None, name: str | None = None,
               layout: str | None = None) -> Tensor:
        """A graph input/output tensor with device memory. ``strides`` in elements (default packed row-major, or
        channels-last with ``layout='NHWC'``); :meth:`validate` refuses strides that reach an element twice."""
        self._check_open()
        shape = shape_arg(shape, "shape")
        if not 0 < len(shape) <= 8:
            raise InvalidValueError(f"tensor shape must have 1 to 8 dims, got {shape}")
        if strides is None:
            strides = packed_strides(shape, layout)
        else:
            strides = int_tuple(strides, "strides", minimum=0, maximum=2 ** 63 - 1)
            if len(strides) != len(shape):
                raise InvalidValueError(f"strides {strides} do not match shape {shape} (need {len(shape)} values)")
        return self._new("t", name, shape, strides, cudnn_dtype(dtype) if dtype is not None else self.io_dtype, False)

    def tensor_like(self, array, name: str | None = None) -> Tensor:
        """A tensor with the shape, strides and dtype of an array (DeviceArray, NumPy, torch, anything with
        ``shape``/``dtype``)."""
        shape = tuple(array.shape)
        dtype = getattr(array, "dtype", None)
        strides = getattr(array, "strides", None)
        if isinstance(array, np.ndarray):
            strides = tuple(s // array.itemsize for s in array.strides)
        elif callable(getattr(array, "stride", None)):  # torch
            strides = tuple(array.stride())
        if dtype is not None and not isinstance(dtype, (np.dtype, _DT)):
            dtype = str(dtype).replace("torch.", "")
        return self.tensor(shape, dtype=dtype, strides=strides, name=name)

    def scalar(self, value: float, dtype=None, name: str | None = None, ndim: int = 4) -> Tensor:
        """A by-value scalar (a host constant baked into the graph), broadcastable against ``ndim``-D tensors."""
        self._check_open()
        dt = cudnn_dtype(dtype) if dtype is not None else _DT.CUDNN_DATA_FLOAT
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InvalidTypeError(f"scalar value must be a number, got {type(value).__name__}")
        if isinstance(ndim, bool) or not isinstance(ndim, int) or not 1 <= ndim <= 8:
            raise InvalidValueError(f"scalar ndim must be an int from 1 to 8, got {ndim!r}")
        npdt = numpy_dtype(dt)
        if npdt.kind in "iub":
            info = np.iinfo(npdt) if npdt.kind != "b" else None
            if (isinstance(value, (float, np.floating)) and (not math.isfinite(value) or value != int(value))) or (
                    not (info.min <= int(value) <= info.max if info is not None else int(value) in (0, 1))):
                raise InvalidValueError(f"scalar {value!r} does not fit {npdt}")
            buf = np.array([int(value)], dtype=npdt)
        else:
            try:
                with np.errstate(over="ignore"):
                    buf = np.array([float(value)], dtype=npdt)
            except OverflowError:
                raise InvalidValueError(f"scalar {value!r} does not fit {npdt}") from None
            if math.isfinite(value) and not np.isfinite(buf.astype(np.float64)[0]):
                raise InvalidValueError(f"scalar {value!r} does not fit {npdt} (it would become {buf[0]})")
        t = self._new("scalar", name, (1,) * ndim, (1,) * ndim, dt, False, True,
                      int(value) if npdt.kind in "iub" else float(value))
        self._scalar_bufs[t.uid] = buf
        return t

    def virtual(self, shape: Sequence[int], strides: Sequence[int] | None = None, name: str | None = None,
                like: Tensor | None = None) -> Tensor:
        """A new virtual tensor in the intermediate dtype: packed strides, channels-last when ``like`` is."""
        if strides is None:
            cl = (like is not None and len(shape) == like.ndim >= 4 and like.shape[1] > 1
                  and like.strides == packed_strides(like.shape, "NHWC"))
            strides = packed_strides(shape, "NHWC" if cl else None)
        return self._new("v", name, shape, strides, self.intermediate_dtype, True, dtype_set=False)

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self._names[name]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no tensor named {name!r}; it has "
                           + ", ".join(self._names)) from None

    def _own(self, t, what: str) -> Tensor:
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            raise InvalidTypeError(f"{what}: use g.scalar(value) for a constant")
        if not isinstance(t, Tensor):
            raise InvalidTypeError(f"{what} must be a Tensor of this graph, got {type(t).__name__}")
        if t.graph is not self:
            raise InvalidValueError(f"{what} ({t.name}) belongs to another graph")
        return t

    @staticmethod
    def _same_dtype(kind: str, *ts: Tensor) -> None:
        """Non-virtual operands of a convolution or matmul must share one dtype (cuDNN has no mixed engines)."""
        real = [t for t in ts if not t.is_virtual]
        if len({int(t.dtype) for t in real}) > 1:
            raise InvalidTypeError(f"{kind}: operands have different dtypes ("
                            + ", ".join(f"{t.name}: {t.dtype.name}" for t in real) + "); give them one dtype")

    def _compute(self, compute_dtype) -> capi.cudnnDataType_t:
        return cudnn_dtype(compute_dtype) if compute_dtype is not None else self.compute_dtype

    def add_op(self, op: Op) -> None:
        """Append an operation (named ``kind<index>`` unless it has a name); the builders call it."""
        self._check_open()
        if not op.name or op.name == op.kind:
            op.name = f"{op.kind}{len(self.ops)}"
        self.ops.append(op)

    # -- argument checks shared by the builder methods ----------------------------------------------------------
    @staticmethod
    def _axis(a, ndim: int, what: str) -> int:
        """An axis in ``[-ndim, ndim)`` as a non-negative int."""
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise InvalidTypeError(f"{what} must hold ints, got {a!r}")
        if not -ndim <= a < ndim:
            raise InvalidValueError(f"{what}: axis {a} is out of range for rank {ndim}")
        return int(a) % ndim

    # -- structure ----------------------------------------------------------------------------------------------
    def _used_uids(self) -> set[int]:
        ts = [t for op in self.ops for t in (*op.inputs.values(), *op.outputs.values())]
        return {t.uid for t in ts} | {t.ragged_offset.uid for t in ts if t.ragged_offset is not None}

    def key(self) -> tuple:
        """The graph's structure, shapes and dtypes: equal keys lower to equal operation graphs."""
        used = self._used_uids()
        return (tuple(t.key() for t in self.tensors if t.uid in used), tuple(op.key() for op in self.ops))

    def describe(self) -> str:
        """One line per operation, for error messages and printing."""
        return "; ".join(op.describe() for op in self.ops) or "(no operations)"

    def __repr__(self):
        return f"<Graph {self.name!r}: {self.describe()}>"

    def io_tensors(self) -> list[Tensor]:
        """The non-virtual tensors the operations use (what a variant pack must bind)."""
        used = self._used_uids()
        return [t for t in self.tensors if t.uid in used and not t.is_virtual]

    def in_place_pairs(self) -> frozenset[tuple[int, int]]:
        """(input uid, output uid) of the outputs that may be bound over an input as its identical view: the one output
        of its shape the input reaches, element by element (pointwise operations, running statistics)."""
        def reach(t: Tensor) -> set[Tensor] | None:  # the real outputs t reaches element by element (None: not only)
            got: set[Tensor] = set()
            for op, role in ((op, r) for op in self.ops for r, i in op.inputs.items() if i is t):
                step = _ELEMENTWISE.get((op.kind, role))
                if op.kind != "pointwise" and step is None:
                    return None
                for o in op.outputs.values() if step is None else [op.outputs[step]] * (step in op.outputs):
                    more = reach(o) if o.is_virtual else {o}
                    if more is None:
                        return None
                    got |= more
            return got
        produced = {t.uid for op in self.ops for t in op.outputs.values()}
        pairs = ((x, reach(x)) for x in self.io_tensors() if x.uid not in produced)
        return frozenset((x.uid, y.uid) for x, got in pairs if got and len(got) == 1 for y in got if y.shape == x.shape)

    def validate(self) -> None:
        """Python-side checks before cuDNN sees the graph: at least one op and output; no dangling virtuals; no
        tensor with memory whose elements overlap."""
        if not self.ops:
            raise InvalidValueError(f"graph {self.name!r} has no operations")
        produced = {t.uid for op in self.ops for t in op.outputs.values()}
        consumed = {t.uid for op in self.ops for t in op.inputs.values()}
        for op in self.ops:
            for role, t in op.inputs.items():
                if t.is_virtual and t.uid not in produced:
                    raise InvalidValueError(f"{op.describe()}: input {role} is virtual but no operation produces it")
        dangling = [t.name for t in self.tensors if t.is_virtual and t.uid in produced and t.uid not in consumed]
        if dangling:
            raise InvalidValueError(f"graph {self.name!r}: {', '.join(dangling)} is computed but neither used nor an "
                             f"output; call .set_output(True) on it")
        if not any(not t.is_virtual for op in self.ops for t in op.outputs.values()):
            raise InvalidValueError(f"graph {self.name!r} has no output: call .set_output(True) on a result")
        for t in self.io_tensors():  # a broadcast input was never verified; an output of it, racing threads write
            ragged = t.ragged_offset is not None  # its batches placed by offsets: the batch stride goes unused
            check_layout(t.shape[ragged:], t.strides[ragged:], f"graph {self.name!r}: tensor {t.name}'s")

    def scalar_pointer(self, t: Tensor) -> int:
        """The host address of by-value scalar ``t``'s value (what a variant pack binds)."""
        return self._scalar_bufs[t.uid].ctypes.data

    # -- lowering -----------------------------------------------------------------------------------------------
    def lower(self, handle: HandleLike) -> BackendDescriptor:
        """The finalized ``OPERATIONGRAPH`` descriptor for ``handle`` (cached for the last handle given; needs a CUDA
        driver). Freezes the graph."""
        handle = graph_handle(handle)
        if self._lowered is not None and self._lowered[0] is handle:
            return self._lowered[1]
        self.validate()
        ctx = LowerContext(self, handle)
        for op in self.ops:
            op.lower(ctx)
        g = BackendDescriptor("OPERATIONGRAPH", ops=ctx.operations, handle=handle).finalize()
        self.freeze()
        self._lowered = (handle, g, ctx)  # the operation graph holds the handle: one per handle
        return g

    # -- plans and execution ------------------------------------------------------------------------------------
    def build(self, handle: HandleLike, modes: Sequence[str] = ("A", "FALLBACK"), *, policy: str = "first",
              **filters: Any) -> "Graph":
        """Build plans (``policy='first'``: the first heuristic config that builds; ``'all'``: every one), using
        the handle's plan cache; returns self. Raises :class:`GraphNotSupportedError` naming the operations,
        the modes tried and cuDNN's reasons when no engine supports the graph."""
        from .plans import build_plans
        self.plans = build_plans(self, graph_handle(handle), modes=modes, policy=policy, **filters)
        return self

    def is_supported(self, handle: HandleLike, modes: Sequence[str] = ("A", "FALLBACK")) -> bool:
        """Whether some engine config of ``modes`` builds a plan for this graph (never raises for that)."""
        from .errors import GraphNotSupportedError
        try:
            self.build(handle, modes=modes)
        except (GraphNotSupportedError, ValueError):
            return False
        return True

    def autotune(self, handle: HandleLike, variant_pack: dict, *, modes: Sequence[str] = ("A", "B", "FALLBACK"),
                 warmup: int = 2, iters: int = 5, **filters: Any) -> list[tuple["Plan", float | None]]:
        """Time every plan of ``modes`` on ``variant_pack`` and keep the fastest first: see
        :func:`cudnn_py.graph.autotune`. Returns [(plan, GPU milliseconds)], the kept plan first."""
        from .plans import autotune
        return autotune(self, graph_handle(handle), variant_pack, modes=modes, warmup=warmup, iters=iters, **filters)

    @property
    def plan(self) -> "Plan":
        if not self.plans:
            raise InvalidStateError(f"graph {self.name!r} has no plan: call build(handle) or autotune(...) first")
        return self.plans[0]

    def workspace_size(self) -> int:
        """Bytes of workspace the selected plan needs."""
        return self.plan.workspace_size

    def execute(self, handle: HandleLike, variant_pack: dict, workspace: Any = None) -> None:
        """Run the selected plan on ``handle``'s stream. ``variant_pack`` maps tensors (or their names) to device
        arrays (DeviceArray or any DLPack/CAI tensor); the workspace comes from ``handle.workspace`` unless a
        device pointer/array is given."""
        handle = graph_handle(handle)
        self.plan.execute(handle, variant_pack, workspace)

    def executor(self, handle: HandleLike, *tensors: Any, identity_cache: int = 4) -> "Executor":
        """A fast callable ``run(*arrays)`` binding arrays to ``tensors`` (or names) positionally; see
        :class:`cudnn_py.graph.execute.Executor`."""
        handle = graph_handle(handle)
        return self.plan.executor(handle, *tensors, identity_cache=identity_cache)
