"""Batch norm, normalisation, dropout and the spatial transformer on the prepared call, on the GPU: a repeat call
(replayed from its prepared call) gives what the validated path gives on fresh random data at new addresses, with
NaN-poisoned given outputs, running statistics updated in place exactly as the validated call updates copies of them,
and the handle's prepared calls not growing (replayed, not rebuilt)."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.calls import prepared as P
from cudnn_py.errors import CudnnNotSupportedError
from cudnn_py.graph.legacy import GraphPathRefused
from cudnn_py.core.memory import DeviceArray

pytestmark = pytest.mark.gpu
rng = np.random.default_rng()
SHAPE = (4, 8, 5, 6)  # C divisible by 4, as the fused batch-norm kernels want
PSHAPE = (1, 8, 1, 1)
TOL = dict(rtol=1e-5, atol=2e-5)  # float32; the engines' reductions may differ in order (atol for values near 0)
EPS = 1e-4


def dev(a) -> DeviceArray:
    return cudnn.to_device(np.ascontiguousarray(a))


def normal(shape=SHAPE):
    return rng.standard_normal(shape).astype(np.float32)


def positive(shape=PSHAPE):
    return rng.uniform(0.5, 2.0, shape).astype(np.float32)


def nan(shape):
    return cudnn.to_device(np.full(shape, np.nan, np.float32))


def saved_stats(x):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    return mean.astype(np.float32), (1 / np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + EPS)).astype(np.float32)


class Case(NamedTuple):
    inputs: Callable[[], dict]  # fresh device inputs (new addresses), shared by the call and its reference
    inouts: Callable[[], dict]  # host start values of arrays updated in place (running statistics): a copy each side
    outs: dict  # name -> shape of each output given (NaN-poisoned) in the "given" variant
    call: Callable  # call(handle, arrays, engine) -> result
    engines: tuple = ("legacy", "graph", "auto")


def _bn_inputs():
    return {"x": dev(normal()), "scale": dev(positive()), "bias": dev(normal(PSHAPE))}


def _running():
    return {"running_mean": normal(PSHAPE), "running_var": positive()}


def _bn_backward_inputs():
    x = normal()
    sm, siv = saved_stats(x)
    return {"x": dev(x), "dy": dev(normal()), "scale": dev(positive()), "saved_mean": dev(sm),
            "saved_inv_var": dev(siv)}


_PREP: list = []


def _prep_handle():
    """A handle of the inputs' own (made on first use, kept: the arrays it made outlive each test's handles)."""
    if not _PREP:
        _PREP.append(cudnn.Handle())
    return _PREP[0]


def _ex_backward_inputs(fwd, ops):
    """The inputs of a fused backward: a legacy fused forward's y, saved statistics and reserve (on a handle of its
    own: the tested handle's prepared calls stay the backward's)."""
    def make():
        a = _bn_inputs()
        if ops.endswith("add_activation"):
            a["z"] = dev(normal())
        ph = _prep_handle()
        r = fwd(ph, a, ops)
        ph.synchronize()
        a.pop("z", None)
        a.update(y=r.y, saved_mean=r.saved_mean, saved_inv_var=r.saved_inv_var, reserve=r.reserve, dy=dev(normal()))
        return a
    return make


def _bn_ex_fwd(h, a, ops):
    return cudnn.batchnorm_forward_training_ex(h, a["x"], a["scale"], a["bias"], z=a.get("z"), ops=ops, epsilon=EPS,
                                              engine="legacy")


def _norm_fwd(h, a, ops):
    return cudnn.normalization_forward_training(h, a["x"], a["scale"], a["bias"], z=a.get("z"), ops=ops, epsilon=EPS,
                                               engine="legacy")


def _with_z(inputs, ops):
    def make():
        a = inputs()
        if ops.endswith("add_activation"):
            a["z"] = dev(normal())
        return a
    return make


TRAINING_OUTS = {"y": SHAPE, "saved_mean": PSHAPE, "saved_inv_var": PSHAPE}
GRAD_OUTS = {"dx": SHAPE, "dscale": PSHAPE, "dbias": PSHAPE}

CASES: dict[str, Case] = {
    "batchnorm_forward_training": Case(_bn_inputs, _running, TRAINING_OUTS, lambda h, a, e: (
        cudnn.batchnorm_forward_training(h, a["x"], a["scale"], a["bias"], running_mean=a["running_mean"],
                                         running_var=a["running_var"], saved_mean=a.get("saved_mean"),
                                         saved_inv_var=a.get("saved_inv_var"), y=a.get("y"), factor=0.25,
                                         epsilon=EPS, engine=e))),
    "batchnorm_forward_inference": Case(
        lambda: dict(_bn_inputs(), mean=dev(normal(PSHAPE)), var=dev(positive())), dict, {"y": SHAPE},
        lambda h, a, e: cudnn.batchnorm_forward_inference(h, a["x"], a["scale"], a["bias"], a["mean"], a["var"],
                                                          epsilon=EPS, y=a.get("y"), engine=e)),
    "batchnorm_backward": Case(_bn_backward_inputs, dict, GRAD_OUTS, lambda h, a, e: cudnn.batchnorm_backward(
        h, a["x"], a["dy"], a["scale"], a["saved_mean"], a["saved_inv_var"], epsilon=EPS, dx=a.get("dx"),
        dscale=a.get("dscale"), dbias=a.get("dbias"), engine=e)),
    "normalization_forward_inference": Case(
        lambda: dict(_bn_inputs(), mean=dev(normal(PSHAPE)), var=dev(positive())), dict, {"y": SHAPE},
        lambda h, a, e: cudnn.normalization_forward_inference(h, a["x"], a["scale"], a["bias"], a["mean"], a["var"],
                                                              epsilon=EPS, y=a.get("y"), engine=e)),
    "spatial_tf_grid_forward": Case(lambda: {"theta": dev(normal((4, 2, 3)) * 0.5)}, dict, {"grid": (4, 5, 6, 2)},
                                    lambda h, a, e: cudnn.spatial_tf_grid_forward(h, a["theta"], SHAPE,
                                                                                  grid=a.get("grid")), (None,)),
    "spatial_tf_grid_backward": Case(lambda: {"dgrid": dev(normal((4, 5, 6, 2)))}, dict, {"dtheta": (4, 2, 3)},
                                     lambda h, a, e: cudnn.spatial_tf_grid_backward(h, a["dgrid"],
                                                                                    dtheta=a.get("dtheta")), (None,)),
    "spatial_tf_sampler_forward": Case(
        lambda: {"x": dev(normal((4, 8, 7, 9))), "grid": dev(rng.uniform(-1.1, 1.1, (4, 5, 6, 2)).astype(np.float32))},
        dict, {"y": SHAPE}, lambda h, a, e: cudnn.spatial_tf_sampler_forward(h, a["x"], a["grid"], y=a.get("y")),
        (None,)),
    "spatial_tf_sampler_backward": Case(
        lambda: {"x": dev(normal((4, 8, 7, 9))), "grid": dev(rng.uniform(-1.1, 1.1, (4, 5, 6, 2)).astype(np.float32)),
                 "dy": dev(normal())},
        dict, {"dx": (4, 8, 7, 9), "dgrid": (4, 5, 6, 2)},
        lambda h, a, e: cudnn.spatial_tf_sampler_backward(h, a["x"], a["grid"], a["dy"], dx=a.get("dx"),
                                                          dgrid=a.get("dgrid")), (None,)),
}
for _fwd, _bwd, _fwd_run, _opses in (  # the _ex batch-norm pair and the normalization API: one shape of call
        (cudnn.batchnorm_forward_training_ex, cudnn.batchnorm_backward_ex, _bn_ex_fwd, ("bn", "bn_add_activation")),
        (cudnn.normalization_forward_training, cudnn.normalization_backward, _norm_fwd,
         ("norm", "norm_add_activation"))):
    for _ops in _opses:
        CASES[f"{_fwd.__name__}[{_ops}]"] = Case(
            _with_z(_bn_inputs, _ops), _running, TRAINING_OUTS, lambda h, a, e, ops=_ops, fwd=_fwd: fwd(
                h, a["x"], a["scale"], a["bias"], z=a.get("z"), ops=ops, running_mean=a["running_mean"],
                running_var=a["running_var"], saved_mean=a.get("saved_mean"), saved_inv_var=a.get("saved_inv_var"),
                y=a.get("y"), factor=0.25, epsilon=EPS, engine=e))
        CASES[f"{_bwd.__name__}[{_ops}]"] = Case(
            _ex_backward_inputs(_fwd_run, _ops), dict,
            dict(GRAD_OUTS, **({"dz": SHAPE} if _ops.endswith("add_activation") else {})),
            lambda h, a, e, ops=_ops, bwd=_bwd: bwd(
                h, a["x"], a["y"], a["dy"], a["scale"], a["bias"], a["saved_mean"], a["saved_inv_var"], a["reserve"],
                ops=ops, epsilon=EPS, dx=a.get("dx"), dz=a.get("dz"), dscale=a.get("dscale"), dbias=a.get("dbias"),
                engine=e))

PARAMS = [(name, engine) for name, case in CASES.items() for engine in case.engines]


def _results(res) -> dict:
    """The result's arrays by name (a NamedTuple's fields but None and the reserve, whose bytes are cuDNN's own: the
    backward calls check it), or {"out": res}."""
    if isinstance(res, tuple):
        fields = res._asdict()  # type: ignore[attr-defined]
        return {k: v for k, v in fields.items() if v is not None and k != "reserve"}
    return {"out": res}


def _call(h, case: Case, ins: dict, inouts: dict, given: bool, engine):
    arrays = dict(ins, **{k: dev(v) for k, v in inouts.items()})
    if given:
        arrays.update({k: nan(s) for k, s in case.outs.items()})
    res = case.call(h, arrays, engine)
    if given:
        for k in case.outs:
            assert (res if not isinstance(res, tuple) else getattr(res, k)) is arrays[k]
    return res, arrays


@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
@pytest.mark.parametrize("name,engine", PARAMS)
def test_repeat_call_equals_the_validated_call(name, engine, given):
    case = CASES[name]
    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        try:
            _call(h, case, case.inputs(), case.inouts(), given, engine)  # makes the prepared call
        except (CudnnNotSupportedError, GraphPathRefused) as e:
            pytest.skip(f"{name} engine={engine}: {e}")
        entries = len(h.cache.get(P.CACHE, {}))
        for _ in range(3):  # fresh data, new addresses, poisoned outputs, running statistics from the same values
            ins, inouts = case.inputs(), case.inouts()
            got, got_arrays = _call(h, case, ins, inouts, given, engine)
            ref_h.clear_caches()  # the validated path: a handle with no prepared calls
            want, want_arrays = _call(ref_h, case, ins, inouts, False, engine)
            g, w = _results(got), _results(want)
            assert g.keys() == w.keys()
            for k in g:
                gv = g[k].to_numpy()
                np.testing.assert_allclose(gv, w[k].to_numpy(), err_msg=k, **TOL)
                assert not np.isnan(gv).any(), k
            for k in inouts:  # updated in place as the validated call updated its copy
                np.testing.assert_allclose(got_arrays[k].to_numpy(), want_arrays[k].to_numpy(), err_msg=k, **TOL)
                assert not np.allclose(got_arrays[k].to_numpy(), inouts[k]), f"{k} was not updated"
        assert len(h.cache[P.CACHE]) == entries >= 1  # replayed, not rebuilt


# ---------------------------------------------------------------- dropout: the RNG states in lockstep

def _dense(host, layout):
    if layout == "nchw":
        return dev(host)
    n, c, hh, w = host.shape
    buf = dev(host.transpose(0, 2, 3, 1))
    return DeviceArray(buf.ptr, host.shape, buf.dtype, (hh * w * c, 1, w * c, c), owner=buf)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
def test_dropout_forward_repeat_call_draws_the_validated_masks(given, layout):
    """The prepared forward queues cudnnDropoutForward on the same Dropout (keyed by identity: its own states), so
    it draws what the validated call draws from a Dropout restored from the same states, and advances the states
    alike."""
    p, seed = 0.3, 1234
    need = cudnn.dropout_reserve_size(SHAPE)
    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        d = cudnn.Dropout(h, p, seed)

        def call(hh, dd, x):
            y = _dense(np.full(SHAPE, np.nan, np.float32), layout) if given else None
            r = cudnn.empty((need,), np.uint8) if given else None
            out = cudnn.dropout_forward(hh, dd, x, y=y, reserve=r)
            if given:
                assert out.y is y and out.reserve is r
            return out
        call(h, d, _dense(normal(), layout))
        entries = len(h.cache.get(P.CACHE, {}))
        for _ in range(3):
            states = d.states.to_numpy()
            x = _dense(normal(), layout)
            got = call(h, d, x)
            ref_h.clear_caches()
            dref = cudnn.Dropout(ref_h, p, seed, states=dev(states))
            want = call(ref_h, dref, x)
            np.testing.assert_array_equal(got.y.to_numpy(), want.y.to_numpy())
            np.testing.assert_array_equal(d.states.to_numpy(), dref.states.to_numpy())  # advanced alike
            assert not np.isnan(got.y.to_numpy()).any()
            # the mask each reserve holds, as each backward reads it (the replayed forward noted its order)
            dy = normal()
            np.testing.assert_array_equal(cudnn.dropout_backward(h, d, dev(dy), got.reserve).to_numpy(),
                                          cudnn.dropout_backward(ref_h, dref, dev(dy), want.reserve).to_numpy())
        assert len(h.cache[P.CACHE]) == entries + 1 >= 2  # the forward and the (first) backward's, no more


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
def test_dropout_backward_repeat_call_equals_the_validated_call(given, layout):
    """The backward's descriptors follow the order the reserve's forward wrote the mask in (NHWC forwards, an NCHW
    dy): a replay reads it again for its reserve."""
    with cudnn.Handle() as h, cudnn.Handle() as ref_h, cudnn.Handle() as ph:
        d, dref, dprep = cudnn.Dropout(h, 0.4, 7), cudnn.Dropout(ref_h, 0.4, 7), cudnn.Dropout(ph, 0.4, 99)

        def call(hh, dd, dy, r):
            dx = cudnn.to_device(np.full(SHAPE, np.nan, np.float32)) if given else None
            got = cudnn.dropout_backward(hh, dd, dy, r, dx=dx)
            assert not given or got is dx
            return got
        entries = None
        for i in range(4):
            r = cudnn.dropout_forward(ph, dprep, _dense(normal(), layout)).reserve
            ph.synchronize()
            dy = dev(normal())
            got = call(h, d, dy, r)
            if i == 0:
                entries = len(h.cache.get(P.CACHE, {}))
                continue
            ref_h.clear_caches()
            want = call(ref_h, dref, dy, r)
            np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
            assert not np.isnan(got.to_numpy()).any()
        assert len(h.cache[P.CACHE]) == entries >= 1
