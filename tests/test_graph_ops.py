"""The graph operations of issue 12 on CPU: shapes the builders infer, bad input refused before cuDNN is called,
every operation lowering through table-checked attributes (finalize faked: no driver here), version gates for
operations the loaded cuDNN lacks, and the float64 references' backward passes against finite differences."""
import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.graph import BackendDescriptor, Graph, GraphNotSupportedError
from cudnn_py.graph.ops import reshape as reshape_mod
from cudnn_py.graph.ops.norm import norm_axes, stat_shape
from helpers import NoCallHandle, numeric_gradient
from reference import graph_norm as RN
from reference import graph_resample as RR

E4M3 = "float8_e4m3fn"


# -- normalisation: shapes --------------------------------------------------------------------------------------
def test_norm_statistics_follow_the_scale():
    g = Graph(io_dtype="bfloat16")
    x = g.tensor((4, 16, 64), name="x")
    y, mean, inv = g.norm_forward(x, g.tensor((1, 1, 64), name="s"), g.tensor((1, 1, 64), name="b"))
    assert y.shape == x.shape and mean.shape == inv.shape == (4, 16, 1)   # per token
    assert mean.dtype == capi.CUDNN_DATA_FLOAT
    ya, ma, ia = g.norm_forward(x, g.tensor((4, 1, 64), name="sa"), g.tensor((4, 1, 64), name="ba"),
                                mode="ada_layer")
    assert ma.shape == (4, 16, 1)
    xi = g.tensor((2, 8, 5, 5), name="xi", layout="NHWC")
    yi, mi, ii = g.norm_forward(xi, g.tensor((1, 8, 1, 1), name="si"), g.tensor((1, 8, 1, 1), name="bi"),
                                mode="instance")
    assert mi.shape == (2, 8, 1, 1) and yi.strides == xi.strides
    assert norm_axes("batch", (2, 8, 5, 5), (1, 8, 1, 1)) == (0, 2, 3)
    assert stat_shape("layer", (2, 8, 5, 5)) == (2, 1, 1, 1)


def test_norm_backward_shapes_and_dtypes():
    g = Graph(io_dtype="float16")
    x, dy = g.tensor((8, 64, 1, 1), name="x"), g.tensor((8, 64, 1, 1), name="dy")
    sc = g.tensor((1, 64, 1, 1), name="s", dtype="float32")
    m, iv = g.tensor((8, 1, 1, 1), name="m", dtype="float32"), g.tensor((8, 1, 1, 1), name="iv", dtype="float32")
    dx, ds, db = g.norm_backward(dy, x, sc, mean=m, inv_variance=iv)
    assert dx.shape == x.shape and ds.shape == db.shape == sc.shape
    assert ds.set_output(True).dtype == capi.CUDNN_DATA_FLOAT  # the scale's dtype, not the io dtype
    dx2, ds2, db2 = g.norm_backward(dy, x, sc, inv_variance=iv, mode="rms", has_bias=False)
    assert db2 is None and ds2.shape == sc.shape


def test_batch_norm_running_statistics_and_finalize_shapes():
    g = Graph(io_dtype="float16")
    x = g.tensor((4, 8, 6, 6), name="x", layout="NHWC")
    p = [g.tensor((1, 8, 1, 1), name=n, dtype="float32") for n in ("s", "b", "rm", "rv")]
    o = g.batch_norm(x, p[0], p[1], running_mean=p[2], running_var=p[3], momentum=0.1)
    assert o.y.strides == x.strides and o.running_var.shape == (1, 8, 1, 1)
    assert g.batch_norm(x, p[0], p[1]).running_mean is None
    s, sq = g.genstats(x)
    f = g.bn_finalize(s, sq, p[0], p[1], accum_count=4 * 36, running_mean=p[2], running_var=p[3])
    assert f.eq_scale.shape == f.running_var.shape == (1, 8, 1, 1)
    count = [t for t in g.tensors if t.is_by_value and t.dtype == capi.CUDNN_DATA_INT64]
    assert len(count) == 1 and count[0].value == 144
    w = g.bn_backward_weights(g.tensor(x.shape, name="dy", layout="NHWC"), x, p[2], p[3], p[0])
    assert all(t.shape == (1, 8, 1, 1) and t.dtype == capi.CUDNN_DATA_FLOAT for t in w)


