"""Parameters where cuDNN dereferences NULL instead of refusing it (the process dies), so that the binding refuses
``None``/``0``/a NULL handle or pointer there before C runs (see ``cudnn_py.clib.binding``).

Measured on a machine without a GPU by ``tools/nonnull_probe.py`` (how: its docstring); functions that need a GPU
were not measured, and there NULL is passed through as in C, except for the handle: every ``cudnnHandle_t``
parameter is refused NULL (no cuDNN function takes one, and some dereference it).
"""
from __future__ import annotations

from . import model

#: function -> parameters that must not be NULL
NONNULL: dict[str, tuple[str, ...]] = {
    'cudnnBackendCreateDescriptor': ('descriptor',),
    'cudnnSetTensorNdDescriptor': ('dimA', 'strideA'),
    'cudnnSetTensorNdDescriptorEx': ('dimA',),
    'cudnnGetTensorNdDescriptor': ('dataType',),
    'cudnnGetTensorSizeInBytes': ('size',),
    'cudnnGetTensorTransformDescriptor': ('direction',),
    'cudnnGetOpTensorDescriptor': ('opTensorOp', 'opTensorCompType', 'opTensorNanOpt'),
    'cudnnGetReduceTensorDescriptor': ('reduceTensorOp', 'reduceTensorCompType', 'reduceTensorNanOpt', 'reduceTensorIndices', 'reduceTensorIndicesType'),
    'cudnnGetReductionIndicesSize': ('reduceTensorDesc', 'sizeInBytes'),
    'cudnnGetReductionWorkspaceSize': ('reduceTensorDesc', 'aDesc', 'cDesc', 'sizeInBytes'),
    'cudnnGetFilter4dDescriptor': ('dataType', 'format', 'k', 'c', 'h', 'w'),
    'cudnnSetFilterNdDescriptor': ('filterDimA',),
    'cudnnGetFilterNdDescriptor': ('dataType', 'format', 'nbDims', 'filterDimA'),
    'cudnnGetFilterSizeInBytes': ('size',),
    'cudnnGetPooling2dDescriptor': ('mode', 'maxpoolingNanOpt', 'windowHeight', 'windowWidth', 'verticalPadding', 'horizontalPadding', 'verticalStride', 'horizontalStride'),
    'cudnnSetPoolingNdDescriptor': ('windowDimA', 'paddingA', 'strideA'),
    'cudnnGetPoolingNdDescriptor': ('mode', 'maxpoolingNanOpt', 'nbDims', 'windowDimA', 'paddingA', 'strideA'),
    'cudnnGetPooling2dForwardOutputDim': ('n', 'c', 'h', 'w'),
    'cudnnGetActivationDescriptor': ('mode', 'reluNanOpt', 'coef'),
    'cudnnSetLRNDescriptor': ('normDesc',),
    'cudnnDeriveBNTensorDescriptor': ('xDesc',),
    'cudnnDeriveNormTensorDescriptor': ('xDesc',),
    'cudnnSetSeqDataDescriptor': ('dimA',),
    'cudnnGetCTCLossWorkspaceSize': ('probsDesc',),
    'cudnnGetCTCLossWorkspaceSize_v8': ('ctcLossDesc', 'probsDesc'),
    'cudnnGetConvolutionMathType': ('mathType',),
    'cudnnGetConvolutionGroupCount': ('groupCount',),
    'cudnnGetConvolution2dDescriptor': ('pad_h', 'pad_w', 'u', 'v', 'dilation_h', 'dilation_w', 'mode', 'computeType'),
    'cudnnSetConvolutionNdDescriptor': ('padA', 'filterStrideA', 'dilationA'),
    'cudnnGetConvolutionNdDescriptor': ('arrayLength', 'padA', 'strideA', 'dilationA', 'mode', 'computeType'),
    'cudnnGetConvolution2dForwardOutputDim': ('n', 'c', 'h', 'w'),
}


class NonNullError(ValueError):
    """The table names a parameter the headers do not declare."""


def attach(functions: list[model.Function]) -> None:
    """Set ``nonnull`` on the functions the table lists; raises :class:`NonNullError` for a stale entry."""
    by_name = {f.name: f for f in functions}
    for f in functions:
        f.nonnull = [p for p, a in zip(f.params, f.argtypes) if a == "cudnnHandle_t"]
    for name, params in NONNULL.items():
        fn = by_name.get(name)
        if fn is None:
            continue
        unknown = [p for p in params if p not in fn.params]
        if unknown:
            raise NonNullError(f"nonnull table: {name} has no parameter {', '.join(unknown)} ({fn.prototype})")
        fn.nonnull = list(dict.fromkeys(fn.nonnull + list(params)))
