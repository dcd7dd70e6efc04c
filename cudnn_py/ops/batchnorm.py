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
from cudnn_py.descriptors import ActivationDescriptor, activation_descriptor, tensor_descriptor
from cudnn_py.memory import DeviceArray, as_array, empty

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
_FLOATS = frozenset(np.dtype(d) for d in ("float16", "float32", "float64"))


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


def _enum(value, table: dict, enum_type, what: str):
    """A table key (case-insensitive) or an enum member -> the enum member."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    raise ValueError(f"{what} {value!r}: expected one of {sorted(table)} or a {enum_type.__name__} member")


def _tensor_desc(shape, strides, dtype) -> capi.cudnnTensorDescriptor_t:
    """A cached tensor descriptor; fewer than 4 dims get trailing unit dims (the legacy API wants >= 4)."""
    shape, strides = tuple(shape), tuple(strides)
    if len(shape) < 4:
        shape += (1,) * (4 - len(shape))
        strides += (1,) * (4 - len(strides))
    return tensor_descriptor(shape, np.dtype(dtype), strides).ptr


def _desc(a: DeviceArray) -> capi.cudnnTensorDescriptor_t:
    return _tensor_desc(a.shape, a.strides, a.dtype)


def _scalars(dtype, *values: float):
    """byref alpha/beta host scalars: double for float64 data, else float."""
    t = ctypes.c_double if np.dtype(dtype) == np.float64 else ctypes.c_float
    return tuple(ctypes.byref(t(float(v))) for v in values)


def _array(obj, name: str, handle, *, dtype=None, shape=None) -> DeviceArray:
    """``obj`` as a non-empty DeviceArray on the handle's device, checked before any C call."""
    a = as_array(obj, name, device=handle.device)
    if dtype is not None and a.dtype != np.dtype(dtype):
        raise TypeError(f"{name} has dtype {a.dtype}; expected {np.dtype(dtype)}")
    if shape is not None and a.shape != tuple(shape):
        raise ValueError(f"{name} has shape {a.shape}; expected {tuple(shape)}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape}); cuDNN needs at least one element")
    if a.ndim > 8:
        raise ValueError(f"{name} has {a.ndim} dimensions; cuDNN takes at most 8")
    return a


def _activation(act):
    """The ``cudnnActivationDescriptor_t`` for a mode name, an ActivationDescriptor or anything with ``.descriptor``."""
    if isinstance(act, str):
        return activation_descriptor(act.lower()).ptr
    if isinstance(act, ActivationDescriptor):
        return act.ptr
    d = getattr(act, "descriptor", None)
    if isinstance(d, capi.cudnnActivationDescriptor_t):
        return d
    raise TypeError(f"activation must be a mode name (e.g. 'relu'), a cudnn_py ActivationDescriptor or "
                    f"Activation; got {act!r}")


