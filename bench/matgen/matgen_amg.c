/*
 * The multigrid benchmark's problems (issue 13's anchor table, measured with PETSc's GAMG and
 * hypre's BoomerAMG in bench/peers/petsc_amg.py, which reads these same matrices through
 * `krylov-bench export`):
 *   aniso2d:N:EPS   -u_xx - EPS u_yy, 5-point on an N x N grid (x fastest), Dirichlet: 2(1 + EPS)
 *                   on the diagonal, -1 to the x neighbours (consecutive rows), -EPS to the y ones;
 *   kronlap3d:N     kron(7-point 3-D Laplacian on N^3, B) + 1e-4 I, B = [[3 1 .5] [1 2 .5]
 *                   [.5 .5 1]] (SPD): three coupled unknowns per node, ordered node by node;
 *   elast3d:N       linear elasticity, trilinear (Q1) cubes of side h = 1/N, E = 1, nu = 0.3,
 *                   2 x 2 x 2 Gauss points: N + 1 node planes in x, the plane x = 0 clamped and
 *                   eliminated, N in y and z (N x (N-1) x (N-1) elements), so N^3 free nodes and
 *                   3 N^3 rows, node (i, j, k) (i = 1..N) numbered (k N + j) N + i - 1, its three
 *                   displacements consecutive.
 * The same matrices as bench/peers/petsc_amg.py builds with SciPy (up to the order in which
 * duplicate element contributions are summed).
 */
#include "bench/matgen/matgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing COO list, built into canonical CSR (duplicates summed) at the end. */
typedef struct kd_coo_list {
    int64_t n, cap;
    int64_t *r, *c;
    double *v;
} kd_coo_list_t;

static int kd_coo_push(kd_coo_list_t *l, int64_t r, int64_t c, double v)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 1 << 20;
        int64_t *nr = realloc(l->r, (size_t)cap * sizeof(int64_t));
        if (nr != NULL)
            l->r = nr;
        int64_t *nc = realloc(l->c, (size_t)cap * sizeof(int64_t));
        if (nc != NULL)
            l->c = nc;
        double *nv = realloc(l->v, (size_t)cap * sizeof(double));
        if (nv != NULL)
            l->v = nv;
        if (nr == NULL || nc == NULL || nv == NULL)
            return -1;
        l->cap = cap;
    }
    l->r[l->n] = r;
    l->c[l->n] = c;
    l->v[l->n] = v;
    l->n++;
    return 0;
}

static kd_csr_t *kd_coo_build(kd_coo_list_t *l, int64_t n, kd_dtype_t dtype, int failed)
{
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    if (!failed && kd_csr_from_coo_arrays(n, n, l->n, l->r, l->c, KD_DTYPE_I64, l->v, KD_DTYPE_F64,
                                          dtype, NULL, &m, &err) != KD_OK)
        fprintf(stderr, "matgen: %s\n", err.message);
    free(l->r);
    free(l->c);
    free(l->v);
    return m;
}

kd_csr_t *kd_matgen_anisotropic_2d(int64_t g, double eps, kd_dtype_t dtype)
{
    kd_coo_list_t l = {0};
    int failed = 0;
    for (int64_t y = 0; y < g && !failed; y++)
        for (int64_t x = 0; x < g; x++) {
            const int64_t i = y * g + x;
            failed |= kd_coo_push(&l, i, i, 2.0 * (1.0 + eps));
            if (x > 0)
                failed |= kd_coo_push(&l, i, i - 1, -1.0);
            if (x + 1 < g)
                failed |= kd_coo_push(&l, i, i + 1, -1.0);
            if (y > 0)
                failed |= kd_coo_push(&l, i, i - g, -eps);
            if (y + 1 < g)
                failed |= kd_coo_push(&l, i, i + g, -eps);
        }
    return kd_coo_build(&l, g * g, dtype, failed);
}

