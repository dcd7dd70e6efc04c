/* Per-call host time of cudnnConvolutionForward from C: the floor for benchmarks/conv_overhead.py.
 * Tiny problem: x 1x8x8x8, w 8x8x3x3, pad 1, float32, IMPLICIT_GEMM, no workspace.
 * Declares the few prototypes it needs (no cuDNN/CUDA headers required); build and run:
 *   cc -O2 conv_overhead.c -o conv_overhead -ldl -L$CUDNN_LIB_DIR -l:libcudnn.so.9 -lcuda && ./conv_overhead 20000
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void *cudnnHandle_t, *cudnnTensorDescriptor_t, *cudnnFilterDescriptor_t, *cudnnConvolutionDescriptor_t;
extern int cudnnCreate(cudnnHandle_t *);
extern int cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *);
extern int cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t, int fmt, int dtype, int n, int c, int h, int w);
extern int cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *);
extern int cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t, int dtype, int fmt, int k, int c, int h, int w);
extern int cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *);
extern int cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t, int, int, int, int, int, int, int mode,
                                           int compute);
extern int cudnnConvolutionForward(cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *,
                                   cudnnFilterDescriptor_t, const void *, cudnnConvolutionDescriptor_t, int algo,
                                   void *, size_t, const void *, cudnnTensorDescriptor_t, void *);
extern int cuInit(unsigned);
extern int cuDeviceGet(int *, int);
extern int cuDevicePrimaryCtxRetain(void **, int);
extern int cuCtxSetCurrent(void *);
extern int cuMemAlloc_v2(unsigned long long *, size_t);
extern int cuCtxSynchronize(void);

#define CHECK(call) do { int s_ = (call); if (s_) { fprintf(stderr, "%s failed: %d\n", #call, s_); return 1; } } while (0)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
    double d = *(const double *)a - *(const double *)b;
    return (d > 0) - (d < 0);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20000, dev = 0;
    void *ctx;
    unsigned long long x, w, y;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc_v2(&x, 8 * 8 * 8 * 4));
    CHECK(cuMemAlloc_v2(&w, 8 * 8 * 3 * 3 * 4));
    CHECK(cuMemAlloc_v2(&y, 8 * 8 * 8 * 4));
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    CHECK(cudnnCreate(&h));
    CHECK(cudnnCreateTensorDescriptor(&xd));
    CHECK(cudnnCreateTensorDescriptor(&yd));
    CHECK(cudnnSetTensor4dDescriptor(xd, 0 /*NCHW*/, 0 /*FLOAT*/, 1, 8, 8, 8));
    CHECK(cudnnSetTensor4dDescriptor(yd, 0, 0, 1, 8, 8, 8));
    CHECK(cudnnCreateFilterDescriptor(&wd));
    CHECK(cudnnSetFilter4dDescriptor(wd, 0, 0, 8, 8, 3, 3));
    CHECK(cudnnCreateConvolutionDescriptor(&cd));
    CHECK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, 1 /*CROSS_CORRELATION*/, 0));
    float one = 1.0f, zero = 0.0f;
    double per[7];
    for (int warm = 0; warm < 200; ++warm)
        CHECK(cudnnConvolutionForward(h, &one, xd, (void *)x, wd, (void *)w, cd, 0, NULL, 0, &zero, yd, (void *)y));
    CHECK(cuCtxSynchronize());
    for (int r = 0; r < 7; ++r) {
        double t0 = now_us();
        for (int i = 0; i < iters; ++i)
            CHECK(cudnnConvolutionForward(h, &one, xd, (void *)x, wd, (void *)w, cd, 0, NULL, 0, &zero, yd, (void *)y));
        double t1 = now_us();
        CHECK(cuCtxSynchronize());
        per[r] = (t1 - t0) / iters;
    }
    qsort(per, 7, sizeof per[0], cmp);
    printf("c_floor_us %.3f\n", per[3]);
    return 0;
}
