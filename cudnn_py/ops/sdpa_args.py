"""The arguments of the attention entry points: device tensors read and checked, packed (THD) tensors seen as their
logical views, constants made, outputs bound; and the plans of their graphs through the one runner.

:mod:`cudnn_py.ops.sdpa` and :mod:`cudnn_py.ops.sdpa_fp8` call these; the options are an
:class:`~cudnn_py.graph.ops.sdpa_options.SdpaOptions` (checked when made), the tensors' fit to each other is
checked by the graph builder (``Graph.sdpa*``).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Sequence

import numpy as np

from cudnn_py.caches import handle_cache
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph import Graph
from cudnn_py.graph.ops.sdpa_options import SdpaOptions
from cudnn_py.graph.runner import Runner, cached, handle_device, new_output, plan_graph
from cudnn_py.memory import DeviceArray, array_signature, as_array, c_strides, is_torch_tensor, to_device

__all__ = ["CACHE", "FAST", "SdpaArgs", "alibi_slopes", "signatures", "device_tensor", "device_scalar", "thd",
           "set_outputs", "output_spec", "bind_output", "fast_outputs", "fast_call", "graph_runner"]

CACHE = "ops.sdpa"        #: canonical configuration -> Runner
FAST = "ops.sdpa.fast"    #: the raw arguments' key -> Runner (the entry points' fast path)


def alibi_slopes(heads: int) -> np.ndarray:
    """The standard ALiBi slopes for ``heads`` query heads (an int >= 1; float32, as cuDNN's frontend computes
    them)."""
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
        raise InvalidValueError(f"heads must be an int >= 1, got {heads!r}")
    heads = int(heads)
    n = 1 << int(math.floor(math.log2(heads)))
    exps = list(range(1, n + 1)) + [0.5 * (i + 1) for i in range(0, 2 * (heads - n), 2)]
    return np.array([2.0 ** (-8.0 * e / n) for e in exps], np.float32)


def signatures(xs: Sequence[Any]) -> tuple[tuple, tuple]:
    """Tensor arguments ``xs`` read once each (:func:`~cudnn_py.memory.array_signature`): (their signatures, the
    fast key's part; their data pointers), None for None.

    :raises TypeError: an argument that is not device memory (the validated path says what is wrong with it).
    """
    sigs, ptrs = zip(*[(None, None) if x is None else array_signature(x) for x in xs])
    return sigs, ptrs


def fast_call(handle: Any, options: tuple, inputs: Sequence, outputs: Sequence) -> tuple[tuple | None, list | None]:
    """The entry points' fast path: (the key of these raw arguments, the outputs when the runner a validated call
    made for that key ran them; else None). The key holds each tensor's signature and the raw ``options``; the key
    is None (validate) for an argument that is not device memory or an unhashable option."""
    try:
        ins, in_ptrs = signatures(inputs)
        gs, g_ptrs = signatures(outputs)
        fkey = (options, ins, gs)
        r = handle_cache(handle, FAST).get(fkey)
    except (InvalidValueError, TypeError):
        return None, None
    if r is not None:
        outs, out_ptrs = fast_outputs(handle, r, outputs, g_ptrs, ins[:3])
        if r.try_run(tuple(p for p in in_ptrs if p is not None) + r.const_ptrs + out_ptrs):
            return fkey, outs
    return fkey, None


def device_tensor(obj: Any, name: str) -> tuple[Any, tuple]:
    """A device tensor argument and its meta (shape, strides, NumPy dtype): a DeviceArray or a torch tensor as
    itself (read without a DLPack round trip), anything else as a DeviceArray view."""
    if type(obj) is not DeviceArray and not is_torch_tensor(obj):
        obj = as_array(obj, name)
    (shape, strides, dtype, _), _ = array_signature(obj, name)
    return obj, (shape, strides, dtype)


def _per_batch(obj: Any, name: str, pages: bool = False) -> tuple[DeviceArray | None, tuple | None]:
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


def thd(obj: Any, name: str, b: int, s_max: int, heads: int | None = None) -> DeviceArray:
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


def device_scalar(handle: Any, value: Any, name: str, dtype: Any) -> DeviceArray:
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


#: the optional tensor arguments, in binding order after q, k, v (the attribute names of :class:`SdpaArgs`)
_OPTIONAL = ("bias", "seq_len_q", "seq_len_kv", "ragged_q", "ragged_k", "seed", "offset", "page_table_k",
             "page_table_v")


class SdpaArgs:
    """One call's device arrays with its :class:`SdpaOptions`; ``key`` is the cache key of the configuration.
    Packed (ragged) tensors are replaced by their logical (B, H, S_max, D) views; ``packed`` keeps the (T, H, D)
    ones."""

    def __init__(self, handle: Any, q: Any, k: Any, v: Any, opts: SdpaOptions, *, bias: Any = None,
                 seq_len_q: Any = None, seq_len_kv: Any = None, ragged_offset_q: Any = None,
                 ragged_offset_k: Any = None, seed: Any = None, offset: Any = None, page_table_k: Any = None,
                 page_table_v: Any = None):
        self.opts = opts
        (self.seq_len_q, msq), (self.seq_len_kv, mskv) = (_per_batch(seq_len_q, "seq_len_q"),
                                                           _per_batch(seq_len_kv, "seq_len_kv"))
        self.ragged_q, mrq = _per_batch(ragged_offset_q, "ragged_offset_q")
        self.ragged_k, mrk = _per_batch(ragged_offset_k, "ragged_offset_k")
        self.ragged = self.ragged_q is not None or self.ragged_k is not None
        msl_q, msl_kv = opts.max_seq_len_q, opts.max_seq_len_kv
        if self.ragged:
            if self.ragged_q is None or self.ragged_k is None:
                raise InvalidValueError("packed (THD) attention needs both ragged_offset_q and ragged_offset_k")
            if msl_q is None or msl_kv is None:
                raise InvalidValueError("packed (THD) attention needs the options max_seq_len_q and max_seq_len_kv "
                                        "(the longest sequences: the logical S of the attention)")
            b = self.ragged_q.shape[0] - 1
            self.packed = {"q": as_array(q, "q"), "k": as_array(k, "k"), "v": as_array(v, "v")}
            q, k, v = (thd(self.packed[n], n, b, s) for n, s in (("q", msl_q), ("k", msl_kv), ("v", msl_kv)))
            if v.shape[3] != q.shape[3] or k.shape[1] * k.shape[3] != v.shape[1] * v.shape[3]:
                raise InvalidValueError("packed attention here shares q's offsets with o and k's with v, so it needs "
                                        "Dv == D and Hk * D == Hv * Dv; build the graph (g.sdpa's ragged_offset_o/_v) "
                                        "for other shapes")
        self.page_table_k, mptk = _per_batch(page_table_k, "page_table_k", pages=True)
        self.page_table_v, mptv = _per_batch(page_table_v, "page_table_v", pages=True)
        paged = self.page_table_k is not None or self.page_table_v is not None
        if paged:
            if self.ragged:
                raise InvalidValueError("a paged KV cache does not combine with packed (THD) tensors here")
            if msl_kv is None:
                raise InvalidValueError("a paged KV cache needs the option max_seq_len_kv (the longest cached "
                                        "sequence)")
        elif not self.ragged and (msl_q is not None or msl_kv is not None):
            raise InvalidValueError("max_seq_len_q/max_seq_len_kv are only for packed (THD) tensors with ragged "
                                    "offsets (and max_seq_len_kv for a paged KV cache)")
        (self.q, mq), (self.k, mk), (self.v, mv) = (device_tensor(q, "q"), device_tensor(k, "k"),
                                                    device_tensor(v, "v"))
        self.bias: Any
        self.bias, mb = device_tensor(bias, "bias") if bias is not None else (None, None)
        self.hq = mq[0][1] if len(mq[0]) == 4 else 1
        if isinstance(opts.alibi, tuple) and len(opts.alibi) != self.hq:
            raise InvalidValueError(f"alibi must be True or {self.hq} per-head slopes, got {len(opts.alibi)}")
        if opts.dropout and (seed is None or offset is None):
            raise InvalidValueError("dropout needs seed= and offset= (ints or int64 device tensors): the Philox state")
        self.seed = None if not opts.dropout else device_scalar(handle, seed, "seed", np.int64)
        self.offset = None if not opts.dropout else device_scalar(handle, offset, "offset", np.int64)
        self.dtype = mq[2]
        self.key = (mq, mk, mv, mb, msq, mskv, mrq, mrk, mptk, mptv, self.seed is not None, opts)

    def graph_inputs(self, g: Graph, handle: Any) -> tuple[dict, list, list]:
        """The graph tensors for this call's arrays: (builder kwargs, tensors, arrays) in binding order (the arrays
        of cached constants - ALiBi slopes - are made here, once per plan)."""
        kw: dict = {}
        tensors, arrays = [], []
        for n in ("q", "k", "v"):
            tensors.append(g.tensor_like(getattr(self, n), n))
            arrays.append(getattr(self, n))
        for n in _OPTIONAL:
            a = getattr(self, n)
            if a is not None:
                t = g.tensor_like(a, n)
                if n == "ragged_q":
                    kw["ragged_offset_q"] = kw["ragged_offset_o"] = t
                elif n == "ragged_k":
                    kw["ragged_offset_k"] = kw["ragged_offset_v"] = t
                else:
                    kw[n] = t
                tensors.append(t)
                arrays.append(a)
        if self.opts.alibi is not False:
            slopes = alibi_slopes(self.hq) if self.opts.alibi is True else np.array(self.opts.alibi, np.float32)
            dev = to_device(slopes.reshape(1, -1, 1, 1), stream=getattr(handle, "stream", None),
                            device=handle_device(handle))
            kw["alibi"] = g.tensor_like(dev, "alibi_slopes")
            tensors.append(kw["alibi"])
            arrays.append(dev)
        return kw, tensors, arrays

    def graph_options(self) -> SdpaOptions:
        """The options for the graph builder (which takes the ALiBi slopes as the tensor :meth:`graph_inputs` makes)."""
        return dataclasses.replace(self.opts, alibi=False) if self.opts.alibi is not False else self.opts

    def graph(self, name: str) -> Graph:
        """A new attention graph of this call's data type."""
        return Graph(io_dtype=self.dtype, compute_dtype="float32", intermediate_dtype="float32", name=name)

    def call_arrays(self) -> list:
        """This call's input arrays in the order of :meth:`graph_inputs` (without the cached constants)."""
        return [a for a in (self.q, self.k, self.v, *(getattr(self, n) for n in _OPTIONAL)) if a is not None]


