"""What batch norm (:mod:`cudnn_py.ops.batchnorm`) and the normalisation API (:mod:`cudnn_py.ops.normalization`)
share: argument checks, parameter shapes (:func:`param_shape_for`, or without unit dimensions; float32, float64 for
float64 data), statistics and reserve buffers, the checked arguments of their fused backward calls.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from cudnn_py import capi
from cudnn_py.core.descriptors import TensorDescriptor
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.core.args import float_arg
from cudnn_py.core.memory import DeviceArray, c_strides, empty
from cudnn_py.ops._common import (
    byte_buffer, check_array, desc, enum_arg, new_output, output, read_tensor_desc, scalars, tensor_desc,
    with_tensor_descriptors,
)
from cudnn_py.ops.activation import activation_of
from cudnn_py.clib.recording import WorkspaceArg


def derive_descriptors(fill, count: int = 1) -> list[tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of each of ``count`` new tensor descriptors that ``fill(*descs)`` derives."""
    def derive(*descs):
        fill(*descs)
        return [(shape, dtype) for shape, _, dtype in map(read_tensor_desc, descs)]
    return with_tensor_descriptors(derive, count)


def data_array(obj, name: str, handle, *, like: DeviceArray | None = None) -> DeviceArray:
    """A 4-D/5-D floating data array (checked against ``like``'s shape and dtype when given)."""
    if like is None:
        a = check_array(obj, name, handle, floating=True)
        if not 4 <= a.ndim <= 5:
            raise InvalidValueError(f"{name} has shape {a.shape}; batch normalisation takes 4-D or 5-D data "
                             f"(N, C, [D,] H, W)")
        return a
    return check_array(obj, name, handle, dtype=like.dtype, shape=like.shape)


def check_epsilon(epsilon: float) -> float:
    """``epsilon`` as a finite float of at least ``CUDNN_BN_MIN_EPSILON``."""
    return float_arg(epsilon, "epsilon", minimum=capi.CUDNN_BN_MIN_EPSILON)


def check_pair(a, b, names: str) -> None:
    """Refuse one of two arrays that go together (``names`` says which) without the other."""
    if (a is None) != (b is None):
        raise InvalidValueError(f"give both {names} or neither")


