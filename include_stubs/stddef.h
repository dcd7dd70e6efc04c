/* Stand-in for <stddef.h> on LP64 Linux. */
#ifndef CUDNN_PY_STUB_STDDEF_H
#define CUDNN_PY_STUB_STDDEF_H
typedef unsigned long size_t;
typedef long ptrdiff_t;
#define NULL ((void *)0)
#endif
