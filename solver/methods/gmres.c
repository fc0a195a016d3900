/*
 * gmres: restarted GMRES(m) (Saad and Schultz 1986), right-preconditioned (A M^-1 u = b,
 * x = M^-1 u, so the residual it minimises and reports is the true b - A x), m = params->restart
 * (0: KD_SOLVE_RESTART_DEFAULT). For nonsymmetric square matrices; k right-hand sides in lock
 * step, each column at its own step j of its own cycle. One inner step is one iteration (as
 * SciPy counts with callback_type='pr_norm'); the kernels are kernels/methods/gmres.cl.
 *
 * An iteration (nothing waits on the host):
 *   where a cycle starts   kd_gmres_start: v_0 = r / beta, g = beta e1
 *   operator M only        z_j = M^-1 v_j (kd_method_precondition)
 *   SpMV                   w = A z_j (fused into pass A on a csr_scalar matrix)
 *   pass A                 partial sums of V'w and w'w                       (reduction 1)
 *   fold                   h1 = V'w and ||w||^2 from the partials, once
 *   pass B                 w' = w - V h1; partial sums of V'w', w''w'         (reduction 2)
 *   fold                   h2 = V'w' and ||w'||^2
 *   pass C                 DGKS: only when ||w'|| < ||w|| / sqrt 2 also w'' = w' - V h2; v_{j+1};
 *                          the Givens rotation of H's column j and the decision (converged on
 *                          |g_{j+1}|^2 <= threshold, stopped at the limit, breakdown, non-finite),
 *                          all on the device; x += Z y (D^-1 V y, V y) where the column stops or
 *                          ends its cycle, so x is current whenever the status says converged
 *   where a cycle ended    r = b - A x explicitly, partial sums of r'r          (reduction 3)
 * Classical Gram-Schmidt as two matrix-vector passes over the basis, with the stability of CGS2
 * where it is needed. Two reductions an iteration, one more per natural cycle end.
 *
 * The host mirrors each column's cycle start (cstart, also on the device), so it knows which
 * columns start or end a cycle at any iteration without reading the device. The driver's restart
 * (a convergence claim that b - A x refuted) starts a new cycle from the true residual.
 *
 * Cancel and deadline stop the driver between iterations, mid-cycle: x is the iterate of the
 * column's last x update (its last cycle end), not the better one the unfinished cycle's basis
 * holds (that would need a back substitution the host never asked for).
 *
 * Device memory beyond the driver's vectors: (m + 1) k n values for V, m k n more for Z with an
 * operator preconditioner, one or two vectors of k n, and O(k (m^2 + G m)) of scalars.
 */
#include "solver/methods/method.h"
#include "common/checked.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_GMRES_MAX_M 200 /* kernels/methods/gmres.cl's local arrays */
_Static_assert(KD_SOLVE_RESTART_MAX <= KD_GMRES_MAX_M, "kernels/methods/gmres.cl: KD_GMRES_MAX_M");

typedef struct kd_gmres {
    int m;
    int operator_form; /* Z stored, M^-1 applied by the operator */
    cl_mem V, Z;       /* basis, preconditioned basis (operator only) */
    kd_multivec_t u;   /* the next SpMV's input, v_j with an operator (identity: v_j too) */
    kd_multivec_t zop; /* the operator's z_j */
    cl_mem gd;         /* Givens data per column */
    cl_mem cstart;     /* k cl_long: each column's cycle start */
    cl_mem part_a, part_b, rpart;
    cl_mem sums_a, sums_b; /* part_a, part_b folded: k (m + 2) */
    int64_t *cstart_host;
    unsigned char *which; /* k: scratch column mask */
} kd_gmres_t;

static int64_t kd_gmres_step(const kd_gmres_t *g, int64_t c, int64_t it)
{
    return (it - 1 - g->cstart_host[c]) % g->m;
}

