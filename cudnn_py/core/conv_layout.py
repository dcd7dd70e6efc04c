"""Convolution layouts, for the legacy and the graph calls: arrays come in NCHW or channels-last (``N, *spatial, C``)
order; cuDNN's descriptors take the logical ``N, C, *spatial`` order, the strides saying where each axis lives."""
from __future__ import annotations

from typing import Any

__all__ = ["logical", "physical", "packed_strides", "unit_height"]


def logical(shape, strides, layout: str) -> tuple[tuple, Any]:
    """(shape, strides) of an array given in ``layout`` in logical ``N, C, *spatial`` order (strides may be None)."""
    def order(v) -> tuple:
        return tuple(v) if layout == "NCHW" else (v[0], v[-1], *v[1:-1])
    return order(shape), None if strides is None else order(strides)


def physical(shape, layout: str) -> tuple:
    """A logical ``N, C, *spatial`` shape (or strides) in the order arrays of ``layout`` are given in."""
    return tuple(shape) if layout == "NCHW" else (shape[0], *shape[2:], shape[1])


def packed_strides(shape, channels_last: bool) -> tuple[int, ...]:
    """Packed strides (elements) of a logical N, C, *spatial shape in NCHW or NHWC memory order."""
    order = ([0] + list(range(2, len(shape))) + [1]) if channels_last else list(range(len(shape)))
    strides, acc = [0] * len(shape), 1
    for ax in reversed(order):
        strides[ax] = acc
        acc *= shape[ax]
    return tuple(strides)


def unit_height(shape, strides) -> tuple[tuple, tuple]:
    """1-D -> 2-D: a unit height in front of the length (logical shape and strides)."""
    return shape[:2] + (1,) + shape[2:], strides[:2] + (strides[2] * shape[2],) + strides[2:]