def batchnorm_param_shape(x_shape, mode="spatial") -> tuple[int, ...]:
    """Shape of scale/bias/mean/variance for data of ``x_shape`` (N, C, spatial...) in ``mode``."""
    m = _enum(mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")
    shape = tuple(int(d) for d in x_shape)
    if not 4 <= len(shape) <= 5:
        raise ValueError(f"batch normalisation takes 4-D or 5-D data (N, C, [D,] H, W); got shape {shape}")
    if m == capi.CUDNN_BATCHNORM_PER_ACTIVATION:
        return (1,) + shape[1:]
    return (1, shape[1]) + (1,) * (len(shape) - 2)


def derive_batchnorm_shape(x_shape, dtype=np.float32, mode="spatial") -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of the parameter tensor as cuDNN derives it (``cudnnDeriveBNTensorDescriptor``); runs on CPU."""
    m = _enum(mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")
    shape = tuple(int(d) for d in x_shape)
    x_desc = _tensor_desc(shape, _c_strides(shape), dtype)
    return _derive(lambda d: capi.cudnnDeriveBNTensorDescriptor(d, x_desc, m))[0]


def _read_desc(d) -> tuple[tuple[int, ...], np.dtype]:
    from cudnn_py.dtypes import numpy_dtype
    dt, nb = ctypes.c_int(), ctypes.c_int()
    dims, strides = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
    capi.cudnnGetTensorNdDescriptor(d, 8, ctypes.byref(dt), ctypes.byref(nb), dims, strides)
    return tuple(dims[:nb.value]), numpy_dtype(dt.value)


def _derive(fill, count: int = 1) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Create ``count`` tensor descriptors, let ``fill(*descs)`` derive them, read them back, destroy them."""
    descs = []
    try:
        for _ in range(count):
            d = capi.cudnnTensorDescriptor_t()
            capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
            descs.append(d)
        fill(*descs)
        return [_read_desc(d) for d in descs]
    finally:
        for d in descs:
            capi.cudnnDestroyTensorDescriptor(d)


def _c_strides(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.insert(0, acc)
        acc *= n
    return tuple(out)


def _param_dtype(x_dtype) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(x_dtype) == np.float64 else np.dtype(np.float32)


def _data(obj, name: str, handle, *, like: DeviceArray | None = None) -> DeviceArray:
    """A 4-D/5-D floating data array (checked against ``like``'s shape and dtype when given)."""
    if like is None:
        a = _array(obj, name, handle)
        if a.dtype not in _FLOATS and a.dtype.name != "bfloat16":
            raise TypeError(f"{name} has dtype {a.dtype}; batch normalisation needs float16, bfloat16, float32 "
                            f"or float64 data")
        if not 4 <= a.ndim <= 5:
            raise ValueError(f"{name} has shape {a.shape}; batch normalisation takes 4-D or 5-D data "
                             f"(N, C, [D,] H, W)")
        return a
    return _array(obj, name, handle, dtype=like.dtype, shape=like.shape)


def _param(obj, name: str, handle, pshape, pdtype, *, mode_name: str) -> DeviceArray:
    """A parameter array: ``pshape`` exactly, or ``pshape`` without its unit dims; contiguous; ``pdtype``."""
    a = _array(obj, name, handle)
    squeezed = tuple(d for d in pshape if d != 1)
    if a.shape != tuple(pshape) and tuple(d for d in a.shape if d != 1) != squeezed:
        raise ValueError(f"{name} has shape {a.shape}; in {mode_name} mode it must be {tuple(pshape)} "
                         f"(or {squeezed})")
    if a.dtype != pdtype:
        raise TypeError(f"{name} has dtype {a.dtype}; batch-norm parameters must be {pdtype} for this data")
    if not a.is_contiguous:
        raise ValueError(f"{name} must be C-contiguous; it has strides {a.strides}")
    return a


def _new(handle, shape, dtype) -> DeviceArray:
    return empty(tuple(shape), dtype, stream=handle.stream, device=handle.device)


def _new_like(handle, x: DeviceArray) -> DeviceArray:
    """A new array with x's shape, dtype and memory layout (so NHWC data gives NHWC outputs)."""
    if x.is_contiguous:
        return _new(handle, x.shape, x.dtype)
    lo, span = x._span()
    if lo != 0 or span != x.size:
        return _new(handle, x.shape, x.dtype)
    buf = _new(handle, (x.size,), x.dtype)
    return DeviceArray(buf.ptr, x.shape, x.dtype, x.strides, device_id=x.device_id, owner=buf, stream=handle.stream)


def _out_data(out, name: str, handle, x: DeviceArray) -> DeviceArray | None:
    """A given output validated against x (None when not given: allocate it after every check passed)."""
    return None if out is None else _array(out, name, handle, dtype=x.dtype, shape=x.shape)


def _or_new_like(a: DeviceArray | None, handle, x: DeviceArray) -> DeviceArray:
    return _new_like(handle, x) if a is None else a


def _check_epsilon(epsilon: float) -> float:
    eps = float(epsilon)
    if not eps >= capi.CUDNN_BN_MIN_EPSILON or math.isinf(eps):
        raise ValueError(f"epsilon must be a finite number >= {capi.CUDNN_BN_MIN_EPSILON}, got {epsilon!r}")
    return eps


def _check_factor(factor: float) -> float:
    f = float(factor)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"exponential average factor must be in [0, 1] (1 on the first call), got {factor!r}")
    return f


def _pair(a, b, names: str):
    if (a is None) != (b is None):
        raise ValueError(f"give both {names} or neither")


def _ptr(a: DeviceArray | None):
    return None if a is None else a.ptr


class _Setup:
    """Validated arrays and descriptors shared by the forward/backward calls."""

    def __init__(self, handle, x, mode, table, enum_type, what):
        self.mode = _enum(mode, table, enum_type, what)
        self.mode_name = self.mode.name
        self.x = _data(x, "x", handle)
        self.pshape = _param_shape_for(self.x.shape, self.mode)
        self.pdtype = _param_dtype(self.x.dtype)
        self.pdesc = _tensor_desc(self.pshape, _c_strides(self.pshape), self.pdtype)

    def param(self, obj, name, handle):
        return _param(obj, name, handle, self.pshape, self.pdtype, mode_name=self.mode_name)

    def opt_param(self, obj, name, handle):
        return None if obj is None else self.param(obj, name, handle)

    def or_new(self, a: DeviceArray | None, handle) -> DeviceArray:
        """``a``, or a new parameter-shaped array when it is None."""
        return _new(handle, self.pshape, self.pdtype) if a is None else a


def _param_shape_for(x_shape, mode) -> tuple[int, ...]:
    per_act = int(mode) == 0  # CUDNN_BATCHNORM_PER_ACTIVATION == CUDNN_NORM_PER_ACTIVATION == 0
    return (1,) + tuple(x_shape[1:]) if per_act else (1, x_shape[1]) + (1,) * (len(x_shape) - 2)


def _bn(handle, x, mode) -> _Setup:
    return _Setup(handle, x, mode, BATCHNORM_MODES, capi.cudnnBatchNormMode_t, "batch-norm mode")


# ---------------------------------------------------------------- plain calls


def batchnorm_forward_training(handle, x, scale, bias, *, mode="spatial", epsilon: float = 1e-5,
                               factor: float = 1.0, running_mean=None, running_var=None, saved_mean=None,
                               saved_inv_var=None, y=None, alpha: float = 1.0,
                               beta: float = 0.0) -> BatchNormTraining:
    """``y = alpha * bn(x) + beta * y`` with batch statistics (``cudnnBatchNormalizationForwardTraining``).

    ``running_mean``/``running_var`` (both or neither) are updated in place:
    ``running = factor * batch + (1 - factor) * running`` (use factor 1 on the first call).
    ``saved_mean``/``saved_inv_var`` are allocated when not given; pass them to :func:`batchnorm_backward`.
    """
    s = _bn(handle, x, mode)
    sc, bi = s.param(scale, "scale", handle), s.param(bias, "bias", handle)
    _pair(running_mean, running_var, "running_mean and running_var")
    rm, rv = s.opt_param(running_mean, "running_mean", handle), s.opt_param(running_var, "running_var", handle)
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps, f = _check_epsilon(epsilon), _check_factor(factor)
    ya = _out_data(y, "y", handle, s.x)
    ya, sm, siv = _or_new_like(ya, handle, s.x), s.or_new(sm, handle), s.or_new(siv, handle)
    al, be = _scalars(s.x.dtype, alpha, beta)
    capi.cudnnBatchNormalizationForwardTraining(
        handle.ptr, s.mode, al, be, _desc(s.x), s.x.ptr, _desc(ya), ya.ptr, s.pdesc, sc.ptr, bi.ptr, f,
        _ptr(rm), _ptr(rv), eps, sm.ptr, siv.ptr)
    return BatchNormTraining(ya, sm, siv, rm, rv)


def batchnorm_forward_inference(handle, x, scale, bias, mean, var, *, mode="spatial", epsilon: float = 1e-5,
                                y=None, alpha: float = 1.0, beta: float = 0.0) -> DeviceArray:
    """``y = alpha * (scale * (x - mean) / sqrt(var + epsilon) + bias) + beta * y``
    (``cudnnBatchNormalizationForwardInference``); returns y (allocated if not given)."""
    s = _bn(handle, x, mode)
    sc, bi = s.param(scale, "scale", handle), s.param(bias, "bias", handle)
    me, va = s.param(mean, "mean", handle), s.param(var, "var", handle)
    eps = _check_epsilon(epsilon)
    ya = _or_new_like(_out_data(y, "y", handle, s.x), handle, s.x)
    al, be = _scalars(s.x.dtype, alpha, beta)
    capi.cudnnBatchNormalizationForwardInference(
        handle.ptr, s.mode, al, be, _desc(s.x), s.x.ptr, _desc(ya), ya.ptr, s.pdesc, sc.ptr, bi.ptr, me.ptr,
        va.ptr, eps)
    return ya


def batchnorm_backward(handle, x, dy, scale, saved_mean=None, saved_inv_var=None, *, mode="spatial",
                       epsilon: float = 1e-5, dx=None, dscale=None, dbias=None, alpha_data: float = 1.0,
                       beta_data: float = 0.0, alpha_param: float = 1.0,
                       beta_param: float = 0.0) -> BatchNormGrads:
    """Gradients of batch normalisation (``cudnnBatchNormalizationBackward``).

    ``dx = alpha_data * dL/dx + beta_data * dx``; ``dscale``/``dbias`` blend with alpha_param/beta_param.
    ``saved_mean``/``saved_inv_var`` from the forward pass (both or neither: cuDNN then recomputes them).
    """
    s = _bn(handle, x, mode)
    dya = _data(dy, "dy", handle, like=s.x)
    sc = s.param(scale, "scale", handle)
    _pair(saved_mean, saved_inv_var, "saved_mean and saved_inv_var")
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps = _check_epsilon(epsilon)
    dxa = _out_data(dx, "dx", handle, s.x)
    ds, db = s.opt_param(dscale, "dscale", handle), s.opt_param(dbias, "dbias", handle)
    dxa, ds, db = _or_new_like(dxa, handle, s.x), s.or_new(ds, handle), s.or_new(db, handle)
    ad, bd = _scalars(s.x.dtype, alpha_data, beta_data)
    ap, bp = _scalars(s.x.dtype, alpha_param, beta_param)
    capi.cudnnBatchNormalizationBackward(
        handle.ptr, s.mode, ad, bd, ap, bp, _desc(s.x), s.x.ptr, _desc(dya), dya.ptr, _desc(dxa), dxa.ptr,
        s.pdesc, sc.ptr, ds.ptr, db.ptr, eps, _ptr(sm), _ptr(siv))
    return BatchNormGrads(dxa, ds, db)


# ---------------------------------------------------------------- Ex calls (fused add + activation)


def _ex_ops(ops, activation, z, zname: str, table=BATCHNORM_OPS, enum_type=capi.cudnnBatchNormOps_t):
    op = _enum(ops, table, enum_type, "ops")
    act = None
    if int(op) != 0:
        act = _activation("relu" if activation is None else activation)
    elif activation is not None:
        raise ValueError(f"ops={op.name} has no activation; pass activation=None or choose an ops with one")
    if int(op) == 2 and z is None:
        raise ValueError(f"ops={op.name} adds {zname}: pass {zname}")
    if int(op) != 2 and z is not None:
        raise ValueError(f"ops={op.name} takes no {zname}; use ops ending in _add_activation to add one")
    return op, act


def batchnorm_ex_sizes(handle, x, *, mode="spatial_persistent", ops="bn", activation=None,
                       with_z: bool | None = None) -> tuple[int, int, int]:
    """(forward-training workspace, backward workspace, reserve) bytes for the ``..._ex`` calls with this x."""
    s = _bn(handle, x, mode)
    op = _enum(ops, BATCHNORM_OPS, capi.cudnnBatchNormOps_t, "ops")
    act = None if int(op) == 0 else _activation("relu" if activation is None else activation)
    return _ex_sizes(handle, s, op, act, int(op) == 2 if with_z is None else with_z)


def _ex_sizes(handle, s: _Setup, op, act, with_z: bool) -> tuple[int, int, int]:
    xd = _desc(s.x)
    zd = xd if with_z else None
    fw, bw, rs = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    capi.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        handle.ptr, s.mode, op, xd, zd, xd, s.pdesc, act, ctypes.byref(fw))
    capi.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        handle.ptr, s.mode, op, xd, xd, xd, zd, xd, s.pdesc, act, ctypes.byref(bw))
    capi.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle.ptr, s.mode, op, act, xd,
                                                              ctypes.byref(rs))
    return fw.value, bw.value, rs.value


