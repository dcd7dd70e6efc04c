"""Scaled dot-product attention (flash attention) through cached graph plans.

The first call with a new configuration (shapes, strides, dtypes, options) builds an attention graph and its
plan for the handle; every later call with the same configuration is a dict lookup and one
``cudnnBackendExecute``::

    o, stats = cudnn_py.sdpa(h, q, k, v, causal=True, return_stats=True)     # torch tensors work too
    dq, dk, dv = cudnn_py.sdpa_backward(h, q, k, v, o, do, stats, causal=True)

Tensors are logical ``(B, H, S, D)`` (torch's ``scaled_dot_product_attention`` order) with any strides whose head
dim is packed: a (B, S, H, D) buffer passed as ``x.transpose(1, 2)`` is BSHD, slices of one packed QKV buffer
are interleaved QKV. Outputs get the layout of their inputs (o follows q, dq/dk/dv follow q/k/v). Packed batches
of different lengths ("THD", as flash-attention's varlen functions take them) are (T, H, D) tensors with
per-batch element offsets (``ragged_offset_q``/``ragged_offset_kv``) and lengths (``seq_len_q``/``seq_len_kv``).

A repeated call costs one dict lookup keyed by the arguments' shapes, strides and dtypes and the options, one
keyed by their data pointers (the variant pack: a new set of addresses is validated once), and the C call.
"""
from __future__ import annotations

import ctypes
import math
import numbers
from typing import NamedTuple

import numpy as np

from cudnn_py import nvtx
from cudnn_py._binding import status_error
from cudnn_py.args import bool_arg
from cudnn_py.errors import ClosedError, InvalidTypeError, InvalidValueError
from cudnn_py.graph import Graph
from cudnn_py.graph.conv import autotune_graph
from cudnn_py.graph.ops.sdpa import FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES
from cudnn_py.graph.execute import (handle_device, make_variant_pack, plan_bindings, plan_pointer, raw_execute,
                                    scratch_pointers, tensor_pointer)
from cudnn_py.caches import handle_cache
from cudnn_py.memory import DeviceArray, array_signature, as_array, c_strides, empty, is_torch_tensor, to_device

__all__ = ["sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward", "sdpa_cache_clear", "alibi_slopes", "SdpaOutputs",
           "SdpaGrads", "SdpaGradsWithBias", "SdpaFp8Outputs", "SdpaFp8Grads"]


class SdpaOutputs(NamedTuple):
    """What :func:`sdpa` returns with ``return_stats=True``."""
    o: DeviceArray       #: the attention output
    stats: DeviceArray   #: the softmax statistics (log-sum-exp per query row) the backward takes


class SdpaGrads(NamedTuple):
    """What :func:`sdpa_backward` returns."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray


class SdpaGradsWithBias(NamedTuple):
    """What :func:`sdpa_backward` returns with ``return_dbias=True`` (or ``dbias`` given)."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray
    dbias: DeviceArray


def _grads(outs) -> SdpaGrads | SdpaGradsWithBias:
    return SdpaGrads(*outs) if len(outs) == 3 else SdpaGradsWithBias(*outs)

_CACHE = "ops.sdpa"        # canonical configuration -> _Runner
_FAST = "ops.sdpa.fast"    # the raw arguments' key -> _Runner
_MAX_PACKS = 256


def sdpa_cache_clear(handle) -> None:
    """Forget the attention plans, executors and scratch buffers built for ``handle``."""
    handle_cache(handle, _CACHE).clear()
    handle_cache(handle, _FAST).clear()


def alibi_slopes(heads: int) -> np.ndarray:
    """The standard ALiBi slopes for ``heads`` query heads (an int >= 1; float32, as cuDNN's frontend computes
    them)."""
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
        raise InvalidValueError(f"heads must be an int >= 1, got {heads!r}")
    heads = int(heads)
    n = 1 << int(math.floor(math.log2(heads)))
    exps = list(range(1, n + 1)) + [0.5 * (i + 1) for i in range(0, 2 * (heads - n), 2)]
    return np.array([2.0 ** (-8.0 * e / n) for e in exps], np.float32)


# -- the fast path: a key and data pointers read without validation ----------------------------------------------
def _signatures(xs) -> tuple[tuple, tuple]:
    """Tensor arguments ``xs`` read once each (:func:`~cudnn_py.memory.array_signature`): (their signatures, the
    fast key's part; their data pointers), None for None.

    :raises TypeError: an argument that is not device memory (the validated path says what is wrong with it).
    """
    sigs, ptrs = zip(*[(None, None) if x is None else array_signature(x) for x in xs])
    return sigs, ptrs


