/*
 * The method and preconditioner tables (solver/methods/method.h, solver/precond/precond.h), and
 * cg1, the method added through them. The tables: every row complete and found by its name,
 * aliases, the errors kd_method_choose gives (listing the known names), method "auto"
 * (kd_method_auto: cg on an SPD-looking matrix, minres on a symmetric one, gmres otherwise, passing
 * to the next this build has and that takes the preconditioner), every method x preconditioner it
 * takes runs and makes exactly the reductions per iteration it declares. The preconditioner lives
 * with the matrix: set up once, counted in its device bytes. cg1 (Chronopoulos-Gear CG): converges
 * on generated and real SPD matrices to the tolerance by the CPU's measure of ||b - A x||, in the
 * iterations CG takes (the same Krylov space), with and without Jacobi, in float64 and float32;
 * fused and separate SpMV bit for bit; several right-hand sides each as alone; the check schedule
 * changes nothing; an indefinite matrix is a breakdown.
 */
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;

static void test_tables(void)
{
    for (size_t i = 0; i < kd_method_count; i++) {
        const kd_method_ops_t *m = kd_method_table[i];
        CHECK(m->name != NULL && m->summary != NULL && m->setup != NULL && m->iterate != NULL &&
              m->restart != NULL && m->check != NULL);
        CHECK(kd_method_find(m->name) == m);
        CHECK(m->precond_forms != 0 && m->work_vectors >= 0 &&
              m->work_vectors <= KD_METHOD_WORK_MAX && m->reductions >= 1);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(kd_method_table[j]->name, m->name) != 0);
    }
    CHECK(kd_method_table[0] == &kd_method_cg);
    CHECK(kd_method_find("cg1") == &kd_method_cg1);
    CHECK(kd_method_find("pcg") == NULL); /* an alias, not a method */
    for (size_t i = 0; i < kd_precond_count; i++) {
        const kd_precond_ops_t *p = kd_precond_table[i];
        CHECK(kd_precond_find(p->name) == p);
        CHECK(p->forms != 0);
        CHECK((p->forms & KD_PRECOND_OPERATOR) == 0 || p->apply != NULL);
    }
    CHECK(kd_precond_table[0] == &kd_precond_none);

    const kd_method_ops_t *m;
    const kd_precond_ops_t *p;
    kd_err_t err = {0};
    CHECK(kd_method_choose(NULL, NULL, &m, &p, &err) == KD_OK && m == &kd_method_cg &&
          p == &kd_precond_none);
    CHECK(kd_method_choose("", "", &m, &p, &err) == KD_OK && m == &kd_method_cg);
    CHECK(kd_method_choose("pcg", NULL, &m, &p, &err) == KD_OK && m == &kd_method_cg &&
          p == &kd_precond_jacobi);
    CHECK(kd_method_choose("pcg", "none", &m, &p, &err) == KD_OK && m == &kd_method_cg &&
          p == &kd_precond_none);
    CHECK(kd_method_choose("cg", "jacobi", &m, &p, &err) == KD_OK && p == &kd_precond_jacobi);
    CHECK(kd_method_choose("cg1", "jacobi", &m, &p, &err) == KD_OK && m == &kd_method_cg1);

    CHECK_EQ_INT(kd_method_choose("no-such", NULL, &m, &p, &err), KD_EBADREQ);
    CHECK(m == NULL && p == NULL);
    CHECK_STR_CONTAINS(err.message, "unknown method 'no-such'");
    for (size_t i = 0; i < kd_method_count; i++)
        CHECK_STR_CONTAINS(err.message, kd_method_table[i]->name);
    CHECK_STR_CONTAINS(err.message, "pcg = cg + jacobi");
    CHECK_EQ_INT(kd_method_choose("cg", "ilut", &m, &p, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "unknown preconditioner 'ilut'");
    CHECK_STR_CONTAINS(err.message, "none, jacobi");
    CHECK_EQ_INT(kd_method_choose("sd", "jacobi", &m, &p, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "method sd takes no preconditioner jacobi");
    CHECK_EQ_INT(kd_method_choose("pcg", "ilu0", &m, &p, &err), KD_EBADREQ);
}

/* The first of `names` this build has that takes p, or NULL. */
static const kd_method_ops_t *first_present(const char *const *names, const kd_precond_ops_t *p)
{
    for (; *names != NULL; names++) {
        const kd_method_ops_t *m = kd_method_find(*names);
        if (m != NULL && (m->precond_forms & p->forms) != 0 &&
            (!kd_method_needs_symmetry(m) || p->symmetric))
            return m;
    }
    return NULL;
}

static kd_matrix_t *upload(kd_csr_t *csr)
{
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    if (kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, &A, &err) != KD_OK) {
        fprintf(stderr, "upload: %s\n", err.message);
        exit(2);
    }
    kd_csr_free(csr);
    return A;
}

