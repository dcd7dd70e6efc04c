"""Model sweeps in worker processes: wall time and picks by ``--jobs`` and by the state of CUDA's kernel cache.

Each row runs one fresh ``python -m cudnn_py algos --model M ... --jobs N --db FRESH --quiet`` process and reports
its wall time (the whole command), the plan builds' seconds summed over operations (the run's record: with several
workers, more than the wall time), and its picks against the reference (the first ``--jobs 1`` row, else
``--reference DB``): in how many operations its best configuration, as the reference timed it, is within 2 % of the
reference's best, and its tuned step time over the reference's. ``cold`` rows start from an empty kernel cache
(a fresh ``CUDA_CACHE_PATH``); ``warm`` rows use the one the last cold row filled, or ``--kernel-cache DIR``.
Each row also gives what a worker costs to start: the median seconds from its spawn to its handle opened (``ready``)
and to its first plan built (the run's record), and the medians over the processes of the GPU memory ``nvidia-smi``
first saw (about a context: polled twice a second while the row runs) and of the most it saw (the context, the
buffers and workspaces of an operation); ``-`` without ``nvidia-smi``.

    python benchmarks/sweep_jobs.py --model resnet50 --rows 16:cold,16:warm,1:warm --out /tmp/sweeps
    python benchmarks/sweep_jobs.py --model resnet50 --rows 16:cold --out /tmp/s914 -- --cold-l2   # extra algos args

Prints a table (last) and writes ``rows.json``, each row's database and its ``algos`` report under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from cudnn_py.cli.prerequisites import script_args


def _row(spec: str) -> tuple[int, str]:
    jobs, _, cache = spec.partition(":")
    if not jobs.isdigit() or int(jobs) < 1 or cache not in ("cold", "warm"):
        raise argparse.ArgumentTypeError(f"a row is JOBS:cold or JOBS:warm, got {spec!r}")
    return int(jobs), cache


def _picks(path: str, reference: str) -> tuple[int, int, float]:
    """(operations whose best, as the reference timed it, is within 2 % of the reference's best; operations both
    hold; tuned step time over the reference's)."""
    from cudnn_py.tuning import TuningDatabase
    from cudnn_py.tuning import report as rp
    with TuningDatabase(path) as a, TuningDatabase(reference) as b:
        _, info = rp.compare(a, b, threshold=0.02)
    totals = info["totals"]
    return info["a_best_within"], info["common"], totals["tuned_a"] / totals["tuned_b"]


def _gpu_mib() -> dict[int, int]:
    """{pid: MiB of GPU memory} of the compute processes ``nvidia-smi`` lists now (empty without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(p): int(m) for p, m in (line.split(",") for line in out.splitlines() if line.count(",") == 1)
            if p.strip().isdigit() and m.strip().isdigit()}


def _run(cmd: list[str], env: dict) -> tuple[subprocess.CompletedProcess, dict[int, int], dict[int, int]]:
    """Run ``cmd``, polling the GPU memory of every compute process meanwhile: (the result, {pid: the MiB first
    seen}, {pid: the most MiB seen})."""
    first: dict[int, int] = {}
    peaks: dict[int, int] = {}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        while proc.poll() is None:
            for pid, mib in _gpu_mib().items():
                first.setdefault(pid, mib)
                peaks[pid] = max(peaks.get(pid, 0), mib)
            time.sleep(0.5)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read()), first, peaks


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(prog="sweep_jobs.py", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--layout", default="NHWC")
    ap.add_argument("--rows", type=lambda t: [_row(s) for s in t.split(",")], default=[(16, "cold")])
    ap.add_argument("--reference", default=None, help="the database to compare picks with (default: the first "
                    "--jobs 1 row)")
    ap.add_argument("--out", default="sweeps", help="folder for the databases, kernel caches, reports and rows.json")
    ap.add_argument("--kernel-cache", default=None, metavar="DIR", help="the warm kernel cache of warm rows before "
                    "any cold row (default: none)")
    args = script_args(ap, argv[:argv.index("--")] if "--" in argv else argv)
    os.makedirs(args.out, exist_ok=True)
    reference, cache, rows = args.reference, args.kernel_cache and os.path.abspath(args.kernel_cache), []
    for i, (jobs, state) in enumerate(args.rows):
        if state == "cold":
            cache = os.path.abspath(os.path.join(args.out, f"kernels{i}"))
        elif cache is None:
            raise SystemExit("sweep_jobs.py: a warm row needs a cold row before it (whose kernel cache it uses)")
        db = os.path.abspath(os.path.join(args.out, f"row{i}-jobs{jobs}-{state}.sqlite"))
        cmd = [sys.executable, "-m", "cudnn_py", "algos", "--model", args.model, "--batch", args.batch, "--dtype",
               args.dtype, "--layout", args.layout, "--jobs", str(jobs), "--db", db, "--quiet", *extra]
        t0 = time.perf_counter()
        got, first, peaks = _run(cmd, {**os.environ, "CUDA_CACHE_PATH": cache})
        wall = time.perf_counter() - t0
        with open(os.path.join(args.out, f"row{i}.txt"), "w") as f:
            f.write(got.stdout + got.stderr)
        if got.returncode:
            print(f"row {i} ({jobs}:{state}) failed ({got.returncode}):\n{got.stderr[-3000:]}", file=sys.stderr)
            continue
        from cudnn_py.tuning import TuningDatabase
        from cudnn_py.tuning.sweep import RUN_KIND
        with TuningDatabase(db) as t:
            (run,) = t.records(RUN_KIND)
        if reference is None and jobs == 1:
            reference = db
        starts = run.value.get("workers") or []
        rows.append({"row": i, "jobs": jobs, "cache": state, "wall_s": round(wall, 1), "db": db,
                     "builds_s": round(run.value["phases"].get("build", 0.0), 1), "measured": run.value["measured"],
                     "samples_s": round(sum(run.value["phases"].get(k, 0.0) for k in ("first_sample", "samples")), 1),
                     "ready_s": _median(w["ready_s"] for w in starts),
                     "first_build_s": _median(w["first_build_s"] for w in starts),
                     "gpu_mib_first": _median(first.values()), "gpu_mib_peak": _median(peaks.values()),
                     "gpu_processes": len(peaks),
                     "summary": got.stdout.splitlines()[1] if len(got.stdout.splitlines()) > 1 else ""})
        print(f"row {i}: --jobs {jobs}, {state} kernel cache: {wall:.1f} s", file=sys.stderr, flush=True)
    for r in rows:
        r["picks"] = _picks(r["db"], reference) if reference and r["db"] != reference else None
    with open(os.path.join(args.out, "rows.json"), "w") as f:
        json.dump({"model": args.model, "extra": extra, "reference": reference, "rows": rows}, f, indent=1)
    print(f"{args.model} batch {args.batch} {args.dtype} {args.layout} {' '.join(extra)}".rstrip())
    print(f"{'jobs':>4} {'cache':>5} {'wall s':>7} {'builds s':>8} {'samples s':>9} {'ops':>4} {'ready s':>7} "
          f"{'1st build s':>11} {'MiB 1st':>7} {'MiB max':>7}  picks within 2% of the reference, tuned step / reference's")
    num = (lambda v, f: "-" if v is None else format(v, f))
    for r in rows:
        picks = "reference" if r["db"] == reference else "-" if r["picks"] is None else \
            f"{r['picks'][0]} of {r['picks'][1]}, {r['picks'][2]:.4f}"
        print(f"{r['jobs']:>4} {r['cache']:>5} {r['wall_s']:>7.1f} {r['builds_s']:>8.1f} {r['samples_s']:>9.1f} "
              f"{r['measured']:>4} {num(r['ready_s'], '7.2f')} {num(r['first_build_s'], '11.2f')} "
              f"{num(r['gpu_mib_first'], '7.0f')} {num(r['gpu_mib_peak'], '7.0f')}  {picks}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
