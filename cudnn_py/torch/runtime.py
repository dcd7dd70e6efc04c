"""cuDNN plans run from torch: on torch's current stream, with memory from torch's caching allocator.

* :func:`context` - this thread's :class:`~cudnn_py.Handle` on a device, its stream set to
  ``torch.cuda.current_stream()`` of that device (``cudnnSetStream`` only when the stream changed), as torch keeps
  one cuDNN handle per thread and device and sets its stream on each call.
* :class:`Prepared` - a built graph plan (a :class:`~cudnn_py.graph.runner.Runner`) bound positionally;
  :meth:`Prepared.run` executes it with the data pointers of torch tensors, the tensors' device current: one dict
  lookup (the variant pack by addresses), the workspace as a raw block of the caching allocator (freed after the
  launch: the allocator hands the block out again only to work queued after it on the same stream, or later in
  the same CUDA-graph capture or pool), one ``cudnnBackendExecute``.
* :func:`prepared` - the :class:`Prepared` call of a configuration key, cached on the handle
  (:func:`cudnn_py.caches.handle_cache`), so ``handle.clear_caches()`` forgets them.
* :class:`Ready` - an op's fast path on repeat calls: kept in that same cache under a key of the call's shapes,
  strides, dtypes, devices and options (found through :func:`known`, which also follows torch's current stream),
  it holds the :class:`Prepared` call and its outputs' layouts, so a repeat call is one dict lookup, the outputs by
  ``torch.empty_strided`` and the prepared call; the first call of a configuration takes the op's checked path,
  which makes the entry from the outputs it allocated.
* :func:`dtype_name`, :func:`empty_like_layout` - how the ops describe torch tensors to cuDNN and lay out outputs.
* :func:`define` - registers an op: the schema from its implementation's annotations, the implementation as the
  dispatcher's CUDA kernel itself and a fake for tracing (what ``torch.library.custom_op`` registers, without the
  Python layers it wraps around the kernel, which cost about 20 us per call: measured in
  benchmarks/torch_ops_bench.py), and its autograd formula as torch's autograd kernel behind a shorter one that
  runs the implementation directly where there is nothing to record (a compiled graph's calls).
* :func:`call` - how the Python faces reach an op: eagerly (plain tensors, not under ``torch.compile``) its
  implementation is called directly, inside a ``torch.autograd.Function`` made by :func:`function` from the op's
  own autograd formula when a gradient is needed; traced, the registered op itself, so ``torch.compile`` and
  ``opcheck`` see it. The dispatcher's Python custom-op layers cost more host time than the whole cuDNN call
  (measured in benchmarks/torch_ops_bench.py), so the eager path skips them.

A stream change costs no new plan (plans belong to the handle, the stream is only set), so the plans built in eager
warm-up calls are the ones a CUDA-graph capture on torch's capture stream records.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch._library.autograd import Info, make_autograd_impl

from cudnn_py.caches import handle_cache
from cudnn_py.graph import Graph
from cudnn_py.graph.runner import Runner, cached
from cudnn_py.handle import Handle

__all__ = ["define", "Context", "context", "known", "handle", "Prepared", "prepared", "Ready", "remember", "replay",
           "current_stream", "cache_clear", "eager", "function", "call", "dtype_name", "empty_like_layout"]

_CACHE = "torch.ops"
_LIB = torch.library.Library("cudnn_py", "FRAGMENT")


class _Local(threading.local):
    def __init__(self) -> None:
        self.contexts: dict[int, Context] = {}


_local = _Local()

_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_any_requires_grad = torch._C._any_requires_grad
_modes = torch._C._len_torch_dispatch_stack


def _cuda_function(name: str) -> Callable:
    """``torch._C.<name>`` (absent from a torch built without CUDA, whose tensors never reach a plan)."""
    return getattr(torch._C, name, None)  # type: ignore[return-value]


# torch's current CUDA device; its caching allocator's raw blocks: (bytes, stream) -> address, address -> None
_current_device = _cuda_function("_cuda_getDevice")
_raw_alloc = _cuda_function("_cuda_cudaCachingAllocator_raw_alloc")
_raw_delete = _cuda_function("_cuda_cudaCachingAllocator_raw_delete")


try:  # the raw cudaStream_t as an int, without making a torch.cuda.Stream object (what compiled code uses)
    _raw_stream: Callable[[int], int] = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - torch built without CUDA
    def _raw_stream(device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream


def define(name: str, impl: Callable, fake: Callable, setup: Callable | None = None,
           backward: Callable | None = None) -> Callable[..., Any]:
    """Register the op ``cudnn_py::name`` (no argument mutated; its schema inferred from ``impl``'s annotations) with
    ``impl`` as its CUDA kernel (outside dynamo's reach, as a custom op's) and ``fake`` for fake tensors, and with
    ``backward`` (after ``setup`` saved what it needs) as its autograd formula; returns its overload
    (``torch.ops.cudnn_py.<name>.default``).

    The formula is torch's autograd kernel for it (what ``torch.library.register_autograd`` registers), behind a
    shorter one for what compiled graphs do with the op: called on plain CUDA tensors with no gradient to record
    and no dispatch mode active, it runs ``impl`` itself instead of entering the dispatcher again for the CUDA
    kernel (each entry from the dispatcher into Python costs several microseconds)."""
    _LIB.define(name + torch.library.infer_schema(impl, mutates_args=()), tags=(torch.Tag.pt2_compliant_tag,))
    kernel = torch._disable_dynamo(impl)
    _LIB.impl(name, kernel, "CUDA")
    torch.library.register_fake(f"cudnn_py::{name}", fake, lib=_LIB)
    op = getattr(torch.ops.cudnn_py, name).default
    if backward is not None:
        recorded = make_autograd_impl(op, Info(backward, setup))

        def autograd(keyset, *args):
            if type(args[0]) is Tensor and not _modes() and not (_grad_enabled() and _any_requires_grad(*args)):
                return kernel(*args)
            return recorded(keyset, *args)
        _LIB.impl(name, autograd, "AutogradCUDA", with_keyset=True)
    return op


def current_stream(device: int) -> int:
    """``torch.cuda.current_stream(device)`` as an int ``cudaStream_t``."""
    return _raw_stream(device)


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


class Context:
    """This thread's cuDNN handle on one device and the torch stream it is bound to."""

    __slots__ = ("handle", "stream", "device", "index")

    def __init__(self, device: int, stream: int):
        with torch.cuda.device(device):
            self.handle = Handle(device, stream=stream)
        self.stream, self.device, self.index = stream, torch.device("cuda", device), device

    def rebind(self, stream: int) -> None:
        """Follow torch's current stream."""
        self.handle.set_stream(stream)
        self.stream = stream


def context(device: int) -> Context:
    """This thread's :class:`Context` on ``device``, bound to torch's current stream of that device."""
    cs = _local.contexts
    ctx = cs.get(device)
    stream = _raw_stream(device)
    if ctx is None:
        ctx = cs[device] = Context(device, stream)
    elif ctx.stream != stream:
        ctx.rebind(stream)
    return ctx


def known(device: int) -> tuple[Context, dict] | None:
    """For a hot path: this thread's :class:`Context` on ``device`` (bound to torch's current stream) and its
    handle's prepared-call cache, or None where no call on that device has made them yet (``device`` -1, a CPU
    tensor's, never has them)."""
    ctx = _local.contexts.get(device)
    if ctx is None:
        return None
    stream = _raw_stream(device)
    if ctx.stream != stream:
        ctx.rebind(stream)
    c = ctx.handle.cache.get(_CACHE)
    return None if c is None else (ctx, c)


def handle(device: int) -> Handle:
    """This thread's handle on ``device``, bound to torch's current stream of that device."""
    return context(device).handle


class Prepared:
    """A built plan of ``graph`` on handle ``h``, bound positionally: :meth:`run` takes the data pointers of
    ``tensors`` (the call's inputs, then its outputs); ``consts`` are (graph tensor, device array) pairs bound after
    them on every call and kept alive here (attention's ALiBi slopes: cudnn-py device memory, outside torch's
    allocator, so that no CUDA-graph memory pool holds them)."""

    __slots__ = ("runner", "ws")

    def __init__(self, h: Handle, graph: Graph, tensors: Sequence, consts: Sequence = ()):
        self.runner = Runner(graph.plan, h, [*tensors, *(t for t, _ in consts)], consts=[c for _, c in consts],
                             n_inputs=len(tensors))
        self.ws = self.runner.workspace_size

    def run(self, ctx: Context, ptrs: tuple) -> None:
        """Execute on ``ctx``'s handle and stream (torch's current) with these data pointers and its workspace,
        with ``ctx``'s device current (cuDNN runs on the current device, as torch's ops, which set theirs, do; a
        kernel the dispatcher calls finds whichever device the program made current)."""
        ptrs += self.runner.const_ptrs
        if _current_device() == ctx.index:
            self._run(ctx, ptrs)
        else:
            with torch.cuda.device(ctx.index):
                self._run(ctx, ptrs)

    def _run(self, ctx: Context, ptrs: tuple) -> None:
        r = self.runner
        if not self.ws:
            r.execute(r.pack(ptrs, ptrs, None))
            return
        # per call: a workspace kept between calls would outlive a CUDA-graph pool's warm-up. A raw block of torch's
        # caching allocator on the current device (as a tensor's, handed out again only to work queued after this
        # on the same stream, or from a capture's pool), without a tensor around it
        wsp = _raw_alloc(self.ws, ctx.stream)
        try:
            r.execute(r.pack(ptrs + (wsp,), ptrs, wsp))
        finally:
            _raw_delete(wsp)


def prepared(h: Handle, key: tuple, make: Callable[[], Prepared]) -> Prepared:
    """The :class:`Prepared` call of ``key`` on ``h``, made by ``make()`` on first use."""
    return cached(h, _CACHE, key, make)


class Ready:
    """A fast-path entry: the :class:`Prepared` call ``p`` and the layouts (shape, strides, dtype) of ``outs``, the
    outputs the checked call allocated for it; those at the indices ``bound`` are bound after the inputs, in that
    order (the others, empty placeholders, are only returned), zero-filled first with ``zero`` (a padding mask leaves
    rows unwritten)."""

    __slots__ = ("p", "specs", "bound", "zero")

    def __init__(self, p: Prepared, outs: Sequence[Tensor], bound: Sequence[int], zero: bool):
        self.p, self.bound, self.zero = p, tuple(bound), zero
        self.specs = tuple((o.shape, o.stride(), o.dtype) for o in outs)

    def run(self, ctx: Context, ptrs: tuple) -> list[Tensor]:
        """New outputs, computed from the inputs at ``ptrs`` on ``ctx`` (from :func:`known`)."""
        dev = ctx.device
        outs = [torch.empty_strided(s, st, dtype=dt, device=dev) for s, st, dt in self.specs]
        bound = [outs[i] for i in self.bound]
        if self.zero:
            for x in bound:
                x.zero_()
        self.p.run(ctx, ptrs + tuple([x.data_ptr() for x in bound]))
        return outs


def remember(device: int, key: tuple, entry: Ready) -> None:
    """Keep ``entry`` for ``key`` in this thread's prepared-call cache on ``device`` (read back through
    :func:`known`)."""
    handle_cache(context(device).handle, _CACHE)[key] = entry


def replay(device: int, key: tuple, tensors: tuple) -> list[Tensor] | None:
    """A repeat call of the configuration ``key`` remembered on ``device``: its :class:`Ready` entry run on the
    present ``tensors`` (None entries skipped), returning the new outputs; None where nothing is remembered yet."""
    hot = known(device)
    ent = None if hot is None else hot[1].get(key)
    if ent is None or hot is None:
        return None
    return ent.run(hot[0], tuple([t.data_ptr() for t in tensors if t is not None]))


def cache_clear() -> None:
    """Forget the prepared calls of this thread's handles (their plans are built again on next use)."""
    for ctx in _local.contexts.values():
        handle_cache(ctx.handle, _CACHE).clear()


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
    if not eager(args[0]):
        return op(*args)
    if fn is not None and torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in grads):
        return fn.apply(*args)
    return impl(*args)
