"""CTC loss with gradients through the v8 API (``cudnnCTCLoss_v8``: labels and lengths in device memory).

::

    costs, grads = ctc_loss(h, logits, labels, label_lengths, input_lengths)   # logits (T, N, A) float32
    r = ctc_loss(h, logits, labels, label_lengths, input_lengths, algo="non_deterministic")  # r.costs, r.gradients

``labels``: every sequence's labels concatenated (1-D), or padded rows (N, S); values in [1, A - 1] (0 is the
blank); host sequences or device int32 arrays, checked on the host (:func:`check_ctc_labels`). With
``normalization="softmax"`` (default) ``logits`` are pre-softmax activations and the gradients ``d cost / d logits``;
with ``"none"`` they are probabilities already normalised. Gradients past a sequence's input length are zero.
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from cudnn_py import capi
from cudnn_py.clib import recording
from cudnn_py._deprecation import renamed_attribute
from cudnn_py.core.caches import shared
from cudnn_py.core.args import bool_arg, dims, int_arg
from cudnn_py.core.descriptors import Descriptor, TensorDescriptor, read_back
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike, as_array, empty, to_device
from cudnn_py.ops._common import check_array, enum_arg, instance_of, launch
from cudnn_py.calls.prepared import prepared
from cudnn_py.clib.recording import WorkspaceArg

__all__ = ["CTC_ALGOS", "CTC_NORMALIZATIONS", "CTC_GRAD_MODES", "MAX_LABEL_LENGTH", "CTCLoss", "CTCLabels",
           "CTCLossResult", "check_ctc_labels", "ctc_loss_workspace_size", "ctc_loss"]

CTC_ALGOS = {"deterministic": capi.CUDNN_CTC_LOSS_ALGO_DETERMINISTIC,
             "non_deterministic": capi.CUDNN_CTC_LOSS_ALGO_NON_DETERMINISTIC}
CTC_NORMALIZATIONS = {"softmax": capi.CUDNN_LOSS_NORMALIZATION_SOFTMAX, "none": capi.CUDNN_LOSS_NORMALIZATION_NONE}
CTC_GRAD_MODES = {"zero_oob": capi.CUDNN_CTC_ZERO_OOB_GRADIENTS, "skip_oob": capi.CUDNN_CTC_SKIP_OOB_GRADIENTS}
#: The longest label sequence cuDNN's CTC accepts.
MAX_LABEL_LENGTH = 255


class CTCLoss(Descriptor):
    """A ``cudnnCTCLossDescriptor_t``: float32 compute, ``normalization`` "softmax" or "none", ``grad_mode``
    "zero_oob" or "skip_oob" (gradients of sequences whose labels cannot fit), ``max_label_length``; works on CPU."""

    _handle_type = capi.cudnnCTCLossDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateCTCLossDescriptor", "cudnnDestroyCTCLossDescriptor"
    _cache_name = "ops.ctc"

    def __init__(self, normalization: str | int = "softmax", grad_mode: str | int = "zero_oob",
                 max_label_length: int = MAX_LABEL_LENGTH) -> None:
        settings = _settings(normalization, grad_mode, max_label_length)
        super().__init__()
        capi.cudnnSetCTCLossDescriptor_v9(self._ptr, capi.CUDNN_DATA_FLOAT, *settings)

    def _get(self):
        ct, norm, gm, mll = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        capi.cudnnGetCTCLossDescriptor_v9(self.ptr, ctypes.byref(ct), ctypes.byref(norm), ctypes.byref(gm),
                                          ctypes.byref(mll))
        return (capi.cudnnDataType_t(ct.value), capi.cudnnLossNormalizationMode_t(norm.value),
                capi.cudnnCTCGradMode_t(gm.value), mll.value)

    compute_dtype = read_back(0, "The compute type (always ``CUDNN_DATA_FLOAT``).")
    normalization = read_back(1, "The ``cudnnLossNormalizationMode_t``.")
    grad_mode = read_back(2, "The ``cudnnCTCGradMode_t``.")
    max_label_length = read_back(3, "The longest label sequence it takes.")

    compute_type = renamed_attribute("compute_dtype", "CTCLoss.compute_type is deprecated, use compute_dtype")

    def _fields(self) -> str:
        _, norm, gm, mll = self._get()
        return f"normalization={norm.name}, grad_mode={gm.name}, max_label_length={mll}"


#: the shared CTC loss descriptors (:meth:`CTCLoss.shared`), by settings
_DESCS = shared(CTCLoss._cache_name, maxsize=256)


def _ctc_desc(normalization, grad_mode, max_label_length, ctc=None) -> CTCLoss:
    """``ctc`` when given (a :class:`CTCLoss`), else the shared :class:`CTCLoss` for these settings."""
    if ctc is not None:
        return instance_of(ctc, CTCLoss, "ctc")
    return CTCLoss.shared(*_settings(normalization, grad_mode, max_label_length))


def _settings(normalization, grad_mode, max_label_length) -> tuple:
    return (enum_arg(normalization, CTC_NORMALIZATIONS, capi.cudnnLossNormalizationMode_t, "CTC normalization"),
            enum_arg(grad_mode, CTC_GRAD_MODES, capi.cudnnCTCGradMode_t, "CTC grad_mode"),
            int_arg(max_label_length, "max_label_length", 1, MAX_LABEL_LENGTH))


class CTCLossResult(NamedTuple):
    """What :func:`ctc_loss` returns: ``costs`` (N,) and ``gradients`` (T, N, A), None without gradients."""
    costs: DeviceArray
    gradients: DeviceArray | None


class CTCLabels(NamedTuple):
    """Host int32 arrays, validated: ``labels`` concatenated, ``label_lengths`` and ``input_lengths`` (N,)."""
    labels: np.ndarray
    label_lengths: np.ndarray
    input_lengths: np.ndarray


def _host_ints(obj, name: str) -> np.ndarray:
    dev = getattr(obj, "__dlpack_device__", None)
    if isinstance(obj, DeviceArray) or hasattr(obj, "__cuda_array_interface__") or (
            dev is not None and not isinstance(obj, np.ndarray) and dev()[0] in (2, 13)):  # kDLCUDA, kDLCUDAManaged
        obj = as_array(obj, name).to_numpy()
    try:
        a = np.asarray(obj)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidTypeError(f"{name} must be a sequence or array of integers, got {type(obj).__name__} "
                               f"({e})") from None
    if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and a.size == 0):
        raise InvalidTypeError(f"{name} must hold integers, got dtype {a.dtype}")
    if a.dtype == np.uint64 and a.size and a.max() > np.iinfo(np.int64).max:
        raise InvalidValueError(f"{name} holds {a.max()}, beyond any length or label cuDNN takes")
    return a.astype(np.int64)


def check_ctc_labels(labels: npt.ArrayLike, label_lengths: npt.ArrayLike, input_lengths: npt.ArrayLike, time_steps: int,
                     alphabet_size: int, max_label_length: int = MAX_LABEL_LENGTH) -> CTCLabels:
    """Validate CTC labels on the host (no GPU needed) and return them as int32 arrays.

    Raises ValueError naming the first sequence that is wrong: a length out of range, a label outside [1,
    alphabet_size - 1], or labels longer than the input allows (a repeated neighbour costs one more time step).
    """
    ll = _host_ints(label_lengths, "label_lengths")
    il = _host_ints(input_lengths, "input_lengths")
    lab = _host_ints(labels, "labels")
    if ll.ndim != 1 or il.ndim != 1 or ll.shape != il.shape:
        raise InvalidValueError(f"label_lengths and input_lengths must be 1-D with one entry per sequence; got shapes "
                         f"{ll.shape} and {il.shape}")
    n = ll.shape[0]
    if alphabet_size < 2:
        raise InvalidValueError(f"the alphabet needs the blank (0) and at least one label; alphabet size is "
                                f"{alphabet_size}")
    for b in range(n):
        if not 1 <= il[b] <= time_steps:
            raise InvalidValueError(f"input_lengths[{b}] = {il[b]}; it must be in [1, {time_steps}] (the logits' T)")
        if not 0 <= ll[b] <= max_label_length:
            raise InvalidValueError(f"label_lengths[{b}] = {ll[b]}; it must be in [0, {max_label_length}] "
                             f"(cuDNN's CTC limit / max_label_length)")
    if lab.ndim == 2:
        if lab.shape[0] != n or (n and lab.shape[1] < ll.max()):
            raise InvalidValueError(f"padded labels have shape {lab.shape}; expected ({n}, >= "
                                    f"{int(ll.max(initial=0))})")
        lab = np.concatenate([lab[b, :ll[b]] for b in range(n)]) if n else lab.reshape(0)
    elif lab.ndim != 1:
        raise InvalidValueError(f"labels must be 1-D (concatenated) or 2-D (N, S) padded; got shape {lab.shape}")
    if lab.shape[0] != ll.sum():
        raise InvalidValueError(f"labels holds {lab.shape[0]} labels but label_lengths sum to {int(ll.sum())}")
    bad = np.flatnonzero((lab < 1) | (lab >= alphabet_size))
    if bad.size:
        raise InvalidValueError(f"labels[{bad[0]}] = {lab[bad[0]]}; labels must be in [1, {alphabet_size - 1}] "
                         f"(0 is the blank, alphabet size {alphabet_size})")
    offs = np.concatenate([[0], np.cumsum(ll)])
    for b in range(n):
        seq = lab[offs[b]:offs[b + 1]]
        need = int(ll[b]) + int(np.count_nonzero(seq[1:] == seq[:-1]))
        if need > il[b]:
            raise InvalidValueError(f"sequence {b}: its {ll[b]} labels need at least {need} time steps (one more per "
                             f"repeated neighbour) but input_lengths[{b}] = {il[b]}; the labels are longer than "
                             f"the input allows")
    return CTCLabels(lab.astype(np.int32), ll.astype(np.int32), il.astype(np.int32))


def ctc_loss_workspace_size(handle: Handle, logits_shape: Sequence[int], *, algo: str | int = "deterministic",
                            normalization: str | int = "softmax", grad_mode: str | int = "zero_oob",
                            max_label_length: int = MAX_LABEL_LENGTH, compute_gradients: bool = True,
                            ctc: CTCLoss | None = None) -> int:
    """Workspace bytes ``cudnnCTCLoss_v8`` needs for logits of shape (T, N, A) (``cudnnGetCTCLossWorkspaceSize_v8``);
    ``ctc``: a :class:`CTCLoss` instead of ``normalization``, ``grad_mode`` and ``max_label_length``."""
    handle = handle_arg(handle)
    al = enum_arg(algo, CTC_ALGOS, capi.cudnnCTCLossAlgo_t, "CTC algo")
    shape = dims(logits_shape, "logits_shape", 3, 3)
    return _workspace(handle, al, _ctc_desc(normalization, grad_mode, max_label_length, ctc),
                      TensorDescriptor.shared(shape, np.float32), bool_arg(compute_gradients, "compute_gradients"))


def _workspace(handle: Handle, al, desc: CTCLoss, pd: TensorDescriptor, grads: bool) -> int:
    n = ctypes.c_size_t()
    capi.cudnnGetCTCLossWorkspaceSize_v8(handle.ptr, al, desc.ptr, pd.ptr, pd.ptr if grads else None, ctypes.byref(n))
    return n.value


@prepared(inputs=("logits",), outputs=("costs", "gradients"), inplace=False)
def ctc_loss(handle: Handle, logits: DeviceArrayLike, labels: npt.ArrayLike, label_lengths: npt.ArrayLike,
             input_lengths: npt.ArrayLike, *, algo: str | int = "deterministic", normalization: str | int = "softmax",
             grad_mode: str | int = "zero_oob", max_label_length: int = MAX_LABEL_LENGTH,
             compute_gradients: bool = True, costs: DeviceArrayLike | None = None,
             gradients: DeviceArrayLike | None = None, ctc: CTCLoss | None = None) -> CTCLossResult:
    """A :class:`CTCLossResult`: CTC ``costs`` (N,) and ``gradients`` (T, N, A) (None when ``compute_gradients``
    is False), float32 (``cudnnCTCLoss_v8``), allocated when not given. ``algo``: "deterministic" or
    "non_deterministic". ``ctc``: a :class:`CTCLoss` instead of ``normalization``, ``grad_mode`` and
    ``max_label_length``. The labels and lengths are checked on the host and copied to the device on every call (no
    prepared call replays it)."""
    recording.spoil("ctc_loss checks its labels' values and copies them to the device on every call")
    al = enum_arg(algo, CTC_ALGOS, capi.cudnnCTCLossAlgo_t, "CTC algo")
    desc = _ctc_desc(normalization, grad_mode, max_label_length, ctc)
    compute_gradients = bool_arg(compute_gradients, "compute_gradients")
    x = check_array(logits, "logits", handle)
    if x.dtype != np.float32:
        raise InvalidTypeError(f"logits has dtype {x.dtype}; cuDNN's CTC loss takes float32")
    if x.ndim != 3:
        raise InvalidValueError(f"logits has shape {x.shape}; expected (T, N, A): time steps, batch, alphabet")
    if not x.is_contiguous:
        raise InvalidValueError("logits must be C-contiguous (T, N, A)")
    t, n, a = x.shape
    host = check_ctc_labels(labels, label_lengths, input_lengths, t, a, desc.max_label_length)
    if host.label_lengths.shape[0] != n:
        raise InvalidValueError(f"{host.label_lengths.shape[0]} label/input lengths for a batch of {n} (logits' N)")
    if not compute_gradients and gradients is not None:
        raise InvalidValueError("gradients given but compute_gradients is False")
    c = None if costs is None else check_array(costs, "costs", handle, dtype=np.float32, shape=(n,), contiguous=True)
    g = None if gradients is None else check_array(gradients, "gradients", handle, dtype=np.float32, shape=x.shape,
                                                   contiguous=True)
    if c is None:
        c = empty((n,), np.float32, stream=handle.stream, device=handle.device)
    if g is None and compute_gradients:
        g = empty(x.shape, np.float32, stream=handle.stream, device=handle.device)
    # on the handle's stream, so freeing them when they go out of scope is ordered after the kernel
    lab = host.labels if host.labels.size else np.zeros(1, np.int32)
    lab_d, ll_d, il_d = (to_device(v, handle.stream, device=handle.device)
                         for v in (lab, host.label_lengths, host.input_lengths))
    pd = TensorDescriptor.shared(x.shape, np.float32)
    ws = _workspace(handle, al, desc, pd, g is not None)
    launch(handle, capi.cudnnCTCLoss_v8, handle.ptr, al, desc, pd, x, lab_d, ll_d, il_d, c, None if g is None else pd,
           g, ws, WorkspaceArg(ws))
    return CTCLossResult(c, g)
