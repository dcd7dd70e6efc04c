"""The error raised when no engine supports a graph, with everything cuDNN said."""
from __future__ import annotations

from typing import Any

from cudnn_py import capi
from cudnn_py.errors import CudnnNotSupportedError

__all__ = ["GraphNotSupportedError"]


def _items(values: Any) -> list:
    """What a constructor got as a list: None -> [], one string -> [it], an iterable -> its items, else [it]."""
    if values is None:
        return []
    if isinstance(values, str):
        return [values]
    try:
        return list(values)
    except TypeError:
        return [values]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


class GraphNotSupportedError(CudnnNotSupportedError):
    """No engine configuration could build a plan for a graph. ``operations``: one description per operation;
    ``modes``: heuristic modes tried; ``reasons``: (what was tried, cuDNN's status and last-error text) pairs. Values
    of other types are kept as their text (an item of ``reasons`` that is no pair as ``('?', text)``)."""

    def __init__(self, graph_name: str, operations: list[str], modes: list[str], reasons: list[tuple[str, str]],
                 status=capi.cudnnStatus_t.CUDNN_STATUS_NOT_SUPPORTED):
        # an exception's constructor never raises
        self.graph_name = _text(graph_name)
        self.operations, self.modes = [_text(v) for v in _items(operations)], [_text(v) for v in _items(modes)]
        self.reasons = [(_text(r[0]), _text(r[1])) if isinstance(r, (tuple, list)) and len(r) == 2 else ("?", _text(r))
                        for r in _items(reasons)]
        lines = [f"no engine supports graph {self.graph_name!r}",
                 "  operations: " + "; ".join(self.operations),
                 "  heuristic modes tried: " + (", ".join(self.modes) or "none")]
        lines += [f"  {what}: {why}" for what, why in self.reasons[:12]]
        if len(self.reasons) > 12:
            lines.append(f"  ... and {len(self.reasons) - 12} more")
        super().__init__("graph build", status, "\n".join(lines))

    def __reduce__(self):
        return type(self), (self.graph_name, self.operations, self.modes, self.reasons, self.status)
