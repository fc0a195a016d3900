/*
 * server.status (dispatch/status.c) and the warm-up map in it (dispatch/warm.c).
 */
#ifndef KD_SERVER_STATUS_H
#define KD_SERVER_STATUS_H

#include "protocol/writer.h"
#include "server/server.h"

/* A whole response to server.status: in full for an admin; otherwise only what a client needs
 * to form requests (version, solvers, device), nothing about other clients' use. */
void kd_reply_status(kd_writer_t *w, kd_server_t *server, uint64_t msgid, int full);
/* The warm_up map of server.status (warm.c): state, counts and the programs building and
 * pending. */
void kd_reply_warm_up(kd_writer_t *w, kd_server_t *server);

#endif
