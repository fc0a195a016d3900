/*
 * Preconditioners: an M close to A whose z = M^-1 r is cheap, so that a Krylov method converges in
 * fewer iterations. Each is one file, solver/precond/<name>.c, exporting one kd_precond_ops_t,
 * and one row of kd_precond_table (solver/precond/table.c), where the protocol finds it by name;
 * what they all share is solver/precond/precond.c, which names none of them.
 *
 * A preconditioner offers itself in one or more forms, and a method (solver/methods/method.h) says
 * which forms it can apply: the identity (nothing to do), a diagonal (the vector passes multiply by
 * 1/m_ii on the fly, fused into what they read anyway), or an operator (a launch that writes z
 * from r). What setup builds lives with the matrix: kd_precond_get sets it up on first use, keeps
 * it in the matrix (counted in its device_bytes) and frees it with the matrix, so an evicted
 * matrix drops it and a reloaded one builds it again. A new matrix of the same pattern (a time
 * step's) can take a held setup's pattern-only parts through kd_precond_refresh and the
 * preconditioner's optional refresh op.
 */
#ifndef KD_SOLVER_PRECOND_H
#define KD_SOLVER_PRECOND_H

#include "solver/matrix.h"
#include "solver/vector.h"

enum kd_precond_form {
    KD_PRECOND_IDENTITY = 1, /* M = I */
    KD_PRECOND_DIAGONAL = 2, /* M diagonal: kd_precond_t.diagonal holds 1/m_ii */
    KD_PRECOND_OPERATOR = 4, /* ops->apply launches z = M^-1 r */
};

/* Named numbers a request passes to a preconditioner's setup (`preconditioner_options` on the
 * wire: amg's threshold, max_levels, ...). Each preconditioner lists the names it takes. */
#define KD_PRECOND_OPTIONS_MAX 8
#define KD_PRECOND_OPTION_NAME 24
typedef struct kd_precond_options {
    int count;
    struct {
        char name[KD_PRECOND_OPTION_NAME];
        double value;
    } items[KD_PRECOND_OPTIONS_MAX];
} kd_precond_options_t;

/* The value of option `name` in opt (may be NULL), or `fallback`. */
double kd_precond_option(const kd_precond_options_t *opt, const char *name, double fallback);

typedef struct kd_precond {
    const struct kd_precond_ops *ops;
    kd_precond_options_t options; /* what setup was given: a request with others rebuilds it */
    cl_mem diagonal;     /* KD_PRECOND_DIAGONAL: n values of 1/m_ii in the matrix's dtype */
    void *impl;          /* the preconditioner's own */
    size_t device_bytes; /* counted in the matrix's */
    /* A fingerprint of the host CSR's pattern setup was given (kd_precond_pattern), 0 when it
     * was given none: what kd_precond_refresh checks a new matrix's pattern against. */
    uint64_t pattern;
    struct kd_precond *next; /* the matrix's list */
} kd_precond_t;

typedef struct kd_precond_ops {
    const char *name;    /* on the wire: "jacobi" */
    const char *summary; /* one line for server.status */
    unsigned forms;      /* enum kd_precond_form bits */
    int symmetric;       /* M is symmetric positive definite whenever A is: CG may use it */
    /* The device bytes setup will take (before anything is allocated). */
    size_t (*plan_bytes)(const kd_matrix_t *A);
    int needs_csr; /* setup needs A's host CSR (kd_precond_get's csr must not be NULL) */
    /* The option names setup takes (NULL-terminated; NULL: none), checked before setup. */
    const char *const *option_names;
    /* May be NULL. Before setup, for a method that needs M positive definite (definite = 1:
     * cg, minres, ...) or not (gmres, bicgstab): KD_ENOTSPD naming what shows that M built on
     * A cannot be (jacobi: a negative a_ii), else KD_OK. */
    int (*check)(const kd_matrix_t *A, int definite, kd_err_t *err);
    /* Check A (KD_EBADREQ naming the row) and build P's device data. csr: A's
     * canonical host CSR in the client's order (a reordered A stores P A P^T), or NULL. */
    int (*setup)(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr, kd_precond_t *P,
                 kd_err_t *err);
    /* KD_PRECOND_OPERATOR: z = M^-1 r for every column (enqueued). */
    int (*apply)(kd_ocl_t *ocl, const kd_precond_t *P, const kd_multivec_t *r, kd_multivec_t *z,
                 kd_err_t *err);
    /* Values per row and right-hand side that apply keeps on the device during a solve of
     * several columns (amg's block V-cycle vectors): the solve's reservation counts them. */
    int block_values;
    /* May be NULL. The solve that applied P is over: free what apply kept for its columns. */
    void (*finish)(const kd_precond_t *P);
    /* Free what setup built (not P itself). */
    void (*release)(kd_precond_t *P);
    /*
     * May be NULL: nothing to reuse, kd_precond_refresh runs setup. Otherwise setup's job for A
     * from `old`, set up (with P's options) on a matrix of the same pattern (kd_precond_refresh
     * checked: rows, columns, entries' positions, dtype and stored order) but other values,
     * reusing what depends on the pattern alone and recomputing the rest. old stays valid and
     * unchanged (a solve on its matrix may be running): what P shares with it is retained
     * (clRetainMemObject) or copied, never moved, and each frees its own. csr as for setup.
     * *declined = 1 (P untouched, KD_OK) when these values need what refresh cannot reuse (ilu0
     * whose row matching depends on them): the caller runs setup instead. On failure the caller
     * releases P.
     */
    int (*refresh)(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                   const kd_csr_t *csr, kd_precond_t *P, int *declined, kd_err_t *err);
} kd_precond_ops_t;

