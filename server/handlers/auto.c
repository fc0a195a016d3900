/*
 * `solve` with method "auto" (issue 37 item 3): a plan of attempts made from what the server knows
 * of the matrix (the scan's symmetry and diagonal, its size) and run in order until one converges.
 * An attempt is a Krylov method with a preconditioner (solve_job.c runs it as any solve) or the
 * direct factorisation (direct.c), whose estimate is charged to --factor-memory before anything is
 * factored: a factor over the budget is an attempt refused, and the plan goes on.
 *
 * The order (docs/PROTOCOL.md "method auto" says why):
 *   - a matrix that looks SPD: cg with the request's preconditioner (none by default: what auto
 *     always ran), minres where cg broke down, then cg+amg and direct (direct first of them up to
 *     KD_AUTO_DIRECT_ROWS rows, where a factor is cheap);
 *   - any other matrix (nonsymmetric, a zero, missing or negative diagonal entry) up to
 *     KD_AUTO_DIRECT_ROWS rows: direct first, then (nonsymmetric) gmres+ilu0, the Krylov method
 *     auto picks without a preconditioner, and bicgstab+jacobi; larger ones run the Krylov
 *     attempts first (the plain one, gmres+ilu0, bicgstab+jacobi) and direct after them;
 *   - a preconditioner named in the request: its Krylov method first, direct only after it.
 * An attempt that breaks down, stagnates, reaches max_iterations or cannot be set up (a zero pivot,
 * a zero diagonal, a factor over the budget) passes to the next; the answer is the first that
 * converged, else "singular" where direct found the matrix so, else the closest attempt. A direct
 * attempt that stagnated (refined, still above rtol: an ill-conditioned matrix) ends the plan: no
 * Krylov method gets closer in that dtype, and a plain one would spend 10 x rows iterations. After
 * direct found it singular, a Krylov attempt (which may still solve a consistent system) runs at
 * most KD_AUTO_SINGULAR_MAXITER iterations. The reply
 * lists every attempt under `auto` and its messages say what happened before.
 */
#include "common/clock.h"
#include "common/log.h"
#include "common/recycle.h"
#include "server/handlers/direct.h"
#include "server/handlers/handlers.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows up to which a matrix that does not look SPD is factored before any Krylov attempt: its
 * factor takes milliseconds (bayer10, 13,436 rows: 7 ms) where gmres may take thousands of
 * iterations or no preconditioner sets up. */
#define KD_AUTO_DIRECT_ROWS 100000
/* Iterations a Krylov attempt may take after direct found the matrix singular: where the system
 * is consistent they may still find a solution, but no one waits 10 x rows iterations for it
 * (rajat01: 68,330 iterations of gmres, 87 s, to reach 1e-4). */
#define KD_AUTO_SINGULAR_MAXITER 1000

typedef struct kd_auto_try {
    const char *method, *precond; /* method KD_METHOD_DIRECT: the factorisation */
    int after_breakdown;          /* only where the attempt before it broke down */
} kd_auto_try_t;

/* The outcome of the attempts so far: the one to answer with. */
typedef struct kd_auto_state {
    const kd_solve_request_t *q;
    int64_t count; /* n * nrhs */
    /* the best Krylov attempt: its results, x (matrix dtype), params, setup */
    kd_solve_result_t *results;
    void *x;
    kd_solve_params_t params;
    const char *setup;
    double krylov_worst; /* its worst column's relative residual; INFINITY: none */
    /* the direct attempt */
    kd_direct_column_t *cols;
    double *X;
    kd_direct_info_t info;
    double solve_ms;
    int direct_ran, singular;
    double direct_worst;
    kd_auto_trail_t trail;
    char why[256]; /* "cg broke down at iteration 12 (...); direct was refused (...)" */
} kd_auto_state_t;

static void kd_auto_label(char *out, size_t cap, const char *method, const char *precond)
{
    if (precond == NULL || precond[0] == '\0' || strcmp(precond, "none") == 0)
        snprintf(out, cap, "%s", method);
    else
        snprintf(out, cap, "%s+%s", method, precond);
}

