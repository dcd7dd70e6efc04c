"""FP8 attention (Hopper and newer) as torch custom ops ``cudnn_py::sdpa_fp8_fwd`` and ``sdpa_fp8_bwd``:
:func:`sdpa_fp8` and :func:`sdpa_fp8_backward` are :func:`cudnn_py.sdpa_fp8` / :func:`cudnn_py.sdpa_fp8_backward` on
torch tensors. The backward is its own op, not an autograd formula: an FP8 training recipe owns the scales and ties
the two in its own ``torch.autograd.Function`` (docs/torch.md).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph.ops.sdpa import FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES
from cudnn_py.ops.sdpa import sdpa_fp8 as core_sdpa_fp8, sdpa_fp8_backward as core_sdpa_fp8_backward

from .runtime import call, context, define, empty_like_layout

__all__ = ["sdpa_fp8", "sdpa_fp8_backward", "sdpa_fp8_fwd", "sdpa_fp8_bwd", "SdpaFp8Outputs", "SdpaFp8Grads"]

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


class SdpaFp8Outputs(NamedTuple):
    """What :func:`sdpa_fp8` returns."""
    o: Tensor             #: q's FP8 type and layout: the float32 result times ``scale_o``
    stats: Tensor | None  #: (B, Hq, Sq, 1) float32 statistics (``return_stats=True``), else None
    amax_s: Tensor        #: (1, 1, 1, 1) float32: max |softmax probability| (before ``scale_s``)
    amax_o: Tensor        #: (1, 1, 1, 1) float32: max |o| before ``scale_o``


class SdpaFp8Grads(NamedTuple):
    """What :func:`sdpa_fp8_backward` returns: the FP8 gradients (layouts of q, k, v) and the (1, 1, 1, 1) float32
    max |.| of each before its scaling (``amax_dp``: of dS, the gradient of the scores)."""
    dq: Tensor
    dk: Tensor
    dv: Tensor
    amax_dq: Tensor
    amax_dk: Tensor
    amax_dv: Tensor
    amax_dp: Tensor


def _amax(like: Tensor) -> Tensor:
    return torch.empty((1, 1, 1, 1), dtype=torch.float32, device=like.device)


def _fwd_outputs(q: Tensor, v: Tensor, return_stats: bool, **_: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    b, hq, sq = q.shape[:3]
    o = empty_like_layout(q, (b, hq, sq, v.shape[3]))
    stats = torch.empty((b, hq, sq, 1) if return_stats else (0,), dtype=torch.float32, device=q.device)
    return o, stats, _amax(q), _amax(q)


def _sdpa_fp8_fwd(q: Tensor, k: Tensor, v: Tensor, descale_q: Tensor, descale_k: Tensor, descale_v: Tensor,
                  descale_s: Tensor, scale_s: Tensor, scale_o: Tensor, scale: float, causal: bool,
                  return_stats: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """FP8 attention forward: (o, stats (empty without ``return_stats``), amax_s, amax_o). See :func:`sdpa_fp8`."""
    o, stats, amax_s, amax_o = _fwd_outputs(q, v, return_stats)
    scales = dict(zip(FP8_FORWARD_SCALES, (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o)))
    given = {"stats": stats, "return_stats": True} if return_stats else {}
    context(q.get_device()).run(core_sdpa_fp8, q, k, v, **scales, scale=scale, causal=causal, o=o, amax_s=amax_s,
                                amax_o=amax_o, **given)
    return o, stats, amax_s, amax_o


sdpa_fp8_fwd = define("sdpa_fp8_fwd", _sdpa_fp8_fwd, _fwd_outputs)


def _bwd_outputs(q: Tensor, k: Tensor, v: Tensor,
                 **_: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    dq, dk, dv = (empty_like_layout(x, x.shape, dtype=q.dtype) for x in (q, k, v))
    return dq, dk, dv, _amax(q), _amax(q), _amax(q), _amax(q)


def _sdpa_fp8_bwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, stats: Tensor, descale_q: Tensor,
                  descale_k: Tensor, descale_v: Tensor, descale_o: Tensor, descale_do: Tensor, descale_s: Tensor,
                  descale_dp: Tensor, scale_s: Tensor, scale_dq: Tensor, scale_dk: Tensor, scale_dv: Tensor,
                  scale_dp: Tensor, scale: float,
                  causal: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """FP8 attention backward: (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp). See :func:`sdpa_fp8_backward`."""
    res = _bwd_outputs(q, k, v)
    scales = (descale_q, descale_k, descale_v, descale_o, descale_do, descale_s, descale_dp, scale_s, scale_dq,
              scale_dk, scale_dv, scale_dp)
    context(q.get_device()).run(core_sdpa_fp8_backward, q, k, v, o, do, stats, **dict(zip(FP8_BACKWARD_SCALES, scales)),
                                scale=scale, causal=causal, **dict(zip(SdpaFp8Grads._fields, res)))
    return res


sdpa_fp8_bwd = define("sdpa_fp8_bwd", _sdpa_fp8_bwd, _bwd_outputs)


# -- the Python faces ----------------------------------------------------------------------------------------------
def _fp8_tensors(named: dict) -> None:
    dtype = None
    for n, x in named.items():
        if not isinstance(x, Tensor) or not x.is_cuda or x.dtype not in _FP8:
            raise InvalidTypeError(f"{n} must be a float8_e4m3fn or float8_e5m2 CUDA tensor, got "
                                   f"{getattr(x, 'dtype', type(x).__name__)}")
        if x.dim() != 4 or x.stride(-1) != 1 or 0 in x.stride():
            raise InvalidValueError(f"{n} must be (B, H, S, D) with the head dim packed, got shape {tuple(x.shape)} "
                                    f"strides {x.stride()}")
        if n in ("q", "k", "v"):
            if dtype not in (None, x.dtype):
                raise InvalidTypeError(f"q, k, v must share one FP8 type, got {x.dtype} after {dtype}")
            dtype = x.dtype


def _scales(names, values, device) -> list[Tensor]:
    out = []
    for n, x in zip(names, values):
        if not isinstance(x, Tensor) or x.dtype != torch.float32 or x.numel() != 1 or x.device != device:
            got = f"{x.dtype} of shape {tuple(x.shape)} on {x.device}" if isinstance(x, Tensor) else repr(x)
            raise InvalidTypeError(f"{n} must be a one-element float32 tensor on {device} (a device tensor, so the "
                                   f"call needs no host copy and records in CUDA graphs), got {got}")
        out.append(x.reshape(1, 1, 1, 1))
    return out


def sdpa_fp8(q: Tensor, k: Tensor, v: Tensor, *, descale_q: Tensor, descale_k: Tensor, descale_v: Tensor,
             descale_s: Tensor, scale_s: Tensor, scale_o: Tensor, scale: float | None = None, causal: bool = False,
             return_stats: bool = False) -> SdpaFp8Outputs:
    """FP8 attention forward: :func:`cudnn_py.sdpa_fp8` (formula, shapes, head dims) on CUDA tensors of one FP8 type
    (``torch.float8_e4m3fn`` or ``torch.float8_e5m2``), head dim packed, each descale/scale a one-element float32
    CUDA tensor; ``scale`` (default 1/sqrt(D)), ``causal`` (top-left), ``return_stats`` (the (B, Hq, Sq, 1) float32
    statistics :func:`sdpa_fp8_backward` needs). Returns :class:`SdpaFp8Outputs`."""
    _fp8_tensors({"q": q, "k": k, "v": v})
    scales = _scales(FP8_FORWARD_SCALES, (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o), q.device)
    args = (q, k, v, *scales, q.shape[-1] ** -0.5 if scale is None else float(scale), bool(causal), bool(return_stats))
    o, stats, amax_s, amax_o = call(sdpa_fp8_fwd, _sdpa_fp8_fwd, None, args, ())
    return SdpaFp8Outputs(o, stats if return_stats else None, amax_s, amax_o)


def sdpa_fp8_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, stats: Tensor, *, descale_q: Tensor,
                      descale_k: Tensor, descale_v: Tensor, descale_o: Tensor, descale_do: Tensor, descale_s: Tensor,
                      descale_dp: Tensor, scale_s: Tensor, scale_dq: Tensor, scale_dk: Tensor, scale_dv: Tensor,
                      scale_dp: Tensor, scale: float | None = None, causal: bool = False) -> SdpaFp8Grads:
    """The gradients of :func:`sdpa_fp8` (Hopper: head dim 128, sequence lengths multiples of 32):
    :func:`cudnn_py.sdpa_fp8_backward` (what each scale is) on CUDA tensors, ``do`` of either FP8 type, ``stats`` the
    forward's, each descale/scale a one-element float32 CUDA tensor. Returns :class:`SdpaFp8Grads`."""
    _fp8_tensors({"q": q, "k": k, "v": v, "o": o, "do": do})
    if not isinstance(stats, Tensor) or stats.dtype != torch.float32 or stats.shape != (*q.shape[:3], 1):
        raise InvalidValueError(f"stats must be the forward's (B, Hq, Sq, 1) float32 statistics (return_stats=True), "
                                f"got {getattr(stats, 'shape', type(stats).__name__)}")
    scales = _scales(FP8_BACKWARD_SCALES, (descale_q, descale_k, descale_v, descale_o, descale_do, descale_s,
                                           descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp), q.device)
    args = (q, k, v, o, do, stats.contiguous(), *scales, q.shape[-1] ** -0.5 if scale is None else float(scale),
            bool(causal))
    return SdpaFp8Grads(*call(sdpa_fp8_bwd, _sdpa_fp8_bwd, None, args, ()))
