"""What a new user meets installing and starting: install hints naming the CUDA index and the checkout,
missing libraries named, the tuning database's folder and merges, messages that fit one screen."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import traceback
from pathlib import Path

import numpy as np
import pytest

import cudnn_py
from cudnn_py.clib import loader as _loader
from cudnn_py import capi
from cudnn_py.errors import InvalidTypeError, LibraryNotFoundError
from cudnn_py.tuning import Environment, TuningDatabase, TuningDatabaseError, database


def test_import_cudnn_py_torch_without_torch_names_the_matching_cuda_index():
    code = "import sys; sys.modules['torch'] = None\ntry:\n    import cudnn_py.torch\nexcept ImportError as e:\n" \
           "    print(e)\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--index-url https://download.pytorch.org/whl/cu1" in r.stdout, r.stdout
    assert "(pip install torch)" not in r.stdout


def test_torch_install_follows_the_installed_cuda_major(monkeypatch):
    from cudnn_py.clib import install as _install
    monkeypatch.setattr(_install, "cuda_major", lambda: 13)
    assert "whl/cu130" in _install.torch_install()
    monkeypatch.setattr(_install, "cuda_major", lambda: 12)
    assert "whl/cu12" in _install.torch_install()
    monkeypatch.setattr(_install, "cuda_major", lambda: None)
    hint = _install.torch_install()
    assert "whl/cu12" in hint and "whl/cu130" in hint


def test_a_non_editable_install_from_a_checkout_names_the_checkout(tmp_path, monkeypatch):
    import importlib.metadata
    import json
    from cudnn_py.clib import install as _install
    site = tmp_path / "site-packages"
    (site / "cudnn_py").mkdir(parents=True)
    checkout = tmp_path / "my checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text("[project]\nname = 'cudnn-py'\n")

    class Dist:
        def locate_file(self, name):
            return site / name

        def read_text(self, name):
            assert name == "direct_url.json"
            return json.dumps({"url": checkout.as_uri(), "dir_info": {}})

    monkeypatch.setattr(_install, "_ROOT", site)
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist())
    _install.installed_from.cache_clear()
    try:
        hint = _install.pip_install("cu12")
        assert hint == f'pip install "{checkout}[cu12]"', hint
        checkout.joinpath("pyproject.toml").unlink()  # the checkout is gone: the published package
        _install.installed_from.cache_clear()
        assert _install.pip_install("cu12") == "pip install 'cudnn-py[cu12]'"
    finally:
        _install.installed_from.cache_clear()


def test_no_device_error_keeps_its_cause_in_the_message_not_the_chain():
    code = textwrap.dedent("""
        import traceback, cudnn_py
        from cudnn_py.core.streams import missing_device
        if missing_device(0) is None:
            print("GPU")
            raise SystemExit(0)
        try:
            cudnn_py.Handle()
        except cudnn_py.NoDeviceError as e:
            assert e.__cause__ is None and e.__suppress_context__, (e.__cause__, e.__context__)
            assert "(cause: " in str(e), str(e)
            assert e.cause is not None
            print(len(traceback.format_exception(e)))
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    if r.stdout.strip() == "GPU":
        pytest.skip("a GPU is visible: no NoDeviceError to look at")
    assert int(r.stdout.strip()) < 12, r.stdout  # was 35-39 lines with the chained cuda.pathfinder traceback


def test_readme_no_longer_says_set_tensor_4d_descriptor_warns():
    from cudnn_py import capi
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "`cudnnSetTensor4dDescriptor` is one of the functions cuDNN 9 marks deprecated" not in text
    assert not capi.cudnnSetTensor4dDescriptor.deprecated and not capi.cudnnCreateTensorDescriptor.deprecated
    assert capi.cudnnCreateConvolutionDescriptor.deprecated  # the example the README names instead


ROOT = Path(__file__).resolve().parents[1]