# -- normalisation: bad input -----------------------------------------------------------------------------------
@pytest.fixture
def ln():
    g = Graph()
    return g, g.tensor((4, 8, 3, 5), name="x"), g.tensor((1, 8, 3, 5), name="s"), g.tensor((1, 8, 3, 5), name="b")


@pytest.mark.parametrize("eps", [0, -1e-5, float("nan"), float("inf")])
def test_epsilon_must_be_positive_and_finite(ln, eps):
    g, x, s, b = ln
    with pytest.raises(ValueError, match="epsilon must be"):
        g.norm_forward(x, s, b, epsilon=eps)
    with pytest.raises(ValueError, match="epsilon must be"):
        g.batch_norm(x, g.tensor((1, 8, 1, 1)), g.tensor((1, 8, 1, 1)), epsilon=eps)


def test_epsilon_type_checked(ln):
    g, x, s, b = ln
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        g.norm_forward(x, s, b, epsilon=True)


def test_scale_and_bias_must_match_the_normalised_dims(ln):
    g, x, s, b = ln
    with pytest.raises(ValueError, match=r"needs scale of shape \(1, 8, 3, 5\)"):
        g.norm_forward(x, g.tensor((1, 8, 1, 1)), b)                 # per channel: not a layer-norm scale
    with pytest.raises(ValueError, match=r"needs bias of shape \(1, 8, 3, 5\)"):
        g.norm_forward(x, s, g.tensor((1, 1, 3, 5)))                 # bias must match the scale
    with pytest.raises(ValueError, match="does not broadcast"):
        g.norm_forward(x, g.tensor((1, 8, 3, 4)), b)
    with pytest.raises(ValueError, match="spans none"):
        g.norm_forward(x, g.tensor((1, 1, 1, 1)), g.tensor((1, 1, 1, 1)))
    with pytest.raises(ValueError, match=r"needs scale of shape \(1, 8, 1, 1\)"):
        g.norm_forward(x, s, b, mode="instance")
    with pytest.raises(ValueError, match=r"needs scale of shape \(4, 8, 3, 5\)"):
        g.norm_forward(x, s, b, mode="ada_layer")                    # adaptive: one scale per sample
    with pytest.raises(ValueError, match=r"needs scale of shape \(1, 8, 1, 1\)"):
        g.batch_norm(x, s, b)


def test_norm_statistics_and_running_arguments_checked(ln):
    g, x, s, b = ln
    with pytest.raises(ValueError, match=r"inv_variance must have shape \(4, 1, 1, 1\)"):
        g.norm_forward(x, s, b, training=False, mean=g.tensor((4, 1, 1, 1)), inv_variance=g.tensor((1, 8, 1, 1)))
    dy = g.tensor(x.shape, name="dy")
    iv = g.tensor((4, 1, 1, 1), name="iv")
    with pytest.raises(ValueError, match="needs mean="):
        g.norm_backward(dy, x, s, inv_variance=iv)
    with pytest.raises(ValueError, match="rms norm has no mean"):
        g.norm_backward(dy, x, s, mean=iv, inv_variance=iv, mode="rms")
    with pytest.raises(ValueError, match="has_bias=False is for rms"):
        g.norm_backward(dy, x, s, mean=iv, inv_variance=iv, has_bias=False)
    with pytest.raises(ValueError, match="must have one shape"):
        g.norm_backward(g.tensor((4, 8, 3, 4)), x, s, mean=iv, inv_variance=iv)
    c = g.tensor((1, 8, 1, 1), name="c")
    with pytest.raises(ValueError, match="both running_mean and running_var"):
        g.batch_norm(x, c, c, running_mean=c)
    for m in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match="momentum"):
            g.batch_norm(x, c, c, running_mean=c, running_var=c, momentum=m)
    for n in (0, 2.5, True):
        with pytest.raises(ValueError, match="accum_count"):
            g.bn_finalize(c, c, c, c, accum_count=n, running_mean=c, running_var=c)
    with pytest.raises(ValueError, match=r"sum must be \(1, C, 1, ...\)"):
        g.bn_finalize(x, c, c, c, accum_count=4, running_mean=c, running_var=c)
    with pytest.raises(ValueError, match="needs running_mean= and running_var="):
        g.bn_finalize(c, c, c, c, accum_count=4, running_mean=c, running_var=None)
    with pytest.raises(ValueError, match="no batch-norm inference"):
        g.norm_forward(x, c, c, mode="batch", training=False, mean=c, inv_variance=c)