static int kd_gmres_buffer(kd_solve_run_t *run, size_t count, size_t size, const char *what,
                           cl_mem *out, kd_err_t *err)
{
    size_t bytes;
    if (kd_mul_overflow(count, size, &bytes))
        return kd_err_set(err, KD_ETOOLARGE, "gmres %s: %zu values do not fit", what, count);
    return kd_ocl_buffer_create(run->ocl, CL_MEM_READ_WRITE, bytes ? bytes : size, NULL, what, out,
                                err);
}

/* The basis's bytes, checked before anything is allocated: KD_EDEVMEM naming restart. */
static int kd_gmres_plan(const kd_solve_run_t *run, int m, int operator_form, size_t *v_values,
                         kd_err_t *err)
{
    const size_t vsize = kd_dtype_size(run->kr.dtype);
    const kd_ocl_device_desc_t *d = kd_ocl_desc(run->ocl);
    size_t per, v_bytes, z_bytes = 0, total;
    if (kd_mul_overflow((size_t)run->k, (size_t)run->kr.ld, &per) ||
        kd_mul3_overflow((size_t)m + 1, per, vsize, &v_bytes) ||
        (operator_form && kd_mul3_overflow((size_t)m, per, vsize, &z_bytes)) ||
        kd_add_overflow(v_bytes, z_bytes, &total))
        return kd_err_set(err, KD_EDEVMEM,
                          "gmres restart = %d with %lld right-hand sides of %lld values: the basis "
                          "does not fit in memory; use a smaller restart",
                          m, (long long)run->k, (long long)run->kr.n);
    if (v_bytes > d->max_alloc_bytes || total > d->global_mem_bytes)
        return kd_err_set(err, KD_EDEVMEM,
                          "gmres restart = %d needs %zu bytes for its basis (%d + 1 vectors%s of "
                          "%lld values per right-hand side, %lld right-hand sides); the device "
                          "holds %llu, at most %llu in one buffer: use a smaller restart or fewer "
                          "right-hand sides",
                          m, total, m, operator_form ? " and m preconditioned ones" : "",
                          (long long)run->kr.n, (long long)run->k,
                          (unsigned long long)d->global_mem_bytes,
                          (unsigned long long)d->max_alloc_bytes);
    *v_values = (size_t)m + 1;
    return KD_OK;
}

static void kd_gmres_finish_state(kd_solve_run_t *run)
{
    kd_gmres_t *g = run->method_state;
    if (g == NULL)
        return;
    cl_mem *bufs[] = {&g->V,      &g->Z,      &g->gd,     &g->cstart, &g->part_a,
                      &g->part_b, &g->sums_a, &g->sums_b, &g->rpart};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (*bufs[i] != NULL)
            clReleaseMemObject(*bufs[i]);
    kd_multivec_release(&g->u);
    kd_multivec_release(&g->zop);
    free(g->cstart_host);
    free(g->which);
    free(g);
    run->method_state = NULL;
}

