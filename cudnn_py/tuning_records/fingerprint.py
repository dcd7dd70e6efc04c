"""The environment fingerprint a measurement is valid under: cuDNN version, GPU name, compute capability, driver.

Read through the CUDA driver API (no context is created) and cached per device; a process without a GPU gets
``"none"`` in the GPU fields, so records it makes never answer a process that has one.
"""
from __future__ import annotations

import threading
from dataclasses import astuple, dataclass
from typing import Any

from cudnn_py.clib.install import missing_cuda

__all__ = ["Environment", "environment", "cudnn_version_text", "cuda_version_text", "driver_and_gpus"]

_cache: dict[int, "Environment"] = {}
_lock = threading.Lock()


@dataclass(frozen=True, order=True)
class Environment:
    """What changes a measured answer besides the operation: all four fields are text (``"none"`` when unknown)."""

    cudnn: str    #: the loaded cuDNN, ``"9.19.0"``
    gpu: str      #: the device's name, ``"NVIDIA H200"``
    cc: str       #: compute capability, ``"9.0"``
    driver: str   #: the CUDA driver API version, ``"13.0"``

    def text(self) -> str:
        """One line: ``cuDNN 9.19.0 | NVIDIA H200 | sm 9.0 | driver 13.0``."""
        return f"cuDNN {self.cudnn} | {self.gpu} | sm {self.cc} | driver {self.driver}"

    def fields(self) -> tuple[str, str, str, str]:
        """(cudnn, gpu, cc, driver)."""
        return astuple(self)  # type: ignore[return-value]


def cudnn_version_text() -> str:
    """The loaded cuDNN's version, ``"9.19.0"``; ``"none"`` when no library can be loaded."""
    try:
        from cudnn_py.clib.loader import library
        return library().version_string
    except Exception:  # noqa: BLE001 - no libcudnn here: the fingerprint says so
        return "none"


def cuda_version_text(v: int) -> str:
    """``"13.0"`` from the CUDA driver's or runtime's integer version (``13000``)."""
    return f"{v // 1000}.{v % 1000 // 10}"


def driver_and_gpus() -> dict[str, Any]:
    """The CUDA driver and the GPUs it sees, through the driver API (no context): ``{"cuda_version": "13.0" or None,
    "gpus": [{"index", "name", "sm", "memory_gib"}], "why_none": ''}`` (``why_none``: why no GPU is visible)."""
    out: dict[str, Any] = {"cuda_version": None, "gpus": [], "why_none": ""}
    try:
        from cuda.bindings import driver
    except ImportError as e:
        out["why_none"] = missing_cuda(e)
        return out
    try:
        err, = driver.cuInit(0)
    except Exception:  # noqa: BLE001 - libcuda cannot be loaded
        out["why_none"] = "no NVIDIA driver was found (libcuda.so.1 could not be loaded)"
        return out
    _, version = driver.cuDriverGetVersion()
    if version:
        out["cuda_version"] = cuda_version_text(version)
    if err != driver.CUresult.CUDA_SUCCESS:
        out["why_none"] = f"the CUDA driver did not start (cuInit: {err.name})"
        return out
    _, count = driver.cuDeviceGetCount()
    attr = driver.CUdevice_attribute
    for i in range(count):
        _, dev = driver.cuDeviceGet(i)
        _, name = driver.cuDeviceGetName(96, dev)
        _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        _, mem = driver.cuDeviceTotalMem(dev)
        out["gpus"].append({"index": i, "name": name.split(b"\0")[0].decode(errors="replace"),
                            "sm": major * 10 + minor, "memory_gib": round(mem / 2**30, 1)})
    if not count:
        out["why_none"] = "the CUDA driver sees no GPU (is CUDA_VISIBLE_DEVICES empty?)"
    return out


def _gpu(device: int) -> tuple[str, str, str]:
    """(name, compute capability, driver version) of ``device``; ``"none"`` where the driver has no such GPU."""
    found = driver_and_gpus()
    gpu = next((g for g in found["gpus"] if g["index"] == device), None)
    if gpu is None:
        return "none", "none", "none"
    return gpu["name"], f"{gpu['sm'] // 10}.{gpu['sm'] % 10}", found["cuda_version"] or "none"


def environment(device: int = 0) -> Environment:
    """The fingerprint of CUDA device ``device`` (an ordinal) in this process, computed once."""
    got = _cache.get(device)
    if got is None:
        with _lock:
            got = _cache.get(device)
            if got is None:
                got = _cache[device] = Environment(cudnn_version_text(), *_gpu(device))
    return got
