/*
 * The start of an end-to-end test that drives krylovd through libkrylov: a test daemon
 * (tests/lib/kd_daemon.h) and a C client connected to it.
 */
#ifndef KD_TEST_DAEMON_CLIENT_H
#define KD_TEST_DAEMON_CLIENT_H

#include "kd_daemon.h"
#include "krylov.h"

#include <stdio.h>

/* Start d and connect a new client to it (free it with krylov_client_free); NULL on failure,
 * with the reason on stderr and d stopped. */
static inline krylov_client_t *kd_daemon_start_client(kd_daemon_t *d)
{
    if (kd_daemon_start(d, NULL) != 0) {
        fprintf(stderr, "could not start krylovd\n");
        return NULL;
    }
    krylov_client_t *c = krylov_client_new();
    if (krylov_connect(c, d->address) != KRYLOV_OK) {
        fprintf(stderr, "connect: %s\n", krylov_error_message(c));
        krylov_client_free(c);
        kd_daemon_stop(d);
        return NULL;
    }
    return c;
}

#endif
