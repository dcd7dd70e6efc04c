"""Graph API on CPU: the attribute table, typed backend descriptors against the real libcudnn (create/set work with
no GPU; finalize needs the driver), the graph builder's shape inference and bad-input errors, plan/variant-pack
checks that fire before cuDNN is called."""
import ctypes
import fractions
import math
import types

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.errors import ClosedError, CudnnBadParamError, CudnnError
from cudnn_py.graph import BackendDescriptor, Graph, GraphNotSupportedError, POINTWISE_ARITY, attr_spec
from cudnn_py.graph import execute as gexec
from cudnn_py.graph import runner as grunner
from cudnn_py.capi.backend_attributes import TABLE
from cudnn_py.graph.plans import Plan
from cudnn_py.core.memory import DeviceArray

# -- the attribute table (that it matches the headers is tests/test_codegen.py's) ---------------------------------
def test_table_covers_the_attributes_we_use():
    header_rows = [k for k, v in TABLE.items() if v[3].startswith("header")]
    assert len(header_rows) > 150
    every = set(capi.cudnnBackendAttributeName_t.__members__)
    assert set(TABLE) <= every
    assert len(TABLE) >= 0.9 * len(every)
    for name in ["CUDNN_ATTR_TENSOR_DIMENSIONS", "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS",
                 "CUDNN_ATTR_ENGINEHEUR_RESULTS", "CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION",
                 "CUDNN_ATTR_OPERATION_POINTWISE_XDESC", "CUDNN_ATTR_KNOB_INFO_TYPE"]:
        assert name in TABLE, name


@pytest.mark.parametrize("name,types_,count,nested", [
    ("CUDNN_ATTR_TENSOR_DIMENSIONS", ("INT64",), "n", None),
    ("CUDNN_ATTR_TENSOR_IS_VIRTUAL", ("BOOLEAN",), "1", None),
    ("CUDNN_ATTR_TENSOR_DATA_TYPE", ("DATA_TYPE",), "1", None),
    ("CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS", ("VOID_PTR",), "0+", None),
    ("CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X", ("BACKEND_DESCRIPTOR",), "1", "TENSOR"),
    ("CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA", ("FLOAT", "DOUBLE"), "1+", None),
    ("CUDNN_ATTR_ENGINEHEUR_MODE", ("HEUR_MODE",), "1", None),
    ("CUDNN_ATTR_ENGINEHEUR_RESULTS", ("BACKEND_DESCRIPTOR",), "0+", "ENGINECFG"),
    ("CUDNN_ATTR_ENGINE_KNOB_INFO", ("BACKEND_DESCRIPTOR",), "0+", "KNOB_INFO"),
    ("CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE", ("KNOB_TYPE",), "1", None),
    ("CUDNN_ATTR_EXECUTION_PLAN_HANDLE", ("HANDLE",), "1", None),
    ("CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION", ("CHAR",), "n", None),
    ("CUDNN_ATTR_RESAMPLE_STRIDES", ("INT64", "FRACTION"), "n", None),
    ("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", ("BACKEND_DESCRIPTOR",), "1", "POINTWISE"),
    ("CUDNN_ATTR_OPERATION_REDUCTION_DESC", ("BACKEND_DESCRIPTOR",), "1", "REDUCTION"),
    ("CUDNN_ATTR_ENGINE_NUMERICAL_NOTE", ("NUMERICAL_NOTE",), "0+", None),
])
def test_attr_spec(name, types_, count, nested):
    s = attr_spec(name)
    assert (s.types, s.count, s.nested) == (types_, count, nested)
    assert attr_spec(capi.cudnnBackendAttributeName_t[name]) == s


def test_unknown_attribute_names():
    with pytest.raises(ValueError, match="unknown backend attribute"):
        attr_spec("CUDNN_ATTR_NOPE")
    with pytest.raises(TypeError):
        attr_spec(1.5)


# -- descriptors -----------------------------------------------------------------------------------------------
def _tensor(**kw):
    attrs = dict(data_type=capi.CUDNN_DATA_FLOAT, dimensions=[1, 8, 8, 8], strides=[512, 64, 8, 1], unique_id=1,
                 byte_alignment=16, is_virtual=False)
    attrs.update(kw)
    return BackendDescriptor("TENSOR", **attrs)


def test_every_descriptor_type_can_be_created_and_closed():
    made = 0
    for t in capi.cudnnBackendDescriptorType_t:
        try:
            d = BackendDescriptor(t)
        except CudnnError as e:  # a type the loaded library does not know
            assert e.reason or e.status
            continue
        made += 1
        assert repr(d).startswith(f"<BackendDescriptor {d.short_type} open")
        d.close()
        d.close()
        assert d.closed
    assert made >= 30


