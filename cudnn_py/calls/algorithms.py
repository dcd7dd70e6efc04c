"""Convolution algorithms: the queries and records (:mod:`cudnn_py.calls.algorithm_queries`) and the "fastest" cache
(:mod:`cudnn_py.calls.fastest_cache`) gathered here, how a call chooses its algorithm, and the one-line port of the
selectors removed in cuDNN 8 (directions ``"forward"``, ``"backward_data"``, ``"backward_filter"``)::

    from cudnn_py.calls.algorithms import *  # C: cudnnGetConvolutionForwardAlgorithm(..., 0, &algo);
    algo = cudnnGetConvolutionForwardAlgorithm(h, xD, wD, cD, yD, CUDNN_CONVOLUTION_FWD_PREFER_FASTEST, 0)
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cudnn_py import capi
# the removed preference enums (defined in cudnn_py.removed) and their members
from cudnn_py.capi import (
    CUDNN_CONVOLUTION_BWD_DATA_NO_WORKSPACE, CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST,
    CUDNN_CONVOLUTION_BWD_DATA_SPECIFY_WORKSPACE_LIMIT, CUDNN_CONVOLUTION_BWD_FILTER_NO_WORKSPACE,
    CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST, CUDNN_CONVOLUTION_BWD_FILTER_SPECIFY_WORKSPACE_LIMIT,
    CUDNN_CONVOLUTION_FWD_NO_WORKSPACE, CUDNN_CONVOLUTION_FWD_PREFER_FASTEST,
    CUDNN_CONVOLUTION_FWD_SPECIFY_WORKSPACE_LIMIT, cudnnConvolutionBwdDataPreference_t,
    cudnnConvolutionBwdFilterPreference_t, cudnnConvolutionFwdPreference_t)
from cudnn_py.core.args import bool_arg
from cudnn_py.calls.fastest_cache import CONV_KEY_FIELDS, AlgorithmCache, CacheFileError, algorithm_cache
from cudnn_py.calls.algorithm_queries import (DIRECTIONS, AlgoPerf, algorithm_enum, find_algorithms, find_algorithms_ex,
                                        heuristic_algorithms, max_algorithm_count, parse_algo, real_members,
                                        workspace_size)
from cudnn_py.errors import CudnnError, CudnnNotSupportedError, InvalidValueError, WorkspaceLimitError

if TYPE_CHECKING:
    from cudnn_py.core.handle import Handle

__all__ = [
    "DIRECTIONS", "AlgoPerf", "AlgorithmCache", "CacheFileError", "CONV_KEY_FIELDS", "algorithm_cache",
    "algorithm_enum", "parse_algo", "select_algorithm", "max_algorithm_count", "heuristic_algorithms",
    "find_algorithms", "find_algorithms_ex", "workspace_size",
    "cudnnConvolutionFwdPreference_t", "cudnnConvolutionBwdDataPreference_t", "cudnnConvolutionBwdFilterPreference_t",
    "CUDNN_CONVOLUTION_FWD_NO_WORKSPACE", "CUDNN_CONVOLUTION_FWD_PREFER_FASTEST",
    "CUDNN_CONVOLUTION_FWD_SPECIFY_WORKSPACE_LIMIT", "CUDNN_CONVOLUTION_BWD_DATA_NO_WORKSPACE",
    "CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST", "CUDNN_CONVOLUTION_BWD_DATA_SPECIFY_WORKSPACE_LIMIT",
    "CUDNN_CONVOLUTION_BWD_FILTER_NO_WORKSPACE", "CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST",
    "CUDNN_CONVOLUTION_BWD_FILTER_SPECIFY_WORKSPACE_LIMIT", "choose_forward_algorithm",
    "choose_backward_data_algorithm", "choose_backward_filter_algorithm", "cudnnGetConvolutionForwardAlgorithm",
    "cudnnGetConvolutionBackwardDataAlgorithm", "cudnnGetConvolutionBackwardFilterAlgorithm",
    "ALGO_CHOICES", "NONDETERMINISTIC", "is_choice", "allowed_by_math_type", "find_workspace",
    "measure_algorithms", "resolve_algorithm",
]

# ---------------------------------------------------------------- port of the removed selectors

_PREF_TYPES = {"forward": cudnnConvolutionFwdPreference_t, "backward_data": cudnnConvolutionBwdDataPreference_t,
               "backward_filter": cudnnConvolutionBwdFilterPreference_t}


def select_algorithm(records: Iterable[AlgoPerf], limit: int | None = None, sizes=None,
                     deterministic: bool = False) -> AlgoPerf:
    """The first supported record (deterministic if asked) needing at most ``limit`` bytes (None: any) by
    ``sizes(record)`` (a :class:`CudnnError` rejects it) or its own figure. :class:`WorkspaceLimitError` when only
    the limit stood in the way, else :class:`CudnnNotSupportedError` listing why each was rejected."""
    rejected, too_big, direction = [], False, "convolution"
    for r in records:
        direction = r.direction
        if not r.supported:
            rejected.append(f"{r.algo.name}: {getattr(r.status, 'name', r.status)}")
            continue
        if deterministic and not r.deterministic:
            rejected.append(f"{r.algo.name}: not deterministic")
            continue
        try:
            need = sizes(r) if sizes is not None else r.memory_bytes
        except CudnnError as e:
            rejected.append(f"{r.algo.name}: {e}")
            continue
        if limit is None or need <= limit:
            return r
        too_big = True
        rejected.append(f"{r.algo.name}: needs {need} B of workspace")
    detail = "; ".join(rejected) or "cuDNN returned no algorithm"
    if too_big:
        raise WorkspaceLimitError(f"no {direction} algorithm fits a workspace limit of {limit} B ({detail})")
    raise CudnnNotSupportedError(f"select {direction} algorithm", capi.CUDNN_STATUS_NOT_SUPPORTED,
                                 f"no usable algorithm ({detail})")


def _choose(direction, handle, a, b, conv, c, preference, memory_limit, measured):
    pref_type = _PREF_TYPES[direction]
    try:
        pref = pref_type(preference)
    except ValueError:
        raise InvalidValueError(f"preference {preference!r}: expected one of {[m.name for m in pref_type]}") from None
    if pref.name.endswith("SPECIFY_WORKSPACE_LIMIT"):
        if int(memory_limit) < 0:
            raise InvalidValueError(f"memory_limit must be >= 0 bytes, got {memory_limit}")
        limit = int(memory_limit)
    else:
        limit = 0 if pref.name.endswith("NO_WORKSPACE") else None
    query = find_algorithms if bool_arg(measured, "measured") else heuristic_algorithms
    records = query(handle, direction, a, b, conv, c)
    # _v7 does not promise a workspace figure per entry: ask for the real size when it matters.
    sizes = None if measured or limit is None else (lambda r: workspace_size(handle, direction, a, b, conv, c, r.algo))
    return select_algorithm(records, limit, sizes).algo


def choose_forward_algorithm(handle: Handle | capi.cudnnHandle_t, x_desc: Any, w_desc: Any, conv_desc: Any, y_desc: Any,
                             preference: int = CUDNN_CONVOLUTION_FWD_PREFER_FASTEST,
                             memory_limit: int = 0, *, measured: bool = False) -> enum.IntEnum:
    """The ``cudnnConvolutionFwdAlgo_t`` cuDNN 7's ``cudnnGetConvolutionForwardAlgorithm`` would have chosen on these
    descriptors: the first entry of the ``..._v7`` heuristic list (``measured``: of ``Find`` timings) that is supported
    (PREFER_FASTEST), needs no workspace (NO_WORKSPACE) or at most ``memory_limit`` bytes (SPECIFY_WORKSPACE_LIMIT)."""
    return _choose("forward", handle, x_desc, w_desc, conv_desc, y_desc, preference, memory_limit, measured)


def choose_backward_data_algorithm(handle: Handle | capi.cudnnHandle_t, w_desc: Any, dy_desc: Any, conv_desc: Any,
                                   dx_desc: Any, preference: int = CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST,
                                   memory_limit: int = 0, *, measured: bool = False) -> enum.IntEnum:
    """Backward-data counterpart of :func:`choose_forward_algorithm`: a ``cudnnConvolutionBwdDataAlgo_t``."""
    return _choose("backward_data", handle, w_desc, dy_desc, conv_desc, dx_desc, preference, memory_limit, measured)


def choose_backward_filter_algorithm(handle: Handle | capi.cudnnHandle_t, x_desc: Any, dy_desc: Any, conv_desc: Any,
                                     dw_desc: Any, preference: int = CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST,
                                     memory_limit: int = 0, *, measured: bool = False) -> enum.IntEnum:
    """Backward-filter counterpart of :func:`choose_forward_algorithm`: a ``cudnnConvolutionBwdFilterAlgo_t``."""
    return _choose("backward_filter", handle, x_desc, dy_desc, conv_desc, dw_desc, preference, memory_limit,
                   measured)


def _store(out, algo):
    if out is not None:
        getattr(out, "_obj", out).value = int(algo)
    return algo


def cudnnGetConvolutionForwardAlgorithm(handle, xDesc, wDesc, convDesc, yDesc, preference, memoryLimitInBytes,
                                        algo=None):
    """The C signature of the function removed in cuDNN 8, on :func:`choose_forward_algorithm`: returns the
    algorithm, also written to ``algo`` (a ``ctypes.c_int`` or ``byref`` of one) where given."""
    return _store(algo, choose_forward_algorithm(handle, xDesc, wDesc, convDesc, yDesc, preference,
                                                 memoryLimitInBytes))


def cudnnGetConvolutionBackwardDataAlgorithm(handle, wDesc, dyDesc, convDesc, dxDesc, preference, memoryLimitInBytes,
                                             algo=None):
    """The C signature of the function removed in cuDNN 8, on :func:`choose_backward_data_algorithm`."""
    return _store(algo, choose_backward_data_algorithm(handle, wDesc, dyDesc, convDesc, dxDesc, preference,
                                                       memoryLimitInBytes))


def cudnnGetConvolutionBackwardFilterAlgorithm(handle, xDesc, dyDesc, convDesc, dwDesc, preference,
                                               memoryLimitInBytes, algo=None):
    """The C signature of the function removed in cuDNN 8, on :func:`choose_backward_filter_algorithm`."""
    return _store(algo, choose_backward_filter_algorithm(handle, xDesc, dyDesc, convDesc, dwDesc, preference,
                                                         memoryLimitInBytes))


# ---------------------------------------------------------------- choosing the algorithm of a call

#: the words ``algo=`` takes besides an algorithm: the first suitable heuristic record, or the fastest measured one
ALGO_CHOICES = ("heuristic", "fastest")

#: the algorithms cuDNN documents as non-deterministic, by direction (refused with ``deterministic=True``)
NONDETERMINISTIC = {"backward_data": frozenset({"CUDNN_CONVOLUTION_BWD_DATA_ALGO_0"}),
                    "backward_filter": frozenset({"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0",
                                                  "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3"})}


def is_choice(spec: Any) -> bool:
    """Whether ``algo=spec`` asks for a choice (:data:`ALGO_CHOICES`, any case) rather than naming an algorithm."""
    return isinstance(spec, str) and spec.lower() in ALGO_CHOICES


def allowed_by_math_type(records: Iterable[AlgoPerf], math_type) -> list[AlgoPerf]:
    """The records whose math type the requested ``math_type`` allows (DEFAULT also allows TENSOR_OP; FMA and the
    conversion mode only themselves); all records, relabelled ``math_type``, if cuDNN labelled none of them so."""
    records = list(records)
    allowed = {int(math_type)}
    if math_type == capi.CUDNN_DEFAULT_MATH:
        allowed.add(int(capi.CUDNN_TENSOR_OP_MATH))
    kept = [r for r in records if int(r.math_type) in allowed]
    return kept or [replace(r, math_type=math_type) for r in records]


def find_workspace(handle, needs: Iterable[int], limit: int | None) -> tuple[int | None, int]:
    """(pointer, bytes) of the workspace for ``Find...Ex``: the largest of ``needs`` (capped at ``limit``) that
    ``handle.workspace`` can get, down to none (cuDNN then reports the algorithms needing more as failing)."""
    for nbytes in sorted({n if limit is None else min(n, limit) for n in needs} - {0}, reverse=True):
        try:
            return handle.workspace.get(nbytes, handle.stream), nbytes
        except Exception:  # noqa: BLE001 - cuda.core's CUDAError (out of device memory): try a smaller need
            continue
    return None, 0


def measure_algorithms(handle, direction: str, a, a_ptr: int, b, b_ptr: int, conv, c, c_nbytes: int,
                       limit: int | None) -> list[AlgoPerf]:
    """``Find...Ex`` on the inputs at ``a_ptr``/``b_ptr``, a scratch output of ``c_nbytes`` bytes and the workspace
    :func:`find_workspace` gets under ``limit``; descriptors in cuDNN's order."""
    from cudnn_py.core.memory import empty
    needs = []
    for algo in real_members(direction):
        try:
            needs.append(workspace_size(handle, direction, a, b, conv, c, algo))
        except CudnnError:  # unsupported here; Find will say so in its records
            continue
    scratch = empty((c_nbytes,), "uint8", stream=handle.stream, device=handle.device)
    ws_ptr, ws_bytes = find_workspace(handle, needs, limit)
    return find_algorithms_ex(handle, direction, a, a_ptr, b, b_ptr, conv, c, scratch.ptr, ws_ptr, ws_bytes)


