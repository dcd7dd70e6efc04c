"""cudnn_py: NVIDIA cuDNN 9 from Python.

Two layers: :mod:`cudnn_py.capi`, the whole C API generated from the cuDNN headers (C names verbatim),
and the Pythonic layer re-exported here (handles, device arrays, descriptors, operations).
"""
from . import capi, errors
from ._loader import library
from .errors import (
    ClosedError,
    CudnnBadParamError,
    CudnnError,
    CudnnExecutionFailedError,
    CudnnInternalError,
    CudnnNotInitializedError,
    CudnnNotSupportedError,
    FunctionNotAvailableError,
    LibraryNotFoundError,
    WorkspaceLimitError,
)

__version__ = "0.1.0"


def version() -> tuple[int, int, int]:
    """(major, minor, patch) of the loaded cuDNN library."""
    return library().version

# --- the Pythonic layer: one import line per module (keep this section sorted) ---
from .algorithms import AlgoPerf, AlgorithmCache, algorithm_cache, choose_backward_data_algorithm, choose_backward_filter_algorithm, choose_forward_algorithm  # noqa: E501
from .descriptors import (ActivationDescriptor, ConvolutionDescriptor, DropoutDescriptor, FilterDescriptor, LRNDescriptor, OpTensorDescriptor, PoolingDescriptor, ReduceTensorDescriptor, TensorDescriptor, convolution_output_shape, pooling_output_shape)  # noqa: E501
from .dtypes import cudnn_dtype, numpy_dtype
from .graph import BackendDescriptor, Graph, GraphNotSupportedError
from .handle import Handle
from .memory import DeviceArray, as_array, empty, empty_like, to_device, zeros
from .ops.activation import Activation, activation_backward, activation_forward
from .ops.attention import MultiHeadAttention, attention_backward_data, attention_backward_weights, attention_forward, load_attention_weights, read_attention_weights  # noqa: E501
from .ops.batchnorm import batchnorm_backward, batchnorm_backward_ex, batchnorm_ex_sizes, batchnorm_forward_inference, batchnorm_forward_training, batchnorm_forward_training_ex, batchnorm_param_shape  # noqa: E501
from .ops.convolution import Convolution, convolution_algorithms, convolution_backward_bias, convolution_backward_data, convolution_backward_filter, convolution_bias_activation_forward, convolution_forward, convolution_workspace_size  # noqa: E501
from .ops.ctc import CTCLoss, check_ctc_labels, ctc_loss, ctc_loss_workspace_size
from .ops.dropout import Dropout, dropout_backward, dropout_forward, dropout_reserve_size, dropout_states_size
from .ops.lrn import LRN, divisive_normalization_backward, divisive_normalization_forward, lrn_backward, lrn_forward  # noqa: E501
from .ops.normalization import normalization_backward, normalization_forward_inference, normalization_forward_training, normalization_sizes  # noqa: E501
from .ops.pooling import Pooling, pooling_backward, pooling_forward
from .ops.rnn import RNN, RNNDataDescriptor, rnn_backward_data, rnn_backward_weights, rnn_forward, rnn_weight_params
from .ops.softmax import softmax_backward, softmax_forward
from .ops.spatial_transformer import SpatialTransformer, spatial_tf_grid_backward, spatial_tf_grid_forward, spatial_tf_sampler_backward, spatial_tf_sampler_forward  # noqa: E501
from .ops.tensor_ops import add_tensor, op_tensor, reduce_tensor, scale_tensor, set_tensor, transform_tensor, transform_tensor_ex  # noqa: E501
from .streams import new_stream, synchronize, timer
from .workspace import Workspace
