/*
 * Result maps shared by the loop-thread answers and the worker's handlers: a matrix's metadata
 * (matrix.put / matrix.info / matrix.list); server.status is dispatch/status.h's.
 */
#ifndef KD_SERVER_REPLIES_H
#define KD_SERVER_REPLIES_H

#include "protocol/writer.h"
#include "server/server.h"

/* The metadata map. created: 1/0 adds {"created": bool} (matrix.put), -1 leaves it out. */
void kd_reply_meta(kd_writer_t *w, const kd_matrix_meta_t *meta, int created);
/* The same map with `extra` more entries, which the caller writes next (matrix.multiply). */
void kd_reply_meta_extra(kd_writer_t *w, const kd_matrix_meta_t *meta, int created, uint32_t extra);

/* The metadata map as user sees it (matrix.info / matrix.list: kd_meta_view in scope); with
 * owners (an admin on a server with an auth file) also {"owners": [{user, pinned}]}. Changes
 * meta. */
void kd_reply_meta_owned(kd_writer_t *w, kd_matrix_meta_t *meta, const char *user,
                         kd_meta_scope_t scope, int owners);

#endif
