/*
 * Peer for krylov-bench spgemm: cuSPARSE's generic SpGEMM (cusparseSpGEMM_workEstimation /
 * _estimateMemory / _compute / _copy, called directly) on the matrices krylov-bench exports: the
 * binary CSR of bench/bench.h (`krylov-bench export SPEC FILE.csr`, or `--export DIR`) or a Matrix
 * Market file. fp64, or fp32 with --dtype float32 (the file's values rounded to float, as
 * krylov-bench rounds them); 32-bit indices. Built on the GPU host by bench/device/spgemm.sh:
 *
 *   nvcc -O3 -arch=sm_90 -o cusparse_spgemm bench/peers/cusparse_spgemm.cu -lcusparse
 *   cusparse_spgemm [--op aa|ata|rap] [--dtype float64|float32] [--runs N] [--warmup N]
 *                   [--algs default,alg1,alg2,alg3] [--chunk F] [--pool] [--p FILE] FILE...
 *
 * Operations (the operands are formed on the host, outside the timing):
 *   aa   C = A A (square A).
 *   ata  C = A^T A. cuSPARSE's SpGEMM takes only non-transposed operands
 *        (CUSPARSE_OPERATION_NON_TRANSPOSE; anything else is CUSPARSE_STATUS_NOT_SUPPORTED), so A^T
 *        is made on the host as a CSR matrix and uploaded: C = (A^T) A, two plain operands.
 *   rap  C = R (A P), R = P^T made on the host; P is --p FILE, or else NAME.P.csr or NAME.P.mtx
 *        beside FILE (NAME.csr / NAME.mtx). Two SpGEMMs timed together; A P's scratch buffers are
 *        freed before the second product starts (what a caller does), A P itself after the timing.
 *
 * Each algorithm of --algs (default: all four of CUDA 13's: CUSPARSE_SPGEMM_DEFAULT, which is
 * ALG1 today, ALG1, ALG2 and ALG3; ALG2/ALG3 go through cusparseSpGEMM_estimateMemory, ALG3 with
 * chunk fraction --chunk, 0.2 as NVIDIA's sample) is timed on its own: `warmup` untimed products,
 * then `runs` products, each between a pair of CUDA events on the default stream and synchronised
 * after. The timed region is the whole product as a caller pays it: descriptors, the work
 * estimation, the external buffers' allocation (cudaMalloc, or with --pool cudaMallocAsync from the
 * device's default pool kept warm, as CuPy's memory pool is), the compute, C's allocation and the
 * copy; the frees come after the end event. Reported: median and min ("median_ms", "min_ms"), and
 * "kernels_ms", the median of the summed event pairs around the calls that work on the device
 * (work estimation, estimate memory, compute, copy: no allocation, size query or host gap).
 *
 * Peak memory ("peak_bytes"): the most bytes live at once of what the product allocates (external
 * buffers, C, and for rap A P), the operands not included, as krylovd's kd_spgemm_stats counts
 * (pool rounding and cuSPARSE's internal allocations, if any, not seen). Checked on the host: C's
 * structure, and C x against A (B x) (for rap R (A (P x))) for a random x ("rel_err", max-norm);
 * "checksum" is the sum of C's values in double. One JSON line per file on stdout: the keys of
 * krylov-bench spgemm --json for the fastest algorithm, "alg" naming it, and "algs" with each
 * algorithm's numbers (or "error" when cuSPARSE refused it or the check failed: rel_err over 1e-8,
 * fp32 1e-3; the other algorithms still run).
 */
#include <cuda_runtime.h>
#include <cusparse.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

/* Every CUDA and cuSPARSE call is checked; a failure throws, so that one algorithm's refusal
 * (say ALG1 out of memory) is reported and the next one still runs. */
static std::string where(const char *file, int line, const char *call, const char *what)
{
    char b[512];
    snprintf(b, sizeof(b), "%s:%d: %s: %s", file, line, call, what);
    return b;
}
#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            throw std::runtime_error(where(__FILE__, __LINE__, #call, cudaGetErrorString(e_)));    \
    } while (0)
