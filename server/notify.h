/*
 * systemd integration: readiness and shutdown notifications (sd_notify READY=1 / STOPPING=1 /
 * STATUS=), the watchdog ping from the event loop (WATCHDOG=1 at half of WatchdogSec, so a loop
 * that stops turning gets the service restarted), and the listening socket systemd passes under
 * socket activation (LISTEN_FDS). Built on libsystemd where it is installed; without it these are
 * no-ops and socket activation is unavailable (krylovd then always binds --listen itself).
 */
#ifndef KD_SERVER_NOTIFY_H
#define KD_SERVER_NOTIFY_H

#include <uv.h>

/* 1 if this build can talk to systemd. */
int kd_notify_available(void);

/* The listening sockets passed by systemd: at most one TCP socket (IPv4 or IPv6) into *tcp_fd and
 * one Unix socket into *unix_fd (-1: none passed). Returns the count (0: no socket activation);
 * more than two, two of one family, or one that is not a listening stream socket is an error:
 * *message says why and -2 is returned. */
int kd_notify_listen_fds(int *tcp_fd, int *unix_fd, char *message, size_t cap);

void kd_notify_ready(const char *status);

/* Under mpirun, the serving rank is not the unit's main process (mpirun is): READY=1 then also
 * says MAINPID=<this process>, so that systemd's stop signal (KillMode=mixed) reaches the rank
 * that shuts the job down in order (deploy/krylovd-mpi.service). Call before the server starts. */
void kd_notify_claim_main(void);
void kd_notify_stopping(const char *status);
/* STATUS= alone: what the service is doing (the program warm-up's progress after READY=1). */
void kd_notify_status(const char *status);

/* Start pinging the watchdog from `loop` when the unit asks for it (WatchdogSec=). The timer is
 * kd_notify_watchdog_stop()ped at shutdown. Returns 1 when a watchdog is running. */
int kd_notify_watchdog_start(uv_loop_t *loop, uv_timer_t *timer);
void kd_notify_watchdog_stop(uv_timer_t *timer);

#endif
