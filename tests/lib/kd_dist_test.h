/*
 * Shared pieces of the distributed-matrix tests (test_dist_plan.c without MPI, test_dist_*.c
 * under mpirun): the shapes that break naive partitioning and halo code, built the same way on
 * every rank (the seed is fixed per shape, so all ranks make the same matrix without talking).
 */
#ifndef KD_DIST_TEST_H
#define KD_DIST_TEST_H

#include "common/csr.h"
#include "kd_test.h"

#include <stdio.h>
#include <stdlib.h>

/* A small deterministic generator, independent of kd_test.h's per-run seed. */
static inline uint64_t kd_dist_test_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline double kd_dist_test_unit(uint64_t *s) /* [-1, 1) */
{
    return (double)(kd_dist_test_next(s) >> 11) / 4503599627370496.0 - 1.0;
}

static inline kd_csr_t *kd_dist_test_csr(int64_t n, int64_t nnz, int64_t *row, int64_t *col,
                                         double *val)
{
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    if (kd_csr_from_coo_arrays(n, n, nnz, row, col, KD_DTYPE_I64, val, KD_DTYPE_F64, KD_DTYPE_F64,
                               NULL, &m, &err) != KD_OK) {
        fprintf(stderr, "building a test matrix: %s\n", err.message);
        exit(2);
    }
    return m;
}

enum kd_dist_test_shape {
    KD_DIST_SHAPE_RANDOM,      /* random pattern, about 5 a row, some rows empty */
    KD_DIST_SHAPE_EMPTY_ROWS,  /* every third row empty, a run of 10 empty rows at the start */
    KD_DIST_SHAPE_DENSE_CROSS, /* row 0 and column 0 full, a diagonal: one rank owns row 0 */
    KD_DIST_SHAPE_TAIL_HEAVY,  /* the last row full, the others diagonal: a rank has no rows */
    KD_DIST_SHAPE_EMPTY,       /* no nonzeros at all */
    KD_DIST_SHAPE_SPD,         /* symmetric, strictly diagonally dominant, positive diagonal */
    KD_DIST_SHAPES
};

static inline const char *kd_dist_test_shape_name(int shape)
{
    static const char *names[] = {"random",     "empty_rows", "dense_cross",
                                  "tail_heavy", "empty",      "spd"};
    return names[shape];
}

/* Shape `shape` with n rows (n >= 1), the same matrix for the same (shape, n, seed). */
static inline kd_csr_t *kd_dist_test_shape(int shape, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 2654435761u + (uint64_t)shape * 97u + (uint64_t)n + 1u;
    const int64_t cap = 12 * n + 4 * n + 16;
    int64_t *row = malloc((size_t)cap * sizeof(int64_t)),
            *col = malloc((size_t)cap * sizeof(int64_t));
    double *val = malloc((size_t)cap * sizeof(double));
    if (row == NULL || col == NULL || val == NULL)
        exit(2);
    int64_t m = 0;
#define KD_PUT(r, c, v) (row[m] = (r), col[m] = (c), val[m] = (v), m++)
    for (int64_t i = 0; i < n; i++) {
        switch (shape) {
        case KD_DIST_SHAPE_RANDOM: {
            const int64_t len = (int64_t)(kd_dist_test_next(&s) % 11);
            for (int64_t k = 0; k < len; k++)
                KD_PUT(i, (int64_t)(kd_dist_test_next(&s) % (uint64_t)n), kd_dist_test_unit(&s));
            break;
        }
        case KD_DIST_SHAPE_EMPTY_ROWS:
            if (i < 10 || i % 3 == 0)
                break;
            for (int64_t k = 0; k < 4; k++)
                KD_PUT(i, (int64_t)(kd_dist_test_next(&s) % (uint64_t)n), kd_dist_test_unit(&s));
            break;
        case KD_DIST_SHAPE_DENSE_CROSS:
            if (i == 0)
                for (int64_t j = 0; j < n; j++)
                    KD_PUT(0, j, kd_dist_test_unit(&s));
            else {
                KD_PUT(i, 0, kd_dist_test_unit(&s));
                KD_PUT(i, i, 2.0 + kd_dist_test_unit(&s));
            }
            break;
        case KD_DIST_SHAPE_TAIL_HEAVY:
            if (i == n - 1)
                for (int64_t j = 0; j < n; j++)
                    KD_PUT(i, j, kd_dist_test_unit(&s));
            else
                KD_PUT(i, i, 1.5 + kd_dist_test_unit(&s));
            break;
        case KD_DIST_SHAPE_EMPTY:
            break;
        case KD_DIST_SHAPE_SPD: {
            /* off-diagonal pairs within a band and a few far ones, mirrored */
            double sum = 0.0;
            for (int64_t k = 0; k < 3; k++) {
                const int64_t j = k < 2 ? i - 1 - (int64_t)(kd_dist_test_next(&s) % 7)
                                        : (int64_t)(kd_dist_test_next(&s) % (uint64_t)n);
                if (j < 0 || j >= i)
                    continue;
                const double v = kd_dist_test_unit(&s);
                KD_PUT(i, j, v);
                KD_PUT(j, i, v);
                sum += 2.0 * (v < 0 ? -v : v); /* bounds both rows' shares */
            }
            KD_PUT(i, i, 1.0 + sum + 0.5 * (kd_dist_test_unit(&s) + 1.0));
            break;
        }
        }
    }
#undef KD_PUT
    if (shape == KD_DIST_SHAPE_SPD) {
        /* a row's diagonal must dominate the entries mirrored into it from later rows too */
        kd_csr_t *a = kd_dist_test_csr(n, m, row, col, val);
        for (int64_t i = 0; i < n; i++) {
            double off = 0.0;
            int64_t at = -1;
            for (int64_t e = a->indptr[i]; e < a->indptr[i + 1]; e++) {
                double *v = (double *)a->values + e;
                if (a->indices[e] == i)
                    at = e;
                else
                    off += *v < 0 ? -*v : *v;
            }
            ((double *)a->values)[at] = off + 1.0 + 0.25 * (double)(i % 5);
        }
        free(row);
        free(col);
        free(val);
        return a;
    }
    kd_csr_t *a = kd_dist_test_csr(n, m, row, col, val);
    free(row);
    free(col);
    free(val);
    return a;
}

#endif