static int kd_gmres_write_cstart(kd_solve_run_t *run, kd_err_t *err)
{
    kd_gmres_t *g = run->method_state;
    cl_int st =
        kd_ocl_enqueue_write(kd_ocl_queue(run->ocl), g->cstart, CL_TRUE, 0,
                             (size_t)run->k * sizeof(cl_long), g->cstart_host, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueWriteBuffer (gmres cycles)");
}

static int kd_gmres_setup(kd_solve_run_t *run, kd_err_t *err)
{
    assert(run != NULL && run->method_state == NULL);
    const kd_precond_t *P = run->precond;
    const int m = run->params->restart > 0 ? (int)run->params->restart : KD_SOLVE_RESTART_DEFAULT;
    const int operator_form = P->diagonal == NULL && P->ops->apply != NULL;
    const int64_t k = run->k;
    const size_t vsize = kd_dtype_size(run->kr.dtype), groups = run->kr.groups;
    size_t basis = 0;
    int rc = kd_gmres_plan(run, m, operator_form, &basis, err);
    if (rc != KD_OK)
        return rc;
    kd_gmres_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    run->method_state = g;
    g->m = m;
    g->operator_form = operator_form;
    if ((g->cstart_host = calloc((size_t)k, sizeof(int64_t))) == NULL ||
        (g->which = calloc((size_t)k, 1)) == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    const size_t per = (size_t)k * (size_t)run->kr.ld;
    const size_t givens = (size_t)m * (size_t)m + 4 * (size_t)m + 2;
    if ((rc = kd_gmres_buffer(run, basis * per, vsize, "gmres basis", &g->V, err)) != KD_OK ||
        (operator_form &&
         (rc = kd_gmres_buffer(run, (size_t)m * per, vsize, "gmres preconditioned basis", &g->Z,
                               err)) != KD_OK) ||
        (rc = kd_multivec_alloc(run->ocl, run->kr.n, k, run->kr.dtype, &g->u, err)) != KD_OK ||
        (operator_form &&
         (rc = kd_multivec_alloc(run->ocl, run->kr.n, k, run->kr.dtype, &g->zop, err)) != KD_OK) ||
        (rc = kd_gmres_buffer(run, givens * (size_t)k, vsize, "gmres rotations", &g->gd, err)) !=
            KD_OK ||
        (rc = kd_gmres_buffer(run, (size_t)k, sizeof(cl_long), "gmres cycles", &g->cstart, err)) !=
            KD_OK ||
        (rc = kd_gmres_buffer(run, (size_t)k * groups * ((size_t)m + 1), vsize,
                              "gmres partial sums", &g->part_a, err)) != KD_OK ||
        (rc = kd_gmres_buffer(run, (size_t)k * groups * ((size_t)m + 1), vsize,
                              "gmres partial sums", &g->part_b, err)) != KD_OK ||
        (rc = kd_gmres_buffer(run, (size_t)k * ((size_t)m + 2), vsize, "gmres sums", &g->sums_a,
                              err)) != KD_OK ||
        (rc = kd_gmres_buffer(run, (size_t)k * ((size_t)m + 2), vsize, "gmres sums", &g->sums_b,
                              err)) != KD_OK ||
        (rc = kd_gmres_buffer(run, (size_t)k * groups, vsize, "gmres residual sums", &g->rpart,
                              err)) != KD_OK ||
        (rc = kd_gmres_write_cstart(run, err)) != KD_OK)
        return rc;
    run->fused = run->csr != NULL;
    run->kr.fold_snapshots = 0; /* pass C writes r'r (|g_{j+1}|^2) itself */
    return kd_krylov_residual(&run->kr, &run->r, NULL, NULL,
                              KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART, 0, err);
}

/* Whether some column the host still runs is at step `step` of its cycle at iteration it. */
static int kd_gmres_any_at(kd_solve_run_t *run, int64_t it, int64_t step)
{
    const kd_gmres_t *g = run->method_state;
    int any = 0;
    for (int64_t c = 0; c < run->k; c++) {
        g->which[c] = run->active[c] && kd_gmres_step(g, c, it) == step;
        any |= g->which[c];
    }
    return any;
}

/* sums = part folded over the groups, one work-group per sum (kernels/methods/gmres.cl). */
static int kd_gmres_sum(kd_solve_run_t *run, cl_mem part, cl_mem sums, kd_krylov_launch_t L,
                        kd_err_t *err)
{
    const kd_gmres_t *g = run->method_state;
    return kd_krylov_launch_groups(&run->kr, "gmres", "kd_gmres_sum", (size_t)g->m + 1,
                                   KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_INT(g->m),
                                           KD_ARG_MEM(run->kr.state), KD_ARG_MEM(g->cstart),
                                           KD_ARG_MEM(part), KD_ARG_MEM(sums)),
                                   err);
}

static int kd_gmres_iterate(kd_solve_run_t *run, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    kd_gmres_t *g = run->method_state;
    const kd_format_csr_t *A = run->csr;
    const cl_int m = g->m;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, it, 0);
    int rc = KD_OK;
    if (kd_gmres_any_at(run, it, 0))
        rc = kd_krylov_launch(kr, "gmres", "kd_gmres_start",
                              KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_INT(m),
                                      KD_ARG_MEM(kr->state), KD_ARG_MEM(kr->scalars),
                                      KD_ARG_MEM(g->cstart), KD_ARG_MEM(g->rpart),
                                      KD_ARG_MEM(g->gd), KD_ARG_MEM(run->r.mem), KD_ARG_MEM(g->V),
                                      KD_ARG_MEM(g->u.mem), KD_ARG_MEM(kr->diagonal)),
                              err);
    if (rc == KD_OK && g->operator_form)
        rc = kd_method_precondition(run, &g->u, &g->zop, err);
    kd_multivec_t *z = g->operator_form ? &g->zop : &g->u;
    if (rc == KD_OK && A == NULL)
        rc = kd_solve_spmv(run, z, &run->q, err);
    if (rc == KD_OK)
        rc = kd_krylov_launch(
            kr, "gmres", "kd_gmres_project",
            KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_INT(m), KD_ARG_MEM(kr->state),
                    KD_ARG_MEM(g->cstart), KD_ARG_MEM(g->gd), KD_ARG_MEM(g->V),
                    KD_ARG_MEM(run->q.mem), KD_ARG_MEM(g->part_a),
                    KD_ARG_MEM(A != NULL ? A->indptr : NULL),
                    KD_ARG_MEM(A != NULL ? A->indices : NULL),
                    KD_ARG_MEM(A != NULL ? A->values : NULL), KD_ARG_MEM(g->u.mem),
                    KD_ARG_MEM(g->operator_form ? g->zop.mem : NULL), KD_ARG_MEM(g->Z)),
            err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "V'w, w'w", err);
    if (rc == KD_OK)
        rc = kd_gmres_sum(run, g->part_a, g->sums_a, L, err);
    if (rc == KD_OK)
        rc = kd_krylov_launch(kr, "gmres", "kd_gmres_orthogonalise",
                              KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_INT(m),
                                      KD_ARG_MEM(kr->state), KD_ARG_MEM(g->cstart),
                                      KD_ARG_MEM(g->gd), KD_ARG_MEM(g->V), KD_ARG_MEM(run->q.mem),
                                      KD_ARG_MEM(g->sums_a), KD_ARG_MEM(g->part_b)),
                              err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "V'w', w''w'", err);
    if (rc == KD_OK)
        rc = kd_gmres_sum(run, g->part_b, g->sums_b, L, err);
    if (rc == KD_OK)
        rc = kd_krylov_launch(
            kr, "gmres", "kd_gmres_finish",
            KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_INT(m), KD_ARG_MEM(kr->state),
                    KD_ARG_MEM(kr->scalars), KD_ARG_MEM(kr->threshold), KD_ARG_MEM(kr->limits),
                    KD_ARG_MEM(g->cstart), KD_ARG_MEM(g->gd), KD_ARG_MEM(g->V),
                    KD_ARG_MEM(run->q.mem), KD_ARG_MEM(g->sums_a), KD_ARG_MEM(g->sums_b),
                    KD_ARG_MEM(g->u.mem), KD_ARG_MEM(run->x.mem), KD_ARG_MEM(g->Z),
                    KD_ARG_MEM(kr->diagonal)),
            err);
    if (rc != KD_OK || !kd_gmres_any_at(run, it, m - 1))
        return rc;
    /* Natural cycle ends: the true residual for the next cycle's start. */
    for (int64_t c = 0; A == NULL && rc == KD_OK && c < run->k; c++)
        if (g->which[c])
            rc = kd_matrix_spmv_inner(run->ocl, run->A, 1.0, &run->x.cols[c], 0.0, &run->q.cols[c],
                                      err);
    if (rc == KD_OK)
        rc =
            kd_krylov_launch(kr, "gmres", "kd_gmres_residual",
                             KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_INT(m), KD_ARG_MEM(g->cstart),
                                     KD_ARG_MEM(run->b.mem), KD_ARG_MEM(run->q.mem),
                                     KD_ARG_MEM(run->x.mem), KD_ARG_MEM(run->r.mem),
                                     KD_ARG_MEM(g->rpart), KD_ARG_MEM(A != NULL ? A->indptr : NULL),
                                     KD_ARG_MEM(A != NULL ? A->indices : NULL),
                                     KD_ARG_MEM(A != NULL ? A->values : NULL)),
                             err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "r'r at a cycle's end", err);
    return rc;
}

