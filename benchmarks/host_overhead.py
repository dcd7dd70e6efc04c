"""Host time per call of every operation family on tiny tensors: cudnn-py with DeviceArrays and with torch tensors,
each with its outputs given (all it writes: batch norm training's saved statistics and dropout's reserve too) and
allocated, beside the bare C call of the route the call takes and torch's closest op.

    python benchmarks/host_overhead.py [--rounds 5] [--calls 2000] [--only NAME] [--json PATH]
    python benchmarks/host_overhead.py --summary RUN.json [RUN.json ...]   # one tree's runs: medians and the bars

Tiny float16 tensors (1x8x8x8 unless a row says otherwise), so every call is host-bound: the time per call of a
Python loop (median of ``--rounds`` rounds of ``--calls`` calls, after a warm-up, the stream synchronised after each
round) is the host's. Each call is made as a caller's code makes it, its arguments in local variables
(:func:`site`). All columns of a row are measured in the same process, interleaved round by round. "bare C"
is the route's own work with everything prepared: the legacy C call with its descriptors and scaling factors, or
``cudnnBackendExecute`` with a cached variant pack, taken from the call's prepared call
(:mod:`cudnn_py.calls.prepared`). "dev added" is the package's time above it with DeviceArrays, output given /
allocated (the issue's bars: 3 us given, 5 us allocated). "trc floor" is the bare C call plus torch's own costs for
the call's tensors (:func:`torch_floor`): what the torch columns cannot go below; "trc added" is the package's time
above that floor with torch tensors. The host's loop speed (``sum((1, 2, 3))``, ns) is printed before and after: these
hosts drift, so compare rows within one run, and trees by runs taken in turns (``--summary`` of each tree's).
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
import timeit
from collections.abc import Callable

import numpy as np

import cudnn_py as cudnn
from cudnn_py.calls import prepared as prep
from cudnn_py.core.conv_layout import packed_strides
from cudnn_py.cli.prerequisites import script_args

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the torch columns are left out
    torch = None

SHAPE = (1, 8, 8, 8)
RESERVE = cudnn.dropout_reserve_size(SHAPE, np.float16)  # dropout's mask bytes


class Arrays:
    """The rows' inputs in one package: x, y (a forward output), dy, a (1, C, 1, 1) bias."""

    def __init__(self, kind: str, rng: np.random.Generator):
        self.kind = kind
        host = {n: rng.standard_normal(SHAPE).astype(np.float16) for n in ("x", "y", "dy")}
        host["bias"] = rng.standard_normal((1, SHAPE[1], 1, 1)).astype(np.float16)
        for n in ("scale", "shift", "mean"):  # batch-norm parameters: float32 for float16 data
            host[n] = rng.standard_normal((1, SHAPE[1], 1, 1)).astype(np.float32)
        host["var"] = np.abs(host["mean"]) + 0.5
        host["w"] = rng.standard_normal((8, SHAPE[1], 3, 3)).astype(np.float16)
        host["q"] = rng.standard_normal((1, 2, 64, 64)).astype(np.float16)
        pooled = rng.standard_normal((1, 8, 4, 4)).astype(np.float16)
        host["py"], host["pdy"] = pooled, pooled.copy()
        for n, a in host.items():
            setattr(self, n, self.new(a))

    def new(self, a: np.ndarray):
        if self.kind == "torch":
            return torch.from_numpy(a).cuda()
        return cudnn.to_device(a)

    def like(self, a):
        return torch.empty_like(a) if self.kind == "torch" else cudnn.empty(a.shape, a.dtype)

    def like_nhwc(self, a):
        """A new array shaped as the 4-D ``a``, channels last in memory."""
        if self.kind == "torch":
            return torch.empty_like(a, memory_format=torch.channels_last)
        flat = cudnn.empty((a.size,), a.dtype)
        return cudnn.DeviceArray(flat.ptr, a.shape, a.dtype, packed_strides(a.shape, True), owner=flat)

    def bytes(self, n: int):
        return torch.empty(n, dtype=torch.uint8, device="cuda") if self.kind == "torch" else cudnn.empty(n, np.uint8)