def test_set_each_element_type():
    t = _tensor()  # DATA_TYPE, INT64 arrays, INT64, BOOLEAN
    t.set("reordering_mode", capi.CUDNN_TENSOR_REORDERING_NONE)
    t.set("is_by_value", np.bool_(False))
    pw = BackendDescriptor("POINTWISE", mode="relu_fwd", math_prec="CUDNN_DATA_FLOAT")  # enum by short name
    pw.set("relu_lower_clip", 0.0).set("relu_upper_clip", 6.0, attr_type="FLOAT").set("axis", 1)
    pw.set("nan_propagation", capi.CUDNN_PROPAGATE_NAN)
    conv = BackendDescriptor("CONVOLUTION", comp_type=capi.CUDNN_DATA_FLOAT, conv_mode=capi.CUDNN_CROSS_CORRELATION,
                             spatial_dims=2, dilations=[1, 1], filter_strides=[1, 1], pre_paddings=[1, 1],
                             post_paddings=[1, 1])
    op = BackendDescriptor("OPERATION_CONVOLUTION_FORWARD")
    op.set("alpha", 1.0).set("beta", 0.5, attr_type=capi.CUDNN_TYPE_DOUBLE)  # FLOAT or DOUBLE
    heur = BackendDescriptor("ENGINEHEUR", mode="A")
    heur.set("sm_count_target", 4)  # INT32
    kc = BackendDescriptor("KNOB_CHOICE", knob_type=capi.CUDNN_KNOB_TYPE_SWIZZLE, knob_value=1)
    vp = BackendDescriptor("VARIANT_PACK", unique_ids=[1, 2], data_pointers=[0x1000, None], workspace=None)
    rs = BackendDescriptor("RESAMPLE", mode=capi.CUDNN_RESAMPLE_MAXPOOL, comp_type=capi.CUDNN_DATA_FLOAT,
                           spatial_dims=2, nan_propagation=capi.CUDNN_PROPAGATE_NAN,
                           padding_mode=capi.CUDNN_NEG_INF_PAD)
    rs.set("strides", [fractions.Fraction(1, 2), fractions.Fraction(1, 2)])  # FRACTION picked by value
    rs.set("window_dims", [2, 2])
    plan = BackendDescriptor("EXECUTION_PLAN")
    plan.set("json_representation", '{"not": "a plan"}')  # CHAR
    red = BackendDescriptor("REDUCTION", operator="add", comp_type=capi.CUDNN_DATA_FLOAT)
    for d in (t, pw, conv, op, heur, kc, vp, rs, plan, red):
        assert not d.finalized
        d.close()


@pytest.mark.parametrize("attr,value,match", [
    ("dimensions", [1.5, 2], "takes integers"),
    ("dimensions", 4, "takes a sequence"),
    ("unique_id", True, "takes integers"),
    ("is_virtual", 1, "True/False"),
    ("data_type", capi.CUDNN_POINTWISE_ADD, "cudnnDataType_t"),
    ("data_type", 2.0, "cudnnDataType_t"),
    ("unique_id", [1, 2], "takes one element"),
])
def test_wrong_attribute_types_raise_before_c(attr, value, match):
    t = BackendDescriptor("TENSOR")
    with pytest.raises((TypeError, ValueError), match=match):
        t.set(attr, value)


def test_wrong_attr_type_argument_and_unknown_names():
    t = BackendDescriptor("TENSOR")
    with pytest.raises(TypeError, match="takes CUDNN_TYPE_INT64, not CUDNN_TYPE_FLOAT"):
        t.set("dimensions", [1], attr_type="FLOAT")
    with pytest.raises(ValueError, match="no attribute 'nonsense'"):
        t.set("nonsense", 1)
    with pytest.raises(ValueError, match="not a cudnnDataType_t member"):
        t.set("data_type", "quaternion")


def test_nested_descriptor_type_and_finalization_checked():
    op = BackendDescriptor("OPERATION_CONVOLUTION_FORWARD")
    with pytest.raises(ValueError, match="must be finalized"):
        op.set("x", _tensor())
    conv = BackendDescriptor("CONVOLUTION")
    conv.finalized = True  # pretend, to reach the type check
    with pytest.raises(TypeError, match="takes a TENSOR descriptor, got a CONVOLUTION"):
        op.set("x", conv)
    with pytest.raises(TypeError, match="takes open cudnn_py.graph.BackendDescriptor objects"):
        op.set("x", 5)


def test_cudnn_reasons_reach_the_exception():
    # bypass our own check: cuDNN itself refuses an unfinalized operation in a graph and says why
    op = BackendDescriptor("OPERATION_CONVOLUTION_FORWARD")
    op.finalized = True
    with pytest.raises(CudnnBadParamError) as e:
        BackendDescriptor("OPERATIONGRAPH").set("ops", [op])
    assert "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED" in str(e.value) and e.value.reason
    assert e.value.function == "cudnnBackendSetAttribute"


def test_attribute_outside_the_table_needs_attr_type():
    with pytest.raises(TypeError, match="pass attr_type="):
        BackendDescriptor("TENSOR").set("constant_value", 1.0)


def test_closed_and_finalized_descriptors():
    t = _tensor()
    t.close()
    with pytest.raises(ClosedError):
        t.set("unique_id", 3)
    with BackendDescriptor("TENSOR") as u:
        u.finalized = True
        with pytest.raises(RuntimeError, match="finalized"):
            u.set("unique_id", 3)
    assert u.closed


def test_get_needs_finalized_descriptor_and_says_so():
    t = _tensor()
    with pytest.raises(CudnnError) as e:
        t.get("dimensions")
    assert e.value.function == "cudnnBackendGetAttribute"


