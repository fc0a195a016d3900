/*
 * Sparse times sparse on the device: C = A B for CSR matrices held in device memory (the form
 * matrix.multiply and the multigrid setup's Galerkin products work in). Row by row, in two phases
 * (symbolic: each row's distinct columns counted with a hash table in local memory, rows binned by
 * their upper bound of products; an exclusive scan to C's row pointer; numeric: the same hashing
 * with values accumulated, each row compacted and sorted by column), as docs/ARCHITECTURE.md
 * describes.
 *
 * C's pattern is the symbolic product: an entry whose products cancel to exactly zero is kept as
 * an explicit zero (SciPy drops those, cuSPARSE keeps them), so C's pattern depends on A's and B's
 * patterns alone. Results are deterministic: each entry of C is the sum of its products in the
 * order of A's row (k ascending), the same bits on every run and every device of one kind.
 *
 * Everything is sized before it is allocated: the products' count (int64, on the device) first,
 * then C's exact nnz after the symbolic phase, each checked against the limits and the device's
 * allocation size before C's arrays exist.
 */
#ifndef KD_SOLVER_SPGEMM_H
#define KD_SOLVER_SPGEMM_H

#include "common/csr.h"
#include "solver/runtime/ocl.h"

/* A CSR matrix on the device: 32-bit row pointers and column indices, canonical (columns
 * strictly increasing in each row), values in dtype. indices and values are NULL when nnz == 0;
 * indptr always exists (rows + 1 entries). */
typedef struct kd_csr_device {
    int64_t rows, cols, nnz;
    kd_dtype_t dtype;
    cl_mem indptr, indices, values;
    size_t device_bytes;
} kd_csr_device_t;

/* Copy a host CSR to the device (blocking). KD_EDEVMEM, KD_EUNSUPPORTED (float64 without fp64). */
int kd_csr_device_upload(kd_ocl_t *ocl, const kd_csr_t *csr, kd_csr_device_t *out, kd_err_t *err);
/* Read a device CSR back into a new host kd_csr_t (blocking). KD_ENOMEM. */
int kd_csr_device_download(kd_ocl_t *ocl, const kd_csr_device_t *dev, kd_csr_t **out,
                           kd_err_t *err);
/* Free the device arrays; accepts a zeroed or released one. */
void kd_csr_device_release(kd_csr_device_t *dev);

typedef struct kd_spgemm_limits {
    int64_t max_nnz;         /* C's nnz at most this (0: only KD_CSR_INDEX_MAX) */
    size_t max_device_bytes; /* C plus scratch at most this (0: only the device's own limits) */
} kd_spgemm_limits_t;

/* The most distinct kernels one product launches (count, offsets, scatter, 7 symbolic bins, the
 * scan's two others, 6 numeric bins, the global bin's two numeric kernels). */
#define KD_SPGEMM_KERNELS 20

/* One kernel's device time over its launches in one product (events' start to end, summed). */
typedef struct kd_spgemm_kernel_time {
    const char *name; /* the kernel's name (a static string) */
    double ms;
    int launches;
} kd_spgemm_kernel_time_t;

typedef struct kd_spgemm_stats {
    int64_t products;                         /* sum over A's entries a_ik of B's row k length */
    int64_t nnz;                              /* C's */
    int64_t bin_rows[8];                      /* rows per bin, by their upper bound of products */
    size_t peak_device_bytes;                 /* scratch plus C at the peak, A and B not included */
    double symbolic_ms, numeric_ms, total_ms; /* device time, from the kernels' events */
    int64_t numeric_bin_rows[8];              /* rows per bin, by their count of C's columns */
    int kernels;                              /* entries of kernel[], in launch order */
    kd_spgemm_kernel_time_t kernel[KD_SPGEMM_KERNELS];
} kd_spgemm_stats_t;

/*
 * C = A B (A: m x k, B: k x n, the same dtype) into *C (a new device CSR, m x n, owned by the
 * caller). KD_EBADREQ for a dimension or dtype mismatch; KD_ETOOLARGE when the products' count or
 * C's nnz passes KD_CSR_INDEX_MAX or limits->max_nnz; KD_EDEVMEM when C and scratch pass
 * limits->max_device_bytes or the device refuses them. Nothing big is allocated before the check
 * that refuses it. stats may be NULL; limits may be NULL. With stats, kd_spgemm waits for its last
 * kernel (to read the events); without, it returns with the numeric kernels queued.
 */
int kd_spgemm(kd_ocl_t *ocl, const kd_csr_device_t *A, const kd_csr_device_t *B,
              const kd_spgemm_limits_t *limits, kd_csr_device_t *C, kd_spgemm_stats_t *stats,
              kd_err_t *err);

/* The -DKD_SPGEMM_LANE_SLOTS its kernels are built with on this device (the warm-up builds the
 * same program). */
int kd_spgemm_lane_slots(const kd_ocl_t *ocl, kd_dtype_t dtype);

#endif
