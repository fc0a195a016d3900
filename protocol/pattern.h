/*
 * A matrix's pattern hash: what `matrix.put` with `like` checks new values against
 * (docs/PROTOCOL.md, "New values on a held pattern"). The first 16 bytes of SHA-256 over
 *
 *   "krylovd-pattern1", rows, cols, nnz (int64 little-endian),
 *   indptr (rows + 1 int32 little-endian), indices (nnz int32 little-endian)
 *
 * of the canonical CSR (duplicates summed, columns ascending in each row), so that a client
 * computes it with any SHA-256 (Python's hashlib) from its own matrix and learns before sending
 * the values whether they fill the held pattern in the order the server expects.
 */
#ifndef KD_PROTOCOL_PATTERN_H
#define KD_PROTOCOL_PATTERN_H

#include "common/csr.h"

#include <stdint.h>

/* KD_OK, or KD_ENOMEM / KD_EINTERNAL when OpenSSL fails. */
int kd_pattern_hash(const kd_csr_t *csr, uint8_t out[16]);

#endif
