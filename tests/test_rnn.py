"""cudnn_py.ops.rnn: descriptors and validation on CPU (real libcudnn), numerics on the GPU against the
float64 reference in tests/reference/rnn.py (and torch.nn.LSTM/GRU where torch is installed)."""

import ctypes

import numpy as np
import pytest
from helpers import NoCallHandle, fake

from cudnn_py import capi
from cudnn_py.errors import ClosedError, CudnnError, InvalidValueError
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops import rnn as R
from reference import rnn as ref

# ---------------------------------------------------------------------------------------------------
# CPU: descriptors, read-back, validation before C
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    dict(mode="lstm", input_size=10, hidden_size=20, num_layers=2, bidirectional=True, proj_size=15),
    dict(mode="gru", input_size=7, hidden_size=7, input_mode="skip", bias_mode="recurrent", dtype=np.float64),
    dict(mode="relu", input_size=3, hidden_size=5, bias_mode="none", dtype=np.float16, compute_dtype=np.float16,
         math_type="tensor_op", padded_io=False),
    dict(mode=capi.CUDNN_RNN_TANH, input_size=4, hidden_size=6, bias_mode=capi.CUDNN_RNN_SINGLE_INP_BIAS,
         math_type="tensor_op_allow_conversion"),
    dict(mode="lstm", input_size=4, hidden_size=6, algo="persist_dynamic", padded_io=False),
    dict(mode="gru", input_size=4, hidden_size=6, algo=capi.CUDNN_RNN_ALGO_PERSIST_STATIC, dtype=np.float16),
])
def test_rnn_descriptor_round_trip(kw):
    with R.RNN(**kw) as rnn:
        p = rnn.params
        mode = kw["mode"] if isinstance(kw["mode"], str) else "tanh"
        assert p.mode == mode == rnn.mode
        assert (p.input_size, p.hidden_size, p.num_layers) == (kw["input_size"], kw["hidden_size"],
                                                               kw.get("num_layers", 1))
        assert p.proj_size == kw.get("proj_size", kw["hidden_size"]) == rnn.out_size
        assert p.bidirectional == kw.get("bidirectional", False)
        assert p.input_mode == kw.get("input_mode", "linear")
        bias = kw.get("bias_mode", "double")
        assert p.bias_mode == (bias if isinstance(bias, str) else "input")
        assert p.dtype == np.dtype(kw.get("dtype", np.float32))
        assert p.compute_dtype == np.dtype(kw.get("compute_dtype", np.float64 if p.dtype == np.float64
                                                  else np.float32))
        assert p.math_type == kw.get("math_type", "default")
        assert p.algo == {capi.CUDNN_RNN_ALGO_PERSIST_STATIC: "persist_static"}.get(kw.get("algo"),
                                                                                  kw.get("algo", "standard"))
        assert p.padded_io == kw.get("padded_io", True)
        assert "RNN(" in repr(rnn)
    assert repr(rnn) == "<RNN closed>"
    with pytest.raises(ClosedError):
        rnn.params


def test_math_precision_is_the_deprecated_compute_dtype():
    with pytest.warns(DeprecationWarning, match="math_precision= is deprecated, use compute_dtype=") as w:
        rnn = R.RNN("relu", 3, 5, dtype=np.float16, math_precision=np.float16)
    assert w[0].filename == __file__  # the user's line, not the package's
    p = rnn.params
    assert p.compute_dtype == np.float16
    with pytest.warns(DeprecationWarning, match="RNNParams.math_precision is deprecated, use compute_dtype"):
        assert p.math_precision == np.float16
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="compute_dtype float16 is not allowed"):
        R.RNN("lstm", 4, 8, math_precision=np.float16)
    with pytest.raises(TypeError, match="both compute_dtype= and its old spelling math_precision="):
        R.RNN("lstm", 4, 8, compute_dtype=np.float32, math_precision=np.float32)


def test_dropout_probability_zero_is_no_dropout():
    """A probability other than 0 makes a Dropout on the default handle (GPU test below); 0 needs none."""
    rnn = R.RNN("lstm", 4, 8, num_layers=2, dropout=0.0)
    assert rnn._dropouts == (None,) and rnn.params.num_layers == 2


def test_forward_result_and_data_grads_are_named_tuples():
    fwd = R.RNNForwardResult(1, 2, 3, 4)
    y, hy, cy, reserve = fwd
    assert (y, hy, cy, reserve) == (fwd.y, fwd.hy, fwd.cy, fwd.reserve) == (1, 2, 3, 4) and fwd._ctx is None
    g = R.RNNDataGrads(1, 2, None)
    dx, dhx, dcx = g
    assert (g.dx, g.dhx, g.dcx) == (1, 2, None)


def test_unsupported_combination_raises_cudnn_error():
    """What only cuDNN knows (persistent kernels with one bias) comes back as its NOT_SUPPORTED error."""
    from cudnn_py.errors import CudnnNotSupportedError
    with pytest.raises(CudnnNotSupportedError, match="cudnnSetRNNDescriptor_v8"):
        R.RNN("relu", 4, 6, algo="persist_dynamic", bias_mode="input")


