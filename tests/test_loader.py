"""Finding libcudnn: overrides, the report of what was tried, the loaded version."""
from __future__ import annotations

import pytest

from cudnn_py.clib import loader as _loader
from cudnn_py import capi, library
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
    assert "pathfinder searched" in msg and "system loader" in msg and "[cu12]" in msg and "[cu13]" in msg


def test_override_pointing_at_the_real_library_loads_it(tmp_path):
    real = library().path
    lib = _loader.locate({"CUDNN_PY_LIBRARY": real})
    assert lib.found_via == "$CUDNN_PY_LIBRARY" and lib.version == library().version
    from pathlib import Path
    lib = _loader.locate({"CUDNN_PY_LIBRARY": str(Path(real).parent)})
    assert lib.path == str(Path(real).parent / "libcudnn.so.9")


_PROBE = r"""
import json, sys
from cudnn_py.clib import loader as _loader
from cudnn_py.errors import LibraryNotFoundError
out = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        _loader.locate({"CUDNN_PY_LIBRARY": path})
        out[name] = "loaded"
    except LibraryNotFoundError as e:
        out[name] = str(e)
print(json.dumps(out))
"""


def test_override_refuses_files_that_are_not_a_complete_cudnn(tmp_path):
    """A truncated libcudnn (SIGBUS on dlopen before the check), another shared library, a text file: each is refused
    with the reason, in a subprocess so that a regression shows as a failure rather than killing pytest."""
    import ctypes.util
    import json
    import subprocess
    import sys
    from pathlib import Path

    real = Path(library().path).read_bytes()
    cases = {}
    for name, cut in (("truncated_half", len(real) // 2), ("truncated_tail", len(real) - 4096),
                      ("header_only", 64), ("empty", 0)):
        p = tmp_path / f"{name}.so.9"
        p.write_bytes(real[:cut])
        cases[name] = str(p)
    text = tmp_path / "notes.so.9"
    text.write_text("not a library\n" * 10)
    cases["text"] = str(text)
    libz = ctypes.util.find_library("z")
    if libz:
        import os
        found = [os.path.join(d, libz) for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                                                 "/usr/lib64", "/usr/lib") if os.path.exists(os.path.join(d, libz))]
        if found:
            cases["libz"] = found[0]
    p = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(cases)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"the loader probe died (status {p.returncode}): {p.stderr[-2000:]}"
    got = json.loads(p.stdout.strip().splitlines()[-1])
    for name in ("truncated_half", "truncated_tail"):
        assert "truncated" in got[name] and cases[name] in got[name], got[name]
    assert "not an ELF" in got["header_only"] or "truncated" in got["header_only"]
    assert "not an ELF" in got["empty"] and "not an ELF" in got["text"]
    if "libz" in got:
        assert "not cuDNN" in got["libz"] and "cudnnGetVersion" in got["libz"]


class _FakeVersion:
    """Stands in for a loaded library's ``cudnnGetVersion`` (the loader sets ``restype``, then calls it)."""

    def __init__(self, value: int):
        self.value, self.restype = value, None

    def __call__(self) -> int:
        return self.value


@pytest.mark.parametrize("value,why", [(91000, "older than the oldest cudnn_py supports (9.14.0)"),
                                       (91399, "9.13.99, older"), (90000, "9.0.0, older"),
                                       (80907, "cuDNN 8.9.7; cudnn_py needs cuDNN 9"),
                                       (100100, "cuDNN 10.1.0; cudnn_py needs cuDNN 9")])
def test_library_outside_the_supported_range_is_refused_at_load(value, why):
    import types
    with pytest.raises(OSError, match=why.replace("(", r"\(").replace(")", r"\)")) as e:
        fake = types.SimpleNamespace(cudnnGetVersion=_FakeVersion(value))
        _loader.check_version(_loader._get_version(fake), "/x/libcudnn.so.9")
    assert "/x/libcudnn.so.9" in str(e.value)


def test_refused_old_library_is_reported_with_what_was_tried(monkeypatch, tmp_path):
    """Through CUDNN_PY_LIBRARY: the report names the file and why it was refused, and nothing else is tried."""
    real = library().path
    monkeypatch.setattr(_loader, "MIN_VERSION", (9, library().version[1] + 1, 0))
    with pytest.raises(LibraryNotFoundError) as e:
        _loader.locate({"CUDNN_PY_LIBRARY": real})
    assert real in str(e.value) and "older than the oldest cudnn_py supports" in str(e.value)


def test_supported_range_names_the_oldest_and_the_headers():
    assert _loader.MIN_VERSION <= library().version
    text = _loader.supported_range()
    assert text.startswith("9.14.0 to 9.%d" % capi.CUDNN_MINOR)
    for v in ((9, 14, 0), (9, 19, 0), (9, 28, 0), (9, 99, 0)):  # the GPU machine's, the wheel's, newer ones
        _loader.check_version(v, "x")


def test_info_states_the_supported_range():
    from cudnn_py.cli import info
    collected = info.collect()
    assert collected["supported_cudnn"] == _loader.supported_range()
    assert f"supported     cuDNN {_loader.supported_range()}" in info.format_text(collected)


def test_system_loader_finds_the_library_on_the_search_path_and_names_its_file():
    """Without a path (the system loader, and cuda.pathfinder's system-loader result), the file is read back from the
    process's memory map and checked like any other."""
    import os
    import subprocess
    import sys
    folder = os.path.dirname(library().path)
    code = "from cudnn_py import _loader; l = _loader._open(None, 'system loader'); print(l.path, l.version_string)"
    env = dict(os.environ, LD_LIBRARY_PATH=folder)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [os.path.realpath(library().path), library().version_string]
