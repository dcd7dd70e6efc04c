"""Multi-head attention through cuDNN's deprecated ``cudnnMultiHeadAttn*`` calls (new code: :func:`cudnn_py.sdpa`).

Beam size 1: queries ``q[B, Tq, q_size]``, keys ``k[B, Tk, k_size]``, values ``v[B, Tk, v_size]``, output
``o[B, Tq, o_proj_size]`` (``dout``: its gradient, cuDNN's name)::

    attn = cdp.MultiHeadAttention(heads=4, q_size=64, k_size=64, v_size=64, proj_size=16, max_seq_q=10,
                                  max_seq_kv=12, max_batch=8, biases=True)
    w = attn.new_weights(h)
    cdp.load_attention_weights(h, attn, w, {"wq": wq, "bq": bq, ...})      # [heads, proj, size] ...
    fwd = cdp.attention_forward(h, attn, q, k, v, w, seq_len_q=lq, seq_len_kv=lk, residuals=q, training=True)
    dq, dk, dv = cdp.attention_backward_data(h, attn, fwd, dout, w)                 # an AttentionDataGrads
    dw = cdp.attention_backward_weights(h, attn, fwd, dout, w)

Weights: ``wq [heads, q_proj, q_size]``, ``wk [heads, k_proj, k_size]``, ``wv [heads, v_proj, v_size]``, ``wo
[heads, o_proj, v_proj]`` (each ``W[h] @ vector``), biases ``bq/bk/bv [heads, proj]`` and ``bo [o_proj]``. Query
``t`` attends keys ``lo_win[t] <= j < hi_win[t]`` (default: all) within its sequence's length. As in cuDNN, ``dq``
leaves out the residual path, and the output-bias gradient sums ``dout`` over all query rows, padding included:
zero ``dout`` past each query length (cuDNN 9.19).
"""
from __future__ import annotations

import ctypes
import inspect
import math
from ctypes import byref
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from cudnn_py import capi
from cudnn_py.core import memory
from cudnn_py._deprecation import alias, renamed_attribute
from cudnn_py.core.args import bool_arg, float_arg
from cudnn_py.core.descriptors import Descriptor
from cudnn_py.core.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph.ops.sdpa_options import renamed
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops._common import instance_of, launch, read_tensor_desc, with_tensor_descriptors
from cudnn_py.ops.dropout import Dropout
from cudnn_py.ops.sequence_models import (
    MATH_TYPES, WeightedDescriptor, by_value, check_lengths, choice, device_lengths, dropout_arg, name_of,
    positive_int, training_ctx, weights_ctx,
)
from cudnn_py.calls.prepared import prepared
from cudnn_py.clib.recording import WorkspaceArg

__all__ = ["MultiHeadAttention", "AttentionParams", "SeqDataDescriptor", "AttentionForwardResult",
           "AttentionDataGrads", "AttentionBufferSizes", "WEIGHT_KINDS",
           "load_attention_weights", "read_attention_weights", "attention_forward",
           "attention_backward_data", "attention_backward_weights"]

#: weight name -> cudnnMultiHeadAttnWeightKind_t
WEIGHT_KINDS = {"wq": capi.CUDNN_MH_ATTN_Q_WEIGHTS, "wk": capi.CUDNN_MH_ATTN_K_WEIGHTS,
                "wv": capi.CUDNN_MH_ATTN_V_WEIGHTS, "wo": capi.CUDNN_MH_ATTN_O_WEIGHTS,
                "bq": capi.CUDNN_MH_ATTN_Q_BIASES, "bk": capi.CUDNN_MH_ATTN_K_BIASES,
                "bv": capi.CUDNN_MH_ATTN_V_BIASES, "bo": capi.CUDNN_MH_ATTN_O_BIASES}
_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


