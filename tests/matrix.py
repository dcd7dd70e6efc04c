"""The correctness matrix: for each public operation and engine, which dtypes are verified on the GPU against a
float64 reference and which are refused before C is called. tests/test_matrix.py is generated from this table:

* on the CPU it calls every (operation, engine) with every dtype cudnn_py knows
(``cudnn_py.core.dtypes.SUPPORTED_DTYPES``)
  on fake arrays and a stub handle, and fails when validation accepts a dtype the table does not list as verified,
  refuses one listed as verified, or a dtype is in neither list (a new dtype cannot slip in untested); it also fails
  when an operation accepts an ``engine=`` the table does not list;
* on the GPU it runs every verified cell on fresh random data with NaN-poisoned outputs against the float64 reference.

Scope: convolution (forward, backward data, backward filter; legacy and graph engines), pooling, activation, softmax
and the tensor ops add_tensor / op_tensor (forward calls; engines as each call takes them). Not in the table (their
own test modules check the dtypes they accept): backward calls other than convolution's, LRN, batch norm and the
normalizations, RNN, attention, CTC, dropout, spatial transformer, reduce/transform tensor, the graph builder's own
operations (tests/test_graph_gpu.py). Layouts are one per cell (packed NCHW; NHWC for int8 convolution, which cuDNN
runs channels-last only).
"""
from __future__ import annotations

ALL = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool", "float8_e4m3fn",
       "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")
FLOATS = ("float32", "float64", "float16", "bfloat16")
_NOT_FLOAT = tuple(d for d in ALL if d not in FLOATS)


def _rest(*verified: str) -> tuple[str, ...]:
    return tuple(d for d in ALL if d not in verified)


#: (operation, engine) -> (verified dtypes, refused dtypes); engine None: the call takes no ``engine=``
MATRIX: dict[tuple[str, str | None], tuple[tuple[str, ...], tuple[str, ...]]] = {
    ("convolution_forward", "legacy"): (("float32", "float16", "bfloat16", "float64", "int8"),
                                        ("uint8", "int32", "int64", "bool", "float8_e4m3fn", "float8_e5m2",
                                         "float8_e8m0fnu", "float4_e2m1fn")),
    ("convolution_forward", "graph"): (("float32", "float16", "bfloat16", "float64"),
                                       ("int8", "uint8", "int32", "int64", "bool", "float8_e4m3fn",
                                        "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")),
    ("convolution_backward_data", "legacy"): (("float32", "float16", "bfloat16", "float64"),
                                              ("int8", "uint8", "int32", "int64", "bool", "float8_e4m3fn",
                                               "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")),
    ("convolution_backward_data", "graph"): (("float32", "float16", "bfloat16", "float64"),
                                             ("int8", "uint8", "int32", "int64", "bool", "float8_e4m3fn",
                                              "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")),
    ("convolution_backward_filter", "legacy"): (("float32", "float16", "bfloat16", "float64"),
                                                ("int8", "uint8", "int32", "int64", "bool", "float8_e4m3fn",
                                                 "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")),
    ("convolution_backward_filter", "graph"): (("float32", "float16", "bfloat16", "float64"),
                                               ("int8", "uint8", "int32", "int64", "bool",
                                                "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")),
    # engine="auto" (the convolutions' default): the graph where it takes the call, else the legacy call
    ("convolution_forward", "auto"): (("float32", "float16", "bfloat16", "float64", "int8"),
                                      ("uint8", "int32", "int64", "bool", "float8_e4m3fn", "float8_e5m2",
                                       "float8_e8m0fnu", "float4_e2m1fn")),
    ("convolution_backward_data", "auto"): (("float32", "float16", "bfloat16", "float64"),
                                            ("int8", "uint8", "int32", "int64", "bool", "float8_e4m3fn",
                                             "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")),
    ("convolution_backward_filter", "auto"): (("float32", "float16", "bfloat16", "float64"),
                                              ("int8", "uint8", "int32", "int64", "bool", "float8_e4m3fn",
                                               "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn")),
    ("pooling_forward", "legacy"): (FLOATS, _NOT_FLOAT),
    ("pooling_forward", "graph"): (("float32", "float16", "bfloat16"), ("float64",) + _NOT_FLOAT),
    ("pooling_forward", "auto"): (FLOATS, _NOT_FLOAT),
    ("activation_forward", "legacy"): (FLOATS, _NOT_FLOAT),
    ("activation_forward", "graph"): (("float32", "float16", "bfloat16"), ("float64",) + _NOT_FLOAT),
    ("activation_forward", "auto"): (FLOATS, _NOT_FLOAT),
    ("softmax_forward", None): (FLOATS, _NOT_FLOAT),
    ("add_tensor", "legacy"): (FLOATS, _NOT_FLOAT),
    ("add_tensor", "graph"): (("float32", "float16", "bfloat16"), ("float64",) + _NOT_FLOAT),
    ("add_tensor", "auto"): (FLOATS, _NOT_FLOAT),
    ("op_tensor", "legacy"): (FLOATS, _NOT_FLOAT),
    ("op_tensor", "graph"): (("float32", "float16", "bfloat16"), ("float64",) + _NOT_FLOAT),
    ("op_tensor", "auto"): (FLOATS, _NOT_FLOAT),
}

#: the ``engine=`` values an operation is probed with (an accepted one missing from MATRIX fails the CPU test)
ENGINES_TRIED = ("legacy", "graph", "auto", "fast")

#: relative tolerance (max abs error / max(1, max |reference|)) per dtype; float32 allows TF32 tensor-op math
TOL = {"float64": 1e-10, "float32": 3e-3, "float16": 1e-2, "bfloat16": 5e-2, "int8": 0.0}


def counts() -> dict[str, tuple[int, int]]:
    """operation -> (verified cells, refused cells) summed over its engines."""
    out: dict[str, tuple[int, int]] = {}
    for (op, _), (ver, ref) in MATRIX.items():
        v, r = out.get(op, (0, 0))
        out[op] = (v + len(ver), r + len(ref))
    return out
