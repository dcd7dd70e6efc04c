"""cuDNN from torch: on torch's current stream, with memory from torch's caching allocator.

* :func:`context` - this thread's :class:`Context` on a device: a :class:`~cudnn_py.Handle` following
  ``torch.cuda.current_stream()`` (``cudnnSetStream`` only when it changed), its workspace a block of torch's
  allocator kept between calls (under a CUDA-graph capture, blocks of the graph's pool per call).
  :meth:`Context.run` calls a prepared function of the core (a family such as :func:`cudnn_py.sdpa`, or a
  :func:`~cudnn_py.graph.graph_call.graph_call`) on it, outputs torch tensors; its repeat calls are the core's prepared calls, in the handle's cache (:func:`cache_clear`).
* :func:`dtype_name`, :func:`empty_like_layout` - how the ops describe torch tensors and lay out their outputs.
* :func:`define` - registers an op: its schema from the implementation's annotations, the implementation as the
  CUDA kernel itself and a fake for tracing (without ``torch.library.custom_op``'s Python layers, about 20 us a
  call: benchmarks/torch_ops_bench.py), its autograd formula behind a shorter kernel for calls with nothing to
  record.
* :func:`call` - eagerly (plain tensors, not under ``torch.compile``) the implementation directly, through a
  ``torch.autograd.Function`` (:func:`function`) when a gradient is needed; traced, the registered op, so
  ``torch.compile`` and ``opcheck`` see it.

A stream change costs no new plan, so the plans of eager warm-up calls are the ones a CUDA-graph capture records.
"""
from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch._library.autograd import Info, make_autograd_impl

from cudnn_py.core.caches import handle_cache
from cudnn_py.core.handle import Handle
from cudnn_py.calls.prepared import CACHE
from cudnn_py.core.workspace import Workspace

__all__ = ["define", "Context", "context", "cache_clear", "eager", "function", "call", "dtype_name",
           "empty_like_layout"]

_LIB = torch.library.Library("cudnn_py", "FRAGMENT")


class _Local(threading.local):
    def __init__(self) -> None:
        self.contexts: dict[int, Context] = {}


_local = _Local()
_CONTEXTS: weakref.WeakSet[Context] = weakref.WeakSet()  # every thread's, for cache_clear

_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_any_requires_grad = torch._C._any_requires_grad
_modes = torch._C._len_torch_dispatch_stack


# torch's current CUDA device; its caching allocator's raw blocks ((bytes, stream) -> address, address -> None); a
# device's current raw cudaStream_t as an int (no torch.cuda.Stream object made); whether the current stream is being
# captured. None in a torch built without CUDA, whose tensors never reach here
_CUDA: list[Any] = [getattr(torch._C, n, None) for n in (
    "_cuda_getDevice", "_cuda_cudaCachingAllocator_raw_alloc", "_cuda_cudaCachingAllocator_raw_delete",
    "_cuda_getCurrentRawStream", "_cuda_isCurrentStreamCapturing")]
_current_device, _raw_alloc, _raw_delete, _raw_stream, _capturing = _CUDA


