"""Install hints that work from where this copy of cudnn-py is (an installed wheel or a checkout): every message
telling the user to install something asks here."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import urllib.parse
from pathlib import Path

__all__ = ["pip_install", "driver_extras", "installed_from", "cuda_major", "torch_install", "missing_cuda",
           "EDITABLE_COMPAT"]

_ROOT = Path(__file__).resolve().parents[2]
#: what every editable install of cudnn-py adds: a plain path in the environment instead of setuptools' import hook,
#: which hides the package from type checkers (mypy: 'Cannot find implementation or library stub')
EDITABLE_COMPAT = "--config-settings editable_mode=compat"


def pip_install(*extras: str) -> str:
    """The pip command adding ``extras`` to this cudnn-py: in a checkout, the checkout editable in compat mode (``.``
    when it is the working directory); for an install from a checkout still there, that checkout (pip's record);
    else the published package."""
    spec = f"[{','.join(extras)}]" if extras else ""
    if (_ROOT / "pyproject.toml").is_file():
        where = "." if Path(os.getcwd()).resolve() == _ROOT else str(_ROOT)
        return f'pip install -e "{where}{spec}" {EDITABLE_COMPAT}'
    source = installed_from()
    if source is not None:
        where = "." if Path(os.getcwd()).resolve() == Path(source).resolve() else source
        return f'pip install "{where}{spec}"'
    return f"pip install 'cudnn-py{spec}'"


@functools.lru_cache(maxsize=None)
def installed_from() -> str | None:
    """The local directory this installed copy of cudnn-py was built from (pip's ``direct_url.json``), when it is
    still a checkout; None for a wheel from an index, an editable install (see :func:`pip_install`) or no record."""
    try:
        from importlib.metadata import distribution
        dist = distribution("cudnn-py")
        if Path(str(dist.locate_file("cudnn_py"))).resolve() != (_ROOT / "cudnn_py").resolve():
            return None  # the metadata of another copy of cudnn-py than this one
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except Exception:  # noqa: BLE001 - no distribution, unreadable metadata: no record
        return None
    url = info.get("url", "") if isinstance(info, dict) else ""
    if not isinstance(url, str) or not url.startswith("file://"):
        return None
    path = urllib.parse.unquote(urllib.parse.urlparse(url).path)
    return path if (Path(path) / "pyproject.toml").is_file() else None


#: PyTorch's package index for each CUDA major (a plain ``pip install torch`` brings the CUDA set of its default
#: build, which need not be the one cudnn-py's extra installed)
TORCH_INDEX = {12: "https://download.pytorch.org/whl/cu128", 13: "https://download.pytorch.org/whl/cu130"}


def cuda_major() -> int | None:
    """The CUDA major of the CUDA packages installed beside cudnn-py (its ``cu12`` / ``cu13`` extra), or None."""
    from importlib.metadata import PackageNotFoundError, version
    for major in (12, 13):
        with contextlib.suppress(PackageNotFoundError):
            version(f"nvidia-cudnn-cu{major}")
            return major
    try:
        return int(version("cuda-bindings").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return None


def torch_install() -> str:
    """How to install PyTorch without a second CUDA set: from PyTorch's index of the CUDA major installed here."""
    major = cuda_major()
    if major in TORCH_INDEX:
        return (f"pip install torch --index-url {TORCH_INDEX[major]} (the CUDA {major} build, matching the "
                f"cu{major} packages cudnn-py uses; a plain `pip install torch` may bring another CUDA major's "
                f"wheels beside them)")
    return ("pip install torch from PyTorch's index of your CUDA major, e.g. --index-url "
            f"{TORCH_INDEX[12]} (CUDA 12) or {TORCH_INDEX[13]} (CUDA 13), after installing cudnn-py with the "
            f"same major's extra: {driver_extras()}")


def driver_extras() -> str:
    """How to install the CUDA set for the user's driver: both extras, each with the driver it needs."""
    return (f"`{pip_install('cu12')}` (CUDA 12 driver, 525+) or `{pip_install('cu13')}` (CUDA 13 driver, 580+); "
            "`nvidia-smi` prints the driver's CUDA version")


def missing_cuda(error: ImportError) -> str:
    """Why cuda.core or cuda-bindings cannot be imported, in one line: the package that is not installed and the pip
    command that installs it (``error``'s own text where both are installed but the import failed)."""
    for module, package in (("cuda.bindings", "cuda-bindings"), ("cuda.core", "cuda-core")):
        try:
            absent = importlib.util.find_spec(module) is None
        except (ImportError, ValueError):  # no cuda namespace package at all; a module set to None in sys.modules
            absent = True
        if absent:
            return f"{package} is not installed; install cudnn-py with the extra for your driver: {driver_extras()}"
    return f"{error}; reinstall cudnn-py with the extra for your driver: {driver_extras()}"
