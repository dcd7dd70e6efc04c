"""Finding libcudnn: overrides, the report of what was tried, the loaded version."""
from __future__ import annotations

import pytest

from cudnn_py import _loader, capi, library
from cudnn_py.errors import LibraryNotFoundError


def test_loaded_library_reports_path_and_version():
    lib = library()
    assert lib.path.endswith(".so.9") or ".so.9." in lib.path
    assert lib.version == (capi.cudnnGetVersion() // 10000, capi.cudnnGetVersion() // 100 % 100,
                           capi.cudnnGetVersion() % 100)
    assert lib.version[0] == 9


def test_missing_override_lists_what_was_tried(tmp_path):
    missing = tmp_path / "nowhere" / "libcudnn.so.9"
    with pytest.raises(LibraryNotFoundError) as e:
        _loader.locate({"CUDNN_PY_LIBRARY": str(missing)})
    msg = str(e.value)
    assert str(missing) in msg and "CUDNN_PY_LIBRARY" in msg and "nothing else was tried" in msg


def test_missing_cudnn_path_lists_every_candidate(tmp_path):
    with pytest.raises(LibraryNotFoundError) as e:
        _loader.locate({"CUDNN_PATH": str(tmp_path)})
    msg = str(e.value)
    for sub in ("lib/libcudnn.so.9", "lib64/libcudnn.so.9"):
        assert str(tmp_path / sub) in msg


def test_nothing_found_says_how_to_install(monkeypatch):
    monkeypatch.setattr(_loader, "SONAME", "libcudnn_does_not_exist.so.9")
    import cuda.pathfinder
    monkeypatch.setattr(cuda.pathfinder, "load_nvidia_dynamic_lib", lambda name: (_ for _ in ()).throw(
        RuntimeError("pathfinder searched site-packages and the system")))
    with pytest.raises(LibraryNotFoundError) as e:
        _loader.locate({})
    msg = str(e.value)
    assert "pathfinder searched" in msg and "system loader" in msg and "pip install nvidia-cudnn-cu12" in msg


def test_override_pointing_at_the_real_library_loads_it(tmp_path):
    real = library().path
    lib = _loader.locate({"CUDNN_PY_LIBRARY": real})
    assert lib.found_via == "$CUDNN_PY_LIBRARY" and lib.version == library().version
    from pathlib import Path
    lib = _loader.locate({"CUDNN_PY_LIBRARY": str(Path(real).parent)})
    assert lib.path == str(Path(real).parent / "libcudnn.so.9")