def test_lin_ids_and_pseudo_layers():
    assert list(R.RNN("lstm", 4, 8).lin_ids) == list(range(8))
    assert list(R.RNN("lstm", 4, 8, proj_size=3).lin_ids) == list(range(9))
    assert list(R.RNN("gru", 4, 8).lin_ids) == list(range(6))
    assert list(R.RNN("relu", 4, 8).lin_ids) == [0, 1]
    r = R.RNN("tanh", 4, 8, num_layers=3, bidirectional=True)
    assert r.num_pseudo_layers == 6 and r.state_shape == (6, 8)


def test_clip_round_trip():
    rnn = R.RNN("lstm", 4, 8, clip=(-1.5, 2.5))
    assert rnn.clip == (-1.5, 2.5)
    rnn.set_clip(None)
    assert rnn.clip is None
    rnn.set_clip(-3, 3)
    assert rnn.clip == (-3.0, 3.0)
    with pytest.raises(ValueError, match="lo < hi"):
        rnn.set_clip(2, 1)
    with pytest.raises(ValueError, match="LSTM only"):
        R.RNN("gru", 4, 8, clip=(-1, 1))


@pytest.mark.parametrize("kw,exc,match", [
    (dict(mode="gru", proj_size=4), ValueError, "needs mode 'lstm'"),
    (dict(mode="tanh", proj_size=2), ValueError, "needs mode 'lstm'"),
    (dict(mode="lstm", proj_size=9), ValueError, "must not exceed hidden_size"),
    (dict(mode="lstm", input_mode="skip"), ValueError, "input_size == hidden_size"),
    (dict(mode="lstmx"), ValueError, "mode must be one of"),
    (dict(mode="lstm", bias_mode="both"), ValueError, "bias_mode must be one of"),
    (dict(mode="lstm", hidden_size=0), ValueError, "hidden_size must be a positive int"),
    (dict(mode="lstm", num_layers=1.5), ValueError, "num_layers must be a positive int"),
    (dict(mode="lstm", dtype=np.int8), TypeError, "float16, float32 or float64"),
    (dict(mode="lstm", dtype=np.float32, compute_dtype=np.float16), ValueError, "not allowed with float32"),
    (dict(mode="lstm", dtype=np.float64, compute_dtype=np.float32), ValueError, "not allowed with float64"),
    (dict(mode="lstm", dropout="0.5"), TypeError, "dropout probability, a cudnn_py.Dropout or None"),
    (dict(mode="lstm", dropout=fake((4,))), TypeError, "dropout probability, a cudnn_py.Dropout or None"),
    (dict(mode="lstm", dropout=1.5), ValueError, "dropout probability must be <= 1"),
    (dict(mode="lstm", dropout=True), TypeError, "dropout"),
    (dict(mode="lstm", math_type="tf32"), ValueError, "math_type must be one of"),
    (dict(mode="lstm", algo="fast"), ValueError, "algo must be one of"),
])
def test_rnn_bad_arguments(kw, exc, match):
    args = dict(input_size=4, hidden_size=8)
    args.update(kw)
    with pytest.raises(exc, match=match):
        R.RNN(**args)


@pytest.mark.parametrize("layout", ["seq_major", "batch_major", "packed"])
def test_rnn_data_descriptor_round_trip(layout):
    lengths = (5, 3, 3, 1) if layout == "packed" else (2, 5, 1, 4)
    d = R.RNNDataDescriptor(np.float32, layout, 5, 4, 7, lengths, padding_fill=-2.0)
    assert d.read_back() == {"dtype": np.dtype(np.float32), "seq_layout": layout, "max_seq_length": 5,
                             "batch_size": 4, "vector_size": 7, "seq_lengths": lengths, "padding_fill": -2.0}
    d64 = R.RNNDataDescriptor.shared(np.dtype(np.float64), layout, 5, 4, 3, lengths)
    assert d64.read_back()["dtype"] == np.float64 and d64.read_back()["padding_fill"] == 0.0
    assert R.RNNDataDescriptor.shared(np.dtype(np.float64), layout, 5, 4, 3, lengths) is d64  # cached
    d.close()
    with pytest.raises(ClosedError):
        d.ptr


@pytest.mark.parametrize("layout,lengths,match", [
    ("seq_major", [5, 6, 1], r"seq_lengths\[1\] = 6: each length must be between 1 and"),
    ("batch_major", [5, 0, 1], r"seq_lengths\[1\] = 0"),
    ("seq_major", [-1, 2, 2], r"seq_lengths\[0\] = -1"),
    ("packed", [2, 5, 1], "non-increasing"),
    ("packed", [4, 3, 1], r"max\(seq_lengths\) == max_seq_length"),
    ("seq_major", [5, 5], "must be 3 ints"),
    ("seq_major", [5.0, 5.0, 5.0], "must be 3 ints"),
])
def test_rnn_data_descriptor_bad_lengths(layout, lengths, match):
    with pytest.raises(ValueError, match=match):
        R.RNNDataDescriptor(np.float32, layout, 5, 3, 7, lengths)


def test_rnn_data_descriptor_bad_layout():
    with pytest.raises(ValueError, match="seq_layout must be one of"):
        R.RNNDataDescriptor(np.float32, "time_major", 5, 3, 7)


def test_host_array_is_rejected_before_c():
    rnn = R.RNN("lstm", 4, 8)
    with pytest.raises(TypeError, match="host memory.*to_device"):
        R.rnn_forward(NoCallHandle(), rnn, np.zeros((3, 2, 4), np.float32), np.zeros(10, np.float32))


