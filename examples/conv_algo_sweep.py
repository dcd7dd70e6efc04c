"""Sweep every forward/backward algorithm and math type on a ResNet-50 layer and print the table
(the library behind ``python -m cudnn_py algos``), then the fastest algorithm of each direction.

    python examples/conv_algo_sweep.py [--preset resnet50-conv3-3x3] [--batch 32] [--dtype float16]
"""
from __future__ import annotations

import argparse

import cudnn_py as cdp
from cudnn_py.cli import algos
from cudnn_py.cli.prerequisites import require_gpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="resnet50-conv3-3x3", choices=sorted(algos.PRESETS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="float16", choices=algos.DTYPES)
    ap.add_argument("--layout", default="NHWC", choices=("NCHW", "NHWC"))
    args = ap.parse_args()
    require_gpu(ap.prog)  # before any other work
    c, hw, _, k, r, s, pad, stride = algos.PRESETS[args.preset]
    cfg = algos.Config((args.batch, c, hw, hw), (k, c, r, s), pad, (stride,), (1,), 1, "cross_correlation",
                       args.dtype, args.layout)
    rows = algos.sweep(cfg, algos.DIRECTIONS, ("default", "tensor_op"), repeats=5)
    print(algos.format_table(rows))
    best = {}
    for r in rows:
        if r.supported and (r.direction not in best or r.time_ms < best[r.direction].time_ms):
            best[r.direction] = r
    for d, r in best.items():
        print(f"fastest {d}: {r.algo} ({r.math_type}) {r.time_ms:.3f} ms, {r.tflops:.1f} TFLOP/s, "
              f"max rel error {r.max_rel_error:.2e}")
    print(f"cuDNN {cdp.library().version_string}")


if __name__ == "__main__":
    main()
