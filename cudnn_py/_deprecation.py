"""Old spellings of the Pythonic layer kept working with a :class:`DeprecationWarning` (docs/design.md lists them):
:func:`renamed_kwargs` (an old keyword), :func:`alias` (an old class or function name), :func:`renamed_attribute`.
"""
from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import Any

from cudnn_py.errors import InvalidTypeError

__all__ = ["renamed_kwargs", "alias", "renamed_attribute", "warn"]


def warn(message: str, stacklevel: int = 3) -> None:
    """Issue a :class:`DeprecationWarning` pointing at the caller's caller (the user's line by default), past the
    frames of :mod:`cudnn_py.calls.prepared`'s wrapper where an operation function is called through it."""
    f = sys._getframe(stacklevel - 1)
    while f is not None and f.f_globals.get("__name__") == "cudnn_py.calls.prepared":
        f = f.f_back  # type: ignore[assignment]
        stacklevel += 1
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def renamed_kwargs(where: str, kwargs: dict[str, Any], renames: dict[str, str], values: dict[str, Any],
                   stacklevel: int = 4) -> dict[str, Any]:
    """``values`` (the new names' values as passed, None when not) updated with ``kwargs`` (the ``**old`` keywords
    ``where`` received) under their new names (``renames``: old -> new), a warning each; an unknown keyword, or an
    old and a new spelling together, raise :class:`InvalidTypeError`."""
    for old, value in kwargs.items():
        new = renames.get(old)
        if new is None:
            raise InvalidTypeError(f"{where}() got an unexpected keyword argument {old!r}")
        if values.get(new) is not None:
            raise InvalidTypeError(f"{where}() got both {new}= and its old spelling {old}=; pass {new}= only")
        warn(f"{where}(): {old}= is deprecated, use {new}=", stacklevel=stacklevel)
        values[new] = value
    return values


def alias(old: str, new: Callable, use: str = "") -> Callable:
    """A callable named ``old`` that warns once per call site and calls ``new`` (a class or function); the warning
    says to use ``use`` (default: ``new``'s qualified name)."""
    target = use or getattr(new, "__qualname__", repr(new))

    @functools.wraps(new)
    def call(*args, **kwargs):
        warn(f"{old} is deprecated, use {target}")
        return new(*args, **kwargs)

    call.__name__ = call.__qualname__ = old
    call.__doc__ = f"Deprecated alias of :class:`{target}`."
    return call


def renamed_attribute(new: str, message: str) -> property:
    """A read-only property, the old spelling of attribute ``new``: warns ``message``, returns ``new``'s value."""
    def get(self):
        warn(message)
        return getattr(self, new)
    return property(get, doc=f"Deprecated spelling of :attr:`{new}`.")
