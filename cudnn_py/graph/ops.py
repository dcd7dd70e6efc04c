"""Operation records of a graph and how each lowers to backend descriptors.

An :class:`Op` holds its kind, its input/output :class:`~cudnn_py.graph.graph.Tensor` records by role and its
parameters; :func:`lower` turns it into a finalized ``CUDNN_BACKEND_OPERATION_*`` descriptor given the finalized
tensor descriptors.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cudnn_py import capi

from .descriptors import BackendDescriptor

__all__ = ["Op", "lower", "POINTWISE_ARITY", "pointwise_mode"]

_PW = capi.cudnnPointwiseMode_t
_BINARY = {"ADD", "ADD_SQUARE", "DIV", "MAX", "MIN", "MOD", "MUL", "POW", "SUB", "ATAN2", "FLOOR_MOD",
           "CMP_EQ", "CMP_NEQ", "CMP_GT", "CMP_GE", "CMP_LT", "CMP_LE", "LOGICAL_AND", "LOGICAL_OR"}


def _arity(name: str) -> str:
    short = name[len("CUDNN_POINTWISE_"):]
    if short.endswith("_BWD"):
        return "backward"
    if short == "BINARY_SELECT":
        return "ternary"
    return "binary" if short in _BINARY else "unary"


#: Every pointwise mode of the loaded bindings -> 'unary' | 'binary' | 'ternary' | 'backward' (dy, x -> dx).
POINTWISE_ARITY: dict[capi.cudnnPointwiseMode_t, str] = {m: _arity(m.name) for m in _PW}


def pointwise_mode(mode) -> capi.cudnnPointwiseMode_t:
    """A ``cudnnPointwiseMode_t`` from a member, a full name or a short one (``'relu_fwd'``, ``'add'``)."""
    if isinstance(mode, _PW):
        return mode
    if isinstance(mode, str):
        for cand in (mode, "CUDNN_POINTWISE_" + mode.upper()):
            if cand in _PW.__members__:
                return _PW[cand]
        raise ValueError(f"unknown pointwise mode {mode!r}; known: "
                         + ", ".join(m.name[len('CUDNN_POINTWISE_'):].lower() for m in _PW))
    if isinstance(mode, int) and not isinstance(mode, bool):
        return _PW(mode)
    raise TypeError(f"pointwise mode must be a cudnnPointwiseMode_t or its name, not {type(mode).__name__}")


@dataclass(eq=False)
class Op:
    """One node: ``kind`` ('conv_fprop', 'conv_dgrad', 'conv_wgrad', 'matmul', 'pointwise', 'reduction',
    'genstats', 'norm_forward'), tensors by role, and parameters (all hashable)."""
    kind: str
    inputs: dict
    outputs: dict
    params: dict = field(default_factory=dict)
    name: str = ""

    def key(self) -> tuple:
        return (self.kind, tuple((r, t.uid) for r, t in self.inputs.items()),
                tuple((r, t.uid) for r, t in self.outputs.items()), tuple(sorted(self.params.items(), key=str)))

    def describe(self) -> str:
        ins = ", ".join(f"{r}={t.describe()}" for r, t in self.inputs.items())
        outs = ", ".join(f"{r}={t.describe()}" for r, t in self.outputs.items())
        p = self.params.get("mode")
        label = f"{self.kind}[{getattr(p, 'name', p)}]" if p is not None else self.kind
        return f"{label}({ins}) -> {outs}"


def _conv_desc(p: dict) -> BackendDescriptor:
    n = len(p["padding"])
    return BackendDescriptor(
        "CONVOLUTION", comp_type=p["compute_dtype"], conv_mode=p.get("conv_mode", capi.CUDNN_CROSS_CORRELATION),
        spatial_dims=n, dilations=list(p["dilation"]), filter_strides=list(p["stride"]),
        pre_paddings=list(p["padding"]), post_paddings=list(p["post_padding"])).finalize()


def _scaled(d: BackendDescriptor, prefix: str, p: dict) -> None:
    d.set(f"{prefix}_ALPHA", float(p.get("alpha", 1.0)), attr_type="DOUBLE" if p.get("double") else "FLOAT")
    d.set(f"{prefix}_BETA", float(p.get("beta", 0.0)), attr_type="DOUBLE" if p.get("double") else "FLOAT")


def lower(op: Op, td: dict) -> tuple[BackendDescriptor, list[BackendDescriptor]]:
    """The finalized operation descriptor for ``op`` (tensor uid -> finalized tensor descriptor in ``td``), and
    the helper descriptors it references (kept alive by the caller)."""
    i, o, p = op.inputs, op.outputs, op.params
    if op.kind in ("conv_fprop", "conv_dgrad", "conv_wgrad"):
        conv = _conv_desc(p)
        if op.kind == "conv_fprop":
            d = BackendDescriptor("OPERATION_CONVOLUTION_FORWARD")
            _scaled(d, "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD", p)
            d.set("conv_desc", conv).set("x", td[i["x"].uid]).set("w", td[i["w"].uid]).set("y", td[o["y"].uid])
        elif op.kind == "conv_dgrad":
            d = BackendDescriptor("OPERATION_CONVOLUTION_BACKWARD_DATA")
            _scaled(d, "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA", p)
            d.set("conv_desc", conv).set("dy", td[i["dy"].uid]).set("w", td[i["w"].uid]).set("dx", td[o["dx"].uid])
        else:
            d = BackendDescriptor("OPERATION_CONVOLUTION_BACKWARD_FILTER")
            _scaled(d, "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER", p)
            d.set("conv_desc", conv).set("dy", td[i["dy"].uid]).set("x", td[i["x"].uid]).set("dw", td[o["dw"].uid])
        return d.finalize(), [conv]
    if op.kind == "matmul":
        mm = BackendDescriptor("MATMUL", comp_type=p["compute_dtype"]).finalize()
        d = BackendDescriptor("OPERATION_MATMUL", adesc=td[i["a"].uid], bdesc=td[i["b"].uid],
                              cdesc=td[o["c"].uid], desc=mm)
        return d.finalize(), [mm]
    if op.kind == "pointwise":
        pw = BackendDescriptor("POINTWISE", mode=p["mode"], math_prec=p["compute_dtype"])
        for k in ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope", "elu_alpha", "softplus_beta",
                  "swish_beta"):
            if p.get(k) is not None:
                pw.set(k, float(p[k]))
        if p.get("axis") is not None:
            pw.set("axis", int(p["axis"]))
        pw.finalize()
        d = BackendDescriptor("OPERATION_POINTWISE", pw_descriptor=pw)
        if POINTWISE_ARITY[p["mode"]] == "backward":
            d.set("dydesc", td[i["dy"].uid]).set("xdesc", td[i["x"].uid]).set("dxdesc", td[o["dx"].uid])
        else:
            d.set("xdesc", td[i["x"].uid])
            if "b" in i:
                d.set("bdesc", td[i["b"].uid])
            if "t" in i:
                d.set("tdesc", td[i["t"].uid])
            d.set("ydesc", td[o["y"].uid])
        return d.finalize(), [pw]
    if op.kind == "reduction":
        red = BackendDescriptor("REDUCTION", operator=p["mode"], comp_type=p["compute_dtype"]).finalize()
        d = BackendDescriptor("OPERATION_REDUCTION", xdesc=td[i["x"].uid], ydesc=td[o["y"].uid], desc=red)
        return d.finalize(), [red]
    if op.kind == "genstats":
        d = BackendDescriptor("OPERATION_GEN_STATS", mode=capi.CUDNN_GENSTATS_SUM_SQSUM,
                              math_prec=p["compute_dtype"], xdesc=td[i["x"].uid],
                              sumdesc=td[o["sum"].uid], sqsumdesc=td[o["sqsum"].uid])
        return d.finalize(), []
    if op.kind == "norm_forward":
        d = BackendDescriptor("OPERATION_NORM_FORWARD", mode=p["mode"],
                              phase=capi.CUDNN_NORM_FWD_TRAINING if p["training"] else capi.CUDNN_NORM_FWD_INFERENCE)
        roles = {"x": "xdesc", "scale": "scale_desc", "bias": "bias_desc", "epsilon": "epsilon_desc",
                 "mean": "mean_desc", "inv_variance": "inv_variance_desc", "y": "ydesc"}
        for role, t in (*i.items(), *o.items()):
            d.set(roles[role], td[t.uid])
        return d.finalize(), []
    raise ValueError(f"unknown operation kind {op.kind!r}")
