/*
 * Peer for krylov-bench spmv: cuSPARSE SpMV (y = A x, fp64 or, with --float32, fp32 CSR, 32-bit
 * indices; fp32 values are the file's rounded to float, as krylov-bench rounds them) on the matrices
 * krylov-bench exports (`krylov-bench export`, or `spmv --export DIR`; the binary format is in
 * bench/bench.h). Built on the GPU host by bench/device/bench-spmv.sh:
 *
 *   nvcc -O3 -arch=sm_90 -o cusparse_spmv bench/peers/cusparse_spmv.cu -lcusparse
 *   cusparse_spmv [--runs N] [--warmup N] [--float32] FILE.csr...
 *
 * For each file and for CUSPARSE_SPMV_ALG_DEFAULT and CUSPARSE_SPMV_CSR_ALG2: the external buffer
 * is sized and allocated once, `warmup` untimed calls, then `runs` calls each between a pair of
 * CUDA events (synchronised after each; the median is the headline, as krylov-bench's profiling
 * events per run), then `runs` calls back to back between one event pair (time per call). The
 * result is checked against a CPU product. Also a device-to-device copy of 1 GiB (median of 20,
 * bytes read + written). Prints one JSON object per file on stdout.
 */
#include <cuda_runtime.h>
#include <cusparse.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define SPARSE_OK(call)                                                                            \
    do {                                                                                           \
        cusparseStatus_t s_ = (call);                                                              \
        if (s_ != CUSPARSE_STATUS_SUCCESS) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                          \
                    cusparseGetErrorString(s_));                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct Csr {
    int64_t rows = 0, cols = 0, nnz = 0;
    std::vector<int32_t> ptr, idx;
    std::vector<double> val;
};

static bool read_csr(const char *path, Csr &m)
{
    FILE *f = fopen(path, "rb");
    if (f == nullptr) {
        perror(path);
        return false;
    }
    char magic[8];
    int64_t head[3];
    bool ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, "KDCSR64", 8) == 0 &&
              fread(head, sizeof(head), 1, f) == 1;
    if (ok) {
        m.rows = head[0], m.cols = head[1], m.nnz = head[2];
        m.ptr.resize(m.rows + 1);
        m.idx.resize(m.nnz);
        m.val.resize(m.nnz);
        ok = fread(m.ptr.data(), 4, m.rows + 1, f) == (size_t)m.rows + 1 &&
             fread(m.idx.data(), 4, m.nnz, f) == (size_t)m.nnz &&
             fread(m.val.data(), 8, m.nnz, f) == (size_t)m.nnz;
    }
    fclose(f);
    if (!ok)
        fprintf(stderr, "%s: not a KDCSR64 file\n", path);
    return ok;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double copy_gbs()
{
    size_t bytes = (size_t)1 << 30;
    void *a, *b;
    CUDA_OK(cudaMalloc(&a, bytes));
    CUDA_OK(cudaMalloc(&b, bytes));
    CUDA_OK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int i = 0; i < 23; i++) {
        CUDA_OK(cudaEventRecord(e0));
        CUDA_OK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
        CUDA_OK(cudaEventRecord(e1));
        CUDA_OK(cudaEventSynchronize(e1));
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3)
            t.push_back(ms);
    }
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    return 2.0 * (double)bytes / (median(t) * 1e-3) / 1e9;
}