class _Runner:
    """One built configuration: its plan, the graph tensors in binding order (call inputs, cached constants,
    outputs), the constants' arrays, and variant packs cached by the bound data pointers (+ workspace)."""

    def __init__(self, plan, handle, tensors, consts, specs, n_inputs: int):
        io, scalars = plan_bindings(plan)
        if {t.uid for t in io} != {t.uid for t in tensors} or len(io) != len(tensors):
            raise AssertionError("sdpa: the graph's I/O tensors and the bound tensors differ")
        self.plan, self.handle, self.tensors = plan, handle, tuple(tensors)
        self.uids = [t.uid for t in tensors] + [t.uid for t in scalars] + scratch_pointers(plan, 0)[0]
        self.scalar_ptrs = [plan.graph.scalar_pointer(t) for t in scalars]
        self.consts = consts                      # kept alive: their addresses are in every pack
        self.const_ptrs = tuple(c.ptr for c in consts)
        self.specs = specs                        # per output: (logical shape, dtype, strides, packed shape)
        self.n_inputs = n_inputs
        self.packs: dict = {}
        self.keep: dict = {}
        self.ws_size = plan.workspace_size
        ws = getattr(handle, "workspace", None)
        self.ws_get = None if ws is None else ws.get
        self.stream = getattr(handle, "stream", None)
        self.device = handle_device(handle)
        self.h = handle.ptr if hasattr(handle, "ptr") else ctypes.c_void_p(
            ctypes.cast(handle, ctypes.c_void_p).value)
        self.plan_ptr = plan_pointer(plan)

    def _workspace(self) -> int | None:
        if not self.ws_size:
            return None
        if self.ws_get is None:
            raise InvalidValueError(f"the attention plan needs {self.ws_size} bytes of workspace and the handle has "
                                    f"none")
        return self.ws_get(self.ws_size, self.stream)

    def _execute(self, vp) -> None:
        status = nvtx.wrap("cudnnBackendExecute", raw_execute())(self.h, self.plan_ptr, vp)
        if status:
            if getattr(self.handle, "closed", False):
                raise ClosedError("the Handle of this attention plan is closed")
            raise status_error("cudnnBackendExecute", status)

    def try_run(self, ptrs: tuple) -> bool:
        """Execute with the variant pack of these data pointers if one is cached (no validation: the fast key
        fixed the arrays' shapes, strides and dtypes, and the pointers were validated when the pack was made)."""
        wsp = self._workspace()
        vp = self.packs.get(ptrs if wsp is None else ptrs + (wsp,))
        if vp is None:
            return False
        self._execute(vp)
        return True

    def run(self, arrays) -> None:
        """Validate ``arrays`` (call inputs, outputs; the constants are added here) against the graph, then
        execute through the (cached or new) variant pack of their pointers."""
        arrays = list(arrays[:self.n_inputs]) + list(self.consts) + list(arrays[self.n_inputs:])
        ptrs = tuple(tensor_pointer(t, a, self.device) for t, a in zip(self.tensors, arrays))
        wsp = self._workspace()
        key = ptrs if wsp is None else ptrs + (wsp,)
        vp = self.packs.get(key)
        if vp is None:
            if len(self.packs) >= _MAX_PACKS:
                self.packs.clear()
                self.keep.clear()
            desc = make_variant_pack(self.uids, list(ptrs) + self.scalar_ptrs + scratch_pointers(self.plan, wsp)[1],
                                     wsp)
            vp = self.packs[key] = ctypes.c_void_p(desc.ptr.value)
            self.keep[key] = desc
        self._execute(vp)


# -- the validated path ------------------------------------------------------------------------------------------
def _dev(obj, name: str):
    """A device tensor argument and its meta (shape, strides, NumPy dtype): a DeviceArray or a torch tensor as itself
    (read by :func:`~cudnn_py.memory.array_signature`, without a DLPack round trip), anything else as a DeviceArray
    view."""
    if type(obj) is not DeviceArray and not is_torch_tensor(obj):
        obj = as_array(obj, name)
    (shape, strides, dtype, _), _ = array_signature(obj, name)
    return obj, (shape, strides, dtype)


def _per_batch(obj, name: str, pages: bool = False):
    """An optional per-batch device tensor with its meta, or (None, None): a vector ((N,) or (N, 1, 1, 1)) as (N, 1,
    1, 1), or with ``pages`` a page table ((B, pages) or (B, 1, pages, 1)) as (B, 1, pages, 1)."""
    if obj is None:
        return None, None
    a = as_array(obj, name)
    if a.ndim == 1 + pages:
        if not a.is_contiguous:
            raise InvalidValueError(f"{name} must be packed")
        a = a.reshape(a.shape[0], 1, a.shape[1], 1) if pages else a.reshape(a.shape[0], 1, 1, 1)
    return a, (a.shape, a.strides, a.dtype)


def _opt(obj, name: str):
    return (None, None) if obj is None else _dev(obj, name)


def _thd(obj, name: str, b: int, s_max: int, heads: int | None = None) -> DeviceArray:
    """A packed (T, H, D) device tensor seen as the logical (B, H, s_max, D) tensor the graph describes: token-major
    strides, batches placed by the ragged offsets (so the batch stride is never used)."""
    a = as_array(obj, name)
    if a.ndim != 3:
        raise InvalidValueError(f"{name} must be a packed (T, H, D) tensor with ragged offsets, got shape {a.shape}")
    if heads is not None and a.shape[1] != heads:
        raise InvalidValueError(f"{name} must have {heads} heads, got shape {a.shape}")
    t_st, h_st, d_st = a.strides
    if d_st != 1:
        raise InvalidValueError(f"{name}'s head dim must be packed (stride 1), got strides {a.strides}")
    return DeviceArray(a.ptr, (b, a.shape[1], s_max, a.shape[2]), a.dtype, (s_max * t_st, h_st, t_st, 1),
                       device_id=a.device_id, owner=a)


def _new_out(handle, shape, dtype, strides) -> DeviceArray:
    """An uninitialised device array of ``shape`` laid out with ``strides`` on the handle's device."""
    order = sorted(range(len(shape)), key=lambda i: -strides[i])
    buf = empty(tuple(shape[i] for i in order), dtype, stream=getattr(handle, "stream", None),
                device=handle_device(handle))
    return DeviceArray(buf.ptr, shape, dtype, strides, device_id=buf.device_id, owner=buf)