def batchnorm_forward_training_ex(handle, x, scale, bias, *, z=None, ops="bn", activation=None,
                                  mode="spatial_persistent", epsilon: float = 1e-5, factor: float = 1.0,
                                  running_mean=None, running_var=None, saved_mean=None, saved_inv_var=None,
                                  y=None, reserve=None, alpha: float = 1.0, beta: float = 0.0) -> BatchNormTraining:
    """``y = act(bn(x) [+ z])`` with batch statistics (``cudnnBatchNormalizationForwardTrainingEx``).

    ``ops``: "bn", "bn_activation" or "bn_add_activation" (needs ``z``, shaped like x); ``activation``:
    a mode name (default "relu"; cuDNN fuses ReLU), an ActivationDescriptor or an ``ops.activation.Activation``.
    The reserve space (returned, allocated when not given) must be passed to :func:`batchnorm_backward_ex`.
    cuDNN supports the fused ops only for some layouts and types (e.g. NHWC float16, spatial-persistent);
    elsewhere it raises :class:`~cudnn_py.errors.CudnnNotSupportedError`.
    """
    s = _bn(handle, x, mode)
    op, act = _ex_ops(ops, activation, z, "z")
    za = None if z is None else _data(z, "z", handle, like=s.x)
    sc, bi = s.param(scale, "scale", handle), s.param(bias, "bias", handle)
    _pair(running_mean, running_var, "running_mean and running_var")
    rm, rv = s.opt_param(running_mean, "running_mean", handle), s.opt_param(running_var, "running_var", handle)
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps, f = _check_epsilon(epsilon), _check_factor(factor)
    ya = _out_data(y, "y", handle, s.x)
    ws_size, _, rs_size = _ex_sizes(handle, s, op, act, za is not None)
    rsa = _reserve(handle, reserve, rs_size, "reserve")
    ya, sm, siv = _or_new_like(ya, handle, s.x), s.or_new(sm, handle), s.or_new(siv, handle)
    ws = handle.workspace.get(ws_size, handle.stream)
    al, be = _scalars(s.x.dtype, alpha, beta)
    capi.cudnnBatchNormalizationForwardTrainingEx(
        handle.ptr, s.mode, op, al, be, _desc(s.x), s.x.ptr, None if za is None else _desc(za), _ptr(za),
        _desc(ya), ya.ptr, s.pdesc, sc.ptr, bi.ptr, f, _ptr(rm), _ptr(rv), eps, sm.ptr, siv.ptr, act,
        ws or None, ws_size, _ptr(rsa), 0 if rsa is None else rsa.nbytes)
    return BatchNormTraining(ya, sm, siv, rm, rv, rsa)