/* Method "auto": cg for an SPD-looking matrix, minres for a symmetric one that is not, gmres
 * otherwise, each passing to the next this build has (and takes the preconditioner); never a
 * method whose needs the matrix lacks. */
static void test_auto(void)
{
    static const kd_precond_ops_t skew = {
        .name = "skew", .summary = "a nonsymmetric diagonal M", .forms = KD_PRECOND_DIAGONAL};
    static const kd_precond_ops_t alien = {.name = "alien", .summary = "no form", .forms = 64};
    const kd_method_ops_t *m;
    const kd_precond_ops_t *p;
    kd_err_t err = {0};

    kd_matrix_t *spd = upload(kd_test_laplacian_2d(6, 5));
    CHECK(spd->scan.symmetric && spd->scan.looks_spd);
    for (size_t j = 0; j < kd_precond_count; j++) {
        /* a symmetric M: cg; another (ilu0): a method that needs no symmetry of M */
        CHECK_MSG(kd_method_auto(spd, kd_precond_table[j], &m, &err) == KD_OK, "%s", err.message);
        CHECK_MSG(kd_precond_table[j]->symmetric ? m == &kd_method_cg
                                                 : m != NULL && !kd_method_needs_symmetry(m),
                  "auto with %s on an SPD matrix: %s", kd_precond_table[j]->name,
                  m != NULL ? m->name : "none");
    }
    CHECK(kd_method_choose_for(spd, "auto", "jacobi", &m, &p, &err) == KD_OK &&
          m == &kd_method_cg && p == &kd_precond_jacobi);
    CHECK(kd_method_choose_for(spd, "auto", NULL, &m, &p, &err) == KD_OK && m == &kd_method_cg &&
          p == &kd_precond_none);
    CHECK(kd_method_choose_for(spd, "cg1", "jacobi", &m, &p, &err) == KD_OK &&
          m == &kd_method_cg1); /* any other name: kd_method_choose */
    CHECK_EQ_INT(kd_method_choose_for(spd, "auto", "ilu9", &m, &p, &err), KD_EBADREQ);
    CHECK(m == NULL && p == NULL);
    CHECK_STR_CONTAINS(err.message, "unknown preconditioner 'ilu9'");
    /* a preconditioner CG cannot take: skipped to a method that can, or a clear refusal */
    static const char *const after_cg[] = {"minres", "gmres", "bicgstab", NULL};
    const kd_method_ops_t *want = first_present(after_cg, &skew);
    int rc = kd_method_auto(spd, &skew, &m, &err);
    if (want != NULL)
        CHECK(rc == KD_OK && m == want);
    else {
        CHECK_EQ_INT(rc, KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "with preconditioner skew");
    }
    CHECK_EQ_INT(kd_method_auto(spd, &alien, &m, &err), KD_EBADREQ);
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(err.message, "method auto: no method of this server");
    CHECK_STR_CONTAINS(err.message, "preconditioner alien");

    /* symmetric with a negative diagonal entry: not SPD-looking */
    kd_csr_t *ind = kd_test_laplacian_2d(6, 5);
    ((double *)ind->values)[0] = -4.0; /* row 0's first entry is its diagonal */
    kd_matrix_t *sym = upload(ind);
    CHECK(sym->scan.symmetric && !sym->scan.looks_spd);
    want = first_present(after_cg, &kd_precond_none);
    rc = kd_method_auto(sym, &kd_precond_none, &m, &err);
    if (want != NULL)
        CHECK_MSG(rc == KD_OK && m == want, "auto on a symmetric indefinite matrix: %s",
                  rc == KD_OK ? m->name : err.message);
    else {
        CHECK_EQ_INT(rc, KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "a symmetric indefinite-looking matrix");
    }

    /* nonsymmetric */
    kd_csr_t *ns = kd_test_laplacian_2d(6, 5);
    ((double *)ns->values)[1] = -2.0;
    kd_matrix_t *gen = upload(ns);
    CHECK(!gen->scan.symmetric && !gen->scan.looks_spd);
    static const char *const general[] = {"gmres", "bicgstab", NULL};
    want = first_present(general, &kd_precond_none);
    rc = kd_method_auto(gen, &kd_precond_none, &m, &err);
    if (want != NULL)
        CHECK(rc == KD_OK && m == want);
    else {
        CHECK_EQ_INT(rc, KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "a nonsymmetric matrix");
    }
    /* whatever the preconditioner, never a method the matrix does not suit */
    const kd_matrix_t *mats[] = {spd, sym, gen};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < kd_precond_count; j++) {
            if (kd_method_auto(mats[i], kd_precond_table[j], &m, &err) != KD_OK) {
                CHECK(m == NULL);
                continue;
            }
            CHECK(kd_method_check_matrix(m, mats[i], &err) == KD_OK);
            CHECK(!(m->needs & KD_METHOD_NEEDS_SPD) || mats[i]->scan.looks_spd);
            CHECK((m->precond_forms & kd_precond_table[j]->forms) != 0);
        }
    kd_matrix_free(spd);
    kd_matrix_free(sym);
    kd_matrix_free(gen);
}

