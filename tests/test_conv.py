"""Convolution on CPU: parameters, geometry and descriptors against the real library, and bad input caught
before any C call (with DeviceArrays that wrap placeholder addresses, never dereferenced)."""
from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

from cudnn_py.calls import algorithms as alg
from cudnn_py import capi
from cudnn_py.errors import WorkspaceLimitError
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops import conv_calls as cv
from helpers import NoCallHandle


def _arr(shape, dtype=np.float32, strides=None, device_id=0):
    return DeviceArray(next(_ADDRESSES), shape, dtype, strides, device_id=device_id)


_ADDRESSES = itertools.count(1 << 30, 1 << 32)  # a new made-up address per array


class _NoC(NoCallHandle):
    """A NoCallHandle with an uncapped workspace (the algorithm choice reads the cap)."""
    workspace = types.SimpleNamespace(cap=None)


def test_parameters_normalise_and_hash():
    a = cv.Convolution(padding=1, stride=(2, 1), math_type="fma")
    b = cv.Convolution(padding=1, stride=(2, 1), math_type=capi.CUDNN_FMA_MATH)
    assert a == b and hash(a) == hash(b) and a != cv.Convolution(padding=1, stride=(2, 1))
    assert a.params(2) == (((1, 1), (1, 1)), (2, 1), (1, 1))
    assert cv.Convolution(padding=((1, 2), 0)).params(2)[0] == ((1, 2), (0, 0))
    with pytest.raises(ValueError, match="spatial dimensions"):
        a.params(3)
    assert a.mode is capi.CUDNN_CROSS_CORRELATION and cv.Convolution(mode="convolution").mode is capi.CUDNN_CONVOLUTION


@pytest.mark.parametrize("kwargs,match", [
    (dict(stride=0), "stride"), (dict(dilation=(1, 0)), "dilation"), (dict(padding=-1), "padding"),
    (dict(padding=((1, 2, 3),)), "pairs"), (dict(groups=0), "groups"), (dict(mode="corr"), "mode"),
    (dict(math_type="tf32"), "math_type"), (dict(layout="CHWN"), "layout"), (dict(stride=2 ** 31), "stride"),
    (dict(padding=2 ** 32 + 1), "padding"), (dict(groups=2 ** 63), "groups"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cv.Convolution(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(padding={1: 2}), dict(padding={1, 2}), dict(stride={2, 1}),
                                    dict(dilation=frozenset((1, 2)))])
def test_unordered_collections_are_refused(kwargs):
    # a set's or dict's iteration order is not the dimensions' (a dict was read as its keys)
    with pytest.raises(TypeError, match="padding|stride|dilation"):
        cv.Convolution(**kwargs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(stride=1.5), "stride"), (dict(padding=2.0), "padding"), (dict(groups=1.0), "groups"),
    (dict(dilation="2"), "dilation"), (dict(padding=None), "padding"), (dict(compute_dtype=None), None),
])
def test_non_int_parameters_are_type_errors(kwargs, match):
    if kwargs.get("compute_dtype", 0) is None:  # None means "default for the data": allowed
        cv.Convolution(**kwargs)
        return
    with pytest.raises(TypeError, match=match):
        cv.Convolution(**kwargs)


@pytest.mark.parametrize("conv,x,w,y", [
    (cv.Convolution(padding=1, stride=2), (2, 3, 9, 9), (4, 3, 3, 3), (2, 4, 5, 5)),
    (cv.Convolution(padding=2, dilation=2), (1, 4, 10), (6, 4, 3), (1, 6, 10)),
    (cv.Convolution(padding=((1, 2), (0, 1))), (2, 3, 9, 8), (4, 3, 3, 2), (2, 4, 10, 8)),
    (cv.Convolution(padding=1, layout="NHWC"), (2, 9, 9, 8), (16, 3, 3, 8), (2, 9, 9, 16)),
    (cv.Convolution(padding=1, groups=4), (2, 8, 5, 6, 7), (8, 2, 3, 3, 3), (2, 8, 5, 6, 7)),
])
def test_output_shape_matches_cudnn(conv, x, w, y):
    assert conv.output_shape(x, w) == y
    if conv.layout == "NCHW" and all(lo == hi for lo, hi in conv.params(len(x) - 2)[0]):
        from cudnn_py.core.descriptors import convolution_output_shape
        pads, st, dil = conv.params(len(x) - 2)
        assert convolution_output_shape(x, w, [p[0] for p in pads], st, dil, groups=conv.groups) == y


