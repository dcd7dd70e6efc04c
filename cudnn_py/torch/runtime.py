"""cuDNN from torch: on torch's current stream, with memory from torch's caching allocator (docs/torch.md).
:func:`context` is this thread's :class:`Context` on a device: a handle following ``torch.cuda.current_stream()``,
its workspace from torch's allocator; :meth:`Context.run` calls a prepared function of the core on it, :func:`replay`
the function's last prepared call on the current device's context. :func:`define`
registers an op; :func:`call` runs one: eagerly the implementation itself (through :func:`function` when a gradient
is needed), traced the registered op.
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
from cudnn_py.calls.prepared import CACHE, MISS, replay as prepared_replay
from cudnn_py.core.workspace import Workspace

__all__ = ["define", "Context", "context", "replay", "cache_clear", "eager", "function", "call", "dtype_name",
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


# the current device, raw allocator blocks (alloc, delete), a device's current cudaStream_t as an int, whether the
# current stream is being captured; None in a torch without CUDA, whose tensors never reach here
_CUDA: list[Any] = [getattr(torch._C, n, None) for n in (
    "_cuda_getDevice", "_cuda_cudaCachingAllocator_raw_alloc", "_cuda_cudaCachingAllocator_raw_delete",
    "_cuda_getCurrentRawStream", "_cuda_isCurrentStreamCapturing")]
_current_device, _raw_alloc, _raw_delete, _raw_stream, _capturing = _CUDA


def define(name: str, impl: Callable, fake: Callable, setup: Callable | None = None,
           backward: Callable | None = None) -> Callable[..., Any]:
    """Register ``cudnn_py::name`` (schema from ``impl``'s annotations): ``impl`` its CUDA kernel, ``fake`` (given the
    op's arguments by name, ``**_`` for the rest) its fake, ``backward`` (after ``setup``) its autograd formula,
    skipped on plain tensors with no gradient to record and no dispatch mode; returns the op's default overload."""
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
    """A new tensor of ``shape`` whose dims are ordered in memory as ``like``'s."""
    make = torch.zeros if zero else torch.empty
    if like.is_contiguous():
        return make(shape, dtype=dtype or like.dtype, device=like.device)
    st = like.stride()
    order = sorted(range(like.dim()), key=lambda i: -st[i])
    buf = make([shape[i] for i in order], dtype=dtype or like.dtype, device=like.device)
    return buf.permute([order.index(i) for i in range(like.dim())])


class _Workspace(Workspace):
    """A raw block of torch's allocator on the context's stream, kept between calls (per call under a capture)."""

    __slots__ = ("ctx", "captured")

    def __init__(self, ctx: Context):
        super().__init__(device=ctx.index)
        self.ctx = ctx
        self.captured: list[int] = []  # the blocks of the call in progress under a capture

    def get(self, nbytes: int, stream: Any = None) -> int:
        """A block of at least ``nbytes`` on the context's stream (``stream`` unread)."""
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
        """Give the kept block back (stream-ordered)."""
        if self._size:
            _raw_delete(self._ptr)
            self._ptr = self._size = 0

    close = release


class Context:
    """This thread's cuDNN handle on one device and the torch stream it is bound to."""

    __slots__ = ("handle", "stream", "device", "index", "workspace", "__weakref__")

    def __init__(self, device: int, stream: int):
        self.stream, self.device, self.index = stream, torch.device("cuda", device), device
        with torch.cuda.device(device):
            self.handle = Handle(device, stream=stream)
        self.handle.workspace = self.workspace = _Workspace(self)

    def rebind(self, stream: int) -> None:
        """Follow torch's current stream, giving the old stream's workspace block back."""
        self.handle.set_stream(stream)
        self.workspace.release()
        self.stream = stream

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(handle, *args, **kwargs)`` with this device current; a capture's workspace blocks given back after."""
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


def replay(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """:func:`~cudnn_py.calls.prepared.replay` of ``fn`` on this thread's context of torch's current device, whose
    guard holds the tensors' device; :data:`~cudnn_py.calls.prepared.MISS` before the thread's first call there."""
    cs = _local.contexts
    ctx = cs.get(_current_device()) if cs else None
    if ctx is None:
        return MISS
    stream = _raw_stream(ctx.index)
    if ctx.stream != stream:
        ctx.rebind(stream)
    try:
        return prepared_replay(fn, ctx.handle, args, kwargs)
    finally:
        if ctx.workspace.captured:
            ctx.workspace.end_call()


def cache_clear() -> None:
    """Forget the prepared calls of every thread's handles (autograd's threads' too); made again on next use."""
    for ctx in list(_CONTEXTS):
        handle_cache(ctx.handle, CACHE).clear()


def eager(t: Any) -> bool:
    """Whether a call on ``t`` runs eagerly: a plain tensor (not fake or functional), not under ``torch.compile``."""
    return type(t) is Tensor and not _is_compiling()


def function(name: str, impl: Callable, setup: Callable, backward: Callable) -> type[torch.autograd.Function]:
    """A ``torch.autograd.Function`` of ``impl`` with an op's setup and backward."""
    def forward(ctx, *args):
        out = impl(*args)
        setup(ctx, args, out)
        return out
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                    "backward": staticmethod(backward)})


def call(op: Callable, impl: Callable, fn: type[torch.autograd.Function] | None, args: tuple,
         grads: Sequence) -> Any:
    """``op(*args)``, or eagerly ``impl(*args)``: through ``fn`` (if any) where a tensor of ``grads`` needs a grad."""
    if type(args[0]) is not Tensor or _is_compiling():
        return op(*args)
    if fn is not None and _grad_enabled() and _any_requires_grad(*grads):
        return fn.apply(*args)
    return impl(*args)
