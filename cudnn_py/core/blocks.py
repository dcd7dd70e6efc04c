"""Device memory kept for reuse on the legacy default stream: a small DeviceArray's block, when the array is
collected, goes to a list of its device's blocks of that size, and the next array of that size there takes it, as
torch's and CuPy's allocators do.

Taking a kept block costs a list pop where the driver's stream-ordered allocation and free cost about 1.9 us through
cuda.core, and it is as safe: work queued on the stream after the new array's allocation runs after the old array's.
Only the legacy default stream's blocks are kept: it lives as long as the process and cannot be captured into a CUDA
graph (another stream's kept blocks would keep it alive, and a captured graph owns what it allocates). Blocks up to
:data:`LARGEST` bytes are kept, :data:`PER_SIZE` of each size per device at most (the rest freed); where the device
is full, or on :func:`empty_cache`, they are freed.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cudnn_py.errors import CudaOutOfMemoryError, CudnnPyError, cuda_error_from
from cudnn_py.core.contexts import device_count, on_device

__all__ = ["GRAIN", "LARGEST", "PER_SIZE", "Block", "NOTHING", "keeps", "taker", "new_buffer", "empty_cache"]

#: sizes are rounded up to a multiple of this many bytes, so that near sizes share blocks
GRAIN = 512
#: the largest block kept (bytes): a larger array's allocation costs little beside the work on it
LARGEST = 1 << 20
#: blocks of one size kept per device at most
PER_SIZE = 8
#: the handles of the legacy default stream: CU_STREAM_LEGACY, and 0 unless cuda.bindings makes 0 the per-thread one
_LEGACY = (1,) if os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0") else (0, 1)

#: (device ordinal, size) -> [(cuda.core Buffer, address)] kept; list.pop and list.append are atomic: no lock
_kept: dict[tuple[int, int], list[tuple[Any, int]]] = {}
_new = object.__new__


class Block:
    """A DeviceArray's memory (its owner): a cuda.core buffer at ``ptr``, given back to ``free`` when collected
    (None: freed)."""

    __slots__ = ("buffer", "ptr", "free")

    def __init__(self, buffer: Any, ptr: int, free: list | None):
        self.buffer, self.ptr, self.free = buffer, ptr, free

    def __del__(self) -> None:
        try:
            free = self.free
            if free is not None and len(free) < PER_SIZE:
                free.append((self.buffer, self.ptr))
            else:
                _close(self.buffer)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone; cuda.core frees the rest
            pass


def _close(buffer: Any) -> None:
    """Free ``buffer`` ordered on the stream it was allocated on, with its device's context current (the last
    reference may go in any thread, with any device current)."""
    if device_count() == 1:
        buffer.close()
    else:
        with on_device(buffer.device_id):
            buffer.close()


#: what an array of no elements takes: no memory
NOTHING = Block(None, 0, None)


def keeps(stream: Any) -> bool:
    """Whether arrays on ``stream`` (a cuda.core Stream) take and keep blocks: the legacy default stream's do."""
    return int(stream.handle) in _LEGACY


def taker(dev: Any, stream: Any, nbytes: int) -> Callable[[], Block]:
    """A function answering a block of at least ``nbytes`` on ``stream`` of device ``dev`` per call: a kept one where
    :func:`keeps` ``stream``, else a new allocation (``CudaOutOfMemoryError`` once the kept ones are freed);
    :data:`NOTHING` for 0 bytes."""
    if not nbytes:
        return lambda: NOTHING
    size = -(-nbytes // GRAIN) * GRAIN
    if not keeps(stream) or size > LARGEST:
        return lambda: Block(*_allocate(dev, stream, size, nbytes), None)
    free = _kept.setdefault((dev.device_id, size), [])  # never removed: the list found here stays the one kept

    def take() -> Block:
        if free:
            try:
                buffer, ptr = free.pop()
            except IndexError:  # another thread took the last one
                pass
            else:
                b = _new(Block)  # Block(buffer, ptr, free) without the call of its __init__
                b.buffer, b.ptr, b.free = buffer, ptr, free
                return b
        return Block(*_allocate(dev, stream, size, nbytes), free)
    return take


def _allocate(dev: Any, stream: Any, size: int, nbytes: int) -> tuple[Any, int]:
    """(a new cuda.core buffer of ``size`` bytes, its address); where the device is full, tried again once the kept
    blocks are freed (errors name ``nbytes``, the array's size)."""
    try:
        return new_buffer(dev, stream, size, nbytes)
    except CudaOutOfMemoryError:
        if not empty_cache():
            raise
    return new_buffer(dev, stream, size, nbytes)


def new_buffer(dev: Any, stream: Any, size: int, nbytes: int, what: str = "{} bytes") -> tuple[Any, int]:
    """(a new cuda.core buffer of ``size`` bytes on ``stream``, its address); errors name ``what.format(nbytes)``."""
    try:
        if device_count() == 1:  # no other context to switch to (see on_device)
            buffer = dev.allocate(size, stream=stream)
        else:
            with on_device(dev.device_id):
                buffer = dev.allocate(size, stream=stream)
    except CudnnPyError:
        raise
    except Exception as e:  # noqa: BLE001 - cuda.core's CUDAError: out of memory, mostly
        raise cuda_error_from(e, "allocate", f"{what.format(nbytes)} on device {dev.device_id}") from e
    return buffer, int(buffer.handle)


def empty_cache() -> int:
    """Free the device blocks kept for reuse (ordered on their stream), so that other libraries can have the memory
    (as ``torch.cuda.empty_cache()`` does torch's); returns how many bytes were kept."""
    freed = 0
    for (_, size), free in list(_kept.items()):
        while free:
            try:
                buffer, _ = free.pop()
            except IndexError:  # another thread took the last one
                break
            try:
                _close(buffer)
            except Exception as e:  # noqa: BLE001 - cuda.core's CUDAError
                raise cuda_error_from(e, "free", f"a kept block of {size} bytes") from e
            freed += size
    return freed
