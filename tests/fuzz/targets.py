"""What the Pythonic-layer fuzz calls: one target per API family, each drawing hostile arguments with hypothesis.

A target is a function ``build(draw) -> (call, label)``: it draws every argument first, then returns a zero-argument
``call`` that exercises the API and a ``label`` (a readable repr of the example, logged before the call so that a
crash names it). Arguments mix plausible values (to get past the first check) with hostile ones: negative, zero and
huge ints (around the int32/int64/uint64 limits), NaN/inf, floats where ints belong, bools, None, strings, bytes,
arbitrary objects, absurd ranks, out-of-range enum values.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from helpers import fake

_EDGE_INTS = [0, -1, 1, 2, 3, 7, 2 ** 31 - 1, 2 ** 31, -2 ** 31 - 1, 2 ** 32 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64,
              -2 ** 63 - 1, 2 ** 64 + 5, 10 ** 30]


class _Opaque:
    """An unrelated object (no len, no ptr, no dtype)."""

    def __repr__(self):
        return "<opaque>"


class _Weird:
    """An object that looks like many things and is none of them."""
    ptr = 0x1234
    shape = (2, 3)
    dtype = "float32"

    def __len__(self):
        return 3

    def __iter__(self):
        return iter((1, "a", None))

    def __repr__(self):
        return "<weird>"


def _weighted(rare, common):
    """``rare`` about one time in eight, else ``common`` (hypothesis's one_of merges repeated branches, so repeating a
    branch does not weight it; the choice is a drawn integer instead, hostile on a middle value since hypothesis
    favours the ends of a range)."""
    return st.integers(0, 7).flatmap(lambda i: rare if i == 3 else common)


def maybe(strategy, plausible):
    """Mostly a plausible value, sometimes a hostile one: with about eight arguments a call, a third of the examples
    are all plausible and reach the deeper checks and cuDNN itself."""
    return _weighted(strategy, plausible)


def opt(strategy):
    """Mostly None (the argument's default), sometimes ``strategy``."""
    return _weighted(strategy, st.none())


small_int = st.integers(1, 8)
hostile_int = st.one_of(st.sampled_from(_EDGE_INTS), st.integers(-2 ** 70, 2 ** 70), st.integers(-3, 9))
hostile_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1.5, 1e308,
                                                                                            -1e-310]))
hostile_scalar = st.one_of(
    hostile_int, hostile_float, st.booleans(), st.none(), st.text(max_size=6), st.binary(max_size=4),
    st.complex_numbers(allow_nan=True), st.builds(_Opaque), st.builds(_Weird),
    st.sampled_from([np.int64(3), np.uint64(2 ** 64 - 1), np.float32(2.0), np.bool_(True), np.float64("nan")]))
hostile_seq = st.one_of(st.lists(hostile_scalar, max_size=9), st.lists(small_int, min_size=0, max_size=12),
                        st.lists(hostile_int, max_size=6).map(tuple), st.lists(st.lists(small_int, max_size=3),
                                                                               max_size=4))
hostile = st.one_of(hostile_scalar, hostile_seq)

DTYPE_NAMES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool",
               "float8_e4m3fn", "float8_e5m2", "complex64", "object", "U4", "fp16", "half", "float", ">f4"]
dtype_like = st.one_of(st.sampled_from(DTYPE_NAMES), st.sampled_from([np.float32, np.float16, np.float64, np.int8]),
                       hostile_scalar)
shape_like = _weighted(st.one_of(st.lists(small_int, min_size=0, max_size=10).map(tuple), hostile),
                       st.lists(small_int, min_size=3, max_size=5).map(tuple))


def _label(_name, *args, **kwargs) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{_name}({', '.join(parts)})"


class StubHandle:
    """Stands in for a Handle on a machine without a GPU: validation passed once ``.ptr`` is read."""
    device = 0
    device_id = 0
    stream = None
    stream_ptr = 0
    workspace = None
    closed = False

    def __init__(self):
        self.cache = {}

    @property
    def ptr(self):
        from cudnn_py.errors import ClosedError
        raise ClosedError("stub handle: validation passed and cuDNN would be called now")


# --- descriptors --------------------------------------------------------------------------------------------------

def t_tensor_descriptor(draw):
    import cudnn_py.core.descriptors as D
    shape = draw(shape_like)
    dtype = draw(maybe(dtype_like, st.sampled_from(["float32", "float16", "int8"])))
    strides = draw(opt(st.one_of(hostile_seq, st.lists(hostile_int, min_size=4, max_size=4).map(tuple))))
    fmt = draw(opt(st.one_of(st.sampled_from(["NCHW", "NHWC", "NCHW_VECT_C", "nhwc", "bogus"]), hostile)))
    factory = draw(st.booleans())

    def call():
        if factory:
            d = D.TensorDescriptor.shared(shape, dtype, strides, fmt)
        else:
            d = D.TensorDescriptor(shape, dtype, strides, layout=fmt)
        repr(d), d.shape, d.strides, d.nbytes
    return call, _label("tensor_descriptor" if factory else "TensorDescriptor", shape, dtype, strides, layout=fmt)


