/*
 * New values on a held pattern (solver/matrix_values.c): each slot of a format's values array
 * takes the new value of the canonical entry its map names, or zero where the map says padding
 * (-1). One work-item per slot: coalesced writes, gathered reads.
 */
__kernel KD_WG_ATTR void kd_values_gather(const long slots, __global const int *map,
                                          __global const VALUE *src, __global VALUE *dst)
{
    const size_t s = get_global_id(0);
    if (s >= (size_t)slots)
        return;
    const int k = map[s];
    dst[s] = k >= 0 ? src[k] : KD_ZERO;
}

/* The reverse, for a matrix's values in canonical order (kd_matrix_values_canonical): each slot's
 * value goes to the canonical entry its map names; padding (-1) goes nowhere. An entry reaches
 * one slot (a map that sent one entry to two would carry the same value to both). */
__kernel KD_WG_ATTR void kd_values_scatter(const long slots, __global const int *map,
                                           __global const VALUE *src, __global VALUE *dst)
{
    const size_t s = get_global_id(0);
    if (s >= (size_t)slots)
        return;
    const int k = map[s];
    if (k >= 0)
        dst[k] = src[s];
}
