"""The convolution calls: forward, backward data, backward filter, backward bias, fused bias+activation, and the
algorithm queries on arrays (:func:`convolution_algorithms`, :func:`convolution_workspace_size`).

Forward, backward data, backward filter and backward bias are prepared calls (:mod:`cudnn_py.prepared`): a repeat
call of a signature runs what its first call queued, the legacy call's plan (descriptors, algorithm, workspace size:
everything derived from the configuration) and one C call, or the graph path's runner and one
``cudnnBackendExecute``, with the new addresses. A legacy plan is made once per configuration:
:class:`~cudnn_py.ops.convolution.Geometry` resolves the configuration and
:func:`cudnn_py.algorithms.resolve_algorithm` chooses the algorithm. ``engine="graph"`` hands the call to
:func:`cudnn_py.graph.conv.convolution`. ``engine="auto"`` (the default), where the graph path can take the call
(``algo`` a choice, no ``deterministic``/``workspace_limit``, math type "auto"), measures both engines on the first
call of a configuration and keeps the faster (:mod:`cudnn_py.engine_choice`: per handle, in the tuning database,
``CUDNN_PY_AUTO_ENGINE=static`` for the graph wherever it takes the call); elsewhere it runs the legacy call.
``autotune=True`` measures the candidates once per configuration (legacy: ``Find...Ex`` under the workspace cap;
graph: every plan) and keeps the fastest; ``algo="fastest"`` is its deprecated spelling. See
:mod:`cudnn_py.ops.convolution` for the conventions.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from cudnn_py import algorithms as _alg
from cudnn_py import capi
from cudnn_py import descriptors as _d
from cudnn_py._deprecation import renamed_kwargs, warn
from cudnn_py.args import INT64_MAX, bool_arg, int_arg, scaling
from cudnn_py.caches import handle_cache
from cudnn_py.dtypes import cudnn_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError, WorkspaceLimitError
from cudnn_py.handle import Handle, handle_arg
from cudnn_py.memory import DeviceArray, DeviceArrayLike, Output, array_signature, as_array, empty, zeros
from cudnn_py.strided import c_strides
from cudnn_py import recording
from cudnn_py.ops._common import Out, enum_arg, launch, moved_outputs, scalars
from cudnn_py.graph.runner import Runner
from cudnn_py.prepared import prepared
from cudnn_py.recording import Address, WorkspaceArg
from cudnn_py.ops.activation import activation_of
from cudnn_py.ops.convolution import Convolution, Geometry, logical, packed_strides, physical, unit_height

__all__ = ["convolution_forward", "convolution_backward_data", "convolution_backward_filter",
           "convolution_backward_bias", "convolution_bias_activation_forward", "convolution_algorithms",
           "convolution_workspace_size"]


def _graph():
    """:mod:`cudnn_py.graph.conv`, imported on the first ``engine="graph"`` call (it brings in the graph package)."""
    from cudnn_py.graph import conv
    return conv


def _device_id(handle: Handle) -> int:
    d = handle.device
    return int(getattr(d, "device_id", d))


def _limit(handle: Handle, workspace_limit):
    cap = handle.workspace.cap
    if workspace_limit is None:
        return cap
    workspace_limit = int_arg(workspace_limit, "workspace_limit (bytes)", 0, INT64_MAX)  # C takes a size_t
    return workspace_limit if cap is None else min(cap, workspace_limit)


def _measure(handle: Handle, g: Geometry, direction: str, limit, in_ptrs):
    """``Find...Ex`` records of a direction on the inputs at ``in_ptrs`` (a zero-padded scratch x where the padding
    is asymmetric), a scratch output and the largest workspace that can be had under ``limit``."""
    a, b, c = g.descs(direction)
    a_ptr, b_ptr = in_ptrs
    pad_x = None
    if g.asym and direction != "backward_data":
        pad_x = zeros((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
        a_ptr = pad_x.ptr
    return _alg.measure_algorithms(handle, direction, a, a_ptr, b, b_ptr, g.conv_desc(g.math_type), c,
                                   g.out_nbytes(direction), limit)


def _choose(handle: Handle, g: Geometry, direction: str, spec, deterministic: bool, limit, in_ptrs):
    """(algo, math type, workspace bytes) for ``spec``: an algorithm, "heuristic" or "fastest"."""
    return _alg.resolve_algorithm(
        handle, direction, spec, g.descs(direction), g.conv_desc, g.math_type, deterministic=deterministic,
        limit=limit, cache_key=g.cache_key(direction, _device_id(handle), deterministic, limit),
        measure=lambda: _measure(handle, g, direction, limit, in_ptrs), problem=g.describe())


# ---------------------------------------------------------------- plans: everything a call derives from its config

class _Plan:
    """What one call needs: raw descriptor handles (their objects kept alive), algorithm, workspace bytes, and the
    scaling factors' type (``scaling``: double for double compute, else float; ``one``, ``zero``: 1 and 0 in it)."""
    __slots__ = ("g", "a", "b", "c", "conv_desc", "keep", "algo", "ws", "fn", "cfn", "scaling", "gen", "one", "zero",
                 "y")
    g: Geometry
    a: Any  # the raw descriptor handles in cuDNN's argument order, and the convolution's
    b: Any
    c: Any
    conv_desc: Any
    keep: tuple  # the descriptor objects those handles belong to
    algo: Any
    ws: int
    fn: Any  # the bound ctypes function of the direction
    cfn: Any  # the direction's capi function
    y: Output  # new forward outputs
    scaling: np.dtype
    gen: int | None  # algorithm_cache.generation a "fastest" choice was made under
    one: Any
    zero: Any