class AttentionParams(NamedTuple):
    """What ``cudnnGetAttnDescriptor`` reports."""
    heads: int
    scale: float
    biases: bool
    query_map: str
    dtype: np.dtype
    compute_dtype: np.dtype
    math_type: str
    q_size: int
    k_size: int
    v_size: int
    q_proj_size: int
    k_proj_size: int
    v_proj_size: int
    o_proj_size: int
    max_seq_q: int
    max_seq_kv: int
    max_batch: int
    max_beam: int


class AttentionBufferSizes(NamedTuple):
    """Bytes of :meth:`MultiHeadAttention.buffer_sizes`."""
    weights: int
    workspace: int
    reserve: int


class MultiHeadAttention(WeightedDescriptor):
    """A multi-head attention descriptor (``cudnnSetAttnDescriptor``).

    ``proj_size`` sets ``q_proj_size``/``k_proj_size``/``v_proj_size`` not given (queries and keys must project to
    the same size); ``o_proj_size`` defaults to ``q_size`` (so residuals fit); ``scale`` to ``1/sqrt(q_proj_size)``;
    ``biases`` adds projection biases; ``dtype`` float16/32/64 and ``compute_dtype`` (default float32, float64 for
    double data); ``math_type`` as for :class:`RNN`; ``attn_dropout``/``post_dropout``: applied in training to the
    attention weights / the output, each as :class:`RNN`'s ``dropout`` (closing one first makes this raise
    :class:`ClosedError`).
    """

    _handle_type = capi.cudnnAttnDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateAttnDescriptor", "cudnnDestroyAttnDescriptor"

    def __init__(self, heads: int, q_size: int, k_size: int, v_size: int, *, proj_size: int | None = None,
                 q_proj_size: int | None = None, k_proj_size: int | None = None, v_proj_size: int | None = None,
                 o_proj_size: int | None = None, max_seq_q: int, max_seq_kv: int, max_batch: int,
                 scale: float | None = None, biases: bool = False, query_map: str = "all_to_one",
                 dtype: DTypeLike = np.float32, compute_dtype: DTypeLike | int | None = None,
                 math_type: str | int = "default", attn_dropout: float | Dropout | None = None,
                 post_dropout: float | Dropout | None = None) -> None:
        heads = positive_int(heads, "heads")
        self.q_size, self.k_size, self.v_size = (positive_int(v, n) for n, v in (("q_size", q_size),
                                                                                ("k_size", k_size), ("v_size", v_size)))
        proj = {}
        for n, v, default in (("q_proj_size", q_proj_size, proj_size), ("k_proj_size", k_proj_size, proj_size),
                              ("v_proj_size", v_proj_size, proj_size), ("o_proj_size", o_proj_size, q_size)):
            v = default if v is None else v
            if v is None:
                raise InvalidValueError(f"{n} is needed (or proj_size for the q/k/v projections)")
            proj[n] = positive_int(v, n)
        if proj["q_proj_size"] != proj["k_proj_size"]:
            raise InvalidValueError(f"queries and keys must project to the same size, got q_proj_size="
                             f"{proj['q_proj_size']} and k_proj_size={proj['k_proj_size']}")
        self.max_seq_q, self.max_seq_kv, self.max_batch = (positive_int(v, n) for n, v in (
            ("max_seq_q", max_seq_q), ("max_seq_kv", max_seq_kv), ("max_batch", max_batch)))
        if not isinstance(query_map, str) or query_map not in ("all_to_one", "one_to_one"):
            raise InvalidValueError(f"query_map must be 'all_to_one' or 'one_to_one', got {query_map!r}")
        dt = numpy_dtype(cudnn_dtype(dtype))
        if dt not in _DTYPES:
            raise InvalidTypeError(f"attention dtype must be float16, float32 or float64, got {dt}")
        cdt = (np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)) if compute_dtype is None \
            else numpy_dtype(cudnn_dtype(compute_dtype))
        _, c_math = choice(MATH_TYPES, math_type, "math_type")
        scale = 1.0 / math.sqrt(proj["q_proj_size"]) if scale is None else float_arg(scale, "scale")
        biases = bool_arg(biases, "biases")
        # last: a probability makes a Dropout (device memory)
        attn_d, post_d = dropout_arg(attn_dropout, "attn_dropout"), dropout_arg(post_dropout, "post_dropout")
        self._dropouts = (attn_d, post_d)
        mode = (capi.CUDNN_ATTN_ENABLE_PROJ_BIASES if biases else capi.CUDNN_ATTN_DISABLE_PROJ_BIASES) | \
            (capi.CUDNN_ATTN_QUERYMAP_ONE_TO_ONE if query_map == "one_to_one" else capi.CUDNN_ATTN_QUERYMAP_ALL_TO_ONE)
        self.heads, self.dtype, self.biases = heads, dt, bool(biases)
        self.q_proj_size, self.k_proj_size, self.v_proj_size, self.o_proj_size = proj.values()
        self._sizes: dict[tuple[int, bool], AttentionBufferSizes] = {}  # by (device, training)
        super().__init__()
        capi.cudnnSetAttnDescriptor(
            self._ptr, int(mode), heads, scale, cudnn_dtype(dt), cudnn_dtype(cdt), c_math,
            None if attn_d is None else attn_d.ptr, None if post_d is None else post_d.ptr,
            self.q_size, self.k_size, self.v_size, self.q_proj_size, self.k_proj_size, self.v_proj_size,
            self.o_proj_size, self.max_seq_q, self.max_seq_kv, self.max_batch, 1)

    @property
    def params(self) -> AttentionParams:
        """Everything ``cudnnGetAttnDescriptor`` reports, read back from C."""
        mode, heads = ctypes.c_uint(), ctypes.c_int()
        scale = ctypes.c_double()
        dt, cdt, math_t = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        d1, d2 = capi.cudnnDropoutDescriptor_t(), capi.cudnnDropoutDescriptor_t()
        ints = [ctypes.c_int() for _ in range(11)]
        capi.cudnnGetAttnDescriptor(self.ptr, byref(mode), byref(heads), byref(scale), byref(dt), byref(cdt),
                                    byref(math_t), byref(d1), byref(d2), *(byref(i) for i in ints))
        return AttentionParams(
            heads.value, scale.value, bool(mode.value & capi.CUDNN_ATTN_ENABLE_PROJ_BIASES),
            "one_to_one" if mode.value & capi.CUDNN_ATTN_QUERYMAP_ONE_TO_ONE else "all_to_one",
            numpy_dtype(dt.value), numpy_dtype(cdt.value), name_of(MATH_TYPES, math_t.value), *(i.value for i in ints))

    def buffer_sizes(self, handle: Handle, training: bool = True) -> AttentionBufferSizes:
        """:class:`AttentionBufferSizes` ``(weights, workspace, reserve)`` in bytes (``cudnnGetMultiHeadAttnBuffers``;
        no reserve in inference; asked once per device)."""
        handle = handle_arg(handle)
        hptr = handle.ptr  # a closed handle raises ClosedError here, even once the sizes are known
        key = (handle.device, bool(training))
        sizes = self._sizes.get(key)
        if sizes is None:
            w, ws, r = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
            capi.cudnnGetMultiHeadAttnBuffers(hptr, self.ptr, byref(w), byref(ws), byref(r) if training else None)
            sizes = self._sizes[key] = AttentionBufferSizes(w.value, ws.value, r.value if training else 0)
        return sizes

    def weight_space_size(self, handle: Handle) -> int:
        """Bytes of the flat weight space holding every projection."""
        return self.buffer_sizes(handle, False)[0]

    def weights(self, handle: Handle, weights) -> dict[str, DeviceArray]:
        """Strided device views ``{"wq": [heads, q_proj, q_size], ..., "bo": [o_proj]}`` (biases if enabled)."""
        handle = handle_arg(handle)
        w = self._check_weights(handle, weights)
        expected = self.expected_shapes()

        def view(desc, name: str) -> DeviceArray:
            addr = ctypes.c_void_p()
            capi.cudnnGetMultiHeadAttnWeights(handle.ptr, self.ptr, WEIGHT_KINDS[name], w.nbytes, w.ptr, desc,
                                              byref(addr))
            shape, st = map(list, read_tensor_desc(desc)[:2])
            while len(shape) > len(expected[name]) and 1 in shape:  # biases come as [heads, proj, 1] / [1, o_proj, 1]
                i = shape.index(1) if shape[-1] != 1 else len(shape) - 1
                del shape[i], st[i]
            return DeviceArray(addr.value or 0, tuple(shape), self.dtype, tuple(st), device_id=w.device_id, owner=w,
                               stream=w.stream)
        return with_tensor_descriptors(lambda desc: {name: view(desc, name) for name in expected})

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of every weight view (what :func:`load_attention_weights` expects)."""
        H = self.heads
        shapes: dict[str, tuple[int, ...]] = {
            "wq": (H, self.q_proj_size, self.q_size), "wk": (H, self.k_proj_size, self.k_size),
            "wv": (H, self.v_proj_size, self.v_size), "wo": (H, self.o_proj_size, self.v_proj_size)}
        if self.biases:
            shapes.update(bq=(H, self.q_proj_size), bk=(H, self.k_proj_size), bv=(H, self.v_proj_size),
                          bo=(self.o_proj_size,))
        return shapes

    def _fields(self) -> str:
        return (f"heads={self.heads}, q_size={self.q_size}, k_size={self.k_size}, v_size={self.v_size}, "
                f"proj=({self.q_proj_size}, {self.k_proj_size}, {self.v_proj_size}, {self.o_proj_size}), "
                f"biases={self.biases}, dtype={self.dtype.name}")


class SeqDataDescriptor(Descriptor):
    """``cudnnSeqDataDescriptor_t`` for a ``[batch, time, vector]`` array (beam 1) with per-sequence lengths."""

    _handle_type = capi.cudnnSeqDataDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateSeqDataDescriptor", "cudnnDestroySeqDataDescriptor"
    _cache_name = "descriptors.seq_data"
    _AXES = (capi.CUDNN_SEQDATA_BATCH_DIM, capi.CUDNN_SEQDATA_BEAM_DIM, capi.CUDNN_SEQDATA_TIME_DIM,
             capi.CUDNN_SEQDATA_VECT_DIM)

    def __init__(self, dtype, batch: int, time: int, vector: int, seq_lengths=None):
        B, T, V = positive_int(batch, "batch"), positive_int(time, "time"), positive_int(vector, "vector")
        self.seq_lengths = check_lengths(seq_lengths, T, B)
        self.dtype, self.shape = numpy_dtype(cudnn_dtype(dtype)), (B, T, V)
        dims = (ctypes.c_int * 4)()
        dims[capi.CUDNN_SEQDATA_TIME_DIM], dims[capi.CUDNN_SEQDATA_BATCH_DIM] = T, B
        dims[capi.CUDNN_SEQDATA_BEAM_DIM], dims[capi.CUDNN_SEQDATA_VECT_DIM] = 1, V
        super().__init__()
        capi.cudnnSetSeqDataDescriptor(self._ptr, cudnn_dtype(self.dtype), 4, dims, (ctypes.c_int * 4)(*self._AXES),
                                       B, (ctypes.c_int * B)(*self.seq_lengths), None)

    def read_back(self) -> dict:
        """What ``cudnnGetSeqDataDescriptor`` reports: dtype, dims by axis name, axes order, lengths."""
        dt, nb = ctypes.c_int(), ctypes.c_int()
        dims, axes = (ctypes.c_int * 4)(), (ctypes.c_int * 4)()
        n = ctypes.c_size_t()
        lengths = (ctypes.c_int * self.shape[0])()
        capi.cudnnGetSeqDataDescriptor(self.ptr, byref(dt), byref(nb), 4, dims, axes, byref(n), self.shape[0],
                                       lengths, None)
        names = dict(zip(self._AXES, ("batch", "beam", "time", "vector")))
        return {"dtype": numpy_dtype(dt.value),
                "dims": {names[capi.cudnnSeqDataAxis_t(i)]: dims[i] for i in range(4)},
                "axes": tuple(names[capi.cudnnSeqDataAxis_t(a)] for a in axes), "seq_lengths": tuple(lengths[:n.value])}

    def _fields(self) -> str:
        B, T, V = self.shape
        return f"{self.dtype.name}, batch={B}, time={T}, vector={V}"


def _host_view(host: np.ndarray, base: int, view) -> np.ndarray:
    item = host.itemsize
    offset = (view.ptr - base) // item
    return np.lib.stride_tricks.as_strided(host[offset:], view.shape, tuple(s * item for s in view.strides))


def load_attention_weights(handle: Handle, attn: MultiHeadAttention, weights: DeviceArrayLike, arrays: dict) -> None:
    """Write host arrays (``{"wq": [heads, q_proj, q_size], ...}``, see the module doc) into the weight space."""
    handle = handle_arg(handle)
    instance_of(attn, MultiHeadAttention, "attn")
    w = attn._check_weights(handle, weights)
    views = attn.weights(handle, w)
    unknown = set(arrays) - set(views)
    if unknown:
        raise InvalidValueError(f"unknown weight names {sorted(unknown)}; this attention has {sorted(views)}")
    host = w.to_numpy()
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.shape != views[name].shape:
            raise InvalidValueError(f"{name} has shape {a.shape}; expected {views[name].shape}")
        _host_view(host, w.ptr, views[name])[...] = a
    w.copy_(host)


def read_attention_weights(handle: Handle, attn: MultiHeadAttention, weights: DeviceArrayLike) -> dict:
    """The weight space as host arrays ``{"wq": ..., "bo": ...}`` (works for weight gradients too)."""
    handle = handle_arg(handle)
    instance_of(attn, MultiHeadAttention, "attn")
    w = attn._check_weights(handle, weights)
    host = w.to_numpy()
    return {name: _host_view(host, w.ptr, v).copy() for name, v in attn.weights(handle, w).items()}


class _AttentionOutputs(NamedTuple):
    o: DeviceArray
    reserve: DeviceArray | None = None


class AttentionForwardResult(_AttentionOutputs):
    """What :func:`attention_forward` returns: the named tuple ``(o, reserve)`` (``reserve`` in training); a
    training-mode result also holds what the backward calls need."""
    _ctx: dict | None = None  # set by attention_forward(training=True)
    out = renamed_attribute("o", "AttentionForwardResult.out is deprecated, use .o")


class AttentionDataGrads(NamedTuple):
    """What :func:`attention_backward_data` returns."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray


