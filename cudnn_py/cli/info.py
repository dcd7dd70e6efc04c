"""``python -m cudnn_py info``: which cuDNN was loaded, from where, built for what, and which GPUs are seen."""
from __future__ import annotations

import argparse
import platform
from importlib import metadata

from .. import capi
from .._loader import library
from ..errors import CudnnError, LibraryNotFoundError

_PACKAGES = ("cudnn-py", "cuda-bindings", "cuda-core", "cuda-pathfinder", "numpy", "ml_dtypes",
             "nvidia-cudnn-cu12", "nvidia-cudnn-cu13")
_SUBLIBRARIES = ("cudnnGraphVersionCheck", "cudnnOpsVersionCheck", "cudnnCnnVersionCheck", "cudnnAdvVersionCheck")


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("info", help="cuDNN version and path, CUDA versions, packages, GPUs")


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def gpus() -> tuple[list[str], str]:
    """(one line per visible GPU, why none is visible or '')."""
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
    except Exception as e:  # no libcuda on this machine
        return [], f"no CUDA driver was found ({e})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return [], f"the CUDA driver did not start (cuInit: {err.name})"
    _, version = driver.cuDriverGetVersion()
    _, count = driver.cuDeviceGetCount()
    lines = []
    for i in range(count):
        _, dev = driver.cuDeviceGet(i)
        _, name = driver.cuDeviceGetName(64, dev)
        _, major = driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        _, minor = driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        _, mem = driver.cuDeviceTotalMem(dev)
        name = name.split(b"\0")[0].decode()
        lines.append(f"{i}: {name} (sm_{major}{minor}, {mem / 2**30:.1f} GiB, "
                     f"driver CUDA {_cuda_version(version)})")
    return lines, "" if count else "the CUDA driver sees no GPU"


def run(args: argparse.Namespace) -> int:
    print(f"Python        {platform.python_version()} ({platform.machine()})")
    try:
        lib = library()
    except LibraryNotFoundError as e:
        print(f"cuDNN         not found\n{e}")
        return 1
    print(f"cuDNN         {lib.version_string}  (bindings generated from the {capi.HEADERS_VERSION} headers)")
    print(f"  library     {lib.path}")
    print(f"  found via   {lib.found_via}")
    print(f"  built with  CUDA runtime {_cuda_version(capi.cudnnGetCudartVersion())}; "
          f"GPUs up to sm_{capi.cudnnGetMaxDeviceVersion() // 10}")
    checks = []
    for name in _SUBLIBRARIES:
        try:
            getattr(capi, name)()
            checks.append(f"{name[5:-12].lower()} ok")
        except CudnnError as e:
            checks.append(f"{name[5:-12].lower()} FAILED ({e.status.name})")
    print(f"  sublibs     {', '.join(checks)}")
    print("packages      " + ", ".join(f"{p} {metadata.version(p)}" for p in _PACKAGES if _installed(p)))
    lines, why = gpus()
    if lines:
        print("GPUs          " + "\n              ".join(lines))
    else:
        print(f"GPUs          none visible: {why}.\n"
              "              Without a GPU cudnn_py still loads cuDNN, creates, sets and reads descriptors,\n"
              "              computes output shapes and builds backend (graph) descriptors; executing needs a GPU.")
    return 0


def _installed(package: str) -> bool:
    try:
        metadata.version(package)
        return True
    except metadata.PackageNotFoundError:
        return False
