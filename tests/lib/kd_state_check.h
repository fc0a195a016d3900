/*
 * Checks on a daemon's state directory and its matrices, shared by the full-disk test and the
 * crash sweep: leftover files by suffix, and a stored matrix served right (spmv against the CPU
 * reference on a fresh random x).
 */
#ifndef KD_TEST_STATE_CHECK_H
#define KD_TEST_STATE_CHECK_H

#include "kd_rpc.h"
#include "kd_test.h"

#include <dirent.h>
#include <math.h>

/* Entries of dir/sub (sub may be "") whose names end with suffix ("" counts all). */
static inline size_t kd_state_check_count(const char *dir, const char *sub, const char *suffix)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    DIR *dd = opendir(path);
    if (dd == NULL)
        return 0;
    size_t n = 0, sl = strlen(suffix);
    struct dirent *de;
    while ((de = readdir(dd)) != NULL) {
        size_t len = strlen(de->d_name);
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 && len >= sl &&
            strcmp(de->d_name + len - sl, suffix) == 0)
            n++;
    }
    closedir(dd);
    return n;
}

/* spmv of id on a fresh random x against A x on the CPU: 0 when it agrees to 1e-12 (relative),
 * -1 with the reason in why. */
static inline int kd_state_check_spmv(kd_rpc_t *r, uint64_t msgid, const char *id,
                                      const kd_csr_t *A, char *why, size_t why_cap)
{
    size_t nx = (size_t)(A->cols > 0 ? A->cols : 1), ny = (size_t)(A->rows > 0 ? A->rows : 1);
    double *x = malloc(nx * sizeof(double)), *y = malloc(ny * sizeof(double)),
           *ref = malloc(ny * sizeof(double));
    for (int64_t i = 0; i < A->cols; i++)
        x[i] = kd_test_rand_double(-1, 1);
    for (int64_t i = 0; i < A->rows; i++)
        y[i] = NAN; /* poisoned: a value the server did not send fails */
    for (int64_t i = 0; i < A->rows; i++)
        ref[i] = 0;
    kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
    kd_rpc_msg_t m;
    int rc = kd_rpc_spmv(r, msgid, id, x, A->cols, y, A->rows, &m);
    if (rc != 0) {
        snprintf(why, why_cap, "spmv %s: %s %s", id, m.code, m.message);
    } else {
        double dmax = 0, scale = 1;
        for (int64_t i = 0; i < A->rows; i++) {
            dmax = fmax(dmax, isnan(y[i]) ? INFINITY : fabs(y[i] - ref[i]));
            scale = fmax(scale, fabs(ref[i]));
        }
        if (!(dmax / scale <= 1e-12)) {
            snprintf(why, why_cap, "spmv %s: off by %g (relative)", id, dmax / scale);
            rc = -1;
        }
    }
    kd_rpc_msg_free(&m);
    free(x);
    free(y);
    free(ref);
    return rc;
}

#endif
