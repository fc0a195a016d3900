/*
 * The contract between solver/spgemm.c and kernels/spgemm.cl: the bins rows are sorted into by
 * their upper bound of products, the team size of each bin, and the layout of the small header
 * the host reads back twice (the products' total with the bins' sizes, then C's nnz). Plain C that
 * OpenCL C also compiles (the kernels `#include "spgemm_abi.h"`).
 */
#ifndef KD_SPGEMM_ABI_H
#define KD_SPGEMM_ABI_H

/*
 * Bins, by ub = the row's products (sum of B's row lengths over A's row) and need = min(ub, n),
 * the most distinct columns the row can have. A row goes to the first team bin whose team has
 * at least as many lanes as the row's mean B row length (ceil(ub / A's row length), the
 * parallelism of one step) and whose table holds `need` columns; else to the whole-group bin
 * when need fits the group's table; else to the global bin.
 */
enum kd_spgemm_bin {
    KD_SPGEMM_BIN_EMPTY = 0, /* no products: C's row is empty, nothing to launch */
    KD_SPGEMM_BIN_TEAM_FIRST = 1,
    KD_SPGEMM_BIN_TEAM_LAST = 5, /* bins 1..5: teams of 4, 8, 16, 32, 64 lanes */
    KD_SPGEMM_BIN_GROUP = 6,     /* one work-group per row, the group's whole table */
    KD_SPGEMM_BIN_GLOBAL = 7,    /* a dense accumulator in global memory (bounded scratch) */
    KD_SPGEMM_BINS = 8
};

/* Lanes of a team bin's team (bins 1..5). */
#define KD_SPGEMM_TEAM_LANES(bin) (2 << (bin))

/* The header (int64 slots), written by the device, read back by the host. */
enum kd_spgemm_head {
    KD_SPGEMM_HEAD_PRODUCTS = 0,                   /* sum of ub over A's rows */
    KD_SPGEMM_HEAD_NNZ = 1,                        /* C's nnz: sum of the rows' counts */
    KD_SPGEMM_HEAD_BIN_ROWS = 2,                   /* rows per bin (KD_SPGEMM_BINS slots) */
    KD_SPGEMM_HEAD_BIN_START = 2 + KD_SPGEMM_BINS, /* a bin's first position in bin_rows */
    KD_SPGEMM_HEAD_SLOTS = 2 + 2 * KD_SPGEMM_BINS
};

/* Rows of A per work-item in the count and scatter kernels, and per work-item in the scan. */
#define KD_SPGEMM_SCAN_ITEMS 8

#endif
