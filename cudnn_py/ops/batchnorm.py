"""Batch normalisation: forward training (running averages, saved mean / inverse variance), forward
inference and backward, in spatial, spatial-persistent and per-activation modes, plus the ``...Ex``
calls that fuse an add and an activation (``y = act(bn(x) + z)``) with their workspace and reserve.

::

    r = batchnorm_forward_training(h, x, scale, bias, running_mean=rm, running_var=rv, factor=0.1)
    y = batchnorm_forward_inference(h, x, scale, bias, rm, rv)
    dx, dscale, dbias = batchnorm_backward(h, x, dy, scale, r.saved_mean, r.saved_inv_var)[:3]

    r = batchnorm_forward_training_ex(h, x, scale, bias, z=z, ops="bn_add_activation")   # relu(bn(x) + z)
    g = batchnorm_backward_ex(h, x, r.y, dy, scale, bias, r.saved_mean, r.saved_inv_var, r.reserve,
                              ops="bn_add_activation")                                    # g.dx, g.dz, ...

Parameters (scale, bias, means, variances) have the shape :func:`batchnorm_param_shape` gives
(1, C, 1, 1... for spatial modes, 1, C, H, W... for per-activation) or the same with the unit
dimensions dropped (``(C,)`` for spatial). Their dtype is float32, or float64 for float64 data.
``saved_inv_var`` is ``1 / sqrt(var + epsilon)`` of the batch; running variances are unbiased.

``engine="graph"`` (every call here) runs the same computation as cached backend-API graphs instead of the
deprecated C calls: training forward as one batch-norm operation (``OPERATION_NORM_FORWARD``, running statistics
included) with the add and ReLU of the ``..._ex`` calls fused after it, inference as pointwise operations,
backward as one ``OPERATION_NORM_BACKWARD`` (the ``..._ex`` ReLU gradient as a pointwise graph before it).
It takes float16, bfloat16 and float32 data in spatial (and spatial-persistent) mode, ReLU as the only fused
activation, the saved statistics for backward, alpha 1 and beta 0 (inference also blends); it needs no reserve
space (it returns none, and its backward reads none). ``engine="auto"`` (the default) takes the graph for forward
training, inference and backward where it accepts the call, the legacy call otherwise and for the ``..._ex``
calls (their legacy backward measured faster, and forward and backward must agree on the reserve space; see
docs/graph_paths.md).

Raw C path::

    bn = capi.cudnnTensorDescriptor_t(); capi.cudnnCreateTensorDescriptor(byref(bn))
    capi.cudnnDeriveBNTensorDescriptor(bn, x_desc, capi.CUDNN_BATCHNORM_SPATIAL)
    capi.cudnnBatchNormalizationForwardTraining(h.ptr, capi.CUDNN_BATCHNORM_SPATIAL, byref(c_float(1)),
        byref(c_float(0)), x_desc, x.ptr, y_desc, y.ptr, bn, scale.ptr, bias.ptr, 1.0, rm.ptr, rv.ptr,
        1e-5, saved_mean.ptr, saved_inv_var.ptr)
"""
from __future__ import annotations

import ctypes
import math
from typing import NamedTuple

import numpy as np

from cudnn_py import capi
from cudnn_py.descriptors import TensorDescriptor
from cudnn_py.graph import legacy as gl
from cudnn_py.memory import DeviceArray, empty
from cudnn_py.ops._common import (
    byte_buffer, check_array, desc, empty_like, enum_arg, read_tensor_desc, scalars, tensor_desc,
)
from cudnn_py.ops.activation import Activation, _activation_desc
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "BATCHNORM_MODES", "BATCHNORM_OPS", "BatchNormTraining", "BatchNormGrads", "batchnorm_param_shape",
    "derive_batchnorm_shape", "batchnorm_forward_training", "batchnorm_forward_inference", "batchnorm_backward",
    "batchnorm_ex_sizes", "batchnorm_forward_training_ex", "batchnorm_backward_ex",
]

BATCHNORM_MODES = {
    "per_activation": capi.CUDNN_BATCHNORM_PER_ACTIVATION,
    "spatial": capi.CUDNN_BATCHNORM_SPATIAL,
    "spatial_persistent": capi.CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
}
BATCHNORM_OPS = {
    "bn": capi.CUDNN_BATCHNORM_OPS_BN,
    "bn_activation": capi.CUDNN_BATCHNORM_OPS_BN_ACTIVATION,
    "bn_add_activation": capi.CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION,
}


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


# ---------------------------------------------------------------- helpers (also used by normalization, dropout, ...)