def test_descriptor_type_names():
    assert BackendDescriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR").short_type == "MATMUL"
    assert BackendDescriptor(capi.CUDNN_BACKEND_MATMUL_DESCRIPTOR).short_type == "MATMUL"
    with pytest.raises(ValueError, match="unknown backend descriptor type"):
        BackendDescriptor("BLAH")
    # attribute prefixes that differ from the type name
    assert BackendDescriptor("OPERATION_CONVOLUTION_BACKWARD_DATA").resolve("dx") == \
        capi.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX
    assert BackendDescriptor("OPERATION_GEN_STATS").resolve("sumdesc") == capi.CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC


# -- the graph builder -----------------------------------------------------------------------------------------
def test_conv_shapes_and_layouts():
    g = Graph(io_dtype="float16", compute_dtype="float32")
    x = g.tensor((8, 64, 56, 56), name="x", layout="NHWC")
    w = g.tensor((128, 64, 3, 3), name="w", layout="NHWC")
    y = g.conv_fprop(x, w, padding=1, stride=2)
    assert y.shape == (8, 128, 28, 28) and y.is_virtual
    assert y.strides == (28 * 28 * 128, 1, 28 * 128, 128)  # follows x's channels-last layout
    assert y.dtype == capi.CUDNN_DATA_FLOAT  # intermediates: compute dtype
    y.set_output(True)
    assert not y.is_virtual and y.dtype == capi.CUDNN_DATA_HALF
    dx = g.conv_dgrad(g.tensor((8, 128, 28, 28), name="dy"), w, padding=1, stride=2, x_shape=(8, 64, 56, 56))
    assert dx.shape == (8, 64, 56, 56)
    dw = g.conv_wgrad(g["dy"], x, padding=1, stride=2, w_shape=(128, 64, 3, 3))  # stride 2: kernel ambiguous
    assert dw.shape == (128, 64, 3, 3)
    assert g.conv_wgrad(g.tensor((8, 128, 56, 56)), x, padding=1).shape == (128, 64, 3, 3)
    g3 = Graph()  # 3-D convolution shapes
    y3 = g3.conv_fprop(g3.tensor((1, 4, 5, 6, 7)), g3.tensor((2, 4, 3, 3, 3)), padding=(1, 0, 1), dilation=(1, 1, 2))
    assert y3.shape == (1, 2, 5, 4, 5)


def test_matmul_broadcast_and_errors(monkeypatch):
    from cudnn_py.graph.ops import matmul as mm  # the shapes, whichever cuDNN is loaded (the version gate: below)
    monkeypatch.setattr(mm, "library", lambda: types.SimpleNamespace(version=mm.BROADCAST_SINCE))
    g = Graph()
    a, b = g.tensor((4, 32, 16)), g.tensor((1, 16, 8))
    assert g.matmul(a, b).shape == (4, 32, 8)
    with pytest.raises(ValueError, match="last dim"):
        g.matmul(a, a)
    with pytest.raises(ValueError, match="does not broadcast"):
        g.matmul(a, g.tensor((3, 16, 8)))
    with pytest.raises(TypeError, match="different dtypes"):
        g.matmul(a, g.tensor((4, 16, 8), dtype="float16"))


def test_pointwise_arity_broadcast_and_scalars():
    g = Graph()
    x = g.tensor((2, 3, 4, 5), name="x")
    b = g.tensor((1, 3, 1, 1), name="b")
    assert g.add(x, b).shape == (2, 3, 4, 5)
    s = g.scale(x, 0.5)
    sc = [t for t in g.tensors if t.is_by_value]
    assert s.shape == x.shape and len(sc) == 1 and sc[0].value == 0.5 and sc[0].shape == (1, 1, 1, 1)
    assert g.relu_backward(x, x).shape == x.shape
    assert g.select(x, x, g.cmp_gt(x, b)).shape == x.shape
    with pytest.raises(ValueError, match="is unary"):
        g.pointwise("relu_fwd", x, b)
    with pytest.raises(ValueError, match="is binary"):
        g.pointwise("add", x)
    with pytest.raises(ValueError, match="does not broadcast"):
        g.add(x, g.tensor((1, 2, 1, 1)))
    with pytest.raises(ValueError, match="same rank"):
        g.add(x, g.tensor((3, 1, 1)))
    with pytest.raises(ValueError, match="unknown pointwise mode"):
        g.pointwise("frobnicate", x)


def test_every_pointwise_mode_has_an_arity():
    assert len(POINTWISE_ARITY) == len(capi.cudnnPointwiseMode_t)
    assert POINTWISE_ARITY[capi.CUDNN_POINTWISE_BINARY_SELECT] == "ternary"
    assert POINTWISE_ARITY[capi.CUDNN_POINTWISE_GELU_BWD] == "backward"
    assert POINTWISE_ARITY[capi.CUDNN_POINTWISE_CMP_GE] == "binary"
    assert POINTWISE_ARITY[capi.CUDNN_POINTWISE_ERF] == "unary"


def test_reduction_and_genstats_shapes():
    g = Graph()
    x = g.tensor((2, 3, 4, 5))
    assert g.reduction(x, "max", axes=(2, -1)).shape == (2, 3, 1, 1)
    assert g.reduction(x, out_shape=(1, 3, 1, 1)).shape == (1, 3, 1, 1)
    s, sq = g.genstats(x)
    assert s.shape == sq.shape == (1, 3, 1, 1)
    with pytest.raises(ValueError, match="exactly one"):
        g.reduction(x)
    with pytest.raises(ValueError, match="must keep x's rank"):
        g.reduction(x, out_shape=(2, 3))