def test_layout_needs_padded_io_before_c():
    rnn = R.RNN("lstm", 4, 8, padded_io=False)
    with pytest.raises(ValueError, match="padded_io=True"):
        R.rnn_forward(NoCallHandle(), rnn, None, None, seq_layout="seq_major")
    with pytest.raises(ValueError, match="seq_layout must be one of"):
        R.rnn_forward(NoCallHandle(), rnn, None, None, seq_layout="time_major")


def test_layout_keyword_is_the_deprecated_spelling_of_seq_layout():
    """``layout=`` names a memory format everywhere else; the RNN data order is ``seq_layout=``."""
    with pytest.warns(DeprecationWarning, match="layout= is deprecated, use seq_layout=") as w, \
            pytest.raises(ValueError, match="seq_layout must be one of"):
        R.rnn_forward(NoCallHandle(), R.RNN("lstm", 4, 8), None, None, layout="time_major")
    with pytest.warns(DeprecationWarning, match="layout= is deprecated, use seq_layout=") as w2:
        d = R.RNNDataDescriptor(np.float32, layout="packed", max_seq_length=5, batch_size=2, vector_size=3,
                                seq_lengths=[5, 3])
    assert w[0].filename == w2[0].filename == __file__  # the user's line, not the package's
    assert d.seq_layout == "packed" and d.read_back()["seq_layout"] == "packed"


def test_backward_needs_training_result():
    rnn = R.RNN("gru", 4, 8)
    fwd = R.RNNForwardResult(y=None, hy=None, cy=None)
    with pytest.raises(ValueError, match="training=True"):
        R.rnn_backward_data(NoCallHandle(), rnn, fwd, None, None)
    with pytest.raises(ValueError, match="training=True"):
        R.rnn_backward_weights(NoCallHandle(), rnn, fwd)


class _CpuDropout:
    """A real (unset) cuDNN dropout descriptor with a closable ``.ptr`` and ``.closed``, as cudnn.Dropout has; no GPU
    needed."""

    def __init__(self):
        self._ptr = capi.cudnnDropoutDescriptor_t()
        capi.cudnnCreateDropoutDescriptor(ctypes.byref(self._ptr))

    @property
    def ptr(self):
        if self._ptr is None:
            raise ClosedError("this Dropout is closed")
        return self._ptr

    @property
    def closed(self):
        return self._ptr is None

    def close(self):
        capi.cudnnDestroyDropoutDescriptor(self._ptr)
        self._ptr = None


def test_closed_dropout_makes_the_rnn_raise():
    """cuDNN keeps the dropout descriptor's address: once it is destroyed the RNN must not reach C."""
    drop = _CpuDropout()
    rnn = R.RNN("lstm", 4, 8, num_layers=2, dropout=drop)
    assert rnn.params.num_layers == 2
    drop.close()
    with pytest.raises(ClosedError, match="dropout descriptor this RNN uses is closed"):
        rnn.params
    with pytest.raises(ClosedError, match="dropout"):
        rnn.set_clip(-1, 1)
    with pytest.raises(ClosedError):
        R.RNN("lstm", 4, 8, num_layers=2, dropout=drop)


class _ClosedHandle(NoCallHandle):
    @property
    def ptr(self):
        raise ClosedError("this cudnn_py.Handle is closed")


def test_closed_handle_raises_closed_error():
    rnn = R.RNN("lstm", 4, 8, algo="persist_dynamic", padded_io=False)
    w, x = fake((100,)), fake((6, 4))
    for call in (lambda h: rnn.build_dynamic(h, 2), rnn.weight_space_size, rnn.new_weights,
                 lambda h: rnn.weights(h, w), lambda h: R.rnn_weight_params(h, rnn, w, 0, 0),
                 lambda h: R.rnn_forward(h, rnn, x, w, seq_lengths=[3, 3], seq_layout="packed")):
        with pytest.raises(ClosedError, match="closed"):
            call(_ClosedHandle())


def test_packed_input_checked_before_c():
    rnn = R.RNN("gru", 4, 8)
    with pytest.raises(ValueError, match="needs seq_lengths"):
        R.rnn_forward(NoCallHandle(), rnn, fake((6, 4)), None, seq_layout="packed")
    with pytest.raises(ValueError, match=r"x has shape \(6, 4\); expected \(5, 4\)"):
        R.rnn_forward(NoCallHandle(), rnn, fake((6, 4)), None, seq_lengths=[3, 2], seq_layout="packed")
    with pytest.raises(ValueError, match=r"must be 1 ints \(one per sequence\)"):
        R.rnn_forward(NoCallHandle(), rnn, fake((6, 4)), None, seq_lengths=[[3, 3]], seq_layout="packed")


def test_gate_table_matches_reference():
    for mode, names in R.GATES.items():
        cfg = ref.RNNConfig(mode, 4, 4, proj_size=2 if mode == "lstm" else None)
        mats, _ = ref.param_shapes(cfg)
        assert sorted({k for _, k in mats}) == list(range(len(names)))


# ---------------------------------------------------------------------------------------------------
# GPU: numerics against the float64 reference
# ---------------------------------------------------------------------------------------------------

