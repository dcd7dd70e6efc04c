"""Lazy ctypes binding for the generated C layer: symbols resolve on first call, arguments are checked before C
sees them (what each kind of parameter takes: docs/c_layer_safety.md; a wrong one raises :class:`CArgumentError`
naming the function and the parameter; ``fn.raw`` skips the checks), statuses become exceptions. A function the
headers mark ``CUDNN_DEPRECATED``, called from outside the package, warns once. ``CUDNN_PY_LOG`` and
``CUDNN_PY_NVTX`` are read when the first function is bound.

Over 700 lines, as one module: a bound function's argument checks, status check, logging and deprecation warning are
compiled together into one checked call per C function, from the parameter kinds defined here.
"""
from __future__ import annotations

import ctypes
import enum
import functools
import keyword
import operator
import os
import re
import reprlib
import sys
import threading
import warnings

from cudnn_py.clib import loader as _loader, recording
from cudnn_py.clib.status import status_error
from cudnn_py.errors import CArgumentError, CudnnPyError, FunctionNotAvailableError, InvalidStateError

def _errcheck(name: str, created: int | None = None):
    """The ctypes ``errcheck`` of ``name``: a failing status raises; a create's new handle (``created``) is recorded."""
    def check(status, func, args):
        if status:
            raise status_error(name, status)
        return status

    def check_create(status, func, args):
        check(status, func, args)
        try:
            address = args[created]._obj.value  # byref(handle), the usual form
        except AttributeError:
            address = _written_handle(args[created])
        if address:
            _RECORD[address] = True
        return status
    return check if created is None else check_create


# ------------------------------------------------------------------------------------------ parameter types

_GENERIC_FROM_PARAM = type(ctypes.c_void_p).__dict__["from_param"]  # ctypes' conversion for simple types
_ADDRESS_MAX = (1 << 8 * ctypes.sizeof(ctypes.c_void_p)) - 1
# the lowest address Linux maps by default (vm.mmap_min_addr): a smaller nonzero int is never an address
_ADDRESS_MIN = 65536


class Handle(ctypes.c_void_p):
    """Base of cuDNN's opaque handle types in ``cudnn_py.capi``; ``Type(address)`` casts an int address to one."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # ctypes' generic conversion (an instance, None or an int; never str, bytes or another handle type) in
        # place of c_void_p's, which takes str and bytes too: what fn.raw and other ctypes prototypes get
        cls.from_param = _GENERIC_FROM_PARAM.__get__(cls)


class CudaHandle(Handle):
    """Base of the CUDA handle types cuDNN takes (``cudaStream_t``, ``cudaGraph_t``): also an int handle."""


class const_void_p(ctypes.c_void_p):
    """The type of a ``const void *`` parameter (passed as ``void *``; marks that C only reads it)."""


def _int_range(ctype) -> tuple[int, int]:
    bits = 8 * ctypes.sizeof(ctype)
    return (-(1 << bits - 1), (1 << bits - 1) - 1) if ctype(-1).value < 0 else (0, (1 << bits) - 1)


#: each C integer type -> its (lowest, highest) value: what an int argument of that type may hold
INT_RANGES = {t: _int_range(t) for t in (getattr(ctypes, f"c_{n}") for n in (
    "byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong", "longlong", "ulonglong", "int8", "uint8",
    "int16", "uint16", "int32", "uint32", "int64", "uint64", "size_t", "ssize_t"))}
_C_INT = INT_RANGES[ctypes.c_int]
_CARG = type(ctypes.byref(ctypes.c_int()))
_CARG_ADDRESS = re.compile(r"<cparam 'P' \(0x([0-9a-fA-F]+)\)>")


def _show(value) -> str:
    """A value for an error message: its type and a short repr."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _ctype_name(ctype) -> str:
    return getattr(ctype, "__name__", str(ctype))


def _is_sequence(obj) -> bool:
    return isinstance(obj, (list, tuple, range)) or (hasattr(obj, "__array__") and hasattr(obj, "__len__")
                                                      and not isinstance(obj, ctypes.Array))


