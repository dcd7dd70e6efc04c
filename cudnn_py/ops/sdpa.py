"""Scaled dot-product attention (flash attention) through cached graph plans.

The first call with a new configuration (shapes, strides, dtypes, options) builds an attention graph and its
plan for the handle; every later call with the same configuration is a dict lookup and one
:class:`~cudnn_py.graph.Executor` call::

    o, stats = cudnn_py.sdpa(h, q, k, v, causal=True, return_stats=True)     # torch tensors work too
    dq, dk, dv = cudnn_py.sdpa_backward(h, q, k, v, o, do, stats, causal=True)

Tensors are logical ``(B, H, S, D)`` (torch's ``scaled_dot_product_attention`` order) with any strides whose head
dim is packed: a (B, S, H, D) buffer passed as ``x.transpose(1, 2)`` is BSHD, slices of one packed QKV buffer
are interleaved QKV. Outputs get the layout of their inputs (o follows q, dq/dk/dv follow q/k/v).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from cudnn_py.graph import Graph
from cudnn_py.graph.execute import _handle_device
from cudnn_py.graph.errors import GraphNotSupportedError
from cudnn_py.graph.ops.sdpa import sdpa_scratch
from cudnn_py.handle import handle_cache
from cudnn_py.memory import DeviceArray, as_array, empty, to_device

__all__ = ["sdpa", "sdpa_backward", "sdpa_cache_clear", "alibi_slopes"]

_CACHE = "ops.sdpa"


def sdpa_cache_clear(handle) -> None:
    """Forget the attention plans, executors and scratch buffers built for ``handle``."""
    handle_cache(handle, _CACHE).clear()


def alibi_slopes(heads: int) -> np.ndarray:
    """The standard ALiBi slopes for ``heads`` query heads (float32, as cuDNN's frontend computes them)."""
    n = 1 << int(math.floor(math.log2(heads)))
    exps = list(range(1, n + 1)) + [0.5 * (i + 1) for i in range(0, 2 * (heads - n), 2)]
    return np.array([2.0 ** (-8.0 * e / n) for e in exps], np.float32)


def _dev(obj, name: str):
    """A device tensor argument and its (shape, strides, dtype name): a DeviceArray or a CUDA torch tensor as
    itself (read without a DLPack round trip; the executor takes both), anything else as a DeviceArray view."""
    if type(obj) is DeviceArray:
        return obj, (obj.shape, obj.strides, obj.dtype.name)
    if getattr(obj, "is_cuda", False) and callable(getattr(obj, "stride", None)):  # torch
        return obj, (tuple(obj.shape), tuple(obj.stride()), str(obj.dtype).replace("torch.", ""))
    a = as_array(obj, name)
    return a, (a.shape, a.strides, a.dtype.name)


def _opt(obj, name: str, per_batch: bool = False):
    """An optional device argument (object, meta), or (None, None); ``per_batch``: a 1-D vector (sequence lengths)
    becomes (B, 1, 1, 1)."""
    if obj is None:
        return None, None
    a, meta = _dev(obj, name)
    if per_batch and len(meta[0]) == 1:
        a = as_array(a, name)
        if not a.is_contiguous:
            raise ValueError(f"{name} must be packed")
        a = a.reshape(a.shape[0], 1, 1, 1)
        meta = (a.shape, a.strides, a.dtype.name)
    return a, meta


def _new_out(handle, shape, dtype, strides) -> DeviceArray:
    """An uninitialised device array of ``shape`` laid out with ``strides`` on the handle's device."""
    order = sorted(range(len(shape)), key=lambda i: -strides[i])
    buf = empty(tuple(shape[i] for i in order), dtype, stream=getattr(handle, "stream", None),
                device=_handle_device(handle))
    return DeviceArray(buf.ptr, shape, dtype, strides, device_id=buf.device_id, owner=buf)


def _out(handle, given, name, spec):
    """The caller's output ``given`` ((object, meta) from :func:`_opt`) checked against the plan's output ``spec``
    (shape, dtype, strides; the strides are in the cache key), or a new array for it."""
    shape, dtype, strides = spec
    a, meta = given
    if a is None:
        return _new_out(handle, shape, dtype, strides)
    if meta[0] != shape or meta[2] != dtype.name:
        raise ValueError(f"{name} must have shape {shape} and dtype {dtype}, got {meta[0]} {meta[2]}")
    return a


def _scalar_i64(handle, value, name) -> DeviceArray:
    """A seed/offset: a device int64 tensor passes through (as (1, 1, 1, 1)); an int is copied to the device."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return to_device(np.array([[[[value]]]], np.int64), stream=getattr(handle, "stream", None),
                         device=_handle_device(handle))
    a = as_array(value, name)
    if a.size != 1 or a.dtype != np.int64:
        raise TypeError(f"{name} must be an int or a one-element int64 device tensor, got {a.shape} {a.dtype}")
    return a.reshape(1, 1, 1, 1) if a.shape != (1, 1, 1, 1) else a


class _Args:
    """The call's device arrays and options, checked; ``key`` is the cache key of the configuration."""

    def __init__(self, handle, q, k, v, *, scale, causal, diagonal_alignment, left_bound, right_bound, bias,
                 seq_len_q, seq_len_kv, alibi, dropout, seed, offset, implementation, autotune):
        (self.q, mq), (self.k, mk), (self.v, mv) = _dev(q, "q"), _dev(k, "k"), _dev(v, "v")
        self.bias, mb = _opt(bias, "bias")
        (self.seq_len_q, msq), (self.seq_len_kv, mskv) = (_opt(seq_len_q, "seq_len_q", True),
                                                           _opt(seq_len_kv, "seq_len_kv", True))
        hq = mq[0][1] if len(mq[0]) == 4 else 1
        if alibi is True:
            self.alibi = ("standard", hq)
        elif alibi is None or alibi is False:
            self.alibi = None
        else:
            a = np.asarray(alibi, np.float32).reshape(-1)
            if a.shape != (hq,):
                raise ValueError(f"alibi must be True or {hq} per-head slopes, got shape {np.shape(alibi)}")
            self.alibi = ("custom", tuple(float(x) for x in a))
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool):
            raise TypeError(f"dropout must be a number, got {type(dropout).__name__}")
        self.dropout = float(dropout)
        if self.dropout and (seed is None or offset is None):
            raise ValueError("dropout needs seed= and offset= (ints or int64 device tensors): the Philox state")
        self.seed = None if not self.dropout else _scalar_i64(handle, seed, "seed")
        self.offset = None if not self.dropout else _scalar_i64(handle, offset, "offset")
        for val, n in ((scale, "scale"), (left_bound, "left_bound"), (right_bound, "right_bound")):
            if val is not None and (isinstance(val, bool) or not isinstance(val, numbers.Real)):
                raise TypeError(f"{n} must be a number or None, got {type(val).__name__}")
        if not isinstance(diagonal_alignment, str) or not isinstance(implementation, str):
            raise TypeError("diagonal_alignment and implementation must be strings")
        self.options = dict(scale=scale, causal=bool(causal), diagonal_alignment=diagonal_alignment,
                            left_bound=left_bound, right_bound=right_bound, dropout=self.dropout,
                            implementation=implementation)
        self.autotune = bool(autotune)
        self.hq, self.dtype = hq, mq[2]
        self.key = (mq, mk, mv, mb, msq, mskv, self.alibi, self.seed is not None,
                    scale, bool(causal), diagonal_alignment, left_bound, right_bound, self.dropout, implementation,
                    self.autotune)

    def graph_inputs(self, g: Graph, handle) -> tuple[dict, list, list]:
        """The graph tensors for this call's arrays: (builder kwargs, tensors, arrays) in binding order (the arrays
        of cached constants - ALiBi slopes - are made here, once per plan)."""
        kw, tensors, arrays = {}, [], []
        for n in ("q", "k", "v"):
            tensors.append(g.tensor_like(getattr(self, n), n))
            arrays.append(getattr(self, n))
        for n in ("bias", "seq_len_q", "seq_len_kv", "seed", "offset"):
            a = getattr(self, n)
            if a is not None:
                kw[n] = g.tensor_like(a, n)
                tensors.append(kw[n])
                arrays.append(a)
        if self.alibi is not None:
            slopes = alibi_slopes(self.hq) if self.alibi[0] == "standard" else np.array(self.alibi[1], np.float32)
            dev = to_device(slopes.reshape(1, -1, 1, 1), stream=getattr(handle, "stream", None),
                            device=_handle_device(handle))
            kw["alibi_slopes"] = g.tensor_like(dev, "alibi_slopes")
            tensors.append(kw["alibi_slopes"])
            arrays.append(dev)
        return kw, tensors, arrays

    def call_arrays(self) -> list:
        """This call's input arrays in the order of :meth:`graph_inputs` (without the cached constants)."""
        return [a for a in (self.q, self.k, self.v, self.bias, self.seq_len_q, self.seq_len_kv, self.seed,
                            self.offset) if a is not None]


