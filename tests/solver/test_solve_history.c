/*
 * The solver's behaviour, pinned: every case below (CG, Jacobi-PCG and SD; float64 and float32;
 * two and three passes, the SpMV fused and not; one and three right-hand sides; real Matrix Market
 * matrices and generated ones, a breakdown and a max_iterations among them) is solved and its
 * status, iteration count, restarts and residual history at every check are compared with
 * tests/data/solve_histories.txt, recorded from the solver before methods and preconditioners
 * became tables. A refactoring of the solver must change none of them. Inputs are deterministic
 * (no seed): the record is of this exact problem set.
 *
 * KD_RECORD_HISTORY=FILE writes the record instead of comparing (only when the solver's
 * arithmetic is meant to change, and the change is explained in the commit). The record is of
 * PoCL on the CI machine's CPU; KD_HISTORY_REFERENCE=FILE compares with another record instead,
 * such as one that the solver before the change wrote on a GPU (bench/device/seams.sh).
 */
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/methods/method.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;
static FILE *record;
static char *reference;
static size_t reference_len;

/* A deterministic right-hand side: no generator state, so the record is of fixed inputs. */
static void fill_rhs(void *b, kd_dtype_t dtype, int64_t n, int64_t nrhs)
{
    for (int64_t j = 0; j < nrhs; j++)
        for (int64_t i = 0; i < n; i++)
            kd_store_real(b, dtype, (size_t)(j * n + i),
                          sin(0.37 * (double)(i + 1) + 1.9 * (double)j) + 0.25);
}

/* A 2-D Laplacian with row i scaled by 1 + 50 (i mod 7) / 6 on both sides: Jacobi pays off. */
static kd_csr_t *scaled_laplacian(int64_t nx)
{
    kd_csr_t *m = kd_test_laplacian_2d(nx, nx);
    double *v = (double *)m->values;
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t j = m->indptr[r]; j < m->indptr[r + 1]; j++) {
            double sr = 1.0 + 50.0 * (double)(r % 7) / 6.0;
            double sc = 1.0 + 50.0 * (double)(m->indices[j] % 7) / 6.0;
            v[j] *= sqrt(sr * sc);
        }
    return m;
}

/* An indefinite matrix: the Laplacian shifted by -6 (CG breaks down). */
static kd_csr_t *indefinite(int64_t nx)
{
    kd_csr_t *m = kd_test_laplacian_2d(nx, nx);
    double *v = (double *)m->values;
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t j = m->indptr[r]; j < m->indptr[r + 1]; j++)
            if (m->indices[j] == r)
                v[j] -= 6.0;
    return m;
}

typedef struct history_case {
    const char *matrix;
    const char *method; /* cg | pcg | sd */
    int passes;         /* 0, 1, 2, 3 */
    int fusion;         /* KD_SOLVE_FUSION_ON / OFF */
    int64_t nrhs;
    int64_t maxiter; /* 0: automatic */
    double rtol;
} history_case_t;

static kd_csr_t *make_matrix(const char *name)
{
    if (strcmp(name, "lap2d_24") == 0)
        return kd_test_laplacian_2d(24, 24);
    if (strcmp(name, "scaled_lap_20") == 0)
        return scaled_laplacian(20);
    if (strcmp(name, "indefinite_16") == 0)
        return indefinite(16);
    if (strcmp(name, "494_bus") == 0)
        return kd_test_load_mtx("494_bus.mtx", 0.0);
    if (strcmp(name, "dwt_878+4I") == 0)
        return kd_test_load_mtx("dwt_878.mtx", 4.0);
    if (strcmp(name, "can_24+8I") == 0)
        return kd_test_load_mtx("can___24.mtx", 8.0);
    fprintf(stderr, "unknown matrix %s\n", name);
    exit(2);
}

static void set_method(kd_solve_params_t *prm, const char *method)
{
    kd_err_t err = {0};
    REQUIRE(kd_method_choose(method, NULL, &prm->method, &prm->precond, &err) == KD_OK);
}

/* The reference line for `key`, or NULL. */
static const char *find_reference(const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = reference; p != NULL && *p != '\0';) {
        const char *eol = strchr(p, '\n');
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
            return p + klen + 1;
        p = eol != NULL ? eol + 1 : NULL;
    }
    return NULL;
}

static int close_enough(double got, double want, kd_dtype_t dtype)
{
    if (got == want || (isnan(got) && isnan(want)))
        return 1;
    /* Bit for bit on the machine that recorded; a little room for another CPU's rounding. */
    double tol = dtype == KD_DTYPE_F64 ? 1e-9 : 1e-4;
    return fabs(got - want) <= tol * fmax(fabs(want), 1e-300);
}

static void compare(const char *key, const kd_solve_result_t *res, kd_dtype_t dtype)
{
    const char *line = find_reference(key);
    CHECK_MSG(line != NULL, "%s: not in the record", key);
    if (line == NULL)
        return;
    char status[32];
    long long iterations, restarts, len;
    int used = 0;
    REQUIRE(sscanf(line, "%31s %lld %lld %lld%n", status, &iterations, &restarts, &len, &used) ==
            4);
    CHECK_MSG(strcmp(status, kd_solve_status_name(res->status)) == 0, "%s: status %s, was %s", key,
              kd_solve_status_name(res->status), status);
    CHECK_MSG(res->iterations == iterations, "%s: %lld iterations, was %lld", key,
              (long long)res->iterations, iterations);
    CHECK_MSG(res->restarts == restarts, "%s: %lld restarts, was %lld", key,
              (long long)res->restarts, restarts);
    CHECK_MSG(res->history_len == len, "%s: %lld history entries, was %lld", key,
              (long long)res->history_len, len);
    const char *p = line + used;
    int shown = 0;
    for (int64_t i = 0; i < len && i < res->history_len; i++) {
        char *end;
        double want = strtod(p, &end);
        p = end;
        if (!close_enough(res->history[i], want, dtype) && shown++ < 3)
            CHECK_MSG(0, "%s: history[%lld] = %.17g, was %.17g", key, (long long)i, res->history[i],
                      want);
    }
}