def test_norm_forward_shapes_and_errors():
    g = Graph(io_dtype="float16")
    x = g.tensor((4, 8, 3, 5), name="x")
    sc, b = g.tensor((1, 8, 3, 5), name="scale"), g.tensor((1, 8, 3, 5), name="bias")
    y, mean, inv = g.norm_forward(x, sc, b)
    assert y.shape == x.shape and mean.shape == inv.shape == (4, 1, 1, 1)
    assert inv.set_output(True).dtype == capi.CUDNN_DATA_FLOAT  # statistics stay float32 as outputs
    y2, m2, inv2 = g.norm_forward(x, g.tensor((1, 8, 1, 1), name="s2"), g.tensor((1, 8, 1, 1), name="b2"),
                                  mode="batch")
    assert m2.shape == (1, 8, 1, 1)
    y3, m3, inv3 = g.norm_forward(x, sc, mode="rms")
    assert m3 is None and inv3.shape == (4, 1, 1, 1)
    assert g.norm_forward(x, sc, b, training=False, mean=g.tensor((4, 1, 1, 1)), inv_variance=g.tensor((4, 1, 1, 1))).shape == x.shape
    with pytest.raises(ValueError, match="needs a bias"):
        g.norm_forward(x, sc)
    with pytest.raises(ValueError, match="inference needs mean"):
        g.norm_forward(x, sc, b, training=False)
    with pytest.raises(ValueError, match="no batch-norm inference"):
        g.norm_forward(x, sc, b, mode="batch", training=False)
    with pytest.raises(ValueError, match="does not broadcast"):
        g.norm_forward(x, g.tensor((1, 7, 1, 1)), b)
    with pytest.raises(ValueError, match="mode must be one of"):
        g.norm_forward(x, sc, b, mode="group")


def test_conv_parameters_checked_before_shape_arithmetic():
    g = Graph()
    x, w = g.tensor((1, 4, 8, 8)), g.tensor((4, 4, 3, 3))
    with pytest.raises(ValueError, match="stride must be >= 1"):
        g.conv_fprop(x, w, stride=0)
    with pytest.raises(ValueError, match="dilation must be >= 1"):
        g.conv_wgrad(g.tensor((1, 4, 6, 6)), x, dilation=(1, 0))
    with pytest.raises(ValueError, match="padding has 3 entries; expected 2"):
        g.conv_fprop(x, w, padding=(1, 1, 1))
    with pytest.raises(ValueError, match="padding must be >= 0"):
        g.conv_fprop(x, w, padding=-1)
    assert g.conv_fprop(x, w, padding=np.int64(1), stride=(np.int32(2), 2)).shape == (1, 4, 4, 4)


def test_uids_names_and_lookup():
    g = Graph()
    x = g.tensor((2, 2), name="x")
    y = g.tensor((2, 2))
    assert x.uid != y.uid and g["x"] is x and g[y.name] is y
    with pytest.raises(ValueError, match="already has a tensor named"):
        g.tensor((1,), name="x")
    with pytest.raises(KeyError, match="no tensor named 'z'"):
        g["z"]
    with pytest.raises(ValueError, match="belongs to another graph"):
        Graph().relu(x)
    with pytest.raises(TypeError, match="g.scalar"):
        g.matmul(x, 3.0)


def test_tensor_like_numpy_and_strides():
    g = Graph()
    a = np.zeros((4, 3), np.float32).T  # non-contiguous view
    t = g.tensor_like(a, "a")
    assert t.shape == (3, 4) and t.strides == (1, 3) and t.dtype == capi.CUDNN_DATA_FLOAT
    with pytest.raises(ValueError, match="strides"):
        g.tensor((2, 2), strides=(1,))
    with pytest.raises(ValueError, match="positive"):
        g.tensor((0, 2))


@pytest.mark.parametrize("strides", [(0, 1), (1, 1)])
@pytest.mark.parametrize("role", ["input", "output"])
def test_tensors_whose_elements_overlap_are_refused_before_cudnn_sees_the_graph(strides, role):
    """A broadcast (stride 0) or otherwise overlapping layout of a tensor with memory is refused when the graph is
    validated: an input of it was never verified, an output of it would be written by racing threads. Size-1 dims
    take any stride, and a tensor whose batches ragged offsets place keeps its unused batch stride."""
    g = Graph(name="g")
    x = g.tensor((4, 4), strides=strides if role == "input" else None, name="x")
    y = g.relu(x).set_output(True).set_name("y")
    if role == "output":
        y.strides = strides  # as a given output's layout is set on the graph's result
    with pytest.raises(ValueError, match=rf"graph 'g': tensor {'x' if role == 'input' else 'y'}'s strides "
                                         rf"\({strides[0]}, 1\) make elements of shape \(4, 4\) overlap"):
        g.validate()
    b = Graph(name="b")
    b.relu(b.tensor_like(np.broadcast_to(np.zeros((1, 4), np.float32), (4, 4)), "x")).set_output(True)
    with pytest.raises(ValueError, match=r"tensor x's strides \(0, 1\)"):
        b.validate()
    ok = Graph()
    ok.relu(ok.tensor((1, 4), strides=(0, 1))).set_output(True)
    ok.validate()
    ragged = Graph()  # a head-major packed (T=6, H=2, D=4) q seen as (B=2, H, s_max=4, D): batch stride 16 unused
    q = ragged.tensor((2, 2, 4, 4), strides=(16, 24, 4, 1), name="q")
    offsets = ragged.tensor((3, 1, 1, 1), dtype="int32", name="offsets")
    q.set_ragged_offset(offsets)
    o = ragged.relu(q).set_output(True)  # o takes q's strides: placed by the offsets too, or refused
    with pytest.raises(ValueError, match=r"overlap"):
        ragged.validate()
    o.set_ragged_offset(offsets)
    ragged.validate()


