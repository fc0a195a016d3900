/*
 * Prometheus metrics over HTTP (`--metrics HOST:PORT`): GET /metrics answers the same numbers as
 * server.status in the Prometheus text format (version 0.0.4). A second, tiny HTTP/1.1 server on
 * the loop thread: requests up to 8 KiB, one response per connection, at most 16 connections at a
 * time, each closed after 10 s. Anything but GET or HEAD of /metrics gets 404 or 405.
 */
#ifndef KD_SERVER_METRICS_H
#define KD_SERVER_METRICS_H

#include "common/error.h"

#include <stddef.h>

struct kd_server;

/* Listen on `address` (HOST:PORT; port 0 picks one, written to *port). */
int kd_metrics_start(struct kd_server *server, const char *address, int *port, kd_err_t *err);
/* Close the listener and every open metrics connection. */
void kd_metrics_stop(struct kd_server *server);

/* The exposition text for the server's state now (malloc'd, NUL-terminated), or NULL. */
char *kd_metrics_render(struct kd_server *server, size_t *len);

#endif
