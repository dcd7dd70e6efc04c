"""Executing plans: variant packs cached by their arguments, the fast executor, CUDA graphs.

The hot path (:class:`Executor`) is one dict lookup keyed by the arguments (data pointers, shapes, strides and
dtypes, plus the workspace pointer when the plan needs one) and one ctypes call of ``cudnnBackendExecute`` with
prepared arguments: a repeat call sets no attribute and builds nothing. A call with new arguments validates every
array (dtype, shape, strides, device) against the graph's tensors and finalizes a variant pack.
"""
from __future__ import annotations

import ctypes
import functools
import weakref

from cudnn_py import _loader, capi, nvtx
from cudnn_py._binding import status_error
from cudnn_py.errors import ClosedError, CudaError, InvalidTypeError, InvalidValueError
from cudnn_py.memory import DeviceArray, array_signature, as_array, empty

from .descriptors import BackendDescriptor

__all__ = ["Executor", "execute", "CudaGraph", "execute_descriptors", "make_variant_pack", "scratch_pointers",
           "plan_bindings", "plan_pointer", "handle_device", "tensor_pointer", "raw_execute"]

_MAX_PACKS = 256
_RAW_EXEC = None


def raw_execute():
    """``cudnnBackendExecute`` as a bare ctypes function: no errcheck (the caller checks the status) and no
    argtypes (about 0.1 us less per call), so it must only ever get ``c_void_p`` objects (or None).

    :returns: the function ``(handle, plan, variant_pack) -> status`` (an int, 0 for success), loaded once.
    """
    global _RAW_EXEC
    if _RAW_EXEC is None:
        cdll = _loader.library().cdll
        fn = cdll._FuncPtr(("cudnnBackendExecute", cdll))
        fn.restype = ctypes.c_int
        _RAW_EXEC = fn
    return _RAW_EXEC


def tensor_pointer(t, obj, device: int | None) -> int:
    """The device pointer of ``obj`` bound to graph tensor ``t``, after checking them against each other.

    :param t: the graph :class:`~cudnn_py.graph.Tensor`.
    :param obj: the array (read by :func:`cudnn_py.memory.array_signature`: a DeviceArray, a CUDA torch tensor, any
        DLPack / CUDA-array-interface device array).
    :param device: the handle's device ordinal the array must be on (None: not checked).
    :returns: the data pointer.
    :raises InvalidTypeError: another dtype, or not device memory; :class:`InvalidValueError`: another shape,
        strides or device (the message names the tensor).
    """
    sig, ptr = array_signature(obj, t.name)
    _check_signature(t, sig, device)
    return ptr


def _check_signature(t, sig, device: int | None) -> None:
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


def handle_device(handle) -> int | None:
    """The device ordinal of ``handle`` (a :class:`~cudnn_py.Handle` or anything with ``device``: an int or an object
    with ``device_id``); None for a raw ``cudnnHandle_t``, whose device is not known."""
    dev = getattr(handle, "device", None)
    return None if dev is None else int(getattr(dev, "device_id", dev))


def _workspace_ptr(plan, workspace, device: int | None) -> int:
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


def plan_pointer(plan) -> capi.cudnnBackendDescriptor_t:
    """The plan descriptor's own pointer object: closing the descriptor sets it to NULL, so a holder of it passes
    cuDNN NULL (an error status), never a freed plan.

    :param plan: a :class:`~cudnn_py.graph.Plan` (anything with ``descriptor`` and ``tag``).
    :raises ClosedError: the plan's descriptor is closed.
    """
    ptr = plan.descriptor.ptr
    if ptr is None:
        raise ClosedError(f"the execution plan ({plan.tag}) is closed")
    return ptr


def plan_bindings(plan) -> tuple[list, list]:
    """What a variant pack of ``plan`` binds: (the graph tensors bound to arrays, the by-value scalars bound to host
    buffers), each in the graph's order; the plan's scratch tensors are neither (they live in the workspace:
    :func:`scratch_pointers`).

    :param plan: a :class:`~cudnn_py.graph.Plan` with its graph.
    :raises InvalidValueError: the plan has no graph.
    """
    g = plan.graph
    if g is None:
        raise InvalidValueError("this plan has no graph to name its tensors (load it with plan_from_json(..., graph=))")
    io = g.io_tensors()
    scratch = {uid for uid, _ in getattr(plan, "scratch", ())}
    return [t for t in io if not t.is_by_value and t.uid not in scratch], [t for t in io if t.is_by_value]


