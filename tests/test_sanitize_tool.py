"""Issue 40 item 5: tools/sanitize.py attributes each CUDA API error to the test that made it and separates the ones
a test provokes on purpose from unexplained ones; the 12 CUDA_ERROR_INVALID_VALUE from cuMemcpyDtoDAsync of the
default subset came from the matrix's validation test, whose made-up arrays (address 0x10000) the auto engine's
measurement snapshot copied on a GPU machine (3 in-place operations x 4 float dtypes)."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import sanitize  # noqa: E402

OOM_TEST = "tests/test_memory_gpu.py::test_out_of_memory_is_an_error_and_leaves_everything_usable"


def _hit(status: str, call: str) -> str:
    return (f"========= Program hit {status} (error 2) due to \"out of memory\" on CUDA API call to {call}.\n"
            f"=========     Saved host backtrace up to driver entry point at error\n"
            f"=========         Host Frame: {call} [0x1234] in libcuda.so.1\n")


def _log(*tests: tuple[str, list[str]]) -> str:
    """What the sanitizer's pipe holds: pytest -v's test ids, each followed by the reports made while it ran."""
    out = "collected 3 items\n\n"
    for test, hits in tests:
        out += f"{test} " + "".join(hits) + "PASSED [ 50%]\n"
    n = sum(len(h) for _, h in tests)
    return out + f"========= ERROR SUMMARY: {n} errors\n==== 3 passed in 9.0s ====\n"


def test_api_errors_are_attributed_to_their_test_and_split_into_expected_and_unexplained():
    text = _log(("tests/test_handle_gpu.py::test_a", []),
                (OOM_TEST, [_hit("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAllocFromPoolAsync")] * 3
                 + [_hit("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc_v2")]),
                ("tests/test_matrix.py::test_validation_accepts_exactly_the_verified_dtypes[add_tensor]",
                 [_hit("CUDA_ERROR_INVALID_VALUE", "cuMemcpyDtoDAsync_v2")] * 4))
    s = sanitize.summarise(text)
    assert s["errors"] == 8 and s["memory_errors"] == 0 and s["pytest"] == "3 passed in 9.0s"
    assert s["expected"] == {(OOM_TEST, "cuMemAllocFromPoolAsync", "CUDA_ERROR_OUT_OF_MEMORY"): 3,
                             (OOM_TEST, "cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY"): 1}
    bad = ("tests/test_matrix.py::test_validation_accepts_exactly_the_verified_dtypes[add_tensor]",
           "cuMemcpyDtoDAsync_v2", "CUDA_ERROR_INVALID_VALUE")
    assert s["unexplained"] == {bad: 4}
    assert s["where"][bad] == ["Host Frame: cuMemcpyDtoDAsync_v2 [0x1234] in libcuda.so.1"]
    lines = sanitize.report(s)
    assert lines[0] == "expected CUDA API errors (provoked on purpose): 4"
    assert "unexplained CUDA API errors: 4" in lines
    assert any(ln.startswith(f"  {bad[0]}: CUDA_ERROR_INVALID_VALUE from cuMemcpyDtoDAsync_v2 4x") for ln in lines)


def test_an_error_of_the_oom_test_with_another_status_is_unexplained_and_one_before_any_test_is_outside():
    text = _hit("CUDA_ERROR_INVALID_CONTEXT", "cuCtxGetDevice") + _log(
        (OOM_TEST, [_hit("CUDA_ERROR_INVALID_VALUE", "cuMemcpyDtoDAsync_v2")]))
    s = sanitize.summarise(text)
    assert s["expected"] == {}
    assert set(s["unexplained"]) == {(OOM_TEST, "cuMemcpyDtoDAsync_v2", "CUDA_ERROR_INVALID_VALUE"),
                                     (sanitize.OUTSIDE, "cuCtxGetDevice", "CUDA_ERROR_INVALID_CONTEXT")}


@pytest.mark.parametrize("hits, rc", [([], 0), ([_hit("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc_v2")], 0),
                                      ([_hit("CUDA_ERROR_INVALID_VALUE", "cuMemcpyDtoDAsync_v2")], 1)])
def test_exit_status_fails_on_unexplained_api_errors_only(monkeypatch, capsys, hits, rc):
    """The run (sanitizer and GPU stubbed): pytest -v with stderr merged into stdout, unbuffered, so that the test ids
    and the sanitizer's reports come in order; exit 1 for an unexplained API error, 0 for an expected one."""
    seen = {}

    def run(cmd, **kw):
        seen.update(cmd=cmd, **kw)
        return types.SimpleNamespace(stdout=_log((OOM_TEST, hits)), returncode=0)
    monkeypatch.setattr(sanitize, "require_gpu", lambda prog: None)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/bin/compute-sanitizer")
    monkeypatch.setattr(sanitize.subprocess, "run", run)
    assert sanitize.main([]) == rc
    pytest_args = seen["cmd"][seen["cmd"].index("pytest") + 1:]
    assert pytest_args[0] == "-v" and "-q" not in pytest_args
    assert seen["stderr"] is subprocess.STDOUT and seen["env"]["PYTHONUNBUFFERED"] == "1"
    out = capsys.readouterr().out
    assert f"unexplained CUDA API errors: {rc}" in out


def test_the_matrix_validation_test_never_copies_its_made_up_arrays(monkeypatch):
    """The cause of the 12 INVALID_VALUE: with engine="auto", activation_forward, add_tensor and op_tensor on the
    fakes (all at 0x10000, so in place; add_tensor with beta 1) measured, and the measurement's snapshot copied
    0x10000 into a real buffer on a GPU machine. No snapshot of any array now (the old test made 12)."""
    import test_matrix as tm
    from cudnn_py.calls import engine_choice
    from matrix import MATRIX
    snapshots = []

    def spy(handle, arrays):
        if arrays:
            snapshots.append([hex(a.ptr) for a in arrays])
        return lambda: None
    monkeypatch.setattr(engine_choice, "_snapshot", spy)
    results = {(op, engine, d.name): tm._accepted(op, engine, d)
               for op, engine in MATRIX for d in tm.SUPPORTED_DTYPES}
    assert snapshots == []
    assert results[("add_tensor", "auto", "float32")] is True  # the auto cells still reach cuDNN
    assert results[("add_tensor", "auto", "int8")] is False
    assert engine_choice.mode() == "measure"  # the mode is given back