def t_filter_descriptor(draw):
    import cudnn_py.core.descriptors as D
    shape = draw(shape_like)
    dtype = draw(maybe(dtype_like, st.just("float32")))
    fmt = draw(maybe(hostile, st.sampled_from(["NCHW", "NHWC", "nchw_vect_c"])))

    def call():
        d = D.FilterDescriptor(shape, dtype, layout=fmt)
        repr(d), d.shape, d.nbytes
    return call, _label("FilterDescriptor", shape, dtype, layout=fmt)


def t_convolution_descriptor(draw):
    import cudnn_py.core.descriptors as D
    kw = dict(padding=draw(maybe(hostile, st.integers(0, 3))), stride=draw(maybe(hostile, small_int)),
              dilation=draw(maybe(hostile, small_int)), ndim=draw(opt(st.one_of(hostile_int))),
              mode=draw(maybe(hostile, st.sampled_from(["cross_correlation", "convolution", "corr"]))),
              compute_type=draw(maybe(dtype_like, st.just("float32"))), groups=draw(maybe(hostile, small_int)),
              math_type=draw(maybe(hostile, st.sampled_from(["default", "tensor_op", "fma"]))),
              reorder=draw(opt(st.one_of(st.sampled_from(["default", "none"]), hostile))))
    x, w = draw(shape_like), draw(shape_like)

    def call():
        c = D.ConvolutionDescriptor(**kw)
        repr(c), c.groups, c.math_type
        c.output_shape(x, w)
    return call, _label("ConvolutionDescriptor", **kw) + f".output_shape({x!r}, {w!r})"


def t_pooling_descriptor(draw):
    from cudnn_py import Pooling
    kw = dict(mode=draw(maybe(hostile, st.sampled_from(["max", "avg", "average_count_include_padding"]))),
              window=draw(maybe(hostile, small_int)), padding=draw(maybe(hostile, st.integers(0, 2))),
              stride=draw(opt(st.one_of(small_int, hostile))), nan_propagation=draw(maybe(hostile, st.booleans())))
    x = draw(shape_like)

    def call():
        p = Pooling(**kw)
        repr(p)
        p.output_shape(x)
        p.descriptor(len(x) - 2)
    return call, _label("Pooling", **kw) + f".output_shape({x!r}).descriptor(len(x) - 2)"


def t_small_descriptors(draw):
    import cudnn_py as cudnn
    import cudnn_py.core.descriptors as D
    which = draw(st.sampled_from(["activation", "lrn", "op", "reduce", "dropout"]))
    if which == "activation":
        kw = dict(mode=draw(maybe(hostile, st.sampled_from(["relu", "elu", "swish", "clipped_relu"]))),
                  coef=draw(maybe(hostile, st.floats(-10, 10))), nan_propagation=draw(maybe(hostile, st.booleans())),
                  swish_beta=draw(opt(st.one_of(hostile_float, hostile))))
        make = cudnn.Activation
    elif which == "lrn":
        kw = dict(n=draw(maybe(hostile, st.integers(1, 16))), alpha=draw(maybe(hostile, st.floats(0, 1))),
                  beta=draw(maybe(hostile, st.floats(0.01, 2))), k=draw(maybe(hostile, st.floats(1e-5, 4))))
        make = cudnn.LRN
    elif which == "op":
        kw = dict(op=draw(maybe(hostile, st.sampled_from(["add", "mul", "sqrt", "not"]))),
                  compute_dtype=draw(maybe(dtype_like, st.just("float32"))),
                  nan_propagation=draw(maybe(hostile, st.booleans())))
        make = D.OpTensor
    elif which == "reduce":
        kw = dict(op=draw(maybe(hostile, st.sampled_from(["add", "amax", "norm2"]))),
                  compute_dtype=draw(maybe(dtype_like, st.just("float32"))),
                  indices=draw(maybe(hostile, st.sampled_from(["none", "flattened"]))),
                  indices_type=draw(maybe(hostile, st.sampled_from(["uint32", "64bit"]))))
        make = D.ReduceTensor
    else:
        kw = dict(handle=draw(st.one_of(st.builds(StubHandle), hostile)),
                  p=draw(maybe(hostile, st.floats(0, 1))), seed=draw(maybe(hostile, st.integers(0, 2 ** 64 - 1))))
        make = cudnn.Dropout

    def call():
        d = make(**kw)
        repr(d)
    return call, _label(make.__name__, **kw)


