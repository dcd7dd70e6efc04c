"""Layout and data movement as graph operations: reshape, transpose, slice, concatenate.

An operation the loaded cuDNN lacks (:data:`NEEDS`) is refused with :class:`~cudnn_py.graph.GraphNotSupportedError`
before cuDNN is called; before 9.22 (no reshape mode) a reshape is a view of x's memory: x must be packed row-major.
"""
from __future__ import annotations

import math

from cudnn_py import capi
from cudnn_py.core.args import shape_arg
from cudnn_py.core.memory import is_c_contiguous
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..descriptors import BackendDescriptor
from ..errors import GraphNotSupportedError
from .base import Builder, LowerContext, Op, loaded_version as _loaded, version_text as _v

__all__ = ["Reshape", "Transpose", "Slice", "Concatenate", "ReshapeBuilders", "NEEDS"]

#: backend operation -> the first cuDNN version that has it
NEEDS = {"OPERATION_RESHAPE": (9, 0, 0), "OPERATION_CONCAT": (9, 7, 0), "OPERATION_TRANSPOSE": (9, 22, 0),
         "OPERATION_SLICE": (9, 22, 0)}
_RESHAPE_MODE_SINCE = (9, 22, 0)


_XY = {"x": "xdesc", "y": "ydesc"}


class Reshape(Op):
    """y = x with another shape, elements in row-major order."""

    kind, backend, attrs = "reshape", "OPERATION_RESHAPE", _XY

    def lower(self, ctx: LowerContext) -> None:
        logical = {"mode": capi.cudnnBackendReshapeMode_t.CUDNN_RESHAPE_LOGICAL} if self.params["logical_mode"] else {}
        self.add_to(ctx, **logical)


class Transpose(Op):
    """y = x with its dims permuted (y.shape[i] = x.shape[perm[i]])."""

    kind, backend, attrs = "transpose", "OPERATION_TRANSPOSE", _XY

    def lower(self, ctx: LowerContext) -> None:
        self.add_to(ctx, permutation=list(self.params["perm"]))


class Slice(Op):
    """y = x[start:limit:step] per dim."""

    kind, backend, attrs = "slice", "OPERATION_SLICE", _XY

    def lower(self, ctx: LowerContext) -> None:
        p = self.params
        self.add_to(ctx, start_indices=list(p["start"]), limit_indices=list(p["limit"]), strides=list(p["step"]))


class Concatenate(Op):
    """y = the inputs (roles x0, x1, ...) joined along ``axis``."""

    kind = "concatenate"

    def lower(self, ctx: LowerContext) -> None:
        p = self.params
        xs = [ctx.tensor(self.inputs[f"x{i}"]) for i in range(len(self.inputs))]
        d = BackendDescriptor("OPERATION_CONCAT", input_descs=xs, output_desc=ctx.tensor(self.outputs["y"]),
                              axis=int(p["axis"]))
        if p["inplace_index"] is not None:
            d.set("inplace_index", int(p["inplace_index"]))
        ctx.add(d.finalize())


class ReshapeBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that move data."""

    def _needs(self, backend: str, what: str) -> None:
        have, need = _loaded(), NEEDS[backend]
        if have < need:
            raise GraphNotSupportedError(self.name, [what], [], [(
                f"cuDNN {_v(have)} (loaded)", f"{backend} needs cuDNN >= {_v(need)}; this library does not have it")])

    def reshape(self, x, shape, *, name: str | None = None):
        """x with a new ``shape`` (same element count, row-major element order). Returns y (virtual, packed)."""
        x = self._own(x, "x")
        shape = shape_arg(shape, "shape")
        if math.prod(shape) != math.prod(x.shape):
            raise InvalidValueError(f"reshape: x {x.shape} has {math.prod(x.shape)} elements, shape {shape} has "
                                    f"{math.prod(shape)}")
        logical = _loaded() >= _RESHAPE_MODE_SINCE
        if not logical and not is_c_contiguous(x.shape, x.strides):
            raise GraphNotSupportedError(self.name, [f"reshape({x.describe()} strides {list(x.strides)})"], [], [(
                f"cuDNN {_v(_loaded())} (loaded)", f"before cuDNN {_v(_RESHAPE_MODE_SINCE)} a reshape is a view of "
                f"x's memory: x must be packed row-major")])
        y = self.virtual(shape, name=name and f"{name}.y")
        self.add_op(Reshape({"x": x}, {"y": y}, {"logical_mode": logical}, name))
        return y

    def transpose(self, x, perm, *, name: str | None = None):
        """x with dims permuted: y.shape[i] = x.shape[perm[i]] (cuDNN >= 9.22). Returns y (virtual, packed)."""
        x = self._own(x, "x")
        try:
            perm = tuple(self._axis(a, x.ndim, "perm") for a in perm)
        except TypeError:
            raise InvalidTypeError(f"perm must be a sequence of ints, got {perm!r}") from None
        if sorted(perm) != list(range(x.ndim)):
            raise InvalidValueError(f"perm {perm} is not a permutation of 0..{x.ndim - 1}")
        self._needs("OPERATION_TRANSPOSE", f"transpose({x.describe()}, perm={list(perm)})")
        y = self.virtual(tuple(x.shape[a] for a in perm), name=name and f"{name}.y")
        self.add_op(Transpose({"x": x}, {"y": y}, {"perm": perm}, name))
        return y

    def slice(self, x, slices, *, name: str | None = None):
        """x[slices]: one Python ``slice`` per leading dim (missing trailing dims are taken whole); starts and
        stops must lie inside the tensor (negative ones count from the end), steps >= 1 (cuDNN >= 9.22). Returns
        y (virtual, packed)."""
        x = self._own(x, "x")
        if isinstance(slices, slice):
            slices = (slices,)
        slices = tuple(slices)
        if len(slices) > x.ndim:
            raise InvalidValueError(f"slice: {len(slices)} slices for a rank-{x.ndim} tensor")
        start, limit, step = [], [], []
        for i, n in enumerate(x.shape):
            s = slices[i] if i < len(slices) else slice(None)
            if not isinstance(s, slice):
                raise InvalidTypeError(f"slice: dim {i} needs a slice object (a:b:c), got {s!r}")
            a = 0 if s.start is None else int(s.start)
            b = n if s.stop is None else int(s.stop)
            c = 1 if s.step is None else int(s.step)
            a, b = a + n if a < 0 else a, b + n if b < 0 else b
            if c < 1:
                raise InvalidValueError(f"slice: dim {i} step must be >= 1, got {c}")
            if not (0 <= a < b <= n):
                raise InvalidValueError(f"slice: dim {i} range {s.start}:{s.stop} is outside the tensor's 0:{n} or "
                                        f"empty")
            start.append(a)
            limit.append(b)
            step.append(c)
        self._needs("OPERATION_SLICE", f"slice({x.describe()}, {start}:{limit}:{step})")
        shape = tuple(-(-(b - a) // c) for a, b, c in zip(start, limit, step))
        y = self.virtual(shape, name=name and f"{name}.y")
        self.add_op(Slice({"x": x}, {"y": y}, {"start": tuple(start), "limit": tuple(limit), "step": tuple(step)},
                           name))
        return y

    def concatenate(self, tensors, axis: int, *, inplace_index: int | None = None, name: str | None = None):
        """The tensors (same rank and dtype, equal sizes off ``axis``) joined along ``axis``. ``inplace_index``:
        the input whose memory already is its part of the output (not copied). Returns y (virtual, packed in the
        first input's layout)."""
        if isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
            raise InvalidTypeError("concatenate takes a sequence of tensors")
        ts = [self._own(t, f"tensors[{i}]") for i, t in enumerate(tensors)]
        if len(ts) < 2:
            raise InvalidValueError(f"concatenate needs at least two tensors, got {len(ts)}")
        first = ts[0]
        ax = self._axis(axis, first.ndim, "axis")
        for i, t in enumerate(ts[1:], 1):
            if t.ndim != first.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != ax):
                raise InvalidValueError(f"concatenate: tensors[{i}] {t.shape} does not match tensors[0] {first.shape} "
                                        f"off axis {ax}")
            if not (t.is_virtual or first.is_virtual) and t.dtype != first.dtype:
                raise InvalidTypeError(f"concatenate: tensors[{i}] is {t.dtype.name}, tensors[0] {first.dtype.name}")
        if inplace_index is not None:
            inplace_index = self._axis(inplace_index, len(ts), "inplace_index")
        self._needs("OPERATION_CONCAT", f"concatenate(axis={ax})")
        shape = tuple(sum(t.shape[ax] for t in ts) if k == ax else n for k, n in enumerate(first.shape))
        y = self.virtual(shape, like=first, name=name and f"{name}.y")
        self.add_op(Concatenate({f"x{i}": t for i, t in enumerate(ts)}, {"y": y},
                                 {"axis": ax, "inplace_index": inplace_index}, name))
        return y
