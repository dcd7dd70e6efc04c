"""Typed backend descriptors: one object per ``cudnnBackendDescriptor_t``, attributes by name with checked types.

::

    t = BackendDescriptor("TENSOR", data_type=capi.CUDNN_DATA_FLOAT, dimensions=[1, 8, 8, 8],
                          strides=[512, 64, 8, 1], unique_id=1, byte_alignment=16)
    t.finalize()
    t.get("dimensions")           # [1, 8, 8, 8]

Attribute names may be given in full (``"CUDNN_ATTR_TENSOR_DIMENSIONS"``), as the enum member, or relative to the
descriptor's prefix (``"dimensions"``). Element types and counts come from :mod:`cudnn_py.graph.attributes`; an
attribute it does not cover needs ``attr_type=``. A :class:`~cudnn_py.errors.CudnnError` holds cuDNN's last-error text.
"""
from __future__ import annotations

import ctypes
import math
import weakref

from cudnn_py.clib import binding as _binding
from cudnn_py import capi
from cudnn_py.errors import ClosedError, InvalidStateError, InvalidTypeError, InvalidValueError

from . import attributes as A

__all__ = ["BackendDescriptor", "descriptor_type", "destroy_descriptor"]

_C_CREATE = capi.cudnnBackendCreateDescriptor
_C_DESTROY = capi.cudnnBackendDestroyDescriptor
_C_SET = capi.cudnnBackendSetAttribute
_C_GET = capi.cudnnBackendGetAttribute
_C_FINALIZE = capi.cudnnBackendFinalize

#: descriptor types whose attributes use a prefix other than the type's own name
_PREFIXES = {
    "OPERATION_CONVOLUTION_BACKWARD_DATA": ("OPERATION_CONVOLUTION_BWD_DATA",),
    "OPERATION_CONVOLUTION_BACKWARD_FILTER": ("OPERATION_CONVOLUTION_BWD_FILTER",),
    "OPERATION_GEN_STATS": ("OPERATION_GENSTATS",),
    "OPERATION_BN_FINALIZE_STATISTICS": ("OPERATION_BN_FINALIZE",),
    "OPERATION_NORM_FORWARD": ("OPERATION_NORM_FWD",),
    "OPERATION_NORM_BACKWARD": ("OPERATION_NORM_BWD",),
}


def descriptor_type(t) -> capi.cudnnBackendDescriptorType_t:
    """The ``cudnnBackendDescriptorType_t`` for a member, an int, ``'CUDNN_BACKEND_TENSOR_DESCRIPTOR'`` or
    ``'TENSOR'``."""
    return A.enum_of(capi.cudnnBackendDescriptorType_t, t, lambda s: (s, f"CUDNN_BACKEND_{s.upper()}_DESCRIPTOR"),
                     "unknown backend descriptor type {!r}",
                     "descriptor type {} is not a cudnnBackendDescriptorType_t value",
                     "descriptor type must be a cudnnBackendDescriptorType_t or its name, not {}")


def destroy_descriptor(ptr: capi.cudnnBackendDescriptor_t) -> None:
    """Destroy a backend descriptor registered with :func:`cudnn_py.clib.binding.own`; whoever still holds the
    pointer object then passes cuDNN NULL, never a freed descriptor."""
    if ptr.value:
        _binding.disown(ptr)
        try:
            _C_DESTROY(ptr)
        except Exception:  # noqa: BLE001 - never raise from teardown (at exit the library may be unloading)
            pass
        ptr.value = None


