"""Port of NVIDIA's cuDNN sample ``RNN_v8.0`` (RNN_example.cu) to cudnn_py's C layer, call for call.

Same flags (``-seqLength20 -cellMode2 ...``), same deterministic data (inputs, states, gradients and
biases 1; every weight matrix filled with 1/size of the matrix), same order of calls
(cudnnSetRNNDescriptor_v8, cudnnGetRNNWeightSpaceSize, cudnnGetRNNTempSpaceSizes, cudnnGetRNNWeightParams,
cudnnBuildRNNDynamic, cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8) and the
same checksum lines. Differences: device memory comes from cudnn_py (``cudnn_py.empty`` instead of
cudaMalloc, ``fill_`` instead of the init kernel); flags not given keep the sample's defaults (the C
sample only applies its defaults when no flag at all is given); nothing is written to result.txt.

    python examples/rnn_sample_v8.py                  # defaults: RELU, 2 layers, 512 hidden, batch 64
    python examples/rnn_sample_v8.py -cellMode2       # LSTM
    python examples/rnn_sample_v8.py -cellMode3       # GRU
"""
from __future__ import annotations

import ctypes
import sys
import warnings
from ctypes import byref

import numpy as np

import cudnn_py as cdp
from cudnn_py.capi import *  # noqa: F403 - the point of the port: C names verbatim
from cudnn_py.cli.prerequisites import require_gpu

FLAGS = {  # name: (default, description) - the C sample's table and defaults
    "dataType": (1, "selects data format (0-FP16, 1-FP32, 2-FP64)"),
    "seqLength": (20, "sequence length"),
    "numLayers": (2, "number of layers"),
    "inputSize": (512, "input vector size"),
    "hiddenSize": (512, "hidden size"),
    "projSize": (512, "LSTM cell output size"),
    "miniBatch": (64, "miniBatch size"),
    "inputMode": (1, "input to the RNN model (0-skip input, 1-linear input)"),
    "dirMode": (0, "recurrence pattern (0-unidirectional, 1-bidirectional)"),
    "cellMode": (0, "cell type (0-RELU, 1-TANH, 2-LSTM, 3-GRU)"),
    "biasMode": (3, "bias type (0-no bias, 1-inp bias, 2-rec bias, 3-double bias"),
    "algorithm": (0, "recurrence algorithm (0-standard, 1-persist static, 2-persist dynamic"),
    "mathPrecision": (1, "math precision (0-FP16, 1-FP32, 2-FP64)"),
    "mathType": (0, "math type (0-default, 1-tensor op math, 2-tensor op math with conversion)"),
    "dropout": (0.0, "dropout rate"),
    "printWeights": (0, "Print weights"),
}


def parse(argv: list[str]) -> dict:
    opts = {k: v for k, (v, _) in FLAGS.items()}
    if not argv:
        print("This is the cuDNN RNN API sample.\n\nUsage: rnn_sample_v8.py [OPTIONS]\n\nProgram options:\n")
        for k, (v, desc) in FLAGS.items():
            print(f"{'-' + k + ('<%g>' if isinstance(v, float) else '<%d>'):20s} - {desc}")
        print("[INFO] Default RNN sample parameters will be used!")
    for arg in argv:
        for k, (v, _) in FLAGS.items():
            if arg.startswith("-" + k):
                text = arg[len(k) + 1:]
                try:
                    opts[k] = float(text) if isinstance(v, float) else int(text)
                except ValueError:
                    sys.exit(f"ERROR: missing numerical argument in option '{arg}'")
                break
    return opts


def enum_pick(value: int, members: list, what: str):
    if not 0 <= value < len(members):
        sys.exit(f"[ERROR] Wrong parameter for the {what}!")
    return members[value]