def _device_scalar(handle, value, name: str, dtype) -> DeviceArray:
    """A (1, 1, 1, 1) device tensor of ``dtype`` (int64: a Philox seed/offset; float32: an FP8 scale factor): a
    one-element device tensor of that dtype passes through; a number (an int for int64, a finite number > 0 for
    float32) is copied to the device."""
    dtype = np.dtype(dtype)
    kind = "an int" if dtype == np.int64 else "a finite number > 0"
    if dtype == np.int64 and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if not -2 ** 63 <= int(value) < 2 ** 63:
            raise InvalidValueError(f"{name} must fit int64, got {value}")
    elif dtype == np.float32 and isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
            raise InvalidValueError(f"{name} must be {kind} or a float32 device tensor, got {value!r}")
    else:
        if value is None:
            raise InvalidValueError(f"{name} is required: {kind} or a one-element {dtype} device tensor")
        a = as_array(value, name)
        if a.size != 1 or a.dtype != dtype:
            raise InvalidTypeError(f"{name} must be {kind} or a one-element {dtype} device tensor, got {a.shape} "
                                   f"{a.dtype}")
        return a if a.shape == (1, 1, 1, 1) else a.reshape(1, 1, 1, 1)
    return to_device(np.full((1, 1, 1, 1), value, dtype), stream=getattr(handle, "stream", None),
                     device=handle_device(handle))


def _check_int(value, name) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise InvalidValueError(f"{name} must be an int >= 1, got {value!r}")


class _Args:
    """The call's device arrays and options, checked; ``key`` is the cache key of the configuration. Packed
    (ragged) tensors are replaced by their logical (B, H, S_max, D) views; ``packed`` keeps the (T, H, D) ones."""

    def __init__(self, handle, q, k, v, *, scale, causal, diagonal_alignment, left_bound, right_bound, bias,
                 seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, max_seq_len_q, max_seq_len_kv, alibi,
                 dropout, seed, offset, implementation, autotune, page_table_k=None, page_table_v=None):
        (self.seq_len_q, msq), (self.seq_len_kv, mskv) = (_per_batch(seq_len_q, "seq_len_q"),
                                                           _per_batch(seq_len_kv, "seq_len_kv"))
        self.ragged_q, mrq = _per_batch(ragged_offset_q, "ragged_offset_q")
        self.ragged_kv, mrkv = _per_batch(ragged_offset_kv, "ragged_offset_kv")
        self.ragged = self.ragged_q is not None or self.ragged_kv is not None
        if self.ragged:
            if self.ragged_q is None or self.ragged_kv is None:
                raise InvalidValueError("packed (THD) attention needs both ragged_offset_q and ragged_offset_kv")
            if max_seq_len_q is None or max_seq_len_kv is None:
                raise InvalidValueError("packed (THD) attention needs max_seq_len_q= and max_seq_len_kv= (the longest "
                                 "sequences: the logical S of the attention)")
            _check_int(max_seq_len_q, "max_seq_len_q")
            _check_int(max_seq_len_kv, "max_seq_len_kv")
            b = self.ragged_q.shape[0] - 1
            self.packed = {"q": as_array(q, "q"), "k": as_array(k, "k"), "v": as_array(v, "v")}
            q, k, v = (_thd(self.packed[n], n, b, s) for n, s in (("q", max_seq_len_q), ("k", max_seq_len_kv),
                                                                    ("v", max_seq_len_kv)))
            if v.shape[3] != q.shape[3] or k.shape[1] * k.shape[3] != v.shape[1] * v.shape[3]:
                raise InvalidValueError("packed attention here shares q's offsets with o and k's with v, so it needs "
                                 "Dv == D and Hk * D == Hv * Dv; build the graph (g.sdpa's ragged_offset_o/_v) for "
                                 "other shapes")
        self.page_table_k, mptk = _per_batch(page_table_k, "page_table_k", pages=True)
        self.page_table_v, mptv = _per_batch(page_table_v, "page_table_v", pages=True)
        self.paged = None
        if self.page_table_k is not None or self.page_table_v is not None:
            if self.ragged:
                raise InvalidValueError("a paged KV cache does not combine with packed (THD) tensors here")
            _check_int(max_seq_len_kv, "max_seq_len_kv")
            self.paged = max_seq_len_kv
        elif not self.ragged and (max_seq_len_q is not None or max_seq_len_kv is not None):
            raise InvalidValueError("max_seq_len_q/max_seq_len_kv are only for packed (THD) tensors with ragged "
                                    "offsets (and max_seq_len_kv for a paged KV cache)")
        (self.q, mq), (self.k, mk), (self.v, mv) = _dev(q, "q"), _dev(k, "k"), _dev(v, "v")
        self.bias, mb = _opt(bias, "bias")
        hq = mq[0][1] if len(mq[0]) == 4 else 1
        if alibi is True:
            self.alibi = ("standard", hq)
        elif alibi is None or alibi is False:
            self.alibi = None
        else:
            try:
                a = np.asarray(alibi, np.float32).reshape(-1)
            except (TypeError, ValueError):
                raise InvalidTypeError(f"alibi must be True, False or {hq} per-head slopes, got {alibi!r}") from None
            if a.shape != (hq,):
                raise InvalidValueError(f"alibi must be True or {hq} per-head slopes, got shape {np.shape(alibi)}")
            self.alibi = ("custom", tuple(float(x) for x in a))
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool):
            raise InvalidTypeError(f"dropout must be a number, got {type(dropout).__name__}")
        self.dropout = float(dropout)
        if self.dropout and (seed is None or offset is None):
            raise InvalidValueError("dropout needs seed= and offset= (ints or int64 device tensors): the Philox state")
        self.seed = None if not self.dropout else _device_scalar(handle, seed, "seed", np.int64)
        self.offset = None if not self.dropout else _device_scalar(handle, offset, "offset", np.int64)
        for val, n in ((scale, "scale"), (left_bound, "left_bound"), (right_bound, "right_bound")):
            if val is not None and (isinstance(val, bool) or not isinstance(val, numbers.Real)):
                raise InvalidTypeError(f"{n} must be a number or None, got {type(val).__name__}")
        if not isinstance(diagonal_alignment, str) or not isinstance(implementation, str):
            raise InvalidTypeError("diagonal_alignment and implementation must be strings")
        causal = bool_arg(causal, "causal")
        self.options = dict(scale=scale, causal=causal, diagonal_alignment=diagonal_alignment,
                            left_bound=left_bound, right_bound=right_bound, dropout=self.dropout,
                            implementation=implementation)
        if self.paged is not None:
            self.options["max_seq_len_kv"] = self.paged
        self.autotune = bool_arg(autotune, "autotune")
        self.hq, self.dtype = hq, mq[2]
        self.key = (mq, mk, mv, mb, msq, mskv, mrq, mrkv, self.alibi, self.seed is not None,
                    scale, causal, diagonal_alignment, left_bound, right_bound, self.dropout, implementation,
                    self.autotune, mptk, mptv, self.paged)

    def graph_inputs(self, g: Graph, handle) -> tuple[dict, list, list]:
        """The graph tensors for this call's arrays: (builder kwargs, tensors, arrays) in binding order (the arrays
        of cached constants - ALiBi slopes - are made here, once per plan)."""
        kw, tensors, arrays = {}, [], []
        for n in ("q", "k", "v"):
            tensors.append(g.tensor_like(getattr(self, n), n))
            arrays.append(getattr(self, n))
        for n in ("bias", "seq_len_q", "seq_len_kv", "ragged_q", "ragged_kv", "seed", "offset", "page_table_k",
                  "page_table_v"):
            a = getattr(self, n)
            if a is not None:
                t = g.tensor_like(a, n)
                if n == "ragged_q":
                    kw["ragged_offset_q"] = kw["ragged_offset_o"] = t
                elif n == "ragged_kv":
                    kw["ragged_offset_k"] = kw["ragged_offset_v"] = t
                else:
                    kw[n] = t
                tensors.append(t)
                arrays.append(a)
        if self.alibi is not None:
            slopes = alibi_slopes(self.hq) if self.alibi[0] == "standard" else np.array(self.alibi[1], np.float32)
            dev = to_device(slopes.reshape(1, -1, 1, 1), stream=getattr(handle, "stream", None),
                            device=handle_device(handle))
            kw["alibi_slopes"] = g.tensor_like(dev, "alibi_slopes")
            tensors.append(kw["alibi_slopes"])
            arrays.append(dev)
        return kw, tensors, arrays

    def call_arrays(self) -> list:
        """This call's input arrays in the order of :meth:`graph_inputs` (without the cached constants)."""
        return [a for a in (self.q, self.k, self.v, self.bias, self.seq_len_q, self.seq_len_kv, self.ragged_q,
                            self.ragged_kv, self.seed, self.offset, self.page_table_k, self.page_table_v)
                if a is not None]


