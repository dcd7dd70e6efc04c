"""NVTX ranges named after each cuDNN call (domain ``"cudnn_py"``) for Nsight Systems: :func:`enable` (or
``CUDNN_PY_NVTX=1``, read when cuDNN's first function is bound) wraps every call through :mod:`cudnn_py.capi`;
:func:`scope` opens a range of your own. A kept ctypes function (``fn.raw``, a graph executor) gets ranges only if
made while they were on. Disabled, nothing is paid. Needs the ``nvtx`` package (``pip install nvtx``).
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator

from cudnn_py.clib import binding as _binding

__all__ = ["enable", "disable", "enabled", "scope", "wrap", "DOMAIN"]

DOMAIN = "cudnn_py"
_COLOR = 0x76B900
_lock = threading.Lock()
_state: dict = {"domain": None, "attributes": {}}


def _attributes(name: str):
    attrs = _state["attributes"].get(name)
    if attrs is None:
        attrs = _state["attributes"][name] = _state["domain"].get_event_attributes(message=name, color=_COLOR)
    return attrs


def wrap(name: str, fn: Callable) -> Callable:
    """``fn`` inside a range named ``name`` while ranges are on, else ``fn`` (decided now, not on later enables)."""
    domain = _state["domain"]
    if domain is None:
        return fn
    attrs, push, pop = _attributes(name), domain.push_range, domain.pop_range

    def ranged(*args):
        push(attrs)
        try:
            return fn(*args)
        finally:
            pop()
    ranged.__name__ = ranged.__qualname__ = name
    return ranged


def enable() -> None:
    """Wrap every cuDNN call in a range from now on. Raises ImportError when the ``nvtx`` package is missing."""
    with _lock:
        if _state["domain"] is None:
            try:
                import nvtx
            except ImportError as e:
                raise ImportError("NVTX ranges need the nvtx package: pip install nvtx") from e
            _state["domain"], _state["attributes"] = nvtx.get_domain(DOMAIN), {}
        _binding.set_range_wrapper(wrap)


def disable() -> None:
    """Stop wrapping cuDNN calls (functions already wrapped by :func:`wrap` stay as they are)."""
    with _lock:
        _state["domain"] = None
        _binding.set_range_wrapper(None)


def enabled() -> bool:
    """Whether cuDNN calls are being wrapped in ranges."""
    return _state["domain"] is not None


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """A range named ``name`` in the ``cudnn_py`` domain around the block while ranges are on (else nothing)."""
    domain = _state["domain"]
    if domain is None:
        yield
        return
    domain.push_range(_attributes(name))
    try:
        yield
    finally:
        domain.pop_range()


def enable_from_environment() -> None:
    """:func:`enable` when ``CUDNN_PY_NVTX`` is 1/on/true/yes; a missing ``nvtx`` package only warns."""
    value = os.environ.get("CUDNN_PY_NVTX", "").strip().lower()
    if value not in ("1", "on", "true", "yes"):
        if value not in ("", "0", "off", "false", "no"):
            warnings.warn(f"CUDNN_PY_NVTX={value!r} ignored: use 1 or 0", RuntimeWarning, stacklevel=2)
        return
    try:
        enable()
    except ImportError as e:  # the variable must never break the program it observes
        warnings.warn(f"CUDNN_PY_NVTX=1 ignored: {e}", RuntimeWarning, stacklevel=2)