def main(argv: list[str]) -> dict:
    print("Executing: rnn_sample_v8.py" + "".join(" " + a for a in argv))
    o = parse(argv)
    require_gpu("rnn_sample_v8.py")  # before any other work
    inputMode = enum_pick(o["inputMode"], [CUDNN_SKIP_INPUT, CUDNN_LINEAR_INPUT], "inputMode")
    dirMode = enum_pick(o["dirMode"], [CUDNN_UNIDIRECTIONAL, CUDNN_BIDIRECTIONAL], "dirMode")
    cellMode = enum_pick(o["cellMode"], [CUDNN_RNN_RELU, CUDNN_RNN_TANH, CUDNN_LSTM, CUDNN_GRU], "cellMode")
    biasMode = enum_pick(o["biasMode"], [CUDNN_RNN_NO_BIAS, CUDNN_RNN_SINGLE_INP_BIAS, CUDNN_RNN_SINGLE_REC_BIAS,
                                         CUDNN_RNN_DOUBLE_BIAS], "biasMode")
    algorithm = enum_pick(o["algorithm"], [CUDNN_RNN_ALGO_STANDARD, CUDNN_RNN_ALGO_PERSIST_STATIC,
                                           CUDNN_RNN_ALGO_PERSIST_DYNAMIC], "algorithm")
    types = [CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE]
    mathPrecision = enum_pick(o["mathPrecision"], types, "mathPrecision")
    mathType = enum_pick(o["mathType"], [CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH,
                                         CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION], "mathType")
    dataType = enum_pick(o["dataType"], types, "dataType")
    T_ELEM = cdp.numpy_dtype(dataType)

    inputSize, hiddenSize, projSize = o["inputSize"], o["hiddenSize"], o["projSize"]
    numLayers, seqLength, miniBatch, dropout = o["numLayers"], o["seqLength"], o["miniBatch"], o["dropout"]
    bidirectionalScale = 2 if dirMode == CUDNN_BIDIRECTIONAL else 1
    inputTensorSize = seqLength * miniBatch * inputSize
    outputTensorSize = seqLength * miniBatch * hiddenSize * bidirectionalScale
    hiddenTensorSize = numLayers * miniBatch * hiddenSize * bidirectionalScale
    dimHidden = (ctypes.c_int * 3)(numLayers * bidirectionalScale, miniBatch, hiddenSize)
    strideHidden = (ctypes.c_int * 3)(miniBatch * hiddenSize, hiddenSize, 1)
    numLinearLayers = {CUDNN_RNN_RELU: 2, CUDNN_RNN_TANH: 2, CUDNN_LSTM: 8, CUDNN_GRU: 6}[cellMode]
    seed = 1337
    flopCount = numLinearLayers * 2 * bidirectionalScale * hiddenSize * hiddenSize * seqLength * miniBatch * numLayers

    if ((dataType == CUDNN_DATA_HALF and mathPrecision not in (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT))
            or (dataType == CUDNN_DATA_FLOAT and mathPrecision != CUDNN_DATA_FLOAT)
            or (dataType == CUDNN_DATA_DOUBLE and mathPrecision != CUDNN_DATA_DOUBLE)):
        sys.exit("[ERROR] Inconsistent parameter: dataType does not match mathPrecision!")
    if ((dataType == CUDNN_DATA_FLOAT and mathType not in (CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
            or (dataType == CUDNN_DATA_DOUBLE and mathType != CUDNN_DEFAULT_MATH)):
        sys.exit("[ERROR] Inconsistent parameter: dataType does not match mathType!")
    if inputMode == CUDNN_SKIP_INPUT and inputSize != hiddenSize:
        sys.exit("[ERROR] Inconsistent parameter: inputSize does not match hiddenSize!")
    if projSize > hiddenSize:
        sys.exit("[ERROR] Inconsistent parameter: projSize is larger than hiddenSize!")

    print("[INFO] RNN sample parameters:")
    print(f"[INFO] RNN seqLength        = {seqLength:5d}")
    print(f"[INFO] RNN numLayers        = {numLayers:5d}")
    print(f"[INFO] RNN inputSize        = {inputSize:5d}")
    print(f"[INFO] RNN hiddenSize       = {hiddenSize:5d}")
    print(f"[INFO] RNN projSize         = {projSize:5d} ({'enabled' if cellMode == CUDNN_LSTM else 'disabled'})")
    print(f"[INFO] RNN miniBatch        = {miniBatch:5d}")
    for label, v in (("inputMode", inputMode), ("dirMode", dirMode), ("cellMode", cellMode), ("biasMode", biasMode),
                     ("algorithm", algorithm), ("mathPrecision", mathPrecision), ("mathType", mathType),
                     ("dataType", dataType)):
        print(f"[INFO] RNN {label:<16s} = {int(v):5d} ({v.name})")
    print(f"[INFO] RNN dropout          = {dropout:5g}")

    # --- run() ---
    cudnnHandle = cudnnHandle_t()
    cudnnCreate(byref(cudnnHandle))
    alloc = lambda n: cdp.empty((n,), T_ELEM)  # noqa: E731 - cudaMalloc(n * sizeof(T_ELEM))
    x, y, dx, dy = alloc(inputTensorSize), alloc(outputTensorSize), alloc(inputTensorSize), alloc(outputTensorSize)
    hx, cx, hy, cy, dhx, dcx, dhy, dcy = (alloc(hiddenTensorSize) for _ in range(8))
    seqLengthArray = (ctypes.c_int * miniBatch)(*([seqLength] * miniBatch))
    # the device copy the v8 calls take as `const int32_t devSeqLengths[]` (passed as its int address)
    devSeqLengths = cdp.to_device(np.full(miniBatch, seqLength, np.int32))

    xDesc, yDesc = cudnnRNNDataDescriptor_t(), cudnnRNNDataDescriptor_t()
    cudnnCreateRNNDataDescriptor(byref(xDesc))
    cudnnCreateRNNDataDescriptor(byref(yDesc))
    paddingFill = ctypes.c_double(0.0)
    cudnnSetRNNDataDescriptor(xDesc, dataType, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, seqLength, miniBatch,
                              inputSize, seqLengthArray, byref(paddingFill))
    cudnnSetRNNDataDescriptor(yDesc, dataType, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, seqLength, miniBatch,
                              hiddenSize * bidirectionalScale, seqLengthArray, byref(paddingFill))
    hDesc, cDesc = cudnnTensorDescriptor_t(), cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(hDesc))
    cudnnCreateTensorDescriptor(byref(cDesc))
    cudnnSetTensorNdDescriptor(hDesc, dataType, 3, dimHidden, strideHidden)
    cudnnSetTensorNdDescriptor(cDesc, dataType, 3, dimHidden, strideHidden)

    dropoutDesc = cudnnDropoutDescriptor_t()
    cudnnCreateDropoutDescriptor(byref(dropoutDesc))
    stateSize = ctypes.c_size_t()
    cudnnDropoutGetStatesSize(cudnnHandle, byref(stateSize))
    states = cdp.empty((stateSize.value,), np.uint8)
    cudnnSetDropoutDescriptor(dropoutDesc, cudnnHandle, dropout, states.ptr, stateSize.value, seed)

    rnnDesc = cudnnRNNDescriptor_t()
    cudnnCreateRNNDescriptor(byref(rnnDesc))
    cudnnSetRNNDescriptor_v8(rnnDesc, algorithm, cellMode, biasMode, dirMode, inputMode, dataType, mathPrecision,
                             mathType, inputSize, hiddenSize, projSize, numLayers, dropoutDesc, 0)

    weightSpaceSize = ctypes.c_size_t()
    cudnnGetRNNWeightSpaceSize(cudnnHandle, rnnDesc, byref(weightSpaceSize))
    weightSpace = cdp.empty((weightSpaceSize.value,), np.uint8)
    dweightSpace = cdp.empty((weightSpaceSize.value,), np.uint8)
    workSpaceSize, reserveSpaceSize = ctypes.c_size_t(), ctypes.c_size_t()
    cudnnGetRNNTempSpaceSizes(cudnnHandle, rnnDesc, CUDNN_FWD_MODE_TRAINING, xDesc, byref(workSpaceSize),
                              byref(reserveSpaceSize))
    workSpace = cdp.empty((workSpaceSize.value,), np.uint8)
    reserveSpace = cdp.empty((reserveSpaceSize.value,), np.uint8)
    mib = 1024.0 * 1024.0
    print(f"[INFO] weightSpaceSize : {weightSpaceSize.value / mib:g} MiB")
    print(f"[INFO] workSpaceSize   : {workSpaceSize.value / mib:g} MiB")
    print(f"[INFO] reserveSpaceSize: {reserveSpaceSize.value / mib:g} MiB\n")

    # --- testgen(): matrices 1/size, biases 1, data 1 ---
    for a in (x, hx, cx, dy, dhy, dcy):
        a.fill_(1.0)
    wDesc, bDesc = cudnnTensorDescriptor_t(), cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(wDesc))
    cudnnCreateTensorDescriptor(byref(bDesc))
    for layer in range(numLayers * bidirectionalScale):
        for linLayerID in range(numLinearLayers):
            linLayerMat, linLayerBias = ctypes.c_void_p(), ctypes.c_void_p()
            cudnnGetRNNWeightParams(cudnnHandle, rnnDesc, layer, weightSpaceSize.value, weightSpace.ptr, linLayerID,
                                    wDesc, byref(linLayerMat), bDesc, byref(linLayerBias))
            for desc, addr, value in ((wDesc, linLayerMat, None), (bDesc, linLayerBias, 1.0)):
                if not addr.value:
                    continue
                dt, nbDims = ctypes.c_int(), ctypes.c_int()
                dim, stride = (ctypes.c_int * 3)(), (ctypes.c_int * 3)()
                cudnnGetTensorNdDescriptor(desc, 3, byref(dt), byref(nbDims), dim, stride)
                n = dim[0] * dim[1] * dim[2]
                view = cdp.DeviceArray(addr.value, (n,), T_ELEM, owner=weightSpace)
                view.fill_(1.0 / n if value is None else value)
                if value is None and o["printWeights"]:
                    print(f"[DEBUG] Printing the weight matrix {dim[1]}x{dim[2]}:")
                    for row in view.to_numpy().reshape(dim[1], dim[2]):
                        print(" ".join(f"{float(v):1.6f}" for v in row) + " ")
    cudnnDestroyTensorDescriptor(wDesc)
    cudnnDestroyTensorDescriptor(bDesc)

    if algorithm == CUDNN_RNN_ALGO_PERSIST_DYNAMIC:
        cudnnBuildRNNDynamic(cudnnHandle, rnnDesc, miniBatch)
    cdp.synchronize()

    with cdp.timer() as tf:
        cudnnRNNForward(cudnnHandle, rnnDesc, CUDNN_FWD_MODE_TRAINING, devSeqLengths.ptr, xDesc, x.ptr, yDesc,
                        y.ptr, hDesc, hx.ptr, hy.ptr, cDesc, cx.ptr, cy.ptr, weightSpaceSize.value, weightSpace.ptr,
                        workSpaceSize.value, workSpace.ptr, reserveSpaceSize.value, reserveSpace.ptr)
    with cdp.timer() as tbd:
        cudnnRNNBackwardData_v8(cudnnHandle, rnnDesc, devSeqLengths.ptr, yDesc, y.ptr, dy.ptr, xDesc, dx.ptr,
                                hDesc, hx.ptr, dhy.ptr, dhx.ptr, cDesc, cx.ptr, dcy.ptr, dcx.ptr,
                                weightSpaceSize.value, weightSpace.ptr, workSpaceSize.value, workSpace.ptr,
                                reserveSpaceSize.value, reserveSpace.ptr)
    with cdp.timer() as tbw:
        dweightSpace.fill_(0)  # cudnnRNNBackwardWeights_v8 adds to dw
        cudnnRNNBackwardWeights_v8(cudnnHandle, rnnDesc, CUDNN_WGRAD_MODE_ADD, devSeqLengths.ptr, xDesc, x.ptr,
                                   hDesc, hx.ptr, yDesc, y.ptr, weightSpaceSize.value, dweightSpace.ptr,
                                   workSpaceSize.value, workSpace.ptr, reserveSpaceSize.value, reserveSpace.ptr)
    print(f"[INFO] timeForward        : {tf.ms:2.5f} ms")
    print(f"[INFO] timeBackwardData   : {tbd.ms:2.5f} ms")
    print(f"[INFO] timeBackwardWeights: {tbw.ms:2.5f} ms")
    print(f"[INFO] Forward: {flopCount / (1e6 * tf.ms):3.0f} GFLOPS")
    print(f"[INFO] Backward: {2 * flopCount / (1e6 * (tbd.ms + tbw.ms)):3.0f} GFLOPS, "
          f"({flopCount / (1e6 * tbd.ms):3.0f} GFLOPS), ({flopCount / (1e6 * tbw.ms):3.0f} GFLOPS)")
    cdp.synchronize()

    # --- checksums, summed in double as the sample does (same element ranges) ---
    lstm = cellMode == CUDNN_LSTM
    H, B, L = hiddenSize, miniBatch, numLayers * bidirectionalScale
    state = lambda a: a.to_numpy().astype(np.float64)[:L * B * H].reshape(L, B, H)  # noqa: E731
    sums = {
        "y": y.to_numpy().astype(np.float64).sum(),
        "hy": state(hy).sum(), "cy": state(cy).sum() if lstm else 0.0,
        "dx": dx.to_numpy().astype(np.float64).sum(),
        "dhx": state(dhx).sum(), "dcx": state(dcx).sum() if lstm else 0.0,
        "dw": dweightSpace.to_numpy().view(T_ELEM).astype(np.float64).sum(),
    }
    print(f"y checksum {sums['y']:E}     " + (f"cy checksum {sums['cy']:E}     " if lstm else "")
          + f"hy checksum {sums['hy']:E}")
    print(f"dx checksum {sums['dx']:E}    " + (f"dcx checksum {sums['dcx']:E}    " if lstm else "")
          + f"dhx checksum {sums['dhx']:E}")
    print(f"dw checksum {sums['dw']:E}")

    for d in (xDesc, yDesc):
        cudnnDestroyRNNDataDescriptor(d)
    cudnnDestroyTensorDescriptor(hDesc)
    cudnnDestroyTensorDescriptor(cDesc)
    cudnnDestroyDropoutDescriptor(dropoutDesc)
    cudnnDestroyRNNDescriptor(rnnDesc)
    cudnnDestroy(cudnnHandle)
    return sums


if __name__ == "__main__":
    # a line-for-line port calls the C functions cuDNN 9 deprecates on purpose, as the C program does: no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    try:
        main(sys.argv[1:])
    except (cdp.NoDeviceError, cdp.CudnnNotInitializedError) as e:  # no GPU here (cudnnCreate says so)
        sys.exit(f"{sys.argv[0]}: {e}")