/* Append an attempt unless the server lacks it, the method cannot take the preconditioner, or it
 * is planned already. */
static size_t kd_auto_add(kd_auto_try_t *plan, size_t n, const char *method, const char *precond,
                          int after_breakdown)
{
    if (n >= KD_AUTO_STEPS_MAX)
        return n;
    if (strcmp(method, KD_METHOD_DIRECT) == 0) {
        if (kd_direct_count == 0)
            return n;
    } else {
        const kd_method_ops_t *m;
        const kd_precond_ops_t *p;
        kd_err_t ignored = {0};
        if (kd_method_choose(method, precond, &m, &p, &ignored) != KD_OK)
            return n;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(plan[i].method, method) == 0 && strcmp(plan[i].precond, precond) == 0)
            return n;
    plan[n] = (kd_auto_try_t){method, precond, after_breakdown};
    return n + 1;
}

/* The attempts for A, in order (the file's comment says why); first is kd_method_auto's choice
 * with the request's preconditioner (precond: its name, "none" when it named none). */
static size_t kd_auto_plan(const kd_matrix_t *A, const kd_solve_request_t *q,
                           const kd_method_ops_t *first, const char *precond, kd_auto_try_t *plan)
{
    const int named = q->preconditioner[0] != '\0';
    const int small = A->rows <= KD_AUTO_DIRECT_ROWS;
    size_t n = 0;
    if (!A->scan.looks_spd && small && !named) { /* direct, then the preconditioned first */
        n = kd_auto_add(plan, n, KD_METHOD_DIRECT, "none", 0);
        if (!A->scan.symmetric)
            n = kd_auto_add(plan, n, "gmres", "ilu0", 0);
    }
    n = kd_auto_add(plan, n, first->name, precond, 0);
    if ((first->needs & KD_METHOD_NEEDS_SPD) != 0)
        n = kd_auto_add(plan, n, "minres", precond, 1);
    if (named || small)
        n = kd_auto_add(plan, n, KD_METHOD_DIRECT, "none", 0);
    if (!named && A->scan.looks_spd) {
        n = kd_auto_add(plan, n, "cg", "amg", 0);
    } else if (!named) {
        n = kd_auto_add(plan, n, "gmres", "ilu0", 0);
        n = kd_auto_add(plan, n, "bicgstab", "jacobi", 0);
    }
    return kd_auto_add(plan, n, KD_METHOD_DIRECT, "none", 0);
}

/* What the request names checked before anything runs: its preconditioner, options for it and
 * direct_options.solver, and the plan. */
static int kd_auto_prepare(const kd_matrix_t *A, const kd_solve_request_t *q,
                           const kd_direct_ops_t **ops, kd_auto_try_t *plan, size_t *nplan,
                           kd_err_t *err)
{
    const kd_method_ops_t *m;
    const kd_precond_ops_t *p;
    int rc = kd_method_choose_for(A, KD_METHOD_AUTO, q->preconditioner, &m, &p, err);
    if (rc != KD_OK)
        return rc;
    kd_precond_options_t opt;
    memset(&opt, 0, sizeof(opt));
    for (int i = 0; i < q->noptions && i < KD_PRECOND_OPTIONS_MAX; i++) {
        snprintf(opt.items[i].name, sizeof(opt.items[i].name), "%s", q->options[i].name);
        opt.items[i].value = q->options[i].value;
        opt.count++;
    }
    if ((rc = kd_precond_check_options(p, opt.count > 0 ? &opt : NULL, err)) != KD_OK)
        return rc;
    *ops = NULL;
    if (q->direct_solver[0] != '\0' && (*ops = kd_direct_find(q->direct_solver)) == NULL) {
        char names[128];
        kd_direct_names(names, sizeof(names));
        return kd_err_set(err, KD_EBADREQ,
                          "direct_options: unknown solver '%s': this server has %s (or leave it "
                          "out)",
                          q->direct_solver, names[0] != '\0' ? names : "none");
    }
    if (*ops != NULL && (*ops)->cholesky && !A->scan.symmetric)
        return kd_err_set(err, KD_EBADREQ,
                          "direct solver %s needs a symmetric matrix; this one is not (use klu or "
                          "umfpack)",
                          (*ops)->name);
    *nplan = kd_auto_plan(A, q, m, p->name, plan);
    return KD_OK;
}