class BackendDescriptor:
    """A cuDNN backend descriptor of one ``cudnnBackendDescriptorType_t``: set/get attributes, finalize, close.
    One it created is destroyed by :meth:`close` or the garbage collector; one wrapping a given ``_ptr`` never."""

    __slots__ = ("type", "ptr", "finalized", "_refs", "_finalizer", "_holders", "__weakref__")

    def __init__(self, desc_type, _ptr: capi.cudnnBackendDescriptor_t | None = None, **attrs):
        self.type = descriptor_type(desc_type)
        self.finalized = False
        self._refs: dict = {}
        self._finalizer = None
        self._holders: weakref.WeakSet = weakref.WeakSet()  # the descriptors this one was set into
        if _ptr is None:
            _ptr = capi.cudnnBackendDescriptor_t()
            _C_CREATE(self.type, ctypes.byref(_ptr))
            self._finalizer = weakref.finalize(self, destroy_descriptor, _ptr)
            _binding.own(_ptr, "graph.BackendDescriptor")
        self.ptr = _ptr
        for k, v in attrs.items():
            self.set(k, v)

    @property
    def short_type(self) -> str:
        """``'TENSOR'`` for ``CUDNN_BACKEND_TENSOR_DESCRIPTOR``."""
        return self.type.name[len("CUDNN_BACKEND_"):-len("_DESCRIPTOR")]

    def resolve(self, attr) -> capi.cudnnBackendAttributeName_t:
        """The attribute enum for a full name, member, int or a name relative to this descriptor's prefix."""
        if isinstance(attr, str) and not attr.startswith("CUDNN_ATTR_"):
            short = self.short_type
            for prefix in _PREFIXES.get(short, ()) + (short,):
                full = f"CUDNN_ATTR_{prefix}_{attr.upper()}"
                if full in capi.cudnnBackendAttributeName_t.__members__:
                    return capi.cudnnBackendAttributeName_t[full]
            raise InvalidValueError(f"{short} descriptor has no attribute {attr!r} (tried CUDNN_ATTR_{short}_"
                                    f"{attr.upper()})")
        return A.attr_enum(attr)

    def _spec_and_type(self, attr, attr_type, value=None) -> tuple[
            capi.cudnnBackendAttributeName_t, A.AttrSpec | None, str]:
        name = self.resolve(attr)
        spec = A.attr_spec(name)
        if attr_type is not None:
            tn = A.type_name_of(attr_type)
            if spec is not None and tn not in spec.types:
                raise InvalidTypeError(f"{name.name} takes {' or '.join('CUDNN_TYPE_' + t for t in spec.types)}, "
                                f"not CUDNN_TYPE_{tn}")
            return name, spec, tn
        if spec is None:
            raise InvalidTypeError(f"{name.name}: the attribute table does not know its element type; "
                            f"pass attr_type= (a cudnnBackendAttributeType_t)")
        tn = spec.types[0]
        if value is not None and len(spec.types) > 1:  # INT64 or FRACTION: pick by the value
            first = value[0] if isinstance(value, (list, tuple)) and value else value
            if "FRACTION" in spec.types and hasattr(first, "denominator") and not isinstance(first, int):
                tn = "FRACTION"
        return name, spec, tn

    def set(self, attr, value, attr_type=None) -> "BackendDescriptor":
        """Set an attribute. Scalars for one-element attributes, sequences for arrays; returns self."""
        self._check_open()
        name, spec, tn = self._spec_and_type(attr, attr_type, value)
        if self.finalized:
            raise InvalidStateError(f"{self.short_type} descriptor is finalized; {name.name} can no longer be set")
        if spec is not None and spec.nested and tn == "BACKEND_DESCRIPTOR":
            vals = value if isinstance(value, (list, tuple)) else [value]
            for v in vals:
                if isinstance(v, BackendDescriptor):
                    if v.closed:
                        raise ClosedError(f"{name.name}: the {v.short_type} descriptor is closed")
                    if v.short_type != spec.nested:
                        raise InvalidTypeError(f"{name.name} takes a {spec.nested} descriptor, got a {v.short_type} "
                                               f"descriptor")
                    if not v.finalized:
                        raise InvalidValueError(f"{name.name}: the {v.short_type} descriptor must be finalized before "
                                                f"it is set")
        if tn == "CHAR":
            if not isinstance(value, (str, bytes)):
                raise InvalidTypeError(f"{name.name} takes a str or bytes value, got {type(value).__name__}")
            data = value.encode() if isinstance(value, str) else value
            _C_SET(self.ptr, name, A.attr_type_enum(tn), len(data) + 1, ctypes.create_string_buffer(data))
            return self
        if isinstance(value, (list, tuple)):
            vals = list(value)
            if spec is not None and spec.count == "1" and len(vals) != 1:
                raise InvalidValueError(f"{name.name} takes one element, got {len(vals)}")
        else:
            if spec is not None and spec.count == "n" and tn == "INT64":
                raise InvalidTypeError(f"{name.name} takes a sequence of integers, got {type(value).__name__}")
            vals = [value]
        if spec is not None and spec.count == "1+" and not vals:
            raise InvalidValueError(f"{name.name} takes at least one element")
        keep: list = []
        arr = A.to_c_array(name.name, tn, vals, keep)
        if name == capi.CUDNN_ATTR_TENSOR_DIMENSIONS and math.prod(int(v) for v in vals) >= 2 ** 63:
            # each fits an int64 (checked above); every size and offset cuDNN computes from them is one too
            raise InvalidValueError(f"{name.name} {vals} make {math.prod(int(v) for v in vals)} elements; a tensor "
                                    f"holds fewer than 2**63")
        _C_SET(self.ptr, name, A.attr_type_enum(tn), len(vals), arr)
        self._refs[int(name)] = keep
        for v in keep:
            if isinstance(v, BackendDescriptor):
                v._holders.add(self)
        return self

    def get(self, attr, attr_type=None, count: int | None = None):
        """Read an attribute: a scalar for one-element attributes, a list for arrays (nested descriptors as
        :class:`BackendDescriptor` objects). ``count`` caps how many elements are read (default: all)."""
        self._check_open()
        name, spec, tn = self._spec_and_type(attr, attr_type)
        atype = A.attr_type_enum(tn)
        n_out = ctypes.c_int64(0)
        array = spec is None or spec.is_array
        if count is None:
            if array:
                _C_GET(self.ptr, name, atype, 0, ctypes.byref(n_out), None)
                count = n_out.value
            else:
                count = 1
        if tn == "CHAR":
            buf = ctypes.create_string_buffer(max(count, 1))
            _C_GET(self.ptr, name, atype, count, ctypes.byref(n_out), buf)
            return buf.value.decode()
        if tn == "BACKEND_DESCRIPTOR":
            if spec is None or spec.nested is None:
                raise InvalidTypeError(f"{name.name}: reading nested descriptors needs their type, which the table "
                                       f"lacks")
            kids = [BackendDescriptor(spec.nested) for _ in range(count)]
            arr = (ctypes.c_void_p * max(count, 1))(*[k.ptr.value for k in kids])
            _C_GET(self.ptr, name, atype, count, ctypes.byref(n_out), arr)
            for k in kids[n_out.value:]:
                k.close()
            kids = kids[:n_out.value]
            for k in kids:
                k.finalized = True
            return kids if array else kids[0]
        arr = (A.element_ctype(tn) * max(count, 1))()
        _C_GET(self.ptr, name, atype, count, ctypes.byref(n_out), arr)
        vals = A.from_c_array(tn, arr, min(n_out.value, count))
        return vals if array else vals[0]

    def finalize(self) -> "BackendDescriptor":
        """``cudnnBackendFinalize``; returns self."""
        self._check_open()
        if not self.finalized:
            _C_FINALIZE(self.ptr)
            self.finalized = True
        return self

    def _check_open(self):
        if self.ptr is None:
            raise ClosedError(f"{self.short_type} backend descriptor is closed")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` destroyed the descriptor."""
        return self.ptr is None

    def close(self) -> None:
        """Destroy the descriptor (idempotent); holders of its pointer object then pass cuDNN NULL. One still set in
        an open descriptor is only marked closed: its C descriptor goes when the last of those lets it go."""
        self.ptr = None  # type: ignore[assignment]  # closed reads as None; holders of the pointer pass NULL
        if self._finalizer is not None and not any(not h.closed for h in self._holders):
            self._finalizer()
        self._refs = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.ptr is None else ("finalized" if self.finalized else "open")
        return f"<BackendDescriptor {self.short_type} {state}>"
