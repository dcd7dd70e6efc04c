"""New outputs of prepared calls as torch tensors: the torch hooks of :data:`cudnn_py.calls.prepared.OUTPUT_HOOKS`,
imported on a prepared call's first torch output (torch is then imported already: its tensors were the inputs)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from cudnn_py.core.memory import DeviceArray

__all__ = ["allocator", "convert"]


def convert(a: DeviceArray) -> torch.Tensor:
    """``a`` as a torch tensor through DLPack, without a copy; a dtype torch's DLPack import lacks (the float8 types)
    travels as ints of the same width viewed as the dtype."""
    try:
        return torch.from_dlpack(a)
    except (KeyError, RuntimeError, BufferError):
        same = np.dtype(f"i{a.dtype.itemsize}")
        ints = DeviceArray.from_parts(a.ptr, a.shape, same, a.strides, a.device_id, a, a.stream)
        return torch.from_dlpack(ints).view(getattr(torch, a.dtype.name))


def allocator(shape: tuple, strides: tuple, dtype: np.dtype, device: int) -> Callable[[Any], tuple]:
    """``new(handle) -> (tensor, address)``: a torch tensor of this layout from torch's caching allocator, recorded
    on the handle's stream where that is not torch's current one. The driver's special streams (0, legacy 1,
    per-thread 2) count as torch's default stream, whose work every blocking stream waits for."""
    dev = torch.device("cuda", device)
    # no dtype= and device= parsed on every call
    empty_strided = torch.empty(0, dtype=getattr(torch, dtype.name), device=dev).new_empty_strided
    current = torch._C._cuda_getCurrentRawStream
    streams: dict = {}

    def new(handle: Any) -> tuple:
        t = empty_strided(shape, strides)
        sp = handle.stream_ptr
        if sp <= 2:
            sp = 0
        if sp != current(device):
            s = streams.get(sp)
            if s is None:
                s = streams[sp] = (torch.cuda.default_stream(dev) if sp == 0 else
                                   torch.cuda.ExternalStream(sp, device=dev))
            t.record_stream(s)
        return t, t.data_ptr()
    return new