def _graph(args: _Args, name: str) -> Graph:
    return Graph(io_dtype=args.dtype, compute_dtype="float32", intermediate_dtype="float32", name=name)


def _plan(g: Graph, handle, tensors, arrays, outs, autotune: bool):
    """Build ``g`` (or autotune it on the call's inputs and scratch outputs); returns its selected plan."""
    if autotune:
        pack = dict(zip(tensors, arrays))
        for t in outs:
            pack[t] = _new_out(handle, t.shape, t.np_dtype, t.strides)
        autotune_graph(g, handle, pack)
    else:
        g.build(handle)
    return g.plan


def _spec(t, src=None) -> tuple:
    """What an output must be: (logical shape, dtype, strides, ``src``): for a packed output, the index of the
    call input whose token count T it shares (it is then a packed (T, H, D) array)."""
    return t.shape, t.np_dtype, t.strides, src


def _packed_shape(spec, shapes) -> tuple:
    """The (T, H, D) shape of a packed output: T of the input it follows (``shapes``: the packed q, k, v shapes), H
    and D of its logical shape."""
    shape, _, _, src = spec
    return (shapes[src][0], shape[1], shape[3])


def _bind_out(handle, given, name, spec, shapes):
    """(returned array, bound array) for an output: the caller's ``given`` checked against ``spec``, or new. A
    packed output is a (T, H, D) array bound through its logical view (``shapes``: the call's packed q, k, v
    shapes)."""
    shape, dtype, strides, src = spec
    if src is not None:
        packed = _packed_shape(spec, shapes)
        if given is None:
            given = _new_out(handle, packed, dtype, c_strides(packed))
        a = as_array(given, name)
        if a.shape != packed or a.dtype != dtype:
            raise InvalidValueError(f"{name} must have shape {packed} and dtype {dtype}, got {a.shape} {a.dtype}")
        return given, _thd(a, name, shape[0], shape[2])
    if given is None:
        a = _new_out(handle, shape, dtype, strides)
        return a, a
    _, meta = _dev(given, name)
    if tuple(meta[0]) != shape or meta[2] != dtype:
        raise InvalidValueError(f"{name} must have shape {shape} and dtype {dtype}, got {tuple(meta[0])} {meta[2]}")
    return given, given


def _runner(handle, key, make) -> _Runner:
    runners = handle_cache(handle, _CACHE)
    r = runners.get(key)
    if r is None:
        r = runners[key] = make()
    return r


