/*
 * Who owns which matrix, kept across restarts: STATE_DIR/owners, one reference a line
 *     <id hex> NAME PINNED        PINNED is 0 or 1: that user's own pin
 * rewritten whole (temporary file, fsync, rename, fsync of the directory) after every change, so
 * a crash leaves the old list or the new one. A matrix file with no line (a state directory from
 * before owners were recorded, or a crash between the matrix file and this one) belongs to
 * KD_ANONYMOUS, with the pin its header records: an admin still sees it, and without an auth file
 * it is everyone's, as before. Lines for ids with no matrix file are ignored (and go at the next
 * rewrite). Worker thread, or start-up before the worker runs.
 */
#ifndef KD_SERVER_OWNERS_H
#define KD_SERVER_OWNERS_H

#include "common/error.h"

struct kd_server;

/* Rewrite STATE_DIR/owners from the store (nothing without a state directory). KD_ESTORAGE when
 * the file system is full, KD_EIO; the message names no path (the log has it). */
int kd_owners_save(struct kd_server *server, kd_err_t *err);

/* Give every registered matrix its references from STATE_DIR/owners (a missing file is an old
 * state directory, not an error); a malformed line is logged and skipped, and the temporary file
 * of a rewrite a crash interrupted is removed. KD_EIO, KD_ENOMEM. */
int kd_owners_load(struct kd_server *server, kd_err_t *err);

#endif