#: the name of the handle's cache of plans: call signature (convolution, the arrays' signatures, algo, determinism,
#: workspace limit, whether the output is allocated) -> :class:`_Plan` or bias plan
PLANS = "conv.plans"
_FUNCS = {"forward": "cudnnConvolutionForward", "backward_data": "cudnnConvolutionBackwardData",
          "backward_filter": "cudnnConvolutionBackwardFilter"}


def _plan(handle: Handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs):
    """Build (validate, describe, choose the algorithm) and remember the plan for ``key`` in the handle's cache."""
    if direction != "forward" and arrays[0][2] == np.int8:
        raise InvalidTypeError(f"int8 convolutions run forward only (cuDNN's INT8 configurations); {direction} needs "
                               f"float16, bfloat16, float32 or float64 data")
    # arrays: x, w, y signatures by forward roles (y may be None)
    g = Geometry.of(conv, arrays[0], arrays[1], arrays[2], _device_id(handle))
    p = _Plan()
    p.g = g
    limit = _limit(handle, workspace_limit)
    algo, math_type, p.ws = _choose(handle, g, direction, spec, deterministic, limit, in_ptrs)
    p.keep = g.descs(direction) + (g.conv_desc(math_type),)
    p.a, p.b, p.c, p.conv_desc = (d.ptr for d in p.keep)
    p.algo = algo
    p.cfn = getattr(capi, _FUNCS[direction])
    p.fn = p.cfn.raw  # the bound ctypes function (status still checked)
    p.scaling = np.dtype(np.float64 if g.compute == capi.CUDNN_DATA_DOUBLE else np.float32)
    p.one, p.zero = scalars(p.scaling, 1.0, 0.0)
    p.gen = _alg.algorithm_cache.generation if isinstance(spec, str) and spec.lower() == "fastest" else None
    p.y = Output(g.out_shape, g.np_y_dtype)
    handle_cache(handle, PLANS)[key] = p
    return p


def _scaling(p: _Plan, alpha: float, beta: float) -> tuple:
    """(byref alpha, byref beta) for a plan's call: its own for 1 and 0."""
    return (p.one, p.zero) if alpha == 1.0 and beta == 0.0 else scalars(p.scaling, alpha, beta)


def _ready(handle: Handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs):
    """(plan, workspace pointer) for a call: the remembered plan (unless "fastest" choices were cleared or
    reloaded since), else a new one. A plan whose workspace the handle's cap no longer admits (the cap was
    lowered since) is made again under this cap; an explicit algorithm that needs more then raises
    :class:`WorkspaceLimitError`. (A raised cap keeps the plans made under the lower one; ``clear_caches()``
    chooses again.)"""
    p = handle_cache(handle, PLANS).get(key)
    if p is None or (p.gen is not None and p.gen != _alg.algorithm_cache.generation):
        p = _plan(handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs)
    try:
        return p, (handle.workspace.get(p.ws, handle.stream) if p.ws else None)
    except WorkspaceLimitError:
        p = _plan(handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs)
        return p, (handle.workspace.get(p.ws, handle.stream) if p.ws else None)