def _activation(act) -> capi.cudnnActivationDescriptor_t:
    """The activation descriptor of a fused op: a mode name, an ``Activation`` or an ``ActivationDescriptor``."""
    d = _activation_desc(act)
    if d is None:
        raise InvalidValueError("the identity activation cannot be fused; use ops without an activation instead")
    return d


def batchnorm_param_shape(x_shape, mode="spatial") -> tuple[int, ...]:
    """Shape of scale/bias/mean/variance for data of ``x_shape`` (N, C, spatial...) in ``mode``."""
    m = enum_arg(mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")
    shape = tuple(int(d) for d in x_shape)
    if not 4 <= len(shape) <= 5:
        raise InvalidValueError(f"batch normalisation takes 4-D or 5-D data (N, C, [D,] H, W); got shape {shape}")
    if m == capi.CUDNN_BATCHNORM_PER_ACTIVATION:
        return (1,) + shape[1:]
    return (1, shape[1]) + (1,) * (len(shape) - 2)


def derive_batchnorm_shape(x_shape, dtype=np.float32, mode="spatial") -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of the parameter tensor as cuDNN derives it (``cudnnDeriveBNTensorDescriptor``); runs on CPU."""
    m = enum_arg(mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")
    x_desc = tensor_desc(tuple(int(d) for d in x_shape), dtype)
    return _derive(lambda d: capi.cudnnDeriveBNTensorDescriptor(d, x_desc.ptr, m))[0]


def _derive(fill, count: int = 1) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Create ``count`` tensor descriptors, let ``fill(*descs)`` derive them, read them back, destroy them."""
    descs = []
    try:
        for _ in range(count):
            d = capi.cudnnTensorDescriptor_t()
            capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
            descs.append(d)
        fill(*descs)
        return [(shape, dtype) for shape, _, dtype in map(read_tensor_desc, descs)]
    finally:
        for d in descs:
            capi.cudnnDestroyTensorDescriptor(d)


def _param_dtype(x_dtype) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(x_dtype) == np.float64 else np.dtype(np.float32)


def _data(obj, name: str, handle, *, like: DeviceArray | None = None) -> DeviceArray:
    """A 4-D/5-D floating data array (checked against ``like``'s shape and dtype when given)."""
    if like is None:
        a = check_array(obj, name, handle, floating=True)
        if not 4 <= a.ndim <= 5:
            raise InvalidValueError(f"{name} has shape {a.shape}; batch normalisation takes 4-D or 5-D data "
                             f"(N, C, [D,] H, W)")
        return a
    return check_array(obj, name, handle, dtype=like.dtype, shape=like.shape)


def _param(obj, name: str, handle, pshape, pdtype, *, mode_name: str) -> DeviceArray:
    """A parameter array: ``pshape`` exactly, or ``pshape`` without its unit dims; contiguous; ``pdtype``."""
    a = check_array(obj, name, handle)
    squeezed = tuple(d for d in pshape if d != 1)
    if a.shape != tuple(pshape) and tuple(d for d in a.shape if d != 1) != squeezed:
        raise InvalidValueError(f"{name} has shape {a.shape}; in {mode_name} mode it must be {tuple(pshape)} "
                         f"(or {squeezed})")
    if a.dtype != pdtype:
        raise InvalidTypeError(f"{name} has dtype {a.dtype}; batch-norm parameters must be {pdtype} for this data")
    if not a.is_contiguous:
        raise InvalidValueError(f"{name} must be C-contiguous; it has strides {a.strides}")
    return a


def _out_data(out, name: str, handle, x: DeviceArray) -> DeviceArray | None:
    """A given output validated against x (None when not given: allocate it after every check passed)."""
    return None if out is None else check_array(out, name, handle, dtype=x.dtype, shape=x.shape)


def _or_new_like(a: DeviceArray | None, handle, x: DeviceArray) -> DeviceArray:
    """``a``, or a new array with x's shape and layout (NHWC data gives NHWC outputs)."""
    return empty_like(handle, x) if a is None else a


def _check_epsilon(epsilon: float) -> float:
    eps = float(epsilon)
    if not eps >= capi.CUDNN_BN_MIN_EPSILON or math.isinf(eps):
        raise InvalidValueError(f"epsilon must be a finite number >= {capi.CUDNN_BN_MIN_EPSILON}, got {epsilon!r}")
    return eps


def _check_factor(factor: float) -> float:
    f = float(factor)
    if not 0.0 <= f <= 1.0:
        raise InvalidValueError(f"exponential average factor must be in [0, 1] (1 on the first call), got {factor!r}")
    return f


def _pair(a, b, names: str):
    if (a is None) != (b is None):
        raise InvalidValueError(f"give both {names} or neither")


def _ptr(a: DeviceArray | None):
    return None if a is None else a.ptr


class _Setup:
    """Validated arrays and descriptors shared by the forward/backward calls."""

    def __init__(self, handle, x, mode, table, enum_type, what):
        self.mode = enum_arg(mode, table, enum_type, what)
        self.mode_name = self.mode.name
        self.x = _data(x, "x", handle)
        self.xdesc = desc(self.x)
        self.pshape = _param_shape_for(self.x.shape, self.mode)
        self.pdtype = _param_dtype(self.x.dtype)
        self.pdesc = tensor_desc(self.pshape, self.pdtype)

    def param(self, obj, name, handle):
        return _param(obj, name, handle, self.pshape, self.pdtype, mode_name=self.mode_name)

    def opt_param(self, obj, name, handle):
        return None if obj is None else self.param(obj, name, handle)

    def or_new(self, a: DeviceArray | None, handle) -> DeviceArray:
        """``a``, or a new parameter-shaped array when it is None."""
        return empty(self.pshape, self.pdtype, stream=handle.stream, device=handle.device) if a is None else a


def _param_shape_for(x_shape, mode) -> tuple[int, ...]:
    per_act = int(mode) == 0  # CUDNN_BATCHNORM_PER_ACTIVATION == CUDNN_NORM_PER_ACTIVATION == 0
    return (1,) + tuple(x_shape[1:]) if per_act else (1, x_shape[1]) + (1,) * (len(x_shape) - 2)


def _bn(handle, x, mode) -> _Setup:
    return _Setup(handle, x, mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")


# ---------------------------------------------------------------- engine="graph" (also used by normalization)


def _pview(a: DeviceArray | None, s: _Setup) -> DeviceArray | None:
    """A parameter array seen with the full parameter shape (a (C,) array as (1, C, 1, 1)); no copy."""
    if a is None or a.shape == s.pshape:
        return a
    return DeviceArray._new(a.ptr, s.pshape, a.dtype, _c_strides(s.pshape), a.device_id, a, None)


def _c_strides(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _graph_relu(act) -> bool:
    """Whether a fused op's activation is plain ReLU (the only one the graph paths fuse); None means no activation."""
    if act is None:
        return False
    mode = Activation(act).mode if isinstance(act, (str, capi.cudnnActivationMode_t)) else getattr(act, "mode", None)
    if mode != capi.CUDNN_ACTIVATION_RELU:
        raise gl.GraphPathRefused(f"engine='graph' fuses ReLU only; activation {act!r} needs engine='legacy'")
    return True


def _graph_spatial(s: _Setup, what: str) -> None:
    if int(s.mode) == 0:  # per-activation
        raise gl.GraphPathRefused(f"engine='graph' {what} takes spatial (per-channel) statistics; per-activation "
                                  f"mode needs engine='legacy'")


def _legacy_if_auto(engine: str) -> str:
    """``engine='auto'`` for the ``..._ex`` pair: legacy (its backward measured faster than the graph's, and the
    forward must match the backward, which reads the legacy forward's reserve space; docs/graph_paths.md)."""
    return "legacy" if engine == "auto" else engine


def _graph_plain(alphas, what: str) -> None:
    if tuple(float(a) for a in alphas) != (1.0, 0.0) * (len(alphas) // 2):
        raise gl.GraphPathRefused(f"engine='graph' {what} takes alpha 1 and beta 0; use engine='legacy' to blend")


def _graph_training(handle, s: _Setup, sc, bi, rm, rv, sm, siv, eps, f, ya, za, relu, alphas, auto) -> bool:
    """Forward training as one graph: batch norm (updating running statistics unless factor is 0), then + z and
    ReLU when asked."""
    _graph_spatial(s, "training")
    _graph_plain(alphas, "training")
    update = rm is not None and f > 0
    inputs = [("x", s.x), ("scale", _pview(sc, s)), ("bias", _pview(bi, s))] + ([("z", za)] if za is not None else [])
    outputs = [("y", ya), ("mean", _pview(sm, s)), ("inv_variance", _pview(siv, s))]
    if update:
        inputs += [("running_mean", _pview(rm, s)), ("running_var", _pview(rv, s))]
        outputs += [("next_running_mean", _pview(rm, s)), ("next_running_var", _pview(rv, s))]

    def build(g, t, _):
        r = g.batch_norm(t["x"], t["scale"], t["bias"], epsilon=eps, running_mean=t.get("running_mean"),
                         running_var=t.get("running_var"), momentum=f if update else 0.1)
        y = r.y if za is None else g.add(r.y, t["z"])
        y = g.relu(y) if relu else y
        return (y, r.mean, r.inv_variance) + ((r.running_mean, r.running_var) if update else ())
    return gl.run_graph(handle, "batchnorm_training", (eps, f if update else 0.0, relu), inputs, outputs, build,
                        auto=auto, relabel=False)


def _graph_inference(handle, s: _Setup, sc, bi, me, va, eps, ya, za, relu, alpha, beta, auto) -> bool:
    """Forward inference as pointwise operations: y = (x - mean) * scale / sqrt(var + eps) + bias [+ z] [ReLU],
    blended with alpha/beta."""
    inputs = [("x", s.x), ("scale", _pview(sc, s)), ("bias", _pview(bi, s)), ("mean", _pview(me, s)),
              ("var", _pview(va, s))] + ([("z", za)] if za is not None else []) + ([("prior", ya)] if beta else [])

    def build(g, t, _):
        k = g.mul(t["scale"], g.pointwise("rsqrt", g.add(t["var"], eps)))
        y = g.add(g.mul(g.sub(t["x"], t["mean"]), k), t["bias"])
        y = y if za is None else g.add(y, t["z"])
        return gl.blend(g, g.relu(y) if relu else y, t, alpha, beta)
    return gl.run_graph(handle, "batchnorm_inference", (eps, relu, float(alpha), float(beta)), inputs, [("y", ya)],
                        build, auto=auto)


def _graph_backward(handle, s: _Setup, dya, sc, sm, siv, dxa, ds, db, alphas, auto, gate=None) -> bool:
    """Backward as one norm-backward graph from the saved statistics; ``gate`` = (y, out): first the ReLU
    gradient dy * (y > 0) into ``out`` (dz, or scratch), which the norm backward then reads as its dy."""
    _graph_spatial(s, "backward")
    _graph_plain(alphas, "backward")
    if sm is None:
        raise gl.GraphPathRefused("engine='graph' backward reads the forward's saved_mean and saved_inv_var; pass "
                                  "them (engine='legacy' recomputes them)")
    if gate is not None:
        y, out = gate
        if not gl.run_graph(handle, "batchnorm_relu_backward", (), [("dy", dya), ("y", y)], [("dz", out)],
                            lambda g, t, _: g.relu_backward(t["dy"], t["y"]), auto=auto):
            return False
        dya = out
    inputs = [("dy", dya), ("x", s.x), ("scale", _pview(sc, s)), ("mean", _pview(sm, s)),
              ("inv_variance", _pview(siv, s))]
    outputs = [("dx", dxa), ("dscale", _pview(ds, s)), ("dbias", _pview(db, s))]

    def build(g, t, _):
        return g.norm_backward(t["dy"], t["x"], t["scale"], mean=t["mean"], inv_variance=t["inv_variance"],
                               mode="batch")
    return gl.run_graph(handle, "batchnorm_backward", (), inputs, outputs, build, auto=auto, relabel=False)


def _graph_fused_backward(handle, s: _Setup, op, act, args: tuple, alphas, engine: str,
                          check=None) -> BatchNormGrads | None:
    """The graph path of the fused backward calls (``args``: y, dy, scale, bias, saved_mean, saved_inv_var,
    epsilon, dx, dz, dscale, dbias); None when it did not run (``engine`` 'auto' and refused). ``check()``: a
    caller's own refusals (raising :class:`GraphPathRefused`)."""
    def run(auto):
        if check is not None:
            check()
        relu = int(op) != 0 and _graph_relu(act)
        b = _fused_backward(handle, s, op, None, *args, None, alphas)
        gate = None
        if relu:
            gate = (b.y, b.dz if b.dz is not None else _or_new_like(None, handle, s.x))
        done = _graph_backward(handle, s, b.dy, b.scale, b.saved_mean, b.saved_inv_var, b.dx, b.dscale, b.dbias,
                               alphas, auto, gate)
        run.grads = BatchNormGrads(b.dx, b.dscale, b.dbias, b.dz) if done else None
        return done
    return run.grads if gl.attempt(engine, run) else None


# ---------------------------------------------------------------- plain calls


def _training_params(handle, s: _Setup, scale, bias, running_mean, running_var, saved_mean, saved_inv_var,
                     epsilon, factor):
    """The checked parameter arrays and scalars every forward-training call takes:
    (scale, bias, running mean, running var, saved mean, saved inverse variance, epsilon, factor)."""
    _pair(running_mean, running_var, "running_mean and running_var")
    return (s.param(scale, "scale", handle), s.param(bias, "bias", handle),
            s.opt_param(running_mean, "running_mean", handle), s.opt_param(running_var, "running_var", handle),
            s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle),
            _check_epsilon(epsilon), _check_factor(factor))


def batchnorm_forward_training(handle, x, scale, bias, *, mode="spatial", epsilon: float = 1e-5,
                               factor: float = 1.0, running_mean=None, running_var=None, saved_mean=None,
                               saved_inv_var=None, y=None, alpha: float = 1.0,
                               beta: float = 0.0, engine: str = "auto") -> BatchNormTraining:
    """``y = alpha * bn(x) + beta * y`` with batch statistics (``cudnnBatchNormalizationForwardTraining``).

    ``running_mean``/``running_var`` (both or neither) are updated in place:
    ``running = factor * batch + (1 - factor) * running`` (use factor 1 on the first call).
    ``saved_mean``/``saved_inv_var`` are allocated when not given; pass them to :func:`batchnorm_backward`.
    ``engine``: "legacy", "graph" or "auto" (the default: the graph where it takes the call; module doc).
    """
    engine = gl.engine_arg(engine)
    s = _bn(handle, x, mode)
    sc, bi, rm, rv, sm, siv, eps, f = _training_params(handle, s, scale, bias, running_mean, running_var,
                                                        saved_mean, saved_inv_var, epsilon, factor)
    ya = _out_data(y, "y", handle, s.x)
    ya, sm, siv = _or_new_like(ya, handle, s.x), s.or_new(sm, handle), s.or_new(siv, handle)
    if gl.attempt(engine, lambda auto: _graph_training(handle, s, sc, bi, rm, rv, sm, siv, eps, f, ya, None, False,
                                                       (alpha, beta), auto)):
        return BatchNormTraining(ya, sm, siv, rm, rv)
    al, be = scalars(s.x.dtype, alpha, beta)
    yd = desc(ya)
    capi.cudnnBatchNormalizationForwardTraining(
        handle.ptr, s.mode, al, be, s.xdesc.ptr, s.x.ptr, yd.ptr, ya.ptr, s.pdesc.ptr, sc.ptr, bi.ptr, f,
        _ptr(rm), _ptr(rv), eps, sm.ptr, siv.ptr)
    return BatchNormTraining(ya, sm, siv, rm, rv)


def batchnorm_forward_inference(handle, x, scale, bias, mean, var, *, mode="spatial", epsilon: float = 1e-5,
                                y=None, alpha: float = 1.0, beta: float = 0.0, engine: str = "auto") -> DeviceArray:
    """``y = alpha * (scale * (x - mean) / sqrt(var + epsilon) + bias) + beta * y``
    (``cudnnBatchNormalizationForwardInference``); returns y (allocated if not given).
    ``engine``: "legacy", "graph" (either mode) or "auto" (the default: the graph where it takes the call).
    """
    engine = gl.engine_arg(engine)
    s = _bn(handle, x, mode)
    sc, bi = s.param(scale, "scale", handle), s.param(bias, "bias", handle)
    me, va = s.param(mean, "mean", handle), s.param(var, "var", handle)
    eps = _check_epsilon(epsilon)
    ya = _or_new_like(_out_data(y, "y", handle, s.x), handle, s.x)
    if gl.attempt(engine, lambda auto: _graph_inference(handle, s, sc, bi, me, va, eps, ya, None, False, alpha,
                                                        beta, auto)):
        return ya
    al, be = scalars(s.x.dtype, alpha, beta)
    yd = desc(ya)
    capi.cudnnBatchNormalizationForwardInference(
        handle.ptr, s.mode, al, be, s.xdesc.ptr, s.x.ptr, yd.ptr, ya.ptr, s.pdesc.ptr, sc.ptr, bi.ptr, me.ptr,
        va.ptr, eps)
    return ya


def batchnorm_backward(handle, x, dy, scale, saved_mean=None, saved_inv_var=None, *, mode="spatial",
                       epsilon: float = 1e-5, dx=None, dscale=None, dbias=None, alpha_data: float = 1.0,
                       beta_data: float = 0.0, alpha_param: float = 1.0,
                       beta_param: float = 0.0, engine: str = "auto") -> BatchNormGrads:
    """Gradients of batch normalisation (``cudnnBatchNormalizationBackward``).

    ``dx = alpha_data * dL/dx + beta_data * dx``; ``dscale``/``dbias`` blend with alpha_param/beta_param.
    ``saved_mean``/``saved_inv_var`` from the forward pass (both or neither: cuDNN then recomputes them).
    ``engine``: "legacy", "graph" or "auto" (the default: the graph where it takes the call; module doc).
    """
    engine = gl.engine_arg(engine)
    s = _bn(handle, x, mode)
    dya = _data(dy, "dy", handle, like=s.x)
    sc = s.param(scale, "scale", handle)
    _pair(saved_mean, saved_inv_var, "saved_mean and saved_inv_var")
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps = _check_epsilon(epsilon)
    dxa = _out_data(dx, "dx", handle, s.x)
    ds, db = s.opt_param(dscale, "dscale", handle), s.opt_param(dbias, "dbias", handle)
    dxa, ds, db = _or_new_like(dxa, handle, s.x), s.or_new(ds, handle), s.or_new(db, handle)
    if gl.attempt(engine, lambda auto: _graph_backward(handle, s, dya, sc, sm, siv, dxa, ds, db,
                                                       (alpha_data, beta_data, alpha_param, beta_param), auto)):
        return BatchNormGrads(dxa, ds, db)
    ad, bd = scalars(s.x.dtype, alpha_data, beta_data)
    ap, bp = scalars(s.x.dtype, alpha_param, beta_param)
    dyd, dxd = desc(dya), desc(dxa)
    capi.cudnnBatchNormalizationBackward(
        handle.ptr, s.mode, ad, bd, ap, bp, s.xdesc.ptr, s.x.ptr, dyd.ptr, dya.ptr, dxd.ptr, dxa.ptr,
        s.pdesc.ptr, sc.ptr, ds.ptr, db.ptr, eps, _ptr(sm), _ptr(siv))
    return BatchNormGrads(dxa, ds, db)


# ---------------------------------------------------------------- Ex calls (fused add + activation)


def _ex_ops(ops, activation, z, zname: str, table=BATCHNORM_OPS, enum_type=capi.cudnnBatchNormOps_t):
    op = enum_arg(ops, table, enum_type, "ops")
    act = None
    if int(op) != 0:
        act = _activation("relu" if activation is None else activation)
    elif activation is not None:
        raise InvalidValueError(f"ops={op.name} has no activation; pass activation=None or choose an ops with one")
    if int(op) == 2 and z is None:
        raise InvalidValueError(f"ops={op.name} adds {zname}: pass {zname}")
    if int(op) != 2 and z is not None:
        raise InvalidValueError(f"ops={op.name} takes no {zname}; use ops ending in _add_activation to add one")
    return op, act


def batchnorm_ex_sizes(handle, x, *, mode="spatial_persistent", ops="bn", activation=None,
                       with_z: bool | None = None) -> tuple[int, int, int]:
    """(forward-training workspace, backward workspace, reserve) bytes for the ``..._ex`` calls with this x."""
    s = _bn(handle, x, mode)
    op = enum_arg(ops, BATCHNORM_OPS, capi.cudnnBatchNormOps_t, "ops")
    act = None if int(op) == 0 else _activation("relu" if activation is None else activation)
    return _ex_sizes(handle, s, op, act, int(op) == 2 if with_z is None else with_z)


def _ex_sizes(handle, s: _Setup, op, act, with_z: bool) -> tuple[int, int, int]:
    xd, pd = s.xdesc.ptr, s.pdesc.ptr
    zd = xd if with_z else None
    fw, bw, rs = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    capi.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        handle.ptr, s.mode, op, xd, zd, xd, pd, act, ctypes.byref(fw))
    capi.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        handle.ptr, s.mode, op, xd, xd, xd, zd, xd, pd, act, ctypes.byref(bw))
    capi.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle.ptr, s.mode, op, act, xd,
                                                              ctypes.byref(rs))
    return fw.value, bw.value, rs.value


