"""Convolution algorithm queries on raw descriptors, per direction: cuDNN's heuristic list (``..._v7``), its measured
ones (``Find...``, ``Find...Ex``) and one algorithm's workspace size, as :class:`AlgoPerf` records in cuDNN's order."""
from __future__ import annotations

import ctypes
import enum
import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

from cudnn_py import capi
from cudnn_py.clib.status import status_member
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["DIRECTIONS", "AlgoPerf", "algorithm_enum", "real_members", "parse_algo", "max_algorithm_count",
           "heuristic_algorithms", "find_algorithms", "find_algorithms_ex", "workspace_size"]

DIRECTIONS = ("forward", "backward_data", "backward_filter")


#: direction -> the middle parts of its C names: ``{short}`` in the enum's and record's, ``{long}`` in the functions'
_NAMES = {"forward": ("Fwd", "Forward"), "backward_data": ("BwdData", "BackwardData"),
          "backward_filter": ("BwdFilter", "BackwardFilter")}


@functools.cache
def _api(direction: str, name: str) -> Any:
    """The capi object the template ``name`` names for the direction (looked up on first use, not at import)."""
    if direction not in _NAMES:
        raise InvalidValueError(f"direction {direction!r}: expected one of {DIRECTIONS}")
    short, long = _NAMES[direction]
    return getattr(capi, name.format(short=short, long=long))


def algorithm_enum(direction: str) -> type[enum.IntEnum]:
    """The capi enum of algorithms for a direction (e.g. ``capi.cudnnConvolutionFwdAlgo_t``)."""
    return _api(direction, "cudnnConvolution{short}Algo_t")


def real_members(direction: str) -> list:
    """The algorithms of a direction, without the enum's ``*_COUNT`` sentinel."""
    return [m for m in algorithm_enum(direction) if not m.name.endswith("_COUNT")]


def parse_algo(direction: str, algo: Any) -> enum.IntEnum:
    """An algorithm enum member from a member, an int, or a name (full C name or its tail, any case:
    ``parse_algo("forward", "implicit_precomp_gemm")``)."""
    members = real_members(direction)
    if isinstance(algo, enum.IntEnum):
        if type(algo) is not algorithm_enum(direction):
            raise InvalidTypeError(f"{algo!r} is not a {direction} algorithm; expected a "
                                   f"{algorithm_enum(direction).__name__}")
        return algo
    if isinstance(algo, int) and not isinstance(algo, bool):
        for m in members:
            if int(m) == algo:
                return m
        raise InvalidValueError(f"{direction} algorithm {algo} does not exist; valid: {[int(m) for m in members]}")
    if isinstance(algo, str):
        want = algo.strip().upper()
        for m in members:
            tail = m.name.split("_ALGO_")[1]
            if want in (m.name, tail, "ALGO_" + tail):
                return m
        raise InvalidValueError(f"{direction} algorithm {algo!r} does not exist; valid: "
                         f"{[m.name.split('_ALGO_')[1] for m in members]}")
    raise InvalidTypeError(f"algo must be an enum member, int or name, got {type(algo).__name__}")