def test_refused_norm_calls_leave_the_graph_unchanged():
    """A refused call makes no tensor, so a corrected retry with the same name works."""
    g = Graph()
    x, c = g.tensor((4, 8, 3, 5), name="x"), g.tensor((1, 8, 1, 1), name="c")
    s = g.tensor((1, 8, 3, 5), name="s")
    before = list(g.tensors)
    with pytest.raises(ValueError, match="do not pass them"):
        g.norm_forward(x, s, s, mean=c, name="ln")
    with pytest.raises(ValueError, match="both running_mean and running_var"):
        g.batch_norm(x, c, c, running_mean=c, name="bn")
    with pytest.raises(ValueError, match="momentum"):
        g.batch_norm(x, c, c, running_mean=c, running_var=c, momentum=2.0, name="bn")
    with pytest.raises(ValueError, match="needs running_mean= and running_var="):
        g.bn_finalize(c, c, c, c, accum_count=4, running_mean=c, running_var=None, name="fin")
    with pytest.raises(ValueError, match="momentum"):
        g.bn_finalize(c, c, c, c, accum_count=4, running_mean=c, running_var=c, momentum=0, name="fin")
    assert g.tensors == before
    g.norm_forward(x, s, s, name="ln")
    g.batch_norm(x, c, c, running_mean=c, running_var=c, name="bn")
    g.bn_finalize(c, c, c, c, accum_count=4, running_mean=c, running_var=c, name="fin")
    assert [op.kind for op in g.ops] == ["norm_forward", "norm_forward", "bn_finalize"]
    assert list(g.ops[2].inputs) == ["sum", "sqsum", "scale", "bias", "epsilon", "accum_count", "running_mean",
                                     "running_var", "momentum"]


# -- resampling -------------------------------------------------------------------------------------------------
def test_resample_shapes():
    g = Graph(io_dtype="float16")
    x = g.tensor((2, 8, 9, 7), name="x", layout="NHWC")
    y, idx = g.max_pool(x, (2, 3), (2, 1), (1, 0), post_padding=(0, 2), index=True)
    assert y.shape == (2, 8, 5, 7) and idx.shape == y.shape and idx.dtype == capi.CUDNN_DATA_INT8
    assert y.strides == (5 * 7 * 8, 1, 7 * 8, 8)   # channels last like x
    assert g.avg_pool(x, 3).shape == (2, 8, 3, 2)   # stride defaults to the window
    x3 = g.tensor((1, 4, 4, 6, 6), name="x3")
    assert g.avg_pool(x3, (2, 3, 3), 2, (0, 1, 1), include_padding=False).shape == (1, 4, 2, 3, 3)
    dy = g.tensor(y.shape, name="dy", layout="NHWC")
    dx = g.max_pool_backward(dy, (2, 3), (2, 1), (1, 0), post_padding=(0, 2), index=idx, x_shape=x.shape)
    assert dx.shape == x.shape
    assert g.avg_pool_backward(g.tensor((2, 8, 3, 2), name="dya", layout="NHWC"), 3, x_shape=x.shape).shape == x.shape
    xn = g.tensor((2, 8, 8, 8), name="xn")
    yn = g.max_pool(xn, 2)
    assert g.max_pool_backward(g.tensor(yn.shape, name="dyn"), 2, x=xn, y=yn).shape == xn.shape
    assert "resample_forward[max]" in g.describe()


