"""What graph lowering hands cuDNN, without a GPU: every backend descriptor of a fixed set of graphs (every
operation kind, attention included), as text to diff between two trees.

    PYTHONPATH=/path/to/tree-a python tools/lowering_trace.py > a.txt
    PYTHONPATH=/path/to/tree-b python tools/lowering_trace.py > b.txt
    diff a.txt b.txt                              # empty: both trees lower these graphs alike

cuDNN's descriptor calls (create, set, finalize, destroy) are replaced by stand-ins that record them, so nothing
reaches the library. Each graph prints as its ``OPERATIONGRAPH`` descriptor, a tree: every descriptor with its
attributes sorted by name (type, count, the value's bytes in hex) and nested descriptors expanded, so the order in
which descriptors are made or attributes set does not show; then the graph's cache key, operations and bound
tensors. ``--calls`` prints the calls in order instead (pointer values are stand-ins). The version gates read
cuDNN 9.22 (transpose, slice) and 9.19 (unified attention) whichever library is installed.
"""
from __future__ import annotations

import argparse
import sys

import cudnn_py
from cudnn_py import capi
from cudnn_py.graph import Graph
import cudnn_py.graph.descriptors as D
import cudnn_py.graph.ops.reshape as RS
import cudnn_py.graph.ops.sdpa_builders as gsb

BF16 = "bfloat16"

_calls: list[tuple] = []
_next = [0x1000]


def _create(desc_type, pptr):
    _next[0] += 16
    pptr._obj.value = _next[0]
    _calls.append(("create", capi.cudnnBackendDescriptorType_t(desc_type).name[len("CUDNN_BACKEND_"):], _next[0]))
    return 0


def _set(ptr, attr, attr_type, count, arr):
    data = bytes(memoryview(arr._obj if hasattr(arr, "_obj") else arr).cast("B"))
    _calls.append(("set", ptr.value, capi.cudnnBackendAttributeName_t(attr).name,
                   capi.cudnnBackendAttributeType_t(attr_type).name, int(count), data.hex()))
    return 0


def _finalize(ptr):
    _calls.append(("finalize", ptr.value))
    return 0


