"""Layer norm, RMS norm and batch norm as torch custom ops (``cudnn_py::norm_fwd``/``norm_bwd``,
``batch_norm_fwd``/``batch_norm_bwd``), with autograd. Layer and RMS norm see x (made contiguous) as (N, D, 1, 1)
with per-row float32 statistics, weight and bias (D,) of x's dtype or float32; batch norm is training-mode.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph import Graph
from cudnn_py.graph.graph_call import graph_call

from .runtime import call, context, define, dtype_name, eager, function

__all__ = ["layer_norm", "rms_norm", "batch_norm", "norm_fwd", "norm_bwd", "batch_norm_fwd", "batch_norm_bwd"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _rows(x: Tensor) -> tuple[int, int]:
    d = x.shape[-1]
    return x.numel() // d, d


def _tensor(g: Graph, t: Tensor, name: str, rows: int, d: int):
    """x-like tensors as (N, D, 1, 1), parameters as (1, D, 1, 1), statistics as (N, 1, 1, 1)."""
    return g.tensor((rows, d, 1, 1), dtype=dtype_name(t.dtype), strides=(d, 1, d, d), name=name)


def _norm_outputs(x: Tensor, rms: bool, **_: Any) -> tuple[Tensor, Tensor, Tensor]:
    """y (contiguous), the (N,) float32 mean (empty for RMS norm) and inverse standard deviation."""
    n = _rows(x)[0]
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty((0 if rms else n,), dtype=torch.float32, device=x.device),
            torch.empty((n,), dtype=torch.float32, device=x.device))


def _build_fwd(opts: tuple, x, w, b, y, mean, inv) -> tuple:
    eps, rms = opts
    n, d = _rows(x)
    g = Graph(io_dtype=dtype_name(x.dtype), compute_dtype="float32", name="torch.norm_fwd")
    tx, tw = _tensor(g, x, "x", n, d), _tensor(g, w, "scale", 1, d)
    tb = None if b is None else _tensor(g, b, "bias", 1, d)
    y, mean, inv_var = g.norm_forward(tx, tw, tb, mode="rms" if rms else "layer", training=True, epsilon=eps)
    y.strides = (d, 1, d, d)
    outs = [y.set_output(True).set_name("y")] + ([] if rms else [mean.set_output(True).set_name("mean")])
    outs.append(inv_var.set_output(True).set_name("inv_variance"))
    for t in outs[1:]:
        t.strides = (1, 1, 1, 1)
    return g, [tx, tw] + ([] if tb is None else [tb]) + outs, ()


_NORM_FWD = graph_call("torch_norm_fwd", _build_fwd, ("x", "weight", "bias"), ("y", "mean", "inv_variance"))


def _norm_fwd(x: Tensor, weight: Tensor, bias: Optional[Tensor], eps: float,
              rms: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Normalisation forward over the last dim of x: :func:`_norm_outputs`."""
    x, weight = x.contiguous(), weight.contiguous()
    y, mean, inv = _norm_outputs(x, rms)
    context(x.get_device()).run(_NORM_FWD, (eps, rms), x, weight, bias, y, None if rms else mean, inv)
    return y, mean, inv


def _build_bwd(rms: bool, dy, x, w, mean, inv, dx, dw, db) -> tuple:
    n, d = _rows(x)
    g = Graph(io_dtype=dtype_name(x.dtype), compute_dtype="float32", name="torch.norm_bwd")
    tdy, tx, tw = _tensor(g, dy, "dy", n, d), _tensor(g, x, "x", n, d), _tensor(g, w, "scale", 1, d)
    tm = None if rms else g.tensor((n, 1, 1, 1), dtype="float32", strides=(1, 1, 1, 1), name="mean")
    ti = g.tensor((n, 1, 1, 1), dtype="float32", strides=(1, 1, 1, 1), name="inv_variance")
    gdx, gdw, gdb = g.norm_backward(tdy, tx, tw, mean=tm, inv_variance=ti, mode="rms" if rms else "layer",
                                    has_bias=db is not None)
    gdx.strides = (d, 1, d, d)
    outs = [t.set_output(True).set_name(nm) for t, nm in ((gdx, "dx"), (gdw, "dscale"), (gdb, "dbias"))
            if t is not None]
    return g, [tdy, tx, tw] + ([] if tm is None else [tm]) + [ti] + outs, ()


