/*
 * Sparse direct solves on the host (issue 37): a matrix's LU or Cholesky factorisation, computed
 * once through SuiteSparse and kept with the matrix (kd_matrix_t.direct), so that later solves
 * only run the triangular solves. Each factorisation library is one file of this folder behind a
 * kd_direct_ops_t, one row of kd_direct_table (table.c): klu (sparse LU made for circuit
 * matrices: BTF, AMD, partial pivoting), umfpack (multifrontal LU for general matrices) and
 * cholmod (supernodal Cholesky for symmetric positive definite matrices). direct.c names none of
 * them: it copies A into double, runs the library's symbolic analysis, charges the factor's
 * estimated bytes to a host budget before the numeric factorisation, keeps the factor, and
 * solves with it (with a step of iterative refinement where the residual calls for one).
 *
 * Everything here runs on the host and may take long (seconds for a large factor): the server
 * runs it on a helper thread, never on its event loop (server/handlers/direct.c).
 *
 * The libraries take compressed columns; a canonical kd_csr_t read as compressed columns is A^T,
 * so the LU libraries factor A^T and solve with its transpose (klu_tsolve, UMFPACK_At), and
 * cholmod factors A (symmetric) as it is. A is the client's order (the host CSR), whatever order
 * the device keeps.
 */
#ifndef KD_SOLVER_DIRECT_H
#define KD_SOLVER_DIRECT_H

#include "common/csr.h"
#include "common/error.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct kd_matrix;

/* The name a solve request gives for a direct solve (method: "direct"). */
#define KD_METHOD_DIRECT "direct"

/* The host memory that factors kept with matrices may take together (--factor-memory): a
 * factor's estimate is charged before its numeric factorisation, and given back when the
 * factor is freed (with its matrix, on any thread). */
typedef struct kd_direct_budget {
    size_t limit;       /* bytes; 0: no factor at all */
    atomic_size_t used; /* bytes charged by the factors alive */
} kd_direct_budget_t;

typedef struct kd_direct kd_direct_t;

/* One factorisation library. The matrix it sees is n x n in compressed columns (indptr,
 * indices: int32; values: double), A^T of the client's matrix for an LU, A for a Cholesky. */
typedef struct kd_direct_ops {
    const char *name;    /* on the wire (direct_options.solver): "klu" */
    const char *summary; /* one line for server.status */
    int cholesky;        /* it needs a symmetric positive definite matrix */
    /* The symbolic analysis into *state, and the estimate of the numeric factor's entries and
     * bytes. KD_OK; KD_ENOMEM; *singular = 1 with a message in `why` for a structurally
     * singular matrix (state is then freed). */
    int (*analyze)(int64_t n, const int32_t *colptr, const int32_t *rows, const double *values,
                   void **state, double *entries, double *bytes, int *singular, char *why,
                   size_t whylen, kd_err_t *err);
    /* The numeric factorisation on the analysis; the factor's actual entries and bytes.
     * *singular = 1 (numerically singular, or not positive definite for a Cholesky) with `why`. */
    int (*factor)(void *state, const int32_t *colptr, const int32_t *rows, const double *values,
                  int64_t *entries, size_t *bytes, int *singular, char *why, size_t whylen,
                  kd_err_t *err);
    /* May be NULL (the caller factors afresh). New values on like_state's pattern, reusing its
     * analysis: a new state in *state with the new factor, or *declined = 1 with `why` when the
     * kept pivot order fails these values (the caller then factors afresh, *state NULL). What
     * like_state's solves need stays valid unless *like_spent = 1: the library moved its factor
     * over (klu: klu_refactor works in place), and the caller drops like's factor. */
    int (*refactor)(void *like_state, void **state, const int32_t *colptr, const int32_t *rows,
                    const double *values, int64_t *entries, size_t *bytes, int *declined,
                    int *like_spent, char *why, size_t whylen, kd_err_t *err);
    /* B (n x nrhs, column-major, leading dimension n) overwritten by the solution of the
     * client's system A X = B. */
    int (*solve)(void *state, const int32_t *colptr, const int32_t *rows, const double *values,
                 int64_t nrhs, double *B, kd_err_t *err);
    void (*release)(void *state);
} kd_direct_ops_t;

/* Every library of this build, klu first (the default LU); empty without SuiteSparse. */
extern const kd_direct_ops_t *const kd_direct_table[];
extern const size_t kd_direct_count;