typedef kd_test_problem_t problem_t;

static void problem_make(problem_t *p, kd_csr_t *csr64, kd_dtype_t dtype, int64_t nrhs)
{
    REQUIRE(kd_test_problem_make(ocl, p, csr64, dtype, nrhs) == 0);
}

static double true_relres(const problem_t *p, const void *x, int64_t j)
{
    return kd_test_true_relres(p, x, j);
}

static kd_solve_params_t params(const char *method, const char *precond, double rtol)
{
    kd_solve_params_t prm;
    kd_err_t err = {0};
    kd_solve_params_default(&prm);
    if (kd_method_choose(method, precond, &prm.method, &prm.precond, &err) != KD_OK) {
        fprintf(stderr, "%s\n", err.message);
        exit(2);
    }
    prm.rtol = rtol;
    return prm;
}

/* Every method with every preconditioner it takes: exactly its declared reductions, exactly
 * maxiter iterations when the tolerance cannot be met, fused or not. gmres declares its two an
 * iteration; the one more at each natural cycle end is not reached here (12 iterations inside
 * the default GMRES(30)), test_gmres counts it (26 in 12 iterations of GMRES(5)). */
static void test_declared_reductions(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++)
        for (size_t i = 0; i < kd_method_count; i++)
            for (size_t j = 0; j < kd_precond_count; j++)
                for (int fuse = 0; fuse < 2; fuse++) {
                    const kd_method_ops_t *m = kd_method_table[i];
                    const kd_precond_ops_t *pc = kd_precond_table[j];
                    if ((m->precond_forms & pc->forms) == 0 ||
                        (kd_method_needs_symmetry(m) && !pc->symmetric))
                        continue;
                    problem_t p;
                    problem_make(&p, kd_test_laplacian_2d(30, 30), dt[d], 2);
                    kd_solve_params_t prm = params(m->name, pc->name, 0.0);
                    prm.csr = p.csr; /* for a preconditioner that needs it (amg) */
                    prm.maxiter = 12;
                    prm.check_every = 4;
                    prm.spmv_fusion = fuse ? KD_SOLVE_FUSION_ON : KD_SOLVE_FUSION_OFF;
                    kd_solve_result_t res[2];
                    kd_err_t err = {0};
                    CHECK_MSG(kd_solve(ocl, p.A, 2, p.b, NULL, p.x, &prm, res, &err) == KD_OK, "%s",
                              err.message);
                    CHECK_MSG(res[0].reductions_per_iteration == (double)m->reductions,
                              "%s + %s: %.2f reductions an iteration, declares %d", m->name,
                              pc->name, res[0].reductions_per_iteration, m->reductions);
                    for (int c = 0; c < 2; c++) {
                        CHECK_EQ_INT(res[c].status, KD_SOLVE_MAX_ITERATIONS);
                        CHECK_EQ_INT(res[c].iterations, 12);
                        CHECK_EQ_INT(res[c].maxiter, 12);
                        CHECK(res[c].spmv_fused == fuse);
                        kd_solve_result_free(&res[c]);
                    }
                    kd_test_problem_free(&p);
                }
}

/* Jacobi is set up once per matrix and counted in its device bytes. */
static void test_precond_lives_with_matrix(void)
{
    problem_t p;
    problem_make(&p, kd_test_laplacian_2d(20, 20), KD_DTYPE_F32, 1);
    const size_t before = p.A->device_bytes;
    kd_solve_params_t prm = params("pcg", NULL, 1e-5);
    kd_solve_result_t res;
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK(p.A->device_bytes == before + (size_t)p.n * 4);
    CHECK(p.A->preconds != NULL && p.A->preconds->ops == &kd_precond_jacobi);
    CHECK(p.A->preconds->next == NULL);
    const kd_precond_t *first = p.A->preconds;
    kd_solve_result_free(&res);
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK(p.A->preconds == first && p.A->device_bytes == before + (size_t)p.n * 4);
    kd_solve_result_free(&res);
    prm = params("cg", NULL, 1e-5);
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK(p.A->device_bytes == before + (size_t)p.n * 4);
    kd_solve_result_free(&res);
    kd_precond_release_all(p.A);
    CHECK(p.A->device_bytes == before && p.A->preconds == NULL);
    kd_test_problem_free(&p);
}

