/*
 * A shared pattern's membership (matrix_share.h): matrices join when kd_matrix_with_values
 * (solver/matrix_values.c) builds them, and leave when they are freed, the last one releasing the
 * maps. The share's byte count moves to the next member when its first one leaves.
 */
#include "solver/matrix_share.h"

#include <stdlib.h>
#include <string.h>

int kd_matrix_shares(const kd_matrix_t *m)
{
    return m != NULL && m->share != NULL && m->share->nmembers > 1;
}

void kd_matrix_share_leave(kd_matrix_t *m)
{
    kd_matrix_share_t *s = m->share;
    if (s == NULL)
        return;
    m->share = NULL;
    size_t i = 0;
    while (i < s->nmembers && s->members[i] != m)
        i++;
    if (i == s->nmembers)
        return;
    memmove(&s->members[i], &s->members[i + 1], (s->nmembers - i - 1) * sizeof(s->members[0]));
    s->nmembers--;
    if (i == 0) {
        m->device_bytes -= s->bytes < m->device_bytes ? s->bytes : m->device_bytes;
        if (s->nmembers > 0)
            s->members[0]->device_bytes += s->bytes;
    }
    if (s->nmembers > 0)
        return;
    kd_format_release_mems(s->maps, KD_FORMAT_ARRAYS_MAX);
    free(s->members);
    free(s);
}

int kd_matrix_share_join(kd_matrix_share_t *s, kd_matrix_t *m, kd_err_t *err)
{
    if (s->nmembers == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4;
        kd_matrix_t **p = realloc(s->members, cap * sizeof(*p));
        if (p == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for a shared pattern");
        s->members = p;
        s->cap = cap;
    }
    s->members[s->nmembers++] = m;
    m->share = s;
    return KD_OK;
}