def t_output_shapes(draw):
    import cudnn_py.core.descriptors as D
    if draw(st.booleans()):
        args = (draw(maybe(shape_like, st.lists(small_int, min_size=3, max_size=5).map(tuple))),
                draw(maybe(shape_like, st.lists(small_int, min_size=3, max_size=5).map(tuple))))
        kw = dict(padding=draw(maybe(hostile, st.integers(0, 2))), stride=draw(maybe(hostile, small_int)),
                  dilation=draw(maybe(hostile, small_int)), groups=draw(maybe(hostile, small_int)),
                  mode=draw(maybe(hostile, st.just("convolution"))),
                  dtype=draw(maybe(dtype_like, st.just("float32"))))
        fn = D.convolution_output_shape
    else:
        args = (draw(maybe(shape_like, st.lists(small_int, min_size=3, max_size=5).map(tuple))),)
        kw = dict(mode=draw(maybe(hostile, st.just("max"))), window=draw(maybe(hostile, small_int)),
                  padding=draw(maybe(hostile, st.integers(0, 2))), stride=draw(opt(st.one_of(hostile))),
                  dtype=draw(maybe(dtype_like, st.just("float32"))))
        fn = D.pooling_output_shape
    return (lambda: fn(*args, **kw)), _label(fn.__name__, *args, **kw)


# --- op-level objects ---------------------------------------------------------------------------------------------

def t_convolution(draw):
    import cudnn_py as cudnn
    kw = dict(padding=draw(maybe(hostile, st.integers(0, 2))), stride=draw(maybe(hostile, small_int)),
              dilation=draw(maybe(hostile, small_int)), groups=draw(maybe(hostile, small_int)),
              mode=draw(maybe(hostile, st.just("convolution"))),
              math_type=draw(maybe(hostile, st.sampled_from(["auto", "fma"]))),
              compute_type=draw(opt(st.one_of(dtype_like))),
              layout=draw(maybe(hostile, st.sampled_from(["NCHW", "NHWC"]))))
    x, w = draw(shape_like), draw(shape_like)

    def call():
        c = cudnn.Convolution(**kw)
        repr(c), hash(c)
        c.output_shape(x, w)
    return call, _label("Convolution", **kw) + f".output_shape({x!r}, {w!r})"


def t_rnn(draw):
    import cudnn_py as cudnn
    args = (draw(maybe(hostile, st.sampled_from(["lstm", "gru", "relu", "tanh"]))),
            draw(maybe(hostile, small_int)), draw(maybe(hostile, small_int)))
    kw = dict(num_layers=draw(maybe(hostile, st.integers(1, 3))), bidirectional=draw(maybe(hostile, st.booleans())),
              proj_size=draw(opt(st.one_of(small_int, hostile))),
              bias_mode=draw(maybe(hostile, st.just("double"))),
              input_mode=draw(maybe(hostile, st.sampled_from(["linear", "skip"]))),
              dtype=draw(maybe(dtype_like, st.sampled_from(["float32", "float16", "float64"]))),
              compute_dtype=draw(opt(st.one_of(dtype_like))),
              math_type=draw(maybe(hostile, st.just("default"))),
              algo=draw(maybe(hostile, st.sampled_from(["standard", "persist_static", "persist_dynamic",
                                                   "persist_static_small_h"]))),
              dropout=draw(opt(st.one_of(hostile, st.just(fake((4,), np.uint8))))),
              padded_io=draw(maybe(hostile, st.booleans())),
              clip=draw(opt(st.one_of(st.tuples(hostile_float, hostile_float), hostile))))

    def call():
        r = cudnn.RNN(*args, **kw)
        r.params, r.clip
    return call, _label("RNN", *args, **kw)