def _pad_input(handle: Handle, g: Geometry, x_ptr: int):
    """A zero-padded device copy of x for asymmetric padding (keep it alive until the work is queued)."""
    xp = zeros((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
    one, zero = scalars(g.dtype, 1.0, 0.0)
    capi.cudnnTransformTensor(handle.ptr, one, g.x_orig_desc.ptr, x_ptr, zero, g.interior_desc.ptr,
                              xp.ptr + g.interior_offset)
    return xp


# ---------------------------------------------------------------- engine, autotune and the call's route

_ENGINES = ("legacy", "graph", "auto")


def _route(where: str, engine: str, algo: Any, autotune: bool, deterministic: bool, workspace_limit: int | None,
           conv: Convolution, graph_ok: bool = True, stacklevel: int = 4) -> tuple[str, Any, bool]:
    """(``"legacy"`` or ``"graph"``, the algorithm spec the engines take, whether ``engine`` was ``"auto"``).

    ``autotune=True`` is the spec ``"fastest"`` (its old spelling ``algo="fastest"`` warns); ``"auto"`` takes the
    graph where it can take the call (``graph_ok`` and the options above), else the legacy call."""
    if engine not in _ENGINES:
        raise InvalidValueError(f"engine {engine!r}: expected 'legacy', 'graph' or 'auto'")
    autotune = bool_arg(autotune, "autotune")
    if isinstance(algo, str) and algo.lower() == "fastest":
        warn(f"{where}(algo='fastest') is deprecated, use autotune=True", stacklevel=stacklevel)
        autotune = True
    elif autotune:
        if not (isinstance(algo, str) and algo.lower() == "heuristic"):
            raise InvalidValueError(f"autotune=True measures the algorithms itself; algo={algo!r} names one")
        algo = "fastest"
    if engine != "auto":
        return engine, algo, False
    takes = (graph_ok and _alg.is_choice(algo) and not deterministic and workspace_limit is None
             and isinstance(conv, Convolution) and conv.math_type is None)
    return ("graph" if takes else "legacy"), algo, True


_NOT_TAKEN = object()
#: what the graph path raises for a call it does not take (with engine="auto" the legacy call then runs)
_REFUSALS = (InvalidValueError, InvalidTypeError)


def _on_graph(auto: bool, run) -> Any:
    """``run()`` (a graph-path call); with ``engine="auto"`` a call the graph refuses (an option or dtype it does not
    take, no engine on this GPU) gives ``_NOT_TAKEN``: the legacy call runs (and names any real mistake)."""
    if not auto:
        return run()
    from cudnn_py.graph.errors import GraphNotSupportedError
    try:
        return run()
    except (*_REFUSALS, GraphNotSupportedError):
        return _NOT_TAKEN


class _GraphCall:
    """A graph-path call prepared for one signature: the executor's runner (binding the direction's two inputs, then
    its output) and the output to allocate (None where the caller passes it)."""
    __slots__ = ("runner", "alloc")

    def __init__(self, ex, allocated: DeviceArray | None):
        self.runner = ex.runner
        self.alloc = None if allocated is None else Output(allocated.shape, allocated.dtype, allocated.strides)

    def __call__(self, handle: Handle, a_ptr: int, b_ptr: int, out, out_ptr: int):
        if out is None:
            out = self.alloc(handle)  # type: ignore[misc]
            out_ptr = out.ptr
        self.runner.run_pointers((a_ptr, b_ptr, out_ptr))  # the route's key fixed their signatures
        return out


def _sig(sig) -> tuple | None:
    """An array signature without its device, dtype by name (engine_choice's key part)."""
    return None if sig is None else (tuple(sig[0]), tuple(sig[1]), sig[2].name)


def _first_call(direction: str, handle: Handle, conv, a, b, out, shape, sigs, opts: dict, legacy):
    """A call's validated path: the engine chosen (``engine="auto"`` measures the legacy call against the graph path
    through :mod:`cudnn_py.engine_choice`, once per configuration and handle) and the call run, through the legacy
    sink or the graph's runner, which its prepared call (:mod:`cudnn_py.prepared`) repeats.

    ``a``, ``b``, ``out``: the direction's inputs and output (``out`` None: allocated); ``sigs``: their signatures;
    ``legacy(algo)`` runs the legacy call; ``opts``: the call's keywords."""
    where = f"convolution_{direction}"
    route, algo, auto = _route(where, opts["engine"], opts["algo"], opts["autotune"], opts["deterministic"],
                               opts["workspace_limit"], conv, stacklevel=5)
    if isinstance(opts["algo"], str) and opts["algo"].lower() == "fastest":
        recording.spoil("algo='fastest' is deprecated and warns on every call")
    got: dict = {}
    ptrs = [0 if x is None else array_signature(x)[1] for x in (a, b, out)]  # the route's arguments

    def run_legacy():
        got["out"] = legacy(algo)

    def run_graph():
        call = got.get("call")
        if call is not None:  # a repeat run (engine_choice timing it): the route a repeat call takes, as the
            got["out"] = call(handle, ptrs[0], ptrs[1], out, ptrs[2])  # legacy side runs its own hot path
            return
        got["out"], ex = _graph().convolution(
            direction, handle, conv, a, b, out, engine="graph", algo=algo, deterministic=opts["deterministic"],
            workspace_limit=opts["workspace_limit"], alpha=opts["alpha"], beta=opts["beta"], shape=shape,
            executor=True)
        got["call"] = _GraphCall(ex, got["out"] if out is None else None)
        # the executor ran it (no sink on its path): what a repeat call runs is its runner on these addresses
        if isinstance(ex.runner, Runner):
            recording.add(ex.runner.replay, (ptrs[0], ptrs[1], ptrs[2] if out is not None else got["out"].ptr),
                          (0, 1, 2))
        else:  # a stand-in executor
            recording.spoil("the graph path ran on an executor with no runner")
    if route == "legacy":
        run_legacy()
    elif not auto:
        run_graph()
    else:
        from cudnn_py import engine_choice
        from cudnn_py.graph.errors import GraphNotSupportedError
        dims: tuple | str | None
        try:
            dims = None if shape is None else tuple(int(n) for n in shape)
        except (TypeError, ValueError):  # no shape: the engines say what is wrong with it
            dims = repr(shape)
        # "route": the graph side timed through the route a repeat call takes (choices kept before this timed
        # the graph's full entry point on every run, which made legacy win where it costs the host 4x more)
        ekey = (where, "route", conv.key, *map(_sig, sigs), dims, algo if isinstance(algo, str) else None,
                opts["beta"] != 0.0)
        mutated = () if out is None or opts["beta"] == 0.0 else (as_array(out, "output"),)
        engine_choice.run(handle, ekey, run_legacy, run_graph, mutated=mutated, static="graph",
                          refused=(*_REFUSALS, GraphNotSupportedError))
    return got["out"]


def _generation() -> int:
    """The version of the measured algorithm choices (clearing or loading them makes "fastest" calls choose again)."""
    return _alg.algorithm_cache.generation


def _conv_arg(conv) -> None:
    if not isinstance(conv, Convolution):
        raise InvalidTypeError(f"conv must be a cudnn_py.Convolution, got {type(conv).__name__}")


def _run(handle: Handle, p: _Plan, al, a_ptr: int, b_ptr: int, be, out_ptr: int) -> None:
    """The direction's legacy call with the plan's descriptors, algorithm and workspace, through the legacy sink; x
    (``a_ptr`` forward and backward filter) first copied into a zero-padded scratch buffer for asymmetric padding."""
    xp = None
    if p.g.asym:
        recording.spoil("asymmetric padding: x is copied to a zero-padded scratch buffer on every call")
        xp = _pad_input(handle, p.g, a_ptr)
        a_ptr = xp.ptr
    a, b, c, cd = p.keep
    launch(handle, p.cfn, handle.ptr, al, a, Address(a_ptr), b, Address(b_ptr), cd, p.algo, WorkspaceArg(p.ws), p.ws,
           be, c, Address(out_ptr))


# ---------------------------------------------------------------- the calls

@prepared(inputs=("x", "w"), outputs=("y",), inplace=False, epoch=_generation)
def convolution_forward(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                        *moved: DeviceArrayLike, y: Out | None = None, algo: Any = "heuristic", alpha: float = 1.0,
                        beta: float = 0.0, deterministic: bool = False, workspace_limit: int | None = None,
                        autotune: bool = False, engine: str = "auto") -> DeviceArray | Out:
    """``y = alpha * conv(x, w) + beta * y`` (``cudnnConvolutionForward``); returns y (allocated if not given).

    ``engine="graph"`` runs it as a cached backend-API plan instead (see :func:`cudnn_py.graph.conv.convolution`).
    """
    alpha, beta = scaling(alpha=alpha, beta=beta)
    handle = handle_arg(handle)
    if moved:
        y, = moved_outputs("convolution_forward", moved, ("y",), (y,))
    _conv_arg(conv)
    xs, x_ptr = array_signature(x, "x")
    ws, w_ptr = array_signature(w, "w")
    ys, y_ptr = (None, 0) if y is None else array_signature(y, "y")
    return _first_call("forward", handle, conv, x, w, y, None, (xs, ws, ys), dict(
        algo=algo, alpha=alpha, beta=beta, deterministic=deterministic, workspace_limit=workspace_limit,
        autotune=autotune, engine=engine), lambda spec: _forward_legacy(
            handle, conv, xs, x_ptr, ws, w_ptr, ys, y_ptr, y, spec, alpha, beta, deterministic, workspace_limit))


def _forward_legacy(handle, conv, xs, x_ptr, ws, w_ptr, ys, y_ptr, y, algo, alpha, beta, deterministic,
                    workspace_limit) -> DeviceArray | Out:
    """The legacy ``cudnnConvolutionForward`` call on signatures already read (its plan made once)."""
    key = ("forward", conv, xs, ws, ys, algo, deterministic, workspace_limit)
    p, _ = _ready(handle, key, "forward", conv, (xs, ws, ys), algo, deterministic, workspace_limit, (x_ptr, w_ptr))
    out: DeviceArray | Out
    if y is None:
        new = p.y(handle)
        out, y_ptr = new, new.ptr
    else:
        out = y
    al, be = (p.one, p.zero) if alpha == 1.0 and beta == 0.0 else scalars(p.scaling, alpha, beta)
    _run(handle, p, al, x_ptr, w_ptr, be, y_ptr)
    return out


def _shape_sig(shape, like, what):
    shape = tuple(int(n) for n in shape)
    if any(n < 1 for n in shape):
        raise InvalidValueError(f"{what} {shape} must have positive dimensions")
    return shape, packed_strides(shape, False), like[2], like[3]


@prepared(inputs=("w", "dy"), outputs=("dx",), inplace=False, epoch=_generation)
def convolution_backward_data(handle: Handle, conv: Convolution, w: DeviceArrayLike, dy: DeviceArrayLike,
                              *moved: DeviceArrayLike, dx: Out | None = None, x_shape: Sequence[int] | None = None,
                              algo: Any = "heuristic", alpha: float = 1.0, beta: float = 0.0,
                              deterministic: bool = False, workspace_limit: int | None = None, autotune: bool = False,
                              engine: str = "auto") -> DeviceArray | Out:
    """``dx = alpha * conv_transpose(dy, w) + beta * dx`` (``cudnnConvolutionBackwardData``); returns dx.

    Without ``dx``, one of shape ``x_shape`` is allocated (default: the smallest input giving dy's shape).
    ``engine="graph"``: a cached backend-API plan instead (see :func:`cudnn_py.graph.conv.convolution`).
    """
    alpha, beta = scaling(alpha=alpha, beta=beta)
    handle = handle_arg(handle)
    if moved:
        dx, = moved_outputs("convolution_backward_data", moved, ("dx",), (dx,))
    ws, w_ptr = array_signature(w, "w")
    dys, dy_ptr = array_signature(dy, "dy")
    dxs, dx_ptr = (None, 0) if dx is None else array_signature(dx, "dx")

    def legacy(spec):
        if dx is not None:
            xs = dxs
        else:
            xs = _shape_sig(x_shape if x_shape is not None else conv.input_shape(ws[0], dys[0]), ws, "x_shape")
        return _backward_data_legacy(handle, conv, xs, ws, w_ptr, dys, dy_ptr, dx, dx_ptr, spec, alpha, beta,
                                     deterministic, workspace_limit)
    return _first_call("backward_data", handle, conv, dy, w, dx, x_shape, (dys, ws, dxs), dict(
        algo=algo, alpha=alpha, beta=beta, deterministic=deterministic, workspace_limit=workspace_limit,
        autotune=autotune, engine=engine), legacy)


def _backward_data_legacy(handle, conv, xs, ws, w_ptr, dys, dy_ptr, dx, dx_ptr, algo, alpha, beta, deterministic,
                          workspace_limit) -> DeviceArray | Out:
    """The legacy ``cudnnConvolutionBackwardData`` call (x's signature: dx's, or the shape to allocate)."""
    key = ("backward_data", conv, xs, ws, dys, dx is None, algo, deterministic, workspace_limit)
    p, ws_ptr = _ready(handle, key, "backward_data", conv, (xs, ws, dys), algo, deterministic, workspace_limit,
                       (w_ptr, dy_ptr))
    g = p.g
    out: DeviceArray | Out
    if dx is None:
        out = empty(xs[0], xs[2], stream=handle.stream, device=handle.device)
        dx_ptr = out.ptr
    else:
        out = dx
    if g.asym:  # gradient of the padded x, then its interior blended into dx
        recording.spoil("asymmetric padding: the gradient of a padded scratch copy of x")
        dxp = empty((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
        p.fn(handle.ptr, p.one, p.a, w_ptr, p.b, dy_ptr, p.conv_desc, p.algo, ws_ptr, p.ws, p.zero, p.c, dxp.ptr)
        al, be = scalars(g.dtype, alpha, beta)
        capi.cudnnTransformTensor(handle.ptr, al, g.interior_desc.ptr, dxp.ptr + g.interior_offset, be,
                                  g.x_orig_desc.ptr, dx_ptr)
        return out
    al, be = _scaling(p, alpha, beta)
    _run(handle, p, al, w_ptr, dy_ptr, be, dx_ptr)
    return out


@prepared(inputs=("x", "dy"), outputs=("dw",), inplace=False, epoch=_generation)
def convolution_backward_filter(handle: Handle, conv: Convolution, x: DeviceArrayLike, dy: DeviceArrayLike,
                                *moved: DeviceArrayLike, dw: Out | None = None, w_shape: Sequence[int] | None = None,
                                algo: Any = "heuristic", alpha: float = 1.0, beta: float = 0.0,
                                deterministic: bool = False, workspace_limit: int | None = None, autotune: bool = False,
                                engine: str = "auto") -> DeviceArray | Out:
    """``dw = alpha * dL/dw + beta * dw`` (``cudnnConvolutionBackwardFilter``); returns dw.

    Pass ``dw`` or ``w_shape`` (the filter shape cannot be inferred when the stride is above 1).
    ``engine="graph"``: a cached backend-API plan instead (see :func:`cudnn_py.graph.conv.convolution`).
    """
    alpha, beta = scaling(alpha=alpha, beta=beta)
    handle = handle_arg(handle)
    if moved:
        dw, = moved_outputs("convolution_backward_filter", moved, ("dw",), (dw,))
    xs, x_ptr = array_signature(x, "x")
    dys, dy_ptr = array_signature(dy, "dy")
    dws, dw_ptr = (None, 0) if dw is None else array_signature(dw, "dw")
    if dw is None and w_shape is None:
        raise InvalidValueError("convolution_backward_filter needs dw (an output array) or w_shape")

    def legacy(spec):
        ws = dws if dw is not None else _shape_sig(w_shape, xs, "w_shape")
        return _backward_filter_legacy(handle, conv, xs, x_ptr, ws, dys, dy_ptr, dw, dw_ptr, spec, alpha, beta,
                                       deterministic, workspace_limit)
    return _first_call("backward_filter", handle, conv, dy, x, dw, w_shape, (dys, xs, dws), dict(
        algo=algo, alpha=alpha, beta=beta, deterministic=deterministic, workspace_limit=workspace_limit,
        autotune=autotune, engine=engine), legacy)


def _backward_filter_legacy(handle, conv, xs, x_ptr, ws, dys, dy_ptr, dw, dw_ptr, algo, alpha, beta, deterministic,
                            workspace_limit) -> DeviceArray | Out:
    """The legacy ``cudnnConvolutionBackwardFilter`` call (w's signature: dw's, or the shape to allocate)."""
    key = ("backward_filter", conv, xs, ws, dys, dw is None, algo, deterministic, workspace_limit)
    p, ws_ptr = _ready(handle, key, "backward_filter", conv, (xs, ws, dys), algo, deterministic, workspace_limit,
                       (x_ptr, dy_ptr))
    out: DeviceArray | Out
    if dw is None:
        out = empty(ws[0], ws[2], stream=handle.stream, device=handle.device)
        dw_ptr = out.ptr
    else:
        out = dw
    al, be = _scaling(p, alpha, beta)
    _run(handle, p, al, x_ptr, dy_ptr, be, dw_ptr)
    return out


@prepared(inputs=("dy",), outputs=("db",), inplace=False)
def convolution_backward_bias(handle: Handle, dy: DeviceArrayLike, *moved: DeviceArrayLike, db: Out | None = None,
                              alpha: float = 1.0, beta: float = 0.0, layout: str = "NCHW") -> DeviceArray | Out:
    """``db = alpha * sum(dy over all but channels) + beta * db`` (``cudnnConvolutionBackwardBias``).

    db (allocated if not given) has shape ``(1, K, 1, ...)`` (``(1, ..., 1, K)`` for ``layout="NHWC"``).
    """
    alpha, beta = scaling(alpha=alpha, beta=beta)
    handle = handle_arg(handle)
    if moved:
        db, = moved_outputs("convolution_backward_bias", moved, ("db",), (db,))
    dys, dy_ptr = array_signature(dy, "dy")
    dbs, db_ptr = (None, 0) if db is None else array_signature(db, "db")
    layout = layout.upper() if isinstance(layout, str) else layout  # any case, as everywhere
    key = ("backward_bias", dys, dbs, layout)
    plans = handle_cache(handle, PLANS)
    got = plans.get(key)
    if got is None:
        got = plans[key] = _bias_plan(handle, dys, dbs, layout, "db")
    dy_desc, db_desc, db_shape, _ = got
    out: DeviceArray | Out
    if db is None:
        out = empty(db_shape, dys[2], stream=handle.stream, device=handle.device)
        db_ptr = out.ptr
    else:
        out = db
    al, be = scalars(dys[2], alpha, beta)
    launch(handle, capi.cudnnConvolutionBackwardBias, handle.ptr, al, got[3][0], Address(dy_ptr), be, got[3][1],
           Address(db_ptr))
    return out


def _bias_plan(handle: Handle, ysig, bsig, layout, name):
    """(y descriptor, bias descriptor, allocated bias shape, objects) for a bias of y's channels."""
    if layout not in ("NCHW", "NHWC"):
        raise InvalidValueError(f"layout {layout!r}: expected 'NCHW' or 'NHWC'")
    shape, strides, dtype, device = ysig
    if device != _device_id(handle):
        raise InvalidValueError(f"the data is on device {device} but the handle is on device {_device_id(handle)}")
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
    y_desc = _d.TensorDescriptor.shared(tuple(ys), dt, tuple(yst))
    b_desc = _d.TensorDescriptor.shared(bshape, dt if bsig is None else cudnn_dtype(bsig[2]), packed_strides(bshape, False))
    allocated = physical((1, k) + (1,) * (len(shape) - 2), layout)
    return y_desc.ptr, b_desc.ptr, allocated, (y_desc, b_desc)


_ACTIVATIONS = {"relu": capi.CUDNN_ACTIVATION_RELU, "identity": capi.CUDNN_ACTIVATION_IDENTITY}


def convolution_bias_activation_forward(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                                        bias: DeviceArrayLike, *, z: DeviceArrayLike | None = None,
                                        activation: str = "relu", alpha: float = 1.0, beta: float = 0.0,
                                        y: Out | None = None, algo: Any = "heuristic", deterministic: bool = False,
                                        workspace_limit: int | None = None, autotune: bool = False,
                                        engine: str = "auto", **old: Any) -> DeviceArray | Out:
    """``y = act(alpha * conv(x, w) + beta * z + bias)`` (``cudnnConvolutionBiasActivationForward``, whose
    ``alpha1``/``alpha2`` are ``alpha``/``beta``; those old keywords still work with a DeprecationWarning).

    ``activation``: ``"relu"`` or ``"identity"`` (cuDNN runs identity only with IMPLICIT_PRECOMP_GEMM,
    which is then chosen for you). Without ``z`` (then ``beta`` must be 0) y is zeroed first and
    used as z; pass ``z=y`` to add y's current values instead. ``bias`` holds one value per channel.
    ``engine="graph"`` fuses conv, bias and activation into one backend-API graph (no ``z``).
    """
    handle = handle_arg(handle)
    if old:
        got = renamed_kwargs("convolution_bias_activation_forward", old, {"alpha1": "alpha", "alpha2": "beta"},
                             {"alpha": None if alpha == 1.0 else alpha, "beta": None if beta == 0.0 else beta})
        alpha, beta = (1.0 if got["alpha"] is None else got["alpha"]), (0.0 if got["beta"] is None else got["beta"])
    alpha, beta = scaling(alpha=alpha, beta=beta)  # after the old spellings (alpha1=, alpha2=) were read
    act = enum_arg(activation, _ACTIVATIONS, capi.cudnnActivationMode_t, "activation")
    route, algo, auto = _route("convolution_bias_activation_forward", engine, algo, autotune, deterministic,
                               workspace_limit, conv, graph_ok=z is None and beta == 0.0)
    if route == "graph":
        if z is not None or beta != 0.0:
            raise InvalidValueError("engine='graph' has no z input: use engine='legacy' for y = act(alpha * conv + "
                                    "beta * z + bias)")
        got = _on_graph(auto, lambda: _graph().convolution(
            "forward", handle, conv, x, w, y, engine="graph", algo=algo, deterministic=deterministic,
            workspace_limit=workspace_limit, alpha=alpha, bias=bias,
            activation=None if act == capi.CUDNN_ACTIVATION_IDENTITY else "relu"))
        if got is not _NOT_TAKEN:
            return got
    if act == capi.CUDNN_ACTIVATION_IDENTITY:
        precomp = capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
        if _alg.is_choice(algo):
            algo = precomp
        elif _alg.parse_algo("forward", algo) != precomp:
            raise InvalidValueError("cuDNN runs the identity activation only with IMPLICIT_PRECOMP_GEMM")
    if z is None and beta != 0.0:
        raise InvalidValueError("beta scales z; pass z (it may be y itself) or leave beta at 0")
    xs, x_ptr = array_signature(x, "x")
    ws, w_ptr = array_signature(w, "w")
    bs, b_ptr = array_signature(bias, "bias")
    ys, y_ptr = (None, 0) if y is None else array_signature(y, "y")
    key = ("forward", conv, xs, ws, ys, algo, deterministic, workspace_limit)
    p, ws_ptr = _ready(handle, key, "forward", conv, (xs, ws, ys), algo, deterministic, workspace_limit,
                       (x_ptr, w_ptr))
    if y is None:  # the signature of the y allocated below: bias and z are checked before anything is allocated
        shape = tuple(p.g.out_shape)
        ys = (shape, c_strides(shape), np.dtype(p.g.np_y_dtype), _device_id(handle))
    bkey = ("bias", ys, bs, conv.layout)
    plans = handle_cache(handle, PLANS)
    bplan = plans.get(bkey)
    if bplan is None:
        bplan = plans[bkey] = _bias_plan(handle, ys, bs, conv.layout, "bias")
    if z is not None:
        zs, z_ptr = array_signature(z, "z")
        if zs != ys:
            raise InvalidValueError(f"z must look like y (shape, strides, dtype, device {ys}), got {zs}")
    out: DeviceArray | Out
    if y is None:
        new = p.y(handle)
        out, y_ptr = new, new.ptr
    else:
        out = y
    if z is None:  # z aliases y: clear y so that no stale value (or NaN) can leak in through z
        # cuDNN reads the value as y's data type; a double 0.0 is all zero bytes, so it reads 0 in any type
        capi.cudnnSetTensor(handle.ptr, p.c, y_ptr, scalars(np.float64, 0.0)[0])
        z_ptr = y_ptr
    xp = _pad_input(handle, p.g, x_ptr) if p.g.asym else None
    a1, a2 = scalars(p.scaling, alpha, beta)
    act_desc = activation_of(act)  # holds its C descriptor for the call (and after: one per mode)
    capi.cudnnConvolutionBiasActivationForward(
        handle.ptr, a1, p.a, x_ptr if xp is None else xp.ptr, p.b, w_ptr, p.conv_desc, p.algo, ws_ptr, p.ws, a2,
        p.c, z_ptr, bplan[1], b_ptr, act_desc.descriptor, p.c, y_ptr)
    return out


# ---------------------------------------------------------------- algorithm queries on arrays

def _query_geometry(handle: Handle, conv, x, w, y, direction) -> Geometry:
    """Geometry for a query: x, w, y are arrays or shapes (an output-only role may be a shape)."""
    def sig(obj, name, like):
        if isinstance(obj, (tuple, list)):
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
    return Geometry.of(conv, xs, ws, ys, _device_id(handle))


def convolution_algorithms(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                           y: DeviceArrayLike | None = None, *, direction: str = "forward", method: str = "heuristic",
                           workspace_limit: int | None = None) -> list[_alg.AlgoPerf]:
    """cuDNN's ranked algorithm records for one direction of this convolution.

    ``x``, ``w``, ``y`` keep their forward roles (for backward_data ``y`` is dy and ``x`` dx; for
    backward_filter ``w`` is dw); the direction's output may be given as a shape. ``method``:
    ``"heuristic"`` (``..._v7``), ``"find"`` (``Find...``, cuDNN's own buffers) or ``"find_ex"``
    (``Find...Ex`` on the given inputs, a scratch output and a workspace of at most ``workspace_limit``).
    """
    handle = handle_arg(handle)
    if direction not in _alg.DIRECTIONS:
        raise InvalidValueError(f"direction {direction!r}: expected one of {_alg.DIRECTIONS}")
    g = _query_geometry(handle, conv, x, w, y, direction)
    a, b, c = g.descs(direction)
    cd = g.conv_desc(g.math_type)
    if method == "heuristic":
        return _alg.heuristic_algorithms(handle, direction, a, b, cd, c)
    if method == "find":
        return _alg.find_algorithms(handle, direction, a, b, cd, c)
    if method == "find_ex":
        ins = {"forward": (x, w), "backward_data": (w, y), "backward_filter": (x, y)}[direction]
        for name, obj in zip(("first input", "second input"), ins):
            if obj is None or isinstance(obj, (tuple, list)):
                raise InvalidValueError(f"method='find_ex' runs on device data: the {direction} {name} must be an "
                                        f"array")
        ptrs = tuple(array_signature(o, "input")[1] for o in ins if o is not None)
        return _measure(handle, g, direction, _limit(handle, workspace_limit), ptrs)
    raise InvalidValueError(f"method {method!r}: expected 'heuristic', 'find' or 'find_ex'")


def convolution_workspace_size(handle: Handle, conv: Convolution, x: DeviceArrayLike, w: DeviceArrayLike,
                               y: DeviceArrayLike | None = None, *, algo: Any, direction: str = "forward") -> int:
    """Workspace bytes that ``algo`` needs (``cudnnGetConvolution*WorkspaceSize``); raises if unsupported."""
    handle = handle_arg(handle)
    g = _query_geometry(handle, conv, x, w, y, direction)
    a, b, c = g.descs(direction)
    return _alg.workspace_size(handle, direction, a, b, g.conv_desc(g.math_type), c, algo)
