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


#: graph op kind -> backend operation descriptor type (their tensor attributes are named like our roles)
_CONV_OPS = {"conv_fprop": "OPERATION_CONVOLUTION_FORWARD", "conv_dgrad": "OPERATION_CONVOLUTION_BACKWARD_DATA",
             "conv_wgrad": "OPERATION_CONVOLUTION_BACKWARD_FILTER"}
#: role -> tensor attribute of the pointwise and norm-forward operations
_ROLE_ATTRS = {"x": "xdesc", "b": "bdesc", "t": "tdesc", "y": "ydesc", "dy": "dydesc", "dx": "dxdesc",
               "scale": "scale_desc", "bias": "bias_desc", "epsilon": "epsilon_desc", "mean": "mean_desc",
               "inv_variance": "inv_variance_desc"}


def _set_tensors(d: BackendDescriptor, op: Op, td: dict, attrs: dict | None = None) -> BackendDescriptor:
    """Set each of ``op``'s tensors (inputs, then outputs) on ``d`` under its role's attribute."""
    for role, t in (*op.inputs.items(), *op.outputs.items()):
        d.set(attrs[role] if attrs else role, td[t.uid])
    return d


def lower(op: Op, td: dict) -> tuple[BackendDescriptor, list[BackendDescriptor]]:
    """The finalized operation descriptor for ``op`` (tensor uid -> finalized tensor descriptor in ``td``), and
    the helper descriptors it references (kept alive by the caller)."""
    i, o, p = op.inputs, op.outputs, op.params
    if op.kind in _CONV_OPS:
        conv = _conv_desc(p)
        d = BackendDescriptor(_CONV_OPS[op.kind])
        d.set("alpha", float(p.get("alpha", 1.0)), attr_type="FLOAT")
        d.set("beta", float(p.get("beta", 0.0)), attr_type="FLOAT")
        d.set("conv_desc", conv)
        return _set_tensors(d, op, td).finalize(), [conv]
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
        return _set_tensors(d, op, td, _ROLE_ATTRS).finalize(), [pw]
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
        return _set_tensors(d, op, td, _ROLE_ATTRS).finalize(), []
    raise ValueError(f"unknown operation kind {op.kind!r}")