def test_key_depends_on_structure_shapes_and_dtypes():
    def make(shape=(1, 8, 8, 8), dtype="float32", act="relu"):
        g = Graph(io_dtype=dtype)
        y = g.conv_fprop(g.tensor(shape), g.tensor((8, shape[1], 3, 3)), padding=1)
        getattr(g, act)(y).set_output(True)
        return g.key()
    assert make() == make()
    assert make() != make(shape=(2, 8, 8, 8))
    assert make() != make(dtype="float16")
    assert make() != make(act="tanh")


def test_validate_catches_graphs_cudnn_would_reject():
    g = Graph()
    x = g.tensor((1, 4, 4))
    with pytest.raises(ValueError, match="no operations"):
        g.validate()
    y = g.relu(x)
    with pytest.raises(ValueError, match="set_output"):
        g.validate()
    y.set_output(True)
    g.validate()
    assert g.io_tensors() == [x, y]
    assert "relu_fwd".upper() in g.describe().upper()


def test_graph_not_supported_error_names_everything():
    e = GraphNotSupportedError("g", ["conv_fprop(x) -> y", "pointwise[RELU](y) -> z"], ["A", "FALLBACK"],
                               [("heuristics A", "returned no engine configs"),
                                ("eng3 (heuristics FALLBACK #0)", "CUDNN_STATUS_NOT_SUPPORTED_SHAPE: too big")])
    text = str(e)
    for part in ("no engine supports graph 'g'", "conv_fprop(x) -> y", "A, FALLBACK", "eng3", "too big"):
        assert part in text
    assert isinstance(e, CudnnError) and e.status == capi.CUDNN_STATUS_NOT_SUPPORTED


def test_build_without_a_driver_fails_clearly():
    from conftest import gpu_missing_reason
    if not gpu_missing_reason():
        pytest.skip("a CUDA driver is present: lowering succeeds here")
    g = Graph()
    g.relu(g.tensor((1, 4, 4))).set_output(True)
    with pytest.raises(CudnnError) as e:
        g.lower(capi.cudnnHandle_t())
    assert e.value.function == "cudnnBackendFinalize"


# -- plans and variant packs: checks before C ------------------------------------------------------------------
def test_plan_requires_a_finalized_descriptor():
    with pytest.raises(ValueError, match="finalized EXECUTION_PLAN"):
        Plan(BackendDescriptor("EXECUTION_PLAN"), None)


def test_variant_pack_missing_or_extra_tensors():
    g = Graph()
    a, b = g.tensor((1, 4, 4), name="a"), g.tensor((1, 4, 4), name="b")
    c = g.matmul(a, b).set_output(True).set_name("c")
    plan = types.SimpleNamespace(graph=g)
    with pytest.raises(ValueError, match="missing b"):
        Plan.execute(plan, None, {a: object(), "c": object()})
    other = g.tensor((1, 1, 1), name="unused")
    with pytest.raises(ValueError, match="does not use"):
        gexec.ordered_pack(plan, {a: 1, b: 2, c: 3, other: 4})


def test_backend_execute_is_a_bare_ctypes_function():
    fn = grunner._bare("cudnnBackendExecute")
    assert fn.restype is ctypes.c_int and fn.errcheck is not grunner.status_error
    assert fn(None, None, None) != 0  # a status, not an exception


def test_lowering_sets_every_attribute(monkeypatch):
    """With finalize faked (no driver here), every op kind lowers through set() with table-checked types; cuDNN
    itself then refuses the not-really-finalized operations when the operation graph is assembled."""
    monkeypatch.setattr(BackendDescriptor, "finalize", lambda self: (setattr(self, "finalized", True), self)[1])
    g = Graph(io_dtype="float16")
    x, w = g.tensor((2, 8, 6, 6), name="x", layout="NHWC"), g.tensor((8, 8, 3, 3), name="w", layout="NHWC")
    y = g.conv_fprop(x, w, padding=1)
    s, sq = g.genstats(y)
    dy = g.tensor((2, 8, 6, 6), name="dy")
    dx = g.conv_dgrad(dy, w, padding=1)
    dw = g.conv_wgrad(dy, x, padding=1)
    a = g.tensor((1, 4, 8), name="a")
    c = g.matmul(a, g.tensor((1, 8, 4), name="b"))
    r = g.reduction(g.select(c, g.scale(c, 0.5), g.cmp_gt(c, 0.0)), "max", axes=(2,))
    e = g.pointwise("elu_fwd", g.gelu_backward(c, c), elu_alpha=0.5)
    ln, mean, inv = g.norm_forward(g.tensor((2, 4, 3), name="z"), g.tensor((1, 4, 3), name="gamma"),
                                   g.tensor((1, 4, 3), name="beta"))
    rms = g.norm_forward(g["z"], g["gamma"], mode="rms", training=False, inv_variance=g.tensor((2, 1, 1), name="iv"))
    for t in (y, s, sq, dx, dw, r, e, ln, mean, inv, rms):
        t.set_output(True)
    with pytest.raises(CudnnBadParamError, match="NOT_FINALIZED"):
        g.lower(capi.cudnnHandle_t())


