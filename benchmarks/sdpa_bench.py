"""Attention speed: cudnn-py's ``sdpa`` / ``sdpa_backward`` beside torch's ``scaled_dot_product_attention`` with the
cuDNN and flash backends and NVIDIA's cudnn-frontend (Python API, where it imports), in one process on one GPU.
Prints tables; asserts nothing.

TFLOP/s count 4 * B * Hq * Sq * Skv * D for the forward (half of it under a causal mask) and 2.5 times that for the
backward. A sample is the device time between events around up to ``--inner`` back-to-back calls, divided by the
number of calls (fewer for the long rows, so each sample stays near 20 ms). Per row, every peer's forward and
backward are set up and warmed up first, then timed in ``--rounds`` interleaved rounds: each round takes one
sample of every callable in a new random order, each timed sample right after an untimed one of the same callable
(the GPU's clocks under its power limit follow the load: a peer timed right after a lighter kernel would run at
higher clocks), so clock and thermal drift spreads over all peers alike. A time is the median of a callable's
samples; the spread column is the forward's (max - min) / median over the rounds. The FP8 rows (``sdpa_fp8``) are
timed the same way, cudnn-py alone. After the table, the llama3.1 rows stand beside NVIDIA's published cuDNN 9.19
H200 figures (measured there with a fresh process per case and no warm-up). The decode row (S_q = 1 against a
paged KV cache of 8192 tokens, microseconds and the K/V bytes read per second; torch has no paged attention, so its
rows read a contiguous cache of the same size) takes the same warm-up and samples, one callable after another
instead of in rounds. The host row is the wall time per call of a tiny problem (launch-bound: the binding's own
cost). The GPU's power limit and maximum clocks are printed first where ``nvidia-smi`` runs.

    python benchmarks/sdpa_bench.py                   # every row
    python benchmarks/sdpa_bench.py --rows llama,decode   # rows whose label contains 'llama' or 'decode'
    python benchmarks/sdpa_bench.py --autotune        # cudnn-py also with autotuned plans
    python benchmarks/sdpa_bench.py --rounds 30       # more interleaved rounds per row
"""
from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable

import cudnn_py
from cudnn_py.cli.prerequisites import script_args
from cudnn_py.graph.ops.sdpa import FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES
from cudnn_py.ops import sdpa as S

#: (label, B, Hq, Hkv, S, D)
SHAPES = [("B4 H16 S1k D128", 4, 16, 16, 1024, 128), ("B4 H16 S4k D128", 4, 16, 16, 4096, 128),
          ("B4 H16 S16k D128", 4, 16, 16, 16384, 128), ("llama3.1 B1 H64/8 S4k D128", 1, 64, 8, 4096, 128),
          ("llama3.1 B1 H64/8 S16k D128", 1, 64, 8, 16384, 128)]
#: FP8 (e4m3) rows, through cudnn_py.sdpa_fp8 / sdpa_fp8_backward: (label, B, Hq, Hkv, S, D)
FP8_SHAPES = [("llama3.1 B1 H64/8 S4k D128 FP8", 1, 64, 8, 4096, 128),
              ("llama3.1 B1 H64/8 S16k D128 FP8", 1, 64, 8, 16384, 128)]
#: decode: (label, B, Hq, Hkv, S_kv, D, block size)
DECODE = ("decode B8 H32/8 Skv8k D128 paged", 8, 32, 8, 8192, 128, 64)
#: NVIDIA's published cuDNN 9.19 H200 TFLOP/s, (forward, backward or None), by row label
PUBLISHED = {"llama3.1 B1 H64/8 S4k D128": (671, 560), "llama3.1 B1 H64/8 S16k D128": (702, 612),
             "llama3.1 B1 H64/8 S4k D128 causal": (591, 474), "llama3.1 B1 H64/8 S4k D128 FP8": (973, None),
             "llama3.1 B1 H64/8 S16k D128 FP8": (1055, None)}
SAMPLE_MS = 20.0
Sampler = Callable[[Callable[[], object], int], float]


