/*
 * The writer thread: state files of matrices put with persist "behind", written off the device
 * worker so that no request waits for one (docs/OPERATIONS.md, "Persistence choices").
 *
 * The worker queues a write (the matrix's metadata as it is then, and a hold on its canonical
 * CSR: kd_csr_hold); the thread writes the file (kd_state_write, which takes the state index's
 * lock only to look up and to publish) and hands the finished write back; the worker publishes it
 * in its idle hook (cache.c: the store entry, the disk limit, the owners file, the marker). So
 * the thread touches the state directory and nothing of the store. Items are created and freed on
 * the worker (a CSR's values may come from the worker's recycled buffers).
 */
#ifndef KD_SERVER_WRITER_H
#define KD_SERVER_WRITER_H

#include "common/csr.h"
#include "common/error.h"
#include "server/store/state.h"
#include "server/store/store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kd_writer kd_writer_t;

/* One file to write, then its outcome. */
typedef struct kd_writer_item {
    struct kd_writer_item *next;
    kd_matrix_meta_t meta; /* the header written: the matrix's metadata when it was queued */
    kd_csr_t *csr;         /* a hold (kd_csr_hold): kd_writer_item_free lets go of it */
    uint64_t queued_ns;
    uint64_t write_ns; /* how long the write took */
    int rc;            /* kd_state_write's */
    size_t file_bytes;
    kd_err_t err;
} kd_writer_item_t;

/* Start the thread writing into state. wake(wake_ctx) is called from it after each finished
 * write, so that the worker publishes it (kd_worker_wake). KD_ENOMEM, KD_EINTERNAL. */
int kd_writer_start(kd_state_t *state, void (*wake)(void *ctx), void *wake_ctx, kd_writer_t **out);

/* Write every queued file, then end the thread and free what was queued and finished but not
 * taken (kd_writer_take_done first to publish those). Accepts NULL. */
void kd_writer_drain(kd_writer_t *w);
void kd_writer_free(kd_writer_t *w);

/* Queue item (taken). */
void kd_writer_queue(kd_writer_t *w, kd_writer_item_t *item);

/* Take matrix id's queued writes out of the queue (not one being written): returned as a list
 * for the caller to free (a dropped matrix, or a sync write taking over). */
kd_writer_item_t *kd_writer_cancel(kd_writer_t *w, const uint8_t id[16]);

/* Wait until matrix id's file is not being written (it may be finished and not taken yet). */
void kd_writer_wait(kd_writer_t *w, const uint8_t id[16]);

/* Whether matrix id's file is being written now. */
int kd_writer_busy(kd_writer_t *w, const uint8_t id[16]);

/* The finished writes (id NULL) or matrix id's, oldest first, as a list the caller owns. */
kd_writer_item_t *kd_writer_take_done(kd_writer_t *w, const uint8_t *id);

/* Writes queued or being written. */
size_t kd_writer_pending(kd_writer_t *w);

/* Frees item and lets go of its CSR hold (on the worker, or after it stopped). */
void kd_writer_item_free(kd_writer_item_t *item);

#endif
