/*
 * The OpenCL runtime: device listing (stable order and flat index), opening by every selector
 * and the messages for bad ones, the message when no platform is installed (a child process with
 * the ICD loader pointed at an empty vendors folder), the prelude's VALUE type per dtype, the
 * program cache, a build failure surfacing the build log, and CL error names.
 */
#include "kd_solver_test.h"

#include <sys/wait.h>
#include <unistd.h>

static kd_ocl_t *ocl;

static void test_list_is_stable(void)
{
    kd_err_t err = {0};
    kd_ocl_device_desc_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    REQUIRE(kd_ocl_list_devices(&a, &na, &err) == KD_OK);
    REQUIRE(kd_ocl_list_devices(&b, &nb, &err) == KD_OK);
    CHECK(na >= 1);
    CHECK_EQ_INT(na, nb);
    for (size_t i = 0; i < na && i < nb; i++) {
        CHECK_EQ_INT(a[i].index, i);
        CHECK(a[i].device_id == b[i].device_id);
        CHECK(strcmp(a[i].name, b[i].name) == 0);
        CHECK(a[i].name[0] != '\0' && a[i].platform[0] != '\0');
        CHECK(a[i].max_alloc_bytes > 0 && a[i].global_mem_bytes >= a[i].max_alloc_bytes);
        CHECK(a[i].max_work_group >= 1 && a[i].compute_units >= 1);
        fprintf(stderr, "  [%d] %s | %s | %s | gpu=%d cpu=%d fp64=%d\n", a[i].index, a[i].platform,
                a[i].name, a[i].version, a[i].is_gpu, a[i].is_cpu, a[i].has_fp64);
    }
    free(a);
    free(b);
}

static void test_open_selectors(void)
{
    kd_err_t err = {0};
    kd_ocl_device_desc_t *list = NULL;
    size_t n = 0;
    REQUIRE(kd_ocl_list_devices(&list, &n, &err) == KD_OK);
    int has_gpu = 0, has_cpu = 0;
    for (size_t i = 0; i < n; i++) {
        has_gpu |= list[i].is_gpu;
        has_cpu |= list[i].is_cpu;
        char sel[24];
        snprintf(sel, sizeof(sel), "%zu", i);
        kd_ocl_t *o = NULL;
        CHECK_MSG(kd_ocl_open(sel, &o, &err) == KD_OK, "open %s: %s", sel, err.message);
        if (o != NULL) {
            CHECK_EQ_INT(kd_ocl_desc(o)->index, i);
            CHECK(kd_ocl_desc(o)->device_id == list[i].device_id);
            size_t wg = kd_ocl_work_group_size(o);
            CHECK(wg >= 1 && wg <= 256 && (wg & (wg - 1)) == 0 && wg <= list[i].max_work_group);
            CHECK(kd_ocl_context(o) != NULL && kd_ocl_queue(o) != NULL);
        }
        kd_ocl_close(o);
    }
    kd_ocl_t *o = NULL;
    CHECK(kd_ocl_open("auto", &o, &err) == KD_OK);
    if (o != NULL && has_gpu)
        CHECK(kd_ocl_desc(o)->is_gpu);
    kd_ocl_close(o);
    o = NULL;

    int rc = kd_ocl_open("gpu", &o, &err);
    CHECK_EQ_INT(rc, has_gpu ? KD_OK : KD_ENOTFOUND);
    if (!has_gpu)
        CHECK_STR_CONTAINS(err.message, "no GPU device found");
    kd_ocl_close(o);
    o = NULL;
    rc = kd_ocl_open("cpu", &o, &err);
    CHECK_EQ_INT(rc, has_cpu ? KD_OK : KD_ENOTFOUND);
    kd_ocl_close(o);
    o = NULL;

    char expect[96];
    snprintf(expect, sizeof(expect), "device %zu does not exist: %zu device%s found", n + 2, n,
             n == 1 ? "" : "s");
    char sel[24];
    snprintf(sel, sizeof(sel), "%zu", n + 2);
    CHECK_EQ_INT(kd_ocl_open(sel, &o, &err), KD_ENOTFOUND);
    CHECK_STR_CONTAINS(err.message, expect);
    CHECK(o == NULL);

    static const char *bad[] = {"banana", "", "-1", "1x", "GPU", "99999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_INT(kd_ocl_open(bad[i], &o, &err), KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "is not auto, gpu, cpu or a device index");
        CHECK(o == NULL);
    }
    kd_ocl_close(NULL);
    free(list);
}