def _make(cfg: ref.RNNConfig, dtype, **kw) -> R.RNN:
    return R.RNN(cfg.mode, cfg.input_size, cfg.hidden_size, cfg.num_layers, bidirectional=cfg.bidirectional,
                 proj_size=cfg.proj_size, bias_mode=cfg.bias_mode, input_mode="skip" if cfg.skip_input else "linear",
                 dtype=dtype, clip=cfg.clip, **kw)


def _load(handle, rnn, w, mats, biases):
    """Write reference parameters into the weight space through the views; check the views' shapes."""
    views = rnn.weights(handle, w)
    want_m, want_b = ref.param_shapes(_cfg_of(rnn))
    for key, view in views.items():
        if key in want_m:
            assert view.matrix is not None and view.matrix.shape == want_m[key], key
            view.matrix.copy_(mats[key].astype(rnn.dtype))
        else:
            assert view.matrix is None, key
        if key in want_b:
            assert view.bias is not None and view.bias.shape == want_b[key], key
            view.bias.copy_(biases[key].astype(rnn.dtype))
        else:
            assert view.bias is None, key
    assert set(want_m) <= set(views)
    return views


def _cfg_of(rnn: R.RNN) -> ref.RNNConfig:
    p = rnn.params
    return ref.RNNConfig(p.mode, p.input_size, p.hidden_size, p.num_layers, p.bidirectional,
                         p.proj_size if p.proj_size != p.hidden_size else None, p.bias_mode,
                         p.input_mode == "skip")


def _poison(shape, dtype):
    from cudnn_py.core import memory
    a = memory.empty(shape, dtype)
    a.fill_(np.nan)
    return a


def _tol(dtype, math_type="default"):
    """(rtol, atol relative to the largest value). float32 with default math may run on TF32 tensor cores
    (measured on an H200: errors up to ~1e-3 of the scale); with math_type="fma" it is plain FP32."""
    if np.dtype(dtype) == np.float32 and math_type == "fma":
        return 1e-4, 1e-5
    return {np.float64: (1e-9, 1e-10), np.float32: (1e-2, 2e-3), np.float16: (3e-2, 3e-2)}[np.dtype(dtype).type]


def _close(got, want, dtype, what, math_type="default"):
    rtol, atol = _tol(dtype, math_type)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol * scale, err_msg=what)


GPU_CONFIGS = [
    ref.RNNConfig("relu", 5, 6),
    ref.RNNConfig("tanh", 5, 6, num_layers=2, bidirectional=True),
    ref.RNNConfig("lstm", 5, 6, num_layers=2),
    ref.RNNConfig("lstm", 5, 8, bidirectional=True, proj_size=4),
    ref.RNNConfig("lstm", 5, 8, num_layers=2, proj_size=3),
    ref.RNNConfig("gru", 5, 6),
    ref.RNNConfig("gru", 5, 6, num_layers=2, bidirectional=True),
    ref.RNNConfig("lstm", 5, 6, bias_mode="input"),
    ref.RNNConfig("gru", 5, 6, bias_mode="recurrent"),
    ref.RNNConfig("tanh", 5, 6, bias_mode="none"),
    ref.RNNConfig("lstm", 6, 6, skip_input=True),
    ref.RNNConfig("gru", 6, 6, num_layers=2, skip_input=True),
]


def _cid(c):
    return f"{c.mode}-L{c.num_layers}{'-bi' if c.bidirectional else ''}{f'-P{c.proj_size}' if c.proj_size else ''}" \
           f"-{c.bias_mode}{'-skip' if c.skip_input else ''}"


