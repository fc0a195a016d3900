/*
 * The contract between solver/products/spgemm.c and kernels/products/spgemm.cl: the bins rows are
 * sorted into, the team size of each bin, the byte a row's bins are recorded in, and the layout of
 * the small header the host reads back twice (the products' total with the symbolic bins' sizes,
 * then C's nnz with the numeric bins' sizes). Plain C that OpenCL C also compiles (the kernels
 * `#include "spgemm_abi.h"`).
 */
#ifndef KD_SPGEMM_ABI_H
#define KD_SPGEMM_ABI_H

/*
 * Bins. The symbolic phase bins a row by ub (its products) and need = min(ub, n), the most
 * distinct columns it can have; the numeric phase bins it again by its exact count of columns.
 * Both take the first team bin whose team has at least as many work-items as the row's mean B row
 * length (ceil(ub / A's row length): the row's `hint`, the first bin it may use) and whose table
 * is large enough (symbolic: `need` slots; numeric: twice the row's columns), else the whole-group
 * bin when the group's table is (symbolic: `need` slots; numeric: 4/3 of the columns), else the
 * global bin.
 */
enum kd_spgemm_bin {
    KD_SPGEMM_BIN_EMPTY = 0, /* no products: C's row is empty, nothing to launch */
    KD_SPGEMM_BIN_TEAM_FIRST = 1,
    KD_SPGEMM_BIN_TEAM_LAST = 5, /* bins 1..5: teams of 4, 8, 16, 32, 64 work-items */
    KD_SPGEMM_BIN_GROUP = 6,     /* one work-group per row, the group's whole table */
    KD_SPGEMM_BIN_GLOBAL = 7,    /* longer: global bitmaps, then slices of the row's columns */
    KD_SPGEMM_BINS = 8
};

/* Work-items of a team bin's team (bins 1..5). */
#define KD_SPGEMM_TEAM_LANES(bin) (2 << (bin))

/* A row's byte in row_bin: its symbolic bin (low 4 bits) and its hint (high 4 bits). */
#define KD_SPGEMM_ROW_BIN(byte) ((byte)&15)
#define KD_SPGEMM_ROW_HINT(byte) ((byte) >> 4)

/* The header (int64 slots), written by the device, read back by the host. */
enum kd_spgemm_head {
    KD_SPGEMM_HEAD_PRODUCTS = 0,                   /* sum of ub over A's rows */
    KD_SPGEMM_HEAD_NNZ = 1,                        /* C's nnz: sum of the rows' counts */
    KD_SPGEMM_HEAD_TASKS = 2,                      /* the global bin's numeric work-groups */
    KD_SPGEMM_HEAD_BIN_ROWS = 3,                   /* rows per bin (KD_SPGEMM_BINS slots) */
    KD_SPGEMM_HEAD_BIN_START = 3 + KD_SPGEMM_BINS, /* a bin's first position in bin_rows */
    KD_SPGEMM_HEAD_SLOTS = 3 + 2 * KD_SPGEMM_BINS
};

/* Rows of A per work-item in the count, scatter and scan kernels. */
#define KD_SPGEMM_SCAN_ITEMS 2
/* Rows of A longer than this are counted by their whole work-group in kd_spgemm_count. */
#define KD_SPGEMM_LONG_ROW 64
/* A numeric window of more entries of A than this adds its products in rounds (each column
 * takes its next product in order, a barrier between rounds) rather than one entry per step. */
#define KD_SPGEMM_MOST_STEPS 8
/* Columns one bucket of a numeric row's sort by buckets may hold (more: the bitonic sort). */
#define KD_SPGEMM_BUCKET_MOST 8
/* Products per work-item in a window of the global bin's numeric pass. */
#define KD_SPGEMM_WINDOW_ITEMS 4

#endif
