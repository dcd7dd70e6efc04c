"""The normalisation API (``cudnnNormalizationForwardTraining / ForwardInference / Backward``): batch norm's math
(``per_channel`` = its spatial mode) with ``ops`` "norm", "norm_activation" or "norm_add_activation" (``y =
act(norm(x) + z)``) and ``algo`` "standard" or "persist". Combinations cuDNN does not implement (per version,
layout, dtype) raise :class:`~cudnn_py.errors.CudnnNotSupportedError`.

::

    r = normalization_forward_training(h, x, scale, bias, running_mean=rm, running_var=rv)
    y = normalization_forward_inference(h, x, scale, bias, rm, rv)
    g = normalization_backward(h, x, r.y, dy, scale, bias, r.saved_mean, r.saved_inv_var, r.reserve)

Parameters follow :mod:`cudnn_py.ops.batchnorm`; the mean/variance tensors have the scale's shape.

``engine="graph"`` runs graphs as for batch norm (``algo`` left "standard"). ``engine="auto"`` (the default): for
plain ("norm") inference the faster engine, measured once; for plain training and backward the graph where it
accepts the call; the legacy call otherwise and for the fused-activation ops (docs/graph_paths.md).
"""
from __future__ import annotations

import ctypes

import numpy as np

from cudnn_py import capi
from cudnn_py.core.args import bool_arg
from cudnn_py.graph import legacy as gl
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.ops.activation import Activation
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops import norm_args as na
from cudnn_py.ops import norm_graphs as ng
from cudnn_py.ops._common import desc, enum_arg, launch, scalars, tensor_desc
from cudnn_py.calls.prepared import prepared
from cudnn_py.clib.recording import WorkspaceArg
from cudnn_py.ops.batchnorm import BatchNormGrads, BatchNormTraining, NormSizes

__all__ = [
    "NORM_MODES", "NORM_OPS", "NORM_ALGOS", "derive_normalization_shapes", "normalization_sizes",
    "normalization_forward_training", "normalization_forward_inference", "normalization_backward",
]

NORM_MODES = {"per_activation": capi.CUDNN_NORM_PER_ACTIVATION, "per_channel": capi.CUDNN_NORM_PER_CHANNEL}
NORM_OPS = {"norm": capi.CUDNN_NORM_OPS_NORM, "norm_activation": capi.CUDNN_NORM_OPS_NORM_ACTIVATION,
            "norm_add_activation": capi.CUDNN_NORM_OPS_NORM_ADD_ACTIVATION}
NORM_ALGOS = {"standard": capi.CUDNN_NORM_ALGO_STANDARD, "persist": capi.CUDNN_NORM_ALGO_PERSIST}


def derive_normalization_shapes(x_shape, dtype=np.float32, mode="per_channel"):
    """((scale/bias shape, dtype), (mean/var shape, dtype)) as ``cudnnDeriveNormTensorDescriptor`` gives; CPU only."""
    m = enum_arg(mode, NORM_MODES, capi.cudnnNormMode_t, "normalization mode")
    x_desc = tensor_desc(tuple(int(d) for d in x_shape), dtype)
    return tuple(na.derive_descriptors(lambda d1, d2: capi.cudnnDeriveNormTensorDescriptor(d1, d2, x_desc.ptr, m, 1),
                                       2))


def _setup(handle: Handle, x, mode, engine: str, ops, activation, algo, z=None, **fused) -> tuple:
    """(engine, setup, ops member, activation, algo member, the graph path's check of it): ``engine='auto'`` runs the
    legacy call for the fused-activation ops; ``z``, ``fused``: :func:`~cudnn_py.ops.norm_args.fused_ops`' own."""
    engine = gl.engine_arg(engine)
    if engine == "auto" and not (isinstance(ops, (str, int)) and ops in ("norm", capi.CUDNN_NORM_OPS_NORM)):
        engine = "legacy"
    s = na.NormSetup(handle, x, mode, NORM_MODES, capi.cudnnNormMode_t, "normalization mode")
    op, act = na.fused_ops(ops, activation, NORM_OPS, capi.cudnnNormOps_t, z, **fused)
    al_ = enum_arg(algo, NORM_ALGOS, capi.cudnnNormAlgo_t, "normalization algo")

    def check() -> None:
        if al_ != capi.CUDNN_NORM_ALGO_STANDARD:
            raise gl.GraphPathRefused("engine='graph' picks its own engine: leave algo 'standard' (or use "
                                      "engine='legacy')")
    return engine, s, op, act, al_, check


