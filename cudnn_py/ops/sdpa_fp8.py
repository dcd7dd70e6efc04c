"""FP8 scaled dot-product attention (Hopper and newer) through cached graph plans: :func:`sdpa_fp8` and
:func:`sdpa_fp8_backward`, with per-tensor descale/scale factors and amax outputs (see
:mod:`cudnn_py.graph.ops.sdpa`), on the argument handling of :mod:`cudnn_py.ops.sdpa_args`. Of the
:class:`~cudnn_py.graph.ops.sdpa_options.SdpaOptions`, FP8 attention takes ``scale`` and ``causal``.
"""
from __future__ import annotations

import numbers
from typing import Any, NamedTuple

from cudnn_py.args import bool_arg
from cudnn_py.graph.ops.sdpa import FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES
from cudnn_py.graph.ops.sdpa_options import SdpaOptions, fp8_only
from cudnn_py.handle import handle_arg
from cudnn_py.memory import DeviceArrayLike

from .sdpa_args import SdpaArgs, device_tensor, fast_call

__all__ = ["sdpa_fp8", "sdpa_fp8_backward", "SdpaFp8Outputs", "SdpaFp8Grads"]


class SdpaFp8Outputs(NamedTuple):
    """What :func:`sdpa_fp8` returns."""
    o: Any              #: the output in q's FP8 type (the float32 result times ``scale_o``)
    stats: Any | None   #: the float32 softmax statistics (``return_stats=True``), else None
    amax_s: Any         #: (1, 1, 1, 1) float32: max |softmax probability| (before ``scale_s``)
    amax_o: Any         #: (1, 1, 1, 1) float32: max |o| before ``scale_o``


class SdpaFp8Grads(NamedTuple):
    """What :func:`sdpa_fp8_backward` returns: the FP8 gradients and the (1, 1, 1, 1) float32 max |.| of each
    before its scaling (``amax_dp``: of dS, the gradient of the scores)."""
    dq: Any
    dk: Any
    dv: Any
    amax_dq: Any
    amax_dk: Any
    amax_dv: Any
    amax_dp: Any


def _fp8_call(handle: Any, method: str, tensors: dict, scales: dict, outputs: dict, opts: SdpaOptions,
              autotune: bool, fkey_options: tuple, **builder: Any) -> list:
    """Run the FP8 attention graph of ``Graph.<method>`` on the call's ``tensors`` and ``scales``
    (numbers or device tensors) by builder keyword through the runner cache; returns the ``outputs`` (name -> the
    caller's array or None) in order. ``fkey_options``: the raw option arguments (the fast key's part);
    ``builder``: more keywords of the ``Graph`` method."""
    fkey = None
    if not any(isinstance(x, numbers.Real) for x in scales.values()):  # a number is copied: validated path
        fkey, outs = fast_call(handle, (method, fkey_options), (*tensors.values(), *scales.values()),
                               list(outputs.values()))
        if outs is not None:
            return outs
    handle = handle_arg(handle)
    args = SdpaArgs(handle, opts=opts, scales=scales, **tensors)
    given = {n: None if x is None else device_tensor(x, n)[1] for n, x in outputs.items()}
    return args.run(args.runner(method, autotune, given, options=opts, **builder), outputs, fkey)