def scratch_pointers(plan, workspace: int | None) -> tuple[list, list]:
    """(uids, device pointers) of the plan's scratch tensors in the workspace at ``workspace`` (a plan-like object
    without ``scratch`` has none)."""
    places = getattr(plan, "scratch", ())
    return [uid for uid, _ in places], [workspace + off for _, off in places]


_VARIANT_PACK = capi.CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
_UIDS, _POINTERS, _WORKSPACE = (capi.CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, capi.CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                capi.CUDNN_ATTR_VARIANT_PACK_WORKSPACE)


def make_variant_pack(uids, pointers, workspace: int | None) -> BackendDescriptor:
    """A finalized ``VARIANT_PACK`` descriptor, set in three calls (an executor builds one for every new set of
    addresses, e.g. each call with freshly allocated outputs, so this is on the per-call path).

    :param uids: the tensors' unique ids.
    :param pointers: their device (or, for by-value scalars, host) addresses, ints, in the same order.
    :param workspace: the workspace's device address (None or 0: none).
    :returns: the finalized descriptor (destroyed when closed or collected).
    """
    n = len(uids)
    if len(pointers) != n:
        raise InvalidValueError(f"variant pack: {n} unique ids but {len(pointers)} data pointers")
    vp = BackendDescriptor(_VARIANT_PACK)
    set_attr = capi.cudnnBackendSetAttribute.raw  # the bare ctypes call (errcheck kept): the arrays are built here
    set_attr(vp.ptr, _UIDS, capi.CUDNN_TYPE_INT64, n, (ctypes.c_int64 * n)(*uids))
    set_attr(vp.ptr, _POINTERS, capi.CUDNN_TYPE_VOID_PTR, n, (ctypes.c_void_p * n)(*pointers))
    set_attr(vp.ptr, _WORKSPACE, capi.CUDNN_TYPE_VOID_PTR, 1, (ctypes.c_void_p * 1)(workspace or None))
    capi.cudnnBackendFinalize.raw(vp.ptr)
    vp.finalized = True
    return vp


def execute_descriptors(handle, plan: BackendDescriptor, pack: BackendDescriptor) -> None:
    """``cudnnBackendExecute`` on raw descriptors, refusing unfinalized ones with a clear error."""
    for what, d in (("execution plan", plan), ("variant pack", pack)):
        if not isinstance(d, BackendDescriptor):
            raise InvalidTypeError(f"{what} must be a BackendDescriptor, got {type(d).__name__}")
        if not d.finalized:
            raise InvalidValueError(f"{what} ({d.short_type}) is not finalized; call .finalize() before executing")
    capi.cudnnBackendExecute(getattr(handle, "ptr", handle), plan.ptr, pack.ptr)


