"""Plan builds on a pool of threads: the wall time of building every engine configuration (heuristics modes A, B and
FALLBACK) of the first few operations of resnet50 (batch 32, float16, NHWC: what ``algos --model resnet50`` builds),
with 1, 2, 4, 8 and 16 builder threads (:func:`cudnn_py.graph.plans.build_ahead`), each in a fresh process.

Cold: each process gets an empty CUDA kernel cache (``CUDA_CACHE_PATH`` a new folder): every kernel cuDNN compiles at
run time is compiled, as in a user's first sweep on a machine. Warm: the processes share a cache that one process
filled first (not reported). The heuristics queries are not in the times (only the builds); the size each cold
process left in its cache is (what a sweep of these operations needs of ``CUDA_CACHE_MAXSIZE``). Prints a table;
asserts nothing.

    python benchmarks/build_threads.py [--ops 4] [--threads 1,2,4,8,16] [--cache cold,warm] [--json out.json]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time

from cudnn_py.cli.prerequisites import script_args


def _threads(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected thread counts like 1,2,4") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: thread counts must be >= 1")
    return vals


def _caches(text: str) -> list[str]:
    vals = text.split(",")
    if not vals or set(vals) - {"cold", "warm"}:
        raise argparse.ArgumentTypeError(f"{text!r}: cold, warm or cold,warm")
    return vals


def child(ops: int, threads: int, device: int) -> dict:
    """Build every configuration of the first ``ops`` operations with ``threads`` builders, in this process."""
    import cudnn_py.graph as G
    from cudnn_py.graph.plans import build_ahead
    from cudnn_py.handle import Handle
    from cudnn_py.tuning.models import model
    from cudnn_py.tuning.sweep import prepare
    plans = failed = 0
    heuristics = build = 0.0
    with Handle(device) as h:
        for p in model("resnet50").problems(32, "float16", "NHWC")[:ops]:
            t0 = time.perf_counter()
            prep = prepare(p, h)
            t1 = time.perf_counter()
            done = build_ahead([functools.partial(G.Plan.build, prep.graph, h, c) for c in prep.configs.values()],
                               threads, device=h.device)
            build += time.perf_counter() - t1
            heuristics += t1 - t0
            plans += len(done)
            failed += sum(f.exception() is not None for f in done)
    return {"threads": threads, "build_s": build, "heuristics_s": heuristics, "plans": plans, "failed": failed}


def _cache_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(path) for f in files)


def run_child(args, threads: int, cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_CACHE_DISABLE"}
    env["CUDA_CACHE_PATH"] = cache_dir
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(threads), "--ops", str(args.ops), "--device",
           str(args.device)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"build_threads.py: the process with {threads} threads failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="build_threads.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=4, help="the first N operations of resnet50 (default 4)")
    parser.add_argument("--threads", type=_threads, default=[1, 2, 4, 8, 16], help="default 1,2,4,8,16")
    parser.add_argument("--cache", type=_caches, default=["cold", "warm"], help="cold, warm or cold,warm (default)")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = script_args(parser, argv)
    if args.ops < 1:
        raise SystemExit("build_threads.py: --ops must be >= 1")
    if args.child is not None:
        print(json.dumps(child(args.ops, args.child, args.device)))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="cudnn_py-kernels-") as tmp:
        shared = os.path.join(tmp, "warm")
        if "warm" in args.cache:
            run_child(args, max(args.threads), shared)     # fills the shared cache
        for cache in args.cache:
            for n in args.threads:
                where = shared if cache == "warm" else os.path.join(tmp, f"cold-{n}")
                row = run_child(args, n, where)
                row.update(cache=cache, cache_mib=_cache_bytes(where) / 2**20)
                rows.append(row)
                print(f"  {cache} {n} threads: {row['build_s']:.1f} s", file=sys.stderr, flush=True)
    print(f"resnet50 batch 32 float16 NHWC, first {args.ops} operations, {rows[0]['plans']} plans "
          f"({rows[0]['failed']} fail to build), heuristics {rows[0]['heuristics_s']:.1f} s (not in the times)")
    print(f"{'cache':<6}{'threads':>8}{'build s':>10}{'speed-up':>10}{'cache MiB':>11}")
    for r in rows:
        base = next(b for b in rows if b["cache"] == r["cache"])["build_s"]
        print(f"{r['cache']:<6}{r['threads']:>8}{r['build_s']:>10.2f}{base / r['build_s']:>10.2f}"
              f"{r['cache_mib']:>11.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ops": args.ops, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
