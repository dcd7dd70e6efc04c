"""Pooling: reference self-checks, descriptors against the real library, bad input (CPU); forward/backward on the GPU."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.core import descriptors
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.ops.pooling import Pooling, pooling_backward, pooling_forward
from reference import pooling as ref
from reference.tensor_ops import assert_close
from helpers import NoCallHandle, fake, numeric_gradient

MODES = {"max": "max", "max_deterministic": "max", "avg_include_padding": "avg_include",
         "avg_exclude_padding": "avg_exclude"}
# (x shape, window, padding, stride): 2-D with and without padding/overlap, 3-D, 1-D
CASES = [((2, 3, 8, 9), (2, 2), (0, 0), (2, 2)),
         ((2, 4, 7, 6), (3, 3), (1, 1), (2, 1)),
         ((1, 3, 5, 6, 7), (2, 3, 2), (1, 1, 0), (2, 2, 1)),
         ((2, 3, 11), (3,), (1,), (2,))]


def PoolingDescriptor(*args, **kw):
    """The deprecated cudnn_py.core.descriptors.PoolingDescriptor: it warns, then makes the Pooling of its settings."""
    with pytest.warns(DeprecationWarning, match="PoolingDescriptor is deprecated, use cudnn_py.Pooling"):
        return descriptors.PoolingDescriptor(*args, **kw)


# ---------------------------------------------------------------- CPU

@pytest.mark.parametrize("mode", ["max", "avg_include", "avg_exclude"])
@pytest.mark.parametrize("shape,win,pad,st", CASES[:3])
def test_reference_backward_is_the_gradient(rng, mode, shape, win, pad, st):
    x = ref.distinct_values(shape, rng).astype(np.float64)
    dy = rng.standard_normal(ref.output_shape(shape, win, pad, st))
    got = ref.backward(x, dy, mode, win, pad, st)
    np.testing.assert_allclose(got, numeric_gradient(lambda: (ref.forward(x, mode, win, pad, st) * dy).sum(), x), atol=1e-8)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("shape,win,pad,st", CASES)
def test_descriptor_round_trip_and_output_shape_match_cudnn(mode, shape, win, pad, st):
    pool = Pooling(mode, win, pad, st)
    nd = len(shape) - 2
    d = pool.descriptor(nd)
    n = max(nd, 2)
    m, nan, k = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    w, p, s = (ctypes.c_int * 8)(), (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
    capi.cudnnGetPoolingNdDescriptor(d, n, ctypes.byref(m), ctypes.byref(nan), ctypes.byref(k), w, p, s)
    one = (1,) if nd == 1 else ()
    assert (m.value, k.value) == (int(pool.mode), n)
    assert tuple(w[:n]) == one + win and tuple(p[:n]) == (0,) * len(one) + pad and tuple(s[:n]) == one + st
    expect = ref.output_shape(shape, win, pad, st)
    assert pool.output_shape(shape) == expect
    if nd >= 2:  # the same dims, asked of cuDNN
        xd = capi.cudnnTensorDescriptor_t()
        capi.cudnnCreateTensorDescriptor(ctypes.byref(xd))
        strides = np.cumprod((1,) + shape[:0:-1])[::-1]
        capi.cudnnSetTensorNdDescriptor(xd, capi.CUDNN_DATA_FLOAT, len(shape), (ctypes.c_int * len(shape))(*shape),
                                        (ctypes.c_int * len(shape))(*map(int, strides)))
        out = (ctypes.c_int * len(shape))()
        capi.cudnnGetPoolingNdForwardOutputDim(d, xd, len(shape), out)
        capi.cudnnDestroyTensorDescriptor(xd)
        assert tuple(out) == expect


def test_pooling_is_hashable_and_stride_defaults_to_window():
    assert Pooling("max", 3) == Pooling(capi.CUDNN_POOLING_MAX, 3, 0, 3)
    assert len({Pooling("max", 2), Pooling("max", 2), Pooling("avg_exclude_padding", 2)}) == 2
    assert "avg_exclude_padding" in repr(Pooling("avg_exclude_padding", 2))


def test_settings_read_back_and_spellings():
    p = Pooling("AVG", (3, 2), 1, nan_propagation=True)
    assert p.mode is capi.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
    assert (p.window, p.padding, p.stride, p.nan_propagation) == ((3, 2), 1, (3, 2), True)
    assert p.params(2) == ((3, 2), (1, 1), (3, 2))
    assert repr(p) == "Pooling('avg_exclude_padding', window=(3, 2), padding=1, stride=(3, 2), nan_propagation=True)"
    for spelling in ("max", "MAX", "CUDNN_POOLING_MAX", capi.CUDNN_POOLING_MAX, int(capi.CUDNN_POOLING_MAX)):
        assert Pooling(spelling).mode is capi.CUDNN_POOLING_MAX
    assert Pooling("avg_include_padding").mode is capi.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
    assert Pooling().nan_propagation is False and Pooling(nan_propagation=capi.CUDNN_PROPAGATE_NAN).nan_propagation
    with pytest.raises(AttributeError):
        p.window = 5  # the settings are fixed: the shared descriptors were made from them


def test_equal_poolings_share_one_c_descriptor_per_rank():
    a, b = Pooling("max", 2), Pooling("max", (2, 2), 0, 2)
    assert a.descriptor(2).value == b.descriptor(2).value
    assert a.descriptor(3).value != a.descriptor(2).value
    assert Pooling("max", 3).descriptor(2).value != a.descriptor(2).value
    assert Pooling("max", 2, nan_propagation=True).descriptor(2).value != a.descriptor(2).value


@pytest.mark.parametrize("kw,exc,words", [
    (dict(mode="mean"), InvalidValueError, "pooling mode must be one of"),
    (dict(mode=1.0), InvalidTypeError, "pooling mode"),
    (dict(window=0), InvalidValueError, "window must be >= 1"),
    (dict(window=2.0), InvalidTypeError, "window"),
    (dict(padding=-1), InvalidValueError, "padding must be >= 0"),
    (dict(stride=(1, 2, 3, 4)), InvalidValueError, "stride needs 1 to 3 values"),
    (dict(window=2 ** 31), InvalidValueError, "window must be <= 2147483647"),
    (dict(nan_propagation="yes"), InvalidValueError, "nan_propagation"),
    (dict(nan_propagation=0.5), InvalidTypeError, "nan_propagation"),
])
def test_validation_names_the_parameter(kw, exc, words):
    with pytest.raises(exc, match=words):
        Pooling(**kw)


def test_window_and_padding_beyond_the_c_int_range():
    with pytest.raises(InvalidValueError, match="exceed cuDNN's int range"):
        Pooling("max", 2 ** 31 - 2, 2 ** 30).params(2)


def test_old_names_warn_and_still_work():
    d = PoolingDescriptor("avg", 3, 1, 2)
    assert d == Pooling("avg", 3, 1, 2) and d.descriptor(2).value == Pooling("avg", 3, 1, 2).descriptor(2).value
    with pytest.warns(DeprecationWarning, match="pooling_descriptor is deprecated"):
        shared = descriptors.pooling_descriptor("max", 2)
    assert shared.descriptor(2).value == Pooling("max", 2).descriptor(2).value  # the one shared descriptor
    assert descriptors.pooling_output_shape((2, 3, 9, 9), "avg", 3, 1, 2) == (2, 3, 5, 5)  # the old path


@pytest.mark.parametrize("call,exc,words", [
    (lambda h: pooling_forward(h, Pooling("max", 2), fake((2, 3, 8, 8)), y=fake((2, 3, 5, 4))),
     ValueError, "y has shape"),
    (lambda h: pooling_forward(h, Pooling("max", 2), fake((2, 3, 8, 8)),
                               y=fake((2, 3, 4, 4), np.float16)), TypeError, "dtype"),
    (lambda h: pooling_forward(h, Pooling("max", 2), np.zeros((2, 3, 8, 8), np.float32)), TypeError, "to_device"),
    (lambda h: pooling_forward(h, Pooling("max", 2), fake((2, 8))), ValueError, "spatial"),
    (lambda h: pooling_forward(h, Pooling("max", 5), fake((1, 1, 3, 3))), ValueError, "does not fit"),
    (lambda h: pooling_forward(h, Pooling("max", (2, 2)), fake((1, 1, 4, 4, 4))), ValueError, "window"),
    (lambda h: pooling_forward(h, Pooling("max", 2), fake((2, 3, 8, 8), np.int32)), TypeError, "float"),
    (lambda h: pooling_forward(h, "max", fake((2, 3, 8, 8))), TypeError, "Pooling"),
    (lambda h: pooling_backward(h, Pooling("max", 2), fake((2, 3, 8, 8)), fake((2, 3, 4, 4)),
                                fake((2, 3, 4, 5))), ValueError, "dy has shape"),
    (lambda h: pooling_backward(h, Pooling("max", 2), fake((2, 3, 8, 8)), fake((2, 3, 4, 4)),
                                fake((2, 3, 4, 4)), dx=fake((2, 3, 8, 7))), ValueError, "dx has shape"),
    (lambda h: pooling_backward(h, Pooling("max", 2), fake((2, 3, 8, 8)), fake((2, 3, 4, 4)),
                                fake((2, 3, 4, 4), np.float64)), TypeError, "dy has dtype"),
    (lambda h: pooling_forward(h, PoolingDescriptor("max", (2, 2, 2)), fake((2, 3, 8, 8))),
     ValueError, "window"),
])
def test_bad_input_is_rejected_before_c(call, exc, words):
    with pytest.raises(exc, match=words):
        call(NoCallHandle())


@pytest.mark.parametrize("bad", [dict(mode="mean"), dict(window=0), dict(window=(2, 2, 2, 2)),
                                 dict(padding=-1)])
def test_bad_parameters(bad):
    kw = dict(mode="max", window=2) | bad
    with pytest.raises(ValueError):
        Pooling(**kw).output_shape((1, 1, 8, 8))


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("shape,win,pad,st", CASES)
def test_forward_backward_match_reference(handle, rng, dtype, mode, shape, win, pad, st):
    import cudnn_py as cudnn
    pool = Pooling(mode, win, pad, st)
    x = ref.distinct_values(shape, rng, dtype)
    y_shape = ref.output_shape(shape, win, pad, st)
    dy = rng.standard_normal(y_shape).astype(dtype)
    xd = cudnn.to_device(x)
    y = pooling_forward(handle, pool, xd, y=cudnn.to_device(np.full(y_shape, np.nan, dtype)), engine="legacy")
    y_ref = ref.forward(x, MODES[mode], win, pad, st)
    assert_close(y.to_numpy(), y_ref, dtype)
    dx = pooling_backward(handle, pool, xd, y, cudnn.to_device(dy), dx=cudnn.to_device(np.full(shape, np.nan, dtype)),
                          engine="legacy")
    assert_close(dx.to_numpy(), ref.backward(x, dy, MODES[mode], win, pad, st), dtype)


@pytest.mark.gpu
def test_alpha_beta_and_allocated_outputs(handle, rng):
    import cudnn_py as cudnn
    pool = Pooling("avg_exclude_padding", 3, 1, 2)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    y_ref = ref.forward(x, "avg_exclude", (3, 3), (1, 1), (2, 2))
    y0 = rng.standard_normal(y_ref.shape).astype(np.float32)
    xd = cudnn.to_device(x)
    y = pooling_forward(handle, pool, xd, engine="legacy")  # allocated
    assert y.shape == y_ref.shape
    assert_close(y.to_numpy(), y_ref, np.float32)
    y2 = pooling_forward(handle, pool, xd, y=cudnn.to_device(y0), alpha=0.5, beta=-2.0, engine="legacy")
    assert_close(y2.to_numpy(), 0.5 * y_ref - 2.0 * y0, np.float32)
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    dx0 = rng.standard_normal(x.shape).astype(np.float32)
    dx = pooling_backward(handle, pool, xd, y, cudnn.to_device(dy), dx=cudnn.to_device(dx0), alpha=2.0, beta=0.25,
                          engine="legacy")
    assert_close(dx.to_numpy(), 2.0 * ref.backward(x, dy, "avg_exclude", (3, 3), (1, 1), (2, 2)) + 0.25 * dx0,
                 np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["max", "avg_include_padding"])
def test_channels_last_arrays(handle, rng, mode):
    """x, y, dy and dx in NHWC memory (logical N, C, H, W with channels-last strides)."""
    from cudnn_py.ops.tensor_ops import transform_tensor
    import cudnn_py as cudnn
    pool = Pooling(mode, 3, 1, 2)
    x = ref.distinct_values((2, 4, 7, 6), rng)
    y_ref = ref.forward(x, MODES[mode], (3, 3), (1, 1), (2, 2))
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    xn = transform_tensor(handle, cudnn.to_device(x), layout="NHWC", engine="legacy")
    yn = transform_tensor(handle, cudnn.to_device(np.full(y_ref.shape, np.nan, np.float32)), layout="NHWC",
                          engine="legacy")
    assert not xn.is_contiguous and xn.strides[1] == 1
    pooling_forward(handle, pool, xn, y=yn, engine="legacy")
    assert_close(yn.to_numpy(), y_ref, np.float32)
    dyn = transform_tensor(handle, cudnn.to_device(dy), layout="NHWC", engine="legacy")
    dxn = transform_tensor(handle, cudnn.to_device(np.full(x.shape, np.nan, np.float32)), layout="NHWC",
                           engine="legacy")
    pooling_backward(handle, pool, xn, yn, dyn, dx=dxn, engine="legacy")
    assert_close(dxn.to_numpy(), ref.backward(x, dy, MODES[mode], (3, 3), (1, 1), (2, 2)), np.float32)


@pytest.mark.gpu
def test_core_pooling_descriptor_and_raw_capi_path(handle, rng):
    """The same max pooling through the deprecated PoolingDescriptor (a Pooling now) and through capi calls by hand."""
    import cudnn_py as cudnn
    x = ref.distinct_values((2, 3, 6, 8), rng)
    y_ref = ref.forward(x, "max", (2, 2), (0, 0), (2, 2))
    xd = cudnn.to_device(x)
    y = pooling_forward(handle, PoolingDescriptor("max", 2, 0, 2), xd, engine="legacy")
    assert_close(y.to_numpy(), y_ref, np.float32)

    pd, xdesc, ydesc = capi.cudnnPoolingDescriptor_t(), capi.cudnnTensorDescriptor_t(), capi.cudnnTensorDescriptor_t()
    capi.cudnnCreatePoolingDescriptor(ctypes.byref(pd))
    capi.cudnnSetPooling2dDescriptor(pd, capi.CUDNN_POOLING_MAX, capi.CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2)
    for d, s in ((xdesc, x.shape), (ydesc, y_ref.shape)):
        capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
        capi.cudnnSetTensor4dDescriptor(d, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, *s)
    n, c, hh, ww = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    capi.cudnnGetPooling2dForwardOutputDim(pd, xdesc, *(ctypes.byref(v) for v in (n, c, hh, ww)))
    assert (n.value, c.value, hh.value, ww.value) == y_ref.shape
    yraw = cudnn.to_device(np.full(y_ref.shape, np.nan, np.float32))
    capi.cudnnPoolingForward(handle.ptr, pd, ctypes.byref(ctypes.c_float(1.0)), xdesc, xd.ptr,
                             ctypes.byref(ctypes.c_float(0.0)), ydesc, yraw.ptr)
    assert_close(yraw.to_numpy(), y_ref, np.float32)
    for d in (xdesc, ydesc):
        capi.cudnnDestroyTensorDescriptor(d)
    capi.cudnnDestroyPoolingDescriptor(pd)


@pytest.mark.gpu
def test_torch_tensors_in_and_out(handle, rng):
    """torch CUDA tensors are used in place (DLPack / CUDA array interface), including a channels-last one."""
    torch = pytest.importorskip("torch")
    x_np = ref.distinct_values((2, 3, 8, 8), rng)
    x = torch.from_numpy(x_np).cuda().contiguous(memory_format=torch.channels_last)
    y = torch.full((2, 3, 4, 4), float("nan"), device="cuda")
    out = pooling_forward(handle, Pooling("max", 2), x, y=y, engine="legacy")
    assert out is y
    torch.cuda.synchronize()
    assert_close(y.cpu().numpy(), ref.forward(x_np, "max", (2, 2), (0, 0), (2, 2)), np.float32)


# ---------------------------------------------------------------- engine="graph"

from cudnn_py.graph.legacy import GraphPathRefused  # noqa: E402
import engine_helpers as E  # noqa: E402


@pytest.mark.parametrize("call,words", [
    (lambda h: pooling_forward(h, Pooling("max", 2), fake((1, 2, 4, 4)), y=fake((1, 2, 2, 2)), alpha=2.0,
                               engine="graph"), "alpha 1 and beta 0"),
    (lambda h: pooling_backward(h, Pooling("avg_include_padding", 2), fake((1, 2, 4, 4)), fake((1, 2, 2, 2)),
                                fake((1, 2, 2, 2)), dx=fake((1, 2, 4, 4)), beta=1.0, engine="graph"),
     "alpha 1 and beta 0"),
    (lambda h: pooling_forward(h, Pooling("max", 2), fake((1, 2, 4, 4), np.float64), y=fake((1, 2, 2, 2), np.float64),
                               engine="graph"), "float64"),
])
def test_graph_engine_refusals_before_c(call, words):
    with pytest.raises(GraphPathRefused, match=words):
        call(NoCallHandle())


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("shape,win,pad,st", CASES)
def test_graph_engine_forward_backward_match_reference(handle, rng, dtype, layout, mode, shape, win, pad, st):
    pool = Pooling(mode, win, pad, st)
    size = int(np.prod(shape))  # distinct values exact in dtype (max pooling's backward needs no ties)
    x = rng.choice(np.unique(E.rounded(np.linspace(-4, 4, 8 * size), dtype)), size, replace=False).reshape(shape)
    y_shape = ref.output_shape(shape, win, pad, st)
    dy = E.rounded(rng.standard_normal(y_shape), dtype)
    xd = E.on_device(x, dtype, layout)
    engine = "graph"
    if dtype == "bfloat16" and layout == "NHWC" and len(shape) < 5:
        # measured on cuDNN 9.19: the channels-last bfloat16 2-D engine answers wrong; the graph says so
        from cudnn_py.graph import GraphNotSupportedError
        with pytest.raises(GraphNotSupportedError, match="bfloat16"):
            pooling_forward(handle, pool, xd, y=E.poisoned(y_shape, dtype, layout), engine="graph")
        engine = "auto"  # the legacy call
    y = pooling_forward(handle, pool, xd, y=E.poisoned(y_shape, dtype, layout), engine=engine)
    E.assert_close(E.host(y), ref.forward(x, MODES[mode], win, pad, st), dtype)
    dx = pooling_backward(handle, pool, xd, y, E.on_device(dy, dtype, layout), dx=E.poisoned(shape, dtype, layout),
                          engine=engine)
    E.assert_close(E.host(dx), ref.backward(x, dy, MODES[mode], win, pad, st), dtype, scale=2)


@pytest.mark.gpu
@pytest.mark.parametrize("engine", ["graph", "auto"])
def test_graph_engine_allocates_in_x_layout(handle, rng, engine):
    """Outputs allocated by the graph path (and by the default, 'auto', for channels-last x) keep x's memory
    order (NHWC x: NHWC y and dx)."""
    pool = Pooling("max", 3, 1, 2)
    x = ref.distinct_values((2, 8, 9, 10), rng)
    xd = E.on_device(x, "float32", "NHWC")
    y = pooling_forward(handle, pool, xd, engine=engine)
    assert y.strides == E.layout_strides(y.shape, "NHWC")
    E.assert_close(E.host(y), ref.forward(x, "max", (3, 3), (1, 1), (2, 2)), "float32")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = pooling_backward(handle, pool, xd, y, E.on_device(dy, "float32", "NHWC"), engine=engine)
    assert dx.strides == xd.strides
    E.assert_close(E.host(dx), ref.backward(x, dy, "max", (3, 3), (1, 1), (2, 2)), "float32")


@pytest.mark.gpu
def test_graph_engine_mixed_layouts_refused_and_auto_answers(handle, rng):
    """x channels-last, y NCHW: the graph path refuses before cuDNN; 'auto' (the default) answers via legacy."""
    pool = Pooling("max", 2)
    x = ref.distinct_values((2, 8, 6, 6), rng)
    xd = E.on_device(x, "float32", "NHWC")
    with pytest.raises(GraphPathRefused, match="one memory order"):
        pooling_forward(handle, pool, xd, y=E.poisoned((2, 8, 3, 3), "float32"), engine="graph")
    y = pooling_forward(handle, pool, xd, y=E.poisoned((2, 8, 3, 3), "float32"))
    E.assert_close(E.host(y), ref.forward(x, "max", (2, 2), (0, 0), (2, 2)), "float32")


def _recorded_pooling(monkeypatch, engine, pool, x, y, dy=None, dx=None):
    """What one call hands C (legacy: each launched descriptor's shape and strides) or the graph runner (each
    run_graph's configuration, inputs' and outputs' names, shapes and strides), nothing run."""
    from cudnn_py.graph import legacy as gl
    from cudnn_py.ops import _common, pooling as P
    from helpers import fake_array, fake_cudnn_handle
    seen = []

    def launch(handle, fn, *args):
        seen.append([(d.shape, d.strides) for d in args if isinstance(d, descriptors.TensorDescriptor)])

    def run_graph(handle, op, params, inputs, outputs, build, **kw):
        seen.append((op, params, [(n, a.shape, a.strides) for n, a in inputs],
                     [(n, a.shape, a.strides) for n, a in outputs]))
        return True
    monkeypatch.setattr(_common, "launch", launch)
    monkeypatch.setattr(gl, "run_graph", run_graph)
    monkeypatch.setattr(P, "new_output", lambda h, shape, dtype, strides: fake_array(shape, dtype, strides))
    if dy is None:
        pooling_forward(fake_cudnn_handle(), pool, x, y=y, engine=engine)
    else:
        pooling_backward(fake_cudnn_handle(), pool, x, y, dy, dx=dx, engine=engine)
    return seen


@pytest.mark.parametrize("engine", ["legacy", "graph"])
@pytest.mark.parametrize("mode", ["max", "avg"])
def test_one_d_pooling_runs_as_two_d_with_a_unit_height(monkeypatch, engine, mode):
    """1-D pooling (N, C, L) reaches cuDNN as (N, C, 1, L) with the window, padding and stride of a unit height
    (legacy descriptors; graph: the resample graphs' configuration and views; the GPU tests run both)."""
    from helpers import fake_array
    pool = Pooling(mode, window=3, padding=1, stride=2)
    x, y = fake_array((2, 4, 9), strides=(36, 1, 4)), fake_array((2, 4, 5), strides=(20, 1, 4))  # channels-last
    forward = _recorded_pooling(monkeypatch, engine, pool, x, y)
    x, y, dy, dx = fake_array((2, 4, 9)), fake_array((2, 4, 5)), fake_array((2, 4, 5)), fake_array((2, 4, 9))
    backward = _recorded_pooling(monkeypatch, engine, pool, x, y, dy, dx)
    if engine == "legacy":
        assert forward == [[((2, 4, 1, 9), (36, 1, 36, 4)), ((2, 4, 1, 5), (20, 1, 20, 4))]]
        assert backward == [[((2, 4, 1, 5), (20, 5, 5, 1))] * 2 + [((2, 4, 1, 9), (36, 9, 9, 1))] * 2]
        return
    name = "max" if mode == "max" else "avg_exclude_padding"
    params = (name, (1, 3), (0, 1), (1, 2))
    assert forward == [("pooling_forward", params, [("x", (2, 4, 1, 9), (36, 1, 36, 4))],
                        [("y", (2, 4, 1, 5), (20, 1, 20, 4))])]
    assert backward == [("pooling_backward", params, [("dy", (2, 4, 1, 5), (20, 5, 5, 1)),
                                                      ("x", (2, 4, 1, 9), (36, 9, 9, 1)),
                                                      ("y", (2, 4, 1, 5), (20, 5, 5, 1))],
                         [("dx", (2, 4, 1, 9), (36, 9, 9, 1))])]


def test_channels_last_max_pooling_backward_runs_the_index_graph_first(monkeypatch):
    from helpers import fake_array
    pool = Pooling("max", window=2)
    x, dx = fake_array((2, 8, 4, 4), strides=(128, 1, 32, 8)), fake_array((2, 8, 4, 4), strides=(128, 1, 32, 8))
    y, dy = fake_array((2, 8, 2, 2), strides=(32, 1, 16, 8)), fake_array((2, 8, 2, 2), strides=(32, 1, 16, 8))
    seen = _recorded_pooling(monkeypatch, "graph", pool, x, y, dy, dx)
    params = ("max", (2, 2), (0, 0), (2, 2))
    assert [s[:2] for s in seen] == [("pooling_index", params), ("pooling_backward", params)]
    assert [n for n, *_ in seen[0][3]] == ["y", "index"] and [n for n, *_ in seen[1][2]] == ["dy", "index"]


def test_pooling_output_shape_checks_in_python_before_cudnn():
    from cudnn_py import pooling_output_shape
    with pytest.raises(InvalidValueError, match="does not fit"):
        pooling_output_shape((1, 1, 3, 3), "max", 5)
    with pytest.raises(InvalidValueError, match="1 to 3 spatial dimensions"):
        pooling_output_shape((1, 1, 3, 3, 3, 3), "max", 2)
    assert pooling_output_shape((1, 2, 9, 9), "max", 3, 1, 2) == (1, 2, 5, 5)  # cuDNN's answer