def t_misc_ops(draw):
    import cudnn_py as cudnn
    from cudnn_py.ops import attention, ctc, lrn, spatial_transformer
    which = draw(st.sampled_from(["lrn", "ctc", "st", "seq", "mha"]))
    if which == "lrn":
        kw = dict(n=draw(maybe(hostile, st.integers(1, 16))), alpha=draw(maybe(hostile, st.floats(0, 1))),
                  beta=draw(maybe(hostile, st.floats(0.01, 2))), k=draw(maybe(hostile, st.floats(1e-5, 4))))

        def call():
            o = lrn.LRN(**kw)
            hash(o), o.descriptor
        name = "LRN"
    elif which == "ctc":
        kw = dict(normalization=draw(maybe(hostile, st.sampled_from(["softmax", "none"]))),
                  grad_mode=draw(maybe(hostile, st.sampled_from(["zero_oob", "skip_oob"]))),
                  max_label_length=draw(maybe(hostile, st.integers(1, 255))))

        def call():
            o = ctc.CTCLoss(**kw)
            repr(o)
        name = "CTCLoss"
    elif which == "st":
        kw = dict(shape=draw(shape_like), dtype=draw(maybe(dtype_like, st.just("float32"))))

        def call():
            spatial_transformer.SpatialTransformer(**kw).grid_shape
        name = "SpatialTransformer"
    elif which == "seq":
        kw = dict(dtype=draw(maybe(dtype_like, st.just("float32"))), batch=draw(maybe(hostile, small_int)),
                  time=draw(maybe(hostile, small_int)), vector=draw(maybe(hostile, small_int)),
                  seq_lengths=draw(opt(st.one_of(hostile_seq, hostile))))

        def call():
            repr(attention.SeqDataDescriptor(**kw))
        name = "SeqDataDescriptor"
    else:
        args = tuple(draw(maybe(hostile, small_int)) for _ in range(4))
        kw = dict(proj_size=draw(maybe(hostile, small_int)), max_seq_q=draw(maybe(hostile, small_int)),
                  max_seq_kv=draw(maybe(hostile, small_int)), max_batch=draw(maybe(hostile, small_int)),
                  scale=draw(opt(st.one_of(hostile_float, hostile))),
                  query_map=draw(maybe(hostile, st.just("all_to_one"))),
                  dtype=draw(maybe(dtype_like, st.just("float32"))),
                  compute_dtype=draw(opt(st.one_of(dtype_like))),
                  attn_dropout=draw(opt(st.one_of(hostile, st.just(fake((4,), np.uint8))))))

        def call():
            repr(cudnn.MultiHeadAttention(*args, **kw))
        return call, _label("MultiHeadAttention", *args, **kw)
    return call, _label(name, **kw)


# --- attention ---------------------------------------------------------------------------------------------------

_ATTN_DTYPES = ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float32", "int8"]


def t_attention(draw):
    """The attention entry points (bf16/fp16 and FP8, forward and backward) with hostile shapes, dtypes, options,
    per-batch tensors, page tables and scales."""
    import ml_dtypes
    from cudnn_py.graph.ops.sdpa import FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES
    from cudnn_py.ops import sdpa as S
    which = draw(st.sampled_from(["sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward"]))
    name = draw(st.sampled_from(_ATTN_DTYPES))
    dt = np.dtype(getattr(ml_dtypes, name)) if name.startswith(("bfloat", "float8")) else np.dtype(name)
    b, hk, groups = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    sq, skv = draw(st.sampled_from([1, 17, 64, 100, 128])), draw(st.sampled_from([1, 17, 64, 100, 128]))
    d = draw(st.sampled_from([8, 16, 64, 72, 128, 256, 264]))
    hq = draw(maybe(st.integers(1, 9), st.just(hk * groups)))

    def arr(shape, dtype=dt):
        return draw(maybe(hostile, st.just(fake(shape, dtype))))
    q, k, v = arr((b, hq, sq, d)), arr((b, hk, skv, d)), arr((b, hk, skv, d))
    kw = dict(scale=draw(opt(st.one_of(hostile_float, hostile))), causal=draw(maybe(hostile, st.booleans())))
    if which in ("sdpa", "sdpa_backward"):
        kw.update(diagonal_alignment=draw(maybe(hostile, st.sampled_from(["top_left", "bottom_right"]))),
                  left_bound=draw(opt(hostile_int)), right_bound=draw(opt(hostile_int)),
                  bias=draw(opt(st.just(fake((1, hq, sq, skv), dt)))),
                  seq_len_q=draw(opt(st.sampled_from([fake((b,), np.int32), fake((b,), np.int64), fake((b, 2),
                                                                                                      np.int32)]))),
                  seq_len_kv=draw(opt(st.just(fake((b,), np.int32)))),
                  alibi=draw(maybe(hostile, st.booleans())), dropout=draw(maybe(hostile, st.just(0.0))),
                  seed=draw(opt(hostile)), offset=draw(opt(hostile)),
                  implementation=draw(maybe(hostile, st.sampled_from(["auto", "composite", "unified"]))))
        if which == "sdpa":
            kw.update(page_table_k=draw(opt(st.sampled_from([fake((b, 4), np.int32), fake((b, 4), np.int64)]))),
                      page_table_v=draw(opt(st.just(fake((b, 4), np.int32)))),
                      max_seq_len_kv=draw(opt(hostile_int)), return_stats=draw(maybe(hostile, st.booleans())))
    else:
        kw.update({n: draw(maybe(st.one_of(hostile_float, hostile, st.just(fake((1,), np.float16)),
                                           st.just(fake((2,), np.float32))), st.just(fake((1,), np.float32))))
                   for n in (FP8_FORWARD_SCALES if which == "sdpa_fp8" else FP8_BACKWARD_SCALES)})
    args = (q, k, v)
    if which.endswith("backward"):
        args += (arr((b, hq, sq, d)), arr((b, hq, sq, d)), arr((b, hq, sq, 1), np.float32))
    fn = getattr(S, which)

    def call():
        fn(StubHandle(), *args, **kw)
    return call, _label(which, *args, **kw)