def _python(source: str, **env: str) -> subprocess.CompletedProcess:
    """``python -c source`` as a new user runs it, from the tree under test."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_PY_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**clean, "PYTHONPATH": str(ROOT), **env})


def test_the_fuzz_campaign_runs_after_every_other_test():
    """``pytest -q`` printed nothing for a minute: the fuzz targets (tests/fuzz, collected first) ran first."""
    p = _python("import pytest, sys; sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', "
                "'tests/fuzz/test_fuzz_capi.py', 'tests/test_dtypes.py']))")
    ids = [line for line in p.stdout.splitlines() if "::" in line]
    fuzz = [i for i, t in enumerate(ids) if t.startswith("tests/fuzz/")]
    assert p.returncode == 0 and fuzz and len(fuzz) < len(ids), p.stdout[-2000:]
    assert fuzz == list(range(len(ids) - len(fuzz), len(ids))), ids  # all of them, last, none dropped


def _traceback_lines(e: BaseException) -> int:
    return len("".join(traceback.format_exception(e)).splitlines())


def test_convolution_output_shape_refuses_a_dtype_cudnn_does_not_convolve():
    """int32 reached cuDNN (CUDNN_STATUS_BAD_PARAM without a reason, a 31-line traceback)."""
    with pytest.raises(InvalidTypeError, match="dtype CUDNN_DATA_INT32 is no convolution data type") as e:
        cudnn_py.convolution_output_shape((1, 3, 8, 8), (4, 3, 3, 3), dtype=np.int32)
    assert "compute_dtype" in str(e.value) and _traceback_lines(e.value) <= 8
    for dtype in ("float32", "float64", "float16", "bfloat16", "int8", "uint8"):
        assert cudnn_py.convolution_output_shape((1, 3, 8, 8), (4, 3, 3, 3), dtype=dtype) == (1, 4, 6, 6)


def test_pooling_output_shape_given_a_pooling_points_to_its_method():
    pool = cudnn_py.Pooling("max", window=3)
    with pytest.raises(InvalidTypeError, match=r"not a Pooling: use Pooling.output_shape, here Pooling\(.*\)"
                                               r"\.output_shape\(\(1, 3, 8, 8\)\)"):
        cudnn_py.pooling_output_shape((1, 3, 8, 8), pool)
    assert pool.output_shape((1, 3, 8, 8)) == cudnn_py.pooling_output_shape((1, 3, 8, 8), "max", 3, stride=3)


ENV = Environment("9.19.0", "Test GPU", "9.0", "13.0")


def test_a_refused_merge_creates_no_database(tmp_path):
    """docs/tuning.md's line with a source that is not there: refused, and new.sqlite is not left behind."""
    into = TuningDatabase(tmp_path / "new.sqlite", environment=ENV)
    with pytest.raises(TuningDatabaseError, match="missing.sqlite: no such file to merge from"):
        into.merge(tmp_path / "missing.sqlite")
    assert into.lookup("k", "a") is None and into.count() == 0 and into.records() == []  # reads create nothing
    assert into.integrity_check() == "ok" and list(tmp_path.iterdir()) == []
    into.record("k", "a", {"v": 1})  # the first write creates the file
    assert TuningDatabase(tmp_path / "new.sqlite", environment=ENV).lookup("k", "a") == {"v": 1}
    into.close()
    with pytest.raises(TuningDatabaseError, match="closed"):
        into.count()


def test_a_database_where_no_file_can_be_is_refused(tmp_path):
    with pytest.raises(TuningDatabaseError, match=f"the folder {tmp_path / 'no'} does not exist"):
        TuningDatabase(tmp_path / "no" / "t.sqlite")
    assert not (tmp_path / "no").exists()
    with pytest.raises(TuningDatabaseError, match=r"a directory; name a file, e\.g\. \./tuning\.sqlite"):
        TuningDatabase(".")
    assert list(tmp_path.iterdir()) == []