def sample_ms(fn: Callable[[], object], inner: int) -> float:
    """Device ms per call of ``fn`` over one sample of ``inner`` back-to-back calls between CUDA events."""
    with cudnn_py.timer() as t:
        for _ in range(inner):
            fn()
    return t.ms / inner


def rounds_ms(peers: dict[str, tuple], timing: tuple[int, int, int],
              sample: Sampler = sample_ms) -> dict[str, list[list[float]]]:
    """Samples of every peer's callables, taken in interleaved rounds.

    :param peers: name -> callables (e.g. forward, backward).
    :param timing: (warm-up calls, rounds, calls per sample at most).
    :param sample: ``sample(fn, calls) -> ms per call``.
    :returns: name -> one list of per-call ms per callable, one entry per round. Each callable is first warmed up
        and given the calls per sample (``inner`` at most) that make a sample about ``SAMPLE_MS``; each round then
        samples the peers in a new random order (seeded), each peer's callables in turn, every timed sample right
        after an untimed one of the same callable.
    """
    warmup, rounds, inner = timing

    def calls_per_sample(fn) -> int:
        for _ in range(warmup):
            fn()
        return max(1, min(inner, int(SAMPLE_MS / max(sample(fn, 1), 1e-3))))

    calls = {name: [calls_per_sample(fn) for fn in fns] for name, fns in peers.items()}
    times = {name: [[] for _ in fns] for name, fns in peers.items()}
    names = list(peers)
    order = random.Random(0)
    for _ in range(rounds if names else 0):
        order.shuffle(names)
        for name in names:
            for fn, n, out in zip(peers[name], calls[name], times[name]):
                sample(fn, n)  # untimed: the GPU's clocks settle on this callable, not on the one before it
                out.append(sample(fn, n))
    return times


def median_ms(fn: Callable[[], object], timing: tuple[int, int, int]) -> float:
    """Median device ms per call of ``fn`` alone; ``timing`` = (warm-up calls, samples, calls per sample at most)."""
    return statistics.median(rounds_ms({"": (fn,)}, timing)[""][0])


def flops(b, hq, s, d, causal) -> float:
    return 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)


def cudnn_py_case(h, q, k, v, do, causal, autotune) -> tuple[Callable, Callable]:
    """(forward, backward) callables through the cached-plan entry points, outputs preallocated. Prints the wall
    time of each first call (graph, heuristics, plan build with any runtime compilation, autotuning)."""
    t0 = time.perf_counter()
    o, st = S.sdpa(h, q, k, v, causal=causal, return_stats=True, autotune=autotune)
    cudnn_py.synchronize()
    t1 = time.perf_counter()
    grads = S.sdpa_backward(h, q, k, v, o, do, st, causal=causal, autotune=autotune)
    cudnn_py.synchronize()
    print(f"  cudnn-py first call{' (autotune)' if autotune else ''}{' causal' if causal else ''}: forward "
          f"{(t1 - t0) * 1e3:.0f} ms, backward {(time.perf_counter() - t1) * 1e3:.0f} ms", flush=True)
    return (lambda: S.sdpa(h, q, k, v, causal=causal, o=o, stats=st, autotune=autotune),
            lambda: S.sdpa_backward(h, q, k, v, o, do, st, causal=causal, dq=grads[0], dk=grads[1], dv=grads[2],
                                    autotune=autotune))