def set_outputs(tensors: Sequence, metas: Sequence, names: Sequence[str]) -> list:
    """Make graph ``tensors`` the outputs ``names``, each with the strides of the caller's array where one was given
    (``metas``: its (shape, strides, dtype), or None), checking its shape; returns them."""
    for t, meta, name in zip(tensors, metas, names):
        if meta is not None:
            if tuple(meta[0]) != t.shape:
                raise InvalidValueError(f"{name} must have shape {t.shape}, got {tuple(meta[0])}")
            t.strides = tuple(meta[1])
        t.set_output(True).set_name(name)
    return list(tensors)


def output_spec(t: Any, src: int | None = None) -> tuple:
    """What an output must be: (logical shape, dtype, strides, ``src``): for a packed output, the index of the
    call input whose token count T it shares (it is then a packed (T, H, D) array)."""
    return t.shape, t.np_dtype, t.strides, src


def _packed_shape(spec: tuple, shapes: Sequence) -> tuple:
    """The (T, H, D) shape of a packed output: T of the input it follows (``shapes``: the packed q, k, v shapes), H
    and D of its logical shape."""
    shape, _, _, src = spec
    return (shapes[src][0], shape[1], shape[3])


def bind_output(handle: Any, given: Any, name: str, spec: tuple, shapes: Sequence | None) -> tuple[Any, Any]:
    """(returned array, bound array) for an output: the caller's ``given`` checked against ``spec``, or new. A
    packed output is a (T, H, D) array bound through its logical view (``shapes``: the call's packed q, k, v
    shapes)."""
    shape, dtype, strides, src = spec
    if src is not None:
        packed = _packed_shape(spec, shapes or ())
        if given is None:
            given = new_output(handle, packed, dtype, c_strides(packed))
        a = as_array(given, name)
        if a.shape != packed or a.dtype != dtype:
            raise InvalidValueError(f"{name} must have shape {packed} and dtype {dtype}, got {a.shape} {a.dtype}")
        return given, thd(a, name, shape[0], shape[2])
    if given is None:
        a = new_output(handle, shape, dtype, strides)
        return a, a
    _, meta = device_tensor(given, name)
    if tuple(meta[0]) != shape or meta[2] != dtype:
        raise InvalidValueError(f"{name} must have shape {shape} and dtype {dtype}, got {tuple(meta[0])} {meta[2]}")
    return given, given