def _fast_outs(handle, r: _Runner, given, ptrs, sigs) -> tuple[list, tuple]:
    """The outputs of a fast call and their data pointers: the caller's (``given``, ``ptrs``), or new arrays (packed
    ones as (T, H, D) arrays; ``sigs``: the signatures of q, k, v)."""
    outs, out_ptrs = [], []
    for x, p, spec in zip(given, ptrs, r.specs):
        if x is None:
            if spec[3] is None:
                x = _new_out(handle, spec[0], spec[1], spec[2])
            else:
                packed = _packed_shape(spec, [s[0] for s in sigs])
                x = _new_out(handle, packed, spec[1], c_strides(packed))
            p = x.ptr
        outs.append(x)
        out_ptrs.append(p)
    return outs, tuple(out_ptrs)


def sdpa(handle, q, k, v, *, scale: float | None = None, causal: bool = False,
         diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
         bias=None, seq_len_q=None, seq_len_kv=None, ragged_offset_q=None, ragged_offset_kv=None,
         max_seq_len_q: int | None = None, max_seq_len_kv: int | None = None, alibi=False, dropout: float = 0.0,
         seed=None, offset=None, page_table_k=None, page_table_v=None, return_stats: bool = False, o=None,
         stats=None, implementation: str = "auto", autotune: bool = False):
    """Attention forward: ``o = softmax(mask(scale * q k^T + bias)) v`` in one fused cuDNN kernel.

    :param handle: the :class:`~cudnn_py.Handle` (plans are cached on it).
    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) float16/bfloat16 device tensors
        (DeviceArray, torch, anything with DLPack / ``__cuda_array_interface__``), head dim packed; Hq a
        multiple of Hk and Hv (grouped-query / multi-query attention). Packed batches: (T_q, Hq, D), (T_kv, Hk,
        D), (T_kv, Hv, D) with the ragged offsets below.
    :param scale: default 1/sqrt(D).
    :param causal: query i attends to keys <= i (relative to the aligned diagonal).
    :param diagonal_alignment: 'top_left' or 'bottom_right' (the diagonal ends at the last key).
    :param left_bound, right_bound: sliding window: keys in (i - left_bound, i + right_bound].
    :param bias: additive (B or 1, Hq or 1, Sq, Skv) device tensor of q's dtype.
    :param seq_len_q, seq_len_kv: per-batch int32 lengths ((B,) or (B, 1, 1, 1) device tensors): padding mask;
        output rows at or beyond seq_len_q are not written.
    :param ragged_offset_q, ragged_offset_kv: packed ("THD") batches: (B + 1,) int32/int64 device tensors of each
        sequence's first element in q (and o) and in k (and v), i.e. cumulative token counts times H * D; need
        the padding mask and ``max_seq_len_q``/``max_seq_len_kv``. o is then (T_q, Hq, D); the statistics stay
        (B, Hq, max_seq_len_q, 1). Needs Dv == D and Hk * D == Hv * Dv (one offset tensor for q and o, one for k
        and v); the graph API takes four.
    :param max_seq_len_q, max_seq_len_kv: the longest sequences of a packed batch (``max_seq_len_kv`` also: the
        longest cached sequence of a paged KV cache).
    :param page_table_k, page_table_v: a paged KV cache (inference): k and v are then the page containers
        (blocks, Hk, block_size, D) and (blocks, Hv, block_size, Dv), and each table a (B, pages) or (B, 1, pages,
        1) int32 device tensor of the block index of each page of each sequence, pages = ceil(max_seq_len_kv /
        block_size); needs ``seq_len_q``/``seq_len_kv`` and ``max_seq_len_kv``.
    :param alibi: True for the standard ALiBi slopes, or Hq slopes (needs causal).
    :param dropout: drop probability; needs ``seed`` and ``offset`` (ints or int64 device tensors; the same
        pair gives the same mask, which :func:`sdpa_backward` regenerates).
    :param return_stats: also return the (B, Hq, Sq, 1) float32 statistics :func:`sdpa_backward` needs.
    :param o, stats: outputs to write (default: new arrays; o gets q's layout); a ``stats`` array implies
        ``return_stats``.
    :param implementation: 'auto', 'composite' or 'unified' (see :mod:`cudnn_py.graph.ops.sdpa`).
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: o, or with ``return_stats`` an :class:`SdpaOutputs` (o, stats), which unpacks like a tuple.
    """
    return_stats = return_stats or stats is not None
    fast = handle_cache(handle, _FAST)
    fkey = None
    if type(seed) is not int and type(offset) is not int:  # an int seed/offset is copied to the device: validated
        try:
            ins, in_ptrs = _signatures((q, k, v, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed,
                                        offset, page_table_k, page_table_v))
            gs, g_ptrs = _signatures((o, stats))
            fkey = ("fwd", ins, gs, scale, causal, diagonal_alignment, left_bound, right_bound, alibi, dropout,
                    return_stats, max_seq_len_q, max_seq_len_kv, implementation, autotune)
            r = fast.get(fkey)
        except (InvalidValueError, TypeError):  # not device memory (InvalidTypeError), or an unhashable option
            fkey = r = None
        if r is not None:
            outs, out_ptrs = _fast_outs(handle, r, (o, stats), g_ptrs, ins[:3])
            if r.try_run(tuple(p for p in in_ptrs if p is not None) + r.const_ptrs + out_ptrs):
                return SdpaOutputs(*outs) if return_stats else outs[0]

    args = _Args(handle, q, k, v, scale=scale, causal=causal, diagonal_alignment=diagonal_alignment,
                 left_bound=left_bound, right_bound=right_bound, bias=bias, seq_len_q=seq_len_q,
                 seq_len_kv=seq_len_kv, ragged_offset_q=ragged_offset_q, ragged_offset_kv=ragged_offset_kv,
                 max_seq_len_q=max_seq_len_q, max_seq_len_kv=max_seq_len_kv, alibi=alibi, dropout=dropout,
                 seed=seed, offset=offset, implementation=implementation, autotune=autotune,
                 page_table_k=page_table_k, page_table_v=page_table_v)
    return_stats = bool_arg(return_stats, "return_stats")
    given_o = None if o is None or args.ragged else _dev(o, "o")[1]
    key = ("fwd", args.key, return_stats, given_o)

    def make():
        g = _graph(args, "sdpa")
        kw, tensors, arrays = args.graph_inputs(g, handle)
        to, ts = g.sdpa(*tensors[:3], generate_stats=return_stats, **kw, **args.options)
        if given_o is not None:
            if tuple(given_o[0]) != to.shape:
                raise InvalidValueError(f"o must have shape {to.shape}, got {tuple(given_o[0])}")
            to.strides = tuple(given_o[1])
        outs = [to.set_output(True).set_name("o")]
        if return_stats:
            outs.append(ts.set_output(True).set_name("stats"))
        plan = _plan(g, handle, tensors + outs, arrays, outs, args.autotune)
        n = len(args.call_arrays())
        specs = [_spec(to, 0 if args.ragged else None)] + ([_spec(ts)] if return_stats else [])
        return _Runner(plan, handle, tensors + outs, arrays[n:], specs, n)

    r = _runner(handle, key, make)
    packed = [args.packed[x].shape for x in ("q", "k", "v")] if args.ragged else None
    bound = [_bind_out(handle, x, n, spec, packed) for x, n, spec in zip((o, stats), ("o", "stats"), r.specs)]
    r.run(args.call_arrays() + [b for _, b in bound])
    if fkey is not None:
        fast[fkey] = r
    res = [a for a, _ in bound]
    return SdpaOutputs(*res) if return_stats else res[0]


