"""cudnnNormalization* API: derived descriptors and bad input (CPU); training / inference / backward
against the float64 reference where the loaded cuDNN supports the mode (GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from cudnn_py.errors import CudnnNotSupportedError
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops.normalization import (
    NORM_MODES, derive_normalization_shapes, normalization_backward, normalization_forward_inference,
    normalization_forward_training, normalization_sizes,
)
from reference import normalization as ref
from helpers import NoCallHandle, fake


# ---------------------------------------------------------------- CPU


@pytest.mark.parametrize("mode", list(NORM_MODES))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 6, 3, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_derived_shapes(mode, shape, dtype):
    (sb, sbt), (mv, mvt) = derive_normalization_shapes(shape, dtype, mode)
    want = ref.param_shape(shape, mode)
    assert sb == mv == want
    assert sbt == mvt == (np.float64 if dtype == np.float64 else np.float32)


X, P, H = (4, 3, 5, 6), (1, 3, 1, 1), NoCallHandle()


@pytest.mark.parametrize("call,exc,words", [
    (lambda: normalization_forward_training(H, fake(X), fake((1, 3, 5, 6)), fake(P)), ValueError, "scale has shape"),
    (lambda: normalization_forward_training(H, fake(X), fake(P), fake(P), mode="per_activation"), ValueError,
     "scale has shape"),
    (lambda: normalization_forward_training(H, fake(X), fake(P), fake(P), mode="spatial"), ValueError,
     "normalization mode"),
    (lambda: normalization_forward_training(H, fake(X), fake(P), fake(P), algo="fast"), ValueError, "algo"),
    (lambda: normalization_forward_training(H, fake(X), fake(P), fake(P), ops="norm_add_activation"), ValueError,
     "pass z"),
    (lambda: normalization_forward_training(H, fake(X), fake(P), fake(P), running_var=fake(P)), ValueError, "both"),
    (lambda: normalization_forward_training(H, fake(X), fake(P), fake(P), epsilon=float("nan")), ValueError,
     "epsilon"),
    (lambda: normalization_forward_inference(H, fake(X), fake(P), fake(P), fake(P), fake(P),
                                             z=fake(X), ops="norm"), ValueError, "no z"),
    (lambda: normalization_forward_inference(H, fake(X), fake(P), fake(P), fake(P, np.float64), fake(P)),
     TypeError, "mean has dtype"),
    (lambda: normalization_backward(H, fake(X), fake(X), fake((4, 3, 5, 5)), fake(P), fake(P), fake(P), fake(P)),
     ValueError, "dy has shape"),
    (lambda: normalization_backward(H, fake(X), fake(X), fake(X), fake(P), fake(P), fake(P), fake(P), dz=fake(X)),
     ValueError, "no dz"),
])
def test_bad_input_caught_before_c(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


# ---------------------------------------------------------------- GPU


def _dev(a):
    import cudnn_py as cudnn
    return cudnn.to_device(np.ascontiguousarray(a))


def _nan(shape, dtype=np.float32):
    return _dev(np.full(shape, np.nan, dtype))


def _supported(fn):
    try:
        return fn()
    except CudnnNotSupportedError as e:
        pytest.skip(f"the loaded cuDNN does not support this normalization configuration: {e}")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", list(NORM_MODES))
def test_training_inference_backward_match_reference(handle, rng, mode):
    shape = (6, 4, 5, 7)
    x = (rng.standard_normal(shape) * 2 - 0.5).astype(np.float32)
    pshape = ref.param_shape(shape, mode)
    scale = (rng.random(pshape) + 0.5).astype(np.float32)
    bias = rng.standard_normal(pshape).astype(np.float32)
    rm0, rv0 = rng.standard_normal(pshape).astype(np.float32), (rng.random(pshape) + 0.5).astype(np.float32)
    rm, rv, xd, sd, bd = _dev(rm0), _dev(rv0), _dev(x), _dev(scale), _dev(bias)
    r = _supported(lambda: normalization_forward_training(
        handle, xd, sd, bd, mode=mode, epsilon=1e-4, factor=0.2, running_mean=rm, running_var=rv,
        saved_mean=_nan(pshape), saved_inv_var=_nan(pshape), y=_nan(shape), engine="legacy"))
    want = ref.forward_training(x, scale, bias, mode, eps=1e-4, factor=0.2, running_mean=rm0, running_var=rv0)
    tol = dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r.y.to_numpy(), want["y"], **tol)
    np.testing.assert_allclose(r.saved_mean.to_numpy(), want["mean"], **tol)
    np.testing.assert_allclose(r.saved_inv_var.to_numpy(), want["inv_var"], **tol)
    np.testing.assert_allclose(rm.to_numpy(), want["running_mean"], **tol)
    np.testing.assert_allclose(rv.to_numpy(), want["running_var"], **tol)

    y0 = rng.standard_normal(shape).astype(np.float32)
    yi = _supported(lambda: normalization_forward_inference(handle, xd, sd, bd, rm, rv, mode=mode, epsilon=1e-4,
                                                            y=_dev(y0), beta=0.5, engine="legacy"))
    wi = ref.forward_inference(x, scale, bias, want["running_mean"], want["running_var"], mode, eps=1e-4)
    np.testing.assert_allclose(yi.to_numpy(), wi + 0.5 * y0, **tol)

    dy = rng.standard_normal(shape).astype(np.float32)
    g = _supported(lambda: normalization_backward(
        handle, xd, r.y, _dev(dy), sd, bd, r.saved_mean, r.saved_inv_var, r.reserve, mode=mode, epsilon=1e-4,
        dx=_nan(shape), dscale=_nan(pshape), dbias=_nan(pshape), engine="legacy"))
    wg = ref.backward(x, dy, scale, mode, eps=1e-4)
    np.testing.assert_allclose(g.dx.to_numpy(), wg["dx"], **tol)
    np.testing.assert_allclose(g.dscale.to_numpy(), wg["dscale"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(g.dbias.to_numpy(), wg["dbias"], rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_fused_add_relu_nhwc_half(handle, rng):
    """norm + add + ReLU, per channel, NHWC float16 (where cuDNN implements the fusion)."""
    n, c, h, w = 4, 8, 5, 6
    shape = (n, c, h, w)
    x = rng.standard_normal(shape).astype(np.float16)
    z = rng.standard_normal(shape).astype(np.float16)
    dy = rng.standard_normal(shape).astype(np.float16)
    pshape = (1, c, 1, 1)
    scale = (rng.random(pshape) + 0.5).astype(np.float32)
    bias = rng.standard_normal(pshape).astype(np.float32)

    def nhwc(a):
        buf = _dev(np.ascontiguousarray(a.transpose(0, 2, 3, 1)))
        return DeviceArray(buf.ptr, shape, buf.dtype, (h * w * c, 1, w * c, c), owner=buf)

    def back(a):
        return DeviceArray(a.ptr, (n, h, w, c), a.dtype, owner=a).to_numpy().transpose(0, 3, 1, 2).astype(np.float64)

    xd = nhwc(x)
    sizes = _supported(lambda: normalization_sizes(handle, xd, ops="norm_add_activation", algo="persist"))
    r = _supported(lambda: normalization_forward_training(handle, xd, _dev(scale), _dev(bias), z=nhwc(z),
                                                          ops="norm_add_activation", algo="persist", epsilon=1e-4,
                                                          engine="legacy"))
    assert (r.reserve.nbytes if r.reserve is not None else 0) == sizes[2]
    want = ref.forward_training(x, scale, bias, "per_channel", eps=1e-4, z=z, relu=True)
    y = back(r.y)
    np.testing.assert_allclose(y, want["y"], rtol=2e-2, atol=5e-2)
    g = _supported(lambda: normalization_backward(
        handle, xd, r.y, nhwc(dy), _dev(scale), _dev(bias), r.saved_mean, r.saved_inv_var, r.reserve,
        ops="norm_add_activation", algo="persist", epsilon=1e-4, engine="legacy"))
    wg = ref.backward(x, dy, scale, "per_channel", eps=1e-4, y=y, relu=True, with_z=True)
    np.testing.assert_allclose(back(g.dx), wg["dx"], rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(back(g.dz), wg["dz"], rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(g.dscale.to_numpy(), wg["dscale"], rtol=2e-2, atol=0.5)
    np.testing.assert_allclose(g.dbias.to_numpy(), wg["dbias"], rtol=2e-2, atol=0.5)


# ---------------------------------------------------------------- engine="graph"

from cudnn_py.graph.legacy import GraphPathRefused  # noqa: E402
import engine_helpers as E  # noqa: E402


@pytest.mark.parametrize("call,words", [
    (lambda h: normalization_forward_training(h, fake((2, 3, 4, 5)), fake((3,)), fake((3,)), algo="persist",
                                              y=fake((2, 3, 4, 5)), saved_mean=fake((3,)), saved_inv_var=fake((3,)),
                                              engine="graph"), "algo"),
    (lambda h: normalization_backward(h, *(fake((2, 3, 4, 5)),) * 3, fake((3,)), fake((3,)), fake((3,)),
                                      fake((3,)), algo="persist", dx=fake((2, 3, 4, 5)), dscale=fake((3,)),
                                      dbias=fake((3,)), engine="graph"), "algo"),
    (lambda h: normalization_forward_inference(h, fake((2, 3, 4, 5)), *(fake((3,)),) * 4, ops="norm_activation",
                                               activation="sigmoid", y=fake((2, 3, 4, 5)), engine="graph"),
     "ReLU only"),
])
def test_graph_engine_refusals_before_c(call, words):
    with pytest.raises(GraphPathRefused, match=words):
        call(NoCallHandle())


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_graph_inference_binds_x_the_parameter_views_z_and_the_prior(monkeypatch, beta):
    """The inference graph (shared with batch norm) reads x, the (C,) parameters as (1, C, 1, 1), z and, where beta
    blends, the prior y; it writes y and fuses the ReLU of ops "norm_add_activation"."""
    from cudnn_py.graph import legacy as gl
    got: dict = {}
    monkeypatch.setattr(gl, "run_graph", lambda handle, name, params, inputs, outputs, build, auto: got.update(
        name=name, params=params, inputs=inputs, outputs=outputs) or True)
    x, y, z = (DeviceArray(i << 30, (2, 3, 4, 4), np.float32) for i in (1, 2, 3))
    p = [DeviceArray((4 + i) << 30, (3,), np.float32) for i in range(4)]
    assert normalization_forward_inference(NoCallHandle(), x, *p, z=z, ops="norm_add_activation", y=y, beta=beta,
                                           engine="graph") is y
    assert [n for n, _ in got["inputs"]] == ["x", "scale", "bias", "mean", "var", "z"] + (["prior"] if beta else [])
    assert [(a.ptr, a.shape) for _, a in got["inputs"][1:5]] == [(a.ptr, (1, 3, 1, 1)) for a in p]
    assert got["inputs"][0][1] is x and got["inputs"][5][1] is z and got["outputs"] == [("y", y)]
    assert got["name"] == "batchnorm_inference" and got["params"] == (1e-5, True, 1.0, beta)


@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["norm", "norm_activation", "norm_add_activation"])
@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"), ("bfloat16", "NHWC"),
                                          ("float32", "NHWC")])
def test_graph_training_inference_backward_match_reference(handle, rng, ops, dtype, layout):
    if dtype == "bfloat16" and E.BF16 is None:
        pytest.skip("ml_dtypes is not installed")
    shape = (6, 8, 5, 7)
    x = E.rounded(rng.standard_normal(shape) * 2 - 0.5, dtype)
    z = E.rounded(rng.standard_normal(shape), dtype) if ops == "norm_add_activation" else None
    pshape = ref.param_shape(shape, "per_channel")
    scale, bias = rng.random(pshape) + 0.5, rng.standard_normal(pshape)
    rm0, rv0 = rng.standard_normal(pshape), rng.random(pshape) + 0.5
    rm, rv = E.on_device(rm0, "float32"), E.on_device(rv0, "float32")
    xd, sd, bd = E.on_device(x, dtype, layout), E.on_device(scale, "float32"), E.on_device(bias, "float32")
    zd = None if z is None else E.on_device(z, dtype, layout)
    relu = ops != "norm"
    strict = layout == "NHWC" and dtype == "float16"  # measured to have engines
    dy = E.rounded(rng.standard_normal(shape), dtype)

    def step(engine):  # forward training and backward on one engine ('auto' may be the legacy pair)
        rm.copy_(rm0.astype(np.float32))  # a refused graph step may have run its forward: start again
        rv.copy_(rv0.astype(np.float32))
        r = normalization_forward_training(
            handle, xd, sd, bd, z=zd, ops=ops, epsilon=1e-4, factor=0.2, running_mean=rm, running_var=rv,
            saved_mean=E.poisoned(pshape, "float32"), saved_inv_var=E.poisoned(pshape, "float32"),
            y=E.poisoned(shape, dtype, layout), engine=engine)
        g = normalization_backward(
            handle, xd, r.y, E.on_device(dy, dtype, layout), sd, bd, r.saved_mean, r.saved_inv_var, r.reserve,
            ops=ops, epsilon=1e-4, dx=E.poisoned(shape, dtype, layout),
            dz=None if z is None else E.poisoned(shape, dtype, layout), dscale=E.poisoned(pshape, "float32"),
            dbias=E.poisoned(pshape, "float32"), engine=engine)
        return r, g
    (r, g), _ = E.graph_or_unsupported(step, strict)
    want = ref.forward_training(x, scale, bias, "per_channel", eps=1e-4, factor=0.2, running_mean=rm0,
                                running_var=rv0, z=z, relu=relu)
    y = E.host(r.y)
    E.assert_close(y, want["y"], dtype, scale=2)
    for got, key in ((r.saved_mean, "mean"), (r.saved_inv_var, "inv_var"), (rm, "running_mean"),
                     (rv, "running_var")):
        E.assert_close(E.host(got), want[key], "float32", scale=50)
    engine = "graph"
    if layout == "NCHW":  # per-channel parameters of NCHW data: no pointwise engine
        with pytest.raises(GraphPathRefused, match="per channel only"):
            normalization_forward_inference(handle, xd, sd, bd, rm, rv, z=zd, ops=ops, epsilon=1e-4,
                                            y=E.poisoned(shape, dtype, layout), engine="graph")
        engine = "legacy"
    if engine == "legacy" and relu:  # measured: the legacy call has no NCHW float32 kernel with an activation
        with pytest.raises(CudnnNotSupportedError):
            normalization_forward_inference(handle, xd, sd, bd, rm, rv, z=zd, ops=ops, epsilon=1e-4,
                                            y=E.poisoned(shape, dtype, layout), engine="legacy")
    else:
        yi = normalization_forward_inference(handle, xd, sd, bd, rm, rv, z=zd, ops=ops, epsilon=1e-4,
                                             y=E.poisoned(shape, dtype, layout), engine=engine)
        E.assert_close(E.host(yi), ref.forward_inference(x, scale, bias, want["running_mean"], want["running_var"],
                                                         "per_channel", eps=1e-4, z=z, relu=relu), dtype, scale=2)
    wg = ref.backward(x, dy, scale, "per_channel", eps=1e-4, y=y, relu=relu, with_z=z is not None)
    for got, key in ((g.dx, "dx"), (g.dscale, "dscale"), (g.dbias, "dbias")) + (((g.dz, "dz"),) if z is not None
                                                                              else ()):
        E.assert_close(E.host(got), wg[key], dtype, scale=5)
