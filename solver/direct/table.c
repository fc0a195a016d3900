/*
 * The table of factorisation libraries: every kd_direct_ops_t of this build, klu first (the LU
 * that method "direct" runs on a matrix that does not look SPD). To add one: write
 * solver/direct/<name>.c exporting a kd_direct_ops_t and add a row here. A build without
 * SuiteSparse (-DKD_DIRECT=OFF) has none: method "direct" is then UNSUPPORTED.
 */
#include "solver/direct/direct.h"

#ifdef KD_DIRECT
const kd_direct_ops_t *const kd_direct_table[] = {
    &kd_direct_klu,
    &kd_direct_umfpack,
    &kd_direct_cholmod,
};
const size_t kd_direct_count = sizeof(kd_direct_table) / sizeof(kd_direct_table[0]);
#else
const kd_direct_ops_t *const kd_direct_table[] = {NULL};
const size_t kd_direct_count = 0;
#endif
