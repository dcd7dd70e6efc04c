"""Executing plans over :class:`~.runner.Runner`: the fast executor, dict variant packs and CUDA graphs."""
from __future__ import annotations

import functools
import weakref
from typing import Any

from cudnn_py import capi
from cudnn_py.errors import ClosedError, InvalidTypeError, check_cuda
from cudnn_py.core.memory import DeviceArray, empty

from .runner import Runner, VariantPack, bound_tensors, handle_device, plan_pointer, workspace_pointer

__all__ = ["Executor", "CudaGraph", "ordered_pack"]


class Executor(functools.partial):
    """``run(*arrays)``: execute a plan with arrays bound positionally to the graph's non-virtual tensors, made by
    :meth:`Plan.executor` / :meth:`Graph.executor` (:attr:`runner` does the work). ``tensors`` (Tensors, names or
    uids) fix the order, default the graph's I/O tensors in creation order (by-value scalars bound automatically).
    A repeat call is one dict lookup and one ctypes call: variant packs are kept by each array's signature and address
    (a new key validates every array; at most 256 kept), and in front of them the last ``identity_cache`` argument
    tuples of DeviceArrays (kept alive until they drop out). After its handle or plan was closed it raises
    :class:`ClosedError`. It runs on the stream its handle had when made (after ``handle.on_stream(s)``, make anew)."""

    runner: Runner

    def __new__(cls, plan: Any, handle: Any, tensors: tuple = (), identity_cache: int = 4) -> "Executor":
        r = Runner(plan, handle, tensors)
        self = super().__new__(cls, r.caller(identity_cache))
        self.runner = r
        return self

    plan = property(lambda self: self.runner.plan)
    tensors = property(lambda self: self.runner.tensors, doc="the graph tensors the positional arrays bind to")
    workspace_size = property(lambda self: self.runner.workspace_size)

    @property
    def cache_info(self) -> dict:
        """How many variant packs (by pointers) and argument tuples (by identity) are cached."""
        return {"packs": len(self.runner.packs), "recent": len(self.runner.recent)}

    def with_workspace(self, workspace: Any, *arrays: Any) -> None:
        """Execute with ``workspace`` (a DeviceArray of at least :attr:`workspace_size` bytes, or a pointer)."""
        r = self.runner
        r.execute(r.checked_pack(arrays, workspace_pointer(r.plan, workspace, r.device)))

    def __repr__(self) -> str:
        return f"<Executor {self.plan.tag}: {', '.join(t.name for t in self.tensors)}>"

    def __reduce__(self):
        raise InvalidTypeError("an Executor holds cuDNN handles and cannot be pickled")


def ordered_pack(plan, variant_pack: dict) -> tuple[list, list]:
    """The graph tensors ``variant_pack`` binds (:func:`~.runner.bound_tensors`) and its arrays, in its order."""
    return bound_tensors(plan, list(variant_pack)), list(variant_pack.values())


def _destroy_cuda_graph(rt, state: list) -> None:
    """:class:`CudaGraph`'s finalizer: destroy ``state``'s ``[cudaGraph_t, cudaGraphExec_t]``."""
    graph, exe = state
    state[:] = [None, None]
    try:
        if exe is not None:
            rt.cudaGraphExecDestroy(exe)
        if graph is not None:
            rt.cudaGraphDestroy(graph)
    except Exception:  # noqa: BLE001 - at interpreter exit the driver may already be gone; nothing left to free
        pass


class CudaGraph:
    """A CUDA graph recorded from a plan (``cudnnBackendPopulateCudaGraph``), rebound by :meth:`update`, replayed by
    :meth:`launch`. It keeps the bound arrays alive and, unless a ``workspace`` is given, owns a workspace of its
    own; :meth:`close` (or garbage collection) destroys the CUDA objects."""

    def __init__(self, plan, handle, variant_pack: dict, workspace=None):
        from cuda.bindings import runtime as rt
        self._rt, self.plan, self.handle = rt, plan, handle
        self._own_ws: DeviceArray | None = None
        self._state: list = [None, None]  # [cudaGraph_t, cudaGraphExec_t]: what the finalizer destroys
        self._finalizer = weakref.finalize(self, _destroy_cuda_graph, rt, self._state)
        vp = self._pack(variant_pack, workspace)
        graph = self._state[0] = check_cuda(rt.cudaGraphCreate(0), "cudaGraphCreate")
        capi.cudnnBackendPopulateCudaGraph(handle.ptr, plan_pointer(plan), vp.ptr, capi.cudaGraph_t(int(graph)))
        self._instantiate()

    def _check_open(self):
        if self._state[1] is None:
            raise ClosedError("this CudaGraph is closed")

    def _pack(self, variant_pack, workspace) -> VariantPack:
        io, arrays = ordered_pack(self.plan, variant_pack)
        size, ws = self.plan.workspace_size, None
        if workspace is not None:
            ws = workspace_pointer(self.plan, workspace, handle_device(self.handle))
        elif size:
            if self._own_ws is None:
                self._own_ws = empty((size,), "uint8", stream=self.handle.stream, device=handle_device(self.handle))
            ws = self._own_ws.ptr
        vp = Runner(self.plan, self.handle, io).variant_pack(arrays, ws)
        self._bound = (vp, arrays, workspace)  # what the recorded kernels read and write
        return vp

    def _instantiate(self):
        old, self._state[1] = self._state[1], None
        if old is not None:
            self._rt.cudaGraphExecDestroy(old)
        self._state[1] = check_cuda(self._rt.cudaGraphInstantiate(self._state[0], 0), "cudaGraphInstantiate")

    def update(self, variant_pack: dict, workspace=None) -> None:
        """Rebind the graph's pointers to another variant pack (same shapes, validated like the first)."""
        self._check_open()
        vp = self._pack(variant_pack, workspace)
        capi.cudnnBackendUpdateCudaGraph(self.handle.ptr, plan_pointer(self.plan), vp.ptr,
                                         capi.cudaGraph_t(int(self._state[0])))
        self._instantiate()

    def launch(self, stream=None) -> None:
        """Replay the recorded graph on ``stream`` (default: the handle's)."""
        from cudnn_py.core.streams import stream_ptr
        self._check_open()
        s = stream_ptr(stream) if stream is not None else self.handle.stream_ptr
        check_cuda(self._rt.cudaGraphLaunch(self._state[1], s), "cudaGraphLaunch")

    def close(self) -> None:
        """Destroy the CUDA graph and its instantiation (idempotent)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
