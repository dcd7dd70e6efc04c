"""Which host array parameter's length another parameter of the same call gives (from the cuDNN API reference; the
headers do not say it in a form a parser can read), by parameter name; a third name is the
``cudnnBackendAttributeType_t`` parameter that sets an untyped (``void *``) array's element type. The generator
fails when a header renames one; the binding refuses an array shorter than what cuDNN reads or writes.
"""
from __future__ import annotations

from . import model


def _each(array_names: tuple[str, ...], count: str) -> list[tuple[str, ...]]:
    return [(a, count) for a in array_names]


#: function -> [(array parameter, count parameter[, attribute type parameter])]
LENGTHS: dict[str, list[tuple[str, ...]]] = {
    "cudnnGetLastErrorString": [("message", "max_size")],
    "cudnnBackendSetAttribute": [("arrayOfElements", "elementCount", "attributeType")],
    "cudnnBackendGetAttribute": [("arrayOfElements", "requestedElementCount", "attributeType")],
    "cudnnSetTensorNdDescriptor": _each(("dimA", "strideA"), "nbDims"),
    "cudnnSetTensorNdDescriptorEx": _each(("dimA",), "nbDims"),
    "cudnnGetTensorNdDescriptor": _each(("dimA", "strideA"), "nbDimsRequested"),
    # foldA is left out: it has nbDims - 2 entries (measured with cuDNN 9.19 on a GPU), a count no argument gives
    "cudnnSetTensorTransformDescriptor": _each(("padBeforeA", "padAfterA"), "nbDims"),
    "cudnnGetTensorTransformDescriptor": _each(("padBeforeA", "padAfterA"), "nbDimsRequested"),
    "cudnnSetFilterNdDescriptor": _each(("filterDimA",), "nbDims"),
    "cudnnGetFilterNdDescriptor": _each(("filterDimA",), "nbDimsRequested"),
    "cudnnSetPoolingNdDescriptor": _each(("windowDimA", "paddingA", "strideA"), "nbDims"),
    "cudnnGetPoolingNdDescriptor": _each(("windowDimA", "paddingA", "strideA"), "nbDimsRequested"),
    "cudnnGetPoolingNdForwardOutputDim": _each(("outputTensorDimA",), "nbDims"),
    "cudnnSetSpatialTransformerNdDescriptor": _each(("dimA",), "nbDims"),
    "cudnnSetRNNDataDescriptor": _each(("seqLengthArray",), "batchSize"),
    "cudnnGetRNNDataDescriptor": _each(("seqLengthArray",), "arrayLengthRequested"),
    "cudnnSetSeqDataDescriptor": _each(("dimA", "axes"), "nbDims") + [("seqLengthArray", "seqLengthArraySize")],
    "cudnnGetSeqDataDescriptor": _each(("dimA", "axes"), "nbDimsRequested") +
    [("seqLengthArray", "seqLengthSizeRequested")],
    "cudnnSetConvolutionNdDescriptor": _each(("padA", "filterStrideA", "dilationA"), "arrayLength"),
    "cudnnGetConvolutionNdDescriptor": _each(("padA", "strideA", "dilationA"), "arrayLengthRequested"),
    "cudnnGetConvolutionNdForwardOutputDim": _each(("tensorOuputDimA",), "nbDims"),
    **{f"cudnn{verb}Convolution{d}Algorithm{tail}": [("perfResults", "requestedAlgoCount")]
       for d in ("Forward", "BackwardData", "BackwardFilter")
       for verb, tail in (("Get", "_v7"), ("Find", ""), ("Find", "Ex"))},
}


class LengthsError(ValueError):
    """The table names a function or parameter the headers do not declare."""


def attach(functions: list[model.Function]) -> None:
    """Set ``lengths`` on the functions the table lists; raises :class:`LengthsError` for a stale entry."""
    by_name = {f.name: f for f in functions}
    for name, entries in LENGTHS.items():
        f = by_name.get(name)
        if f is None:
            continue  # an older header set without this function: nothing to check
        for entry in entries:
            unknown = [p for p in entry if p not in f.params]
            if unknown:
                raise LengthsError(f"lengths table: {name} has no parameter {', '.join(unknown)} ({f.prototype})")
        f.lengths = [tuple(e) for e in entries]
