"""Batch normalisation: parameter shapes against cuDNN's derivation and bad input (CPU);
forward training / inference / backward and the Ex variants against the float64 reference (GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.errors import CudnnNotSupportedError
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops.batchnorm import (
    BATCHNORM_MODES, batchnorm_backward, batchnorm_backward_ex, batchnorm_ex_sizes, batchnorm_forward_inference,
    batchnorm_forward_training, batchnorm_forward_training_ex, batchnorm_param_shape, derive_batchnorm_shape,
)
from reference import batchnorm as ref
from helpers import NoCallHandle, fake


# ---------------------------------------------------------------- CPU


def test_sizes_are_a_named_tuple():
    from cudnn_py.ops.batchnorm import NormSizes
    fw, bw, rs = s = NormSizes(1, 2, 3)
    assert (s.forward_workspace, s.backward_workspace, s.reserve) == (fw, bw, rs) == (1, 2, 3)


@pytest.mark.parametrize("mode", list(BATCHNORM_MODES))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 6, 3, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_param_shape_matches_cudnn_derivation(mode, shape, dtype):
    got_shape, got_dtype = derive_batchnorm_shape(shape, dtype, mode)
    assert got_shape == batchnorm_param_shape(shape, mode) == ref.param_shape(shape, mode.replace("_persistent", ""))
    assert got_dtype == (np.float64 if dtype == np.float64 else np.float32)


X = (4, 3, 5, 6)
P = (1, 3, 1, 1)
H = NoCallHandle()


@pytest.mark.parametrize("call,exc,words", [
    (lambda: batchnorm_forward_training(H, fake(X), fake((1, 3, 5, 6)), fake(P)), ValueError, "scale has shape"),
    (lambda: batchnorm_forward_training(H, fake(X), fake(P), fake(P), mode="per_activation"), ValueError,
     "(1, 3, 5, 6)"),
    (lambda: batchnorm_forward_training(H, fake(X, np.float16), fake(P, np.float16), fake(P, np.float16)),
     TypeError, "float32"),
    (lambda: batchnorm_forward_training(H, fake(X), fake(P), fake(P), running_mean=fake(P)), ValueError, "both"),
    (lambda: batchnorm_forward_training(H, fake(X), fake(P), fake(P), epsilon=-1e-5), ValueError, "epsilon"),
    (lambda: batchnorm_forward_training(H, fake(X), fake(P), fake(P), factor=1.5), ValueError, "factor"),
    (lambda: batchnorm_forward_training(H, fake(X), fake(P), fake(P), y=fake((4, 3, 5, 7))), ValueError,
     "y has shape"),
    (lambda: batchnorm_forward_training(H, fake((4, 3, 5)), fake(P), fake(P)), ValueError, "4-D or 5-D"),
    (lambda: batchnorm_forward_training(H, fake(X, np.int32), fake(P), fake(P)), TypeError, "float"),
    (lambda: batchnorm_forward_training(H, fake(X), fake(P), fake(P), mode="batch"), ValueError, "mode"),
    (lambda: batchnorm_forward_training(H, np.ones(X, np.float32), fake(P), fake(P)), TypeError, "to_device"),
    (lambda: batchnorm_forward_training(H, fake(X), fake(P), fake(P), saved_mean=fake((3, 2))), ValueError,
     "saved_mean"),
    (lambda: batchnorm_forward_inference(H, fake(X), fake(P), fake(P), fake(P), fake((1, 4, 1, 1))), ValueError,
     "var has shape"),
    (lambda: batchnorm_backward(H, fake(X), fake((4, 3, 6, 5)), fake(P), fake(P), fake(P)), ValueError,
     "dy has shape"),
    (lambda: batchnorm_backward(H, fake(X), fake(X, np.float64), fake(P)), TypeError, "dy has dtype"),
    (lambda: batchnorm_backward(H, fake(X), fake(X), fake(P), fake(P)), ValueError, "both"),
    (lambda: batchnorm_backward(H, fake(X), fake(X), fake(P), dscale=fake((1, 3, 5, 6))), ValueError, "dscale"),
    (lambda: batchnorm_forward_training_ex(H, fake(X), fake(P), fake(P), ops="bn_add_activation"), ValueError,
     "pass z"),
    (lambda: batchnorm_forward_training_ex(H, fake(X), fake(P), fake(P), z=fake(X)), ValueError, "no z"),
    (lambda: batchnorm_forward_training_ex(H, fake(X), fake(P), fake(P), activation="relu"), ValueError,
     "no activation"),
    (lambda: batchnorm_forward_training_ex(H, fake(X), fake(P), fake(P), ops="bn_activation", activation=3),
     TypeError, "activation"),
    (lambda: batchnorm_forward_training_ex(H, fake(X), fake(P), fake(P), z=fake((4, 3, 5, 5)),
                                           ops="bn_add_activation"), ValueError, "z has shape"),
    (lambda: batchnorm_forward_training_ex(H, fake(X), fake(P), fake(P), ops="bn_relu"), ValueError, "ops"),
    (lambda: batchnorm_forward_training_ex(H, fake(X), fake(P), fake(P), ops="bn_activation", activation="identity"),
     ValueError, "identity"),
    (lambda: batchnorm_backward_ex(H, fake(X), fake(X), fake(X), fake(P), fake(P), fake(P), fake(P),
                                   ops="bn", dz=fake(X)), ValueError, "no dz"),
    (lambda: batchnorm_backward_ex(H, fake(X), fake((4, 3, 5, 5)), fake(X), fake(P), fake(P), fake(P), fake(P)),
     ValueError, "y has shape"),
])
def test_bad_input_caught_before_c(call, exc, words):
    with pytest.raises(exc, match=None) as info:
        call()
    assert words in str(info.value)


def test_squeezed_parameter_shapes_accepted():
    # (C,) for spatial is the same tensor as (1, C, 1, 1); only the call into C is left (NoCallHandle)
    with pytest.raises(AssertionError, match="before any cuDNN call"):
        batchnorm_forward_inference(H, fake(X), fake((3,)), fake((3,)), fake((3,)), fake((3,)), y=fake(X),
                                    engine="legacy")
    with pytest.raises(AssertionError, match="before any cuDNN call"):
        batchnorm_forward_inference(H, fake(X), fake((3, 5, 6)), fake((3, 5, 6)), fake((3, 5, 6)),
                                    fake((3, 5, 6)), mode="per_activation", y=fake(X), engine="legacy")


# ---------------------------------------------------------------- GPU

TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float16: dict(rtol=1e-2, atol=2e-2),
       np.float64: dict(rtol=1e-10, atol=1e-10)}
MODES = [("spatial", np.float32), ("spatial_persistent", np.float32), ("per_activation", np.float32),
         ("spatial", np.float16), ("spatial_persistent", np.float16), ("per_activation", np.float16),
         ("spatial", np.float64)]


def _dev(a, dtype=None):
    import cudnn_py as cudnn
    return cudnn.to_device(np.ascontiguousarray(a, dtype=dtype))


def _nan(shape, dtype):
    return _dev(np.full(shape, np.nan, dtype))


def _inputs(rng, shape, mode, dtype):
    x = (rng.standard_normal(shape) * 1.5 + 0.3).astype(dtype)
    pshape = ref.param_shape(shape, mode.replace("_persistent", ""))
    pdt = np.float64 if dtype == np.float64 else np.float32
    scale = (rng.random(pshape) + 0.5).astype(pdt)
    bias = rng.standard_normal(pshape).astype(pdt)
    return x, scale, bias, pshape, pdt


@pytest.mark.gpu
@pytest.mark.parametrize("mode,dtype", MODES)
def test_forward_training_matches_reference(handle, rng, mode, dtype):
    shape = (6, 4, 5, 7)
    x, scale, bias, pshape, pdt = _inputs(rng, shape, mode, dtype)
    rm0 = rng.standard_normal(pshape).astype(pdt)
    rv0 = (rng.random(pshape) + 0.5).astype(pdt)
    rm, rv = _dev(rm0), _dev(rv0)
    r = batchnorm_forward_training(handle, _dev(x), _dev(scale), _dev(bias), mode=mode, epsilon=1e-4, factor=0.3,
                                   running_mean=rm, running_var=rv, saved_mean=_nan(pshape, pdt),
                                   saved_inv_var=_nan(pshape, pdt), y=_nan(shape, dtype), engine="legacy")
    want = ref.forward_training(x, scale, bias, mode.replace("_persistent", ""), eps=1e-4, factor=0.3,
                                running_mean=rm0, running_var=rv0)
    tol = TOL[dtype]
    np.testing.assert_allclose(r.y.to_numpy().astype(np.float64), want["y"], **tol)
    np.testing.assert_allclose(r.saved_mean.to_numpy(), want["mean"], **tol)
    np.testing.assert_allclose(r.saved_inv_var.to_numpy(), want["inv_var"], **tol)
    np.testing.assert_allclose(rm.to_numpy(), want["running_mean"], **tol)
    np.testing.assert_allclose(rv.to_numpy(), want["running_var"], **tol)


@pytest.mark.gpu
def test_forward_training_alpha_beta_and_5d(handle, rng):
    shape = (3, 4, 3, 5, 6)
    x, scale, bias, pshape, _ = _inputs(rng, shape, "spatial", np.float32)
    y0 = rng.standard_normal(shape).astype(np.float32)
    r = batchnorm_forward_training(handle, _dev(x), _dev(scale), _dev(bias), y=_dev(y0), alpha=0.75, beta=0.5,
                                   engine="legacy")
    want = ref.forward_training(x, scale, bias, "spatial")["y"]
    np.testing.assert_allclose(r.y.to_numpy(), 0.75 * want + 0.5 * y0, rtol=1e-4, atol=1e-4)
    assert r.running_mean is None and r.reserve is None


@pytest.mark.gpu
@pytest.mark.parametrize("mode,dtype", MODES)
def test_forward_inference_matches_reference(handle, rng, mode, dtype):
    shape = (5, 3, 4, 6)
    x, scale, bias, pshape, pdt = _inputs(rng, shape, mode, dtype)
    mean = rng.standard_normal(pshape).astype(pdt)
    var = (rng.random(pshape) + 0.2).astype(pdt)
    y0 = rng.standard_normal(shape).astype(dtype)
    y = batchnorm_forward_inference(handle, _dev(x), _dev(scale), _dev(bias), _dev(mean), _dev(var), mode=mode,
                                    epsilon=1e-3, y=_dev(y0), alpha=1.0, beta=0.25, engine="legacy")
    want = ref.forward_inference(x, scale, bias, mean, var, mode.replace("_persistent", ""), eps=1e-3)
    np.testing.assert_allclose(y.to_numpy().astype(np.float64), want + 0.25 * y0.astype(np.float64), **TOL[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("mode,dtype", MODES)
@pytest.mark.parametrize("saved", [True, False])
def test_backward_matches_reference(handle, rng, mode, dtype, saved):
    shape = (6, 4, 5, 3)
    x, scale, bias, pshape, pdt = _inputs(rng, shape, mode, dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    xd = _dev(x)
    r = batchnorm_forward_training(handle, xd, _dev(scale), _dev(bias), mode=mode, epsilon=1e-4, engine="legacy")
    g = batchnorm_backward(handle, xd, _dev(dy), _dev(scale), r.saved_mean if saved else None,
                           r.saved_inv_var if saved else None, mode=mode, epsilon=1e-4, dx=_nan(shape, dtype),
                           dscale=_nan(pshape, pdt), dbias=_nan(pshape, pdt), engine="legacy")
    want = ref.backward(x, dy, scale, mode.replace("_persistent", ""), eps=1e-4)
    tol = TOL[dtype] if dtype != np.float16 else dict(rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(g.dx.to_numpy().astype(np.float64), want["dx"], **tol)
    np.testing.assert_allclose(g.dscale.to_numpy(), want["dscale"], **dict(tol, atol=tol["atol"] * 10))
    np.testing.assert_allclose(g.dbias.to_numpy(), want["dbias"], **dict(tol, atol=tol["atol"] * 10))


@pytest.mark.gpu
def test_backward_alpha_beta(handle, rng):
    shape = (4, 3, 5, 5)
    x, scale, bias, pshape, _ = _inputs(rng, shape, "spatial", np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    dx0, ds0, db0 = (rng.standard_normal(s).astype(np.float32) for s in (shape, pshape, pshape))
    g = batchnorm_backward(handle, _dev(x), _dev(dy), _dev(scale), dx=_dev(dx0), dscale=_dev(ds0), dbias=_dev(db0),
                           alpha_data=0.5, beta_data=2.0, alpha_param=3.0, beta_param=-1.0, engine="legacy")
    want = ref.backward(x, dy, scale, "spatial")
    np.testing.assert_allclose(g.dx.to_numpy(), 0.5 * want["dx"] + 2.0 * dx0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g.dscale.to_numpy(), 3.0 * want["dscale"] - ds0, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(g.dbias.to_numpy(), 3.0 * want["dbias"] - db0, rtol=1e-4, atol=1e-3)


def _nhwc(a_nchw):
    """A DeviceArray with logical NCHW dims over NHWC memory."""
    n, c, h, w = a_nchw.shape
    buf = _dev(np.ascontiguousarray(a_nchw.transpose(0, 2, 3, 1)))
    return DeviceArray(buf.ptr, (n, c, h, w), buf.dtype, (h * w * c, 1, w * c, c), owner=buf)


def _nchw_numpy(a: DeviceArray) -> np.ndarray:
    n, c, h, w = a.shape
    flat = DeviceArray(a.ptr, (n, h, w, c), a.dtype, owner=a)
    return flat.to_numpy().transpose(0, 3, 1, 2)


@pytest.mark.gpu
@pytest.mark.parametrize("ops,layout,dtype", [
    ("bn", "nchw", np.float32),
    ("bn_activation", "nhwc", np.float16),
    ("bn_add_activation", "nhwc", np.float16),
])
def test_ex_forward_backward_match_reference(handle, rng, ops, layout, dtype):
    shape = (4, 8, 5, 6)  # C divisible by 4: what the fused NHWC kernels need
    x, scale, bias, pshape, pdt = _inputs(rng, shape, "spatial", dtype)
    z = rng.standard_normal(shape).astype(dtype) if ops == "bn_add_activation" else None
    dy = rng.standard_normal(shape).astype(dtype)
    put = _nhwc if layout == "nhwc" else _dev
    get = _nchw_numpy if layout == "nhwc" else (lambda a: a.to_numpy())
    xd = put(x)
    try:
        fw, bw, rs = batchnorm_ex_sizes(handle, xd, ops=ops)
        r = batchnorm_forward_training_ex(handle, xd, _dev(scale), _dev(bias), z=None if z is None else put(z),
                                          ops=ops, epsilon=1e-4, engine="legacy")
    except CudnnNotSupportedError as e:
        pytest.skip(f"cuDNN does not support {ops} / {layout} / {np.dtype(dtype).name}: {e}")
    assert r.reserve is None if rs == 0 else r.reserve.nbytes == rs
    relu = ops != "bn"
    want = ref.forward_training(x, scale, bias, "spatial", eps=1e-4, z=z, relu=relu)
    tol = TOL[dtype] if dtype != np.float16 else dict(rtol=2e-2, atol=5e-2)
    y = get(r.y).astype(np.float64)
    np.testing.assert_allclose(y, want["y"], **tol)
    g = batchnorm_backward_ex(handle, xd, r.y, put(dy), _dev(scale), _dev(bias), r.saved_mean, r.saved_inv_var,
                              r.reserve, ops=ops, epsilon=1e-4, engine="legacy")
    # gate with cuDNN's own y so ties at the ReLU kink agree
    wg = ref.backward(x, dy, scale, "spatial", eps=1e-4, y=y, relu=relu, with_z=z is not None)
    np.testing.assert_allclose(get(g.dx).astype(np.float64), wg["dx"], **tol)
    np.testing.assert_allclose(g.dscale.to_numpy(), wg["dscale"], **dict(tol, atol=tol["atol"] * 10))
    np.testing.assert_allclose(g.dbias.to_numpy(), wg["dbias"], **dict(tol, atol=tol["atol"] * 10))
    if z is not None:
        np.testing.assert_allclose(get(g.dz).astype(np.float64), wg["dz"], **tol)


@pytest.mark.gpu
def test_ex_backward_reserve_too_small(handle, rng):
    shape = (4, 8, 5, 6)
    x, scale, bias, pshape, _ = _inputs(rng, shape, "spatial", np.float16)
    xd = _nhwc(x)
    sizes = {}
    for ops in ("bn_activation", "bn_add_activation"):
        try:
            sizes[ops] = batchnorm_ex_sizes(handle, xd, ops=ops)[2]
        except CudnnNotSupportedError:
            pass
    ops, rs = max(sizes.items(), key=lambda kv: kv[1], default=(None, 0))
    if not rs:
        pytest.skip(f"cuDNN asks for no reserve space for the fused ops here ({sizes})")
    small = _dev(np.zeros(rs - 1, np.uint8))
    dz = _nhwc(x) if ops == "bn_add_activation" else None  # its own memory: an output that is x is refused first
    with pytest.raises(ValueError, match="reserve holds"):
        batchnorm_backward_ex(handle, xd, xd, xd, _dev(scale), _dev(bias), _dev(scale), _dev(scale), small,
                              ops=ops, dz=dz, engine="legacy")
    with pytest.raises(ValueError, match="needs the forward's reserve"):
        batchnorm_backward_ex(handle, xd, xd, xd, _dev(scale), _dev(bias), _dev(scale), _dev(scale), None,
                              ops=ops, dz=dz, engine="legacy")


@pytest.mark.gpu
def test_raw_capi_path(handle, rng):
    """The C layer directly, as a C program would do it."""
    import ctypes

    shape = (3, 2, 4, 4)
    x = rng.standard_normal(shape).astype(np.float32)
    scale = np.ones((1, 2, 1, 1), np.float32)
    bias = np.zeros((1, 2, 1, 1), np.float32)
    xd, yd, sd, bd = _dev(x), _nan(shape, np.float32), _dev(scale), _dev(bias)
    descs = [capi.cudnnTensorDescriptor_t() for _ in range(2)]
    for d in descs:
        capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
    try:
        capi.cudnnSetTensor4dDescriptor(descs[0], capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, *shape)
        capi.cudnnDeriveBNTensorDescriptor(descs[1], descs[0], capi.CUDNN_BATCHNORM_SPATIAL)
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        capi.cudnnBatchNormalizationForwardTraining(
            handle.ptr, capi.CUDNN_BATCHNORM_SPATIAL, ctypes.byref(one), ctypes.byref(zero), descs[0], xd.ptr,
            descs[0], yd.ptr, descs[1], sd.ptr, bd.ptr, 1.0, None, None, 1e-5, None, None)
        np.testing.assert_allclose(yd.to_numpy(), ref.forward_training(x, scale, bias, "spatial")["y"],
                                   rtol=1e-4, atol=1e-4)
    finally:
        for d in descs:
            capi.cudnnDestroyTensorDescriptor(d)


# ---------------------------------------------------------------- engine="graph"

from cudnn_py.graph.legacy import GraphPathRefused  # noqa: E402
import engine_helpers as E  # noqa: E402


@pytest.mark.parametrize("call,words", [
    (lambda h: batchnorm_forward_training(h, fake((2, 3, 4, 5)), *(fake((3, 4, 5)),) * 2, mode="per_activation",
                                          y=fake((2, 3, 4, 5)), saved_mean=fake((1, 3, 4, 5)),
                                          saved_inv_var=fake((1, 3, 4, 5)), engine="graph"), "per-activation"),
    (lambda h: batchnorm_forward_training(h, fake((2, 3, 4, 5)), fake((3,)), fake((3,)), y=fake((2, 3, 4, 5)),
                                          saved_mean=fake((3,)), saved_inv_var=fake((3,)), beta=1.0,
                                          engine="graph"), "alpha 1 and beta 0"),
    (lambda h: batchnorm_backward(h, fake((2, 3, 4, 5)), fake((2, 3, 4, 5)), fake((3,)), dx=fake((2, 3, 4, 5)),
                                  dscale=fake((3,)), dbias=fake((3,)), engine="graph"), "saved_mean"),
    (lambda h: batchnorm_forward_training_ex(h, fake((2, 3, 4, 5)), fake((3,)), fake((3,)), ops="bn_activation",
                                             activation="tanh", y=fake((2, 3, 4, 5)), saved_mean=fake((3,)),
                                             saved_inv_var=fake((3,)), engine="graph"), "ReLU only"),
    (lambda h: batchnorm_forward_inference(h, *(fake((2, 3, 4, 5), np.float64),), *(fake((3,), np.float64),) * 4,
                                           y=fake((2, 3, 4, 5), np.float64), engine="graph"), "float64"),
])
def test_graph_engine_refusals_before_c(call, words):
    with pytest.raises(GraphPathRefused, match=words):
        call(NoCallHandle())


def test_graph_backward_ex_gates_dy_by_the_relu_into_dz_then_runs_the_norm_backward(monkeypatch):
    """The graph path of the fused backward (shared with normalization_backward): the ReLU gradient of dy at y into
    dz, then one norm backward reading dz as its dy; it returns (dx, dscale, dbias, dz) and reads no reserve."""
    from cudnn_py.graph import legacy as gl
    runs: list = []
    monkeypatch.setattr(gl, "run_graph", lambda handle, name, params, inputs, outputs, build, auto, **kw: runs.append(
        (name, dict(inputs), dict(outputs))) or True)
    x, y, dy, dx, dz = (DeviceArray(i << 30, (2, 3, 4, 4), np.float32) for i in range(1, 6))
    sc, bi, sm, siv, ds, db = (DeviceArray(i << 30, (3,), np.float32) for i in range(6, 12))
    g = batchnorm_backward_ex(NoCallHandle(), x, y, dy, sc, bi, sm, siv, ops="bn_add_activation", mode="spatial",
                              dx=dx, dz=dz, dscale=ds, dbias=db, engine="graph")
    assert tuple(g) == (dx, ds, db, dz)
    (n1, i1, o1), (n2, i2, o2) = runs
    assert n1 == "batchnorm_relu_backward" and i1 == {"dy": dy, "y": y} and o1 == {"dz": dz}
    assert n2 == "batchnorm_backward" and i2["dy"] is dz and i2["x"] is x and o2["dx"] is dx
    assert [i2[k].ptr for k in ("scale", "mean", "inv_variance")] == [sc.ptr, sm.ptr, siv.ptr]
    assert [o2[k].ptr for k in ("dscale", "dbias")] == [ds.ptr, db.ptr]


def _graph_inputs(rng, shape, dtype, mode="spatial"):
    x = E.rounded(rng.standard_normal(shape) * 1.5 + 0.3, dtype)
    pshape = ref.param_shape(shape, mode)
    return x, rng.random(pshape) + 0.5, rng.standard_normal(pshape), pshape


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
@pytest.mark.parametrize("shape", [(6, 8, 5, 7), (3, 4, 3, 5, 6)])
def test_graph_training_and_backward_match_reference(handle, rng, shape, dtype, layout):
    x, scale, bias, pshape = _graph_inputs(rng, shape, dtype)
    rm0, rv0 = rng.standard_normal(pshape), rng.random(pshape) + 0.5
    rm, rv = E.on_device(rm0, "float32"), E.on_device(rv0, "float32")
    xd, sd = E.on_device(x, dtype, layout), E.on_device(scale, "float32")
    strict = layout == "NHWC" and len(shape) == 4 and dtype == "float16"  # measured to have engines
    r, _ = E.graph_or_unsupported(lambda engine: batchnorm_forward_training(
        handle, xd, sd, E.on_device(bias, "float32"), epsilon=1e-4, factor=0.3, running_mean=rm, running_var=rv,
        saved_mean=E.poisoned(pshape, "float32"), saved_inv_var=E.poisoned(pshape, "float32"),
        y=E.poisoned(shape, dtype, layout), engine=engine), strict)
    want = ref.forward_training(x, scale, bias, "spatial", eps=1e-4, factor=0.3, running_mean=rm0, running_var=rv0)
    E.assert_close(E.host(r.y), want["y"], dtype, scale=2)
    for got, key in ((r.saved_mean, "mean"), (r.saved_inv_var, "inv_var"), (rm, "running_mean"),
                     (rv, "running_var")):
        E.assert_close(E.host(got), want[key], "float32", scale=50)
    dy = E.rounded(rng.standard_normal(shape), dtype)
    g, _ = E.graph_or_unsupported(lambda engine: batchnorm_backward(
        handle, xd, E.on_device(dy, dtype, layout), sd, r.saved_mean, r.saved_inv_var, epsilon=1e-4,
        dx=E.poisoned(shape, dtype, layout), dscale=E.poisoned(pshape, "float32"), dbias=E.poisoned(pshape, "float32"),
        engine=engine), strict)
    wg = ref.backward(x, dy, scale, "spatial", eps=1e-4)
    E.assert_close(E.host(g.dx), wg["dx"], dtype, scale=5)
    E.assert_close(E.host(g.dscale), wg["dscale"], dtype, scale=5)
    E.assert_close(E.host(g.dbias), wg["dbias"], dtype, scale=5)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
def test_graph_inference_matches_reference(handle, rng, mode, dtype, layout):
    shape = (5, 3, 4, 6)
    x, scale, bias, pshape = _graph_inputs(rng, shape, dtype, mode)
    mean, var = rng.standard_normal(pshape), rng.random(pshape) + 0.2
    y0 = E.rounded(rng.standard_normal(shape), dtype)
    params = [E.on_device(a, "float32") for a in (scale, bias, mean, var)]
    want = ref.forward_inference(x, scale, bias, mean, var, mode, eps=1e-3)
    engine = "graph"
    if layout == "NCHW" or mode == "per_activation":  # parameters varying along more than the innermost dim
        with pytest.raises(GraphPathRefused, match="per channel only"):
            batchnorm_forward_inference(handle, E.on_device(x, dtype, layout), *params, mode=mode, epsilon=1e-3,
                                        y=E.poisoned(shape, dtype, layout), engine="graph")
        engine = "auto"
    y = batchnorm_forward_inference(handle, E.on_device(x, dtype, layout), *params, mode=mode, epsilon=1e-3,
                                    y=E.poisoned(shape, dtype, layout), engine=engine)
    E.assert_close(E.host(y), want, dtype, scale=2)
    y = batchnorm_forward_inference(handle, E.on_device(x, dtype, layout), *params, mode=mode, epsilon=1e-3,
                                    y=E.on_device(y0, dtype, layout), alpha=0.5, beta=0.25, engine=engine)
    E.assert_close(E.host(y), 0.5 * want + 0.25 * y0, dtype, scale=2)


@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["bn", "bn_activation", "bn_add_activation"])
@pytest.mark.parametrize("dtype,layout", [("float16", "NHWC"), ("float32", "NCHW"), ("bfloat16", "NHWC")])
def test_graph_ex_forward_backward_match_reference(handle, rng, ops, dtype, layout):
    if dtype == "bfloat16" and E.BF16 is None:
        pytest.skip("ml_dtypes is not installed")
    shape = (4, 8, 5, 6)
    x, scale, bias, pshape = _graph_inputs(rng, shape, dtype)
    z = E.rounded(rng.standard_normal(shape), dtype) if ops == "bn_add_activation" else None
    dy = E.rounded(rng.standard_normal(shape), dtype)
    xd, sd, bd = E.on_device(x, dtype, layout), E.on_device(scale, "float32"), E.on_device(bias, "float32")
    strict = layout == "NHWC" and dtype == "float16"  # measured to have engines
    zd, dyd = None if z is None else E.on_device(z, dtype, layout), E.on_device(dy, dtype, layout)

    def step(engine):  # forward and backward on one engine ('auto' is the legacy pair, reserve included)
        r = batchnorm_forward_training_ex(handle, xd, sd, bd, z=zd, ops=ops, epsilon=1e-4,
                                          y=E.poisoned(shape, dtype, layout), engine=engine)
        g = batchnorm_backward_ex(handle, xd, r.y, dyd, sd, bd, r.saved_mean, r.saved_inv_var, r.reserve, ops=ops,
                                  epsilon=1e-4, dx=E.poisoned(shape, dtype, layout),
                                  dz=None if z is None else E.poisoned(shape, dtype, layout), engine=engine)
        return r, g
    (r, g), ran = E.graph_or_unsupported(step, strict)
    assert r.reserve is None or not ran
    relu = ops != "bn"
    want = ref.forward_training(x, scale, bias, "spatial", eps=1e-4, z=z, relu=relu)
    y = E.host(r.y)
    E.assert_close(y, want["y"], dtype, scale=2)
    wg = ref.backward(x, dy, scale, "spatial", eps=1e-4, y=y, relu=relu, with_z=z is not None)
    E.assert_close(E.host(g.dx), wg["dx"], dtype, scale=5)
    E.assert_close(E.host(g.dscale), wg["dscale"], dtype, scale=5)
    E.assert_close(E.host(g.dbias), wg["dbias"], dtype, scale=5)
    if z is not None:
        E.assert_close(E.host(g.dz), wg["dz"], dtype)


# ---------------------------------------------------------------- CPU: the new pairs, one allocation


@pytest.mark.parametrize("channels", [3, 64, 100])
def test_new_saved_statistics_and_parameter_gradients_share_one_allocation(monkeypatch, channels):
    """Saved mean / inverse variance (training) and dscale / dbias (backward) not given: one allocation holds both,
    each 256-byte aligned (two allocations a call cost the DeviceArray path about 5 us more on the GPU); a given one
    is used as it is and the other allocated alone."""
    from cudnn_py.calls import prepared
    from helpers import FakeCFunction, fake_array, fake_cudnn_handle, fake_prepared_outputs, fake_takers
    fake_prepared_outputs(monkeypatch)
    made = fake_takers(monkeypatch).blocks  # the validated path's allocations
    for name in ("cudnnBatchNormalizationForwardTraining", "cudnnBatchNormalizationBackward"):
        monkeypatch.setattr(capi, name, FakeCFunction())
    h, shape, p = fake_cudnn_handle(), (2, channels, 3, 3), (1, channels, 1, 1)
    x, scale, bias = fake_array(shape), fake_array(p), fake_array(p)
    r = batchnorm_forward_training(h, x, scale, bias, y=fake_array(shape), engine="legacy")
    g = batchnorm_backward(h, x, fake_array(shape), scale, r.saved_mean, r.saved_inv_var, dx=fake_array(shape),
                           engine="legacy")
    assert len(made) == 2, [a.shape for a in made]  # one for each pair
    step = -(-channels * 4 // 256) * 256
    for (a, b), base in zip(((r.saved_mean, r.saved_inv_var), (g.dscale, g.dbias)), made):
        assert (a.shape, b.shape, a.dtype, b.dtype) == (p, p, np.float32, np.float32) and a.is_contiguous
        assert (a.ptr, b.ptr) == (base.ptr, base.ptr + step) and base.buffer == 2 * step
    given = fake_array(p)
    r2 = batchnorm_forward_training(h, x, scale, bias, y=fake_array(shape), saved_mean=given, engine="legacy")
    assert r2.saved_mean is given and len(made) == 3 and r2.saved_inv_var.ptr == made[-1].ptr
    assert prepared.CACHE in h.cache
