"""Issue 40 on CPU: the last leaks (item 4) and a new user's first-hour frictions (item 8), each checked as a user
meets it (messages, line counts, files left behind)."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import threading
import traceback
from pathlib import Path

import numpy as np
import pytest

import cudnn_py
from cudnn_py import _loader, capi
from cudnn_py.algorithm_queries import AlgoPerf
from cudnn_py.errors import CudnnNotSupportedError, CudnnPyError, InvalidTypeError, LibraryNotFoundError
from cudnn_py.graph.errors import GraphNotSupportedError
from cudnn_py.tuning import Environment, TuningDatabase, TuningDatabaseError, database

# --- 4. the last leaks ---


@pytest.mark.parametrize("args, shown", [
    ((None, None, None, None), ["graph 'None'", "operations: \n", "tried: none"]),
    (("abc", "abc", "abc", "abc"), ["graph 'abc'", "operations: abc", "tried: abc", "?: abc"]),
    ((1, 2.5, object, [("ok", "pair"), "lone", ["list", "pair"]], "x"), ["graph '1'", "operations: 2.5", "?: lone", "tried: <class 'object'>",
                                                                          "ok: pair", "list: pair", "UNKNOWN ('x')"]),
])
def test_graph_not_supported_error_takes_odd_arguments(args, shown):
    """An exception's constructor never raises: what it got is kept as text, and it still pickles."""
    e = GraphNotSupportedError(*args)
    assert isinstance(e, CudnnNotSupportedError)
    for part in shown:
        assert part in str(e) + "\n"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is GraphNotSupportedError and str(again) == str(e)


@pytest.mark.parametrize("old, args", [
    ("cudnn_py.ops.pooling.PoolingDescriptor", ("max",)), ("cudnn_py.ops.activation.ActivationDescriptor", ("relu",)),
    ("cudnn_py.ops.lrn.LRNDescriptor", ()), ("cudnn_py.descriptors.OpTensorDescriptor", ()),
    ("cudnn_py.descriptors.ReduceTensorDescriptor", ()), ("cudnn_py.ops.convolution.ConvolutionDescriptor", ()),
])
def test_deprecated_descriptor_names_close_and_work_in_with(old, args):
    """What the old names made could be closed and used in ``with``; the Settings they now make can too."""
    import importlib
    module, name = old.rsplit(".", 1)
    make = getattr(importlib.import_module(module), name)
    with pytest.warns(DeprecationWarning, match=f"{name} is deprecated"):
        made = make(*args)
    made.close()
    made.close()  # idempotent, as Descriptor.close
    with pytest.warns(DeprecationWarning):
        with make(*args) as inside:
            assert inside == made  # the object itself, still usable after close()
    assert hash(inside) == hash(made)


def _perf(**change):
    fields = dict(direction="forward", algo=capi.cudnnConvolutionFwdAlgo_t(1), status=capi.CUDNN_STATUS_SUCCESS,
                  time_ms=0.5, memory_bytes=64, determinism=capi.CUDNN_DETERMINISTIC, math_type=capi.CUDNN_DEFAULT_MATH)
    return AlgoPerf(**{**fields, **change})


@pytest.mark.parametrize("change, match", [
    (dict(direction=None), "direction None"), (dict(direction="sideways"), "direction 'sideways'"),
    (dict(algo=None), "algo must be a cudnnConvolutionFwdAlgo_t"), (dict(algo=1), "algo must be"),
    (dict(algo=capi.cudnnConvolutionBwdDataAlgo_t(1)), "algo must be a cudnnConvolutionFwdAlgo_t"),
    (dict(status="ok"), "status must be"), (dict(status=None), "status must be"),
    (dict(time_ms="1"), "time_ms must be a number"), (dict(time_ms=float("nan")), "time_ms is NaN"),
    (dict(time_ms=True), "time_ms must be"), (dict(memory_bytes=-1), "memory_bytes must be >= 0"),
    (dict(memory_bytes=1.5), "memory_bytes must be an int"), (dict(determinism=1), "determinism must be"),
    (dict(math_type=None), "math_type must be"),
])
def test_algo_perf_checks_its_fields(change, match):
    with pytest.raises(CudnnPyError, match=match):
        _perf(**change)


def test_algo_perf_keeps_what_cudnn_reports():
    assert _perf().supported and _perf(status=3000 + 999).status == 3999  # a status newer than the headers
    assert AlgoPerf.from_dict(_perf(time_ms=-1.0).to_dict()) == _perf(time_ms=-1.0)  # Find's "not timed"


# --- 8. first-hour frictions ---

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