def _graph(args: _Args, name: str) -> Graph:
    return Graph(io_dtype=args.dtype, compute_dtype="float32", intermediate_dtype="float32", name=name)


def _plan(g: Graph, handle, tensors, arrays, outs, autotune: bool):
    """Build ``g`` (or autotune it on the call's inputs and scratch outputs) and return its executor over
    ``tensors``."""
    if autotune:
        pack = dict(zip(tensors, arrays))
        for t in outs:
            pack[t] = _new_out(handle, t.shape, t.np_dtype, t.strides)
        try:  # the heuristics' candidates; timing every fallback engine costs seconds and never wins
            g.autotune(handle, pack, modes=("A", "B"))
        except GraphNotSupportedError:
            g.autotune(handle, pack, modes=("FALLBACK",))
    else:
        g.build(handle)
    return g.executor(handle, *tensors, identity_cache=1)


def _runner(handle, key, make):
    runners = handle_cache(handle, _CACHE)
    r = runners.get(key)
    if r is None:
        r = runners[key] = make()
    return r


def sdpa(handle, q, k, v, *, scale: float | None = None, causal: bool = False,
         diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
         bias=None, seq_len_q=None, seq_len_kv=None, alibi=False, dropout: float = 0.0, seed=None, offset=None,
         return_stats: bool = False, o=None, stats=None, implementation: str = "auto", autotune: bool = False):
    """Attention forward: ``o = softmax(mask(scale * q k^T + bias)) v`` in one fused cuDNN kernel.

    :param handle: the :class:`~cudnn_py.Handle` (plans are cached on it).
    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) float16/bfloat16 device tensors
        (DeviceArray, torch, anything with DLPack / ``__cuda_array_interface__``), head dim packed; Hq a
        multiple of Hk and Hv (grouped-query / multi-query attention).
    :param scale: default 1/sqrt(D).
    :param causal: query i attends to keys <= i (relative to the aligned diagonal).
    :param diagonal_alignment: 'top_left' or 'bottom_right' (the diagonal ends at the last key).
    :param left_bound, right_bound: sliding window: keys in (i - left_bound, i + right_bound].
    :param bias: additive (B or 1, Hq or 1, Sq, Skv) device tensor of q's dtype.
    :param seq_len_q, seq_len_kv: per-batch int32 lengths ((B,) or (B, 1, 1, 1) device tensors): padding mask;
        output rows at or beyond seq_len_q are not written.
    :param alibi: True for the standard ALiBi slopes, or Hq slopes (needs causal).
    :param dropout: drop probability; needs ``seed`` and ``offset`` (ints or int64 device tensors; the same
        pair gives the same mask, which :func:`sdpa_backward` regenerates).
    :param return_stats: also return the (B, Hq, Sq, 1) float32 statistics :func:`sdpa_backward` needs.
    :param o, stats: outputs to write (default: new arrays; o gets q's layout); a ``stats`` array implies
        ``return_stats``.
    :param implementation: 'auto', 'composite' or 'unified' (see :mod:`cudnn_py.graph.ops.sdpa`).
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: o, or (o, stats) with ``return_stats``.
    """
    args = _Args(handle, q, k, v, scale=scale, causal=causal, diagonal_alignment=diagonal_alignment,
                 left_bound=left_bound, right_bound=right_bound, bias=bias, seq_len_q=seq_len_q,
                 seq_len_kv=seq_len_kv, alibi=alibi, dropout=dropout, seed=seed, offset=offset,
                 implementation=implementation, autotune=autotune)
    given = [_opt(o, "o"), _opt(stats, "stats")]
    want_stats = return_stats = return_stats or stats is not None
    key = ("fwd", args.key, want_stats, given[0][1])

    def make():
        g = _graph(args, "sdpa")
        kw, tensors, arrays = args.graph_inputs(g, handle)
        to, ts = g.sdpa(*tensors[:3], generate_stats=want_stats, **kw, **args.options)
        if given[0][1] is not None:
            if given[0][1][0] != to.shape:
                raise ValueError(f"o must have shape {to.shape}, got {given[0][1][0]}")
            to.strides = given[0][1][1]
        outs = [to.set_output(True).set_name("o")]
        if want_stats:
            outs.append(ts.set_output(True).set_name("stats"))
        ex = _plan(g, handle, tensors + outs, arrays, outs, args.autotune)
        return ex, arrays[len(args.call_arrays()):], [(t.shape, t.np_dtype, t.strides) for t in outs]

    ex, consts, specs = _runner(handle, key, make)
    res = [_out(handle, x, n, spec) for x, n, spec in zip(given, ("o", "stats"), specs)]
    ex(*args.call_arrays(), *consts, *res)
    return tuple(res) if return_stats else res[0]