/* Runs in a child whose ICD loader sees no vendors at all. */
static int no_platform_child(void)
{
    kd_err_t err = {0};
    kd_ocl_device_desc_t *list = (void *)1;
    size_t n = 99;
    if (kd_ocl_list_devices(&list, &n, &err) != KD_OK || n != 0 || list != NULL) {
        fprintf(stderr, "child: listing with no platform: n=%zu %s\n", n, err.message);
        return 3;
    }
    kd_ocl_t *o = NULL;
    int rc = kd_ocl_open("auto", &o, &err);
    if (rc != KD_EDEVICE || o != NULL ||
        strstr(err.message, "no OpenCL platform found: install an ICD (pocl-opencl-icd for the "
                            "CPU)") == NULL) {
        fprintf(stderr, "child: open gave %d \"%s\"\n", rc, err.message);
        return 4;
    }
    return 0;
}

static void test_no_platform_message(void)
{
    char dir[] = "/tmp/kd-no-icd-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        setenv("OCL_ICD_VENDORS", dir, 1);
        execl("/proc/self/exe", "test_ocl", "--no-platform", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    rmdir(dir);
}

/* The prelude makes VALUE double or float by dtype, and options reach the compiler. */
static void test_prelude_value_type(void)
{
    static const char *src = "__kernel void probe(__global int *out) {\n"
                             "    out[0] = (int)sizeof(VALUE);\n"
                             "    out[1] = KD_FP64;\n"
                             "    out[2] = KD_PROBE;\n"
                             "}\n";
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        kd_err_t err = {0};
        cl_program prog = NULL;
        int rc = kd_ocl_build_source(ocl, "probe.cl", src, dt[d], "-DKD_PROBE=41", &prog, &err);
        CHECK_MSG(rc == KD_OK, "%s", err.message);
        if (rc != KD_OK)
            continue;
        cl_int st;
        cl_kernel k = clCreateKernel(prog, "probe", &st);
        REQUIRE(st == CL_SUCCESS);
        cl_mem out = NULL;
        REQUIRE(kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, 3 * sizeof(cl_int), NULL, "probe",
                                     &out, &err) == KD_OK);
        kd_ocl_args_t a = kd_ocl_args_begin(k);
        kd_ocl_arg_mem(&a, out);
        CHECK(kd_ocl_args_end(&a, "probe", &err) == KD_OK);
        CHECK(kd_ocl_launch(ocl, k, 1, 1, "probe", &err) == KD_OK);
        cl_int got[3] = {0, 0, 0};
        CHECK(clEnqueueReadBuffer(kd_ocl_queue(ocl), out, CL_TRUE, 0, sizeof(got), got, 0, NULL,
                                  NULL) == CL_SUCCESS);
        CHECK_EQ_INT(got[0], kd_dtype_size(dt[d]));
        CHECK_EQ_INT(got[1], dt[d] == KD_DTYPE_F64);
        CHECK_EQ_INT(got[2], 41);
        clReleaseMemObject(out);
        clReleaseKernel(k);
        clReleaseProgram(prog);
    }
}

static void test_build_error_has_log(void)
{
    static const char *src = "__kernel void broken(__global VALUE *y) {\n"
                             "    y[0] = undeclared_thing_42 * 2;\n"
                             "}\n";
    kd_err_t err = {0};
    cl_program prog = NULL;
    CHECK_EQ_INT(kd_ocl_build_source(ocl, "broken.cl", src, KD_DTYPE_F32, NULL, &prog, &err),
                 KD_EDEVICE);
    CHECK(prog == NULL);
    fprintf(stderr, "  message: %s\n", err.message);
    CHECK_STR_CONTAINS(err.message, "building broken.cl for float32");
    CHECK_STR_CONTAINS(err.message, "CL_BUILD_PROGRAM_FAILURE");
    CHECK_STR_CONTAINS(err.message, "undeclared_thing_42");
    CHECK(strlen(err.message) < KD_ERR_MESSAGE_MAX);

    /* A huge log is cut to fit, with an ellipsis. */
    size_t cap = 40000;
    char *many = malloc(cap);
    size_t w = (size_t)snprintf(many, cap, "__kernel void k(__global VALUE *y) {\n");
    for (int i = 0; i < 200 && w < cap - 200; i++)
        w += (size_t)snprintf(many + w, cap - w, "    y[%d] = missing_symbol_%d;\n", i, i);
    snprintf(many + w, cap - w, "}\n");
    CHECK_EQ_INT(kd_ocl_build_source(ocl, "many.cl", many, KD_DTYPE_F32, NULL, &prog, &err),
                 KD_EDEVICE);
    CHECK_STR_CONTAINS(err.message, "missing_symbol_0");
    CHECK_STR_CONTAINS(err.message, "...");
    free(many);
}