/* A new cycle from the true residual in run->r for the masked columns, from iteration it. */
static int kd_gmres_restart(kd_solve_run_t *run, int *mask, int64_t it, kd_err_t *err)
{
    kd_gmres_t *g = run->method_state;
    for (int64_t c = 0; c < run->k; c++)
        if (mask[c] & KD_KRYLOV_MASK_PARTIALS)
            g->cstart_host[c] = it;
    int rc = kd_gmres_write_cstart(run, err);
    return rc == KD_OK ? kd_krylov_residual(&run->kr, &run->r, NULL, mask, 0, it, err) : rc;
}

static int kd_gmres_check(const kd_solve_run_t *run, const kd_krylov_column_t *st, int64_t skip,
                          kd_solve_result_t *res)
{
    (void)run;
    const long long at = (long long)st->iteration;
    switch (st->status) {
    case KD_KRYLOV_BREAKDOWN:
        res->status = KD_SOLVE_BREAKDOWN;
        res->iterations = st->iteration - skip;
        snprintf(res->message, sizeof(res->message),
                 "GMRES breakdown at iteration %lld: the Hessenberg matrix is singular to working "
                 "precision, so A is singular on the Krylov space (b may be outside its range); "
                 "x is the least-squares solution of the basis before it, ||r|| = %.3g",
                 at, sqrt(st->rr));
        return 1;
    case KD_KRYLOV_NON_FINITE_PQ:
        res->status = KD_SOLVE_NON_FINITE;
        res->iterations = st->iteration - 1 - skip;
        snprintf(res->message, sizeof(res->message),
                 "the Arnoldi step's norm became %g at iteration %lld: A z overflows; x is the "
                 "iterate of the last cycle end",
                 st->fail, at);
        return 1;
    default:
        return kd_method_explain(st, skip, "h", "r'r", res);
    }
}

