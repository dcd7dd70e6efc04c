"""cuDNN descriptors as Python objects: the :class:`Descriptor` and :class:`Settings` bases, tensors and filters
(:class:`TensorDescriptor`, :class:`FilterDescriptor`: a C descriptor built from keywords, read back through
properties), the settings of element-wise and reduction operations (:class:`OpTensor`, :class:`ReduceTensor`: validated
once, hashable, handing cuDNN the C descriptor every equal object shares), and that sharing: the ``"descriptors.*"``
caches of :func:`cudnn_py.core.caches.shared`, whose descriptors' ``close()`` does nothing. Old names
(``OpTensorDescriptor``, ``format=``, ...) warn and still work.
"""
from __future__ import annotations

import ctypes
import enum
import importlib
import math
import operator
from collections.abc import Sequence
from ctypes import byref, c_int, c_size_t, c_void_p
from enum import IntEnum
from typing import Any, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from cudnn_py.core import caches
from cudnn_py import capi
from cudnn_py._deprecation import alias, renamed_attribute, renamed_kwargs
from cudnn_py.core.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.core.handle import CObject
from cudnn_py.core.args import DIM_MAX, INT32_MAX, dims, enum_member, ints, nan_flag
from cudnn_py.core.memory import DeviceArray, as_array, c_strides
from cudnn_py.core.strided import check_layout

__all__ = [
    "Descriptor", "Settings", "legacy_dtype", "read_back", "c_nan", "c_ints", "TensorDescriptor", "FilterDescriptor",
    "OpTensorDescriptor", "ReduceTensorDescriptor", "OpTensor", "ReduceTensor", "op_tensor_descriptor",
    "reduce_tensor_descriptor", "clear_cache",
]

#: names that moved to their operation family (``cudnn_py.ops.<family>``); the old import path still works
_MOVED = {"ConvolutionDescriptor": "convolution", "convolution_descriptor": "convolution",
          "convolution_output_shape": "convolution", "PoolingDescriptor": "pooling", "pooling_descriptor": "pooling",
          "pooling_output_shape": "pooling", "ActivationDescriptor": "activation",
          "activation_descriptor": "activation", "LRNDescriptor": "lrn", "lrn_descriptor": "lrn",
          "DropoutDescriptor": "dropout"}


def __getattr__(name: str):
    """The old import path of a name in :data:`_MOVED` (PEP 562): the family module's, imported on first use."""
    family = _MOVED.get(name)
    if family is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"cudnn_py.ops.{family}"), name)


def c_nan(propagate: bool) -> capi.cudnnNanPropagation_t:
    """The ``cudnnNanPropagation_t`` of a NaN-propagation flag (for the families' descriptor classes too)."""
    return capi.CUDNN_PROPAGATE_NAN if propagate else capi.CUDNN_NOT_PROPAGATE_NAN


def c_ints(values) -> ctypes.Array:
    """A C ``int`` array of ``values`` (at least one element: cuDNN may read one)."""
    return (c_int * max(len(values), 1))(*values)


def _members(pairs) -> dict:
    """``{int(cudnnDataType_t member): value}`` of the ``(member name, value)`` pairs whose member this cuDNN has."""
    return {int(getattr(capi.cudnnDataType_t, n)): v for n, v in pairs if hasattr(capi.cudnnDataType_t, n)}


#: dtypes the legacy tensor and filter descriptors take (cuDNN refuses int64, bool, fp8 and fp4 there with a
#: bare BAD_PARAM; the graph API's tensors take them)
LEGACY_DTYPES = frozenset(_members((f"CUDNN_DATA_{n}", None) for n in (
    "FLOAT", "DOUBLE", "HALF", "BFLOAT16", "INT8", "UINT8", "INT32", "INT8x4", "INT8x32", "UINT8x4")))
#: vector dtype -> values per vector along C (the NCHW_VECT_C layout's)
_VECTOR_WIDTH = _members((("CUDNN_DATA_INT8x4", 4), ("CUDNN_DATA_UINT8x4", 4), ("CUDNN_DATA_INT8x32", 32)))


