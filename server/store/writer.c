/*
 * The writer thread (see writer.h). One mutex guards the queue, the finished list and the id
 * being written; `more` wakes the thread, `idle` wakes a worker waiting for a write to end. The
 * file is written with the mutex released.
 */
#include "server/store/writer.h"
#include "common/clock.h"
#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct kd_writer {
    kd_state_t *state;
    void (*wake)(void *ctx);
    void *wake_ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t more, idle;
    kd_writer_item_t *head, *tail;           /* queued, oldest first */
    kd_writer_item_t *done_head, *done_tail; /* finished, oldest first */
    size_t queued;
    int writing; /* `current` names the matrix being written */
    uint8_t current[16];
    int stopping, started;
};

static void kd_writer_push_done(kd_writer_t *w, kd_writer_item_t *item)
{
    item->next = NULL;
    if (w->done_tail != NULL)
        w->done_tail->next = item;
    else
        w->done_head = item;
    w->done_tail = item;
}

static void *kd_writer_main(void *arg)
{
    kd_writer_t *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->head == NULL && !w->stopping)
            pthread_cond_wait(&w->more, &w->lock);
        kd_writer_item_t *item = w->head;
        if (item == NULL) /* stopping, and every queued file written */
            break;
        w->head = item->next;
        if (w->head == NULL)
            w->tail = NULL;
        w->queued--;
        w->writing = 1;
        memcpy(w->current, item->meta.id, 16);
        pthread_mutex_unlock(&w->lock);

        const uint64_t t0 = kd_clock_ns();
        item->rc = kd_state_write(w->state, &item->meta, item->csr, &item->file_bytes, &item->err);
        item->write_ns = kd_clock_ns() - t0;

        pthread_mutex_lock(&w->lock);
        w->writing = 0;
        kd_writer_push_done(w, item);
        pthread_cond_broadcast(&w->idle);
        pthread_mutex_unlock(&w->lock);
        w->wake(w->wake_ctx);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int kd_writer_start(kd_state_t *state, void (*wake)(void *ctx), void *wake_ctx, kd_writer_t **out)
{
    *out = NULL;
    kd_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return KD_ENOMEM;
    w->state = state;
    w->wake = wake;
    w->wake_ctx = wake_ctx;
    if (pthread_mutex_init(&w->lock, NULL) != 0)
        goto fail;
    if (pthread_cond_init(&w->more, NULL) != 0)
        goto fail_lock;
    if (pthread_cond_init(&w->idle, NULL) != 0)
        goto fail_more;
    if (pthread_create(&w->thread, NULL, kd_writer_main, w) != 0)
        goto fail_idle;
    w->started = 1;
    *out = w;
    return KD_OK;
fail_idle:
    pthread_cond_destroy(&w->idle);
fail_more:
    pthread_cond_destroy(&w->more);
fail_lock:
    pthread_mutex_destroy(&w->lock);
fail:
    free(w);
    return KD_EINTERNAL;
}

void kd_writer_drain(kd_writer_t *w)
{
    if (w == NULL || !w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_signal(&w->more);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    w->started = 0;
}

static void kd_writer_free_list(kd_writer_item_t *item)
{
    while (item != NULL) {
        kd_writer_item_t *next = item->next;
        kd_writer_item_free(item);
        item = next;
    }
}

void kd_writer_free(kd_writer_t *w)
{
    if (w == NULL)
        return;
    kd_writer_drain(w);
    kd_writer_free_list(w->head);
    kd_writer_free_list(w->done_head);
    pthread_cond_destroy(&w->idle);
    pthread_cond_destroy(&w->more);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void kd_writer_queue(kd_writer_t *w, kd_writer_item_t *item)
{
    item->next = NULL;
    pthread_mutex_lock(&w->lock);
    if (w->tail != NULL)
        w->tail->next = item;
    else
        w->head = item;
    w->tail = item;
    w->queued++;
    pthread_cond_signal(&w->more);
    pthread_mutex_unlock(&w->lock);
}

kd_writer_item_t *kd_writer_cancel(kd_writer_t *w, const uint8_t id[16])
{
    kd_writer_item_t *cancelled = NULL;
    pthread_mutex_lock(&w->lock);
    kd_writer_item_t *prev = NULL, *item = w->head;
    while (item != NULL) {
        kd_writer_item_t *next = item->next;
        if (memcmp(item->meta.id, id, 16) == 0) {
            if (prev != NULL)
                prev->next = next;
            else
                w->head = next;
            if (w->tail == item)
                w->tail = prev;
            w->queued--;
            item->next = cancelled;
            cancelled = item;
        } else {
            prev = item;
        }
        item = next;
    }
    pthread_mutex_unlock(&w->lock);
    return cancelled;
}

static int kd_writer_writing(const kd_writer_t *w, const uint8_t id[16])
{
    return w->writing && memcmp(w->current, id, 16) == 0;
}

void kd_writer_wait(kd_writer_t *w, const uint8_t id[16])
{
    pthread_mutex_lock(&w->lock);
    while (kd_writer_writing(w, id))
        pthread_cond_wait(&w->idle, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

int kd_writer_busy(kd_writer_t *w, const uint8_t id[16])
{
    pthread_mutex_lock(&w->lock);
    const int busy = kd_writer_writing(w, id);
    pthread_mutex_unlock(&w->lock);
    return busy;
}

kd_writer_item_t *kd_writer_take_done(kd_writer_t *w, const uint8_t *id)
{
    kd_writer_item_t *taken = NULL, **tail = &taken;
    pthread_mutex_lock(&w->lock);
    kd_writer_item_t *prev = NULL, *item = w->done_head;
    while (item != NULL) {
        kd_writer_item_t *next = item->next;
        if (id == NULL || memcmp(item->meta.id, id, 16) == 0) {
            if (prev != NULL)
                prev->next = next;
            else
                w->done_head = next;
            if (w->done_tail == item)
                w->done_tail = prev;
            item->next = NULL;
            *tail = item;
            tail = &item->next;
        } else {
            prev = item;
        }
        item = next;
    }
    pthread_mutex_unlock(&w->lock);
    return taken;
}

size_t kd_writer_pending(kd_writer_t *w)
{
    pthread_mutex_lock(&w->lock);
    const size_t n = w->queued + (size_t)w->writing;
    pthread_mutex_unlock(&w->lock);
    return n;
}

void kd_writer_item_free(kd_writer_item_t *item)
{
    if (item == NULL)
        return;
    kd_csr_free(item->csr);
    free(item);
}
