"""cudnn-py inside PyTorch (docs/torch.md): cuDNN operations as torch custom ops (``torch.ops.cudnn_py.*``) that
run eagerly, under autograd, under ``torch.compile(fullgraph=True)`` and in CUDA graphs, on torch's current stream
with memory from torch's caching allocator: :func:`sdpa`, :func:`scaled_dot_product_attention`, :func:`sdpa_fp8`,
:func:`sdpa_fp8_backward`, :func:`layer_norm`, :func:`rms_norm`, :func:`batch_norm`, :func:`conv` (with a fused bias
and activation) and :func:`graph_op` (any graph you build). torch is imported here and only here.
"""
from __future__ import annotations

try:
    import torch  # noqa: F401  (the real torch: this package's absolute imports never see cudnn_py.torch)
except ImportError as e:  # pragma: no cover - exercised where torch is absent
    from cudnn_py.clib.install import torch_install
    broken = "" if e.name == "torch" else f" (it is there, but importing it failed: {e})"
    raise ImportError(f"cudnn_py.torch needs PyTorch{broken}: {torch_install()}; the rest of cudnn_py works "
                      f"without it") from None  # one message, not torch's traceback before it

from .attention import scaled_dot_product_attention, sdpa
from .attention_fp8 import sdpa_fp8, sdpa_fp8_backward
from .conv import conv
from .graphs import graph_op
from .norms import batch_norm, layer_norm, rms_norm
from .runtime import cache_clear

__all__ = ["sdpa", "scaled_dot_product_attention", "sdpa_fp8", "sdpa_fp8_backward", "layer_norm", "rms_norm",
           "batch_norm", "conv", "graph_op", "cache_clear"]