def test_resample_bad_input():
    g = Graph()
    x = g.tensor((2, 8, 8, 8), name="x")
    with pytest.raises(ValueError, match="2-D or 3-D"):
        g.max_pool(g.tensor((2, 8, 8)), 2)
    with pytest.raises(ValueError, match="resample mode must be"):
        g.resample(x, "median", 2)
    with pytest.raises(ValueError, match="window has 3 entries"):
        g.max_pool(x, (2, 2, 2))
    with pytest.raises(ValueError, match="stride must be >= 1"):
        g.max_pool(x, 2, 0)
    with pytest.raises(ValueError, match="smaller than the window"):
        g.max_pool(x, 2, 1, 2)
    with pytest.raises(ValueError, match="gives output"):
        g.max_pool(x, 9)
    with pytest.raises(ValueError, match="padding_mode must be"):
        g.max_pool(x, 2, padding_mode="reflect")
    with pytest.raises(ValueError, match="index=True is for max"):
        g.avg_pool(x, 2, index=True)
    dy = g.tensor((2, 8, 4, 4), name="dy")
    with pytest.raises(ValueError, match="needs the forward's index"):
        g.max_pool_backward(dy, 2, x=x)
    with pytest.raises(ValueError, match="is not the pooled shape"):
        g.avg_pool_backward(g.tensor((2, 8, 4, 4), layout="NHWC"), 3, x_shape=x.shape)
    with pytest.raises(ValueError, match="must have dy's shape"):
        g.max_pool_backward(dy, 2, x=x, y=g.tensor((2, 8, 4, 5)))
    with pytest.raises(TypeError, match="index must be int8"):
        g.max_pool_backward(dy, 2, index=g.tensor((2, 8, 4, 4), dtype="int32"), x_shape=x.shape)
    with pytest.raises(ValueError, match="index= is for max"):
        g.avg_pool_backward(dy, 2, index=g.tensor((2, 8, 4, 4), dtype="int8"))


def test_pool_configurations_measured_broken_are_refused_before_c():
    """cuDNN 9.19 (H100/H200): channels-last bfloat16 2-D pooling forward returns wrong values, channels-last max
    pooling backward from x and y crashes the process, NCHW average pooling backward reads x and y."""
    g = Graph(io_dtype="bfloat16", name="pools")
    x = g.tensor((2, 8, 8, 8), name="x", layout="NHWC")
    with pytest.raises(GraphNotSupportedError, match="bfloat16 2-D pooling engine returns wrong values"):
        g.max_pool(x, 2)
    assert g.max_pool(g.tensor((2, 8, 8, 8), name="xc"), 2).shape == (2, 8, 4, 4)         # NCHW: fine
    assert g.avg_pool(g.tensor((1, 8, 4, 8, 8), name="x3", layout="NHWC"), 2).shape == (1, 8, 2, 4, 4)  # 3-D
    h = Graph(io_dtype="float16")
    xh = h.tensor((2, 8, 8, 8), name="x", layout="NHWC")
    y = h.max_pool(xh, 2)
    dy = h.tensor(y.shape, name="dy", layout="NHWC")
    with pytest.raises(GraphNotSupportedError, match="crashes the process.*pass the forward's index="):
        h.max_pool_backward(dy, 2, x=xh, y=y)
    with pytest.raises(ValueError, match="NCHW layout needs the forward's x= and y="):
        h.avg_pool_backward(h.tensor((2, 8, 4, 4), name="dyc"), 2, x_shape=(2, 8, 8, 8))


# -- rng --------------------------------------------------------------------------------------------------------
def test_rng_arguments():
    g = Graph(io_dtype="float16")
    x = g.tensor((2, 4, 8, 8), name="x")
    m = g.bernoulli(x.shape, 0.25, seed=7)
    assert m.shape == x.shape and g.ops[-1].params == {"distribution": "bernoulli", "probability": 0.25, "seed": 7}
    sd, of = g.tensor((1, 1, 1, 1), name="seed", dtype="int64"), g.tensor((1, 1, 1, 1), name="off", dtype="int64")
    y, mask = g.dropout(x, 0.1, seed=sd, offset=of)
    assert y.shape == mask.shape == x.shape and g.ops[-3].inputs == {"seed": sd, "offset": of}
    for p in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="probability|finite"):
            g.bernoulli(x.shape, p)
    for p in (1.0, -0.5):
        with pytest.raises(ValueError, match=r"rate p must be in \[0, 1\)"):
            g.dropout(x, p)
    with pytest.raises(ValueError, match="offset= goes with a seed tensor"):
        g.bernoulli(x.shape, 0.5, seed=1, offset=of)
    with pytest.raises(ValueError, match="needs an offset tensor"):
        g.bernoulli(x.shape, 0.5, seed=sd)
    with pytest.raises(TypeError, match="device int64 tensor"):
        g.bernoulli(x.shape, 0.5, seed=g.tensor((1, 1, 1, 1), dtype="int32"), offset=of)
    with pytest.raises(TypeError, match="not a bool"):
        g.bernoulli(x.shape, 0.5, seed=True)
    with pytest.raises(ValueError, match="seed must be in"):
        g.bernoulli(x.shape, 0.5, seed=-1)


