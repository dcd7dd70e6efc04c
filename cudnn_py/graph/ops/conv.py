"""Convolution forward, backward data and backward filter as graph operations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cudnn_py import capi
from cudnn_py.core.args import float_arg, ints, shape_arg
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..descriptors import BackendDescriptor
from .base import Builder, LowerContext, Op

if TYPE_CHECKING:  # pragma: no cover
    from .base import Tensor

__all__ = ["ConvFprop", "ConvDgrad", "ConvWgrad", "ConvBuilders"]


class _Conv(Op):
    """A convolution operation; its ``backend`` descriptor's tensor attributes are named like our roles (x, w, y, dx,
    dy, dw)."""

    def lower(self, ctx: LowerContext) -> None:
        p = self.params
        conv = BackendDescriptor(
            "CONVOLUTION", comp_type=p["compute_dtype"], conv_mode=p["conv_mode"], spatial_dims=len(p["padding"]),
            dilations=list(p["dilation"]), filter_strides=list(p["stride"]), pre_paddings=list(p["padding"]),
            post_paddings=list(p["post_padding"])).finalize()
        d = BackendDescriptor(self.backend)
        # the scaling factors are read in the compute precision: a double engine reads 8 bytes
        scalar = "DOUBLE" if p["compute_dtype"] == capi.CUDNN_DATA_DOUBLE else "FLOAT"
        d.set("alpha", float(p["alpha"]), attr_type=scalar)
        d.set("beta", float(p["beta"]), attr_type=scalar)
        d.set("conv_desc", conv)
        self.set_tensors(d, ctx)
        ctx.add(d.finalize(), conv)


class ConvFprop(_Conv):
    kind, backend = "conv_fprop", "OPERATION_CONVOLUTION_FORWARD"


class ConvDgrad(_Conv):
    kind, backend = "conv_dgrad", "OPERATION_CONVOLUTION_BACKWARD_DATA"
    #: engines that build plans with post-padding != padding but answer wrong (docs/graph_operations.md)
    asymmetric_padding_bad_engines: tuple[int, ...] = (50,)

    def excluded_engines(self) -> dict[int, str]:
        """Engines known to be wrong for this operation's configuration (asymmetric padding)."""
        if self.params["padding"] == self.params["post_padding"]:
            return {}
        return {i: "wrong results with asymmetric padding (measured)" for i in self.asymmetric_padding_bad_engines}


class ConvWgrad(ConvDgrad):
    kind, backend = "conv_wgrad", "OPERATION_CONVOLUTION_BACKWARD_FILTER"
    asymmetric_padding_bad_engines = (1, 18, 20)


class ConvBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that add convolutions."""

    def _conv_operands(self, kind: str, a, b, roles: tuple[str, str], padding, stride, dilation, post_padding,
                       compute_dtype, alpha, beta, conv_mode):
        """The two operands (of this graph, one dtype and one rank >= 3) and the operation's parameters, checked."""
        a, b = self._own(a, roles[0]), self._own(b, roles[1])
        self._same_dtype(kind, a, b)
        if a.ndim < 3 or b.ndim != a.ndim:
            raise InvalidValueError(f"{kind} needs {roles[0]} and {roles[1]} of the same rank >= 3, got {a.shape} and "
                                    f"{b.shape}")
        nsp = a.ndim - 2
        pad = ints(padding, nsp, "padding", 0)
        post = pad if post_padding is None else ints(post_padding, nsp, "post_padding", 0)
        if isinstance(conv_mode, str):
            key = "CUDNN_" + conv_mode.upper()
            if key not in capi.cudnnConvolutionMode_t.__members__:
                raise InvalidValueError(f"conv_mode must be 'cross_correlation' or 'convolution', got {conv_mode!r}")
            conv_mode = capi.cudnnConvolutionMode_t[key]
        elif not isinstance(conv_mode, capi.cudnnConvolutionMode_t):
            raise InvalidTypeError(f"conv_mode must be a string or cudnnConvolutionMode_t, got "
                                   f"{type(conv_mode).__name__}")
        return a, b, dict(padding=pad, post_padding=post, stride=ints(stride, nsp, "stride", 1),
                          dilation=ints(dilation, nsp, "dilation", 1), compute_dtype=self._compute(compute_dtype),
                          alpha=float_arg(alpha, "alpha"), beta=float_arg(beta, "beta"), conv_mode=conv_mode)

    def conv_fprop(self, x: Tensor, w: Tensor, padding: Any = 0, stride: Any = 1, dilation: Any = 1, *,
                   post_padding: Any = None, compute_dtype: Any = None, alpha: float = 1.0, beta: float = 0.0,
                   conv_mode: Any = "cross_correlation", name: str | None = None) -> Tensor:
        """y = conv(x, w): x (N, C, *spatial), w (K, C/groups, *kernel) -> y (N, K, *out), virtual.
        ``padding``/``post_padding`` (after; default = padding), ``stride``, ``dilation``: an int or one per
        spatial dim. Returns the output tensor."""
        x, w, p = self._conv_operands("conv_fprop", x, w, ("x", "w"), padding, stride, dilation, post_padding,
                                      compute_dtype, alpha, beta, conv_mode)
        if x.shape[1] % w.shape[1]:
            raise InvalidValueError(f"conv_fprop: x has {x.shape[1]} channels, not a multiple of w's {w.shape[1]}")
        out = []
        for i, (n, k) in enumerate(zip(x.shape[2:], w.shape[2:])):
            o = (n + p["padding"][i] + p["post_padding"][i] - p["dilation"][i] * (k - 1) - 1) // p["stride"][i] + 1
            if o <= 0:
                raise InvalidValueError(f"conv_fprop: spatial dim {i} gives output size {o} (input {n}, kernel {k})")
            out.append(o)
        y = self.virtual((x.shape[0], w.shape[0], *out), like=x, name=name and f"{name}.y")
        self.add_op(ConvFprop({"x": x, "w": w}, {"y": y}, p, name))
        return y

    def conv_dgrad(self, dy, w, padding=0, stride=1, dilation=1, *, x_shape=None, post_padding=None,
                   compute_dtype=None, alpha: float = 1.0, beta: float = 0.0, conv_mode="cross_correlation",
                   name: str | None = None):
        """dx = convolution backward data(dy, w); ``x_shape`` where the forward input size is ambiguous
        (stride > 1). Returns dx."""
        dy, w, p = self._conv_operands("conv_dgrad", dy, w, ("dy", "w"), padding, stride, dilation, post_padding,
                                       compute_dtype, alpha, beta, conv_mode)
        if dy.shape[1] != w.shape[0]:
            raise InvalidValueError(f"conv_dgrad: dy has {dy.shape[1]} channels but w has {w.shape[0]} filters")
        if x_shape is None:
            sp = [(o - 1) * p["stride"][i] - p["padding"][i] - p["post_padding"][i] + p["dilation"][i] * (k - 1) + 1
                  for i, (o, k) in enumerate(zip(dy.shape[2:], w.shape[2:]))]
            x_shape = (dy.shape[0], w.shape[1], *sp)
        dx = self.virtual(shape_arg(x_shape, "x_shape"), like=dy, name=name and f"{name}.dx")
        self.add_op(ConvDgrad({"dy": dy, "w": w}, {"dx": dx}, p, name))
        return dx

    def conv_wgrad(self, dy, x, padding=0, stride=1, dilation=1, *, w_shape=None, post_padding=None,
                   compute_dtype=None, alpha: float = 1.0, beta: float = 0.0, conv_mode="cross_correlation",
                   name: str | None = None):
        """dw = convolution backward filter(dy, x); the kernel size is inferred unless ``w_shape`` is given.
        Returns dw."""
        dy, x, p = self._conv_operands("conv_wgrad", dy, x, ("dy", "x"), padding, stride, dilation, post_padding,
                                       compute_dtype, alpha, beta, conv_mode)
        if w_shape is None:
            ks = [(n + p["padding"][i] + p["post_padding"][i] - (o - 1) * p["stride"][i] - 1) // p["dilation"][i] + 1
                  for i, (n, o) in enumerate(zip(x.shape[2:], dy.shape[2:]))]
            w_shape = (dy.shape[1], x.shape[1], *ks)
        dw = self.virtual(shape_arg(w_shape, "w_shape"), like=x, name=name and f"{name}.dw")
        self.add_op(ConvWgrad({"dy": dy, "x": x}, {"dw": dw}, p, name))
        return dw
