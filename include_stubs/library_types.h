/* Stand-in for CUDA's library_types.h: only the types the cuDNN headers use. */
#ifndef CUDNN_PY_STUB_LIBRARY_TYPES_H
#define CUDNN_PY_STUB_LIBRARY_TYPES_H
typedef enum libraryPropertyType_t {
    MAJOR_VERSION,
    MINOR_VERSION,
    PATCH_LEVEL
} libraryPropertyType;
#endif