def resolve_algorithm(handle, direction: str, spec: Any, descs: tuple, conv_desc: Callable[[Any], Any], math_type, *,
                      deterministic: bool = False, limit: int | None = None, cache_key: tuple | None = None,
                      measure: Callable[[], list[AlgoPerf]] | None = None, problem: str = "") -> tuple[Any, Any, int]:
    """The algorithm, math type and workspace bytes a call of ``direction`` runs with. ``spec``: an algorithm (member,
    int or name), ``"heuristic"`` (the first suitable ``..._v7`` record) or ``"fastest"`` (the best record of
    ``measure()``, kept in :data:`algorithm_cache` under ``cache_key``); ``descs``: (a, b, c) in cuDNN's order;
    ``conv_desc(math_type)``: the convolution descriptor; ``math_type``: as :func:`allowed_by_math_type` allows;
    ``limit``: workspace bytes allowed (None: any); ``problem``: the configuration in words, for errors."""
    a, b, c = descs
    if is_choice(spec):
        def size(r):
            return workspace_size(handle, direction, a, b, conv_desc(r.math_type), c, r.algo)
        if spec.lower() == "heuristic":
            records = heuristic_algorithms(handle, direction, a, b, conv_desc(math_type), c)
            chosen = select_algorithm(allowed_by_math_type(records, math_type), limit, size, deterministic)
            return chosen.algo, chosen.math_type, size(chosen)
        if measure is None or cache_key is None:
            raise InvalidValueError("algo='fastest' needs a measure() and a cache_key")
        best = algorithm_cache.get(cache_key)
        if best is None:
            best = select_algorithm(allowed_by_math_type(measure(), math_type), limit, None, deterministic)
            algorithm_cache.put(cache_key, best)
        return best.algo, best.math_type, size(best)
    algo = parse_algo(direction, spec)
    if deterministic and algo.name in NONDETERMINISTIC.get(direction, ()):
        raise InvalidValueError(f"{algo.name} is not deterministic; drop deterministic=True or choose another "
                                f"algorithm")
    try:
        need = workspace_size(handle, direction, a, b, conv_desc(math_type), c, algo)
    except CudnnError as e:  # cuDNN's way of saying "this algorithm does not do this configuration"
        raise type(e)(e.function, e.status, f"{algo.name} does not support this {direction} configuration "
                      f"({problem}, math {math_type.name}); cuDNN says: {e.reason or 'no reason given'}") from None
    if limit is not None and need > limit:
        raise WorkspaceLimitError(f"{algo.name} needs {need} B of workspace; the limit is {limit} B")
    return algo, math_type, need
