"""The model tables: layer counts and shapes of known networks, parameter totals against the published figures,
the distinct operations of a training step, and their graphs (built in Python, without a GPU)."""
from __future__ import annotations

import pytest

from cudnn_py.tuning.models import MODELS, Attention, Conv, Linear, Norm, model
from cudnn_py.tuning.sweep import build_graph

PUBLISHED = {"resnet50": 25_557_032, "resnet18": 11_689_512, "vit-b16": 86_567_656, "unet-sd": 859_520_964,
             "llama3-8b": 8_030_261_248}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_parameter_counts_agree_with_the_published_totals(name):
    m = model(name)
    assert m.parameters() == m.published_params == PUBLISHED[name]


def test_resnet50_layers():
    m = model("resnet50")
    convs = [layer for layer in m.layers if isinstance(layer.op, Conv)]
    assert len(convs) == 53 and sum("downsample" in layer.name for layer in convs) == 4
    assert m.count("norm") == 53 and m.count("linear") == 1
    by = {layer.name: layer.op for layer in m.layers}
    assert by["conv1"] == Conv(3, 224, 224, 64, 7, 7, 3, 2, dgrad=False) and by["conv1"].out_hw == (112, 112)
    assert by["layer2.0.conv2"] == Conv(128, 56, 56, 128, 3, 3, 1, 2)           # v1.5: stride on the 3x3
    assert by["layer2.0.downsample.0"] == Conv(256, 56, 56, 512, 1, 1, 0, 2)
    assert by["layer4.2.conv3"] == Conv(512, 7, 7, 2048, 1, 1) and by["fc"] == Linear(1, 2048, 1000)
    assert by["layer3.5.bn2"] == Norm("batch", 256, 14, 14)


def test_resnet18_vit_llama_unet_shapes():
    r18 = model("resnet18")
    assert r18.count("conv") == 20 and {layer.name: layer.op for layer in r18.layers}["layer4.1.conv2"] == \
        Conv(512, 7, 7, 512, 3, 3, 1, 1)
    vit = {layer.name: layer.op for layer in model("vit-b16").layers}
    assert vit["patch_embed.proj"] == Conv(3, 224, 224, 768, 16, 16, 0, 16, bias=True, dgrad=False)
    assert vit["blocks.11.attn"] == Attention(12, 12, 197, 197, 64)
    assert vit["blocks.0.attn.qkv"] == Linear(197, 768, 2304)
    llama = model("llama3-8b", seq=4096)
    ops = {layer.name: layer.op for layer in llama.layers}
    assert ops["layers.31.attention"] == Attention(32, 8, 4096, 4096, 128, causal=True)
    assert ops["layers.0.attention.wk"] == Linear(4096, 4096, 1024, bias=False) and llama.count("attention") == 32
    unet = model("unet-sd")
    ops = {layer.name: layer.op for layer in unet.layers}
    assert unet.count("attention") == 32 and unet.count("conv") == 98
    assert ops["down_blocks.0.attentions.0.transformer_blocks.0.attn1"] == Attention(8, 8, 4096, 4096, 40)
    assert ops["down_blocks.2.attentions.1.transformer_blocks.0.attn2"] == Attention(8, 8, 256, 77, 160)
    assert ops["up_blocks.1.resnets.2.conv1"] == Conv(1920, 16, 16, 1280, 3, 3, 1, bias=True)   # 1280 + a 640 skip
    assert ops["up_blocks.3.resnets.0.conv_shortcut"] == Conv(960, 64, 64, 320, 1, 1, bias=True)


def test_problems_are_the_distinct_passes_with_counts():
    m = model("resnet50")
    problems = m.problems(32, "float16", "NHWC")
    keys = [p.key for p in problems]
    assert len(keys) == len(set(keys)) == 95
    # each layer's passes are counted once: three for convolutions but the first (no input gradient)
    assert sum(p.count for p in problems if p.kind == "conv") == 53 * 3 - 1
    assert sum(p.count for p in problems if p.kind == "norm") == 53 * 2
    first = problems[0]
    assert first.key == "conv.fprop|n=32,c=3,h=224,w=224,k=64,r=7,s=7,pad=3,stride=2|float16|NHWC"
    assert first.layers == ("conv1",) and first.count == 1
    three = next(p for p in problems if p.key.startswith("conv.fprop|n=32,c=64,h=56,w=56,k=64,r=3"))
    assert three.count == 3 and three.layers == ("layer1.0.conv2", "layer1.1.conv2", "layer1.2.conv2")
    llama = model("llama3-8b").problems(2, "bfloat16")
    assert sum(p.count for p in llama if p.kind == "linear") == 225 * 3 and len(llama) == 19
    assert "|NHWC" not in next(p.key for p in llama if p.kind == "linear")   # no layout where data has none
    legacy = m.problems(32, "float16", "NHWC", legacy=True)
    assert len(legacy) == 68 and all(p.kind == "conv" and p.legacy for p in legacy)
    assert legacy[0].key == "legacy:" + first.key and sum(p.count for p in legacy) == 53 * 3 - 1
    assert model("llama3-8b").problems(1, "bfloat16", legacy=True) == []
    with pytest.raises(ValueError, match="positive int"):
        m.problems(0, "float16")
    with pytest.raises(ValueError, match="unknown model"):
        model("alexnet")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_operation_builds_a_graph(name):
    m = model(name)
    for p in m.problems(2, "float16", "NHWC"):
        g = build_graph(p)
        ins = {t.name for t in g.io_tensors() if not t.is_by_value}
        assert ins and any(not t.is_virtual for t in g.tensors)
    fp32 = model("resnet18").problems(2, "float32", "NCHW")
    assert all(build_graph(p) for p in fp32)