def test_executor_hot_path_and_validation(monkeypatch):
    """The executor's plumbing with cuDNN's execute and pack finalization stubbed (no GPU here): one pack per
    pointer set, identity cache, validation of count/shape/dtype/strides before any pack is made."""
    from cudnn_py.core.memory import DeviceArray
    calls, packs = [], []

    def fake_exec(h, plan, vp):
        calls.append(vp.value)
        return 0

    monkeypatch.setitem(grunner._BARE, "cudnnBackendExecute", fake_exec)
    monkeypatch.setattr(grunner, "VariantPack",
                        lambda uids, ptrs, ws: packs.append((list(uids), ptrs, ws)) or
                        types.SimpleNamespace(ptr=ctypes.c_void_p(1000 + len(packs))))
    g = Graph()
    x, w = g.tensor((1, 8, 8, 8), name="x"), g.tensor((8, 8, 3, 3), name="w")
    y = g.relu(g.conv_fprop(x, w, padding=1)).set_output(True)
    y2 = g.scale(g.relu(g.conv_fprop(x, w, padding=1)), 2.0).set_output(True)
    plan = types.SimpleNamespace(graph=g, descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(7)),
                                 workspace_size=0, tag="fake")
    h = types.SimpleNamespace(ptr=capi.cudnnHandle_t(), device=0, stream=None, workspace=None)
    ex = gexec.Executor(plan, h, ("x", "w", y, y2))
    a = [DeviceArray(0x1000 * (i + 1), t.shape, np.float32) for i, t in enumerate((x, w, y, y2))]
    ex(*a)
    ex(*a)
    scalar = next(t for t in g.tensors if t.is_by_value)
    assert packs[0] == ([x.uid, w.uid, y.uid, y2.uid, scalar.uid],
                        [0x1000, 0x2000, 0x3000, 0x4000, g.scalar_pointer(scalar)], None)
    assert len(packs) == 1 and calls == [1001, 1001] and ex.cache_info == {"packs": 1, "recent": 1}
    ex(*a[:3], DeviceArray(0x9000, y2.shape, np.float32))
    assert len(packs) == 2 and calls[-1] == 1002
    with pytest.raises(TypeError, match="takes 4 arrays"):
        ex(*a[:3])
    with pytest.raises(ValueError, match="expects shape"):
        ex(a[0], a[0], a[2], a[3])
    with pytest.raises(TypeError, match="expects dtype"):
        ex(DeviceArray(0x5000, x.shape, np.float16), *a[1:])
    with pytest.raises(ValueError, match="expects strides"):
        ex(DeviceArray(0x5000, x.shape, np.float32, strides=(512, 1, 64, 8)), *a[1:])
    with pytest.raises(TypeError, match="device"):
        ex(np.zeros(x.shape, np.float32), *a[1:])
    assert len(packs) == 2
    with pytest.raises(ValueError, match="missing v"):
        gexec.Executor(plan, h, ("x", "w", y))


def _faked_lowering(monkeypatch):
    """Lowering with finalize and the operation graph's ops/handle faked: what cuDNN needs a driver (or a real
    handle) for is skipped, the Python side runs."""
    monkeypatch.setattr(BackendDescriptor, "finalize", lambda self: (setattr(self, "finalized", True), self)[1])
    real_set = BackendDescriptor.set
    monkeypatch.setattr(BackendDescriptor, "set", lambda self, attr, value, attr_type=None: self if attr in (
        "handle", "ops") else real_set(self, attr, value, attr_type))


def test_a_lowered_graph_is_frozen_and_lowered_once_per_handle(monkeypatch):
    _faked_lowering(monkeypatch)
    g = Graph()
    x = g.tensor((1, 4, 4), name="x")
    y = g.relu(x).set_output(True)
    h1, h2 = types.SimpleNamespace(closed=False, device=0), types.SimpleNamespace(closed=False, device=0)
    op_graph = g.lower(h1)
    assert g.lower(h1) is op_graph and g.lower(h2) is not op_graph  # the operation graph holds its handle
    with pytest.raises(RuntimeError, match="is built"):
        y.set_dtype("float16")  # the plans were made for float32: an array of another dtype must not pass
    with pytest.raises(RuntimeError, match="is built"):
        g.relu(y)
    h2.closed = True
    with pytest.raises(ClosedError, match="closed"):
        g.lower(h2)


def test_a_plan_cache_hit_freezes_the_graph():
    from cudnn_py.graph import build_plans
    plan = types.SimpleNamespace(bind=lambda g: ("bound", g))
    key = (_relu_graph().key(), ("A", "FALLBACK"), "first", False, True, None)
    h = types.SimpleNamespace(cache={"graph.plans": {key: [plan]}})
    g = _relu_graph()
    assert build_plans(g, h) == [("bound", g)]
    with pytest.raises(RuntimeError, match="is built"):
        g["y"].set_dtype("float16")