def legacy_dtype(dtype, what: str) -> capi.cudnnDataType_t:
    """The ``cudnnDataType_t`` of ``dtype``, refused with a reason where the legacy descriptors do not take it."""
    if dtype is None:
        raise InvalidTypeError(f"{what} dtype must be given (None is not a dtype)")
    try:
        dt = cudnn_dtype(dtype)
    except InvalidTypeError as e:
        raise InvalidTypeError(f"{what}: {e}") from None
    if int(dt) not in LEGACY_DTYPES:
        raise InvalidTypeError(f"{what} dtype {dt.name} is not available to cuDNN's legacy (descriptor) API, which "
                               f"takes float32, float64, float16, bfloat16, int8, uint8 and int32; use the graph API "
                               f"(cudnn_py.Graph) for it")
    return dt


def _check_vect_c(shape: tuple[int, ...], dt, fmt, what: str) -> None:
    """NCHW_VECT_C stores C in vectors of 4 or 32 int8/uint8 values: it takes only a vector dtype, whose width must
    divide C (cuDNN rounds C down otherwise: a filter of C 6 in INT8x4 reads back C 4, one of INT8x32 C 0)."""
    if fmt != capi.CUDNN_TENSOR_NCHW_VECT_C:
        return
    width = _VECTOR_WIDTH.get(int(dt))
    if width is None:
        raise InvalidTypeError(f"{what} layout NCHW_VECT_C holds C in vectors of int8/uint8 values: its dtype must "
                               f"be CUDNN_DATA_INT8x4, CUDNN_DATA_UINT8x4 or CUDNN_DATA_INT8x32, got {dt.name}")
    if shape[1] % width:
        raise InvalidValueError(f"{what} layout NCHW_VECT_C with {dt.name} needs C (shape[1], here {shape[1]}) to be "
                                f"a multiple of {width}: pad C to {-(-shape[1] // width) * width}")


# --- base ---------------------------------------------------------------------------------------------

def read_back(index: int, doc: str) -> property:
    """A read-only property of a :class:`Descriptor` subclass: item ``index`` of what its ``_get()`` reads back."""
    return property(lambda self: self._get()[index], doc=doc)


def setting(slot: str, doc: str | None = None) -> Any:
    """A read-only property of a settings class: its attribute ``slot``, typed by the annotation it is assigned to."""
    return property(operator.attrgetter(slot), doc=doc)


class Descriptor(CObject[Any]):
    """The base of every object that owns a C descriptor, created on construction (:class:`CObject` destroys it);
    subclasses name their C type, create/destroy functions, ``repr``'s properties and their cache for :meth:`shared`."""

    _handle_type: type = c_void_p
    _create_fn: str = ""
    _destroy_fn: str = ""
    _shown: tuple[str, ...] = ()  # the properties repr() shows (None values are left out)
    _cache_name: str = ""  # the process-wide cache of shared instances (cudnn_py.core.caches.shared), for shared()

    def __init__(self):
        self._shared = False
        ptr = self._handle_type()
        getattr(capi, self._create_fn)(byref(ptr))
        self._own(ptr, getattr(capi, self._destroy_fn))

    @classmethod
    def shared(cls, *settings):
        """The instance ``cls(*settings)`` kept in the process-wide cache ``cls._cache_name`` (``close()``: no-op)."""
        return _shared(caches.shared(cls._cache_name), settings, lambda: cls(*settings))

    @property
    def is_shared(self) -> bool:
        """Whether this is a process-wide instance of :meth:`shared` (whose ``close()`` does nothing)."""
        return self._shared

    def close(self) -> None:
        """Destroy the cuDNN descriptor (idempotent; a no-op for shared, cached descriptors)."""
        if not self._shared:
            super().close()

    def __repr__(self) -> str:
        if self._ptr is None:
            return f"<{type(self).__name__} closed>"
        values = ((name, getattr(self, name)) for name in self._shown)
        fields = ", ".join(f"{name}={v.name if isinstance(v, IntEnum) else v}" for name, v in values if v is not None)
        return f"{type(self).__name__}({fields})"


_S = TypeVar("_S", bound="Settings")


