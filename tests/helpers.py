"""Stand-ins for CPU tests of validation: they fail the test if a call ever reaches cuDNN."""
from __future__ import annotations

import numpy as np

from cudnn_py.memory import DeviceArray


class NoCallHandle:
    """Stands in for a Handle on CPU: reaching C (``.ptr``) fails the test."""
    device = 0
    stream = None

    @property
    def ptr(self):
        raise AssertionError("validation should have raised before any cuDNN call")


def fake(shape, dtype=np.float32, strides=None) -> DeviceArray:
    """A DeviceArray with a dummy address: never dereferenced because validation fails first."""
    return DeviceArray(0x10000, shape, dtype, strides)


def numeric_gradient(loss, arr: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``loss()`` with respect to ``arr``, which is perturbed in place (and restored)."""
    g = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        old = arr[i]
        arr[i] = old + eps
        up = loss()
        arr[i] = old - eps
        down = loss()
        arr[i] = old
        g[i] = (up - down) / (2 * eps)
    return g
