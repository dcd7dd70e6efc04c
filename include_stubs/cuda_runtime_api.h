/* Stand-in for the CUDA runtime header: only the types the cuDNN headers use. */
#ifndef CUDNN_PY_STUB_CUDA_RUNTIME_API_H
#define CUDNN_PY_STUB_CUDA_RUNTIME_API_H
#include <stddef.h> /* the real header brings size_t too */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUgraph_st *cudaGraph_t;
#endif
