"""The error raised when no engine supports a graph, with everything cuDNN said."""
from __future__ import annotations

from cudnn_py import capi
from cudnn_py.errors import CudnnNotSupportedError

__all__ = ["GraphNotSupportedError"]


class GraphNotSupportedError(CudnnNotSupportedError):
    """No engine configuration could build a plan for a graph.

    ``operations``: one description per operation; ``modes``: heuristic modes tried; ``reasons``: (what was
    tried, cuDNN's status and last-error text) pairs.
    """

    def __init__(self, graph_name: str, operations: list[str], modes: list[str], reasons: list[tuple[str, str]],
                 status=capi.cudnnStatus_t.CUDNN_STATUS_NOT_SUPPORTED):
        self.graph_name, self.operations, self.modes, self.reasons = graph_name, operations, modes, reasons
        lines = [f"no engine supports graph {graph_name!r}",
                 "  operations: " + "; ".join(operations),
                 "  heuristic modes tried: " + (", ".join(modes) or "none")]
        lines += [f"  {what}: {why}" for what, why in reasons[:12]]
        if len(reasons) > 12:
            lines.append(f"  ... and {len(reasons) - 12} more")
        super().__init__("graph build", status, "\n".join(lines))

    def __reduce__(self):
        return type(self), (self.graph_name, self.operations, self.modes, self.reasons, self.status)