#define SPARSE_OK(call)                                                                            \
    do {                                                                                           \
        cusparseStatus_t s_ = (call);                                                              \
        if (s_ != CUSPARSE_STATUS_SUCCESS)                                                         \
            throw std::runtime_error(                                                              \
                where(__FILE__, __LINE__, #call, cusparseGetErrorString(s_)));                     \
    } while (0)

/* ---- host CSR ---------------------------------------------------------------------------- */

struct Csr {
    int64_t rows = 0, cols = 0, nnz = 0;
    std::vector<int32_t> ptr, idx;
    std::vector<double> val;
};

static bool ends_with(const std::string &s, const char *t)
{
    size_t n = strlen(t);
    return s.size() >= n && s.compare(s.size() - n, n, t) == 0;
}

static void read_kdcsr(const char *path, Csr &m)
{
    FILE *f = fopen(path, "rb");
    if (f == nullptr)
        throw std::runtime_error(std::string(path) + ": " + strerror(errno));
    char magic[8];
    int64_t head[3];
    bool ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, "KDCSR64", 8) == 0 &&
              fread(head, sizeof(head), 1, f) == 1 && head[0] >= 0 && head[1] >= 0 &&
              head[2] >= 0 && head[2] <= INT32_MAX;
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
        throw std::runtime_error(std::string(path) + ": not a KDCSR64 file");
}

/* COO triples to canonical CSR: rows' columns sorted, duplicates summed. */
static void coo_to_csr(int64_t rows, int64_t cols, const std::vector<int64_t> &r,
                       const std::vector<int64_t> &c, const std::vector<double> &v, Csr &m)
{
    m.rows = rows, m.cols = cols;
    std::vector<int64_t> cnt(rows + 1, 0);
    for (int64_t i : r)
        cnt[i + 1]++;
    for (int64_t i = 0; i < rows; i++)
        cnt[i + 1] += cnt[i];
    std::vector<std::pair<int32_t, double>> e(r.size());
    std::vector<int64_t> pos(cnt.begin(), cnt.end() - 1);
    for (size_t k = 0; k < r.size(); k++)
        e[pos[r[k]]++] = {(int32_t)c[k], v[k]};
    m.ptr.assign(rows + 1, 0);
    m.idx.clear();
    m.val.clear();
    for (int64_t i = 0; i < rows; i++) {
        std::sort(e.begin() + cnt[i], e.begin() + cnt[i + 1],
                  [](const std::pair<int32_t, double> &a, const std::pair<int32_t, double> &b) {
                      return a.first < b.first;
                  });
        for (int64_t k = cnt[i]; k < cnt[i + 1]; k++) {
            if (k > cnt[i] && e[k].first == m.idx.back())
                m.val.back() += e[k].second;
            else
                m.idx.push_back(e[k].first), m.val.push_back(e[k].second);
        }
        m.ptr[i + 1] = (int32_t)m.idx.size();
    }
    m.nnz = (int64_t)m.idx.size();
}

/* Matrix Market coordinate files: real, integer or pattern (values 1); general, symmetric or
 * skew-symmetric (expanded). */
static void read_mtx(const char *path, Csr &m)
{
    FILE *f = fopen(path, "r");
    if (f == nullptr)
        throw std::runtime_error(std::string(path) + ": " + strerror(errno));
    char line[1024], obj[64] = "", fmt[64] = "", field[64] = "", sym[64] = "";
    if (fgets(line, sizeof(line), f) == nullptr ||
        sscanf(line, "%%%%MatrixMarket %63s %63s %63s %63s", obj, fmt, field, sym) != 4 ||
        strcmp(fmt, "coordinate") != 0 || strcmp(field, "complex") == 0) {
        fclose(f);
        throw std::runtime_error(std::string(path) + ": not a real coordinate Matrix Market file");
    }
    for (char *s : {field, sym})
        for (char *c = s; *c; c++)
            *c = (char)tolower(*c);
    bool pattern = strcmp(field, "pattern") == 0;
    int mirror = strcmp(sym, "symmetric") == 0 ? 1 : strcmp(sym, "skew-symmetric") == 0 ? -1 : 0;
    long long rows = -1, cols = -1, n = -1;
    while (fgets(line, sizeof(line), f) != nullptr)
        if (line[0] != '%' && sscanf(line, "%lld %lld %lld", &rows, &cols, &n) == 3)
            break;
    if (rows < 0 || cols < 0 || n < 0) {
        fclose(f);
        throw std::runtime_error(std::string(path) + ": no size line");
    }
    std::vector<int64_t> r, c;
    std::vector<double> v;
    r.reserve(n), c.reserve(n), v.reserve(n);
    for (long long k = 0; k < n; k++) {
        long long i, j;
        double x = 1.0;
        int got = pattern ? fscanf(f, "%lld %lld", &i, &j) : fscanf(f, "%lld %lld %lf", &i, &j, &x);
        if (got != (pattern ? 2 : 3) || i < 1 || i > rows || j < 1 || j > cols) {
            fclose(f);
            throw std::runtime_error(std::string(path) + ": bad entry");
        }
        r.push_back(i - 1), c.push_back(j - 1), v.push_back(x);
        if (mirror != 0 && i != j)
            r.push_back(j - 1), c.push_back(i - 1), v.push_back(mirror * x);
    }
    fclose(f);
    coo_to_csr(rows, cols, r, c, v, m);
}

static void read_matrix(const std::string &path, Csr &m)
{
    if (ends_with(path, ".mtx"))
        read_mtx(path.c_str(), m);
    else
        read_kdcsr(path.c_str(), m);
}

static Csr transpose(const Csr &a)
{
    Csr t;
    t.rows = a.cols, t.cols = a.rows, t.nnz = a.nnz;
    t.ptr.assign(t.rows + 1, 0);
    t.idx.resize(a.nnz);
    t.val.resize(a.nnz);
    for (int64_t k = 0; k < a.nnz; k++)
        t.ptr[a.idx[k] + 1]++;
    for (int64_t i = 0; i < t.rows; i++)
        t.ptr[i + 1] += t.ptr[i];
    std::vector<int32_t> pos(t.ptr.begin(), t.ptr.end() - 1);
    for (int64_t i = 0; i < a.rows; i++) /* rows in order: each row of t comes out sorted */
        for (int32_t k = a.ptr[i]; k < a.ptr[i + 1]; k++) {
            int32_t p = pos[a.idx[k]]++;
            t.idx[p] = (int32_t)i;
            t.val[p] = a.val[k];
        }
    return t;
}

/* Products of A B: the sum over A's entries a_ik of B's row k's length. */
static int64_t products(const Csr &a, const std::vector<int32_t> &b_ptr)
{
    int64_t s = 0;
    for (int64_t k = 0; k < a.nnz; k++)
        s += b_ptr[a.idx[k] + 1] - b_ptr[a.idx[k]];
    return s;
}

static std::vector<double> spmv(const Csr &a, const std::vector<double> &x)
{
    std::vector<double> y(a.rows, 0.0);
    for (int64_t i = 0; i < a.rows; i++) {
        double s = 0;
        for (int32_t k = a.ptr[i]; k < a.ptr[i + 1]; k++)
            s += a.val[k] * x[a.idx[k]];
        y[i] = s;
    }
    return y;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- device side ------------------------------------------------------------------------- */

/* What a product allocates, tracked: the bytes live now and at the peak. */
struct Mem {
    bool pool = false;
    size_t cur = 0, peak = 0;
    std::vector<std::pair<void *, size_t>> live;
    void *get(size_t n)
    {
        void *p = nullptr;
        size_t b = std::max<size_t>(n, 1);
        if (pool)
            CUDA_OK(cudaMallocAsync(&p, b, 0));
        else
            CUDA_OK(cudaMalloc(&p, b));
        live.push_back({p, n});
        cur += n;
        peak = std::max(peak, cur);
        return p;
    }
    void put(void *p)
    {
        for (size_t i = 0; i < live.size(); i++)
            if (live[i].first == p) {
                cur -= live[i].second;
                live.erase(live.begin() + i);
                if (pool)
                    CUDA_OK(cudaFreeAsync(p, 0));
                else
                    CUDA_OK(cudaFree(p));
                return;
            }
    }
    void put_all()
    {
        while (!live.empty())
            put(live.back().first);
    }
};

/* Event pairs around the calls that work on the device. */
struct Kernels {
    std::vector<cudaEvent_t> ev;
    size_t used = 0;
    cudaEvent_t next()
    {
        if (used == ev.size()) {
            cudaEvent_t e;
            CUDA_OK(cudaEventCreate(&e));
            ev.push_back(e);
        }
        return ev[used++];
    }
    void begin()
    {
        CUDA_OK(cudaEventRecord(next(), 0));
    }
    void end()
    {
        CUDA_OK(cudaEventRecord(next(), 0));
    }
    double total_ms()
    {
        double t = 0;
        for (size_t i = 0; i + 1 < used; i += 2) {
            float ms;
            CUDA_OK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
            t += ms;
        }
        return t;
    }
};

struct Dev {
    int64_t rows = 0, cols = 0, nnz = 0;
    int32_t *ptr = nullptr, *idx = nullptr;
    void *val = nullptr;
    cusparseSpMatDescr_t d = nullptr;
};

static Dev upload(const Csr &m, bool f32)
{
    Dev d;
    d.rows = m.rows, d.cols = m.cols, d.nnz = m.nnz;
    const size_t vsz = f32 ? 4 : 8;
    std::vector<unsigned char> hv(std::max<int64_t>(m.nnz, 1) * vsz);
    for (int64_t k = 0; k < m.nnz; k++) {
        float f = (float)m.val[k];
        memcpy(&hv[k * vsz], f32 ? (const void *)&f : (const void *)&m.val[k], vsz);
    }
    CUDA_OK(cudaMalloc(&d.ptr, (m.rows + 1) * 4));
    CUDA_OK(cudaMalloc(&d.idx, std::max<int64_t>(m.nnz, 1) * 4));
    CUDA_OK(cudaMalloc(&d.val, std::max<int64_t>(m.nnz, 1) * vsz));
    CUDA_OK(cudaMemcpy(d.ptr, m.ptr.data(), (m.rows + 1) * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.idx, m.idx.data(), m.nnz * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.val, hv.data(), m.nnz * vsz, cudaMemcpyHostToDevice));
    SPARSE_OK(cusparseCreateCsr(&d.d, m.rows, m.cols, m.nnz, d.ptr, d.idx, d.val,
                                CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                f32 ? CUDA_R_32F : CUDA_R_64F));
    return d;
}

static void release(Dev &d)
{
    if (d.d != nullptr)
        cusparseDestroySpMat(d.d);
    cudaFree(d.ptr);
    cudaFree(d.idx);
    cudaFree(d.val);
    d = Dev();
}

static Csr download(const Dev &d, bool f32)
{
    Csr m;
    m.rows = d.rows, m.cols = d.cols, m.nnz = d.nnz;
    m.ptr.resize(d.rows + 1);
    m.idx.resize(d.nnz);
    m.val.resize(d.nnz);
    CUDA_OK(cudaMemcpy(m.ptr.data(), d.ptr, (d.rows + 1) * 4, cudaMemcpyDeviceToHost));
    if (d.nnz > 0)
        CUDA_OK(cudaMemcpy(m.idx.data(), d.idx, d.nnz * 4, cudaMemcpyDeviceToHost));
    if (f32) {
        std::vector<float> v(d.nnz);
        if (d.nnz > 0)
            CUDA_OK(cudaMemcpy(v.data(), d.val, d.nnz * 4, cudaMemcpyDeviceToHost));
        for (int64_t k = 0; k < d.nnz; k++)
            m.val[k] = v[k];
    } else if (d.nnz > 0) {
        CUDA_OK(cudaMemcpy(m.val.data(), d.val, d.nnz * 8, cudaMemcpyDeviceToHost));
    }
    return m;
}

struct Alg {
    const char *name;
    cusparseSpGEMMAlg_t alg;
};
static const Alg ALGS[] = {{"default", CUSPARSE_SPGEMM_DEFAULT},
                           {"alg1", CUSPARSE_SPGEMM_ALG1},
                           {"alg2", CUSPARSE_SPGEMM_ALG2},
                           {"alg3", CUSPARSE_SPGEMM_ALG3}};

/*
 * C = A B with one algorithm. Every device allocation goes through mem (C's arrays included; the
 * caller frees them). The external buffers are left in *scratch for the caller to free: they
 * must outlive cusparseSpGEMM_copy.
 */
static Dev spgemm(cusparseHandle_t h, const Dev &A, const Dev &B, cusparseSpGEMMAlg_t alg,
                  float chunk, bool f32, Mem &mem, Kernels &kt, std::vector<void *> &scratch)
{
    const cudaDataType vt = f32 ? CUDA_R_32F : CUDA_R_64F;
    const double one64 = 1.0, zero64 = 0.0;
    const float one32 = 1.0f, zero32 = 0.0f;
    const void *alpha = f32 ? (const void *)&one32 : (const void *)&one64;
    const void *beta = f32 ? (const void *)&zero32 : (const void *)&zero64;
    const cusparseOperation_t op = CUSPARSE_OPERATION_NON_TRANSPOSE;
    Dev C;
    C.rows = A.rows, C.cols = B.cols;
    C.ptr = (int32_t *)mem.get((A.rows + 1) * 4); /* ALG2/ALG3 write the row pointer in compute */
    SPARSE_OK(cusparseCreateCsr(&C.d, A.rows, B.cols, 0, C.ptr, nullptr, nullptr,
                                CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                vt));
    cusparseSpGEMMDescr_t g;
    SPARSE_OK(cusparseSpGEMM_createDescr(&g));
    try {
        size_t s1 = 0, s2 = 0, s3 = 0;
        SPARSE_OK(cusparseSpGEMM_workEstimation(h, op, op, alpha, A.d, B.d, beta, C.d, vt, alg, g,
                                                &s1, nullptr));
        void *b1 = mem.get(s1);
        scratch.push_back(b1);
        kt.begin();
        SPARSE_OK(cusparseSpGEMM_workEstimation(h, op, op, alpha, A.d, B.d, beta, C.d, vt, alg, g,
                                                &s1, b1));
        kt.end();
        if (alg == CUSPARSE_SPGEMM_ALG2 || alg == CUSPARSE_SPGEMM_ALG3) {
            SPARSE_OK(cusparseSpGEMM_estimateMemory(h, op, op, alpha, A.d, B.d, beta, C.d, vt, alg,
                                                    g, chunk, &s3, nullptr, nullptr));
            void *b3 = mem.get(s3);
            kt.begin();
            SPARSE_OK(cusparseSpGEMM_estimateMemory(h, op, op, alpha, A.d, B.d, beta, C.d, vt, alg,
                                                    g, chunk, &s3, b3, &s2));
            kt.end();
            mem.put(b3); /* NVIDIA's sample frees it here: compute does not need it */
        } else {
            SPARSE_OK(cusparseSpGEMM_compute(h, op, op, alpha, A.d, B.d, beta, C.d, vt, alg, g, &s2,
                                             nullptr));
        }
        void *b2 = mem.get(s2);
        scratch.push_back(b2);
        kt.begin();
        SPARSE_OK(
            cusparseSpGEMM_compute(h, op, op, alpha, A.d, B.d, beta, C.d, vt, alg, g, &s2, b2));
        kt.end();
        int64_t r, c, nnz;
        SPARSE_OK(cusparseSpMatGetSize(C.d, &r, &c, &nnz));
        if (nnz > INT32_MAX)
            throw std::runtime_error("nnz(C) past 32-bit indices");
        C.nnz = nnz;
        C.idx = (int32_t *)mem.get(nnz * 4);
        C.val = mem.get(nnz * (f32 ? 4 : 8));
        SPARSE_OK(cusparseCsrSetPointers(C.d, C.ptr, C.idx, C.val));
        kt.begin();
        SPARSE_OK(cusparseSpGEMM_copy(h, op, op, alpha, A.d, B.d, beta, C.d, vt, alg, g));
        kt.end();
    } catch (...) {
        cusparseSpGEMM_destroyDescr(g);
        cusparseDestroySpMat(C.d);
        throw;
    }
    SPARSE_OK(cusparseSpGEMM_destroyDescr(g));
    return C;
}

struct Result {
    std::string error;
    double median_ms = 0, min_ms = 0, kernels_ms = 0;
    size_t peak = 0;
    int64_t nnz_c = 0, nnz_ap = -1;
    double checksum = 0, rel_err = 0;
    Csr c;                       /* the last run's C, on the host */
    std::vector<int32_t> ap_ptr; /* rap: A P's row pointer (for the products' count) */
};

/* One algorithm: warmup + runs products; op "rap" multiplies R (A P) with left = R, mid = A,
 * right = P; otherwise left right. */
static Result run_alg(cusparseHandle_t h, const Dev &left, const Dev *mid, const Dev &right,
                      cusparseSpGEMMAlg_t alg, float chunk, bool f32, bool pool, int warmup,
                      int runs)
{
    Result res;
    Mem mem;
    mem.pool = pool;
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    std::vector<double> whole, kern;
    try {
        for (int it = 0; it < warmup + runs; it++) {
            Kernels kt;
            std::vector<void *> scratch;
            mem.peak = mem.cur;
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaEventRecord(e0, 0));
            Dev C, AP;
            if (mid != nullptr) {
                AP = spgemm(h, *mid, right, alg, chunk, f32, mem, kt, scratch);
                for (void *p : scratch)
                    mem.put(p);
                scratch.clear();
                C = spgemm(h, left, AP, alg, chunk, f32, mem, kt, scratch);
            } else {
                C = spgemm(h, left, right, alg, chunk, f32, mem, kt, scratch);
            }
            CUDA_OK(cudaEventRecord(e1, 0));
            CUDA_OK(cudaEventSynchronize(e1));
            CUDA_OK(cudaGetLastError());
            float ms;
            CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= warmup) {
                whole.push_back(ms);
                kern.push_back(kt.total_ms());
            }
            res.peak = std::max(res.peak, mem.peak);
            if (it == warmup + runs - 1) {
                res.c = download(C, f32);
                if (mid != nullptr) {
                    res.nnz_ap = AP.nnz;
                    res.ap_ptr.resize(AP.rows + 1);
                    CUDA_OK(cudaMemcpy(res.ap_ptr.data(), AP.ptr, (AP.rows + 1) * 4,
                                       cudaMemcpyDeviceToHost));
                }
            }
            SPARSE_OK(cusparseDestroySpMat(C.d));
            if (AP.d != nullptr)
                SPARSE_OK(cusparseDestroySpMat(AP.d));
            mem.put_all();
            for (cudaEvent_t e : kt.ev)
                CUDA_OK(cudaEventDestroy(e));
        }
    } catch (const std::exception &e) {
        res.error = e.what();
        mem.put_all();
        cudaError_t sticky = cudaDeviceSynchronize();
        if (sticky != cudaSuccess) { /* the context is gone: nothing after this can run */
            fprintf(stderr, "fatal: %s; then %s\n", e.what(), cudaGetErrorString(sticky));
            exit(1);
        }
        cudaGetLastError();
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (res.error.empty()) {
        res.median_ms = median(whole);
        res.min_ms = *std::min_element(whole.begin(), whole.end());
        res.kernels_ms = median(kern);
        res.nnz_c = res.c.nnz;
    }
    return res;
}

/* C's structure and C x = left (mid (right x)) for a random x. */
static void check(Result &r, const Csr &left, const Csr *mid, const Csr &right)
{
    const Csr &c = r.c;
    for (int64_t i = 0; i < c.rows && r.error.empty(); i++) {
        if (c.ptr[i] > c.ptr[i + 1])
            r.error = "C's row pointer decreases";
        for (int32_t k = c.ptr[i]; k < c.ptr[i + 1] && r.error.empty(); k++)
            if (c.idx[k] < 0 || c.idx[k] >= c.cols)
                r.error = "C's column index out of range";
    }
    if (!r.error.empty() || c.ptr[0] != 0 || c.ptr[c.rows] != c.nnz) {
        if (r.error.empty())
            r.error = "C's row pointer does not span nnz";
        return;
    }
    std::vector<double> x(right.cols);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (auto &v : x) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        v = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    }
    std::vector<double> ref = spmv(right, x);
    if (mid != nullptr)
        ref = spmv(*mid, ref);
    ref = spmv(left, ref);
    std::vector<double> y = spmv(c, x);
    double d = 0, sc = 1e-300;
    for (int64_t i = 0; i < c.rows; i++) {
        d = std::isfinite(y[i]) ? std::max(d, std::fabs(y[i] - ref[i])) : INFINITY;
        sc = std::max(sc, std::fabs(ref[i]));
    }
    r.rel_err = d / sc;
    r.checksum = 0;
    for (double v : c.val)
        r.checksum += v;
}