def _sizes(handle: Handle, s: na.NormSetup, op, algo, act, with_z: bool) -> tuple[int, int, int]:
    xd, pd, act = s.xdesc.ptr, s.pdesc.ptr, None if act is None else act.descriptor
    zd = xd if with_z else None
    fw, bw, rs = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    capi.cudnnGetNormalizationForwardTrainingWorkspaceSize(
        handle.ptr, s.mode, op, algo, xd, zd, xd, pd, act, pd, ctypes.byref(fw), 1)
    capi.cudnnGetNormalizationBackwardWorkspaceSize(
        handle.ptr, s.mode, op, algo, xd, xd, xd, zd, xd, pd, act, pd, ctypes.byref(bw), 1)
    capi.cudnnGetNormalizationTrainingReserveSpaceSize(handle.ptr, s.mode, op, algo, act, xd, ctypes.byref(rs), 1)
    return fw.value, bw.value, rs.value


def normalization_sizes(handle: Handle, x: DeviceArrayLike, *, mode: str | int = "per_channel", ops: str | int = "norm",
                        algo: str | int = "standard", activation: Activation | str | int | None = None,
                        with_z: bool | None = None) -> NormSizes:
    """:class:`~cudnn_py.ops.batchnorm.NormSizes` ``(forward_workspace, backward_workspace, reserve)`` for x."""
    handle = handle_arg(handle)
    _, s, op, act, al_, _ = _setup(handle, x, mode, "legacy", ops, activation, algo, forward=False, check=False)
    with_z = int(op) == 2 if with_z is None else bool_arg(with_z, "with_z")
    return NormSizes(*_sizes(handle, s, op, al_, act, with_z))


@prepared(inputs=("x", "scale", "bias", "z"),
          outputs=("running_mean", "running_var", "saved_mean", "saved_inv_var", "y", "reserve"), inplace=False,
          scalars=("alpha", "beta"))
def normalization_forward_training(handle: Handle, x: DeviceArrayLike, scale: DeviceArrayLike, bias: DeviceArrayLike, *,
                                   z: DeviceArrayLike | None = None, mode: str | int = "per_channel",
                                   ops: str | int = "norm", algo: str | int = "standard",
                                   activation: Activation | str | int | None = None, epsilon: float = 1e-5,
                                   factor: float = 1.0, running_mean: DeviceArrayLike | None = None,
                                   running_var: DeviceArrayLike | None = None,
                                   saved_mean: DeviceArrayLike | None = None,
                                   saved_inv_var: DeviceArrayLike | None = None, y: DeviceArrayLike | None = None,
                                   reserve: DeviceArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0,
                                   engine: str = "auto") -> BatchNormTraining:
    """``y = alpha * act(norm(x) [+ z]) + beta * y`` with batch statistics (``cudnnNormalizationForwardTraining``).

    Running statistics (both or neither) are updated in place with ``factor``; saved mean / inverse variance and the
    reserve (none from the graph engine) are returned, allocated when not given, for :func:`normalization_backward`.
    """
    engine, s, op, act, al_, check = _setup(handle, x, mode, engine, ops, activation, algo, z)

    def c_call(ya, za, sc, bi, rm, rv, sm, siv, eps, f, rsa, ws):
        launch(handle, capi.cudnnNormalizationForwardTraining, handle.ptr, s.mode, op, al_,
               *scalars(s.x.dtype, alpha, beta), s.xdesc, s.x, s.pdesc, sc, bi, f, s.pdesc, rm, rv, eps, sm, siv, act,
               None if za is None else desc(za), za, desc(ya), ya, WorkspaceArg(ws), ws, rsa,
               0 if rsa is None else rsa.nbytes, 1)
    return BatchNormTraining(*ng.fused_training(
        handle, s, op, activation, z, (scale, bias, running_mean, running_var, saved_mean, saved_inv_var, epsilon,
                                       factor), y, reserve, (alpha, beta), engine,
        lambda with_z: _sizes(handle, s, op, al_, act, with_z)[::2], c_call, check))