class _ExecState:
    """Everything an :class:`Executor` needs; ``make_run`` returns the hot closure."""

    def __init__(self, plan, handle, tensors, identity_cache):
        g = plan.graph
        io, scalars = plan_bindings(plan)
        if tensors:
            by_uid = {v.uid: v for v in io}
            resolved = [g[t] if isinstance(t, str) else t if hasattr(t, "uid") else by_uid.get(t) for t in tensors]
            missing = [t.name for t in io if t not in resolved]
            if missing:
                raise InvalidValueError(f"executor must bind every I/O tensor; missing {', '.join(missing)}")
            if len(resolved) != len(io):
                raise InvalidValueError("executor tensors must be the graph's I/O tensors, each once")
            io = resolved
        self.plan, self.tensors, self.handle = plan, tuple(io), handle
        self._names = tuple(t.name for t in io)
        self._uids = [t.uid for t in io] + [t.uid for t in scalars] + scratch_pointers(plan, 0)[0]
        self._scalar_ptrs = [g.scalar_pointer(t) for t in scalars]
        self._packs: dict = {}   # pointer tuple -> c_void_p of the variant pack (what C gets)
        self._keep: dict = {}    # pointer tuple -> the BackendDescriptor owning it
        self._recent: dict = {}  # argument tuple (the same objects) -> c_void_p
        self._recent_max = int(identity_cache)
        # the Handle's own pointer object: destroying the handle sets it to NULL, so a late call fails cleanly
        self._h = handle.ptr if hasattr(handle, "ptr") else ctypes.c_void_p(ctypes.cast(handle, ctypes.c_void_p).value)
        self._plan_ptr = plan_pointer(plan)
        if not isinstance(self._h, ctypes.c_void_p):  # the raw call has no argtypes: only pointer objects
            raise InvalidTypeError(f"handle must be a cudnn_py.Handle or a cudnnHandle_t, got {type(handle).__name__}")
        self.workspace_size = plan.workspace_size
        self._workspace = getattr(handle, "workspace", None)
        self._stream = getattr(handle, "stream", None)
        self._device = handle_device(handle)

    def _error(self, status: int) -> Exception:
        if getattr(self.handle, "closed", False):
            return ClosedError("the Handle this executor was made for is closed; build a new plan on an open one")
        if self.plan.descriptor.closed:
            return ClosedError(f"the execution plan ({self.plan.tag}) of this executor is closed")
        return status_error("cudnnBackendExecute", status)

    def make_run(self):
        recent_get, lookup, error = self._recent.get, self._lookup, self._error
        ex, h, plan = nvtx.wrap("cudnnBackendExecute", raw_execute()), self._h, self._plan_ptr
        if not self.workspace_size:
            def run(*arrays):
                try:
                    vp = recent_get(arrays)
                except TypeError:  # an unhashable argument: the slow path says what is wrong with it
                    vp = None
                if vp is None:
                    vp = lookup(arrays, None)
                status = ex(h, plan, vp)
                if status:
                    raise error(status)
        else:
            ws_get, size, stream = self._workspace_get(), self.workspace_size, self._stream

            def run(*arrays):
                wsp = ws_get(size, stream)
                try:
                    vp = recent_get(arrays + (wsp,))
                except TypeError:
                    vp = None
                if vp is None:
                    vp = lookup(arrays, wsp)
                status = ex(h, plan, vp)
                if status:
                    raise error(status)
        return run

    def _workspace_get(self):
        if self._workspace is None:
            def missing(size, stream):
                raise InvalidValueError(f"plan needs {size} bytes of workspace and the handle has none: pass "
                                        f"workspace=")
            return missing
        return self._workspace.get

    def _lookup(self, arrays: tuple, wsp) -> ctypes.c_void_p:
        """The slow path: pointer-keyed variant packs, validating and building one on a miss."""
        if len(arrays) != len(self.tensors):
            raise InvalidTypeError(f"executor takes {len(self.tensors)} arrays "
                                   f"({', '.join(t.name for t in self.tensors)}), "
                            f"got {len(arrays)}")
        # each array's (signature, address): another array at a reused address is validated again
        key = tuple(map(array_signature, arrays, self._names))
        if wsp is not None:
            key += (wsp,)
        vp = self._packs.get(key)
        if vp is None:
            for t, (sig, _) in zip(self.tensors, key):
                _check_signature(t, sig, self._device)
            ptrs = [p for _, p in key[:len(self.tensors)]]
            desc = make_variant_pack(self._uids, ptrs + self._scalar_ptrs + scratch_pointers(self.plan, wsp)[1], wsp)
            if len(self._packs) >= _MAX_PACKS:
                self._packs.clear()
                self._keep.clear()
                self._recent.clear()
            vp = self._packs[key] = ctypes.c_void_p(desc.ptr.value)
            self._keep[key] = desc
        if self._recent_max and all(type(a) is DeviceArray for a in arrays):
            if len(self._recent) >= self._recent_max:
                del self._recent[next(iter(self._recent))]
            self._recent[arrays if wsp is None else arrays + (wsp,)] = vp
        return vp

    def with_workspace(self, workspace, *arrays) -> None:
        """Execute with an explicit workspace (a DeviceArray of at least :attr:`workspace_size` bytes, or a
        device pointer) instead of the handle's."""
        vp = self._lookup(arrays, _workspace_ptr(self.plan, workspace, self._device))
        status = nvtx.wrap("cudnnBackendExecute", raw_execute())(self._h, self._plan_ptr, vp)
        if status:
            raise self._error(status)


