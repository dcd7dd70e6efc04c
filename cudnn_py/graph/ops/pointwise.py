"""Pointwise operations (every ``cudnnPointwiseMode_t``) and their named shortcuts."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from cudnn_py import capi
from cudnn_py.core.args import enum_member, float_arg
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..descriptors import BackendDescriptor
from .base import Builder, LowerContext, Op

if TYPE_CHECKING:  # pragma: no cover
    from .base import Tensor

__all__ = ["Pointwise", "PointwiseBuilders", "POINTWISE_ARITY", "pointwise_mode"]

_PW = capi.cudnnPointwiseMode_t
_BINARY = {"ADD", "ADD_SQUARE", "DIV", "MAX", "MIN", "MOD", "MUL", "POW", "SUB", "ATAN2", "FLOOR_MOD",
           "CMP_EQ", "CMP_NEQ", "CMP_GT", "CMP_GE", "CMP_LT", "CMP_LE", "LOGICAL_AND", "LOGICAL_OR"}
#: pointwise descriptor settings a mode may take
_FLOAT_PARAMS = ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope", "elu_alpha", "softplus_beta",
                 "swish_beta")
#: role -> tensor attribute of the pointwise operation
_ROLE_ATTRS = {"x": "xdesc", "b": "bdesc", "t": "tdesc", "y": "ydesc", "dy": "dydesc", "dx": "dxdesc"}


def _arity(name: str) -> str:
    short = name[len("CUDNN_POINTWISE_"):]
    if short.endswith("_BWD"):
        return "backward"
    if short == "BINARY_SELECT":
        return "ternary"
    if short == "GEN_INDEX":
        return "nullary"
    return "binary" if short in _BINARY else "unary"


#: every pointwise mode -> 'unary' | 'binary' | 'ternary' | 'backward' (dy, x -> dx) | 'nullary' (gen_index: x gives
#: only the shape)
POINTWISE_ARITY: dict[capi.cudnnPointwiseMode_t, str] = {m: _arity(m.name) for m in _PW}


def pointwise_mode(mode) -> capi.cudnnPointwiseMode_t:
    """A ``cudnnPointwiseMode_t`` from a member, its value, a full name or a short one (``'relu_fwd'``, ``'add'``)."""
    return enum_member(_PW, mode, "CUDNN_POINTWISE_", "pointwise mode")


def broadcast_shape(what: str, ins) -> tuple[int, ...]:
    """The shape tensors of one rank broadcast to (size-1 dims stretch); ``what`` names the operation in errors."""
    rank = ins[0].ndim
    if any(v.ndim != rank for v in ins):
        raise InvalidValueError(f"{what}: inputs need the same rank, got " + ", ".join(str(v.shape) for v in ins))
    shape = []
    for i in range(rank):
        sizes = {v.shape[i] for v in ins} - {1}
        if len(sizes) > 1:
            raise InvalidValueError(f"{what}: dim {i} does not broadcast: " + ", ".join(str(v.shape) for v in ins))
        shape.append(sizes.pop() if sizes else 1)
    return tuple(shape)


class Pointwise(Op):
    """One pointwise operation; ``params``: mode, compute_dtype and the mode's settings."""

    kind, backend, attrs = "pointwise", "OPERATION_POINTWISE", _ROLE_ATTRS

    def lower(self, ctx: LowerContext) -> None:
        p = self.params
        pw = BackendDescriptor("POINTWISE", mode=p["mode"], math_prec=p["compute_dtype"])
        for k in (*_FLOAT_PARAMS, "axis"):
            if p.get(k) is not None:
                pw.set(k, p[k])
        self.add_to(ctx, pw, pw_descriptor=pw.finalize())


class PointwiseBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that add pointwise operations."""

    def pointwise(self, mode: Any, x: Tensor, b: Tensor | float | None = None, t: Tensor | None = None, *,
                  compute_dtype: Any = None, name: str | None = None, **params: Any) -> Tensor:
        """Any ``cudnnPointwiseMode_t`` (``'add'``, ``'relu_fwd'``, ``'cmp_gt'``, ``'binary_select'``...). Binary
        modes take ``b`` (a tensor that broadcasts to x, or a number: a by-value scalar); ``binary_select``
        takes ``b`` and the mask ``t``; backward modes take ``x`` = dy and ``b`` = the forward input;
        ``gen_index`` takes ``x`` for its shape and ``axis=``. ``params``: relu_lower_clip, relu_upper_clip,
        relu_lower_clip_slope, elu_alpha, softplus_beta, swish_beta, axis. Returns the output (virtual)."""
        mode = pointwise_mode(mode)
        arity = POINTWISE_ARITY[mode]
        x = self._own(x, "x")
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            b = self.scalar(b, ndim=x.ndim)
        need = {"nullary": 0, "unary": 0, "binary": 1, "ternary": 2, "backward": 1}[arity]
        given = (b is not None) + (t is not None)
        if given != need:
            raise InvalidValueError(f"pointwise {mode.name} is {arity} and takes {need} tensor(s) besides x, got "
                                    f"{given}")
        unknown = set(params) - set(_FLOAT_PARAMS) - {"axis"}
        if unknown:
            raise InvalidTypeError(f"pointwise: unknown parameter(s) {', '.join(sorted(unknown))}; known: "
                            + ", ".join((*_FLOAT_PARAMS, "axis")))
        clean = {k: self._axis(v, x.ndim, k) if k == "axis" else float_arg(v, k) for k, v in params.items()
                 if v is not None}
        if arity == "nullary" and "axis" not in clean:
            raise InvalidValueError(f"pointwise {mode.name} needs axis=")
        ins = [x] + [self._own(v, n) for v, n in ((b, "b"), (t, "t")) if v is not None]
        shape = broadcast_shape(f"pointwise {mode.name}", ins)
        like = max(ins, key=lambda v: math.prod(v.shape))
        out = self.virtual(shape, strides=like.strides if like.shape == shape else None, like=like,
                            name=name and f"{name}.y")
        p = {"mode": mode, "compute_dtype": self._compute(compute_dtype), **clean}
        if arity == "backward":
            self.add_op(Pointwise({"dy": x, "x": ins[1]}, {"dx": out}, p, name))
        else:
            self.add_op(Pointwise(dict(zip(("x", "b", "t"), ins)), {"y": out}, p, name))
        return out

    def add(self, a: Tensor, b: Tensor | float, **kw: Any) -> Tensor:
        """a + b (broadcasting; ``b`` may be a number)."""
        return self.pointwise("add", a, b, **kw)

    def sub(self, a: Tensor, b: Tensor | float, **kw: Any) -> Tensor:
        """a - b."""
        return self.pointwise("sub", a, b, **kw)

    def mul(self, a: Tensor, b: Tensor | float, **kw: Any) -> Tensor:
        """a * b."""
        return self.pointwise("mul", a, b, **kw)

    def div(self, a: Tensor, b: Tensor | float, **kw: Any) -> Tensor:
        """a / b."""
        return self.pointwise("div", a, b, **kw)

    def bias(self, x: Tensor, b: Tensor | float, **kw: Any) -> Tensor:
        """x + b with b broadcast (e.g. (1, C, 1, 1) against (N, C, H, W))."""
        return self.pointwise("add", x, b, **kw)

    def scale(self, x: Tensor, s: Tensor | float, **kw: Any) -> Tensor:
        """x * s with s a broadcastable tensor or a number."""
        return self.pointwise("mul", x, s, **kw)

    def relu(self, x: Tensor, *, negative_slope: float | None = None, lower_clip: float | None = None,
             upper_clip: float | None = None, **kw: Any) -> Tensor:
        """max(x, lower_clip) (leaky with ``negative_slope``, clipped above by ``upper_clip``)."""
        return self.pointwise("relu_fwd", x, relu_lower_clip_slope=negative_slope, relu_lower_clip=lower_clip,
                              relu_upper_clip=upper_clip, **kw)

    def gelu(self, x: Tensor, *, approximate: str = "none", **kw: Any) -> Tensor:
        """GELU, exact (erf) or ``approximate='tanh'``."""
        if approximate not in ("none", "tanh"):
            raise InvalidValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        return self.pointwise("gelu_approx_tanh_fwd" if approximate == "tanh" else "gelu_fwd", x, **kw)

    def silu(self, x: Tensor, **kw: Any) -> Tensor:
        """x * sigmoid(x)."""
        return self.pointwise("swish_fwd", x, swish_beta=1.0, **kw)

    def tanh(self, x: Tensor, **kw: Any) -> Tensor:
        """tanh(x)."""
        return self.pointwise("tanh_fwd", x, **kw)

    def sigmoid(self, x: Tensor, **kw: Any) -> Tensor:
        """1 / (1 + exp(-x))."""
        return self.pointwise("sigmoid_fwd", x, **kw)

    def exp(self, x: Tensor, **kw: Any) -> Tensor:
        """exp(x)."""
        return self.pointwise("exp", x, **kw)

    def log(self, x: Tensor, **kw: Any) -> Tensor:
        """log(x)."""
        return self.pointwise("log", x, **kw)

    def relu_backward(self, dy, x, **kw):
        """dx = dy * (x > 0)."""
        return self.pointwise("relu_bwd", dy, x, **kw)

    def gelu_backward(self, dy, x, **kw):
        """dx of the exact GELU."""
        return self.pointwise("gelu_bwd", dy, x, **kw)

    def tanh_backward(self, dy, x, **kw):
        """dx of tanh (``x`` is the forward input)."""
        return self.pointwise("tanh_bwd", dy, x, **kw)

    def sigmoid_backward(self, dy, x, **kw):
        """dx of the sigmoid (``x`` is the forward input)."""
        return self.pointwise("sigmoid_bwd", dy, x, **kw)

    def silu_backward(self, dy, x, **kw):
        """dx of SiLU (``x`` is the forward input)."""
        return self.pointwise("swish_bwd", dy, x, swish_beta=1.0, **kw)

    def cmp_gt(self, a, b, **kw):
        """a > b as a mask."""
        return self.pointwise("cmp_gt", a, b, **kw)

    def select(self, a, b, mask, **kw):
        """mask ? a : b (``binary_select``)."""
        return self.pointwise("binary_select", a, b, mask, **kw)

    def gen_index(self, x, axis: int, **kw):
        """Each element's index along ``axis``, in x's shape (``gen_index``)."""
        return self.pointwise("gen_index", x, axis=axis, **kw)
