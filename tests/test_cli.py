"""The command line and the first example, run as a user runs them."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gpu_missing_reason

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_info_runs_and_reports():
    from cudnn_py import library
    r = run("-m", "cudnn_py", "info")
    assert r.returncode == 0, r.stderr
    assert f"cuDNN         {library().version_string}" in r.stdout
    assert library().path in r.stdout and "GPUs" in r.stdout and "cuda-core" in r.stdout


@pytest.mark.gpu
def test_first_program_port_matches_reference():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import port_first_program
    finally:
        sys.path.pop(0)
    error = port_first_program.main()
    assert error is not None and error < 2e-3


def test_help_names_the_program_as_typed(monkeypatch, capsys):
    from cudnn_py import cli
    r = run("-m", "cudnn_py", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m cudnn_py ")
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/cudnn-py", "--help"])
    with pytest.raises(SystemExit):
        cli.main()
    assert capsys.readouterr().out.startswith("usage: cudnn-py ")
    script = shutil.which("cudnn-py")
    if script:  # the console script of an installed cudnn-py
        assert subprocess.run([script, "--help"], capture_output=True, text=True).stdout.startswith("usage: cudnn-py ")


def test_version():
    import cudnn_py
    r = run("-m", "cudnn_py", "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"cudnn-py {cudnn_py.__version__}"


def test_info_json():
    from cudnn_py import library
    r = run("-m", "cudnn_py", "info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["cudnn"]["version"] == library().version_string and info["cudnn"]["path"] == library().path
    assert set(info["cudnn"]["sublibraries"]) == {"graph", "ops", "cnn", "adv"}
    assert "cuda-core" in info["packages"] and isinstance(info["warnings"], list)
    assert set(info["driver"]) == {"cuda_version", "gpus", "why_none"}
    assert bool(info["driver"]["gpus"]) != bool(info["driver"]["why_none"])


def test_info_into_a_closed_pipe_ends_quietly():
    """``cudnn-py info | head -1``: the reader is gone before info writes; no BrokenPipeError traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "cudnn_py", "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, cwd=ROOT)
    p.stdout.close()  # the reader goes away at once
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_info_without_a_gpu_does_not_promise_finalized_backend_descriptors():
    from cudnn_py.cli import info
    text = info.format_text({"python": "3", "cudnn": None, "cudnn_error": "not found",
                             "packages": {"cuda-bindings": "13"},
                             "driver": {"cuda_version": None, "gpus": [], "why_none": "no driver"}, "warnings": []})
    assert "finalizing them, building graphs and running anything need a GPU" in text
    assert "driver        none" in text


def _info(driver=None, bindings=None, cudnn_cuda=None, gpus=(), max_sm=90, **packages):
    pk = {"cuda-bindings": bindings} if bindings else {}
    pk.update({k.replace("_", "-"): v for k, v in packages.items()})
    cudnn = {"version": "9.19.0", "cuda_runtime": cudnn_cuda, "max_sm": max_sm} if cudnn_cuda else None
    return {"packages": pk, "cudnn": cudnn,
            "driver": {"cuda_version": driver, "gpus": [{"index": i, "name": "GPU", "sm": sm} for i, sm in enumerate(gpus)]}}


@pytest.mark.parametrize("info, expected", [
    (_info("13.0", "13.3.1", "13.0", gpus=[90]), []),
    (_info("12.4", "12.9.0", "12.9", gpus=[90]), []),  # minor versions above the driver's run (compatibility)
    (_info(None, "12.9.0", "12.9"), []),  # no driver: nothing to compare with
    (_info("12.8", "13.4.4", "12.9"), ["mixed CUDA majors", "cuda-bindings 13.4.4 needs a CUDA 13 driver"]),
    (_info("12.8", "13.4.4", "13.0"), ["cuda-bindings 13.4.4 needs a CUDA 13 driver (580.65.06 or newer)",
                                       "cuDNN 9.19.0 (CUDA 13.0) needs a CUDA 13 driver"]),
    (_info("13.0", "13.0.0", "13.0", gpus=[90, 120], max_sm=100), ["GPU 1 (GPU, sm_120) is newer"]),
    (_info("13.0", "13.0.0", "13.0", nvidia_cudnn_cu12="9.1", nvidia_cudnn_cu13="9.1"), ["both nvidia-cudnn-cu12"]),
])
def test_info_warns_when_the_pieces_do_not_fit(info, expected):
    from cudnn_py.cli.info import fit_warnings
    got = fit_warnings(info)
    assert len(got) == len(expected), got
    for g, e in zip(got, expected):
        assert e in g, (g, e)


