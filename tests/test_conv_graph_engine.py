"""``engine="graph"`` on the Pythonic convolution calls: same answers as the float64 references, through cached
backend-API plans (heuristic and autotuned), in every layout and rank the legacy path takes; bad input on CPU."""
from __future__ import annotations

import numpy as np
import pytest

from cudnn_py.ops import conv_calls as cv
from helpers import NoCallHandle, fake
from reference import conv as ref

# name -> (x shape, w shape, Convolution kwargs); shapes in logical NCHW order
CASES = {
    "2d": ((2, 8, 9, 11), (16, 8, 3, 3), dict(padding=1)),
    "stride2_dilation": ((3, 4, 13, 12), (6, 4, 3, 3), dict(padding=2, stride=2, dilation=2)),
    "groups": ((2, 8, 10, 10), (6, 4, 3, 3), dict(padding=1, groups=2)),
    "asym_pad": ((2, 3, 9, 8), (4, 3, 3, 2), dict(padding=((1, 2), (0, 1)))),
    "3d": ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), dict(padding=1)),
    "1d": ((2, 4, 17), (5, 4, 3), dict(padding=1, stride=2)),
    "true_conv": ((2, 3, 8, 8), (4, 3, 3, 3), dict(padding=1, mode="convolution")),
    "nhwc": ((2, 8, 9, 9), (16, 8, 3, 3), dict(padding=1, layout="NHWC")),
}
TOL = {"float32": 3e-3, "float16": 1e-2, "float64": 1e-12}  # TF32 tensor cores may run float32


def _ref_kw(kw):
    return dict(pad=kw.get("padding", 0), stride=kw.get("stride", 1), dilation=kw.get("dilation", 1),
                groups=kw.get("groups", 1), mode=kw.get("mode", "cross_correlation"))


def _phys(a, layout):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1) if layout == "NHWC" else a)


def _logical(a, layout):
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def _err(got, want):
    return np.abs(got - want).max() / np.abs(want).max()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("algo", ["heuristic", "fastest"])
@pytest.mark.parametrize("case", list(CASES))
def test_three_directions_match_reference(handle, rng, case, algo, dtype):
    from cudnn_py.core.memory import empty, to_device
    xs, wsh, kw = CASES[case]
    layout = kw.get("layout", "NCHW")
    conv = cv.Convolution(**kw)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(wsh).astype(dtype)
    rk = _ref_kw(kw)
    y_ref = ref.conv_forward(x.astype(np.float64), w.astype(np.float64), **rk)
    dy = rng.standard_normal(y_ref.shape).astype(dtype)
    dx_ref = ref.conv_backward_data(dy.astype(np.float64), w.astype(np.float64), xs, **rk)
    dw_ref = ref.conv_backward_filter(x.astype(np.float64), dy.astype(np.float64), wsh, **rk)
    xd, wd, dyd = (to_device(_phys(a, layout), stream=handle.stream) for a in (x, w, dy))

    y = empty(_phys(y_ref, layout).shape, dtype, stream=handle.stream)
    y.fill_(np.nan)
    got = cv.convolution_forward(handle, conv, xd, wd, y=y, algo=algo, engine="graph")
    assert got is y
    assert _err(_logical(y.to_numpy(), layout).astype(np.float64), y_ref) < TOL[dtype]

    dx = cv.convolution_backward_data(handle, conv, wd, dyd, x_shape=xd.shape, algo=algo, engine="graph")
    assert dx.shape == xd.shape
    assert _err(_logical(dx.to_numpy(), layout).astype(np.float64), dx_ref) < TOL[dtype]

    dw = empty(wd.shape, dtype, stream=handle.stream)
    dw.fill_(np.nan)
    cv.convolution_backward_filter(handle, conv, xd, dyd, dw=dw, algo=algo, engine="graph")
    # the filter gradient sums over the batch and the image: a looser bound for float16
    assert _err(_logical(dw.to_numpy(), layout).astype(np.float64), dw_ref) < TOL[dtype] * 3


