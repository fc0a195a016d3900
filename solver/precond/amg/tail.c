/*
 * The fused V-cycle's tail (solver/precond/amg/fused.c launches it, kernels/precond/amg/amg.cl's
 * kd_amg_tail runs it): the levels from the first one (>= 1) that fits one work-group down to the
 * coarsest, packed once at setup into the buffers of kernels/precond/amg/amg_abi.h, and the V-cycle
 * over them written out as the list of steps the kernel walks (the same sequence as kd_amg_vcycle).
 * The level matrices are read back from their csr_scalar arrays: the tail's levels are small by
 * construction (at most tail_rows rows and KD_AMG_TAIL_ENTRIES_PER_ITEM entries a work-item).
 */
#include "solver/precond/amg/cycle.h"
#include "solver/formats/format.h"

#include "common/checked.h"
#include "kernels/precond/amg/amg_abi.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Which levels may join the tail, besides tail_rows: a matrix step of the tail is one work-group
 * walking the level's entries, nnz / WG of them for each work-item, at L2 latency with a few loads
 * in flight (on an H100 ~50-100 ns an entry for a work-item); the same step as its own launch
 * costs ~12 us. A level in the tail runs about 4 steps with A (and one each with P and R) where
 * it saves 6 launches, so 128 entries a work-item (~40 us of its matrix steps at WG 256 against
 * ~72 us of launches saved) is about where joining stops paying.
 */
#define KD_AMG_TAIL_ENTRIES_PER_ITEM 128
/* A dense coarsest's inverse is read a row at a time by up to 64 lanes, its columns in order (b
 * stays in L1): about half the cost an entry, so twice the entries (n <= 256 at WG 256). Without
 * it in the tail the tail cannot exist, and a 2-D hierarchy's coarsest is ~220 rows. */
#define KD_AMG_TAIL_DENSE_ENTRIES_PER_ITEM 256

/* A tail level as the step list uses it. */
typedef struct kd_amg_tail_level {
    kd_amg_tail_csr_t A, P, R; /* A: the dense inverse (steps 0) on an inverted coarsest */
    int32_t rows, steps, inv_diagonal, chebyshev;
    int32_t b, x, q, d; /* vectors (kd_amg_tail_vector) */
} kd_amg_tail_level_t;

/* The host side of the packs while they are filled (sized exactly first) and the step list. */
typedef struct kd_amg_pack {
    int32_t *index;
    unsigned char *values;
    size_t n_index, n_values, vsize;
    kd_amg_tail_level_t level[KD_AMG_LEVELS_MAX];
    int32_t scratch; /* values the levels' vectors take */
    kd_amg_tail_step_t *step;
    int n_steps;
} kd_amg_pack_t;

static int kd_amg_tail_fits(const kd_amg_t *amg, int l)
{
    const kd_amg_level_t *L = &amg->level[l];
    const int inverted = l == amg->levels - 1 && amg->coarse_inverse != NULL;
    if (inverted)
        return L->n <= amg->opt.tail_rows &&
               L->n * L->n <= KD_AMG_TAIL_DENSE_ENTRIES_PER_ITEM * (int64_t)amg->wg;
    const int64_t entries = L->P != NULL && L->P->nnz > L->nnz ? L->P->nnz : L->nnz;
    return L->n <= amg->opt.tail_rows && entries <= KD_AMG_TAIL_ENTRIES_PER_ITEM * (int64_t)amg->wg;
}

/* Pack sizes for levels first..levels-1: int32 and VALUE entries. */
static void kd_amg_tail_size(const kd_amg_t *amg, int first, size_t *n_index, size_t *n_values)
{
    *n_index = *n_values = 0;
    for (int l = first; l < amg->levels; l++) {
        const kd_amg_level_t *L = &amg->level[l];
        const kd_matrix_t *M[3] = {L->A, L->P, L->R};
        for (int m = 0; m < 3; m++)
            if (M[m] != NULL) {
                *n_index += (size_t)(M[m]->rows + 1 + M[m]->nnz);
                *n_values += (size_t)M[m]->nnz;
            }
        if (l == amg->levels - 1 && amg->coarse_inverse != NULL) {
            *n_index += (size_t)(L->n + 1 + L->n * L->n);
            *n_values += (size_t)(L->n * L->n);
        }
        *n_values += (size_t)(L->n + 2 * KD_AMG_STEPS_MAX);
    }
}

