"""pytest plugin: every test marked ``gpu`` runs inside :func:`helpers.poisoned_allocations`, so each device buffer
(test outputs, outputs and scratch the library allocates itself) starts as NaN / an int sentinel and an element a
call never writes fails the comparison. Enable with ``-p poison_plugin`` (tests/ is on the path)."""
from __future__ import annotations

import pytest

from helpers import poisoned_allocations


@pytest.fixture(autouse=True)
def _poison_gpu_allocations(request):
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    with poisoned_allocations():
        yield