kd_csr_t *kd_matgen_kron_laplacian_3d(int64_t g, kd_dtype_t dtype)
{
    static const double B[3][3] = {{3, 1, 0.5}, {1, 2, 0.5}, {0.5, 0.5, 1}};
    kd_csr_t *L = kd_matgen_laplacian_3d(g, KD_DTYPE_F64);
    if (L == NULL)
        return NULL;
    kd_coo_list_t l = {0};
    int failed = 0;
    for (int64_t i = 0; i < L->rows && !failed; i++)
        for (int32_t k = L->indptr[i]; k < L->indptr[i + 1]; k++)
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) {
                    double v = kd_csr_value(L, k) * B[a][b];
                    if (L->indices[k] == i && a == b)
                        v += 1e-4;
                    if (v != 0.0)
                        failed |= kd_coo_push(&l, 3 * i + a, 3 * L->indices[k] + b, v);
                }
    const int64_t n = 3 * L->rows;
    kd_csr_free(L);
    return kd_coo_build(&l, n, dtype, failed);
}

/* The 24 x 24 stiffness of a cube element of side h (E = 1, nu = 0.3), dofs node-major in the
 * node order (x fastest, then y, then z). */
static void kd_matgen_q1_element(double h, double K[24][24])
{
    const double E = 1.0, nu = 0.3;
    const double lambda = E * nu / ((1 + nu) * (1 - 2 * nu)), mu = E / (2 * (1 + nu));
    const double g = 1.0 / sqrt(3.0);
    memset(K, 0, 24 * 24 * sizeof(double));
    for (int q = 0; q < 8; q++) {
        const double xi[3] = {(q & 1) ? g : -g, (q & 2) ? g : -g, (q & 4) ? g : -g};
        double dN[8][3]; /* d N_a / d x (physical), reference [-1,1]^3 scaled by 2/h */
        for (int a = 0; a < 8; a++) {
            const double s[3] = {(a & 1) ? 1.0 : -1.0, (a & 2) ? 1.0 : -1.0, (a & 4) ? 1.0 : -1.0};
            for (int d = 0; d < 3; d++) {
                double v = 0.125 * s[d];
                for (int e = 0; e < 3; e++)
                    if (e != d)
                        v *= 1.0 + s[e] * xi[e];
                dN[a][d] = v * 2.0 / h;
            }
        }
        const double w = (h / 2) * (h / 2) * (h / 2); /* Gauss weights 1, Jacobian (h/2)^3 */
        /* K_ab(i,j) = lambda dN_a,i dN_b,j + mu (dN_a,j dN_b,i + delta_ij grad N_a . grad N_b) */
        for (int a = 0; a < 8; a++)
            for (int b = 0; b < 8; b++) {
                const double dot = dN[a][0] * dN[b][0] + dN[a][1] * dN[b][1] + dN[a][2] * dN[b][2];
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 3; j++)
                        K[3 * a + i][3 * b + j] +=
                            w * (lambda * dN[a][i] * dN[b][j] + mu * dN[a][j] * dN[b][i] +
                                 (i == j ? mu * dot : 0.0));
            }
    }
    for (int i = 0; i < 24; i++) /* exactly symmetric, not only to rounding */
        for (int j = 0; j < i; j++)
            K[i][j] = K[j][i] = 0.5 * (K[i][j] + K[j][i]);
}

kd_csr_t *kd_matgen_elasticity_3d(int64_t n, kd_dtype_t dtype)
{
    if (n < 2)
        return NULL;
    double K[24][24];
    kd_matgen_q1_element(1.0 / (double)n, K);
    kd_coo_list_t l = {0};
    int failed = 0;
    /* element (ex, ey, ez): nodes (ex + a, ey + b, ez + c); node plane i = 0 is clamped (-1) */
    for (int64_t ez = 0; ez + 1 < n && !failed; ez++)
        for (int64_t ey = 0; ey + 1 < n; ey++)
            for (int64_t ex = 0; ex < n; ex++) {
                int64_t node[8];
                for (int a = 0; a < 8; a++) {
                    const int64_t i = ex + (a & 1), j = ey + ((a >> 1) & 1),
                                  k = ez + ((a >> 2) & 1);
                    node[a] = i == 0 ? -1 : (k * n + j) * n + i - 1;
                }
                for (int a = 0; a < 8; a++)
                    for (int b = 0; b < 8; b++) {
                        if (node[a] < 0 || node[b] < 0)
                            continue;
                        for (int i = 0; i < 3; i++)
                            for (int j = 0; j < 3; j++)
                                failed |= kd_coo_push(&l, 3 * node[a] + i, 3 * node[b] + j,
                                                      K[3 * a + i][3 * b + j]);
                    }
            }
    return kd_coo_build(&l, 3 * n * n * n, dtype, failed);
}