def sdpa_fp8(handle: Any, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike,
             options: SdpaOptions | None = None, *, descale_q: Any, descale_k: Any, descale_v: Any, descale_s: Any,
             scale_s: Any, scale_o: Any, return_stats: bool = False, o: Any = None, stats: Any = None,
             amax_s: Any = None, amax_o: Any = None, autotune: bool = False, scale: float | None = None,
             causal: bool = False) -> SdpaFp8Outputs:
    """FP8 attention forward (Hopper and newer) through a cached plan, as :func:`sdpa`.

    Computes ``P = softmax(scale * descale_q * descale_k * q k^T)`` in float32, rounds ``P * scale_s`` to q's FP8
    type, and returns ``o = (P8 v) * descale_s * descale_v * scale_o`` in q's FP8 type, with the amax of P and of o
    before ``scale_o`` (what a delayed-scaling recipe feeds its next scales).

    :param handle: the :class:`~cudnn_py.Handle` (plans are cached on it).
    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) device tensors of one FP8 type
        (float8_e4m3fn or float8_e5m2: ml_dtypes on DeviceArrays, or torch's), head dims multiples of 16 up to
        256 and packed; Hq a multiple of Hk and Hv.
    :param descale_q, descale_k, descale_v, descale_s, scale_s, scale_o: each a one-element float32 device tensor
        or a number > 0 (copied to the device on each call: pass device tensors for the fast path).
    :param options: an :class:`SdpaOptions` of ``scale`` (multiplies q k^T; default 1/sqrt(D)) and ``causal``
        (top-left causal mask, the only mask FP8 attention takes here), or those two as keywords.
    :param return_stats: also return the (B, Hq, Sq, 1) float32 statistics :func:`sdpa_fp8_backward` needs.
    :param o, stats, amax_s, amax_o: outputs to write (default: new arrays; o gets q's layout); ``stats`` implies
        ``return_stats``.
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: an :class:`SdpaFp8Outputs` (o, stats or None, amax_s, amax_o).
    """
    return_stats = bool_arg(return_stats, "return_stats") or stats is not None
    given = {"o": o, "stats": stats, "amax_s": amax_s, "amax_o": amax_o}
    if not return_stats:
        del given["stats"]
    opts = fp8_only("sdpa_fp8", SdpaOptions.of(options, {"scale": scale, "causal": causal}, "sdpa_fp8"))

    scales = dict(zip(FP8_FORWARD_SCALES, (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o)))
    outs = _fp8_call(handle, "sdpa_fp8", {"q": q, "k": k, "v": v}, scales, given, opts, bool_arg(autotune, "autotune"),
                     (options, scale, causal, autotune, return_stats), return_stats=return_stats)
    if not return_stats:
        outs.insert(1, None)
    return SdpaFp8Outputs(*outs)


def sdpa_fp8_backward(handle: Any, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike, o: DeviceArrayLike,
                      do: DeviceArrayLike, stats: DeviceArrayLike, options: SdpaOptions | None = None, *,
                      descale_q: Any, descale_k: Any, descale_v: Any, descale_o: Any, descale_do: Any,
                      descale_s: Any, descale_dp: Any, scale_s: Any, scale_dq: Any, scale_dk: Any, scale_dv: Any,
                      scale_dp: Any, dq: Any = None, dk: Any = None, dv: Any = None, amax_dq: Any = None,
                      amax_dk: Any = None, amax_dv: Any = None, amax_dp: Any = None, autotune: bool = False,
                      scale: float | None = None, causal: bool = False) -> SdpaFp8Grads:
    """FP8 attention backward (Hopper: head dim 128) through a cached plan: the gradients of :func:`sdpa_fp8`.

    :param q, k, v, o, stats: the forward's FP8 inputs, its FP8 output and its float32 statistics
        (``return_stats=True``).
    :param do: the output gradient (o's shape, either FP8 type).
    :param descale_q, descale_k, descale_v, descale_o, descale_do: the inverse scales of the FP8 inputs.
    :param descale_s, scale_s: the forward's probability scale and its inverse.
    :param scale_dp, descale_dp: the scale of dS (rounded to do's FP8 type inside the kernel) and its inverse.
    :param scale_dq, scale_dk, scale_dv: the scales of the FP8 results. Each scale is a one-element float32 device
        tensor or a number > 0 (copied to the device on each call).
    :param options: as in the forward (``scale`` and ``causal``, or those two as keywords).
    :param dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp: outputs to write (default: new arrays; dq, dk, dv in the
        layouts of q, k, v and q's FP8 type).
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: an :class:`SdpaFp8Grads` (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp).
    """
    given = {"dq": dq, "dk": dk, "dv": dv, "amax_dq": amax_dq, "amax_dk": amax_dk, "amax_dv": amax_dv,
             "amax_dp": amax_dp}
    opts = fp8_only("sdpa_fp8_backward", SdpaOptions.of(options, {"scale": scale, "causal": causal},
                                                        "sdpa_fp8_backward"))
    scales = dict(zip(FP8_BACKWARD_SCALES, (descale_q, descale_k, descale_v, descale_o, descale_do, descale_s,
                                         descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp)))
    tensors = {"q": q, "k": k, "v": v, "o": o, "do": do, "stats": stats}
    return SdpaFp8Grads(*_fp8_call(handle, "sdpa_fp8_backward", tensors, scales, given, opts,
                                   bool_arg(autotune, "autotune"), (options, scale, causal, autotune)))