# --- the graph builder and backend descriptors ----------------------------------------------------------------------

def t_graph_tensor(draw):
    from cudnn_py import graph
    gkw = dict(io_dtype=draw(maybe(dtype_like, st.just("float32"))),
               compute_dtype=draw(maybe(dtype_like, st.just("float32"))))
    kw = dict(shape=draw(shape_like), dtype=draw(opt(st.one_of(dtype_like))),
              strides=draw(opt(st.one_of(hostile_seq))), name=draw(opt(st.one_of(st.text(max_size=4),
                                                                                   hostile))),
              layout=draw(opt(st.one_of(st.sampled_from(["NCHW", "NHWC"]), hostile))))
    scalar = (draw(hostile_scalar), draw(opt(st.one_of(dtype_like))))

    def call():
        g = graph.Graph(**gkw)
        t = g.tensor(**kw)
        repr(t)
        g.scalar(*scalar)
    return call, _label("Graph", **gkw) + ".tensor" + _label("", **kw) + f"; .scalar{scalar!r}"


def t_graph_ops(draw):
    from cudnn_py import graph
    which = draw(st.sampled_from(["conv_fprop", "conv_dgrad", "conv_wgrad", "matmul", "pointwise", "reduction",
                                  "norm", "genstats"]))
    conv_kw = dict(padding=draw(maybe(hostile, st.integers(0, 2))), stride=draw(maybe(hostile, small_int)),
                   dilation=draw(maybe(hostile, small_int)),
                   conv_mode=draw(maybe(hostile, st.just("cross_correlation"))),
                   compute_dtype=draw(opt(st.one_of(dtype_like))),
                   alpha=draw(maybe(hostile, st.floats(-2, 2))), beta=draw(maybe(hostile, st.floats(-2, 2))))
    other = dict(mode=draw(maybe(hostile, st.sampled_from(["add", "relu_fwd", "max", "avg", "layer"]))),
                 axes=draw(st.one_of(st.lists(st.integers(-5, 5), max_size=3), hostile)),
                 b=draw(st.one_of(hostile_scalar, st.none())), epsilon=draw(maybe(hostile, st.floats(0, 1))))
    lower = draw(st.booleans())
    shapes = [tuple(draw(st.integers(1, 4)) for _ in range(4)) for _ in range(2)]

    def call():
        g = graph.Graph()
        x, w = g.tensor(shapes[0]), g.tensor(shapes[1])
        if which.startswith("conv"):
            y = getattr(g, which)(x, w, **conv_kw)
        elif which == "matmul":
            y = g.matmul(x, w, compute_dtype=conv_kw["compute_dtype"])
        elif which == "pointwise":
            y = g.pointwise(other["mode"], x, other["b"])
        elif which == "reduction":
            y = g.reduction(x, other["mode"], axes=other["axes"])
        elif which == "norm":
            y = g.norm_forward(x, w, w, mode=other["mode"], epsilon=other["epsilon"], training=False)
        else:
            y = g.genstats(x, compute_dtype=conv_kw["compute_dtype"])[0]
        y.set_output(True)
        if lower:
            g.lower(None)
    return call, (f"Graph().{which}(x{shapes[0]}, w{shapes[1]}, conv={conv_kw!r}, other={other!r})"
                  + (" then lower()" if lower else ""))


_BACKEND_TYPES = ["TENSOR", "CONVOLUTION", "POINTWISE", "MATMUL", "REDUCTION", "OPERATION_CONVOLUTION_FORWARD",
                  "EXECUTION_PLAN", "VARIANT_PACK", "ENGINEHEUR", "KNOB_CHOICE", "RESAMPLE"]
_BACKEND_ATTRS = ["dimensions", "strides", "unique_id", "data_type", "byte_alignment", "is_virtual", "comp_type",
                  "spatial_dims", "pre_paddings", "post_paddings", "dilations", "filter_strides", "mode", "math_prec",
                  "json_representation", "unique_ids", "data_pointers", "workspace", "knob_type", "knob_value",
                  "alpha", "beta", "relu_lower_clip", "axis", "nan_propagation", "CUDNN_ATTR_TENSOR_DIMENSIONS",
                  "bogus"]


def t_backend_set(draw):
    from cudnn_py import graph
    kind = draw(st.one_of(st.sampled_from(_BACKEND_TYPES), hostile))
    sets = [(draw(st.one_of(st.sampled_from(_BACKEND_ATTRS), hostile)), draw(hostile),
             draw(opt(st.one_of(st.sampled_from(["INT64", "FLOAT", "DOUBLE", "BOOLEAN", "CHAR"]), hostile))))
            for _ in range(draw(st.integers(1, 3)))]
    finalize = draw(st.booleans())

    def call():
        d = graph.BackendDescriptor(kind)
        for attr, value, attr_type in sets:
            if attr_type is None:
                d.set(attr, value)
            else:
                d.set(attr, value, attr_type=attr_type)
        if finalize:
            d.finalize()
    return call, f"BackendDescriptor({kind!r}) sets={sets!r} finalize={finalize}"