/* An attempt's error that ends the request (the client's cancel, its deadline, the device or
 * the host failing) rather than the attempt. */
static int kd_auto_fatal(int rc)
{
    return rc == KD_ECANCELLED || rc == KD_ETIMEOUT || rc == KD_EDEVICE || rc == KD_ENOMEM ||
           rc == KD_EINTERNAL || rc == KD_ENOTFOUND || rc == KD_EIO;
}

static kd_auto_step_t *kd_auto_record(kd_auto_state_t *st, const char *method, const char *precond)
{
    kd_auto_step_t *s = &st->trail.steps[st->trail.count++];
    memset(s, 0, sizeof(*s));
    snprintf(s->method, sizeof(s->method), "%s", method);
    snprintf(s->preconditioner, sizeof(s->preconditioner), "%s", precond);
    s->relative_residual = -1.0;
    return s;
}

/* One more "what happened" for the answer's messages. */
static void kd_auto_why(kd_auto_state_t *st, const char *part)
{
    const size_t used = strlen(st->why);
    snprintf(st->why + used, sizeof(st->why) - used, "%s%.200s", used > 0 ? "; " : "", part);
}

/* A Krylov attempt: 1 converged, 0 go on, 2 stop here (non_finite: b or the matrix), or an error
 * that ends the request. */