/* Every preconditioner this build has, "none" first. */
extern const kd_precond_ops_t *const kd_precond_table[];
extern const size_t kd_precond_count;

extern const kd_precond_ops_t kd_precond_none;
extern const kd_precond_ops_t kd_precond_jacobi;
extern const kd_precond_ops_t kd_precond_amg;
extern const kd_precond_ops_t kd_precond_ilu0;
extern const kd_precond_ops_t kd_precond_ic0;
extern const kd_precond_ops_t kd_precond_block_jacobi;
extern const kd_precond_ops_t kd_precond_chebyshev;

/* The preconditioner named `name`, or NULL. */
const kd_precond_ops_t *kd_precond_find(const char *name);

/* "none, jacobi": the table's names, for messages. */
void kd_precond_names(char *out, size_t cap);

/*
 * A's preconditioner `ops`, set up on first use and kept with A (A->device_bytes grows by its
 * bytes); *out stays valid until A is freed. "none" needs no setup: *out is a static identity.
 * csr: A's host CSR (client order) for a preconditioner that needs_csr, else may be NULL;
 * KD_EINTERNAL when one that needs it is set up without it.
 */
int kd_precond_get(kd_ocl_t *ocl, kd_matrix_t *A, const kd_precond_ops_t *ops,
                   const kd_precond_options_t *options, const kd_csr_t *csr,
                   const kd_precond_t **out, kd_err_t *err);

/* Whether A already holds preconditioner `ops` set up with `options` (may be NULL): then
 * kd_precond_get needs no host CSR. */
int kd_precond_ready(const kd_matrix_t *A, const kd_precond_ops_t *ops,
                     const kd_precond_options_t *options);

/* KD_EBADREQ when options (may be NULL) names an option `ops` does not take, listing those it
 * does, or holds a value that is not finite. */
int kd_precond_check_options(const kd_precond_ops_t *ops, const kd_precond_options_t *options,
                             kd_err_t *err);

/* How kd_precond_refresh got A's preconditioner. */
typedef enum kd_precond_origin {
    KD_PRECOND_HELD = 0,      /* A held it already (or it needs no setup: "none") */
    KD_PRECOND_REFRESHED = 1, /* from like's setup, its pattern-only parts reused */
    KD_PRECOND_BUILT = 2,     /* set up from scratch: no refresh, like held none, or declined */
} kd_precond_origin_t;

/* "held", "refreshed", "built fresh": for replies and logs. */
const char *kd_precond_origin_name(kd_precond_origin_t origin);

/* A 64-bit fingerprint of csr's pattern (rows, cols, nnz, row pointers, column indices; not
 * values or dtype), never 0. */
uint64_t kd_precond_pattern(const kd_csr_t *csr);

/*
 * New values on a resident pattern (time stepping): A's preconditioner `ops` with `options`, as
 * kd_precond_get, but built from `like`'s when like holds one with those options and ops can
 * refresh (only the values' part of setup recomputed), else set up from scratch. like is left
 * unchanged. csr: A's host CSR (client order), required: its pattern must be like's, which
 * kd_precond_refresh checks against what like's setup recorded (kd_precond_get records it when
 * given a host CSR), with rows, columns, nnz, dtype and stored order (KD_EBADREQ naming what
 * differs, before anything is built). The setup of one that needs_csr recorded no pattern when
 * it was made without a CSR: it is not vouched for, and A's is built fresh. *origin (may be
 * NULL) says which happened. Other errors as kd_precond_get's and the refresh's.
 */
int kd_precond_refresh(kd_ocl_t *ocl, const kd_matrix_t *like, kd_matrix_t *A,
                       const kd_precond_ops_t *ops, const kd_precond_options_t *options,
                       const kd_csr_t *csr, const kd_precond_t **out, kd_precond_origin_t *origin,
                       kd_err_t *err);

/*
 * Every preconditioner like holds, onto A through kd_precond_refresh (what matrix.put `like:`
 * carries over): *refreshed and *built (either may be NULL) count how each came. Stops at the
 * first failure (those done stay with A).
 */
int kd_precond_refresh_all(kd_ocl_t *ocl, const kd_matrix_t *like, kd_matrix_t *A,
                           const kd_csr_t *csr, int *refreshed, int *built, kd_err_t *err);

/* Free every preconditioner kept with A (kd_matrix_free calls it). */
void kd_precond_release_all(kd_matrix_t *A);

#endif
