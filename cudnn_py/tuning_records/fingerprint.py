"""The environment fingerprint a measurement is valid under: cuDNN version, GPU name, compute capability, driver.

Read through the CUDA driver API (no context is created) and cached per device; a process without a GPU gets
``"none"`` in the GPU fields, so records it makes never answer a process that has one.
"""
from __future__ import annotations

import threading
from dataclasses import astuple, dataclass

__all__ = ["Environment", "environment", "cudnn_version_text"]

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


def cudnn_version_text(version: int | tuple | None = None) -> str:
    """``"9.19.0"`` from cuDNN's integer version (``91900``), a ``(major, minor, patch)`` tuple, or (None) the loaded
    library; ``"none"`` when no library can be loaded."""
    if version is None:
        try:
            from cudnn_py.clib.loader import library
            version = library().version
        except Exception:  # noqa: BLE001 - no libcudnn here: the fingerprint says so
            return "none"
    if isinstance(version, int):
        version = (version // 10000, version % 10000 // 100, version % 100)
    return ".".join(str(int(v)) for v in version)


def _gpu(device: int) -> tuple[str, str, str]:
    """(name, compute capability, driver version) of ``device`` through the driver API; ``"none"`` where it fails."""
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return "none", "none", "none"
        _, version = driver.cuDriverGetVersion()
        err, dev = driver.cuDeviceGet(device)
        if err != driver.CUresult.CUDA_SUCCESS:
            return "none", "none", "none"
        _, name = driver.cuDeviceGetName(96, dev)
        attr = driver.CUdevice_attribute
        _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    except Exception:  # noqa: BLE001 - no driver library, no cuda-bindings
        return "none", "none", "none"
    driver_text = f"{version // 1000}.{version % 1000 // 10}"
    return name.split(b"\0")[0].decode(errors="replace"), f"{major}.{minor}", driver_text


def environment(device: int = 0) -> Environment:
    """The fingerprint of CUDA device ``device`` (an ordinal) in this process, computed once."""
    got = _cache.get(device)
    if got is None:
        with _lock:
            got = _cache.get(device)
            if got is None:
                got = _cache[device] = Environment(cudnn_version_text(), *_gpu(device))
    return got
