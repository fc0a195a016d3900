/*
 * Quota checks (see quota.h). Sums saturate instead of wrapping: a use near SIZE_MAX is over any
 * limit anyway.
 */
#include "server/store/quota.h"
#include "common/checked.h"

#include <stdint.h>

static int kd_quota_over(const char *user, const char *what, const char *limit, size_t want,
                         size_t max, kd_err_t *err)
{
    return kd_err_set(err, KD_EQUOTA, "%s: %zu %s would exceed %s = %zu (by %zu)", user, want, what,
                      limit, max, want - max);
}

int kd_quota_check_matrix(const kd_quota_t *q, const char *user, const kd_usage_t *use,
                          size_t device_bytes, size_t state_bytes, kd_err_t *err)
{
    const size_t matrices = kd_sat_add(use->matrices, 1);
    const size_t device = kd_sat_add(use->device_bytes, device_bytes);
    const size_t state = kd_sat_add(use->state_bytes, state_bytes);
    if (q->max_matrices != 0 && matrices > q->max_matrices)
        return kd_quota_over(user, "matrices", "max_matrices", matrices, q->max_matrices, err);
    if (q->max_device_bytes != 0 && device > q->max_device_bytes)
        return kd_quota_over(user, "device bytes", "max_device_bytes", device, q->max_device_bytes,
                             err);
    if (q->max_state_bytes != 0 && state > q->max_state_bytes)
        return kd_quota_over(user, "state bytes", "max_state_bytes", state, q->max_state_bytes,
                             err);
    return KD_OK;
}

int kd_quota_check_jobs(const kd_quota_t *q, const char *user, size_t in_flight, kd_err_t *err)
{
    const size_t jobs = kd_sat_add(in_flight, 1);
    if (q->max_jobs != 0 && jobs > q->max_jobs)
        return kd_quota_over(user, "requests in flight", "max_jobs", jobs, q->max_jobs, err);
    return KD_OK;
}