static int kd_auto_krylov(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                          kd_auto_state_t *st, const kd_auto_try_t *t, const void *b,
                          const void *x0, int *broke, kd_err_t *err)
{
    const kd_solve_request_t *q = st->q;
    kd_solve_request_t qs = *q; /* the request, naming this attempt */
    snprintf(qs.method, sizeof(qs.method), "%s", t->method);
    snprintf(qs.preconditioner, sizeof(qs.preconditioner), "%s", t->precond);
    if (q->preconditioner[0] == '\0')
        qs.noptions = 0; /* auto's own choice: its defaults */
    if (st->singular && (qs.maxiter < 0 || qs.maxiter > KD_AUTO_SINGULAR_MAXITER))
        qs.maxiter = KD_AUTO_SINGULAR_MAXITER;
    const size_t asize = kd_dtype_size(entry->dev->dtype);
    kd_solve_result_t *results = calloc((size_t)q->nrhs, sizeof(*results));
    void *x = kd_recycle_alloc((size_t)st->count * asize, NULL);
    if (results == NULL || x == NULL) {
        free(results);
        kd_recycle_free(x);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for an attempt of method auto");
    }
    char label[40];
    kd_auto_label(label, sizeof(label), t->method, t->precond);
    kd_auto_step_t *s = kd_auto_record(st, t->method, t->precond);
    kd_solve_params_t params;
    const char *setup = NULL;
    const uint64_t t0 = kd_clock_ns();
    int rc = kd_solve_job_krylov(server, entry, job, &qs, b, x0, x, &params, results, &setup, err);
    s->time_ms = kd_clock_ms_since(t0);
    *broke = 0;
    if (rc != KD_OK) {
        for (int64_t k = 0; k < q->nrhs; k++)
            kd_solve_result_free(&results[k]);
        free(results);
        kd_recycle_free(x);
        if (kd_auto_fatal(rc))
            return rc;
        s->status = "refused";
        snprintf(s->message, sizeof(s->message), "%.223s", err->message);
        char part[200];
        snprintf(part, sizeof(part), "%s was refused (%.120s)", label, err->message);
        kd_auto_why(st, part);
        kd_err_clear(err);
        return 0;
    }
    int converged = 1, non_finite = 0;
    double worst = 0.0;
    const kd_solve_result_t *bad = NULL;
    for (int64_t k = 0; k < q->nrhs; k++) {
        const kd_solve_result_t *r = &results[k];
        converged &= r->status == KD_SOLVE_CONVERGED;
        non_finite |= r->status == KD_SOLVE_NON_FINITE;
        *broke |= r->status == KD_SOLVE_BREAKDOWN;
        if (r->iterations > s->iterations)
            s->iterations = r->iterations;
        worst = fmax(worst, r->relative_residual);
        if (bad == NULL && r->status != KD_SOLVE_CONVERGED)
            bad = r;
    }
    s->status = kd_solve_status_name(bad != NULL ? bad->status : KD_SOLVE_CONVERGED);
    s->relative_residual = worst;
    snprintf(s->message, sizeof(s->message), "%.223s", bad != NULL ? bad->message : "");
    char part[200];
    if (bad != NULL && bad->status == KD_SOLVE_BREAKDOWN) {
        snprintf(part, sizeof(part), "%s broke down at iteration %lld (%.80s)", label,
                 (long long)bad->iterations + 1, bad->message);
        kd_auto_why(st, part);
    } else if (bad != NULL) {
        snprintf(part, sizeof(part), "%s ended %s at ||b - A x|| / ||b|| = %.3g", label,
                 kd_solve_status_name(bad->status), worst);
        kd_auto_why(st, part);
    }
    /* keep it where it is the closest so far (a converged one is the answer) */
    if (converged || non_finite || !(worst >= st->krylov_worst)) {
        if (st->results != NULL)
            for (int64_t k = 0; k < q->nrhs; k++)
                kd_solve_result_free(&st->results[k]);
        free(st->results);
        kd_recycle_free(st->x);
        st->results = results;
        st->x = x;
        st->params = params;
        st->setup = setup;
        st->krylov_worst = worst;
    } else {
        for (int64_t k = 0; k < q->nrhs; k++)
            kd_solve_result_free(&results[k]);
        free(results);
        kd_recycle_free(x);
    }
    return converged ? 1 : non_finite ? 2 : 0;
}

/* The direct attempt: 1 converged, 0 go on, or an error that ends the request. */
static int kd_auto_direct(kd_server_t *server, kd_store_entry_t *entry, kd_auto_state_t *st,
                          const kd_direct_ops_t *ops, const double *B, kd_err_t *err)
{
    const kd_solve_request_t *q = st->q;
    kd_auto_step_t *s = kd_auto_record(st, KD_METHOD_DIRECT, "none");
    const uint64_t t0 = kd_clock_ns();
    int rc = kd_direct_solve_columns(server, entry, q, ops, B, st->X, st->cols, &st->info,
                                     &st->solve_ms, err);
    s->time_ms = kd_clock_ms_since(t0);
    if (rc != KD_OK) {
        if (kd_auto_fatal(rc))
            return rc;
        s->status = "refused";
        snprintf(s->message, sizeof(s->message), "%.223s", err->message);
        char part[200];
        snprintf(part, sizeof(part), "direct was refused (%.150s)", err->message);
        kd_auto_why(st, part);
        kd_err_clear(err);
        return 0;
    }
    st->direct_ran = 1;
    st->singular = st->info.singular;
    int converged = 1;
    double worst = 0.0;
    const kd_direct_column_t *bad = NULL;
    for (int64_t k = 0; k < q->nrhs; k++) {
        const kd_direct_column_t *c = &st->cols[k];
        converged &= strcmp(c->status, "converged") == 0;
        worst = fmax(worst, c->relative);
        if (c->refinements > s->iterations)
            s->iterations = c->refinements;
        if (bad == NULL && strcmp(c->status, "converged") != 0)
            bad = c;
    }
    st->direct_worst = worst;
    s->status = bad != NULL ? bad->status : "converged";
    s->relative_residual = worst;
    snprintf(s->message, sizeof(s->message), "%.223s",
             bad != NULL ? bad->message : st->info.message);
    char part[200];
    snprintf(part, sizeof(part), "direct found the matrix %.150s", st->info.message);
    if (st->singular)
        kd_auto_why(st, part);
    else if (bad != NULL)
        kd_auto_why(st, "direct stagnated (the matrix is ill-conditioned)");
    return converged;
}

