"""Run part of the GPU test suite under NVIDIA compute-sanitizer (memcheck by default) and summarise what it found.

    python tools/sanitize.py                       # the default subset, memcheck, 540 s budget
    python tools/sanitize.py --tool racecheck tests/test_matrix.py -k legacy
    python tools/sanitize.py --snippet "import cudnn_py; cudnn_py.Handle().close()"   # one snippet, API errors named

Everything after the options goes to pytest (default: :data:`DEFAULT_TESTS`). The sanitizer binary is found on PATH,
under $CUDA_HOME/bin, /usr/local/cuda/bin, or in the nvidia-cuda-sanitizer-api wheel. The summary gives the
sanitizer's error count (memory errors), the CUDA API errors it reported grouped by call and status (with the first
native frames of one occurrence), pytest's result line, and the exit status (0 only when the tests passed and the
sanitizer found no memory error). API errors are reported but not counted as memory errors: drivers' probing calls (a context query with
none current) report statuses that the caller expects and handles.
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


def summarise(text: str) -> dict:
    """Counts from the sanitizer's output: memory errors, API errors by (call, status), one backtrace each."""
    api: collections.Counter = collections.Counter()
    where: dict = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _API.search(line)
        if m:
            key = (m.group(4), m.group(1))
            api[key] += 1
            if key not in where:
                frames = [ln.strip() for ln in lines[i + 1:i + 14] if ln.strip().startswith("=========     Host Frame")
                          or "Host Frame" in ln]
                where[key] = frames[:8]
    errors = [int(m.group(1)) for m in _SUMMARY.finditer(text)]
    result = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error)", ln)), "")
    return {"errors": sum(errors), "memory_errors": max(0, sum(errors) - sum(api.values())),
            "summaries": len(errors), "api": api, "where": where, "pytest": result.strip("= ")}


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
    target = ["-c", args.snippet] if args.snippet else ["-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                        *(rest or DEFAULT_TESTS)]
    cmd = [exe, "--tool", args.tool, "--show-backtrace", "host", "--report-api-errors", "all",
           "--leak-check", "no", "--print-limit", "200", sys.executable, *target]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                                         os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "CUDNN_PY_REQUIRE_GPU": "1"}
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
        text, rc, timed_out = p.stdout + p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        rc, timed_out = -1, True
    if args.log:
        Path(args.log).write_text(text)
    s = summarise(text)
    print(f"tool: {args.tool}; exit status {rc}{' (stopped at the time limit)' if timed_out else ''}")
    print(f"pytest: {s['pytest'] or '(no result line)'}")
    print(f"sanitizer: {s['errors']} error(s) in {s['summaries']} summary line(s): {s['memory_errors']} memory "
          f"error(s), {sum(s['api'].values())} CUDA API error report(s)")
    for (call, status), n in sorted(s["api"].items(), key=lambda kv: -kv[1]):
        print(f"  CUDA API error {status} from {call}: {n}x; first seen at:")
        for f in s["where"][(call, status)]:
            print(f"      {f}")
    if not s["summaries"]:
        print(text[-3000:])
    return 0 if (rc == 0 and s["memory_errors"] == 0 and s["summaries"] and not timed_out) else 1


if __name__ == "__main__":
    sys.exit(main())