def site(fn: Callable, *args, **kwargs) -> Callable[[], object]:
    """``fn(*args, **kwargs)`` as a caller's code makes it, each argument a local variable: a function of no
    arguments (so a column times the call, not the reading and merging of its arguments)."""
    names = [f"a{i}" for i in range(len(args))]
    call = ", ".join([*names, *(f"{k}={k}" for k in kwargs)])
    params = ", ".join(f"{n}={n}" for n in ["fn", *names, *kwargs])  # defaults: read as fast locals
    return eval(f"lambda {params}: fn({call})", {}, {"fn": fn, **dict(zip(names, args)), **kwargs})


def _rows(h):
    """name -> (cudnn call site (arrays, given output or None: :func:`site`), the output to give (arrays), torch's op
    (torch arrays))."""
    pool = cudnn.Pooling("max", 2, stride=2)
    lrn = cudnn.LRN(5)
    conv = cudnn.Convolution(padding=1)
    drop = cudnn.Dropout(h, 0.5)
    r = {
        "activation_forward relu": (lambda a, o: site(cudnn.activation_forward, h, "relu", a.x, y=o),
                                    lambda a: a.like(a.x), lambda t: torch.relu(t.x)),
        "activation_backward relu": (lambda a, o: site(cudnn.activation_backward, h, "relu", a.x, a.y, a.dy, dx=o),
                                     lambda a: a.like(a.x), lambda t: torch.ops.aten.threshold_backward(t.dy, t.x, 0)),
        "softmax_forward": (lambda a, o: site(cudnn.softmax_forward, h, a.x, y=o), lambda a: a.like(a.x),
                            lambda t: torch.softmax(t.x, 1)),
        "softmax_backward": (lambda a, o: site(cudnn.softmax_backward, h, a.y, a.dy, dx=o), lambda a: a.like(a.x),
                             lambda t: torch.ops.aten._softmax_backward_data(t.dy, t.y, 1, t.y.dtype)),
        "pooling_forward max 2x2": (lambda a, o: site(cudnn.pooling_forward, h, pool, a.x, y=o), lambda a: a.like(a.py),
                                    lambda t: F.max_pool2d(t.x, 2)),
        "pooling_backward max 2x2": (lambda a, o: site(cudnn.pooling_backward, h, pool, a.x, a.py, a.pdy, dx=o),
                                     lambda a: a.like(a.x), None),
        "add_tensor bias": (lambda a, o: site(cudnn.add_tensor, h, a.bias, a.y, beta=1.0), None,
                            lambda t: t.y.add_(t.bias)),
        "op_tensor add": (lambda a, o: site(cudnn.op_tensor, h, "add", a.x, a.dy, c=o), lambda a: a.like(a.x),
                          lambda t: torch.add(t.x, t.dy)),
        "scale_tensor": (lambda a, o: site(cudnn.scale_tensor, h, a.y, alpha=1.0), None, lambda t: t.y.mul_(1.0)),
        "transform_tensor": (lambda a, o: site(cudnn.transform_tensor, h, a.x, y=o), lambda a: a.like(a.x),
                             lambda t: t.y.copy_(t.x)),
        "lrn_forward": (lambda a, o: site(cudnn.lrn_forward, h, lrn, a.x, y=o), lambda a: a.like(a.x),
                        lambda t: F.local_response_norm(t.x, 5)),
        "lrn_backward": (lambda a, o: site(cudnn.lrn_backward, h, lrn, a.x, a.y, a.dy, dx=o), lambda a: a.like(a.x),
                         None),
        "reduce_tensor sum": (lambda a, o: site(cudnn.reduce_tensor, h, "add", a.x, c=o,
                                                axes=(2, 3) if o is None else None),
                              lambda a: a.like(a.bias), lambda t: torch.sum(t.x, (2, 3), keepdim=True)),
        "batchnorm_forward_inference": (
            lambda a, o: site(cudnn.batchnorm_forward_inference, h, a.x, a.scale, a.shift, a.mean, a.var, y=o),
            lambda a: a.like(a.x), lambda t: F.batch_norm(t.x, t.mean, t.var, t.scale.view(-1), t.shift.view(-1))),
        "batchnorm_forward_training": (
            lambda a, o: site(cudnn.batchnorm_forward_training, h, a.x, a.scale, a.shift, running_mean=a.mean,
                              running_var=a.var, factor=0.1, **(o or {})),
            lambda a: dict(y=a.like(a.x), saved_mean=a.like(a.mean), saved_inv_var=a.like(a.mean)),
            lambda t: F.batch_norm(t.x, t.mean.view(-1), t.var.view(-1), t.scale.view(-1), t.shift.view(-1),
                                   training=True)),
        "dropout_forward": (lambda a, o: site(cudnn.dropout_forward, h, drop, a.x, **(o or {})),
                            lambda a: dict(y=a.like(a.x), reserve=a.bytes(RESERVE)),
                            lambda t: F.dropout(t.x, 0.5)),
        "set_tensor": (lambda a, o: site(cudnn.set_tensor, h, a.y, 0.5), None, lambda t: t.y.fill_(0.5)),
        "transform_tensor_ex NHWC": (lambda a, o: site(cudnn.transform_tensor_ex, h, a.x, layout="NHWC", y=o),
                                     lambda a: a.like_nhwc(a.x),
                                     lambda t: t.x.contiguous(memory_format=torch.channels_last)),
        "divisive_normalization_forward": (lambda a, o: site(cudnn.divisive_normalization_forward, h, lrn, a.x, y=o),
                                           lambda a: a.like(a.x), None),
        "convolution_forward 3x3": (lambda a, o: site(cudnn.convolution_forward, h, conv, a.x, a.w, y=o),
                                    lambda a: a.like(a.x), lambda t: F.conv2d(t.x, t.w, padding=1)),
        "sdpa": (lambda a, o: site(cudnn.sdpa, h, a.q, a.q, a.q, o=o), lambda a: a.like(a.q),
                 lambda t: F.scaled_dot_product_attention(t.q, t.q, t.q)),
    }
    return r