# -- layout and data movement -----------------------------------------------------------------------------------
def test_concatenate_and_slice_shapes_and_bad_input():
    g = Graph(io_dtype="float16")
    a, b = g.tensor((2, 4, 5, 5), name="a"), g.tensor((2, 6, 5, 5), name="b")
    assert g.concatenate([a, b], 1).shape == (2, 10, 5, 5)
    assert g.concatenate([a, a, a], -1).shape == (2, 4, 5, 15)
    with pytest.raises(ValueError, match="does not match tensors\\[0\\]"):
        g.concatenate([a, b], 2)
    with pytest.raises(ValueError, match="at least two"):
        g.concatenate([a], 1)
    with pytest.raises(TypeError, match="is CUDNN_DATA_FLOAT"):
        g.concatenate([a, g.tensor((2, 4, 5, 5), dtype="float32")], 0)
    with pytest.raises(ValueError, match="out of range"):
        g.concatenate([a, b], 4)
    if reshape_mod._loaded() < reshape_mod.NEEDS["OPERATION_SLICE"]:
        pytest.skip("the loaded cuDNN has no slice operation (its refusal is tested below)")
    assert g.slice(a, (slice(None), slice(1, 4), slice(0, 5, 2))).shape == (2, 3, 3, 5)
    assert g.slice(a, slice(-1, None)).shape == (1, 4, 5, 5)
    with pytest.raises(ValueError, match="outside the tensor"):
        g.slice(a, (slice(0, 3),))
    with pytest.raises(ValueError, match="outside the tensor"):
        g.slice(a, (slice(None), slice(3, 2)))
    with pytest.raises(ValueError, match="step must be >= 1"):
        g.slice(a, (slice(None, None, 0),))
    with pytest.raises(TypeError, match="needs a slice object"):
        g.slice(a, (0,))
    with pytest.raises(ValueError, match="4 slices for a rank-"):
        g.slice(g.tensor((2, 3, 4)), (slice(None),) * 4)
    assert g.transpose(a, (0, 2, 3, 1)).shape == (2, 5, 5, 4)
    with pytest.raises(ValueError, match="not a permutation"):
        g.transpose(a, (0, 1, 1, 2))


def test_reshape_checks():
    g = Graph()
    x = g.tensor((2, 8, 16), name="x")
    assert g.reshape(x, (2, 128, 1)).shape == (2, 128, 1)
    with pytest.raises(ValueError, match="has 256 elements"):
        g.reshape(x, (2, 8, 8))
    with pytest.raises(ValueError, match="positive"):
        g.reshape(x, (256, 0))


def test_operations_the_loaded_cudnn_lacks_are_refused_before_c(monkeypatch):
    monkeypatch.setattr(reshape_mod, "_loaded", lambda: (9, 19, 0))
    g = Graph(name="old")
    x = g.tensor((2, 4, 6), name="x")
    with pytest.raises(GraphNotSupportedError) as e:
        g.slice(x, (slice(0, 1),))
    assert "OPERATION_SLICE needs cuDNN >= 9.22.0" in str(e.value) and "cuDNN 9.19.0" in str(e.value)
    assert "slice(x:[2, 4, 6]" in str(e.value) and "'old'" in str(e.value)
    with pytest.raises(GraphNotSupportedError, match="OPERATION_TRANSPOSE needs cuDNN >= 9.22.0"):
        g.transpose(x, (1, 0, 2))
    with pytest.raises(GraphNotSupportedError, match="must be packed row-major"):
        g.reshape(g.tensor((2, 4, 6), strides=(24, 1, 4)), (8, 6, 1))
    y = g.reshape(x, (8, 6, 1))   # packed: a view, which is what cuDNN 9.19 does
    assert g.ops[-1].params == {"logical_mode": False} and y.shape == (8, 6, 1)
    monkeypatch.setattr(reshape_mod, "_loaded", lambda: (9, 6, 0))
    with pytest.raises(GraphNotSupportedError, match="OPERATION_CONCAT needs cuDNN >= 9.7.0"):
        g.concatenate([x, x], 0)