def test_geometry_descriptors_read_back():
    conv = cv.Convolution(padding=1, stride=2, groups=2, math_type="tensor_op")
    g = cv.Geometry(conv, ((2, 4, 9, 9), (324, 81, 9, 1)), ((6, 2, 3, 3), (18, 9, 3, 1)), (None, None),
                    np.float16, np.float16)
    assert g.x_desc.shape == (2, 4, 9, 9) and g.x_desc.strides == (324, 81, 9, 1)
    assert g.y_desc.shape == (2, 6, 5, 5) and g.y_desc.dtype is capi.CUDNN_DATA_HALF
    assert g.w_desc.shape == (6, 2, 3, 3) and g.w_desc.layout is capi.CUDNN_TENSOR_NCHW
    cd = g.conv_desc(g.math_type)
    assert cd.padding == (1, 1) and cd.stride == (2, 2) and cd.groups == 2
    assert cd.math_type is capi.CUDNN_TENSOR_OP_MATH and cd.compute_type is capi.CUDNN_DATA_FLOAT


def test_geometry_nhwc_1d_and_asymmetric():
    conv = cv.Convolution(padding=((1, 2), (0, 1)), layout="NHWC")
    g = cv.Geometry(conv, ((2, 7, 6, 4), (168, 24, 4, 1)), ((5, 3, 3, 4), (36, 12, 4, 1)), (None, None),
                    np.float32, np.float32)
    assert g.w_nhwc and g.w_desc.layout is capi.CUDNN_TENSOR_NHWC
    assert g.asym and g.xp_shape == (2, 4, 10, 7) and g.x_desc.shape == (2, 4, 10, 7)
    assert g.xp_strides == (280, 1, 28, 4) and g.interior_offset == 28 * 4
    assert g.conv_desc(g.math_type).padding == (0, 0) and g.out_shape == (2, 8, 5, 5)
    c1 = cv.Convolution(padding=2, dilation=2, stride=3)
    g1 = cv.Geometry(c1, ((2, 3, 10), (30, 10, 1)), ((4, 3, 3), (9, 3, 1)), (None, None), np.float64, np.float64)
    assert g1.x_desc.shape == (2, 3, 1, 10) and g1.y_desc.shape == (2, 4, 1, 4) and g1.out_shape == (2, 4, 4)
    cd = g1.conv_desc(g1.math_type)
    assert cd.padding == (0, 2) and cd.stride == (1, 3) and cd.dilation == (1, 2)
    assert cd.compute_type is capi.CUDNN_DATA_DOUBLE


def test_channels_last_strides_are_nhwc():
    """A torch channels_last tensor: logical NCHW shape, NHWC strides."""
    conv = cv.Convolution(padding=1)
    g = cv.Geometry(conv, ((2, 8, 5, 5), (200, 1, 40, 8)), ((4, 8, 3, 3), (72, 1, 24, 8)), (None, None),
                    np.float32, np.float32)
    assert g.w_nhwc and g.x_desc.strides == (200, 1, 40, 8)
    with pytest.raises(ValueError, match="packed NCHW or channels-last"):
        cv.Geometry(conv, ((2, 8, 5, 5), (200, 25, 5, 1)), ((4, 8, 3, 3), (144, 9, 3, 1)), (None, None),
                    np.float32, np.float32)


