/*
 * Per-user limits (the auth file's max_* fields, kd_quota_t): whether one more matrix, or one more
 * request in flight, would take a user over one, and a message that says which and by how much.
 * Checked before anything is kept, so a refusal loses nothing.
 */
#ifndef KD_SERVER_QUOTA_H
#define KD_SERVER_QUOTA_H

#include "common/error.h"
#include "server/auth.h"
#include "server/store/store.h"

/* KD_OK, or KD_EQUOTA ("alice: 11 matrices would exceed max_matrices = 10") when use plus one
 * matrix of device_bytes and state_bytes passes one of q's limits. */
int kd_quota_check_matrix(const kd_quota_t *q, const char *user, const kd_usage_t *use,
                          size_t device_bytes, size_t state_bytes, kd_err_t *err);

/* KD_OK, or KD_EQUOTA when one more request than in_flight passes q's max_jobs. */
int kd_quota_check_jobs(const kd_quota_t *q, const char *user, size_t in_flight, kd_err_t *err);

#endif
