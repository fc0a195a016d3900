/*
 * The shelf of large buffers (recycle.h): a short list of idle buffers, newest first, and a table
 * of the buffers handed out (so kd_recycle_free knows a buffer of its own from any other
 * malloc'd pointer), both under one mutex. Lists are a few entries long: linear scans.
 */
#include "common/recycle.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KD_RECYCLE_SHELF_MAX 8 /* idle buffers at most, whatever the limit says */
#define KD_RECYCLE_OUT_MAX 64  /* buffers out at once that are tracked; more are plain malloc */

typedef struct kd_recycle_buf {
    void *p;
    size_t cap;
} kd_recycle_buf_t;

static pthread_mutex_t kd_recycle_lock = PTHREAD_MUTEX_INITIALIZER;
static kd_recycle_buf_t kd_shelf[KD_RECYCLE_SHELF_MAX]; /* [0] newest */
static int kd_shelf_count;
static size_t kd_shelf_bytes;
static kd_recycle_buf_t kd_out[KD_RECYCLE_OUT_MAX];
static size_t kd_limit_bytes = (size_t)256 << 20;
static int kd_limit_buffers = 4;

/* Under the lock: take the oldest idle buffers off the shelf (into drop, freed after the lock)
 * until it holds at most `buffers` of them and `bytes` together. */
static void kd_recycle_trim_locked(void **drop, int *ndrop, int buffers, size_t bytes)
{
    while (kd_shelf_count > 0 && (kd_shelf_count > buffers || kd_shelf_bytes > bytes)) {
        kd_recycle_buf_t *b = &kd_shelf[--kd_shelf_count];
        kd_shelf_bytes -= b->cap;
        drop[(*ndrop)++] = b->p;
    }
}

void *kd_recycle_alloc(size_t bytes, size_t *capacity)
{
    if (capacity != NULL)
        *capacity = bytes;
    if (bytes < KD_RECYCLE_MIN)
        return malloc(bytes > 0 ? bytes : 1);
    const size_t slack = bytes / 8 > KD_RECYCLE_MIN ? bytes / 8 : KD_RECYCLE_MIN;
    void *p = NULL;
    size_t cap = bytes;
    pthread_mutex_lock(&kd_recycle_lock);
    int slot = -1;
    for (int i = 0; i < KD_RECYCLE_OUT_MAX && slot < 0; i++)
        if (kd_out[i].p == NULL)
            slot = i;
    for (int i = 0; slot >= 0 && i < kd_shelf_count; i++)
        if (kd_shelf[i].cap >= bytes && kd_shelf[i].cap - bytes <= slack) {
            p = kd_shelf[i].p;
            cap = kd_shelf[i].cap;
            kd_shelf_bytes -= cap;
            memmove(&kd_shelf[i], &kd_shelf[i + 1],
                    (size_t)(kd_shelf_count - i - 1) * sizeof(kd_shelf[0]));
            kd_shelf_count--;
            break;
        }
    if (slot >= 0) { /* reserve the slot before malloc runs outside the lock */
        kd_out[slot].p = p != NULL ? p : (void *)&kd_out[slot];
        kd_out[slot].cap = cap;
    }
    pthread_mutex_unlock(&kd_recycle_lock);
    if (p == NULL) {
        p = malloc(bytes);
        if (slot >= 0) {
            pthread_mutex_lock(&kd_recycle_lock);
            kd_out[slot].p = p; /* NULL (out of memory) frees the slot */
            pthread_mutex_unlock(&kd_recycle_lock);
        }
    }
    if (p != NULL && capacity != NULL)
        *capacity = cap;
    return p;
}

void kd_recycle_free(void *p)
{
    if (p == NULL)
        return;
    void *drop[KD_RECYCLE_SHELF_MAX + 1];
    int ndrop = 0, kept = 0;
    pthread_mutex_lock(&kd_recycle_lock);
    for (int i = 0; i < KD_RECYCLE_OUT_MAX; i++) {
        if (kd_out[i].p != p)
            continue;
        const size_t cap = kd_out[i].cap;
        kd_out[i].p = NULL;
        /* A stale entry (its buffer given to free() instead, the address since reused by a
         * smaller block): shelving it as cap bytes would let the next taker overrun it. */
        if (malloc_usable_size(p) < cap)
            break;
        if (kd_limit_buffers > 0 && cap <= kd_limit_bytes) {
            if (kd_shelf_count == KD_RECYCLE_SHELF_MAX) { /* room for the newest */
                kd_shelf_bytes -= kd_shelf[KD_RECYCLE_SHELF_MAX - 1].cap;
                drop[ndrop++] = kd_shelf[--kd_shelf_count].p;
            }
            memmove(&kd_shelf[1], &kd_shelf[0], (size_t)kd_shelf_count * sizeof(kd_shelf[0]));
            kd_shelf[0].p = p;
            kd_shelf[0].cap = cap;
            kd_shelf_count++;
            kd_shelf_bytes += cap;
            kept = 1;
            kd_recycle_trim_locked(drop, &ndrop, kd_limit_buffers, kd_limit_bytes);
        }
        break;
    }
    pthread_mutex_unlock(&kd_recycle_lock);
    if (!kept)
        drop[ndrop++] = p;
    for (int i = 0; i < ndrop; i++) /* p itself only when it was not kept */
        free(drop[i]);
}

size_t kd_recycle_capacity(const void *p, size_t len)
{
    if (p == NULL || len < KD_RECYCLE_MIN)
        return len;
    size_t cap = len;
    pthread_mutex_lock(&kd_recycle_lock);
    for (int i = 0; i < KD_RECYCLE_OUT_MAX; i++)
        if (kd_out[i].p == p)
            cap = kd_out[i].cap;
    pthread_mutex_unlock(&kd_recycle_lock);
    return cap;
}

void kd_recycle_set_limit(size_t bytes, int buffers)
{
    void *drop[KD_RECYCLE_SHELF_MAX + 1];
    int ndrop = 0;
    pthread_mutex_lock(&kd_recycle_lock);
    kd_limit_bytes = bytes;
    kd_limit_buffers = buffers < 0                      ? 0
                       : buffers > KD_RECYCLE_SHELF_MAX ? KD_RECYCLE_SHELF_MAX
                                                        : buffers;
    kd_recycle_trim_locked(drop, &ndrop, kd_limit_buffers, kd_limit_bytes);
    pthread_mutex_unlock(&kd_recycle_lock);
    for (int i = 0; i < ndrop; i++)
        free(drop[i]);
}

void kd_recycle_release_idle(void)
{
    void *drop[KD_RECYCLE_SHELF_MAX];
    int ndrop = 0;
    pthread_mutex_lock(&kd_recycle_lock);
    kd_recycle_trim_locked(drop, &ndrop, 0, 0);
    pthread_mutex_unlock(&kd_recycle_lock);
    for (int i = 0; i < ndrop; i++)
        free(drop[i]);
}

size_t kd_recycle_idle_bytes(void)
{
    pthread_mutex_lock(&kd_recycle_lock);
    size_t bytes = kd_shelf_bytes;
    pthread_mutex_unlock(&kd_recycle_lock);
    return bytes;
}
