/*
 * The contract between the tiled format's host analysis (solver/formats/tiled.c) and its kernels
 * (kernels/formats/tiled.cl): the tile size, the lanes per unit of work and the per-tile format
 * codes. Plain C that OpenCL C also compiles (the kernels `#include "tiled_abi.h"`).
 *
 * A tile's code byte is kind | param << KD_TILED_KIND_BITS, param being the ELL part's width for
 * ELL and HYB (1..15) and 0 otherwise. The codes are in the order ties are broken in: when two
 * formats store a tile in the same number of bytes, the lower code (the simpler loop) wins.
 */
#ifndef KD_TILED_ABI_H
#define KD_TILED_ABI_H

#define KD_TILED_SIZE 16  /* a tile is 16 x 16; in-tile rows and columns fit in 4 bits */
#define KD_TILED_LANES 16 /* work-items per chunk of a tile row: one per row of the tile row */
#define KD_TILED_CHUNK_TILES 32 /* tiles per chunk at most (each lane stages two) */
#define KD_TILED_KIND_BITS 3
#define KD_TILED_KIND_MASK 7

enum kd_tiled_kind {
    KD_TILED_DENSE = 0,     /* th * tw values row-major, no index bytes */
    KD_TILED_DENSE_ROW = 1, /* k full rows: k row bytes, k * tw values row-major */
    KD_TILED_DENSE_COL = 2, /* k full columns: k column bytes, k * th values column-major */
    KD_TILED_ELL = 3,       /* th 4-bit row lengths, w * th 4-bit columns column-major */
    KD_TILED_CSR = 4,       /* th row-start bytes, n 4-bit columns */
    KD_TILED_COO = 5,       /* n bytes row << 4 | column */
    KD_TILED_HYB = 6,       /* an ELL part of width w, then a COO part */
    KD_TILED_KINDS = 7
};

#endif