def sdpa_backward(handle, q, k, v, o, do, stats, *, scale: float | None = None, causal: bool = False,
                  diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
                  bias=None, return_dbias: bool = False, seq_len_q=None, seq_len_kv=None, ragged_offset_q=None,
                  ragged_offset_kv=None, max_seq_len_q: int | None = None, max_seq_len_kv: int | None = None,
                  alibi=False, dropout: float = 0.0, seed=None, offset=None, dq=None, dk=None, dv=None, dbias=None,
                  implementation: str = "auto", autotune: bool = False):
    """Attention backward: the gradients of :func:`sdpa` for the output gradient ``do``.

    Takes the forward's inputs and options (same scale, masks, bias, dropout with the same seed/offset, ragged
    offsets), its output ``o`` and statistics ``stats`` (``return_stats=True``), and ``do`` (o's shape and dtype;
    packed like o for packed batches).

    :param return_dbias: also return the gradient of ``bias`` (its shape).
    :param dq, dk, dv, dbias: outputs to write (default: new arrays in the layouts of q, k, v and bias); a
        ``dbias`` array implies ``return_dbias``.
    :returns: a :class:`SdpaGrads` (dq, dk, dv), or with ``return_dbias`` a :class:`SdpaGradsWithBias` (dq, dk, dv,
        dbias); both unpack like tuples.
    """
    return_dbias = return_dbias or dbias is not None
    fast = handle_cache(handle, _FAST)
    fkey = None
    if type(seed) is not int and type(offset) is not int:
        try:
            ins, in_ptrs = _signatures((q, k, v, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed,
                                        offset, o, do, stats))
            gs, g_ptrs = _signatures((dq, dk, dv, dbias))
            fkey = ("bwd", ins, gs, scale, causal, diagonal_alignment, left_bound, right_bound, alibi, dropout,
                    return_dbias, max_seq_len_q, max_seq_len_kv, implementation, autotune)
            r = fast.get(fkey)
        except (InvalidValueError, TypeError):
            fkey = r = None
        if r is not None:
            outs, out_ptrs = _fast_outs(handle, r, (dq, dk, dv, dbias), g_ptrs, ins[:3])
            if r.try_run(tuple(p for p in in_ptrs if p is not None) + r.const_ptrs + out_ptrs):
                return _grads(outs)

    args = _Args(handle, q, k, v, scale=scale, causal=causal, diagonal_alignment=diagonal_alignment,
                 left_bound=left_bound, right_bound=right_bound, bias=bias, seq_len_q=seq_len_q,
                 seq_len_kv=seq_len_kv, ragged_offset_q=ragged_offset_q, ragged_offset_kv=ragged_offset_kv,
                 max_seq_len_q=max_seq_len_q, max_seq_len_kv=max_seq_len_kv, alibi=alibi, dropout=dropout,
                 seed=seed, offset=offset, implementation=implementation, autotune=autotune)
    return_dbias = bool_arg(return_dbias, "return_dbias")
    if args.ragged:
        b, smax = args.q.shape[0], args.q.shape[2]
        (oa, mo), (doa, mdo) = ((x, (x.shape, x.strides, x.dtype)) for x in (
            _thd(o, "o", b, smax, args.q.shape[1]), _thd(do, "do", b, smax, args.q.shape[1])))
    else:
        (oa, mo), (doa, mdo) = _dev(o, "o"), _dev(do, "do")
    sa, ms = _dev(stats, "stats")
    given = [None if x is None or (args.ragged and n != "dbias") else _dev(x, n)[1]
             for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv"), (dbias, "dbias"))]
    key = ("bwd", args.key, mo, mdo, ms, bool(return_dbias), tuple(given))

    def make():
        g = _graph(args, "sdpa_backward")
        kw, tensors, arrays = args.graph_inputs(g, handle)
        extra = [g.tensor_like(oa, "o"), g.tensor_like(doa, "do"), g.tensor_like(sa, "stats")]
        grads = g.sdpa_backward(*tensors[:3], *extra, dbias=return_dbias, name="sdpa_bwd", **kw, **args.options)
        for t, meta, n in zip(grads, given, ("dq", "dk", "dv", "dbias")):
            if meta is not None:
                if tuple(meta[0]) != t.shape:
                    raise InvalidValueError(f"{n} must have shape {t.shape}, got {tuple(meta[0])}")
                t.strides = tuple(meta[1])
            t.set_output(True).set_name(n)
        plan = _plan(g, handle, tensors + extra + list(grads), arrays + [oa, doa, sa], list(grads), args.autotune)
        n = len(args.call_arrays())
        srcs = (0, 1, 2, None) if args.ragged else (None,) * 4
        specs = [_spec(t, src) for t, src in zip(grads, srcs)]
        # bound in the order: call inputs, o/do/stats, constants (ALiBi slopes), gradients; the scratch tensors
        # live in the plan's workspace
        return _Runner(plan, handle, tensors[:n] + extra + tensors[n:] + list(grads), arrays[n:], specs, n + 3)

    r = _runner(handle, key, make)
    packed = [args.packed[x].shape for x in ("q", "k", "v")] if args.ragged else None
    bound = [_bind_out(handle, x, n, spec, packed) for x, n, spec in
             zip((dq, dk, dv, dbias), ("dq", "dk", "dv", "dbias"), r.specs)]
    r.run(args.call_arrays() + [oa, doa, sa] + [b for _, b in bound])
    if fkey is not None:
        fast[fkey] = r
    return _grads([a for a, _ in bound])


# -- FP8 -----------------------------------------------------------------------------------------------------------
class SdpaFp8Outputs(NamedTuple):
    """What :func:`sdpa_fp8` returns."""
    o: DeviceArray              #: the output in q's FP8 type (the float32 result times ``scale_o``)
    stats: DeviceArray | None   #: the float32 softmax statistics (``return_stats=True``), else None
    amax_s: DeviceArray         #: (1, 1, 1, 1) float32: max |softmax probability| (before ``scale_s``)
    amax_o: DeviceArray         #: (1, 1, 1, 1) float32: max |o| before ``scale_o``


class SdpaFp8Grads(NamedTuple):
    """What :func:`sdpa_fp8_backward` returns: the FP8 gradients and the (1, 1, 1, 1) float32 max |.| of each
    before its scaling (``amax_dp``: of dS, the gradient of the scores)."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray
    amax_dq: DeviceArray
    amax_dk: DeviceArray
    amax_dv: DeviceArray
    amax_dp: DeviceArray


def _fp8_call(handle, kind: str, tensors: dict, scales: dict, given: dict, options: tuple, build):
    """Run an FP8 attention graph through the plan cache; returns its outputs in the order of ``given``.

    :param kind: 'fp8_fwd' or 'fp8_bwd' (part of the cache keys).
    :param tensors: the call's tensor inputs by graph-builder name (q, k, v, ...).
    :param scales: the descale/scale arguments by name (numbers or device tensors).
    :param given: the outputs by name, each the caller's array or None (a new one).
    :param options: (scale, causal, autotune, ...) as hashed into the keys.
    :param build: ``build(g, inputs)`` adds the operation to graph ``g`` (``inputs``: graph tensors by name) and
        returns its output tensors by name, for the names of ``given``.
    """
    fast = handle_cache(handle, _FAST)
    fkey = None
    if not any(isinstance(x, numbers.Real) for x in scales.values()):  # a number is copied: validated path
        try:
            ins, in_ptrs = _signatures((*tensors.values(), *scales.values()))
            gs, g_ptrs = _signatures(given.values())
            fkey = (kind, ins, gs, options)
            r = fast.get(fkey)
        except (InvalidValueError, TypeError):
            fkey = r = None
        if r is not None:
            outs, out_ptrs = _fast_outs(handle, r, given.values(), g_ptrs, ())
            if r.try_run(tuple(in_ptrs) + out_ptrs):
                return outs

    arrays, metas = [], []
    for n, x in tensors.items():
        a, meta = _dev(x, n)
        arrays.append(a)
        metas.append(meta)
    for n, x in scales.items():
        a = _device_scalar(handle, x, n, np.float32)
        arrays.append(a)
        metas.append((a.shape, a.strides, a.dtype))
    out_metas = {n: None if x is None else _dev(x, n)[1] for n, x in given.items()}
    key = (kind, tuple(metas), tuple(out_metas.values()), options)
    names = (*tensors, *scales)

    def make():
        g = Graph(io_dtype=metas[0][2], compute_dtype="float32", intermediate_dtype="float32", name=f"sdpa_{kind}")
        ins = [g.tensor_like(a, n) for n, a in zip(names, arrays)]
        res = build(g, dict(zip(names, ins)))
        outs = []
        for n, meta in out_metas.items():
            t = res[n]
            if meta is not None:
                if tuple(meta[0]) != t.shape:
                    raise InvalidValueError(f"{n} must have shape {t.shape}, got {tuple(meta[0])}")
                t.strides = tuple(meta[1])
            outs.append(t.set_output(True).set_name(n))
        plan = _plan(g, handle, ins + outs, arrays, outs, options[2])
        return _Runner(plan, handle, ins + outs, [], [_spec(t) for t in outs], len(ins))

    r = _runner(handle, key, make)
    bound = [_bind_out(handle, x, n, spec, None) for (n, x), spec in zip(given.items(), r.specs)]
    r.run(arrays + [b for _, b in bound])
    if fkey is not None:
        fast[fkey] = r
    return [a for a, _ in bound]


def _fp8_options(scale, causal, autotune) -> tuple:
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise InvalidTypeError(f"scale must be a number or None, got {type(scale).__name__}")
    return scale, bool_arg(causal, "causal"), bool_arg(autotune, "autotune")


def sdpa_fp8(handle, q, k, v, *, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
             scale: float | None = None, causal: bool = False, return_stats: bool = False, o=None, stats=None,
             amax_s=None, amax_o=None, autotune: bool = False) -> SdpaFp8Outputs:
    """FP8 attention forward (Hopper and newer) through a cached plan, as :func:`sdpa`.

    Computes ``P = softmax(scale * descale_q * descale_k * q k^T)`` in float32, rounds ``P * scale_s`` to q's FP8
    type, and returns ``o = (P8 v) * descale_s * descale_v * scale_o`` in q's FP8 type, with the amax of P and of o
    before ``scale_o`` (what a delayed-scaling recipe feeds its next scales).

    :param handle: the :class:`~cudnn_py.Handle` (plans are cached on it).
    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) device tensors of one FP8 type
        (float8_e4m3fn or float8_e5m2: ml_dtypes on DeviceArrays, or torch's), head dims multiples of 16 up to
        256 and packed; Hq a multiple of Hk and Hv.
    :param descale_q, descale_k, descale_v, descale_s, scale_s, scale_o: each a one-element float32 device tensor
        or a number > 0 (copied to the device on each call: pass device tensors for the fast path).
    :param scale: multiplies q k^T (default 1/sqrt(D)).
    :param causal: top-left causal mask (the only mask FP8 attention takes here).
    :param return_stats: also return the (B, Hq, Sq, 1) float32 statistics :func:`sdpa_fp8_backward` needs.
    :param o, stats, amax_s, amax_o: outputs to write (default: new arrays; o gets q's layout); ``stats`` implies
        ``return_stats``.
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: an :class:`SdpaFp8Outputs` (o, stats or None, amax_s, amax_o).
    """
    return_stats = bool_arg(return_stats, "return_stats") or stats is not None
    given = {"o": o, "stats": stats, "amax_s": amax_s, "amax_o": amax_o}
    if not return_stats:
        del given["stats"]
    options = _fp8_options(scale, causal, autotune) + (return_stats,)

    def build(g, t):
        outs = g.sdpa_fp8(t["q"], t["k"], t["v"], scale=scale, causal=causal, generate_stats=return_stats,
                          **{n: t[n] for n in FP8_FORWARD_SCALES})
        return dict(zip(("o", "stats", "amax_s", "amax_o"), outs))

    scales = {n: x for n, x in zip(FP8_FORWARD_SCALES, (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o))}
    outs = _fp8_call(handle, "fp8_fwd", {"q": q, "k": k, "v": v}, scales, given, options, build)
    if not return_stats:
        outs.insert(1, None)
    return SdpaFp8Outputs(*outs)


def sdpa_fp8_backward(handle, q, k, v, o, do, stats, *, descale_q, descale_k, descale_v, descale_o, descale_do,
                      descale_s, descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp,
                      scale: float | None = None, causal: bool = False, dq=None, dk=None, dv=None, amax_dq=None,
                      amax_dk=None, amax_dv=None, amax_dp=None, autotune: bool = False) -> SdpaFp8Grads:
    """FP8 attention backward (Hopper: head dim 128) through a cached plan: the gradients of :func:`sdpa_fp8`.

    :param q, k, v, o, stats: the forward's FP8 inputs, its FP8 output and its float32 statistics
        (``return_stats=True``).
    :param do: the output gradient (o's shape, either FP8 type).
    :param descale_q, descale_k, descale_v, descale_o, descale_do: the inverse scales of the FP8 inputs.
    :param descale_s, scale_s: the forward's probability scale and its inverse.
    :param scale_dp, descale_dp: the scale of dS (rounded to do's FP8 type inside the kernel) and its inverse.
    :param scale_dq, scale_dk, scale_dv: the scales of the FP8 results. Each scale is a one-element float32 device
        tensor or a number > 0 (copied to the device on each call).
    :param scale, causal: as in the forward.
    :param dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp: outputs to write (default: new arrays; dq, dk, dv in the
        layouts of q, k, v and q's FP8 type).
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: an :class:`SdpaFp8Grads` (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp).
    """
    given = {"dq": dq, "dk": dk, "dv": dv, "amax_dq": amax_dq, "amax_dk": amax_dk, "amax_dv": amax_dv,
             "amax_dp": amax_dp}
    options = _fp8_options(scale, causal, autotune)

    def build(g, t):
        outs = g.sdpa_fp8_backward(*(t[n] for n in ("q", "k", "v", "o", "do", "stats")), scale=scale, causal=causal,
                                   **{n: t[n] for n in FP8_BACKWARD_SCALES})
        return dict(zip(given, outs))

    scales = dict(zip(FP8_BACKWARD_SCALES, (descale_q, descale_k, descale_v, descale_o, descale_do, descale_s,
                                         descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp)))
    tensors = {"q": q, "k": k, "v": v, "o": o, "do": do, "stats": stats}
    return SdpaFp8Grads(*_fp8_call(handle, "fp8_bwd", tensors, scales, given, options, build))