def test_plan_cache_counts_hits_and_misses_per_handle():
    from cudnn_py.core.caches import handle_cache
    from cudnn_py.graph import build_plans, plan_cache_clear, plan_cache_info
    plan = types.SimpleNamespace(bind=lambda g: ("bound", g))
    key = (_relu_graph().key(), ("A", "FALLBACK"), "first", False, True, None)
    h1, h2 = types.SimpleNamespace(cache={}), types.SimpleNamespace(cache={})
    for h in (h1, h2):
        handle_cache(h, "graph.plans")[key] = [plan]
    build_plans(_relu_graph(), h1)
    build_plans(_relu_graph(), h1)
    assert plan_cache_info(h1) == {"entries": 1, "hits": 2, "misses": 0}
    assert plan_cache_info(h2) == {"entries": 1, "hits": 0, "misses": 0}  # counts belong to the handle
    plan_cache_clear(h1)
    assert plan_cache_info(h1) == {"entries": 0, "hits": 0, "misses": 0}


def test_backend_descriptors_are_destroyed_by_a_finalizer():
    import gc
    import weakref
    d = BackendDescriptor("VARIANT_PACK")
    raw, gone = d.ptr, weakref.ref(d)
    assert raw.value
    del d
    gc.collect()
    assert gone() is None and raw.value is None  # destroyed, and the pointer object now says NULL
    borrowed = BackendDescriptor("VARIANT_PACK")
    view = BackendDescriptor("VARIANT_PACK", _ptr=borrowed.ptr)  # wraps a pointer it does not own
    view.close()
    assert view.closed and borrowed.ptr.value  # closing the view leaves the owner's descriptor alone
    borrowed.close()
    borrowed.close()
    assert borrowed.closed


def _fake_plan(g, workspace_size=0, descriptor=None):
    return types.SimpleNamespace(graph=g, workspace_size=workspace_size, tag="fake",
                                 descriptor=descriptor or types.SimpleNamespace(ptr=ctypes.c_void_p(7), closed=False))


def _relu_graph():
    g = Graph()
    x = g.tensor((1, 4, 4), name="x")
    g.relu(x).set_output(True).set_name("y")
    return g


def test_executor_of_a_closed_plan_never_passes_the_freed_plan(monkeypatch):
    from helpers import fake
    seen = []
    monkeypatch.setitem(grunner._BARE, "cudnnBackendExecute", lambda h, plan, vp: seen.append(plan.value) or (0 if plan.value else 2000))
    monkeypatch.setattr(grunner, "VariantPack", lambda uids, ptrs, ws: types.SimpleNamespace(
        ptr=ctypes.c_void_p(1000)))
    g = _relu_graph()
    d = BackendDescriptor("EXECUTION_PLAN")
    h = types.SimpleNamespace(ptr=capi.cudnnHandle_t(), device=0, stream=None, workspace=None)
    run = gexec.Executor(_fake_plan(g, descriptor=d), h)
    x, y = fake((1, 4, 4)), fake((1, 4, 4))
    run(x, y)
    d.close()
    with pytest.raises(ClosedError, match="execution plan .* is closed"):
        run(x, y)
    assert seen[0] and seen[1] is None  # the call after close got NULL, not the destroyed descriptor
    with pytest.raises(ClosedError, match="is closed"):
        gexec.Executor(_fake_plan(g, descriptor=d), h)
    with pytest.raises(ClosedError, match="descriptor is closed"):
        BackendDescriptor("EXECUTION_PLAN").set("engine_config", _closed("ENGINECFG"))
    with pytest.raises(TypeError, match="cudnnHandle_t"):
        gexec.Executor(_fake_plan(g), types.SimpleNamespace(ptr=12345, device=0))


def _closed(kind):
    d = BackendDescriptor(kind)
    d.finalized = True
    d.close()
    return d


def test_caller_workspaces_are_checked_before_c(monkeypatch):
    from helpers import NoCallHandle, fake
    monkeypatch.setitem(grunner._BARE, "cudnnBackendExecute", lambda h, plan, vp: pytest.fail("reached cudnnBackendExecute"))
    g = _relu_graph()
    plan = _fake_plan(g, workspace_size=4096)
    h = types.SimpleNamespace(ptr=capi.cudnnHandle_t(), device=0, stream=None, workspace=None)
    run = gexec.Executor(plan, h)
    x, y = fake((1, 4, 4)), fake((1, 4, 4))
    with pytest.raises(ValueError, match="workspace has 1024 bytes; the plan .* needs 4096"):
        run.with_workspace(fake((1024,), np.uint8), x, y)
    with pytest.raises(TypeError, match="host memory"):
        run.with_workspace(np.zeros(8192, np.uint8), x, y)
    with pytest.raises(ValueError, match="not NULL"):
        run.with_workspace(0, x, y)
    with pytest.raises(ValueError, match="device 1"):
        run.with_workspace(DeviceArray(0x20000, (8192,), np.uint8, device_id=1), x, y)
    with pytest.raises(ValueError, match="handle has none"):
        run(x, y)
    # a CUDA graph records the workspace address: the same checks, before anything is recorded
    with pytest.raises(ValueError, match="workspace has 1024 bytes"):
        gexec.CudaGraph(plan, NoCallHandle(), {"x": x, "y": y}, workspace=fake((1024,), np.uint8))