/* cg1 against cg on the same problem: converged by the CPU's measure, the same iterations (up
 * to `extra`, a fraction: on ill-conditioned matrices the merged recurrence loses a little more
 * to rounding than CG's and takes a few percent more iterations). */
static void cg1_matches_cg(const char *name, kd_csr_t *csr64, kd_dtype_t dtype, const char *precond,
                           double rtol, double extra)
{
    problem_t p;
    problem_make(&p, csr64, dtype, 1);
    kd_solve_result_t r1, rc;
    kd_err_t err = {0};
    kd_solve_params_t prm = params("cg", precond, rtol);
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &rc, &err) == KD_OK);
    prm = params("cg1", precond, rtol);
    prm.record_history = 1;
    CHECK_MSG(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &r1, &err) == KD_OK, "%s", err.message);
    double truth = true_relres(&p, p.x, 0);
    fprintf(stderr, "  %-22s %s %-6s cg1 %s %lld its (%lld restarts, true %.3g), cg %lld its\n",
            name, kd_dtype_name(dtype), precond, kd_solve_status_name(r1.status),
            (long long)r1.iterations, (long long)r1.restarts, truth, (long long)rc.iterations);
    CHECK_MSG(r1.status == KD_SOLVE_CONVERGED, "%s: %s", name, r1.message);
    CHECK_MSG(truth <= rtol * (dtype == KD_DTYPE_F32 ? 1.05 : 1.0 + 1e-6), "%s: true %.3g", name,
              truth);
    const int64_t slack =
        (dtype == KD_DTYPE_F64 ? 2 + rc.iterations / 50 : 5 + rc.iterations / 10) +
        (int64_t)(extra * (double)rc.iterations);
    CHECK_MSG(llabs(r1.iterations - rc.iterations) <= slack, "%s: cg1 %lld vs cg %lld", name,
              (long long)r1.iterations, (long long)rc.iterations);
    CHECK(r1.history_len >= 2 && fabs(r1.history[0] - r1.b_norm) <= 1e-5 * r1.b_norm);
    kd_solve_result_free(&r1);
    kd_solve_result_free(&rc);
    kd_test_problem_free(&p);
}

/* Row i scaled by 1 + 40 (i mod 5) / 4 on both sides: Jacobi pays off. */
static kd_csr_t *scaled_laplacian(int64_t nx)
{
    kd_csr_t *m = kd_test_laplacian_2d(nx, nx);
    double *v = (double *)m->values;
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t j = m->indptr[r]; j < m->indptr[r + 1]; j++)
            v[j] *=
                sqrt((1.0 + 10.0 * (double)(r % 5)) * (1.0 + 10.0 * (double)(m->indices[j] % 5)));
    return m;
}

static void test_cg1_converges(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        const double rtol = dt[d] == KD_DTYPE_F64 ? 1e-8 : 1e-5;
        for (int j = 0; j < 2; j++) {
            const char *pc = j ? "jacobi" : "none";
            cg1_matches_cg("laplacian 40x40", kd_test_laplacian_2d(40, 40), dt[d], pc, rtol, 0.0);
            cg1_matches_cg("laplacian 47x13", kd_test_laplacian_2d(47, 13), dt[d], pc, rtol, 0.0);
            cg1_matches_cg("random spd 3000", kd_test_spd_matrix(3000, 8, 0.1), dt[d], pc, rtol,
                           0.0);
            cg1_matches_cg("scaled laplacian 30", scaled_laplacian(30), dt[d], pc, rtol, 0.0);
            cg1_matches_cg("random spd 1", kd_test_spd_matrix(1, 1, 2.0), dt[d], pc, rtol, 0.0);
            cg1_matches_cg("dwt_878 + 4I", kd_test_load_mtx("dwt_878.mtx", 4.0), dt[d], pc, rtol,
                           0.0);
        }
        if (dt[d] == KD_DTYPE_F64) {
            /* Condition number 2.4e6: 1639 iterations against CG's 1568 on PoCL. */
            cg1_matches_cg("494_bus", kd_test_load_mtx("494_bus.mtx", 0.0), dt[d], "none", 1e-8,
                           0.08);
            cg1_matches_cg("494_bus", kd_test_load_mtx("494_bus.mtx", 0.0), dt[d], "jacobi", 1e-8,
                           0.0);
        }
    }
}