# --- oracles: the issue-21 families, where acceptance itself is checked -----------------------------------------
# In these targets an example that is accepted must be right: an AssertionError (a finding) names a value written
# other than asked, a NaN scaling factor that reached C, a descriptor that reads back other than it was set, ...

class Reached(Exception):
    """A stand-in handle's ``ptr`` was read: the call passed validation and would call cuDNN now."""


class ReachHandle(StubHandle):
    class workspace:  # noqa: N801 - a Handle's attribute: no cap
        cap = None

    @property
    def ptr(self):
        raise Reached

    @property
    def stream(self):  # driver work (set_tensor's memset) is queued on it: reading it is reaching the device
        raise Reached


def _holds(value, dtype) -> bool:
    """Whether ``dtype`` stores ``value`` as it is (NaN and infinity where the type has them; rounding allowed)."""
    dtype = np.dtype(dtype)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    if dtype.kind in "iu":
        try:
            return float(value) == int(value) and np.iinfo(dtype).min <= int(value) <= np.iinfo(dtype).max
        except (OverflowError, ValueError):
            return False
    try:
        v = float(value)
    except OverflowError:
        return False
    with np.errstate(all="ignore"):
        back = float(np.array([v]).astype(dtype).astype(np.float64)[0])
    return (np.isnan(v) and np.isnan(back)) or back == v or (np.isfinite(v) and np.isfinite(back))


_VALUE_DTYPES = ["int8", "uint8", "int32", "int64", "float16", "float32", "float64", "bfloat16", "float8_e4m3fn"]


def t_element_values(draw):
    """set_tensor / fill_: a value the destination dtype cannot hold is refused, never wrapped or made infinite."""
    import ml_dtypes
    from cudnn_py.errors import InvalidTypeError, InvalidValueError
    from cudnn_py.ops import tensor_ops as T
    name = draw(st.sampled_from(_VALUE_DTYPES))
    dt = np.dtype(getattr(ml_dtypes, name)) if name.startswith(("bfloat", "float8")) else np.dtype(name)
    value = draw(st.one_of(hostile_scalar, st.integers(-300, 300), st.sampled_from([127, 128, -129, 255, 256, 65504,
                                                                                    65520.0, 3.4e38, 3.5e38, 1e40])))
    fill = draw(st.booleans())

    def call():
        try:
            if fill:
                fake((2, 3), dt).fill_(value)
            else:
                T.set_tensor(ReachHandle(), fake((2, 3), dt), value)
        except (InvalidTypeError, InvalidValueError):
            return
        except Reached:
            pass
        except Exception as e:  # fill_ reaches the driver, absent here: a NoDeviceError after validation
            from cudnn_py.errors import NoDeviceError
            if not isinstance(e, NoDeviceError):
                raise
        assert _holds(value, dt), f"{value!r} accepted for {dt} (it would be stored changed)"
    return call, _label("fill_" if fill else "set_tensor", name, value)


def _scaling_calls(h, x, kw):
    import cudnn_py as cudnn
    w = fake((3, 4, 3, 3))
    return {
        "scale_tensor": lambda: cudnn.scale_tensor(h, x, **{k: v for k, v in kw.items() if k == "alpha"}),
        "add_tensor": lambda: cudnn.add_tensor(h, fake((1, 4, 1, 1)), x, **kw),
        "op_tensor": lambda: cudnn.op_tensor(h, "add", x, x, c=x, alpha1=kw["alpha"], alpha2=kw["beta"]),
        "activation_forward": lambda: cudnn.activation_forward(h, cudnn.Activation("relu"), x, y=x, **kw),
        "softmax_forward": lambda: cudnn.softmax_forward(h, x, y=x, **kw),
        "pooling_forward": lambda: cudnn.pooling_forward(h, cudnn.Pooling("max", window=1), x, y=x, **kw),
        "lrn_forward": lambda: cudnn.lrn_forward(h, cudnn.LRN(), x, y=x, **kw),
        "transform_tensor": lambda: cudnn.transform_tensor(h, x, y=x, **kw),
        "convolution_forward": lambda: cudnn.convolution_forward(h, cudnn.Convolution(padding=1), x, w, **kw),
        "convolution_backward_bias": lambda: cudnn.convolution_backward_bias(h, x, db=fake((1, 4, 1, 1)), **kw),
    }


