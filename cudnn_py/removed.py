"""C functions that older cuDNN had and cuDNN 8/9 removed, with what replaces them.

``cudnn_py.capi`` holds a stand-in for each: calling it raises :class:`FunctionNotAvailableError` naming
the replacement, so a ported C program fails on its first outdated line with the fix in the message.
"""
from __future__ import annotations

from .errors import FunctionNotAvailableError


def _conv(direction: str, perf: str, helper: str) -> str:
    return (f"cudnnGet{direction}Algorithm_v7 (heuristics: a ranked list of {perf}; take the first whose status is "
            f"CUDNN_STATUS_SUCCESS and whose memory fits your limit) or cudnnFind{direction}Algorithm(Ex) "
            f"(measured). A one-line port keeping the old signature and preferences: "
            f"from cudnn_py.algorithms import cudnnGet{direction}Algorithm (or cudnn_py.{helper})")


#: removed name -> (cuDNN major that removed it, what to use instead)
REMOVED: dict[str, tuple[int, str]] = {
    "cudnnGetConvolutionForwardAlgorithm": (8, _conv(
        "ConvolutionForward", "cudnnConvolutionFwdAlgoPerf_t", "choose_forward_algorithm")),
    "cudnnGetConvolutionBackwardDataAlgorithm": (8, _conv(
        "ConvolutionBackwardData", "cudnnConvolutionBwdDataAlgoPerf_t", "choose_backward_data_algorithm")),
    "cudnnGetConvolutionBackwardFilterAlgorithm": (8, _conv(
        "ConvolutionBackwardFilter", "cudnnConvolutionBwdFilterAlgoPerf_t", "choose_backward_filter_algorithm")),
    # RNN: the v6/v7 API gave way to the v8 one (one descriptor call, weight space, cudnnRNNForward)
    "cudnnSetRNNDescriptor": (8, "cudnnSetRNNDescriptor_v8"),
    "cudnnSetRNNDescriptor_v5": (8, "cudnnSetRNNDescriptor_v8"),
    "cudnnSetRNNDescriptor_v6": (8, "cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNDescriptor": (8, "cudnnGetRNNDescriptor_v8"),
    "cudnnGetRNNDescriptor_v6": (8, "cudnnGetRNNDescriptor_v8"),
    "cudnnSetRNNMatrixMathType": (9, "the mathType argument of cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNMatrixMathType": (9, "cudnnGetRNNDescriptor_v8"),
    "cudnnSetRNNBiasMode": (9, "the biasMode argument of cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNBiasMode": (9, "cudnnGetRNNDescriptor_v8"),
    "cudnnSetRNNProjectionLayers": (9, "the projSize argument of cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNProjectionLayers": (9, "cudnnGetRNNDescriptor_v8"),
    "cudnnSetRNNPaddingMode": (9, "auxFlags=CUDNN_RNN_PADDED_IO_ENABLED in cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNPaddingMode": (9, "cudnnGetRNNDescriptor_v8"),
    "cudnnRNNSetClip": (9, "cudnnRNNSetClip_v9"),
    "cudnnRNNGetClip": (9, "cudnnRNNGetClip_v9"),
    "cudnnGetRNNParamsSize": (9, "cudnnGetRNNWeightSpaceSize"),
    "cudnnGetRNNLinLayerMatrixParams": (9, "cudnnGetRNNWeightParams"),
    "cudnnGetRNNLinLayerBiasParams": (9, "cudnnGetRNNWeightParams"),
    "cudnnGetRNNWorkspaceSize": (9, "cudnnGetRNNTempSpaceSizes"),
    "cudnnGetRNNTrainingReserveSize": (9, "cudnnGetRNNTempSpaceSizes"),
    "cudnnRNNForwardTraining": (9, "cudnnRNNForward with fwdMode=CUDNN_FWD_MODE_TRAINING"),
    "cudnnRNNForwardTrainingEx": (9, "cudnnRNNForward with fwdMode=CUDNN_FWD_MODE_TRAINING"),
    "cudnnRNNForwardInference": (9, "cudnnRNNForward with fwdMode=CUDNN_FWD_MODE_INFERENCE"),
    "cudnnRNNForwardInferenceEx": (9, "cudnnRNNForward with fwdMode=CUDNN_FWD_MODE_INFERENCE"),
    "cudnnRNNBackwardData": (9, "cudnnRNNBackwardData_v8"),
    "cudnnRNNBackwardDataEx": (9, "cudnnRNNBackwardData_v8"),
    "cudnnRNNBackwardWeights": (9, "cudnnRNNBackwardWeights_v8"),
    "cudnnRNNBackwardWeightsEx": (9, "cudnnRNNBackwardWeights_v8"),
    "cudnnCreatePersistentRNNPlan": (9, "cudnnBuildRNNDynamic"),
    "cudnnSetPersistentRNNPlan": (9, "cudnnBuildRNNDynamic"),
    "cudnnDestroyPersistentRNNPlan": (9, "cudnnBuildRNNDynamic (no plan object to destroy)"),
    "cudnnGetRNNForwardTrainingAlgorithmMaxCount": (9, "nothing: the v8 RNN API chooses its algorithm from "
                                                       "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnFindRNNForwardTrainingAlgorithmEx": (9, "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnFindRNNForwardInferenceAlgorithmEx": (9, "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnFindRNNBackwardDataAlgorithmEx": (9, "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnFindRNNBackwardWeightsAlgorithmEx": (9, "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNForwardInferenceAlgorithmMaxCount": (9, "nothing: the v8 RNN API takes its algorithm from "
                                                        "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNBackwardDataAlgorithmMaxCount": (9, "nothing: the v8 RNN API takes its algorithm from "
                                                    "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnGetRNNBackwardWeightsAlgorithmMaxCount": (9, "nothing: the v8 RNN API takes its algorithm from "
                                                       "the algo argument of cudnnSetRNNDescriptor_v8"),
    "cudnnSetRNNAlgorithmDescriptor": (8, "the algo argument of cudnnSetRNNDescriptor_v8"),
    # cuDNN 9 merged the infer/train sub-libraries
    "cudnnOpsInferVersionCheck": (9, "cudnnOpsVersionCheck"),
    "cudnnOpsTrainVersionCheck": (9, "cudnnOpsVersionCheck"),
    "cudnnCnnInferVersionCheck": (9, "cudnnCnnVersionCheck"),
    "cudnnCnnTrainVersionCheck": (9, "cudnnCnnVersionCheck"),
    "cudnnAdvInferVersionCheck": (9, "cudnnAdvVersionCheck"),
    "cudnnAdvTrainVersionCheck": (9, "cudnnAdvVersionCheck"),
}


class RemovedFunction:
    """Stands in ``cudnn_py.capi`` for a removed C function; calling it raises an error naming the replacement."""

    def __init__(self, name: str):
        self.__name__ = name
        self.removed_in, self.replacement = REMOVED[name]

    def __call__(self, *args):
        raise FunctionNotAvailableError(f"{self.__name__} was removed in cuDNN {self.removed_in}; "
                                        f"use {self.replacement}")

    def __repr__(self):
        return f"<cuDNN function {self.__name__}, removed in cuDNN {self.removed_in}>"
