"""A graph built per configuration and run on a call's arrays, as a prepared operation function: :func:`graph_call`.

What an integration (:mod:`cudnn_py.torch`) needs to run a graph it describes from its own arrays::

    def build(options, x, w, y):        # the call's arrays (None where an optional one is absent)
        g = Graph(...); ...             # describe them, add the operations, mark the outputs
        return g, [tx, tw, ty], ()      # graph tensors in binding order (one per array given), constants

    conv = graph_call("conv", build, inputs=("x", "w"), outputs=("y",))
    conv(handle, options, x, w, y)      # writes y; returns (y,)

The function is :func:`~cudnn_py.calls.prepared.prepared`, keyed by the options (hashable) and each array's layout: a
repeat call replays the plan with the new addresses. ``build`` describes each array itself (bound by address: a (C,)
parameter may be a (1, C, 1, 1) tensor); the caller gives every output, of that layout.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from cudnn_py.core.memory import array_signature
from cudnn_py.calls.prepared import prepared

from .runner import Runner

__all__ = ["graph_call"]

_P = inspect.Parameter.POSITIONAL_OR_KEYWORD


def graph_call(name: str, build: Callable[..., tuple], inputs: Sequence[str],
               outputs: Sequence[str]) -> Callable[..., tuple]:
    """The prepared function ``fn(handle, options, *inputs, *outputs)`` named ``name``, running the graph
    ``build(options, *arrays)`` returns as ``(graph, tensors, consts)`` (see the module doc; ``consts``: (graph
    tensor, device array) pairs bound after the tensors); returns the outputs."""
    n_in = len(inputs)

    def run(handle: Any, options: Any, *arrays: Any) -> tuple:
        g, tensors, consts = build(options, *arrays)
        g.build(handle)
        given = [a for a in arrays if a is not None]
        r = Runner(g.plan, handle, [*tensors, *(t for t, _ in consts)], consts=[c for _, c in consts],
                   n_inputs=len(given))
        r.run_pointers(tuple([array_signature(a)[1] for a in given]) + r.const_ptrs)
        return tuple(arrays[n_in:])

    run.__name__ = run.__qualname__ = name
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, _P) for n in ("handle", "options", *inputs, *outputs)])
    return prepared(inputs=inputs, outputs=outputs, inplace=False)(run)
