"""Batch normalisation (spatial, spatial-persistent and per-activation modes): forward training, inference, backward,
and the ``..._ex`` calls that fuse an add and an activation (``y = act(bn(x) + z)``).

::

    r = batchnorm_forward_training(h, x, scale, bias, running_mean=rm, running_var=rv, factor=0.1)
    y = batchnorm_forward_inference(h, x, scale, bias, rm, rv)
    dx, dscale, dbias = batchnorm_backward(h, x, dy, scale, r.saved_mean, r.saved_inv_var)[:3]

    r = batchnorm_forward_training_ex(h, x, scale, bias, z=z, ops="bn_add_activation")   # relu(bn(x) + z)
    g = batchnorm_backward_ex(h, x, r.y, dy, scale, bias, r.saved_mean, r.saved_inv_var, r.reserve,
                              ops="bn_add_activation")                                    # g.dx, g.dz, ...

Parameters (scale, bias, means, variances) have the shape :func:`batchnorm_param_shape` gives (1, C, 1, 1... spatial,
1, C, H, W... per activation) or that without its unit dimensions (``(C,)`` for spatial); float32, or float64 for
float64 data. ``saved_inv_var`` is ``1 / sqrt(var + epsilon)`` of the batch; running variances are unbiased.

``engine``: "legacy" (the deprecated C calls), "graph" (:mod:`cudnn_py.ops.norm_graphs`: float16, bfloat16, float32
data in spatial(-persistent) mode (inference: any), ReLU the only fused activation, the saved statistics for
backward, alpha 1 and beta 0 (inference also blends), no reserve space) or "auto" (the default: the faster, measured
once per configuration; the ``..._ex`` pair runs the legacy call; docs/graph_paths.md).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from cudnn_py import capi
from cudnn_py.errors import InvalidValueError
from cudnn_py.calls import engine_choice as ec
from cudnn_py.core.args import bool_arg
from cudnn_py.graph import legacy as gl
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.ops.activation import Activation
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops import norm_args as na
from cudnn_py.ops import norm_graphs as ng
from cudnn_py.ops._common import desc, enum_arg, launch, output, scalars, tensor_desc
from cudnn_py.calls.prepared import prepared
from cudnn_py.core.strided import normalize_shape
from cudnn_py.clib.recording import WorkspaceArg

__all__ = [
    "BATCHNORM_MODES", "BATCHNORM_OPS", "BatchNormTraining", "BatchNormGrads", "NormSizes", "batchnorm_param_shape",
    "derive_batchnorm_shape", "batchnorm_forward_training", "batchnorm_forward_inference", "batchnorm_backward",
    "batchnorm_ex_sizes", "batchnorm_forward_training_ex", "batchnorm_backward_ex",
]

BATCHNORM_MODES = {"per_activation": capi.CUDNN_BATCHNORM_PER_ACTIVATION, "spatial": capi.CUDNN_BATCHNORM_SPATIAL,
                   "spatial_persistent": capi.CUDNN_BATCHNORM_SPATIAL_PERSISTENT}
BATCHNORM_OPS = {"bn": capi.CUDNN_BATCHNORM_OPS_BN, "bn_activation": capi.CUDNN_BATCHNORM_OPS_BN_ACTIVATION,
                 "bn_add_activation": capi.CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION}


class BatchNormTraining(NamedTuple):
    """What forward training returns; ``running_*`` are None when not given, ``reserve`` only from ``..._ex``."""
    y: DeviceArray
    saved_mean: DeviceArray | None
    saved_inv_var: DeviceArray | None
    running_mean: DeviceArray | None
    running_var: DeviceArray | None
    reserve: DeviceArray | None = None


class BatchNormGrads(NamedTuple):
    """What backward returns; ``dz`` only from ``..._ex`` with ``ops="bn_add_activation"``."""
    dx: DeviceArray
    dscale: DeviceArray
    dbias: DeviceArray
    dz: DeviceArray | None = None


class NormSizes(NamedTuple):
    """Bytes the fused training calls need (:func:`batchnorm_ex_sizes`, ``normalization_sizes``)."""
    forward_workspace: int
    backward_workspace: int
    reserve: int


def batchnorm_param_shape(x_shape: Sequence[int], mode: str | int = "spatial") -> tuple[int, ...]:
    """Shape of scale/bias/mean/variance for data of ``x_shape`` (N, C, spatial...) in ``mode``."""
    m = enum_arg(mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")
    shape = normalize_shape(x_shape, "batchnorm_param_shape: x_shape")
    if not 4 <= len(shape) <= 5:
        raise InvalidValueError(f"batch normalisation takes 4-D or 5-D data (N, C, [D,] H, W); got shape {shape}")
    return na.param_shape_for(shape, m)


def derive_batchnorm_shape(x_shape, dtype=np.float32, mode="spatial") -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of the parameter tensor as cuDNN derives it (``cudnnDeriveBNTensorDescriptor``); runs on CPU."""
    m = enum_arg(mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")
    x_desc = tensor_desc(tuple(int(d) for d in x_shape), dtype)
    return na.derive_descriptors(lambda d: capi.cudnnDeriveBNTensorDescriptor(d, x_desc.ptr, m))[0]


def _bn(handle: Handle, x, mode) -> na.NormSetup:
    return na.NormSetup(handle, x, mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")


def _ex_setup(handle: Handle, x, mode, engine: str, ops, activation, z=None, **fused) -> tuple:
    """(engine, setup, ops member, activation) of an ``..._ex`` call: 'auto' is the legacy call
    (docs/graph_paths.md)."""
    engine = gl.engine_arg(engine)
    return ("legacy" if engine == "auto" else engine, _bn(handle, x, mode),
            *na.fused_ops(ops, activation, BATCHNORM_OPS, capi.cudnnBatchNormOps_t, z, **fused))


@prepared(inputs=("x", "scale", "bias"), outputs=("running_mean", "running_var", "saved_mean", "saved_inv_var", "y"),
          inplace=False, scalars=("alpha", "beta"))
def batchnorm_forward_training(handle: Handle, x: DeviceArrayLike, scale: DeviceArrayLike, bias: DeviceArrayLike, *,
                               mode: str | int = "spatial", epsilon: float = 1e-5, factor: float = 1.0,
                               running_mean: DeviceArrayLike | None = None, running_var: DeviceArrayLike | None = None,
                               saved_mean: DeviceArrayLike | None = None, saved_inv_var: DeviceArrayLike | None = None,
                               y: DeviceArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0,
                               engine: str = "auto") -> BatchNormTraining:
    """``y = alpha * bn(x) + beta * y`` with batch statistics (``cudnnBatchNormalizationForwardTraining``).

    ``running_mean``/``running_var`` (both or neither) are updated in place: ``running = factor * batch + (1 -
    factor) * running`` (factor 1 on the first call). ``saved_mean``/``saved_inv_var`` (allocated when not given) go
    to :func:`batchnorm_backward`.
    """
    s = _bn(handle, x, mode)
    sc, bi, rm, rv, sm, siv, eps, f = na.training_params(handle, s, scale, bias, running_mean, running_var,
                                                         saved_mean, saved_inv_var, epsilon, factor)
    ya, (sm, siv) = output(y, "y", handle, s.x.shape, s.x.dtype, like=s.x), s.or_new_pair(sm, siv, handle)
    gl.dispatch(engine, handle, ("batchnorm_forward_training", s.mode, eps, f, alpha, beta, rm is None,
                                 ec.signature(s.x, ya, sc)),
                lambda: launch(handle, capi.cudnnBatchNormalizationForwardTraining, handle.ptr, s.mode,
                               *scalars(s.x.dtype, alpha, beta), s.xdesc, s.x, desc(ya), ya, s.pdesc, sc, bi, f, rm,
                               rv, eps, sm, siv),
                lambda auto: ng.training(handle, s, sc, bi, rm, rv, sm, siv, eps, f, ya, None, False, (alpha, beta),
                                         auto),
                mutated=(() if rm is None else (rm, rv)) + ((ya,) if beta or ya.ptr == s.x.ptr else ()))
    return BatchNormTraining(ya, sm, siv, rm, rv)


@prepared(inputs=("x", "scale", "bias", "mean", "var"), outputs=("y",), inplace=False, scalars=("alpha", "beta"))
def batchnorm_forward_inference(handle: Handle, x: DeviceArrayLike, scale: DeviceArrayLike, bias: DeviceArrayLike,
                                mean: DeviceArrayLike, var: DeviceArrayLike, *, mode: str | int = "spatial",
                                epsilon: float = 1e-5, y: DeviceArrayLike | None = None, alpha: float = 1.0,
                                beta: float = 0.0, engine: str = "auto") -> DeviceArray:
    """``y = alpha * (scale * (x - mean) / sqrt(var + epsilon) + bias) + beta * y``
    (``cudnnBatchNormalizationForwardInference``); returns y (allocated if not given)."""
    s = _bn(handle, x, mode)

    def c_call(sc, bi, me, va, _, eps, ya):
        launch(handle, capi.cudnnBatchNormalizationForwardInference, handle.ptr, s.mode,
               *scalars(s.x.dtype, alpha, beta), s.xdesc, s.x, desc(ya), ya, s.pdesc, sc, bi, me, va, eps)
    return ng.inference(handle, s, engine, ("batchnorm_forward_inference", s.mode), (scale, bias, mean, var), epsilon,
                        y, None, 0, None, alpha, beta, c_call)


@prepared(inputs=("x", "dy", "scale", "saved_mean", "saved_inv_var"), outputs=("dx", "dscale", "dbias"), inplace=False,
          scalars=("alpha_data", "beta_data", "alpha_param", "beta_param"))
def batchnorm_backward(handle: Handle, x: DeviceArrayLike, dy: DeviceArrayLike, scale: DeviceArrayLike,
                       saved_mean: DeviceArrayLike | None = None, saved_inv_var: DeviceArrayLike | None = None, *,
                       mode: str | int = "spatial", epsilon: float = 1e-5, dx: DeviceArrayLike | None = None,
                       dscale: DeviceArrayLike | None = None, dbias: DeviceArrayLike | None = None,
                       alpha_data: float = 1.0, beta_data: float = 0.0, alpha_param: float = 1.0,
                       beta_param: float = 0.0, engine: str = "auto") -> BatchNormGrads:
    """Gradients of batch normalisation (``cudnnBatchNormalizationBackward``).

    ``dx = alpha_data * dL/dx + beta_data * dx``; ``dscale``/``dbias`` blend with alpha_param/beta_param.
    ``saved_mean``/``saved_inv_var`` from the forward pass (both or neither: cuDNN then recomputes them).
    """
    s = _bn(handle, x, mode)
    dya = na.data_array(dy, "dy", handle, like=s.x)
    sc = s.param(scale, "scale", handle)
    na.check_pair(saved_mean, saved_inv_var, "saved_mean and saved_inv_var")
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps = na.check_epsilon(epsilon)
    ds, db = s.opt_param(dscale, "dscale", handle), s.opt_param(dbias, "dbias", handle)
    dxa, (ds, db) = output(dx, "dx", handle, s.x.shape, s.x.dtype, like=s.x), s.or_new_pair(ds, db, handle)
    alphas = (alpha_data, beta_data, alpha_param, beta_param)
    gl.dispatch(engine, handle, ("batchnorm_backward", s.mode, eps, *alphas, sm is None,
                                 ec.signature(s.x, dya, dxa, sc)),
                lambda: launch(handle, capi.cudnnBatchNormalizationBackward, handle.ptr, s.mode,
                               *scalars(s.x.dtype, *alphas), s.xdesc, s.x, desc(dya), dya, desc(dxa), dxa, s.pdesc, sc,
                               ds, db, eps, sm, siv),
                lambda auto: ng.backward(handle, s, dya, sc, sm, siv, dxa, ds, db, alphas, auto),
                mutated=((dxa,) if beta_data or dxa.ptr in (s.x.ptr, dya.ptr) else ()) +
                ((ds, db) if beta_param else ()))
    return BatchNormGrads(dxa, ds, db)


def batchnorm_ex_sizes(handle: Handle, x: DeviceArrayLike, *, mode: str | int = "spatial_persistent",
                       ops: str | int = "bn", activation: Activation | str | int | None = None,
                       with_z: bool | None = None) -> NormSizes:
    """:class:`NormSizes` ``(forward_workspace, backward_workspace, reserve)``: the ``..._ex`` calls' bytes for x."""
    handle = handle_arg(handle)
    _, s, op, act = _ex_setup(handle, x, mode, "legacy", ops, activation, forward=False, check=False)
    with_z = int(op) == 2 if with_z is None else bool_arg(with_z, "with_z")
    return NormSizes(*_ex_sizes(handle, s, op, act, with_z))


def _ex_sizes(handle: Handle, s: na.NormSetup, op, act, with_z: bool) -> tuple[int, int, int]:
    xd, pd, act = s.xdesc.ptr, s.pdesc.ptr, None if act is None else act.descriptor
    zd = xd if with_z else None
    fw, bw, rs = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    capi.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        handle.ptr, s.mode, op, xd, zd, xd, pd, act, ctypes.byref(fw))
    capi.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        handle.ptr, s.mode, op, xd, xd, xd, zd, xd, pd, act, ctypes.byref(bw))
    capi.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle.ptr, s.mode, op, act, xd, ctypes.byref(rs))
    return fw.value, bw.value, rs.value


