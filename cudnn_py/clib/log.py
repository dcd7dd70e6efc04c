"""cuDNN's own log delivered to Python's :mod:`logging`: :func:`enable` (or ``CUDNN_PY_LOG=info|warning|error``, read
when cuDNN's first function is bound) installs cuDNN's one process-wide callback, replacing any other. cuDNN's
FATAL, ERROR, WARNING and INFO (the API log) become CRITICAL, ERROR, WARNING and INFO records of cuDNN's text, one line
per part, with ``record.cudnn_function``, ``cudnn_status``, ``cudnn_thread`` and ``cudnn_device``. :func:`disable`
turns it off (at interpreter exit too, before cuDNN's teardown could call into a finished interpreter).
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import re
import threading
import warnings
from cudnn_py.clib.status import status_member
from cudnn_py.errors import InvalidValueError

__all__ = ["enable", "disable", "level", "LEVELS"]

#: level name -> the cuDNN severities it delivers
LEVELS: dict[str, tuple[str, ...]] = {"error": ("ERROR",), "warning": ("ERROR", "WARNING"),
                                      "info": ("ERROR", "WARNING", "INFO")}
_LOGGING_LEVELS = {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}
_FUNCTION = re.compile(r"function (\w+)\(\)")

_lock = threading.RLock()  # enable() may bind cuDNN, which reads CUDNN_PY_LOG and enables again
_state: dict = {"level": None, "callback": None, "logger": None, "exit_hook": False}


def _parts(address: int) -> list[str]:
    """cuDNN's message: NUL-separated parts ending with an empty one."""
    parts = []
    while address:
        part = ctypes.string_at(address)
        if not part:
            break
        parts.append(part.decode(errors="replace"))
        address += len(part) + 1
    return parts


def _deliver(severity: int, udata, debug, message: int) -> None:
    """The cuDNN callback (any thread): one log record per message."""
    logger = _state["logger"]
    if logger is None:
        return
    level = _LOGGING_LEVELS.get(severity, logging.ERROR)
    if not logger.isEnabledFor(level):
        return
    parts = _parts(message)
    if not parts:
        return
    d = debug.contents if debug else None
    status = status_member(d.cudnnStatus if d else 0)
    m = _FUNCTION.search(parts[0])
    extra = {"cudnn_function": m.group(1) if m else "", "cudnn_status": status,
             "cudnn_thread": d.tid if d else 0, "cudnn_device": d.cudaDeviceId if d else -1}
    logger.log(level, "%s", "\n".join(parts), extra=extra)


def _level_name(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return "info" if value <= logging.INFO else "warning" if value <= logging.WARNING else "error"
    if isinstance(value, str) and value.strip().lower() in LEVELS:
        return value.strip().lower()
    raise InvalidValueError(f"level must be one of {sorted(LEVELS)} or a logging level (logging.INFO, ...), got "
                            f"{value!r}")


def enable(level: str | int = "warning", logger: logging.Logger | None = None) -> None:
    """Deliver cuDNN's messages at ``level`` and above to ``logger`` (default ``logging.getLogger("cudnn_py")``):
    ``"info"`` (the API log: every call with its arguments), ``"warning"`` or ``"error"``, or a logging level
    (``DEBUG``/``INFO`` -> info, ``WARNING`` -> warning, above -> error). ValueError for an unknown level."""
    from cudnn_py import capi
    name = _level_name(level)
    mask = sum(1 << int(getattr(capi, f"CUDNN_SEV_{sev}")) for sev in LEVELS[name])
    with _lock:
        if _state["callback"] is None:
            # cudnnCallback_t with the message as a raw address: it has several NUL-separated parts
            proto = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(capi.cudnnDebug_t),
                                     ctypes.c_void_p)
            _state["callback"] = proto(_deliver)
        _state["logger"] = logger or logging.getLogger("cudnn_py")
        capi.cudnnSetCallback(mask, None, ctypes.cast(_state["callback"], capi.cudnnCallback_t))
        _state["level"] = name
        if not _state["exit_hook"]:
            atexit.register(disable)
            _state["exit_hook"] = True


def disable() -> None:
    """Stop delivering cuDNN's messages (cuDNN is left delivering nothing, as it starts)."""
    from cudnn_py import capi
    with _lock:
        if _state["level"] is None:
            return
        # mask 0 on our callback: nothing is delivered (a NULL callback would turn on cuDNN's default printer of
        # errors to stderr: cuDNN 9 answers (0, NULL, NULL) with mask CUDNN_SEV_ERROR_EN)
        capi.cudnnSetCallback(0, None, ctypes.cast(_state["callback"], capi.cudnnCallback_t))
        _state["level"] = None
        _state["logger"] = None


def level() -> str | None:
    """The level being delivered (``"info"``, ``"warning"``, ``"error"``), or None when off."""
    return _state["level"]


def enable_from_environment() -> None:
    """:func:`enable` at ``CUDNN_PY_LOG``'s level (``off``/``0``/empty: nothing); a bad value only warns."""
    value = os.environ.get("CUDNN_PY_LOG", "").strip()
    if value.lower() in ("", "0", "off", "none"):
        return
    try:
        enable(value)
    except Exception as e:  # the variable must never break the program it observes
        warnings.warn(f"CUDNN_PY_LOG={value!r} ignored: {e}", RuntimeWarning, stacklevel=2)
