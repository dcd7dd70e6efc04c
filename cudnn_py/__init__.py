"""cudnn_py: NVIDIA cuDNN 9 from Python. Two layers: :mod:`cudnn_py.capi`, the whole C API generated from the cuDNN
headers (C names verbatim), and the Pythonic layer re-exported here (handles, device arrays, descriptors,
operations). ``import cudnn_py`` loads nothing heavy: each name below is imported from its module on first use.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _imports
from .errors import (  # ``name as name``: explicit re-exports (mypy --strict)
    CArgumentError as CArgumentError, ClosedError as ClosedError, CudaError as CudaError,
    CudaOutOfMemoryError as CudaOutOfMemoryError, CudnnBadParamError as CudnnBadParamError, CudnnError as CudnnError,
    CudnnExecutionFailedError as CudnnExecutionFailedError, CudnnInternalError as CudnnInternalError,
    CudnnNotInitializedError as CudnnNotInitializedError, CudnnNotSupportedError as CudnnNotSupportedError,
    CudnnPyError as CudnnPyError, FunctionNotAvailableError as FunctionNotAvailableError,
    InvalidStateError as InvalidStateError, InvalidTypeError as InvalidTypeError,
    InvalidValueError as InvalidValueError, LibraryNotFoundError as LibraryNotFoundError,
    NoDeviceError as NoDeviceError, WorkspaceLimitError as WorkspaceLimitError)

_ERRORS = tuple(n for n, v in list(globals().items()) if isinstance(v, type) and issubclass(v, Exception))
__version__ = "0.1.0"

# the Pythonic layer, imported on first use: module -> names, each line with its twin under TYPE_CHECKING below
_LAZY: dict[str, tuple[str, ...]] = {
    ".calls.defaults": ("default_handle",),
    ".clib.loader": ("library",),
    ".calls.algorithms": ("AlgoPerf", "AlgorithmCache", "algorithm_cache", "choose_backward_data_algorithm",
                    "choose_backward_filter_algorithm", "choose_forward_algorithm"),
    ".core.descriptors": ("FilterDescriptor", "OpTensor", "ReduceTensor", "TensorDescriptor"),
    ".core.dtypes": ("cudnn_dtype", "numpy_dtype"),
    ".graph": ("BackendDescriptor", "Graph", "GraphNotSupportedError"),
    ".core.handle": ("Handle",),
    ".core.blocks": ("empty_cache",),
    ".core.memory": ("DeviceArray", "DeviceArrayLike", "as_array", "empty", "empty_like", "to_device", "zeros"),
    ".ops.activation": ("Activation", "activation_backward", "activation_forward"),
    ".ops.attention": ("MultiHeadAttention", "attention_backward_data", "attention_backward_weights",
                       "attention_forward", "load_attention_weights", "read_attention_weights"),
    ".ops.batchnorm": ("batchnorm_backward", "batchnorm_backward_ex", "batchnorm_ex_sizes",
                       "batchnorm_forward_inference", "batchnorm_forward_training", "batchnorm_forward_training_ex",
                       "batchnorm_param_shape"),
    ".ops.conv_calls": ("convolution_algorithms", "convolution_backward_bias", "convolution_backward_data",
                        "convolution_backward_filter", "convolution_bias_activation_forward", "convolution_forward",
                        "convolution_workspace_size"),
    ".ops.convolution": ("Convolution", "convolution_output_shape"),
    ".ops.ctc": ("CTCLoss", "check_ctc_labels", "ctc_loss", "ctc_loss_workspace_size"),
    ".ops.dropout": ("Dropout", "dropout_backward", "dropout_forward", "dropout_reserve_size", "dropout_states_size"),
    ".ops.lrn": ("LRN", "divisive_normalization_backward", "divisive_normalization_forward", "lrn_backward",
                 "lrn_forward"),
    ".ops.normalization": ("normalization_backward", "normalization_forward_inference",
                           "normalization_forward_training", "normalization_sizes"),
    ".ops.pooling": ("Pooling", "pooling_backward", "pooling_forward", "pooling_output_shape"),
    ".ops.rnn": ("RNN", "RNNDataDescriptor", "rnn_backward_data", "rnn_backward_weights", "rnn_forward",
                 "rnn_weight_params"),
    ".ops.sdpa": ("Sdpa", "SdpaOptions", "sdpa", "sdpa_backward", "sdpa_cache_clear", "sdpa_fp8",
                  "sdpa_fp8_backward"),
    ".ops.softmax": ("softmax_backward", "softmax_forward"),
    ".ops.spatial_transformer": ("SpatialTransformer", "spatial_tf_grid_backward", "spatial_tf_grid_forward",
                                 "spatial_tf_sampler_backward", "spatial_tf_sampler_forward"),
    ".ops.tensor_ops": ("add_tensor", "op_tensor", "reduce_tensor", "scale_tensor", "set_tensor", "transform_tensor",
                        "transform_tensor_ex"),
    ".core.streams": ("StreamLike", "Timer", "new_stream", "synchronize", "timer"),
    ".core.workspace": ("Workspace",),
}
#: deprecated names: still importable (each warns and builds its replacement), not in __all__
_DEPRECATED: dict[str, tuple[str, ...]] = {
    ".core.descriptors": ("OpTensorDescriptor", "ReduceTensorDescriptor"),
    ".ops.activation": ("ActivationDescriptor",),
    ".ops.convolution": ("ConvolutionDescriptor",),
    ".ops.dropout": ("DropoutDescriptor",),
    ".ops.lrn": ("LRNDescriptor",),
    ".ops.pooling": ("PoolingDescriptor",),
}
#: subpackages and modules reachable as attributes without an explicit import
_SUBMODULES = ("calls", "capi", "clib", "core", "errors", "graph", "ops", "algorithms", "descriptors", "dtypes",
               "handle", "log", "memory", "nvtx", "streams", "workspace")

_WHERE = {name: module for table in (_LAZY, _DEPRECATED) for module, names in table.items() for name in names}

if TYPE_CHECKING:  # what mypy sees: each name re-exported explicitly (``name as name``)
    from . import calls as calls, capi as capi, clib as clib, core as core, errors as errors, graph as graph, ops as ops
    from .calls import algorithms as algorithms
    from .clib import log as log, nvtx as nvtx
    from .core import (descriptors as descriptors, dtypes as dtypes, handle as handle, memory as memory,
                       streams as streams, workspace as workspace)
    from .calls.defaults import default_handle as default_handle
    from .clib.loader import library as library
    from .calls.algorithms import (
        AlgoPerf as AlgoPerf, AlgorithmCache as AlgorithmCache, algorithm_cache as algorithm_cache,
        choose_backward_data_algorithm as choose_backward_data_algorithm,
        choose_backward_filter_algorithm as choose_backward_filter_algorithm,
        choose_forward_algorithm as choose_forward_algorithm)
    from .core.descriptors import (
        FilterDescriptor as FilterDescriptor, OpTensor as OpTensor, OpTensorDescriptor as OpTensorDescriptor,
        ReduceTensor as ReduceTensor, ReduceTensorDescriptor as ReduceTensorDescriptor,
        TensorDescriptor as TensorDescriptor)
    from .core.dtypes import cudnn_dtype as cudnn_dtype, numpy_dtype as numpy_dtype
    from .graph import (
        BackendDescriptor as BackendDescriptor, Graph as Graph, GraphNotSupportedError as GraphNotSupportedError)
    from .core.handle import Handle as Handle
    from .core.blocks import empty_cache as empty_cache
    from .core.memory import (
        DeviceArray as DeviceArray, DeviceArrayLike as DeviceArrayLike, as_array as as_array, empty as empty,
        empty_like as empty_like, to_device as to_device, zeros as zeros)
    from .ops.activation import (
        Activation as Activation, ActivationDescriptor as ActivationDescriptor,
        activation_backward as activation_backward, activation_forward as activation_forward)
    from .ops.attention import (
        MultiHeadAttention as MultiHeadAttention, attention_backward_data as attention_backward_data,
        attention_backward_weights as attention_backward_weights, attention_forward as attention_forward,
        load_attention_weights as load_attention_weights, read_attention_weights as read_attention_weights)
    from .ops.batchnorm import (
        batchnorm_backward as batchnorm_backward, batchnorm_backward_ex as batchnorm_backward_ex,
        batchnorm_ex_sizes as batchnorm_ex_sizes, batchnorm_forward_inference as batchnorm_forward_inference,
        batchnorm_forward_training as batchnorm_forward_training,
        batchnorm_forward_training_ex as batchnorm_forward_training_ex, batchnorm_param_shape as batchnorm_param_shape)
    from .ops.conv_calls import (
        convolution_algorithms as convolution_algorithms, convolution_backward_bias as convolution_backward_bias,
        convolution_backward_data as convolution_backward_data,
        convolution_backward_filter as convolution_backward_filter,
        convolution_bias_activation_forward as convolution_bias_activation_forward,
        convolution_forward as convolution_forward, convolution_workspace_size as convolution_workspace_size)
    from .ops.convolution import (
        Convolution as Convolution, ConvolutionDescriptor as ConvolutionDescriptor,
        convolution_output_shape as convolution_output_shape)
    from .ops.ctc import (
        CTCLoss as CTCLoss, check_ctc_labels as check_ctc_labels, ctc_loss as ctc_loss,
        ctc_loss_workspace_size as ctc_loss_workspace_size)
    from .ops.dropout import (
        Dropout as Dropout, DropoutDescriptor as DropoutDescriptor, dropout_backward as dropout_backward,
        dropout_forward as dropout_forward, dropout_reserve_size as dropout_reserve_size,
        dropout_states_size as dropout_states_size)
    from .ops.lrn import (
        LRN as LRN, LRNDescriptor as LRNDescriptor, divisive_normalization_backward as divisive_normalization_backward,
        divisive_normalization_forward as divisive_normalization_forward, lrn_backward as lrn_backward,
        lrn_forward as lrn_forward)
    from .ops.normalization import (
        normalization_backward as normalization_backward,
        normalization_forward_inference as normalization_forward_inference,
        normalization_forward_training as normalization_forward_training, normalization_sizes as normalization_sizes)
    from .ops.pooling import (
        Pooling as Pooling, PoolingDescriptor as PoolingDescriptor, pooling_backward as pooling_backward,
        pooling_forward as pooling_forward, pooling_output_shape as pooling_output_shape)
    from .ops.rnn import (
        RNN as RNN, RNNDataDescriptor as RNNDataDescriptor, rnn_backward_data as rnn_backward_data,
        rnn_backward_weights as rnn_backward_weights, rnn_forward as rnn_forward,
        rnn_weight_params as rnn_weight_params)
    from .ops.sdpa import (
        Sdpa as Sdpa, SdpaOptions as SdpaOptions, sdpa as sdpa, sdpa_backward as sdpa_backward,
        sdpa_cache_clear as sdpa_cache_clear, sdpa_fp8 as sdpa_fp8, sdpa_fp8_backward as sdpa_fp8_backward)
    from .ops.softmax import softmax_backward as softmax_backward, softmax_forward as softmax_forward
    from .ops.spatial_transformer import (
        SpatialTransformer as SpatialTransformer, spatial_tf_grid_backward as spatial_tf_grid_backward,
        spatial_tf_grid_forward as spatial_tf_grid_forward, spatial_tf_sampler_backward as spatial_tf_sampler_backward,
        spatial_tf_sampler_forward as spatial_tf_sampler_forward)
    from .ops.tensor_ops import (
        add_tensor as add_tensor, op_tensor as op_tensor, reduce_tensor as reduce_tensor, scale_tensor as scale_tensor,
        set_tensor as set_tensor, transform_tensor as transform_tensor, transform_tensor_ex as transform_tensor_ex)
    from .core.streams import (
        StreamLike as StreamLike, Timer as Timer, new_stream as new_stream, synchronize as synchronize, timer as timer)
    from .core.workspace import Workspace as Workspace


def version() -> tuple[int, int, int]:
    """The loaded cuDNN's ``(major, minor, patch)``, loading it (:class:`LibraryNotFoundError` where none is found)."""
    from .clib.loader import library
    return library().version


if not TYPE_CHECKING:  # hidden from type checkers: they see the names above, so a misspelt name is an error
    def __getattr__(name: str) -> Any:
        """Import a public name's module on first use (PEP 562), under :mod:`cudnn_py._imports`' lock; cache it."""
        module = _WHERE.get(name)
        if module is None and name not in _SUBMODULES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        with _imports.locked():
            g = globals()
            if name in g:  # another thread imported it while this one waited
                return g[name]
            if module is not None:
                value = getattr(importlib.import_module(module, __name__), name)
            else:
                value = importlib.import_module(f".{name}", __name__)
            g[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


#: every public name: the errors above, __version__, version() and each name of _LAZY
__all__ = sorted({"__version__", "version", *_ERRORS, *(n for names in _LAZY.values() for n in names)}, key=str.lower)
