"""The cuDNN backend (graph) API from Python: typed descriptors (:class:`BackendDescriptor`), a graph builder
(:class:`Graph`, its operations in :mod:`cudnn_py.graph.ops`), plans with a per-handle cache and an opt-in on-disk
store (:func:`set_plan_cache_dir`), autotuning, execution (:class:`Plan`, :class:`Executor`, :class:`CudaGraph`)
and convolution through cached graph plans (:func:`conv_forward` and the backward passes, with optional fused
bias + activation).
"""
from .attributes import AttrSpec, attr_spec
from .conv import conv_backward_data, conv_backward_filter, conv_forward
from .descriptors import BackendDescriptor
from .errors import GraphNotSupportedError
from .execute import CudaGraph, Executor
from .graph import Graph, Tensor
from .ops import POINTWISE_ARITY
from .plan_store import plan_cache_dir, set_plan_cache_dir
from .plans import (EngineConfig, KnobInfo, Plan, autotune, build_plans, engine_config, engine_configs, heuristics,
                    plan_cache_clear, plan_cache_info, plan_from_json, time_plan)

__all__ = ["AttrSpec", "attr_spec", "BackendDescriptor", "GraphNotSupportedError", "CudaGraph", "Executor",
           "Graph", "Tensor", "POINTWISE_ARITY", "EngineConfig", "KnobInfo", "Plan", "autotune", "build_plans",
           "engine_config", "engine_configs", "heuristics", "plan_cache_clear", "plan_cache_info", "plan_from_json",
           "time_plan", "set_plan_cache_dir", "plan_cache_dir",
           "conv_forward", "conv_backward_data", "conv_backward_filter"]
