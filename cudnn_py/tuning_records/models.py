"""Layer tables of known networks (every convolution, linear, normalisation and attention layer, shapes per sample),
written out from the published architectures; each model's parameter count equals its published total (the tests).

``MODELS[name]()`` gives a :class:`Model`; :meth:`Model.problems` turns its layers into the distinct operations one
training step runs (forward and backward, at a batch size, dtype and layout), each with how often it occurs.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Conv", "Linear", "Norm", "Attention", "Layer", "Model", "Problem", "MODELS", "model"]


@dataclass(frozen=True)
class Conv:
    """A 2-D convolution per sample: input (c, h, w), k filters of r x s, symmetric padding, stride."""

    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: int = 0
    stride: int = 1
    bias: bool = False
    dgrad: bool = True   #: False for a network's first layer (its input needs no gradient)

    @property
    def out_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad - self.r) // self.stride + 1,
                (self.w + 2 * self.pad - self.s) // self.stride + 1)

    def params(self) -> int:
        return self.k * self.c * self.r * self.s + (self.k if self.bias else 0)

    @property
    def passes(self) -> tuple[str, ...]:
        return ("fprop", "dgrad", "wgrad") if self.dgrad else ("fprop", "wgrad")

    def signature(self, batch: int) -> str:
        return (f"n={batch},c={self.c},h={self.h},w={self.w},k={self.k},r={self.r},s={self.s},pad={self.pad},"
                f"stride={self.stride}")


@dataclass(frozen=True)
class Linear:
    """``y = x W^T (+ b)`` over ``tokens`` rows per sample: (tokens, k) x (k, n)."""

    tokens: int
    k: int
    n: int
    bias: bool = True
    passes = ("fprop", "dgrad", "wgrad")

    def params(self) -> int:
        return self.k * self.n + (self.n if self.bias else 0)

    def signature(self, batch: int) -> str:
        return f"m={batch * self.tokens},k={self.k},n={self.n}"


@dataclass(frozen=True)
class Norm:
    """A normalisation per sample: ``mode`` 'batch' over (c, h, w) with per-channel affine; 'layer' or 'rms' over
    ``c`` features of ``h * w`` tokens; 'group' with ``groups`` groups of (c / groups, h, w)."""

    mode: str
    c: int
    h: int = 1
    w: int = 1
    groups: int = 1
    bias: bool = True
    passes = ("forward", "backward")

    def params(self) -> int:
        return self.c * (2 if self.bias else 1)

    def signature(self, batch: int) -> str:
        g = f",groups={self.groups}" if self.mode == "group" else ""
        return f"mode={self.mode},n={batch},c={self.c},h={self.h},w={self.w}{g}"


@dataclass(frozen=True)
class Attention:
    """Scaled dot-product attention per sample: ``heads`` query heads over ``seq_q`` queries, ``kv_heads`` key/value
    heads over ``seq_kv`` keys, head dim ``d``."""

    heads: int
    kv_heads: int
    seq_q: int
    seq_kv: int
    d: int
    causal: bool = False
    passes = ("forward", "backward")

    def params(self) -> int:
        return 0

    def signature(self, batch: int) -> str:
        return (f"b={batch},h={self.heads},hkv={self.kv_heads},sq={self.seq_q},skv={self.seq_kv},d={self.d},"
                f"causal={int(self.causal)}")


OPS = {Conv: "conv", Linear: "linear", Norm: "norm", Attention: "attention"}


@dataclass(frozen=True)
class Layer:
    """One layer of a model: its name in the published implementation and its operation."""

    name: str
    op: Conv | Linear | Norm | Attention


@dataclass(frozen=True)
class Problem:
    """One distinct operation of a training step: ``op``'s ``pass`` at a batch size, dtype and layout, run ``count``
    times per step (by the layers named in ``layers``); ``legacy``: through the legacy API's algorithms (convolutions)
    instead of the graph API's engines."""

    op: Conv | Linear | Norm | Attention
    pass_: str
    batch: int
    dtype: str
    layout: str
    count: int
    layers: tuple[str, ...]
    legacy: bool = False

    @property
    def kind(self) -> str:
        return OPS[type(self.op)]

    @property
    def key(self) -> str:
        """The tuning database's key: what changes the answer, in words (the layout only where data has one)."""
        has_layout = isinstance(self.op, Conv) or (isinstance(self.op, Norm) and self.op.mode == "batch")
        layout = f"|{self.layout}" if has_layout else ""
        api = "legacy:" if self.legacy else ""
        return f"{api}{self.kind}.{self.pass_}|{self.op.signature(self.batch)}|{self.dtype}{layout}"


