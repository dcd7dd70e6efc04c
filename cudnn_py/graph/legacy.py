"""Graph (backend-API) paths for the Pythonic operations whose C entry points cuDNN 9 marks deprecated.

The operation modules (:mod:`cudnn_py.ops.activation`, ``tensor_ops``, ``pooling``, ``batchnorm``,
``normalization``) take ``engine="legacy" | "graph" | "auto"``; ``"graph"`` comes here. Each call builds a small
graph on a signature's validated call (:func:`run_graph`), plans it through the handle's plan cache and runs it through
its :class:`~cudnn_py.graph.runner.Runner`'s sink, so that the call's prepared call (:mod:`cudnn_py.prepared`) repeats
it: a repeat call is one variant pack of the new addresses and one ``cudnnBackendExecute``. :func:`dispatch` chooses
the engine (``"auto"``: measured once per configuration, :mod:`cudnn_py.engine_choice`).

Layout. cuDNN's engines for graphs of pointwise operations alone take channels-last strides (dimension 1 innermost)
and refuse the same data described as NCHW. Pointwise operations do not care which axis is called the channel, so
every operand is described with its axes relabelled: the output's outermost axis first, its innermost (stride 1)
second, the rest in decreasing stride order, with unit dimensions in front up to four dimensions. An NCHW array is
then the channels-last array (N, W, C, H), an NHWC one itself; broadcast operands (a (1, C, 1, 1) bias) get the same
relabelling. Where every operand has the output's shape and strides and fills its memory, every operand is described
as one flat channels-last (1, 64, n / 64, 1) array instead: on the H200 cuDNN 9.19's pointwise engine runs ReLU
there 7 % faster than on NHWC (N, 256, H, W) data.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from cudnn_py import engine_choice, recording
from cudnn_py.errors import InvalidValueError
from cudnn_py.dtypes import as_numpy_dtype
from cudnn_py.memory import DeviceArray
from cudnn_py.strided import memory_order

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
    """Forget the prepared calls of ``handle`` that run an operation module's graph path (their graphs are built again
    on their next call; the plans stay in the plan cache: :func:`cudnn_py.graph.plan_cache_clear`)."""
    runner.cache_clear(handle, ROUTE)


class GraphPathRefused(InvalidValueError):
    """A configuration the graph path refuses before cuDNN is asked (``engine="auto"`` runs legacy instead)."""


def dispatch(engine: str, handle: Any, key: Hashable | None, legacy: Callable[[], object],
             graph: Callable[[bool], object], *, mutated: Sequence | None = None, static: str = "graph",
             measure: bool = True) -> str:
    """Run one call on ``engine`` and answer the engine that ran it: the one engine-choice protocol of the operation
    families. ``legacy()`` runs the legacy C call; ``graph(auto)`` the graph path (answering False, or raising
    :class:`GraphPathRefused` / :class:`~cudnn_py.graph.GraphNotSupportedError`, where it does not take the call).

    'legacy' and 'graph' run that engine (the graph's refusal raised); 'auto' runs the engine
    :mod:`cudnn_py.engine_choice` keeps for ``key`` on ``handle``, measured on its first call (``mutated``: the
    arrays the call writes and may read; both None: the prepared call's own, from its declaration), the graph falling
    back to the legacy call where it refuses; with ``measure`` False (a call that cannot be repeated), ``static``'s
    engine without measuring."""
    if engine == "legacy":
        legacy()
        return engine
    if engine == "graph":
        if graph(False) is False:  # nothing ran: never silently
            raise GraphPathRefused("engine='graph' does not take this call (use engine='legacy' or 'auto')")
        return engine
    if engine != "auto":
        engine_arg(engine)
    refused = (GraphPathRefused, GraphNotSupportedError)
    if not measure:
        return engine_choice.run_static(static, legacy, lambda: graph(True), refused)
    outer, _builds.memo = _builds.memo, {}  # the engine choice runs the graph several times: built once
    try:
        return engine_choice.run(handle, key, legacy, lambda: graph(True), mutated=mutated, static=static,
                                 refused=refused)
    finally:
        _builds.memo = outer


class _Builds(threading.local):
    #: what :func:`run_graph` built during the :func:`dispatch` under way (its graphs, by configuration), for the
    #: engine choice's repeated runs of one call (None outside one): no cache outlives the call
    memo: dict | None = None


_builds = _Builds()


def repeatable(run: Callable[[], object]) -> Callable[[], object]:
    """``run`` (a graph path) as an engine the engine choice may run several times: the first run builds, plans and
    runs the graph; a later one queues again the plan executions the first queued, on the same addresses, as the
    call's prepared call repeats them (so the measurement times what a repeat call costs); answers the first run's
    answer. A first run that queued anything but plan executions, or spoiled its recording, runs again in full.
    Only for a path whose executions bind the call's arrays and the outputs it answers alone (no scratch buffer of
    its own, which would be gone by the next run)."""
    first: list = []

    def again() -> object:
        if first:
            for r, ptrs in first[0]:  # each as its validated call ran it: the workspace fetched, the step recorded
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
    """:func:`dispatch` without measuring, for a caller whose legacy call follows inline: whether the graph path
    ran (False: ``engine`` is 'legacy', or 'auto' and the graph refused)."""
    return dispatch(engine, None, None, lambda: None, graph, measure=False) == "graph"


def graph_dtype(dtype, what: str) -> None:
    """Refuse data types the pointwise graph engines lack."""
    if dtype in _GRAPH_NP:
        return
    if np.dtype(dtype).name not in GRAPH_DTYPES:
        raise GraphPathRefused(f"engine='graph': {what} has dtype {np.dtype(dtype)}; the graph path takes float16, "
                               f"bfloat16 and float32 (use engine='legacy' for float64)")


# ---------------------------------------------------------------- layout: channels-last relabelling

def _relabel(out: DeviceArray) -> tuple[int, tuple[int, ...]]:
    """(unit dims prepended, axis permutation) that present ``out`` with its innermost axis second."""
    pad = max(0, 4 - out.ndim)
    order = memory_order((1,) * pad + out.shape, (0,) * pad + out.strides)
    return pad, (order[0], order[-1], *order[1:-1])


def _view(a: DeviceArray, pad: int, perm) -> DeviceArray:
    """``a`` with ``pad`` unit dims in front and its axes permuted (no copy; ``a`` itself when nothing moves or
    ``perm`` is None)."""
    if perm is None or (not pad and perm == tuple(range(a.ndim))):
        return a
    shape, strides = (1,) * pad + a.shape, (1,) * pad + a.strides
    return DeviceArray.from_parts(a.ptr, tuple(shape[p] for p in perm), a.dtype, tuple(strides[p] for p in perm),
                            a.device_id, a, None)


#: the channel count of the flat view (:func:`_flat`): cuDNN 9.19's pointwise engine on the H200 runs fastest with 64
#: channels innermost (ReLU fp16 over 25.7M elements: 0.0285 ms, against 0.0306 ms for C = 256 and 0.063 for C = 8)
_FLAT_C = 64


def _flat(ref: DeviceArray, arrays) -> Callable[[DeviceArray], DeviceArray] | None:
    """A view function presenting every array as one flat channels-last (1, _FLAT_C, n / _FLAT_C, 1) array, or None.

    Possible when every array has ``ref``'s shape and strides and ``ref`` is dense (its elements fill its memory:
    no broadcast, no gaps), so that an elementwise graph on the arrays is the same graph on their memory in order.
    Taken only where all have ``ref``'s dtype: a float32 -> float16 conversion ran 10 % slower so (0.0476 against
    0.0433 ms at 32x256x56x56 on the H200)."""
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
    """The strides a graph tensor gets for view ``a``: packed channels-last where ``a`` is (unit dims made
    consistent), else ``a``'s own (cuDNN decides whether an engine takes them)."""
    packed = packed_strides(a.shape, "NHWC")
    if all(p == s for p, s, n in zip(packed, a.strides, a.shape) if n > 1):
        return packed
    return a.strides


