/*
 * Krylov methods as a table. Each method is one file, solver/methods/<name>.c, exporting one
 * kd_method_ops_t, and one row of kd_method_table (solver/methods/table.c), where the protocol
 * finds it by its wire name and server.status lists it. A method is written against
 * solver/methods/krylov.h's vector operations (fused dot products, axpy-like updates,
 * kd_krylov_reduce), the matrix's SpMV (kd_solve_spmv) and its preconditioner (both in
 * solver/methods/method.c, which names no method); it never sees the host's checks, confirmations,
 * restarts' bookkeeping or results, which solver/solve.c runs the same way for every method.
 *
 * What every method shares: the driver computes r = b - A x0 into run->r, then calls setup
 * (which sets the first direction and the column state of iteration 0), then iterate once per
 * iteration (nothing waits), and from time to time reads the columns' device state (statuses and
 * scalars in kernels/methods/krylov_abi.h). A column whose recurrence claims convergence is
 * confirmed with b - A x; a miss puts the true residual in run->r and calls restart for that
 * column.
 */
#ifndef KD_SOLVER_METHOD_H
#define KD_SOLVER_METHOD_H

#include "solver/methods/krylov.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

typedef struct kd_solve_run kd_solve_run_t;

/* What a method requires of the matrix (kd_method_ops_t.needs). */
enum kd_method_need {
    KD_METHOD_NEEDS_SQUARE = 1,
    KD_METHOD_NEEDS_SYMMETRIC = 2,
    KD_METHOD_NEEDS_SPD = 4, /* symmetric positive definite (and so a symmetric preconditioner) */
};

#define KD_METHOD_WORK_MAX 8 /* work vectors per column a method may ask for */

typedef struct kd_method_ops {
    const char *name;       /* on the wire: "cg" */
    const char *summary;    /* one line for server.status */
    unsigned needs;         /* enum kd_method_need bits */
    unsigned precond_forms; /* the preconditioner forms (enum kd_precond_form) it can apply */
    int work_vectors;       /* device vectors per column besides b, x, r and q */
    int reductions;         /* kd_krylov_reduce calls per iteration */
    int spmvs;              /* matrix-vector products per iteration (0 reads as 1) */
    int spreads;            /* it runs on a matrix spread over ranks: every partial sum it leaves
                               is one of krylov.c's passes' (kd_krylov_combine knows them) */
    /* The byte floor of one iteration of one column, in n-vector reads and writes beyond its
     * SpMVs' own (each reads its input and writes its output once), with the identity
     * preconditioner and every pass fused that can be: what bench/ prices an iteration at. The
     * algorithm's, not this implementation's (params: restart for gmres). */
    double (*floor_vectors)(const kd_solve_params_t *params);
    /* After r = b - A x0: the first direction and the state of iteration 0 of every column. */
    int (*setup)(kd_solve_run_t *run, kd_err_t *err);
    /* Enqueue iteration `iteration` (1-based) of every running column; nothing waits. */
    int (*iterate)(kd_solve_run_t *run, int64_t iteration, kd_err_t *err);
    /* Optional: enqueue iterations first .. first + count - 1 at once, leaving the device state
     * iterate would have left; the driver calls it instead of iterate when setup set
     * run->chunked (cg on a small matrix: kernels/methods/cg_small.cl). */
    int (*iterate_chunk)(kd_solve_run_t *run, int64_t first, int64_t count, kd_err_t *err);
    /* Start the columns with KD_KRYLOV_MASK_PARTIALS in mask over from the residual in run->r,
     * as of iteration `iteration` (mask: k ints, KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART
     * where a column restarts, 0 elsewhere; the method may add bits). */
    int (*restart)(kd_solve_run_t *run, int *mask, int64_t iteration, kd_err_t *err);
    /* A column's device state `st` that is final (breakdown, non-finite) into res's status,
     * iterations (less `skip`, the iterations not counted) and message; returns 1, or 0 for a
     * state the driver handles (running, converged, stopped). */
    int (*check)(const kd_solve_run_t *run, const kd_krylov_column_t *st, int64_t skip,
                 kd_solve_result_t *res);
    /* Free what setup made beyond the work vectors (may be NULL). */
    void (*finish)(kd_solve_run_t *run);
} kd_method_ops_t;

/* Every method this build has; cg first (the default). */
extern const kd_method_ops_t *const kd_method_table[];
extern const size_t kd_method_count;

extern const kd_method_ops_t kd_method_cg;
extern const kd_method_ops_t kd_method_sd;
extern const kd_method_ops_t kd_method_cg1;
extern const kd_method_ops_t kd_method_bicgstab;
extern const kd_method_ops_t kd_method_minres;
extern const kd_method_ops_t kd_method_gmres;

/* Names the protocol accepts for a method with a preconditioner ("pcg": cg with jacobi). */
typedef struct kd_method_alias {
    const char *name;
    const char *method;
    const char *precond;
} kd_method_alias_t;

extern const kd_method_alias_t kd_method_aliases[];
extern const size_t kd_method_alias_count;

/* The method named `name` (not an alias), or NULL. */
const kd_method_ops_t *kd_method_find(const char *name);

/*
 * The method and preconditioner a request names: method NULL or "" is cg; an alias names both
 * (an explicit preconditioner overrides the alias's); preconditioner NULL or "" is none. An
 * unknown name is KD_EBADREQ listing the known ones; so is a method that cannot apply the
 * preconditioner (its forms, or a nonsymmetric M for a method that needs SPD).
 */