def define(name: str, impl: Callable, fake: Callable, setup: Callable | None = None,
           backward: Callable | None = None) -> Callable[..., Any]:
    """Register the op ``cudnn_py::name`` (no argument mutated; schema from ``impl``'s annotations) with ``impl`` as
    its CUDA kernel, ``fake`` for fake tensors (called with the op's arguments by name, defaults filled in: it names
    those it reads and takes ``**_``) and ``backward`` (after ``setup``) as its autograd formula; returns
    ``torch.ops.cudnn_py.<name>.default``. The formula (what ``torch.library.register_autograd`` registers) sits
    behind a shorter kernel that, on plain tensors with no gradient to record and no dispatch mode, runs ``impl``
    itself rather than entering the dispatcher again (several microseconds each time)."""
    _LIB.define(name + torch.library.infer_schema(impl, mutates_args=()), tags=(torch.Tag.pt2_compliant_tag,))
    kernel = torch._disable_dynamo(impl)
    _LIB.impl(name, kernel, "CUDA")
    signature = inspect.signature(impl)

    def by_name(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return fake(**bound.arguments)
    torch.library.register_fake(f"cudnn_py::{name}", by_name, lib=_LIB)
    op = getattr(torch.ops.cudnn_py, name).default
    if backward is not None:
        recorded = make_autograd_impl(op, Info(backward, setup))

        def autograd(keyset, *args):
            if type(args[0]) is Tensor and not _modes() and not (_grad_enabled() and _any_requires_grad(*args)):
                return kernel(*args)
            return recorded(keyset, *args)
        _LIB.impl(name, autograd, "AutogradCUDA", with_keyset=True)
    return op


def dtype_name(dtype: torch.dtype) -> str:
    """cuDNN's name of a torch dtype (``torch.bfloat16`` -> ``'bfloat16'``)."""
    return str(dtype)[6:]


def empty_like_layout(like: Tensor, shape, dtype=None, zero: bool = False) -> Tensor:
    """A new tensor of ``shape`` whose dims are ordered in memory as ``like``'s (by decreasing stride)."""
    make = torch.zeros if zero else torch.empty
    if like.is_contiguous():
        return make(shape, dtype=dtype or like.dtype, device=like.device)
    st = like.stride()
    order = sorted(range(like.dim()), key=lambda i: -st[i])
    buf = make([shape[i] for i in order], dtype=dtype or like.dtype, device=like.device)
    return buf.permute([order.index(i) for i in range(like.dim())])


class _Workspace(Workspace):
    """A :class:`Context` handle's workspace: a raw block of torch's allocator on torch's current stream, kept between
    calls and given back when the stream changes. While that stream is being captured into a CUDA graph, each call
    takes blocks of the graph's pool instead, given back after it (:meth:`end_call`): a block kept across a capture
    would tie the graph to memory outside its pool."""

    __slots__ = ("ctx", "captured")

    def __init__(self, ctx: Context):
        super().__init__(device=ctx.index)
        self.ctx = ctx
        self.captured: list[int] = []  # the blocks of the call in progress under a capture

    def get(self, nbytes: int, stream: Any = None) -> int:
        """A block of at least ``nbytes`` on torch's current stream, which the handle follows (``stream`` unread)."""
        if nbytes > self.peak:
            self.peak = nbytes
        if not nbytes:
            return 0
        if self.cap is not None and nbytes > self.cap:
            return super().get(nbytes)  # raises WorkspaceLimitError, allocating nothing
        if _capturing():
            self.captured.append(_raw_alloc(nbytes, self.ctx.stream))
            return self.captured[-1]
        if nbytes > self._size:
            self.release()
            self._ptr, self._size = _raw_alloc(nbytes, self.ctx.stream), nbytes
        return self._ptr

    def end_call(self) -> None:
        """Give back the blocks a call took under a capture."""
        while self.captured:
            _raw_delete(self.captured.pop())

    def release(self) -> None:
        """Give the kept block back to torch's allocator (the work queued on it keeps it until done)."""
        if self._size:
            _raw_delete(self._ptr)
            self._ptr = self._size = 0

    close = release


class Context:
    """This thread's cuDNN handle on one device (its workspace from torch's allocator: :class:`_Workspace`) and the
    torch stream it is bound to."""

    __slots__ = ("handle", "stream", "device", "index", "workspace", "__weakref__")

    def __init__(self, device: int, stream: int):
        self.stream, self.device, self.index = stream, torch.device("cuda", device), device
        with torch.cuda.device(device):
            self.handle = Handle(device, stream=stream)
        self.handle.workspace = self.workspace = _Workspace(self)

    def rebind(self, stream: int) -> None:
        """Follow torch's current stream (the workspace block of the last one given back)."""
        self.handle.set_stream(stream)
        self.workspace.release()
        self.stream = stream

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(handle, *args, **kwargs)`` (a prepared function) with this device current (as torch's own ops set
        theirs); a capture's workspace blocks given back after."""
        try:
            if _current_device() == self.index:
                return fn(self.handle, *args, **kwargs)
            with torch.cuda.device(self.index):
                return fn(self.handle, *args, **kwargs)
        finally:
            if self.workspace.captured:
                self.workspace.end_call()


def context(device: int) -> Context:
    """This thread's :class:`Context` on ``device``, bound to torch's current stream of that device."""
    cs = _local.contexts
    ctx = cs.get(device)
    stream = _raw_stream(device)
    if ctx is None:
        ctx = cs[device] = Context(device, stream)
        _CONTEXTS.add(ctx)
    elif ctx.stream != stream:
        ctx.rebind(stream)
    return ctx


def cache_clear() -> None:
    """Forget the prepared calls of every thread's handles (autograd's threads' too); made again on next use."""
    for ctx in list(_CONTEXTS):
        handle_cache(ctx.handle, CACHE).clear()


def eager(t: Any) -> bool:
    """Whether a call with ``t`` among its tensors runs eagerly: a plain torch tensor (not a fake or functional
    one) outside ``torch.compile``'s tracing."""
    return type(t) is Tensor and not _is_compiling()


def function(name: str, impl: Callable, setup: Callable, backward: Callable) -> type[torch.autograd.Function]:
    """A ``torch.autograd.Function`` running ``impl`` with an op's ``setup_context`` and backward formula."""
    def forward(ctx, *args):
        out = impl(*args)
        setup(ctx, args, out)
        return out
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                    "backward": staticmethod(backward)})


def call(op: Callable, impl: Callable, fn: type[torch.autograd.Function] | None, args: tuple,
         grads: Sequence) -> Any:
    """``op(*args)``, or eagerly (:func:`eager` of ``args[0]``) ``impl(*args)`` - through ``fn`` when grad mode is on
    and a tensor in ``grads`` requires a gradient (``fn`` None: the op has no gradient)."""
    if type(args[0]) is not Tensor or _is_compiling():
        return op(*args)
    if fn is not None and _grad_enabled() and _any_requires_grad(*grads):
        return fn.apply(*args)
    return impl(*args)