def _data(handle: Handle, attn, a, name, B, T, V) -> DeviceArray:
    return memory.as_array(a, name, dtype=attn.dtype, shape=(B, T, V), contiguous=True, device=handle.device)


def _shapes(handle: Handle, attn, q, k, v, seq_lengths_q, seq_lengths_kv) -> tuple:
    """``(q, k, v, lengths_q, lengths_kv, (q_desc, k_desc, v_desc, o_desc))``, checked against the descriptor."""
    instance_of(attn, MultiHeadAttention, "attn")
    q = memory.as_array(q, "q", dtype=attn.dtype, ndim=3, contiguous=True, device=handle.device)
    B, Tq = q.shape[0], q.shape[1]
    if q.shape[2] != attn.q_size:
        raise InvalidValueError(f"q has shape {q.shape}; its last dimension must be q_size={attn.q_size}")
    k = memory.as_array(k, "k", dtype=attn.dtype, ndim=3, contiguous=True, device=handle.device)
    Tk = k.shape[1]
    k = _data(handle, attn, k, "k", B, Tk, attn.k_size)
    v = _data(handle, attn, v, "v", B, Tk, attn.v_size)
    if B > attn.max_batch or Tq > attn.max_seq_q or Tk > attn.max_seq_kv:
        raise InvalidValueError(f"batch {B}, query length {Tq}, key length {Tk} exceed the descriptor's max_batch="
                                f"{attn.max_batch}, max_seq_q={attn.max_seq_q}, max_seq_kv={attn.max_seq_kv}")
    lq = check_lengths(seq_lengths_q, Tq, B, "seq_len_q")
    lk = check_lengths(seq_lengths_kv, Tk, B, "seq_len_kv")
    descs = (SeqDataDescriptor.shared(attn.dtype, B, Tq, attn.q_size, lq),
             SeqDataDescriptor.shared(attn.dtype, B, Tk, attn.k_size, lk),
             SeqDataDescriptor.shared(attn.dtype, B, Tk, attn.v_size, lk),
             SeqDataDescriptor.shared(attn.dtype, B, Tq, attn.o_proj_size, lq))
    return q, k, v, lq, lk, descs


