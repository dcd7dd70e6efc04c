"""The generator of ``cudnn_py.capi`` (``python -m cudnn_py.codegen``): ``parse`` reads the cuDNN headers into a
``model``, ``emit`` writes one module per header plus the face (``capi/__init__.py``), ``backend_attributes`` the
graph API's attribute table. Needs ``pycparser`` and ``cpp``; the CUDA headers are replaced by the stand-ins in
``include_stubs/``, so no CUDA toolkit is needed.
"""
from __future__ import annotations

from pathlib import Path

#: the stand-ins for cuda_runtime_api.h, library_types.h, stdint.h and stddef.h
STUBS = Path(__file__).resolve().parents[2] / "include_stubs"


def generate(include_dir: Path, out_dir: Path, stubs: Path = STUBS) -> tuple[str, list[Path]]:
    """Read the headers in ``include_dir`` and write the capi modules to ``out_dir``; returns (version, paths)."""
    from . import emit, parse  # pycparser is needed here only: the tables (lengths, nonnull) import without it
    version, headers = parse.read_headers(include_dir, stubs)
    paths = emit.write(version, headers, Path(out_dir))
    return version, paths + [emit.write_backend_attributes(version, Path(include_dir) / "cudnn_graph.h",
                                                           Path(out_dir))]