static void test_program_cache(void)
{
    kd_err_t err = {0};
    cl_kernel a = NULL, b = NULL, c = NULL;
    CHECK(kd_ocl_kernel(ocl, "blas", KD_DTYPE_F32, "-DKD_WG_SIZE=64", "kd_blas_axpy", &a, &err) ==
          KD_OK);
    CHECK(kd_ocl_kernel(ocl, "blas", KD_DTYPE_F32, "-DKD_WG_SIZE=64", "kd_blas_axpy", &b, &err) ==
          KD_OK);
    CHECK(a != NULL && a == b);
    CHECK(kd_ocl_kernel(ocl, "blas", KD_DTYPE_F32, "-DKD_WG_SIZE=32", "kd_blas_axpy", &c, &err) ==
          KD_OK);
    CHECK(c != NULL && c != a);
    if (kd_ocl_desc(ocl)->has_fp64) {
        CHECK(kd_ocl_kernel(ocl, "blas", KD_DTYPE_F64, "-DKD_WG_SIZE=64", "kd_blas_axpy", &c,
                            &err) == KD_OK);
        CHECK(c != NULL && c != a);
    }
    CHECK_EQ_INT(kd_ocl_kernel(ocl, "no_such_program", KD_DTYPE_F32, NULL, "k", &c, &err),
                 KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "kernels/no_such_program.cl");
    CHECK_EQ_INT(kd_ocl_kernel(ocl, "prelude", KD_DTYPE_F32, NULL, "k", &c, &err), KD_EINTERNAL);
    CHECK_EQ_INT(
        kd_ocl_kernel(ocl, "blas", KD_DTYPE_F32, "-DKD_WG_SIZE=64", "kd_no_such_kernel", &c, &err),
        KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "no kernel kd_no_such_kernel in kernels/blas.cl");
    /* A program that fails to build (blas.cl needs KD_WG_SIZE) reports it every time. */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(kd_ocl_kernel(ocl, "blas", KD_DTYPE_F32, NULL, "kd_blas_axpy", &c, &err),
                     KD_EDEVICE);
        CHECK_STR_CONTAINS(err.message, "kernels/blas.cl");
    }
    CHECK_EQ_INT(kd_ocl_check_dtype(ocl, KD_DTYPE_I32, &err), KD_EINTERNAL);
    CHECK_EQ_INT(kd_ocl_check_dtype(ocl, KD_DTYPE_F64, &err),
                 kd_ocl_desc(ocl)->has_fp64 ? KD_OK : KD_EUNSUPPORTED);
    CHECK(kd_ocl_finish(ocl, &err) == KD_OK);
}

/* float64 on a device without cl_khr_fp64 is KD_EUNSUPPORTED everywhere it could start. */
static void test_fp64_unsupported(void)
{
    kd_err_t err = {0};
    int had = kd_ocl_desc(ocl)->has_fp64;
    kd_ocl_test_set_fp64(ocl, 0);
    CHECK_EQ_INT(kd_ocl_check_dtype(ocl, KD_DTYPE_F64, &err), KD_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err.message, "no cl_khr_fp64: float64 is not supported on it");
    CHECK(kd_ocl_check_dtype(ocl, KD_DTYPE_F32, &err) == KD_OK);
    cl_kernel k = NULL;
    CHECK_EQ_INT(
        kd_ocl_kernel(ocl, "blas", KD_DTYPE_F64, "-DKD_WG_SIZE=64", "kd_blas_axpy", &k, &err),
        KD_EUNSUPPORTED);
    cl_program prog = NULL;
    CHECK_EQ_INT(kd_ocl_build_source(ocl, "x.cl", "__kernel void k(void) {}", KD_DTYPE_F64, NULL,
                                     &prog, &err),
                 KD_EUNSUPPORTED);
    kd_ocl_test_set_fp64(ocl, 1);
    CHECK_EQ_INT(kd_ocl_desc(ocl)->has_fp64, had);
}

static void test_error_names(void)
{
    CHECK(strcmp(kd_ocl_error_name(CL_SUCCESS), "CL_SUCCESS") == 0);
    CHECK(strcmp(kd_ocl_error_name(-5), "CL_OUT_OF_RESOURCES") == 0);
    CHECK(strcmp(kd_ocl_error_name(-61), "CL_INVALID_BUFFER_SIZE") == 0);
    CHECK(strcmp(kd_ocl_error_name(-68), "CL_INVALID_DEVICE_PARTITION_COUNT") == 0);
    CHECK(strcmp(kd_ocl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR") == 0);
    CHECK(strcmp(kd_ocl_error_name(12345), "CL_UNKNOWN_ERROR") == 0);
    for (int code = 0; code >= -68; code--) {
        if (code < -19 && code > -30)
            continue; /* unassigned in OpenCL 1.2 */
        CHECK_MSG(strcmp(kd_ocl_error_name(code), "CL_UNKNOWN_ERROR") != 0, "code %d", code);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--no-platform") == 0)
        return no_platform_child();
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_list_is_stable);
    RUN(test_open_selectors);
    RUN(test_no_platform_message);
    RUN(test_prelude_value_type);
    RUN(test_build_error_has_log);
    RUN(test_program_cache);
    RUN(test_fp64_unsupported);
    RUN(test_error_names);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
