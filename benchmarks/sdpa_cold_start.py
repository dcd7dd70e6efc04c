"""Attention cold start: how long the first call of a fresh process takes, with and without cudnn-py's on-disk plan
store (``CUDNN_PY_PLAN_CACHE_DIR``), beside cudnn-frontend's graph build time; each measurement in its own fresh
process. Prints a table; asserts nothing.

For each configuration (bf16, the benchmark shape: plain attention, whose forward takes the unified descriptor, and
causal, whose forward and backward are composite graphs that cuDNN compiles at run time) it reports the wall time
of the first ``sdpa`` and ``sdpa_backward`` call (graph, heuristics or the stored plan, plan finalization with any
compilation, execution, synchronisation) and of the second one. The driver's JIT cache is off
(``CUDA_CACHE_DISABLE=1``) except in two runs that show what it saves: it keeps kernels cuDNN compiles at run time
across processes, so with it a "cold" process on a used machine is not cold.

``--kernel-cache`` adds an experiment with cuDNN's kernel cache (``CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR``, with a
JSON form since 9.10): a first process finalizes the causal forward plan with an empty cache and saves the cache's
JSON, a second loads it and finalizes the same plan again (on 9.19 that saves nothing: see docs/attention.md).

    python benchmarks/sdpa_cold_start.py [--shape 4,16,4096,128] [--kernel-cache]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import cudnn_py
from cudnn_py import capi
from cudnn_py.core.caches import handle_cache
from cudnn_py.cli.prerequisites import script_args
from cudnn_py.errors import CudnnError
from cudnn_py.graph import BackendDescriptor, Graph
from cudnn_py.graph.ops.base import LowerContext
from cudnn_py.graph.plans import Plan
from cudnn_py.ops import sdpa as S

CASES = (("plain", False), ("causal", True))


def _inputs(shape):
    import torch
    b, h, s, d = shape
    return [torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]


def child_cudnn_py(shape) -> dict:
    """First and second call times of forward and backward per case, in this fresh process."""
    import torch
    q, k, v, do = _inputs(shape)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    h = cudnn_py.Handle()
    res = {"handle_ms": (time.perf_counter() - t0) * 1e3}  # the import: benchmarks/import_time.py
    for name, causal in CASES:
        for call in ("first", "second"):
            t0 = time.perf_counter()
            o, st = S.sdpa(h, q, k, v, causal=causal, return_stats=True)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            S.sdpa_backward(h, q, k, v, o, do, st, causal=causal)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            res[f"{name} fwd {call} ms"] = (t1 - t0) * 1e3
            res[f"{name} bwd {call} ms"] = (t2 - t1) * 1e3
    res["plans"] = sorted(ps[0].tag for ps in handle_cache(h, "graph.plans").values())
    return res


def child_frontend(shape) -> dict:
    """cudnn-frontend's build (validate .. build_plans) and first execution per case."""
    import torch
    import cudnn
    q, k, v, do = _inputs(shape)
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    b, hq, s, d = shape
    res = {}
    for name, causal in CASES:
        for direction in ("fwd", "bwd"):
            t0 = time.perf_counter()
            g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT, handle=handle)
            rb = 0 if causal else None
            o = torch.empty_like(q)
            st = torch.empty(b, hq, s, 1, device="cuda", dtype=torch.float32)
            if direction == "fwd":
                tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
                to, ts = g.sdpa(q=tq, k=tk, v=tv, generate_stats=True, attn_scale=d ** -0.5,
                                diagonal_band_right_bound=rb)
                to.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
                ts.set_output(True).set_data_type(cudnn.data_type.FLOAT)
                pack = {tq: q, tk: k, tv: v, to: o, ts: st}
            else:
                ts_ = [g.tensor_like(x) for x in (q, k, v, o, do, st)]
                grads = g.sdpa_backward(*ts_, attn_scale=d ** -0.5, diagonal_band_right_bound=rb)
                outs = [torch.empty_like(x) for x in (q, k, v)]
                for t, x in zip(grads, outs):
                    t.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
                pack = dict(zip(ts_, (q, k, v, o, do, st)))
                pack.update(zip(grads, outs))
            g.validate()
            g.build_operation_graph()
            g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            g.check_support()
            g.build_plans()
            t1 = time.perf_counter()
            ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
            g.execute(pack, ws, handle=handle)
            torch.cuda.synchronize()
            res[f"{name} {direction} build ms"] = (t1 - t0) * 1e3
            res[f"{name} {direction} first call ms"] = (time.perf_counter() - t0) * 1e3
    return res