@dataclass(frozen=True)
class Model:
    """A network's layers in execution order, the parameters held outside them, and the published total."""

    name: str
    description: str
    layers: tuple[Layer, ...]
    other_params: int = 0      #: embeddings, position embeddings, class tokens: parameters of no swept layer
    published_params: int = 0
    notes: tuple[str, ...] = field(default=())

    def parameters(self) -> int:
        """Parameters of the layers plus :attr:`other_params`."""
        return sum(layer.op.params() for layer in self.layers) + self.other_params

    def count(self, kind: str) -> int:
        """How many layers of ``kind`` ('conv', 'linear', 'norm', 'attention') the model has."""
        return sum(1 for layer in self.layers if OPS[type(layer.op)] == kind)

    def problems(self, batch: int, dtype: str, layout: str = "NHWC", legacy: bool = False) -> list[Problem]:
        """The distinct operations of one training step (forward and backward), first-occurrence order; ``legacy``:
        only the convolutions, through the legacy API."""
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch must be a positive int, got {batch!r}")
        found: dict[tuple, list[str]] = {}
        for layer in self.layers:
            if legacy and not isinstance(layer.op, Conv):
                continue
            for p in layer.op.passes:
                found.setdefault((layer.op, p), []).append(layer.name)
        return [Problem(op, p, batch, dtype, layout, len(names), tuple(names), legacy)
                for (op, p), names in found.items()]


# -- ResNet (torchvision, v1.5: the stride on the 3x3 convolution) -------------------------------------------------

def _resnet(name: str, blocks: tuple[int, ...], bottleneck: bool, published: int) -> Model:
    layers = [Layer("conv1", Conv(3, 224, 224, 64, 7, 7, 3, 2, dgrad=False)), Layer("bn1", Norm("batch", 64, 112, 112))]
    c, size, expansion = 64, 56, 4 if bottleneck else 1
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
        for b in range(n):
            stride = 2 if b == 0 and stage > 1 else 1
            out = size // stride
            pre = f"layer{stage}.{b}"
            if bottleneck:
                convs = [Conv(c, size, size, width, 1, 1), Conv(width, size, size, width, 3, 3, 1, stride),
                         Conv(width, out, out, width * 4, 1, 1)]
                hw = [size, out, out]
            else:
                convs = [Conv(c, size, size, width, 3, 3, 1, stride), Conv(width, out, out, width, 3, 3, 1)]
                hw = [out, out]
            for i, (cv, s) in enumerate(zip(convs, hw), start=1):
                layers += [Layer(f"{pre}.conv{i}", cv), Layer(f"{pre}.bn{i}", Norm("batch", cv.k, s, s))]
            if stride != 1 or c != width * expansion:
                layers += [Layer(f"{pre}.downsample.0", Conv(c, size, size, width * expansion, 1, 1, 0, stride)),
                           Layer(f"{pre}.downsample.1", Norm("batch", width * expansion, out, out))]
            c, size = width * expansion, out
    layers.append(Layer("fc", Linear(1, c, 1000)))
    return Model(name, f"{name} (torchvision), 224x224 images", tuple(layers), published_params=published,
                 notes=("pooling, ReLU and residual additions are not swept",))


# -- ViT-B/16 (timm vit_base_patch16_224) -----------------------------------------------------------------------

