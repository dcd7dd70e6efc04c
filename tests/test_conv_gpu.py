"""Convolution on the GPU: every supported algorithm against the float64 references, adjoint tests,
blending, fused bias+activation, algorithm queries, the "fastest" cache, the selector port, bad input."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import cudnn_py.calls.algorithms as alg
from cudnn_py import capi
from cudnn_py.core.caches import handle_cache
from cudnn_py.errors import ClosedError, CudnnError, WorkspaceLimitError
from cudnn_py.core.memory import empty, to_device
from cudnn_py.ops import conv_calls as cv
from cudnn_py.ops.convolution import MATH_TYPES
from reference import conv as ref

pytestmark = pytest.mark.gpu

# name -> (x shape, w shape, Convolution kwargs); shapes in logical NCHW order
CASES = {
    "2d": ((2, 8, 9, 11), (16, 8, 3, 3), dict(padding=1)),
    "stride2": ((3, 4, 13, 12), (6, 4, 3, 3), dict(padding=1, stride=2)),
    "dilation2": ((2, 4, 12, 12), (4, 4, 3, 3), dict(padding=2, dilation=2)),
    "groups": ((2, 8, 10, 10), (6, 4, 3, 3), dict(padding=1, groups=2)),
    "depthwise": ((2, 8, 10, 10), (8, 1, 3, 3), dict(padding=1, groups=8)),
    "asym_pad": ((2, 3, 9, 8), (4, 3, 3, 2), dict(padding=((1, 2), (0, 1)))),
    "3d": ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), dict(padding=1)),
    "1d": ((2, 4, 17), (5, 4, 3), dict(padding=1, stride=2)),
    "odd_batch1": ((1, 5, 7, 9), (3, 5, 5, 3), dict(padding=(2, 1))),
    "true_conv": ((2, 3, 8, 8), (4, 3, 3, 3), dict(padding=1, mode="convolution")),
    "nhwc": ((2, 8, 9, 9), (16, 8, 3, 3), dict(padding=1, layout="NHWC")),
    "1x1": ((4, 16, 8, 8), (32, 16, 1, 1), dict()),
}

DTYPE_TOL = {  # (dtype, math) -> max |out - ref| / max |ref|
    ("float32", "fma"): 3e-5,
    ("float32", "default"): 3e-3,  # TF32 tensor cores may be used
    ("float16", "default"): 1e-2,
    ("float16", "auto"): 1e-2,  # tensor-op math
    ("float64", "default"): 1e-12,
}


def _ref_kw(kw):
    return dict(pad=kw.get("padding", 0), stride=kw.get("stride", 1), dilation=kw.get("dilation", 1),
                groups=kw.get("groups", 1), mode=kw.get("mode", "cross_correlation"))


def _phys(a, layout):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if layout == "NHWC" else np.ascontiguousarray(a)


def _logical(a, layout):
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def _poisoned(shape, dtype, layout, stream):
    a = empty(_phys(np.empty(shape, np.uint8), layout).shape, dtype, stream=stream)
    a.fill_(np.nan)
    return a


def _err(got, want):
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "output has NaN/inf (an element was not written, or overflow)"
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _data(rng, case, dtype):
    xs, ws, kw = CASES[case]
    layout = kw.get("layout", "NCHW")
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    y_shape = ref.output_shape(xs, ws, **{k: v for k, v in _ref_kw(kw).items() if k in ("pad", "stride", "dilation")})
    dy = rng.standard_normal(y_shape).astype(dtype)
    return x, w, dy, layout, kw


def _run(handle, direction, conv, x_d, w_d, dy_d, out, algo):
    """One direction with a named algorithm, or ``"fastest"``: autotune=True on the legacy engine."""
    kw = dict(autotune=True, engine="legacy") if algo == "fastest" else dict(algo=algo)
    if direction == "forward":
        return cv.convolution_forward(handle, conv, x_d, w_d, y=out, **kw)
    if direction == "backward_data":
        return cv.convolution_backward_data(handle, conv, w_d, dy_d, dx=out, **kw)
    return cv.convolution_backward_filter(handle, conv, x_d, dy_d, dw=out, **kw)


@pytest.mark.parametrize("dtype,math", [("float32", "fma"), ("float16", "default"), ("float16", "auto")])
@pytest.mark.parametrize("direction", alg.DIRECTIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_supported_algorithm_matches_reference(handle, rng, case, direction, dtype, math):
    x, w, dy, layout, kw = _data(rng, case, dtype)
    conv = cv.Convolution(**kw, math_type=math)
    rk = _ref_kw(kw)
    want = {"forward": lambda: ref.conv_forward(x, w, **rk),
            "backward_data": lambda: ref.conv_backward_data(dy, w, x.shape, **rk),
            "backward_filter": lambda: ref.conv_backward_filter(x, dy, w.shape, **rk)}[direction]()
    x_d, w_d, dy_d = (to_device(_phys(a, layout), handle.stream) for a in (x, w, dy))
    tol = DTYPE_TOL[(dtype, math)]
    ran, skipped = [], []
    for algo in alg.real_members(direction):
        out = _poisoned(want.shape, dtype, layout, handle.stream)
        try:
            res = _run(handle, direction, conv, x_d, w_d, dy_d, out, algo)
        except CudnnError as e:  # cuDNN says this algorithm does not do this configuration
            skipped.append(f"{algo.name}: {e}")
            continue
        assert res is out
        e = _err(_logical(out.to_numpy(), layout), want)
        assert e <= tol, f"{case} {direction} {algo.name} {dtype}/{math}: error {e:.3g} > {tol}"
        ran.append(algo.name)
    assert ran, f"no algorithm ran {case} {direction} {dtype}: {skipped}"
    # every algorithm that cuDNN's Find ran successfully with this math type must have run here too
    roles = {"forward": (x_d, w_d, None), "backward_data": (x.shape if layout == "NCHW" else _phys(x, layout).shape,
                                                            w_d, dy_d),
             "backward_filter": (x_d, w.shape if layout == "NCHW" else _phys(w, layout).shape, dy_d)}[direction]
    g = cv._query_geometry(handle, conv, *roles, direction)
    reported = {r.algo.name for r in cv.convolution_algorithms(handle, conv, *roles, direction=direction,
                                                               method="find")
                if r.supported and r.math_type == g.math_type}
    assert reported <= set(ran), f"cuDNN reports {sorted(reported - set(ran))} as supported but they failed: {skipped}"
    print(case, direction, dtype, "ran:", ran)


@pytest.mark.parametrize("case", sorted(CASES))
def test_heuristic_choice_allocates_outputs(handle, rng, case):
    x, w, dy, layout, kw = _data(rng, case, "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    rk = _ref_kw(kw)
    x_d, w_d, dy_d = (to_device(_phys(a, layout), handle.stream) for a in (x, w, dy))
    y = cv.convolution_forward(handle, conv, x_d, w_d)
    assert _err(_logical(y.to_numpy(), layout), ref.conv_forward(x, w, **rk)) <= 3e-5
    dx = cv.convolution_backward_data(handle, conv, w_d, dy_d, x_shape=_phys(x, layout).shape)
    assert _err(_logical(dx.to_numpy(), layout), ref.conv_backward_data(dy, w, x.shape, **rk)) <= 3e-5
    dw = cv.convolution_backward_filter(handle, conv, x_d, dy_d, w_shape=_phys(w, layout).shape)
    assert _err(_logical(dw.to_numpy(), layout), ref.conv_backward_filter(x, dy, w.shape, **rk)) <= 3e-5


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", ["2d", "stride2", "groups", "asym_pad", "3d", "1d", "true_conv"])
def test_adjoint(handle, rng, case, dtype):
    """<conv(x, w), dy> == <x, dconv_x(dy)> == <w, dconv_w(x, dy)> with our GPU results."""
    x, w, dy, layout, kw = _data(rng, case, dtype)
    conv = cv.Convolution(**kw, math_type="fma")
    x_d, w_d, dy_d = (to_device(_phys(a, layout), handle.stream) for a in (x, w, dy))
    y = _logical(cv.convolution_forward(handle, conv, x_d, w_d).to_numpy(), layout).astype(np.float64)
    dx = _logical(cv.convolution_backward_data(handle, conv, w_d, dy_d, x_shape=x_d.shape).to_numpy(), layout)
    dw = _logical(cv.convolution_backward_filter(handle, conv, x_d, dy_d, w_shape=w_d.shape).to_numpy(), layout)
    a = float((y * dy).sum())
    b = float((x.astype(np.float64) * dx).sum())
    c = float((w.astype(np.float64) * dw).sum())
    scale = float(np.abs(y).sum() * np.abs(dy).max()) + 1e-30
    tol = 1e-12 if dtype == "float64" else 1e-5
    assert abs(a - b) / scale <= tol and abs(a - c) / scale <= tol, (a, b, c)


def test_alpha_beta_blending(handle, rng):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    rk = _ref_kw(kw)
    x_d, w_d, dy_d = to_device(x), to_device(w), to_device(dy)
    y0 = rng.standard_normal(dy.shape).astype(np.float32)
    y = to_device(y0)
    cv.convolution_forward(handle, conv, x_d, w_d, y=y, alpha=2.0, beta=0.5)
    assert _err(y.to_numpy(), 2.0 * ref.conv_forward(x, w, **rk) + 0.5 * y0) <= 3e-5
    dx0 = rng.standard_normal(x.shape).astype(np.float32)
    dx = to_device(dx0)
    cv.convolution_backward_data(handle, conv, w_d, dy_d, dx=dx, alpha=-1.0, beta=1.0)
    assert _err(dx.to_numpy(), dx0 - ref.conv_backward_data(dy, w, x.shape, **rk)) <= 3e-5
    dw0 = rng.standard_normal(w.shape).astype(np.float32)
    dw = to_device(dw0)
    cv.convolution_backward_filter(handle, conv, x_d, dy_d, dw=dw, alpha=0.25, beta=2.0)
    assert _err(dw.to_numpy(), 0.25 * ref.conv_backward_filter(x, dy, w.shape, **rk) + 2.0 * dw0) <= 3e-5


def test_asymmetric_padding_blending_backward_data(handle, rng):
    x, w, dy, layout, kw = _data(rng, "asym_pad", "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    dx0 = rng.standard_normal(x.shape).astype(np.float32)
    dx = to_device(dx0)
    cv.convolution_backward_data(handle, conv, to_device(w), to_device(dy), dx=dx, alpha=3.0, beta=-1.0)
    assert _err(dx.to_numpy(), 3.0 * ref.conv_backward_data(dy, w, x.shape, **_ref_kw(kw)) - dx0) <= 3e-5


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_backward_bias(handle, rng, layout):
    dy = rng.standard_normal((3, 7, 5, 6)).astype(np.float32)
    dy_d = to_device(_phys(dy, layout))
    db = cv.convolution_backward_bias(handle, dy_d, layout=layout)
    want = ref.conv_backward_bias(dy).reshape(-1)
    assert _err(db.to_numpy().reshape(-1), want) <= 1e-5
    db0 = rng.standard_normal(7).astype(np.float32)
    db2 = to_device(db0.reshape(1, 7, 1, 1))
    cv.convolution_backward_bias(handle, to_device(dy), db=db2, alpha=2.0, beta=1.0)
    assert _err(db2.to_numpy().reshape(-1), 2.0 * want + db0) <= 1e-5


@pytest.mark.parametrize("activation", ["relu", "identity"])
@pytest.mark.parametrize("with_z", [False, True])
def test_bias_activation_forward(handle, rng, activation, with_z):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    bias = rng.standard_normal((1, w.shape[0], 1, 1)).astype(np.float32)
    z = rng.standard_normal(dy.shape).astype(np.float32)
    y = _poisoned(dy.shape, np.float32, "NCHW", handle.stream)
    cv.convolution_bias_activation_forward(handle, conv, to_device(x), to_device(w), to_device(bias),
                                           z=to_device(z) if with_z else None, alpha=1.5,
                                           beta=0.5 if with_z else 0.0, activation=activation, y=y)
    want = ref.conv_bias_activation(x, w, bias, z if with_z else None, alpha1=1.5, alpha2=0.5,
                                    activation=activation, **_ref_kw(kw))
    assert _err(y.to_numpy(), want) <= 3e-5


@pytest.mark.parametrize("math", list(MATH_TYPES))
def test_math_types(handle, rng, math):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw, math_type=math)
    y = cv.convolution_forward(handle, conv, to_device(x), to_device(w))
    tol = 3e-5 if math == "fma" else 3e-3
    assert _err(y.to_numpy(), ref.conv_forward(x, w, **_ref_kw(kw))) <= tol


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("bfloat16", 2e-2)])
def test_other_float_types(handle, rng, dtype, tol):
    ml = pytest.importorskip("ml_dtypes")
    dt = np.dtype(ml.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    x, w, dy, layout, kw = _data(rng, "2d", np.float32)
    x, w, dy = x.astype(dt), w.astype(dt), dy.astype(dt)
    conv = cv.Convolution(**kw)
    rk = _ref_kw(kw)
    x_d, w_d, dy_d = to_device(x), to_device(w), to_device(dy)
    assert _err(cv.convolution_forward(handle, conv, x_d, w_d).to_numpy(), ref.conv_forward(x, w, **rk)) <= tol
    assert _err(cv.convolution_backward_data(handle, conv, w_d, dy_d, x_shape=x.shape).to_numpy(),
                ref.conv_backward_data(dy, w, x.shape, **rk)) <= tol
    assert _err(cv.convolution_backward_filter(handle, conv, x_d, dy_d, w_shape=w.shape).to_numpy(),
                ref.conv_backward_filter(x, dy, w.shape, **rk)) <= tol


def test_int8_forward_nhwc(handle, rng):
    x = rng.integers(-8, 9, size=(2, 8, 7, 7)).astype(np.int8)
    w = rng.integers(-8, 9, size=(8, 8, 3, 3)).astype(np.int8)
    conv = cv.Convolution(padding=1, layout="NHWC")
    y = _poisoned((2, 8, 7, 7), np.float32, "NHWC", handle.stream)
    cv.convolution_forward(handle, conv, to_device(_phys(x, "NHWC")), to_device(_phys(w, "NHWC")), y=y,
                           algo="IMPLICIT_PRECOMP_GEMM")
    assert np.array_equal(_logical(y.to_numpy(), "NHWC"), ref.conv_forward(x, w, pad=1))


# ---------------------------------------------------------------- queries and choosing

@pytest.mark.parametrize("direction", alg.DIRECTIONS)
def test_algorithm_queries(handle, rng, direction):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw)
    x_d, w_d, dy_d = to_device(x), to_device(w), to_device(dy)
    assert alg.max_algorithm_count(handle, direction) >= 1
    for method in ("heuristic", "find", "find_ex"):
        recs = cv.convolution_algorithms(handle, conv, x_d, w_d, dy_d, direction=direction, method=method)
        assert recs and all(r.direction == direction for r in recs), method
        ok = [r for r in recs if r.supported]
        assert ok, method
        if method != "heuristic":  # measured lists are sorted by time among the successful ones
            times = [r.time_ms for r in ok]
            assert times == sorted(times), (method, times)
        for r in ok:
            size = cv.convolution_workspace_size(handle, conv, x_d, w_d, dy_d, algo=r.algo, direction=direction)
            assert size >= 0


def test_fastest_is_cached_and_persisted(handle, rng, tmp_path, monkeypatch):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    x_d, w_d = to_device(x), to_device(w)
    alg.algorithm_cache.clear()
    calls = []
    real = alg.find_algorithms_ex
    monkeypatch.setattr(alg, "find_algorithms_ex", lambda *a, **k: calls.append(1) or real(*a, **k))
    y1 = cv.convolution_forward(handle, conv, x_d, w_d, autotune=True)
    y2 = cv.convolution_forward(handle, conv, x_d, w_d, autotune=True)
    assert len(calls) == 1 and len(alg.algorithm_cache) == 1
    want = ref.conv_forward(x, w, **_ref_kw(kw))
    assert _err(y1.to_numpy(), want) <= 3e-5 and _err(y2.to_numpy(), want) <= 3e-5
    (key, rec), = alg.algorithm_cache.entries()
    assert key[0] == "forward" and rec.supported
    path = tmp_path / "algos.json"
    alg.algorithm_cache.save(path)
    alg.algorithm_cache.clear()
    cv.convolution_forward(handle, conv, x_d, w_d, autotune=True)  # cleared: measured again
    assert len(calls) == 2
    alg.algorithm_cache.clear()
    assert alg.algorithm_cache.load(path) == 1
    cv.convolution_forward(handle, conv, x_d, w_d, autotune=True)  # loaded: no measuring
    assert len(calls) == 2 and alg.algorithm_cache.get(key) == rec


def test_fastest_deterministic_and_limit(handle, rng):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    x_d, dy_d = to_device(x), to_device(dy)
    alg.algorithm_cache.clear()
    cv.convolution_backward_filter(handle, conv, x_d, dy_d, w_shape=w.shape, autotune=True, deterministic=True,
                                   workspace_limit=0)
    (key, rec), = alg.algorithm_cache.entries()
    assert rec.deterministic and rec.memory_bytes == 0


def test_removed_selector_port(handle, rng):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw)
    g = cv._query_geometry(handle, conv, to_device(x), to_device(w), None, "forward")
    cd = g.conv_desc(g.math_type)
    args = (handle, g.x_desc, g.w_desc, cd, g.y_desc)
    fast = alg.choose_forward_algorithm(*args, alg.CUDNN_CONVOLUTION_FWD_PREFER_FASTEST)
    assert fast == alg.heuristic_algorithms(handle, "forward", g.x_desc, g.w_desc, cd, g.y_desc)[0].algo
    none = alg.choose_forward_algorithm(*args, alg.CUDNN_CONVOLUTION_FWD_NO_WORKSPACE)
    assert alg.workspace_size(handle, "forward", g.x_desc, g.w_desc, cd, g.y_desc, none) == 0
    limited = alg.choose_forward_algorithm(*args, alg.CUDNN_CONVOLUTION_FWD_SPECIFY_WORKSPACE_LIMIT, 1 << 20)
    assert alg.workspace_size(handle, "forward", g.x_desc, g.w_desc, cd, g.y_desc, limited) <= 1 << 20
    measured = alg.choose_forward_algorithm(*args, alg.CUDNN_CONVOLUTION_FWD_PREFER_FASTEST, measured=True)
    assert isinstance(measured, capi.cudnnConvolutionFwdAlgo_t)
    out = ctypes.c_int(-1)
    got = alg.cudnnGetConvolutionForwardAlgorithm(handle.ptr, g.x_desc, g.w_desc, cd, g.y_desc,
                                                  alg.CUDNN_CONVOLUTION_FWD_NO_WORKSPACE, 0, ctypes.byref(out))
    assert out.value == int(got) == int(none)
    bd = alg.cudnnGetConvolutionBackwardDataAlgorithm(handle, g.w_desc, g.y_desc, cd, g.x_desc,
                                                      alg.CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST, 0)
    bf = alg.cudnnGetConvolutionBackwardFilterAlgorithm(handle, g.x_desc, g.y_desc, cd, g.w_desc,
                                                        alg.CUDNN_CONVOLUTION_BWD_FILTER_NO_WORKSPACE, 0)
    assert isinstance(bd, capi.cudnnConvolutionBwdDataAlgo_t) and isinstance(bf, capi.cudnnConvolutionBwdFilterAlgo_t)


# ---------------------------------------------------------------- bad input on the device

def test_unsupported_algorithm_has_cudnn_reason(handle, rng):
    x, w, dy, layout, kw = _data(rng, "stride2", "float32")
    conv = cv.Convolution(**kw)
    with pytest.raises(CudnnError, match="FFT does not support this forward configuration") as e:
        cv.convolution_forward(handle, conv, to_device(x), to_device(w), algo="FFT")  # no strided FFT
    assert "cuDNN says" in str(e.value) and "stride=2" in str(e.value)


def test_workspace_cap_below_need(handle, rng):
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw)
    x_d, w_d = to_device(x), to_device(w)
    need = {}
    for algo in alg.real_members("forward"):
        try:
            need[algo] = cv.convolution_workspace_size(handle, conv, x_d, w_d, algo=algo)
        except CudnnError:
            pass
    algo = max(need, key=need.get)
    assert need[algo] > 0
    with pytest.raises(WorkspaceLimitError, match="workspace"):
        cv.convolution_forward(handle, conv, x_d, w_d, algo=algo, workspace_limit=need[algo] - 1)


def test_host_array_and_closed_handle(rng):
    from cudnn_py.core.handle import Handle
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    conv = cv.Convolution(padding=1)
    h = Handle()
    with pytest.raises(TypeError, match="device"):
        cv.convolution_forward(h, conv, x, to_device(w))
    y = cv.convolution_forward(h, conv, to_device(x), to_device(w))
    assert y.shape == (1, 2, 5, 5)
    h.close()
    with pytest.raises(ClosedError):
        cv.convolution_forward(h, conv, to_device(x), to_device(w))


def test_torch_tensors(handle, rng):
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 8, 9, 9, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    conv = cv.Convolution(padding=1, math_type="fma")
    torch.backends.cudnn.allow_tf32 = False
    want = torch.nn.functional.conv2d(x, w, padding=1).double().cpu().numpy()
    y = torch.full((2, 16, 9, 9), float("nan"), device="cuda")
    torch.cuda.synchronize()
    cv.convolution_forward(handle, conv, x, w, y=y)
    handle.synchronize()
    assert _err(y.cpu().numpy(), want) <= 3e-5
    xc, wc = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    yc = torch.full((2, 16, 9, 9), float("nan"), device="cuda").to(memory_format=torch.channels_last)
    torch.cuda.synchronize()
    cv.convolution_forward(handle, conv, xc, wc, y=yc)
    handle.synchronize()
    assert _err(yc.cpu().numpy(), want) <= 3e-5



@pytest.mark.parametrize("direction", alg.DIRECTIONS)
def test_lowered_workspace_cap_chooses_again(rng, direction):
    """A plan made under no cap is made again (not refused) once the cap is lowered below its workspace."""
    from cudnn_py.core.handle import Handle
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    rk = _ref_kw(kw)
    want = {"forward": lambda: ref.conv_forward(x, w, **rk),
            "backward_data": lambda: ref.conv_backward_data(dy, w, x.shape, **rk),
            "backward_filter": lambda: ref.conv_backward_filter(x, dy, w.shape, **rk)}[direction]()
    with Handle() as h:  # a new handle: this test's plan is the only one in its cache
        x_d, w_d, dy_d = (to_device(a, h.stream) for a in (x, w, dy))
        _run(h, direction, conv, x_d, w_d, dy_d, _poisoned(want.shape, np.float32, "NCHW", h.stream), "fastest")
        assert h.cache_info() == {cv.PLANS: 1, "prepared": 1}  # the plan, and the prepared call that runs it
        (plan,) = handle_cache(h, cv.PLANS).values()
        h.workspace.cap = 0
        out = _poisoned(want.shape, np.float32, "NCHW", h.stream)
        _run(h, direction, conv, x_d, w_d, dy_d, out, "fastest")
        (again,) = handle_cache(h, cv.PLANS).values()
        assert again.ws == 0 and (again is not plan or plan.ws == 0)
        assert _err(out.to_numpy(), want) <= 3e-5
        print(direction, f"first plan: {plan.algo.name}, {plan.ws} B; under cap 0: {again.algo.name}")


def test_plans_are_per_handle_and_cleared_with_it(rng):
    """Two handles on one device each plan their own call; clear_caches() plans again; results stay right."""
    from cudnn_py.core.handle import Handle
    from helpers import poisoned_allocations
    x, w, dy, layout, kw = _data(rng, "2d", "float32")
    conv = cv.Convolution(**kw, math_type="fma")
    want = ref.conv_forward(x, w, **_ref_kw(kw))
    with poisoned_allocations(), Handle() as a, Handle() as b:  # allocated outputs start as NaN
        for h in (a, b, a):
            x_d, w_d = to_device(x, h.stream), to_device(w, h.stream)
            y = cv.convolution_forward(h, conv, x_d, w_d, autotune=True)
            assert _err(y.to_numpy(), want) <= 3e-5
        plans = {cv.PLANS: 1, "prepared": 1}   # (beside the allocators of new outputs, runner.OUTPUTS: no plans)
        assert _without_allocators(a) == _without_allocators(b) == plans
        a.clear_caches()
        assert a.cache_info() == {}
        y = cv.convolution_forward(a, conv, to_device(x, a.stream), to_device(w, a.stream), autotune=True)
        assert _err(y.to_numpy(), want) <= 3e-5 and _without_allocators(a) == plans


def _without_allocators(h) -> dict:
    from cudnn_py.graph.runner import OUTPUTS
    return {k: v for k, v in h.cache_info().items() if k != OUTPUTS}