@prepared(inputs=("x", "scale", "bias", "mean", "var", "z"), outputs=("y",), inplace=False, scalars=("alpha", "beta"))
def normalization_forward_inference(handle: Handle, x: DeviceArrayLike, scale: DeviceArrayLike, bias: DeviceArrayLike,
                                    mean: DeviceArrayLike, var: DeviceArrayLike, *, z: DeviceArrayLike | None = None,
                                    mode: str | int = "per_channel", ops: str | int = "norm",
                                    algo: str | int = "standard", activation: Activation | str | int | None = None,
                                    epsilon: float = 1e-5, y: DeviceArrayLike | None = None, alpha: float = 1.0,
                                    beta: float = 0.0, engine: str = "auto") -> DeviceArray:
    """``y = alpha * act(scale * (x - mean) / sqrt(var + eps) + bias [+ z]) + beta * y``
    (``cudnnNormalizationForwardInference``); returns y (allocated if not given)."""
    engine, s, op, act, al_, check = _setup(handle, x, mode, engine, ops, activation, algo, z)

    def c_call(sc, bi, me, va, za, eps, ya):
        launch(handle, capi.cudnnNormalizationForwardInference, handle.ptr, s.mode, op, al_,
               *scalars(s.x.dtype, alpha, beta), s.xdesc, s.x, s.pdesc, sc, bi, s.pdesc, me, va,
               None if za is None else desc(za), za, act, desc(ya), ya, eps, 1)
    return ng.inference(handle, s, engine, ("normalization_forward_inference", s.mode, int(op)),
                        (scale, bias, mean, var), epsilon, y, z, op, activation, alpha, beta, c_call, check)


@prepared(inputs=("x", "y", "dy", "scale", "bias", "saved_mean", "saved_inv_var", "reserve"),
          outputs=("dx", "dz", "dscale", "dbias"), inplace=False,
          scalars=("alpha_data", "beta_data", "alpha_param", "beta_param"))
def normalization_backward(handle: Handle, x: DeviceArrayLike, y: DeviceArrayLike, dy: DeviceArrayLike,
                           scale: DeviceArrayLike, bias: DeviceArrayLike, saved_mean: DeviceArrayLike,
                           saved_inv_var: DeviceArrayLike, reserve: DeviceArrayLike | None = None, *,
                           mode: str | int = "per_channel", ops: str | int = "norm", algo: str | int = "standard",
                           activation: Activation | str | int | None = None, epsilon: float = 1e-5,
                           dx: DeviceArrayLike | None = None, dz: DeviceArrayLike | None = None,
                           dscale: DeviceArrayLike | None = None, dbias: DeviceArrayLike | None = None,
                           alpha_data: float = 1.0, beta_data: float = 0.0, alpha_param: float = 1.0,
                           beta_param: float = 0.0, engine: str = "auto") -> BatchNormGrads:
    """Gradients of ``y = act(norm(x) [+ z])`` (``cudnnNormalizationBackward``); ``y`` and ``reserve`` from the
    forward (the graph engine reads no reserve); ``dz`` returned for ops "norm_add_activation"."""
    engine, s, op, act, al_, check = _setup(handle, x, mode, engine, ops, activation, algo, forward=False)

    def c_call(b: na.FusedBackward) -> None:
        launch(handle, capi.cudnnNormalizationBackward, handle.ptr, s.mode, op, al_, *b.scalars, s.xdesc, s.x,
               b.y_desc, b.y, b.dy_desc, b.dy, b.dz_desc, b.dz, b.dx_desc, b.dx, s.pdesc, b.scale, b.bias, b.dscale,
               b.dbias, b.epsilon, s.pdesc, b.saved_mean, b.saved_inv_var, act, b.workspace, b.workspace_size,
               b.reserve, b.reserve_size, 1)
    return BatchNormGrads(*ng.fused_backward(
        handle, s, op, activation, (y, dy, scale, bias, saved_mean, saved_inv_var, epsilon, dx, dz, dscale, dbias),
        reserve, (alpha_data, beta_data, alpha_param, beta_param), engine,
        lambda: _sizes(handle, s, op, al_, act, int(op) == 2)[1:], c_call, check))