# -- FP8 --------------------------------------------------------------------------------------------------------
def test_fp8_graphs_need_their_scale_tensors():
    g = Graph(io_dtype="bfloat16")
    a = g.tensor((1, 32, 16), name="a", dtype=E4M3)
    b = g.tensor((1, 16, 8), name="b", dtype=E4M3, strides=(128, 1, 16))
    one = [g.tensor((1, 1, 1), name=n, dtype="float32") for n in ("da", "db", "sc")]
    c, amax = g.fp8_matmul(a, b, descale_a=one[0], descale_b=one[1], amax=True)
    assert c.shape == (1, 32, 8) and c.dtype == capi.CUDNN_DATA_BFLOAT16 and amax.shape == (1, 1, 1)
    assert [op.kind for op in g.ops] == ["matmul", "pointwise", "pointwise", "reduction"]
    with pytest.raises(ValueError, match="needs descale_b="):
        g.fp8_matmul(a, b, descale_a=one[0])
    with pytest.raises(ValueError, match="FP8 output needs the output scale"):
        g.fp8_matmul(a, b, descale_a=one[0], descale_b=one[1], out_dtype=E4M3)
    c8 = g.fp8_matmul(a, b, descale_a=one[0], descale_b=one[1], scale_c=one[2], out_dtype=E4M3)
    assert c8.dtype == capi.CUDNN_DATA_FP8_E4M3
    with pytest.raises(TypeError, match="a must be FP8"):
        g.fp8_matmul(g.tensor((1, 32, 16)), b, descale_a=one[0], descale_b=one[1])
    with pytest.raises(TypeError, match="float32 tensor of shape"):
        g.fp8_matmul(a, b, descale_a=g.tensor((1, 1, 1), dtype="float16"), descale_b=one[1])
    with pytest.raises(TypeError, match="float32 tensor of shape"):
        g.fp8_matmul(a, b, descale_a=g.tensor((1, 32, 1), dtype="float32"), descale_b=one[1])
    x = g.tensor((2, 16, 8, 8), name="x", dtype=E4M3, layout="NHWC")
    w = g.tensor((16, 16, 3, 3), name="w", dtype=E4M3, layout="NHWC")
    with pytest.raises(ValueError, match="needs descale_x="):
        g.fp8_conv_fprop(x, w, 1)
    d4 = [g.tensor((1, 1, 1, 1), name=n, dtype="float32") for n in ("dx", "dw", "sy")]
    y, peak = g.fp8_conv_fprop(x, w, 1, descale_x=d4[0], descale_w=d4[1], scale_y=d4[2], out_dtype=E4M3, amax=True)
    assert y.shape == (2, 16, 8, 8) and y.dtype == capi.CUDNN_DATA_FP8_E4M3 and peak.shape == (1, 1, 1, 1)


# -- lowering: every new operation through table-checked attributes -------------------------------------------
def test_every_new_operation_lowers(monkeypatch):
    monkeypatch.setattr(BackendDescriptor, "finalize", lambda self: (setattr(self, "finalized", True), self)[1])
    real_set = BackendDescriptor.set
    monkeypatch.setattr(BackendDescriptor, "set", lambda self, attr, value, attr_type=None: self if attr in (
        "handle", "ops") else real_set(self, attr, value, attr_type))
    g = Graph(io_dtype="float16")
    x = g.tensor((4, 8, 6, 6), name="x", layout="NHWC")
    dy = g.tensor((4, 8, 6, 6), name="dy", layout="NHWC")
    c = [g.tensor((1, 8, 1, 1), name=n, dtype="float32") for n in ("s", "b", "m", "v")]
    outs = list(g.batch_norm(x, c[0], c[1], running_mean=c[2], running_var=c[3]))
    outs += list(g.norm_backward(dy, x, c[0], mean=c[2], inv_variance=c[3], mode="batch"))
    s, sq = g.genstats(x)
    outs += [t for t in g.bn_finalize(s, sq, c[0], c[1], accum_count=144, running_mean=c[2], running_var=c[3])]
    outs += list(g.bn_backward_weights(dy, x, c[2], c[3], c[0]))
    outs += list(g.max_pool(x, 3, 2, 1, index=True))
    outs.append(g.max_pool_backward(g.tensor((4, 8, 3, 3), name="dyp", layout="NHWC"), 3, 2, 1, index=outs[-1],
                                    x_shape=x.shape))
    sd, of = g.tensor((1,) * 4, name="seed", dtype="int64"), g.tensor((1,) * 4, name="off", dtype="int64")
    outs.append(g.dropout(x, 0.2, seed=sd, offset=of)[0])
    outs.append(g.bernoulli(x.shape, 0.5, seed=3))
    outs.append(g.concatenate([x, dy], 1))
    outs.append(g.reshape(g.tensor((2, 8, 16), name="r"), (2, 128, 1)))
    for t in outs:
        t.set_output(True)
    g.lower(NoCallHandle())
    kinds = [op.kind for op in g.ops]
    for k in ("norm_forward", "norm_backward", "bn_finalize", "bn_backward_weights", "resample_forward",
              "resample_backward", "rng", "concatenate", "reshape"):
        assert k in kinds