def _reserve(handle, reserve, nbytes: int, name: str) -> DeviceArray | None:
    """The reserve buffer: allocated (uint8) when not given, else checked to hold ``nbytes``."""
    if reserve is None:
        return _new(handle, (nbytes,), np.uint8) if nbytes else None
    r = _array(reserve, name, handle)
    if not r.is_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if r.nbytes < nbytes:
        raise ValueError(f"{name} holds {r.nbytes} bytes but cuDNN needs {nbytes} for this call; pass the "
                         f"reserve returned by the forward call on the same inputs")
    return r


def batchnorm_backward_ex(handle, x, y, dy, scale, bias, saved_mean, saved_inv_var, reserve=None, *, ops="bn",
                          activation=None, mode="spatial_persistent", epsilon: float = 1e-5, dx=None, dz=None,
                          dscale=None, dbias=None, alpha_data: float = 1.0, beta_data: float = 0.0,
                          alpha_param: float = 1.0, beta_param: float = 0.0) -> BatchNormGrads:
    """Gradients of ``y = act(bn(x) [+ z])`` (``cudnnBatchNormalizationBackwardEx``).

    ``y`` is the forward output (it gates the activation's gradient), ``reserve`` the forward's reserve.
    ``dz`` (ops "bn_add_activation") is returned allocated when not given.
    """
    s = _bn(handle, x, mode)
    op = _enum(ops, BATCHNORM_OPS, capi.cudnnBatchNormOps_t, "ops")
    act = None if int(op) == 0 else _activation("relu" if activation is None else activation)
    if int(op) == 0 and activation is not None:
        raise ValueError(f"ops={op.name} has no activation; pass activation=None")
    ya = _data(y, "y", handle, like=s.x)
    dya = _data(dy, "dy", handle, like=s.x)
    sc, bi = s.param(scale, "scale", handle), s.param(bias, "bias", handle)
    _pair(saved_mean, saved_inv_var, "saved_mean and saved_inv_var")
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps = _check_epsilon(epsilon)
    dxa = _out_data(dx, "dx", handle, s.x)
    if int(op) != 2 and dz is not None:
        raise ValueError(f"ops={op.name} has no z, so no dz; pass dz=None")
    dza = _out_data(dz, "dz", handle, s.x)
    ds, db = s.opt_param(dscale, "dscale", handle), s.opt_param(dbias, "dbias", handle)
    _, ws_size, rs_size = _ex_sizes(handle, s, op, act, int(op) == 2)
    if reserve is None and rs_size:
        raise ValueError(f"this backward needs the forward's reserve space ({rs_size} bytes); pass reserve=")
    rsa = None if reserve is None else _reserve(handle, reserve, rs_size, "reserve")
    dxa, ds, db = _or_new_like(dxa, handle, s.x), s.or_new(ds, handle), s.or_new(db, handle)
    dza = None if int(op) != 2 else _or_new_like(dza, handle, s.x)
    ws = handle.workspace.get(ws_size, handle.stream)
    ad, bd = _scalars(s.x.dtype, alpha_data, beta_data)
    ap, bp = _scalars(s.x.dtype, alpha_param, beta_param)
    capi.cudnnBatchNormalizationBackwardEx(
        handle.ptr, s.mode, op, ad, bd, ap, bp, _desc(s.x), s.x.ptr, _desc(ya), ya.ptr, _desc(dya), dya.ptr,
        None if dza is None else _desc(dza), _ptr(dza), _desc(dxa), dxa.ptr, s.pdesc, sc.ptr, bi.ptr, ds.ptr,
        db.ptr, eps, _ptr(sm), _ptr(siv), act, ws or None, ws_size, _ptr(rsa),
        0 if rsa is None else rsa.nbytes)
    return BatchNormGrads(dxa, ds, db, dza)