_NORM_BWD = graph_call("torch_norm_bwd", _build_bwd, ("dy", "x", "weight", "mean", "inv_variance"),
                       ("dx", "dweight", "dbias"))


def _norm_grads(x: Tensor, weight: Tensor, has_bias: bool, **_: Any) -> tuple[Tensor, Tensor, Tensor]:
    """dx (contiguous), dweight and dbias ((0,) without ``has_bias``), new."""
    return (torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(weight),
            torch.empty_like(weight) if has_bias else weight.new_empty((0,)))


def _norm_bwd(dy: Tensor, x: Tensor, weight: Tensor, mean: Tensor, inv_std: Tensor, rms: bool,
             has_bias: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Normalisation backward: (dx, dweight, dbias); dbias is empty without ``has_bias``."""
    dy, x = dy.contiguous(), x.contiguous()
    dx, dw, db = _norm_grads(x, weight, has_bias)
    context(x.get_device()).run(_NORM_BWD, rms, dy, x, weight, None if rms else mean, inv_std, dx, dw,
                                db if has_bias else None)
    return dx, dw, db


norm_bwd = define("norm_bwd", _norm_bwd, _norm_grads)


def _setup(ctx, inputs, output):
    x, weight, bias, _, rms = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.rms, ctx.has_bias = rms, bias is not None


def _backward(ctx, dy, dmean, dinv):
    x, weight, mean, inv = ctx.saved_tensors
    dx, dw, db = (_norm_bwd if eager(x) else norm_bwd)(dy, x, weight, mean, inv, ctx.rms, ctx.has_bias)
    return dx, dw, db if ctx.has_bias else None, None, None


norm_fwd = define("norm_fwd", _norm_fwd, _norm_outputs, _setup, _backward)
_NormFunction = function("_NormFunction", _norm_fwd, _setup, _backward)


def _check(x, weight, bias, eps, what: str) -> Tensor:
    if not isinstance(x, Tensor) or not x.is_cuda or x.dtype not in _DTYPES:
        raise InvalidTypeError(f"{what}: x must be a float16, bfloat16 or float32 CUDA tensor")
    d = x.shape[-1] if x.dim() else 0
    for t, n in ((weight, "weight"), (bias, "bias")):
        if t is not None and (not isinstance(t, Tensor) or t.shape != (d,) or t.dtype not in (x.dtype, torch.float32)
                              or t.device != x.device):
            raise InvalidValueError(f"{what}: {n} must be a ({d},) tensor of x's dtype or float32 on x's device")
    if not (isinstance(eps, (int, float)) and eps > 0):
        raise InvalidValueError(f"{what}: eps must be a number > 0, got {eps!r}")
    return x.contiguous()


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Layer norm of ``x`` over its last dim (as ``F.layer_norm(x, x.shape[-1:], weight, bias, eps)``);
    differentiable in x, weight and bias (missing ones are ones and zeros)."""
    x = _check(x, weight, bias, eps, "layer_norm")
    d = x.shape[-1]
    if weight is None:
        weight = torch.ones(d, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = torch.zeros(d, dtype=weight.dtype, device=x.device)
    return call(norm_fwd, _norm_fwd, _NormFunction, (x, weight, bias, float(eps), False), (x, weight, bias))[0]


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """RMS norm of ``x`` over its last dim (as ``F.rms_norm(x, x.shape[-1:], weight, eps)``); differentiable in x
    and weight (missing: ones)."""
    x = _check(x, weight, None, eps, "rms_norm")
    if weight is None:
        weight = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    return call(norm_fwd, _norm_fwd, _NormFunction, (x, weight, None, float(eps), True), (x, weight))[0]


# -- batch norm ----------------------------------------------------------------------------------------------------
def _channel(g: Graph, c: int, dtype: torch.dtype, name: str, nd: int):
    """A (C,) tensor as the (1, C, 1, ...) parameter / statistic the batch-norm graph takes."""
    return g.tensor((1, c) + (1,) * (nd - 2), dtype=dtype_name(dtype), strides=(c,) + (1,) * (nd - 1), name=name)


def _x(g: Graph, t: Tensor, name: str):
    return g.tensor(tuple(t.shape), dtype=dtype_name(t.dtype), strides=tuple(t.stride()), name=name)


def _build_bn_fwd(opts: tuple, x, w, b, running_mean, running_var, y, mean, inv, new_mean, new_var) -> tuple:
    momentum, eps = opts
    running = running_mean is not None
    nd = x.dim()
    g = Graph(io_dtype=dtype_name(x.dtype), compute_dtype="float32", name="torch.batch_norm_fwd")
    c = w.shape[0]
    tx, tw, tb = _x(g, x, "x"), _channel(g, c, w.dtype, "scale", nd), _channel(g, c, b.dtype, "bias", nd)
    run = {n: _channel(g, c, torch.float32, n, nd) for n in ("running_mean", "running_var")} if running else {}
    r: Any = g.batch_norm(tx, tw, tb, epsilon=eps, momentum=momentum, **run)
    r.y.strides = tuple(y.stride())
    outs = [r.y.set_output(True).set_name("y"), r.mean.set_output(True).set_name("mean"),
            r.inv_variance.set_output(True).set_name("inv_variance")]
    if running:
        outs += [r.running_mean.set_output(True).set_name("next_running_mean"),
                 r.running_var.set_output(True).set_name("next_running_var")]
    for t in outs[1:]:
        t.strides = (w.shape[0],) + (1,) * (nd - 1)
    return g, [tx, tw, tb, *run.values(), *outs], ()


_BN_FWD = graph_call("torch_batch_norm_fwd", _build_bn_fwd, ("x", "weight", "bias", "running_mean", "running_var"),
                     ("y", "mean", "inv_variance", "next_running_mean", "next_running_var"))


def _bn_outputs(x: Tensor, weight: Tensor, running_mean: Optional[Tensor], running_var: Optional[Tensor],
                **_: Any) -> tuple[Tensor, ...]:
    """y (x's layout), then (C,) float32 batch mean, inverse std and updated running statistics ((0,) without)."""
    c, running = weight.shape[0], running_mean is not None and running_var is not None
    stats = [torch.empty((c if i < 2 or running else 0,), dtype=torch.float32, device=x.device) for i in range(4)]
    return (torch.empty_like(x), *stats)


def _batch_norm_fwd(x: Tensor, weight: Tensor, bias: Tensor, running_mean: Optional[Tensor],
                   running_var: Optional[Tensor], momentum: float,
                   eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Batch-norm training forward: :func:`_bn_outputs` (the running variance from the unbiased batch variance)."""
    running = running_mean is not None and running_var is not None
    y, mean, inv, new_mean, new_var = _bn_outputs(x, weight, running_mean, running_var)
    run, new = ((running_mean, running_var), (new_mean, new_var)) if running else ((None, None), (None, None))
    context(x.get_device()).run(_BN_FWD, (momentum, eps), x, weight, bias, *run, y, mean, inv, *new)
    return y, mean, inv, new_mean, new_var


def _build_bn_bwd(_, dy, x, weight, mean, inv, dx, dw, db) -> tuple:
    nd, c = x.dim(), weight.shape[0]
    g = Graph(io_dtype=dtype_name(x.dtype), compute_dtype="float32", name="torch.batch_norm_bwd")
    tdy, tx, tw = _x(g, dy, "dy"), _x(g, x, "x"), _channel(g, c, weight.dtype, "scale", nd)
    tm, ti = _channel(g, c, torch.float32, "mean", nd), _channel(g, c, torch.float32, "inv_variance", nd)
    gdx, gdw, gdb = g.norm_backward(tdy, tx, tw, mean=tm, inv_variance=ti, mode="batch")
    gdx.strides = tuple(dx.stride())
    outs = [t.set_output(True).set_name(n) for t, n in ((gdx, "dx"), (gdw, "dscale"), (gdb, "dbias"))]
    return g, [tdy, tx, tw, tm, ti, *outs], ()


_BN_BWD = graph_call("torch_batch_norm_bwd", _build_bn_bwd, ("dy", "x", "weight", "mean", "inv_variance"),
                     ("dx", "dweight", "dbias"))


def _bn_grads(x: Tensor, weight: Tensor, **_: Any) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight)


def _batch_norm_bwd(dy: Tensor, x: Tensor, weight: Tensor, mean: Tensor,
                    inv_std: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Batch-norm backward from the forward's saved statistics: (dx in x's layout, dweight, dbias)."""
    if dy.stride() != x.stride():
        dy = torch.empty_like(x).copy_(dy)  # cuDNN takes dy in x's layout
    dx, dw, db = _bn_grads(x, weight)
    context(x.get_device()).run(_BN_BWD, None, dy, x, weight, mean, inv_std, dx, dw, db)
    return dx, dw, db


batch_norm_bwd = define("batch_norm_bwd", _batch_norm_bwd, _bn_grads)


def _bn_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], output[1], output[2])


def _bn_backward(ctx, dy, dmean, dinv, dnew_mean, dnew_var):
    x, weight, mean, inv = ctx.saved_tensors
    dx, dw, db = (_batch_norm_bwd if eager(x) else batch_norm_bwd)(dy, x, weight, mean, inv)
    return dx, dw, db, None, None, None, None


batch_norm_fwd = define("batch_norm_fwd", _batch_norm_fwd, _bn_outputs, _bn_setup, _bn_backward)
_BatchNormFunction = function("_BatchNormFunction", _batch_norm_fwd, _bn_setup, _bn_backward)


def batch_norm(x: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None = None,
               running_var: Tensor | None = None, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """``F.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum, eps)``: x (N, C, ...)
    float16/bfloat16/float32 (NCHW or channels-last), weight and bias (C,) float32, running statistics (C,) float32
    updated in place; differentiable in x, weight and bias."""
    if not isinstance(x, Tensor) or not x.is_cuda or x.dtype not in _DTYPES or x.dim() < 3:
        raise InvalidTypeError("batch_norm: x must be a float16, bfloat16 or float32 CUDA tensor (N, C, ...)")
    c = x.shape[1]
    for t, n in ((weight, "weight"), (bias, "bias"), (running_mean, "running_mean"), (running_var, "running_var")):
        if (t is not None or n in ("weight", "bias")) and (not isinstance(t, Tensor) or t.shape != (c,)
                                                           or t.dtype != torch.float32 or not t.is_contiguous()):
            raise InvalidValueError(f"batch_norm: {n} must be a contiguous ({c},) float32 tensor")
    if (running_mean is None) != (running_var is None):
        raise InvalidValueError("batch_norm: give both running_mean and running_var, or neither")
    if not 0 < momentum <= 1 or not eps > 0:
        raise InvalidValueError(f"batch_norm: momentum must be in (0, 1] and eps > 0, got {momentum}, {eps}")
    if 0 in x.stride():
        x = x.contiguous()
    args = (x, weight, bias, running_mean, running_var, float(momentum), float(eps))
    y, _, _, new_mean, new_var = call(batch_norm_fwd, _batch_norm_fwd, _BatchNormFunction, args, (x, weight, bias))
    if running_mean is not None and running_var is not None:
        with torch.no_grad():
            running_mean.copy_(new_mean)
            running_var.copy_(new_var)
    return y
