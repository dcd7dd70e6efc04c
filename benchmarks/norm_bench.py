"""Layer norm and RMS norm through cudnn-py graphs vs torch (prints a table; asserts nothing).

bfloat16 x of ROWS x HIDDEN (default 8192 x 4096), normalised over HIDDEN, bfloat16 scale (and bias), float32
statistics. cudnn-py: one forward graph (y, mean, inv_variance) and one backward graph (dx, dscale, dbias), each
autotuned, run through its executor. torch: ``F.layer_norm`` / ``F.rms_norm`` forward, and forward + backward
through autograd. Device time from CUDA events (median of repeats, each repeat ``--iters`` calls after a warm-up);
GB/s counts the bytes each pass must move: forward reads x and writes y (2 x ROWS x HIDDEN x 2 bytes), backward
reads dy and x and writes dx (3 x ...); statistics and parameters are a rounding error and left out.

Run: python benchmarks/norm_bench.py [--rows 8192] [--hidden 4096] [--iters 20]
"""
from __future__ import annotations

import argparse

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # said by script_args, in one line
    torch = None

import cudnn_py.graph as G
from cudnn_py.cli.prerequisites import script_args
from cudnn_py.core.handle import Handle
from timing import event_ms

EPS = 1e-5


def graphs(h, mode: str, rows: int, hidden: int, x, w, b, dy, out):
    """The autotuned forward and backward executors (arrays bound) and their plans' tags."""
    shape, pshape, sshape = (rows, hidden, 1, 1), (1, hidden, 1, 1), (rows, 1, 1, 1)
    xv, dyv, wv, bv = x.view(shape), dy.view(shape), w.view(pshape), b.view(pshape)
    yv, dxv, dwv, dbv = out["y"].view(shape), out["dx"].view(shape), out["dw"].view(pshape), out["db"].view(pshape)
    mv, iv = out["mean"].view(sshape), out["inv"].view(sshape)
    layer = mode == "layer"

    fwd = G.Graph(io_dtype="bfloat16", compute_dtype="float32", name=f"{mode}_fwd")
    gx, gw = fwd.tensor(shape, name="x"), fwd.tensor(pshape, name="w")
    gb = fwd.tensor(pshape, name="b") if layer else None
    y, mean, inv = fwd.norm_forward(gx, gw, gb, mode=mode, epsilon=EPS)
    fwd_pack = {gx: xv, gw: wv, y.set_output(True): yv, inv.set_output(True): iv}
    if layer:
        fwd_pack.update({gb: bv, mean.set_output(True): mv})
    fwd.autotune(h, fwd_pack)

    bwd = G.Graph(io_dtype="bfloat16", compute_dtype="float32", name=f"{mode}_bwd")
    bx, bdy, bw = bwd.tensor(shape, name="x"), bwd.tensor(shape, name="dy"), bwd.tensor(pshape, name="w")
    bm = bwd.tensor(sshape, name="mean", dtype="float32") if layer else None
    bi = bwd.tensor(sshape, name="inv", dtype="float32")
    dx, dw, db = bwd.norm_backward(bdy, bx, bw, mean=bm, inv_variance=bi, mode=mode, has_bias=layer)
    bwd_pack = {bx: xv, bdy: dyv, bw: wv, bi: iv, dx.set_output(True): dxv, dw.set_output(True): dwv}
    if layer:
        bwd_pack.update({bm: mv, db.set_output(True): dbv})
    bwd.autotune(h, bwd_pack)
    run_f, run_b = fwd.executor(h, *fwd_pack), bwd.executor(h, *bwd_pack)
    fargs, bargs = tuple(fwd_pack.values()), tuple(bwd_pack.values())
    return (lambda: run_f(*fargs)), (lambda: run_b(*bargs)), fwd.plan.tag, bwd.plan.tag


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=20)
    a = script_args(ap, modules=("torch",))
    rows, hidden = a.rows, a.hidden
    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(rows, hidden, device=dev, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w = torch.randn(1, hidden, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1, hidden, device=dev, dtype=torch.bfloat16)
    nbytes = rows * hidden * 2
    print(f"{torch.cuda.get_device_name()}, bfloat16 {rows} x {hidden}, device ms per pass (GB/s moved)")
    print(f"{'':14s} {'pass':12s} {'cudnn-py':>18s} {'torch':>18s} {'speedup':>8s}  plans")
    with Handle() as h:
        for mode in ("layer", "rms"):
            out = {"y": torch.empty_like(x), "dx": torch.empty_like(x), "dw": torch.empty_like(w),
                   "db": torch.empty_like(b), "mean": torch.empty(rows, 1, device=dev),
                   "inv": torch.empty(rows, 1, device=dev)}
            fwd, bwd, ftag, btag = graphs(h, mode, rows, hidden, x, w, b, dy, out)
            xt = x.detach().requires_grad_(True)
            wt = w.view(-1).detach().requires_grad_(True)
            bt = b.view(-1).detach().requires_grad_(True)

            def t_fwd():
                if mode == "layer":
                    return F.layer_norm(xt, (hidden,), wt, bt, EPS)
                return F.rms_norm(xt, (hidden,), wt, EPS)

            def t_fwd_bwd():
                torch.autograd.grad(t_fwd(), (xt, wt, bt) if mode == "layer" else (xt, wt), dy)

            # correctness against torch in float32 (printed, not asserted)
            fwd()
            bwd()
            torch.cuda.synchronize()
            xf, wf = x.float(), w.float().view(-1)
            ref = (F.layer_norm(xf, (hidden,), wf, b.float().view(-1), EPS) if mode == "layer"
                   else F.rms_norm(xf, (hidden,), wf, EPS))
            err = (out["y"].float() - ref).abs().max().item()
            tf = event_ms(t_fwd, a.iters)
            tfb = event_ms(t_fwd_bwd, a.iters)
            cf = event_ms(fwd, a.iters)
            cb = event_ms(bwd, a.iters)
            rows_out = [("forward", cf, tf, 2 * nbytes), ("fwd+bwd", cf + cb, tfb, 5 * nbytes)]
            for name, c, t, moved in rows_out:
                print(f"{mode + ' norm':14s} {name:12s} {c:8.4f} ({moved / c / 1e6:5.0f}) "
                      f"{t:8.4f} ({moved / t / 1e6:5.0f}) {t / c:7.2f}x  {ftag if name == 'forward' else btag}")
            print(f"{'':14s} max |y - torch float32| = {err:.3g}")


if __name__ == "__main__":
    main()