/* Fused and separate SpMV, check every iteration or every 16, several right-hand sides or one:
 * the same x and iteration counts, bit for bit. */
static void test_cg1_schedules(void)
{
    enum { K = 3 };
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++)
        for (int j = 0; j < 2; j++) {
            problem_t p;
            problem_make(&p, kd_test_spd_matrix(1200, 8, 0.05), dt[d], K);
            const size_t col = (size_t)p.n * kd_dtype_size(dt[d]);
            memset((char *)p.b + col, 0, col); /* column 1: b = 0 */
            const double rtol = dt[d] == KD_DTYPE_F64 ? 1e-9 : 1e-5;
            kd_solve_params_t prm = params("cg1", j ? "jacobi" : "none", rtol);
            char *ref = malloc(K * col), *alt = malloc(K * col);
            kd_solve_result_t rr[K], ra[K];
            kd_err_t err = {0};
            prm.spmv_fusion = KD_SOLVE_FUSION_OFF;
            prm.check_every = 1;
            REQUIRE(kd_solve(ocl, p.A, K, p.b, NULL, ref, &prm, rr, &err) == KD_OK);
            for (int variant = 0; variant < 3; variant++) {
                prm.spmv_fusion = variant == 0 ? KD_SOLVE_FUSION_ON : KD_SOLVE_FUSION_OFF;
                prm.check_every = variant == 1 ? 16 : 1;
                if (variant == 2) { /* each column alone */
                    for (int c = 0; c < K; c++) {
                        REQUIRE(kd_solve(ocl, p.A, 1, (char *)p.b + c * col, NULL, alt + c * col,
                                         &prm, &ra[c], &err) == KD_OK);
                    }
                } else {
                    REQUIRE(kd_solve(ocl, p.A, K, p.b, NULL, alt, &prm, ra, &err) == KD_OK);
                }
                CHECK_MSG(memcmp(ref, alt, K * col) == 0, "cg1 %s variant %d: x differs",
                          kd_dtype_name(dt[d]), variant);
                for (int c = 0; c < K; c++) {
                    CHECK_EQ_INT(ra[c].iterations, rr[c].iterations);
                    CHECK_EQ_INT(ra[c].status, rr[c].status);
                    kd_solve_result_free(&ra[c]);
                }
            }
            CHECK(rr[0].status == KD_SOLVE_CONVERGED && rr[1].iterations == 0);
            CHECK(true_relres(&p, ref, 2) <= rtol * 1.05);
            for (int c = 0; c < K; c++)
                kd_solve_result_free(&rr[c]);
            free(ref);
            free(alt);
            kd_test_problem_free(&p);
        }
}

/* An indefinite matrix: breakdown, named as CG names it; a warm start at the solution: 0 its. */
static void test_cg1_edges(void)
{
    kd_csr_t *m = kd_test_laplacian_2d(16, 16);
    double *v = (double *)m->values;
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t j = m->indptr[r]; j < m->indptr[r + 1]; j++)
            if (m->indices[j] == r)
                v[j] -= 6.0;
    problem_t p;
    problem_make(&p, m, KD_DTYPE_F32, 1);
    kd_solve_params_t prm = params("cg1", NULL, 1e-5);
    kd_solve_result_t res;
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK_EQ_INT(res.status, KD_SOLVE_BREAKDOWN);
    CHECK_STR_CONTAINS(res.message, "p'Ap");
    fprintf(stderr, "  indefinite: %s: %s\n", kd_solve_status_name(res.status), res.message);
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);

    problem_make(&p, kd_test_laplacian_2d(20, 20), KD_DTYPE_F32, 1);
    prm = params("cg1", "jacobi", 1e-5);
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    kd_solve_result_free(&res);
    void *x1 = malloc((size_t)p.n * 4 + 8);
    CHECK(kd_solve(ocl, p.A, 1, p.b, p.x, x1, &prm, &res, &err) == KD_OK);
    CHECK(res.status == KD_SOLVE_CONVERGED && res.iterations <= 1);
    kd_solve_result_free(&res);
    free(x1);
    kd_test_problem_free(&p);
}

int main(void)
{
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    kd_test_seed();
    test_tables();
    test_auto();
    test_declared_reductions();
    test_precond_lives_with_matrix();
    test_cg1_converges();
    test_cg1_schedules();
    test_cg1_edges();
    kd_ocl_close(ocl);
    return kd_test_finish();
}