class Settings:
    """The base of the configuration classes (``Pooling``, ``Activation``, ``LRN``, :class:`OpTensor`,
    :class:`ReduceTensor`): read-only, equal and hashable by their settings (``_key()``), so that equal objects share
    one C descriptor, :attr:`descriptor` (the shared ``_c_class`` of ``_key()``; ``Pooling``: one per rank)."""

    __slots__ = ()
    _c_class: type[Descriptor]  # the C descriptor class, made from the settings as _c_class.shared(*_key())
    _desc: Descriptor | None

    def _key(self) -> tuple:
        raise NotImplementedError

    @property
    def descriptor(self):
        """The shared C descriptor of these settings (a ``cudnn*Descriptor_t``, made on first use), for ``capi``."""
        d = self._desc
        if d is None:
            d = self._desc = self._c_class.shared(*self._key())
        return d.ptr

    def close(self) -> None:
        """Nothing to release (the C descriptor is shared): kept, with ``with``, for the deprecated descriptor names."""

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


# --- tensor & filter ----------------------------------------------------------------------------------

_FORMAT_ALIASES = {"nchw": "CUDNN_TENSOR_NCHW", "nhwc": "CUDNN_TENSOR_NHWC", "nchw_vect_c": "CUDNN_TENSOR_NCHW_VECT_C",
                   "ncdhw": "CUDNN_TENSOR_NCHW", "ndhwc": "CUDNN_TENSOR_NHWC"}


def _layout(value) -> capi.cudnnTensorFormat_t:
    return enum_member(capi.cudnnTensorFormat_t, value, "CUDNN_TENSOR_", "layout", _FORMAT_ALIASES)