def _windows(lo_win, hi_win, Tq: int, Tk: int) -> tuple:
    """The attention windows checked, as the host int arrays cuDNN reads (``(c_int * Tq)`` each)."""
    lo = np.zeros(Tq, np.int64) if lo_win is None else np.asarray(lo_win)
    hi = np.full(Tq, Tk, np.int64) if hi_win is None else np.asarray(hi_win)
    for name, a in (("lo_win", lo), ("hi_win", hi)):
        if a.shape != (Tq,) or not np.issubdtype(a.dtype, np.integer):
            raise InvalidValueError(f"{name} must be {Tq} ints (one per query step), got {a!r}")
    if np.any(lo < 0) or np.any(hi > Tk) or np.any(lo >= hi):
        raise InvalidValueError(f"attention windows need 0 <= lo_win < hi_win <= {Tk} at every step; got lo_win="
                                f"{lo.tolist()}, hi_win={hi.tolist()}")
    return (ctypes.c_int * Tq)(*lo.tolist()), (ctypes.c_int * Tq)(*hi.tolist())


@prepared(inputs=("q", "k", "v", "weights", "residuals"), outputs=("o",), inplace=False)
def _forward(handle: Handle, attn: MultiHeadAttention, q, k, v, weights, seq_lengths_q, seq_lengths_kv, lo_win,
             hi_win, residuals, o, training, curr_idx) -> tuple:
    """The validated ``cudnnMultiHeadAttnForward``: ``(o, reserve, device lengths_q, device lengths_kv)``."""
    q, k, v, host_lq, host_lk, (q_desc, k_desc, v_desc, o_desc) = _shapes(handle, attn, q, k, v, seq_lengths_q,
                                                                          seq_lengths_kv)
    B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]
    lo_c, hi_c = _windows(lo_win, hi_win, Tq, Tk)
    if training and curr_idx != -1:
        raise InvalidValueError("training runs all query steps: use curr_idx=-1")
    if not -1 <= curr_idx < Tq:
        raise InvalidValueError(f"curr_idx must be -1 (all steps) or a query step in [0, {Tq}), got {curr_idx}")
    w = attn._check_weights(handle, weights)
    oa = memory.output_array(o, (B, Tq, attn.o_proj_size), attn.dtype, "o", device=handle.device, stream=handle.stream,
                             contiguous=True)
    ra = None if residuals is None else _data(handle, attn, residuals, "residuals", B, Tq, attn.o_proj_size)
    _, work_n, reserve_n = attn.buffer_sizes(handle, training)
    reserve = memory.empty((reserve_n,), np.uint8, stream=handle.stream, device=handle.device) if training else None
    lq, lk = device_lengths(handle, host_lq), device_lengths(handle, host_lk)
    launch(handle, capi.cudnnMultiHeadAttnForward, handle.ptr, attn, curr_idx, lo_c, hi_c, lq, lk, q_desc, q, ra,
           k_desc, k, v_desc, v, o_desc, oa, w.nbytes, w, work_n, WorkspaceArg(work_n), reserve_n, reserve)
    return oa, reserve, lq, lk


