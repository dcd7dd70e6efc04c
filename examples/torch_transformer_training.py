"""Train a small decoder-only transformer whose attention and norms are cudnn-py custom ops, beside the same model on
torch's own SDPA and norms: loss curves and tokens/s of each, eager and torch.compile'd.

The model: token + position embeddings, ``--layers`` pre-norm blocks (RMS norm, causal multi-head attention, RMS
norm, GELU MLP), a final layer norm, a head tied to the embedding. Weights in float32, the step under
``torch.autocast(bfloat16)`` (attention in bfloat16, norms in float32), AdamW. Every variant starts from the same
weights (``--seed``) and sees the same batches: synthetic sequences of a fixed random Markov chain (each token is
followed by one of 4 successors), so the loss falls from ln(vocab) towards ln(4) = 1.39.

Variants: ``cudnn-py`` (``cudnn_py.torch.scaled_dot_product_attention``, ``rms_norm``, ``layer_norm``),
``cudnn-py-attention`` (cudnn-py attention, torch's norms) and ``torch`` (``F.scaled_dot_product_attention`` on its
cuDNN backend, ``F.rms_norm``, ``F.layer_norm``), each eager and
compiled with ``torch.compile(fullgraph=True)`` (a graph break is an error; ``--mode reduce-overhead`` also replays
the step's kernels as CUDA graphs). The curves agree when the mean loss of the last ``--window`` steps of each
variant is within ``--tolerance`` (default 0.05 nats, bfloat16 noise at seed 0) of the torch eager run's. The
variants train in lockstep, each taking ``--round`` steps in turn, so that each one's tokens/s (the median over its
rounds after ``--warmup`` steps) is measured under the same conditions as the others'.

Run: python examples/torch_transformer_training.py [--layers 4 --d-model 512 --heads 8 --seq 1024 --batch 8
     --steps 300 --round 10] [--variants cudnn-py,torch] [--no-eager] [--no-compile] [--mode default|reduce-overhead]
"""
from __future__ import annotations

import argparse
import math
import time

try:
    import torch
    import torch.nn.functional as F
    from torch import nn

    import cudnn_py.torch as ct
except ImportError:  # said by script_args, in one line
    torch = None
    nn = None

from cudnn_py.cli.prerequisites import script_args

SUCCESSORS = 4


KINDS = ("cudnn-py", "cudnn-py-attention", "torch")


def ops(kind: str):
    """(attention, rms_norm, layer_norm) of a variant: all cudnn-py, cudnn-py attention with torch's norms, or
    torch's (its cuDNN attention backend)."""
    def torch_attention(q, k, v):
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def cudnn_attention(q, k, v):
        return ct.scaled_dot_product_attention(q, k, v, is_causal=True)
    if kind == "cudnn-py":
        return cudnn_attention, lambda x, w: ct.rms_norm(x, w, eps=1e-6), lambda x, w, b: ct.layer_norm(x, w, b)
    return (cudnn_attention if kind == "cudnn-py-attention" else torch_attention,
            lambda x, w: F.rms_norm(x, x.shape[-1:], w, eps=1e-6),
            lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5))


def model_class():
    class Block(nn.Module):
        def __init__(self, d: int, heads: int, impl):
            super().__init__()
            self.heads, (self.attend, self.rms, _) = heads, impl
            self.n1, self.n2 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.rms(x, self.n1)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
            o = self.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # BSHD views, no copies
            x = x + self.proj(o.transpose(1, 2).reshape(b, s, d))
            return x + self.down(F.gelu(self.up(self.rms(x, self.n2))))

    class Decoder(nn.Module):
        def __init__(self, vocab: int, seq: int, d: int, heads: int, layers: int, impl):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(seq, d) * 0.02)
            self.blocks = nn.ModuleList(Block(d, heads, impl) for _ in range(layers))
            self.norm_w, self.norm_b = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
            self.layer_norm = impl[2]
            nn.init.normal_(self.tok.weight, std=0.02)

        def forward(self, tokens):
            x = self.tok(tokens) + self.pos[:tokens.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.layer_norm(x, self.norm_w, self.norm_b) @ self.tok.weight.t()
    return Decoder


def batches(args, device) -> list:
    """``args.steps`` batches of (B, seq + 1) tokens from one fixed Markov chain (seeded)."""
    g = torch.Generator(device=device).manual_seed(args.seed)
    succ = torch.randint(0, args.vocab, (args.vocab, SUCCESSORS), generator=g, device=device)
    rows = args.steps * args.batch
    t = torch.empty(rows, args.seq + 1, dtype=torch.long, device=device)
    t[:, 0] = torch.randint(0, args.vocab, (rows,), generator=g, device=device)
    pick = torch.randint(0, SUCCESSORS, (rows, args.seq), generator=g, device=device)
    for i in range(args.seq):
        t[:, i + 1] = succ[t[:, i], pick[:, i]]
    return list(t.split(args.batch))


class Run:
    """One variant's model, optimizer and (compiled) step; :meth:`steps` trains it on a slice of the batches and
    keeps the losses and the slice's wall time."""

    def __init__(self, args, kind: str, compiled: bool, init: dict):
        self.model = model_class()(args.vocab, args.seq, args.d_model, args.heads, args.layers, ops(kind)).cuda()
        self.model.load_state_dict(init)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.0, fused=True)
        self.graphs = compiled and args.mode == "reduce-overhead"
        self.compiled, self.losses, self.seconds, self.breaks = compiled, [], [], 0
        self.loss_fn = torch.compile(self._loss, fullgraph=True, mode=args.mode) if compiled else self._loss

    def _loss(self, tokens):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def steps(self, batches: list) -> None:
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
        torch.cuda.synchronize()
        start = time.perf_counter()
        for tokens in batches:
            if self.graphs:  # a new step: the CUDA graphs may overwrite the last step's outputs (kept as copies)
                torch.compiler.cudagraph_mark_step_begin()
            loss = self.loss_fn(tokens)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.losses.append(loss.detach().clone() if self.graphs else loss.detach())
        torch.cuda.synchronize()
        self.seconds.append(time.perf_counter() - start)
        self.breaks += sum(torch._dynamo.utils.counters["graph_break"].values()) - breaks