/* Each column's message: what auto did before (`why`), then the column's own; ran NULL (none
 * converged): the column's own first ("the matrix is numerically singular ..."), then `why`. */
static void kd_auto_prefix(char *message, size_t cap, const char *why, const char *ran)
{
    char msg[640];
    if (why[0] == '\0')
        return;
    if (ran != NULL)
        snprintf(msg, sizeof(msg), "auto: %.255s; %.63s%s%.255s", why, ran,
                 message[0] != '\0' ? ": " : "", message);
    else
        snprintf(msg, sizeof(msg), "%.255s%sauto: %.255s", message, message[0] != '\0' ? " (" : "",
                 why);
    const size_t len = strlen(msg);
    if (ran == NULL && message[0] != '\0' && len + 1 < sizeof(msg))
        memcpy(msg + len, ")", 2);
    snprintf(message, cap, "%.255s", msg);
}

/* The answer: the attempt that converged (last), else direct's "singular", else the closest. */
static int kd_auto_answer(kd_auto_state_t *st, kd_job_t *job, kd_store_entry_t *entry,
                          int converged_by, uint64_t t0, kd_writer_t *w, kd_err_t *err)
{
    const kd_solve_request_t *q = st->q;
    const int use_direct =
        converged_by == 'd' || (converged_by == 0 && st->direct_ran &&
                                (st->singular || st->direct_worst < st->krylov_worst));
    if (!use_direct && st->results == NULL)
        return kd_err_set(err, KD_EBADREQ, "method auto: no attempt could be set up: %.400s",
                          st->why);
    void *xout = kd_handlers_alloc_values(q->b.count, q->dtype, err);
    if (xout == NULL)
        return err->code;
    char ran[64] = "";
    if (use_direct) {
        snprintf(ran, sizeof(ran), "direct ran instead");
        for (int64_t k = 0; k < q->nrhs; k++)
            kd_auto_prefix(st->cols[k].message, sizeof(st->cols[k].message), st->why,
                           converged_by != 0 ? ran : NULL);
        kd_convert_real(xout, q->dtype, st->X, KD_DTYPE_F64, (size_t)st->count);
        kd_direct_write(w, job, &st->info, st->cols, st->solve_ms, xout, t0, &st->trail);
    } else {
        char label[40];
        kd_auto_label(label, sizeof(label), st->params.method->name, st->params.precond->name);
        snprintf(ran, sizeof(ran), "%s ran instead", label);
        /* the converged attempt's why lists only those before it */
        for (int64_t k = 0; k < q->nrhs; k++)
            kd_auto_prefix(st->results[k].message, sizeof(st->results[k].message), st->why,
                           converged_by != 0 ? ran : NULL);
        kd_convert_real(xout, q->dtype, st->x, entry->dev->dtype, (size_t)st->count);
        kd_solve_job_reply_auto(w, job, &st->params, st->results, xout, t0, st->setup, &st->trail);
    }
    free(xout);
    return KD_OK;
}