def batchnorm_forward_training_ex(handle, x, scale, bias, *, z=None, ops="bn", activation=None,
                                  mode="spatial_persistent", epsilon: float = 1e-5, factor: float = 1.0,
                                  running_mean=None, running_var=None, saved_mean=None, saved_inv_var=None,
                                  y=None, reserve=None, alpha: float = 1.0, beta: float = 0.0,
                                  engine: str = "auto") -> BatchNormTraining:
    """``y = act(bn(x) [+ z])`` with batch statistics (``cudnnBatchNormalizationForwardTrainingEx``).

    ``ops``: "bn", "bn_activation" or "bn_add_activation" (needs ``z``, shaped like x); ``activation``:
    a mode name (default "relu"; cuDNN fuses ReLU), an ActivationDescriptor or an ``ops.activation.Activation``.
    The reserve space (returned, allocated when not given) must be passed to :func:`batchnorm_backward_ex`.
    cuDNN supports the fused ops only for some layouts and types (e.g. NHWC float16, spatial-persistent);
    elsewhere it raises :class:`~cudnn_py.errors.CudnnNotSupportedError`. ``engine``: "legacy", "graph" (no
    reserve: the result's ``reserve`` is None) or "auto" (the default: here the legacy call, measured faster).
    """
    engine = _legacy_if_auto(gl.engine_arg(engine))
    s = _bn(handle, x, mode)
    op, act = _ex_ops(ops, activation, z, "z")
    za = None if z is None else _data(z, "z", handle, like=s.x)
    sc, bi, rm, rv, sm, siv, eps, f = _training_params(handle, s, scale, bias, running_mean, running_var,
                                                        saved_mean, saved_inv_var, epsilon, factor)
    ya = _out_data(y, "y", handle, s.x)
    if engine != "legacy":
        yg, smg, sivg = _or_new_like(ya, handle, s.x), s.or_new(sm, handle), s.or_new(siv, handle)
        if gl.attempt(engine, lambda auto: _graph_training(
                handle, s, sc, bi, rm, rv, smg, sivg, eps, f, yg, za,
                int(op) != 0 and _graph_relu("relu" if activation is None else activation), (alpha, beta), auto)):
            return BatchNormTraining(yg, smg, sivg, rm, rv, None)
        ya, sm, siv = yg, smg, sivg
    ws_size, _, rs_size = _ex_sizes(handle, s, op, act, za is not None)
    rsa = _reserve(handle, reserve, rs_size, "reserve")
    ya, sm, siv = _or_new_like(ya, handle, s.x), s.or_new(sm, handle), s.or_new(siv, handle)
    ws = handle.workspace.get(ws_size, handle.stream)
    al, be = scalars(s.x.dtype, alpha, beta)
    zd, yd = None if za is None else desc(za), desc(ya)
    capi.cudnnBatchNormalizationForwardTrainingEx(
        handle.ptr, s.mode, op, al, be, s.xdesc.ptr, s.x.ptr, None if zd is None else zd.ptr, _ptr(za),
        yd.ptr, ya.ptr, s.pdesc.ptr, sc.ptr, bi.ptr, f, _ptr(rm), _ptr(rv), eps, sm.ptr, siv.ptr, act,
        ws or None, ws_size, _ptr(rsa), 0 if rsa is None else rsa.nbytes)
    return BatchNormTraining(ya, sm, siv, rm, rv, rsa)