def train(args, runs: dict, data: list) -> None:
    """Train every run on the same batches in lockstep: rounds of ``args.round`` steps, each run in turn, so the
    runs' tokens/s (the median over the rounds after ``args.warmup`` steps) see the same machine conditions."""
    for first in range(0, len(data), args.round):
        for run in runs.values():
            run.steps(data[first:first + args.round])


def tokens_per_second(args, run: Run) -> float:
    timed = sorted(run.seconds[args.warmup // args.round:])
    return args.round * args.batch * args.seq / timed[len(timed) // 2]


def main() -> None:
    p = argparse.ArgumentParser(prog="torch_transformer_training.py", description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20, help="steps left out of tokens/s (compilation, plans)")
    p.add_argument("--round", type=int, default=10, help="steps a variant takes before the next one's turn")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=int, default=30, help="last steps whose mean loss is compared")
    p.add_argument("--tolerance", type=float, default=0.05, help="nats the mean losses may differ by")
    p.add_argument("--variants", default="cudnn-py,torch", help=f"comma-separated, of {', '.join(KINDS)}")
    p.add_argument("--no-eager", action="store_true")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--mode", default="default", choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs"])
    args = script_args(p, modules=("torch",), extra="bench")
    if args.d_model % args.heads or (args.d_model // args.heads) % 8 or args.warmup + args.round > args.steps:
        raise SystemExit(f"{p.prog}: d_model / heads must be a multiple of 8 and warmup + round <= steps")
    if not set(args.variants.split(",")) <= set(KINDS):
        raise SystemExit(f"{p.prog}: --variants takes {', '.join(KINDS)}")
    torch.manual_seed(args.seed)
    init = model_class()(args.vocab, args.seq, args.d_model, args.heads, args.layers, ops("torch")).state_dict()
    data = batches(args, "cuda")
    print(f"{torch.cuda.get_device_name()}: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, "
          f"seq {args.seq}, batch {args.batch}, {args.steps} steps, seed {args.seed}; floor ln({SUCCESSORS}) = "
          f"{math.log(SUCCESSORS):.3f}, start ln({args.vocab}) = {math.log(args.vocab):.3f}")
    runs = {}
    for kind in args.variants.split(","):
        for compiled in [c for c, skip in ((False, args.no_eager), (True, args.no_compile)) if not skip]:
            mode = "" if args.mode == "default" else f" ({args.mode})"
            runs[f"{kind} {'compiled' + mode if compiled else 'eager'}"] = Run(args, kind, compiled, init)
    train(args, runs, data)
    losses = {n: [float(x) for x in r.losses] for n, r in runs.items()}
    names = list(runs)
    print("step  " + "  ".join(f"{n:>26}" for n in names))
    for i in sorted({0, *range(args.steps // 10 - 1, args.steps, args.steps // 10)}):
        print(f"{i + 1:4d}  " + "  ".join(f"{losses[n][i]:26.4f}" for n in names))
    ref_name = next((n for n in names if n.startswith("torch eager")), names[0])
    ref = sum(losses[ref_name][-args.window:]) / args.window
    worst = 0.0
    for n, run in runs.items():
        mean = sum(losses[n][-args.window:]) / args.window
        worst = max(worst, abs(mean - ref))
        extra = f", {run.breaks} graph breaks" if run.compiled else ""
        print(f"{n:>32}: mean loss of the last {args.window} steps {mean:.4f} ({mean - ref:+.4f} vs {ref_name}), "
              f"{tokens_per_second(args, run):,.0f} tokens/s{extra}")
    verdict = "agree" if worst <= args.tolerance else "DISAGREE"
    print(f"loss curves {verdict}: largest difference {worst:.4f} nats, tolerance {args.tolerance} (seed {args.seed})")
    if worst > args.tolerance:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
