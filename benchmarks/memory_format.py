"""Device time on channels-last data: each family with a new output, with a channels-last output given, and torch's
op, on float16 torch tensors of 32x256x56x56 in channels_last memory (asserts nothing).

    python benchmarks/memory_format.py [--repeats 7] [--calls 20] [--shape 32,256,56,56] [--json PATH]

A new output follows the input's memory format (README, "Outputs"): its time should match the given output's. Device
time is the median over ``--repeats`` of ``--calls`` calls queued behind a sleep kernel between CUDA events
(benchmarks/timing.py), after a warm-up that also makes each call's engine choice and prepared call; the columns of
a row are measured in one process, interleaved repeat by repeat. "new/given" and "new/torch" are the ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

import cudnn_py as cudnn
from cudnn_py.cli.prerequisites import script_args

try:
    import torch
    import torch.nn.functional as F
    from timing import event_ms  # this folder's CUDA-event timer (it needs torch)
except ImportError:  # pragma: no cover - script_args refuses the run in one line
    torch = None


def _rows(h, x, x2, p):
    """name -> (call with a new output, call with the output ``o`` given, torch's op or None)."""
    pool, lrn, drop = cudnn.Pooling("max", 2, stride=2), cudnn.LRN(5), cudnn.Dropout(h, 0.1)
    sc, bi, me, va = p
    return {
        "activation_forward relu": (lambda o: cudnn.activation_forward(h, "relu", x, y=o), lambda: torch.relu(x)),
        "softmax_forward channel": (lambda o: cudnn.softmax_forward(h, x, y=o), lambda: torch.softmax(x, 1)),
        "pooling_forward max 2x2": (lambda o: cudnn.pooling_forward(h, pool, x, y=o), lambda: F.max_pool2d(x, 2)),
        "lrn_forward": (lambda o: cudnn.lrn_forward(h, lrn, x, y=o), lambda: F.local_response_norm(x, 5)),
        "op_tensor add": (lambda o: cudnn.op_tensor(h, "add", x, x2, c=o), lambda: torch.add(x, x2)),
        "transform_tensor": (lambda o: cudnn.transform_tensor(h, x, y=o), lambda: x.clone()),
        "batchnorm_forward_inference": (
            lambda o: cudnn.batchnorm_forward_inference(h, x, sc, bi, me, va, y=o),
            lambda: F.batch_norm(x, me.view(-1), va.view(-1), sc.view(-1), bi.view(-1))),
        "batchnorm_forward_training": (
            lambda o: cudnn.batchnorm_forward_training(h, x, sc, bi, y=o).y,
            lambda: F.batch_norm(x, None, None, sc.view(-1), bi.view(-1), training=True)),
        "normalization_forward_inference": (
            lambda o: cudnn.normalization_forward_inference(h, x, sc, bi, me, va, y=o), None),
        "dropout_forward": (lambda o: cudnn.dropout_forward(h, drop, x, y=o).y, lambda: F.dropout(x, 0.1)),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--shape", default="32,256,56,56")
    parser.add_argument("--json", default=None)
    args = script_args(parser, argv, modules=("torch",))
    shape = tuple(int(n) for n in args.shape.split(","))
    torch.manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(shape, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    x2 = torch.randn(shape, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    c = shape[1]
    p = [torch.randn((1, c, 1, 1), device="cuda") for _ in range(3)]
    p = (p[0], p[1], p[2], p[2].abs() + 0.5)
    rows = []
    print(f"{'operation':32s} {'new ms':>8s} {'given ms':>9s} {'torch ms':>9s} {'new/given':>10s} {'new/torch':>10s} "
          f"{'new out':>9s}")
    with cudnn.Handle(stream=torch.cuda.current_stream().cuda_stream) as h:
        for name, (call, torch_op) in _rows(h, x, x2, p).items():
            try:
                new = call(None)
                given = torch.empty_like(new, memory_format=cl)
                call(given)
            except cudnn.CudnnPyError as e:
                print(f"{name:32s} refused: {type(e).__name__}: {str(e)[:80]}")
                continue
            layout = "NHWC" if new.is_contiguous(memory_format=cl) and not new.is_contiguous() else "NCHW"
            fns = {"new": lambda call=call: call(None), "given": lambda call=call, g=given: call(g)}
            if torch_op is not None:
                fns["torch"] = torch_op
            samples: dict = {k: [] for k in fns}
            for _ in range(args.repeats):  # interleaved: one repeat of each column in turn
                for k, fn in fns.items():
                    samples[k].append(event_ms(fn, args.calls, 1, sleep=True))
            ms = {k: statistics.median(v) for k, v in samples.items()}
            t = ms.get("torch")
            torch_cell, vs_torch = ("-", "-") if t is None else (f"{t:.4f}", f"{ms['new'] / t:.2f}")
            print(f"{name:32s} {ms['new']:8.4f} {ms['given']:9.4f} {torch_cell:>9s} {ms['new'] / ms['given']:10.2f} "
                  f"{vs_torch:>10s} {layout:>9s}", flush=True)
            rows.append({"op": name, "layout": layout, **{k: round(v, 5) for k, v in ms.items()}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "dtype": "float16", "memory_format": "channels_last", "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
