"""Graph operations: one :class:`Op` subclass per operation kind, each with its own lowering, and the builder
methods that add them to a :class:`~cudnn_py.graph.Graph` (one mixin per module)."""
from .base import LowerContext, Op, backend_dims
from .conv import ConvBuilders, ConvDgrad, ConvFprop, ConvWgrad
from .matmul import Matmul, MatmulBuilders
from .norm import BNBackwardWeights, BNFinalize, GenStats, NormBackward, NormBuilders, NormForward
from .pointwise import POINTWISE_ARITY, Pointwise, PointwiseBuilders, pointwise_mode
from .quant import QuantBuilders
from .reduction import Reduction, ReductionBuilders, reduction_mode
from .resample import ResampleBackward, ResampleBuilders, ResampleForward
from .reshape import Concatenate, Reshape, ReshapeBuilders, Slice, Transpose
from .rng import Rng, RngBuilders
from .sdpa import SdpaBackward, SdpaForward, SdpaFp8Backward, SdpaFp8Forward
from .sdpa_builders import SdpaBuilders
from .sdpa_options import SdpaOptions

__all__ = ["Op", "LowerContext", "backend_dims", "ConvFprop", "ConvDgrad", "ConvWgrad", "Matmul",
           "Pointwise", "Reduction", "GenStats", "NormForward", "POINTWISE_ARITY", "pointwise_mode",
           "reduction_mode", "SdpaOptions", "SdpaForward", "SdpaBackward", "SdpaFp8Forward", "SdpaFp8Backward",
           "NormBackward", "BNFinalize", "BNBackwardWeights", "ResampleForward", "ResampleBackward", "Rng", "Reshape",
           "Transpose", "Slice", "Concatenate", "ConvBuilders", "MatmulBuilders", "PointwiseBuilders",
           "ReductionBuilders", "NormBuilders", "SdpaBuilders", "ResampleBuilders", "RngBuilders", "ReshapeBuilders",
           "QuantBuilders"]