class Executor(functools.partial):
    """``run(*arrays)``: execute a plan with arrays bound positionally to the graph's non-virtual tensors.

    Made by :meth:`Plan.executor` / :meth:`Graph.executor`; ``tensors`` (Tensor objects, names or uids) fix the
    order, default: the graph's I/O tensors in creation order (by-value scalars are bound automatically).

    Two caches make a repeat call one dict lookup and one ctypes call:

    * variant packs keyed by each array's signature and data pointer (:func:`cudnn_py.memory.array_signature`: shape,
      strides, dtype, device; + the workspace pointer when the plan needs one); a new key validates every array and
      finalizes one new pack (at most 256 kept);
    * in front of it, the last few argument tuples themselves (``identity_cache``, default 4; DeviceArray
      arguments only): a call with the very same array objects skips reading their pointers. Those arrays are
      kept alive until they drop out of this small cache.

    Calling it after its handle or its plan's descriptor was closed raises :class:`ClosedError`. It runs on the
    stream its handle had when it was made (workspace ordering included): after ``handle.on_stream(s)``, make a
    new executor.
    """

    _st: _ExecState

    def __new__(cls, plan, handle, tensors=(), identity_cache: int = 4):
        st = _ExecState(plan, handle, tensors, identity_cache)
        self = super().__new__(cls, st.make_run())
        self._st = st
        return self

    plan = property(lambda self: self._st.plan)
    tensors = property(lambda self: self._st.tensors, doc="the graph tensors the positional arrays bind to")
    workspace_size = property(lambda self: self._st.workspace_size)

    @property
    def cache_info(self) -> dict:
        """How many variant packs (by pointers) and argument tuples (by identity) are cached."""
        return {"packs": len(self._st._packs), "recent": len(self._st._recent)}

    def with_workspace(self, workspace, *arrays) -> None:
        """Execute with an explicit workspace (a DeviceArray of at least :attr:`workspace_size` bytes, or a
        device pointer) instead of the handle's."""
        self._st.with_workspace(workspace, *arrays)

    def __repr__(self):
        return f"<Executor {self.plan.tag}: {', '.join(t.name for t in self.tensors)}>"

    def __reduce__(self):
        raise InvalidTypeError("an Executor holds cuDNN handles and cannot be pickled")


def _ordered(plan, variant_pack: dict) -> tuple[list, list]:
    """The graph's I/O tensors and the arrays ``variant_pack`` binds to them, in that order."""
    io, _ = plan_bindings(plan)
    g = plan.graph
    by_uid = {}
    for k, v in variant_pack.items():
        t = g[k] if isinstance(k, str) else k
        uid = getattr(t, "uid", t)
        if hasattr(t, "graph") and t.graph is not g and g[t.name].uid != uid:
            raise InvalidValueError(f"tensor {t.name!r} is not part of graph {g.name!r}")
        by_uid[uid] = v
    missing = [t.name for t in io if t.uid not in by_uid]
    if missing:
        raise InvalidValueError(f"variant pack is missing {', '.join(missing)} (graph {g.name!r} needs "
                         f"{', '.join(t.name for t in io)})")
    extra = set(by_uid) - {t.uid for t in io}
    if extra:
        raise InvalidValueError(f"variant pack has tensors the graph does not use: uids {sorted(extra)}")
    return io, [by_uid[t.uid] for t in io]


def execute(plan, handle, variant_pack: dict, workspace=None) -> None:
    """Execute ``plan`` with a dict variant pack (through the cached executor of the graph's I/O order)."""
    io, arrays = _ordered(plan, variant_pack)
    ex = plan.executor(handle, *io)
    if workspace is None:
        ex(*arrays)
    else:
        ex.with_workspace(workspace, *arrays)


