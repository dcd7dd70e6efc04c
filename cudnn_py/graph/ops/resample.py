"""Pooling as graph operations (``OPERATION_RESAMPLE_FWD`` / ``_BWD``): max and average over 2-D or 3-D windows,
pre/post padding, a padding mode, and max pooling's int8 window index the backward can read instead of x and y.
"""
from __future__ import annotations

import fractions

from cudnn_py import capi
from cudnn_py.core.args import ints, shape_arg
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..descriptors import BackendDescriptor
from ..errors import GraphNotSupportedError
from .base import Builder, LowerContext, Op

__all__ = ["ResampleForward", "ResampleBackward", "ResampleBuilders", "RESAMPLE_MODES", "PADDING_MODES",
           "resample_output_shape", "channels_last"]

#: short name -> ``cudnnResampleMode_t`` member name (pooling modes)
RESAMPLE_MODES = {"max": "CUDNN_RESAMPLE_MAXPOOL", "avg": "CUDNN_RESAMPLE_AVGPOOL",
                  "avg_exclude_padding": "CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING"}
#: short name -> ``cudnnPaddingMode_t`` member name
PADDING_MODES = {"zero": "CUDNN_ZERO_PAD", "neg_inf": "CUDNN_NEG_INF_PAD", "edge": "CUDNN_EDGE_VAL_PAD"}
_DEFAULT_PAD = {"max": "neg_inf", "avg": "zero", "avg_exclude_padding": "zero"}


def resample_output_shape(x_shape, window, stride, pre, post) -> tuple[int, ...]:
    """(N, C, *out) with out = (in + pre + post - window) // stride + 1 per spatial dim."""
    return tuple(x_shape[:2]) + tuple((n + a + b - w) // s + 1
                                      for n, a, b, w, s in zip(x_shape[2:], pre, post, window, stride))


def channels_last(t) -> bool:
    """Whether ``t`` (a graph tensor or an array) has its channels innermost (more than one of them)."""
    return t.shape[1] > 1 and t.strides[1] == 1


def _measured_broken(graph, what: str, why: str) -> GraphNotSupportedError:
    return GraphNotSupportedError(graph.name, [what], [], [("cuDNN 9.19, measured on H100/H200", why)])


class _Resample(Op):
    def lower(self, ctx: LowerContext) -> None:
        p = self.params
        frac = lambda v: [fractions.Fraction(int(i)) for i in v]  # noqa: E731 - FRACTION elements, as documented
        rs = BackendDescriptor(
            "RESAMPLE", mode=capi.cudnnResampleMode_t[RESAMPLE_MODES[p["mode"]]], comp_type=p["compute_dtype"],
            spatial_dims=len(p["window"]), nan_propagation=capi.CUDNN_PROPAGATE_NAN,
            padding_mode=capi.cudnnPaddingMode_t[PADDING_MODES[p["padding_mode"]]], window_dims=frac(p["window"]),
            pre_paddings=frac(p["padding"]), post_paddings=frac(p["post_padding"]),
            strides=frac(p["stride"])).finalize()
        self.add_to(ctx, rs, alpha=1.0, beta=0.0, desc=rs)


class ResampleForward(_Resample):
    """y (and, for max pooling, the window index) = pool(x)."""
    kind, backend = "resample_forward", "OPERATION_RESAMPLE_FWD"
    attrs = {"x": "xdesc", "y": "ydesc", "index": "idxdesc"}


class ResampleBackward(_Resample):
    """dx = pooling backward(dy) (max: from x and y, or from the forward's index tensor)."""
    kind, backend = "resample_backward", "OPERATION_RESAMPLE_BWD"
    attrs = {"dy": "dydesc", "x": "xdesc", "y": "ydesc", "index": "idxdesc", "dx": "dxdesc"}


class ResampleBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that add pooling."""

    def _pool_params(self, nsp: int, mode, window, stride, padding, post_padding, padding_mode, compute_dtype):
        if mode not in RESAMPLE_MODES:
            raise InvalidValueError(f"resample mode must be one of {', '.join(RESAMPLE_MODES)}, got {mode!r}")
        if nsp not in (2, 3):
            raise InvalidValueError(f"pooling is 2-D or 3-D: x needs rank 4 or 5, got rank {nsp + 2}")
        win = ints(window, nsp, "window", 1)
        pad = ints(padding, nsp, "padding", 0)
        post = pad if post_padding is None else ints(post_padding, nsp, "post_padding", 0)
        st = win if stride is None else ints(stride, nsp, "stride", 1)
        pm = _DEFAULT_PAD[mode] if padding_mode is None else padding_mode
        if pm not in PADDING_MODES:
            raise InvalidValueError(f"padding_mode must be one of {', '.join(PADDING_MODES)}, got {pm!r}")
        for i in range(nsp):
            if pad[i] >= win[i] or post[i] >= win[i]:
                raise InvalidValueError(f"padding {pad} / post_padding {post} must be smaller than the window {win}: "
                                        f"a window would see only padding")
        return {"mode": mode, "window": win, "stride": st, "padding": pad, "post_padding": post,
                "padding_mode": pm, "compute_dtype": self._compute(compute_dtype)}

    def resample(self, x, mode: str = "max", window=2, *, stride=None, padding=0, post_padding=None,
                 padding_mode: str | None = None, index: bool = False, compute_dtype=None, name: str | None = None):
        """Pooling forward of x (N, C, H, W) or (N, C, D, H, W). ``mode``: 'max', 'avg' (padding counted in the
        divisor) or 'avg_exclude_padding'. ``window``, ``stride`` (default: the window), ``padding`` (before) and
        ``post_padding`` (after; default: ``padding``): an int or one per spatial dim. ``padding_mode``: 'neg_inf'
        (max default), 'zero' (avg default) or 'edge'. ``index=True`` (max only) also returns the int8 index tensor
        the backward pass can use. Returns y (and the index), virtual, out = (in + padding + post_padding - window)
        // stride + 1."""
        x = self._own(x, "x")
        p = self._pool_params(x.ndim - 2, mode, window, stride, padding, post_padding, padding_mode, compute_dtype)
        if index and mode != "max":
            raise InvalidValueError(f"index=True is for max pooling, not {mode!r}")
        if x.dtype == capi.CUDNN_DATA_BFLOAT16 and x.ndim == 4 and channels_last(x):
            raise _measured_broken(self, f"resample[{mode}]({x.describe()} channels-last)",
                                   "the channels-last bfloat16 2-D pooling engine returns wrong values; use NCHW, "
                                   "float16 or float32 (3-D channels-last bfloat16 is right)")
        out = resample_output_shape(x.shape, p["window"], p["stride"], p["padding"], p["post_padding"])
        if any(o <= 0 for o in out[2:]):
            raise InvalidValueError(f"resample: x {x.shape} with window {p['window']} gives output {out}")
        outputs = {"y": self.virtual(out, like=x, name=name and f"{name}.y")}
        if index:
            outputs["index"] = self.virtual(out, like=x, name=name and f"{name}.index").set_dtype("int8")
        self.add_op(ResampleForward({"x": x}, outputs, p, name))
        return (outputs["y"], outputs["index"]) if index else outputs["y"]

    def resample_backward(self, dy, mode: str = "max", window=2, *, x=None, y=None, index=None, x_shape=None,
                          stride=None, padding=0, post_padding=None, padding_mode: str | None = None,
                          compute_dtype=None, name: str | None = None):
        """Pooling backward: dx from dy and the forward's parameters. Max pooling needs the forward's ``index``
        tensor in channels-last layout and its ``x`` and ``y`` in NCHW; average pooling needs ``x`` and ``y`` in
        NCHW and neither in channels-last (give ``x_shape`` or ``x`` for dx's shape when it is ambiguous).
        Returns dx (virtual)."""
        dy = self._own(dy, "dy")
        p = self._pool_params(dy.ndim - 2, mode, window, stride, padding, post_padding, padding_mode, compute_dtype)
        inputs = {"dy": dy}
        if mode == "max":
            if index is None and (x is None or y is None):
                raise InvalidValueError("max pooling backward needs the forward's index= tensor, or its x= and y=")
            if index is None and channels_last(dy):
                raise _measured_broken(self, f"resample_backward[max]({dy.describe()} channels-last, x and y)",
                                       "channels-last max pooling backward from x and y crashes the process "
                                       "(SIGSEGV); pass the forward's index= instead (resample(index=True))")
        elif index is not None:
            raise InvalidValueError(f"index= is for max pooling, not {mode!r}")
        elif not channels_last(dy) and (x is None or y is None):
            raise InvalidValueError(f"{mode} pooling backward in NCHW layout needs the forward's x= and y= (cuDNN's "
                                    f"engine reads them; channels-last needs neither)")
        if x is not None:
            inputs["x"] = self._own(x, "x")
            if x_shape is not None and tuple(x_shape) != inputs["x"].shape:
                raise InvalidValueError(f"x_shape {tuple(x_shape)} differs from x {inputs['x'].shape}")
            x_shape = inputs["x"].shape
        if x_shape is None:
            x_shape = dy.shape[:2] + tuple((o - 1) * s + w - a - b for o, s, w, a, b in zip(
                dy.shape[2:], p["stride"], p["window"], p["padding"], p["post_padding"]))
        x_shape = shape_arg(x_shape, "x_shape")
        expect = resample_output_shape(x_shape, p["window"], p["stride"], p["padding"], p["post_padding"])
        if len(x_shape) != dy.ndim or expect != dy.shape:
            raise InvalidValueError(f"resample_backward: dy {dy.shape} is not the pooled shape of x {x_shape} "
                                    f"({expect})")
        for role, t in (("y", y), ("index", index)):
            if t is not None:
                inputs[role] = self._own(t, role)
                if inputs[role].shape != dy.shape:
                    raise InvalidValueError(f"resample_backward: {role} {inputs[role].shape} must have dy's shape "
                                            f"{dy.shape}")
        if "index" in inputs and inputs["index"].dtype != capi.CUDNN_DATA_INT8:
            raise InvalidTypeError(f"resample_backward: index must be int8 (as resample(index=True) makes it), got "
                                   f"{inputs['index'].dtype.name}")
        dx = self.virtual(x_shape, like=inputs.get("x", dy), name=name and f"{name}.dx")
        self.add_op(ResampleBackward(inputs, {"dx": dx}, p, name))
        return dx

    def max_pool(self, x, window=2, stride=None, padding=0, **kw):
        """Max pooling (:meth:`resample` with mode 'max'; ``index=True`` also returns the index tensor)."""
        return self.resample(x, "max", window, stride=stride, padding=padding, **kw)

    def avg_pool(self, x, window=2, stride=None, padding=0, *, include_padding: bool = True, **kw):
        """Average pooling (:meth:`resample`; padded elements count in the divisor unless ``include_padding``
        is False)."""
        return self.resample(x, "avg" if include_padding else "avg_exclude_padding", window, stride=stride,
                             padding=padding, **kw)

    def max_pool_backward(self, dy, window=2, stride=None, padding=0, **kw):
        """dx of max pooling (:meth:`resample_backward`: give ``index=`` or ``x=`` and ``y=``)."""
        return self.resample_backward(dy, "max", window, stride=stride, padding=padding, **kw)

    def avg_pool_backward(self, dy, window=2, stride=None, padding=0, *, include_padding: bool = True, **kw):
        """dx of average pooling (:meth:`resample_backward`)."""
        return self.resample_backward(dy, "avg" if include_padding else "avg_exclude_padding", window,
                                      stride=stride, padding=padding, **kw)