class _ArrayDescriptor(Descriptor):
    """What :class:`TensorDescriptor` and :class:`FilterDescriptor` share: ``ndim`` and ``nbytes``."""

    _size_fn: str  # the capi function that answers nbytes
    shape: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the array spans in memory (``cudnnGetTensorSizeInBytes``, ``cudnnGetFilterSizeInBytes``)."""
        n = c_size_t()
        getattr(capi, self._size_fn)(self.ptr, byref(n))
        return n.value


class TensorDescriptor(_ArrayDescriptor):
    """An n-d tensor (2 to 8 dims) of ``dtype``: packed C order by default, explicit ``strides`` (in elements), or a
    ``layout`` ("NCHW", "NHWC", "NCHW_VECT_C"; ``shape`` always in logical N, C, spatial... order)."""

    _handle_type = capi.cudnnTensorDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateTensorDescriptor", "cudnnDestroyTensorDescriptor"
    _size_fn = "cudnnGetTensorSizeInBytes"
    _shown = ("shape", "dtype", "strides", "layout")

    def __init__(self, shape: Sequence[int], dtype: DTypeLike = np.float32, strides: Sequence[int] | None = None, *,
                 layout: str | None = None, **old) -> None:
        if old:
            layout = renamed_kwargs("TensorDescriptor", old, {"format": "layout"}, {"layout": layout})["layout"]
        shape = dims(shape, "tensor shape", 2)
        dt = legacy_dtype(dtype, "tensor")
        fmt = None
        if layout is not None:
            if strides is not None:
                raise InvalidValueError("give either strides or layout, not both")
            if len(shape) not in (4, 5):
                raise InvalidValueError(f"tensor layout {layout!r} names the memory order of 4 or 5 dimensions "
                                        f"(N, C, spatial...); shape {shape} has {len(shape)}: give strides instead")
            fmt = _layout(layout)
            _check_vect_c(shape, dt, fmt, "tensor")
        elif strides is not None:
            strides = ints(strides, None, "tensor strides", 0)
            if len(strides) != len(shape):
                raise InvalidValueError(f"tensor strides {strides} must have one entry per dimension of shape {shape}")
            check_layout(shape, strides, "tensor")
        c_order = c_strides(shape) if strides is None else strides
        span = 1 + sum((n - 1) * s for n, s in zip(shape, c_order))  # elements from the first to the last, inclusive
        if span > INT32_MAX:
            raise InvalidValueError(f"tensor shape {shape} with strides {strides or 'packed'} spans {span} elements; "
                                    f"cuDNN's legacy tensor descriptors address at most 2**31 - 1 (split the batch)")
        super().__init__()
        self._layout = fmt
        if fmt is not None:
            capi.cudnnSetTensorNdDescriptorEx(self._ptr, fmt, dt, len(shape), c_ints(shape))
        else:
            capi.cudnnSetTensorNdDescriptor(self._ptr, dt, len(shape), c_ints(shape), c_ints(c_order))

    @classmethod
    def like(cls, array, dtype=None) -> TensorDescriptor:
        """A descriptor matching an array's shape, dtype and strides (a DeviceArray or any GPU tensor)."""
        a = as_array(array, "array")
        return cls(a.shape, a.dtype if dtype is None else dtype, None if a.is_contiguous else a.strides)

    def _get(self):
        dt, nb = c_int(), c_int()
        dims, strides = (c_int * DIM_MAX)(), (c_int * DIM_MAX)()
        capi.cudnnGetTensorNdDescriptor(self.ptr, DIM_MAX, byref(dt), byref(nb), dims, strides)
        n = nb.value
        return capi.cudnnDataType_t(dt.value), tuple(dims[:n]), tuple(strides[:n])

    dtype = read_back(0, "The ``cudnnDataType_t``.")
    shape = read_back(1, "The dimensions (``tuple[int, ...]``).")
    strides = read_back(2, "Strides in elements, as cuDNN stores them.")
    format = renamed_attribute("layout", "TensorDescriptor.format is deprecated, use TensorDescriptor.layout")

    @property
    def numpy_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    @property
    def layout(self) -> capi.cudnnTensorFormat_t | None:
        """The layout it was built with (None when built from shape and strides)."""
        return self._layout

    @classmethod
    def shared(cls, shape, dtype=np.float32, strides=None, layout=None,  # type: ignore[override]
               **old) -> TensorDescriptor:
        """The process-wide descriptor of these arguments (built once, then a dict lookup; its ``close()`` does
        nothing); ``format=`` is the deprecated spelling of ``layout``."""
        if old:
            layout = renamed_kwargs("TensorDescriptor.shared", old, {"format": "layout"}, {"layout": layout})["layout"]
        if _all_ints(shape) and (strides is None or _all_ints(strides)):  # the hot path: shapes of arrays
            try:
                return _TENSORS[(shape, dtype, strides, layout)]
            except (KeyError, TypeError):
                pass
        return _shared(_TENSORS, _hashable((shape, dtype, strides, layout)),
                       lambda: cls(shape, dtype, strides, layout=layout))

    @classmethod
    def for_array(cls, array) -> TensorDescriptor:
        """The shared descriptor of a DeviceArray's (or GPU tensor's) shape, dtype and strides."""
        a = array if type(array) is DeviceArray else as_array(array, "array")
        return cls.shared(a.shape, a.dtype, None if a.is_contiguous else a.strides)