def attention_forward(handle: Handle, attn: MultiHeadAttention, q: DeviceArrayLike, k: DeviceArrayLike,
                      v: DeviceArrayLike, weights: DeviceArrayLike, *,
                      seq_len_q: Sequence[int] | npt.NDArray[np.integer] | None = None,
                      seq_len_kv: Sequence[int] | npt.NDArray[np.integer] | None = None,
                      lo_win: int | Sequence[int] | None = None, hi_win: int | Sequence[int] | None = None,
                      residuals: DeviceArrayLike | None = None, o: DeviceArrayLike | None = None,
                      training: bool = False, curr_idx: int = -1, **old) -> AttentionForwardResult:
    """``cudnnMultiHeadAttnForward`` over all query steps (``curr_idx=-1``) or one (inference only); returns an
    :class:`AttentionForwardResult` ``(o, reserve)``.

    ``lo_win``/``hi_win``: per query step, the first and one-past-last key index it may attend (default 0 and
    ``Tk``); ``residuals``: added to the output (shape of ``o``); ``o``: the output ``[B, Tq, o_proj_size]``,
    allocated when not given (deprecated: ``out=``); ``seq_len_q``, ``seq_len_kv``: each sequence's length (default:
    all Tq / Tk; deprecated: ``seq_lengths_q=``/``seq_lengths_kv=``).
    """
    if old:
        new = renamed("attention_forward", old, _RENAMED, _FORWARD_PARAMS,
                      {"o": o, "seq_len_q": seq_len_q, "seq_len_kv": seq_len_kv})
        o, seq_len_q, seq_len_kv = new["o"], new["seq_len_q"], new["seq_len_kv"]
    lq, lk, lo, hi = by_value(seq_len_q), by_value(seq_len_kv), by_value(lo_win), by_value(hi_win)
    out, reserve, dev_lq, dev_lk = _forward(handle, attn, q, k, v, weights, lq, lk, lo, hi, residuals, o, training,
                                            curr_idx)
    result = AttentionForwardResult(out, reserve)
    if training:  # what the backward calls take again
        result._ctx = {"desc": attn, "q": q, "k": k, "v": v, "lengths": (dev_lq, dev_lk),
                       "seq_lengths": (lq, lk), "win": (lo, hi), "data_done": False}
    return result


