/*
 * systemd notifications and socket activation (see notify.h).
 */
#include "server/notify.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef KD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

int kd_notify_available(void)
{
    return 1;
}

int kd_notify_listen_fds(int *tcp_fd, int *unix_fd, char *message, size_t cap)
{
    *tcp_fd = *unix_fd = -1;
    int n = sd_listen_fds(1); /* 1: unset LISTEN_* so children do not inherit them */
    if (n < 0) {
        snprintf(message, cap, "sd_listen_fds: %s", strerror(-n));
        return -2;
    }
    if (n > 2) {
        snprintf(message, cap,
                 "systemd passed %d sockets; krylovd listens on one TCP and one Unix socket", n);
        return -2;
    }
    for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; fd++) {
        const int is_unix = sd_is_socket(fd, AF_UNIX, SOCK_STREAM, 1) > 0;
        if (!is_unix && sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) <= 0) {
            snprintf(message, cap,
                     "socket %d systemd passed is not a listening TCP or Unix stream socket",
                     fd - SD_LISTEN_FDS_START + 1);
            return -2;
        }
        int *slot = is_unix ? unix_fd : tcp_fd;
        if (*slot >= 0) {
            snprintf(message, cap, "systemd passed two %s sockets; krylovd listens on one of each",
                     is_unix ? "Unix" : "TCP");
            return -2;
        }
        *slot = fd;
    }
    return n;
}

static int kd_notify_main;

void kd_notify_claim_main(void)
{
    kd_notify_main = 1;
}

void kd_notify_ready(const char *status)
{
    if (kd_notify_main)
        sd_notifyf(0, "READY=1\nMAINPID=%lu\nSTATUS=%s", (unsigned long)getpid(), status);
    else
        sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void kd_notify_stopping(const char *status)
{
    sd_notifyf(0, "STOPPING=1\nSTATUS=%s", status);
}

void kd_notify_status(const char *status)
{
    sd_notifyf(0, "STATUS=%s", status);
}

static void kd_notify_watchdog_ping(uv_timer_t *timer)
{
    (void)timer;
    sd_notify(0, "WATCHDOG=1");
}

int kd_notify_watchdog_start(uv_loop_t *loop, uv_timer_t *timer)
{
    uint64_t usec = 0;
    if (uv_timer_init(loop, timer) != 0)
        return 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return 0;
    uint64_t every_ms = usec / 2000;
    if (every_ms == 0)
        every_ms = 1;
    sd_notify(0, "WATCHDOG=1");
    uv_timer_start(timer, kd_notify_watchdog_ping, every_ms, every_ms);
    KD_INFO("notify", "watchdog every %llu ms", (unsigned long long)every_ms);
    return 1;
}

#else

int kd_notify_available(void)
{
    return 0;
}

int kd_notify_listen_fds(int *tcp_fd, int *unix_fd, char *message, size_t cap)
{
    (void)message;
    (void)cap;
    *tcp_fd = *unix_fd = -1;
    return 0;
}

void kd_notify_claim_main(void) {}

void kd_notify_ready(const char *status)
{
    (void)status;
}

void kd_notify_stopping(const char *status)
{
    (void)status;
}

void kd_notify_status(const char *status)
{
    (void)status;
}

int kd_notify_watchdog_start(uv_loop_t *loop, uv_timer_t *timer)
{
    uv_timer_init(loop, timer);
    return 0;
}

#endif

void kd_notify_watchdog_stop(uv_timer_t *timer)
{
    uv_timer_stop(timer);
    if (!uv_is_closing((uv_handle_t *)timer))
        uv_close((uv_handle_t *)timer, NULL);
}
