"""Shared fixtures. Tests marked ``gpu`` skip where no GPU is visible, unless CUDNN_PY_REQUIRE_GPU=1 (then they run and fail)."""
from __future__ import annotations

import collections
import functools
import gc
import os
from pathlib import Path

import numpy as np
import pytest

# every gpu-marked test runs with each device allocation poisoned (NaN / an int sentinel): an output element a call
# never writes, or scratch the library wrongly assumes zeroed, fails the comparison instead of passing on stale data
pytest_plugins = ["poison_plugin"]

# what the tests measure (algo="fastest", engine="auto") stays in each test process: cudnn_py.tuning's default
# database in memory, never the user's tuning database nor shared between parallel shards
os.environ.setdefault("CUDNN_PY_TUNING_DB", ":memory:")


@functools.cache
def gpu_missing_reason(device: int = 0) -> str:
    """Why CUDA device ``device`` cannot be used here ('' when it can): the library's own check."""
    from cudnn_py.core.streams import missing_device
    err = missing_device(device)
    return "" if err is None else err.text.split(";")[0]  # the reason, without the advice after it


def pytest_collection_modifyitems(config, items):
    _fuzz_last(items)
    _keep_shard(config, items)
    why_not_two = gpu_missing_reason(1)
    if why_not_two:
        skip_multi = pytest.mark.skip(reason=f"needs two or more GPUs ({why_not_two})")
        for item in items:
            if "multi_gpu" in item.keywords:
                item.add_marker(skip_multi)
    why = gpu_missing_reason()
    if os.environ.get("CUDNN_PY_REQUIRE_GPU") == "1" or not why:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU ({why})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_teststatus(report, config):
    """A skipped test prints no letter in the progress line (the summary below counts them by reason)."""
    if report.skipped and not hasattr(report, "wasxfail") and config.get_verbosity() <= 0:
        return "skipped", "", "SKIPPED"
    return None


def pytest_terminal_summary(terminalreporter):
    """One line for every skip: how many, by reason (``-rs`` still lists them one by one)."""
    reasons: collections.Counter[str] = collections.Counter()
    for rep in terminalreporter.stats.get("skipped", []):
        if not hasattr(rep, "wasxfail"):
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.write_line(f"skipped {sum(reasons.values())}: "
                                    + "; ".join(f"{n} {why}" for why, n in reasons.most_common()))


_FUZZ = Path(__file__).resolve().parent / "fuzz"


def _fuzz_last(items) -> None:
    """The fuzz campaign (tests/fuzz: a minute or more, in subprocesses) runs after every other test, so that
    ``pytest -q`` shows progress from its first seconds; nothing else changes order."""
    items.sort(key=lambda item: _FUZZ in Path(item.path).parents)


def _keep_shard(config, items) -> None:
    """CUDNN_PY_SHARD=i/n keeps every n-th collected test starting at the i-th (tools/gpu_suite.py runs n at once)."""
    shard = os.environ.get("CUDNN_PY_SHARD")
    if not shard:
        return
    i, n = (int(v) for v in shard.split("/"))
    config.hook.pytest_deselected(items=[it for k, it in enumerate(items) if k % n != i])
    items[:] = [it for k, it in enumerate(items) if k % n == i]


@pytest.fixture(scope="session")
def handle():
    """One cuDNN handle on GPU 0 for the whole session."""
    from cudnn_py.core.handle import Handle
    with Handle() as h:
        yield h


@pytest.fixture
def rng():
    """A fresh random generator per test, seeded from the OS (the seed is printed when a test fails)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def tensor():
    """A raw C tensor descriptor (``cudnnTensorDescriptor_t``), destroyed after the test."""
    from ctypes import byref
    from cudnn_py import capi
    d = capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateTensorDescriptor(byref(d))
    yield d
    capi.cudnnDestroyTensorDescriptor(d)


@pytest.fixture
def kept_blocks(monkeypatch):
    """An empty store of kept device blocks (``core/blocks.py``) for a test whose arrays are stand-ins, dropped after
    it with what the test's arrays left there."""
    from cudnn_py.core import blocks
    gc.collect()
    monkeypatch.setattr(blocks, "_kept", {})
    yield blocks
    gc.collect()
