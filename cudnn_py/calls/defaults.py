"""The default handle, for scripts: one :class:`~cudnn_py.Handle` per (thread, device), made on first use, destroyed
when the thread ends (any left: at interpreter exit). Closing one is allowed: the next call makes a new one."""
from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from typing import TYPE_CHECKING

from cudnn_py.core.streams import get_device

if TYPE_CHECKING:
    from cuda.core import Device

    from cudnn_py.core.handle import Handle

__all__ = ["default_handle"]

_tls = threading.local()
_live: weakref.WeakSet[Handle] = weakref.WeakSet()
_lock = threading.Lock()
_registered = False


def default_handle(device: int | Device | None = None) -> Handle:
    """This thread's default cuDNN handle on ``device`` (an ordinal or :class:`cuda.core.Device`; None: the current
    device, 0 where none was made current), created on first use on the device's default stream (``set_stream`` /
    ``on_stream`` change it for every later user). :class:`NoDeviceError` where no GPU can be used."""
    global _registered
    ordinal = get_device(device).device_id
    handles = getattr(_tls, "handles", None)
    if handles is None:
        handles = _tls.handles = {}
    h = handles.get(ordinal)
    if h is None or h.closed:
        from cudnn_py.core.handle import Handle
        h = handles[ordinal] = Handle(ordinal)
        with _lock:
            _live.add(h)
            if not _registered:  # registered after cuda.core's own exit hooks, so it runs before them
                atexit.register(_close_all)
                _registered = True
    return h


def _close_all() -> None:
    """Close every default handle still alive (at interpreter exit, while the driver is still up)."""
    with _lock:
        handles = list(_live)
        _live.clear()
    for h in handles:
        with contextlib.suppress(Exception):  # at exit nothing is left to report a failure to
            h.close()