@prepared(inputs=("x", "scale", "bias", "z"),
          outputs=("running_mean", "running_var", "saved_mean", "saved_inv_var", "y", "reserve"), inplace=False,
          scalars=("alpha", "beta"))
def batchnorm_forward_training_ex(handle: Handle, x: DeviceArrayLike, scale: DeviceArrayLike, bias: DeviceArrayLike, *,
                                  z: DeviceArrayLike | None = None, ops: str | int = "bn",
                                  activation: Activation | str | int | None = None,
                                  mode: str | int = "spatial_persistent", epsilon: float = 1e-5, factor: float = 1.0,
                                  running_mean: DeviceArrayLike | None = None,
                                  running_var: DeviceArrayLike | None = None, saved_mean: DeviceArrayLike | None = None,
                                  saved_inv_var: DeviceArrayLike | None = None, y: DeviceArrayLike | None = None,
                                  reserve: DeviceArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0,
                                  engine: str = "auto") -> BatchNormTraining:
    """``y = act(bn(x) [+ z])`` with batch statistics (``cudnnBatchNormalizationForwardTrainingEx``).

    ``ops``: "bn", "bn_activation" or "bn_add_activation" (needs ``z``, shaped like x); ``activation``: a mode name
    (default "relu") or an :class:`~cudnn_py.ops.activation.Activation`. The reserve (returned, allocated when not
    given; none from the graph engine) goes to :func:`batchnorm_backward_ex`. cuDNN fuses only some layouts and
    types (e.g. NHWC float16, spatial-persistent); elsewhere it raises :class:`~cudnn_py.errors.CudnnNotSupportedError`.
    """
    engine, s, op, act = _ex_setup(handle, x, mode, engine, ops, activation, z)

    def c_call(ya, za, sc, bi, rm, rv, sm, siv, eps, f, rsa, ws):
        launch(handle, capi.cudnnBatchNormalizationForwardTrainingEx, handle.ptr, s.mode, op,
               *scalars(s.x.dtype, alpha, beta), s.xdesc, s.x, None if za is None else desc(za), za, desc(ya), ya,
               s.pdesc, sc, bi, f, rm, rv, eps, sm, siv, act, WorkspaceArg(ws), ws, rsa,
               0 if rsa is None else rsa.nbytes)
    return BatchNormTraining(*ng.fused_training(
        handle, s, op, activation, z, (scale, bias, running_mean, running_var, saved_mean, saved_inv_var, epsilon,
                                       factor), y, reserve, (alpha, beta), engine,
        lambda with_z: _ex_sizes(handle, s, op, act, with_z)[::2], c_call))