def _element(target):
    """A function converting one Python value to an element of a ``target`` array (for sequences)."""
    if target in INT_RANGES:
        return functools.partial(_integer, target)
    if target in (ctypes.c_float, ctypes.c_double):
        def real(v):
            if isinstance(v, (str, bytes, bool)) or not hasattr(v, "__float__"):
                raise TypeError(f"{_show(v)} is not a real number")
            return float(v)
        return real
    if isinstance(target, type) and issubclass(target, Handle):
        return functools.partial(_handle, target)
    if target in (ctypes.c_void_p, const_void_p):
        return _address_element

    def same(v):
        if not isinstance(v, target):
            raise TypeError(f"{_show(v)} is not a {_ctype_name(target)}")
        return v
    return same


def _address_element(v):
    """An element of a ``void *`` array: an int address, None, or a handle / object with one (its address)."""
    if v is None or (type(v) is int and 0 <= v <= _ADDRESS_MAX):
        return v
    h = _handle_of(v)
    if isinstance(h, ctypes.c_void_p):
        return h.value
    raise TypeError(f"{_show(v)} is not an address or a handle")


def _to_array(target, seq):
    convert = _element(target)
    values = []
    for i, v in enumerate(seq):
        try:
            values.append(convert(v))
        except (TypeError, ValueError) as e:
            raise TypeError(f"element {i}: {e}") from None
    return (target * len(values))(*values)


@functools.cache
def pointer(target, const: bool = False):
    """The parameter type of a ``target *``: ``POINTER(target)`` (so ``byref(c_float())`` is refused for ``int *``)
    that also takes an int address and, with ``const`` (C only reads it), a sequence, converted."""
    base = ctypes.POINTER(target)
    convert = base.from_param

    def from_param(obj):
        if type(obj) is int:
            if _ADDRESS_MIN <= obj <= _ADDRESS_MAX or obj == 0:
                return ctypes.c_void_p(obj)
            raise TypeError(f"got the int {obj}, which is not an address: pass a ctypes array, byref() of a ctypes "
                            f"value{', a sequence' if const else ''} or an address")
        try:
            return convert(obj)
        except TypeError:
            pass
        if type(obj) is _CARG and getattr(getattr(obj, "_obj", None), "_type_", None) is target:
            return obj  # byref(array of target[, offset]): ctypes takes only byref(target) here
        if _is_sequence(obj):
            if const:
                return _to_array(target, obj)
            raise TypeError(f"got a {type(obj).__name__}: C writes through this pointer, so pass a ctypes array "
                            f"({_ctype_name(target)} * n)() (a sequence would not receive what C writes)")
        raise TypeError(f"expected a ctypes array or pointer of {_ctype_name(target)}, byref() of one, an int "
                        f"address{', a sequence' if const else ''} or None")

    return type(base.__name__, (base,), {"from_param": staticmethod(from_param), "target": target, "const": const})


def array(target):
    """The parameter type of a ``const target *`` (C reads it): :func:`pointer` with ``const``."""
    return pointer(target, True)


def _handle_of(obj):
    """What ``obj`` stands for as a C handle: its ``_as_parameter_`` or ``ptr`` (None when it has neither)."""
    value = getattr(obj, "_as_parameter_", None)
    return value if value is not None else getattr(obj, "ptr", None)