def graphs():
    """(name, graph) pairs: every operation kind and most of their options."""
    g = Graph(io_dtype="float16")
    x, w = g.tensor((2, 8, 6, 6), name="x", layout="NHWC"), g.tensor((8, 8, 3, 3), name="w", layout="NHWC")
    y = g.conv_fprop(x, w, padding=1)
    y2 = g.conv_fprop(x, w, padding=(1, 0), post_padding=(0, 1), stride=2, dilation=(1, 2), compute_dtype="float64",
                      alpha=0.5, beta=0.25, conv_mode="convolution")
    s, sq = g.genstats(y)
    dy = g.tensor((2, 8, 6, 6), name="dy")
    dx = g.conv_dgrad(dy, w, padding=1)
    dx2 = g.conv_dgrad(dy, w, padding=(1, 1), post_padding=(2, 0), stride=2, x_shape=(2, 8, 12, 11), alpha=2.0)
    dw = g.conv_wgrad(dy, x, padding=1)
    dw2 = g.conv_wgrad(dy, x, padding=0, w_shape=(8, 8, 1, 1), compute_dtype="float32", beta=1.0)
    a = g.tensor((1, 4, 8), name="a")
    c = g.matmul(a, g.tensor((1, 8, 4), name="b"), compute_dtype="float32")
    r = g.reduction(g.select(c, g.scale(c, 0.5), g.cmp_gt(c, 0.0)), "max", axes=(2,))
    r2 = g.reduction(c, "amax", out_shape=(1, 1, 1))
    e = g.pointwise("elu_fwd", g.gelu_backward(c, c), elu_alpha=0.5)
    acts = [g.relu(c, negative_slope=0.1, lower_clip=0.0, upper_clip=6.0), g.gelu(c, approximate="tanh"), g.silu(c),
            g.tanh(c), g.sigmoid(c), g.exp(c), g.log(c), g.relu_backward(c, c), g.tanh_backward(c, c),
            g.sigmoid_backward(c, c), g.silu_backward(c, c), g.add(c, 1.0), g.sub(c, c), g.mul(c, 2), g.div(c, c),
            g.bias(c, c), g.gen_index(c, axis=1), g.pointwise("softplus_fwd", c, softplus_beta=2.0)]
    outs = [y, y2, s, sq, dx, dx2, dw, dw2, r, r2, e] + acts
    for t in outs:
        t.set_output(True)
    yield "conv/matmul/pointwise", g

    g = Graph(io_dtype="float16")
    z = g.tensor((2, 4, 3), name="z")
    outs = list(g.norm_forward(z, g.tensor((1, 4, 3), name="gamma"), g.tensor((1, 4, 3), name="beta")))
    outs.append(g.norm_forward(z, g["gamma"], mode="rms", training=False, inv_variance=g.tensor((2, 1, 1), name="iv")))
    outs += [t for t in g.norm_forward(z, g["gamma"], mode="rms") if t is not None]
    outs.append(g.norm_forward(z, g["gamma"], g["beta"], training=False, mean=g.tensor((2, 1, 1), name="mu"),
                               inv_variance=g["iv"]))
    x4 = g.tensor((2, 4, 3, 3), name="x4")
    outs += list(g.norm_forward(x4, g.tensor((1, 4, 1, 1), name="is"), g.tensor((1, 4, 1, 1), name="ib"),
                                mode="instance"))
    outs += list(g.norm_forward(z, g.tensor((2, 1, 3), name="as"), g.tensor((2, 1, 3), name="ab"), mode="ada_layer"))
    dz = g.tensor((2, 4, 3), name="dz")
    outs += [t for t in g.norm_backward(dz, z, g["gamma"], mean=g["mu"], inv_variance=g["iv"]) if t is not None]
    outs += [t for t in g.norm_backward(dz, z, g["gamma"], inv_variance=g["iv"], mode="rms", has_bias=False)
             if t is not None]
    x = g.tensor((4, 8, 6, 6), name="x", layout="NHWC")
    dy = g.tensor((4, 8, 6, 6), name="dy", layout="NHWC")
    cc = [g.tensor((1, 8, 1, 1), name=n, dtype="float32") for n in ("s", "b", "m", "v")]
    outs += [t for t in g.batch_norm(x, cc[0], cc[1], running_mean=cc[2], running_var=cc[3], momentum=0.2)]
    outs += [t for t in g.batch_norm(x, cc[0], cc[1], epsilon=1e-3) if t is not None]
    outs += list(g.norm_backward(dy, x, cc[0], mean=cc[2], inv_variance=cc[3], mode="batch"))
    s, sq = g.genstats(x, compute_dtype="float32")
    outs += [t for t in g.bn_finalize(s, sq, cc[0], cc[1], accum_count=144, running_mean=cc[2], running_var=cc[3])]
    outs += list(g.bn_backward_weights(dy, x, cc[2], cc[3], cc[0]))
    for t in outs:
        t.set_output(True)
    yield "norm", g

    g = Graph(io_dtype="float16")
    x = g.tensor((4, 8, 6, 6), name="x", layout="NHWC")
    xn = g.tensor((4, 8, 6, 6), name="xn")
    outs = list(g.max_pool(x, 3, 2, 1, index=True))
    outs.append(g.max_pool_backward(g.tensor((4, 8, 3, 3), name="dyp", layout="NHWC"), 3, 2, 1, index=outs[-1],
                                    x_shape=x.shape))
    yp = g.avg_pool(xn, 2, include_padding=False)
    outs.append(yp)
    outs.append(g.avg_pool(xn, (3, 2), (1, 2), (1, 0), post_padding=(0, 1), padding_mode="edge"))
    outs.append(g.avg_pool_backward(g.tensor((4, 8, 3, 3), name="dya"), 2, x=xn, y=g.tensor((4, 8, 3, 3), name="ya")))
    outs.append(g.max_pool_backward(g.tensor((4, 8, 3, 3), name="dym"), 2, x=xn, y=g["ya"]))
    x5 = g.tensor((1, 2, 4, 4, 4), name="x5")
    outs.append(g.resample(x5, "max", 2))
    for t in outs:
        t.set_output(True)
    yield "resample", g

    g = Graph(io_dtype="float16")
    x = g.tensor((4, 8, 6, 6), name="x", layout="NHWC")
    dy = g.tensor((4, 8, 6, 6), name="dy", layout="NHWC")
    sd, of = g.tensor((1,) * 4, name="seed", dtype="int64"), g.tensor((1,) * 4, name="off", dtype="int64")
    outs = list(g.dropout(x, 0.2, seed=sd, offset=of))
    outs += list(g.dropout(x, 0.0, seed=5))
    outs.append(g.bernoulli(x.shape, 0.5, seed=3))
    outs.append(g.bernoulli(x.shape, 0.25, seed=sd, offset=of, like=x))
    outs.append(g.concatenate([x, dy], 1))
    outs.append(g.concatenate([x, dy, x], 0, inplace_index=1))
    outs.append(g.reshape(g.tensor((2, 8, 16), name="r"), (2, 128, 1)))
    outs.append(g.transpose(g.tensor((2, 3, 4), name="tp"), (2, 0, 1)))
    outs.append(g.slice(g.tensor((6, 5, 4), name="sl"), (slice(1, 5, 2), slice(None, -1))))
    for t in outs:
        t.set_output(True)
    yield "rng/reshape", g

    E4 = capi.CUDNN_DATA_FP8_E4M3
    g = Graph(io_dtype="float16")
    a, b = g.tensor((1, 32, 64), dtype=E4, name="a"), g.tensor((1, 64, 16), dtype=E4, name="b")
    one = [g.tensor((1, 1, 1), dtype="float32", name=n) for n in ("da", "db", "sc")]
    cc, peak = g.fp8_matmul(a, b, descale_a=one[0], descale_b=one[1], scale_c=one[2], out_dtype=E4, amax=True)
    c2 = g.fp8_matmul(a, b, descale_a=one[0], descale_b=one[1])
    x = g.tensor((2, 16, 8, 8), name="x", dtype=E4, layout="NHWC")
    w = g.tensor((16, 16, 3, 3), name="w", dtype=E4, layout="NHWC")
    d4 = [g.tensor((1, 1, 1, 1), name=n, dtype="float32") for n in ("dx", "dw", "sy")]
    y, pk = g.fp8_conv_fprop(x, w, 1, descale_x=d4[0], descale_w=d4[1], scale_y=d4[2], out_dtype=E4, amax=True)
    for t in (cc, peak, c2, y, pk):
        t.set_output(True)
    yield "fp8", g

    def qkv(g, b=2, hq=4, hk=2, sq=64, skv=80, d=64, dtype=BF16):
        return (g.tensor((b, hq, sq, d), dtype, name="q"), g.tensor((b, hk, skv, d), dtype, name="k"),
                g.tensor((b, hk, skv, d), dtype, name="v"))
    g = Graph(io_dtype=BF16)
    o, _ = g.sdpa(*qkv(g), implementation="composite", return_stats=False)
    o.set_output(True)
    yield "sdpa composite", g
    g = Graph(io_dtype=BF16)
    q, k, v = qkv(g, hq=4, hk=4, sq=64, skv=64)
    i32 = lambda n: g.tensor((2, 1, 1, 1), "int32", name=n)  # noqa: E731
    i64 = lambda n: g.tensor((1, 1, 1, 1), "int64", name=n)  # noqa: E731
    o, st, mask = g.sdpa(q, k, v, scale=0.3, causal=True, left_bound=8, bias=g.tensor((1, 4, 64, 64), name="b"),
                         alibi=g.tensor((1, 4, 1, 1), "float32", name="al"), seq_len_q=i32("sq"),
                         seq_len_kv=i32("skv"), dropout=0.1, seed=i64("seed"), offset=i64("off"), rng_dump=True)
    for t in (o, st, mask):
        t.set_output(True)
    yield "sdpa options", g
    g = Graph(io_dtype=BF16)
    q, k, v = qkv(g)
    o, do = g.tensor((2, 4, 64, 64), name="o"), g.tensor((2, 4, 64, 64), name="do")
    st = g.tensor((2, 4, 64, 1), "float32", name="st")
    for t in g.sdpa_backward(q, k, v, o, do, st, causal=True, name="bwd"):
        t.set_output(True)
    yield "sdpa bwd", g
    g = Graph(io_dtype=BF16)
    q, k, v = qkv(g)
    o, st = g.sdpa(q, k, v, implementation="unified")
    o.set_output(True), st.set_output(True)
    yield "sdpa unified", g