def child_kernel_cache(shape, path: str, load: bool) -> dict:
    """Finalize the causal forward plan with a kernel cache: empty (then save its JSON to ``path``) or loaded from
    ``path``; returns the finalization time and the first execution."""
    import torch
    q, k, v, _ = _inputs(shape)
    h = cudnn_py.Handle()
    g = Graph(io_dtype="bfloat16", compute_dtype="float32", intermediate_dtype="float32", name="kc")
    t = {n: g.tensor_like(x, n) for n, x in (("q", q), ("k", k), ("v", v))}
    o, st = g.sdpa(t["q"], t["k"], t["v"], causal=True)
    o.set_output(True), st.set_output(True)
    ctx = LowerContext(g, h)
    for op in g.ops:
        op.lower(ctx)
    og = BackendDescriptor("OPERATIONGRAPH", ops=ctx.operations)
    og.set("handle", h)
    og.finalize()
    cfgs = BackendDescriptor("ENGINEHEUR", operation_graph=og, mode=capi.CUDNN_HEUR_MODE_A).finalize().get("results")
    res = {}
    t0 = time.perf_counter()
    kc = BackendDescriptor("KERNEL_CACHE")
    if load:
        with open(path) as f:
            kc.set("json_representation", f.read())
    kc.set("operation_graph", og)
    kc.finalize()
    t1 = time.perf_counter()
    plan = None
    for cfg in cfgs:
        try:
            plan = BackendDescriptor("EXECUTION_PLAN", handle=h, engine_config=cfg, kernel_cache=kc).finalize()
            break
        except CudnnError as e:
            res.setdefault("refused", []).append(str(e)[:120])
    t2 = time.perf_counter()
    res.update({"cache load ms": (t1 - t0) * 1e3, "plan finalize ms": (t2 - t1) * 1e3})
    if plan is not None:
        oa, sa = torch.empty_like(q), torch.empty(shape[0], shape[1], shape[2], 1, device="cuda")
        Plan(plan, None, g).execute(h, {t["q"]: q, t["k"]: k, t["v"]: v, o: oa, st: sa})
        torch.cuda.synchronize()
        res["first execution ms"] = (time.perf_counter() - t2) * 1e3
    for attr in ("entry_count", "json_representation"):
        try:
            val = kc.get(attr)
        except CudnnError as e:
            res[attr] = f"not readable: {str(e)[:100]}"
            continue
        if attr == "entry_count":
            res[attr] = val
        elif not load:
            with open(path, "w") as f:
                f.write(val)
            res["json bytes"] = len(val)
    return res


def run_child(args: list[str], env: dict) -> dict:
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], capture_output=True, text=True,
                       env=env, timeout=300)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4,16,4096,128", help="B,H,S,D")
    ap.add_argument("--kernel-cache", action="store_true", help="also try cuDNN's kernel cache across processes")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = script_args(ap, argv, modules=("torch",))
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.child:
        kind = args.child[0]
        if kind == "cudnn-py":
            out = child_cudnn_py(shape)
        elif kind == "frontend":
            out = child_frontend(shape)
        else:
            out = child_kernel_cache(shape, args.child[1], kind == "kc-load")
        print(json.dumps(out))
        return
    # the driver's JIT cache (~/.nv/ComputeCache) would keep the kernels cuDNN compiles at run time across
    # processes and hide what a fresh machine pays: off, except in the two runs that show its effect
    base = {k: v for k, v in os.environ.items() if k != "CUDNN_PY_PLAN_CACHE_DIR"}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), base.get("PYTHONPATH", "")]))
    nojit = dict(base, CUDA_CACHE_DISABLE="1")
    with tempfile.TemporaryDirectory() as store, tempfile.TemporaryDirectory() as jit:
        env = dict(nojit, CUDNN_PY_PLAN_CACHE_DIR=store)
        jit_env = dict(base, CUDA_CACHE_PATH=jit)
        runs = [("cudnn-py, no plan store, first process on the machine",
                 run_child(["cudnn-py"], nojit)),
                ("cudnn-py, no plan store", run_child(["cudnn-py"], nojit)),
                ("cudnn-py, empty plan store (cold)", run_child(["cudnn-py"], env)),
                ("cudnn-py, filled plan store (warm)", run_child(["cudnn-py"], env)),
                ("cudnn-frontend", run_child(["frontend"], nojit)),
                ("cudnn-py, no plan store, empty driver JIT cache", run_child(["cudnn-py"], jit_env)),
                ("cudnn-py, no plan store, filled driver JIT cache", run_child(["cudnn-py"], jit_env))]
        stored = sorted(os.listdir(store))
        if args.kernel_cache:
            kc = os.path.join(store, "kernel_cache.json")
            runs += [("kernel cache: empty, saved", run_child(["kc-save", kc], nojit)),
                     ("kernel cache: loaded", run_child(["kc-load", kc], nojit))]
    print(f"shape B,H,S,D = {shape}, bf16; plan store files after the runs: {len(stored)}; CUDA_CACHE_DISABLE=1 "
          f"unless a run names the driver JIT cache")
    for who, res in runs:
        print(f"\n{who}:")
        for key, val in res.items():
            print(f"  {key:34s} {val:10.1f}" if isinstance(val, float) else f"  {key:34s} {val}")


if __name__ == "__main__":
    main()
