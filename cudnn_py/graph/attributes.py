"""Which element type and count each backend attribute takes, and value conversion to and from C arrays.

The table (``cudnn_py.capi.backend_attributes``) is generated from ``cudnn_graph.h`` by ``python -m cudnn_py.codegen``.
"""
from __future__ import annotations

import ctypes
import enum
import fractions
import numbers
from typing import Callable, NamedTuple, TypeVar

import numpy as np

from cudnn_py import capi
from cudnn_py.core.args import enum_member
from cudnn_py.capi.backend_attributes import OWNER, TABLE
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["AttrSpec", "attr_spec", "attr_enum", "attr_type_enum", "element_ctype", "ENUM_TYPES", "Fraction"]

_ANAME = capi.cudnnBackendAttributeName_t
_ATYPE = capi.cudnnBackendAttributeType_t
_E = TypeVar("_E", bound=enum.Enum)

Fraction = capi.cudnnFraction_t  # numerator / denominator, int64 each


#: CUDNN_TYPE_<X> -> the enum typedef of its elements (C enums: 32-bit ints)
ENUM_TYPES: dict[str, str] = {
    "DATA_TYPE": "cudnnDataType_t", "CONVOLUTION_MODE": "cudnnConvolutionMode_t",
    "HEUR_MODE": "cudnnBackendHeurMode_t", "KNOB_TYPE": "cudnnBackendKnobType_t",
    "NAN_PROPOGATION": "cudnnNanPropagation_t", "NUMERICAL_NOTE": "cudnnBackendNumericalNote_t",
    "LAYOUT_TYPE": "cudnnBackendLayoutType_t", "ATTRIB_NAME": "cudnnBackendAttributeName_t",
    "POINTWISE_MODE": "cudnnPointwiseMode_t", "GENSTATS_MODE": "cudnnGenStatsMode_t",
    "BN_FINALIZE_STATS_MODE": "cudnnBnFinalizeStatsMode_t", "REDUCTION_OPERATOR_TYPE": "cudnnReduceTensorOp_t",
    "BEHAVIOR_NOTE": "cudnnBackendBehaviorNote_t", "TENSOR_REORDERING_MODE": "cudnnBackendTensorReordering_t",
    "RESAMPLE_MODE": "cudnnResampleMode_t", "PADDING_MODE": "cudnnPaddingMode_t", "SIGNAL_MODE": "cudnnSignalMode_t",
    "NORM_MODE": "cudnnBackendNormMode_t", "NORM_FWD_PHASE": "cudnnBackendNormFwdPhase_t",
    "RNG_DISTRIBUTION": "cudnnRngDistribution_t", "MOE_GROUPED_MATMUL_MODE": "cudnnMoeGroupedMatmulMode_t",
    "RESHAPE_MODE": "cudnnBackendReshapeMode_t", "OPERATIONGRAPH_MODE": "cudnnBackendOperationGraphMode_t",
    "CUDA_GRAPH_RETENTION": "cudnnCudaGraphRetention_t",
}

_SCALAR_CTYPES = {
    "HANDLE": ctypes.c_void_p, "BOOLEAN": ctypes.c_bool, "INT64": ctypes.c_int64, "FLOAT": ctypes.c_float,
    "DOUBLE": ctypes.c_double, "VOID_PTR": ctypes.c_void_p, "BACKEND_DESCRIPTOR": ctypes.c_void_p,
    "INT32": ctypes.c_int32, "CHAR": ctypes.c_char, "FRACTION": Fraction,
}


def element_ctype(type_name: str):
    """The ctypes type of one element of ``CUDNN_TYPE_<type_name>``."""
    return _SCALAR_CTYPES.get(type_name) or ctypes.c_int


class AttrSpec(NamedTuple):
    """One attribute: its name, element types (``CUDNN_TYPE_`` suffixes, the first the default), count (``'1'``,
    ``'0+'``, ``'1+'``, ``'n'``), nested descriptor type (``'TENSOR'``, ...) where known, owning descriptor type, and
    where the row came from (``header``, ``header+fix``, ``known``, ``rule``)."""
    name: str
    types: tuple[str, ...]
    count: str  # type: ignore[assignment]  # the field shadows tuple.count, as the table names it
    nested: str | None
    owner: str | None
    source: str

    @property
    def is_array(self) -> bool:
        return self.count != "1"


def enum_of(cls: type[_E], value, names: Callable[[str], tuple[str, ...]], unknown: str, bad_value: str,
            wrong_type: str) -> _E:
    """``value`` (a member, a str: the first of ``names(value)`` that is a member, or an int value) as a ``cls``
    member; else the error of the message that fits (formatted with the value or its type's name)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        for name in names(value):
            if name in cls.__members__:
                return cls.__members__[name]
        raise InvalidValueError(unknown.format(value))
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return cls(value)
        except ValueError:
            raise InvalidValueError(bad_value.format(value)) from None
    raise InvalidTypeError(wrong_type.format(type(value).__name__))


def attr_enum(attr) -> capi.cudnnBackendAttributeName_t:
    """``cudnnBackendAttributeName_t`` member for a member, an int or a ``'CUDNN_ATTR_...'`` name."""
    return enum_of(_ANAME, attr, lambda s: (s,), "unknown backend attribute {!r} (expected a CUDNN_ATTR_* name)",
                   "unknown backend attribute value {}",
                   "attribute must be a cudnnBackendAttributeName_t, its name or value, not {}")


def attr_type_enum(type_name: str) -> capi.cudnnBackendAttributeType_t:
    return _ATYPE.__members__["CUDNN_TYPE_" + type_name]


def attr_spec(attr) -> AttrSpec | None:
    """The table's row for an attribute, or None where neither the header nor our table says its type."""
    name = attr_enum(attr).name
    row = TABLE.get(name)
    if row is None:
        return None
    types, count, nested, source = row
    return AttrSpec(name, types, count, nested, OWNER.get(name), source)


