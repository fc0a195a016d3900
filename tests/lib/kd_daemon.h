/*
 * Start a real krylovd for an end-to-end test: on 127.0.0.1 with port 0 (the kernel picks a free
 * port, which the daemon writes to a port file), a fresh state directory, and the test's device
 * (KD_TEST_DEVICE, default auto). kd_daemon_stop() sends SIGTERM and returns the exit status.
 * For restarts: kd_daemon_kill() (SIGKILL) or kd_daemon_signal() keep the directory, and
 * kd_daemon_restart() starts a new daemon on the same state directory.
 */
#ifndef KD_TEST_DAEMON_H
#define KD_TEST_DAEMON_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct kd_daemon {
    const char *binary; /* in KD_BIN_DIR; NULL: krylovd */
    pid_t pid;
    int port;
    char address[64];
    char dir[256];
    char state_dir[320];
} kd_daemon_t;

/* Start krylovd on d->dir (which exists). */
static inline int kd_daemon_launch(kd_daemon_t *d, const char *const *extra)
{
    char port_file[320], cache_dir[320];
    snprintf(port_file, sizeof(port_file), "%s/port", d->dir);
    snprintf(cache_dir, sizeof(cache_dir), "%s/cache", d->dir);
    snprintf(d->state_dir, sizeof(d->state_dir), "%s/state", d->dir);
    const char *state_dir = d->state_dir;
    unlink(port_file);
    d->port = 0;
    const char *device = getenv("KD_TEST_DEVICE");
    const char *argv[64];
    int argc = 0;
    char binary[512];
    snprintf(binary, sizeof(binary), "%s/%s", KD_BIN_DIR,
             d->binary != NULL ? d->binary : "krylovd");
    argv[argc++] = binary;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    argv[argc++] = "--state-dir";
    argv[argc++] = state_dir;
    /* compiled programs in the test's directory, not the user's cache (extra may override) */
    argv[argc++] = "--cache-dir";
    argv[argc++] = cache_dir;
    argv[argc++] = "--device";
    argv[argc++] = device != NULL ? device : "auto";
    argv[argc++] = "--log-level";
    argv[argc++] = getenv("KD_TEST_LOG_LEVEL") != NULL ? getenv("KD_TEST_LOG_LEVEL") : "warn";
    /* PoCL compiles all programs in minutes on a cold cache: tests build on first use (extra
     * may say otherwise: a later option wins). */
    argv[argc++] = "--warm-programs";
    argv[argc++] = "none";
    for (int i = 0; extra != NULL && extra[i] != NULL && argc < 62; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    d->pid = fork();
    if (d->pid < 0)
        return -1;
    if (d->pid == 0) {
        /* If the test dies, so does its daemon (it would keep ctest waiting on its output). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], (char *const *)argv);
        perror("execv krylovd");
        _exit(127);
    }
    for (int i = 0; i < 12000; i++) { /* PoCL may compile kernels at start: allow 120 s */
        FILE *f = fopen(port_file, "r");
        if (f != NULL) {
            int ok = fscanf(f, "%d", &d->port) == 1;
            fclose(f);
            if (ok && d->port > 0) {
                snprintf(d->address, sizeof(d->address), "127.0.0.1:%d", d->port);
                return 0;
            }
        }
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "krylovd exited during start-up (status %d)\n", status);
            d->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    return -1;
}

/* extra: NULL-terminated extra arguments, or NULL. Returns 0 or -1. */
static inline int kd_daemon_start(kd_daemon_t *d, const char *const *extra)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/krylovd-test-XXXXXX");
    if (mkdtemp(d->dir) == NULL)
        return -1;
    return kd_daemon_launch(d, extra);
}

/* Start a new daemon on the same directory (after kd_daemon_kill or kd_daemon_signal). */
static inline int kd_daemon_restart(kd_daemon_t *d, const char *const *extra)
{
    return kd_daemon_launch(d, extra);
}

/* Send sig to the daemon without waiting: -1, and nothing sent, when there is no daemon (a pid of
 * 0 or less would signal the test's whole process group, ctest included). */
static inline int kd_daemon_send(const kd_daemon_t *d, int sig)
{
    if (d->pid <= 0) {
        fprintf(stderr, "no krylovd to send signal %d to\n", sig);
        return -1;
    }
    return kill(d->pid, sig);
}

/* Send sig and wait; returns the exit status, -1 if it did not exit normally, or 128 + the
 * signal that ended it. The directory stays. */
static inline int kd_daemon_signal(kd_daemon_t *d, int sig)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    int status = 0;
    waitpid(d->pid, &status, 0);
    d->pid = 0;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* SIGKILL: a crash, as far as the state directory can tell. */
static inline void kd_daemon_kill(kd_daemon_t *d)
{
    kd_daemon_signal(d, SIGKILL);
}

/* Remove the directory (after the daemon is gone). */
static inline void kd_daemon_cleanup(kd_daemon_t *d)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->dir);
}

/* SIGTERM, wait; returns the exit status (or -1 if it did not exit normally). */
static inline int kd_daemon_stop(kd_daemon_t *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int status = 0;
    waitpid(d->pid, &status, 0);
    d->pid = 0;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