class NormSetup:
    """A call's checked data ``x``, its ``mode`` (a key of ``table`` or an ``enum_type`` member; ``what`` names it)
    and the parameter shape, dtype and descriptors that follow."""

    def __init__(self, handle, x, mode, table: dict, enum_type, what: str):
        self.mode = enum_arg(mode, table, enum_type, what)
        self.x = data_array(x, "x", handle)
        self.pshape = param_shape_for(self.x.shape, self.mode)
        self.pdtype = np.dtype(np.float64 if self.x.dtype == np.float64 else np.float32)  # float64 data's own

    @functools.cached_property
    def xdesc(self) -> TensorDescriptor:
        """x's tensor descriptor (made when a legacy call needs it; the graph paths do not)."""
        return desc(self.x)

    @functools.cached_property
    def pdesc(self) -> TensorDescriptor:
        """The parameters' tensor descriptor (made when a legacy call needs it)."""
        return tensor_desc(self.pshape, self.pdtype)

    def param(self, obj, name: str, handle) -> DeviceArray:
        """``obj`` checked as a parameter array: contiguous, ``pdtype``, ``pshape`` (or that without its unit dims)."""
        a, pshape = check_array(obj, name, handle), self.pshape
        squeezed = tuple(d for d in pshape if d != 1)
        if a.shape != pshape and tuple(d for d in a.shape if d != 1) != squeezed:
            raise InvalidValueError(f"{name} has shape {a.shape}; in {self.mode.name} mode it must be {pshape} "
                                    f"(or {squeezed})")
        if a.dtype != self.pdtype:
            raise InvalidTypeError(f"{name} has dtype {a.dtype}; batch-norm parameters must be {self.pdtype} for this "
                                   f"data")
        if not a.is_contiguous:
            raise InvalidValueError(f"{name} must be C-contiguous; it has strides {a.strides}")
        return a

    def opt_param(self, obj, name: str, handle) -> DeviceArray | None:
        """As :meth:`param`, None passing through."""
        return None if obj is None else self.param(obj, name, handle)

    def or_new_pair(self, a: DeviceArray | None, b: DeviceArray | None, handle) -> tuple[DeviceArray, DeviceArray]:
        """``a`` and ``b`` (saved statistics, parameter gradients), each new where None (both: two 256-byte aligned
        views of one allocation)."""
        if a is not None or b is not None:
            new = functools.partial(new_output, handle, self.pshape, self.pdtype)
            return new() if a is None else a, new() if b is None else b
        item = self.pdtype.itemsize
        step = -(-math.prod(self.pshape) * item // 256) * 256
        both, stream = new_output(handle, (2 * step // item,), self.pdtype), getattr(handle, "stream", None)
        strides = c_strides(self.pshape)
        first, second = (DeviceArray.from_parts(both.ptr + i * step, self.pshape, self.pdtype, strides,
                                                both.device_id, both, stream, True) for i in (0, 1))
        return first, second


def param_shape_for(x_shape, mode) -> tuple[int, ...]:
    """The full parameter shape for data of ``x_shape`` in a batch-norm or normalisation ``mode``."""
    per_act = int(mode) == 0  # CUDNN_BATCHNORM_PER_ACTIVATION == CUDNN_NORM_PER_ACTIVATION == 0
    return (1,) + tuple(x_shape[1:]) if per_act else (1, x_shape[1]) + (1,) * (len(x_shape) - 2)


def training_params(handle, s: NormSetup, scale, bias, running_mean, running_var, saved_mean, saved_inv_var,
                     epsilon, factor):
    """(scale, bias, running mean, running var, saved mean, saved inverse variance, epsilon, factor), checked."""
    check_pair(running_mean, running_var, "running_mean and running_var")
    f = float_arg(factor, "factor (the running average's, 1 on the first call)", minimum=0.0, maximum=1.0)
    return (s.param(scale, "scale", handle), s.param(bias, "bias", handle),
            s.opt_param(running_mean, "running_mean", handle), s.opt_param(running_var, "running_var", handle),
            s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle),
            check_epsilon(epsilon), f)


def fused_ops(ops, activation, table: dict, enum_type, z=None, *, forward: bool = True, check: bool = True) -> tuple:
    """(ops member, fused :class:`~cudnn_py.ops.activation.Activation` or None): ops 0 has no activation (``check``:
    refuse one); a ``forward``'s ops 2 (add + activation) needs ``z``, its other ops take none."""
    op = enum_arg(ops, table, enum_type, "ops")
    act = None
    if int(op) != 0:
        act = activation_of("relu" if activation is None else activation)
        if act.mode == capi.CUDNN_ACTIVATION_IDENTITY:
            raise InvalidValueError("the identity activation cannot be fused; use ops without an activation instead")
    elif check and activation is not None:
        raise InvalidValueError(f"ops={op.name} has no activation; pass activation=None or choose an ops with one")
    if forward and int(op) == 2 and z is None:
        raise InvalidValueError(f"ops={op.name} adds z: pass z")
    if forward and int(op) != 2 and z is not None:
        raise InvalidValueError(f"ops={op.name} takes no z; use ops ending in _add_activation to add one")
    return op, act


def reserve_buffer(handle, reserve, nbytes: int, name: str) -> DeviceArray | None:
    """The reserve buffer: allocated (uint8) when not given, else checked to hold ``nbytes``."""
    if reserve is None:
        return empty((nbytes,), np.uint8, stream=handle.stream, device=handle.device) if nbytes else None
    return byte_buffer(reserve, name, handle, nbytes,
                       "pass the reserve returned by the forward call on the same inputs")


class FusedBackward(NamedTuple):
    """The checked and allocated arguments of the fused backward calls, holding the descriptors while C runs."""
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
    workspace: WorkspaceArg
    workspace_size: int
    scalars: tuple  # alpha_data, beta_data, alpha_param, beta_param as C scalars
    y_desc: TensorDescriptor  # the legacy call's descriptors (None for the graph path)
    dy_desc: TensorDescriptor
    dx_desc: TensorDescriptor
    dz_desc: TensorDescriptor | None


def fused_backward_args(handle, s: NormSetup, op, sizes, y, dy, scale, bias, saved_mean, saved_inv_var, epsilon,
                        dx, dz, dscale, dbias, reserve, alphas) -> FusedBackward:
    """Check and allocate a fused backward's arguments; ``sizes()`` gives (workspace, reserve) bytes after the checks
    (None for the graph path: no reserve read, no legacy descriptor); ``op`` 2 (add + activation) alone has z."""
    ya = data_array(y, "y", handle, like=s.x)
    dya = data_array(dy, "dy", handle, like=s.x)
    sc, bi = s.param(scale, "scale", handle), s.param(bias, "bias", handle)
    check_pair(saved_mean, saved_inv_var, "saved_mean and saved_inv_var")
    sm, siv = s.opt_param(saved_mean, "saved_mean", handle), s.opt_param(saved_inv_var, "saved_inv_var", handle)
    eps = check_epsilon(epsilon)
    if int(op) != 2 and dz is not None:
        raise InvalidValueError(f"ops={op.name} has no z, so no dz; pass dz=None")
    ds, db = s.opt_param(dscale, "dscale", handle), s.opt_param(dbias, "dbias", handle)
    dxa, (ds, db) = output(dx, "dx", handle, s.x.shape, s.x.dtype, like=s.x), s.or_new_pair(ds, db, handle)
    dza = None if int(op) != 2 else output(dz, "dz", handle, s.x.shape, s.x.dtype, like=s.x)
    ws_size, rs_size = (0, 0) if sizes is None else sizes()  # the size query after every array check
    if reserve is None and rs_size:
        raise InvalidValueError(f"this backward needs the forward's reserve space ({rs_size} bytes); pass reserve=")
    rsa = None if reserve is None or sizes is None else reserve_buffer(handle, reserve, rs_size, "reserve")
    descs = (None,) * 4 if sizes is None else (desc(ya), desc(dya), desc(dxa), None if dza is None else desc(dza))
    return FusedBackward(ya, dya, sc, bi, sm, siv, eps, dxa, dza, ds, db, rsa, 0 if rsa is None else rsa.nbytes,
                         WorkspaceArg(ws_size), ws_size,
                         scalars(s.x.dtype, *alphas[:2]) + scalars(s.x.dtype, *alphas[2:]), *descs)