def enum_class(type_name: str) -> type[enum.IntEnum] | None:
    tn = ENUM_TYPES.get(type_name)
    return getattr(capi, tn, None) if tn else None


def type_name_of(attr_type) -> str:
    """``'INT64'`` for ``CUDNN_TYPE_INT64`` (member, int or name with or without the prefix)."""
    return enum_member(_ATYPE, attr_type, "CUDNN_TYPE_", "attr_type").name[len("CUDNN_TYPE_"):]


def _enum_value(cls, type_name: str, value, attr: str) -> int:
    if isinstance(value, enum.IntEnum):
        if cls is not None and not isinstance(value, cls):
            raise InvalidTypeError(f"{attr} takes {cls.__name__} values, got {type(value).__name__}.{value.name}")
        return int(value)
    if isinstance(value, str) and cls is not None:
        for cand in (value, value.upper()):
            if cand in cls.__members__:
                return int(cls[cand])
        hits = [m for m in cls.__members__ if m.endswith("_" + value.upper())]
        if len(hits) == 1:
            return int(cls[hits[0]])
        raise InvalidValueError(f"{attr}: {value!r} is not a {cls.__name__} member")
    if isinstance(value, int) and not isinstance(value, bool):
        if cls is not None and value not in cls._value2member_map_:  # 9999 would reach cuDNN as a data type
            raise InvalidValueError(f"{attr}: {value} is not a {cls.__name__} value (one of "
                                    f"{sorted(int(m) for m in cls)})")
        if not -2 ** 31 <= value < 2 ** 31:
            raise InvalidValueError(f"{attr}: {value} does not fit a C enum (32 bits)")
        return value
    raise InvalidTypeError(f"{attr} takes {cls.__name__ if cls else type_name} values, got {type(value).__name__}")


def to_c_array(spec_name: str, type_name: str, values: list, keep: list):
    """A ctypes array of ``values`` converted to ``CUDNN_TYPE_<type_name>`` elements; ``keep`` collects the objects
    the C side will reference (nested descriptors) for the caller to hold."""
    ct = element_ctype(type_name)
    out: list = []
    for v in values:
        if type_name in ("INT64", "INT32"):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise InvalidTypeError(f"{spec_name} takes integers (CUDNN_TYPE_{type_name}), got {type(v).__name__} "
                                       f"{v!r}")
            bits = 63 if type_name == "INT64" else 31
            if not -2 ** bits <= int(v) < 2 ** bits:
                raise InvalidValueError(f"{spec_name}: {v} does not fit CUDNN_TYPE_{type_name}")
            out.append(int(v))
        elif type_name in ("FLOAT", "DOUBLE"):
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise InvalidTypeError(f"{spec_name} takes real numbers (CUDNN_TYPE_{type_name}), got "
                                       f"{type(v).__name__}")
            if v != v:
                raise InvalidValueError(f"{spec_name}: NaN is not a valid value")
            out.append(float(v))
        elif type_name == "BOOLEAN":
            if not isinstance(v, (bool, np.bool_)):
                raise InvalidTypeError(f"{spec_name} takes True/False (CUDNN_TYPE_BOOLEAN), got {type(v).__name__} "
                                       f"{v!r}")
            out.append(bool(v))
        elif type_name == "BACKEND_DESCRIPTOR":
            ptr = getattr(v, "ptr", None)
            if not isinstance(ptr, capi.cudnnBackendDescriptor_t) or not ptr:
                raise InvalidTypeError(f"{spec_name} takes open cudnn_py.graph.BackendDescriptor objects, got "
                                f"{type(v).__name__} (a raw cudnnBackendDescriptor_t cannot be checked: set it "
                                f"with capi.cudnnBackendSetAttribute)")
            keep.append(v)
            out.append(ptr.value)
        elif type_name == "HANDLE":
            ptr = getattr(v, "ptr", v)
            if not isinstance(ptr, capi.cudnnHandle_t):
                raise InvalidTypeError(f"{spec_name} takes a cudnn_py.Handle or cudnnHandle_t, got {type(v).__name__}")
            keep.append(v)
            out.append(ptr.value)
        elif type_name == "VOID_PTR":
            ptr = v if v is None or isinstance(v, int) else getattr(v, "ptr", v)
            if ptr is not None and (isinstance(ptr, bool) or not isinstance(ptr, int)):
                raise InvalidTypeError(f"{spec_name} takes device pointers (int, None or an object with .ptr), "
                                f"got {type(v).__name__}")
            out.append(ptr)
        elif type_name == "FRACTION":
            if isinstance(v, numbers.Integral) and not isinstance(v, bool):
                out.append(Fraction(int(v), 1))
            elif hasattr(v, "numerator") and hasattr(v, "denominator"):
                out.append(Fraction(int(v.numerator), int(v.denominator)))
            else:
                raise InvalidTypeError(f"{spec_name} takes fractions (int or fractions.Fraction), got "
                                       f"{type(v).__name__}")
        else:
            out.append(_enum_value(enum_class(type_name), type_name, v, spec_name))
    return (ct * max(len(out), 1))(*out)


def from_c_array(type_name: str, arr, n: int) -> list:
    """Python values of the first ``n`` elements of a ctypes array of ``CUDNN_TYPE_<type_name>``."""
    vals = list(arr[:n])
    if type_name == "FRACTION":
        return [fractions.Fraction(f.numerator, f.denominator) for f in vals]
    cls = enum_class(type_name)
    return vals if cls is None else [cls(v) if v in cls._value2member_map_ else v for v in vals]