@prepared(inputs=("x", "y", "dy", "scale", "bias", "saved_mean", "saved_inv_var", "reserve"),
          outputs=("dx", "dz", "dscale", "dbias"), inplace=False,
          scalars=("alpha_data", "beta_data", "alpha_param", "beta_param"))
def batchnorm_backward_ex(handle: Handle, x: DeviceArrayLike, y: DeviceArrayLike, dy: DeviceArrayLike,
                          scale: DeviceArrayLike, bias: DeviceArrayLike, saved_mean: DeviceArrayLike,
                          saved_inv_var: DeviceArrayLike, reserve: DeviceArrayLike | None = None, *,
                          ops: str | int = "bn", activation: Activation | str | int | None = None,
                          mode: str | int = "spatial_persistent", epsilon: float = 1e-5,
                          dx: DeviceArrayLike | None = None, dz: DeviceArrayLike | None = None,
                          dscale: DeviceArrayLike | None = None, dbias: DeviceArrayLike | None = None,
                          alpha_data: float = 1.0, beta_data: float = 0.0, alpha_param: float = 1.0,
                          beta_param: float = 0.0, engine: str = "auto") -> BatchNormGrads:
    """Gradients of ``y = act(bn(x) [+ z])`` (``cudnnBatchNormalizationBackwardEx``).

    ``y`` is the forward output (it gates the activation's gradient), ``reserve`` the forward's reserve (the graph
    engine reads none). ``dz`` (ops "bn_add_activation") is returned allocated when not given.
    """
    engine, s, op, act = _ex_setup(handle, x, mode, engine, ops, activation, forward=False)

    def c_call(b: na.FusedBackward) -> None:
        launch(handle, capi.cudnnBatchNormalizationBackwardEx, handle.ptr, s.mode, op, *b.scalars, s.xdesc, s.x,
               b.y_desc, b.y, b.dy_desc, b.dy, b.dz_desc, b.dz, b.dx_desc, b.dx, s.pdesc, b.scale, b.bias, b.dscale,
               b.dbias, b.epsilon, b.saved_mean, b.saved_inv_var, act, b.workspace, b.workspace_size, b.reserve,
               b.reserve_size)
    return BatchNormGrads(*ng.fused_backward(
        handle, s, op, activation, (y, dy, scale, bias, saved_mean, saved_inv_var, epsilon, dx, dz, dscale, dbias),
        reserve, (alpha_data, beta_data, alpha_param, beta_param), engine,
        lambda: _ex_sizes(handle, s, op, act, int(op) == 2)[1:], c_call))
