"""Find and load ``libcudnn.so.9``, saying what was tried when it is not there. Search order: ``CUDNN_PY_LIBRARY``
(the file, or a folder holding it), else ``CUDNN_PATH`` (an install root: ``lib/``, ``lib64/``), either alone when
set; else cuda.pathfinder (the nvidia-cudnn wheels, conda, the system loader); else the system loader. A file must be
a complete 64-bit ELF shared library before ``dlopen`` (a truncated one would kill the process with SIGBUS) and
report cuDNN 9 through ``cudnnGetVersion`` after it; one that fails is listed with the reason.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from cudnn_py.clib.install import driver_extras
from cudnn_py.errors import LibraryNotFoundError

SONAME = "libcudnn.so.9"
INSTALL_HINT = (f"install cudnn-py with the extra for your driver: {driver_extras()}; or point CUDNN_PY_LIBRARY at "
                f"{SONAME}")


@dataclass(frozen=True)
class Library:
    """The loaded cuDNN: where it came from and its ctypes handle."""
    path: str
    found_via: str
    cdll: ctypes.CDLL

    @property
    def version(self) -> tuple[int, int, int]:
        """(major, minor, patch) reported by the library itself (``cudnnGetVersion``)."""
        return _get_version(self.cdll)

    @property
    def version_string(self) -> str:
        return "%d.%d.%d" % self.version


def _candidates_in(folder: Path) -> list[Path]:
    return [folder / SONAME, folder / "lib" / SONAME, folder / "lib64" / SONAME,
            folder / "lib" / "x86_64-linux-gnu" / SONAME]


_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_PT_LOAD = 1


def check_elf(path: str) -> None:
    """Refuse (:class:`OSError` saying why) a file that is not a complete 64-bit shared library for this machine:
    the ELF magic, class, byte order and type, and that the headers and every loadable segment lie inside the file."""
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != _ELF_MAGIC:
                raise OSError(f"{path} is not an ELF shared library ({size} bytes, starts with {head[:4]!r})")
            if head[4] != 2:
                raise OSError(f"{path} is a 32-bit ELF file; this Python needs a 64-bit library")
            endian = {1: "<", 2: ">"}.get(head[5])
            if endian != ("<" if sys.byteorder == "little" else ">"):
                raise OSError(f"{path} is an ELF file for another byte order")
            (e_type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize,
             shnum, _shstrndx) = struct.unpack(endian + "HHIQQQIHHHHHH", head[16:64])
            if e_type != _ET_DYN:
                raise OSError(f"{path} is an ELF file of type {e_type}, not a shared library (type {_ET_DYN})")
            if phnum == 0 or phentsize < 56 or phoff + phentsize * phnum > size:
                raise OSError(f"{path} is truncated or corrupt: its program headers ({phnum} x {phentsize} bytes at "
                              f"{phoff}) do not fit in its {size} bytes")
            if shoff + shentsize * shnum > size:
                raise OSError(f"{path} is truncated: its section header table ends at byte "
                              f"{shoff + shentsize * shnum} of a {size}-byte file")
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                p_type, _pflags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(
                    endian + "IIQQQQ", table, i * phentsize)
                if p_type == _PT_LOAD and p_offset + p_filesz > size:
                    raise OSError(f"{path} is truncated: segment {i} needs bytes up to {p_offset + p_filesz} of a "
                                  f"{size}-byte file")
    except struct.error as e:
        raise OSError(f"{path} is a corrupt ELF file ({e})") from None


#: the oldest cuDNN cudnn_py supports (its GPU suite runs against it); later features are gated where used
MIN_VERSION = (9, 14, 0)


def supported_range() -> str:
    """The supported cuDNN versions in words, from :data:`MIN_VERSION` to the headers the C layer was made from."""
    from cudnn_py.capi import version as v
    return (f"{'.'.join(map(str, MIN_VERSION))} to {v.CUDNN_MAJOR}.{v.CUDNN_MINOR} (the headers the C layer was "
            f"generated from; a newer 9.x loads, without bindings for what it adds)")


def _get_version(cdll: ctypes.CDLL) -> tuple[int, int, int]:
    """(major, minor, patch) of ``cdll``'s ``cudnnGetVersion()`` (AttributeError: it has none)."""
    fn = cdll.cudnnGetVersion
    fn.restype = ctypes.c_size_t
    v = fn()
    return v // 10000, v // 100 % 100, v % 100


