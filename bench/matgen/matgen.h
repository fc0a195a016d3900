/*
 * Benchmark matrices made in memory, at sizes real workloads have (1M-30M nonzeros), built straight
 * into canonical CSR: 2-D and 3-D Laplacians (regular, the easy case for every format) and
 * power-law row lengths with random columns (irregular: where formats earn their keep). Seeded, so
 * every run and every contender sees the same matrix.
 */
#ifndef KD_BENCH_MATGEN_H
#define KD_BENCH_MATGEN_H

#include "common/csr.h"

/* 5-point Laplacian on an nx x ny grid (rows = nx*ny): 4 on the diagonal, -1 off it. SPD. */
kd_csr_t *kd_matgen_laplacian_2d(int64_t nx, int64_t ny, kd_dtype_t dtype);

/* 7-point Laplacian on an n x n x n grid: 6 on the diagonal, -1 off it. SPD. */
kd_csr_t *kd_matgen_laplacian_3d(int64_t n, kd_dtype_t dtype);
/* The 7-point g^3 stencil with first-order upwind convection along (1, 1, 1) and a shift:
 * a_ii = 6 + 3c - shift, the three lower neighbours -1 - c, the three upper -1. c = 0, shift = 0
 * is lap3d; c > 0 is nonsymmetric (convdiff3d:G[:C], C = 1 by default: GMRES and BiCGSTAB
 * benchmarks); shift > the smallest eigenvalue of lap3d is symmetric indefinite (shifted3d:G:S:
 * MINRES). bench/peers/cupy_krylov.py builds the same. */
kd_csr_t *kd_matgen_convdiff_3d(int64_t g, double c, double shift, kd_dtype_t dtype);

/* rows x cols with row lengths drawn from a Zipf-like law (mean about `mean_row`, a few rows
 * thousands long, many of length 1) and uniformly random distinct columns; values in [-1, 1). */
kd_csr_t *kd_matgen_power_law(int64_t rows, int64_t cols, double mean_row, uint64_t seed,
                              kd_dtype_t dtype);

/* R-MAT (Graph500's a, b, c = 0.57, 0.19, 0.19): 2^scale rows, edge_factor * 2^scale edges drawn
 * (duplicates summed), vertex labels randomly permuted as Graph500 does; values in [-1, 1). */
kd_csr_t *kd_matgen_rmat(int scale, int64_t edge_factor, uint64_t seed, kd_dtype_t dtype);

/* Circuit-like: a side x side conductance grid with random long-range couplings (1 node in 20)
 * and 16 supply nets each tied to 1% of the nodes (16 dense rows and columns), node labels
 * randomly permuted (netlist order); symmetric, strictly diagonally dominant (SPD). */
kd_csr_t *kd_matgen_circuit(int64_t side, uint64_t seed, kd_dtype_t dtype);

/* Block-sparse: block_rows x block_rows blocks of bs x bs, each block row the diagonal block and
 * per_row - 1 others within 64 block columns, every block dense (FEM with many unknowns a node,
 * aligned to tiles when bs = 16: the tiled format's best case); values in [-1, 1). */
kd_csr_t *kd_matgen_blocks(int64_t block_rows, int64_t bs, int64_t per_row, uint64_t seed,
                           kd_dtype_t dtype);

/* P A P^T for a random permutation P (square matrices; NULL otherwise). Takes a. */
kd_csr_t *kd_matgen_permuted(kd_csr_t *a, uint64_t seed);

/* The multigrid benchmark's problems (bench/matgen/matgen_amg.c says exactly how each is made, as
 * bench/peers/petsc_amg.py does): -u_xx - eps u_yy on a g x g grid; kron(the 3-D Laplacian on
 * g^3, a 3 x 3 SPD block) + 1e-4 I; Q1 linear elasticity with g^3 free nodes (3 g^3 rows), the
 * plane x = 0 clamped. All SPD. */
kd_csr_t *kd_matgen_anisotropic_2d(int64_t g, double eps, kd_dtype_t dtype);
kd_csr_t *kd_matgen_kron_laplacian_3d(int64_t g, kd_dtype_t dtype);
kd_csr_t *kd_matgen_elasticity_3d(int64_t g, kd_dtype_t dtype);

/* A matrix by name: "lap2d:2048" (2048 x 2048 grid), "lap3d:160", "powerlaw:2000000:8" (rows,
 * mean row length), "rmat:20:16" (scale, edge factor), "circuit:1000" (grid side),
 * "blocks:16384:16:6" (block rows, block size, blocks a block row),
 * "aniso2d:1024:0.001", "kronlap3d:40", "elast3d:40" (bench/matgen/matgen_amg.c),
 * "convdiff3d:100[:C]", "shifted3d:100:S",
 * "shuffled:SPEC" (SPEC randomly permuted, symmetrically), or a path to a .mtx/.mtx.gz file.
 * NULL with a message on stderr on failure. */
kd_csr_t *kd_matgen_by_name(const char *spec, kd_dtype_t dtype);

/* A value in [0, 1) from three integers, the same for the same three every time (values that
 * tests and benchmarks regenerate by position: a system's, a row's, a column's). */
static inline double kd_matgen_hash01(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
                 (c + 0x1234567ull) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    z *= 0xD6E8FEB86645D265ull;
    z ^= z >> 29;
    return (double)(z >> 11) / 9007199254740992.0;
}

#endif
