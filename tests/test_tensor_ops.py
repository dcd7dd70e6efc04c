"""Tensor operations: descriptors, layouts, bad input (CPU); add, op-tensor, scale, set, transform(Ex), reduce (GPU)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.core.descriptors import OpTensor, ReduceTensor
from cudnn_py.ops import _common as C
from cudnn_py.ops import tensor_ops as T
from reference import tensor_ops as ref
from reference.tensor_ops import assert_close
from helpers import NoCallHandle, fake


# ---------------------------------------------------------------- CPU

@pytest.mark.parametrize("op", list(T.OP_TENSOR_OPS))
def test_op_tensor_descriptor_round_trip(op):
    d = OpTensor(T.OP_TENSOR_OPS[op], capi.CUDNN_DATA_FLOAT, nan_propagation=True).descriptor  # as op_tensor
    o, c, nan = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    capi.cudnnGetOpTensorDescriptor(d, ctypes.byref(o), ctypes.byref(c), ctypes.byref(nan))
    assert (o.value, c.value, nan.value) == (int(T.OP_TENSOR_OPS[op]), int(capi.CUDNN_DATA_FLOAT),
                                             int(capi.CUDNN_PROPAGATE_NAN))


@pytest.mark.parametrize("op", list(T.REDUCE_OPS))
def test_reduce_descriptor_round_trip(op):
    indices = op in ("min", "max", "amax")
    d = ReduceTensor(T.REDUCE_OPS[op], capi.CUDNN_DATA_DOUBLE, indices=indices).descriptor  # as reduce_tensor
    vals = [ctypes.c_int() for _ in range(5)]
    capi.cudnnGetReduceTensorDescriptor(d, *(ctypes.byref(v) for v in vals))
    assert [v.value for v in vals] == [int(T.REDUCE_OPS[op]), int(capi.CUDNN_DATA_DOUBLE),
                                       int(capi.CUDNN_NOT_PROPAGATE_NAN), int(indices), int(capi.CUDNN_32BIT_INDICES)]


def test_tensor_descriptor_pads_to_four_dims_and_reads_back():
    d = C.tensor_desc((6, 5), np.float16, (5, 1))
    shape, strides, dtype = C.read_tensor_desc(d.ptr)
    assert (shape, strides, dtype) == ((6, 5, 1, 1), (5, 1, 1, 1), np.dtype(np.float16))
    assert C.tensor_desc((6, 5), np.float16, (5, 1)) is d  # cached
    assert C.desc(fake((6, 5), np.float16)) is C.tensor_desc((6, 5), np.float16)  # packed: no strides


def test_nhwc_strides():
    assert T._format_strides((2, 3, 4, 5), "NHWC") == (60, 1, 15, 3)
    assert T._format_strides((2, 3, 4, 5, 6), "nhwc") == (360, 1, 90, 18, 3)
    assert T._format_strides((2, 3, 4, 5), "NCHW") == (60, 20, 5, 1)


def test_reference_reduce_indices_point_at_the_values(rng):
    a = rng.standard_normal((3, 4, 5, 2))
    for op, pick in (("max", np.max), ("min", np.min)):
        r, idx = ref.reduce(op, a, (3, 1, 5, 1))
        for n in range(3):
            for h in range(5):
                block = a[n, :, h, :]
                assert block.reshape(-1)[idx[n, 0, h, 0]] == r[n, 0, h, 0] == pick(block)


@pytest.mark.parametrize("call,exc,words", [
    (lambda h: T.add_tensor(h, fake((1, 3, 1, 2)), fake((2, 3, 4, 5)), beta=1.0), ValueError, "broadcast"),
    (lambda h: T.add_tensor(h, fake((1, 3, 1, 1), np.float16), fake((2, 3, 4, 5)), beta=1.0), TypeError, "dtype"),
    (lambda h: T.add_tensor(h, fake((1,) * 6), fake((2,) * 6), beta=1.0), ValueError, "5 dimensions"),
    (lambda h: T.op_tensor(h, "add", fake((2, 3))), ValueError, "binary"),
    (lambda h: T.op_tensor(h, "pow", fake((2, 3)), fake((2, 3))), ValueError, "op"),
    (lambda h: T.op_tensor(h, "mul", fake((2, 3)), fake((2, 3)), c=fake((3, 2))), ValueError,
     "c has shape"),
    (lambda h: T.op_tensor(h, "mul", fake((2, 3)), np.ones((2, 3), np.float32)), TypeError, "to_device"),
    (lambda h: T.reduce_tensor(h, "add", fake((2, 3)), indices=True), ValueError, "indices"),
    (lambda h: T.reduce_tensor(h, "max", fake((2, 3)), axes=2), ValueError, "axes"),
    (lambda h: T.reduce_tensor(h, "max", fake((2, 3)), c=fake((2, 1)), axes=1), ValueError, "either"),
    (lambda h: T.reduce_tensor(h, "max", fake((2, 3)), c=fake((2, 2))), ValueError, "c has shape"),
    (lambda h: T.reduce_tensor(h, "sum", fake((2, 3))), ValueError, "op"),
    (lambda h: T.transform_tensor(h, fake((2, 3, 4, 5)), y=fake((2, 3, 5, 4))), ValueError, "y has shape"),
    (lambda h: T.transform_tensor(h, fake((2, 3, 4, 5)), layout="CHWN"), ValueError, "layout"),
    (lambda h: T.transform_tensor(h, fake((2, 3, 4, 5)), y=fake((2, 3, 4, 5)), dtype=np.float16),
     TypeError, "dtype"),
    (lambda h: T.transform_tensor_ex(h, fake((2, 3, 4))), ValueError, "4-D or 5-D"),
    (lambda h: T.transform_tensor_ex(h, fake((2, 3, 4, 4)), pad_before=(0, 1)), ValueError, "pad_before"),
    (lambda h: T.transform_tensor_ex(h, fake((2, 3, 4, 4)), layout="CHWN"), ValueError, "layout"),
    (lambda h: T.set_tensor(h, fake((2, 3)), "one"), TypeError, "value must be a real number"),
    (lambda h: T.scale_tensor(h, fake((0, 3)), alpha=2.0), ValueError, "empty"),
])
def test_bad_input_is_rejected_before_c(call, exc, words):
    with pytest.raises(exc, match=words):
        call(NoCallHandle())


class _Reached(Exception):
    """The call got past validation to the step a test intercepts."""


def _stop(seen: list):
    def record(*args, **kwargs):
        seen.append(args)
        raise _Reached
    return record


def test_add_tensor_without_beta_warns_and_still_accumulates(monkeypatch):
    seen: list = []
    monkeypatch.setattr(C, "scalars", _stop(seen))
    with pytest.warns(DeprecationWarning, match="pass beta=1.0 to accumulate; the default becomes 0.0"), \
            pytest.raises(_Reached):
        T.add_tensor(NoCallHandle(), fake((1, 3, 1, 1)), fake((2, 3, 4, 5)), alpha=2.0, engine="legacy")
    assert seen == [(np.dtype(np.float32), 2.0, 1.0)]  # today's result: c = 2 a + 1 c


def test_scale_tensor_positional_alpha_warns_and_is_alpha(monkeypatch):
    seen: list = []
    monkeypatch.setattr(T, "scalars", _stop(seen))
    with pytest.warns(DeprecationWarning, match="pass alpha= as a keyword"), pytest.raises(_Reached):
        T.scale_tensor(NoCallHandle(), fake((2, 3)), -2.5, engine="legacy")
    with pytest.raises(_Reached):
        T.scale_tensor(NoCallHandle(), fake((2, 3)), alpha=-2.5, engine="legacy")
    assert seen == [(np.dtype(np.float32), -2.5)] * 2
    with pytest.raises(TypeError, match="alpha once"):
        T.scale_tensor(NoCallHandle(), fake((2, 3)), 2.0, alpha=3.0)
    with pytest.raises(TypeError, match="alpha once"):
        T.scale_tensor(NoCallHandle(), fake((2, 3)), 2.0, 3.0)


def test_transform_tensor_memory_format_is_the_old_layout(monkeypatch):
    seen: list = []
    monkeypatch.setattr(T, "new_output", _stop(seen))
    with pytest.warns(DeprecationWarning, match="memory_format= is deprecated, use layout="), pytest.raises(_Reached):
        T.transform_tensor(NoCallHandle(), fake((2, 3, 4, 5)), memory_format="NHWC")
    with pytest.raises(_Reached):
        T.transform_tensor(NoCallHandle(), fake((2, 3, 4, 5)), layout="nhwc")
    assert [args[3] for args in seen] == [(60, 1, 15, 3)] * 2
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="layout 'CHWN'"):
        T.transform_tensor(NoCallHandle(), fake((2, 3, 4, 5)), memory_format="CHWN")
    with pytest.raises(TypeError, match="both layout= and its old spelling memory_format="):
        T.transform_tensor(NoCallHandle(), fake((2, 3, 4, 5)), layout="NHWC", memory_format="NHWC")
    with pytest.raises(TypeError, match="unexpected keyword argument 'format'"):
        T.transform_tensor(NoCallHandle(), fake((2, 3, 4, 5)), format="NHWC")


def test_transform_tensor_ex_dest_format_is_the_old_layout(monkeypatch):
    seen: list = []
    monkeypatch.setattr(T.TensorTransformDescriptor, "shared", _stop(seen))
    with pytest.warns(DeprecationWarning, match="dest_format= is deprecated, use layout="), pytest.raises(_Reached):
        T.transform_tensor_ex(NoCallHandle(), fake((2, 3, 4, 5)), dest_format="NCHW")
    for layout in ("nchw", "NCHW", capi.CUDNN_TENSOR_NCHW):
        with pytest.raises(_Reached):
            T.transform_tensor_ex(NoCallHandle(), fake((2, 3, 4, 5)), layout=layout)
    with pytest.raises(_Reached):
        T.transform_tensor_ex(NoCallHandle(), fake((2, 3, 4, 5)))  # default NHWC
    assert [args[1] for args in seen] == [capi.CUDNN_TENSOR_NCHW] * 4 + [capi.CUDNN_TENSOR_NHWC]


def test_reduce_result_is_a_named_tuple():
    r = T.ReduceResult(c=1, indices=2)
    c, idx = r
    assert (c, idx) == (r.c, r.indices) == (1, 2)


@pytest.mark.gpu  # cudnnSetTensorTransformDescriptor loads a sub-library that needs the driver
def test_tensor_transform_descriptors_are_shared_and_destroyed_when_dropped():
    import gc
    import weakref
    from cudnn_py.core import caches
    args = (4, capi.CUDNN_TENSOR_NHWC, (0, 0, 1, 1), (0, 0, 1, 1), (1, 1, 1, 1), capi.CUDNN_TRANSFORM_FOLD)
    d = T.TensorTransformDescriptor.shared(*args)
    assert T.TensorTransformDescriptor.shared(*args) is d and "ops.tensor_transform" in caches.info()
    fmt = ctypes.c_int()
    before, after = (ctypes.c_int32 * 4)(), (ctypes.c_int32 * 4)()
    fold, direction = (ctypes.c_uint32 * 4)(), ctypes.c_int()
    capi.cudnnGetTensorTransformDescriptor(d.ptr, 4, ctypes.byref(fmt), before, after, fold, ctypes.byref(direction))
    assert (fmt.value, tuple(before), tuple(after)) == (int(capi.CUDNN_TENSOR_NHWC), (0, 0, 1, 1), (0, 0, 1, 1))
    d.close()  # shared: close() leaves it to the cache
    assert not d.closed and "layout=CUDNN_TENSOR_NHWC" in repr(d)
    raw, gone = d._ptr, weakref.ref(d)
    caches.shared("ops.tensor_transform").clear()
    del d
    gc.collect()
    assert gone() is None and raw.value is None  # the finalizer destroyed the C descriptor


# ---------------------------------------------------------------- GPU

def _dev(a):
    import cudnn_py as cudnn
    return cudnn.to_device(a)


def _nan(shape, dtype):
    return _dev(np.full(shape, np.nan, dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("c_shape,a_shape", [((2, 3, 4, 5), (1, 3, 1, 1)), ((2, 3, 4, 5), (2, 3, 4, 5)),
                                             ((2, 3, 2, 4, 3), (1, 3, 1, 1, 1)), ((6, 7), (1, 7))])
def test_add_tensor(handle, rng, dtype, c_shape, a_shape):
    a, c0 = rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(c_shape).astype(dtype)
    c = _dev(c0)
    T.add_tensor(handle, _dev(a), c, alpha=1.5, beta=-0.5, engine="legacy")
    assert_close(c.to_numpy(), ref.add_tensor(a, c0, 1.5, -0.5), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op", list(T.OP_TENSOR_OPS))
def test_op_tensor(handle, rng, dtype, op):
    shape, b_shape = (2, 3, 4, 5), (1, 3, 1, 5)
    if op == "not":  # a 0/1 mask: logical NOT is 1 - a there
        a = rng.integers(0, 2, shape).astype(dtype)
        alpha1 = 1.0
    else:
        a = (np.abs(rng.standard_normal(shape)) + 0.1 if op == "sqrt" else rng.standard_normal(shape)).astype(dtype)
        alpha1 = 0.75
    b = rng.standard_normal(b_shape).astype(dtype)
    unary = op in ("sqrt", "not")
    c = T.op_tensor(handle, op, _dev(a), None if unary else _dev(b), c=_nan(shape, dtype), alpha1=alpha1, alpha2=-1.25,
                    engine="legacy")
    assert_close(c.to_numpy(), ref.op_tensor(op, a, None if unary else b, np.zeros(shape), alpha1, -1.25, 0.0), dtype)
    c0 = rng.standard_normal(shape).astype(dtype)
    c2 = T.op_tensor(handle, op, _dev(a), None if unary else _dev(b), c=_dev(c0), alpha1=alpha1, alpha2=2.0, beta=0.5,
                     engine="legacy")
    assert_close(c2.to_numpy(), ref.op_tensor(op, a, None if unary else b, c0, alpha1, 2.0, 0.5), dtype)


@pytest.mark.gpu
def test_op_tensor_allocates_scale_and_set(handle, rng):
    a, b = rng.standard_normal((3, 4, 5)).astype(np.float32), rng.standard_normal((3, 4, 5)).astype(np.float32)
    c = T.op_tensor(handle, "max", _dev(a), _dev(b), engine="legacy")
    assert c.shape == a.shape and c.dtype == np.float32
    assert_close(c.to_numpy(), np.maximum(a, b).astype(np.float64), np.float32)
    y = _dev(a)
    T.scale_tensor(handle, y, alpha=-2.5, engine="legacy")
    assert_close(y.to_numpy(), -2.5 * a.astype(np.float64), np.float32)
    T.set_tensor(handle, y, 3.25)
    assert (y.to_numpy() == np.float32(3.25)).all()
    h16 = _nan((7, 3), np.float16)
    T.set_tensor(handle, h16, -1.5)
    assert (h16.to_numpy() == np.float16(-1.5)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64"])
def test_set_tensor_fills_every_layout_and_nothing_else(handle, dtype):
    """set_tensor on a view of a padded buffer: a C-order array and a dense NHWC-ordered one (the memset path) and
    a non-dense slice (cuDNN's kernel) get the value in every element they cover and leave every other byte of the
    buffer as it was; float64 takes 0.0 (equal 4-byte halves: a 32-bit memset) and 3.25 (no memset pattern:
    cuDNN's kernel). Integer tensors are filled by memsets only (cuDNN's kernel wrote zeros into an int8 slice and
    refuses int32 ones on 9.19): a slice, or an int64 value with unequal halves, is refused before C; negative
    strides are refused as before."""
    from cudnn_py.core.dtypes import as_numpy_dtype
    from cudnn_py.errors import InvalidValueError
    from cudnn_py.core.memory import DeviceArray
    dt = as_numpy_dtype(dtype)
    floating = dt.kind == "f" or dtype == "bfloat16"
    sentinel, values = (np.nan, (3.25, -1.5, 0.0)) if floating else (9, (0, -1) if dtype == "int64" else (7, 0, 1))
    shape, pad = (2, 3, 4, 5), 60
    views = {"c-order": ((60, 20, 5, 1), shape), "nhwc": ((60, 1, 15, 3), shape),  # NHWC: stored N, H, W, C
             "slice": ((60, 20, 10, 2), (2, 3, 2, 2))}
    for name, (strides, vshape) in views.items():
        for value in values:
            host = np.full(120 + 2 * pad, sentinel, dt)
            base = _dev(host)
            y = DeviceArray(base.ptr + pad * dt.itemsize, vshape, dt, strides, owner=base)
            if name == "slice" and not floating:
                with pytest.raises(InvalidValueError, match="must be dense"):
                    T.set_tensor(handle, y, value)
                continue
            assert T.set_tensor(handle, y, value) is y
            want = host.copy()
            inner = np.lib.stride_tricks.as_strided(want[pad:], vshape, tuple(st * dt.itemsize for st in strides))
            inner[...] = np.asarray(value).astype(np.float32 if floating and dt.itemsize < 8 else dt)
            np.testing.assert_array_equal(base.to_numpy().view(np.uint8), want.view(np.uint8),
                                          err_msg=f"{dtype} {name} value {value}")
    base = _dev(np.zeros(120, dt))
    if dtype == "int64":
        with pytest.raises(InvalidValueError, match="must be dense"):
            T.set_tensor(handle, DeviceArray(base.ptr, shape, dt, owner=base), 7)
    with pytest.raises(InvalidValueError, match="strides must be >= 0" if floating else "must be dense"):
        T.set_tensor(handle, DeviceArray(base.ptr + 119 * dt.itemsize, shape, dt, (-60, -20, -5, -1), owner=base), 1)


@pytest.mark.gpu
@pytest.mark.parametrize("src,dst", [(np.float32, np.float16), (np.float16, np.float32), (np.float32, np.float32)])
def test_transform_tensor_layout_and_dtype(handle, rng, src, dst):
    from cudnn_py.core.memory import DeviceArray
    x = rng.standard_normal((2, 3, 4, 5)).astype(src)
    y = T.transform_tensor(handle, _dev(x), dtype=dst, layout="NHWC", engine="legacy")
    assert y.shape == x.shape and y.dtype == np.dtype(dst) and y.strides == (60, 1, 15, 3)
    assert_close(y.to_numpy(), x.astype(np.float64), np.float16 if np.float16 in (src, dst) else np.float32)
    physical = DeviceArray(y.ptr, (2, 4, 5, 3), dst, owner=y).to_numpy()  # the memory really is N, H, W, C
    assert_close(physical, x.astype(np.float64).transpose(0, 2, 3, 1), np.float16 if np.float16 in (src, dst) else
                 np.float32)
    back = T.transform_tensor(handle, y, dtype=src, layout="NCHW", engine="legacy")  # NHWC -> packed NCHW
    assert back.is_contiguous
    kept = T.transform_tensor(handle, y, dtype=src, engine="legacy")  # without layout=: y's memory order
    assert kept.strides == (60, 1, 15, 3)
    assert_close(kept.to_numpy(), x.astype(np.float64), np.float16)
    assert_close(back.to_numpy(), x.astype(np.float64), np.float16)
    y0 = rng.standard_normal(x.shape).astype(dst)
    blended = T.transform_tensor(handle, _dev(x), y=_dev(y0), alpha=2.0, beta=-1.0, engine="legacy")
    assert_close(blended.to_numpy(), ref.transform(x, y0, 2.0, -1.0), np.float16 if np.float16 in (src, dst) else
                 np.float32)


@pytest.mark.gpu
def test_transform_tensor_ex_to_nhwc(handle, rng):
    from cudnn_py.core.memory import DeviceArray
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = T.transform_tensor_ex(handle, _dev(x), layout="NHWC")
    assert y.shape == x.shape and y.strides == (60, 1, 15, 3)
    assert_close(y.to_numpy(), x.astype(np.float64), np.float32)
    assert_close(DeviceArray(y.ptr, (2, 4, 5, 3), np.float32, owner=y).to_numpy(),
                 x.astype(np.float64).transpose(0, 2, 3, 1), np.float32)


@pytest.mark.gpu
def test_transform_tensor_ex_pads_channels(handle, rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = T.transform_tensor_ex(handle, _dev(x), layout="NCHW", pad_after=(0, 1, 0, 0))
    assert y.shape == (2, 4, 4, 5)
    assert_close(y.to_numpy(), np.pad(x.astype(np.float64), [(0, 0), (0, 1), (0, 0), (0, 0)]), np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", list(T.REDUCE_OPS))
@pytest.mark.parametrize("c_shape", [(2, 1, 4, 5), (2, 3, 1, 1), (1, 1, 1, 1)])
def test_reduce_tensor(handle, rng, dtype, op, c_shape):
    shape = (2, 3, 4, 5)
    a = rng.standard_normal(shape)
    if op in ("mul", "mul_no_zeros"):
        a = 1.0 + 0.05 * a
    if op == "mul_no_zeros":
        a[rng.random(shape) < 0.2] = 0.0
    a = a.astype(dtype)
    alpha = 1.0 if op in ("mul", "mul_no_zeros") else 0.5  # reduce(alpha * A) vs alpha * reduce(A) differ for mul
    want_idx = op in ("min", "max", "amax")
    r_ref, i_ref = ref.reduce(op, a, c_shape)
    got = T.reduce_tensor(handle, op, _dev(a), c=_nan(c_shape, dtype), indices=want_idx, alpha=alpha, engine="legacy")
    c, idx = got if want_idx else (got, None)
    assert_close(c.to_numpy(), alpha * r_ref, dtype, tol_scale=10)
    if want_idx:
        np.testing.assert_array_equal(idx.to_numpy(), i_ref)
    c0 = rng.standard_normal(c_shape).astype(dtype)
    c2 = T.reduce_tensor(handle, op, _dev(a), c=_dev(c0), alpha=alpha, beta=2.0, engine="legacy")
    assert_close(c2.to_numpy(), alpha * r_ref + 2.0 * c0, dtype, tol_scale=10)


@pytest.mark.gpu
def test_reduce_tensor_axes_allocation_and_float16(handle, rng):
    a = rng.standard_normal((3, 4, 6, 2)).astype(np.float16)
    c, idx = T.reduce_tensor(handle, "max", _dev(a), axes=(1, 3), indices=True, engine="legacy")
    assert c.shape == (3, 1, 6, 1) and c.dtype == np.float16 and idx.dtype == np.int32
    r_ref, i_ref = ref.reduce("max", a, (3, 1, 6, 1))
    assert_close(c.to_numpy(), r_ref, np.float16)
    np.testing.assert_array_equal(idx.to_numpy(), i_ref)
    s = T.reduce_tensor(handle, "add", _dev(a), engine="legacy")  # every axis
    assert s.shape == (1, 1, 1, 1)
    assert_close(s.to_numpy(), ref.reduce("add", a, (1, 1, 1, 1))[0], np.float16, tol_scale=5)


@pytest.mark.gpu
def test_raw_capi_path(handle, rng):
    a, b = rng.standard_normal((2, 3, 4, 5)).astype(np.float32), rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    ad, bd, cd = _dev(a), _dev(b), _nan(a.shape, np.float32)
    od, ta, tb = capi.cudnnOpTensorDescriptor_t(), capi.cudnnTensorDescriptor_t(), capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateOpTensorDescriptor(ctypes.byref(od))
    capi.cudnnSetOpTensorDescriptor(od, capi.CUDNN_OP_TENSOR_MUL, capi.CUDNN_DATA_FLOAT, capi.CUDNN_NOT_PROPAGATE_NAN)
    for d, s in ((ta, a.shape), (tb, b.shape)):
        capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
        capi.cudnnSetTensor4dDescriptor(d, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, *s)
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    capi.cudnnOpTensor(handle.ptr, od, ctypes.byref(one), ta, ad.ptr, ctypes.byref(one), tb, bd.ptr,
                       ctypes.byref(zero), ta, cd.ptr)
    assert_close(cd.to_numpy(), a.astype(np.float64) * b, np.float32)
    capi.cudnnAddTensor(handle.ptr, ctypes.byref(one), tb, bd.ptr, ctypes.byref(one), ta, cd.ptr)
    assert_close(cd.to_numpy(), a.astype(np.float64) * b + b, np.float32)
    for d in (ta, tb):
        capi.cudnnDestroyTensorDescriptor(d)
    capi.cudnnDestroyOpTensorDescriptor(od)


# ---------------------------------------------------------------- engine="graph"

from cudnn_py.graph.legacy import GraphPathRefused  # noqa: E402
import engine_helpers as E  # noqa: E402


@pytest.mark.parametrize("call,words", [
    (lambda h: T.op_tensor(h, "add", fake((2, 3)), fake((2, 3)), c=fake((2, 3)), nan_propagation=True,
                           engine="graph"), "NaN"),
    (lambda h: T.op_tensor(h, "add", fake((2, 3)), fake((2, 3)), c=fake((2, 3)), compute_dtype="float64",
                           engine="graph"), "float32"),
    (lambda h: T.add_tensor(h, fake((2, 3), np.float64), fake((2, 3), np.float64), beta=1.0, engine="graph"),
     "float64"),
    (lambda h: T.transform_tensor(h, fake((2, 3), np.int8), y=fake((2, 3)), engine="graph"), "int8"),
    (lambda h: T.reduce_tensor(h, "max", fake((2, 3)), c=fake((2, 1)), indices=True, engine="graph"), "indices"),
    (lambda h: T.reduce_tensor(h, "mul_no_zeros", fake((2, 3)), c=fake((2, 1)), engine="graph"), "mul_no_zeros"),
    (lambda h: T.scale_tensor(h, fake((1,) * 6), alpha=2.0, engine="graph"), "1 to 5 dimensions"),
    (lambda h: T.add_tensor(h, fake((2, 3)), fake((2, 3)), beta=1.0, engine="fast"), "engine 'fast'"),
])
def test_graph_engine_refusals_before_c(call, words):
    with pytest.raises(ValueError, match=words) as e:
        call(NoCallHandle())
    assert "engine 'fast'" in words or isinstance(e.value, GraphPathRefused)


def _graph_refuses(out_shape, b_shape, layout) -> bool:
    """Whether the pointwise graph path refuses a broadcast operand: one of NCHW data of rank >= 3 (per-channel
    there is not innermost in memory) or one varying along more than the channel."""
    if b_shape == out_shape:
        return False
    varying = [i for i, (b, o) in enumerate(zip(b_shape, out_shape)) if b == o and o > 1]
    return (layout == "NCHW" and len(out_shape) >= 3) or varying != [1 if len(out_shape) >= 3 else len(out_shape) - 1]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
@pytest.mark.parametrize("c_shape,a_shape", [((2, 3, 4, 5), (1, 3, 1, 1)), ((2, 3, 4, 5), (2, 3, 4, 5)),
                                             ((2, 3, 2, 4, 3), (1, 3, 1, 1, 1)), ((6, 7), (1, 7))])
def test_graph_add_tensor(handle, rng, dtype, layout, c_shape, a_shape):
    """c = alpha * a + beta * c with a per-channel or full-size a; a broadcast cuDNN's pointwise engines lack (a
    bias of NCHW data) is refused by engine='graph' before cuDNN and answered by engine='auto' (legacy)."""
    a, c0 = E.rounded(rng.standard_normal(a_shape), dtype), E.rounded(rng.standard_normal(c_shape), dtype)
    engine = "graph"
    if _graph_refuses(c_shape, a_shape, layout):
        with pytest.raises(GraphPathRefused, match="per channel only"):
            T.add_tensor(handle, E.on_device(a, dtype, layout), E.on_device(c0, dtype, layout), beta=1.0,
                         engine="graph")
        engine = "auto"
    c = E.on_device(c0, dtype, layout)
    T.add_tensor(handle, E.on_device(a, dtype, layout), c, alpha=1.5, beta=-0.5, engine=engine)
    E.assert_close(E.host(c), ref.add_tensor(a, c0, 1.5, -0.5), dtype)
    c = E.poisoned(c_shape, dtype, layout)  # beta 0: c is only written (a broadcast over it)
    T.add_tensor(handle, E.on_device(a, dtype, layout), c, alpha=2.0, beta=0.0, engine=engine)
    E.assert_close(E.host(c), np.broadcast_to(2.0 * a, c_shape), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
@pytest.mark.parametrize("op,b_shape", [(op, b) for op in T.OP_TENSOR_OPS for b in ((2, 3, 4, 5), (1, 3, 1, 1), (1, 3, 1, 5))
                                         if op not in ("sqrt", "not") or b == (2, 3, 4, 5)])  # unary: b is not read
def test_graph_op_tensor(handle, rng, dtype, layout, op, b_shape):
    shape = (2, 3, 4, 5)
    unary = op in ("sqrt", "not")
    if op == "not":
        a, alpha1 = rng.integers(0, 2, shape).astype(np.float64), 1.0
    else:
        a, alpha1 = (np.abs(rng.standard_normal(shape)) + 0.1 if op == "sqrt" else rng.standard_normal(shape)), 0.75
    a, b = E.rounded(a, dtype), E.rounded(rng.standard_normal(b_shape), dtype)
    bd = None if unary else E.on_device(b, dtype, layout)
    engine = "graph"
    if not unary and _graph_refuses(shape, b_shape, layout):
        with pytest.raises(GraphPathRefused, match="per channel only"):
            T.op_tensor(handle, op, E.on_device(a, dtype, layout), bd, c=E.poisoned(shape, dtype, layout),
                        engine="graph")
        engine = "auto"
    c = T.op_tensor(handle, op, E.on_device(a, dtype, layout), bd, c=E.poisoned(shape, dtype, layout), alpha1=alpha1,
                    alpha2=-1.25, engine=engine)
    E.assert_close(E.host(c), ref.op_tensor(op, a, None if unary else b, np.zeros(shape), alpha1, -1.25, 0.0), dtype)
    c0 = E.rounded(rng.standard_normal(shape), dtype)
    c2 = T.op_tensor(handle, op, E.on_device(a, dtype, layout), bd, c=E.on_device(c0, dtype, layout), alpha1=alpha1,
                     alpha2=2.0, beta=0.5, engine=engine)
    E.assert_close(E.host(c2), ref.op_tensor(op, a, None if unary else b, c0, alpha1, 2.0, 0.5), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
def test_graph_scale_tensor(handle, rng, dtype):
    for shape, layout in (((2, 3, 4, 5), "NHWC"), ((7,), "NCHW"), ((3, 4, 5), "NCHW")):
        a = E.rounded(rng.standard_normal(shape), dtype)
        y = E.on_device(a, dtype, layout)
        T.scale_tensor(handle, y, alpha=-2.5, engine="graph")
        E.assert_close(E.host(y), -2.5 * a, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("src,dst", [("float32", "float16"), ("float16", "float32"), ("float32", "float32"),
                                     ("float16", "float16")] + ([("bfloat16", "float32"), ("float32", "bfloat16")]
                                                                if E.BF16 is not None else []))
def test_graph_transform_tensor_layout_and_dtype(handle, rng, src, dst):
    """A dtype change (and the alpha/beta blend) through an identity pointwise graph; a layout change, which
    cuDNN's pointwise engines do not make, is refused by engine='graph' and made by engine='auto' (legacy)."""
    x = E.rounded(rng.standard_normal((2, 3, 4, 5)), src)
    tol = "bfloat16" if "bfloat16" in (src, dst) else "float16" if "float16" in (src, dst) else "float32"
    y = T.transform_tensor(handle, E.on_device(x, src), dtype=E.np_dtype(dst), engine="graph")
    assert y.dtype == E.np_dtype(dst) and y.is_contiguous
    E.assert_close(E.host(y), x, tol)
    with pytest.raises(GraphPathRefused, match="memory order"):
        T.transform_tensor(handle, E.on_device(x, src), dtype=E.np_dtype(dst), layout="NHWC", engine="graph")
    y = T.transform_tensor(handle, E.on_device(x, src), dtype=E.np_dtype(dst), layout="NHWC", engine="auto")
    assert y.strides == E.layout_strides(x.shape, "NHWC")
    E.assert_close(E.host(y), x, tol)
    y0 = E.rounded(rng.standard_normal(x.shape), dst)
    blended = T.transform_tensor(handle, E.on_device(x, src, "NHWC"), y=E.on_device(y0, dst, "NHWC"), alpha=2.0,
                                 beta=-1.0, engine="graph")
    E.assert_close(E.host(blended), ref.transform(x, y0, 2.0, -1.0), tol)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op", sorted(set(T.REDUCE_OPS) - {"mul_no_zeros"}))
