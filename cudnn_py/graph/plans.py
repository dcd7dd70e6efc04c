"""Engine heuristics, engine configs with their knobs and notes, execution plans, autotuning and the plan cache.

:func:`build_plans` and :func:`autotune` read and write the opt-in on-disk store of :mod:`cudnn_py.graph.plan_store`.
Plans are built one at a time (docs/tuning.md says why; a model sweep builds in :mod:`cudnn_py.tuning.workers`).
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Sequence

from cudnn_py.clib import loader as _loader, recording
from cudnn_py import capi
from cudnn_py.calls.prepared import forget
from cudnn_py.core.args import INT64_MAX, enum_member, int_arg
from cudnn_py.errors import CudnnBadParamError, CudnnError, CudnnNotSupportedError, InvalidTypeError, InvalidValueError
from cudnn_py.core.caches import handle_cache
from cudnn_py.core.streams import fastest_first, get_device, held_ms

from . import plan_store
from .descriptors import BackendDescriptor
from .errors import GraphNotSupportedError
from .execute import CudaGraph, Executor, ordered_pack
from .runner import PLANS as _PLANS, TUNED

__all__ = ["EngineConfig", "KnobInfo", "Plan", "heuristics", "engine_configs", "engine_config", "build_plans",
           "autotune", "time_plan", "plan_from_json", "plan_cache_clear", "plan_cache_info", "scratch_layout",
           "HEUR_MODES", "l2_flush"]

HEUR_MODES = {"A": capi.CUDNN_HEUR_MODE_A, "B": capi.CUDNN_HEUR_MODE_B, "FALLBACK": capi.CUDNN_HEUR_MODE_FALLBACK,
              "INSTANT": capi.CUDNN_HEUR_MODE_INSTANT}
_KNOB_COUNT = int(capi.CUDNN_KNOB_TYPE_COUNTS)
_NOTE_MAX = 16
_JSON_MAX = 16 << 20


def _mode_name(m) -> str:
    if isinstance(m, capi.cudnnBackendHeurMode_t):
        return m.name[len("CUDNN_HEUR_MODE_"):]
    name = str(m).upper()
    if name not in HEUR_MODES:
        raise InvalidValueError(f"heuristic mode must be one of {', '.join(HEUR_MODES)}, got {m!r}")
    return name


def _unsupported(graph, modes, reasons: list[tuple[str, str]]) -> GraphNotSupportedError:
    return GraphNotSupportedError(graph.name, [op.describe() for op in graph.ops], list(modes), reasons)


def _reason(e: Exception) -> str:
    if isinstance(e, CudnnError):
        st = getattr(e.status, "name", e.status)
        return f"{st}: {e.reason}" if e.reason else str(st)
    return f"{type(e).__name__}: {e}"


@dataclass(frozen=True)
class KnobInfo:
    """One tunable knob of an engine: its type and allowed range (min..max by stride)."""
    type: capi.cudnnBackendKnobType_t
    minimum: int
    maximum: int
    stride: int


@dataclass(eq=False)
class EngineConfig:
    """A finalized engine config: the engine's global index, chosen knobs, notes, and where it came from."""
    descriptor: BackendDescriptor
    source: str = ""                     # 'heuristics A #0', 'engine 12', ...
    global_index: int = -1
    knobs: dict = field(default_factory=dict)            # knob type -> value
    numerical_notes: tuple = ()
    behavior_notes: tuple = ()
    knob_infos: tuple = ()

    @classmethod
    def from_descriptor(cls, cfg: BackendDescriptor, source: str) -> "EngineConfig":
        ec = cls(cfg, source)
        try:
            eng = cfg.get("CUDNN_ATTR_ENGINECFG_ENGINE")
            ec.global_index = eng.get("global_index")
            ec.numerical_notes = tuple(eng.get("numerical_note", count=_NOTE_MAX))
            ec.behavior_notes = tuple(eng.get("behavior_note", count=_NOTE_MAX))
            ec.knob_infos = tuple(KnobInfo(k.get("type"), k.get("minimum_value"), k.get("maximum_value"),
                                           k.get("stride")) for k in eng.get("knob_info", count=_KNOB_COUNT))
            for ch in cfg.get("knob_choices", count=_KNOB_COUNT):
                ec.knobs[ch.get("knob_type")] = ch.get("knob_value")
        except CudnnError:  # introspection is best effort; the config itself is valid
            pass
        return ec

    @property
    def tag(self) -> str:
        """``eng<index>`` plus ``k<knob>=<value>`` per knob (the same shape cudnn-frontend prints)."""
        knobs = "_".join(f"k{int(t)}={v}" for t, v in sorted(self.knobs.items()))
        return f"eng{self.global_index}" + (f"_{knobs}" if knobs else "")

    @property
    def is_deterministic(self) -> bool:
        """Whether cuDNN does not note the engine as non-deterministic."""
        return capi.CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC not in self.numerical_notes

    @property
    def needs_runtime_compilation(self) -> bool:
        return capi.CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION in self.behavior_notes

    def notes(self) -> list[str]:
        """The engine's numerical and behaviour notes as short lower-case names."""
        return [n.name.split("_NOTE_")[-1].lower() for n in (*self.numerical_notes, *self.behavior_notes)
                if hasattr(n, "name")]

    def __repr__(self):
        return f"<EngineConfig {self.tag} from {self.source} notes={self.notes()}>"


