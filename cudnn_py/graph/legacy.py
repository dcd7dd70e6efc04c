"""The one engine dispatch of every family (``engine="legacy" | "graph" | "auto"``: :func:`dispatch`), and the graph
paths of the families whose C entry points cuDNN 9 marks deprecated: :func:`run_graph` builds a small graph on a
signature's validated call and runs it through a :class:`~cudnn_py.graph.runner.Runner`, whose sink the prepared call
repeats. Pointwise graphs describe their operands relabelled channels-last, or as one flat channels-last array
(docs/graph_paths.md says why).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from cudnn_py.calls import engine_choice
from cudnn_py.clib import recording
from cudnn_py.errors import InvalidValueError
from cudnn_py.core.dtypes import as_numpy_dtype
from cudnn_py.core.memory import DeviceArray
from cudnn_py.calls.prepared import forget
from cudnn_py.core.strided import memory_order

from . import runner
from .errors import GraphNotSupportedError
from .graph import Graph, Tensor, packed_strides
from .ops.pointwise import Pointwise, pointwise_mode

__all__ = ["ENGINES", "engine_arg", "legacy_cache_clear", "GraphPathRefused", "dispatch", "repeatable", "graph_ran",
           "run_graph", "blend", "graph_dtype", "GRAPH_DTYPES", "ROUTE"]

#: what ``engine=`` takes: the legacy C call, a cached graph plan, or the graph where it has an engine
ENGINES = ("legacy", "graph", "auto")
#: names of the data types the pointwise graph paths take (cuDNN 9.19 has no float64 pointwise engine)
GRAPH_DTYPES = ("float16", "bfloat16", "float32")
_GRAPH_NP = frozenset(as_numpy_dtype(n) for n in GRAPH_DTYPES)  # the same as NumPy dtypes: one set lookup per array
_MAX_RANK = 5
#: what the prepared calls that ran a graph path here note they were built on (:func:`legacy_cache_clear`)
ROUTE = "graph paths"


def engine_arg(engine) -> str:
    """``engine`` checked: one of :data:`ENGINES`."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise InvalidValueError(f"engine {engine!r}: expected 'legacy', 'graph' or 'auto'")
    return engine


def legacy_cache_clear(handle) -> None:
    """Forget the prepared calls of ``handle`` that run a family's graph path (the plans stay in the plan cache)."""
    forget(handle, ROUTE)


class GraphPathRefused(InvalidValueError):
    """A configuration the graph path refuses before cuDNN is asked (``engine="auto"`` runs legacy instead)."""


def dispatch(engine: str, handle: Any, key: Hashable | None, legacy: Callable[[], object],
             graph: Callable[[bool], object], *, mutated: Sequence | None = None, static: str = "graph",
             measure: bool = True) -> str:
    """Run one call on ``engine`` ('legacy', 'graph', or for 'auto' the one :mod:`cudnn_py.calls.engine_choice`
    keeps for ``key``, the legacy call where the graph refuses) and answer the engine that ran it. ``legacy()`` runs
    the legacy C call, ``graph(auto)`` the graph path (answering False, or raising :class:`GraphPathRefused` /
    :class:`~cudnn_py.graph.GraphNotSupportedError`, where it does not take the call). ``mutated``: the arrays the
    call writes and may read (None: the prepared call's declaration); ``measure`` False: ``static``'s engine."""
    engine = engine_arg(engine)
    if engine == "legacy":
        legacy()
        return engine
    if engine == "graph":
        if graph(False) is False:  # nothing ran: never silently
            raise GraphPathRefused("engine='graph' does not take this call (use engine='legacy' or 'auto')")
        return engine
    refused = (GraphPathRefused, GraphNotSupportedError)
    if not measure:
        return engine_choice.run_static(static, legacy, lambda: graph(True), refused)
    outer, _builds.memo = getattr(_builds, "memo", None), {}  # the engine choice's several runs build once
    try:
        return engine_choice.run(handle, key, legacy, lambda: graph(True), mutated=mutated, static=static,
                                 refused=refused)
    finally:
        _builds.memo = outer


#: ``.memo``: what :func:`run_graph` built during the :func:`dispatch` under way, for the engine choice's repeated
#: runs of one call (None outside one): no cache outlives the call
_builds = threading.local()


