"""The convolution calls on the prepared call (cudnn_py.calls.prepared). On the CPU (a Handle never created in cuDNN,
the queuing C calls and the algorithm choice stubbed, the descriptors the real library's, arrays at made-up addresses):
a repeat call of the fused bias+activation call and of the three directions replays with the new addresses and the
workspace fetched again, the graph route replays through its runner, and a call on a scratch buffer (asymmetric
padding) makes no prepared call. On the GPU: the fused call's repeat calls give what the validated path gives."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py import capi
from cudnn_py.calls import prepared as P
from cudnn_py.errors import InvalidValueError
from cudnn_py.graph import Graph
from cudnn_py.graph import runner as R
from cudnn_py.ops import conv_calls as cv
from helpers import FakeCFunction, fake_array, fake_cudnn_handle, fake_plan, fake_prepared_outputs

arr = fake_array
FUNCTIONS = {  # name -> (inputs, outputs, inplace)
    "convolution_forward": ({"x", "w"}, {"y"}, False),
    "convolution_backward_data": ({"w", "dy"}, {"dx"}, False),
    "convolution_backward_filter": ({"x", "dy"}, {"dw"}, False),
    "convolution_backward_bias": ({"dy"}, {"db"}, False),
    "convolution_bias_activation_forward": ({"x", "w", "bias", "z"}, {"y"}, True),  # z may be y itself
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_convolution_functions_are_prepared_calls(name):
    spec = getattr(getattr(cudnn, name), "__prepared__", None)
    assert isinstance(spec, P._Spec)
    inputs, outputs, inplace = FUNCTIONS[name]
    assert spec.outputs == outputs and spec.arrays == inputs | outputs and spec.inplace is inplace


# ---------------------------------------------------------------- CPU: stubbed C calls

@pytest.fixture
def cpu(monkeypatch):
    """Stubs: the algorithm choice (IMPLICIT_PRECOMP_GEMM / algorithm 0, 256 bytes of workspace), allocations (new
    made-up addresses) and the queuing C calls (``stub(name)`` -> its FakeCFunction)."""
    monkeypatch.setattr(cv, "_choose", lambda handle, g, direction, *a: (
        capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM if direction == "forward" else
        cv._alg.algorithm_enum(direction)(0), capi.CUDNN_DEFAULT_MATH, 256))
    monkeypatch.setattr(cv, "empty", lambda shape, dtype, **kw: arr(tuple(np.atleast_1d(shape)), dtype))
    monkeypatch.setattr(cv, "new_output", lambda handle, shape, dtype: arr(tuple(shape), dtype))
    monkeypatch.setattr(cv, "zeros", lambda shape, dtype, **kw: arr(tuple(np.atleast_1d(shape)), dtype))

    fake_prepared_outputs(monkeypatch)

    def stub(name):
        fn = FakeCFunction()
        monkeypatch.setattr(capi, name, fn)
        return fn
    return stub


def fake_handle():
    """A Handle never created in cuDNN, its workspace uncapped."""
    h = fake_cudnn_handle()
    h.workspace.cap = None
    return h


def entries(h):
    return len(h.cache.get(P.CACHE, {}))


def counted(monkeypatch, name):
    """Count the runs of ``cv.<name>`` (a validated path's body)."""
    runs, real = [], getattr(cv, name)
    monkeypatch.setattr(cv, name, lambda *a, **k: runs.append(1) or real(*a, **k))
    return runs


CONV = cv.Convolution(padding=1)
X, W, Y = (2, 4, 6, 6), (8, 4, 3, 3), (2, 8, 6, 6)


@pytest.mark.parametrize("z,given", [("none", True), ("none", False), ("y", True), ("separate", True),
                                     ("separate", False)])  # z=y needs y given
def test_fused_call_replays_with_new_addresses(cpu, monkeypatch, z, given):
    """Three calls on arrays at new addresses, the workspace grown in between: one validated run, then replays that
    pass every new address (x, w, bias, z, y; y zeroed first where z is not given) and fetch the workspace again."""
    fused, zero = cpu("cudnnConvolutionBiasActivationForward"), cpu("cudnnSetTensor")
    runs = counted(monkeypatch, "_bias_activation_legacy")
    h = fake_handle()
    for i in range(3):
        h.workspace.ptr = 0x5000_0000 + 0x1000 * i
        x, w, b = arr(X), arr(W), arr((8,))
        y = arr(Y) if given else None
        zz = {"none": None, "y": y, "separate": arr(Y)}[z]
        got = cudnn.convolution_bias_activation_forward(h, CONV, x, w, b, z=zz, y=y, beta=0.0 if zz is None else 0.5,
                                                        engine="legacy")
        assert got is y if given else got.shape == Y
        c = fused.calls[-1]
        assert (c[3], c[5], c[14], c[17]) == (x.ptr, w.ptr, b.ptr, got.ptr)
        assert c[12] == (got.ptr if zz is None else zz.ptr) and c[8:10] == (h.workspace.ptr, 256)
        if zz is None:
            assert zero.calls[-1][2] == got.ptr  # y zeroed: it is z
    assert len(fused.calls) == 3 and len(zero.calls) == (3 if z == "none" else 0)
    assert runs == [1] and entries(h) == 1


def test_fused_call_refusals_reach_no_c_call(cpu):
    fused = cpu("cudnnConvolutionBiasActivationForward")
    cpu("cudnnSetTensor")
    h = fake_handle()
    x, w, b, y = arr(X), arr(W), arr((8,)), arr(Y)
    cudnn.convolution_bias_activation_forward(h, CONV, x, w, b, y=y, engine="legacy")
    call = cudnn.convolution_bias_activation_forward
    for match, run in (
            ("shares its memory with x, w or bias", lambda: call(h, CONV, x, w, b, y=x, engine="legacy")),
            ("shares memory with bias", lambda: call(h, CONV, x, w, b, y=arr(Y, ptr=b.ptr), engine="legacy")),
            ("z must look like y", lambda: call(h, CONV, x, w, b, z=arr((2, 8, 6, 5)), beta=1.0, engine="legacy")),
            ("beta scales z", lambda: call(h, CONV, x, w, b, beta=0.5, engine="legacy")),
            ("only with IMPLICIT_PRECOMP_GEMM", lambda: call(h, CONV, x, w, b, activation="identity",
                                                             algo="IMPLICIT_GEMM", engine="legacy")),
            ("no z input", lambda: call(h, CONV, x, w, b, z=arr(Y), engine="graph")),
            ("one per channel", lambda: call(h, CONV, x, w, arr((5,)), engine="legacy"))):
        with pytest.raises(InvalidValueError, match=match):
            run()
    assert len(fused.calls) == 1 and entries(h) == 1


@pytest.mark.parametrize("direction,fn,shapes", [
    ("forward", "cudnnConvolutionForward", (X, W, Y)),
    ("backward_data", "cudnnConvolutionBackwardData", (W, Y, X)),
    ("backward_filter", "cudnnConvolutionBackwardFilter", (X, Y, W)),
])
@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
def test_directions_replay_with_new_addresses(cpu, monkeypatch, direction, fn, shapes, given):
    c_fn = cpu(fn)
    runs = counted(monkeypatch, "_legacy")
    call = getattr(cudnn, f"convolution_{direction}")
    shape_kw = {"forward": {}, "backward_data": {"x_shape": X}, "backward_filter": {"w_shape": W}}[direction]
    out_kw = {"forward": "y", "backward_data": "dx", "backward_filter": "dw"}[direction]
    h = fake_handle()
    for i in range(3):
        h.workspace.ptr = 0x5000_0000 + 0x1000 * i
        a, b = arr(shapes[0]), arr(shapes[1])
        out = arr(shapes[2]) if given else None
        got = call(h, CONV, a, b, **{out_kw: out}, **shape_kw, alpha=0.5, engine="legacy")
        assert got is out if given else got.shape == shapes[2]
        c = c_fn.calls[-1]
        assert (c[3], c[5], c[12], c[8], c[9]) == (a.ptr, b.ptr, got.ptr, h.workspace.ptr, 256)
        assert c[1]._obj.value == 0.5  # alpha
    assert len(c_fn.calls) == 3 and runs == [1] and entries(h) == 1


def test_asymmetric_padding_runs_on_a_scratch_copy_and_makes_no_prepared_call(cpu):
    """x is copied into a zero-padded scratch buffer: an address none of the call's arrays has, so each call is
    validated (and queues the copy and the convolution again)."""
    fwd, copy = cpu("cudnnConvolutionForward"), cpu("cudnnTransformTensor")
    conv = cv.Convolution(padding=((0, 1), (1, 0)))
    h = fake_handle()
    for i in range(2):
        x, w = arr((1, 2, 5, 5)), arr((3, 2, 2, 2))
        y = cudnn.convolution_forward(h, conv, x, w, engine="legacy")
        assert y.shape == (1, 3, 5, 5)
        assert copy.calls[-1][3] == x.ptr and fwd.calls[-1][3] not in (x.ptr, w.ptr)  # on the scratch copy
    assert len(fwd.calls) == len(copy.calls) == 2 and entries(h) == 0


@pytest.fixture
def runner(monkeypatch):
    """The graph path itself (cudnn_py.graph.conv), its plans, packs and cuDNN's execute stubbed: (packs made, as
    their first three data pointers; graphs planned)."""
    made, planned = [], []
    monkeypatch.setattr(R, "VariantPack", lambda uids, ptrs, ws: made.append(list(ptrs)[:3])
                        or types.SimpleNamespace(ptr=ctypes.c_void_p(1000 + len(made))))
    monkeypatch.setitem(R._BARE, "cudnnBackendExecute", lambda h, plan, vp: 0)

    def plan_graph(g, handle, inputs, outputs, autotune):
        planned.append(g.name)
        return fake_plan(g)
    from cudnn_py.graph import conv as gconv
    monkeypatch.setattr(gconv, "plan_graph", plan_graph)
    monkeypatch.setattr(gconv, "new_output", lambda handle, shape, dtype, strides=None: arr(shape, dtype, strides))
    return made, planned


@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
def test_graph_route_replays_through_its_runner(cpu, runner, given):
    """The graph is built and planned on the first call alone (no cache of runners: the prepared call replays)."""
    made, planned = runner
    h = fake_handle()
    for _ in range(3):
        x, w = arr(X), arr(W)
        y = arr(Y) if given else None
        got = cudnn.convolution_forward(h, CONV, x, w, y=y, engine="graph")
        assert got is y if given else got.shape == Y
        assert made[-1] == [x.ptr, w.ptr, got.ptr]
    assert planned == ["conv_fprop"] and len(made) == 3 and entries(h) == 1
    assert not any(n.startswith("graph.conv") for n in h.cache)


@pytest.mark.parametrize("name,args,out", [("conv_forward", (X, W), "y"), ("conv_backward_data", (Y, W), "dx"),
                                           ("conv_backward_filter", (Y, X), "dw")])
def test_graph_conv_functions_are_prepared_calls(cpu, runner, name, args, out):
    """cudnn_py.graph.conv_* build their graph on a signature's first call and replay it after (they kept an
    executor cache of their own before)."""
    from cudnn_py import graph
    made, planned = runner
    h = fake_handle()
    fn = getattr(graph, name)
    assert isinstance(getattr(fn, "__prepared__", None), P._Spec)
    kw = {"x_shape": X} if name == "conv_backward_data" else {"w_shape": W} if name == "conv_backward_filter" else {}
    for _ in range(3):
        a, b = arr(args[0]), arr(args[1])
        got = fn(h, a, b, padding=1, **kw)
        assert made[-1] == [a.ptr, b.ptr, got.ptr]
    assert len(planned) == 1 and len(made) == 3 and entries(h) == 1
    y = arr(got.shape)
    assert fn(h, arr(args[0]), arr(args[1]), padding=1, **{out: y}, **kw) is y  # a given output: a new signature
    assert len(planned) == 2


# ---------------------------------------------------------------- GPU: the fused call against its validated path

def _dev(a):
    return cudnn.to_device(np.ascontiguousarray(a))


#: (engine, z, given): the graph path takes no z, and z=y needs y given
_FUSED = [(e, z, g) for e in ("legacy", "graph", "auto") for z in ("none", "y", "separate") for g in (True, False)
          if z == "none" or e != "graph" and (g or z != "y")]


@pytest.mark.gpu
@pytest.mark.parametrize("engine,z,given", _FUSED)
@pytest.mark.parametrize("activation", ["relu", "identity"])
def test_fused_repeat_call_equals_the_validated_call(engine, z, activation, given):
    """Three repeat calls on fresh data at new addresses (given outputs NaN-poisoned, or holding z's values where z
    is y) match the validated path on a second handle whose caches were cleared; nothing is prepared again."""
    rng = np.random.default_rng()
    beta = 0.0 if z == "none" else 0.5

    def inputs():
        return {"x": _dev(rng.standard_normal(X).astype(np.float32)),
                "w": _dev(rng.standard_normal(W).astype(np.float32)),
                "b": _dev(rng.standard_normal(8).astype(np.float32)),
                "y0": rng.standard_normal(Y).astype(np.float32)}

    def call(h, a, first_given):
        y = None
        if first_given:
            y = _dev(a["y0"] if z == "y" else np.full(Y, np.nan, np.float32))
        zz = {"none": None, "y": y, "separate": None if z != "separate" else a.setdefault("z", _dev(a["y0"]))}[z]
        got = cudnn.convolution_bias_activation_forward(h, CONV, a["x"], a["w"], a["b"], z=zz, y=y, beta=beta,
                                                        activation=activation, engine=engine)
        assert y is None or got is y
        return got
    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        call(h, inputs(), given)  # makes the prepared call
        n = entries(h)
        for _ in range(3):
            a = inputs()
            got = call(h, a, given)
            ref_h.clear_caches()
            want = call(ref_h, a, given or z == "y")
            g = got.to_numpy()
            np.testing.assert_allclose(g, want.to_numpy(), rtol=1e-5, atol=1e-5)
            assert not np.isnan(g).any()
        assert entries(h) == n >= 1