def test_attribute_values_are_range_checked_before_c():
    """Issue 13: INT64 values that would wrap, NaN floats, raw pointers cuDNN would dereference, non-text JSON."""
    with pytest.raises(ValueError, match="does not fit CUDNN_TYPE_INT64"):
        BackendDescriptor("TENSOR", dimensions=[2 ** 64 + 1, 2])
    with pytest.raises(ValueError, match="NaN"):
        BackendDescriptor("POINTWISE").set("relu_lower_clip", float("nan"))
    with pytest.raises(TypeError, match="raw cudnnBackendDescriptor_t"):
        BackendDescriptor("OPERATIONGRAPH", ops=[capi.cudnnBackendDescriptor_t(0x1234)])
    with pytest.raises(TypeError, match="str or bytes"):
        BackendDescriptor("EXECUTION_PLAN").set("json_representation", 2 ** 28)


def test_graph_builder_refuses_truncation_and_overflow():
    g = Graph()
    with pytest.raises(TypeError, match="shape must hold ints"):
        g.tensor((1.7, 2.2, 3.9))
    with pytest.raises(ValueError, match="strides must be >= 0"):
        g.tensor((2, 3), strides=(-1, 1))
    with pytest.raises(ValueError, match="does not fit uint8"):
        g.scalar(-2, dtype="uint8")
    with pytest.raises(ValueError, match="does not fit int32"):
        g.scalar(float("inf"), dtype="int32")
    x = g.tensor((2, 3, 4))
    with pytest.raises(ValueError, match="out of range"):
        g.reduction(x, "add", axes=[101])
    with pytest.raises(ValueError, match="conv_mode"):
        g.conv_fprop(x, g.tensor((2, 3, 1)), conv_mode="bogus")
    with pytest.raises(ValueError, match="reduction mode"):
        g.reduction(x, "avgx", axes=[1])


def test_scalars_and_parameters_that_do_not_fit_are_refused():
    """A finite value that would round to inf/NaN in the scalar's dtype, an int beyond float64, a bool that is not
    0/1: ValueError naming the value (never OverflowError, never a silently changed constant)."""
    g = Graph()
    for value, dtype in ((1e10, "float16"), (1e39, "bfloat16"), (1000.0, "float8_e4m3fn"), (10 ** 400, None),
                         (5, "bool")):
        with pytest.raises(ValueError, match="does not fit"):
            g.scalar(value, dtype=dtype)
    assert g.scalar(6e4, dtype="float16").value == 6e4
    assert g.scalar(-math.inf).value == -math.inf  # non-finite constants (masks) stay as given
    x = g.tensor((1, 2, 3, 3), name="x")
    with pytest.raises(ValueError, match="alpha = 1000.* does not fit in a double"):
        g.conv_fprop(x, g.tensor((2, 2, 1, 1), name="w"), alpha=10 ** 400)
    with pytest.raises(ValueError, match="relu_lower_clip_slope = 1000.* does not fit in a double"):
        g.relu(x, negative_slope=10 ** 400)
    with pytest.raises(ValueError, match="alpha must be finite"):
        g.conv_fprop(x, g.tensor((2, 2, 1, 1), name="w2"), alpha=math.nan)


def test_entry_point_autotuning_times_every_mode():
    """graph.runner.autotune_graph (shared by convolution, the legacy-op graph paths and attention) times the plans of
    modes A and B and the fallback list together (the fallback list can hold the only fast plan); errors
    propagate."""
    from cudnn_py.graph.runner import autotune_graph

    class Fake:
        def __init__(self, fail=None):
            self.calls, self.fail = [], fail

        def autotune(self, handle, pack, modes):
            self.calls.append(modes)
            if self.fail:
                raise self.fail

    ok = Fake()
    autotune_graph(ok, None, {})
    assert ok.calls == [("A", "B", "FALLBACK")]
    for err in (GraphNotSupportedError("g", [], ["A", "B", "FALLBACK"], []),
                CudnnBadParamError("cudnnBackendFinalize", 2000)):
        with pytest.raises(type(err)):
            autotune_graph(Fake(err), None, {})


def test_broadcast_matmul_is_refused_below_the_verified_cudnn(monkeypatch):
    """cuDNN 9.14 left elements of a batch-broadcast matmul unwritten (H200 suite, 2026-11-26): refused there, before
    cuDNN is asked; same-batch matmuls and newer libraries build as before."""
    from cudnn_py.graph.ops import matmul as mm
    old = types.SimpleNamespace(version=(9, 14, 0))
    monkeypatch.setattr(mm, "library", lambda: old)
    g = Graph(io_dtype="float16")
    a, b = g.tensor((3, 32, 16), name="a"), g.tensor((1, 16, 24), name="b")
    with pytest.raises(GraphNotSupportedError, match=r"broadcasts.*cuDNN 9\.14\.0.*9\.19\.0"):
        g.matmul(a, b)
    assert g.matmul(a, g.tensor((3, 16, 24), name="b3")).shape == (3, 32, 24)
    monkeypatch.setattr(mm, "library", lambda: types.SimpleNamespace(version=mm.BROADCAST_SINCE))
    assert g.matmul(a, b).shape == (3, 32, 24)