def heuristics(graph, handle, mode="A") -> list[EngineConfig]:
    """Engine configs cuDNN's heuristics rank for ``graph`` in ``mode``, best first."""
    name = _mode_name(mode)
    heur = BackendDescriptor("ENGINEHEUR", operation_graph=graph.lower(handle), mode=HEUR_MODES[name]).finalize()
    return [EngineConfig.from_descriptor(c, f"heuristics {name} #{i}") for i, c in enumerate(heur.get("results"))]


def engine_config(graph, handle, global_index: int, knobs: dict | None = None) -> EngineConfig:
    """The config of engine ``global_index`` for ``graph`` with ``knobs`` ({knob type: value}, a knob type as a
    member, its value or its name, ``'SPLIT_K'`` or ``'CUDNN_KNOB_TYPE_SPLIT_K'``; else defaults)."""
    knobs = {enum_member(capi.cudnnBackendKnobType_t, k, "CUDNN_KNOB_TYPE_", "knob type"):
             int_arg(v, f"knob {k!r}", -INT64_MAX - 1, INT64_MAX) for k, v in (knobs or {}).items()}
    eng = BackendDescriptor("ENGINE", operation_graph=graph.lower(handle), global_index=int(global_index)).finalize()
    cfg = BackendDescriptor("ENGINECFG", engine=eng)
    if knobs:
        choices = [BackendDescriptor("KNOB_CHOICE", knob_type=k, knob_value=v).finalize() for k, v in knobs.items()]
        cfg.set("knob_choices", choices)
    cfg.finalize()
    ec = EngineConfig.from_descriptor(cfg, f"engine {global_index}")
    ec.knobs.update(knobs)
    return ec


def engine_configs(graph, handle) -> tuple[list[EngineConfig], list[tuple[str, str]]]:
    """Every engine that accepts ``graph`` (default knobs), and (engine, reason) for those that do not."""
    ok, bad = [], []
    for i in range(graph.lower(handle).get("engine_global_count")):
        try:
            ok.append(engine_config(graph, handle, i))
        except CudnnError as e:
            bad.append((f"engine {i}", _reason(e)))
    return ok, bad