class FilterDescriptor(_ArrayDescriptor):
    """Convolution weights: ``shape`` (K, C/groups, spatial...) (3 to 8 dims), ``dtype``, ``layout``
    ("NCHW", the default: KCRS memory, "NHWC": KRSC memory; dims are always given as K, C, spatial...)."""

    _handle_type = capi.cudnnFilterDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateFilterDescriptor", "cudnnDestroyFilterDescriptor"
    _size_fn = "cudnnGetFilterSizeInBytes"
    _shown = ("shape", "dtype", "layout")

    def __init__(self, shape: Sequence[int], dtype: DTypeLike = np.float32, *, layout: str | None = None,
                 **old) -> None:
        if old:
            layout = renamed_kwargs("FilterDescriptor", old, {"format": "layout"}, {"layout": layout})["layout"]
        shape = dims(shape, "filter shape", 3)
        dt = legacy_dtype(dtype, "filter")
        fmt = _layout("NCHW" if layout is None else layout)
        _check_vect_c(shape, dt, fmt, "filter")
        if math.prod(shape) > INT32_MAX:
            raise InvalidValueError(f"filter shape {shape} has {math.prod(shape)} elements; cuDNN's legacy filter "
                                    f"descriptors hold at most 2**31 - 1")
        super().__init__()
        capi.cudnnSetFilterNdDescriptor(self._ptr, dt, fmt, len(shape), c_ints(shape))

    def _get(self):
        dt, fmt, nb = c_int(), c_int(), c_int()
        dims = (c_int * DIM_MAX)()
        capi.cudnnGetFilterNdDescriptor(self.ptr, DIM_MAX, byref(dt), byref(fmt), byref(nb), dims)
        return capi.cudnnDataType_t(dt.value), capi.cudnnTensorFormat_t(fmt.value), tuple(dims[:nb.value])

    dtype = read_back(0, "The ``cudnnDataType_t``.")
    layout = read_back(1, "The ``cudnnTensorFormat_t`` (memory order of the weights).")
    shape = read_back(2, "The dimensions (K, C/groups, spatial...).")
    format = renamed_attribute("layout", "FilterDescriptor.format is deprecated, use FilterDescriptor.layout")

    @classmethod
    def shared(cls, shape, dtype=np.float32, layout=None, **old) -> FilterDescriptor:  # type: ignore[override]
        """The process-wide descriptor of these arguments (``layout`` "NCHW" by default; built once; its ``close()``
        does nothing); ``format=`` is the deprecated spelling of ``layout``."""
        if old:
            layout = renamed_kwargs("FilterDescriptor.shared", old, {"format": "layout"}, {"layout": layout})["layout"]
        layout = "NCHW" if layout is None else layout
        return _shared(_FILTERS, _hashable((shape, dtype, layout)), lambda: cls(shape, dtype, layout=layout))


# --- op-tensor, reduce-tensor -------------------------------------------------------------------------

class _TensorOpDescriptor(Descriptor):
    """The C descriptor of :class:`OpTensor` or :class:`ReduceTensor` settings (op, compute dtype, NaN propagation,
    then a reduction's indices and their type), set and read back through ``cudnnSet/Get<_c_name>Descriptor``."""

    _c_name: str
    _enums: tuple[type, ...]  # the C enum of each value cuDNN reads back

    def __init__(self, op, compute_dtype: capi.cudnnDataType_t, nan_propagation: bool, *rest):
        super().__init__()
        getattr(capi, f"cudnnSet{self._c_name}Descriptor")(self._ptr, op, compute_dtype, c_nan(nan_propagation), *rest)

    def _get(self):
        values = [c_int() for _ in self._enums]
        getattr(capi, f"cudnnGet{self._c_name}Descriptor")(self.ptr, *map(byref, values))
        return tuple(t(v.value) for t, v in zip(self._enums, values))

    op = read_back(0, "The operation (``cudnnOpTensorOp_t`` or ``cudnnReduceTensorOp_t``).")
    compute_type = read_back(1, "The ``cudnnDataType_t`` it computes in.")
    nan_propagation = read_back(2, "The ``cudnnNanPropagation_t``.")


class _OpTensorDescriptor(_TensorOpDescriptor):
    """A ``cudnnOpTensorDescriptor_t`` of settings :class:`OpTensor` validated."""

    _handle_type = capi.cudnnOpTensorDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateOpTensorDescriptor", "cudnnDestroyOpTensorDescriptor"
    _c_name = "OpTensor"
    _enums = (capi.cudnnOpTensorOp_t, capi.cudnnDataType_t, capi.cudnnNanPropagation_t)
    _shown = ("op", "compute_type", "nan_propagation")
    _cache_name = "descriptors.op_tensor"


class _ReduceTensorDescriptor(_TensorOpDescriptor):
    """A ``cudnnReduceTensorDescriptor_t`` of settings :class:`ReduceTensor` validated."""

    _handle_type = capi.cudnnReduceTensorDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateReduceTensorDescriptor", "cudnnDestroyReduceTensorDescriptor"
    _c_name = "ReduceTensor"
    _enums = (capi.cudnnReduceTensorOp_t, capi.cudnnDataType_t, capi.cudnnNanPropagation_t,
              capi.cudnnReduceTensorIndices_t, capi.cudnnIndicesType_t)
    _shown = ("op", "compute_type", "nan_propagation", "indices", "indices_type")
    _cache_name = "descriptors.reduce_tensor"

    indices = read_back(3, "The ``cudnnReduceTensorIndices_t``.")
    indices_type = read_back(4, "The ``cudnnIndicesType_t``.")