def test_the_default_database_makes_its_own_folder(tmp_path, monkeypatch):
    """The per-user cache folder is the library's to make (a path the user gives is not)."""
    monkeypatch.setattr(database, "_default", [None])
    monkeypatch.delenv("CUDNN_PY_TUNING_DB", raising=False)
    monkeypatch.delenv("CUDNN_PY_PLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    db = database.default_database()
    try:
        assert db.path == tmp_path / "cache" / "cudnn_py" / "tuning.sqlite" and db.path.parent.is_dir()
        assert not db.path.exists() and not db.in_memory
    finally:
        db.close()


def test_processes_creating_one_new_database_at_once_all_open_it(tmp_path):
    """Eight writers creating one file at once: one read the half-made file (application_id 0, tables already
    there) as another program's, or had its switch to WAL refused as locked. Threads race as processes do."""
    failures: list[str] = []
    for trial in range(10):
        path, barrier = tmp_path / f"s{trial}.sqlite", threading.Barrier(8)

        def write(i):
            barrier.wait()
            try:
                with TuningDatabase(path, environment=ENV) as d:
                    d.record("k", str(i), {"i": i})
            except TuningDatabaseError as e:
                failures.append(str(e))
        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == [] and TuningDatabase(path, environment=ENV).count() == 8


def test_one_record_merged_in_the_singular(tmp_path, capsys):
    from cudnn_py.cli import main
    with TuningDatabase(tmp_path / "a.sqlite", environment=ENV) as a:
        a.record("k", "a", {"v": 1})
    assert main(["algos", "--merge", str(tmp_path / "m.sqlite"), str(tmp_path / "a.sqlite")]) == 0
    assert f"a.sqlite: 1 record merged into {tmp_path / 'm.sqlite'}" in capsys.readouterr().out


def test_a_missing_library_file_is_named_missing(tmp_path):
    """CUDNN_PY_LIBRARY naming a file that is not there was searched as a folder (.../libcudnn.so.9/libcudnn.so.9)."""
    missing = tmp_path / "libcudnn.so.9"
    with pytest.raises(LibraryNotFoundError) as e:
        _loader.locate({"CUDNN_PY_LIBRARY": str(missing)})
    assert f"$CUDNN_PY_LIBRARY: {missing} (no such file)" in str(e.value) and f"{missing}/" not in str(e.value)
    with pytest.raises(LibraryNotFoundError, match=f"{tmp_path}/libcudnn.so.9 \\(no such file\\)"):
        _loader.locate({"CUDNN_PY_LIBRARY": str(tmp_path)})  # a folder is still searched


def test_no_cudnn_wheel_is_blamed_on_cudnn_not_on_its_dependency(monkeypatch):
    """cuda.pathfinder loads libcublasLt before cuDNN: without the wheels its error names only libcublasLt."""
    import importlib.util
    err = RuntimeError('Failure finding "libcublasLt.so.13 or libcublasLt.so.12": No such file: libcublasLt.so.13')
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    said = _loader._pathfinder_failure(err)
    assert said.startswith("no cuDNN wheel (nvidia-cudnn-cu12 / -cu13) is installed") and "libcublasLt" in said
    assert _loader._pathfinder_failure(RuntimeError("Failure finding libcudnn.so.9")) == \
        "Failure finding libcudnn.so.9"  # one that names cuDNN is kept as it is


def test_no_cuda_bindings_handle_refuses_in_one_screen():
    """After a plain ``pip install .`` (no cu12/cu13 extra: no cuda-bindings), Handle() printed 23 lines: the
    ImportError chained before the NoDeviceError that already quotes it."""
    p = _python("""
        import sys
        sys.modules["cuda.bindings"] = None   # as where cuda-bindings is not installed
        import cudnn_py
        cudnn_py.Handle()
    """)
    assert p.returncode == 1 and "NoDeviceError: cannot use a GPU: cuda-bindings is not installed" in p.stderr
    assert "extra for your driver" in p.stderr
    assert "direct cause" not in p.stderr and len(p.stderr.splitlines()) <= 12, p.stderr  # 22 before


def test_cudnn_py_torch_without_torch_says_so_in_one_screen():
    p = _python("""
        import sys
        sys.modules["torch"] = None   # as where torch is not installed
        import cudnn_py.torch
    """)
    assert p.returncode == 1 and "ImportError: cudnn_py.torch needs PyTorch: pip install torch" in p.stderr
    assert "During handling" not in p.stderr and len(p.stderr.splitlines()) <= 6, p.stderr