#: attention_forward's deprecated keywords -> their names now; its parameters (for a did-you-mean)
_RENAMED = {"out": "o", "seq_lengths_q": "seq_len_q", "seq_lengths_kv": "seq_len_kv"}
_FORWARD_PARAMS = tuple(inspect.signature(attention_forward).parameters)[:-1]


@prepared(inputs=("q", "k", "v", "dout", "weights", "lengths_q", "lengths_kv"), outputs=("reserve", "dq", "dk", "dv"),
          inplace=False)
def _backward_data(handle: Handle, attn: MultiHeadAttention, q, k, v, dout, weights, reserve, lengths_q, lengths_kv,
                   seq_lengths_q, seq_lengths_kv, lo_win, hi_win, dq, dk, dv) -> AttentionDataGrads:
    """The validated ``cudnnMultiHeadAttnBackwardData`` (it updates ``reserve``)."""
    q, k, v, _, _, (q_desc, k_desc, v_desc, o_desc) = _shapes(handle, attn, q, k, v, seq_lengths_q, seq_lengths_kv)
    B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]
    lo_c, hi_c = _windows(lo_win, hi_win, Tq, Tk)
    douta = _data(handle, attn, dout, "dout", B, Tq, attn.o_proj_size)
    w = attn._check_weights(handle, weights)
    dqa, dka, dva = (memory.output_array(g, x.shape, attn.dtype, n, device=handle.device, stream=handle.stream,
                                         contiguous=True) for g, x, n in ((dq, q, "dq"), (dk, k, "dk"), (dv, v, "dv")))
    _, work_n, _ = attn.buffer_sizes(handle, True)
    ra = memory.as_array(reserve, "fwd.reserve", device=handle.device)
    lq, lk = (memory.as_array(x, "the forward's lengths", device=handle.device) for x in (lengths_q, lengths_kv))
    launch(handle, capi.cudnnMultiHeadAttnBackwardData, handle.ptr, attn, lo_c, hi_c, lq, lk, o_desc, douta,
           q_desc, dqa, q, k_desc, dka, k, v_desc, dva, v, w.nbytes, w, work_n, WorkspaceArg(work_n), ra.nbytes, ra)
    return AttentionDataGrads(dqa, dka, dva)


