/*
 * krylov-ocl-xfer: what each pass of a like put (issue 35, item 5) costs on this host and device,
 * one at a time, over the values of lap3d n^3 (n = 100: 1M rows, 6.94M entries, 55.5 MB of
 * float64 values). Each line is the median of `runs` passes, ms and GB/s:
 *
 *   memcpy            one thread, warm destination
 *   slices memcpy     kd_slices_memcpy (the server's copy), warm destination
 *   first touch       malloc + kd_slices_memcpy into fresh pages (the page faults)
 *   xxh3              the id's hash over the values (one thread)
 *   write pageable    blocking clEnqueueWriteBuffer from malloc'd (warm) memory
 *   write pinned      the same from a mapped CL_MEM_ALLOC_HOST_PTR buffer (offset 0, and at an
 *                     offset of 4104 bytes: a bin inside a received frame)
 *   copy+write pinned kd_slices_memcpy into the pinned buffer, then the write
 *   kd_ocl_write/read what krylovd's transfers take (through the pinned staging buffer on a GPU)
 *   scan              kd_matrix_scan of the CSR (symmetry, diagonal, non-finite)
 *
 *   krylov-ocl-xfer [--device SEL] [--n 100] [--runs 7]
 */
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "common/slices.h"
#include "solver/matrix_scan.h"
#include "solver/runtime/ocl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define KD_XFER_RUNS_MAX 64

static int kd_xfer_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double kd_xfer_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(t[0]), kd_xfer_cmp);
    return t[n / 2];
}

static void kd_xfer_row(const char *what, double ms, size_t bytes)
{
    printf("| %-30s | %8.3f | %7.2f |\n", what, ms, (double)bytes / (ms * 1e6));
}

int main(int argc, char **argv)
{
    const char *sel = "auto";
    int n = 100, runs = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--device") == 0)
            sel = argv[i + 1];
        else if (strcmp(argv[i], "--n") == 0)
            n = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[i + 1]);
    }
    if (runs < 1 || runs > KD_XFER_RUNS_MAX || n < 2) {
        fprintf(stderr, "usage: krylov-ocl-xfer [--device SEL] [--n 100] [--runs 7 (<= 64)]\n");
        return 2;
    }
    kd_err_t err = {0};
    kd_ocl_t *ocl = NULL;
    if (kd_ocl_open(sel, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-ocl-xfer: %s\n", err.message);
        return 1;
    }
    kd_csr_t *csr = kd_matgen_laplacian_3d(n, KD_DTYPE_F64);
    if (csr == NULL) {
        fprintf(stderr, "krylov-ocl-xfer: out of memory\n");
        return 1;
    }
    const size_t bytes = (size_t)csr->nnz * sizeof(double), off = 4104;
    printf("device: %s; lap3d %d^3: %lld rows, %lld entries, %.1f MB of values; median of %d\n\n",
           kd_ocl_desc(ocl)->name, n, (long long)csr->rows, (long long)csr->nnz, bytes / 1e6, runs);
    printf("| pass | ms | GB/s |\n|---|---|---|\n");
    char *src = malloc(bytes), *dst = malloc(bytes);
    cl_int st = CL_SUCCESS;
    cl_mem dev = clCreateBuffer(kd_ocl_context(ocl), CL_MEM_READ_WRITE, bytes, NULL, &st);
    cl_mem pin_mem = NULL;
    char *pin = kd_ocl_host_alloc(ocl, bytes + off, &pin_mem, &st);
    if (src == NULL || dst == NULL || dev == NULL || pin == NULL) {
        fprintf(stderr, "krylov-ocl-xfer: allocation failed (%d)\n", (int)st);
        return 1;
    }
    memcpy(src, csr->values, bytes);
    memset(dst, 0, bytes);
    memset(pin, 0, bytes + off);
    cl_command_queue q = kd_ocl_queue(ocl);
    double t[KD_XFER_RUNS_MAX];
    uint64_t t0;
#define KD_XFER_TIME(what, body)                                                                   \
    do {                                                                                           \
        for (int r = 0; r < runs; r++) {                                                           \
            t0 = kd_clock_ns();                                                                    \
            body;                                                                                  \
            t[r] = (double)(kd_clock_ns() - t0) / 1e6;                                             \
        }                                                                                          \
        kd_xfer_row(what, kd_xfer_median(t, runs), bytes);                                         \
    } while (0)
    KD_XFER_TIME("memcpy", memcpy(dst, src, bytes));
    KD_XFER_TIME("slices memcpy", kd_slices_memcpy(dst, src, bytes));
    KD_XFER_TIME("first touch (malloc+copy)", {
        char *fresh = malloc(bytes);
        kd_slices_memcpy(fresh, src, bytes);
        __asm__ volatile("" ::"r"(fresh) : "memory");
        free(fresh);
    });
    volatile uint64_t sink = 0;
    KD_XFER_TIME("xxh3 (one thread)", sink += XXH3_128bits(src, bytes).low64);
    KD_XFER_TIME("write pageable", clEnqueueWriteBuffer(q, dev, CL_TRUE, 0, bytes, src, 0, NULL,
                                                        NULL));
    KD_XFER_TIME("write pinned", clEnqueueWriteBuffer(q, dev, CL_TRUE, 0, bytes, pin, 0, NULL,
                                                      NULL));
    KD_XFER_TIME("write pinned at +4104", clEnqueueWriteBuffer(q, dev, CL_TRUE, 0, bytes, pin + off,
                                                               0, NULL, NULL));
    KD_XFER_TIME("copy+write pinned", {
        kd_slices_memcpy(pin, src, bytes);
        clEnqueueWriteBuffer(q, dev, CL_TRUE, 0, bytes, pin, 0, NULL, NULL);
    });
    KD_XFER_TIME("kd_ocl_write (staged on a GPU)", (void)kd_ocl_write(ocl, dev, 0, bytes, src, &err));
    KD_XFER_TIME("kd_ocl_read (staged on a GPU)", (void)kd_ocl_read(ocl, dev, 0, bytes, dst, &err));
    KD_XFER_TIME("read pageable", clEnqueueReadBuffer(q, dev, CL_TRUE, 0, bytes, dst, 0, NULL,
                                                      NULL));
    KD_XFER_TIME("read pinned", clEnqueueReadBuffer(q, dev, CL_TRUE, 0, bytes, pin, 0, NULL, NULL));
    KD_XFER_TIME("scan (symmetry, diagonal)", {
        kd_matrix_scan_t scan;
        void *inv = NULL;
        (void)kd_matrix_scan(csr, &scan, &inv, &err);
        free(inv);
    });
    printf("\n(%llu)\n", (unsigned long long)sink % 10);
    kd_ocl_host_free(ocl, pin, pin_mem);
    clReleaseMemObject(dev);
    free(src);
    free(dst);
    kd_csr_free(csr);
    kd_ocl_close(ocl);
    return 0;
}