def bare_steps(h, p: prep.Prepared, address: Callable[[int], int]) -> Callable[[], None]:
    """``p``'s recorded steps alone, its array slot ``k`` at ``address(k)``: the C function called directly (a legacy
    route) or the plan executed with a variant pack made once (a graph route)."""
    steps = []
    for call, base, slots, workspace, _ in p.steps:
        args = list(base)
        for pos, slot in slots:
            args[pos] = address(slot)
        for pos, offset in workspace:
            args[pos] = h.workspace.get(p.workspace, h.stream) + offset
        runner = getattr(call, "__self__", None)
        if runner is not None and hasattr(runner, "plan_ptr"):  # its replay(workspace, *pointers)
            wsp, ptrs = args[0], tuple(args[1:])
            vp = runner.pack(("bare",) + ptrs, ptrs, wsp)
            launch, hp, plan = runner.launch, runner.h, runner.plan_ptr
            steps.append(lambda launch=launch, hp=hp, plan=plan, vp=vp: launch(hp, plan, vp))
        else:
            steps.append(lambda call=call, args=tuple(args): call(*args))
    return steps[0] if len(steps) == 1 else (lambda: [s() for s in steps] and None)


def bare_call(h, name: str) -> Callable[[], None] | None:
    """The route's own work for the last prepared call made for ``name``'s function (:func:`bare_steps`), each array
    at a buffer of its own (any valid address of the right size: the call's own arrays live in the row)."""
    entries = [p for p in h.cache.get(prep.CACHE, {}).values() if p.name == name.split()[0]]
    if not entries:
        return None
    fake: dict[int, object] = {}
    bare_call.keep = fake  # type: ignore[attr-defined]
    return bare_steps(h, entries[-1], lambda slot: fake.setdefault(slot, cudnn.empty((1 << 16,), np.uint8)).ptr)


def torch_floor(bare: Callable[[], None], tensors: list, outputs: list) -> Callable[[], None]:
    """The bare C call plus what torch charges any caller for these tensors: each one's signature read (its shape,
    its layout (``is_contiguous()`` where it is contiguous, else its strides), dtype, device and address: five calls
    into torch, as the prepared call's guard reads them) and each of ``outputs`` made by torch's caching allocator
    (its address read) and dropped. A package adding nothing of its own for torch tensors takes this."""
    makers = [(o.new_empty_strided, o.shape, o.stride()) for o in outputs]
    layouts = [t.is_contiguous if t.is_contiguous() else t.stride for t in tensors]

    def floor() -> None:
        for t, layout in zip(tensors, layouts):
            t.shape, layout(), t.dtype, t.get_device(), t.data_ptr()
        for make, shape, stride in makers:
            make(shape, stride).data_ptr()
        bare()
    return floor