static std::string json_str(const std::string &s)
{
    std::string o = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\')
            o += '\\', o += ch;
        else if ((unsigned char)ch < 0x20)
            o += ' ';
        else
            o += ch;
    }
    return o + "\"";
}

/* A JSON number, null when not finite. */
static std::string jn(double x, const char *fmt = "%.6g")
{
    if (!std::isfinite(x))
        return "null";
    char b[64];
    snprintf(b, sizeof(b), fmt, x);
    return b;
}

static std::string base_name(const std::string &path)
{
    size_t sl = path.find_last_of('/');
    std::string b = sl == std::string::npos ? path : path.substr(sl + 1);
    for (const char *ext : {".csr", ".mtx"})
        if (ends_with(b, ext))
            b.resize(b.size() - strlen(ext));
    return b;
}

static std::string p_beside(const std::string &path)
{
    std::string stem = path;
    for (const char *ext : {".csr", ".mtx"})
        if (ends_with(stem, ext))
            stem.resize(stem.size() - strlen(ext));
    for (const char *ext : {".P.csr", ".P.mtx"}) {
        FILE *f = fopen((stem + ext).c_str(), "rb");
        if (f != nullptr) {
            fclose(f);
            return stem + ext;
        }
    }
    return "";
}

int main(int argc, char **argv)
{
    int runs = 20, warmup = 3;
    bool f32 = false, pool = false;
    float chunk = 0.2f;
    std::string op = "aa", algs = "default,alg1,alg2,alg3", pfile;
    std::vector<std::string> files;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        bool more = i + 1 < argc;
        if (a == "--runs" && more)
            runs = atoi(argv[++i]);
        else if (a == "--warmup" && more)
            warmup = atoi(argv[++i]);
        else if (a == "--dtype" && more)
            f32 = strcmp(argv[++i], "float32") == 0;
        else if (a == "--float32")
            f32 = true;
        else if (a == "--op" && more)
            op = argv[++i];
        else if (a == "--algs" && more)
            algs = argv[++i];
        else if (a == "--chunk" && more)
            chunk = (float)atof(argv[++i]);
        else if (a == "--pool")
            pool = true;
        else if (a == "--p" && more)
            pfile = argv[++i];
        else
            files.push_back(a);
    }
    if (files.empty() || runs < 1 || warmup < 0 || (op != "aa" && op != "ata" && op != "rap")) {
        fprintf(stderr,
                "usage: cusparse_spgemm [--op aa|ata|rap] [--dtype float64|float32] [--runs N]\n"
                "         [--warmup N] [--algs default,alg1,alg2,alg3] [--chunk F] [--pool]\n"
                "         [--p FILE] FILE.csr|FILE.mtx...\n");
        return 2;
    }
    std::vector<Alg> chosen;
    for (const Alg &a : ALGS)
        if (("," + algs + ",").find(std::string(",") + a.name + ",") != std::string::npos)
            chosen.push_back(a);
    int rc = 0;
    try {
        cudaDeviceProp prop;
        CUDA_OK(cudaGetDeviceProperties(&prop, 0));
        int driver = 0, runtime = 0, sparse_version = 0;
        CUDA_OK(cudaDriverGetVersion(&driver));
        CUDA_OK(cudaRuntimeGetVersion(&runtime));
        if (pool) { /* keep freed memory in the pool, as CuPy's does */
            cudaMemPool_t mp;
            CUDA_OK(cudaDeviceGetDefaultMemPool(&mp, 0));
            uint64_t keep = UINT64_MAX;
            CUDA_OK(cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &keep));
        }
        cusparseHandle_t handle;
        SPARSE_OK(cusparseCreate(&handle));
        SPARSE_OK(cusparseGetVersion(handle, &sparse_version));
        for (const std::string &path : files) {
            std::string name = base_name(path);
            try {
                Csr A, P, L, R; /* product: L R, or for rap: L (A R) with L = P^T, R = P */
                read_matrix(path, A);
                const Csr *mid = nullptr;
                if (op == "aa") {
                    if (A.rows != A.cols)
                        throw std::runtime_error("A A needs a square A");
                    L = A, R = A;
                } else if (op == "ata") {
                    L = transpose(A), R = A;
                } else {
                    std::string pp = pfile.empty() ? p_beside(path) : pfile;
                    if (pp.empty())
                        throw std::runtime_error("rap: no --p and no NAME.P.csr/.P.mtx beside " +
                                                 path);
                    read_matrix(pp, P);
                    if (P.rows != A.cols || A.rows != A.cols)
                        throw std::runtime_error("rap: P's rows must match square A's columns");
                    L = transpose(P), R = P, mid = &A;
                }
                if (f32) /* the host's reference multiplies the values the device gets */
                    for (Csr *m : {&A, &L, &R})
                        for (double &v : m->val)
                            v = (double)(float)v;
                Dev dL = upload(L, f32), dR = upload(R, f32), dA;
                if (mid != nullptr)
                    dA = upload(A, f32);
                std::vector<Result> res;
                for (const Alg &a : chosen) {
                    res.push_back(run_alg(handle, dL, mid ? &dA : nullptr, dR, a.alg, chunk, f32,
                                          pool, warmup, runs));
                    Result &r = res.back();
                    if (r.error.empty())
                        check(r, L, mid, R);
                    if (r.error.empty() && !(r.rel_err <= (f32 ? 1e-3 : 1e-8))) {
                        char b[96];
                        snprintf(b, sizeof(b), "wrong product: C x off by %.3g (relative)",
                                 r.rel_err);
                        r.error = b;
                    }
                }
                release(dL);
                release(dR);
                release(dA);
                int64_t prods = mid ? products(A, R.ptr) : products(L, R.ptr);
                int best = -1;
                for (size_t i = 0; i < res.size(); i++)
                    if (res[i].error.empty() &&
                        (best < 0 || res[i].median_ms < res[best].median_ms))
                        best = (int)i;
                if (mid != nullptr && best >= 0)
                    prods += products(L, res[best].ap_ptr);
                printf("{\"matrix\": %s, \"op\": \"%s\", \"dtype\": \"%s\", \"rows\": %lld, "
                       "\"cols\": %lld, \"nnz_a\": %lld",
                       json_str(name).c_str(), op.c_str(), f32 ? "float32" : "float64",
                       (long long)A.rows, (long long)A.cols, (long long)A.nnz);
                if (mid != nullptr)
                    printf(", \"p_cols\": %lld, \"nnz_p\": %lld", (long long)P.cols,
                           (long long)P.nnz);
                printf(", \"products\": %lld", (long long)prods);
                if (best >= 0) {
                    const Result &b = res[best];
                    printf(", \"alg\": \"%s\", \"nnz_c\": %lld, \"median_ms\": %.6g, "
                           "\"min_ms\": %.6g, \"kernels_ms\": %.6g, \"peak_bytes\": %zu, "
                           "\"checksum\": %s, \"rel_err\": %s",
                           chosen[best].name, (long long)b.nnz_c, b.median_ms, b.min_ms,
                           b.kernels_ms, b.peak, jn(b.checksum, "%.17g").c_str(),
                           jn(b.rel_err, "%.3g").c_str());
                    if (mid != nullptr)
                        printf(", \"nnz_ap\": %lld", (long long)b.nnz_ap);
                } else {
                    printf(", \"error\": \"every algorithm failed\"");
                    rc = 1;
                }
                printf(", \"algs\": {");
                for (size_t i = 0; i < res.size(); i++) {
                    const Result &r = res[i];
                    printf("%s\"%s\": {", i ? ", " : "", chosen[i].name);
                    if (!r.error.empty())
                        printf("\"error\": %s}", json_str(r.error).c_str());
                    else
                        printf("\"median_ms\": %.6g, \"min_ms\": %.6g, \"kernels_ms\": %.6g, "
                               "\"peak_bytes\": %zu, \"nnz_c\": %lld, \"checksum\": %s, "
                               "\"rel_err\": %s}",
                               r.median_ms, r.min_ms, r.kernels_ms, r.peak, (long long)r.nnz_c,
                               jn(r.checksum, "%.17g").c_str(), jn(r.rel_err, "%.3g").c_str());
                }
                printf("}, \"runs\": %d, \"warmup\": %d, \"alloc\": \"%s\"", runs, warmup,
                       pool ? "cudaMallocAsync pool" : "cudaMalloc");
                if (op == "ata")
                    printf(", \"note\": \"A^T made on the host: cuSPARSE SpGEMM takes only "
                           "non-transposed operands\"");
                printf(", \"device\": %s, \"cuda_driver\": %d, \"cuda_runtime\": %d, "
                       "\"cusparse\": %d}\n",
                       json_str(prop.name).c_str(), driver, runtime, sparse_version);
                fflush(stdout);
            } catch (const std::exception &e) {
                printf("{\"matrix\": %s, \"op\": \"%s\", \"dtype\": \"%s\", \"error\": %s}\n",
                       json_str(name).c_str(), op.c_str(), f32 ? "float32" : "float64",
                       json_str(e.what()).c_str());
                fflush(stdout);
                rc = 1;
                if (cudaDeviceSynchronize() != cudaSuccess)
                    return 1;
            }
        }
        cusparseDestroy(handle);
    } catch (const std::exception &e) {
        fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return rc;
}
