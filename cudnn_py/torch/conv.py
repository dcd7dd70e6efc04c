"""Convolution as torch custom ops ``cudnn_py::conv_fwd`` (with a fused bias and activation), ``conv_dgrad`` and
``conv_wgrad`` (its autograd formula), on the core's graph convolutions (:func:`cudnn_py.graph.conv_forward`, ...).
x and w in float16, bfloat16 or float32 (TF32), NCHW or channels-last (y follows x's layout, dx dy's, dw x's). A
fusion cuDNN has no engine for raises :class:`~cudnn_py.graph.GraphNotSupportedError` naming the graph.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from cudnn_py.core.args import ints
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph import conv as gconv

from .runtime import call, context, define, eager, empty_like_layout, function

__all__ = ["conv", "conv_fwd", "conv_dgrad", "conv_wgrad", "ACTIVATIONS"]

#: the activations :func:`conv` fuses (graph pointwise builders); gradients for 'none' and 'relu'
ACTIVATIONS = ("none", "relu", "gelu", "silu", "tanh", "sigmoid")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _y(x: Tensor, w: Tensor, padding, stride, dilation, **_: Any) -> Tensor:
    sp = [(n + 2 * p - d * (k - 1) - 1) // s + 1
          for n, k, p, s, d in zip(x.shape[2:], w.shape[2:], padding, stride, dilation)]
    return empty_like_layout(x, (x.shape[0], w.shape[0], *sp))


def _conv_fwd(x: Tensor, w: Tensor, bias: Optional[Tensor], padding: list[int], stride: list[int],
             dilation: list[int], activation: str) -> Tensor:
    """y = activation(conv(x, w) + bias), one cuDNN graph. See :func:`conv`."""
    y = _y(x, w, padding, stride, dilation)
    kw = dict(padding=tuple(padding), stride=tuple(stride), dilation=tuple(dilation), y=y)
    if bias is not None:  # only what is set: every keyword is part of the prepared call's key
        kw["bias"] = bias
    if activation != "none":
        kw["activation"] = activation
    context(x.get_device()).run(gconv.conv_forward, x, w, **kw)
    return y


def _conv_dgrad(dy: Tensor, w: Tensor, x_shape: list[int], padding: list[int], stride: list[int],
               dilation: list[int]) -> Tensor:
    """dx of the convolution for output gradient ``dy`` (dx in dy's layout)."""
    dx = empty_like_layout(dy, x_shape)
    context(dy.get_device()).run(gconv.conv_backward_data, dy, w, dx=dx, padding=tuple(padding), stride=tuple(stride),
                                 dilation=tuple(dilation))
    return dx


conv_dgrad = define("conv_dgrad", _conv_dgrad, lambda dy, x_shape, **_: empty_like_layout(dy, x_shape))


def _conv_wgrad(dy: Tensor, x: Tensor, w_shape: list[int], padding: list[int], stride: list[int],
               dilation: list[int]) -> Tensor:
    """dw of the convolution for output gradient ``dy`` (dw in x's layout)."""
    dw = empty_like_layout(x, w_shape)
    context(dy.get_device()).run(gconv.conv_backward_filter, dy, x, dw=dw, padding=tuple(padding),
                                 stride=tuple(stride), dilation=tuple(dilation))
    return dw


conv_wgrad = define("conv_wgrad", _conv_wgrad, lambda x, w_shape, **_: empty_like_layout(x, w_shape))


def _setup(ctx, inputs, output):
    x, w, bias, padding, stride, dilation, activation = inputs
    ctx.save_for_backward(x, w, output if activation == "relu" else None)
    ctx.conv = (padding, stride, dilation)
    ctx.has_bias = bias is not None


def _backward(ctx, dy):
    x, w, y = ctx.saved_tensors
    if y is not None:
        dy = torch.where(y > 0, dy, torch.zeros((), dtype=dy.dtype, device=dy.device))
    if 0 in dy.stride():
        dy = dy.contiguous()
    traced = not eager(x)
    dx = (conv_dgrad if traced else _conv_dgrad)(dy, w, list(x.shape), *ctx.conv) if ctx.needs_input_grad[0] else None
    dw = (conv_wgrad if traced else _conv_wgrad)(dy, x, list(w.shape), *ctx.conv) if ctx.needs_input_grad[1] else None
    db = None
    if ctx.has_bias and ctx.needs_input_grad[2]:
        db = dy.sum([0, *range(2, dy.dim())], dtype=torch.float32).to(dy.dtype)
    return dx, dw, db, None, None, None, None


conv_fwd = define("conv_fwd", _conv_fwd, _y, _setup, _backward)
_ConvFunction = function("_ConvFunction", _conv_fwd, _setup, _backward)


def conv(x: Tensor, w: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
         activation: str | None = None) -> Tensor:
    """``F.conv{1,2,3}d(x, w, bias, stride, padding, dilation, groups=x.shape[1] // w.shape[1])`` followed by
    ``activation`` (one of :data:`ACTIVATIONS`, None for none), as one cuDNN graph; differentiable in x, w and bias
    for no activation and ReLU. ``padding`` is symmetric (ints; no 'same'/'valid' strings)."""
    for t, name in ((x, "x"), (w, "w")):
        if not isinstance(t, Tensor) or not t.is_cuda or t.dtype not in _DTYPES:
            raise InvalidTypeError(f"conv: {name} must be a float16, bfloat16 or float32 CUDA tensor")
    if w.dtype != x.dtype or w.dim() != x.dim() or x.dim() < 3 or x.shape[1] % w.shape[1]:
        raise InvalidValueError(f"conv: x {tuple(x.shape)} {x.dtype} and w {tuple(w.shape)} {w.dtype} must share a "
                                f"dtype and rank >= 3, x's channels a multiple of w's")
    if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (w.shape[0],) or bias.dtype != x.dtype):
        raise InvalidValueError(f"conv: bias must be a ({w.shape[0]},) tensor of x's dtype")
    act = "none" if activation is None else activation
    if act not in ACTIVATIONS:
        raise InvalidValueError(f"conv: activation must be None or one of {', '.join(ACTIVATIONS)}, got "
                                f"{activation!r}")
    if act not in ("none", "relu") and torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, w, bias)):
        raise InvalidValueError(f"conv: a fused {act} has no gradient here; use activation=None and torch's {act}")
    n = x.dim() - 2
    sp = (ints(padding, n, "padding", 0), ints(stride, n, "stride", 1), ints(dilation, n, "dilation", 1))
    if 0 in x.stride():
        x = x.contiguous()
    w = w.contiguous(memory_format=torch.channels_last) if x.dim() == 4 and not x.is_contiguous() else w.contiguous()
    return call(conv_fwd, _conv_fwd, _ConvFunction, (x, w, bias, *sp, act), (x, w, bias))
