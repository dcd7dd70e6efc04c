"""The arguments of the attention entry points (:mod:`cudnn_py.ops.sdpa`): device tensors checked, packed (THD)
tensors seen as their logical views, constants made, outputs bound, and the graph's
:class:`~cudnn_py.graph.runner.Runner` (which the prepared call keeps). The graph builder (``Graph.sdpa*``) checks
the tensors' fit to each other.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Sequence

import numpy as np

from cudnn_py.clib import recording
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph import Graph
from cudnn_py.graph.ops.sdpa_options import SdpaOptions
from cudnn_py.graph.runner import Runner, handle_device, new_output, plan_graph
from cudnn_py.core.memory import DeviceArray, array_signature, as_array, is_torch_tensor, to_device
from cudnn_py.core.strided import check_layout

#: what the prepared calls that ran an attention graph note they were built on (:func:`~cudnn_py.sdpa_cache_clear`)
ROUTE = "attention graph paths"


def alibi_slopes(heads: int) -> np.ndarray:
    """The standard ALiBi slopes for ``heads`` query heads (float32, as cuDNN's frontend computes them)."""
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
        raise InvalidValueError(f"heads must be an int >= 1, got {heads!r}")
    heads = int(heads)
    n = 1 << int(math.floor(math.log2(heads)))
    exps = list(range(1, n + 1)) + [0.5 * (i + 1) for i in range(0, 2 * (heads - n), 2)]
    return np.array([2.0 ** (-8.0 * e / n) for e in exps], np.float32)


def device_tensor(obj: Any, name: str) -> tuple[Any, tuple]:
    """A device tensor argument and its meta (shape, strides, NumPy dtype): a DeviceArray or a torch tensor as
    itself (read without a DLPack round trip), anything else as a DeviceArray view."""
    if type(obj) is not DeviceArray and not is_torch_tensor(obj):
        obj = as_array(obj, name)
    (shape, strides, dtype, _), _ = array_signature(obj, name)
    check_layout(shape, strides, f"{name}'s")
    return obj, (shape, strides, dtype)


def _as_4d(obj: Any, name: str, axis: int = 0, pages: bool = False) -> DeviceArray | None:
    """An optional device tensor as 4-D: a vector ((N,)) with N on ``axis`` (lengths, offsets: 0; a sink's heads: 1),
    a page table ((B, pages)) as (B, 1, pages, 1); 4-D as it is."""
    if obj is None:
        return None
    a = as_array(obj, name)
    if a.ndim == 1 + pages:
        if not a.is_contiguous:
            raise InvalidValueError(f"{name} must be packed")
        shape = [a.shape[0], 1, a.shape[1], 1] if pages else [1, 1, 1, 1]
        shape[axis] = a.shape[0]
        a = a.reshape(*shape)
    return a


def thd(obj: Any, name: str, b: int, s_max: int, heads: int | None = None) -> DeviceArray:
    """A packed (T, H, D) device tensor seen as the logical (B, H, s_max, D) tensor the graph describes: token-major
    strides, batches placed by the ragged offsets (so the batch stride is never used). C-contiguous only: one offset
    tensor serves q, o, do and dq (another k, v, dk and dv), and new outputs are packed, so every such tensor must
    place token i at i * H * D (an interleaved or head-major one would be read or written elsewhere)."""
    a = as_array(obj, name)
    if a.ndim != 3:
        raise InvalidValueError(f"{name} must be a packed (T, H, D) tensor with ragged offsets, got shape {a.shape}")
    _, h, d = a.shape
    if heads is not None and h != heads:
        raise InvalidValueError(f"{name} must have {heads} heads, got shape {a.shape}")
    if not a.is_contiguous:
        raise InvalidValueError(f"{name} must be a C-contiguous packed (T, H, D) tensor (the ragged offsets count "
                                f"H * D elements a token and are shared with o, or v, and the gradients), got strides "
                                f"{a.strides}; for other layouts build the graph (g.sdpa's ragged_offset_q/k/v/o)")
    return DeviceArray(a.ptr, (b, h, s_max, d), a.dtype, (s_max * h * d, d, h * d, 1), device_id=a.device_id,
                       owner=a)


def device_scalar(handle: Any, value: Any, name: str, dtype: Any) -> DeviceArray:
    """A (1, 1, 1, 1) device tensor of ``dtype`` (int64: a Philox seed/offset; float32: an FP8 scale factor): a
    one-element device tensor of that dtype as it is, a number (int64: an int; float32: > 0) copied to the device."""
    dtype = np.dtype(dtype)
    kind = "an int" if dtype == np.int64 else "a finite number > 0"
    if dtype == np.int64 and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if not -2 ** 63 <= int(value) < 2 ** 63:
            raise InvalidValueError(f"{name} must fit int64, got {value}")
    elif dtype == np.float32 and isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
            raise InvalidValueError(f"{name} must be {kind} or a float32 device tensor, got {value!r}")
    else:
        if value is None:
            raise InvalidValueError(f"{name} is required: {kind} or a one-element {dtype} device tensor")
        a = as_array(value, name)
        if a.size != 1 or a.dtype != dtype:
            raise InvalidTypeError(f"{name} must be {kind} or a one-element {dtype} device tensor, got {a.shape} "
                                   f"{a.dtype}")
        return a if a.shape == (1, 1, 1, 1) else a.reshape(1, 1, 1, 1)
    return to_device(np.full((1, 1, 1, 1), value, dtype), stream=getattr(handle, "stream", None),
                     device=handle_device(handle))


def _uploaded(handle: Any) -> list:
    """[an event after the uploads queued on the handle's stream], which a replay on another stream waits for."""
    stream = getattr(handle, "stream", None)
    return [] if stream is None else [stream.record()]


#: the builder's keywords for the ragged offsets (q's are also o's, k's also v's)
_KEYWORDS = {"ragged_q": ("ragged_offset_q", "ragged_offset_o"), "ragged_k": ("ragged_offset_k", "ragged_offset_v")}


class SdpaArgs:
    """One call's device arrays and options, its graph's runner (:meth:`runner`) and its execution (:meth:`run`).
    ``arrays``: the arrays by graph tensor name in binding order, packed ones as their logical (B, H, S_max, D)
    views; ``packed``: the (T, H, D) shapes of q, k, v (None when nothing is packed)."""

    def __init__(self, handle: Any, q: Any, k: Any, v: Any, opts: SdpaOptions, *, bias: Any = None,
                 seq_len_q: Any = None, seq_len_kv: Any = None, ragged_offset_q: Any = None,
                 ragged_offset_k: Any = None, seed: Any = None, offset: Any = None, page_table_k: Any = None,
                 page_table_v: Any = None, sink: Any = None, o: Any = None, do: Any = None, stats: Any = None,
                 scales: dict | None = None):
        self.handle, self.opts, self.packed, scales = handle, opts, None, scales or {}
        got: dict[str, Any] = {n: _as_4d(x, name, pages=name.startswith("page")) for n, x, name in (
            ("seq_len_q", seq_len_q, "seq_len_q"), ("seq_len_kv", seq_len_kv, "seq_len_kv"),
            ("ragged_q", ragged_offset_q, "ragged_offset_q"), ("ragged_k", ragged_offset_k, "ragged_offset_k"),
            ("page_table_k", page_table_k, "page_table_k"), ("page_table_v", page_table_v, "page_table_v"))}
        rq, rk = got["ragged_q"], got["ragged_k"]
        self.ragged = rq is not None or rk is not None
        msl_q, msl_kv = opts.max_seq_len_q, opts.max_seq_len_kv
        if self.ragged:
            if rq is None or rk is None:
                raise InvalidValueError("packed (THD) attention needs both ragged_offset_q and ragged_offset_k")
            if msl_q is None or msl_kv is None:
                raise InvalidValueError("packed (THD) attention needs the options max_seq_len_q and max_seq_len_kv "
                                        "(the longest sequences: the logical S of the attention)")
            b = rq.shape[0] - 1
            packed = {"q": as_array(q, "q"), "k": as_array(k, "k"), "v": as_array(v, "v")}
            self.packed = [a.shape for a in packed.values()]
            q, k, v = (thd(packed[n], n, b, s) for n, s in (("q", msl_q), ("k", msl_kv), ("v", msl_kv)))
            if v.shape[3] != q.shape[3] or k.shape[1] * k.shape[3] != v.shape[1] * v.shape[3]:
                raise InvalidValueError("packed attention here shares q's offsets with o and k's with v, so it needs "
                                        "Dv == D and Hk * D == Hv * Dv; build the graph (g.sdpa's ragged_offset_o/_v) "
                                        "for other shapes")
            if do is not None:  # the backward's o and do are packed like q
                o, do = thd(o, "o", b, msl_q, q.shape[1]), thd(do, "do", b, msl_q, q.shape[1])
        if page_table_k is not None or page_table_v is not None:  # the builder checks the rest
            if self.ragged:
                raise InvalidValueError("a paged KV cache does not combine with packed (THD) tensors here")
        elif not self.ragged and (msl_q is not None or msl_kv is not None):
            raise InvalidValueError("max_seq_len_q/max_seq_len_kv are only for packed (THD) tensors with ragged "
                                    "offsets (and max_seq_len_kv for a paged KV cache)")
        got["sink"] = _as_4d(sink, "sink", axis=1)
        got.update({n: device_tensor(x, n)[0] for n, x in (("q", q), ("k", k), ("v", v), ("bias", bias), ("o", o),
                                                            ("do", do), ("stats", stats)) if x is not None})
        (shape, _, self.dtype, _), _ = array_signature(got["q"], "q")
        self.hq = shape[1] if len(shape) == 4 else 1
        if isinstance(opts.alibi, tuple) and len(opts.alibi) != self.hq:
            raise InvalidValueError(f"alibi must be True or {self.hq} per-head slopes, got {len(opts.alibi)}")
        if opts.dropout and (seed is None or offset is None):
            raise InvalidValueError("dropout needs seed= and offset= (ints or int64 device tensors): the Philox state")
        # scalars given as numbers are uploaded once, outside the recording: the runner's constants, which the
        # prepared call keeps (its key holds the numbers); device tensors are the call's arrays
        self.consts: dict[str, DeviceArray] = {}
        scalars = [(n, x, np.int64) for n, x in (("seed", seed), ("offset", offset)) if opts.dropout]
        for n, x, dt in scalars + [(n, x, np.float32) for n, x in scales.items()]:
            with recording.measuring():
                a = device_scalar(handle, x, n, dt)
            (self.consts if isinstance(x, numbers.Real) else got)[n] = device_tensor(a, n)[0]
        self.ready = _uploaded(handle) if self.consts else []
        order = ("q", "k", "v", "bias", "seq_len_q", "seq_len_kv", "ragged_q", "ragged_k", "seed", "offset",
                 "page_table_k", "page_table_v", "sink", "o", "do", "stats", *scales)
        self.arrays = {n: got[n] for n in order if got.get(n) is not None}

    def runner(self, method: str, autotune: bool, given: dict, srcs: Sequence = (), **builder: Any) -> Runner:
        """The runner of ``Graph.<method>``'s graph on these arrays; ``given``: output name -> the caller's array's
        (shape, strides, dtype) or None; ``srcs``: per packed output, the index of the q/k/v whose tokens it has."""
        handle = self.handle
        g = Graph(io_dtype=self.dtype, compute_dtype="float32", intermediate_dtype="float32", name=method)
        kw: dict = {}
        tensors, arrays, ready = [], [*self.arrays.values(), *self.consts.values()], list(self.ready)
        for n, a in (*self.arrays.items(), *self.consts.items()):
            tensors.append(g.tensor_like(a, n))
            kw.update(dict.fromkeys(_KEYWORDS.get(n, (n,)), tensors[-1]))
        if self.opts.alibi is not False:
            slopes = alibi_slopes(self.hq) if self.opts.alibi is True else np.array(self.opts.alibi, np.float32)
            with recording.measuring():  # uploaded once: the runner a prepared call keeps holds them
                arrays.append(to_device(slopes.reshape(1, -1, 1, 1), stream=getattr(handle, "stream", None),
                                        device=handle_device(handle)))
            ready += _uploaded(handle)
            kw["alibi"] = g.tensor_like(arrays[-1], "alibi_slopes")
            tensors.append(kw["alibi"])
        opts = dataclasses.replace(self.opts, alibi=False)
        outs = [t for t in getattr(g, method)(**kw, options=opts, **builder) if t is not None]
        for t, (name, meta) in zip(outs, given.items()):
            if meta is not None:
                if tuple(meta[0]) != t.shape:
                    raise InvalidValueError(f"{name} must have shape {t.shape}, got {tuple(meta[0])}")
                t.strides = tuple(meta[1])
            t.set_output(True).set_name(name)
        plan = plan_graph(g, handle, dict(zip(tensors, arrays)), outs, autotune)
        specs = [(t.shape, t.np_dtype, t.strides, srcs[i] if i < len(srcs) else None) for i, t in enumerate(outs)]
        n = len(self.arrays)
        return Runner(plan, handle, [*tensors, *outs], arrays[n:], n, specs, ready)

    def run(self, r: Runner, outputs: dict) -> list:
        """Execute ``r`` on these arrays and ``outputs`` (name -> array, or None: new); returns the outputs."""
        recording.uses(ROUTE)
        bound = [bind_output(self.handle, x, n, spec, self.packed) for (n, x), spec in zip(outputs.items(), r.specs)]
        r.run([*self.arrays.values(), *(b for _, b in bound)])
        return [a for a, _ in bound]


def bind_output(handle: Any, given: Any, name: str, spec: tuple, shapes: Sequence | None) -> tuple[Any, Any]:
    """(returned array, bound array) for an output: the caller's ``given`` checked against ``spec``, or new; a packed
    output (T, H, D) is bound through its logical view (``shapes``: the call's packed q, k, v shapes)."""
    shape, dtype, strides, src = spec
    packed = None if src is None else (shapes[src][0], shape[1], shape[3])  # type: ignore[index]
    if given is None:
        given = new_output(handle, packed or shape, dtype, None if packed else strides)
        if packed is None:
            return given, given
    if packed is not None:
        a = as_array(given, name)
        if a.shape != packed or a.dtype != dtype:
            raise InvalidValueError(f"{name} must have shape {packed} and dtype {dtype}, got {a.shape} {a.dtype}")
        return given, thd(a, name, shape[0], shape[2])
    _, meta = device_tensor(given, name)
    if tuple(meta[0]) != shape or meta[2] != dtype:
        raise InvalidValueError(f"{name} must have shape {shape} and dtype {dtype}, got {tuple(meta[0])} {meta[2]}")
    return given, given
