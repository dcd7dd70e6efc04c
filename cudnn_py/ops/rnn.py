"""Recurrent networks through cuDNN's v8 RNN API: RELU/TANH RNNs, LSTM (optional projection, clipping), GRU.

::

    rnn = cdp.RNN("lstm", input_size=256, hidden_size=512, num_layers=2)
    w = rnn.new_weights(h)                              # the flat weight space (zeros)
    for (pseudo, lin), p in rnn.weights(h, w).items():  # per layer / direction / gate views
        p.matrix.copy_(...)                             # [rows, cols] view, None where absent
    fwd = cdp.rnn_forward(h, rnn, x, w, seq_lengths=lengths, training=True)   # (y, hy, cy, reserve)
    dx, dhx, dcx = cdp.rnn_backward_data(h, rnn, fwd, dy, w)                  # an RNNDataGrads
    dw = cdp.rnn_backward_weights(h, rnn, fwd)        # adds into dw (zeros when not given)

Layouts of ``x``/``y``: ``"seq_major"`` ``[T, B, V]`` and ``"batch_major"`` ``[B, T, V]`` (padded; ``y`` is 0 past a
sequence's length), ``"packed"`` ``[sum(lengths), V]`` (lengths non-increasing). States: ``hx/hy [layers * dirs, B,
out_size]``, ``cx/cy [layers * dirs, B, hidden]`` (LSTM only); missing initial states are zeros. Gate order per
``lin_id``: :data:`GATES`, docs/porting_rnn.md. float32 with ``math_type="default"`` may use TF32 (``"fma"`` avoids
it); with clipping, ``cy`` is the last cell state before clipping (cuDNN's behaviour).
"""
from __future__ import annotations

import ctypes
from ctypes import byref
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from cudnn_py import capi
from cudnn_py.core import memory
from cudnn_py._deprecation import alias, renamed_kwargs, warn
from cudnn_py.core.args import bool_arg, float_arg
from cudnn_py.core.descriptors import Descriptor, TensorDescriptor
from cudnn_py.core.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
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

__all__ = ["RNN", "RNNDataDescriptor", "RNNParams", "RNNWeight", "RNNForwardResult", "RNNDataGrads", "GATES",
           "rnn_weight_params", "rnn_forward", "rnn_backward_data",
           "rnn_backward_weights"]

_MODES = {"relu": capi.CUDNN_RNN_RELU, "tanh": capi.CUDNN_RNN_TANH, "lstm": capi.CUDNN_LSTM, "gru": capi.CUDNN_GRU}
_BIAS = {"none": capi.CUDNN_RNN_NO_BIAS, "input": capi.CUDNN_RNN_SINGLE_INP_BIAS,
         "recurrent": capi.CUDNN_RNN_SINGLE_REC_BIAS, "double": capi.CUDNN_RNN_DOUBLE_BIAS}
_INPUT = {"linear": capi.CUDNN_LINEAR_INPUT, "skip": capi.CUDNN_SKIP_INPUT}
_ALGOS = {"standard": capi.CUDNN_RNN_ALGO_STANDARD, "persist_static": capi.CUDNN_RNN_ALGO_PERSIST_STATIC,
          "persist_dynamic": capi.CUDNN_RNN_ALGO_PERSIST_DYNAMIC,
          "persist_static_small_h": capi.CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H}
_LAYOUTS = {"seq_major": capi.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
            "packed": capi.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
            "batch_major": capi.CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED}
# algorithms cuDNN refuses for float64 data (NOT_SUPPORTED from cudnnSetRNNDescriptor_v8)
_NO_DOUBLE = frozenset({"persist_static", "persist_static_small_h"})
# data type -> allowed math precisions (first = default)
_PRECISIONS = {np.dtype(np.float16): (np.dtype(np.float32), np.dtype(np.float16)),
               np.dtype(np.float32): (np.dtype(np.float32),),
               np.dtype(np.float64): (np.dtype(np.float64),)}


def _renamed(where: str, old: dict, name: str, new: str, value):
    """``value``, or that of ``new``'s deprecated spelling ``name`` in ``old`` (a warning)."""
    return renamed_kwargs(where, old, {name: new}, {new: value}, stacklevel=5)[new] if old else value


#: lin_id meaning per cell mode: input-side matrices first, then recurrent ones (LSTM 8: projection).
GATES = {
    "relu": ("W", "R"),
    "tanh": ("W", "R"),
    "lstm": ("W_i", "W_f", "W_c", "W_o", "R_i", "R_f", "R_c", "R_o", "P"),
    "gru": ("W_r", "W_u", "W_h", "R_r", "R_u", "R_h"),
}