/* b (and x0) in the matrix's dtype for the Krylov attempts, and in double for direct's. */
static int kd_auto_inputs(const kd_solve_request_t *q, kd_dtype_t dtype, void **b, void **x0,
                          double **B, kd_err_t *err)
{
    const size_t count = (size_t)q->b.count;
    *b = kd_handlers_alloc_values(q->b.count, dtype, err);
    *x0 = q->x0.present ? kd_handlers_alloc_values(q->x0.count, dtype, err) : NULL;
    *B = malloc((count > 0 ? count : 1) * sizeof(double));
    if (*b == NULL || (q->x0.present && *x0 == NULL) || *B == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %zu values", count);
    kd_convert_real(*b, dtype, q->b.data, q->b.dtype, count);
    if (*x0 != NULL)
        kd_convert_real(*x0, dtype, q->x0.data, q->x0.dtype, count);
    kd_convert_real(*B, KD_DTYPE_F64, q->b.data, q->b.dtype, count);
    return KD_OK;
}

int kd_handle_solve_auto(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                         kd_writer_t *w, kd_err_t *err)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    kd_matrix_t *A = entry->dev;
    assert(A != NULL && A->rows == A->cols);
    const uint64_t t0 = kd_clock_ns();
    kd_auto_try_t plan[KD_AUTO_STEPS_MAX];
    size_t nplan = 0;
    const kd_direct_ops_t *ops = NULL;
    int rc = kd_auto_prepare(A, q, &ops, plan, &nplan, err);
    if (rc != KD_OK)
        return rc;
    kd_auto_state_t st;
    memset(&st, 0, sizeof(st));
    st.q = q;
    st.count = q->b.count;
    st.krylov_worst = INFINITY;
    st.direct_worst = INFINITY;
    void *b = NULL, *x0 = NULL;
    double *B = NULL;
    st.X = malloc((size_t)(st.count > 0 ? st.count : 1) * sizeof(double));
    st.cols = calloc((size_t)q->nrhs, sizeof(*st.cols));
    if (st.X == NULL || st.cols == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld values", (long long)st.count);
    if (rc == KD_OK)
        rc = kd_auto_inputs(q, A->dtype, &b, &x0, &B, err);
    /* NaN or Inf in A or b: the Krylov attempt says non_finite where; a factor would not */
    int finite = A->scan.non_finite_count == 0;
    for (int64_t i = 0; rc == KD_OK && finite && i < st.count; i++)
        finite = isfinite(B[i]);
    int converged_by = 0, broke = 0;
    for (size_t i = 0; rc == KD_OK && i < nplan && converged_by == 0; i++) {
        const kd_auto_try_t *t = &plan[i];
        if ((t->after_breakdown && !broke) || (!finite && strcmp(t->method, KD_METHOD_DIRECT) == 0))
            continue;
        const int stop = atomic_load(&job->cancel); /* between attempts too */
        if (stop != 0) {
            rc = kd_err_set(err, stop, "solve cancelled (method auto, after %d attempts)",
                            st.trail.count);
            break;
        }
        int done;
        if (strcmp(t->method, KD_METHOD_DIRECT) == 0) {
            done = kd_auto_direct(server, entry, &st, ops, B, err);
            broke = 0;
        } else {
            done = kd_auto_krylov(server, entry, job, &st, t, b, x0, &broke, err);
        }
        if (done < 0)
            rc = done;
        else if (done == 1)
            converged_by = strcmp(t->method, KD_METHOD_DIRECT) == 0 ? 'd' : 'k';
        else if (done == 2 || (st.direct_ran && !st.singular))
            break; /* non_finite; or the factor's x, refined, is as close as the dtype gets */
    }
    if (rc == KD_OK) {
        KD_INFO("solve", "auto on matrix %s: %d attempts, %s%s", entry->meta.hex, st.trail.count,
                converged_by != 0 ? "converged by " : "none converged",
                converged_by == 'd'   ? "direct"
                : converged_by == 'k' ? st.params.method->name
                                      : "");
        rc = kd_auto_answer(&st, job, entry, converged_by, t0, w, err);
    }
    if (st.results != NULL)
        for (int64_t k = 0; k < q->nrhs; k++)
            kd_solve_result_free(&st.results[k]);
    free(st.results);
    kd_recycle_free(st.x);
    free(st.X);
    free(st.cols);
    free(b);
    free(x0);
    free(B);
    return rc;
}
