"""Run part of the GPU test suite under NVIDIA compute-sanitizer (memcheck by default) and summarise what it found.

    python tools/sanitize.py                       # the default subset, memcheck, 540 s budget
    python tools/sanitize.py --tool racecheck tests/test_matrix.py -k legacy
    python tools/sanitize.py --snippet "import cudnn_py; cudnn_py.Handle().close()"   # one snippet, API errors named

Everything after the options goes to pytest (default: :data:`DEFAULT_TESTS`), which runs verbose (``-v``: each test's
id is printed as it starts) so that every CUDA API error the sanitizer reports is attributed to the test that made it.
The sanitizer binary is found on PATH, under $CUDA_HOME/bin, /usr/local/cuda/bin, or in the nvidia-cuda-sanitizer-api
wheel. The summary gives the sanitizer's error count (memory errors), the CUDA API errors split into *expected* ones
(:data:`EXPECTED`: a test provokes them on purpose; listed by test id and error) and *unexplained* ones (by test id,
call and status, with the first native frames of one occurrence), pytest's result line, and the exit status: 0 only
when the tests passed and the sanitizer found no memory error and no unexplained API error.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout
from cudnn_py.cli.prerequisites import require_gpu  # noqa: E402
#: what fits in a few minutes under memcheck on an H200 (autotuning, which times every engine, is left out)
DEFAULT_TESTS = ["tests/test_matrix.py", "tests/test_handle_gpu.py", "tests/test_memory_gpu.py",
                 "tests/test_conv_graph_engine.py", "tests/test_threads.py", "-k", "not fastest"]

#: CUDA API errors a test provokes on purpose: (test id or its prefix, status, why); any call
EXPECTED = [
    ("tests/test_memory_gpu.py::test_out_of_memory_is_an_error_and_leaves_everything_usable",
     "CUDA_ERROR_OUT_OF_MEMORY", "asks for twice the device (an array, the workspace), then fills it in 64 MiB pieces "
                                 "until one fails and a call's output cannot fit: CudaOutOfMemoryError each time"),
]


def find_sanitizer() -> str | None:
    """The compute-sanitizer executable, or None."""
    cands = [shutil.which("compute-sanitizer")]
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base:
            cands.append(os.path.join(base, "bin", "compute-sanitizer"))
    for site in sys.path:
        cands += glob.glob(os.path.join(site, "nvidia", "cuda_sanitizer_api", "compute-sanitizer", "compute-sanitizer"))
        cands += glob.glob(os.path.join(site, "nvidia", "cu*", "compute-sanitizer", "compute-sanitizer"))
    return next((c for c in cands if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


_API = re.compile(r"Program hit (\w+) \(error (\d+)\) due to \"([^\"]*)\" on CUDA API call to (\w+)")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
#: a test id as pytest -v prints it when the test starts (the sanitizer's own lines start with "=========")
_TEST = re.compile(r"^(\S+\.py::\S+)")
#: where an API error is attributed before the first test starts (imports, collection) or in --snippet mode
OUTSIDE = "(outside a test)"


def expected_reason(test: str, status: str) -> str | None:
    """Why ``test`` makes the API error ``status`` on purpose (:data:`EXPECTED`), or None when it is unexplained."""
    return next((why for prefix, st, why in EXPECTED if st == status and test.startswith(prefix)), None)


def _frames(lines: list[str]) -> list[str]:
    """The first 8 host frames of the report whose lines follow (up to the next report or test)."""
    frames = []
    for ln in lines:
        if _API.search(ln) or _TEST.match(ln) or len(frames) == 8:
            break
        if "Host Frame" in ln:
            frames.append(ln.lstrip("= ").strip())
    return frames


def summarise(text: str) -> dict:
    """Counts from the sanitizer's output (pytest -v interleaved): memory errors; API errors by (test, call, status),
    with one backtrace each, split into expected (:data:`EXPECTED`) and unexplained ones."""
    api: collections.Counter = collections.Counter()
    where: dict = {}
    test = OUTSIDE
    lines = text.splitlines()
    for i, line in enumerate(lines):
        t = _TEST.match(line)
        if t:
            test = t.group(1)
        m = _API.search(line)
        if m:
            key = (test, m.group(4), m.group(1))
            api[key] += 1
            if key not in where:
                where[key] = _frames(lines[i + 1:i + 40])
    errors = [int(m.group(1)) for m in _SUMMARY.finditer(text)]
    result = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error)", ln)), "")
    expected = {k: n for k, n in api.items() if expected_reason(k[0], k[2]) is not None}
    unexplained = {k: n for k, n in api.items() if k not in expected}
    return {"errors": sum(errors), "memory_errors": max(0, sum(errors) - sum(api.values())),
            "summaries": len(errors), "api": api, "where": where, "expected": expected, "unexplained": unexplained,
            "pytest": result.strip("= ")}


def report(s: dict) -> list[str]:
    """The summary's lines about CUDA API errors: the expected ones by test and error, then the unexplained ones."""
    out = [f"expected CUDA API errors (provoked on purpose): {sum(s['expected'].values())}"]
    for (test, call, status), n in sorted(s["expected"].items()):
        out.append(f"  {test}: {status} from {call} {n}x ({expected_reason(test, status)})")
    out.append(f"unexplained CUDA API errors: {sum(s['unexplained'].values())}")
    for (test, call, status), n in sorted(s["unexplained"].items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"  {test}: {status} from {call} {n}x; first seen at:")
        out += [f"      {f}" for f in s["where"][(test, call, status)]]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", default="memcheck", choices=["memcheck", "racecheck", "initcheck", "synccheck"])
    ap.add_argument("--timeout", type=float, default=540.0, help="seconds before the run is stopped")
    ap.add_argument("--snippet", help="run this Python code instead of pytest")
    ap.add_argument("--log", help="write the sanitizer's full output here")
    args, rest = ap.parse_known_args(argv)
    require_gpu("sanitize")  # before looking for the sanitizer or starting anything
    exe = find_sanitizer()
    if exe is None:
        print("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, nvidia-cuda-sanitizer-api "
              "wheel); install the CUDA toolkit or `pip install nvidia-cuda-sanitizer-api-cu12`", file=sys.stderr)
        return 2
    target = ["-c", args.snippet] if args.snippet else ["-m", "pytest", "-v", "-p", "no:cacheprovider",
                                                        *(rest or DEFAULT_TESTS)]
    cmd = [exe, "--tool", args.tool, "--show-backtrace", "host", "--report-api-errors", "all",
           "--leak-check", "no", "--print-limit", "200", sys.executable, *target]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                                         os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "CUDNN_PY_REQUIRE_GPU": "1", "PYTHONUNBUFFERED": "1"}  # test ids in order with the sanitizer's reports
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=args.timeout)
        text, rc, timed_out = p.stdout, p.returncode, False
    except subprocess.TimeoutExpired as e:
        text = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, timed_out = -1, True
    if args.log:
        Path(args.log).write_text(text)
    s = summarise(text)
    print(f"tool: {args.tool}; exit status {rc}{' (stopped at the time limit)' if timed_out else ''}")
    print(f"pytest: {s['pytest'] or '(no result line)'}")
    print(f"sanitizer: {s['errors']} error(s) in {s['summaries']} summary line(s): {s['memory_errors']} memory "
          f"error(s), {sum(s['api'].values())} CUDA API error report(s)")
    print("\n".join(report(s)))
    if not s["summaries"]:
        print(text[-3000:])
    ok = rc == 0 and s["memory_errors"] == 0 and not s["unexplained"] and s["summaries"] and not timed_out
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