def tree(ptr: int, types: dict, attrs: dict) -> str:
    """One descriptor and what it references, independent of creation and set order."""
    parts = [types[ptr]]
    for name in sorted(attrs[ptr]):
        attr_type, count, data = attrs[ptr][name]
        if attr_type == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
            raw = bytes.fromhex(data)[:8 * count]
            kids = [tree(int.from_bytes(raw[i:i + 8], "little"), types, attrs) for i in range(0, len(raw), 8)]
            parts.append(f"{name}=[" + ", ".join(kids) + "]")
        else:
            parts.append(f"{name}:{attr_type}:{count}:{data}")
    return "{" + "; ".join(parts) + "}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", action="store_true", help="the calls in order, not the descriptor trees")
    args = ap.parse_args()
    D._C_CREATE, D._C_SET, D._C_FINALIZE, D._C_DESTROY = _create, _set, _finalize, lambda ptr: 0
    capi.cudnnBackendSetAttribute = _set  # the operations that set an attribute outside the table
    RS._loaded = lambda: (9, 22, 0)
    gsb._version = lambda: (9, 19, 0)
    print(f"lowering with {cudnn_py.__file__}", file=sys.stderr)
    handle = capi.cudnnHandle_t(0x77)
    for name, g in graphs():
        _calls.clear()
        g.lower(handle)
        print(f"== {name}")
        if args.calls:
            print("\n".join(" ".join(map(str, c)) for c in _calls))
        else:
            types, attrs = {}, {}
            for c in _calls:
                if c[0] == "create":
                    types[c[2]], attrs[c[2]] = c[1], {}
                elif c[0] == "set":
                    attrs[c[1]][c[2]] = c[3:]
            print(tree(next(c[1] for c in reversed(_calls) if c[0] == "finalize"), types, attrs))
        print("key", g.key())
        print("operations", g.describe())
        print("bound", [t.name for t in g.io_tensors()])


if __name__ == "__main__":
    main()