def t_scaling_factors(draw):
    """A scaling factor that is not a finite real number never gets past validation (any engine)."""
    import math
    from cudnn_py.errors import InvalidTypeError, InvalidValueError
    which = draw(st.sampled_from(sorted(_scaling_calls(None, None, {"alpha": 1.0, "beta": 0.0}))))
    kw = {"alpha": draw(maybe(hostile_scalar, st.sampled_from([1.0, 2.0]))),
          "beta": draw(maybe(hostile_scalar, st.sampled_from([0.0, 1.0])))}

    def finite(v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            return False
        try:
            return math.isfinite(float(v))
        except OverflowError:
            return False

    def call():
        used = {"alpha": kw["alpha"]} if which == "scale_tensor" else kw
        try:
            _scaling_calls(ReachHandle(), fake((2, 4, 5, 5)), kw)[which]()
        except (InvalidTypeError, InvalidValueError) as e:
            if all(finite(v) for v in used.values()):
                return  # refused for another reason (a shape this engine does not take): fine
            assert "scaling factor" in str(e) or "scale" in str(e), f"refused without naming the factor: {e}"
            return
        except Reached:
            pass
        except Exception as e:  # an allocation needs a GPU: fine once the factors were checked
            from cudnn_py.errors import CudnnPyError
            if not isinstance(e, CudnnPyError):
                raise
        assert all(finite(v) for v in used.values()), f"{which} let {used} through"
    return call, _label(which, **kw)


def _overlap(shape, strides) -> bool:
    """Brute force: whether two indices of ``shape`` reach one element through ``strides``."""
    seen = set()
    for idx in np.ndindex(*shape):
        off = sum(i * s for i, s in zip(idx, strides))
        if off in seen:
            return True
        seen.add(off)
    return False


def t_descriptor_oracles(draw):
    """Tensor strides that overlap, NCHW_VECT_C settings that cuDNN would round, reductions with indices, backend
    enum and dimension attributes: accepted only when right."""
    from cudnn_py import capi, graph
    import cudnn_py.core.descriptors as D
    which = draw(st.sampled_from(["strides", "vect_c", "reduce", "backend_enum", "backend_dims"]))
    if which == "strides":
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=2, max_size=4)))
        strides = tuple(draw(st.lists(st.integers(0, 12), min_size=len(shape), max_size=len(shape))))

        def call():
            D.TensorDescriptor(shape, np.float32, strides=strides)
            assert not _overlap(shape, strides), f"overlapping strides {strides} accepted for {shape}"
        return call, _label("TensorDescriptor", shape, strides=strides)
    if which == "vect_c":
        dt = draw(st.sampled_from([capi.CUDNN_DATA_INT8x4, capi.CUDNN_DATA_UINT8x4, capi.CUDNN_DATA_INT8x32,
                                   capi.CUDNN_DATA_FLOAT, capi.CUDNN_DATA_INT8, capi.CUDNN_DATA_HALF]))
        shape = (draw(st.integers(1, 4)), draw(st.integers(1, 70)), draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        filt = draw(st.booleans())

        def call():
            d = (D.FilterDescriptor if filt else D.TensorDescriptor)(shape, dt, layout="NCHW_VECT_C")
            assert d.shape == shape, f"NCHW_VECT_C {dt.name} {shape} reads back {d.shape}"
            assert dt.name.endswith(("x4", "x32")), f"NCHW_VECT_C accepted {dt.name}"
        return call, _label("FilterDescriptor" if filt else "TensorDescriptor", shape, dt, layout="NCHW_VECT_C")
    if which == "reduce":
        op = draw(st.sampled_from(["add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros"]))
        indices = draw(st.sampled_from([True, False, "flattened", "none"]))

        def call():
            r = D.ReduceTensor(op, indices=indices)
            if r.indices != capi.CUDNN_REDUCE_TENSOR_NO_INDICES:
                assert op in ("min", "max", "amax"), f"ReduceTensor({op!r}) accepted indices"
        return call, _label("ReduceTensor", op, indices=indices)
    if which == "backend_enum":
        attr = draw(st.sampled_from(["data_type", "CUDNN_ATTR_TENSOR_DATA_TYPE"]))
        value = draw(st.one_of(st.integers(-3, 40), st.sampled_from([9999, 2 ** 31, -2 ** 31 - 1, 2 ** 63])))

        def call():
            graph.BackendDescriptor("TENSOR").set(attr, value)
            assert value in capi.cudnnDataType_t._value2member_map_, f"data_type {value} accepted"
        return call, f"BackendDescriptor('TENSOR').set({attr!r}, {value!r})"
    dims_ = draw(st.lists(st.one_of(st.integers(1, 2 ** 40), st.sampled_from([2 ** 22, 2 ** 31, 2 ** 62])),
                          min_size=1, max_size=5))

    def call():
        graph.BackendDescriptor("TENSOR").set("dimensions", dims_)
        assert int(np.prod([float(d) for d in dims_])) < 2 ** 63, f"dimensions {dims_} accepted"
    return call, f"BackendDescriptor('TENSOR').set('dimensions', {dims_!r})"


def t_array_extents(draw):
    """DeviceArray sizes and foreign arrays' interfaces: what is accepted fits 64-bit byte arithmetic, is not NULL,
    and (for __cuda_array_interface__) has non-negative, non-overlapping strides of whole elements."""
    from cudnn_py.errors import InvalidTypeError, InvalidValueError, NoDeviceError
    from cudnn_py.core.memory import DeviceArray, as_array
    shape = tuple(draw(st.lists(st.one_of(st.integers(0, 6), st.sampled_from([2 ** 31, 2 ** 62, 2 ** 63, 2 ** 64])),
                                min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(["uint8", "float32", "float64"]))
    ptr = draw(st.sampled_from([0, 0x1000, 2 ** 64 - 64]))
    if draw(st.booleans()):
        def call():
            try:
                a = DeviceArray(ptr, shape, dtype)
            except (InvalidTypeError, InvalidValueError):
                return
            assert a.nbytes < 2 ** 63 and (a.size == 0 or (ptr and ptr + a.nbytes <= 2 ** 64)), repr(a)
        return call, _label("DeviceArray", ptr, shape, dtype)
    item = np.dtype(dtype).itemsize
    strides = draw(opt(st.lists(st.integers(-2, 6).map(lambda k: k * item + draw(st.sampled_from([0, 0, 1]))),
                                min_size=len(shape), max_size=len(shape)).map(tuple)))
    typestr = draw(maybe(st.sampled_from([">f4", "xyz", "<V0", 3]), st.just(np.dtype(dtype).str)))

    class Foreign:
        __cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": strides,
                                    "version": 3}

    def call():
        try:
            as_array(Foreign())
        except (InvalidTypeError, InvalidValueError):
            return
        except NoDeviceError:  # validation passed; the driver (absent here) would be asked about the pointer next
            pass
        el = None if strides is None else [b // item for b in strides]
        assert typestr == np.dtype(dtype).str, f"typestr {typestr!r} accepted"
        assert ptr or 0 in shape, "NULL data accepted"
        if el is not None:
            assert all(b >= 0 and b % item == 0 for b in strides), f"strides {strides} accepted"
            assert 0 in shape or max(shape) > 8 or not _overlap(shape, el), f"overlapping strides {strides} accepted"
    return call, f"as_array(__cuda_array_interface__ shape={shape} typestr={typestr!r} ptr={ptr:#x} strides={strides})"


def t_aliasing_and_limits(draw):
    """softmax outputs over x's memory (accepted only when disjoint or the very same view), workspace limits and caps
    (accepted only below 2**63, as an int)."""
    import cudnn_py as cudnn
    from cudnn_py.errors import InvalidTypeError, InvalidValueError
    from cudnn_py.core.memory import DeviceArray
    which = draw(st.sampled_from(["softmax", "workspace_limit", "cap"]))
    if which == "softmax":
        shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        size = int(np.prod(shape))
        offset = draw(st.integers(-size - 2, size + 2))
        perm = draw(st.permutations(range(4)))
        strides = [0] * 4
        acc = 1
        for axis in reversed(perm):
            strides[axis] = acc
            acc *= shape[axis]
        x = DeviceArray(0x100000, shape, np.float32)
        y = DeviceArray(0x100000 + 4 * offset, shape, np.float32, tuple(strides))

        def call():
            try:
                cudnn.softmax_forward(ReachHandle(), x, y=y)
            except (InvalidTypeError, InvalidValueError):
                return
            except Reached:
                pass
            same = offset == 0 and tuple(strides) == x.strides
            assert same or offset >= size or offset <= -size, f"y at offset {offset}, strides {strides} accepted"
        return call, f"softmax_forward(x {shape}, y at element offset {offset} with strides {tuple(strides)})"
    value = draw(st.one_of(hostile_int, hostile_scalar))

    def call():
        try:
            if which == "cap":
                from cudnn_py.core.workspace import Workspace
                Workspace(cap=value)
            else:
                cudnn.convolution_forward(ReachHandle(), cudnn.Convolution(padding=1), fake((2, 4, 5, 5)),
                                          fake((3, 4, 3, 3)), y=DeviceArray(0x900000, (2, 3, 5, 5), np.float32),
                                          workspace_limit=value)
        except (InvalidTypeError, InvalidValueError):
            return
        except Reached:
            pass
        assert value is None or (type(value) in (int, np.int64) and 0 <= value < 2 ** 63), f"{which}={value!r}"
    return call, f"{which}={value!r}"


TARGETS = {name[2:]: fn for name, fn in sorted(globals().items()) if name.startswith("t_") and callable(fn)}
