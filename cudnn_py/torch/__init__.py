"""cudnn-py inside PyTorch: cuDNN operations registered as torch custom ops (``torch.ops.cudnn_py.*``).

Each op has a fake (meta) implementation and an autograd formula, so it runs eagerly, under autograd, under
``torch.compile(fullgraph=True)`` without graph breaks and in CUDA graphs; it queues its work on
``torch.cuda.current_stream()`` of its tensors' device and takes outputs and workspace from torch's caching
allocator (:mod:`cudnn_py.torch.runtime`). torch is imported here and only here: the rest of cudnn-py never needs
it. See docs/torch.md.

* attention: :func:`sdpa` (with paged KV caches for inference), :func:`scaled_dot_product_attention`
  (:mod:`cudnn_py.torch.attention`); FP8 attention: :func:`sdpa_fp8`, :func:`sdpa_fp8_backward`
  (:mod:`cudnn_py.torch.attention_fp8`)
* normalisation: :func:`layer_norm`, :func:`rms_norm`, :func:`batch_norm` (:mod:`cudnn_py.torch.norms`)
* convolution with a fused bias and activation: :func:`conv` (:mod:`cudnn_py.torch.conv`)
* any graph you build: :func:`graph_op` (:mod:`cudnn_py.torch.graphs`)
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
