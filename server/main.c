/*
 * krylovd: parse the configuration, print the devices if asked, then serve until a signal.
 *
 * Under mpirun with more than one rank (a build with KD_MPI): rank 0 serves exactly as a single
 * process does, and every other rank opens its own device and follows rank 0's commands
 * (dist/follow.h) until rank 0 stops it. The main thread initialises and finalises MPI; in
 * between only rank 0's device worker calls it (MPI_THREAD_SERIALIZED is enough).
 */
#include "common/log.h"
#include "server/config.h"
#include "server/notify.h"
#include "server/server.h"
#include "solver/runtime/ocl.h"

#ifdef KD_MPI
#include "dist/follow.h"

#include <signal.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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

#ifdef KD_MPI
/* The ranks mpirun started (its environment; 1 without mpirun). MPI is only initialised for
 * more than one: a lone rank is the single-process service, with nothing of MPI in it. */
static int kd_mpi_ranks_from_env(void)
{
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    int n = s != NULL ? atoi(s) : 1;
    return n > 1 ? n : 1;
}

/* The device of local rank `local` among those --device chooses: gpu, cpu or auto (the GPUs,
 * else every device) name a kind, and rank i takes the i-th of that kind (round robin when the
 * host has fewer); a device index names one device, which every rank then shares. */
static void kd_mpi_rank_device(kd_config_t *cfg, int local)
{
    const char *sel = cfg->device;
    const int gpu = strcmp(sel, "gpu") == 0, cpu = strcmp(sel, "cpu") == 0;
    if (!gpu && !cpu && strcmp(sel, "auto") != 0)
        return;
    kd_ocl_device_desc_t *devs = NULL;
    size_t count = 0, gpus = 0;
    kd_err_t err = {0};
    if (kd_ocl_list_devices(&devs, &count, &err) != KD_OK) /* kd_ocl_open reports it */
        return;
    for (size_t i = 0; i < count; i++)
        gpus += devs[i].is_gpu != 0;
    int pick[64], n = 0;
    for (size_t i = 0; i < count && n < 64; i++)
        if ((gpu && devs[i].is_gpu) || (cpu && devs[i].is_cpu) ||
            (!gpu && !cpu && (gpus == 0 || devs[i].is_gpu)))
            pick[n++] = devs[i].index;
    if (n > 0)
        snprintf(cfg->device, sizeof(cfg->device), "%d", pick[local % n]);
    free(devs);
}

/* Ranks > 0: the device, then rank 0's commands until STOP. `ok` is this rank's start-up. */
static int kd_follower(kd_config_t *cfg, int rank)
{
    /* mpirun sends SIGTERM to every rank when it is told to stop: rank 0 shuts down gracefully
     * and then sends STOP, which must find the followers still there. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    kd_err_t err = {0};
    kd_ocl_t *ocl = NULL;
    int ok = kd_ocl_open(cfg->device, &ocl, &err) == KD_OK, all = 0;
    if (!ok)
        KD_ERROR("dist", "rank %d: %s", rank, err.message);
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    kd_dist_node_t node;
    int rc = 1;
    if (all && kd_dist_node_init(&node, ocl, &err) == KD_OK) {
        KD_INFO("dist", "rank %d follows rank 0 on %s", rank, kd_ocl_desc(ocl)->name);
        rc = kd_dist_follow(&node);
        kd_dist_node_free(&node);
    }
    kd_ocl_close(ocl);
    MPI_Finalize();
    return rc;
}
#endif

/* The soft RLIMIT_NOFILE up to the hard one: connections, received memfds (shm.register) and the
 * driver's files all count; a 1024 soft limit (the usual default outside systemd) is low. */
static void kd_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    const rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        KD_DEBUG("server", "RLIMIT_NOFILE raised from %llu to %llu", (unsigned long long)was,
                 (unsigned long long)rl.rlim_max);
    else
        KD_INFO("server", "cannot raise RLIMIT_NOFILE from %llu", (unsigned long long)was);
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
    kd_config_resolve_cache_dir(&cfg);
    kd_log_set_level(cfg.log_level);
    if (cfg.log_file[0] != '\0' && kd_log_open(cfg.log_file) != KD_OK) {
        fprintf(stderr, "krylovd: cannot open log file %s\n", cfg.log_file);
        return 1;
    }
    kd_raise_nofile();

#ifdef KD_MPI
    const int ranks = kd_mpi_ranks_from_env();
    kd_dist_node_t node;
    if (ranks > 1) {
        int provided = 0, rank = 0;
        if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS ||
            provided < MPI_THREAD_SERIALIZED) {
            KD_ERROR("dist", "MPI_Init_thread: MPI_THREAD_SERIALIZED is not provided");
            return 1;
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        kd_mpi_rank_device(&cfg, local != NULL ? atoi(local) : rank);
        if (rank > 0)
            return kd_follower(&cfg, rank);
        int ok = 1, all = 0; /* the followers' devices */
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all || kd_dist_node_init(&node, NULL, &err) != KD_OK) {
            KD_ERROR("dist", "a rank could not start (its log says why)");
            MPI_Finalize();
            return 1;
        }
        kd_notify_claim_main();
    }
#endif

    kd_server_t server;
    /* The loop's idle time, for server.status's loop_busy_s (where a busy service's time goes) */
    (void)uv_loop_configure(uv_default_loop(), UV_METRICS_IDLE_TIME);
    if (kd_server_init(&server, uv_default_loop(), &cfg, &err) != KD_OK) {
        KD_ERROR("server", "%s", err.message);
        rc = 1;
    } else {
#ifdef KD_MPI
        if (ranks > 1) {
            node.ocl = server.ocl;
            server.dist = &node;
            KD_INFO("dist", "rank 0 of %d serves; matrices over %lld nonzeros are spread",
                    node.comm.size, (long long)cfg.distribute_nnz);
        }
#endif
        rc = kd_server_run(&server); /* the worker, the only other MPI caller, has stopped */
        uv_loop_close(uv_default_loop());
    }
#ifdef KD_MPI
    if (ranks > 1) {
        kd_dist_stop(&node);
        kd_dist_node_free(&node);
        MPI_Finalize();
    }
#endif
    return rc;
}
