/*
 * krylov-bench export SPEC FILE: write a matrix (a bench/matgen/matgen.h spec or a Matrix Market
 * file) as the binary CSR of bench.h, so the peer programs (bench/peers) multiply exactly the
 * matrix krylov-bench does.
 */
#include "bench/bench.h"
#include "bench/matgen/matgen.h"

#include <stdio.h>
#include <string.h>

int kd_bench_export_main(int argc, char **argv)
{
    if (argc != 3 || argv[1][0] == '-') {
        fprintf(stderr, "usage: krylov-bench export MATRIX FILE\n"
                        "MATRIX: lap2d:N, lap3d:N, powerlaw:ROWS:MEAN, or a .mtx/.mtx.gz file\n");
        return argc == 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    kd_csr_t *csr = kd_matgen_by_name(argv[1], KD_DTYPE_F64);
    if (csr == NULL)
        return 1;
    int rc = kd_bench_write_csr(argv[2], csr);
    if (rc == 0)
        printf("%s: %lld x %lld, nnz %lld -> %s\n", argv[1], (long long)csr->rows,
               (long long)csr->cols, (long long)csr->nnz, argv[2]);
    kd_csr_free(csr);
    return rc == 0 ? 0 : 1;
}
