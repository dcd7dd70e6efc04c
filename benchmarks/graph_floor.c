/* The C floor for the graph fast-path benchmark: the cached plan of a tiny convolution (1x8x8x8 float32 NCHW,
 * 8 filters 3x3, padding 1) executed with cudnnBackendExecute in a loop. Prints host microseconds per call with
 * one prebuilt variant pack and with a fresh variant pack per call.
 * Build: nvcc -O2 graph_floor.c -I<cudnn include> -L<cudnn lib> -l:libcudnn.so.9 -o graph_floor */
#include <cudnn.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
    char m_[512]; cudnnGetLastErrorString(m_, sizeof m_); \
    fprintf(stderr, "%s:%d %s: %s %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_), m_); exit(1); } } while (0)

typedef cudnnBackendDescriptor_t D;

static D make(cudnnBackendDescriptorType_t t) { D d; CK(cudnnBackendCreateDescriptor(t, &d)); return d; }

static D tensor(int64_t uid, const int64_t *dims, int virt) {
    int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, align = 16;
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    bool v = virt;
    D t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
    CK(cudnnBackendFinalize(t));
    return t;
}

static double now_us(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3; }

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    int64_t xd[4] = {1, 8, 8, 8}, wd[4] = {8, 8, 3, 3}, yd[4] = {1, 8, 8, 8};
    D x = tensor(1, xd, 0), w = tensor(2, wd, 0), y = tensor(3, yd, 0);
    D conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nsp = 2, one[2] = {1, 1};
    CK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
    CK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    CK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp));
    CK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one));
    CK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one));
    CK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, one));
    CK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, one));
    CK(cudnnBackendFinalize(conv));
    D op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    float alpha = 1.f, beta = 0.f;
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CK(cudnnBackendFinalize(op));
    D g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CK(cudnnBackendFinalize(g));
    D heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
    CK(cudnnBackendFinalize(heur));
    int64_t n = 0;
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL));
    D *cfgs = calloc(n, sizeof(D));
    for (int64_t i = 0; i < n; i++) cfgs[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, cfgs));
    D plan = NULL;
    for (int64_t i = 0; i < n && !plan; i++) {
        D p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
        CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]));
        if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) plan = p; else cudnnBackendDestroyDescriptor(p);
    }
    if (!plan) { fprintf(stderr, "no plan\n"); return 1; }
    int64_t ws_size = 0;
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws_size));
    void *px, *pw, *py, *ws = NULL;
    cudaMalloc(&px, 512 * 4); cudaMalloc(&pw, 576 * 4); cudaMalloc(&py, 512 * 4);
    if (ws_size) cudaMalloc(&ws, ws_size);
    int64_t uids[3] = {1, 2, 3};
    void *ptrs[3] = {px, pw, py};
    D vp = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CK(cudnnBackendFinalize(vp));
    for (int i = 0; i < 1000; i++) CK(cudnnBackendExecute(h, plan, vp));
    cudaDeviceSynchronize();
    double t0 = now_us();
    for (int i = 0; i < iters; i++) CK(cudnnBackendExecute(h, plan, vp));
    double t1 = now_us();
    cudaDeviceSynchronize();
    double t2 = now_us();
    for (int i = 0; i < iters; i++) {
        D v = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        CK(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
        CK(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
        CK(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
        CK(cudnnBackendFinalize(v));
        CK(cudnnBackendExecute(h, plan, v));
        cudnnBackendDestroyDescriptor(v);
    }
    double t3 = now_us();
    cudaDeviceSynchronize();
    printf("C floor cached variant pack: %.3f us/call\n", (t1 - t0) / iters);
    printf("C floor fresh variant pack: %.3f us/call\n", (t3 - t2) / iters);
    printf("cudnn version %zu, workspace %lld\n", cudnnGetVersion(), (long long)ws_size);
    return 0;
}