def _handle(cls, value):
    """``value`` as a ``cls`` parameter (docs/c_layer_safety.md); TypeError says what was wrong."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, int) and not isinstance(value, (bool, enum.Enum)):
        if value == 0:
            return None
        if issubclass(cls, CudaHandle) and 0 <= value <= _ADDRESS_MAX:
            return value
        raise TypeError(f"got the int {value:#x}: an address becomes a {cls.__name__} only by an explicit cast, "
                        f"{cls.__name__}(address), by which you vouch for it (None is NULL)")
    if isinstance(value, Handle):
        raise TypeError(f"got a {type(value).__name__} where a {cls.__name__} belongs")
    if not isinstance(value, (str, bytes, bytearray, ctypes._SimpleCData, ctypes.Array, _CARG)):
        inner = _handle_of(value)  # the Pythonic objects: .ptr (ClosedError when closed passes through)
        if isinstance(inner, cls):
            return inner
        if inner is not None:
            raise TypeError(f"got a {type(value).__name__} whose handle is a {type(inner).__name__}, not a "
                            f"{cls.__name__}")
    raise TypeError(f"a {cls.__name__} (or None for NULL) expected, got {_show(value)}")


def _enum(cls, value):
    """``value`` as a ``cls`` parameter: a member of ``cls`` or a plain int in C int range."""
    if isinstance(value, enum.Enum):
        if isinstance(value, cls):
            return value
        from cudnn_py.removed import REMOVED_ENUMS
        removed = REMOVED_ENUMS.get(type(value))
        note = f", an enum removed in cuDNN {removed}" if removed else ""
        raise TypeError(f"got {value.name}, a member of {type(value).__name__}{note}; this parameter takes a "
                        f"{cls.__name__} (a member, or a plain int)")
    return _integer(ctypes.c_int, value, f"a {cls.__name__} member or an int")


def _integer(ctype, value, what: str = ""):
    """``value`` as a C integer of ``ctype``, in its range (never wrapped); ``what``: what the message expects."""
    try:
        if isinstance(value, (float, str, bytes)):
            raise TypeError
        i = operator.index(value)
    except TypeError:
        raise TypeError(f"{what or f'an int ({_ctype_name(ctype)})'} expected, got {_show(value)}") from None
    lo, hi = INT_RANGES[ctype]
    if not lo <= i <= hi:
        raise ValueError(f"{i} is outside the range of {_ctype_name(ctype)} ({lo} to {hi})")
    return i


def _scalar(ctype, value):
    """``value`` as an integer parameter of ``ctype`` (a ctypes instance of that type also passes)."""
    return value if isinstance(value, ctype) else _integer(ctype, value)


def _void(const, value):
    """``value`` as a ``void *`` parameter (ctypes' own conversion does the rest)."""
    if isinstance(value, (str, bool)) or (isinstance(value, bytes) and not const):
        raise TypeError(f"an address (int, ctypes object, byref() or None) expected, got {_show(value)}")
    if isinstance(value, int) and value and not _ADDRESS_MIN <= value <= _ADDRESS_MAX:
        raise TypeError(f"got the int {value}, which is not an address (to pass a value, pass byref() of a "
                        f"ctypes value)")
    if _is_sequence(value):
        raise TypeError(f"got {_show(value)}: a void * parameter takes an address; pass a ctypes array")
    return value


def _attribute_ctype(attribute_type):
    """The element ctype of a ``cudnnBackendAttributeType_t`` value (None for a value cuDNN does not define)."""
    from cudnn_py.capi.graph import cudnnBackendAttributeType_t as T, cudnnFraction_t
    try:
        name = T(int(attribute_type)).name[len("CUDNN_TYPE_"):]
    except (TypeError, ValueError):
        return None
    return {"HANDLE": ctypes.c_void_p, "VOID_PTR": ctypes.c_void_p, "BACKEND_DESCRIPTOR": ctypes.c_void_p,
            "BOOLEAN": ctypes.c_bool, "INT64": ctypes.c_int64, "INT32": ctypes.c_int32, "FLOAT": ctypes.c_float,
            "DOUBLE": ctypes.c_double, "CHAR": ctypes.c_char, "FRACTION": cudnnFraction_t}.get(name, ctypes.c_int)


def _carg_address(obj) -> int | None:
    """The address a ``byref(x[, offset])`` passes (None where its repr does not say)."""
    m = _CARG_ADDRESS.fullmatch(repr(obj))
    return int(m.group(1), 16) if m else None


def _capacity(obj) -> int | None:
    """How many bytes ``obj`` gives C to read or write (None when it cannot be known: an address, a pointer)."""
    if isinstance(obj, ctypes.Array):
        return ctypes.sizeof(obj)
    if type(obj) is _CARG:  # byref(x[, offset]): x's size less the offset
        target, address = getattr(obj, "_obj", None), _carg_address(obj)
        if target is None or address is None:
            return None
        return ctypes.sizeof(target) - (address - ctypes.addressof(target))
    if isinstance(obj, (ctypes.Structure, ctypes._SimpleCData)) and not isinstance(obj, ctypes.c_void_p):
        return ctypes.sizeof(obj)
    if isinstance(obj, bytes):
        return len(obj)
    return None


def _kind(argtype):
    """How the checked call tests a parameter of ``argtype`` before ctypes (None: ctypes' conversion suffices)."""
    if isinstance(argtype, type):
        if issubclass(argtype, Handle):
            return "handle"
        if argtype in INT_RANGES and ctypes.sizeof(argtype) > 4:  # 32-bit ones: _ctypes_argtype
            return "int"
        if argtype is const_void_p or argtype is ctypes.c_void_p:
            return "void"
    return None


@functools.cache
def _ctypes_argtype(argtype):
    """What the ctypes function object gets for a parameter: an enum or a C int of 32 bits or fewer passes a member or
    an in-range int as itself (cheaper than ``c_int``, which wraps silently) and converts or refuses the rest; a
    function pointer also takes None; ``const void *`` is ``void *``; the rest as declared."""
    if isinstance(argtype, type) and issubclass(argtype, enum.IntEnum):
        lo, hi = _C_INT

        def from_param(value):
            t = type(value)
            if (t is argtype or t is int) and lo <= value <= hi:
                return value
            return _enum(argtype, value)
    elif argtype in INT_RANGES and ctypes.sizeof(argtype) <= 4:
        lo, hi = INT_RANGES[argtype]

        def from_param(value):
            if type(value) is int and lo <= value <= hi:
                return value
            return _scalar(argtype, value)
    elif isinstance(argtype, type) and issubclass(argtype, ctypes._CFuncPtr):
        convert = argtype.from_param

        def from_param(value):
            return None if value is None else convert(value)
    else:
        return ctypes.c_void_p if argtype is const_void_p else argtype
    return type(f"{_ctype_name(argtype)}_param", (), {"from_param": staticmethod(from_param)})


def _declarations(prototype: str) -> list[str]:
    """The parameter declarations of a one-line C prototype."""
    inner = prototype[prototype.index("(") + 1:prototype.rindex(")")].strip()
    return [] if inner in ("", "void") else [d.strip() for d in inner.split(",")]


def _python_name(declaration: str, i: int) -> str:
    names = re.findall(r"[A-Za-z_]\w*", declaration)
    name = names[-1] if len(names) > 1 else f"arg{i}"
    return name + "_" if keyword.iskeyword(name) else name


# ------------------------------------------------------------------------------------------ functions

_FUNCTIONS: list[CFunction] = []  # every declared function (NVTX toggling rebinds the bound ones)
_range_wrapper = None  # cudnn_py.clib.nvtx's wrapper while NVTX ranges are on
# taken by a function's first call while it binds (and by set_range_wrapper), never by a bound call
_BIND_LOCK = threading.RLock()  # reentrant: a finalizer may make a first call while its thread binds

#: address of a handle or descriptor -> the Pythonic object type that owns it (it destroys it itself, once)
_OWNED: dict[int, str] = {}
# Every address a capi create function returned or an owner registered (own()) -> True while live, False once a capi
# destroy destroyed it (docs/c_layer_safety.md). A destroy's check-and-claim runs under _RECORD_LOCK, so of threads
# destroying one address exactly one reaches C; a create is one dict store: no one else holds a new address yet.
_RECORD: dict[int, bool] = {}
_RECORD_LOCK = threading.Lock()
#: the C functions that create a handle or descriptor (written through a pointer parameter) and that destroy one
_CREATORS = re.compile(r"cudnnCreate\w*|cudnnBackendCreateDescriptor")
_DESTROYERS = re.compile(r"cudnnDestroy\w*|cudnnBackendDestroyDescriptor")


def own(ptr, owner: str) -> None:
    """Record that a Pythonic ``owner`` (its type name) destroys the live ``ptr``: a capi destroy then refuses it."""
    address = ptr.value
    if address:
        _OWNED[address] = owner
        _RECORD[address] = True


def disown(ptr) -> None:
    """Forget ``ptr``'s owner: called by the owner right before it destroys it."""
    if ptr.value:
        _OWNED.pop(ptr.value, None)


def _written_handle(arg) -> int | None:
    """The handle a create function wrote through its pointer argument ``arg`` (None where it cannot be read)."""
    if type(arg) is _CARG:  # byref(array[, offset]) (byref(handle) is read by the caller)
        address = _carg_address(arg)
    elif isinstance(arg, ctypes._Pointer):
        address = ctypes.cast(arg, ctypes.c_void_p).value
    elif isinstance(arg, ctypes.Array):
        address = ctypes.addressof(arg)
    elif type(arg) is int:
        address = arg
    else:
        return None
    return ctypes.c_void_p.from_address(address).value if address else None


def _guard_destroy(name: str, inner):
    """``inner`` (a destroy function) refusing, before C, an address a Pythonic object owns or that was destroyed
    already (``_RECORD``); once destroyed, the typed object passed reads NULL and is marked destroyed."""
    def destroy(*args):
        ptr = args[0] if args else None
        typed = ptr if isinstance(ptr, Handle) else _handle_of(ptr) if ptr is not None else None
        if not isinstance(typed, Handle):
            return inner(*args)  # not a handle: the call refuses it
        address = typed.value
        if address is None:
            if getattr(typed, _DESTROYED, False):
                raise InvalidStateError(f"{name}: this {type(typed).__name__} was destroyed already (a second "
                                        f"destroy would abort the process inside cuDNN); create it again before "
                                        f"reusing it")
            return inner(*args)  # NULL, never destroyed here: cuDNN's to judge
        owner = _OWNED.get(address)
        if owner is not None:
            raise CArgumentError(f"{name}: this one belongs to a cudnn_py {owner}, which destroys it when it is "
                                 f"closed or collected; call its close() instead (a second destroy would abort the "
                                 f"process inside cuDNN)")
        _RECORD_LOCK.acquire()  # (not `with`: a third of the cost)
        try:
            live = _RECORD.get(address)
            if live:
                _RECORD[address] = False  # claimed: no other destroy of this address reaches C
        finally:
            _RECORD_LOCK.release()
        if live is False:
            raise InvalidStateError(f"{name}: the {type(typed).__name__} {address:#x} was destroyed already (a "
                                    f"second destroy would abort the process inside cuDNN, whatever object carries "
                                    f"the address); create a new one")
        try:
            result = inner(*args)
        except BaseException:
            if live:  # C refused it: still live
                with _RECORD_LOCK:
                    _RECORD[address] = True
            raise
        setattr(typed, _DESTROYED, True)  # before the NULL: a thread that reads NULL sees it destroyed
        typed.value = None
        return result
    destroy.__name__ = destroy.__qualname__ = name
    return destroy


_EXECUTES = frozenset({"cudnnBackendExecute", "cudnnFusedOpsExecute"})


def _guard_queue(name: str, inner):
    """``inner`` (a C function queuing device work) spoiling this thread's recording when called outside a sink."""
    state = recording.state

    def call(*args):
        if state.rec is not None and not state.sink:
            recording.spoil(f"{name} queued device work outside the recording's sinks")
        return inner(*args)
    call.__name__ = call.__qualname__ = name
    return call


#: the attribute that marks a typed handle or descriptor object destroyed through its capi destroy function
_DESTROYED = "_cudnn_py_destroyed"
_started = False


def set_range_wrapper(wrapper) -> None:
    """Wrap every C call from now on in ``wrapper(name, call)`` (None: no wrapper), for :mod:`cudnn_py.clib.nvtx`; a
    :attr:`CFunction.raw` kept from before is not wrapped."""
    global _range_wrapper
    with _BIND_LOCK:  # a function bound meanwhile routes through the new wrapper too
        _range_wrapper = wrapper
        for f in _FUNCTIONS:
            if f._fn is not None:
                f._route()


def _startup() -> None:
    """Once, when the first function is bound: the environment's CUDNN_PY_LOG and CUDNN_PY_NVTX."""
    global _started
    if _started:
        return
    _started = True
    if os.environ.get("CUDNN_PY_LOG"):
        from cudnn_py.clib import log
        log.enable_from_environment()
    if os.environ.get("CUDNN_PY_NVTX"):
        from cudnn_py.clib import nvtx
        nvtx.enable_from_environment()


def _outside(frame) -> bool:
    """Whether ``frame`` runs code of a module outside the cudnn_py package (the user's)."""
    name = frame.f_globals.get("__name__") or ""
    return not (name == "cudnn_py" or name.startswith("cudnn_py."))


class CFunction:
    """One C function of cuDNN, bound on first call. Call it with the C arguments (checked as the module says)."""

    __slots__ = ("__name__", "__qualname__", "__dict__", "prototype", "deprecated", "checked", "lengths", "nonnull",
                 "_restype", "_argtypes", "_call", "_inner", "_fn", "_checked", "_converters", "_length_checks",
                 "_nonnull", "_warned")

    def __init__(self, name, restype, argtypes, prototype, doc="", checked=True, deprecated="", lengths=(), nonnull=()):
        self.__name__ = self.__qualname__ = name
        self.prototype = prototype
        self.deprecated = deprecated
        self.checked = checked
        self.lengths = lengths
        self.nonnull = nonnull
        self._restype, self._argtypes = restype, argtypes
        self.__doc__ = "\n\n".join(s for s in (prototype, doc, deprecated and f"Deprecated: {deprecated}") if s)
        self._call = self._first_call
        self._fn = None
        self._warned = False
        _FUNCTIONS.append(self)

    def __call__(self, *args):
        try:
            return self._call(*args)
        except (ctypes.ArgumentError, TypeError) as e:
            if isinstance(e, CudnnPyError):
                raise
            raise self._argument_error(e, args) from None

    def __repr__(self):
        return f"<cuDNN function {self.prototype}>"

    @property
    def params(self) -> tuple[tuple[str, object], ...]:
        """(name, type) of each C parameter: a handle or enum class, a ctypes type, or a :func:`pointer` type."""
        return tuple(zip(self._names(), self._argtypes))

    def _names(self) -> list[str]:
        """The C parameters' names (positional ``argN`` where the prototype cannot be split)."""
        names = [_python_name(d, i) for i, d in enumerate(_declarations(self.prototype))]
        return names if len(names) == len(self._argtypes) else [f"arg{i}" for i in range(len(self._argtypes))]

    @property
    def pointer_params(self) -> tuple[int, ...]:
        """The positions of the ``void *`` parameters (device or host addresses)."""
        return tuple(i for i, a in enumerate(self._argtypes) if _kind(a) == "void")

    @property
    def queues(self) -> bool:
        """Whether a call queues device work: a handle or stream and an address among the parameters (the
        ``cudnnGet...`` queries aside), or a backend or fused-ops execute."""
        kinds = [_kind(a) for a in self._argtypes]
        return self.__name__ in _EXECUTES or (not self.__name__.startswith("cudnnGet") and "void" in kinds and any(
            isinstance(a, type) and a.__name__ in ("cudnnHandle_t", "cudaStream_t") for a in self._argtypes))

    @property
    def available(self) -> bool:
        """Whether the loaded library exports this function."""
        return hasattr(_loader.library().cdll, self.__name__)

    @property
    def raw(self):
        """The bound ctypes function itself (status still checked, ctypes' own argument conversion only): one
        Python frame and the argument checks less, for hot loops. NVTX-wrapped if ranges are on now."""
        self._bind()
        if self.deprecated and not self._warned and _outside(sys._getframe(1)):
            self._warn(3)
        fn = self._fn
        return fn if _range_wrapper is None or fn == self._missing else _range_wrapper(self.__name__, fn)

    # --- binding ------------------------------------------------------------------------------------
    def _bind(self):
        """Bind on the first call, under :data:`_BIND_LOCK` (one thread binds, the others wait for it); ``_fn`` is
        set last, so a thread that sees it set finds ``_inner`` and ``_call`` set too. Bound, no lock is taken."""
        if self._fn is not None:
            return
        lib = _loader.library()
        _startup()
        with _BIND_LOCK:
            if self._fn is not None:
                return
            try:
                fn = lib.cdll._FuncPtr((self.__name__, lib.cdll))  # our own function object: argtypes are ours
            except AttributeError:
                self._checked = self._inner = self._call = self._missing
                self._fn = self._missing
                return
            fn.restype = self._restype
            fn.argtypes = tuple(_ctypes_argtype(a) for a in self._argtypes)
            if self.checked:
                fn.errcheck = _errcheck(self.__name__, self._created() if _CREATORS.fullmatch(self.__name__) else None)
            self._compile(fn)
            self._route()
            self._fn = fn

    def _route(self):
        """Point ``_call`` at the checked call, NVTX-wrapped while ranges are on, behind the deprecation check."""
        inner = self._checked
        if _range_wrapper is not None and inner != self._missing:
            inner = _range_wrapper(self.__name__, inner)
        if inner != self._missing and self.queues:
            inner = _guard_queue(self.__name__, inner)
        if inner != self._missing and _DESTROYERS.fullmatch(self.__name__):
            inner = _guard_destroy(self.__name__, inner)
        self._inner = inner
        self._call = self._deprecated_call if self.deprecated and not self._warned else inner

    def _created(self) -> int:
        """The position of the parameter a create function writes the new handle through."""
        return next(i for i, a in enumerate(self._argtypes)
                    if isinstance(getattr(a, "target", None), type) and issubclass(a.target, Handle))

    def _first_call(self, *args):
        self._bind()
        if self.deprecated and not self._warned and _outside(sys._getframe(2)):
            self._warn(4)
        return self._inner(*args)

    def _deprecated_call(self, *args):
        if _outside(sys._getframe(2)):  # 0: here, 1: __call__, 2: the caller
            self._warn(4)
        return self._inner(*args)

    def _warn(self, stacklevel: int):
        why = "" if self.deprecated.startswith("Deprecated in cuDNN") else f": {self.deprecated}"
        warnings.warn(f"{self.__name__} is deprecated in cuDNN 9 (CUDNN_DEPRECATED in the headers){why}",
                      DeprecationWarning, stacklevel=stacklevel)
        self._warned = True  # after warn(): an 'error' filter keeps raising, as it would for a location
        self._route()

    def _missing(self, *args):
        lib = _loader.library()
        raise FunctionNotAvailableError(
            f"{self.__name__} is declared by the cuDNN headers these bindings were generated from, but the "
            f"loaded cuDNN {lib.version_string} ({lib.path}) does not export it; it needs a newer cuDNN")

    # --- argument checks ----------------------------------------------------------------------------
    def _compile(self, fn):
        """Make the checked call: a function with the C parameters' names whose fast path is one type test per
        typed parameter before the ctypes call; anything else goes to :meth:`_slow`, which converts or refuses."""
        names = self._names()
        ns = {"_fn": fn, "_slow": self._slow, "_lengths": self._check_lengths, "_type": type, "_int": int,
              "_isinstance": isinstance, "_CARG": _CARG, "_Array": ctypes.Array}
        nonnull = {names.index(p) if p in names else -1 for p in self.nonnull}
        tests, converters = [], []
        for i, (p, a) in enumerate(zip(names, self._argtypes)):
            kind, test = _kind(a), ""
            if kind == "handle":
                ns[f"_T{i}"] = a
                test = f"_type({p}) is _T{i}"
                if issubclass(a, CudaHandle):
                    test = f"({test} or _type({p}) is _int and 0 <= {p} <= {_ADDRESS_MAX})"
                converters.append((i, functools.partial(_handle, a)))
            elif kind == "int":
                lo, hi = INT_RANGES[a]
                test = f"_type({p}) is _int and {lo} <= {p} <= {hi}"
                converters.append((i, functools.partial(_scalar, a)))
            elif kind == "void":
                const = a is const_void_p
                ns[f"_R{i}"] = frozenset((str, bool, list, tuple) if const else (str, bool, list, tuple, bytes))
                test = f"(_type({p}) is not _int or {p} >= {_ADDRESS_MIN} or not {p}) and _type({p}) not in _R{i}"
                converters.append((i, functools.partial(_void, const)))
            if i in nonnull:  # the fast path takes only what cannot be NULL: a set handle, byref(), an array
                test = (f"_type({p}) is _T{i} and {p}.value" if kind == "handle" else
                        f"(_type({p}) is _CARG or _isinstance({p}, _Array))" if hasattr(a, "target") else "False")
            if test:
                tests.append(test)
        index = {n: i for i, n in enumerate(names)}
        self._length_checks = [(index[e[0]], index[e[1]], index[e[2]] if len(e) > 2 else None)
                               for e in self.lengths]
        self._nonnull = [index[p] for p in self.nonnull]
        self._converters = converters
        params = ", ".join(names)
        packed = f"({params}{',' if len(names) == 1 else ''})"
        body = []
        if tests:
            body.append(f"    if not ({' and '.join(tests)}):\n        return _slow({packed})")
        if self._length_checks:
            body.append(f"    _lengths({packed})")
        body.append(f"    return _fn({params})")
        source = f"def {self.__name__}({params}):\n" + "\n".join(body) + "\n"
        exec(compile(source, f"<cudnn_py checked call {self.__name__}>", "exec"), ns)
        self._checked = ns[self.__name__]

    def _param(self, i: int) -> str:
        decls = _declarations(self.prototype)
        return f"parameter {i + 1} ({decls[i]})" if i < len(decls) else f"parameter {i + 1}"

    def _slow(self, args: tuple):
        """Convert each typed argument (or refuse it, naming the parameter), check lengths, then call C."""
        out = list(args)
        sequence_for_attribute = {a for a, _, t in self._length_checks if t is not None}
        for i, convert in self._converters:
            if i in sequence_for_attribute and _is_sequence(args[i]):
                continue  # converted below, once the element type is known
            try:
                out[i] = convert(args[i])
            except (TypeError, ValueError) as e:
                if isinstance(e, CudnnPyError):
                    raise
                raise CArgumentError(f"{self.__name__}: {self._param(i)}: {e}") from None
        for a, count, t in self._length_checks:
            if t is not None and _is_sequence(args[a]):
                ctype = _attribute_ctype(out[t])
                if ctype is None:
                    raise CArgumentError(f"{self.__name__}: {self._param(t)}: {_show(args[t])} is not a "
                                         f"cudnnBackendAttributeType_t, so a sequence cannot be converted")
                try:
                    out[a] = _to_array(ctype, args[a])
                except TypeError as e:
                    raise CArgumentError(f"{self.__name__}: {self._param(a)}: {e}") from None
        for i in self._nonnull:
            v = out[i]
            if v is None or (type(v) is int and v == 0) or (isinstance(v, (ctypes.c_void_p, ctypes._Pointer))
                                                            and not v):
                raise CArgumentError(f"{self.__name__}: {self._param(i)} is NULL, which cuDNN dereferences "
                                     f"unchecked (the process would crash); pass a valid one")
        self._check_lengths(out)
        return self._fn(*out)

    def _check_lengths(self, args):
        """Refuse an array shorter than the count cuDNN is given for it (see cudnn_py.codegen.lengths)."""
        for a, c, t in self._length_checks:
            count = getattr(args[c], "value", args[c])
            if type(count) is not int or count == 0:
                continue  # nothing to read or write; an unconvertible count is refused by ctypes
            if count < 0:  # cuDNN does not refuse all of them: some read or write with the negative count
                raise CArgumentError(f"{self.__name__}: {self._param(c)} is {count}: a count cannot be negative")
            ctype = (getattr(self._argtypes[a], "target", None) if t is None
                     else _attribute_ctype(getattr(args[t], "value", args[t])))
            size = ctypes.sizeof(ctype) if ctype is not None else None
            value = args[a]
            have = (len(value) * size if size and _is_sequence(value) else _capacity(value))
            if size is None or have is None or have >= count * size:
                continue
            raise CArgumentError(
                f"{self.__name__}: {self._param(a)} has room for {have // size} element(s) ({have} bytes) but "
                f"{self._names()[c]}={count} lets cuDNN access {count} ({count * size} bytes)")

    def _argument_error(self, e: Exception, args: tuple) -> CArgumentError:
        """A ctypes ArgumentError or an arity TypeError, as a :class:`CArgumentError` naming the parameter."""
        m = re.match(r"argument (\d+): ([\w.]+): (.*)", str(e), re.S)
        if m and int(m.group(1)) <= len(args):
            i = int(m.group(1)) - 1
            return CArgumentError(f"{self.__name__}: {self._param(i)} cannot take {_show(args[i])}: {m.group(3)}")
        text = str(e).removeprefix(f"{self.__name__}() ")
        return CArgumentError(f"{self.__name__}: {text} (C: {self.prototype})")


#: what the generated modules declare each C function with
function = CFunction
