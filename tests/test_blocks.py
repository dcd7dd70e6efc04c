"""The device blocks kept for reuse on the default stream (``core/blocks.py``), with a stand-in device and streams."""
import gc
import types

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.core import blocks, contexts, memory as M


class Buffer:
    """A cuda.core buffer stand-in: its address, whether it was freed."""
    made = 0

    def __init__(self, size):
        Buffer.made += 1
        self.handle, self.size, self.device_id, self.closed = 4096 * Buffer.made, size, 0, False

    def close(self):
        self.closed = True


class Device:
    device_id = 0

    def __init__(self, room=1 << 40):
        self.room, self.made = room, []

    def allocate(self, n, stream=None):
        if n > self.room - sum(b.size for b in self.made if not b.closed):
            raise RuntimeError("CUDA_ERROR_OUT_OF_MEMORY: out of memory")
        self.made.append(Buffer(n))
        return self.made[-1]


LEGACY, OTHER = types.SimpleNamespace(handle=1), types.SimpleNamespace(handle=0x7000)


@pytest.fixture
def dev(monkeypatch, kept_blocks):
    """A stand-in device of 1 TiB, the only one (the one ``memory.Output`` binds to); no blocks kept before the
    test."""
    monkeypatch.setattr(contexts, "_DEVICE_COUNT", [1])
    d = Device()
    monkeypatch.setattr(M, "get_device", lambda device=None: d)
    monkeypatch.setattr(M, "as_stream", lambda stream, device=None: stream)
    return d


def new(dev, nbytes, stream=LEGACY):
    return M.Output((nbytes // 4,), np.float32).on(stream, dev)


def test_a_collected_arrays_block_is_taken_by_the_next_of_its_size_on_the_default_stream(dev):
    """The next array of the same rounded size on the default stream gets the freed block without an allocation;
    another size class allocates; nothing kept is freed."""
    a = new(dev, 40)
    ptr = a.ptr
    assert [b.size for b in dev.made] == [blocks.GRAIN]  # 40 bytes, rounded up
    del a
    b = new(dev, 400)  # the same size class
    assert b.ptr == ptr and len(dev.made) == 1
    c = new(dev, 800)
    assert c.ptr != b.ptr and len(dev.made) == 2 and not any(x.closed for x in dev.made)


def test_another_stream_and_a_large_array_neither_take_nor_keep_blocks(dev):
    """A stream other than the legacy default one (which could be captured, or go away) allocates though a block of
    its size is kept, and its block is freed when collected; so is a block over LARGEST bytes."""
    assert blocks.keeps(LEGACY) and blocks.keeps(types.SimpleNamespace(handle=0)) and not blocks.keeps(OTHER)
    new(dev, 16)  # kept once collected
    a, big = new(dev, 16, OTHER), new(dev, blocks.LARGEST + 4)
    assert len(dev.made) == 3
    del a, big
    assert [x.closed for x in dev.made] == [False, True, True]


def test_blocks_beyond_per_size_are_freed_and_empty_cache_frees_the_rest(dev):
    arrays = [new(dev, 16) for _ in range(blocks.PER_SIZE + 1)]
    del arrays
    gc.collect()
    assert sum(x.closed for x in dev.made) == 1
    assert cudnn.empty_cache() == blocks.PER_SIZE * blocks.GRAIN
    assert all(x.closed for x in dev.made) and cudnn.empty_cache() == 0


def test_a_full_device_frees_the_kept_blocks_and_tries_again(dev):
    dev.room = 4 * blocks.GRAIN
    kept = [new(dev, 16) for _ in range(3)]
    del kept
    big = new(dev, 2048)  # fits once the 3 kept blocks are freed
    assert big.ptr and [x.closed for x in dev.made[:3]] == [True] * 3
    with pytest.raises(cudnn.CudaOutOfMemoryError, match="4000 bytes on device 0"):
        new(dev, 4000)


def test_a_failed_free_is_a_cudnn_py_error_naming_the_block(dev):
    a = new(dev, 16)
    del a

    def fail():
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")
    dev.made[0].close = fail
    with pytest.raises(cudnn.CudaError, match=r"free failed.*a kept block of 512 bytes"):
        cudnn.empty_cache()
