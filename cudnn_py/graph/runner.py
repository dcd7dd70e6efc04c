"""The one runner behind every graph call: plan, binding order, constants, variant packs, workspace.

:class:`Runner` makes every ``VARIANT_PACK``; :meth:`Runner.run_pointers` is the sink a prepared call repeats.
:func:`plan_graph` builds or autotunes a graph; :func:`new_output` makes every new DeviceArray output of a call.
"""
from __future__ import annotations

import array
import ctypes
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from cudnn_py.clib import binding as _binding, loader as _loader, nvtx, recording
from cudnn_py import capi
from cudnn_py.clib.status import status_error
from cudnn_py.core.caches import handle_cache
from cudnn_py.errors import ClosedError, InvalidTypeError, InvalidValueError
from cudnn_py.core.memory import DeviceArray, Output, array_signature, as_array
from cudnn_py.core.strided import sharing

from .descriptors import destroy_descriptor

__all__ = ["Runner", "VariantPack", "plan_graph", "autotune_graph",
           "check_signature", "handle_device", "workspace_pointer", "plan_pointer", "plan_bindings",
           "bound_tensors", "scratch_pointers", "new_output", "PLANS", "TUNED"]

#: variant packs a runner keeps (a new set of addresses beyond it starts the cache afresh)
MAX_PACKS = 256
_BARE: dict[str, Any] = {}
_VARIANT_PACK = int(capi.CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
_UIDS, _POINTERS, _WORKSPACE = (int(capi.CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
                                int(capi.CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS),
                                int(capi.CUDNN_ATTR_VARIANT_PACK_WORKSPACE))
_INT64, _VOID_PTR = int(capi.CUDNN_TYPE_INT64), int(capi.CUDNN_TYPE_VOID_PTR)


def _bare(name: str) -> Callable[..., int]:
    """cuDNN function ``name`` as a bare ctypes function returning its status, loaded once: no errcheck and no
    argtypes (0.1 to 0.5 us less a call), so only ctypes objects, None or ints that fit a C int may be passed."""
    fn = _BARE.get(name)
    if fn is None:
        cdll = _loader.library().cdll
        fn = cdll._FuncPtr((name, cdll))
        fn.restype = ctypes.c_int
        _BARE[name] = fn
    return fn


def _check(status: int, function: str) -> None:
    if status:
        raise status_error(function, status)


class VariantPack:
    """A finalized ``VARIANT_PACK`` of the tensors' ``uids`` (ints or a ``c_int64`` array), their ``pointers`` and the
    ``workspace`` address (None or 0: none), made in five bare calls (docs/graph_operations.md says why); :attr:`ptr`
    is what ``cudnnBackendExecute`` gets. Destroyed when collected."""

    __slots__ = ("ptr",)

    def __init__(self, uids: Sequence[int] | ctypes.Array, pointers: Sequence[int | None], workspace: int | None):
        n = len(uids)
        if len(pointers) != n:
            raise InvalidValueError(f"variant pack: {n} unique ids but {len(pointers)} data pointers")
        global _PACK_CALLS
        create, set_attr, finalize = _PACK_CALLS = _PACK_CALLS or (
            _bare("cudnnBackendCreateDescriptor"), _bare("cudnnBackendSetAttribute"), _bare("cudnnBackendFinalize"))
        ptr = capi.cudnnBackendDescriptor_t()
        _check(create(_VARIANT_PACK, ctypes.byref(ptr)), "cudnnBackendCreateDescriptor")
        self.ptr = ptr  # destroyed by __del__ from here on, a failing set or finalize included
        _binding.own(ptr, "graph.VariantPack")
        ids = uids if isinstance(uids, ctypes.Array) else (ctypes.c_int64 * n)(*uids)
        words = array.array("Q", [p or 0 for p in pointers])
        words.append(workspace or 0)
        base = words.buffer_info()[0]
        count = _COUNTS.get(n) or _COUNTS.setdefault(n, ctypes.c_int64(n))
        _check(set_attr(ptr, _UIDS, _INT64, count, ids)
               or set_attr(ptr, _POINTERS, _VOID_PTR, count, ctypes.c_void_p(base))
               or set_attr(ptr, _WORKSPACE, _VOID_PTR, _COUNTS[1], ctypes.c_void_p(base + 8 * n)),
               "cudnnBackendSetAttribute")
        _check(finalize(ptr), "cudnnBackendFinalize")

    def __del__(self) -> None:
        ptr = getattr(self, "ptr", None)  # unset where __init__ refused before creating one
        if ptr is not None:
            destroy_descriptor(ptr)


#: the bare cuDNN calls a variant pack is made with, loaded by the first pack (kept: 0.2 us less a pack than _bare)
_PACK_CALLS: tuple = ()
#: element counts passed to cudnnBackendSetAttribute, by value (never written)
_COUNTS: dict[int, ctypes.c_int64] = {1: ctypes.c_int64(1)}


def handle_device(handle: Any) -> int | None:
    """The device ordinal of ``handle`` (its ``device``: an int or an object with ``device_id``); None for a raw
    ``cudnnHandle_t``."""
    dev = getattr(handle, "device", None)
    return None if dev is None else int(getattr(dev, "device_id", dev))


def check_signature(t: Any, sig: tuple, device: int | None) -> None:
    """Refuse an array signature (shape, strides, dtype, device) that does not fit graph tensor ``t``."""
    shape, strides, dtype, device_id = sig
    if dtype != t.np_dtype:
        raise InvalidTypeError(f"tensor {t.name!r} expects dtype {t.np_dtype}, got an array of dtype {dtype}")
    if shape != t.shape:
        raise InvalidValueError(f"tensor {t.name!r} expects shape {t.shape}, got an array of shape {shape}")
    if strides != t.strides and any(n > 1 and s != u for s, u, n in zip(strides, t.strides, t.shape)):
        raise InvalidValueError(f"tensor {t.name!r} expects strides {t.strides} (elements), got {strides}: "
                                f"pass an array with the graph's layout or build the graph with tensor_like(array)")
    if device is not None and device_id != device:
        raise InvalidValueError(f"tensor {t.name!r}: array is on device {device_id}, the handle on device {device}")


def workspace_pointer(plan: Any, workspace: Any, device: int | None) -> int:
    """The device pointer of a caller's workspace: a device array of at least the plan's workspace size on the
    handle's device, or an int device pointer (taken as is: its size cannot be checked)."""
    if isinstance(workspace, int) and not isinstance(workspace, bool):
        if not workspace and plan.workspace_size:
            raise InvalidValueError(f"the plan ({plan.tag}) needs {plan.workspace_size} bytes of workspace, not NULL")
        return workspace
    ws = as_array(workspace, "workspace", device=device)
    if ws.nbytes < plan.workspace_size:
        raise InvalidValueError(f"workspace has {ws.nbytes} bytes; the plan ({plan.tag}) needs {plan.workspace_size}")
    return ws.ptr


def plan_pointer(plan: Any) -> capi.cudnnBackendDescriptor_t:
    """The plan descriptor's own pointer object (NULL once closed: a holder never passes a freed plan);
    :class:`ClosedError` where it is closed already."""
    ptr = plan.descriptor.ptr
    if ptr is None:
        raise ClosedError(f"the execution plan ({plan.tag}) is closed")
    return ptr


def plan_bindings(plan: Any) -> tuple[list, list]:
    """(graph tensors bound to arrays, by-value scalars) of ``plan``'s variant packs, in the graph's order, scratch
    tensors left out; :class:`InvalidValueError` for a plan without a graph."""
    g = plan.graph
    if g is None:
        raise InvalidValueError("this plan has no graph to name its tensors (load it with plan_from_json(..., graph=))")
    io = g.io_tensors()
    scratch = {uid for uid, _ in getattr(plan, "scratch", ())}
    return [t for t in io if not t.is_by_value and t.uid not in scratch], [t for t in io if t.is_by_value]


def bound_tensors(plan: Any, keys: Sequence) -> list:
    """The plan's I/O tensors in the order ``keys`` name them (Tensors of this graph or one of the same structure,
    names or uids), each once (:class:`InvalidValueError` otherwise)."""
    g, (io, _) = plan.graph, plan_bindings(plan)
    by_uid, got = {t.uid: t for t in io}, []
    for k in keys:
        t = g[k] if isinstance(k, str) else k
        if hasattr(t, "graph") and t.graph is not g and g[t.name].uid != t.uid:
            raise InvalidValueError(f"tensor {t.name!r} is not part of graph {g.name!r}")
        got.append(by_uid.get(getattr(t, "uid", t), t))
    missing = [t.name for t in io if t not in got]
    if missing or len(got) != len(io):
        why = f"missing {', '.join(missing)}" if missing else "given tensors the graph does not use, or one twice"
        raise InvalidValueError(f"the arrays must bind every I/O tensor of graph {g.name!r} "
                                f"({', '.join(t.name for t in io)}) once: {why}")
    return got


def scratch_pointers(plan: Any, workspace: int | None) -> tuple[list, list]:
    """(uids, device pointers) of the plan's scratch tensors in the workspace at ``workspace``."""
    places = getattr(plan, "scratch", ())
    return [uid for uid, _ in places], [workspace + off for _, off in places]


#: the handle caches of built plans (:mod:`.plans`) and of autotuned plan orders by graph structure (:func:`plan_graph`)
PLANS, TUNED = "graph.plans", "graph.plans.tuned"
#: the name of a handle's cache of :class:`~cudnn_py.core.memory.Output` objects, one per layout its calls allocate
OUTPUTS = "outputs"


def new_output(handle: Any, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None) -> DeviceArray:
    """A new device array of ``shape`` and element ``strides`` (None: C-contiguous) on the handle's device and
    stream, from the handle's :class:`~cudnn_py.core.memory.Output` of that layout."""
    key = (tuple(shape), dtype, None if strides is None else tuple(strides))
    outs = handle_cache(handle, OUTPUTS)
    out = outs.get(key) or outs.setdefault(key, Output(*key))
    return out.on(getattr(handle, "stream", None), handle_device(handle))


class Runner:
    """A plan on a :class:`~cudnn_py.Handle` (or a raw ``cudnnHandle_t``), the graph tensors it binds in order
    (``tensors``: Tensors, names or uids; default the graph's order) and its variant packs by bound addresses.
    ``consts``: arrays bound after the first ``n_inputs`` tensors on every call; ``specs``: what the caller keeps with
    it; ``ready``: events after the constants' uploads, which executions wait for until complete (:meth:`settle`)."""

    def __init__(self, plan: Any, handle: Any, tensors: Sequence = (), consts: Sequence = (),
                 n_inputs: int | None = None, specs: Sequence = (), ready: Sequence = ()):
        io, scalars = plan_bindings(plan)
        io = bound_tensors(plan, tensors) if tensors else io
        self.plan, self.handle, self.tensors = plan, handle, tuple(io)
        self.names = tuple(t.name for t in io)
        self.outputs = frozenset(i for i, t in enumerate(io) if any(t in op.outputs.values() for op in plan.graph.ops))
        self.in_place = plan.graph.in_place_pairs()
        uids = [t.uid for t in io] + [t.uid for t in scalars] + scratch_pointers(plan, 0)[0]
        self.uids = (ctypes.c_int64 * len(uids))(*uids)  # what every pack of this runner sets (built once)
        self.scalar_ptrs = [plan.graph.scalar_pointer(t) for t in scalars]
        self.consts, self.const_ptrs = tuple(consts), tuple(c.ptr for c in consts)
        self.n_inputs = len(io) - len(self.consts) if n_inputs is None else n_inputs
        self.specs, self.ready = tuple(specs), list(ready)
        self.packs: dict = {}    # key -> c_void_p of the variant pack (what C gets)
        self._keep: dict = {}    # key -> the VariantPack owning it
        self.recent: dict = {}   # argument tuple (the same objects) -> c_void_p (Executor's identity cache)
        # the Handle's own pointer object: NULL once the handle is destroyed, so a late call fails cleanly
        self.h = handle.ptr if hasattr(handle, "ptr") else ctypes.c_void_p(ctypes.cast(handle, ctypes.c_void_p).value)
        if not isinstance(self.h, ctypes.c_void_p):  # the raw call has no argtypes: only pointer objects
            raise InvalidTypeError(f"handle must be a cudnn_py.Handle or a cudnnHandle_t, got {type(handle).__name__}")
        self.plan_ptr, self.workspace_size = plan_pointer(plan), plan.workspace_size
        # in an NVTX range where ranges were on when the runner was made
        self.launch = nvtx.wrap("cudnnBackendExecute", _bare("cudnnBackendExecute"))
        ws = getattr(handle, "workspace", None)
        self.ws_get = self._no_workspace if ws is None else ws.get
        self.device = handle_device(handle)

    # -- workspace, errors, the C call ----------------------------------------------------------------------------
    def workspace(self) -> int | None:
        """The handle's workspace pointer for this plan (None where it needs none)."""
        return self.ws_get(self.workspace_size, getattr(self.handle, "stream", None)) if self.workspace_size else None

    def _no_workspace(self, size: int, stream: Any) -> int:
        raise InvalidValueError(f"plan ({self.plan.tag}) needs {size} bytes of workspace and the handle has none: "
                                f"pass workspace=")

    def error(self, status: int) -> Exception:
        """The exception for a failed ``cudnnBackendExecute`` (a closed handle or plan named as such)."""
        if getattr(self.handle, "closed", False):
            return ClosedError("the Handle this plan runs on is closed; build a new plan on an open one")
        if self.plan.descriptor.closed:
            return ClosedError(f"the execution plan ({self.plan.tag}) is closed")
        return status_error("cudnnBackendExecute", status)

    def settle(self) -> None:
        """Make the handle's stream wait for the constants' uploads (:attr:`ready`) not yet known complete."""
        ready = self.ready = [e for e in self.ready if not e.is_done]
        for e in ready:
            self.handle.stream.wait(e)

    def execute(self, vp: ctypes.c_void_p) -> None:
        """``cudnnBackendExecute`` with variant pack ``vp`` on the handle's stream."""
        if self.ready:
            self.settle()
        status = self.launch(self.h, self.plan_ptr, vp)
        if status:
            raise self.error(status)

    # -- variant packs ----------------------------------------------------------------------------------------------
    def pack(self, key: Hashable, ptrs: Sequence[int], wsp: int | None) -> ctypes.c_void_p:
        """The variant pack of ``key``, made from ``ptrs`` and ``wsp`` on a miss (unvalidated)."""
        vp = self.packs.get(key)
        if vp is None:
            desc = self._new_pack(ptrs, wsp)
            if len(self.packs) >= MAX_PACKS:
                for cache in (self.packs, self._keep, self.recent):
                    cache.clear()
            vp = self.packs[key] = ctypes.c_void_p(desc.ptr.value)
            self._keep[key] = desc
        return vp

    def checked_pack(self, arrays: tuple, wsp: int | None) -> ctypes.c_void_p:
        """The variant pack of ``arrays`` (one per bound tensor) by each one's signature and address, a new key
        validated against the tensors first."""
        if len(arrays) != len(self.tensors):
            raise InvalidTypeError(f"executor takes {len(self.tensors)} arrays ({', '.join(self.names)}), got "
                                   f"{len(arrays)}")
        key: tuple = tuple(map(array_signature, arrays, self.names))
        if wsp is not None:
            key += (wsp,)
        vp = self.packs.get(key)
        if vp is None:
            self.check(key[:len(self.tensors)])
            vp = self.pack(key, [p for _, p in key[:len(self.tensors)]], wsp)
        return vp

    def check(self, bound: Sequence[tuple]) -> None:
        """Refuse arrays (``(signature, address)`` per bound tensor) that do not fit their tensors, and an output
        sharing an element with another array but in place where :meth:`~cudnn_py.graph.Graph.in_place_pairs` allows."""
        for t, (sig, _) in zip(self.tensors, bound):
            check_signature(t, sig, self.device)
        # left out: a tensor placed by ragged offsets (on the device), whose memory is not its logical layout's
        arrays = [(p, (0,) if t.ragged_offset is not None else sh, st, dt.itemsize)
                  for t, ((sh, st, dt, _), p) in zip(self.tensors, bound)]
        for o, i in sharing(arrays, self.outputs):
            ot, it = self.tensors[o], self.tensors[i]
            if bound[o] != bound[i] or (it.uid, ot.uid) not in self.in_place:
                why = ("outputs" if i in self.outputs else "output and input") + f" {ot.name} and {it.name}"
                raise InvalidValueError(f"graph {self.plan.graph.name!r}: {why} share memory (an output may only be "
                                        f"the identical view of an input that it alone reads, element by element)")

    def run(self, arrays: Sequence) -> None:
        """Execute on the call's ``arrays`` (inputs, then outputs; the constants added here), each validated."""
        n = self.n_inputs
        bound = list(map(array_signature, [*arrays[:n], *self.consts, *arrays[n:]], self.names))
        self.check(bound)
        self.run_pointers(tuple(p for _, p in bound))

    def run_pointers(self, ptrs: tuple) -> None:
        """Execute with these addresses (the constants' included), unvalidated: for a caller whose key fixed every
        array's layout; the sink a prepared call records."""
        wsp = self.workspace()
        vp = self.pack((wsp, *ptrs), ptrs, wsp)
        if recording.state.rec is None:
            self.execute(vp)
            return
        # recorded for the prepared call: the constants kept as they are, the workspace fetched once per replay
        recording.in_sink(self.execute, vp)
        n, k = self.n_inputs, len(self.consts)
        recording.add(self.replay, (recording.WorkspaceArg(self.workspace_size), *ptrs),
                      tuple(1 + i for i in range(len(ptrs)) if not n <= i < n + k))

    def replay(self, *key: Any) -> None:
        """Execute with workspace ``key[0]`` (None: none) and the addresses after it: a prepared call's step."""
        vp = self.packs.get(key) or self.pack(key, key[1:], key[0])
        if self.ready:
            self.settle()
        status = self.launch(self.h, self.plan_ptr, vp)
        if status:
            raise self.error(status)

    def variant_pack(self, arrays: Sequence, wsp: int | None) -> VariantPack:
        """A new, uncached variant pack of ``arrays`` (validated) and ``wsp``, for a holder that keeps it."""
        bound = list(map(array_signature, arrays, self.names))
        self.check(bound)
        return self._new_pack([p for _, p in bound], wsp)

    def _new_pack(self, ptrs: Sequence[int], wsp: int | None) -> VariantPack:
        """A variant pack of the bound tensors' ``ptrs``, the by-value scalars and the scratch tensors in ``wsp``."""
        return VariantPack(self.uids, [*ptrs, *self.scalar_ptrs, *scratch_pointers(self.plan, wsp)[1]], wsp)

    # -- the executor's hot call ------------------------------------------------------------------------------------
    def caller(self, identity_cache: int = 4) -> Callable[..., None]:
        """``run(*arrays)``: one dict lookup (the last ``identity_cache`` argument tuples of DeviceArrays, by
        identity) and one ctypes call for arrays seen before, else :meth:`checked_pack`."""
        recent, keep = self.recent, max(0, int(identity_cache))
        recent_get, checked, error = recent.get, self.checked_pack, self.error
        ex, h, plan = self.launch, self.h, self.plan_ptr

        def lookup(arrays: tuple, key: tuple, wsp: int | None) -> ctypes.c_void_p:
            vp = checked(arrays, wsp)
            if keep and all(type(a) is DeviceArray for a in arrays):
                if len(recent) >= keep:
                    del recent[next(iter(recent))]
                recent[key] = vp
            return vp

        if not self.workspace_size:  # two closures: the branch a shared one takes costs ~20 ns a call
            def run(*arrays):
                try:
                    vp = recent_get(arrays)
                except TypeError:  # an unhashable argument: the slow path says what is wrong with it
                    vp = None
                if vp is None:
                    vp = lookup(arrays, arrays, None)
                status = ex(h, plan, vp)
                if status:
                    raise error(status)
            return run
        ws_get, size, handle = self.ws_get, self.workspace_size, self.handle

        def run_ws(*arrays):
            wsp = ws_get(size, getattr(handle, "stream", None))
            key = arrays + (wsp,)
            try:
                vp = recent_get(key)
            except TypeError:
                vp = None
            if vp is None:
                vp = lookup(arrays, key, wsp)
            status = ex(h, plan, vp)
            if status:
                raise error(status)
        return run_ws


# -- what the entry points build per configuration ----------------------------------------------------------------
def autotune_graph(g: Any, handle: Any, pack: dict) -> None:
    """Make ``g``'s plan the fastest on ``pack`` (graph tensor -> array; outputs overwritten) of modes A, B and the
    fallback list (which can hold the only fast one: docs/graph_operations.md)."""
    with recording.measuring():
        g.autotune(handle, pack, modes=("A", "B", "FALLBACK"))


def plan_graph(g: Any, handle: Any, inputs: dict, outputs: dict | Sequence, autotune: bool) -> Any:
    """Build ``g`` (the heuristics' first plan, through the plan cache) or with ``autotune`` time every plan on the
    ``inputs`` and ``outputs`` (graph tensor -> array, or the output tensors alone); returns the plan. The timed
    order is kept per handle and graph structure (:data:`TUNED`), so the next graph of that structure is untimed."""
    if not autotune:
        g.build(handle)
        return g.plan
    recording.uses(PLANS)
    tuned, key = handle_cache(handle, TUNED), g.key()
    plans = tuned.get(key)
    if plans is not None:
        g.freeze()  # as lowering would: the plans fit this structure, so it must not change under them
        g.plans = [p.bind(g) for p in plans]
        return g.plan
    outs = outputs if isinstance(outputs, dict) else {
        t: new_output(handle, t.shape, t.np_dtype, t.strides) for t in outputs}
    autotune_graph(g, handle, {**inputs, **outs})
    tuned[key] = list(g.plans)
    return g.plan
