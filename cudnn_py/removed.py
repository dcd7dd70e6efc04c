"""C functions, enums and handle types that cuDNN 8/9 removed, with what replaces them. ``cudnn_py.capi`` holds a
stand-in for each (the enums with their old values), so that a line-by-line port of a C program fails on its first
outdated line with the fix in the message: a removed function raises :class:`FunctionNotAvailableError` naming its
replacement, and a member of a removed enum passed where another enum belongs is refused, saying it was removed.
"""
from __future__ import annotations

import ctypes
import enum
from typing import NoReturn

from .errors import FunctionNotAvailableError


def _conv(direction: str, perf: str, helper: str) -> tuple[int, str]:
    return 8, (f"cudnnGet{direction}Algorithm_v7 (heuristics: a ranked list of {perf}; take the first whose status "
               f"is CUDNN_STATUS_SUCCESS and whose memory fits your limit) or cudnnFind{direction}Algorithm(Ex) "
               f"(measured). A one-line port keeping the old signature and preferences: "
               f"from cudnn_py.calls.algorithms import cudnnGet{direction}Algorithm (or cudnn_py.{helper})")


def _each(major: int, replacement: str, *names: str) -> dict[str, tuple[int, str]]:
    return {name: (major, replacement) for name in names}


_RNN_ALGO = "the algo argument of cudnnSetRNNDescriptor_v8"
#: removed name -> (cuDNN major that removed it, what to use instead)
REMOVED: dict[str, tuple[int, str]] = {
    "cudnnGetConvolutionForwardAlgorithm": _conv(
        "ConvolutionForward", "cudnnConvolutionFwdAlgoPerf_t", "choose_forward_algorithm"),
    "cudnnGetConvolutionBackwardDataAlgorithm": _conv(
        "ConvolutionBackwardData", "cudnnConvolutionBwdDataAlgoPerf_t", "choose_backward_data_algorithm"),
    "cudnnGetConvolutionBackwardFilterAlgorithm": _conv(
        "ConvolutionBackwardFilter", "cudnnConvolutionBwdFilterAlgoPerf_t", "choose_backward_filter_algorithm"),
    # RNN: the v6/v7 API gave way to the v8 one (one descriptor call, weight space, cudnnRNNForward)
    **_each(8, "cudnnSetRNNDescriptor_v8", "cudnnSetRNNDescriptor", "cudnnSetRNNDescriptor_v5",
            "cudnnSetRNNDescriptor_v6"),
    **_each(8, "cudnnGetRNNDescriptor_v8", "cudnnGetRNNDescriptor", "cudnnGetRNNDescriptor_v6"),
    **_each(9, "cudnnGetRNNDescriptor_v8", "cudnnGetRNNMatrixMathType", "cudnnGetRNNBiasMode",
            "cudnnGetRNNProjectionLayers", "cudnnGetRNNPaddingMode"),
    **{f"cudnnSetRNN{name}": (9, f"the {arg} argument of cudnnSetRNNDescriptor_v8") for name, arg in (
        ("MatrixMathType", "mathType"), ("BiasMode", "biasMode"), ("ProjectionLayers", "projSize"))},
    "cudnnSetRNNPaddingMode": (9, "auxFlags=CUDNN_RNN_PADDED_IO_ENABLED in cudnnSetRNNDescriptor_v8"),
    **{f"cudnnRNN{op}Clip": (9, f"cudnnRNN{op}Clip_v9") for op in ("Set", "Get")},
    "cudnnGetRNNParamsSize": (9, "cudnnGetRNNWeightSpaceSize"),
    **_each(9, "cudnnGetRNNWeightParams", "cudnnGetRNNLinLayerMatrixParams", "cudnnGetRNNLinLayerBiasParams"),
    **_each(9, "cudnnGetRNNTempSpaceSizes", "cudnnGetRNNWorkspaceSize", "cudnnGetRNNTrainingReserveSize"),
    **_each(9, "cudnnRNNForward with fwdMode=CUDNN_FWD_MODE_TRAINING", "cudnnRNNForwardTraining",
            "cudnnRNNForwardTrainingEx"),
    **_each(9, "cudnnRNNForward with fwdMode=CUDNN_FWD_MODE_INFERENCE", "cudnnRNNForwardInference",
            "cudnnRNNForwardInferenceEx"),
    **_each(9, "cudnnRNNBackwardData_v8", "cudnnRNNBackwardData", "cudnnRNNBackwardDataEx"),
    **_each(9, "cudnnRNNBackwardWeights_v8", "cudnnRNNBackwardWeights", "cudnnRNNBackwardWeightsEx"),
    **_each(9, "cudnnBuildRNNDynamic", "cudnnCreatePersistentRNNPlan", "cudnnSetPersistentRNNPlan"),
    "cudnnDestroyPersistentRNNPlan": (9, "cudnnBuildRNNDynamic (no plan object to destroy)"),
    **_each(9, f"nothing: the v8 RNN API takes its algorithm from {_RNN_ALGO}",
            "cudnnGetRNNForwardTrainingAlgorithmMaxCount", "cudnnGetRNNForwardInferenceAlgorithmMaxCount",
            "cudnnGetRNNBackwardDataAlgorithmMaxCount", "cudnnGetRNNBackwardWeightsAlgorithmMaxCount"),
    **_each(9, _RNN_ALGO, "cudnnFindRNNForwardTrainingAlgorithmEx", "cudnnFindRNNForwardInferenceAlgorithmEx",
            "cudnnFindRNNBackwardDataAlgorithmEx", "cudnnFindRNNBackwardWeightsAlgorithmEx"),
    "cudnnSetRNNAlgorithmDescriptor": (8, _RNN_ALGO),
    # cuDNN 9 merged the infer/train sub-libraries
    **{f"cudnn{lib}{kind}VersionCheck": (9, f"cudnn{lib}VersionCheck")
       for lib in ("Ops", "Cnn", "Adv") for kind in ("Infer", "Train")},
    # cuDNN 9 removed the algorithm descriptor API (deprecated in 8): nothing replaces it in C
    **_each(9, "nothing: cuDNN 9 removed the algorithm descriptor API; keep the cudnnConvolution*AlgoPerf_t results "
            "of cudnnFind*/cudnnGet*_v7 yourself (cudnn_py.calls.algorithms.AlgorithmCache saves and reloads them)",
            "cudnnCreateAlgorithmDescriptor", "cudnnSetAlgorithmDescriptor", "cudnnGetAlgorithmDescriptor",
            "cudnnCopyAlgorithmDescriptor", "cudnnDestroyAlgorithmDescriptor", "cudnnCreateAlgorithmPerformance",
            "cudnnSetAlgorithmPerformance", "cudnnGetAlgorithmPerformance", "cudnnDestroyAlgorithmPerformance",
            "cudnnGetAlgorithmSpaceSize", "cudnnSaveAlgorithm", "cudnnRestoreAlgorithm"),
}