BAD = [
    ("channels vs groups", lambda h: cv.convolution_forward(h, cv.Convolution(groups=2), _arr((1, 6, 5, 5)),
                                                             _arr((4, 2, 3, 3))), ValueError, "groups=2"),
    ("filters vs groups", lambda h: cv.convolution_forward(h, cv.Convolution(groups=2), _arr((1, 4, 5, 5)),
                                                            _arr((3, 2, 3, 3))), ValueError, "divide"),
    ("dtype", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                               _arr((4, 3, 3, 3), np.float16)), TypeError, "same dtype"),
    ("y dtype", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)), _arr((4, 3, 3, 3)),
                                                 y=_arr((1, 4, 3, 3), np.float16), engine="legacy"),
     TypeError, "output"),
    ("y shape", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)), _arr((4, 3, 3, 3)),
                                                 y=_arr((1, 4, 5, 5))), ValueError, "does not match"),
    ("rank", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)), _arr((4, 3, 3))),
     ValueError, "dimensions"),
    ("too small", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 2, 2)), _arr((4, 3, 3, 3))),
     ValueError, "larger than input"),
    ("device", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5), device_id=1),
                                                _arr((4, 3, 3, 3)), engine="legacy"), ValueError, "device 1"),
    ("algo name", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)), _arr((4, 3, 3, 3)),
                                                   algo="QUANTUM"), ValueError, "does not exist"),
    ("algo direction", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                                        _arr((4, 3, 3, 3)), algo=capi.CUDNN_CONVOLUTION_BWD_DATA_ALGO_0),
     TypeError, "not a forward algorithm"),
    ("nondeterministic", lambda h: cv.convolution_backward_data(h, cv.Convolution(), _arr((4, 3, 3, 3)),
                                                                _arr((1, 4, 3, 3)), algo="ALGO_0",
                                                                deterministic=True), ValueError, "deterministic"),
    ("dy shape", lambda h: cv.convolution_backward_data(h, cv.Convolution(), _arr((4, 3, 3, 3)), _arr((1, 4, 4, 4)),
                                                        dx=_arr((1, 3, 5, 5))), ValueError, "does not match"),
    ("no w_shape", lambda h: cv.convolution_backward_filter(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                                            _arr((1, 4, 3, 3))), ValueError, "w_shape"),
    ("dw shape", lambda h: cv.convolution_backward_filter(h, cv.Convolution(), _arr((1, 3, 5, 5)), _arr((1, 4, 3, 3)),
                                                          w_shape=(4, 3, 2, 2)), ValueError, "does not match"),
    ("strided w", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                                   _arr((4, 3, 3, 3), strides=(54, 9, 3, 1)), engine="legacy"),
     ValueError, "packed"),
    ("negative limit", lambda h: cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)), _arr((4, 3, 3, 3)),
                                                        workspace_limit=-1), ValueError, "workspace_limit"),
    ("bias size", lambda h: cv.convolution_backward_bias(h, _arr((2, 4, 3, 3)), db=_arr((1, 5, 1, 1))), ValueError,
     "4 elements"),
    ("activation", lambda h: cv.convolution_bias_activation_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                                                    _arr((4, 3, 3, 3)), _arr((4,)),
                                                                    activation="tanh"), ValueError, "activation"),
    ("identity algo", lambda h: cv.convolution_bias_activation_forward(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                                                       _arr((4, 3, 3, 3)), _arr((4,)), algo="FFT",
                                                                       activation="identity"), ValueError,
     "IMPLICIT_PRECOMP_GEMM"),
    ("query direction", lambda h: cv.convolution_algorithms(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                                            _arr((4, 3, 3, 3)), direction="up"), ValueError,
     "direction"),
    ("query method", lambda h: cv.convolution_algorithms(h, cv.Convolution(), _arr((1, 3, 5, 5)),
                                                         _arr((4, 3, 3, 3)), method="guess"), ValueError, "method"),
]