@pytest.mark.gpu
def test_allocated_output_blending_and_repeat_calls(handle, rng):
    from cudnn_py.core.memory import to_device
    conv = cv.Convolution(padding=1)
    x, w = rng.standard_normal((2, 4, 8, 8)).astype("float32"), rng.standard_normal((6, 4, 3, 3)).astype("float32")
    y0 = rng.standard_normal((2, 6, 8, 8)).astype("float32")
    want = 0.5 * ref.conv_forward(x.astype(np.float64), w.astype(np.float64), pad=1) + 2.0 * y0
    xd, wd = to_device(x, stream=handle.stream), to_device(w, stream=handle.stream)
    y = to_device(y0, stream=handle.stream)
    cv.convolution_forward(handle, conv, xd, wd, y=y, alpha=0.5, beta=2.0, engine="graph")
    assert _err(y.to_numpy().astype(np.float64), want) < 3e-3
    first = cv.convolution_forward(handle, conv, xd, wd, engine="graph")
    for _ in range(3):  # cached plan, new outputs
        again = cv.convolution_forward(handle, conv, xd, wd, engine="graph")
        assert again.ptr != first.ptr and np.array_equal(again.to_numpy(), first.to_numpy())


@pytest.mark.gpu
def test_float64_with_a_new_handle_each_call(rng):
    """Issue 13's report: float64 through engine='graph' with a fresh Handle per call gave a growing error (as if y
    were never written). Every output here starts as NaN (poisoned), three handles in a row, all three directions."""
    import cudnn_py as cudnn
    from cudnn_py.core.memory import to_device
    from helpers import poisoned_allocations
    conv = cv.Convolution(padding=1)
    for _ in range(3):
        x, w = rng.standard_normal((2, 4, 9, 9)), rng.standard_normal((5, 4, 3, 3))
        dy = rng.standard_normal((2, 5, 9, 9))
        with poisoned_allocations(), cudnn.Handle() as h:
            xd, wd, dyd = (to_device(a, stream=h.stream) for a in (x, w, dy))
            y = cv.convolution_forward(h, conv, xd, wd, engine="graph").to_numpy()
            dx = cv.convolution_backward_data(h, conv, wd, dyd, x_shape=x.shape, engine="graph").to_numpy()
            dw = cv.convolution_backward_filter(h, conv, xd, dyd, w_shape=w.shape, engine="graph").to_numpy()
            legacy = cv.convolution_forward(h, conv, xd, wd).to_numpy()
        assert _err(y, ref.conv_forward(x, w, pad=1)) < 1e-12 and _err(y, legacy) < 1e-12
        assert _err(dx, ref.conv_backward_data(dy, w, x.shape, pad=1)) < 1e-12
        assert _err(dw, ref.conv_backward_filter(x, dy, w.shape, pad=1)) < 1e-12


def test_graph_engine_refuses_unverified_dtypes():
    import types
    from cudnn_py.graph import conv as gconv
    stub = types.SimpleNamespace(cache={}, device=0, stream=None)  # the checks run before the handle is used
    conv = cv.Convolution(padding=1)
    with pytest.raises(TypeError, match="int8; the graph convolution runs"):
        cv.convolution_forward(stub, conv, fake((1, 4, 5, 5), np.int8), fake((3, 4, 3, 3), np.int8), engine="graph")
    with pytest.raises(TypeError, match="compute_dtype float64 with float32 data"):
        gconv.conv_forward(stub, fake((1, 4, 5, 5)), fake((3, 4, 3, 3)), compute_dtype="float64")


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["relu", "identity"])
def test_fused_bias_activation(handle, rng, activation):
    from cudnn_py.core.memory import to_device
    conv = cv.Convolution(padding=1, layout="NHWC")
    x = rng.standard_normal((2, 8, 7, 7)).astype("float16")
    w = rng.standard_normal((16, 8, 3, 3)).astype("float16")
    b = rng.standard_normal(16).astype("float16")
    want = ref.conv_bias_activation(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64).reshape(1, -1, 1, 1),
                                    activation=activation, pad=1)
    y = cv.convolution_bias_activation_forward(handle, conv, to_device(_phys(x, "NHWC")), to_device(_phys(w, "NHWC")),
                                               to_device(b), activation=activation, engine="graph")
    assert y.shape == (2, 7, 7, 16)
    assert _err(_logical(y.to_numpy(), "NHWC").astype(np.float64), want) < 1e-2


