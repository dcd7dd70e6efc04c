"""The usual first cuDNN C program, ported line by line through ``cudnn_py.capi``.

A 1x3x224x224 float NCHW input, a 64x3x3x3 filter, a pad-1 stride-1 cross-correlation: describe them,
choose a forward algorithm, run ``cudnnConvolutionForward`` on random data and check it against a float64
NumPy reference. Device memory comes from cuda-python (``cuda.bindings.runtime``), as ``cudaMalloc`` would.
Without a GPU it stops after the descriptors (which need none) and says why.

    python examples/port_first_program.py
"""
from __future__ import annotations

import sys
import warnings
from ctypes import byref, c_float, c_int, c_size_t

import numpy as np

from cudnn_py.capi import *  # noqa: F403  (C names, as in the C program)
from cudnn_py.errors import CudnnNotInitializedError


def check_cuda(result):
    """cuda.bindings returns (error, *values): raise on error, return the values like C's out-parameters."""
    err, *values = result
    if int(err):
        raise RuntimeError(f"CUDA error {err!r}")
    return values[0] if len(values) == 1 else values


def reference(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Cross-correlation in float64, stride 1."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k, _, r, s = w.shape
    h, wd = x.shape[2] - r + 1, x.shape[3] - s + 1
    y = np.zeros((x.shape[0], k, h, wd))
    for i in range(r):
        for j in range(s):
            y += np.einsum("nchw,kc->nkhw", x[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    return y


def main() -> float | None:
    """Run the program; return the relative error against the reference (None without a GPU)."""
    # cudnnTensorDescriptor_t input_descriptor; cudnnCreateTensorDescriptor(&input_descriptor); ...
    input_descriptor = cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(input_descriptor))
    cudnnSetTensor4dDescriptor(input_descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 224, 224)

    kernel_descriptor = cudnnFilterDescriptor_t()
    cudnnCreateFilterDescriptor(byref(kernel_descriptor))
    cudnnSetFilter4dDescriptor(kernel_descriptor, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 64, 3, 3, 3)

    convolution_descriptor = cudnnConvolutionDescriptor_t()
    cudnnCreateConvolutionDescriptor(byref(convolution_descriptor))
    cudnnSetConvolution2dDescriptor(convolution_descriptor, 1, 1, 1, 1, 1, 1,  # pad, stride, dilation
                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)

    n, c, h, w = c_int(), c_int(), c_int(), c_int()
    cudnnGetConvolution2dForwardOutputDim(convolution_descriptor, input_descriptor, kernel_descriptor,
                                          byref(n), byref(c), byref(h), byref(w))
    print(f"output: {n.value}x{c.value}x{h.value}x{w.value}")
    output_descriptor = cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(output_descriptor))
    cudnnSetTensor4dDescriptor(output_descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w)

    # The C program creates the handle first; here it comes after the descriptors, which need no GPU.
    handle = cudnnHandle_t()
    try:
        cudnnCreate(byref(handle))
    except CudnnNotInitializedError as e:
        print(f"no GPU, so the program stops here: {e}")
        for destroy, d in ((cudnnDestroyTensorDescriptor, output_descriptor),
                           (cudnnDestroyConvolutionDescriptor, convolution_descriptor),
                           (cudnnDestroyFilterDescriptor, kernel_descriptor),
                           (cudnnDestroyTensorDescriptor, input_descriptor)):
            destroy(d)
        return None

    # The C program asked cudnnGetConvolutionForwardAlgorithm(..., CUDNN_CONVOLUTION_FWD_PREFER_FASTEST, 0, &algo).
    # cuDNN 8 removed it. Its replacement, cudnnGetConvolutionForwardAlgorithm_v7, returns the heuristics'
    # ranked list; the first entry whose status is CUDNN_STATUS_SUCCESS is what PREFER_FASTEST picked.
    perf = (cudnnConvolutionFwdAlgoPerf_t * CUDNN_CONVOLUTION_FWD_ALGO_COUNT)()
    returned = c_int()
    cudnnGetConvolutionForwardAlgorithm_v7(handle, input_descriptor, kernel_descriptor, convolution_descriptor,
                                           output_descriptor, len(perf), byref(returned), perf)
    best = next(p for p in perf[:returned.value] if p.status == CUDNN_STATUS_SUCCESS)
    convolution_algorithm = best.algo
    print(f"algorithm: {cudnnConvolutionFwdAlgo_t(convolution_algorithm).name}")

    workspace_bytes = c_size_t()
    cudnnGetConvolutionForwardWorkspaceSize(handle, input_descriptor, kernel_descriptor, convolution_descriptor,
                                            output_descriptor, convolution_algorithm, byref(workspace_bytes))
    print(f"workspace: {workspace_bytes.value / 2**20:.2f} MiB")

    from cuda.bindings import runtime as cudart
    rng = np.random.default_rng()
    x = rng.standard_normal((1, 3, 224, 224), dtype=np.float32)
    kernel = rng.standard_normal((64, 3, 3, 3), dtype=np.float32)
    y = np.full((n.value, c.value, h.value, w.value), np.nan, dtype=np.float32)  # poisoned
    d_input = check_cuda(cudart.cudaMalloc(x.nbytes))
    d_kernel = check_cuda(cudart.cudaMalloc(kernel.nbytes))
    d_output = check_cuda(cudart.cudaMalloc(y.nbytes))
    d_workspace = check_cuda(cudart.cudaMalloc(max(workspace_bytes.value, 1)))
    h2d, d2h = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
    check_cuda(cudart.cudaMemcpy(d_input, x.ctypes.data, x.nbytes, h2d))
    check_cuda(cudart.cudaMemcpy(d_kernel, kernel.ctypes.data, kernel.nbytes, h2d))
    check_cuda(cudart.cudaMemcpy(d_output, y.ctypes.data, y.nbytes, h2d))

    alpha, beta = c_float(1.0), c_float(0.0)
    cudnnConvolutionForward(handle, byref(alpha), input_descriptor, int(d_input), kernel_descriptor, int(d_kernel),
                            convolution_descriptor, convolution_algorithm, int(d_workspace), workspace_bytes,
                            byref(beta), output_descriptor, int(d_output))
    check_cuda(cudart.cudaMemcpy(y.ctypes.data, d_output, y.nbytes, d2h))

    ref = reference(x, kernel, pad=1)
    error = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))  # NaN if any element was left unwritten
    print(f"relative error vs float64 reference: {error:.2e} (max abs diff {np.nanmax(np.abs(y - ref)):.2e})")

    for ptr in (d_input, d_kernel, d_output, d_workspace):
        check_cuda(cudart.cudaFree(ptr))
    cudnnDestroyTensorDescriptor(input_descriptor)
    cudnnDestroyTensorDescriptor(output_descriptor)
    cudnnDestroyFilterDescriptor(kernel_descriptor)
    cudnnDestroyConvolutionDescriptor(convolution_descriptor)
    cudnnDestroy(handle)
    return error


if __name__ == "__main__":
    # a line-for-line port calls the C functions cuDNN 9 deprecates on purpose, as the C program does: no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    err = main()
    # float32 data may run on TF32 tensor cores by default (CUDNN_DEFAULT_MATH): ~1e-3 relative at worst
    sys.exit(0 if err is None or err < 2e-3 else 1)