def vit_b16() -> Model:
    dim, tokens, heads, mlp = 768, 197, 12, 3072
    layers = [Layer("patch_embed.proj", Conv(3, 224, 224, dim, 16, 16, 0, 16, bias=True, dgrad=False))]
    for i in range(12):
        p = f"blocks.{i}"
        layers += [Layer(f"{p}.norm1", Norm("layer", dim, tokens)),
                   Layer(f"{p}.attn.qkv", Linear(tokens, dim, 3 * dim)),
                   Layer(f"{p}.attn", Attention(heads, heads, tokens, tokens, dim // heads)),
                   Layer(f"{p}.attn.proj", Linear(tokens, dim, dim)), Layer(f"{p}.norm2", Norm("layer", dim, tokens)),
                   Layer(f"{p}.mlp.fc1", Linear(tokens, dim, mlp)), Layer(f"{p}.mlp.fc2", Linear(tokens, mlp, dim))]
    layers += [Layer("norm", Norm("layer", dim, tokens)), Layer("head", Linear(1, dim, 1000))]
    return Model("vit-b16", "ViT-B/16 (timm vit_base_patch16_224), 224x224 images, 197 tokens", tuple(layers),
                 other_params=dim + tokens * dim, published_params=86_567_656,
                 notes=("class token and position embeddings are parameters of no swept layer",
                        "GELU and residual additions are not swept"))


# -- Stable Diffusion 1.x UNet (diffusers UNet2DConditionModel), 512x512 images: 64x64 latents ------------------

def unet_sd() -> Model:
    temb, ctx, ctx_len = 1280, 768, 77
    layers: list[Layer] = []

    def resnet(p, cin, cout, hw):
        layers.extend([Layer(f"{p}.norm1", Norm("group", cin, hw, hw, 32)),
                       Layer(f"{p}.conv1", Conv(cin, hw, hw, cout, 3, 3, 1, bias=True)),
                       Layer(f"{p}.time_emb_proj", Linear(1, temb, cout)),
                       Layer(f"{p}.norm2", Norm("group", cout, hw, hw, 32)),
                       Layer(f"{p}.conv2", Conv(cout, hw, hw, cout, 3, 3, 1, bias=True))])
        if cin != cout:
            layers.append(Layer(f"{p}.conv_shortcut", Conv(cin, hw, hw, cout, 1, 1, bias=True)))

    def transformer(p, c, hw):
        t, heads = hw * hw, 8
        layers.extend([Layer(f"{p}.norm", Norm("group", c, hw, hw, 32)),
                       Layer(f"{p}.proj_in", Conv(c, hw, hw, c, 1, 1, bias=True))])
        b = f"{p}.transformer_blocks.0"
        layers.extend([Layer(f"{b}.norm1", Norm("layer", c, t))] +
                      [Layer(f"{b}.attn1.to_{x}", Linear(t, c, c, bias=False)) for x in "qkv"] +
                      [Layer(f"{b}.attn1", Attention(heads, heads, t, t, c // heads)),
                       Layer(f"{b}.attn1.to_out", Linear(t, c, c)), Layer(f"{b}.norm2", Norm("layer", c, t)),
                       Layer(f"{b}.attn2.to_q", Linear(t, c, c, bias=False)),
                       Layer(f"{b}.attn2.to_k", Linear(ctx_len, ctx, c, bias=False)),
                       Layer(f"{b}.attn2.to_v", Linear(ctx_len, ctx, c, bias=False)),
                       Layer(f"{b}.attn2", Attention(heads, heads, t, ctx_len, c // heads)),
                       Layer(f"{b}.attn2.to_out", Linear(t, c, c)), Layer(f"{b}.norm3", Norm("layer", c, t)),
                       Layer(f"{b}.ff.proj", Linear(t, c, 8 * c)), Layer(f"{b}.ff.out", Linear(t, 4 * c, c)),
                       Layer(f"{p}.proj_out", Conv(c, hw, hw, c, 1, 1, bias=True))])

    layers += [Layer("time_embedding.linear_1", Linear(1, 320, temb)),
               Layer("time_embedding.linear_2", Linear(1, temb, temb)),
               Layer("conv_in", Conv(4, 64, 64, 320, 3, 3, 1, bias=True, dgrad=False))]
    chans, hw, cin = (320, 640, 1280, 1280), 64, 320
    for i, c in enumerate(chans):
        for j in range(2):
            resnet(f"down_blocks.{i}.resnets.{j}", cin if j == 0 else c, c, hw)
            if i < 3:
                transformer(f"down_blocks.{i}.attentions.{j}", c, hw)
        cin = c
        if i < 3:
            layers.append(Layer(f"down_blocks.{i}.downsamplers.0.conv", Conv(c, hw, hw, c, 3, 3, 1, 2, bias=True)))
            hw //= 2
    resnet("mid_block.resnets.0", 1280, 1280, hw)
    transformer("mid_block.attentions.0", 1280, hw)
    resnet("mid_block.resnets.1", 1280, 1280, hw)
    rev, prev = chans[::-1], 1280
    for i, c in enumerate(rev):
        skip_in = rev[min(i + 1, 3)]
        for j in range(3):
            res_skip = skip_in if j == 2 else c
            resnet(f"up_blocks.{i}.resnets.{j}", (prev if j == 0 else c) + res_skip, c, hw)
            if i > 0:
                transformer(f"up_blocks.{i}.attentions.{j}", c, hw)
        prev = c
        if i < 3:
            hw *= 2
            layers.append(Layer(f"up_blocks.{i}.upsamplers.0.conv", Conv(c, hw, hw, c, 3, 3, 1, bias=True)))
    layers += [Layer("conv_norm_out", Norm("group", 320, 64, 64, 32)), Layer("conv_out", Conv(320, 64, 64, 4, 3, 3, 1,
                                                                                             bias=True))]
    return Model("unet-sd", "Stable Diffusion 1.x UNet (diffusers), 512x512 images (64x64 latents), 77 text tokens",
                 tuple(layers), published_params=859_520_964,
                 notes=("group norm is timed as a layer norm over (N * groups) rows of C / groups * H * W values "
                        "(cuDNN's graph norm has no group mode)",
                        "upsampling, SiLU, GEGLU's gate and residual additions are not swept"))


# -- Llama 3 8B ------------------------------------------------------------------------------------------------

def llama3_8b(seq: int = 2048) -> Model:
    dim, heads, kv, ffn, vocab = 4096, 32, 8, 14336, 128256
    layers: list[Layer] = []
    for i in range(32):
        p = f"layers.{i}"
        layers += [Layer(f"{p}.attention_norm", Norm("rms", dim, seq, bias=False)),
                   Layer(f"{p}.attention.wq", Linear(seq, dim, dim, bias=False)),
                   Layer(f"{p}.attention.wk", Linear(seq, dim, kv * dim // heads, bias=False)),
                   Layer(f"{p}.attention.wv", Linear(seq, dim, kv * dim // heads, bias=False)),
                   Layer(f"{p}.attention", Attention(heads, kv, seq, seq, dim // heads, causal=True)),
                   Layer(f"{p}.attention.wo", Linear(seq, dim, dim, bias=False)),
                   Layer(f"{p}.ffn_norm", Norm("rms", dim, seq, bias=False)),
                   Layer(f"{p}.feed_forward.w1", Linear(seq, dim, ffn, bias=False)),
                   Layer(f"{p}.feed_forward.w3", Linear(seq, dim, ffn, bias=False)),
                   Layer(f"{p}.feed_forward.w2", Linear(seq, ffn, dim, bias=False))]
    layers += [Layer("norm", Norm("rms", dim, seq, bias=False)), Layer("output", Linear(seq, dim, vocab, bias=False))]
    return Model("llama3-8b", f"Llama 3 8B, {seq} tokens per sequence (GQA 32/8 heads, causal)", tuple(layers),
                 other_params=vocab * dim, published_params=8_030_261_248,
                 notes=("the token embedding is a parameter of no swept layer", "RoPE and SwiGLU's gate are not swept"))


#: model name -> table builder (``llama3-8b`` takes the sequence length)
MODELS: dict[str, Callable[..., Model]] = {
    "resnet50": functools.partial(_resnet, "resnet50", (3, 4, 6, 3), True, 25_557_032),
    "resnet18": functools.partial(_resnet, "resnet18", (2, 2, 2, 2), False, 11_689_512),
    "vit-b16": vit_b16, "unet-sd": unet_sd, "llama3-8b": llama3_8b}


def model(name: str, seq: int | None = None) -> Model:
    """The table of ``name`` (one of :data:`MODELS`); ``seq`` sets llama3-8b's sequence length."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    if seq is not None and name == "llama3-8b":
        return llama3_8b(seq)
    return MODELS[name]()