def torch_case(torch, backend, q, k, v, do, causal) -> tuple[Callable, Callable]:
    """(forward, backward) callables of torch's SDPA on one backend, each called once (a backend that refuses
    the shape raises here); grouped-query K/V through ``enable_gqa`` where the backend takes it, else repeated to
    Q's heads (same FLOPs, more K/V traffic). The forward enters the backend's ``sdpa_kernel`` on each call (the
    peers' calls interleave); the backward is autograd's through one retained forward."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    hq, hk = q.shape[1], k.shape[1]
    kw = {}
    if hk != hq:
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            kw = {"enable_gqa": True}
        except RuntimeError:
            k, v = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)

    def fwd():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)

    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, **kw)

    def bwd():
        return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    fwd()
    bwd()
    return fwd, bwd


def fp8_case(h, torch, b, hq, hk, s, d, causal) -> tuple[Callable, Callable]:
    """(forward, backward) callables of ``cudnn_py.sdpa_fp8`` / ``sdpa_fp8_backward`` (e4m3) on torch float8 tensors
    with outputs preallocated; unit scales as device tensors; random data made on the GPU."""
    e4m3 = torch.float8_e4m3fn
    q, k, v, do = (torch.randn(*sh, device="cuda").to(e4m3) for sh in ((b, hq, s, d), (b, hk, s, d), (b, hk, s, d),
                                                                        (b, hq, s, d)))
    one = torch.ones(1, device="cuda")
    fwd_sc, bwd_sc = dict.fromkeys(FP8_FORWARD_SCALES, one), dict.fromkeys(FP8_BACKWARD_SCALES, one)
    o, st, am_s, am_o = S.sdpa_fp8(h, q, k, v, causal=causal, return_stats=True, **fwd_sc)
    grads = S.sdpa_fp8_backward(h, q, k, v, o, do, st, causal=causal, **bwd_sc)
    out = dict(zip(("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp"), grads))
    return (lambda: S.sdpa_fp8(h, q, k, v, causal=causal, o=o, stats=st, amax_s=am_s, amax_o=am_o, **fwd_sc),
            lambda: S.sdpa_fp8_backward(h, q, k, v, o, do, st, causal=causal, **out, **bwd_sc))


# -- cudnn-frontend (NVIDIA's compiled Python binding) -----------------------------------------------------------
class Frontend:
    """cudnn-frontend's graph API on torch tensors: build a graph once per configuration, execute it."""

    def __init__(self, cudnn, torch):
        self.cudnn, self.torch = cudnn, torch
        self.handle = cudnn.create_handle()
        cudnn.set_stream(self.handle, torch.cuda.current_stream().cuda_stream)

    def graph(self):
        c = self.cudnn
        return c.pygraph(io_data_type=c.data_type.BFLOAT16, intermediate_data_type=c.data_type.FLOAT,
                         compute_data_type=c.data_type.FLOAT, handle=self.handle)

    def build(self, g):
        c = self.cudnn
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([c.heur_mode.A, c.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        return self.torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=self.torch.uint8)

    def sdpa(self, q, k, v, do, causal) -> tuple:
        """(forward runner, backward runner, build seconds fwd, bwd)."""
        torch = self.torch
        b, hq, s, d = q.shape
        o, dq, dk, dv = torch.empty_like(q), torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        st = torch.empty(b, hq, s, 1, device="cuda", dtype=torch.float32)
        t0 = time.perf_counter()
        gf = self.graph()
        tq, tk, tv = gf.tensor_like(q), gf.tensor_like(k), gf.tensor_like(v)
        to, ts = gf.sdpa(q=tq, k=tk, v=tv, generate_stats=True, attn_scale=1.0 / d ** 0.5,
                         diagonal_band_right_bound=0 if causal else None)
        to.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
        ts.set_output(True).set_data_type(self.cudnn.data_type.FLOAT)
        wf = self.build(gf)
        t1 = time.perf_counter()
        gb = self.graph()
        bq, bk, bv, bo, bdo, bst = (gb.tensor_like(x) for x in (q, k, v, o, do, st))
        gq, gk, gv = gb.sdpa_backward(q=bq, k=bk, v=bv, o=bo, dO=bdo, stats=bst, attn_scale=1.0 / d ** 0.5,
                                      diagonal_band_right_bound=0 if causal else None)
        for t, x in ((gq, dq), (gk, dk), (gv, dv)):
            t.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
        wb = self.build(gb)
        t2 = time.perf_counter()
        packf = {tq: q, tk: k, tv: v, to: o, ts: st}
        packb = {bq: q, bk: k, bv: v, bo: o, bdo: do, bst: st, gq: dq, gk: dk, gv: dv}
        return (lambda: gf.execute(packf, wf, handle=self.handle), lambda: gb.execute(packb, wb, handle=self.handle),
                t1 - t0, t2 - t1)

    def decode(self, q, kc, vc, table, seq_q, seq_kv, max_kv):
        """The paged decode forward runner."""
        torch = self.torch
        o = torch.empty_like(q)
        g = self.graph()
        tq, tk, tv, tt, tsq, tskv = (g.tensor_like(x) for x in (q, kc, vc, table, seq_q, seq_kv))
        to, _ = g.sdpa(q=tq, k=tk, v=tv, generate_stats=False, attn_scale=1.0 / q.shape[3] ** 0.5,
                       use_padding_mask=True, seq_len_q=tsq, seq_len_kv=tskv, paged_attention_k_table=tt,
                       paged_attention_v_table=tt, paged_attention_max_seq_len_kv=max_kv)
        to.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
        w = self.build(g)
        pack = {tq: q, tk: kc, tv: vc, tt: table, tsq: seq_q, tskv: seq_kv, to: o}
        return lambda: g.execute(pack, w, handle=self.handle)


def frontend_case(fe, q, k, v, do, causal) -> tuple[Callable, Callable]:
    """(forward, backward) callables of cudnn-frontend's graphs, each called once; prints the build times."""
    fwd, bwd, tf, tb = fe.sdpa(q, k, v, do, causal)
    fwd()
    bwd()
    print(f"  cudnn-frontend build{' causal' if causal else ''}: forward {tf * 1e3:.0f} ms, backward {tb * 1e3:.0f} ms",
          flush=True)
    return fwd, bwd


# -- decode ------------------------------------------------------------------------------------------------------
def decode_rows(h, torch, fe, timing) -> list[tuple[str, float, float]]:
    """[(who, microseconds, GB/s of K/V read)] for the paged decode case."""
    _, b, hq, hk, skv, d, blk = DECODE
    pages = skv // blk
    bf = torch.bfloat16
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=bf)
    kc = torch.randn(b * pages, hk, blk, d, device="cuda", dtype=bf)
    vc = torch.randn(b * pages, hk, blk, d, device="cuda", dtype=bf)
    table = torch.randperm(b * pages, device="cuda", dtype=torch.int32).reshape(b, 1, pages, 1)
    seq_q = torch.ones(b, 1, 1, 1, device="cuda", dtype=torch.int32)
    seq_kv = torch.full((b, 1, 1, 1), skv, device="cuda", dtype=torch.int32)
    kv_bytes = 2 * b * hk * skv * d * 2
    rows = []
    # cudnn-py: the entry point with the page tables, output preallocated
    out = torch.empty_like(q)
    rows.append(("cudnn-py (paged)", median_ms(lambda: S.sdpa(h, q, kc, vc, seq_len_q=seq_q, seq_len_kv=seq_kv,
                                                               page_table_k=table, page_table_v=table,
                                                               max_seq_len_kv=skv, o=out), timing)))
    if fe is not None:
        try:
            run = fe.decode(q, kc, vc, table, seq_q, seq_kv, skv)
            rows.append(("cudnn-frontend (paged)", median_ms(run, timing)))
        except Exception as e:  # noqa: BLE001 - a peer that cannot build this case
            print(f"cudnn-frontend decode: {type(e).__name__}: {str(e).splitlines()[0]}")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kk = torch.randn(b, hk, skv, d, device="cuda", dtype=bf)
    vv = torch.randn(b, hk, skv, d, device="cuda", dtype=bf)
    for name, be in (("torch cuDNN (contiguous)", SDPBackend.CUDNN_ATTENTION),
                     ("torch flash (contiguous)", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(be):
                F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)
                rows.append((name, median_ms(lambda: F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True),
                                             timing)))
        except RuntimeError as e:
            print(f"{name} decode: {str(e).splitlines()[0]}")
    return [(who, ms * 1e3, kv_bytes / (ms * 1e-3) / 1e9) for who, ms in rows]


