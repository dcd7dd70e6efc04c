"""Find and load ``libcudnn.so.9``; say clearly what was tried when it is not there.

Search order:

1. ``CUDNN_PY_LIBRARY``: the library file itself, or a folder holding it (nothing else is tried);
2. ``CUDNN_PATH``: a cuDNN install root (``lib/``, ``lib64/`` below it; nothing else is tried);
3. cuda.pathfinder: the nvidia-cudnn-cu12 / -cu13 wheels, conda, then the system loader;
4. the system loader (``libcudnn.so.9`` on the default search path).
"""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import LibraryNotFoundError

SONAME = "libcudnn.so.9"
INSTALL_HINT = ("install it with `pip install nvidia-cudnn-cu12` (CUDA 12) or `pip install nvidia-cudnn-cu13` "
                "(CUDA 13), or point CUDNN_PY_LIBRARY at libcudnn.so.9")


@dataclass(frozen=True)
class Library:
    """The loaded cuDNN: where it came from and its ctypes handle."""
    path: str
    found_via: str
    cdll: ctypes.CDLL

    @property
    def version(self) -> tuple[int, int, int]:
        """(major, minor, patch) reported by the library itself (``cudnnGetVersion``)."""
        fn = self.cdll.cudnnGetVersion
        fn.restype = ctypes.c_size_t
        v = fn()
        return v // 10000, v // 100 % 100, v % 100

    @property
    def version_string(self) -> str:
        return "%d.%d.%d" % self.version


def _candidates_in(folder: Path) -> list[Path]:
    return [folder / SONAME, folder / "lib" / SONAME, folder / "lib64" / SONAME,
            folder / "lib" / "x86_64-linux-gnu" / SONAME]


def _open(path: str, found_via: str) -> Library:
    return Library(str(path), found_via, ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))


def _loaded_path(cdll: ctypes.CDLL) -> str:
    """The file a handle was loaded from, read from the process's memory map."""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            if line.endswith(SONAME) or "/libcudnn.so.9." in line:
                return line.split(maxsplit=5)[-1]
    except OSError:
        pass
    return cdll._name


def _try_paths(paths: list[Path], found_via: str, tried: list[str]) -> Library | None:
    for p in paths:
        if not p.is_file():
            tried.append(f"{found_via}: {p} (no such file)")
            continue
        try:
            return _open(str(p), found_via)
        except OSError as e:
            tried.append(f"{found_via}: {p} ({e})")
    return None


def locate(environ: dict[str, str] | None = None) -> Library:
    """Search for libcudnn as the module docstring says; raise :class:`LibraryNotFoundError` listing every try."""
    env = os.environ if environ is None else environ
    tried: list[str] = []

    for var, paths in (("CUDNN_PY_LIBRARY", lambda v: [v] if v.is_file() or v.suffix.startswith(".so") else
                        _candidates_in(v)), ("CUDNN_PATH", _candidates_in)):
        value = env.get(var)
        if value:
            found = _try_paths(paths(Path(value)), f"${var}", tried)
            if found:
                return found
            raise LibraryNotFoundError(_report(tried, f"${var} is set, so nothing else was tried"))

    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        dl = load_nvidia_dynamic_lib("cudnn")
        if dl.abs_path:
            return _open(dl.abs_path, f"cuda.pathfinder ({dl.found_via})")
        cdll = ctypes.CDLL(SONAME, mode=ctypes.RTLD_GLOBAL)
        return Library(_loaded_path(cdll), f"cuda.pathfinder ({dl.found_via})", cdll)
    except ImportError:
        tried.append("cuda.pathfinder: not installed")
    except Exception as e:  # pathfinder's not-found errors already list the places it searched
        tried.append(f"cuda.pathfinder: {e}")

    try:
        cdll = ctypes.CDLL(SONAME, mode=ctypes.RTLD_GLOBAL)
        return Library(_loaded_path(cdll), "system loader", cdll)
    except OSError as e:
        tried.append(f"system loader: {SONAME} ({e})")
    raise LibraryNotFoundError(_report(tried, INSTALL_HINT))


def _report(tried: list[str], advice: str) -> str:
    return "cuDNN (libcudnn.so.9) was not found. Tried:\n" + "".join(f"  - {t}\n" for t in tried) + advice


_lock = threading.Lock()
_library: Library | None = None


def library() -> Library:
    """The process's cuDNN, located and loaded on first use."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                _library = locate()
    return _library