def _pointwise_layouts(inputs, views, ov: DeviceArray) -> None:
    """Refuse what cuDNN 9.19's pointwise engines have no engine for (measured on Hopper), before cuDNN is asked:
    a full-size operand in another memory order than the output (a layout change), and a broadcast operand that
    varies along another dim than the channel (the innermost, after relabelling; e.g. a (1, C, 1, 1) bias of NCHW
    data, or a (1, C, 1, W) one)."""
    want = _graph_strides(ov)
    for (role, _), v in zip(inputs, views):
        if v.shape == ov.shape and _graph_strides(v) != want:
            raise GraphPathRefused(f"engine='graph': {role} is stored in another memory order than the output; "
                                   f"cuDNN's pointwise engines do not change layouts (use engine='legacy')")
        if any(a < b for a, b in zip(v.shape, ov.shape)) and (v.shape[0] != 1 or any(n != 1 for n in v.shape[2:])):
            raise GraphPathRefused(f"engine='graph': {role} broadcasts along a dim other than the channel of "
                                   f"channels-last memory; cuDNN's pointwise engines broadcast per channel only "
                                   f"(use engine='legacy')")


# ---------------------------------------------------------------- the graph run

def run_graph(handle, name: str, params: tuple, inputs: Sequence[tuple[str, DeviceArray]],
              outputs: Sequence[tuple[str, DeviceArray]], build: Callable, *, auto: bool = False,
              relabel: bool = True, layout_of: DeviceArray | None = None, autotune: bool = False) -> bool:
    """Run ``build``'s graph on these arrays through the plan cache, the graph built on this call (the validated path
    of a prepared call, whose repeat calls replay the plan's execution), or once for the repeated runs of a
    :func:`dispatch`; False when ``auto`` and the graph path refuses it or cuDNN has no engine for it (nothing ran).

    ``inputs`` / ``outputs``: (role, array) pairs (an input may also be an output: read, then written, as beta
    blending and running statistics do); ``params``: the hashable settings ``build`` depends on.
    ``build(graph, {role: tensor}, out_shape)`` adds the operations and returns the result, or a tuple of results
    in ``outputs``' order (one that is an input, or of another shape than its array, is copied out by an identity
    operation). ``relabel``: describe the arrays in the channels-last relabelled order of ``layout_of`` (default
    the first output) - for graphs of pointwise operations and reductions, which do not care which axis is the
    channel; tensors and ``out_shape`` are then in that order. Where every array has the output's shape and
    strides and is dense, they are instead all described as one flat channels-last (1, 64, n / 64, 1) array (cuDNN
    9.19's pointwise engine runs fastest so); ``build`` must then be elementwise, as pointwise graphs and
    reductions to the same shape are. Without ``relabel`` the arrays are described as they are.
    ``autotune``: on the first call, time the plans of heuristics modes A and B and the fallback list on these
    arrays and keep the fastest (the outputs are written meanwhile) instead of mode A's first plan.
    """
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
        tensors = [*ts.values(), *outs]
        runner.plan_graph(g, handle, dict(zip(ts.values(), views)), dict(zip(outs, ovs)), autotune)
        return runner.Runner(g.plan, handle, tensors), view

    memo = _builds.memo
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
    r.run([view(a) for _, a in (*inputs, *outputs)])  # validated: a repeat call is the prepared call's replay
    return True


def blend(g: Graph, res: Tensor, t: dict, alpha: float, beta: float, prior: str = "prior") -> Tensor:
    """``alpha * res + beta * t[prior]`` with the multiplications and the add left out where they are no-ops."""
    if alpha != 1.0:
        res = g.scale(res, float(alpha))
    if beta != 0.0:
        res = g.add(t[prior] if beta == 1.0 else g.scale(t[prior], float(beta)), res)
    return res