def l2_flush(handle) -> Callable[[], None]:
    """A callable queuing on ``handle``'s stream a write of twice the device's L2 cache size: before a timed sample,
    it leaves none of the sample's data in L2 (:func:`time_plan`'s ``flush``)."""
    from cudnn_py.core.memory import empty
    l2 = int(get_device(handle.device).properties.l2_cache_size or 0) or 64 << 20
    buf = empty((2 * l2 // 4,), "float32", stream=handle.stream, device=handle.device)

    def flush() -> None:
        buf.fill_(0.0, handle.stream)
    return flush


_SCRATCH_ALIGN = 256
#: executions per timed sample of :func:`time_plan` (a few microseconds each are below the events' resolution)
SAMPLE_RUNS = 3


def scratch_layout(graph, cudnn_bytes: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """Where a graph's scratch tensors (an operation's ``scratch_tensors()``: contents on entry do not matter) go:
    in the workspace after cuDNN's own ``cudnn_bytes``, 256-byte aligned, so nobody binds them. Returns
    (((uid, byte offset), ...), total workspace bytes)."""
    places, end = [], cudnn_bytes
    for op in getattr(graph, "ops", ()):
        for t in getattr(op, "scratch_tensors", tuple)():
            off = -(-end // _SCRATCH_ALIGN) * _SCRATCH_ALIGN
            span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.strides))
            places.append((t.uid, off))
            end = off + span * t.np_dtype.itemsize
    return tuple(places), end


class Plan:
    """A finalized execution plan (``CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR``) bound to the graph it runs.

    ``workspace_size``: cuDNN's own workspace (``cudnn_workspace_size``) plus the graph's scratch tensors, placed at
    ``scratch`` ((uid, byte offset), ...) (:func:`scratch_layout`). ``held``: whether :func:`time_plan` holds its
    samples' stream (False once a held sample timed out: :func:`~cudnn_py.core.streams.held_ms`)."""

    held = True

    def __init__(self, descriptor: BackendDescriptor, config: EngineConfig | None, graph=None, tag: str = ""):
        if not descriptor.finalized:
            raise InvalidValueError("Plan needs a finalized EXECUTION_PLAN descriptor (call .finalize() first)")
        self.descriptor, self.config, self.graph, self._tag = descriptor, config, graph, tag
        self.cudnn_workspace_size = int(descriptor.get("workspace_size"))
        self.scratch, self.workspace_size = scratch_layout(graph, self.cudnn_workspace_size)
        self._executors: dict = {}

    @classmethod
    def build(cls, graph, handle, config: EngineConfig) -> "Plan":
        d = BackendDescriptor("EXECUTION_PLAN", handle=handle, engine_config=config.descriptor).finalize()
        return cls(d, config, graph)

    def bind(self, graph) -> "Plan":
        """This plan for another Graph object of the same structure (shares the cuDNN plan)."""
        p = copy.copy(self)
        p.graph, p._executors = graph, {}
        return p

    @property
    def tag(self) -> str:
        return self.config.tag if self.config else (self._tag or "deserialized")

    def to_json(self) -> str:
        """cuDNN's JSON serialisation of the plan (load with :func:`plan_from_json`)."""
        return self.descriptor.get("json_representation")

    def to_bytes(self) -> bytes:
        """:meth:`to_json` as UTF-8 bytes."""
        return self.to_json().encode()

    def executor(self, handle, *tensors, identity_cache: int = 4):
        """A cached fast callable binding arrays positionally (see :class:`~cudnn_py.graph.execute.Executor`)."""
        key = (id(handle), tuple(getattr(t, "uid", t) for t in tensors), identity_cache)
        return self._executors.get(key) or self._executors.setdefault(
            key, Executor(self, handle, tensors, identity_cache))

    def execute(self, handle, variant_pack: dict, workspace=None) -> None:
        """Run on ``handle``'s stream with ``variant_pack`` {tensor or name or uid: array} (through the cached
        executor of that order)."""
        io, arrays = ordered_pack(self, variant_pack)
        ex = self.executor(handle, *io)
        if workspace is None:
            ex(*arrays)
        else:
            ex.with_workspace(workspace, *arrays)

    def populate_cuda_graph(self, handle, variant_pack: dict, workspace=None):
        """A :class:`~cudnn_py.graph.execute.CudaGraph` recorded from this plan (cuDNN >= 9.5 engines that
        support the native CUDA graph API)."""
        return CudaGraph(self, handle, variant_pack, workspace)

    def __repr__(self):
        return f"<Plan {self.tag} workspace={self.workspace_size}B>"


def plan_from_json(handle, text: str | bytes, graph=None, tag: str = "") -> Plan:
    """Load a plan serialised by :meth:`Plan.to_json` (same cuDNN version and GPU). ``graph`` names its tensors
    and is what arrays are checked against, so it must be the graph the plan was made from (cuDNN cannot tell);
    ``tag`` names where it came from in errors and :attr:`Plan.tag`. Raises ValueError for text that is not a JSON
    object (checked before cuDNN sees it) and where cuDNN refuses it (a plan of another cuDNN or GPU)."""
    where = f" ({tag})" if tag else ""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as e:
            raise InvalidValueError(f"plan JSON{where} is not UTF-8: {e}") from None
    if not isinstance(text, str):
        raise InvalidTypeError(f"plan JSON must be str or bytes, got {type(text).__name__}")
    if len(text) > _JSON_MAX:
        raise InvalidValueError(f"plan JSON{where} is {len(text)} characters; a plan's is far below {_JSON_MAX}")
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidValueError(f"plan JSON{where} is not valid JSON (truncated or corrupt?): {e}") from None
    if not isinstance(parsed, dict):
        raise InvalidValueError(f"plan JSON{where} must be a JSON object, got {type(parsed).__name__}")
    d = BackendDescriptor("EXECUTION_PLAN", handle=handle)
    try:
        d.set("json_representation", text).finalize()
    except (CudnnBadParamError, CudnnNotSupportedError) as e:
        raise InvalidValueError(f"plan JSON{where} was not accepted by cuDNN {_loader.library().version_string} (made "
                                f"by another cuDNN version or GPU?): {_reason(e)}") from e
    return Plan(d, None, graph, tag)


def _stored(graph, handle, options: tuple) -> list[tuple[Plan, float | None]] | None:
    """The stored plans for ``graph`` and ``options``, the graph frozen (None if none, or if cuDNN refuses one)."""
    entries = plan_store.load(graph.key(), options, handle)
    if not entries:
        return None
    try:
        plans = [(plan_from_json(handle, e["json"], graph, e["tag"] + " (stored)"), e.get("ms")) for e in entries]
        graph.freeze()  # as lowering would: the plans fit this structure, so it must not change under them
        return plans
    except (CudnnError, ValueError) as e:
        import warnings
        warnings.warn(f"plan cache: a stored plan was refused ({e}); building anew", RuntimeWarning, stacklevel=3)
        return None


def _store(graph, handle, options: tuple, timed: Sequence[tuple[Plan, float | None]]) -> None:
    try:
        entries = [{"json": p.to_json(), "tag": p.tag, "ms": ms} for p, ms in timed]
    except CudnnError:  # an engine whose plans cuDNN cannot serialise
        return
    plan_store.save(graph.key(), options, handle, entries)


def _plan_cache(handle) -> tuple[dict, dict]:
    """The handle's plans (dropped when it closes) and its plan-cache lookup counts (``"hits"``, ``"misses"``)."""
    return handle_cache(handle, _PLANS), handle_cache(handle, "graph.plans.lookups", maxsize=2)


def plan_cache_clear(handle) -> None:
    """Forget ``handle``'s cached plans and autotuned plan orders (and the prepared calls built on them) and reset
    its hit/miss counts."""
    for cache in (*_plan_cache(handle), handle_cache(handle, TUNED)):
        cache.clear()
    forget(handle, _PLANS)


def plan_cache_info(handle) -> dict:
    """``{"entries", "hits", "misses"}``: the plan lists ``handle`` has cached, and its :func:`build_plans` lookups
    that hit and missed since it was made or last cleared."""
    plans, counts = _plan_cache(handle)
    return {"entries": len(plans), "hits": counts.get("hits", 0), "misses": counts.get("misses", 0)}


def _candidates(graph, handle, modes, deterministic, runtime_compilation, reasons):
    excluded = {i: f"{op.name}: {why}" for op in reversed(graph.ops)  # the first operation's reason wins
                for i, why in op.excluded_engines().items()}
    for name in modes:  # checked names
        try:
            cfgs = heuristics(graph, handle, name)
        except CudnnError as e:
            reasons.append((f"heuristics {name}", _reason(e)))
            continue
        if not cfgs:
            reasons.append((f"heuristics {name}", "returned no engine configs"))
        for cfg in cfgs:
            why = ("non-deterministic (deterministic=True)" if deterministic and not cfg.is_deterministic else
                   "needs runtime compilation (runtime_compilation=False)"
                   if not runtime_compilation and cfg.needs_runtime_compilation else excluded.get(cfg.global_index))
            if why:
                reasons.append((f"{cfg.tag} ({cfg.source})", "skipped: " + why))
                continue
            yield cfg


def build_plans(graph, handle, modes: Sequence[str] = ("A", "FALLBACK"), *, policy: str = "first",
                deterministic: bool = False, runtime_compilation: bool = True, max_plans: int | None = None,
                cache: bool = True) -> list[Plan]:
    """Plans for ``graph``: ``policy='first'`` stops at the first config that builds, ``'all'`` builds every
    candidate (deduplicated by engine tag). Raises :class:`GraphNotSupportedError` when none builds."""
    if policy not in ("first", "all"):
        raise InvalidValueError(f"policy must be 'first' or 'all', got {policy!r}")
    modes = tuple(_mode_name(m) for m in modes)
    key = (graph.key(), modes, policy, deterministic, runtime_compilation, max_plans)
    cached, counts = _plan_cache(handle)
    recording.uses(_PLANS)
    outcome = "hits" if cache and key in cached else "misses"
    counts[outcome] = counts.get(outcome, 0) + 1  # a diagnostic: two threads may now and then count once
    if outcome == "hits":
        graph.freeze()  # as lowering would: the plans fit this structure, so it must not change under them
        return [p.bind(graph) for p in cached[key]]
    options = ("build", modes, policy, deterministic, runtime_compilation, max_plans)
    stored = _stored(graph, handle, options) if cache else None
    if stored:
        cached[key] = [p for p, _ in stored]
        return list(cached[key])
    try:
        graph.lower(handle)
    except (CudnnBadParamError, CudnnNotSupportedError) as e:
        raise _unsupported(graph, [], [("finalizing the operation graph", _reason(e))]) from e
    reasons: list[tuple[str, str]] = []
    plans: list[Plan] = []
    seen: set[str] = set()
    fresh = (c for c in _candidates(graph, handle, modes, deterministic, runtime_compilation, reasons)
             if not (c.tag in seen or seen.add(c.tag)))  # type: ignore[func-returns-value]
    for cfg in fresh:   # 'first' stops at the first that builds, 'all' once max_plans have built
        try:
            plans.append(Plan.build(graph, handle, cfg))
        except CudnnError as e:
            reasons.append((f"{cfg.tag} ({cfg.source})", _reason(e)))
        if (policy == "first" and plans) or (max_plans and len(plans) >= max_plans):
            break
    plans = plans[:max_plans] if max_plans else plans
    if not plans:
        raise _unsupported(graph, modes, reasons)
    if cache:
        cached[key] = plans
        _store(graph, handle, options, [(p, None) for p in plans])
    return plans


def time_plan(plan: Plan, handle, variant_pack: dict, *, warmup: int = 2, iters: int = 5,
              flush: Callable[[], None] | None = None) -> float:
    """Median milliseconds per execution of ``plan`` on ``variant_pack``, over ``iters`` samples after ``warmup``
    untimed executions. A sample is :data:`SAMPLE_RUNS` executions between CUDA events on the handle's stream,
    held until all are queued (:func:`~cudnn_py.core.streams.timer` ``hold=True``): the GPU's time, neither an idle
    GPU's launch latency nor the host's cost of queuing tiny executions. ``flush`` (an :func:`l2_flush`): called
    before each sample, outside the events; a sample is then one execution with its data evicted from the L2 cache
    (as in a network's step) instead of left there by the one before."""
    return _sample(plan, handle, variant_pack, warmup, iters, flush)[0]


def _sample(plan: Plan, handle, variant_pack: dict, warmup: int, iters: int,
            flush: Callable[[], None] | None = None) -> tuple[float, float]:
    """(GPU, host) median milliseconds per execution of ``plan``: :func:`time_plan`'s samples, and the host's time
    to queue each sample's executions (perf_counter around them, the stream held: no waiting on the GPU)."""
    io, arrays = ordered_pack(plan, variant_pack)
    run = plan.executor(handle, *io)
    for _ in range(warmup):
        run(*arrays)
    runs = SAMPLE_RUNS if flush is None else 1
    gpu: list[float] = []
    host: list[float] = []

    def queue() -> None:
        for _ in range(runs):
            run(*arrays)
    for _ in range(iters):
        if flush is not None:
            flush()
        ms, queued, plan.held = held_ms(handle.stream, queue, plan.held)
        gpu.append(ms / runs if ms is not None else float("nan"))
        host.append(queued / runs)
    return sorted(gpu)[len(gpu) // 2], sorted(host)[len(host) // 2]


def autotune(graph, handle, variant_pack: dict, *, modes=("A", "B", "FALLBACK"), warmup: int = 2, iters: int = 5,
             **filters) -> list[tuple[Plan, float | None]]:
    """Time every buildable plan of ``modes`` on ``variant_pack`` (:func:`time_plan`) and make the fastest
    ``graph.plans[0]`` (where it is host-bound: of the plans within :data:`~cudnn_py.core.streams.TIE` of its GPU
    time, the one whose execution costs the host least: :func:`~cudnn_py.core.streams.fastest_first`). Returns
    [(plan, GPU ms)], that plan first, then the others fastest first."""
    if "cache" in filters:
        raise InvalidTypeError("autotune always builds every plan anew (and keeps its timings in the plan store); "
                               "it takes no cache=")
    # "held", "host-ties": keys apart the store's entries timed the older ways
    options = ("autotune", "held", "host-ties", tuple(_mode_name(m) for m in modes), tuple(sorted(filters.items())))
    results: Sequence[tuple[Plan, float | None]] | None = _stored(graph, handle, options)
    if not results:
        timed: list[tuple[Plan, float, float]] = []
        for plan in build_plans(graph, handle, modes, policy="all", cache=False, **filters):
            try:
                timed.append((plan, *_sample(plan, handle, variant_pack, warmup, iters)))
            except CudnnError:
                continue
        if not timed:
            raise _unsupported(graph, modes, [("autotune", "every plan failed to execute")])
        results = fastest_first(timed)
        _store(graph, handle, options, results[:4])  # the fastest few: loading a plan can cost a compilation
    graph.plans = [p for p, _ in results]
    return list(results)