/* Step j of a cycle of m: V'w over j + 1 basis vectors and w (j + 2), w - V h over them again
 * and v_{j+1} written (j + 3): 2 j + 5, m + 4 on average over a cycle (classical Gram-Schmidt
 * without reorthogonalisation, as CuPy's); and once a cycle x += V y (m + 2). */
static double kd_gmres_floor(const kd_solve_params_t *params)
{
    const double m = params->restart > 0 ? (double)params->restart : KD_SOLVE_RESTART_DEFAULT;
    return m + 4.0 + (m + 2.0) / m;
}

const kd_method_ops_t kd_method_gmres = {
    .name = "gmres",
    .summary = "restarted GMRES(m), right-preconditioned, for nonsymmetric matrices "
               "(restart: m, default 30)",
    .needs = KD_METHOD_NEEDS_SQUARE,
    .precond_forms = KD_PRECOND_IDENTITY | KD_PRECOND_DIAGONAL | KD_PRECOND_OPERATOR,
    .work_vectors = 0,
    .reductions = 2, /* and one more at each natural cycle end (a true residual) */
    .spmvs = 1,
    .floor_vectors = kd_gmres_floor,
    .setup = kd_gmres_setup,
    .iterate = kd_gmres_iterate,
    .restart = kd_gmres_restart,
    .check = kd_gmres_check,
    .finish = kd_gmres_finish_state,
};