# -- the references' backward passes against finite differences -----------------------------------------------
@pytest.mark.parametrize("mode,xs,ss", [("layer", (3, 4, 2, 1), (1, 4, 2, 1)), ("layer", (2, 3, 5), (1, 1, 5)),
                                        ("rms", (3, 6, 1, 1), (1, 6, 1, 1)), ("instance", (2, 3, 2, 2), (1, 3, 1, 1)),
                                        ("batch", (3, 2, 2, 2), (1, 2, 1, 1)), ("ada_layer", (2, 3, 4), (2, 1, 4))])
def test_norm_reference_backward_matches_finite_differences(rng, mode, xs, ss):
    x, dy = rng.standard_normal(xs) + 0.5, rng.standard_normal(xs)
    s, b = rng.standard_normal(ss), rng.standard_normal(ss)
    axes = norm_axes(mode, xs, ss)

    def loss():
        return float((RN.norm_forward(x, s, b, mode, 1e-3, axes)[0] * dy).sum())
    _, mean, inv = RN.norm_forward(x, s, b, mode, 1e-3, axes)
    dx, ds, db = RN.norm_backward(dy, x, s, mean, inv, mode, axes)
    for got, arr in ((dx, x), (ds, s), (db, b)):
        np.testing.assert_allclose(got, numeric_gradient(loss, arr), rtol=1e-6, atol=1e-7)


def test_bn_references_agree_with_norm_references(rng):
    x, dy = rng.standard_normal((3, 4, 2, 2)), rng.standard_normal((3, 4, 2, 2))
    s, b = rng.standard_normal((1, 4, 1, 1)), rng.standard_normal((1, 4, 1, 1))
    y, mean, inv = RN.norm_forward(x, s, b, "batch", 1e-3, (0, 2, 3))
    eqs, eqb, m2, inv2, _ = RN.bn_finalize(x.sum((0, 2, 3), keepdims=True), (x * x).sum((0, 2, 3), keepdims=True),
                                           s, b, 12, 1e-3)
    np.testing.assert_allclose(eqs * x + eqb, y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(inv2, inv, rtol=1e-12)
    dx, ds, db = RN.norm_backward(dy, x, s, mean, inv, "batch", (0, 2, 3))
    ws, wb, a, bx, c = RN.bn_backward_weights(dy, x, mean, inv, s)
    np.testing.assert_allclose(a * dy + bx * x + c, dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ws, ds, rtol=1e-12)
    np.testing.assert_allclose(wb, db, rtol=1e-12)


@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_padding"])
@pytest.mark.parametrize("xs,win,st,pre,post", [((1, 2, 5, 6), (2, 3), (2, 1), (1, 0), (0, 2)),
                                                ((1, 1, 3, 4, 4), (2, 2, 3), (1, 2, 2), (0, 1, 1), (1, 0, 1))])
def test_resample_reference_backward_matches_finite_differences(rng, mode, xs, win, st, pre, post):
    x = RR.distinct(xs, rng)
    y, _ = RR.forward(x, mode, win, st, pre, post)
    dy = rng.standard_normal(y.shape)

    def loss():
        return float((RR.forward(x, mode, win, st, pre, post)[0] * dy).sum())
    np.testing.assert_allclose(RR.backward(xs, dy, mode, win, st, pre, post, x), numeric_gradient(loss, x, 1e-4),
                               rtol=1e-6, atol=1e-8)


def test_resample_reference_index_is_the_window_position(rng):
    x = RR.distinct((1, 1, 4, 4), rng)
    y, idx = RR.forward(x, "max", (2, 2), (2, 2), (0, 0), (0, 0))
    for i, j in np.ndindex(2, 2):
        win = x[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2].ravel()
        assert win[idx[0, 0, i, j]] == y[0, 0, i, j] == win.max()