static void run_case(const history_case_t *hc, kd_dtype_t dtype)
{
    kd_err_t err = {0};
    kd_csr_t *csr64 = make_matrix(hc->matrix), *csr = NULL;
    kd_matrix_t *A = NULL;
    REQUIRE(kd_csr_convert(csr64, dtype, &csr, &err) == KD_OK);
    REQUIRE(kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, &A, &err) == KD_OK);
    const int64_t n = csr->rows;
    void *b = malloc((size_t)(n * hc->nrhs) * 8 + 8);
    void *x = calloc((size_t)(n * hc->nrhs) + 1, 8);
    fill_rhs(b, dtype, n, hc->nrhs);
    kd_solve_params_t prm;
    kd_solve_params_default(&prm);
    set_method(&prm, hc->method);
    prm.rtol = dtype == KD_DTYPE_F32 && hc->rtol < 1e-5 ? 1e-5 : hc->rtol;
    if (hc->maxiter > 0)
        prm.maxiter = hc->maxiter;
    prm.passes = hc->passes;
    prm.spmv_fusion = hc->fusion;
    prm.check_every = 1;      /* every iteration in the history */
    prm.reduction_groups = 3; /* the same sums on any number of compute units */
    prm.record_history = 1;
    kd_solve_result_t res[3];
    int rc = kd_solve(ocl, A, hc->nrhs, b, NULL, x, &prm, res, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", hc->matrix, err.message);
    for (int64_t j = 0; j < hc->nrhs; j++) {
        char key[160];
        snprintf(key, sizeof(key), "%s/%s/passes%d/%s/%s/rhs%lld", hc->matrix, hc->method,
                 hc->passes, hc->fusion == KD_SOLVE_FUSION_ON ? "fused" : "apart",
                 kd_dtype_name(dtype), (long long)j);
        fprintf(stderr, "  %-44s %s %lld its\n", key, kd_solve_status_name(res[j].status),
                (long long)res[j].iterations);
        if (record != NULL) {
            fprintf(record, "%s %s %lld %lld %lld", key, kd_solve_status_name(res[j].status),
                    (long long)res[j].iterations, (long long)res[j].restarts,
                    (long long)res[j].history_len);
            for (int64_t i = 0; i < res[j].history_len; i++)
                fprintf(record, " %.17g", res[j].history[i]);
            fprintf(record, "\n");
        } else {
            compare(key, &res[j], dtype);
        }
        kd_solve_result_free(&res[j]);
    }
    free(b);
    free(x);
    kd_matrix_free(A);
    kd_csr_free(csr);
    kd_csr_free(csr64);
}

static const history_case_t cases[] = {
    {"lap2d_24", "cg", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"lap2d_24", "cg", 0, KD_SOLVE_FUSION_ON, 3, 0, 1e-8},
    {"lap2d_24", "cg", 3, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"lap2d_24", "cg", 1, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"lap2d_24", "sd", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-6},
    {"lap2d_24", "sd", 0, KD_SOLVE_FUSION_ON, 3, 0, 1e-6},
    {"scaled_lap_20", "pcg", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"scaled_lap_20", "pcg", 0, KD_SOLVE_FUSION_ON, 3, 0, 1e-8},
    {"scaled_lap_20", "pcg", 3, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"scaled_lap_20", "cg", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"494_bus", "cg", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"494_bus", "pcg", 0, KD_SOLVE_FUSION_ON, 1, 0, 1e-8},
    {"494_bus", "pcg", 3, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"494_bus", "sd", 0, KD_SOLVE_FUSION_OFF, 1, 300, 1e-8},
    {"dwt_878+4I", "cg", 0, KD_SOLVE_FUSION_ON, 3, 0, 1e-8},
    {"dwt_878+4I", "pcg", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"can_24+8I", "cg", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-10},
    {"can_24+8I", "sd", 3, KD_SOLVE_FUSION_OFF, 1, 0, 1e-10},
    {"indefinite_16", "cg", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
    {"indefinite_16", "sd", 0, KD_SOLVE_FUSION_OFF, 1, 0, 1e-8},
};

int main(void)
{
    const char *record_path = getenv("KD_RECORD_HISTORY");
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    if (record_path != NULL && record_path[0] != '\0') {
        record = fopen(record_path, "w");
        if (record == NULL) {
            perror(record_path);
            return 1;
        }
    } else {
        kd_err_t err = {0};
        const char *path = getenv("KD_HISTORY_REFERENCE");
        if (path == NULL || path[0] == '\0')
            path = KD_SOURCE_DIR "/tests/data/solve_histories.txt";
        int rc = kd_mtx_file_read(path, (size_t)1 << 28, &reference, &reference_len, &err);
        if (rc != KD_OK) {
            fprintf(stderr, "the record: %s\n", err.message);
            return 1;
        }
    }
    kd_dtype_t dtypes[2];
    int ndt = kd_test_dtypes(ocl, dtypes);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int t = 0; t < ndt; t++)
            run_case(&cases[i], dtypes[t]);
    if (record != NULL)
        fclose(record);
    free(reference);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