class RNNParams(NamedTuple):
    """What ``cudnnGetRNNDescriptor_v8`` reports (names, not enums; dtypes as NumPy dtypes)."""
    algo: str
    mode: str
    bias_mode: str
    bidirectional: bool
    input_mode: str
    dtype: np.dtype
    compute_dtype: np.dtype
    math_type: str
    input_size: int
    hidden_size: int
    proj_size: int
    num_layers: int
    padded_io: bool

    @property
    def math_precision(self) -> np.dtype:
        """Deprecated spelling of :attr:`compute_dtype`."""
        warn("RNNParams.math_precision is deprecated, use compute_dtype")
        return self.compute_dtype


class RNNWeight(NamedTuple):
    """One linear layer's matrix ``[rows, cols]`` (acting as ``W @ v``) and bias ``[rows]``; None where absent."""
    matrix: DeviceArray | None
    bias: DeviceArray | None


class RNN(WeightedDescriptor):
    """An RNN descriptor (``cudnnSetRNNDescriptor_v8``).

    ``mode``: ``"relu"``, ``"tanh"``, ``"lstm"``, ``"gru"``; ``proj_size``: LSTM recurrent projection (None: none);
    ``bias_mode``: ``"double"`` (input and recurrent biases), ``"input"``, ``"recurrent"``, ``"none"``;
    ``input_mode``: ``"linear"`` or ``"skip"`` (first layer has no input matrices; needs ``input_size ==
    hidden_size``); ``dtype``: float16/32/64; ``compute_dtype``: the precision it computes in (float16 data may use
    float16 or float32, default float32); ``math_type``: ``"default"``, ``"tensor_op"``,
    ``"tensor_op_allow_conversion"``, ``"fma"``; ``algo``: ``"standard"``, ``"persist_static"``, ``"persist_dynamic"``
    (call :meth:`build_dynamic`), ``"persist_static_small_h"``; ``dropout``: applied between layers in training, a
    probability (a ``cdp.Dropout`` on :func:`cudnn_py.default_handle`, seed 0; 0 or None: none) or a ``cdp.Dropout``,
    kept alive by the RNN (closing it first makes the RNN raise :class:`ClosedError`); ``padded_io``: allow the
    padded layouts; ``clip``: LSTM cell clipping ``(lo, hi)``. C enum values are accepted wherever a name is.
    ``math_precision=`` is the deprecated spelling of ``compute_dtype=``.
    """

    _handle_type = capi.cudnnRNNDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateRNNDescriptor", "cudnnDestroyRNNDescriptor"

    def __init__(self, mode: str | int, input_size: int, hidden_size: int, num_layers: int = 1, *,
                 bidirectional: bool = False, proj_size: int | None = None, bias_mode: str | int = "double",
                 input_mode: str | int = "linear", dtype: DTypeLike = np.float32,
                 compute_dtype: DTypeLike | int | None = None, math_type: str | int = "default",
                 algo: str | int = "standard", dropout: Dropout | None = None, padded_io: bool = True,
                 clip: tuple[float, float] | None = None, **old) -> None:
        compute_dtype = _renamed("RNN", old, "math_precision", "compute_dtype", compute_dtype)
        mode, c_mode = choice(_MODES, mode, "mode")
        input_size, hidden_size, num_layers = (positive_int(v, n) for n, v in (
            ("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)))
        if proj_size is not None:
            proj_size = positive_int(proj_size, "proj_size")
            if mode != "lstm" and proj_size != hidden_size:
                raise InvalidValueError(f"proj_size={proj_size}: a recurrent projection needs mode 'lstm' "
                                 f"(mode is {mode!r}); leave proj_size=None")
            if proj_size > hidden_size:
                raise InvalidValueError(f"proj_size={proj_size} must not exceed hidden_size={hidden_size}")
        _, c_bias = choice(_BIAS, bias_mode, "bias_mode")
        input_mode, c_input = choice(_INPUT, input_mode, "input_mode")
        if input_mode == "skip" and input_size != hidden_size:
            raise InvalidValueError(f"input_mode='skip' needs input_size == hidden_size, got {input_size} and "
                                    f"{hidden_size}")
        _, c_math = choice(MATH_TYPES, math_type, "math_type")
        algo, c_algo = choice(_ALGOS, algo, "algo")
        dt = numpy_dtype(cudnn_dtype(dtype))
        if dt not in _PRECISIONS:
            raise InvalidTypeError(f"RNN dtype must be float16, float32 or float64, got {dt}")
        if algo in _NO_DOUBLE and dt == np.float64:
            raise InvalidTypeError(f"algo={algo!r} runs float16 and float32 RNNs only (cuDNN answers NOT_SUPPORTED for "
                            f"float64); use algo='standard' or 'persist_dynamic' for float64")
        prec = _PRECISIONS[dt][0] if compute_dtype is None else numpy_dtype(cudnn_dtype(compute_dtype))
        if prec not in _PRECISIONS[dt]:
            allowed = ", ".join(p.name for p in _PRECISIONS[dt])
            raise InvalidValueError(f"compute_dtype {prec} is not allowed with {dt} data; allowed: {allowed}")
        if clip is not None and (isinstance(clip, (str, bytes)) or not hasattr(clip, "__len__") or len(clip) != 2):
            raise InvalidTypeError(f"clip must be a (lo, hi) pair of numbers or None, got {clip!r}")
        dropout = dropout_arg(dropout, "dropout")  # last: a probability makes a Dropout (device memory)
        self._dropouts = (dropout,)
        self.mode, self.dtype = mode, dt
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.proj_size = proj_size or hidden_size
        self.bidirectional = bool_arg(bidirectional, "bidirectional")
        self.padded_io = bool_arg(padded_io, "padded_io")
        self._wsize: dict[int, int] = {}  # by device
        super().__init__()
        aux = capi.CUDNN_RNN_PADDED_IO_ENABLED if padded_io else capi.CUDNN_RNN_PADDED_IO_DISABLED
        try:
            capi.cudnnSetRNNDescriptor_v8(self._ptr, c_algo, c_mode, c_bias, int(bool(bidirectional)), c_input,
                                          cudnn_dtype(dt), cudnn_dtype(prec), c_math, input_size, hidden_size,
                                          self.proj_size, num_layers, None if dropout is None else dropout.ptr, aux)
            if clip is not None:
                self.set_clip(*clip)
        except BaseException:
            self.close()
            raise

    @property
    def dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def out_size(self) -> int:
        """Features of ``h`` per direction: ``proj_size`` (equal to ``hidden_size`` without projection)."""
        return self.proj_size

    @property
    def num_pseudo_layers(self) -> int:
        return self.num_layers * self.dirs

    @property
    def lin_ids(self) -> range:
        """The ``lin_id`` values of one pseudo-layer (LSTM includes 8, the projection, only with one)."""
        n = len(GATES[self.mode])
        return range(n if self.mode != "lstm" or self.proj_size != self.hidden_size else n - 1)

    @property
    def state_shape(self) -> tuple[int, int]:
        """``(layers * dirs, out_size)``; hx/hy are ``[layers * dirs, batch, out_size]``."""
        return self.num_pseudo_layers, self.out_size

    @property
    def params(self) -> RNNParams:
        """Everything ``cudnnGetRNNDescriptor_v8`` reports, read back from C."""
        enums = [ctypes.c_int() for _ in range(8)]
        sizes = [ctypes.c_int32() for _ in range(4)]
        drop, aux = capi.cudnnDropoutDescriptor_t(), ctypes.c_uint32()
        capi.cudnnGetRNNDescriptor_v8(self.ptr, *(byref(e) for e in enums), *(byref(s) for s in sizes),
                                      byref(drop), byref(aux))
        algo, mode, bias, direction, inp, dt, prec, math = (e.value for e in enums)
        return RNNParams(name_of(_ALGOS, algo), name_of(_MODES, mode), name_of(_BIAS, bias),
                         direction == capi.CUDNN_BIDIRECTIONAL, name_of(_INPUT, inp), numpy_dtype(dt),
                         numpy_dtype(prec), name_of(MATH_TYPES, math), sizes[0].value, sizes[1].value,
                         sizes[2].value, sizes[3].value,
                         bool(aux.value & capi.CUDNN_RNN_PADDED_IO_ENABLED))

    @property
    def clip(self) -> tuple[float, float] | None:
        """LSTM cell clipping range, or None when off (``cudnnRNNGetClip_v9``)."""
        mode, lo, hi = ctypes.c_int(), ctypes.c_double(), ctypes.c_double()
        capi.cudnnRNNGetClip_v9(self.ptr, byref(mode), byref(lo), byref(hi))
        return None if mode.value == capi.CUDNN_RNN_CLIP_NONE else (lo.value, hi.value)

    def set_clip(self, lo: float | None, hi: float | None = None) -> None:
        """Clip the LSTM cell state to ``[lo, hi]`` (``set_clip(None)`` turns clipping off)."""
        if lo is None:
            capi.cudnnRNNSetClip_v9(self.ptr, capi.CUDNN_RNN_CLIP_NONE, 0.0, 0.0)
            return
        if self.mode != "lstm":
            raise InvalidValueError(f"cell clipping applies to LSTM only; this RNN is {self.mode!r}")
        if hi is None:
            raise InvalidValueError(f"clip needs lo < hi, got ({lo!r}, {hi!r})")
        lo, hi = float_arg(lo, "clip lo"), float_arg(hi, "clip hi")
        if not lo < hi:
            raise InvalidValueError(f"clip needs lo < hi, got ({lo!r}, {hi!r})")
        capi.cudnnRNNSetClip_v9(self.ptr, capi.CUDNN_RNN_CLIP_MINMAX, lo, hi)

    def weight_space_size(self, handle: Handle) -> int:
        """Bytes of the flat weight space (``cudnnGetRNNWeightSpaceSize``; asked once per device)."""
        handle = handle_arg(handle)
        hptr = handle.ptr  # a closed handle raises ClosedError here, even once the size is known
        size = self._wsize.get(handle.device)
        if size is None:
            n = ctypes.c_size_t()
            capi.cudnnGetRNNWeightSpaceSize(hptr, self.ptr, byref(n))
            size = self._wsize[handle.device] = n.value
        return size

    def weights(self, handle: Handle, weights) -> dict[tuple[int, int], RNNWeight]:
        """Views of every matrix and bias: ``{(pseudo_layer, lin_id): RNNWeight(matrix, bias)}``, ``pseudo_layer =
        layer * dirs + direction``, ``lin_id`` as in :data:`GATES`."""
        return {(p, k): rnn_weight_params(handle, self, weights, p, k)
                for p in range(self.num_pseudo_layers) for k in self.lin_ids}

    def build_dynamic(self, handle: Handle, mini_batch: int) -> None:
        """Compile the persistent kernels for ``algo="persist_dynamic"`` (``cudnnBuildRNNDynamic``)."""
        handle = handle_arg(handle)
        capi.cudnnBuildRNNDynamic(handle.ptr, self.ptr, positive_int(mini_batch, "mini_batch"))

    def _fields(self) -> str:
        proj = f", proj_size={self.proj_size}" if self.proj_size != self.hidden_size else ""
        return (f"{self.mode!r}, input_size={self.input_size}, hidden_size={self.hidden_size}, "
                f"num_layers={self.num_layers}, bidirectional={self.bidirectional}{proj}, dtype={self.dtype.name}")


class RNNDataDescriptor(Descriptor):
    """``cudnnRNNDataDescriptor_t``: a batch of sequences with their lengths and ``seq_layout`` ("seq_major",
    "batch_major" or "packed"; ``layout=`` is its deprecated spelling: ``layout`` names a memory format elsewhere)."""

    _handle_type = capi.cudnnRNNDataDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateRNNDataDescriptor", "cudnnDestroyRNNDataDescriptor"
    _cache_name = "descriptors.rnn_data"

    def __init__(self, dtype: DTypeLike, seq_layout: str | None = None, max_seq_length: int = 0, batch_size: int = 0,
                 vector_size: int = 0, seq_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None,
                 padding_fill: float = 0.0, **old: str) -> None:
        seq_layout = _renamed("RNNDataDescriptor", old, "layout", "seq_layout", seq_layout)
        layout, c_layout = choice(_LAYOUTS, seq_layout, "seq_layout")
        T, B, V = (positive_int(v, n) for n, v in (("max_seq_length", max_seq_length), ("batch_size", batch_size),
                                                   ("vector_size", vector_size)))
        lengths = check_lengths(seq_lengths, T, B, packed=layout == "packed")
        self.dtype = numpy_dtype(cudnn_dtype(dtype))
        fill = (ctypes.c_double if self.dtype == np.float64 else ctypes.c_float)(padding_fill)
        super().__init__()
        capi.cudnnSetRNNDataDescriptor(self._ptr, cudnn_dtype(self.dtype), c_layout, T, B, V,
                                       (ctypes.c_int * B)(*lengths), byref(fill))
        self.seq_layout, self.max_seq_length, self.batch_size, self.vector_size = layout, T, B, V
        self.seq_lengths = lengths

    def read_back(self) -> dict:
        """What ``cudnnGetRNNDataDescriptor`` reports."""
        dt, layout, T, B, V = (ctypes.c_int() for _ in range(5))
        lengths = (ctypes.c_int * self.batch_size)()
        fill = (ctypes.c_double if self.dtype == np.float64 else ctypes.c_float)()
        capi.cudnnGetRNNDataDescriptor(self.ptr, byref(dt), byref(layout), byref(T), byref(B), byref(V),
                                       self.batch_size, lengths, byref(fill))
        return {"dtype": numpy_dtype(dt.value), "seq_layout": name_of(_LAYOUTS, layout.value),
                "max_seq_length": T.value, "batch_size": B.value, "vector_size": V.value,
                "seq_lengths": tuple(lengths), "padding_fill": fill.value}

    def _fields(self) -> str:
        return (f"{self.dtype.name}, {self.seq_layout!r}, max_seq_length={self.max_seq_length}, "
                f"batch_size={self.batch_size}, vector_size={self.vector_size}")


def rnn_weight_params(handle: Handle, rnn: RNN, weights: DeviceArrayLike, pseudo_layer: int, lin_id: int) -> RNNWeight:
    """Views into ``weights`` of one matrix and its bias (``cudnnGetRNNWeightParams``); None where absent."""
    handle = handle_arg(handle)
    instance_of(rnn, RNN, "rnn")
    w = rnn._check_weights(handle, weights)
    if not 0 <= pseudo_layer < rnn.num_pseudo_layers:
        raise InvalidValueError(f"pseudo_layer must be in [0, {rnn.num_pseudo_layers}), got {pseudo_layer}")
    if lin_id not in rnn.lin_ids:
        raise InvalidValueError(f"lin_id must be in {list(rnn.lin_ids)} for mode {rnn.mode!r}, got {lin_id}")

    def view(desc, addr, ndim: int) -> DeviceArray | None:
        if not addr.value:
            return None
        dims = read_tensor_desc(desc)[0]
        shape = dims[-2:] if ndim == 2 else (int(np.prod(dims)),)
        return DeviceArray(addr.value, shape, rnn.dtype, device_id=w.device_id, owner=w, stream=w.stream)

    def views(m_desc, b_desc) -> RNNWeight:
        m_addr, b_addr = ctypes.c_void_p(), ctypes.c_void_p()
        capi.cudnnGetRNNWeightParams(handle.ptr, rnn.ptr, pseudo_layer, w.nbytes, w.ptr, lin_id,
                                     m_desc, byref(m_addr), b_desc, byref(b_addr))
        return RNNWeight(view(m_desc, m_addr, 2), view(b_desc, b_addr, 1))
    return with_tensor_descriptors(views, 2)


def _data_shape(layout: str, T: int, B: int, V: int, lengths) -> tuple[int, ...]:
    return (T, B, V) if layout == "seq_major" else (B, T, V) if layout == "batch_major" else (sum(lengths), V)


class _RNNOutputs(NamedTuple):
    y: DeviceArray
    hy: DeviceArray
    cy: DeviceArray | None
    reserve: DeviceArray | None = None


class RNNForwardResult(_RNNOutputs):
    """What :func:`rnn_forward` returns: the named tuple ``(y, hy, cy, reserve)`` (``cy`` for LSTM, ``reserve`` in
    training); a training-mode result also holds what the backward calls need."""
    _ctx: dict | None = None  # set by rnn_forward(training=True)


class RNNDataGrads(NamedTuple):
    """What :func:`rnn_backward_data` returns; ``dcx`` is None unless the RNN is an LSTM."""
    dx: DeviceArray
    dhx: DeviceArray
    dcx: DeviceArray | None


def _state(handle: Handle, rnn: RNN, a, name: str, B: int, cell: bool = False, out: bool = False):
    """A state ``[layers * dirs, B, hidden_size if cell else out_size]``: an input, or with ``out`` an output."""
    shape = (rnn.num_pseudo_layers, B, rnn.hidden_size if cell else rnn.out_size)
    if out:
        return memory.output_array(a, shape, rnn.dtype, name, device=handle.device, stream=handle.stream,
                                   contiguous=True)
    return None if a is None else memory.as_array(a, name, dtype=rnn.dtype, shape=shape, contiguous=True,
                                                  device=handle.device)


def _state_descs(rnn: RNN, B: int) -> tuple[TensorDescriptor, TensorDescriptor]:
    """The descriptors of h and c states (c is h's unless LSTM)."""
    h = TensorDescriptor.shared((rnn.num_pseudo_layers, B, rnn.out_size), rnn.dtype)
    c = h if rnn.mode != "lstm" else TensorDescriptor.shared((rnn.num_pseudo_layers, B, rnn.hidden_size), rnn.dtype)
    return h, c


def _lstm_only(rnn: RNN, what: str, *arrays) -> None:
    if rnn.mode != "lstm" and any(a is not None for a in arrays):
        raise InvalidValueError(f"{what}; this RNN is {rnn.mode!r}")


def _geometry(handle: Handle, rnn: RNN, x: DeviceArrayLike, seq_layout, seq_lengths) -> tuple:
    """``(x, B, lengths, x_desc, y_desc, y_shape)``: ``x`` checked against the layout, lengths and input size."""
    instance_of(rnn, RNN, "rnn")
    layout, _ = choice(_LAYOUTS, seq_layout, "seq_layout")
    if layout != "packed" and not rnn.padded_io:
        raise InvalidValueError(f"seq_layout {layout!r} needs an RNN made with padded_io=True; use "
                                f"seq_layout='packed'")
    xa = memory.as_array(x, "x", dtype=rnn.dtype, contiguous=True, device=handle.device)
    if layout == "packed":
        if seq_lengths is None:
            raise InvalidValueError("the 'packed' layout needs seq_lengths")
        if xa.ndim != 2:
            raise InvalidValueError(f"x in the 'packed' layout must be [sum(seq_lengths), {rnn.input_size}], got "
                                    f"{xa.shape}")
        B = len(seq_lengths)
        T = int(np.max(seq_lengths)) if B else 0
    else:
        if xa.ndim != 3:
            raise InvalidValueError(f"x in the {layout!r} layout must be 3-D, got shape {xa.shape}")
        T, B = (xa.shape[0], xa.shape[1]) if layout == "seq_major" else (xa.shape[1], xa.shape[0])
    lengths = check_lengths(seq_lengths, positive_int(T, "max sequence length"), positive_int(B, "batch"),
                            packed=layout == "packed")
    want = _data_shape(layout, T, B, rnn.input_size, lengths)
    if xa.shape != want:
        raise InvalidValueError(f"x has shape {xa.shape}; expected {want} (layout {layout!r}, input_size "
                                f"{rnn.input_size})")
    V = rnn.dirs * rnn.out_size
    return (xa, B, lengths, RNNDataDescriptor.shared(rnn.dtype, layout, T, B, rnn.input_size, lengths),
            RNNDataDescriptor.shared(rnn.dtype, layout, T, B, V, lengths), _data_shape(layout, T, B, V, lengths))


def _work_size(handle: Handle, rnn: RNN, mode, x_desc: RNNDataDescriptor) -> tuple[int, int]:
    """(workspace, reserve) bytes of a call in ``mode`` (``cudnnGetRNNTempSpaceSizes``)."""
    work_n, reserve_n = ctypes.c_size_t(), ctypes.c_size_t()
    capi.cudnnGetRNNTempSpaceSizes(handle.ptr, rnn.ptr, mode, x_desc.ptr, byref(work_n), byref(reserve_n))
    return work_n.value, reserve_n.value


def _training_space(handle: Handle, rnn: RNN, x_desc, reserve, lengths) -> tuple[int, DeviceArray, DeviceArray]:
    """A backward call's (workspace bytes, the forward's reserve, the forward's device lengths)."""
    return (_work_size(handle, rnn, capi.CUDNN_FWD_MODE_TRAINING, x_desc)[0],
            memory.as_array(reserve, "fwd.reserve", device=handle.device),
            memory.as_array(lengths, "the forward's lengths", device=handle.device))


@prepared(inputs=("x", "weights", "hx", "cx"), outputs=("y", "hy", "cy"), inplace=False)
def _forward(handle: Handle, rnn: RNN, x, weights, seq_lengths, seq_layout, hx, cx, y, hy, cy, training) -> tuple:
    """The validated ``cudnnRNNForward`` of :func:`rnn_forward`: ``(y, hy, cy, reserve, device lengths)``."""
    x, B, host_lengths, x_desc, y_desc, y_shape = _geometry(handle, rnn, x, seq_layout, seq_lengths)
    w = rnn._check_weights(handle, weights)
    _lstm_only(rnn, "cx/cy are LSTM cell states", cx, cy)
    hxa, cxa = _state(handle, rnn, hx, "hx", B), _state(handle, rnn, cx, "cx", B, cell=True)
    ya = memory.output_array(y, y_shape, rnn.dtype, "y", device=handle.device, stream=handle.stream, contiguous=True)
    hya = _state(handle, rnn, hy, "hy", B, out=True)
    cya = _state(handle, rnn, cy, "cy", B, cell=True, out=True) if rnn.mode == "lstm" else None
    h_desc, c_desc = _state_descs(rnn, B)
    mode = capi.CUDNN_FWD_MODE_TRAINING if training else capi.CUDNN_FWD_MODE_INFERENCE
    work_n, reserve_n = _work_size(handle, rnn, mode, x_desc)
    reserve = memory.empty((reserve_n,), np.uint8, stream=handle.stream, device=handle.device) if training else None
    lengths = device_lengths(handle, host_lengths)
    launch(handle, capi.cudnnRNNForward, handle.ptr, rnn, mode, lengths, x_desc, x, y_desc, ya, h_desc, hxa, hya,
           c_desc, cxa, cya, w.nbytes, w, work_n, WorkspaceArg(work_n), reserve_n if training else 0, reserve)
    return ya, hya, cya, reserve, lengths


def rnn_forward(handle: Handle, rnn: RNN, x: DeviceArrayLike, weights: DeviceArrayLike, *,
                seq_lengths: Sequence[int] | npt.NDArray[np.integer] | None = None, seq_layout: str = "seq_major",
                hx: DeviceArrayLike | None = None, cx: DeviceArrayLike | None = None, y: DeviceArrayLike | None = None,
                hy: DeviceArrayLike | None = None, cy: DeviceArrayLike | None = None,
                training: bool = False, **old: str) -> RNNForwardResult:
    """``cudnnRNNForward``: outputs ``y`` and final states ``hy`` (and ``cy`` for LSTM).

    ``x``: ``[T, B, input_size]`` (seq_major), ``[B, T, input_size]`` (batch_major) or ``[sum(seq_lengths),
    input_size]`` (packed), as ``seq_layout`` (deprecated: ``layout=``) says; ``seq_lengths``: per-sequence lengths
    (default: all T; required for packed). ``training=True`` keeps the reserve space for the backward calls.
    Outputs are allocated unless given.
    """
    if old:
        given = None if seq_layout == "seq_major" else seq_layout
        seq_layout = _renamed("rnn_forward", old, "layout", "seq_layout", given)
    lengths = by_value(seq_lengths)
    *outputs, dev_lengths = _forward(handle, rnn, x, weights, lengths, seq_layout, hx, cx, y, hy, cy, training)
    result = RNNForwardResult(*outputs)
    if training:  # what the backward calls take again
        result._ctx = {"desc": rnn, "x": x, "hx": hx, "cx": cx, "dev_lengths": dev_lengths, "seq_layout": seq_layout,
                       "seq_lengths": lengths, "data_done": False}
    return result


@prepared(inputs=("x", "y", "dy", "weights", "lengths", "hx", "cx", "dhy", "dcy"),
          outputs=("reserve", "dx", "dhx", "dcx"), inplace=False)
def _backward_data(handle: Handle, rnn: RNN, x, y, dy, weights, reserve, lengths, hx, cx, dhy, dcy, seq_layout,
                   seq_lengths, dx, dhx, dcx) -> RNNDataGrads:
    """The validated ``cudnnRNNBackwardData_v8`` (it updates ``reserve``)."""
    x, B, _, x_desc, y_desc, _ = _geometry(handle, rnn, x, seq_layout, seq_lengths)
    ya = memory.as_array(y, "fwd.y", dtype=rnn.dtype, contiguous=True, device=handle.device)
    dya = memory.as_array(dy, "dy", dtype=rnn.dtype, shape=ya.shape, contiguous=True, device=handle.device)
    _lstm_only(rnn, "dcy/dcx are LSTM cell-state gradients", dcy, dcx)
    dhya, dcya = _state(handle, rnn, dhy, "dhy", B), _state(handle, rnn, dcy, "dcy", B, cell=True)
    hxa, cxa = _state(handle, rnn, hx, "hx", B), _state(handle, rnn, cx, "cx", B, cell=True)
    w = rnn._check_weights(handle, weights)
    dxa = memory.output_array(dx, x.shape, rnn.dtype, "dx", device=handle.device, stream=handle.stream,
                              contiguous=True)
    dhxa = _state(handle, rnn, dhx, "dhx", B, out=True)
    dcxa = _state(handle, rnn, dcx, "dcx", B, cell=True, out=True) if rnn.mode == "lstm" else None
    h_desc, c_desc = _state_descs(rnn, B)
    work_n, ra, la = _training_space(handle, rnn, x_desc, reserve, lengths)
    launch(handle, capi.cudnnRNNBackwardData_v8, handle.ptr, rnn, la, y_desc, ya, dya, x_desc, dxa,
           h_desc, hxa, dhya, dhxa, c_desc, cxa, dcya, dcxa, w.nbytes, w, work_n, WorkspaceArg(work_n), ra.nbytes, ra)
    return RNNDataGrads(dxa, dhxa, dcxa)


def rnn_backward_data(handle: Handle, rnn: RNN, fwd: RNNForwardResult, dy: DeviceArrayLike, weights: DeviceArrayLike, *,
                      dhy: DeviceArrayLike | None = None, dcy: DeviceArrayLike | None = None,
                      dx: DeviceArrayLike | None = None, dhx: DeviceArrayLike | None = None,
                      dcx: DeviceArrayLike | None = None) -> RNNDataGrads:
    """``cudnnRNNBackwardData_v8``: :class:`RNNDataGrads` ``(dx, dhx, dcx)`` (``dcx`` None unless LSTM).

    ``dy`` has ``fwd.y``'s shape; ``dhy``/``dcy`` (gradients of the final states) default to zeros. Call it before
    :func:`rnn_backward_weights` (cuDNN updates the reserve space here).
    """
    handle = handle_arg(handle)
    ctx = training_ctx(fwd, RNNForwardResult, rnn, "rnn_forward")
    grads = _backward_data(handle, rnn, ctx["x"], fwd.y, dy, weights, fwd.reserve, ctx["dev_lengths"], ctx["hx"],
                           ctx["cx"], dhy, dcy, ctx["seq_layout"], ctx["seq_lengths"], dx, dhx, dcx)
    ctx["data_done"] = True
    return grads


@prepared(inputs=("x", "y", "reserve", "lengths", "hx"), outputs=("dweights",), inplace=False)
def _backward_weights(handle: Handle, rnn: RNN, x, y, reserve, lengths, hx, seq_layout, seq_lengths,
                      dweights) -> DeviceArray:
    """The validated ``cudnnRNNBackwardWeights_v8``."""
    x, B, _, x_desc, y_desc, _ = _geometry(handle, rnn, x, seq_layout, seq_lengths)
    ya = memory.as_array(y, "fwd.y", dtype=rnn.dtype, contiguous=True, device=handle.device)
    hxa = _state(handle, rnn, hx, "hx", B)
    dw = rnn.new_weights(handle) if dweights is None else rnn._check_weights(handle, dweights, "dweights")
    work_n, ra, la = _training_space(handle, rnn, x_desc, reserve, lengths)
    launch(handle, capi.cudnnRNNBackwardWeights_v8, handle.ptr, rnn, capi.CUDNN_WGRAD_MODE_ADD, la, x_desc, x,
           _state_descs(rnn, B)[0], hxa, y_desc, ya, dw.nbytes, dw, work_n, WorkspaceArg(work_n), ra.nbytes, ra)
    return dw


def rnn_backward_weights(handle: Handle, rnn: RNN, fwd: RNNForwardResult, *moved: DeviceArrayLike,
                         dweights: DeviceArrayLike | None = None) -> DeviceArray:
    """``cudnnRNNBackwardWeights_v8``: weight gradients ADDED into ``dweights`` (a new zeroed weight space if None).

    Needs :func:`rnn_backward_data` on the same ``fwd`` first. Returns ``dweights``.
    """
    handle = handle_arg(handle)
    ctx, dweights = weights_ctx(fwd, RNNForwardResult, rnn, "rnn_forward", moved, dweights)
    return _backward_weights(handle, rnn, ctx["x"], fwd.y, fwd.reserve, ctx["dev_lengths"], ctx["hx"],
                             ctx["seq_layout"], ctx["seq_lengths"], dweights)


rnn_data_descriptor = alias("rnn_data_descriptor", RNNDataDescriptor.shared, use="cudnn_py.RNNDataDescriptor.shared")