@pytest.mark.skipif(not gpu_missing_reason(), reason="only without a GPU: with one the examples run")
@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_every_example_without_a_gpu_ends_in_one_line(example):
    """No traceback where no GPU is visible: one line saying why (the first program's port stops cleanly).

    An example may stop earlier for another reason it explains (a C sample's port prints its usage without
    arguments; the mnistCUDNN port says where to get NVIDIA's data); the GPU reason is then never reached.
    """
    r = run(str(ROOT / "examples" / example))
    assert "Traceback" not in r.stderr + r.stdout and "Warning" not in r.stderr + r.stdout, r.stderr
    if not r.returncode:
        return
    # the final message: stderr, or the last line of stdout for a port that reports there as its C original does
    message = r.stderr.strip() or r.stdout.strip().splitlines()[-1]
    if re.search(r"CUDA device 0|cudnnCreate failed|a GPU is needed|CUDA driver", message):
        assert len(message.splitlines()) == 1, message
    else:
        assert "Usage:" in r.stdout or "not found" in r.stderr, (r.stdout, r.stderr)


def _sweep_db(path):
    """A tuning database holding one model-sweep record (no GPU needed to write it)."""
    from cudnn_py.tuning import Environment, TuningDatabase
    from cudnn_py.tuning.sweep import KIND
    env = Environment("9.19.0", "Test GPU", "9.0", "13.0")
    with TuningDatabase(path, environment=env) as db:
        db.record(KIND, f"conv.fprop|{path.stem}", {"configs": [], "order": {}})
    return path


def test_algos_compare_refuses_a_database_that_does_not_exist(tmp_path):
    a, missing = _sweep_db(tmp_path / "a.sqlite"), tmp_path / "missing.sqlite"
    r = run("-m", "cudnn_py", "algos", "--compare", str(a), str(missing))
    assert r.returncode != 0 and not missing.exists(), (r.returncode, r.stdout)
    assert f"tuning database {missing} does not exist" in r.stderr and "Traceback" not in r.stderr
    r = run("-m", "cudnn_py", "algos", "--compare", str(tmp_path), str(a))      # a directory is not a database
    assert r.returncode != 0 and "is not a file" in r.stderr


def test_algos_merge_refuses_a_missing_source_and_honours_db(tmp_path):
    from cudnn_py.tuning import TuningDatabase
    a, b = _sweep_db(tmp_path / "a.sqlite"), _sweep_db(tmp_path / "b.sqlite")
    missing, into = tmp_path / "missing.sqlite", tmp_path / "m.sqlite"
    r = run("-m", "cudnn_py", "algos", "--merge", str(a), str(missing))
    assert r.returncode != 0 and not missing.exists() and "does not exist" in r.stderr
    # --merge A B --db M: M is INTO, A and B are both read (A is not written)
    r = run("-m", "cudnn_py", "algos", "--merge", str(a), str(b), "--db", str(into))
    assert r.returncode == 0, r.stderr
    assert f"{a}: 1 record merged into {into}" in r.stdout and f"{b}: 1 record merged into {into}" in r.stdout
    assert TuningDatabase(into).count() == 2 and TuningDatabase(a).count() == 1
    # without --db the first is INTO, as before
    r = run("-m", "cudnn_py", "algos", "--merge", str(a), str(b))
    assert r.returncode == 0 and TuningDatabase(a).count() == 2
    r = run("-m", "cudnn_py", "algos", "--merge", str(a))
    assert r.returncode != 0 and "--merge INTO FROM" in r.stderr


def test_tuning_database_merge_refuses_a_path_that_does_not_exist(tmp_path):
    from cudnn_py.tuning import TuningDatabase, TuningDatabaseError
    with TuningDatabase(tmp_path / "a.sqlite") as db, pytest.raises(TuningDatabaseError, match="no such file"):
        db.merge(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()