def attention_backward_data(handle: Handle, attn: MultiHeadAttention, fwd: AttentionForwardResult,
                            dout: DeviceArrayLike, weights: DeviceArrayLike, *, dq: DeviceArrayLike | None = None,
                            dk: DeviceArrayLike | None = None, dv: DeviceArrayLike | None = None) -> AttentionDataGrads:
    """``cudnnMultiHeadAttnBackwardData``: :class:`AttentionDataGrads` ``(dq, dk, dv)`` for ``dout``, the gradient
    of ``fwd.o``; ``dq`` leaves out the residual path (add ``dout``)."""
    handle = handle_arg(handle)
    ctx = training_ctx(fwd, AttentionForwardResult, attn, "attention_forward")
    (lq, lk), (sq, sk), (lo, hi) = ctx["lengths"], ctx["seq_lengths"], ctx["win"]
    grads = _backward_data(handle, attn, ctx["q"], ctx["k"], ctx["v"], dout, weights, fwd.reserve, lq, lk, sq, sk, lo,
                           hi, dq, dk, dv)
    ctx["data_done"] = True
    return grads


@prepared(inputs=("q", "k", "v", "dout", "weights", "reserve"), outputs=("dweights",), inplace=False)
def _backward_weights(handle: Handle, attn: MultiHeadAttention, q, k, v, dout, weights, reserve, seq_lengths_q,
                      seq_lengths_kv, dweights) -> DeviceArray:
    """The validated ``cudnnMultiHeadAttnBackwardWeights``."""
    q, k, v, _, _, (q_desc, k_desc, v_desc, o_desc) = _shapes(handle, attn, q, k, v, seq_lengths_q, seq_lengths_kv)
    douta = _data(handle, attn, dout, "dout", q.shape[0], q.shape[1], attn.o_proj_size)
    w = attn._check_weights(handle, weights)
    dw = attn.new_weights(handle) if dweights is None else attn._check_weights(handle, dweights, "dweights")
    _, work_n, _ = attn.buffer_sizes(handle, True)
    ra = memory.as_array(reserve, "fwd.reserve", device=handle.device)
    launch(handle, capi.cudnnMultiHeadAttnBackwardWeights, handle.ptr, attn, capi.CUDNN_WGRAD_MODE_ADD, q_desc, q,
           k_desc, k, v_desc, v, o_desc, douta, w.nbytes, w, dw, work_n, WorkspaceArg(work_n), ra.nbytes, ra)
    return dw


def attention_backward_weights(handle: Handle, attn: MultiHeadAttention, fwd: AttentionForwardResult,
                               dout: DeviceArrayLike, weights: DeviceArrayLike, *moved: DeviceArrayLike,
                               dweights: DeviceArrayLike | None = None) -> DeviceArray:
    """``cudnnMultiHeadAttnBackwardWeights``: gradients ADDED into ``dweights`` (new zeroed buffer if None).

    Needs :func:`attention_backward_data` on the same ``fwd`` first.
    """
    handle = handle_arg(handle)
    ctx, dweights = weights_ctx(fwd, AttentionForwardResult, attn, "attention_forward", moved, dweights)
    sq, sk = ctx["seq_lengths"]
    return _backward_weights(handle, attn, ctx["q"], ctx["k"], ctx["v"], dout, weights, fwd.reserve, sq, sk, dweights)


seq_data_descriptor = alias("seq_data_descriptor", SeqDataDescriptor.shared,
                            use="cudnn_py.ops.attention.SeqDataDescriptor.shared")