static int kd_amg_read(kd_ocl_t *ocl, cl_mem mem, size_t bytes, void *dst, kd_err_t *err)
{
    if (bytes == 0)
        return KD_OK;
    const cl_int st =
        kd_ocl_enqueue_read(kd_ocl_queue(ocl), mem, CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueReadBuffer (amg tail)");
}

/* M's csr_scalar arrays appended to the packs; *out describes them. */
static int kd_amg_pack_matrix(kd_ocl_t *ocl, kd_amg_pack_t *pk, const kd_matrix_t *M, int lanes,
                              kd_amg_tail_csr_t *out, kd_err_t *err)
{
    const kd_format_csr_t *a = kd_format_csr_scalar_arrays(M);
    assert(a != NULL);
    *out = (kd_amg_tail_csr_t){.rows = (int32_t)M->rows,
                               .lanes = lanes,
                               .indptr = (int32_t)pk->n_index,
                               .indices = (int32_t)(pk->n_index + (size_t)M->rows + 1),
                               .values = (int32_t)pk->n_values};
    int rc = kd_amg_read(ocl, a->indptr, (size_t)(M->rows + 1) * 4, pk->index + out->indptr, err);
    if (rc == KD_OK)
        rc = kd_amg_read(ocl, a->indices, (size_t)M->nnz * 4, pk->index + out->indices, err);
    if (rc == KD_OK)
        rc = kd_amg_read(ocl, a->values, (size_t)M->nnz * pk->vsize,
                         pk->values + (size_t)out->values * pk->vsize, err);
    pk->n_index += (size_t)(M->rows + 1 + M->nnz);
    pk->n_values += (size_t)M->nnz;
    return rc;
}

/* The coarsest level's dense inverse appended as a full CSR matrix. */
static int kd_amg_pack_inverse(kd_ocl_t *ocl, kd_amg_pack_t *pk, const kd_amg_t *amg, int64_t n,
                               kd_amg_tail_csr_t *out, kd_err_t *err)
{
    *out = (kd_amg_tail_csr_t){.rows = (int32_t)n,
                               .lanes = kd_amg_lanes(amg, (double)n),
                               .indptr = (int32_t)pk->n_index,
                               .indices = (int32_t)(pk->n_index + (size_t)n + 1),
                               .values = (int32_t)pk->n_values};
    for (int64_t i = 0; i <= n; i++)
        pk->index[out->indptr + i] = (int32_t)(i * n);
    for (int64_t k = 0; k < n * n; k++)
        pk->index[out->indices + k] = (int32_t)(k % n);
    pk->n_index += (size_t)(n + 1 + n * n);
    pk->n_values += (size_t)(n * n);
    return kd_amg_read(ocl, amg->coarse_inverse, (size_t)(n * n) * pk->vsize,
                       pk->values + (size_t)out->values * pk->vsize, err);
}

/* Level l's descriptor, matrices, 1/a_ii and Chebyshev coefficients. */
static int kd_amg_pack_level(kd_ocl_t *ocl, kd_amg_pack_t *pk, const kd_amg_t *amg, int l,
                             kd_amg_tail_level_t *out, kd_err_t *err)
{
    const kd_amg_level_t *L = &amg->level[l];
    const int inverted = l == amg->levels - 1 && amg->coarse_inverse != NULL;
    memset(out, 0, sizeof(*out));
    out->rows = (int32_t)L->n;
    out->steps = inverted ? 0 : kd_amg_steps(amg, l);
    const int top = l == amg->tail.first;
    out->b = top ? KD_AMG_TAIL_B : pk->scratch;
    out->x = top ? KD_AMG_TAIL_X : pk->scratch + (int32_t)L->n;
    out->q = pk->scratch + (int32_t)(2 * L->n);
    out->d = pk->scratch + (int32_t)(3 * L->n);
    pk->scratch += (int32_t)(4 * L->n);
    int rc = inverted ? kd_amg_pack_inverse(ocl, pk, amg, L->n, &out->A, err)
                      : kd_amg_pack_matrix(ocl, pk, L->A, L->lanes_a, &out->A, err);
    if (rc == KD_OK && L->P != NULL)
        rc = kd_amg_pack_matrix(ocl, pk, L->P, L->lanes_p, &out->P, err);
    if (rc == KD_OK && L->R != NULL)
        rc = kd_amg_pack_matrix(ocl, pk, L->R, L->lanes_r, &out->R, err);
    out->inv_diagonal = (int32_t)pk->n_values;
    memcpy(pk->values + pk->n_values * pk->vsize, L->A->inv_diagonal, (size_t)L->n * pk->vsize);
    pk->n_values += (size_t)L->n;
    out->chebyshev = (int32_t)pk->n_values;
    for (int step = 0; step < out->steps; step++) {
        double c_d, c_r;
        kd_amg_chebyshev_coefficients(amg, L, step, &c_d, &c_r);
        kd_store_real(pk->values, amg->dtype, pk->n_values + 2 * (size_t)step, c_d);
        kd_store_real(pk->values, amg->dtype, pk->n_values + 2 * (size_t)step + 1, c_r);
    }
    pk->n_values += 2 * KD_AMG_STEPS_MAX;
    return rc;
}

static kd_amg_tail_step_t *kd_amg_emit(kd_amg_pack_t *pk, int kind, const kd_amg_tail_csr_t *M,
                                       int32_t x, int32_t b, int32_t q)
{
    kd_amg_tail_step_t *S = &pk->step[pk->n_steps++];
    memset(S, 0, sizeof(*S));
    S->M = *M;
    S->kind = kind;
    S->rows = M->rows;
    S->x = x;
    S->b = b;
    S->q = q;
    return S;
}

/* The level's Chebyshev sweep: each step A x into q (but from 0), then the vector update. */
static void kd_amg_emit_smooth(kd_amg_pack_t *pk, const kd_amg_tail_level_t *L, int from_zero)
{
    const kd_amg_tail_csr_t none = {.rows = L->rows, .lanes = 1};
    for (int step = 0; step < L->steps; step++) {
        const int zero = from_zero && step == 0;
        if (!zero)
            kd_amg_emit(pk, KD_AMG_TAIL_SPMV, &L->A, L->x, L->b, L->q);
        kd_amg_tail_step_t *S = kd_amg_emit(pk, KD_AMG_TAIL_CHEBYSHEV, &none, L->x, L->b, L->q);
        S->d = L->d;
        S->inv_diagonal = L->inv_diagonal;
        S->chebyshev = L->chebyshev + 2 * step;
        S->zero = zero;
        S->first = step == 0;
    }
}

/* The V-cycle over the tail's `count` levels, as kd_amg_vcycle runs it. */
static void kd_amg_emit_cycle(kd_amg_pack_t *pk, int count)
{
    for (int l = 0; l + 1 < count; l++) {
        const kd_amg_tail_level_t *L = &pk->level[l];
        kd_amg_emit_smooth(pk, L, 1);
        kd_amg_emit(pk, KD_AMG_TAIL_RESIDUAL, &L->A, L->x, L->b, L->q);
        kd_amg_emit(pk, KD_AMG_TAIL_SPMV, &L->R, L->q, L->b, pk->level[l + 1].b);
    }
    const kd_amg_tail_level_t *C = &pk->level[count - 1];
    if (C->steps == 0)
        kd_amg_emit(pk, KD_AMG_TAIL_SPMV, &C->A, C->b, C->b, C->x);
    else
        kd_amg_emit_smooth(pk, C, 1);
    for (int l = count - 2; l >= 0; l--) {
        const kd_amg_tail_level_t *L = &pk->level[l];
        kd_amg_emit(pk, KD_AMG_TAIL_ADD, &L->P, pk->level[l + 1].x, L->b, L->x);
        kd_amg_emit_smooth(pk, L, 0);
    }
}

/* The packs and the steps onto the device. */
static int kd_amg_tail_upload(kd_ocl_t *ocl, const kd_amg_pack_t *pk, kd_amg_tail_t *T,
                              kd_err_t *err)
{
    const cl_mem_flags ro = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    const size_t steps = (size_t)pk->n_steps * sizeof(kd_amg_tail_step_t);
    const size_t index = pk->n_index * 4, values = pk->n_values * pk->vsize;
    const size_t scratch = (size_t)pk->scratch * pk->vsize;
    int rc = kd_ocl_buffer_create(ocl, ro, steps, pk->step, "amg tail steps", &T->steps, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, ro, index, pk->index, "amg tail index", &T->index, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, ro, values, pk->values, "amg tail values", &T->values, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, scratch, NULL, "amg tail scratch",
                                  &T->scratch, err);
    T->device_bytes = steps + index + values + scratch;
    T->n_steps = pk->n_steps;
    return rc;
}

int kd_amg_tail_build(kd_ocl_t *ocl, kd_amg_t *amg, kd_err_t *err)
{
    assert(ocl != NULL && amg != NULL);
    int first = amg->levels;
    while (first > 1 && kd_amg_tail_fits(amg, first - 1))
        first--;
    if (first == amg->levels)
        return KD_OK; /* not even the coarsest fits: no tail */
    kd_amg_pack_t pk = {.vsize = kd_dtype_size(amg->dtype)};
    size_t n_index, n_values;
    kd_amg_tail_size(amg, first, &n_index, &n_values);
    if (n_index > INT32_MAX || n_values > INT32_MAX)
        return KD_OK; /* offsets are int32; never with the limits above */
    const int count = amg->levels - first;
    amg->tail.first = first; /* the vectors' and the launch's reference */
    pk.index = kd_malloc_array(n_index + 1, 4);
    pk.values = kd_malloc_array(n_values + 1, pk.vsize);
    pk.step = kd_malloc_array((size_t)count * (4 * KD_AMG_STEPS_MAX + 4), sizeof(*pk.step));
    int rc = pk.index != NULL && pk.values != NULL && pk.step != NULL
                 ? KD_OK
                 : kd_err_set(err, KD_ENOMEM, "amg: out of host memory for the tail");
    for (int l = first; l < amg->levels && rc == KD_OK; l++)
        rc = kd_amg_pack_level(ocl, &pk, amg, l, &pk.level[l - first], err);
    if (rc == KD_OK) {
        kd_amg_emit_cycle(&pk, count);
        rc = kd_amg_tail_upload(ocl, &pk, &amg->tail, err);
    }
    free(pk.index);
    free(pk.values);
    free(pk.step);
    return rc;
}

void kd_amg_tail_release(kd_amg_tail_t *tail)
{
    cl_mem *mems[] = {&tail->steps, &tail->index, &tail->values, &tail->scratch};
    for (int i = 0; i < 4; i++)
        if (*mems[i] != NULL) {
            clReleaseMemObject(*mems[i]);
            *mems[i] = NULL;
        }
    tail->first = tail->n_steps = 0;
    tail->device_bytes = 0;
}
