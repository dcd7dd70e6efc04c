"""Tuned first call: does a fresh process that finds a tuned record in the tuning database skip the measurement?

For attention (``sdpa``, bf16) and convolution (``convolution_forward`` on the graph engine and on the legacy one,
fp16 NHWC), fresh processes share one database file:

1. ``measure``: an empty database; the first call times every candidate and records the winner;
2. ``tuned``: the filled database; the first call should find the record and time nothing;
3. ``tuned`` again, to show the spread between processes;
4. ``heuristic``: an empty database and ``autotune=False``, the first call of a process that measures nothing.

Each process reports the wall time of its first call (plan from the database or built, execution, synchronisation),
the part of it spent making the plan (the graph path's ``plan_graph``, the legacy path's ``_plan``: graph, stored or
measured choice, finalisation), a warm second call, and how many candidate timings ran (graph plans timed through
``graph.plans.time_plan``, legacy Find calls). Prints a table; asserts nothing. ``--module-loading eager`` runs the
children with ``CUDA_MODULE_LOADING=EAGER`` (CUDA loads every kernel module when the library loads, not at a
kernel's first launch), which shows how much of a first call beyond planning is lazy module loading.

    python benchmarks/tuned_first_call.py [--repeat 2] [--module-loading lazy|eager]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from cudnn_py.cli.prerequisites import script_args

CASES = ("sdpa", "conv graph", "conv legacy")


def _count_calls(module, name: str, counter: list) -> None:
    """Wrap ``module.name`` so each call adds one to ``counter[0]`` (the harness's view of measuring)."""
    real = getattr(module, name)

    def counted(*a, **k):
        counter[0] += 1
        return real(*a, **k)
    setattr(module, name, counted)


def _time_calls(real, clock: list) -> None:
    """Wrap ``real`` wherever a loaded cudnn_py module holds it, adding its wall time to ``clock[0]`` (seconds)."""
    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            clock[0] += time.perf_counter() - t0
    for mod in list(sys.modules.values()):
        for name, value in list(getattr(mod, "__dict__", {}).items()):
            if value is real and getattr(mod, "__name__", "").startswith("cudnn_py"):
                setattr(mod, name, timed)


def child(case: str, autotune: bool) -> dict:
    """First and warm call of ``case`` in this fresh process, and the timings it ran."""
    import ml_dtypes
    import cudnn_py
    from cudnn_py import capi
    from cudnn_py.graph import plans, runner
    from cudnn_py.ops import conv_calls, sdpa  # noqa: F401 (loaded, so their names of plan_graph are wrapped)
    timed, planning = [0], [0.0]
    _time_calls(runner.plan_graph, planning)
    _time_calls(conv_calls._plan, planning)
    _count_calls(plans, "time_plan", timed)
    for fn in ("cudnnFindConvolutionForwardAlgorithmEx", "cudnnFindConvolutionForwardAlgorithm"):
        _count_calls(capi, fn, timed)
    rng = np.random.default_rng(0)
    h = cudnn_py.Handle()
    if case == "sdpa":
        q, k, v = (cudnn_py.to_device(rng.standard_normal((4, 16, 1024, 128)).astype(ml_dtypes.bfloat16))
                   for _ in range(3))

        def call():
            return cudnn_py.sdpa(h, q, k, v, causal=True, autotune=autotune)
    else:
        x = cudnn_py.to_device(rng.standard_normal((32, 56, 56, 64)).astype(np.float16))
        w = cudnn_py.to_device(rng.standard_normal((64, 3, 3, 64)).astype(np.float16))
        conv = cudnn_py.Convolution(padding=1, layout="NHWC")
        engine = case.split()[1]

        def call():
            return cudnn_py.convolution_forward(h, conv, x, w, autotune=autotune, engine=engine)
    res = {}
    for label in ("first", "warm"):
        t0 = time.perf_counter()
        call()
        h.synchronize()
        res[f"{label} ms"] = (time.perf_counter() - t0) * 1e3
        res[f"{label} plan ms"] = planning[0] * 1e3
        res[f"{label} timings"] = timed[0]
        timed[0], planning[0] = 0, 0.0
    return res


def run_child(case: str, db: str, autotune: bool, loading: str) -> dict:
    env = dict(os.environ, CUDNN_PY_TUNING_DB=db, CUDA_MODULE_LOADING=loading.upper())
    out = subprocess.run([sys.executable, __file__, "--child", case] + ([] if autotune else ["--no-autotune"]),
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(f"tuned_first_call: the {case!r} child failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="fresh tuned processes per case (default 2)")
    ap.add_argument("--module-loading", choices=("lazy", "eager"), default="lazy",
                    help="CUDA_MODULE_LOADING of the fresh processes (default lazy, CUDA's default)")
    ap.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    ap.add_argument("--no-autotune", action="store_true", help=argparse.SUPPRESS)
    args = script_args(ap, argv)
    if args.child:
        print(json.dumps(child(args.child, not args.no_autotune)))
        return
    print(f"{'case':<12} {'process':<10} {'first ms':>9} {'plan ms':>9} {'timings':>8} {'warm ms':>8}"
          f" {'(first-plan)/warm':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            db = os.path.join(tmp, case.replace(" ", "_") + ".sqlite")
            for role in ["measure"] + ["tuned"] * args.repeat + ["heuristic"]:
                r = run_child(case, db if role != "heuristic" else db + ".empty", role != "heuristic",
                              args.module_loading)
                print(f"{case:<12} {role:<10} {r['first ms']:>9.1f} {r['first plan ms']:>9.1f} {r['first timings']:>8}"
                      f" {r['warm ms']:>8.2f} {(r['first ms'] - r['first plan ms']) / r['warm ms']:>18.1f}")


if __name__ == "__main__":
    main()