class _TensorOpSettings(Settings):
    """What :class:`OpTensor` and :class:`ReduceTensor` share: an operation of ``_op_enum`` (names after
    ``_op_prefix``), the compute dtype and NaN propagation."""

    __slots__ = ("_op", "_compute", "_nan", "_desc")
    _op_enum: type[enum.IntEnum]
    _op_prefix: str

    def __init__(self, op, compute_dtype, nan_propagation, old: dict):
        if old:
            compute_dtype = renamed_kwargs(type(self).__name__, old, {"compute_type": "compute_dtype"},
                                           {"compute_dtype": compute_dtype})["compute_dtype"]
        self._op: enum.IntEnum = enum_member(self._op_enum, op, self._op_prefix, "op")
        self._compute = legacy_dtype(np.float32 if compute_dtype is None else compute_dtype, "compute_dtype")
        self._nan = nan_flag(nan_propagation)
        self._desc = None

    op: enum.IntEnum = setting("_op", "The operation (a member of the C enum: ``cudnnOpTensorOp_t``, "
                                      "``cudnnReduceTensorOp_t``).")
    compute_dtype: capi.cudnnDataType_t = setting("_compute")
    nan_propagation: bool = setting("_nan")

    def _key(self) -> tuple:
        return (self._op, self._compute, self._nan)

    def _op_name(self) -> str:
        return self._op.name.removeprefix(self._op_prefix).lower()

    def __repr__(self):
        return (f"{type(self).__name__}({self._op_name()!r}, compute_dtype={self._compute.name}, "
                f"nan_propagation={self._nan})")


class OpTensor(_TensorOpSettings):
    """The element-wise operation of ``cudnnOpTensor`` (one shared ``cudnnOpTensorDescriptor_t``; settings read back
    as properties). ``op``: "add", "mul", "min", "max", "sqrt" or "not" (any case; or a ``cudnnOpTensorOp_t``).
    ``compute_dtype``: float32 by default (float64 for double data; ``"fp32"`` and the like too; ``compute_type=``,
    deprecated). ``nan_propagation``: default False."""

    __slots__ = ()
    _c_class = _OpTensorDescriptor
    _op_enum, _op_prefix = capi.cudnnOpTensorOp_t, "CUDNN_OP_TENSOR_"

    def __init__(self, op: str | int = "add", compute_dtype: DTypeLike | int | None = None, *,
                 nan_propagation: bool | str | int = False, **old) -> None:
        super().__init__(op, compute_dtype, nan_propagation, old)


_INDICES_ALIASES = {"none": "CUDNN_REDUCE_TENSOR_NO_INDICES", "no_indices": "CUDNN_REDUCE_TENSOR_NO_INDICES",
                    "flattened": "CUDNN_REDUCE_TENSOR_FLATTENED_INDICES",
                    "flattened_indices": "CUDNN_REDUCE_TENSOR_FLATTENED_INDICES"}
_INDICES_TYPE_ALIASES = {**{f"uint{n}": f"CUDNN_{n}BIT_INDICES" for n in (8, 16, 32, 64)},
                         **{f"{n}bit": f"CUDNN_{n}BIT_INDICES" for n in (8, 16, 32, 64)}}