def check_version(got: tuple[int, int, int], path: str) -> None:
    """Refuse, with :class:`OSError` saying why, a version outside cuDNN 9 or below :data:`MIN_VERSION`."""
    if got[0] != 9:
        raise OSError(f"{path} is cuDNN {'.'.join(map(str, got))}; cudnn_py needs cuDNN 9")
    if got < MIN_VERSION:
        raise OSError(f"{path} is cuDNN {'.'.join(map(str, got))}, older than the oldest cudnn_py supports "
                      f"({'.'.join(map(str, MIN_VERSION))}): install a newer cuDNN (the nvidia-cudnn wheels) or "
                      f"point CUDNN_PY_LIBRARY at one")


def _open(path: str | None, found_via: str) -> Library:
    """The cuDNN at ``path`` (None: the system loader's), refused with :class:`OSError` unless a supported cuDNN 9."""
    if path is not None:
        check_elf(path)
    cdll = ctypes.CDLL(path or SONAME, mode=ctypes.RTLD_GLOBAL)
    path = path or _loaded_path(cdll)
    try:
        check_version(_get_version(cdll), path)
    except AttributeError:
        raise OSError(f"{path} loaded but is not cuDNN: it has no cudnnGetVersion symbol") from None
    return Library(path, found_via, cdll)


def _loaded_path(cdll: ctypes.CDLL) -> str:
    """The file a handle was loaded from, read from the process's memory map."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/maps").read_text().splitlines():
            if line.endswith(SONAME) or "/libcudnn.so.9." in line:
                return line.split(maxsplit=5)[-1]
    return cdll._name


def locate(environ: dict[str, str] | None = None) -> Library:
    """Search for libcudnn as the module docstring says; raise :class:`LibraryNotFoundError` listing every try."""
    env = os.environ if environ is None else environ
    tried: list[str] = []

    # CUDNN_PY_LIBRARY: a folder is searched; anything else is the file (a missing one is reported as missing)
    for var, paths in (("CUDNN_PY_LIBRARY", lambda v: _candidates_in(v) if v.is_dir() else [v]),
                       ("CUDNN_PATH", _candidates_in)):
        value = env.get(var)
        if value:
            for p in paths(Path(value)):
                if not p.is_file():
                    tried.append(f"${var}: {p} (no such file)")
                    continue
                try:
                    return _open(str(p), f"${var}")
                except OSError as e:
                    tried.append(f"${var}: {p} ({e})")
            raise LibraryNotFoundError(_report(tried, f"${var} is set, so nothing else was tried"))

    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        dl = load_nvidia_dynamic_lib("cudnn")
        return _open(dl.abs_path or None, f"cuda.pathfinder ({dl.found_via})")
    except ImportError:
        tried.append("cuda.pathfinder: not installed")
    except Exception as e:  # pathfinder's not-found errors already list the places it searched
        tried.append(f"cuda.pathfinder: {_pathfinder_failure(e)}")

    try:
        return _open(None, "system loader")
    except OSError as e:
        tried.append(f"system loader: {SONAME} ({e})")
    raise LibraryNotFoundError(_report(tried, INSTALL_HINT))


def _pathfinder_failure(e: Exception) -> str:
    """What cuda.pathfinder's failure means for cuDNN: with no cuDNN wheel its error names only the first
    dependency it missed (libcublasLt), so the missing cuDNN is said first."""
    text = str(e).strip()
    if "cudnn" in text.lower():
        return text
    try:
        import importlib.util
        wheel = importlib.util.find_spec("nvidia.cudnn") is not None
    except ImportError:  # no nvidia.* package at all
        wheel = False
    return text if wheel else f"no cuDNN wheel (nvidia-cudnn-cu12 / -cu13) is installed; its search stopped " \
                              f"earlier, at a library cuDNN needs ({text.split(': ', 1)[0]})"


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