@pytest.mark.parametrize("name,call,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_caught_before_c(name, call, exc, match):
    with pytest.raises(exc, match=match):
        call(_NoC())


def test_host_array_is_rejected():
    with pytest.raises(TypeError, match="to_device"):
        cv.convolution_forward(_NoC(), cv.Convolution(), np.ones((1, 3, 5, 5), np.float32), _arr((4, 3, 3, 3)))


def test_input_shape_inference():
    conv = cv.Convolution(padding=1, stride=2)
    assert conv.input_shape((4, 3, 3, 3), (2, 4, 5, 5)) == (2, 3, 9, 9)
    assert conv.output_shape(conv.input_shape((4, 3, 3, 3), (2, 4, 5, 5)), (4, 3, 3, 3)) == (2, 4, 5, 5)
    nhwc = cv.Convolution(padding=((0, 1), (1, 0)), layout="NHWC")
    assert nhwc.output_shape(nhwc.input_shape((4, 3, 3, 6), (2, 7, 7, 4)), (4, 3, 3, 6)) == (2, 7, 7, 4)


@pytest.mark.parametrize("dtype,want", [(np.float16, "CUDNN_TENSOR_OP_MATH"), (np.float32, "CUDNN_DEFAULT_MATH"),
                                        (np.float64, "CUDNN_DEFAULT_MATH")])
def test_auto_math_type(dtype, want):
    conv = cv.Convolution(padding=1)
    assert conv.math_type is None and "auto" in repr(conv)
    g = cv.Geometry(conv, ((1, 2, 5, 5), (50, 25, 5, 1)), ((2, 2, 3, 3), (18, 9, 3, 1)), (None, None), dtype, dtype)
    assert g.math_type.name == want and g.conv_desc(g.math_type).math_type.name == want
    fma = cv.Convolution(padding=1, math_type="fma")
    g = cv.Geometry(fma, ((1, 2, 5, 5), (50, 25, 5, 1)), ((2, 2, 3, 3), (18, 9, 3, 1)), (None, None), dtype, dtype)
    assert g.math_type is capi.CUDNN_FMA_MATH


def test_plans_live_in_the_handles_cache(monkeypatch):
    """Plans are the handle's (listed and cleared through it, bounded like every Cache), keyed without the device;
    another handle makes its own."""
    from cudnn_py.core.caches import Cache
    from cudnn_py.core.handle import Handle
    monkeypatch.setattr(cv, "_choose", lambda *a: (capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                   capi.CUDNN_DEFAULT_MATH, 0))
    h, other = _NoC(), _NoC()
    conv, x, w, y = cv.Convolution(padding=1), _arr((1, 3, 5, 5)), _arr((4, 3, 3, 3)), _arr((1, 4, 5, 5))
    for handle in (h, h, other):
        with pytest.raises(AssertionError, match="cuDNN call"):  # planned, then reached the C call
            cv.convolution_forward(handle, conv, x, w, y=y, engine="legacy")
    assert Handle.cache_info(h) == {cv.PLANS: 1} and Handle.cache_info(other) == {cv.PLANS: 1}
    plans = h.cache[cv.PLANS]
    assert isinstance(plans, Cache) and plans.maxsize >= 1
    (key, plan), = plans.items()
    assert key == ("forward", conv, (x.shape, x.strides, x.dtype, 0), (w.shape, w.strides, w.dtype, 0),
                   (y.shape, y.strides, y.dtype, 0), "heuristic", False, None)
    assert plan.algo is capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM and plan.ws == 0
    Handle.clear_caches(h)
    assert Handle.cache_info(h) == {} and Handle.cache_info(other) == {cv.PLANS: 1}


def test_output_shapes_are_ints(monkeypatch):
    """x_shape / w_shape are checked like every shape argument: a float entry is refused, not truncated."""
    monkeypatch.setattr(cv, "_choose", lambda *a: (capi.CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, capi.CUDNN_DEFAULT_MATH, 0))
    monkeypatch.setattr(cv, "new_output", lambda handle, shape, dtype: _arr(shape, dtype))
    conv, w, dy = cv.Convolution(), _arr((4, 3, 3, 3)), _arr((1, 4, 3, 3))
    with pytest.raises(TypeError, match="x_shape must contain only ints"):
        cv.convolution_backward_data(_NoC(), conv, w, dy, x_shape=(1, 3, 5.5, 5), engine="legacy")
    with pytest.raises(ValueError, match="w_shape must be >= 1"):
        cv.convolution_backward_filter(_NoC(), conv, _arr((1, 3, 5, 5)), dy, w_shape=(4, 3, 0, 3), engine="legacy")
    with pytest.raises(AssertionError, match="cuDNN call"):  # planned, then reached the C call
        cv.convolution_backward_data(_NoC(), conv, w, dy, x_shape=(1, 3, np.int64(5), 5), engine="legacy")


def test_scaling_factors_follow_the_compute_type(monkeypatch):
    """alpha/beta are double for double compute, float otherwise."""
    monkeypatch.setattr(cv, "_choose", lambda *a: (capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                   capi.CUDNN_DEFAULT_MATH, 0))
    for dtype, ctype in ((np.float64, "c_double"), (np.float32, "c_float"), (np.float16, "c_float")):
        h = _NoC()
        with pytest.raises(AssertionError):
            cv.convolution_forward(h, cv.Convolution(), _arr((1, 3, 5, 5), dtype), _arr((4, 3, 3, 3), dtype),
                                   y=_arr((1, 4, 3, 3), dtype), engine="legacy")
        (p,) = h.cache[cv.PLANS].values()
        al, be = cv.scalars(p.scaling, 0.5, 2.0)
        assert type(al._obj).__name__ == ctype and (al._obj.value, be._obj.value) == (0.5, 2.0)


class _Workspace:
    """A workspace with a cap whose device allocations above ``free`` bytes fail (as cuda.core's do)."""

    def __init__(self, cap=None, free=None):
        self.cap, self.free, self.asked = cap, free, []

    def get(self, nbytes, stream=None):
        self.asked.append(nbytes)
        if self.cap is not None and nbytes > self.cap:
            raise WorkspaceLimitError(f"{nbytes} > cap {self.cap}")
        if self.free is not None and nbytes > self.free:
            raise RuntimeError("CUDA_ERROR_OUT_OF_MEMORY")
        return 0x1000


def test_find_workspace_falls_back_to_smaller_needs():
    h = types.SimpleNamespace(stream=None, workspace=_Workspace(free=5000))
    assert alg.find_workspace(h, [0, 8000, 4096, 6000], None) == (0x1000, 4096)
    assert h.workspace.asked == [8000, 6000, 4096]  # largest first, each distinct need once
    h.workspace = _Workspace(free=100)
    assert alg.find_workspace(h, [0, 8000, 4096], None) == (None, 0)  # nothing fits: Find runs without
    h.workspace = _Workspace(free=None)
    assert alg.find_workspace(h, [8000, 4096], 5000) == (0x1000, 5000)  # the limit caps the request
    assert alg.find_workspace(h, [0], None) == (None, 0) and alg.find_workspace(h, [], 100) == (None, 0)


def test_lowered_workspace_cap_chooses_again(monkeypatch):
    """A plan made under a larger cap is made again under the lowered one, not refused (nothing reaches C)."""
    chosen = []

    def resolve(handle, g, direction, spec, deterministic, limit, in_ptrs):  # algorithm 1 needs 1 MiB, 0 none
        chosen.append(limit)
        return alg.algorithm_enum(direction)(limit is None), capi.CUDNN_DEFAULT_MATH, (limit is None) << 20
    monkeypatch.setattr(cv, "_choose", resolve)
    h = _NoC()
    h.workspace = _Workspace()
    conv, x, w, y = cv.Convolution(padding=1), _arr((1, 3, 5, 5)), _arr((4, 3, 3, 3)), _arr((1, 4, 5, 5))
    for call in (lambda: cv.convolution_forward(h, conv, x, w, y=y, engine="legacy"),
                 lambda: cv.convolution_backward_data(h, conv, w, y, dx=x, engine="legacy"),
                 lambda: cv.convolution_backward_filter(h, conv, x, y, dw=w, engine="legacy")):
        h.workspace.cap = None
        chosen.clear()
        with pytest.raises(AssertionError, match="cuDNN call"):  # reached the C call with a 1 MiB workspace
            call()
        h.workspace.cap = 1000
        with pytest.raises(AssertionError, match="cuDNN call"):  # chose again under the cap
            call()
        assert chosen == [None, 1000]
    assert sorted(p.ws for p in h.cache[cv.PLANS].values()) == [0, 0, 0]
    assert h.workspace.asked == []  # the plans are checked against the cap: no refused 1 MiB is asked for


# ---------------------------------------------------------------- Convolution: the one class of the concept

def test_settings_read_back_and_cannot_be_reassigned():
    conv = cv.Convolution(((1, 2), 0), (2, 1), 2, 3, mode="CONVOLUTION", math_type="tensor_op",
                          compute_dtype="float32", layout="nhwc")
    assert conv.padding == ((1, 2), 0) and conv.stride == (2, 1) and conv.dilation == 2 and conv.groups == 3
    assert conv.mode is capi.CUDNN_CONVOLUTION and conv.math_type is capi.CUDNN_TENSOR_OP_MATH
    assert conv.compute_dtype is capi.CUDNN_DATA_FLOAT and conv.layout == "NHWC"
    assert "compute_dtype=CUDNN_DATA_FLOAT" in repr(conv) and "layout=NHWC" in repr(conv)
    with pytest.raises(AttributeError):
        conv.padding = 3
    auto = cv.Convolution(math_type="AUTO")
    assert auto.math_type is None and auto == cv.Convolution(math_type=None) == cv.Convolution()
    assert cv.Convolution(layout="nchw") == cv.Convolution()  # layouts in any case, one canonical spelling


def test_compute_type_is_the_deprecated_compute_dtype():
    with pytest.warns(DeprecationWarning, match="compute_type= is deprecated, use compute_dtype="):
        conv = cv.Convolution(compute_type=np.float64)
    assert conv == cv.Convolution(compute_dtype="float64") and conv.compute_dtype is capi.CUDNN_DATA_DOUBLE
    with pytest.warns(DeprecationWarning, match="Convolution.compute_type is deprecated, use compute_dtype"):
        assert conv.compute_type is capi.CUDNN_DATA_DOUBLE
    with pytest.raises(TypeError, match="both compute_dtype= and its old spelling compute_type="):
        cv.Convolution(compute_type="float64", compute_dtype="float64")
    with pytest.raises(TypeError, match="unexpected keyword argument 'format'"):
        cv.Convolution(format="NHWC")


@pytest.mark.parametrize("dtype,compute,math", [
    ("float32", "CUDNN_DATA_FLOAT", "CUDNN_DEFAULT_MATH"), ("float16", "CUDNN_DATA_FLOAT", "CUDNN_TENSOR_OP_MATH"),
    ("bf16", "CUDNN_DATA_FLOAT", "CUDNN_TENSOR_OP_MATH"), ("float64", "CUDNN_DATA_DOUBLE", "CUDNN_DEFAULT_MATH"),
    ("int8", "CUDNN_DATA_INT32", "CUDNN_DEFAULT_MATH")])
def test_what_the_settings_give_for_data(dtype, compute, math):
    conv = cv.Convolution()
    assert conv.compute_for(dtype).name == compute and conv.math_for(dtype).name == math
    fixed = cv.Convolution(math_type="fma", compute_dtype="float32")
    assert fixed.compute_for(dtype) is capi.CUDNN_DATA_FLOAT and fixed.math_for(dtype) is capi.CUDNN_FMA_MATH


def test_descriptor_is_shared_per_dimensions_accumulation_and_math():
    from cudnn_py.core import caches
    conv = cv.Convolution(padding=(1, 2), stride=2, dilation=(1, 3), groups=2, mode="convolution")
    ptr = conv.descriptor(2)
    d = conv._shared_descriptor(2, "float32", None)  # the object behind it, which reads the settings back
    assert isinstance(ptr, capi.cudnnConvolutionDescriptor_t) and ptr is d.ptr and conv.descriptor(2) is ptr
    assert cv.Convolution(padding=(1, 2), stride=2, dilation=(1, 3), groups=2, mode="convolution").descriptor(2) is ptr
    assert d.padding == (1, 2) and d.stride == (2, 2) and d.dilation == (1, 3) and d.groups == 2
    assert d.mode is capi.CUDNN_CONVOLUTION and d.compute_dtype is capi.CUDNN_DATA_FLOAT
    assert d.math_type is capi.CUDNN_DEFAULT_MATH
    assert any(v is d for v in caches.shared("descriptors.convolution").values())
    d.close()  # shared: a no-op
    assert not d.closed
    half = conv._shared_descriptor(2, "float16", None)
    assert half is not d and half.math_type is capi.CUDNN_TENSOR_OP_MATH
    assert conv._shared_descriptor(2, "float64", None).compute_dtype is capi.CUDNN_DATA_DOUBLE
    assert conv._shared_descriptor(2, "float32", "fma").math_type is capi.CUDNN_FMA_MATH
    one_d = cv.Convolution(padding=2, stride=3, dilation=2)._shared_descriptor(1, "float32", None)  # run as 2-D
    assert one_d.padding == (0, 2) and one_d.stride == (1, 3) and one_d.dilation == (1, 2)
    asym = cv.Convolution(padding=((1, 2), 1))._shared_descriptor(2, "float32", None)
    assert asym.padding == (0, 0)  # asymmetric: x is padded instead
    with pytest.raises(ValueError, match="entries but the data has 3"):
        conv.descriptor(3)
    with pytest.raises(ValueError, match="nd must be 1, 2 or 3"):
        conv.descriptor(4)


def test_old_descriptor_names_warn_and_build_a_convolution():
    from cudnn_py.core import descriptors as D
    with pytest.warns(DeprecationWarning, match="ConvolutionDescriptor is deprecated, use cudnn_py.Convolution"):
        c = D.ConvolutionDescriptor((1, 2, 3), (2, 1, 1), 2, mode="convolution", compute_type=np.float64,
                                    groups=4, math_type="fma")
    assert type(c) is cv.Convolution and c.params(3)[0] == ((1, 1), (2, 2), (3, 3)) and c.dilation == 2
    assert c.compute_dtype is capi.CUDNN_DATA_DOUBLE and c.groups == 4 and c.math_type is capi.CUDNN_FMA_MATH
    assert isinstance(c.descriptor(3, dtype="float64"), capi.cudnnConvolutionDescriptor_t)  # the shared C one
    with pytest.warns(DeprecationWarning, match="convolution_descriptor is deprecated"):
        s = D.convolution_descriptor(1, 2)
    assert s == cv.Convolution(1, 2, math_type="default", compute_dtype="float32")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="padding must be >= 0"):
        D.ConvolutionDescriptor(padding=-1)
    # the shape helper is not deprecated and does not warn
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert D.convolution_output_shape((1, 3, 8, 8), (4, 3, 3, 3), padding=1) == (1, 4, 8, 8)