def per_call(fns: dict, calls: int, rounds: int, sync) -> dict:
    """Median us per call of each function, rounds interleaved."""
    for fn in fns.values():
        for _ in range(200):
            fn()
    sync()
    samples: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            samples[k].append((time.perf_counter() - t0) / calls * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def loop_ns() -> float:
    """The host's speed: ns per ``sum((1, 2, 3))``, the best of five timings."""
    return min(timeit.repeat("sum((1, 2, 3))", number=100_000, repeat=5)) / 100_000 * 1e9


HEADER = (f"{'operation':28s} {'route':6s} {'bare C':>7s} {'dev giv':>8s} {'dev new':>8s} {'trc giv':>8s} "
          f"{'trc new':>8s} {'torch':>7s} {'dev added':>11s} {'trc floor':>11s} {'trc added':>11s}")


def derived(us: dict) -> dict[str, float]:
    """One run's row measured against itself, where its columns exist: DeviceArrays above the bare C call ("+dev
    given", "+dev new"), torch tensors above torch's floor ("+torch ..."), torch tensors and torch's floor over
    DeviceArrays ("torch/dev ...", "floor/dev ...")."""
    d = {}
    for end in ("given", "new"):
        dev, trc, floor = us.get(f"dev {end}"), us.get(f"torch {end}"), us.get(f"floor {end}")
        if dev is not None and "bare" in us:
            d[f"+dev {end}"] = dev - us["bare"]
        if trc is not None and floor is not None:
            d[f"+torch {end}"] = trc - floor
        if dev and trc is not None:
            d[f"torch/dev {end}"] = trc / dev
        if dev and floor is not None:
            d[f"floor/dev {end}"] = floor / dev
    return d


def line(name: str, route: str, us: dict, d: dict) -> str:
    """A row of the table: each column's us per call, then ``d``'s (:func:`derived`) added time pairs (given / new)."""
    def cell(k: str, width: int = 8) -> str:
        return f"{us[k]:{width}.1f}" if k in us else f"{'-':>{width}s}"

    def pair(a: float | None, b: float | None) -> str:
        return "-" if a is None else f"{a:4.1f}/" + ("-" if b is None else f"{b:.1f}")
    return (f"{name:28s} {route:6s} {cell('bare', 7)} {cell('dev given')} {cell('dev new')} {cell('torch given')} "
            f"{cell('torch new')} {cell('torch op', 7)} {pair(d.get('+dev given'), d.get('+dev new')):>11s} "
            f"{pair(us.get('floor given'), us.get('floor new')):>11s} "
            f"{pair(d.get('+torch given'), d.get('+torch new')):>11s}")


def summary(paths: list[str]) -> str:
    """One tree's ``--json`` runs as one table and the issue's bars counted. Each column is its median over the runs;
    each added time and ratio is the median of each run's own (a run's columns are interleaved, its host one speed):
    DeviceArrays within 3 us above the bare C call given and 5 us new; torch tensors within 1.1x of DeviceArrays, and
    how often torch's own floor already is not; the package's time above that floor with torch tensors against its
    time above the bare C call with DeviceArrays."""
    runs = []
    for path in paths:
        with open(path) as fh:
            runs.append(json.load(fh))
    rows: dict[str, list[dict]] = {}
    for run in runs:
        for r in run["rows"]:
            rows.setdefault(r["op"], []).append(r)
    table, tally = [HEADER], collections.Counter()
    for name, rs in rows.items():
        us = {k: statistics.median(r[k] for r in rs if k in r) for k in {k for r in rs for k in r} - {"op", "route"}}
        each = [derived(r) for r in rs]
        d = {k: statistics.median(e[k] for e in each if k in e) for k in {k for e in each for k in e}}
        table.append(line(name, rs[0]["route"], us, d))
        for end, bar in (("given", 3.0), ("new", 5.0)):
            if f"+dev {end}" in d:
                tally[f"dev {end}"] += 1
                tally[f"dev {end} within"] += d[f"+dev {end}"] <= bar
            if f"+dev {end}" in d and f"+torch {end}" in d:
                tally[f"trc {end}"] += 1
                tally[f"trc {end} at most dev"] += d[f"+torch {end}"] <= d[f"+dev {end}"]
                tally[f"ratio {end} within"] += d[f"torch/dev {end}"] <= 1.1
                tally[f"floor {end} over"] += d[f"floor/dev {end}"] > 1.1
    speeds = " ".join("/".join(f"{v:.1f}" for v in run.get("loop_ns", [])) or "-" for run in runs)
    table += [f"{len(runs)} run(s), loop speed before/after (ns): {speeds}"]
    for end, bar in (("given", 3), ("new", 5)):
        table.append(f"{end}: DeviceArrays within {bar} us of the bare C call in {tally[f'dev {end} within']} of "
                     f"{tally[f'dev {end}']} rows; torch tensors within 1.1x of DeviceArrays in "
                     f"{tally[f'ratio {end} within']} of {tally[f'trc {end}']}, torch's floor over 1.1x in "
                     f"{tally[f'floor {end} over']}; torch tensors add above their floor at most what DeviceArrays "
                     f"add above the bare C call in {tally[f'trc {end} at most dev']} of {tally[f'trc {end}']}")
    return "\n".join(table)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--only", default=None, help="rows whose name contains this")
    parser.add_argument("--json", default=None)
    parser.add_argument("--summary", nargs="+", metavar="JSON", help="one tree's --json runs: print their medians "
                        "and the bars counted, then exit (no GPU needed)")
    argv = sys.argv[1:] if argv is None else argv
    args = script_args(parser, argv, gpu="--summary" not in argv)
    if args.summary:
        try:
            print(summary(args.summary))
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"host_overhead.py: --summary: {e}") from None
        return
    h = cudnn.Handle()
    rng = np.random.default_rng(0)
    kinds = {"dev": Arrays("device", rng)}
    if torch is not None:
        kinds["torch"] = Arrays("torch", rng)
    sync = torch.cuda.synchronize if torch is not None else h.synchronize
    out, speeds = [], [loop_ns()]
    print(f"loop speed {speeds[0]:.1f} ns\n{HEADER}")
    for name, (call, given, torch_op) in _rows(h).items():
        if args.only and args.only not in name:
            continue
        fns = {}
        for kind, a in kinds.items():
            if given is not None:
                o = given(a)
                fns[f"{kind} given"] = call(a, o)
            fns[f"{kind} new" if given is not None else f"{kind} given"] = call(a, None)
        try:
            for fn in fns.values():
                fn()
        except cudnn.CudnnPyError as e:  # a row this machine's cuDNN refuses: said, and the table goes on
            print(f"{name:28s} refused: {type(e).__name__}: {str(e)[:80]}")
            continue
        bare = bare_call(h, name)
        if bare is not None:
            fns["bare"] = bare
        if bare is not None and "torch" in kinds:  # the torch tensors of each call (a site's defaults)
            t = kinds["torch"]
            made = [] if given is None else (lambda o: list(o.values()) if isinstance(o, dict) else [o])(given(t))
            read = {k: [v for v in fns[f"torch {k}"].__defaults__ if torch.is_tensor(v)] for k in ("given", "new")
                    if f"torch {k}" in fns}
            fns["floor given"] = torch_floor(bare, read["given"], [])
            if "new" in read:
                fns["floor new"] = torch_floor(bare, read["new"] + made, made)
        if torch_op is not None and "torch" in kinds:
            fns["torch op"] = lambda torch_op=torch_op, t=kinds["torch"]: torch_op(t)
        us = per_call(fns, args.calls, args.rounds, sync)
        steps = [p for p in h.cache.get(prep.CACHE, {}).values() if p.name == name.split()[0]]
        route = ("own" if not hasattr(getattr(cudnn, name.split()[0]), "__prepared__") else "-") if not steps else \
            ("graph" if any(hasattr(getattr(s[0], "__self__", None), "plan_ptr") for s in steps[-1].steps) else "legacy")
        print(line(name, route, us, derived(us)), flush=True)
        out.append({"op": name, "route": route, **{k: round(v, 2) for k, v in us.items()}})
    speeds.append(loop_ns())
    print(f"loop speed {speeds[1]:.1f} ns")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": SHAPE, "dtype": "float16", "loop_ns": [round(v, 1) for v in speeds], "rows": out}, f,
                      indent=1)


if __name__ == "__main__":
    main()