def host_us(fn, calls: int = 3000) -> float:
    for _ in range(100):
        fn()
    cudnn_py.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    cudnn_py.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def print_gpu() -> None:
    """Print the GPU's power limits and maximum clocks as ``nvidia-smi`` reports them, where it runs."""
    query = "name,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem"
    if shutil.which("nvidia-smi") is None:
        return
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return
    for line in out.strip().splitlines():
        print(f"nvidia-smi ({query}): {line}")


def summary(samples: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of a callable's samples."""
    return statistics.median(samples), min(samples), max(samples)


def print_table(rows: list[tuple]) -> None:
    """The attention table; ``rows`` = (case, who, forward FLOPs, forward (median, min, max) ms, backward ditto)."""
    print(f"\n{'case':38s} {'who':20s} {'fwd ms':>8s} {'TFLOP/s':>8s} {'bwd ms':>8s} {'TFLOP/s':>8s} "
          f"{'fwd+bwd TFLOP/s':>16s} {'fwd spread':>10s}")
    for case, who, f, (fwd, lo, hi), (bwd, _, _) in rows:
        spread = f"{(hi - lo) / fwd * 100:.1f} %"
        print(f"{case:38s} {who:20s} {fwd:8.3f} {f / fwd / 1e9:8.1f} {bwd:8.3f} {2.5 * f / bwd / 1e9:8.1f} "
              f"{3.5 * f / (fwd + bwd) / 1e9:16.1f} {spread:>10s}")


def print_published(rows: list[tuple]) -> None:
    """NVIDIA's published figures (``PUBLISHED``) beside the best cudnn-py TFLOP/s of the same rows in ``rows``."""
    best = {}
    for case, who, f, fwd, bwd in rows:
        if case in PUBLISHED and who.startswith("cudnn-py"):
            best[case] = tuple(max(a, b) for a, b in zip(best.get(case, (0.0, 0.0)), (f / fwd[0] / 1e9,
                                                                                       2.5 * f / bwd[0] / 1e9)))
    if not best:
        return

    def cells(measured, published):
        if published is None:
            return f"{measured:8.1f} {'-':>9s} {'-':>7s}"
        return f"{measured:8.1f} {published:9d} {measured / published * 100:6.1f}%"
    print("\nNVIDIA's published cuDNN 9.19 H200 TFLOP/s beside cudnn-py's best here (% = measured / published)")
    print(f"{'case':38s} {'fwd':>8s} {'published':>9s} {'%':>7s} {'bwd':>8s} {'published':>9s} {'%':>7s}")
    for case, (pf, pb) in PUBLISHED.items():
        if case in best:
            print(f"{case:38s} {cells(best[case][0], pf)} {cells(best[case][1], pb)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds per row (samples per figure)")
    ap.add_argument("--inner", type=int, default=10, help="calls per timed sample (at most)")
    ap.add_argument("--rows", default="", help="only rows whose label contains one of these (comma-separated; "
                    "'decode' for the decode row, 'host' for the host-time row alone)")
    ap.add_argument("--autotune", action="store_true", help="also time cudnn-py with autotuned plans")
    ap.add_argument("--no-frontend", action="store_true", help="without cudnn-frontend")
    args = script_args(ap, argv, modules=("torch",))
    timing = (args.warmup, max(1, args.rounds), max(1, args.inner))
    print_gpu()
    import torch
    fe = None
    if not args.no_frontend:
        try:
            import cudnn
            fe = Frontend(cudnn, torch)
            print(f"cudnn-frontend {cudnn.__version__} (backend {cudnn.backend_version()})")
        except Exception as e:  # noqa: BLE001 - not installed, or its library does not load
            print(f"cudnn-frontend not used: {type(e).__name__}: {e}")
    h = cudnn_py.Handle()
    print(f"cuDNN {cudnn_py.version()}, {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for label, b, hq, hk, s, d in SHAPES:
        if not any(r in label for r in args.rows.split(",")):
            continue
        mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16)  # noqa: E731
        q, k, v, do = mk(b, hq, s, d), mk(b, hk, s, d), mk(b, hk, s, d), mk(b, hq, s, d)
        for causal in (False, True):
            peers = {}
            for tuned in (False, True) if args.autotune else (False,):
                who = "cudnn-py" + (" autotuned" if tuned else "")
                try:
                    peers[who] = cudnn_py_case(h, q, k, v, do, causal, tuned)
                except (RuntimeError, ValueError, TypeError) as e:  # a configuration this cuDNN refuses
                    print(f"{who} {label}: {e}")
            if fe is not None:
                try:
                    peers["cudnn-frontend"] = frontend_case(fe, q, k, v, do, causal)
                except Exception as e:  # noqa: BLE001
                    print(f"cudnn-frontend {label}: {type(e).__name__}: {str(e).splitlines()[0]}")
            from torch.nn.attention import SDPBackend
            for name, be in (("torch cuDNN", SDPBackend.CUDNN_ATTENTION), ("torch flash", SDPBackend.FLASH_ATTENTION)):
                try:
                    peers[name] = torch_case(torch, be, q, k, v, do, causal)
                except RuntimeError as e:  # a backend that refuses this shape
                    print(f"{name} {label}: {str(e).splitlines()[0]}")
            case, f = label + (" causal" if causal else ""), flops(b, hq, s, d, causal)
            for who, (fwd, bwd) in rounds_ms(peers, timing).items():
                rows.append((case, who, f, summary(fwd), summary(bwd)))
            del peers
            torch.cuda.empty_cache()
        print(f"  done {label}", flush=True)
    for label, b, hq, hk, s, d in FP8_SHAPES:
        if not any(r in label for r in args.rows.split(",")):
            continue
        for causal in (False, True):
            try:
                peers = {"cudnn-py": fp8_case(h, torch, b, hq, hk, s, d, causal)}
            except Exception as e:  # noqa: BLE001 - no FP8 engine for this case
                print(f"cudnn-py {label}: {type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            case, f = label + (" causal" if causal else ""), flops(b, hq, s, d, causal)
            fwd, bwd = rounds_ms(peers, timing)["cudnn-py"]
            rows.append((case, "cudnn-py", f, summary(fwd), summary(bwd)))
            del peers
            torch.cuda.empty_cache()
    print_table(rows)
    print_published(rows)

    if any(r in DECODE[0] for r in args.rows.split(",")):
        print(f"\n{DECODE[0]}: forward")
        print(f"{'who':28s} {'us':>8s} {'K/V GB/s':>9s}")
        for who, us, gbs in decode_rows(h, torch, fe, timing):
            print(f"{who:28s} {us:8.1f} {gbs:9.0f}")

    # host time per call of a tiny problem (the GPU is idle most of the time: the binding's cost shows)
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(1, 1, 64, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    S.sdpa(h, q, q, q, o=o)
    ours = [host_us(lambda: S.sdpa(h, q, q, q, o=o)) for _ in range(3)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        theirs = [host_us(lambda: F.scaled_dot_product_attention(q, q, q)) for _ in range(3)]
    qa, oa = cudnn_py.as_array(q), cudnn_py.as_array(o)
    arrays = [host_us(lambda: S.sdpa(h, qa, qa, qa, o=oa)) for _ in range(3)]
    print(f"\nhost time per call, B1 H1 S64 D64 bf16 forward (best of 3 x 3000 calls): cudnn-py {min(ours):.1f} us "
          f"(torch tensors), {min(arrays):.1f} us (DeviceArrays); torch cuDNN backend {min(theirs):.1f} us")
    if fe is not None:
        try:
            fwd, _, _, _ = fe.sdpa(q, q, q, q, False)
            print(f"cudnn-frontend execute: {min(host_us(fwd) for _ in range(3)):.1f} us")
        except Exception as e:  # noqa: BLE001
            print(f"cudnn-frontend host time: {type(e).__name__}: {str(e).splitlines()[0]}")


if __name__ == "__main__":
    main()