class ReduceTensor(_TensorOpSettings):
    """The reduction of ``cudnnReduceTensor`` (one shared ``cudnnReduceTensorDescriptor_t``; settings read back as
    properties). ``op``: "add", "mul", "min", "max", "amax", "avg", "norm1", "norm2" or "mul_no_zeros" (any case; or
    a ``cudnnReduceTensorOp_t``). ``compute_dtype``: float32 by default (``compute_type=``, deprecated).
    ``nan_propagation``: default False. ``indices``: "none" (default) or "flattened" (True/False too; only min, max
    and amax have indices); ``indices_type``: "uint32" (default), "uint8", "uint16" or "uint64"."""

    __slots__ = ("_indices", "_indices_type")
    _c_class = _ReduceTensorDescriptor
    _op_enum, _op_prefix = capi.cudnnReduceTensorOp_t, "CUDNN_REDUCE_TENSOR_"

    def __init__(self, op: str | int = "add", compute_dtype: DTypeLike | int | None = None, *,
                 nan_propagation: bool | str | int = False, indices: bool | str | int = "none",
                 indices_type: str | int = "uint32", **old) -> None:
        super().__init__(op, compute_dtype, nan_propagation, old)
        if isinstance(indices, (bool, np.bool_)):
            indices = "flattened" if indices else "none"
        self._indices = enum_member(capi.cudnnReduceTensorIndices_t, indices, "CUDNN_REDUCE_TENSOR_", "indices",
                                    _INDICES_ALIASES)
        self._indices_type = enum_member(capi.cudnnIndicesType_t, indices_type, "CUDNN_", "indices_type",
                                         _INDICES_TYPE_ALIASES)
        if self._indices != capi.CUDNN_REDUCE_TENSOR_NO_INDICES and self._op not in (
                capi.CUDNN_REDUCE_TENSOR_MIN, capi.CUDNN_REDUCE_TENSOR_MAX, capi.CUDNN_REDUCE_TENSOR_AMAX):
            raise InvalidValueError(f"indices: only the min, max and amax reductions have indices (the position of "
                                    f"the chosen element), not {self._op_name()!r}")

    indices: capi.cudnnReduceTensorIndices_t = setting("_indices")
    indices_type: capi.cudnnIndicesType_t = setting("_indices_type")

    def _key(self) -> tuple:
        return (self._op, self._compute, self._nan, self._indices, self._indices_type)

    def __repr__(self):
        return f"{super().__repr__()[:-1]}, indices={self._indices.name}, indices_type={self._indices_type.name})"


# --- shared descriptors -------------------------------------------------------------------------------

def _shared(cache: caches.Cache, key, make):
    """``cache[key]``, made by ``make()`` on a miss and marked shared (of two threads missing at once, one wins)."""
    d = cache.get(key)
    if d is None:
        d = make()  # outside the cache's lock: it calls cuDNN and may raise
        d._shared = True
        d = cache.setdefault(key, d)
    return d


def _hashable(value):
    """A cache-key form of ``value``: lists become tuples, and non-int numbers are tagged with their type so that
    ``2.0`` or ``True`` never finds the descriptor made for ``2`` (they must reach validation and be refused)."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, (float, bool, complex, np.floating, np.bool_)):
        return (type(value).__name__, value)
    try:
        hash(value)
    except TypeError:
        return ("unhashable", id(value))  # never equal to a valid key; validation refuses it
    return value


def _all_ints(values) -> bool:
    return type(values) is tuple and all(type(v) is int for v in values)


_TENSORS = caches.shared("descriptors.tensor")
_FILTERS = caches.shared("descriptors.filter")


# --- deprecated names: each warns, then makes what it made before -----------------------------------------------

clear_cache = alias("clear_cache", caches.clear, use="cudnn_py.core.caches.clear")
OpTensorDescriptor = alias("OpTensorDescriptor", OpTensor, use="cudnn_py.OpTensor")
op_tensor_descriptor = alias("op_tensor_descriptor", OpTensor, use="cudnn_py.OpTensor")
ReduceTensorDescriptor = alias("ReduceTensorDescriptor", ReduceTensor, use="cudnn_py.ReduceTensor")
reduce_tensor_descriptor = alias("reduce_tensor_descriptor", ReduceTensor, use="cudnn_py.ReduceTensor")
tensor_descriptor = alias("tensor_descriptor", TensorDescriptor.shared, use="cudnn_py.TensorDescriptor.shared")
tensor_descriptor_for = alias("tensor_descriptor_for", TensorDescriptor.for_array,
                              use="cudnn_py.TensorDescriptor.for_array")
filter_descriptor = alias("filter_descriptor", FilterDescriptor.shared, use="cudnn_py.FilterDescriptor.shared")
