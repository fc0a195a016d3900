/*
 * krylovd: parse the configuration, print the devices if asked, then serve until a signal.
 */
#include "common/log.h"
#include "server/config.h"
#include "server/server.h"
#include "solver/ocl.h"

#include <stdio.h>
#include <stdlib.h>

static int kd_list_devices(void)
{
    kd_ocl_device_desc_t *devs = NULL;
    size_t count = 0;
    kd_err_t err = {0};
    if (kd_ocl_list_devices(&devs, &count, &err) != KD_OK) {
        fprintf(stderr, "krylovd: %s\n", err.message);
        return 1;
    }
    if (count == 0)
        printf("no OpenCL devices found (install an ICD: pocl-opencl-icd for the CPU, or the GPU "
               "vendor's driver)\n");
    for (size_t i = 0; i < count; i++) {
        const kd_ocl_device_desc_t *d = &devs[i];
        printf("%d: %s [%s] platform=\"%s\" %s, %u compute units, %.1f GiB, fp64 %s\n", d->index,
               d->name, d->is_gpu ? "gpu" : (d->is_cpu ? "cpu" : "other"), d->platform, d->version,
               d->compute_units, (double)d->global_mem_bytes / (1u << 30),
               d->has_fp64 ? "yes" : "no");
    }
    free(devs);
    return 0;
}

int main(int argc, char **argv)
{
    kd_config_t cfg;
    kd_config_defaults(&cfg);
    kd_err_t err = {0};
    int rc = kd_config_parse_args(&cfg, argc, argv, &err);
    if (rc == 1)
        return 0;
    if (rc != 0) {
        fprintf(stderr, "krylovd: %s\n", err.message);
        return 2;
    }
    if (cfg.list_devices)
        return kd_list_devices();
    kd_log_set_level(cfg.log_level);
    if (cfg.log_file[0] != '\0' && kd_log_open(cfg.log_file) != KD_OK) {
        fprintf(stderr, "krylovd: cannot open log file %s\n", cfg.log_file);
        return 1;
    }

    kd_server_t server;
    /* The loop's idle time, for server.status's loop_busy_s (where a busy service's time goes) */
    (void)uv_loop_configure(uv_default_loop(), UV_METRICS_IDLE_TIME);
    if (kd_server_init(&server, uv_default_loop(), &cfg, &err) != KD_OK) {
        KD_ERROR("server", "%s", err.message);
        return 1;
    }
    rc = kd_server_run(&server);
    uv_loop_close(uv_default_loop());
    return rc;
}