int main(int argc, char **argv)
{
    int runs = 200, warmup = 10;
    bool f32 = false;
    std::vector<const char *> files;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--float32") == 0)
            f32 = true;
        else
            files.push_back(argv[i]);
    }
    if (files.empty() || runs < 1) {
        fprintf(stderr, "usage: cusparse_spmv [--runs N] [--warmup N] [--float32] FILE.csr...\n");
        return 2;
    }
    double copy = copy_gbs();
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, runtime = 0, sparse_version = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cusparseHandle_t handle;
    SPARSE_OK(cusparseCreate(&handle));
    SPARSE_OK(cusparseGetVersion(handle, &sparse_version));
    const size_t vsz = f32 ? 4 : 8;
    const cudaDataType vtype = f32 ? CUDA_R_32F : CUDA_R_64F;
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));

    for (const char *path : files) {
        Csr m;
        if (!read_csr(path, m))
            return 1;
        std::vector<double> x(m.cols), ref(m.rows, 0.0), y(m.rows);
        uint64_t s = 0x9E3779B97F4A7C15ull;
        for (auto &v : x) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            v = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        }
        if (f32) { /* the reference multiplies the values the device gets */
            for (auto &v : x)
                v = (double)(float)v;
            for (auto &v : m.val)
                v = (double)(float)v;
        }
        /* the device's copies, in its value type */
        std::vector<unsigned char> hval(std::max<int64_t>(m.nnz, 1) * vsz),
            hx(std::max<int64_t>(m.cols, 1) * vsz), hy(std::max<int64_t>(m.rows, 1) * vsz);
        for (int64_t k = 0; k < m.nnz; k++) {
            float f = (float)m.val[k];
            memcpy(&hval[k * vsz], f32 ? (const void *)&f : (const void *)&m.val[k], vsz);
        }
        for (int64_t k = 0; k < m.cols; k++) {
            float f = (float)x[k];
            memcpy(&hx[k * vsz], f32 ? (const void *)&f : (const void *)&x[k], vsz);
        }
        for (int64_t r = 0; r < m.rows; r++)
            for (int32_t k = m.ptr[r]; k < m.ptr[r + 1]; k++)
                ref[r] += m.val[k] * x[m.idx[k]];
        int32_t *dptr, *didx;
        void *dval, *dx, *dy;
        CUDA_OK(cudaMalloc(&dptr, (m.rows + 1) * 4));
        CUDA_OK(cudaMalloc(&didx, std::max<int64_t>(m.nnz, 1) * 4));
        CUDA_OK(cudaMalloc(&dval, std::max<int64_t>(m.nnz, 1) * vsz));
        CUDA_OK(cudaMalloc(&dx, std::max<int64_t>(m.cols, 1) * vsz));
        CUDA_OK(cudaMalloc(&dy, std::max<int64_t>(m.rows, 1) * vsz));
        CUDA_OK(cudaMemcpy(dptr, m.ptr.data(), (m.rows + 1) * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(didx, m.idx.data(), m.nnz * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dval, hval.data(), m.nnz * vsz, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dx, hx.data(), m.cols * vsz, cudaMemcpyHostToDevice));
        cusparseSpMatDescr_t A;
        cusparseDnVecDescr_t X, Y;
        SPARSE_OK(cusparseCreateCsr(&A, m.rows, m.cols, m.nnz, dptr, didx, dval,
                                    CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                    CUSPARSE_INDEX_BASE_ZERO, vtype));
        SPARSE_OK(cusparseCreateDnVec(&X, m.cols, dx, vtype));
        SPARSE_OK(cusparseCreateDnVec(&Y, m.rows, dy, vtype));
        const double alpha64 = 1.0, beta64 = 0.0;
        const float alpha32 = 1.0f, beta32 = 0.0f;
        const void *alpha = f32 ? (const void *)&alpha32 : (const void *)&alpha64;
        const void *beta = f32 ? (const void *)&beta32 : (const void *)&beta64;
        const cusparseSpMVAlg_t algs[2] = {CUSPARSE_SPMV_ALG_DEFAULT, CUSPARSE_SPMV_CSR_ALG2};
        const char *names[2] = {"default", "alg2"};
        double med[2], mn[2], batch[2], err[2];
        for (int a = 0; a < 2; a++) {
            size_t bytes = 0;
            void *buffer = nullptr;
            SPARSE_OK(cusparseSpMV_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha, A, X,
                                              beta, Y, vtype, algs[a], &bytes));
            CUDA_OK(cudaMalloc(&buffer, std::max<size_t>(bytes, 1)));
            auto call = [&]() {
                SPARSE_OK(cusparseSpMV(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha, A, X, beta,
                                       Y, vtype, algs[a], buffer));
            };
            CUDA_OK(cudaMemset(dy, 0xff, m.rows * vsz)); /* NaN: every y must be written */
            for (int i = 0; i < warmup; i++)
                call();
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaGetLastError());
            CUDA_OK(cudaMemcpy(hy.data(), dy, m.rows * vsz, cudaMemcpyDeviceToHost));
            for (int64_t r = 0; r < m.rows; r++) {
                float f;
                memcpy(f32 ? (void *)&f : (void *)&y[r], &hy[r * vsz], vsz);
                if (f32)
                    y[r] = f;
            }
            double d = 0, sc = 1e-300;
            for (int64_t r = 0; r < m.rows; r++) {
                d = std::isfinite(y[r]) ? std::max(d, std::fabs(y[r] - ref[r])) : INFINITY;
                sc = std::max(sc, std::fabs(ref[r]));
            }
            err[a] = d / sc;
            std::vector<double> t(runs);
            for (int i = 0; i < runs; i++) {
                CUDA_OK(cudaEventRecord(e0));
                call();
                CUDA_OK(cudaEventRecord(e1));
                CUDA_OK(cudaEventSynchronize(e1));
                float ms;
                CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
                t[i] = ms;
            }
            mn[a] = *std::min_element(t.begin(), t.end());
            med[a] = median(t);
            CUDA_OK(cudaEventRecord(e0));
            for (int i = 0; i < runs; i++)
                call();
            CUDA_OK(cudaEventRecord(e1));
            CUDA_OK(cudaEventSynchronize(e1));
            float total;
            CUDA_OK(cudaEventElapsedTime(&total, e0, e1));
            batch[a] = total / runs;
            CUDA_OK(cudaFree(buffer));
        }
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        std::string name(base);
        if (name.size() > 4 && name.substr(name.size() - 4) == ".csr")
            name.resize(name.size() - 4);
        printf("{\"name\": \"%s\", \"rows\": %lld, \"nnz\": %lld, \"device\": \"%s\", "
               "\"cuda_driver\": %d, \"cuda_runtime\": %d, \"cusparse\": %d, \"copy_gbs\": %.6g, "
               "\"dtype\": \"%s\"",
               name.c_str(), (long long)m.rows, (long long)m.nnz, prop.name, driver, runtime,
               sparse_version, copy, f32 ? "float32" : "float64");
        for (int a = 0; a < 2; a++)
            printf(", \"%s_ms\": %.6g, \"%s_min_ms\": %.6g, \"%s_batch_ms\": %.6g, "
                   "\"%s_rel_err\": %.3g",
                   names[a], med[a], names[a], mn[a], names[a], batch[a], names[a], err[a]);
        printf("}\n");
        fflush(stdout);
        SPARSE_OK(cusparseDestroySpMat(A));
        SPARSE_OK(cusparseDestroyDnVec(X));
        SPARSE_OK(cusparseDestroyDnVec(Y));
        CUDA_OK(cudaFree(dptr));
        CUDA_OK(cudaFree(didx));
        CUDA_OK(cudaFree(dval));
        CUDA_OK(cudaFree(dx));
        CUDA_OK(cudaFree(dy));
    }
    cusparseDestroy(handle);
    return 0;
}