def _reserve(handle, reserve, nbytes: int, name: str) -> DeviceArray | None:
    """The reserve buffer: allocated (uint8) when not given, else checked to hold ``nbytes``."""
    if reserve is None:
        return empty((nbytes,), np.uint8, stream=handle.stream, device=handle.device) if nbytes else None
    return byte_buffer(reserve, name, handle, nbytes,
                       "pass the reserve returned by the forward call on the same inputs")


class _FusedBackward(NamedTuple):
    """The checked and allocated arguments the fused backward calls share (``cudnnBatchNormalizationBackwardEx``,
    ``cudnnNormalizationBackward``); descriptors are held here while C runs."""
    y: DeviceArray
    dy: DeviceArray
    scale: DeviceArray
    bias: DeviceArray
    saved_mean: DeviceArray | None
    saved_inv_var: DeviceArray | None
    epsilon: float
    dx: DeviceArray
    dz: DeviceArray | None
    dscale: DeviceArray
    dbias: DeviceArray
    reserve: DeviceArray | None
    reserve_size: int
    workspace: int | None
    workspace_size: int
    scalars: tuple  # alpha_data, beta_data, alpha_param, beta_param as C scalars
    y_desc: TensorDescriptor
    dy_desc: TensorDescriptor
    dx_desc: TensorDescriptor
    dz_desc: TensorDescriptor | None

    @property
    def dz_desc_ptr(self):
        return None if self.dz_desc is None else self.dz_desc.ptr