def repeatable(run: Callable[[], object]) -> Callable[[], object]:
    """``run`` (a graph path) as an engine the engine choice may run several times: a later run queues again the
    plan executions the first queued, on the same addresses (so the measurement times a repeat call), or runs in full
    where the first queued anything else or spoiled its recording. Only for a path without scratch buffers."""
    first: list = []

    def again() -> object:
        if first:
            for r, ptrs in first[0]:
                r.run_pointers(ptrs)
            return first[1]
        outer = recording.state.rec
        with recording.recording() as rec:
            res = run()
        if outer is not None:
            outer.steps += rec.steps
            outer.uses |= rec.uses
            outer.spoiled = outer.spoiled or rec.spoiled
        if res is not False and rec.spoiled is None and all(
                isinstance(getattr(s.call, "__self__", None), runner.Runner) for s in rec.steps):
            first[:] = [[(getattr(s.call, "__self__"), s.args[1:]) for s in rec.steps], res]  # replay(wsp, *ptrs)
        return res
    return again


def graph_ran(engine: str, graph: Callable[[bool], object]) -> bool:
    """:func:`dispatch` unmeasured, for a caller whose legacy call follows inline: whether the graph path ran."""
    return dispatch(engine, None, None, lambda: None, graph, measure=False) == "graph"


def graph_dtype(dtype, what: str) -> None:
    """Refuse data types the pointwise graph engines lack."""
    if dtype not in _GRAPH_NP and np.dtype(dtype).name not in GRAPH_DTYPES:
        raise GraphPathRefused(f"engine='graph': {what} has dtype {np.dtype(dtype)}; the graph path takes float16, "
                               f"bfloat16 and float32 (use engine='legacy' for float64)")


def _relabel(out: DeviceArray) -> tuple[int, tuple[int, ...]]:
    """(unit dims prepended, axis permutation) that present ``out`` with its innermost axis second."""
    pad = max(0, 4 - out.ndim)
    order = memory_order((1,) * pad + out.shape, (0,) * pad + out.strides)
    return pad, (order[0], order[-1], *order[1:-1])


def _view(a: DeviceArray, pad: int, perm) -> DeviceArray:
    """``a`` with ``pad`` unit dims in front and its axes permuted (no copy)."""
    if perm is None or (not pad and perm == tuple(range(a.ndim))):
        return a
    shape, strides = (1,) * pad + a.shape, (1,) * pad + a.strides
    return DeviceArray.from_parts(a.ptr, tuple(shape[p] for p in perm), a.dtype, tuple(strides[p] for p in perm),
                            a.device_id, a, None)


#: the channel count of the flat view (:func:`_flat`): the fastest on cuDNN 9.19's pointwise engine (graph_paths.md)
_FLAT_C = 64


