"""``cudnn-py info``: which cuDNN was loaded, from where, built for what, the driver, the GPUs, and whether they fit.

``--json`` prints the same as one JSON object.
"""
from __future__ import annotations

import argparse
import json
import platform
from importlib import metadata
from typing import Any

from cudnn_py.clib.install import driver_extras, pip_install
from cudnn_py.tuning_records.fingerprint import cuda_version_text, driver_and_gpus

from . import HelpFormatter

_PACKAGES = ("cudnn-py", "cuda-bindings", "cuda-core", "cuda-pathfinder", "cuda-python", "numpy", "ml_dtypes",
             "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime")
_SUBLIBRARIES = ("cudnnGraphVersionCheck", "cudnnOpsVersionCheck", "cudnnCnnVersionCheck", "cudnnAdvVersionCheck")
#: the oldest Linux driver of each CUDA major (from NVIDIA's CUDA release notes)
_MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``info`` and its flags."""
    p = sub.add_parser("info", help="cuDNN version and path, driver, GPUs, packages, and whether they fit together",
                       description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")


def _installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _major(version: str | None) -> int | None:
    try:
        return int(version.split(".")[0]) if version else None
    except ValueError:
        return None


def fit_warnings(info: dict[str, Any]) -> list[str]:
    """One sentence per thing that does not fit together in :func:`collect`'s ``info``: the driver, cuda-bindings,
    cuDNN and the GPUs."""
    warnings = []
    pk = info["packages"]
    driver_major = _major(info["driver"]["cuda_version"])
    bindings_major = _major(pk.get("cuda-bindings"))
    cudnn = info.get("cudnn") or {}
    cudnn_major = _major(cudnn.get("cuda_runtime"))
    if pk.get("nvidia-cudnn-cu12") and pk.get("nvidia-cudnn-cu13"):
        warnings.append("both nvidia-cudnn-cu12 and nvidia-cudnn-cu13 are installed; keep the one that matches "
                        f"your driver ({driver_extras()} installs one set)")
    if bindings_major and cudnn_major and bindings_major != cudnn_major:
        warnings.append(f"mixed CUDA majors: cuda-bindings {pk['cuda-bindings']} is CUDA {bindings_major} but this "
                        f"cuDNN was built for CUDA {cudnn_major}; install one set: {pip_install(f'cu{cudnn_major}')} "
                        "in a fresh environment")
    for what, major in ((f"cuda-bindings {pk.get('cuda-bindings')}", bindings_major),
                        (f"cuDNN {cudnn.get('version')} (CUDA {cudnn.get('cuda_runtime')})", cudnn_major)):
        if driver_major and major and major > driver_major:
            warnings.append(f"{what} needs a CUDA {major} driver ({_MIN_DRIVER.get(major, 'newer')} or newer) but "
                            f"the driver supports CUDA {info['driver']['cuda_version']}: update the driver or "
                            f"install {pip_install(f'cu{driver_major}')}")
    max_sm = cudnn.get("max_sm")
    for gpu in info["driver"]["gpus"]:
        if max_sm and gpu["sm"] > max_sm:
            warnings.append(f"GPU {gpu['index']} ({gpu['name']}, sm_{gpu['sm']}) is newer than this cuDNN "
                            f"supports (up to sm_{max_sm}): install a newer cuDNN")
    return warnings


def collect() -> dict[str, Any]:
    """Everything ``info`` reports: ``{"python", "cudnn" (None when not found), "cudnn_error", "supported_cudnn"
    (the range, in words), "packages", "driver", "warnings"}``."""
    from .. import capi
    from cudnn_py.clib.loader import library, supported_range
    from ..errors import CudnnError, CudnnPyError, LibraryNotFoundError

    info: dict[str, Any] = {"python": f"{platform.python_version()} ({platform.machine()})", "cudnn": None,
                            "cudnn_error": "", "supported_cudnn": supported_range()}
    try:
        lib = library()
    except LibraryNotFoundError as e:
        info["cudnn_error"] = str(e)
    else:
        checks = {}
        for name in _SUBLIBRARIES:
            try:
                getattr(capi, name)()
                checks[name[5:-12].lower()] = "ok"
            except CudnnError as e:
                checks[name[5:-12].lower()] = getattr(e.status, "name", str(int(e.status)))
            except CudnnPyError as e:  # a function this library does not export
                checks[name[5:-12].lower()] = str(e)
        info["cudnn"] = {"version": lib.version_string, "headers": capi.HEADERS_VERSION, "path": lib.path,
                         "found_via": lib.found_via, "cuda_runtime": cuda_version_text(capi.cudnnGetCudartVersion()),
                         "max_sm": capi.cudnnGetMaxDeviceVersion() // 10, "sublibraries": checks}
    info["packages"] = {p: v for p in _PACKAGES if (v := _installed(p))}
    info["driver"] = driver_and_gpus()
    info["warnings"] = fit_warnings(info)
    return info


def format_text(info: dict[str, Any]) -> str:
    """The text report of :func:`collect`'s ``info``."""
    pad = "\n" + " " * 14
    lines = [f"Python        {info['python']}"]
    c = info["cudnn"]
    if c is None:
        lines.append("cuDNN         not found" + "".join(pad + line for line in info["cudnn_error"].splitlines()))
    else:
        subs = ", ".join(f"{k} {'ok' if v == 'ok' else 'FAILED (' + v + ')'}" for k, v in c["sublibraries"].items())
        lines += [f"cuDNN         {c['version']}  (bindings generated from the {c['headers']} headers)",
                  f"  library     {c['path']}",
                  f"  found via   {c['found_via']}",
                  f"  built with  CUDA runtime {c['cuda_runtime']}; GPUs up to sm_{c['max_sm']}",
                  f"  sublibs     {subs}"]
    if info.get("supported_cudnn"):
        lines.append(f"supported     cuDNN {info['supported_cudnn']}")
    lines.append("packages      " + ", ".join(f"{p} {v}" for p, v in info["packages"].items()))
    d = info["driver"]
    driver = "none" if "cuda-bindings" in info["packages"] else "not asked (needs cuda-bindings)"
    lines.append(f"driver        {'CUDA ' + d['cuda_version'] if d['cuda_version'] else driver}")
    if d["gpus"]:
        lines.append("GPUs          " + pad.join(f"{g['index']}: {g['name']} (sm_{g['sm']}, {g['memory_gib']:.1f} GiB)"
                                                  for g in d["gpus"]))
    else:
        without = ("Without a GPU cudnn_py still loads cuDNN, creates," if c else
                   "Once cuDNN is found, cudnn_py without a GPU creates,")
        lines.append(f"GPUs          none visible: {d['why_none']}." + pad + without +
                     " sets and reads the legacy descriptors" + pad +
                     "(tensor, filter, convolution, pooling, ...), computes output shapes, and creates and sets" + pad +
                     "backend (graph) descriptors; finalizing them, building graphs and running anything need a GPU.")
    for w in info["warnings"]:
        lines.append(f"warning       {w}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the report (JSON with ``args.json``); the exit status is 1 when no cuDNN was found."""
    info = collect()
    print(json.dumps(info, indent=1) if args.json else format_text(info))
    return 1 if info["cudnn"] is None else 0

