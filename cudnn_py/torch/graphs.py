"""A user-built cuDNN graph as a torch custom op: :func:`graph_op` (an example: docs/torch.md). The op builds the
graph and its plan per set of input shapes, strides and dtypes; its fake builds the graph without a plan. It has no
autograd formula: pair a forward and a backward graph op in a ``torch.autograd.Function``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph import Graph
from cudnn_py.graph.graph_call import graph_call

from .runtime import context, define, dtype_name

__all__ = ["graph_op"]


def _describe(name: str, build: Callable, xs: Sequence[Tensor], compute_dtype: str,
              intermediate_dtype: str) -> tuple[Graph, list, list]:
    """The graph of ``build`` for inputs like ``xs``: (graph, input tensors, output tensors)."""
    g = Graph(io_dtype=dtype_name(xs[0].dtype), compute_dtype=compute_dtype, intermediate_dtype=intermediate_dtype,
              name=name)
    ins = [g.tensor([int(s) for s in x.shape], dtype=dtype_name(x.dtype), strides=[int(s) for s in x.stride()],
                    name=f"in{i}") for i, x in enumerate(xs)]
    outs = build(g, *ins)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    if not outs or any(getattr(t, "graph", None) is not g for t in outs):
        raise InvalidTypeError(f"graph_op {name!r}: build must return this graph's output tensor(s)")
    for i, t in enumerate(outs):
        if t in ins:
            raise InvalidValueError(f"graph_op {name!r}: output {i} is an input; return computed tensors")
        t.set_output(True).set_name(f"out{i}")
    return g, ins, outs


def graph_op(name: str, build: Callable[..., Any], *, compute_dtype: str = "float32",
             intermediate_dtype: str = "float32") -> Callable[..., Any]:
    """Register ``build(g, *input_tensors) -> output tensor(s)`` (on a :class:`~cudnn_py.graph.Graph` whose io dtype
    is the first input's) as the op ``cudnn_py::<name>``; returns ``op(*tensors)`` giving the output tensor or a tuple
    of them, with the strides and dtypes the graph gives them (``set_dtype`` changes one)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidValueError(f"graph_op: name must be an identifier, got {name!r}")
    specs: dict = {}
    calls: dict = {}  # (inputs, outputs) -> the prepared function running the graph on that many tensors

    def outputs(xs: list[Tensor]) -> list[Tensor]:
        """New outputs for inputs like ``xs`` (the implementation's and the fake's; the graph described once)."""
        key = tuple((tuple(map(int, x.shape)), tuple(map(int, x.stride())), x.dtype) for x in xs)
        got = specs.get(key)
        if got is None:
            _, _, outs = _describe(name, build, xs, compute_dtype, intermediate_dtype)
            got = specs[key] = [(t.shape, t.strides, getattr(torch, t.np_dtype.name)) for t in outs]
        return [torch.empty_strided(shape, strides, dtype=dtype, device=xs[0].device) for shape, strides, dtype in got]

    def impl(xs: list[Tensor]) -> list[Tensor]:
        outs = outputs(xs)
        n = len(xs)
        fn = calls.get((n, len(outs)))
        if fn is None:
            def describe(_, *arrays) -> tuple:
                g, ins, gouts = _describe(name, build, arrays[:n], compute_dtype, intermediate_dtype)
                return g, ins + gouts, ()
            fn = calls[n, len(outs)] = graph_call(f"graph_op_{name}", describe, [f"in{i}" for i in range(n)],
                                                  [f"out{i}" for i in range(len(outs))])
        context(xs[0].get_device()).run(fn, None, *xs, *outs)
        return outs

    op = define(name, impl, outputs)

    def call(*xs: Tensor):
        if not xs or not all(isinstance(x, Tensor) and x.is_cuda for x in xs):
            raise InvalidTypeError(f"graph_op {name!r} takes CUDA tensors")
        outs = op(list(xs))
        return outs[0] if len(outs) == 1 else tuple(outs)
    call.op = op  # type: ignore[attr-defined]
    return call