def test_bias_activation_takes_alpha_and_beta():
    conv, x, w, b = cv.Convolution(padding=1), _arr((1, 3, 5, 5)), _arr((4, 3, 3, 3)), _arr((4,))
    with pytest.raises(ValueError, match="beta scales z"):
        cv.convolution_bias_activation_forward(_NoC(), conv, x, w, b, beta=0.5)
    with pytest.warns(DeprecationWarning, match="alpha2= is deprecated, use beta="), \
            pytest.raises(ValueError, match="beta scales z"):
        cv.convolution_bias_activation_forward(_NoC(), conv, x, w, b, alpha2=0.5)
    with pytest.raises(TypeError, match="both alpha= and its old spelling alpha1="):
        cv.convolution_bias_activation_forward(_NoC(), conv, x, w, b, alpha=2.0, alpha1=2.0)


def test_auto_engine_takes_the_graph_where_it_can_and_autotune_is_one_spelling(monkeypatch):
    """engine="auto" (the default) hands the call to the graph path unless an option only the legacy call has is
    set; autotune=True is the one spelling of "measure and keep the fastest" (algo="fastest" warns)."""
    conv, fma = cv.Convolution(padding=1), cv.Convolution(padding=1, math_type="fma")
    assert cv._algo("f", "heuristic", False) == "heuristic" and cv._algo("f", "heuristic", True) == "fastest"
    assert cv._takes("heuristic", False, None, conv) and cv._takes("fastest", False, None, conv)
    for args in (("IMPLICIT_GEMM", False, None, conv), ("heuristic", True, None, conv),
                 ("heuristic", False, 1 << 20, conv), ("heuristic", False, None, fma)):
        assert not cv._takes(*args), args
    with pytest.warns(DeprecationWarning, match=r"f\(algo='fastest'\) is deprecated, use autotune=True"):
        assert cv._algo("f", "fastest", False) == "fastest"
    with pytest.raises(ValueError, match="autotune=True measures the algorithms itself"):
        cv._algo("f", "IMPLICIT_GEMM", True)
    with pytest.raises(TypeError, match="autotune must be True or False"):
        cv._algo("f", "heuristic", "yes")
    x0, w0 = DeviceArray(1 << 30, (1, 2, 5, 5), np.float32), DeviceArray(1 << 31, (3, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="expected 'legacy', 'graph' or 'auto'"):
        cv.convolution_forward(_NoC(), conv, x0, w0, engine="backend")
    calls, measured = [], []
    monkeypatch.setattr(cv, "graph_conv", types.SimpleNamespace(
        convolution=lambda *a, **k: calls.append((a[0], k["engine"], k["algo"])) or y))

    def measure(handle, key, legacy, graph, **kw):  # engine_choice.run: the graph wins
        measured.append((key[0], kw["static"]))
        graph()
        return "graph"
    from cudnn_py.calls import engine_choice
    monkeypatch.setattr(engine_choice, "run", measure)
    x, w = DeviceArray(1 << 30, (1, 2, 5, 5), np.float32), DeviceArray(1 << 31, (3, 2, 3, 3), np.float32)
    y = DeviceArray(1 << 32, (1, 3, 5, 5), np.float32)
    h = _NoC()
    assert cv.convolution_forward(h, conv, x, w, autotune=True, engine="graph") is y
    assert cv.convolution_forward(h, conv, x, w, autotune=True) is y  # "auto": engine_choice measures
    assert calls == [("forward", "graph", "fastest")] * 2 and measured == [("convolution_forward", "graph")]
    assert Handle.cache_info(h) == {}  # a stand-in handle keeps no prepared calls (nor routes: there are none)