def test_graph_engine_refuses_what_it_does_not_take():
    conv = cv.Convolution(padding=1)
    x, w = fake((1, 2, 5, 5)), fake((3, 2, 3, 3))
    h = NoCallHandle()
    with pytest.raises(ValueError, match="algo must be 'heuristic' or 'fastest'"):
        cv.convolution_forward(h, conv, x, w, algo="IMPLICIT_GEMM", engine="graph")
    with pytest.raises(ValueError, match="apply to engine='legacy'"):
        cv.convolution_forward(h, conv, x, w, deterministic=True, engine="graph")
    with pytest.raises(ValueError, match="expected 'legacy', 'graph' or 'auto'"):
        cv.convolution_forward(h, conv, x, w, engine="backend")
    with pytest.raises(ValueError, match="no z input"):
        cv.convolution_bias_activation_forward(h, conv, x, w, fake((3,)), z=fake((1, 3, 5, 5)), engine="graph")
    with pytest.raises(ValueError, match="needs dw"):
        cv.convolution_backward_filter(h, conv, x, fake((1, 3, 5, 5)), engine="graph")
    with pytest.raises(ValueError, match="math_type"):
        cv.convolution_forward(h, cv.Convolution(padding=1, math_type="fma"), x, w, engine="graph")


@pytest.mark.parametrize("call,match", [
    # the graph would infer groups=2 from these shapes; the Convolution says groups=1, as engine='legacy' checks
    (lambda h, c: cv.convolution_forward(h, c, fake((1, 4, 5, 5)), fake((3, 2, 3, 3)), engine="graph"), "groups=1"),
    (lambda h, c: cv.convolution_forward(h, c, fake((1, 2, 5, 5)), fake((3, 2, 3)), engine="graph"), "dimensions"),
    (lambda h, c: cv.convolution_backward_data(h, c, fake((3, 2, 3, 3)), fake((1, 3, 4, 4)), x_shape=(1, 2, 5, 5),
                                               engine="graph"), "does not match"),
    (lambda h, c: cv.convolution_backward_filter(h, c, fake((1, 2, 5, 5)), fake((1, 3, 5, 5)), w_shape=(3, 1, 3, 3),
                                                 engine="graph"), "groups=1"),
    (lambda h, c: cv.convolution_bias_activation_forward(h, c, fake((1, 2, 5, 5)), fake((3, 2, 3, 3)), fake((4,)),
                                                         engine="graph"), "one value per output channel"),
], ids=["groups", "rank", "dy_shape", "dw_groups", "bias_size"])
def test_graph_engine_checks_geometry_like_legacy(call, match):
    with pytest.raises(ValueError, match=match):
        call(NoCallHandle(), cv.Convolution(padding=1))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", ["2d", "nhwc", "asym_pad", "1d", "groups"])
