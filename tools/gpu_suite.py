"""Run the test suite on a GPU machine as several pytest processes at once, then the tests marked ``serial`` alone.

    python tools/gpu_suite.py                      # 12 shards, logs in a new temporary folder (printed)
    python tools/gpu_suite.py --shards 8 --logs $OUT/suite tests/test_graph_gpu.py
    python tools/gpu_suite.py --library /usr/lib/x86_64-linux-gnu/libcudnn.so.9   # against another cuDNN

The suite is mostly plan building and small kernels, so one GPU serves many processes: on an H200 with 16 cores, 12
shards ran the whole suite in about 3 minutes (one process: over half an hour). Each shard is the suite with
``CUDNN_PY_SHARD=i/n`` (tests/conftest.py keeps every n-th test) and ``CUDNN_PY_REQUIRE_GPU=1``, so a missing GPU
fails instead of skipping. Tests marked ``serial`` measure device-wide state (free device memory, timings) that other
processes would disturb: they run afterwards, alone. Prints each shard's result line, the failures and the
skip reasons; exits 0 only when every process passed. Without a GPU it refuses at once, in one line
(``--no-gpu-check`` runs anyway: the sharding itself, on CPU-only tests). ``--library PATH`` runs every process
against that libcudnn (``CUDNN_PY_LIBRARY``), and the first line printed names the version each loaded.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout
from cudnn_py.cli.prerequisites import require_gpu  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=12, help="pytest processes at once (default 12)")
    ap.add_argument("--timeout", type=float, default=540.0, help="seconds before a shard is stopped")
    ap.add_argument("--logs", help="folder for one log per process (default: a new temporary folder)")
    ap.add_argument("--library", help="path of the libcudnn every process loads (default: the package's search)")
    ap.add_argument("--no-gpu-check", action="store_true", help="run even where no GPU is visible")
    ap.add_argument("tests", nargs="*", default=["tests"], help="what pytest runs (default: tests)")
    args = ap.parse_args(argv)
    if not args.no_gpu_check:
        require_gpu("gpu_suite")
    logs = Path(args.logs or tempfile.mkdtemp(prefix="gpu_suite_"))
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CUDNN_PY_REQUIRE_GPU="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if args.library:
        if not Path(args.library).is_file():
            sys.exit(f"gpu_suite: --library {args.library}: no such file")
        env["CUDNN_PY_LIBRARY"] = str(Path(args.library).resolve())
    print(subprocess.run([sys.executable, "-c", "import cudnn_py; lib = cudnn_py.library(); print('cuDNN',"
                          " lib.version_string, 'from', lib.path)"], env=env, capture_output=True, text=True).stdout.strip()
          or "cuDNN: could not be loaded")
    base = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--ignore=tests/fuzz", *args.tests]
    runs = {f"shard{i}": (base + ["-m", "not serial"], {"CUDNN_PY_SHARD": f"{i}/{args.shards}"})
            for i in range(args.shards)}
    procs = {}
    for name, (cmd, extra) in runs.items():
        with open(logs / f"{name}.log", "w") as out:  # the child keeps its own copy of the file
            procs[name] = subprocess.Popen(cmd, cwd=ROOT, env={**env, **extra}, stdout=out, stderr=subprocess.STDOUT)
    codes = {name: _wait(p, args.timeout) for name, p in procs.items()}
    with open(logs / "serial.log", "w") as out:
        codes["serial"] = _wait(subprocess.Popen(base + ["-m", "serial"], cwd=ROOT, env=env, stdout=out,
                                                 stderr=subprocess.STDOUT), args.timeout)
    problems, skips = set(), collections.Counter()
    for name in codes:
        text = (logs / f"{name}.log").read_text(errors="replace").splitlines()
        print(f"{name:<8} exit {codes[name]}: {text[-1] if text else '(no output)'}")
        problems.update(line for line in text if line.startswith(("FAILED", "ERROR")))
        skips.update(re.sub(r"^SKIPPED \[\d+\] ", "", line) for line in text if line.startswith("SKIPPED"))
    for line in sorted(problems):
        print(line)
    for reason, count in skips.most_common():
        print(f"skipped {count}x: {reason}")
    print(f"logs: {logs}")
    return 0 if all(c in (0, 5) for c in codes.values()) else 1  # 5: nothing collected (no serial test selected)


def _wait(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return 124


if __name__ == "__main__":
    sys.exit(main())