def _fused_backward(handle, s: _Setup, op, sizes, y, dy, scale, bias, saved_mean, saved_inv_var, epsilon, dx, dz,
                    dscale, dbias, reserve, alphas) -> _FusedBackward:
    """Check and allocate a fused backward's arguments; ``sizes()`` gives (workspace, reserve) bytes, after the
    checks (None for the graph path, which needs neither: the reserve is then not read); ``op`` 2 is the
    add+activation variant (the only one with z)."""
    ya = _data(y, "y", handle, like=s.x)
    dya = _data(dy, "dy", handle, like=s.x)
    sc, bi = s.param(scale, "scale", handle), s.param(bias, "bias", handle)
    _pair(saved_mean, saved_inv_var, "saved_mean and saved_inv_var")
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps = _check_epsilon(epsilon)
    if int(op) != 2 and dz is not None:
        raise InvalidValueError(f"ops={op.name} has no z, so no dz; pass dz=None")
    dxa = _out_data(dx, "dx", handle, s.x)
    dza = _out_data(dz, "dz", handle, s.x)
    ds, db = s.opt_param(dscale, "dscale", handle), s.opt_param(dbias, "dbias", handle)
    ws_size, rs_size = (0, 0) if sizes is None else sizes()
    if reserve is None and rs_size:
        raise InvalidValueError(f"this backward needs the forward's reserve space ({rs_size} bytes); pass reserve=")
    rsa = None if reserve is None or sizes is None else _reserve(handle, reserve, rs_size, "reserve")
    dxa, ds, db = _or_new_like(dxa, handle, s.x), s.or_new(ds, handle), s.or_new(db, handle)
    dza = None if int(op) != 2 else _or_new_like(dza, handle, s.x)
    ws = handle.workspace.get(ws_size, handle.stream) if ws_size else None
    return _FusedBackward(ya, dya, sc, bi, sm, siv, eps, dxa, dza, ds, db, rsa, 0 if rsa is None else rsa.nbytes,
                          ws or None, ws_size, scalars(s.x.dtype, *alphas[:2]) + scalars(s.x.dtype, *alphas[2:]),
                          desc(ya), desc(dya), desc(dxa), None if dza is None else desc(dza))