int kd_method_choose(const char *method, const char *preconditioner, const kd_method_ops_t **m,
                     const kd_precond_ops_t **p, kd_err_t *err);

/* "cg, sd, cg1 (pcg = cg + jacobi)": the table's names, for messages. */
void kd_method_names(char *out, size_t cap);

/* The name a request gives to let the server pick the method for the matrix (kd_method_auto). */
#define KD_METHOD_AUTO "auto"

/* What "auto" runs when its first choice `failed` broke down (cg on a matrix that looked SPD but
 * is indefinite: minres, or gmres where minres cannot take p), or NULL when there is no second
 * choice. */
const kd_method_ops_t *kd_method_auto_next(const kd_method_ops_t *failed,
                                           const kd_precond_ops_t *p);

/* kd_solve for a method "auto" chose (params->method): where a column broke down and
 * kd_method_auto_next has a second choice, every column again from x0 with it (params->method
 * becomes it; each message says what happened). solver/solve_auto.c. */
int kd_solve_auto(kd_ocl_t *ocl, kd_matrix_t *A, int64_t nrhs, const void *b, const void *x0,
                  void *x, kd_solve_params_t *params, kd_solve_result_t *results, kd_err_t *err);

/*
 * The method for A with preconditioner p (kd_precond_none for none): cg when A looks SPD
 * (kd_matrix_scan_t.looks_spd), minres when it is symmetric but does not, gmres otherwise; a name
 * this build lacks, or a method that cannot take p (its forms, or p not symmetric for a method
 * that needs SPD), passes to the next in that order (cg, minres, gmres, bicgstab), then to any
 * method of the table that fits. KD_EBADREQ when none fits, saying why.
 */
int kd_method_auto(const kd_matrix_t *A, const kd_precond_ops_t *p, const kd_method_ops_t **m,
                   kd_err_t *err);

/* kd_method_choose, with method "auto" resolved on A by kd_method_auto. */
int kd_method_choose_for(const kd_matrix_t *A, const char *method, const char *preconditioner,
                         const kd_method_ops_t **m, const kd_precond_ops_t **p, kd_err_t *err);

/* KD_EBADREQ when A lacks what m needs: a square matrix, or an exactly symmetric one for a method
 * that needs symmetry (the message names the first asymmetric entry and the table's methods that
 * do not need it). A matrix holding NaN or Inf passes: the solve answers it non_finite. */
int kd_method_check_matrix(const kd_method_ops_t *m, const kd_matrix_t *A, kd_err_t *err);

/* Whether method m needs a symmetric matrix (and so a positive definite preconditioner). */
int kd_method_needs_symmetry(const kd_method_ops_t *m);

/* One solve as a method sees it (solver/solve.c owns it). */
struct kd_solve_run {
    kd_ocl_t *ocl;
    const kd_matrix_t *A;
    const kd_method_ops_t *method;
    const kd_precond_t *precond; /* set up on A; ops is kd_precond_none without one */
    const kd_solve_params_t *params;
    int64_t k;                /* device columns */
    kd_krylov_t kr;           /* the columns' device state, the passes, the reductions */
    kd_multivec_t b, x, r, q; /* right-hand sides, iterates, residuals, scratch */
    kd_multivec_t work[KD_METHOD_WORK_MAX]; /* the method's work_vectors */
    const kd_format_csr_t *csr; /* the matrix's CSR arrays when its SpMV may be fused with a
                                   pass (csr_scalar, fusion on), else NULL */
    int fused;                  /* the method fuses (it sets this in setup) */
    int chunked;                /* setup chose iterate_chunk: many iterations per launch */
    unsigned char *active;      /* k: 1 while the column is not done (its SpMV runs) */
    void *method_state;         /* the method's own, freed by finish */
};

/* q = A p for every active column (one SpMV launch per column, the matrix's format; one SpMM
 * while at least half the columns run; the spread's SpMM across ranks). solver/methods/method.c. */
int kd_solve_spmv(kd_solve_run_t *run, const kd_multivec_t *p, kd_multivec_t *q, kd_err_t *err);

/*
 * z = M^-1 v for every column, whatever form the run's preconditioner takes: a copy for the
 * identity, a row scaling by 1/m_ii for a diagonal one, the operator's launches for an operator
 * (enqueued; nothing waits). For the methods that apply M apart from their vector passes
 * (bicgstab, gmres, minres); v and z must not alias.
 */
int kd_method_precondition(kd_solve_run_t *run, const kd_multivec_t *v, kd_multivec_t *z,
                           kd_err_t *err);

/* The usual reading of a final device status into a result (for check): breakdown, zero step and
 * the non-finite states, with messages that name the step's quantities (pq_name "p'Ap", rz_name
 * "r'z"). Returns 1 when st is final, 0 otherwise. */
int kd_method_explain(const kd_krylov_column_t *st, int64_t skip, const char *pq_name,
                      const char *rz_name, kd_solve_result_t *res);
/* CG's check (solver/methods/cg.c), shared by cg1: kd_method_explain with p'Ap and r'z (r'r
 * without a preconditioner). */
int kd_method_cg_check(const kd_solve_run_t *run, const kd_krylov_column_t *st, int64_t skip,
                       kd_solve_result_t *res);

#endif
