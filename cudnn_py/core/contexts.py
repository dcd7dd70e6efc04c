"""The devices' primary contexts, so that memory operations run their driver calls in the right device's context
(:class:`on_device`) on any thread, whichever device is current."""
from __future__ import annotations

from typing import Any

from cudnn_py.errors import check_cuda
from cudnn_py.core.streams import driver

__all__ = ["driver", "device_count", "primary_context", "on_device"]


_DEVICE_COUNT: list[int] = []


def device_count() -> int:
    """How many CUDA devices this process sees (asked once)."""
    if not _DEVICE_COUNT:
        _DEVICE_COUNT.append(int(check_cuda(driver().cuDeviceGetCount(), "cuDeviceGetCount")))
    return _DEVICE_COUNT[0]


#: device ordinal -> its primary CUcontext (retained once for the process, as cuda.core does)
_PRIMARY: dict[int, Any] = {}


def primary_context(device_id: int) -> Any:
    """The primary context of device ``device_id`` (retained on first use)."""
    ctx = _PRIMARY.get(device_id)
    if ctx is None:
        drv = driver()
        dev = check_cuda(drv.cuDeviceGet(device_id), "cuDeviceGet")
        ctx = _PRIMARY.setdefault(device_id, check_cuda(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain"))
    return ctx


class on_device:  # noqa: N801 - used as a with-statement, like a function
    """``with on_device(i):`` device ``i``'s primary context is current for the driver calls in the block (memory
    calls may queue on the legacy default stream, the *current* context's: on another device's memory they fail).
    Pushed only where another (or none) is current, and popped after."""

    __slots__ = ("device_id", "pushed")

    def __init__(self, device_id: int):
        self.device_id = device_id
        self.pushed = False

    def __enter__(self) -> None:
        if device_count() == 1:  # no other context to switch from; the check below costs ~1/4 of a small allocation
            return
        drv = driver()
        ctx = primary_context(self.device_id)
        if int(check_cuda(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")) != int(ctx):
            check_cuda(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
            self.pushed = True

    def __exit__(self, *exc: object) -> None:
        if self.pushed:
            self.pushed = False
            check_cuda(driver().cuCtxPopCurrent(), "cuCtxPopCurrent")
