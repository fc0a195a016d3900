/* Lookup of the embedded kernel sources (see kernels.h). */
#include "kernels/kernels.h"

#include <string.h>

const kd_kernel_source_t *kd_kernel_source_find(const char *name)
{
    for (size_t i = 0; i < kd_kernel_source_count; i++)
        if (strcmp(kd_kernel_sources[i].name, name) == 0)
            return &kd_kernel_sources[i];
    return NULL;
}
