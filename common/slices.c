/* Slices of a CSR matrix's rows for host threads (see slices.h). */
#include "common/slices.h"

#include <assert.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

int kd_slices_count(int64_t nnz)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t n = nnz / KD_SLICE_NNZ;
    if (n > KD_SLICES_MAX)
        n = KD_SLICES_MAX;
    if (cpus > 0 && n > cpus)
        n = cpus;
    return n < 1 ? 1 : (int)n;
}

int64_t kd_csr_row_of_entry(const kd_csr_t *csr, int64_t k)
{
    int64_t lo = 0, hi = csr->rows; /* indptr[lo] <= k < indptr[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (csr->indptr[mid] <= k)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void kd_slices_rows(const kd_csr_t *csr, int n, int64_t align, int64_t bounds[KD_SLICES_MAX + 1])
{
    assert(n >= 1 && n <= KD_SLICES_MAX && align >= 1);
    bounds[0] = 0;
    for (int i = 1; i < n; i++) {
        /* the first row whose start reaches the slice's share, up to a multiple of align */
        int64_t r = kd_csr_row_of_entry(csr, csr->nnz / n * i);
        r = (r + align - 1) / align * align;
        r = r > csr->rows ? csr->rows : r;
        bounds[i] = r < bounds[i - 1] ? bounds[i - 1] : r;
    }
    bounds[n] = csr->rows;
}

void kd_slices_run(void *(*fn)(void *), void *items, size_t size, int n)
{
    assert(n >= 1 && n <= KD_SLICES_MAX);
    char *at = items;
    pthread_t threads[KD_SLICES_MAX];
    int started[KD_SLICES_MAX] = {0};
    for (int i = 1; i < n; i++)
        started[i] = pthread_create(&threads[i], NULL, fn, at + (size_t)i * size) == 0;
    fn(at);
    for (int i = 1; i < n; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            fn(at + (size_t)i * size);
    }
}

/* One slice of kd_slices_memcpy. */
typedef struct kd_copy_slice {
    char *dst;
    const char *src;
    size_t bytes;
} kd_copy_slice_t;

static void *kd_copy_slice_run(void *arg)
{
    const kd_copy_slice_t *c = arg;
    memcpy(c->dst, c->src, c->bytes);
    return NULL;
}

static void kd_slices_memcpy_n(void *dst, const void *src, size_t bytes, int n);

void kd_slices_memcpy(void *dst, const void *src, size_t bytes)
{
    kd_slices_memcpy_n(dst, src, bytes, kd_slices_count((int64_t)(bytes / 8)));
}

void kd_slices_memcpy_wide(void *dst, const void *src, size_t bytes)
{
    /* one slice a MiB: kd_slices_count's unit of 2^20 entries, at 8 bytes an entry */
    kd_slices_memcpy_n(dst, src, bytes, kd_slices_count((int64_t)(bytes >> 20) << 20));
}

static void kd_slices_memcpy_n(void *dst, const void *src, size_t bytes, int n)
{
    kd_copy_slice_t slices[KD_SLICES_MAX];
    const size_t each = (bytes + (size_t)n - 1) / (size_t)n;
    for (int i = 0; i < n; i++) {
        const size_t at = (size_t)i * each < bytes ? (size_t)i * each : bytes;
        const size_t len = bytes - at < each ? bytes - at : each;
        slices[i] = (kd_copy_slice_t){(char *)dst + at, (const char *)src + at, len};
    }
    kd_slices_run(kd_copy_slice_run, slices, sizeof(slices[0]), n);
}
