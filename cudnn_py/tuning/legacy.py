"""The model sweep of a convolution through the legacy API (``algos --model NAME --legacy``; docs/tuning.md): every
``cudnnConvolution*Algo_t`` raced as the graph sweep's configurations are, in a record of the graph sweep's shape
(tag: the algorithm's name) whose mode ``A`` is the ``_v7`` heuristic's order (what ``algo="heuristic"`` picks).
"""
from __future__ import annotations

import math
import statistics

import numpy as np

from cudnn_py.core.conv_layout import physical
from cudnn_py.core.dtypes import as_numpy_dtype
from cudnn_py.tuning_records.models import Conv, Problem

from .compare import Progress

__all__ = ["measure_legacy", "DIRECTION", "call"]

#: a convolution problem's pass -> the legacy API's direction
DIRECTION = {"fprop": "forward", "dgrad": "backward_data", "wgrad": "backward_filter"}


def call(h, conv, direction: str, x, w, dy, out, **kw):
    """One legacy convolution of ``direction`` (of :data:`DIRECTION`'s values) on handle ``h`` writing ``out``, in
    the place of the operand it computes (``kw``: the call's options: ``algo=``, ...)."""
    from cudnn_py.ops import conv_calls as cv
    if direction == "forward":
        return cv.convolution_forward(h, conv, x, w, y=out, **kw)
    if direction == "backward_data":
        return cv.convolution_backward_data(h, conv, w, dy, dx=out, **kw)
    return cv.convolution_backward_filter(h, conv, x, dy, dw=out, **kw)


def measure_legacy(p: Problem, h, settings, progress: Progress | None = None) -> dict:
    """Time the legacy algorithms of convolution problem ``p`` on handle ``h`` (``settings``: a
    :class:`~cudnn_py.tuning.sweep.Settings`, of which repeats, warm-up, exhaustive and cold_l2 apply); the record to
    store. ``progress``: a :class:`~cudnn_py.tuning.compare.Progress`, told of the operation's begin and steps."""
    import cudnn_py.calls.algorithms as alg
    from cudnn_py.errors import CudnnPyError
    from cudnn_py.graph.plans import l2_flush
    from cudnn_py.core.memory import empty, to_device
    from cudnn_py.ops import conv_calls as cv
    from cudnn_py.core.streams import held_ms

    from .compare import config_row, header, race, sample
    if not isinstance(p.op, Conv):
        raise TypeError(f"the legacy sweep takes convolutions, not {p.kind}")
    op, direction, dt = p.op, DIRECTION[p.pass_], as_numpy_dtype(p.dtype)
    members = alg.real_members(direction)
    if progress:
        progress.begin(p.key, len(members))
    rec = {**header(p, settings), "api": "legacy", "order": {"A": []}}
    oh, ow = op.out_hw
    shapes = {"x": (p.batch, op.c, op.h, op.w), "w": (op.k, op.c, op.r, op.s), "y": (p.batch, op.k, oh, ow)}
    block = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32) * 0.5
    arrays = {n: to_device(np.resize(block.astype(dt), math.prod(s)).reshape(physical(s, p.layout)), h.stream,
                           device=h.device) for n, s in shapes.items()}
    out_name = {"forward": "y", "backward_data": "x", "backward_filter": "w"}[direction]
    out = arrays[out_name] = empty(physical(shapes[out_name], p.layout), dt, stream=h.stream, device=h.device)
    x, w, y = arrays["x"], arrays["w"], arrays["y"]
    conv = cv.Convolution(op.pad, op.stride, layout=p.layout)
    try:
        records = cv.convolution_algorithms(h, conv, x, w, y, direction=direction, method="heuristic")
    except CudnnPyError as e:
        rec["problem"] = " ".join(str(e).split())[:400]
        return rec
    math_type = conv.math_for(dt)
    heur = {r.algo: r for r in records}
    rec["order"]["A"] = [r.algo.name.split("_ALGO_")[1] for r in alg.allowed_by_math_type(records, math_type)
                         if r.supported]

    def run(algo):
        return call(h, conv, direction, x, w, y, out, algo=algo, engine="legacy")

    entries = []
    for algo in members:
        r = heur.get(algo)
        nondet = algo.name in alg.NONDETERMINISTIC.get(direction, ()) or (r is not None and not r.deterministic)
        tensor_op = r is not None and int(r.math_type) not in (alg.capi.CUDNN_FMA_MATH, alg.capi.CUDNN_DEFAULT_MATH)
        row = config_row(algo.name.split("_ALGO_")[1], int(algo), {}, not nondet,
                         (["nondeterministic"] if nondet else []) + (["tensor_core"] if tensor_op else []))
        rec["configs"].append(row)
        entries.append((row, algo))

    def build(row: dict, algo):
        row["workspace"] = cv.convolution_workspace_size(h, conv, x, w, y, algo=algo, direction=direction)
        return algo

    def check(algo) -> list[np.ndarray]:
        out.fill_(float("nan"))
        run(algo)
        return sample({out_name: out}, h.stream)

    flush = l2_flush(h) if settings.cold_l2 else None

    unheld: set = set()  # the algorithms whose held sample timed out (core.streams.held_ms)

    def time_sample(algo, warmup: int) -> float | None:
        for _ in range(warmup):
            run(algo)
        if flush is not None:
            flush()
        ms, _, hold = held_ms(h.stream, lambda: run(algo), algo not in unheld)
        if not hold:
            unheld.add(algo)
        return ms

    rec["race"] = race(entries, build=build, time_sample=time_sample, check=check, orders=rec["order"],
                       repeats=settings.repeats, warmup=settings.warmup, dtype=p.dtype,
                       exhaustive=settings.exhaustive, errors=(CudnnPyError, MemoryError),
                       progress=progress, median=statistics.median)
    return rec