def _run_case(handle, rng, cfg, dtype, layout, lengths, T=6, with_states=True, math_type="default"):
    from cudnn_py.core import memory
    dtype = np.dtype(dtype)
    B = len(lengths)
    lengths = np.asarray(lengths)
    rnn = _make(cfg, dtype, math_type=math_type)
    close = lambda got, want, what: _close(got, want, dtype, what, math_type)  # noqa: E731
    w = rnn.new_weights(handle)
    mats, biases = ref.random_params(cfg, rng)
    _load(handle, rnn, w, mats, biases)
    mats = {k: v.astype(dtype).astype(np.float64) for k, v in mats.items()}
    biases = {k: v.astype(dtype).astype(np.float64) for k, v in biases.items()}
    x = rng.standard_normal((T, B, cfg.input_size)).astype(dtype).astype(np.float64)
    L = cfg.num_layers * cfg.dirs
    hx = (rng.standard_normal((L, B, cfg.out_size)) * 0.5).astype(dtype).astype(np.float64) if with_states else None
    cx = (rng.standard_normal((L, B, cfg.hidden_size)) * 0.5).astype(dtype).astype(np.float64) \
        if with_states and cfg.mode == "lstm" else None
    want = ref.forward(cfg, x, lengths, mats, biases, hx, cx)
    valid = (np.arange(T)[:, None] < lengths)[..., None]

    dev = lambda a: None if a is None else memory.to_device(a.astype(dtype))  # noqa: E731
    y_shape = ref.to_layout(want.y, lengths, layout).shape
    y = _poison(y_shape, dtype)
    hy = _poison(want.hy.shape, dtype)
    cy = _poison(want.cy.shape, dtype) if cfg.mode == "lstm" else None
    fwd = R.rnn_forward(handle, rnn, dev(ref.to_layout(x, lengths, layout)), w, seq_lengths=lengths, seq_layout=layout,
                        hx=dev(hx), cx=dev(cx), y=y, hy=hy, cy=cy, training=True)
    assert fwd.y is y and fwd.hy is hy and fwd.cy is cy
    got_y = ref.from_layout(fwd.y.to_numpy(), lengths, layout, T)
    close(np.where(valid, got_y, 0), want.y, "y")
    if layout != "packed":
        assert np.all(got_y[~np.broadcast_to(valid, got_y.shape)] == 0), "y past the lengths must be 0"
    close(fwd.hy.to_numpy(), want.hy, "hy")
    if cfg.mode == "lstm":
        close(fwd.cy.to_numpy(), want.cy, "cy")

    dy = rng.standard_normal(want.y.shape).astype(dtype).astype(np.float64)
    dhy = rng.standard_normal(want.hy.shape).astype(dtype).astype(np.float64)
    dcy = rng.standard_normal(want.cy.shape).astype(dtype).astype(np.float64) if cfg.mode == "lstm" else None
    wdx, wdhx, wdcx, (wdm, wdb) = ref.backward(want, dy, dhy, dcy)
    dx = _poison(ref.to_layout(x, lengths, layout).shape, dtype)
    dx_, dhx, dcx = R.rnn_backward_data(handle, rnn, fwd, dev(ref.to_layout(dy, lengths, layout)), w,
                                        dhy=dev(dhy), dcy=dev(dcy), dx=dx)
    assert dx_ is dx
    close(np.where(valid, ref.from_layout(dx.to_numpy(), lengths, layout, T), 0), wdx, "dx")
    close(dhx.to_numpy(), wdhx, "dhx")
    if cfg.mode == "lstm":
        close(dcx.to_numpy(), wdcx, "dcx")
    else:
        assert dcx is None

    dw = R.rnn_backward_weights(handle, rnn, fwd)
    for (p, k), view in rnn.weights(handle, dw).items():
        if view.matrix is not None:
            close(view.matrix.to_numpy(), wdm[(p, k)], f"dW{(p, k)}")
        if view.bias is not None:
            close(view.bias.to_numpy(), wdb[(p, k)], f"db{(p, k)}")
    return rnn, w, fwd, dw


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", GPU_CONFIGS, ids=_cid)
def test_rnn_float64_vs_reference(handle, rng, cfg):
    """Double precision: the exact semantics (gate order, biases, projection, lengths) at 1e-9."""
    _run_case(handle, rng, cfg, np.float64, "seq_major", [6, 3, 5, 1])


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["seq_major", "batch_major", "packed"])
@pytest.mark.parametrize("cfg", [GPU_CONFIGS[1], GPU_CONFIGS[3], GPU_CONFIGS[6]], ids=_cid)
def test_rnn_float32_layouts(handle, rng, cfg, layout):
    lengths = [6, 5, 5, 2] if layout == "packed" else [4, 6, 1, 5]
    _run_case(handle, rng, cfg, np.float32, layout, lengths)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [GPU_CONFIGS[2], GPU_CONFIGS[3], GPU_CONFIGS[6]], ids=_cid)
def test_rnn_float32_fma_math_is_plain_fp32(handle, rng, cfg):
    """math_type="fma" keeps float32 off TF32 tensor cores: ~1e-5 agreement."""
    try:
        _run_case(handle, rng, cfg, np.float32, "seq_major", [6, 3, 5], math_type="fma")
    except CudnnError as e:
        if "NOT_SUPPORTED" not in str(e):
            raise
        pytest.skip(f"cuDNN refuses math_type='fma' for this RNN: {e}")


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [GPU_CONFIGS[0], GPU_CONFIGS[2], GPU_CONFIGS[3], GPU_CONFIGS[6]], ids=_cid)
def test_rnn_float16(handle, rng, cfg):
    _run_case(handle, rng, cfg, np.float16, "seq_major", [6, 2, 4])


@pytest.mark.gpu
def test_rnn_without_initial_states(handle, rng):
    _run_case(handle, rng, ref.RNNConfig("lstm", 5, 6, num_layers=2, bidirectional=True), np.float64,
              "seq_major", [6, 4], with_states=False)


