/*
 * krylov-ocl-latency: what one small request costs the device, by how it moves its vectors
 * (issue 16, item 5: the device part of a 1024-row SpMV round trip). A 1-D kernel y = 2 x + 1
 * over n values stands in for the SpMV; each variant runs `runs` times after 200 untimed ones and
 * prints the median and p90 microseconds of one request's device part, host to host:
 *
 *   pinned-async   x packed into page-locked memory, write, launch, read, clFinish (today's path)
 *   pinned-block   the same with a blocking read as the one wait
 *   pageable       write and read from malloc'd memory, blocking read
 *   zero-copy      the kernel reads x from, and writes y to, page-locked host buffers
 *                  (CL_MEM_ALLOC_HOST_PTR, mapped once and kept mapped), one clFinish
 *   launch-only    the launch and clFinish alone (the floor of any variant)
 *
 *   krylov-ocl-latency [--device SEL] [--n 1024] [--runs 5000]
 */
#include "common/clock.h"
#include "solver/runtime/ocl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kd_lat_source =
    "__kernel void kd_lat(__global const double *x, __global double *y, int n) {\n"
    "  int i = get_global_id(0); if (i < n) y[i] = 2.0 * x[i] + 1.0; }\n";

static int kd_lat_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct kd_lat {
    cl_command_queue q;
    cl_kernel k;
    cl_mem xd, yd, xh, yh; /* device buffers; page-locked host buffers */
    double *xp, *yp;       /* their mappings */
    double *xm, *ym;       /* malloc'd */
    int n;
} kd_lat_t;

static int kd_lat_launch(kd_lat_t *L, cl_mem x, cl_mem y)
{
    size_t global = ((size_t)L->n + 255) / 256 * 256, local = 256;
    clSetKernelArg(L->k, 0, sizeof(cl_mem), &x);
    clSetKernelArg(L->k, 1, sizeof(cl_mem), &y);
    clSetKernelArg(L->k, 2, sizeof(int), &L->n);
    return clEnqueueNDRangeKernel(L->q, L->k, 1, NULL, &global, &local, 0, NULL, NULL);
}

/* One request's device part by variant v; returns 0 when y came back right. */
static int kd_lat_once(kd_lat_t *L, int v, double seed)
{
    const size_t bytes = (size_t)L->n * 8;
    double *out = v == 2 ? L->ym : L->yp;
    double *in = v == 2 ? L->xm : L->xp;
    for (int i = 0; i < L->n; i++) /* the request's x, packed as the server packs it */
        in[i] = seed + i;
    switch (v) {
    case 0:
        clEnqueueWriteBuffer(L->q, L->xd, CL_FALSE, 0, bytes, L->xp, 0, NULL, NULL);
        kd_lat_launch(L, L->xd, L->yd);
        clEnqueueReadBuffer(L->q, L->yd, CL_FALSE, 0, bytes, L->yp, 0, NULL, NULL);
        clFinish(L->q);
        break;
    case 1:
        clEnqueueWriteBuffer(L->q, L->xd, CL_FALSE, 0, bytes, L->xp, 0, NULL, NULL);
        kd_lat_launch(L, L->xd, L->yd);
        clEnqueueReadBuffer(L->q, L->yd, CL_TRUE, 0, bytes, L->yp, 0, NULL, NULL);
        break;
    case 2:
        clEnqueueWriteBuffer(L->q, L->xd, CL_FALSE, 0, bytes, L->xm, 0, NULL, NULL);
        kd_lat_launch(L, L->xd, L->yd);
        clEnqueueReadBuffer(L->q, L->yd, CL_TRUE, 0, bytes, L->ym, 0, NULL, NULL);
        break;
    case 3:
        kd_lat_launch(L, L->xh, L->yh);
        clFinish(L->q);
        break;
    default:
        kd_lat_launch(L, L->xd, L->yd);
        clFinish(L->q);
        return 0;
    }
    for (int i = 0; i < L->n; i++)
        if (out[i] != 2.0 * (seed + i) + 1.0)
            return -1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *device = "auto";
    int n = 1024, runs = 5000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--device") == 0)
            device = argv[i + 1];
        else if (strcmp(argv[i], "--n") == 0)
            n = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[i + 1]);
    }
    if (n < 1 || runs < 1)
        return 2;
    kd_ocl_t *ocl;
    kd_err_t err = {0};
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-ocl-latency: %s\n", err.message);
        return 1;
    }
    kd_lat_t L = {.q = kd_ocl_queue(ocl), .n = n};
    cl_context ctx = kd_ocl_context(ocl);
    cl_device_id dev = kd_ocl_desc(ocl)->device_id;
    cl_int st;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &kd_lat_source, NULL, &st);
    if (st != CL_SUCCESS || clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "krylov-ocl-latency: the kernel did not build\n");
        return 1;
    }
    L.k = clCreateKernel(prog, "kd_lat", &st);
    const size_t bytes = (size_t)n * 8;
    L.xd = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &st);
    L.yd = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &st);
    L.xh = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &st);
    L.yh = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &st);
    L.xp = clEnqueueMapBuffer(L.q, L.xh, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL,
                              NULL, &st);
    L.yp = clEnqueueMapBuffer(L.q, L.yh, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL,
                              NULL, &st);
    L.xm = malloc(bytes);
    L.ym = malloc(bytes);
    if (L.xp == NULL || L.yp == NULL || L.xm == NULL || L.ym == NULL) {
        fprintf(stderr, "krylov-ocl-latency: no host buffers\n");
        return 1;
    }
    const char *names[] = {"pinned-async", "pinned-block", "pageable", "zero-copy", "launch-only"};
    double *t = malloc((size_t)runs * sizeof(double));
    printf("# %s, n = %d doubles (%zu bytes each way), %d runs\n", kd_ocl_desc(ocl)->name, n, bytes,
           runs);
    for (int v = 0; v < 5; v++) {
        int wrong = 0;
        for (int r = 0; r < 200; r++)
            wrong += kd_lat_once(&L, v, r) != 0;
        for (int r = 0; r < runs; r++) {
            uint64_t t0 = kd_clock_ns();
            wrong += kd_lat_once(&L, v, r + 0.5) != 0;
            t[r] = (double)(kd_clock_ns() - t0) / 1e3;
        }
        qsort(t, (size_t)runs, sizeof(double), kd_lat_cmp);
        printf("%-13s p50 %7.1f us  p90 %7.1f us  %s\n", names[v], t[runs / 2],
               t[(size_t)(runs * 0.9)], wrong ? "WRONG ANSWERS" : "answers right");
    }
    free(t);
    return 0;
}