def test_auto_engine_is_measured_and_matches_reference(handle, rng, case, dtype):
    """engine="auto" (the default): the first call of each direction measures the legacy call against the graph
    path (engine_choice) and keeps one; that call's output, a repeat call's (its route: no measuring) into a
    poisoned array and an allocated one, and a beta blend (restored between measured runs) match float64."""
    from cudnn_py.calls import engine_choice as ec
    from cudnn_py.core import streams
    from cudnn_py.core.memory import empty, to_device
    handle.clear_caches()
    xs, wsh, kw = CASES[case]
    layout = kw.get("layout", "NCHW")
    conv = cv.Convolution(**kw)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(wsh).astype(dtype)
    rk = _ref_kw(kw)
    y_ref = ref.conv_forward(x.astype(np.float64), w.astype(np.float64), **rk)
    dy = rng.standard_normal(y_ref.shape).astype(dtype)
    refs = {"forward": y_ref, "backward_data": ref.conv_backward_data(dy.astype(np.float64), w.astype(np.float64),
                                                                      xs, **rk),
            "backward_filter": ref.conv_backward_filter(x.astype(np.float64), dy.astype(np.float64), wsh, **rk)}
    xd, wd, dyd = (to_device(_phys(a, layout), stream=handle.stream) for a in (x, w, dy))
    calls = {"forward": lambda out: cv.convolution_forward(handle, conv, xd, wd, y=out),
             "backward_data": lambda out: cv.convolution_backward_data(handle, conv, wd, dyd, dx=out,
                                                                       x_shape=xd.shape),
             "backward_filter": lambda out: cv.convolution_backward_filter(handle, conv, xd, dyd, dw=out,
                                                                           w_shape=wd.shape)}
    shapes = {"forward": _phys(y_ref, layout).shape, "backward_data": xd.shape, "backward_filter": wd.shape}
    tol = {"forward": TOL[dtype], "backward_data": TOL[dtype], "backward_filter": TOL[dtype] * 3}
    for direction, call in calls.items():
        for _ in range(2):  # measured, then the remembered route
            out = empty(shapes[direction], dtype, stream=handle.stream)
            out.fill_(np.nan)
            assert call(out) is out
            assert _err(_logical(out.to_numpy(), layout).astype(np.float64), refs[direction]) < tol[direction]
            got = call(None)  # allocated (measured once more for this signature, then routed)
            assert got.shape == shapes[direction]
            assert _err(_logical(got.to_numpy(), layout).astype(np.float64), refs[direction]) < tol[direction]
    chosen = {k[0]: c for k, c in ec.choices(handle).items() if k[0].startswith("convolution_")}
    assert set(chosen) == {"convolution_forward", "convolution_backward_data", "convolution_backward_filter"}
    for c in chosen.values():
        assert c.engine in ("legacy", "graph") and c.source in ("measured", "database")
        if c.legacy_ms is not None and c.graph_ms is not None:  # both engines ran: the faster is kept, or one tied
            kept, other = (c.graph_ms, c.legacy_ms) if c.engine == "graph" else (c.legacy_ms, c.graph_ms)
            # with it that costs the host less (streams.fastest_first: within TIE or the events' resolution)
            assert kept <= max(other * (1 + streams.TIE), other + streams.EVENT_RESOLUTION_MS)
    print(case, dtype, {k: (c.engine, c.legacy_ms, c.graph_ms) for k, c in chosen.items()})
    # beta blending into the caller's y: measuring restores y before every run, so y = conv + 2 * y0 once
    y0 = rng.standard_normal(shapes["forward"]).astype(dtype)
    y = to_device(y0, stream=handle.stream)
    cv.convolution_forward(handle, conv, xd, wd, y=y, alpha=0.5, beta=2.0)
    want = 0.5 * y_ref + 2.0 * _logical(y0, layout).astype(np.float64)
    assert _err(_logical(y.to_numpy(), layout).astype(np.float64), want) < TOL[dtype]


@pytest.mark.gpu
def test_auto_engine_with_torch_tensors(handle, rng):
    """The default engine on torch tensors (the route's runner binds their addresses): repeat calls with new
    outputs and allocated outputs match float64."""
    torch = pytest.importorskip("torch")
    conv = cv.Convolution(padding=1)
    x, w = rng.standard_normal((2, 8, 9, 9)), rng.standard_normal((8, 8, 3, 3))
    want = ref.conv_forward(x, w, pad=1)
    xt, wt = (torch.tensor(a, dtype=torch.float32, device="cuda") for a in (x, w))
    for _ in range(3):
        y = torch.full(want.shape, float("nan"), device="cuda")
        torch.cuda.synchronize()
        assert cv.convolution_forward(handle, conv, xt, wt, y=y) is y
        handle.synchronize()
        assert _err(y.cpu().double().numpy(), want) < TOL["float32"]
        got = cv.convolution_forward(handle, conv, xt, wt)  # torch tensors in: a torch tensor out
        assert isinstance(got, torch.Tensor) and got.device == xt.device
        assert _err(got.cpu().double().numpy(), want) < TOL["float32"]
