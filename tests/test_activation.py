"""Activation: reference self-check, descriptors against the real library, bad input (CPU); forward/backward on the GPU."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.core import descriptors
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.ops.activation import ACTIVATION_MODES, Activation, activation_backward, activation_forward
from reference import activation as ref
from reference.tensor_ops import assert_close
from helpers import NoCallHandle, fake

PARAMS = {"sigmoid": {}, "relu": {}, "tanh": {}, "clipped_relu": {"coef": 0.8}, "elu": {"coef": 0.7},
          "identity": {}, "swish": {"swish_beta": 1.7}}


def ActivationDescriptor(*args, **kw):
    """The deprecated cudnn_py.core.descriptors.ActivationDescriptor: it warns, then makes the settings object of the
    concept."""
    with pytest.warns(DeprecationWarning, match="ActivationDescriptor is deprecated, use cudnn_py.Activation"):
        return descriptors.ActivationDescriptor(*args, **kw)


def _ref_kw(mode):
    return dict(coef=PARAMS[mode].get("coef", 0.0), swish_beta=PARAMS[mode].get("swish_beta", 1.0))


# ---------------------------------------------------------------- CPU

@pytest.mark.parametrize("mode", ref.MODES)
def test_reference_backward_is_the_gradient(rng, mode):
    x = rng.standard_normal((3, 4, 5))
    x[np.abs(x) < 1e-3] = 0.5  # keep away from kinks
    x[np.abs(x - 0.8) < 1e-3] = 0.5
    dy = rng.standard_normal(x.shape)
    eps = 1e-6
    fd = (ref.forward(x + eps, mode, **_ref_kw(mode)) - ref.forward(x - eps, mode, **_ref_kw(mode))) / (2 * eps) * dy
    np.testing.assert_allclose(ref.backward(x, dy, mode, **_ref_kw(mode)), fd, atol=1e-7)


@pytest.mark.parametrize("mode", list(ACTIVATION_MODES))
def test_descriptor_round_trip(mode):
    act = Activation(mode, **PARAMS[mode])
    m, nan, coef = ctypes.c_int(), ctypes.c_int(), ctypes.c_double()
    capi.cudnnGetActivationDescriptor(act.descriptor, ctypes.byref(m), ctypes.byref(nan), ctypes.byref(coef))
    assert (m.value, nan.value, coef.value) == (int(ACTIVATION_MODES[mode]), int(capi.CUDNN_NOT_PROPAGATE_NAN),
                                                PARAMS[mode].get("coef", 0.0))
    if mode == "swish":
        b = ctypes.c_double()
        capi.cudnnGetActivationDescriptorSwishBeta(act.descriptor, ctypes.byref(b))
        assert b.value == 1.7
    assert Activation(mode, **PARAMS[mode]) == act and hash(Activation(mode, **PARAMS[mode])) == hash(act)


def test_settings_read_back_and_spellings():
    a = Activation("Clipped_ReLU", 6, nan_propagation=True)
    assert a.mode is capi.CUDNN_ACTIVATION_CLIPPED_RELU
    assert (a.coef, a.swish_beta, a.nan_propagation) == (6.0, 1.0, True) and type(a.coef) is float
    assert repr(a) == "Activation('clipped_relu', coef=6.0, swish_beta=1.0, nan_propagation=True)"
    relu = capi.CUDNN_ACTIVATION_RELU
    for spelling in ("relu", "RELU", "CUDNN_ACTIVATION_RELU", relu, int(relu)):
        assert Activation(spelling) == Activation()
    assert Activation().nan_propagation is False


def test_equal_activations_share_one_c_descriptor():
    assert Activation("elu", 0.5).descriptor.value == Activation("elu", 0.5).descriptor.value
    assert Activation("elu", 0.5).descriptor.value != Activation("elu", 0.25).descriptor.value
    assert Activation("swish", swish_beta=2.0).descriptor.value != Activation("swish").descriptor.value


@pytest.mark.parametrize("kw,exc,words", [
    (dict(mode="gelu"), InvalidValueError, "activation mode must be one of"),
    (dict(mode=None), InvalidTypeError, "activation mode"),
    (dict(coef="1"), InvalidTypeError, "coef"),
    (dict(coef=float("nan")), InvalidValueError, "coef must be finite"),
    (dict(swish_beta=None), InvalidTypeError, "swish_beta"),
    (dict(nan_propagation="maybe"), InvalidValueError, "nan_propagation"),
])
def test_validation_names_the_parameter(kw, exc, words):
    with pytest.raises(exc, match=words):
        Activation(**kw)


def test_old_names_warn_and_still_work():
    d = ActivationDescriptor("clipped_relu", 6.0, nan_propagation=True)
    assert d == Activation("clipped_relu", 6.0, nan_propagation=True) and d.descriptor.value
    with pytest.warns(DeprecationWarning, match="activation_descriptor is deprecated"):
        shared = descriptors.activation_descriptor("elu", 0.5)
    assert shared.descriptor.value == Activation("elu", 0.5).descriptor.value  # the one shared descriptor
    # what the old class made is still taken by the calls (validation runs before C)
    with pytest.raises(ValueError, match="y has shape"):
        activation_forward(NoCallHandle(), d, fake((2, 3)), y=fake((2, 4)))


@pytest.mark.parametrize("call,exc,words", [
    (lambda h: activation_forward(h, "relu", fake((2, 3)), y=fake((2, 4))), ValueError, "y has shape"),
    (lambda h: activation_forward(h, "relu", fake((2, 3)), y=fake((2, 3), np.float16)), TypeError, "dtype"),
    (lambda h: activation_forward(h, "relu", np.ones((2, 3), np.float32)), TypeError, "to_device"),
    (lambda h: activation_forward(h, "gelu", fake((2, 3))), ValueError, "activation mode"),
    (lambda h: activation_forward(h, 3.0, fake((2, 3))), TypeError, "Activation"),
    (lambda h: activation_forward(h, "relu", fake((2, 3), np.int8)), TypeError, "float"),
    (lambda h: activation_forward(h, "relu", fake((1,) * 9)), ValueError, "1 to 8"),
    (lambda h: activation_backward(h, "tanh", fake((2, 3)), fake((3, 2)), fake((2, 3))),
     ValueError, "y has shape"),
    (lambda h: activation_backward(h, "tanh", fake((2, 3)), fake((2, 3)), fake((2, 3)),
                                   dx=fake((2, 3), np.float64)), TypeError, "dx has dtype"),
    (lambda h: Activation("clipped_relu", coef=0.0), ValueError, "coef"),
])
def test_bad_input_is_rejected_before_c(call, exc, words):
    with pytest.raises(exc, match=words):
        call(NoCallHandle())


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("mode", list(ACTIVATION_MODES))
def test_forward_backward_match_reference(handle, rng, dtype, mode):
    import cudnn_py as cudnn
    act = Activation(mode, **PARAMS[mode])
    x = (rng.standard_normal((3, 5, 7, 6)) * 1.5).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    xd = cudnn.to_device(x)
    y = activation_forward(handle, act, xd, y=cudnn.to_device(np.full(x.shape, np.nan, dtype)), engine="legacy")
    y_ref = ref.forward(x, mode, **_ref_kw(mode))
    assert_close(y.to_numpy(), y_ref, dtype)
    dx = activation_backward(handle, act, xd, y, cudnn.to_device(dy), dx=cudnn.to_device(np.full(x.shape, np.nan, dtype)),
                             engine="legacy")
    keep = np.ones(x.shape, bool)
    if mode in ("relu", "clipped_relu"):  # the gradient jumps at the kinks; fp16 rounding may cross them
        keep = (np.abs(x.astype(np.float64)) > 1e-2) & (np.abs(x.astype(np.float64) - 0.8) > 1e-2)
    got = dx.to_numpy().astype(np.float64)
    assert_close(np.where(keep, got, 0.0), np.where(keep, ref.backward(x, dy, mode, **_ref_kw(mode)), 0.0), dtype)


@pytest.mark.gpu
def test_alpha_beta_allocation_strides_and_core_descriptor(handle, rng):
    import cudnn_py as cudnn
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y0 = rng.standard_normal(x.shape).astype(np.float32)
    xd = cudnn.to_device(x)
    y = activation_forward(handle, "sigmoid", xd, engine="legacy")  # allocated
    assert_close(y.to_numpy(), ref.forward(x, "sigmoid"), np.float32)
    y2 = activation_forward(handle, ActivationDescriptor("elu", 0.5), xd, y=cudnn.to_device(y0), alpha=2.0, beta=0.5,
                            engine="legacy")
    assert_close(y2.to_numpy(), 2.0 * ref.forward(x, "elu", coef=0.5) + 0.5 * y0, np.float32)
    # a channels-last output (same logical shape, other strides)
    from cudnn_py.core.memory import DeviceArray
    base = cudnn.to_device(np.full(x.size, np.nan, np.float32))
    nhwc = DeviceArray(base.ptr, x.shape, np.float32, (60, 1, 15, 3), owner=base)
    activation_forward(handle, "tanh", xd, y=nhwc, engine="legacy")
    assert_close(nhwc.to_numpy(), np.tanh(x.astype(np.float64)), np.float32)
    assert_close(base.to_numpy().reshape(2, 4, 5, 3), np.tanh(x.astype(np.float64)).transpose(0, 2, 3, 1), np.float32)


@pytest.mark.gpu
def test_identity_alpha_beta(handle, rng):
    """Identity works here (as a scaled copy) although cudnnActivationForward refuses it on cuDNN 9."""
    import cudnn_py as cudnn
    x, y0 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32), rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = activation_forward(handle, ActivationDescriptor("identity"), cudnn.to_device(x), y=cudnn.to_device(y0),
                           alpha=1.5, beta=-0.5, engine="legacy")
    assert_close(y.to_numpy(), 1.5 * x.astype(np.float64) - 0.5 * y0, np.float32)


@pytest.mark.gpu
def test_raw_capi_path(handle, rng):
    import cudnn_py as cudnn
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    xd, yd = cudnn.to_device(x), cudnn.to_device(np.full(x.shape, np.nan, np.float32))
    ad, td = capi.cudnnActivationDescriptor_t(), capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateActivationDescriptor(ctypes.byref(ad))
    capi.cudnnSetActivationDescriptor(ad, capi.CUDNN_ACTIVATION_CLIPPED_RELU, capi.CUDNN_PROPAGATE_NAN, 0.6)
    capi.cudnnCreateTensorDescriptor(ctypes.byref(td))
    capi.cudnnSetTensor4dDescriptor(td, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, *x.shape)
    capi.cudnnActivationForward(handle.ptr, ad, ctypes.byref(ctypes.c_float(1.0)), td, xd.ptr,
                                ctypes.byref(ctypes.c_float(0.0)), td, yd.ptr)
    assert_close(yd.to_numpy(), ref.forward(x, "clipped_relu", coef=0.6), np.float32)
    capi.cudnnDestroyTensorDescriptor(td)
    capi.cudnnDestroyActivationDescriptor(ad)


# ---------------------------------------------------------------- engine="graph"

from cudnn_py.graph.legacy import GraphPathRefused  # noqa: E402
import engine_helpers as E  # noqa: E402


@pytest.mark.parametrize("call,words", [
    (lambda h: activation_forward(h, "relu", fake((2, 3), np.float64), y=fake((2, 3), np.float64), engine="graph"),
     "float64"),
    (lambda h: activation_forward(h, Activation("relu", nan_propagation=True), fake((2, 3)), y=fake((2, 3)),
                                  engine="graph"), "NaN"),
    (lambda h: activation_backward(h, "tanh", *(fake((1,) * 6),) * 3, dx=fake((1,) * 6), engine="graph"),
     "1 to 5 dimensions"),
])
def test_graph_engine_refusals_before_c(call, words):
    with pytest.raises(GraphPathRefused, match=words):
        call(NoCallHandle())


def test_engine_argument_checked_and_auto_falls_back_to_legacy():
    with pytest.raises(ValueError, match="engine 'gpu'"):
        activation_forward(NoCallHandle(), "relu", fake((2, 3)), y=fake((2, 3)), engine="gpu")
    # float64 is not the graph path's: 'auto' goes on to the legacy C call (which NoCallHandle stops)
    with pytest.raises(AssertionError, match="before any cuDNN call"):
        activation_forward(NoCallHandle(), "relu", fake((2, 3), np.float64), y=fake((2, 3), np.float64),
                           engine="auto")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 5, 7, 6), (4, 16, 6, 8)])  # the second: a multiple of 64, run as a flat array
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", E.GRAPH_DTYPES)
@pytest.mark.parametrize("mode", list(ACTIVATION_MODES))
def test_graph_engine_forward_backward_match_reference(handle, rng, mode, dtype, layout, shape):
    act = Activation(mode, **PARAMS[mode])
    x = E.rounded(rng.standard_normal(shape) * 1.5, dtype)
    dy = E.rounded(rng.standard_normal(x.shape), dtype)
    xd = E.on_device(x, dtype, layout)
    y = activation_forward(handle, act, xd, y=E.poisoned(x.shape, dtype, layout), engine="graph")
    E.assert_close(E.host(y), ref.forward(x, mode, **_ref_kw(mode)), dtype)
    dx = activation_backward(handle, act, xd, y, E.on_device(dy, dtype, layout), dx=E.poisoned(x.shape, dtype, layout),
                             engine="graph")
    keep = np.ones(x.shape, bool)
    if mode in ("relu", "clipped_relu"):  # the gradient jumps at the kinks
        keep = (np.abs(x) > 1e-2) & (np.abs(x - 0.8) > 1e-2)
    E.assert_close(np.where(keep, E.host(dx), 0.0), np.where(keep, ref.backward(x, dy, mode, **_ref_kw(mode)), 0.0),
                   dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(11,), (6, 9), (4, 5, 6), (2, 3, 4, 5, 6)])
def test_graph_engine_ranks_alpha_beta_and_in_place(handle, rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    y0 = rng.standard_normal(shape).astype(np.float32)
    xd = E.on_device(x, "float32")
    y = activation_forward(handle, "sigmoid", xd, y=E.on_device(y0, "float32"), alpha=2.0, beta=-0.5, engine="graph")
    E.assert_close(E.host(y), 2.0 * ref.forward(x, "sigmoid") - 0.5 * y0, "float32")
    dx0 = rng.standard_normal(shape).astype(np.float32)
    dx = activation_backward(handle, "tanh", xd, y, E.on_device(y0, "float32"), dx=E.on_device(dx0, "float32"),
                             alpha=0.5, beta=1.0, engine="graph")
    E.assert_close(E.host(dx), 0.5 * ref.backward(x, y0, "tanh") + dx0, "float32")
    activation_forward(handle, "relu", xd, y=xd, engine="graph")  # in place
    E.assert_close(E.host(xd), np.maximum(x, 0.0), "float32")


@pytest.mark.gpu
def test_graph_engine_mixed_layouts_and_allocation(handle, rng):
    """x NCHW, y NHWC: a layout change the pointwise engines do not make, refused by engine='graph' and answered
    by engine='auto' (legacy); an allocated y (engine='graph') is checked too."""
    x = rng.standard_normal((2, 8, 5, 6)).astype(np.float16)
    xd = E.on_device(x, "float16")
    ref_y = np.tanh(x.astype(np.float64))
    E.assert_close(E.host(activation_forward(handle, "tanh", xd, engine="graph")), ref_y, "float16")
    y = E.poisoned(x.shape, "float16", "NHWC")
    with pytest.raises(GraphPathRefused, match="memory order"):
        activation_forward(handle, "tanh", xd, y=y, engine="graph")
    activation_forward(handle, "tanh", xd, y=y, engine="auto")
    E.assert_close(E.host(y), ref_y, "float16")


@pytest.mark.parametrize("backward,mode,want", [
    (False, Activation("relu"), ("relu_fwd", (), ["x"], "y")),
    (False, Activation("clipped_relu", 6.0), ("relu_fwd", (("relu_lower_clip", 0.0), ("relu_upper_clip", 6.0)), ["x"],
                                              "y")),
    (True, Activation("swish", swish_beta=1.5), ("swish_bwd", (("swish_beta", 1.5),), ["dy", "x"], "dx")),
    (True, Activation("elu", 0.5), ("elu_bwd", (("elu_alpha", 0.5),), ["dy", "x"], "dx")),
    (True, Activation("identity"), ("identity", (), ["dy"], "dx")),  # identity's gradient reads dy alone
])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_graph_path_builds_one_pointwise_operation(monkeypatch, backward, mode, want, beta):
    """The graph engine's run: its configuration, inputs (plus the prior output where beta blends it in), output and
    the one pointwise operation its build adds (the GPU tests run it: test_graph_engine_forward_backward_match_...)."""
    from cudnn_py.graph import legacy as gl
    seen = {}

    class G:
        def pointwise(self, name, *operands, **params):
            seen["op"] = (name, operands, params)
            return "r"

    def run_graph(handle, op, params, inputs, outputs, build, auto=False):
        seen["run"] = (op, params, [n for n, _ in inputs], [n for n, _ in outputs])
        return build(G(), {n: n.upper() for n, _ in inputs}, None)
    monkeypatch.setattr(gl, "run_graph", run_graph)
    monkeypatch.setattr(gl, "blend", lambda g, r, t, alpha, b: (r, alpha, b))
    x, y, dy, dx = (fake((2, 3)) for _ in range(4))
    if backward:
        got = activation_backward(NoCallHandle(), mode, x, y, dy, dx=dx, beta=beta, engine="graph")
    else:
        got = activation_forward(NoCallHandle(), mode, x, y=y, beta=beta, engine="graph")
    assert got is (dx if backward else y)
    name, params, ins, out = want
    op = "activation_backward" if backward else "activation_forward"
    assert seen["run"] == (op, (name, params, 1.0, beta), ins + (["prior"] if beta else []), [out])
    assert seen["op"] == (name, tuple(n.upper() for n in ins), dict(params))


@pytest.mark.parametrize("mode,forward,backward", [
    ("relu", "cudnnActivationForward", "cudnnActivationBackward"),
    ("identity", "cudnnTransformTensor", "cudnnTransformTensor"),  # cuDNN's activation calls refuse identity
])
def test_legacy_path_calls(monkeypatch, mode, forward, backward):
    """The legacy engine's C call and the arrays it passes, in order (the GPU tests run it)."""
    from cudnn_py.ops import _common
    from helpers import fake_array, fake_cudnn_handle
    seen = []
    monkeypatch.setattr(_common, "launch", lambda handle, fn, *args: seen.append(
        (fn.__name__, [a for a in args if isinstance(a, type(x))])))
    x, y, dy, dx = (fake_array((2, 3)) for _ in range(4))
    activation_forward(fake_cudnn_handle(), mode, x, y=y, engine="legacy")
    activation_backward(fake_cudnn_handle(), mode, x, y, dy, dx=dx, engine="legacy")
    assert seen[0] == (forward, [x, y])
    assert seen[1] == (backward, [dy, dx] if mode == "identity" else [y, dy, x, dx])
