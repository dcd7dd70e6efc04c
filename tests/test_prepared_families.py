"""Batch norm, normalisation, dropout and spatial transformer on the prepared call (cudnn_py.calls.prepared), on the
CPU: the public functions are the prepared wrappers; with the queuing C calls stubbed, a fake handle and arrays at
made-up addresses, a repeat call replays with the new addresses (running statistics in place), dropout's mask-order
bookkeeping is repeated and read again per reserve, and a closed descriptor the caller owns is refused on a replay."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py
from cudnn_py import capi
from cudnn_py.calls import prepared as P
from cudnn_py.core.descriptors import Descriptor
from cudnn_py.errors import ClosedError
from cudnn_py.ops import dropout as D
from cudnn_py.ops._common import tensor_desc
from cudnn_py.ops.batchnorm import BatchNormTraining
from helpers import FakeCFunction, fake_array, fake_cudnn_handle

FUNCTIONS = {  # name -> (inputs, outputs) the wrapper keys as arrays
    "batchnorm_forward_training": ({"x", "scale", "bias"},
                                   {"running_mean", "running_var", "saved_mean", "saved_inv_var", "y"}),
    "batchnorm_forward_inference": ({"x", "scale", "bias", "mean", "var"}, {"y"}),
    "batchnorm_backward": ({"x", "dy", "scale", "saved_mean", "saved_inv_var"}, {"dx", "dscale", "dbias"}),
    "batchnorm_forward_training_ex": ({"x", "scale", "bias", "z"},
                                      {"running_mean", "running_var", "saved_mean", "saved_inv_var", "y", "reserve"}),
    "batchnorm_backward_ex": ({"x", "y", "dy", "scale", "bias", "saved_mean", "saved_inv_var", "reserve"},
                              {"dx", "dz", "dscale", "dbias"}),
    "normalization_forward_training": ({"x", "scale", "bias", "z"}, {"running_mean", "running_var", "saved_mean",
                                                                     "saved_inv_var", "y", "reserve"}),
    "normalization_forward_inference": ({"x", "scale", "bias", "mean", "var", "z"}, {"y"}),
    "normalization_backward": ({"x", "y", "dy", "scale", "bias", "saved_mean", "saved_inv_var", "reserve"},
                               {"dx", "dz", "dscale", "dbias"}),
    "dropout_forward": ({"x"}, {"y", "reserve"}),
    "dropout_backward": ({"dy", "reserve"}, {"dx"}),
    "spatial_tf_grid_forward": ({"theta"}, {"grid"}),
    "spatial_tf_grid_backward": ({"dgrid"}, {"dtheta"}),
    "spatial_tf_sampler_forward": ({"x", "grid"}, {"y"}),
    "spatial_tf_sampler_backward": ({"x", "grid", "dy"}, {"dx", "dgrid"}),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_public_functions_are_prepared_calls(name):
    """The function form is the prepared call's wrapper; in-out arrays (running statistics, given saved statistics,
    the reserve) are outputs, and none of these calls takes an output that is an input (cuDNN documents none)."""
    spec = getattr(getattr(cudnn_py, name), "__prepared__", None)
    assert isinstance(spec, P._Spec)
    inputs, outputs = FUNCTIONS[name]
    assert spec.outputs == outputs and spec.arrays == inputs | outputs and spec.inplace is False


# ---------------------------------------------------------------- a fake handle, stubbed C calls

def arr(shape, dtype=np.float32, strides=None):
    return fake_array(shape, dtype, strides)


def nhwc(shape):
    n, c, h, w = shape
    return arr(shape, strides=(h * w * c, 1, w * c, c))


fake_handle, CFn = fake_cudnn_handle, FakeCFunction


@pytest.fixture
def stub(monkeypatch):
    def make(name):
        fn = CFn()
        monkeypatch.setattr(capi, name, fn)
        return fn
    return make


def entries(h):
    return len(h.cache.get(P.CACHE, {}))


def test_batchnorm_training_replays_with_new_addresses_and_running_stats_in_place(stub):
    fn = stub("cudnnBatchNormalizationForwardTraining")
    h = fake_handle()
    shape, p = (2, 4, 3, 3), (4,)
    for i in range(3):
        x, sc, bi, rm, rv, sm, siv, y = arr(shape), arr(p), arr(p), arr(p), arr(p), arr(p), arr(p), arr(shape)
        r = cudnn_py.batchnorm_forward_training(h, x, sc, bi, running_mean=rm, running_var=rv, saved_mean=sm,
                                                saved_inv_var=siv, y=y, factor=0.25, engine="legacy")
        assert type(r) is BatchNormTraining
        assert (r.y, r.saved_mean, r.saved_inv_var, r.running_mean, r.running_var, r.reserve) == (y, sm, siv, rm, rv,
                                                                                                   None)
        c = fn.calls[-1]
        assert [c[k] for k in (5, 7, 9, 10, 12, 13, 15, 16)] == [a.ptr for a in (x, y, sc, bi, rm, rv, sm, siv)]
        assert c[11] == 0.25
        assert entries(h) == 1
    assert len(fn.calls) == 3


def test_a_changed_option_is_another_prepared_call(stub):
    fn = stub("cudnnBatchNormalizationForwardInference")
    h = fake_handle()
    shape, p = (2, 4, 3, 3), (1, 4, 1, 1)
    for eps in (1e-5, 1e-5, 1e-3):
        cudnn_py.batchnorm_forward_inference(h, arr(shape), arr(p), arr(p), arr(p), arr(p), epsilon=eps, y=arr(shape),
                                             engine="legacy")
    assert entries(h) == 2 and [c[-1] for c in fn.calls] == [1e-5, 1e-5, 1e-3]


def test_normalization_backward_fetches_the_workspace_on_replay(stub, monkeypatch):
    fn = stub("cudnnNormalizationBackward")
    monkeypatch.setattr(cudnn_py.ops.normalization, "_sizes", lambda *a: (0, 256, 0))
    h = fake_handle()
    shape, p = (2, 4, 3, 3), (4,)
    for i in range(2):
        h.workspace.get = lambda n, s=None, i=i: 0x6000_0000 + i  # a grown workspace: a new buffer
        g = cudnn_py.normalization_backward(h, *[arr(shape) for _ in range(3)], *[arr(p) for _ in range(4)],
                                            dx=arr(shape), dscale=arr(p), dbias=arr(p), engine="legacy")
        assert g.dz is None
        assert fn.calls[-1][-5:-3] == (0x6000_0000 + i, 256)
    assert entries(h) == 1


@pytest.mark.parametrize("ops", ["bn", "bn_add_activation"])
def test_batchnorm_backward_ex_auto_runs_the_legacy_call_on_the_shared_fused_backward(stub, monkeypatch, ops):
    """engine 'auto' of the ``..._ex`` pair is the legacy call; every checked array reaches its place in C."""
    fn = stub("cudnnBatchNormalizationBackwardEx")
    monkeypatch.setattr(cudnn_py.ops.batchnorm, "_ex_sizes", lambda *a: (0, 256, 0))
    h = fake_handle()
    shape, p = (2, 4, 3, 3), (4,)
    x, y, dy, dx, dz = (arr(shape) for _ in range(5))
    sc, bi, sm, siv, ds, db = (arr(p) for _ in range(6))
    dz = dz if ops == "bn_add_activation" else None
    g = cudnn_py.batchnorm_backward_ex(h, x, y, dy, sc, bi, sm, siv, ops=ops, dx=dx, dz=dz, dscale=ds, dbias=db)
    assert g == (dx, ds, db, dz)
    c = fn.calls[-1]
    assert [c[k] for k in (8, 10, 12, 16, 18, 19, 20, 21, 23, 24)] == [a.ptr for a in (x, y, dy, dx, sc, bi, ds, db,
                                                                                         sm, siv)]
    assert c[14] == (None if dz is None else dz.ptr) and c[27] == 256 and (c[25] is None) == (ops == "bn")


def _dropout():
    """A Dropout with a C descriptor and made-up states (cudnnSetDropoutDescriptor needs a GPU)."""
    d = D.Dropout.__new__(D.Dropout)
    Descriptor.__init__(d)
    d.states = arr((64,), np.uint8)
    return d


def test_dropout_keys_on_the_dropout_object_and_repeats_the_order_bookkeeping(stub):
    fwd, bwd = stub("cudnnDropoutForward"), stub("cudnnDropoutBackward")
    h = fake_handle()
    shape = (2, 4, 3, 5)
    need = D.dropout_reserve_size(shape)
    d1, d2 = _dropout(), _dropout()
    reserves = []
    for d in (d1, d1, d2, d1):  # a Dropout with equal settings but its own states is another prepared call
        x, y, r = nhwc(shape), nhwc(shape), arr((need,), np.uint8)
        assert cudnn_py.dropout_forward(h, d, x, y=y, reserve=r) == (y, r)
        assert fwd.calls[-1][1] is d.ptr and fwd.calls[-1][-2:] == (r.ptr, need)
        assert D._ORDERS[(0, r.ptr)] == (shape, (0, 2, 3, 1))  # repeated by the replay for the new reserve
        reserves.append(r)
    assert entries(h) == 2
    # the backward reads each reserve's order when it runs: NHWC-written masks, then one written in logical order
    want_nhwc = tensor_desc((2, 3, 5, 4), np.float32, (60, 5, 1, 15)).ptr
    for r in reserves[:2]:
        cudnn_py.dropout_backward(h, d1, arr(shape), r, dx=arr(shape))
        assert bwd.calls[-1][2].value == want_nhwc.value
    x, y, r = arr(shape), arr(shape), arr((need,), np.uint8)
    cudnn_py.dropout_forward(h, d1, x, y=y, reserve=r)
    assert (0, r.ptr) not in D._ORDERS
    dy, dx = arr(shape), arr(shape)
    n_entries = entries(h)
    cudnn_py.dropout_backward(h, d1, dy, r, dx=dx)  # the same key as above: a replay
    assert entries(h) == n_entries
    assert bwd.calls[-1][2].value == tensor_desc(shape, np.float32).ptr.value
    assert bwd.calls[-1][3:6:2] == (dy.ptr, dx.ptr) and bwd.calls[-1][6] == r.ptr
    for rr in (*reserves, r):
        D._ORDERS.pop((0, rr.ptr), None)


def test_a_closed_dropout_or_spatial_transformer_is_refused_on_a_replay(stub):
    fwd, grid = stub("cudnnDropoutForward"), stub("cudnnSpatialTfGridGeneratorForward")
    h = fake_handle()
    d = _dropout()
    shape = (2, 4, 3, 5)
    need = D.dropout_reserve_size(shape)
    for _ in range(2):
        cudnn_py.dropout_forward(h, d, arr(shape), y=arr(shape), reserve=arr((need,), np.uint8))
    st = cudnn_py.SpatialTransformer((2, 3, 4, 5))
    for _ in range(2):
        cudnn_py.spatial_tf_grid_forward(h, arr((2, 2, 3)), st, grid=arr((2, 4, 5, 2)))
    assert entries(h) == 2 and len(fwd.calls) == len(grid.calls) == 2
    d.close()
    st.close()
    with pytest.raises(ClosedError):
        cudnn_py.dropout_forward(h, d, arr(shape), y=arr(shape), reserve=arr((need,), np.uint8))
    with pytest.raises(ClosedError):
        cudnn_py.spatial_tf_grid_forward(h, arr((2, 2, 3)), st, grid=arr((2, 4, 5, 2)))
    assert len(fwd.calls) == len(grid.calls) == 2  # nothing reached C


def test_sampler_backward_replays_both_outputs(stub):
    fn = stub("cudnnSpatialTfSamplerBackward")
    h = fake_handle()
    for _ in range(3):
        x, g, dy, dx, dg = arr((2, 3, 4, 4)), arr((2, 5, 6, 2)), arr((2, 3, 5, 6)), arr((2, 3, 4, 4)), arr((2, 5, 6, 2))
        assert cudnn_py.spatial_tf_sampler_backward(h, x, g, dy, dx=dx, dgrid=dg, beta_dgrid=0.5) == (dx, dg)
        c = fn.calls[-1]
        assert (c[4], c[7], c[10], c[11], c[13]) == (x.ptr, dx.ptr, dy.ptr, g.ptr, dg.ptr)
    assert entries(h) == 1 and len(fn.calls) == 3