def sdpa_backward(handle, q, k, v, o, do, stats, *, scale: float | None = None, causal: bool = False,
                  diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
                  bias=None, return_dbias: bool = False, seq_len_q=None, seq_len_kv=None, alibi=False,
                  dropout: float = 0.0, seed=None, offset=None, dq=None, dk=None, dv=None, dbias=None,
                  implementation: str = "auto", autotune: bool = False):
    """Attention backward: the gradients of :func:`sdpa` for the output gradient ``do``.

    Takes the forward's inputs and options (same scale, masks, bias, dropout with the same seed/offset), its
    output ``o`` and statistics ``stats`` (``return_stats=True``), and ``do`` (o's shape and dtype).

    :param return_dbias: also return the gradient of ``bias`` (its shape).
    :param dq, dk, dv, dbias: outputs to write (default: new arrays in the layouts of q, k, v and bias); a
        ``dbias`` array implies ``return_dbias``.
    :returns: (dq, dk, dv), plus dbias with ``return_dbias``.
    """
    return_dbias = return_dbias or dbias is not None
    args = _Args(handle, q, k, v, scale=scale, causal=causal, diagonal_alignment=diagonal_alignment,
                 left_bound=left_bound, right_bound=right_bound, bias=bias, seq_len_q=seq_len_q,
                 seq_len_kv=seq_len_kv, alibi=alibi, dropout=dropout, seed=seed, offset=offset,
                 implementation=implementation, autotune=autotune)
    (oa, mo), (doa, mdo), (sa, ms) = _dev(o, "o"), _dev(do, "do"), _dev(stats, "stats")
    given = [_opt(x, n) for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv"), (dbias, "dbias"))]
    key = ("bwd", args.key, mo, mdo, ms, bool(return_dbias), tuple(m for _, m in given))

    def make():
        g = _graph(args, "sdpa_backward")
        kw, tensors, arrays = args.graph_inputs(g, handle)
        extra = [g.tensor_like(oa, "o"), g.tensor_like(doa, "do"), g.tensor_like(sa, "stats")]
        grads = g.sdpa_backward(*tensors[:3], *extra, dbias=return_dbias, name="sdpa_bwd", **kw, **args.options)
        for t, (_, meta), n in zip(grads, given, ("dq", "dk", "dv", "dbias")):
            if meta is not None:
                if meta[0] != t.shape:
                    raise ValueError(f"{n} must have shape {t.shape}, got {meta[0]}")
                t.strides = meta[1]
            t.set_output(True).set_name(n)
        scratch = sdpa_scratch(g)
        scratch_arrays = [_new_out(handle, t.shape, t.np_dtype, t.strides) for t in scratch]
        ins = tensors + extra
        ex = _plan(g, handle, ins + scratch + list(grads), arrays + [oa, doa, sa] + scratch_arrays, list(grads),
                   args.autotune)
        return ex, arrays[len(args.call_arrays()):], scratch_arrays, [(t.shape, t.np_dtype, t.strides) for t in grads]

    ex, consts, scratch_arrays, specs = _runner(handle, key, make)
    res = [_out(handle, x, n, spec) for x, n, spec in zip(given, ("dq", "dk", "dv", "dbias"), specs)]
    ex(*args.call_arrays(), *consts, oa, doa, sa, *scratch_arrays, *res)
    return tuple(res)
