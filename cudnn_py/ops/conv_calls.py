"""The convolution calls (forward, backward data/filter/bias, fused bias+activation) and the algorithm queries on
arrays; the conventions are :mod:`cudnn_py.ops.convolution`'s.

``algo``: an enum member, its name (``"IMPLICIT_PRECOMP_GEMM"``) or ``"heuristic"`` (the first suitable ``_v7``
answer). ``autotune=True`` measures the candidates once per configuration (legacy: ``Find...Ex`` under the
workspace cap, kept in :data:`cudnn_py.calls.algorithms.algorithm_cache`; graph: every plan) and keeps the fastest.
A legacy call's plan (descriptors, algorithm, workspace size) is made once per configuration in the handle's cache
:data:`PLANS`. ``engine``: "legacy", "graph" (:func:`cudnn_py.graph.conv.convolution`) or "auto" (the faster,
measured once, where the graph path takes the call; docs/graph_paths.md).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cudnn_py.calls import algorithms as _alg
from cudnn_py import capi
from cudnn_py.clib import recording
from cudnn_py.core import descriptors as _d
from cudnn_py._deprecation import renamed_kwargs, warn
from cudnn_py.core.args import INT64_MAX, bool_arg, int_arg, int_tuple, scaling
from cudnn_py.core.caches import handle_cache
from cudnn_py.core.dtypes import cudnn_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph.errors import GraphNotSupportedError
from cudnn_py.graph import conv as graph_conv, legacy as gl
from cudnn_py.graph.runner import new_output
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike, array_signature, as_array, empty, zeros
from cudnn_py.core.strided import c_strides
from cudnn_py.ops._common import Out, enum_arg, instance_of, launch, scalars
from cudnn_py.calls.prepared import prepared
from cudnn_py.clib.recording import Address, WorkspaceArg
from cudnn_py.ops.activation import activation_of
from cudnn_py.ops.convolution import Convolution, Geometry, logical, packed_strides, physical, unit_height

__all__ = ["convolution_forward", "convolution_backward_data", "convolution_backward_filter",
           "convolution_backward_bias", "convolution_bias_activation_forward", "convolution_algorithms",
           "convolution_workspace_size"]


def _limit(handle: Handle, workspace_limit):
    cap = handle.workspace.cap
    if workspace_limit is None:
        return cap
    workspace_limit = int_arg(workspace_limit, "workspace_limit (bytes)", 0, INT64_MAX)  # C takes a size_t
    return workspace_limit if cap is None else min(cap, workspace_limit)


def _measure(handle: Handle, g: Geometry, direction: str, limit, in_ptrs):
    """``Find...Ex`` records of a direction on the inputs at ``in_ptrs`` (a zero-padded scratch x for asymmetric
    padding), a scratch output and the largest workspace under ``limit``."""
    a, b, c = g.descs(direction)
    a_ptr, b_ptr = in_ptrs
    if g.asym and direction != "backward_data":
        pad_x = zeros((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
        a_ptr = pad_x.ptr
    with recording.measuring():
        return _alg.measure_algorithms(handle, direction, a, a_ptr, b, b_ptr, g.conv_desc(g.math_type), c,
                                       g.out_nbytes(direction), limit)


def _choose(handle: Handle, g: Geometry, direction: str, spec, deterministic: bool, limit, in_ptrs):
    """(algo, math type, workspace bytes) for ``spec``: an algorithm, "heuristic" or "fastest"."""
    return _alg.resolve_algorithm(
        handle, direction, spec, g.descs(direction), g.conv_desc, g.math_type, deterministic=deterministic,
        limit=limit, cache_key=g.cache_key(direction, handle.device, deterministic, limit),
        measure=lambda: _measure(handle, g, direction, limit, in_ptrs), problem=g.describe())


# ---------------------------------------------------------------- plans: everything a call derives from its config

class _Plan:
    """What one legacy call needs: geometry, descriptors (``keep``: A, B, C in cuDNN's order, then the convolution's),
    algorithm, workspace bytes, C function, scaling type and ``gen`` (the generation a "fastest" choice was made at)."""
    __slots__ = ("g", "keep", "algo", "ws", "cfn", "scaling", "gen")

    def __init__(self, g: Geometry, direction: str, choice: tuple, spec: Any) -> None:
        self.algo, math_type, self.ws = choice
        self.g, self.keep = g, g.descs(direction) + (g.conv_desc(math_type),)
        self.cfn = getattr(capi, _FUNCS[direction])
        self.scaling = np.dtype(np.float64 if g.compute == capi.CUDNN_DATA_DOUBLE else np.float32)
        self.gen = _alg.algorithm_cache.generation if isinstance(spec, str) and spec.lower() == "fastest" else None


#: the name of the handle's cache of plans: (direction, convolution, x, w and y signatures (y None: allocated), algo,
#: determinism, workspace limit) -> :class:`_Plan`; bias calls: -> their descriptors (:func:`_bias_plan`)
PLANS = "conv.plans"
_FUNCS = {"forward": "cudnnConvolutionForward", "backward_data": "cudnnConvolutionBackwardData",
          "backward_filter": "cudnnConvolutionBackwardFilter"}


def _ready(handle: Handle, direction, conv, sigs, spec, deterministic, workspace_limit, in_ptrs) -> _Plan:
    """The remembered plan for a call (``sigs``: x, w, y signatures by forward roles, y may be None), else a new one.
    It is made again where "fastest" choices were cleared or reloaded since, or the handle's workspace cap was
    lowered below its workspace (a raised cap keeps the plans made under the lower one)."""
    recording.uses(PLANS)
    limit = _limit(handle, workspace_limit)  # checked, and the algorithm parsed, before either keys a plan
    spec = spec if _alg.is_choice(spec) else _alg.parse_algo(direction, spec)
    key = (direction, conv, *sigs, spec, deterministic, workspace_limit)
    p = handle_cache(handle, PLANS).get(key)
    if p is None or (p.gen is not None and p.gen != _alg.algorithm_cache.generation) or (
            p.ws and handle.workspace.cap is not None and p.ws > handle.workspace.cap):
        if direction != "forward" and sigs[0][2] == np.int8:
            raise InvalidTypeError(f"int8 convolutions run forward only (cuDNN's INT8 configurations); {direction} "
                                   f"needs float16, bfloat16, float32 or float64 data")
        g = Geometry.of(conv, sigs[0], sigs[1], sigs[2], handle.device)
        choice = _choose(handle, g, direction, spec, deterministic, limit, in_ptrs)
        p = handle_cache(handle, PLANS)[key] = _Plan(g, direction, choice, spec)
    return p


def _pad_input(handle: Handle, g: Geometry, x_ptr: int) -> DeviceArray:
    """A zero-padded device copy of x for asymmetric padding (a scratch buffer: such calls make no prepared call)."""
    xp = zeros((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
    one, zero = scalars(g.dtype, 1.0, 0.0)
    launch(handle, capi.cudnnTransformTensor, handle.ptr, one, g.x_orig_desc, Address(x_ptr), zero, g.interior_desc,
           Address(xp.ptr + g.interior_offset))
    return xp


# ---------------------------------------------------------------- engine, autotune and the engine choice

def _algo(where: str, algo: Any, autotune: bool, stacklevel: int = 4) -> Any:
    """The algorithm spec the engines take: ``autotune=True`` is ``"fastest"`` (``algo="fastest"`` warns)."""
    autotune = bool_arg(autotune, "autotune")
    if isinstance(algo, str) and algo.lower() == "fastest":
        warn(f"{where}(algo='fastest') is deprecated, use autotune=True", stacklevel=stacklevel)
        recording.spoil("algo='fastest' is deprecated and warns on every call")
    elif autotune:
        if not (isinstance(algo, str) and algo.lower() == "heuristic"):
            raise InvalidValueError(f"autotune=True measures the algorithms itself; algo={algo!r} names one")
        algo = "fastest"
    return algo


def _takes(algo: Any, deterministic: bool, workspace_limit: int | None, conv: Convolution) -> bool:
    """Whether the graph path can take a call (``engine="auto"``'s rule: the module doc)."""
    return (_alg.is_choice(algo) and not bool_arg(deterministic, "deterministic") and workspace_limit is None
            and conv.math_type is None)


def _dispatch(handle: Handle, engine: str, takes: bool, key: Callable[[], tuple], legacy: Callable[[], Any],
              direction: str, conv: Convolution, a, b, out, mutated: tuple = (), **kw: Any) -> Any:
    """The call's output, run on ``engine`` (``"auto"``: measured once per ``key()`` where the graph path ``takes``
    the call); the graph engine is :func:`cudnn_py.graph.conv.convolution` on ``a``, ``b``, ``out`` with ``kw``."""
    outs: dict = {}

    def run() -> bool:
        outs["graph"] = graph_conv.convolution(direction, handle, conv, a, b, out, engine="graph", **kw)
        return True
    again = gl.repeatable(run)

    def graph(auto: bool) -> object:
        try:
            return again() if auto else run()
        except _REFUSALS:
            if auto:
                return False
            raise
    measure = takes and engine == "auto"
    ran = gl.dispatch(engine, handle, key() if measure else None, lambda: outs.__setitem__("legacy", legacy()), graph,
                      mutated=mutated, static="graph" if takes else "legacy", measure=measure)
    return outs[ran]


#: what the graph path raises for a call it does not take (with engine="auto" the legacy call then runs)
_REFUSALS = (InvalidValueError, InvalidTypeError, GraphNotSupportedError)


def _sig(sig) -> tuple | None:
    """An array signature without its device, dtype by name (engine_choice's key part)."""
    return None if sig is None else (tuple(sig[0]), tuple(sig[1]), sig[2].name)


def _generation() -> int:
    """The version of the measured algorithm choices (clearing or loading them makes "fastest" calls choose again)."""
    return _alg.algorithm_cache.generation


def _shape_sig(shape, like, what):
    """The signature of a new packed output of ``shape`` with ``like``'s dtype and device."""
    shape = int_tuple(shape, what, minimum=1)
    return shape, packed_strides(shape, False), like[2], like[3]


# ---------------------------------------------------------------- the three directions

#: a direction's arrays in argument order (cuDNN's): its two inputs, then its output
_ROLES = {"forward": ("x", "w", "y"), "backward_data": ("w", "dy", "dx"), "backward_filter": ("x", "dy", "dw")}


def _call(direction: str, handle: Handle, conv: Convolution, a, b, out, shape, algo, alpha, beta, deterministic,
          workspace_limit, autotune, engine):
    """The validated path of a direction; ``a``, ``b``, ``out``: its inputs and output (None: allocated)."""
    where = f"convolution_{direction}"
    instance_of(conv, Convolution, "conv")
    names = _ROLES[direction]
    sa, pa = array_signature(a, names[0])
    sb, pb = array_signature(b, names[1])
    so, po = (None, 0) if out is None else array_signature(out, names[2])
    if direction == "backward_filter" and out is None and shape is None:
        raise InvalidValueError("convolution_backward_filter needs dw (an output array) or w_shape")
    if shape is not None:
        shape = int_tuple(shape, "x_shape" if direction == "backward_data" else "w_shape", minimum=1)
    algo, engine = _algo(where, algo, autotune, stacklevel=5), gl.engine_arg(engine)

    def legacy():
        if direction == "forward":
            sigs = (sa, sb, so)
        elif direction == "backward_data":
            sigs = (so or _shape_sig(shape if shape is not None else conv.input_shape(sa[0], sb[0]), sa, "x_shape"),
                    sa, sb)
        else:
            sigs = (sa, so or _shape_sig(shape, sa, "w_shape"), sb)
        return _legacy(handle, direction, conv, sigs, pa, pb, out, po, algo, alpha, beta, deterministic,
                       workspace_limit)
    ga, gb = (a, b) if direction == "forward" else (b, a)  # the graph path's order: dy first backward

    def key() -> tuple:
        sigs = (sa, sb) if direction == "forward" else (sb, sa)
        return (where, "route", conv.key, *map(_sig, (*sigs, so)), shape, algo if isinstance(algo, str) else None,
                beta != 0.0)
    return _dispatch(handle, engine, _takes(algo, deterministic, workspace_limit, conv), key, legacy, direction, conv,
                     ga, gb, out, () if out is None or beta == 0.0 else (as_array(out, names[2]),), algo=algo,
                     deterministic=deterministic, workspace_limit=workspace_limit, alpha=alpha, beta=beta,
                     shape=shape)


def _legacy(handle: Handle, direction: str, conv: Convolution, sigs, a_ptr: int, b_ptr: int, out, out_ptr: int,
            algo, alpha, beta, deterministic, workspace_limit):
    """A direction's legacy C call (``sigs``: x, w, y signatures by forward roles); asymmetric padding runs on a
    zero-padded copy of x (backward data: the gradient of one, its interior blended into dx)."""
    p = _ready(handle, direction, conv, sigs, algo, deterministic, workspace_limit, (a_ptr, b_ptr))
    g = p.g
    if out is None:
        s = sigs[{"forward": 2, "backward_data": 0, "backward_filter": 1}[direction]]
        out = new_output(handle, g.out_shape if s is None else s[0], g.np_y_dtype if s is None else s[2])
        out_ptr = out.ptr
    a, b, c, cd = p.keep
    if g.asym and direction == "backward_data":
        dxp = empty((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
        one, zero = scalars(p.scaling, 1.0, 0.0)
        launch(handle, p.cfn, handle.ptr, one, a, Address(a_ptr), b, Address(b_ptr), cd, p.algo, WorkspaceArg(p.ws),
               p.ws, zero, c, Address(dxp.ptr))
        al, be = scalars(g.dtype, alpha, beta)
        launch(handle, capi.cudnnTransformTensor, handle.ptr, al, g.interior_desc,
               Address(dxp.ptr + g.interior_offset), be, g.x_orig_desc, Address(out_ptr))
        return out
    xp = _pad_input(handle, g, a_ptr) if g.asym else None  # x: forward's and backward filter's first input
    al, be = scalars(p.scaling, alpha, beta)
    launch(handle, p.cfn, handle.ptr, al, a, Address(a_ptr if xp is None else xp.ptr), b, Address(b_ptr), cd,
           p.algo, WorkspaceArg(p.ws), p.ws, be, c, Address(out_ptr))
    return out


@prepared(inputs=("x", "w"), outputs=("y",), inplace=False, epoch=_generation, scalars=("alpha", "beta"), moved=("y",))
def convolution_forward(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                        *, y: Out | None = None, algo: Any = "heuristic", alpha: float = 1.0,
                        beta: float = 0.0, deterministic: bool = False, workspace_limit: int | None = None,
                        autotune: bool = False, engine: str = "auto") -> DeviceArray | Out:
    """``y = alpha * conv(x, w) + beta * y`` (``cudnnConvolutionForward``); returns y (allocated if not given)."""
    return _call("forward", handle, conv, x, w, y, None, algo, alpha, beta, deterministic, workspace_limit,
                 autotune, engine)


@prepared(inputs=("w", "dy"), outputs=("dx",), inplace=False, epoch=_generation, scalars=("alpha", "beta"),
          moved=("dx",))
def convolution_backward_data(handle: Handle, conv: Convolution, w: DeviceArrayLike, dy: DeviceArrayLike,
                              *, dx: Out | None = None, x_shape: Sequence[int] | None = None,
                              algo: Any = "heuristic", alpha: float = 1.0, beta: float = 0.0,
                              deterministic: bool = False, workspace_limit: int | None = None, autotune: bool = False,
                              engine: str = "auto") -> DeviceArray | Out:
    """``dx = alpha * conv_transpose(dy, w) + beta * dx`` (``cudnnConvolutionBackwardData``); returns dx.

    Without ``dx``, one of shape ``x_shape`` is allocated (default: the smallest input giving dy's shape).
    """
    return _call("backward_data", handle, conv, w, dy, dx, x_shape, algo, alpha, beta, deterministic,
                 workspace_limit, autotune, engine)


@prepared(inputs=("x", "dy"), outputs=("dw",), inplace=False, epoch=_generation, scalars=("alpha", "beta"),
          moved=("dw",))
def convolution_backward_filter(handle: Handle, conv: Convolution, x: DeviceArrayLike, dy: DeviceArrayLike,
                                *, dw: Out | None = None, w_shape: Sequence[int] | None = None,
                                algo: Any = "heuristic", alpha: float = 1.0, beta: float = 0.0,
                                deterministic: bool = False, workspace_limit: int | None = None, autotune: bool = False,
                                engine: str = "auto") -> DeviceArray | Out:
    """``dw = alpha * dL/dw + beta * dw`` (``cudnnConvolutionBackwardFilter``); returns dw.

    Pass ``dw`` or ``w_shape`` (the filter shape cannot be inferred when the stride is above 1).
    """
    return _call("backward_filter", handle, conv, x, dy, dw, w_shape, algo, alpha, beta, deterministic,
                 workspace_limit, autotune, engine)


# ---------------------------------------------------------------- bias: its gradient, and the fused forward

@prepared(inputs=("dy",), outputs=("db",), inplace=False, scalars=("alpha", "beta"), moved=("db",))
def convolution_backward_bias(handle: Handle, dy: DeviceArrayLike, *, db: Out | None = None,
                              alpha: float = 1.0, beta: float = 0.0, layout: str = "NCHW") -> DeviceArray | Out:
    """``db = alpha * sum(dy over all but channels) + beta * db`` (``cudnnConvolutionBackwardBias``).

    db (allocated if not given) has shape ``(1, K, 1, ...)`` (``(1, ..., 1, K)`` for ``layout="NHWC"``).
    """
    dys, dy_ptr = array_signature(dy, "dy")
    dbs, db_ptr = (None, 0) if db is None else array_signature(db, "db")
    dy_desc, db_desc, db_shape = _bias_plan(handle, dys, dbs, layout.upper() if isinstance(layout, str) else layout,
                                            "db")
    if db is None:
        new = new_output(handle, db_shape, dys[2])
        db_ptr = new.ptr
    al, be = scalars(dys[2], alpha, beta)
    launch(handle, capi.cudnnConvolutionBackwardBias, handle.ptr, al, dy_desc, Address(dy_ptr), be, db_desc,
           Address(db_ptr))
    return new if db is None else db


def _bias_plan(handle: Handle, ysig, bsig, layout, name):
    """(y descriptor, bias descriptor, allocated bias shape) for a bias of y's channels, kept in :data:`PLANS`."""
    if not (isinstance(layout, str) and layout in ("NCHW", "NHWC")):
        raise InvalidValueError(f"layout {layout!r}: expected 'NCHW' or 'NHWC'")
    plans = handle_cache(handle, PLANS)
    key = ("bias", ysig, bsig, layout)
    got = plans.get(key)
    if got is not None:
        return got
    shape, strides, dtype, device = ysig
    if device != handle.device:
        raise InvalidValueError(f"the data is on device {device} but the handle is on device {handle.device}")
    ys, yst = logical(shape, strides, layout)
    if not 3 <= len(ys) <= 5:
        raise InvalidValueError(f"dy/y {tuple(shape)} must have 3, 4 or 5 dimensions")
    if len(ys) == 3:
        ys, yst = unit_height(ys, yst)
    k = ys[1]
    bshape = (1, k) + (1,) * (len(ys) - 2)
    if bsig is not None:
        if math.prod(bsig[0]) != k or tuple(bsig[1]) != packed_strides(bsig[0], False):
            raise InvalidValueError(f"{name} must be a contiguous array of {k} elements (one per channel), got shape "
                                    f"{tuple(bsig[0])} strides {tuple(bsig[1])}")
        if bsig[3] != device:
            raise InvalidValueError(f"{name} is on device {bsig[3]} but the data is on device {device}")
    dt = cudnn_dtype(dtype)
    got = plans[key] = (_d.TensorDescriptor.shared(tuple(ys), dt, tuple(yst)),
                        _d.TensorDescriptor.shared(bshape, dt if bsig is None else cudnn_dtype(bsig[2]),
                                                   packed_strides(bshape, False)),
                        physical((1, k) + (1,) * (len(shape) - 2), layout))
    return got


_ACTIVATIONS = {"relu": capi.CUDNN_ACTIVATION_RELU, "identity": capi.CUDNN_ACTIVATION_IDENTITY}


@prepared(inputs=("x", "w", "bias", "z"), outputs=("y",), inplace=True, epoch=_generation)
def convolution_bias_activation_forward(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                                        bias: DeviceArrayLike, *, z: DeviceArrayLike | None = None,
                                        activation: str = "relu", alpha: float = 1.0, beta: float = 0.0,
                                        y: Out | None = None, algo: Any = "heuristic", deterministic: bool = False,
                                        workspace_limit: int | None = None, autotune: bool = False,
                                        engine: str = "auto", **old: Any) -> DeviceArray | Out:
    """``y = act(alpha * conv(x, w) + beta * z + bias)`` (``cudnnConvolutionBiasActivationForward``, whose
    ``alpha1``/``alpha2`` are ``alpha``/``beta``; those old keywords still work with a DeprecationWarning).

    ``activation``: ``"relu"`` or ``"identity"`` (cuDNN runs identity only with IMPLICIT_PRECOMP_GEMM, which is
    then chosen for you). Without ``z`` (then ``beta`` must be 0) y is zeroed first and used as z; pass ``z=y`` to
    add y's current values instead. ``bias`` holds one value per channel. ``engine="graph"`` takes no ``z``.
    """
    if old:
        recording.spoil("the old keywords warn on every call")
        got = renamed_kwargs("convolution_bias_activation_forward", old, {"alpha1": "alpha", "alpha2": "beta"},
                             {"alpha": None if alpha == 1.0 else alpha, "beta": None if beta == 0.0 else beta})
        alpha, beta = (1.0 if got["alpha"] is None else got["alpha"]), (0.0 if got["beta"] is None else got["beta"])
    alpha, beta = scaling(alpha=alpha, beta=beta)  # after the old spellings (alpha1=, alpha2=) were read
    act = enum_arg(activation, _ACTIVATIONS, capi.cudnnActivationMode_t, "activation")
    instance_of(conv, Convolution, "conv")
    algo, engine = _algo("convolution_bias_activation_forward", algo, autotune), gl.engine_arg(engine)
    if engine == "graph" and (z is not None or beta != 0.0):
        raise InvalidValueError("engine='graph' has no z input: use engine='legacy' for y = act(alpha * conv + "
                                "beta * z + bias)")
    sigs = [array_signature(v, n) for v, n in ((x, "x"), (w, "w"), (bias, "bias"))]
    ys, y_ptr = (None, 0) if y is None else array_signature(y, "y")
    if y is not None and y_ptr in (p for _, p in sigs):
        raise InvalidValueError("y shares its memory with x, w or bias: pass separate memory (only z may be y)")

    def key() -> tuple:
        return ("convolution_bias_activation_forward", "route", conv.key, *(_sig(s) for s, _ in sigs), _sig(ys),
                act.name, algo if isinstance(algo, str) else None)
    takes = z is None and beta == 0.0 and _takes(algo, deterministic, workspace_limit, conv)
    return _dispatch(handle, engine, takes, key, lambda: _bias_activation_legacy(
        handle, conv, sigs, z, y, ys, y_ptr, act, algo, alpha, beta, deterministic, workspace_limit), "forward",
                     conv, x, w, y, algo=algo, deterministic=deterministic, workspace_limit=workspace_limit,
                     alpha=alpha, bias=bias, activation=None if act == capi.CUDNN_ACTIVATION_IDENTITY else "relu")


def _bias_activation_legacy(handle: Handle, conv: Convolution, sigs, z, y, ys, y_ptr, act, algo, alpha, beta,
                            deterministic, workspace_limit):
    """The legacy ``cudnnConvolutionBiasActivationForward`` (``sigs``: x's, w's and bias's (signature, address))."""
    if act == capi.CUDNN_ACTIVATION_IDENTITY:
        precomp = capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
        if _alg.is_choice(algo):
            algo = precomp
        elif _alg.parse_algo("forward", algo) != precomp:
            raise InvalidValueError("cuDNN runs the identity activation only with IMPLICIT_PRECOMP_GEMM")
    if z is None and beta != 0.0:
        raise InvalidValueError("beta scales z; pass z (it may be y itself) or leave beta at 0")
    (xs, x_ptr), (ws, w_ptr), (bs, b_ptr) = sigs
    p = _ready(handle, "forward", conv, (xs, ws, ys), algo, deterministic, workspace_limit, (x_ptr, w_ptr))
    g = p.g
    if y is None:  # the signature of the y allocated below: bias and z are checked before it is allocated
        ys = (tuple(g.out_shape), c_strides(tuple(g.out_shape)), np.dtype(g.np_y_dtype), handle.device)
    _, b_desc, _ = _bias_plan(handle, ys, bs, conv.layout, "bias")
    if z is not None:
        zs, z_ptr = array_signature(z, "z")
        if zs != ys:
            raise InvalidValueError(f"z must look like y (shape, strides, dtype, device {ys}), got {zs}")
    out = y
    if y is None:
        out = new_output(handle, g.out_shape, g.np_y_dtype)
        y_ptr = out.ptr
    a, wd, c, cd = p.keep
    if z is None:  # z aliases y: clear y so that no stale value (or NaN) can leak in through z
        # cuDNN reads the value as y's data type; a double 0.0 is all zero bytes, so it reads 0 in any type
        launch(handle, capi.cudnnSetTensor, handle.ptr, c, Address(y_ptr), scalars(np.float64, 0.0)[0])
        z_ptr = y_ptr
    xp = _pad_input(handle, g, x_ptr) if g.asym else None
    a1, a2 = scalars(p.scaling, alpha, beta)
    launch(handle, capi.cudnnConvolutionBiasActivationForward, handle.ptr, a1, a,
           Address(x_ptr if xp is None else xp.ptr), wd, Address(w_ptr), cd, p.algo, WorkspaceArg(p.ws), p.ws, a2, c,
           Address(z_ptr), b_desc, Address(b_ptr), activation_of(act), c, Address(y_ptr))
    return out


# ---------------------------------------------------------------- algorithm queries on arrays

def _query_geometry(handle: Handle, conv, x, w, y, direction) -> Geometry:
    """Geometry for a query: x, w, y are arrays or shapes (an output-only role may be a shape)."""
    instance_of(conv, Convolution, "conv")
    if not isinstance(direction, str) or direction not in _alg.DIRECTIONS:
        raise InvalidValueError(f"direction {direction!r}: expected one of {_alg.DIRECTIONS}")

    def sig(obj, name, like):
        if like is not None and isinstance(obj, (tuple, list)):  # an output-only role, after its input
            return _shape_sig(obj, like, name)
        return array_signature(obj, name)[0]
    if direction == "backward_data":
        ws = sig(w, "w", None)
        ys = sig(y, "dy", ws)
        xs = sig(x if x is not None else conv.input_shape(ws[0], ys[0]), "x", ws)
    else:
        xs = sig(x, "x", None)
        ws = sig(w, "w", xs)
        ys = None if y is None else sig(y, "y", xs)
    return Geometry.of(conv, xs, ws, ys, handle.device)


def convolution_algorithms(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                           y: DeviceArrayLike | None = None, *, direction: str = "forward", method: str = "heuristic",
                           workspace_limit: int | None = None) -> list[_alg.AlgoPerf]:
    """cuDNN's ranked algorithm records for one direction of this convolution.

    ``x``, ``w``, ``y`` keep their forward roles (for backward_data ``y`` is dy and ``x`` dx; for backward_filter
    ``w`` is dw); the direction's output may be given as a shape. ``method``: ``"heuristic"`` (``..._v7``),
    ``"find"`` (``Find...``, cuDNN's own buffers) or ``"find_ex"`` (``Find...Ex`` on the given inputs, a scratch
    output and a workspace of at most ``workspace_limit``).
    """
    handle = handle_arg(handle)
    if not (isinstance(method, str) and method in ("heuristic", "find", "find_ex")):
        raise InvalidValueError(f"method {method!r}: expected 'heuristic', 'find' or 'find_ex'")
    g = _query_geometry(handle, conv, x, w, y, direction)
    a, b, c = g.descs(direction)
    cd = g.conv_desc(g.math_type)
    if method == "heuristic":
        return _alg.heuristic_algorithms(handle, direction, a, b, cd, c)
    if method == "find":
        return _alg.find_algorithms(handle, direction, a, b, cd, c)
    ins = {"forward": (x, w), "backward_data": (w, y), "backward_filter": (x, y)}[direction]  # method "find_ex"
    for name, obj in zip(("first input", "second input"), ins):
        if obj is None or isinstance(obj, (tuple, list)):
            raise InvalidValueError(f"method='find_ex' runs on device data: the {direction} {name} must be an array")
    ptrs = tuple(array_signature(o, "input")[1] for o in ins if o is not None)
    return _measure(handle, g, direction, _limit(handle, workspace_limit), ptrs)


def convolution_workspace_size(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                               y: DeviceArrayLike | None = None, *, algo: Any, direction: str = "forward") -> int:
    """Workspace bytes that ``algo`` needs (``cudnnGetConvolution*WorkspaceSize``); raises if unsupported."""
    handle = handle_arg(handle)
    g = _query_geometry(handle, conv, x, w, y, direction)
    a, b, c = g.descs(direction)
    return _alg.workspace_size(handle, direction, a, b, g.conv_desc(g.math_type), c, algo)