# the preferences of the removed cudnnGetConvolution*Algorithm selectors (removed in cuDNN 8), with their old values
cudnnConvolutionFwdPreference_t = enum.IntEnum("cudnnConvolutionFwdPreference_t", [
    ("CUDNN_CONVOLUTION_FWD_NO_WORKSPACE", 0), ("CUDNN_CONVOLUTION_FWD_PREFER_FASTEST", 1),
    ("CUDNN_CONVOLUTION_FWD_SPECIFY_WORKSPACE_LIMIT", 2)])
cudnnConvolutionBwdDataPreference_t = enum.IntEnum("cudnnConvolutionBwdDataPreference_t", [
    ("CUDNN_CONVOLUTION_BWD_DATA_NO_WORKSPACE", 0), ("CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST", 1),
    ("CUDNN_CONVOLUTION_BWD_DATA_SPECIFY_WORKSPACE_LIMIT", 2)])
cudnnConvolutionBwdFilterPreference_t = enum.IntEnum("cudnnConvolutionBwdFilterPreference_t", [
    ("CUDNN_CONVOLUTION_BWD_FILTER_NO_WORKSPACE", 0), ("CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST", 1),
    ("CUDNN_CONVOLUTION_BWD_FILTER_SPECIFY_WORKSPACE_LIMIT", 2)])


class cudnnAlgorithmDescriptor_t(ctypes.c_void_p):
    """Handle of the algorithm descriptor API, removed in cuDNN 9 (its functions raise, naming what to do)."""


class cudnnAlgorithmPerformance_t(ctypes.c_void_p):
    """Handle of the algorithm descriptor API, removed in cuDNN 9 (its functions raise, naming what to do)."""


#: removed enum type -> the cuDNN major that removed it (the C layer names it when a member is misused)
REMOVED_ENUMS: dict[type[enum.IntEnum], int] = {
    cudnnConvolutionFwdPreference_t: 8, cudnnConvolutionBwdDataPreference_t: 8,
    cudnnConvolutionBwdFilterPreference_t: 8,
}


class RemovedFunction:
    """Stands in ``cudnn_py.capi`` for a removed C function; calling it raises an error naming the replacement."""

    def __init__(self, name: str):
        self.__name__ = name
        self.removed_in, self.replacement = REMOVED[name]

    def __call__(self, *args: object) -> NoReturn:
        raise FunctionNotAvailableError(f"{self.__name__} was removed in cuDNN {self.removed_in}; "
                                        f"use {self.replacement}")

    def __repr__(self):
        return f"<cuDNN function {self.__name__}, removed in cuDNN {self.removed_in}>"


def stand_ins(defined: dict) -> dict[str, object]:
    """Every removed name not in ``defined`` (the names the headers declare), with its stand-in object."""
    out: dict[str, object] = {name: RemovedFunction(name) for name in REMOVED}
    for e in REMOVED_ENUMS:
        out[e.__name__] = e
        out.update(e.__members__)
    out.update((t.__name__, t) for t in (cudnnAlgorithmDescriptor_t, cudnnAlgorithmPerformance_t))
    return {name: obj for name, obj in out.items() if name not in defined}