extern const kd_direct_ops_t kd_direct_klu;
extern const kd_direct_ops_t kd_direct_umfpack;
extern const kd_direct_ops_t kd_direct_cholmod;

/* The library named `name`, or NULL. */
const kd_direct_ops_t *kd_direct_find(const char *name);

/* "klu, umfpack, cholmod": the table's names, for messages. */
void kd_direct_names(char *out, size_t cap);

/* How a factorisation went: for the solve's reply and logs. */
typedef struct kd_direct_info {
    const char *solver;           /* the library that holds the factor */
    int factored;                 /* this call factored (0: the factor was held) */
    int refactored;               /* ... numerically on a kept analysis (kd_direct_refactor) */
    int singular;                 /* no factor: structurally or numerically singular */
    int64_t factor_entries;       /* nnz(L) + nnz(U) (LU) or nnz(L) (Cholesky) */
    size_t factor_bytes;          /* the host memory the factor holds, A's copy included */
    double estimate_bytes;        /* what the analysis estimated, charged to the budget */
    double fill;                  /* factor_entries / nnz(A) */
    double analyze_ms, factor_ms; /* of the factorisation that made the factor */
    char message[256];            /* singular: why; a fallback (cholmod to klu): what happened */
} kd_direct_info_t;

/*
 * A's factor with library `ops` (NULL: cholmod when A looks SPD, with klu when cholmod finds it
 * is not positive definite, else klu), kept in *out (the caller stores it in the matrix: what
 * kd_matrix_free frees). csr: A's canonical host CSR in the client's order, square; float32
 * values are factored in double. Before the numeric factorisation the analysis's estimate
 * (with A's copy) is charged to budget: KD_ETOOLARGE naming the estimate, the budget and what
 * other factors hold when it does not fit. A singular A is KD_OK with *out NULL and
 * info->singular = 1 (info->message says structurally or numerically, and where). looks_spd:
 * the matrix scan's flag. KD_ENOMEM, KD_EUNSUPPORTED (a build without SuiteSparse).
 */
int kd_direct_factor(const kd_csr_t *csr, int looks_spd, const kd_direct_ops_t *ops,
                     kd_direct_budget_t *budget, kd_direct_t **out, kd_direct_info_t *info,
                     kd_err_t *err);

/*
 * New values on like's pattern (matrix.put with like, issue 37 item 2): a factor of csr on like's
 * kept analysis through the library's refactor (klu_refactor on like's pivot order; umfpack's
 * numeric phase on its symbolic object; cholmod's numeric factorisation in a copy of its
 * supernodal L), info->refactored = 1; where the kept pivots fail the new values, a fresh
 * factorisation (info->message says why). csr's pattern must be like's (KD_EBADREQ otherwise,
 * nothing done). *like_spent = 1 when like's factor moved into the new one (klu): the caller
 * frees like's (kd_direct_keep(like matrix, NULL)); else like's stays as it was. budget as
 * kd_direct_factor (the estimate is like's factor's size).
 */
int kd_direct_refactor(kd_direct_t *like, const kd_csr_t *csr, kd_direct_budget_t *budget,
                       kd_direct_t **out, kd_direct_info_t *info, int *like_spent, kd_err_t *err);

/* What D is: its library, size and times (info->factored = 0). */
void kd_direct_describe(const kd_direct_t *D, kd_direct_info_t *info);

/* Whether D is a factor by `ops` (NULL: any). */
int kd_direct_is(const kd_direct_t *D, const kd_direct_ops_t *ops);

/*
 * X = A^-1 B for nrhs columns (column-major, n each, double), with up to two steps of
 * iterative refinement where ||b - A x|| is above 64 eps ||A|| ||x||; residual_norms[k] =
 * ||b_k - A x_k|| (in double, on D's copy of A) and refinements[k] the steps taken.
 */
int kd_direct_solve(const kd_direct_t *D, int64_t nrhs, const double *B, double *X,
                    double *residual_norms, int *refinements, kd_err_t *err);

/* Free D and give its bytes back to its budget; accepts NULL. Any thread. */
void kd_direct_free(kd_direct_t *D);

/* The factor kept with matrix A, or NULL; keep D with A (freeing the one held). */
kd_direct_t *kd_direct_of(const struct kd_matrix *A);
void kd_direct_keep(struct kd_matrix *A, kd_direct_t *D);

#endif