@pytest.mark.parametrize("c_shape", [(2, 1, 4, 5), (2, 3, 1, 1), (1, 1, 1, 1)])
def test_graph_reduce_tensor(handle, rng, op, c_shape, layout):
    """Where cuDNN has an engine for the reduction graph the answer is checked; where it has none, engine='graph'
    says so (GraphNotSupportedError naming the reduction) and engine='auto' answers through the legacy call."""
    from cudnn_py.graph import GraphNotSupportedError
    a = rng.standard_normal((2, 3, 4, 5))
    if op == "mul":
        a = 1.0 + 0.05 * a
    a = a.astype(np.float32)
    r_ref, _ = ref.reduce(op, a, c_shape)
    for engine in ("graph", "auto"):
        c = E.poisoned(c_shape, "float32", layout)
        try:
            T.reduce_tensor(handle, op, E.on_device(a, "float32", layout), c=c, engine=engine)
        except GraphNotSupportedError as e:
            assert engine == "graph" and "reduction" in str(e) and "no engine supports graph" in str(e)
            continue
        E.assert_close(E.host(c), r_ref, "float32", scale=10)


def test_flat_view_only_for_dense_arrays_of_one_layout():
    """The pointwise graph path describes operands as one flat (1, 64, n / 64, 1) channels-last array only where
    that is the same elementwise computation: every array of the output's shape and strides, filling its memory."""
    from cudnn_py.graph import legacy as gl
    from cudnn_py.core.memory import DeviceArray
    nhwc = DeviceArray(0x1000, (4, 8, 4, 6), np.float16, E.layout_strides((4, 8, 4, 6), "NHWC"))
    view = gl._flat(nhwc, [nhwc, nhwc])
    v = view(nhwc)
    assert v.shape == (1, 64, 12, 1) and v.strides == (768, 1, 64, 64) and v.ptr == nhwc.ptr
    assert gl._flat(nhwc, [nhwc, DeviceArray(0x1000, (4, 8, 4, 6), np.float16)]) is None  # another memory order
    assert gl._flat(nhwc, [DeviceArray(0x1000, (1, 8, 1, 1), np.float16)]) is None  # a broadcast operand
    gapped = DeviceArray(0x1000, (4, 8, 4, 6), np.float16, (384, 48, 12, 2))  # every other element
    assert gl._flat(gapped, [gapped]) is None
    assert gl._flat(nhwc, [nhwc, DeviceArray(0x1000, nhwc.shape, np.float32, nhwc.strides)]) is None  # a dtype change
    odd = DeviceArray(0x1000, (3, 5, 7, 6), np.float16)  # 630 elements: not a multiple of 64
    assert gl._flat(odd, [odd]) is None
    unit = DeviceArray(0x1000, (2, 1, 32), np.float32, (32, 7, 1))  # a unit dim's stride means nothing
    assert gl._flat(unit, [unit])(unit).shape == (1, 64, 1, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
def test_graph_flat_view_elementwise(handle, rng, dtype, layout):
    """Operands that fill their memory in one layout run as one flat array: every op_tensor operation, add and
    scale (and a dtype change, which keeps the relabelled layout), against the float64 references, into poisoned
    outputs; shapes of rank 1 to 5."""
    for shape in ((4, 8, 4, 6), (2, 16, 2, 3, 4), (3 * 64,), (6, 32)):
        a = E.rounded(rng.standard_normal(shape), dtype)
        b = E.rounded(rng.standard_normal(shape), dtype)
        for op in T.OP_TENSOR_OPS:
            unary, alpha1 = op in ("sqrt", "not"), 1.0 if op == "not" else 0.75
            x = E.rounded(np.abs(a) + 0.1, dtype) if op == "sqrt" else (a > 0).astype(np.float64) if op == "not" \
                else a
            c = T.op_tensor(handle, op, E.on_device(x, dtype, layout), None if unary else E.on_device(b, dtype, layout),
                            c=E.poisoned(shape, dtype, layout), alpha1=alpha1, alpha2=-1.25, engine="graph")
            want = ref.op_tensor(op, x, None if unary else b, np.zeros(shape), alpha1, -1.25, 0.0)
            E.assert_close(E.host(c), want, dtype)
        c = E.on_device(b, dtype, layout)
        T.add_tensor(handle, E.on_device(a, dtype, layout), c, alpha=1.5, beta=-0.5, engine="graph")
        E.assert_close(E.host(c), ref.add_tensor(a, b, 1.5, -0.5), dtype)
        T.scale_tensor(handle, c, alpha=-2.0, engine="graph")
        E.assert_close(E.host(c), -2.0 * ref.add_tensor(a, b, 1.5, -0.5), dtype, scale=2.0)
        y = T.transform_tensor(handle, E.on_device(a, dtype, layout), y=E.poisoned(shape, "float32", layout),
                               engine="graph")
        E.assert_close(E.host(y), a, "float32")


@pytest.mark.parametrize("dtype,alpha,beta,graphs", [
    (np.float32, 1.0, 0.0, [("reduce_tensor", ("max",), ["a"], ["c"], np.float32)]),
    (np.float16, 1.0, 0.0, [("reduce_tensor", ("max",), ["a"], ["c"], np.float32),     # float32 scratch, then
                            ("reduce_blend", (1.0, 0.0), ["acc"], ["c"], np.float16)]),  # blended into c
    (np.float32, 2.0, 0.5, [("reduce_tensor", ("max",), ["a"], ["c"], np.float32),
                            ("reduce_blend", (2.0, 0.5), ["acc", "prior"], ["c"], np.float32)]),
])
def test_graph_reduction_blends_through_a_float32_scratch(monkeypatch, dtype, alpha, beta, graphs):
    """The graph reduction writes float32 without an epilogue: other dtypes and scalings reduce into a float32
    scratch and blend it into c (the GPU tests run it: test_graph_reduce_tensor)."""
    from cudnn_py.graph import legacy as gl
    from helpers import fake_array, fake_cudnn_handle
    seen = []

    def run_graph(handle, op, params, inputs, outputs, build, **kw):
        seen.append((op, params, [n for n, _ in inputs], [n for n, _ in outputs], outputs[0][1].dtype))
        return True
    monkeypatch.setattr(gl, "run_graph", run_graph)
    monkeypatch.setattr(T, "new_output", lambda h, shape, dt, strides: fake_array(shape, dt, strides))
    c = fake_array((2, 1), dtype)
    assert T.reduce_tensor(fake_cudnn_handle(), "max", fake_array((2, 3), dtype), c=c, alpha=alpha, beta=beta,
                           engine="graph") is c
    assert seen == graphs
