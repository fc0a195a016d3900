/*
 * The formats by kd_format_t: their wire names and the table of their ops (format.h), the one
 * list that names every format's file; a format is available when its entry is not NULL. A new
 * format is one row here. Also what walks the table: closing a source frees each format's
 * prepared metadata.
 */
#include "solver/formats/format.h"

#include <stdlib.h>
#include <string.h>

static const char *const kd_format_names[KD_FMT_COUNT] = {
    [KD_FMT_CSR_SCALAR] = "csr_scalar",
    [KD_FMT_CSR_VECTOR] = "csr_vector",
    [KD_FMT_CSR_ADAPTIVE] = "csr_adaptive",
    [KD_FMT_ELL] = "ell",
    [KD_FMT_ELLPACK_R] = "ellpack_r",
    [KD_FMT_SELL_C_SIGMA] = "sell_c_sigma",
    [KD_FMT_HYB] = "hyb",
    [KD_FMT_COO] = "coo",
    [KD_FMT_TILED] = "tiled",
};

/* The implemented formats; a NULL entry would be a format this build does not have. */
static const kd_format_ops_t *const kd_format_table[KD_FMT_COUNT] = {
    [KD_FMT_CSR_SCALAR] = &kd_format_csr_scalar_ops,
    [KD_FMT_CSR_VECTOR] = &kd_format_csr_vector_ops,
    [KD_FMT_CSR_ADAPTIVE] = &kd_format_csr_adaptive_ops,
    [KD_FMT_ELL] = &kd_format_ell_ops,
    [KD_FMT_ELLPACK_R] = &kd_format_ellpack_r_ops,
    [KD_FMT_SELL_C_SIGMA] = &kd_format_sell_c_sigma_ops,
    [KD_FMT_HYB] = &kd_format_hyb_ops,
    [KD_FMT_COO] = &kd_format_coo_ops,
    [KD_FMT_TILED] = &kd_format_tiled_ops,
};

const char *kd_format_name(kd_format_t format)
{
    if ((int)format < 0 || format >= KD_FMT_COUNT)
        return "unknown";
    return kd_format_names[format];
}

int kd_format_parse(const char *name, kd_format_t *out)
{
    if (name == NULL)
        return -1;
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        if (strcmp(name, kd_format_names[f]) == 0) {
            *out = (kd_format_t)f;
            return 0;
        }
    }
    return -1;
}

int kd_format_available(kd_format_t format)
{
    return (int)format >= 0 && format < KD_FMT_COUNT && kd_format_table[format] != NULL;
}

const kd_format_ops_t *kd_format_ops(kd_format_t format)
{
    return kd_format_available(format) ? kd_format_table[format] : NULL;
}

void kd_format_source_close(kd_format_source_t *src)
{
    if (src == NULL)
        return;
    cl_mem mems[3] = {src->indptr, src->indices, src->values};
    kd_format_release_mems(mems, 3);
    src->indptr = src->indices = src->values = NULL;
    src->on_device = 0;
    free(src->inv_diagonal);
    src->inv_diagonal = NULL;
    src->scanned = 0;
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        const kd_format_ops_t *ops = kd_format_ops((kd_format_t)f);
        if (src->prepared[f] != NULL && ops != NULL && ops->prepared_free != NULL)
            ops->prepared_free(src->prepared[f]);
        src->prepared[f] = NULL;
    }
}