def batchnorm_backward_ex(handle, x, y, dy, scale, bias, saved_mean, saved_inv_var, reserve=None, *, ops="bn",
                          activation=None, mode="spatial_persistent", epsilon: float = 1e-5, dx=None, dz=None,
                          dscale=None, dbias=None, alpha_data: float = 1.0, beta_data: float = 0.0,
                          alpha_param: float = 1.0, beta_param: float = 0.0, engine: str = "auto") -> BatchNormGrads:
    """Gradients of ``y = act(bn(x) [+ z])`` (``cudnnBatchNormalizationBackwardEx``).

    ``y`` is the forward output (it gates the activation's gradient), ``reserve`` the forward's reserve.
    ``dz`` (ops "bn_add_activation") is returned allocated when not given. ``engine``: "legacy", "graph" (which
    reads no reserve) or "auto" (the default: here the legacy call, measured faster).
    """
    engine = _legacy_if_auto(gl.engine_arg(engine))
    s = _bn(handle, x, mode)
    op = enum_arg(ops, BATCHNORM_OPS, capi.cudnnBatchNormOps_t, "ops")
    act = None if int(op) == 0 else _activation("relu" if activation is None else activation)
    if int(op) == 0 and activation is not None:
        raise InvalidValueError(f"ops={op.name} has no activation; pass activation=None")
    if engine != "legacy":
        g = _graph_fused_backward(handle, s, op, "relu" if activation is None else activation,
                                  (y, dy, scale, bias, saved_mean, saved_inv_var, epsilon, dx, dz, dscale, dbias),
                                  (alpha_data, beta_data, alpha_param, beta_param), engine)
        if g is not None:
            return g
    b = _fused_backward(handle, s, op, lambda: _ex_sizes(handle, s, op, act, int(op) == 2)[1:], y, dy, scale,
                        bias, saved_mean, saved_inv_var, epsilon, dx, dz, dscale, dbias, reserve,
                        (alpha_data, beta_data, alpha_param, beta_param))
    capi.cudnnBatchNormalizationBackwardEx(
        handle.ptr, s.mode, op, *b.scalars, s.xdesc.ptr, s.x.ptr, b.y_desc.ptr, b.y.ptr, b.dy_desc.ptr, b.dy.ptr,
        b.dz_desc_ptr, _ptr(b.dz), b.dx_desc.ptr, b.dx.ptr, s.pdesc.ptr, b.scale.ptr, b.bias.ptr, b.dscale.ptr,
        b.dbias.ptr, b.epsilon, _ptr(b.saved_mean), _ptr(b.saved_inv_var), act, b.workspace, b.workspace_size,
        _ptr(b.reserve), b.reserve_size)
    return BatchNormGrads(b.dx, b.dscale, b.dbias, b.dz)
