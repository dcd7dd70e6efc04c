"""Shared fixtures. Tests marked ``gpu`` skip where no GPU is visible, unless CUDNN_PY_REQUIRE_GPU=1 (then they run and fail)."""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest


@functools.cache
def gpu_missing_reason() -> str:
    """Why no GPU can be used here ('' when one can)."""
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuInit failed: {err.name}"
        _, count = driver.cuDeviceGetCount()
        return "" if count else "the CUDA driver sees no GPU"
    except Exception:  # no driver library at all
        return "no CUDA driver on this machine"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("CUDNN_PY_REQUIRE_GPU") == "1" or not gpu_missing_reason():
        return
    skip = pytest.mark.skip(reason=f"needs a GPU ({gpu_missing_reason()})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def handle():
    """One cuDNN handle on GPU 0 for the whole session."""
    from cudnn_py.handle import Handle
    with Handle() as h:
        yield h


@pytest.fixture
def rng():
    """A fresh random generator per test, seeded from the OS (the seed is printed when a test fails)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)