def fast_outputs(handle: Any, r: Runner, given: Sequence, ptrs: Sequence, sigs: Sequence) -> tuple[list, tuple]:
    """The outputs of a fast call and their data pointers: the caller's (``given``, ``ptrs``), or new arrays (packed
    ones as (T, H, D) arrays; ``sigs``: the signatures of q, k, v)."""
    outs, out_ptrs = [], []
    for x, p, spec in zip(given, ptrs, r.specs):
        if x is None:
            if spec[3] is None:
                x = new_output(handle, spec[0], spec[1], spec[2])
            else:
                packed = _packed_shape(spec, [s[0] for s in sigs])
                x = new_output(handle, packed, spec[1], c_strides(packed))
            p = x.ptr
        outs.append(x)
        out_ptrs.append(p)
    return outs, tuple(out_ptrs)


def graph_runner(handle: Any, key: tuple, build: Callable[[], tuple], autotune: bool) -> Runner:
    """The runner of ``key`` on ``handle`` (built on the first call): ``build()`` returns (graph, tensors in binding
    order, {input tensor: array} to time on, output tensors, constants, n_inputs, specs)."""
    def make() -> Runner:
        g, tensors, inputs, outs, consts, n_inputs, specs = build()
        plan = plan_graph(g, handle, inputs, outs, autotune)
        return Runner(plan, handle, tensors, consts, n_inputs, specs)
    return cached(handle, CACHE, key + (autotune,), make)