@dataclass(frozen=True)
class AlgoPerf:
    """One entry of cuDNN's algorithm list (a ``cudnnConvolution*AlgoPerf_t``): ``status`` a ``cudnnStatus_t``
    member (or an int no member names: a newer cuDNN's), ``time_ms`` a finite time >= 0 or -1.0 (not timed: the
    heuristic list, a failed measurement), ``memory_bytes`` a ``size_t``."""

    direction: str
    algo: enum.IntEnum
    status: enum.IntEnum | int
    time_ms: float
    memory_bytes: int
    determinism: enum.IntEnum
    math_type: enum.IntEnum

    def __post_init__(self) -> None:
        """Refuse a field of the wrong kind (:class:`InvalidTypeError`) or value (:class:`InvalidValueError`)."""
        if not isinstance(self.direction, str) or self.direction not in DIRECTIONS:
            raise InvalidValueError(f"AlgoPerf direction {self.direction!r}: expected one of {DIRECTIONS}")
        members = (("algo", algorithm_enum(self.direction)), ("determinism", capi.cudnnDeterminism_t),
                   ("math_type", capi.cudnnMathType_t))
        for name, kind in members:
            if type(getattr(self, name)) is not kind:
                raise InvalidTypeError(f"AlgoPerf {name} must be a {kind.__name__} member, got "
                                       f"{getattr(self, name)!r}")
        numbers = (("status", int, "a cudnnStatus_t member or int"), ("time_ms", (int, float), "a number"),
                   ("memory_bytes", int, "an int"))
        for name, types, what in numbers:
            value = getattr(self, name)
            if not isinstance(value, types) or isinstance(value, bool):
                raise InvalidTypeError(f"AlgoPerf {name} must be {what}, got {value!r}")
        if not isinstance(self.status, capi.cudnnStatus_t):
            if not 0 <= self.status < 2 ** 31:
                raise InvalidValueError(f"AlgoPerf status {self.status} is not a cudnnStatus_t (0 to 2**31 - 1)")
            object.__setattr__(self, "status", status_member(self.status))
        time_ms = float(self.time_ms)
        if time_ms != time_ms:
            raise InvalidValueError("AlgoPerf time_ms is NaN")
        if not (0.0 <= time_ms < math.inf or time_ms == -1.0):
            raise InvalidValueError(f"AlgoPerf time_ms must be a finite time >= 0 (or -1.0: not timed), got "
                                    f"{self.time_ms!r}")
        object.__setattr__(self, "time_ms", time_ms)
        if not 0 <= self.memory_bytes < 2 ** 64:
            raise InvalidValueError(f"AlgoPerf memory_bytes must be >= 0 and < 2**64 (a size_t), got "
                                    f"{self.memory_bytes}")

    @property
    def supported(self) -> bool:
        return int(self.status) == int(capi.CUDNN_STATUS_SUCCESS)

    @property
    def deterministic(self) -> bool:
        return int(self.determinism) == int(capi.CUDNN_DETERMINISTIC)

    @classmethod
    def from_struct(cls, direction: str, s) -> "AlgoPerf":
        return cls(direction, algorithm_enum(direction)(s.algo), status_member(s.status), float(s.time),
                   int(s.memory), capi.cudnnDeterminism_t(s.determinism), capi.cudnnMathType_t(s.mathType))

    def to_dict(self) -> dict:
        """The record as JSON values: enum members by name (a status no member names as its int)."""
        d = asdict(self)
        for k in ("algo", "status", "determinism", "math_type"):
            d[k] = getattr(getattr(self, k), "name", d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "AlgoPerf":
        """The record :meth:`to_dict` wrote; the error names the field that is missing or wrong."""
        if not isinstance(d, dict):
            raise InvalidTypeError(f"AlgoPerf.from_dict takes the dict to_dict() wrote, got {type(d).__name__}")

        def field(name, kinds):
            if name not in d:
                raise InvalidValueError(f"field {name!r} is missing")
            v = d[name]
            if isinstance(v, bool) or not isinstance(v, kinds):
                raise InvalidValueError(f"field {name!r} must be {' or '.join(k.__name__ for k in kinds)}, got {v!r}")
            return v

        def member(name, kind):
            v = field(name, (str,))
            if v not in kind.__members__:
                raise InvalidValueError(f"field {name!r}: {v!r} is not a {kind.__name__} name")
            return kind[v]

        direction = field("direction", (str,))
        if direction not in DIRECTIONS:
            raise InvalidValueError(f"field 'direction': {direction!r} is not one of {DIRECTIONS}")
        status = d.get("status")
        return cls(direction, parse_algo(direction, field("algo", (str,))),
                   field("status", (int,)) if isinstance(status, int) else member("status", capi.cudnnStatus_t),
                   float(field("time_ms", (int, float))), field("memory_bytes", (int,)),
                   member("determinism", capi.cudnnDeterminism_t), member("math_type", capi.cudnnMathType_t))

    def __str__(self) -> str:
        state = "ok" if self.supported else getattr(self.status, "name", f"status {self.status}")
        det = "det" if self.deterministic else "nondet"
        return (f"{self.algo.name:<50} {state:<12} {self.time_ms:9.4f} ms {self.memory_bytes:>12} B "
                f"{det:<6} {self.math_type.name}")


def _raw(obj):
    """A capi handle from a capi handle, a Handle/descriptor object (``.ptr``) or None."""
    return getattr(obj, "ptr", obj)


def max_algorithm_count(handle, direction: str) -> int:
    """``cudnnGetConvolution*AlgorithmMaxCount``."""
    n = ctypes.c_int()
    _api(direction, "cudnnGetConvolution{long}AlgorithmMaxCount")(_raw(handle), ctypes.byref(n))
    return n.value


def _query(name: str, handle, direction: str, count: int | None, args: tuple, tail: tuple = ()) -> list[AlgoPerf]:
    """The records ``_api(direction, name)(handle, *args, count, &returned, records, *tail)`` writes."""
    count = count or max_algorithm_count(handle, direction)
    arr, n = (_api(direction, "cudnnConvolution{short}AlgoPerf_t") * count)(), ctypes.c_int()
    _api(direction, name)(_raw(handle), *args, count, ctypes.byref(n), arr, *tail)
    return [AlgoPerf.from_struct(direction, arr[i]) for i in range(n.value)]


def heuristic_algorithms(handle, direction: str, a, b, conv, c, count: int | None = None) -> list[AlgoPerf]:
    """``cudnnGetConvolution*Algorithm_v7`` on descriptors in cuDNN's order: forward (x, w, conv, y); backward_data
    (w, dy, conv, dx); backward_filter (x, dy, conv, dw)."""
    return _query("cudnnGetConvolution{long}Algorithm_v7", handle, direction, count,
                  (_raw(a), _raw(b), _raw(conv), _raw(c)))


def find_algorithms(handle, direction: str, a, b, conv, c, count: int | None = None) -> list[AlgoPerf]:
    """``cudnnFindConvolution*Algorithm``: runs every algorithm on buffers cuDNN allocates; sorted by time."""
    return _query("cudnnFindConvolution{long}Algorithm", handle, direction, count,
                  (_raw(a), _raw(b), _raw(conv), _raw(c)))


def find_algorithms_ex(handle, direction: str, a, a_ptr: int, b, b_ptr: int, conv, c, c_ptr: int,
                       workspace_ptr: int | None, workspace_bytes: int, count: int | None = None) -> list[AlgoPerf]:
    """``cudnnFindConvolution*AlgorithmEx`` on the caller's buffers (the direction's output is overwritten);
    algorithms needing more than ``workspace_bytes`` are reported with a failing status."""
    return _query("cudnnFindConvolution{long}AlgorithmEx", handle, direction, count,
                  (_raw(a), a_ptr, _raw(b), b_ptr, _raw(conv), _raw(c), c_ptr), (workspace_ptr, workspace_bytes))


def workspace_size(handle, direction: str, a, b, conv, c, algo) -> int:
    """``cudnnGetConvolution*WorkspaceSize`` for one algorithm (bytes); raises if the algorithm is unsupported."""
    size = ctypes.c_size_t()
    _api(direction, "cudnnGetConvolution{long}WorkspaceSize")(_raw(handle), _raw(a), _raw(b), _raw(conv), _raw(c),
                                                              parse_algo(direction, algo), ctypes.byref(size))
    return size.value