@pytest.mark.gpu
def test_rnn_inference_matches_training_and_weights_add(handle, rng):
    from cudnn_py.core import memory
    cfg = ref.RNNConfig("gru", 5, 6, num_layers=2)
    rnn, w, fwd, dw = _run_case(handle, rng, cfg, np.float64, "seq_major", [6, 6, 3])
    x = fwd._ctx["x"]
    inf = R.rnn_forward(handle, rnn, x, w, seq_lengths=[6, 6, 3], hx=fwd._ctx["hx"])
    assert inf.reserve is None and inf.cy is None
    np.testing.assert_allclose(inf.y.to_numpy(), fwd.y.to_numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(inf.hy.to_numpy(), fwd.hy.to_numpy(), rtol=1e-10, atol=1e-12)
    # backward weights ADDS into a given buffer
    fwd2 = R.rnn_forward(handle, rnn, x, w, seq_lengths=[6, 6, 3], hx=fwd._ctx["hx"], training=True)
    R.rnn_backward_data(handle, rnn, fwd2, memory.to_device(np.ones(fwd2.y.shape)), w)
    base = rng.standard_normal(w.shape)
    acc = memory.to_device(base)
    R.rnn_backward_weights(handle, rnn, fwd2, dweights=acc)
    fresh = R.rnn_backward_weights(handle, rnn, fwd2)
    np.testing.assert_allclose(acc.to_numpy(), base + fresh.to_numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_rnn_lstm_clip_forward(handle, rng):
    """Clipping bounds the cell state inside the recurrence; cy is the last cell state before clipping (cuDNN
    9.19 on an H200; the reference models that)."""
    from cudnn_py.core import memory
    # cuDNN keeps the clip bounds in single precision: use bounds float32 represents exactly
    cfg = ref.RNNConfig("lstm", 5, 6, clip=(-0.3125, 0.4375))
    rnn = _make(cfg, np.float64)
    assert rnn.clip == (-0.3125, 0.4375)
    w = rnn.new_weights(handle)
    mats, biases = ref.random_params(cfg, rng, scale=1.5)
    _load(handle, rnn, w, mats, biases)
    x = rng.standard_normal((6, 3, 5)) * 2
    want = ref.forward(cfg, x, [6, 6, 6], mats, biases)
    got = R.rnn_forward(handle, rnn, memory.to_device(x), w)
    unclipped = ref.forward(ref.RNNConfig("lstm", 5, 6), x, [6, 6, 6], mats, biases)
    assert np.abs(unclipped.y - want.y).max() > 1e-3, "the data must make clipping matter"
    np.testing.assert_allclose(got.y.to_numpy(), want.y, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got.cy.to_numpy(), want.cy, rtol=1e-9, atol=1e-10)


@pytest.mark.gpu
def test_rnn_persist_dynamic(handle, rng):
    from cudnn_py.core import memory
    cfg = ref.RNNConfig("lstm", 32, 32)
    rnn = _make(cfg, np.float32, algo="persist_dynamic")
    try:
        rnn.build_dynamic(handle, 4)
    except CudnnError as e:
        pytest.skip(f"persistent dynamic RNN not available here: {e}")
    w = rnn.new_weights(handle)
    mats, biases = ref.random_params(cfg, rng)
    _load(handle, rnn, w, mats, biases)
    x = rng.standard_normal((5, 4, 32)).astype(np.float32)
    want = ref.forward(cfg, x, [5] * 4, mats, biases)
    got = R.rnn_forward(handle, rnn, memory.to_device(x), w, seq_layout="seq_major")
    _close(got.y.to_numpy(), want.y, np.float32, "y")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_rnn_torch_second_opinion(handle, rng, mode, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    T, B, I, H, layers = 5, 3, 4, 6, 2
    # torch's own CUDA kernels, not its cuDNN path: a second opinion that is not cuDNN's, and one that works whatever
    # libcudnn this process loaded (torch raises RuntimeError on one older than it was built with, e.g. 9.14)
    monkeypatch.setattr(torch.backends.cudnn, "enabled", False)
    net = (torch.nn.LSTM if mode == "lstm" else torch.nn.GRU)(I, H, layers, bidirectional=True).double().cuda()
    rnn = R.RNN(mode, I, H, layers, bidirectional=True, dtype=np.float64)
    w = rnn.new_weights(handle)
    views = rnn.weights(handle, w)
    g = len(R.GATES[mode]) // 2
    for layer in range(layers):
        for d, sfx in enumerate(("", "_reverse")):
            p = layer * 2 + d
            wih = getattr(net, f"weight_ih_l{layer}{sfx}").detach().cpu().numpy()
            whh = getattr(net, f"weight_hh_l{layer}{sfx}").detach().cpu().numpy()
            bih = getattr(net, f"bias_ih_l{layer}{sfx}").detach().cpu().numpy()
            bhh = getattr(net, f"bias_hh_l{layer}{sfx}").detach().cpu().numpy()
            for k in range(g):
                views[(p, k)].matrix.copy_(wih[k * H:(k + 1) * H])
                views[(p, k)].bias.copy_(bih[k * H:(k + 1) * H])
                views[(p, g + k)].matrix.copy_(whh[k * H:(k + 1) * H])
                views[(p, g + k)].bias.copy_(bhh[k * H:(k + 1) * H])
    x = torch.randn(T, B, I, dtype=torch.float64, device="cuda")
    with torch.no_grad():
        ty, th = net(x)
    th = th[0] if mode == "lstm" else th
    handle.synchronize()
    got = R.rnn_forward(handle, rnn, x, w)  # torch x in: torch outputs (the outputs' package rule)
    assert isinstance(got.y, torch.Tensor) and isinstance(got.hy, torch.Tensor)
    np.testing.assert_allclose(got.y.cpu().numpy(), ty.cpu().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got.hy.cpu().numpy(), th.cpu().numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.gpu
def test_rnn_bad_input_on_device(handle):
    from cudnn_py.core import memory
    rnn = R.RNN("lstm", 4, 8)
    w = rnn.new_weights(handle)
    n = rnn.weight_space_size(handle)
    assert w.nbytes == n
    x = memory.zeros((5, 3, 4), np.float32)
    with pytest.raises(ValueError, match=f"weight space is {n} bytes"):
        R.rnn_forward(handle, rnn, x, memory.zeros((n // 4 - 1,), np.float32))
    with pytest.raises(TypeError, match="dtype float64; this RNN's weights are float32"):
        R.rnn_forward(handle, rnn, x, memory.zeros((n // 8,), np.float64))
    with pytest.raises(TypeError, match="x has dtype float64"):
        R.rnn_forward(handle, rnn, memory.zeros((5, 3, 4), np.float64), w)
    with pytest.raises(ValueError, match="x has shape"):
        R.rnn_forward(handle, rnn, memory.zeros((5, 3, 5), np.float32), w)
    with pytest.raises(ValueError, match="hx has shape"):
        R.rnn_forward(handle, rnn, x, w, hx=memory.zeros((1, 3, 7), np.float32))
    with pytest.raises(ValueError, match="cx has shape"):
        R.rnn_forward(handle, rnn, x, w, cx=memory.zeros((2, 3, 8), np.float32))
    with pytest.raises(ValueError, match=r"seq_lengths\[2\] = 6"):
        R.rnn_forward(handle, rnn, x, w, seq_lengths=[5, 5, 6])
    with pytest.raises(ValueError, match=r"seq_lengths\[0\] = 0"):
        R.rnn_forward(handle, rnn, x, w, seq_lengths=[0, 5, 5])
    with pytest.raises(ValueError, match="non-increasing"):
        R.rnn_forward(handle, rnn, memory.zeros((9, 4), np.float32), w, seq_lengths=[2, 5, 2], seq_layout="packed")
    with pytest.raises(ValueError, match="y has shape"):
        R.rnn_forward(handle, rnn, x, w, y=memory.zeros((5, 3, 4), np.float32))
    gru = R.RNN("gru", 4, 8)
    with pytest.raises(ValueError, match="cx/cy are LSTM cell states"):
        R.rnn_forward(handle, gru, x, gru.new_weights(handle), cx=memory.zeros((1, 3, 8), np.float32))
    fwd = R.rnn_forward(handle, rnn, x, w, training=True)
    with pytest.raises(RuntimeError, match="rnn_backward_data"):
        R.rnn_backward_weights(handle, rnn, fwd)
    with pytest.raises(ValueError, match="dy has shape"):
        R.rnn_backward_data(handle, rnn, fwd, memory.zeros((5, 3, 4), np.float32), w)
    with pytest.raises(ValueError, match="different RNN descriptor"):
        R.rnn_backward_data(handle, R.RNN("lstm", 4, 8), fwd, fwd.y, w)
    with pytest.raises(ValueError, match="lin_id must be in"):
        R.rnn_weight_params(handle, rnn, w, 0, 8)
    with pytest.raises(ValueError, match="pseudo_layer must be in"):
        R.rnn_weight_params(handle, rnn, w, 1, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("cell", [0, 1, 2, 3])
def test_rnn_sample_port_checksums(cell, capsys):
    """examples/rnn_sample_v8.py (the RNN_v8.0 port) in double precision vs the reference's checksums."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parent.parent / "examples" / "rnn_sample_v8.py"
    spec = importlib.util.spec_from_file_location("rnn_sample_v8", path)
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    got = sample.main(["-dataType2", "-mathPrecision2", "-seqLength5", "-numLayers2", "-inputSize12",
                       "-hiddenSize12", "-projSize12", "-miniBatch3", f"-cellMode{cell}", "-dirMode1"])
    assert "y checksum" in capsys.readouterr().out
    mode = ("relu", "tanh", "lstm", "gru")[cell]
    want = ref.sample_checksums(ref.RNNConfig(mode, 12, 12, num_layers=2, bidirectional=True), 5, 3)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-9, err_msg=k)


@pytest.mark.gpu
def test_lstm_lm_example_learns():
    """examples/lstm_lm_step.py: forward, backward data/weights and SGD on the weight space lower the loss."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parent.parent / "examples" / "lstm_lm_step.py"
    spec = importlib.util.spec_from_file_location("lstm_lm_step", path)
    lm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lm)
    losses = lm.main(steps=200)
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10]), losses


@pytest.mark.gpu
def test_rnn_dropout_between_layers(handle, rng):
    """Dropout acts between layers in training only; inference matches the dropout-free reference."""
    from cudnn_py.core import memory
    from cudnn_py.ops.dropout import Dropout
    cfg = ref.RNNConfig("lstm", 5, 6, num_layers=2)
    drop = Dropout(handle, p=0.5, seed=3)
    rnn = _make(cfg, np.float64, dropout=drop)
    w = rnn.new_weights(handle)
    mats, biases = ref.random_params(cfg, rng)
    _load(handle, rnn, w, mats, biases)
    x = rng.standard_normal((6, 3, 5))
    want = ref.forward(cfg, x, [6, 6, 6], mats, biases)
    inf = R.rnn_forward(handle, rnn, memory.to_device(x), w)
    np.testing.assert_allclose(inf.y.to_numpy(), want.y, rtol=1e-9, atol=1e-10)
    tr = R.rnn_forward(handle, rnn, memory.to_device(x), w, training=True)
    assert np.abs(tr.y.to_numpy() - want.y).max() > 1e-2, "dropout 0.5 between layers changed nothing"
    dx, dhx, dcx = R.rnn_backward_data(handle, rnn, tr, memory.to_device(np.ones(want.y.shape)), w)
    assert np.all(np.isfinite(dx.to_numpy()))
    assert np.all(np.isfinite(R.rnn_backward_weights(handle, rnn, tr).to_numpy()))


@pytest.mark.gpu
def test_rnn_dropout_probability_makes_a_dropout_on_the_default_handle(handle, rng):
    """dropout=0.5 (a probability) equals a Dropout(default_handle(), p=0.5, seed=0) made by the caller."""
    import cudnn_py as cudnn
    from cudnn_py.core import memory
    from cudnn_py.ops.dropout import Dropout
    cfg = ref.RNNConfig("lstm", 5, 6, num_layers=2)
    rnn = _make(cfg, np.float64, dropout=0.5)
    made = rnn._dropouts[0]
    assert isinstance(made, Dropout) and made.p == 0.5 and made.seed == 0
    assert made._handle is cudnn.default_handle()
    twin = _make(cfg, np.float64, dropout=Dropout(cudnn.default_handle(), p=0.5, seed=0))
    w = rnn.new_weights(handle)
    mats, biases = ref.random_params(cfg, rng)
    _load(handle, rnn, w, mats, biases)
    x = memory.to_device(rng.standard_normal((6, 3, 5)))
    a = R.rnn_forward(handle, rnn, x, w, training=True).y.to_numpy()
    b = R.rnn_forward(handle, twin, x, w, training=True).y.to_numpy()
    np.testing.assert_array_equal(a, b)  # same seed, same states: the same masks


@pytest.mark.parametrize("name,replacement", [
    ("cudnnSetRNNDescriptor_v6", "cudnnSetRNNDescriptor_v8"), ("cudnnSetRNNDescriptor_v5", "cudnnSetRNNDescriptor_v8"),
    ("cudnnGetRNNParamsSize", "cudnnGetRNNWeightSpaceSize"),
    ("cudnnGetRNNLinLayerMatrixParams", "cudnnGetRNNWeightParams"),
    ("cudnnGetRNNLinLayerBiasParams", "cudnnGetRNNWeightParams"),
    ("cudnnRNNForwardTraining", "cudnnRNNForward"), ("cudnnRNNForwardInference", "cudnnRNNForward"),
    ("cudnnRNNBackwardData", "cudnnRNNBackwardData_v8"), ("cudnnRNNBackwardWeights", "cudnnRNNBackwardWeights_v8"),
    ("cudnnGetRNNWorkspaceSize", "cudnnGetRNNTempSpaceSizes"),
    ("cudnnGetRNNTrainingReserveSize", "cudnnGetRNNTempSpaceSizes"),
])
def test_removed_rnn_calls_name_their_replacement(name, replacement):
    from cudnn_py.errors import FunctionNotAvailableError
    with pytest.raises(FunctionNotAvailableError, match=f"{name} was removed.*{replacement}"):
        getattr(capi, name)()


@pytest.mark.gpu
def test_rnn_closed_handle_and_dropout_raise(handle, rng):
    """A closed Handle or a closed dropout descriptor gives ClosedError, never a C call with a dead pointer."""
    import cudnn_py as cudnn
    from cudnn_py.core import memory
    from cudnn_py.ops.dropout import Dropout
    x = memory.to_device(rng.standard_normal((3, 2, 4)).astype(np.float32))
    h2 = cudnn.Handle()
    rnn = R.RNN("lstm", 4, 8, num_layers=2)
    w = rnn.new_weights(h2)  # the weight space size is known from here on
    h2.close()
    for call in (lambda: rnn.new_weights(h2), lambda: rnn.weights(h2, w), lambda: rnn.build_dynamic(h2, 2),
                 lambda: R.rnn_forward(h2, rnn, x, w)):
        with pytest.raises(ClosedError, match="closed"):
            call()
    drop = Dropout(handle, p=0.5, seed=1)
    drnn = R.RNN("lstm", 4, 8, num_layers=2, dropout=drop)
    dw = drnn.new_weights(handle)
    fwd = R.rnn_forward(handle, drnn, x, dw, training=True)
    drop.close()
    with pytest.raises(ClosedError, match="dropout descriptor this RNN uses is closed"):
        R.rnn_forward(handle, drnn, x, dw, training=True)
    with pytest.raises(ClosedError, match="dropout descriptor this RNN uses is closed"):
        R.rnn_backward_data(handle, drnn, fwd, fwd.y, dw)


def test_dropout_states_on_another_device_than_the_handle_are_refused():
    """A dropout probability makes its Dropout on the thread's current device when the RNN is made; a call on a
    handle of another device is refused before C (cuDNN would read the states across devices)."""
    import types
    from cudnn_py.ops.sequence_models import WeightedDescriptor
    stand_in = types.SimpleNamespace(_dropouts=(types.SimpleNamespace(states=types.SimpleNamespace(device_id=1)),))
    handle = types.SimpleNamespace(device=0)
    weights = DeviceArray(1 << 30, (8,), np.float32, device_id=0)
    with pytest.raises(InvalidValueError, match="dropout states are on device 1 but the handle is on device 0"):
        WeightedDescriptor._check_weights(stand_in, handle, weights)