def _flat(ref: DeviceArray, arrays) -> Callable[[DeviceArray], DeviceArray] | None:
    """A view function presenting every array as one flat channels-last (1, _FLAT_C, n / _FLAT_C, 1) array, or None:
    where all have ``ref``'s shape, strides and dtype (not for dtype conversions) and ``ref`` is dense."""
    n = ref.size
    if n % _FLAT_C or any(a.shape != ref.shape or a.strides != ref.strides or a.dtype != ref.dtype for a in arrays):
        return None
    acc = 1
    for i in reversed(memory_order(ref.shape, ref.strides)):
        if ref.shape[i] > 1 and ref.strides[i] != acc:
            return None
        acc *= ref.shape[i]
    shape = (1, _FLAT_C, n // _FLAT_C, 1)
    strides = packed_strides(shape, "NHWC")
    return lambda a: DeviceArray.from_parts(a.ptr, shape, a.dtype, strides, a.device_id, a, None)


def _graph_strides(a: DeviceArray) -> tuple[int, ...]:
    """The strides a graph tensor gets for view ``a``: packed channels-last where ``a`` is, else ``a``'s own."""
    packed = packed_strides(a.shape, "NHWC")
    return packed if all(p == s for p, s, n in zip(packed, a.strides, a.shape) if n > 1) else a.strides


def _pointwise_layouts(inputs, views, ov: DeviceArray) -> None:
    """Refuse what cuDNN 9.19's pointwise engines have no engine for, before cuDNN is asked: a full-size operand in
    another memory order than the output, a broadcast operand varying along another dim than the channel."""
    want = _graph_strides(ov)
    for (role, _), v in zip(inputs, views):
        if v.shape == ov.shape and _graph_strides(v) != want:
            raise GraphPathRefused(f"engine='graph': {role} is stored in another memory order than the output; "
                                   f"cuDNN's pointwise engines do not change layouts (use engine='legacy')")
        if any(a < b for a, b in zip(v.shape, ov.shape)) and (v.shape[0] != 1 or any(n != 1 for n in v.shape[2:])):
            raise GraphPathRefused(f"engine='graph': {role} broadcasts along a dim other than the channel of "
                                   f"channels-last memory; cuDNN's pointwise engines broadcast per channel only "
                                   f"(use engine='legacy')")


def run_graph(handle, name: str, params: tuple, inputs: Sequence[tuple[str, DeviceArray]],
              outputs: Sequence[tuple[str, DeviceArray]], build: Callable, *, auto: bool = False,
              relabel: bool = True, layout_of: DeviceArray | None = None, autotune: bool = False) -> bool:
    """Run ``build``'s graph on these arrays (built once per call, or per :func:`dispatch`) through the plan cache;
    False when ``auto`` and the graph path refuses or cuDNN has no engine (nothing ran). ``inputs`` / ``outputs``:
    (role, array) pairs (an input may also be an output); ``params``: the hashable settings ``build`` depends on.
    ``build(graph, {role: tensor}, out_shape)`` returns the result(s) in ``outputs``' order (one that is an input, or of
    another shape, is copied out). ``relabel``: describe the arrays relabelled channels-last after ``layout_of``
    (default the first output), or flat where :func:`_flat` allows (``build`` must then be elementwise); else as they
    are. ``autotune``: time every plan on the first call (:func:`~.runner.autotune_graph`), not take mode A's first."""
    for role, a in (*inputs, *outputs):
        if role != "index":  # pooling's int8 window index is the graph's own
            graph_dtype(a.dtype, role)
    ref = outputs[0][1] if layout_of is None else layout_of
    if relabel and ref.ndim > _MAX_RANK:
        raise GraphPathRefused(f"engine='graph' takes arrays of 1 to {_MAX_RANK} dimensions; got shape "
                               f"{ref.shape} (use engine='legacy')")
    key = (name, params, autotune, relabel, None if layout_of is None else (layout_of.shape, layout_of.strides),
           tuple((r, a.shape, a.strides, a.dtype, a.device_id, tuple(a is o for _, o in outputs)) for r, a in inputs),
           tuple((r, a.shape, a.strides, a.dtype, a.device_id) for r, a in outputs))

    def make():
        view = _flat(ref, [a for _, a in (*inputs, *outputs)]) if relabel else None
        if view is None:
            pad, perm = _relabel(ref) if relabel else (0, None)
            view = lambda a: _view(a, pad, perm)  # noqa: E731
        g = Graph(io_dtype=outputs[0][1].dtype, compute_dtype="float32", name=name)
        views = [view(a) for _, a in inputs]
        strides = _graph_strides if relabel else (lambda v: v.strides)
        ts = {r: g.tensor(v.shape, dtype=v.dtype, strides=strides(v), name=r) for (r, _), v in zip(inputs, views)}
        ovs = [view(a) for _, a in outputs]
        if relabel:
            _pointwise_layouts(inputs, views, ovs[0])
        try:
            res = build(g, ts, ovs[0].shape)
        except (ValueError, TypeError) as e:  # the graph builder's own checks: a configuration it does not take
            raise GraphPathRefused(f"engine='graph': {e}") from e
        res = (res,) if isinstance(res, Tensor) else tuple(res)
        outs = []
        for (role, _), t, ov in zip(outputs, res, ovs):
            if t.shape != ov.shape or not t.is_virtual:  # e.g. a broadcast input: written out at the output's shape
                wide = g.virtual(ov.shape)
                g.add_op(Pointwise({"x": t}, {"y": wide}, {"mode": pointwise_mode("identity"),
                                                             "compute_dtype": g.compute_dtype}))
                t = wide
            t.set_output(True).set_dtype(ov.dtype).set_name(role)
            t.strides = strides(ov)
            outs.append(t)
        runner.plan_graph(g, handle, dict(zip(ts.values(), views)), dict(zip(outs, ovs)), autotune)
        return runner.Runner(g.plan, handle, [*ts.values(), *outs]), view

    memo = getattr(_builds, "memo", None)
    got = None if memo is None else memo.get(key)
    if got is None:
        try:
            got = make()
        except (GraphNotSupportedError, GraphPathRefused):
            if auto:
                return False
            raise
        if memo is not None:
            memo[key] = got
    r, view = got
    recording.uses(ROUTE)
    r.run([view(a) for _, a in (*inputs, *outputs)])
    return True


def blend(g: Graph, res: Tensor, t: dict, alpha: float, beta: float, prior: str = "prior") -> Tensor:
    """``alpha * res + beta * t[prior]`` with the multiplications and the add left out where they are no-ops."""
    if alpha != 1.0:
        res = g.scale(res, float(alpha))
    if beta != 0.0:
        res = g.add(t[prior] if beta == 1.0 else g.scale(t[prior], float(beta)), res)
    return res