def _destroy_cuda_graph(rt, state: list) -> None:
    """Destroy the instantiation and the graph of ``state`` (``[cudaGraph_t, cudaGraphExec_t]``, None where there
    is none); the finalizer of :class:`CudaGraph` (close() and garbage collection)."""
    graph, exe = state
    state[:] = [None, None]
    try:
        if exe is not None:
            rt.cudaGraphExecDestroy(exe)
        if graph is not None:
            rt.cudaGraphDestroy(graph)
    except Exception:  # noqa: BLE001 - at interpreter exit the driver may already be gone; nothing left to free
        pass


def _check_cuda(err, what: str) -> None:
    if int(err) != 0:
        raise CudaError(what, int(err), getattr(err, "name", str(err)))


class CudaGraph:
    """A CUDA graph recorded from a plan by ``cudnnBackendPopulateCudaGraph``; ``update(variant_pack)`` rebinds
    pointers with ``cudnnBackendUpdateCudaGraph``; ``launch(stream=None)`` replays it (handle's stream default).

    The recorded addresses must stay valid for every launch, so the graph keeps the bound arrays alive and, unless
    a ``workspace`` is given, owns a workspace of its own (the handle's may be reallocated by later calls).
    :meth:`close` (or garbage collection) destroys the CUDA objects."""

    def __init__(self, plan, handle, variant_pack: dict, workspace=None):
        from cuda.bindings import runtime as rt
        self._rt, self.plan, self.handle = rt, plan, handle
        self._own_ws: DeviceArray | None = None
        self._state: list = [None, None]  # [cudaGraph_t, cudaGraphExec_t]: what the finalizer destroys
        self._finalizer = weakref.finalize(self, _destroy_cuda_graph, rt, self._state)
        vp = self._pack(variant_pack, workspace)
        err, graph = rt.cudaGraphCreate(0)
        _check_cuda(err, "cudaGraphCreate")
        self._state[0] = graph
        capi.cudnnBackendPopulateCudaGraph(handle.ptr, plan_pointer(plan), vp.ptr, capi.cudaGraph_t(int(graph)))
        self._instantiate()

    def _check_open(self):
        if self._state[1] is None:
            raise ClosedError("this CudaGraph is closed")

    def _pack(self, variant_pack, workspace) -> BackendDescriptor:
        io, arrays = _ordered(self.plan, variant_pack)
        dev = handle_device(self.handle)
        ptrs = [tensor_pointer(t, a, dev) for t, a in zip(io, arrays)]
        _, scalars = plan_bindings(self.plan)
        size, ws = self.plan.workspace_size, None
        if workspace is not None:
            ws = _workspace_ptr(self.plan, workspace, dev)
        elif size:
            if self._own_ws is None:
                self._own_ws = empty((size,), "uint8", stream=self.handle.stream, device=dev)
            ws = self._own_ws.ptr
        s_uids, s_ptrs = scratch_pointers(self.plan, ws)
        vp = make_variant_pack([t.uid for t in io] + [t.uid for t in scalars] + s_uids,
                               ptrs + [self.plan.graph.scalar_pointer(t) for t in scalars] + s_ptrs, ws)
        self._bound = (vp, arrays, workspace)  # what the recorded kernels read and write
        return vp

    def _instantiate(self):
        old, self._state[1] = self._state[1], None
        if old is not None:
            self._rt.cudaGraphExecDestroy(old)
        err, exe = self._rt.cudaGraphInstantiate(self._state[0], 0)
        _check_cuda(err, "cudaGraphInstantiate")
        self._state[1] = exe

    def update(self, variant_pack: dict, workspace=None) -> None:
        """Rebind the graph's pointers to another variant pack (same shapes, validated like the first)."""
        self._check_open()
        vp = self._pack(variant_pack, workspace)
        capi.cudnnBackendUpdateCudaGraph(self.handle.ptr, plan_pointer(self.plan), vp.ptr,
                                         capi.cudaGraph_t(int(self._state[0])))
        self._instantiate()

    def launch(self, stream=None) -> None:
        """Replay the recorded graph on ``stream`` (default: the handle's)."""
        from cudnn_py.streams import stream_ptr
        self._check_open()
        s = stream_ptr(stream) if stream is not None else self.handle.stream_ptr
        _check_cuda(self._rt.cudaGraphLaunch(self._state[1], s)[0], "cudaGraphLaunch")

    def close(self) -> None:
        """Destroy the CUDA graph and its instantiation (idempotent)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
