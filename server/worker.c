/*
 * The device worker thread and its two queues (see worker.h). Both queues are singly linked lists
 * under one mutex: `queue` (loop -> worker, bounded) and `done` (worker -> loop, unbounded but
 * never longer than the jobs in flight plus their notifications). uv_async_send coalesces wake-ups,
 * so the loop drains the whole done list on each wake.
 */
#include "server/worker.h"
#include "common/error.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/job.h"

#include <stdlib.h>

typedef struct kd_event {
    struct kd_event *next;
    kd_job_t *job;
    void *bytes; /* NULL: job completion; else a notification */
    size_t len;
} kd_event_t;

struct kd_worker {
    uv_loop_t *loop;
    uv_async_t async;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    kd_job_t *head, *tail;
    size_t queued;
    size_t capacity;
    int running; /* a job is being run */
    int poked;   /* kd_worker_wake: run the idle hook */
    int stopping;
    int joined;
    kd_event_t *done_head, *done_tail;
    kd_worker_callbacks_t cb;
    void (*closed)(void *arg);
    void *closed_arg;
    atomic_uint_fast64_t spin_ns;   /* kd_worker_set_spin (set while the thread runs) */
    atomic_uint_fast64_t submitted; /* jobs ever submitted: what a spinning worker watches */
    atomic_uint_fast64_t busy_ns;   /* time spent running jobs */
};

static void kd_worker_push_event(kd_worker_t *w, kd_event_t *ev)
{
    pthread_mutex_lock(&w->lock);
    if (w->done_tail != NULL)
        w->done_tail->next = ev;
    else
        w->done_head = ev;
    w->done_tail = ev;
    pthread_mutex_unlock(&w->lock);
    uv_async_send(&w->async);
}

/* Before sleeping, watch for a new job for a while: a sleeping thread takes tens of
 * microseconds to wake, as much as a small request's whole device time on a GPU. */
static void kd_worker_spin(kd_worker_t *w)
{
    const uint64_t spin = atomic_load_explicit(&w->spin_ns, memory_order_relaxed);
    if (spin == 0)
        return;
    const uint_fast64_t seen = atomic_load_explicit(&w->submitted, memory_order_acquire);
    const uint64_t until = kd_clock_ns() + spin;
    while (atomic_load_explicit(&w->submitted, memory_order_acquire) == seen &&
           kd_clock_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* The idle work between jobs: all of it while no job waits, overdue work otherwise. */
static void kd_worker_idle(kd_worker_t *w)
{
    if (w->cb.idle == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    int empty = w->head == NULL;
    pthread_mutex_unlock(&w->lock);
    while (w->cb.idle(w->cb.ctx, empty)) {
        pthread_mutex_lock(&w->lock);
        empty = w->head == NULL;
        pthread_mutex_unlock(&w->lock);
    }
}

static void *kd_worker_main(void *arg)
{
    kd_worker_t *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        w->poked = 0;
        pthread_mutex_unlock(&w->lock);
        kd_worker_idle(w);
        pthread_mutex_lock(&w->lock);
        if (w->head == NULL && !w->stopping && !w->poked) {
            pthread_mutex_unlock(&w->lock);
            kd_worker_spin(w);
            pthread_mutex_lock(&w->lock);
        }
        while (w->head == NULL && !w->stopping && !w->poked)
            pthread_cond_wait(&w->wake, &w->lock);
        if (w->head == NULL && w->poked && !w->stopping) {
            pthread_mutex_unlock(&w->lock);
            continue;
        }
        kd_job_t *job = w->head;
        if (job == NULL) { /* stopping and drained */
            pthread_mutex_unlock(&w->lock);
            break;
        }
        w->head = job->queue_next;
        if (w->head == NULL)
            w->tail = NULL;
        w->queued--;
        w->running = 1;
        pthread_mutex_unlock(&w->lock);

        job->queue_next = NULL;
        uint64_t t0 = kd_clock_ns();
        w->cb.run(w->cb.ctx, job);
        atomic_fetch_add(&w->busy_ns, kd_clock_ns() - t0);

        pthread_mutex_lock(&w->lock);
        w->running = 0;
        pthread_mutex_unlock(&w->lock);
        kd_worker_finish(w, job);
    }
    return NULL;
}

static void kd_worker_drain(uv_async_t *handle)
{
    kd_worker_t *w = handle->data;
    pthread_mutex_lock(&w->lock);
    kd_event_t *ev = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->lock);
    while (ev != NULL) {
        kd_event_t *next = ev->next;
        if (ev->bytes != NULL)
            w->cb.notify(w->cb.ctx, ev->job, ev->bytes, ev->len);
        else
            w->cb.done(w->cb.ctx, ev->job);
        free(ev);
        ev = next;
    }
}

int kd_worker_start(uv_loop_t *loop, size_t capacity, const kd_worker_callbacks_t *cb,
                    kd_worker_t **out)
{
    kd_worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return KD_ENOMEM;
    w->loop = loop;
    w->capacity = capacity;
    w->cb = *cb;
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w);
        return KD_EINTERNAL;
    }
    if (pthread_cond_init(&w->wake, NULL) != 0)
        goto fail_mutex;
    if (uv_async_init(loop, &w->async, kd_worker_drain) != 0)
        goto fail_cond;
    w->async.data = w;
    if (pthread_create(&w->thread, NULL, kd_worker_main, w) != 0) {
        /* The async handle must be closed through the loop; the caller's stop path does that. */
        w->stopping = 1;
        w->joined = 1;
        *out = w;
        return KD_EINTERNAL;
    }
    *out = w;
    return KD_OK;
fail_cond:
    pthread_cond_destroy(&w->wake);
fail_mutex:
    pthread_mutex_destroy(&w->lock);
    free(w);
    return KD_EINTERNAL;
}

int kd_worker_submit(kd_worker_t *w, kd_job_t *job)
{
    pthread_mutex_lock(&w->lock);
    if (w->stopping) {
        pthread_mutex_unlock(&w->lock);
        return KD_ECANCELLED;
    }
    if (w->queued >= w->capacity) {
        pthread_mutex_unlock(&w->lock);
        return KD_EBUSY;
    }
    job->queue_next = NULL;
    if (w->tail != NULL)
        w->tail->queue_next = job;
    else
        w->head = job;
    w->tail = job;
    w->queued++;
    atomic_fetch_add_explicit(&w->submitted, 1, memory_order_release);
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    return KD_OK;
}

size_t kd_worker_take(kd_worker_t *w, kd_worker_match_fn match, void *arg, kd_job_t **out,
                      size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&w->lock);
    kd_job_t *prev = NULL, *j = w->head;
    while (j != NULL && n < max) {
        kd_job_t *next = j->queue_next;
        if (match(arg, j)) {
            if (prev != NULL)
                prev->queue_next = next;
            else
                w->head = next;
            if (w->tail == j)
                w->tail = prev;
            w->queued--;
            j->queue_next = NULL;
            out[n++] = j;
        } else {
            prev = j;
        }
        j = next;
    }
    pthread_mutex_unlock(&w->lock);
    return n;
}

void kd_worker_requeue(kd_worker_t *w, kd_job_t **jobs, size_t n)
{
    if (n == 0)
        return;
    for (size_t i = 0; i + 1 < n; i++)
        jobs[i]->queue_next = jobs[i + 1];
    pthread_mutex_lock(&w->lock);
    jobs[n - 1]->queue_next = w->head;
    if (w->head == NULL)
        w->tail = jobs[n - 1];
    w->head = jobs[0];
    w->queued += n;
    pthread_mutex_unlock(&w->lock);
}

void kd_worker_run(kd_worker_t *w, kd_job_t *job)
{
    w->cb.run(w->cb.ctx, job);
}

void kd_worker_finish(kd_worker_t *w, kd_job_t *job)
{
    kd_event_t *ev = calloc(1, sizeof(*ev));
    if (ev == NULL) {
        /* Cannot report through an event; abort is better than a lost client forever. */
        KD_ERROR("worker", "out of memory posting a completion");
        abort();
    }
    ev->job = job;
    kd_worker_push_event(w, ev);
}

int kd_worker_remove(kd_worker_t *w, kd_job_t *job)
{
    pthread_mutex_lock(&w->lock);
    kd_job_t *prev = NULL, *j = w->head;
    while (j != NULL && j != job) {
        prev = j;
        j = j->queue_next;
    }
    if (j != NULL) {
        if (prev != NULL)
            prev->queue_next = j->queue_next;
        else
            w->head = j->queue_next;
        if (w->tail == j)
            w->tail = prev;
        w->queued--;
        j->queue_next = NULL;
    }
    pthread_mutex_unlock(&w->lock);
    return j != NULL ? KD_OK : KD_ENOTFOUND;
}

void kd_worker_notify(kd_worker_t *w, kd_job_t *job, void *bytes, size_t len)
{
    kd_event_t *ev = calloc(1, sizeof(*ev));
    if (ev == NULL) {
        free(bytes); /* a progress notification is best-effort */
        return;
    }
    ev->job = job;
    ev->bytes = bytes;
    ev->len = len;
    kd_worker_push_event(w, ev);
}

uint64_t kd_worker_busy_ns(kd_worker_t *w)
{
    return atomic_load(&w->busy_ns);
}

void kd_worker_wake(void *arg)
{
    kd_worker_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->poked = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

void kd_worker_set_spin(kd_worker_t *w, uint64_t ns)
{
    atomic_store(&w->spin_ns, ns);
}

size_t kd_worker_queued(kd_worker_t *w)
{
    pthread_mutex_lock(&w->lock);
    size_t n = w->queued;
    pthread_mutex_unlock(&w->lock);
    return n;
}

int kd_worker_busy(kd_worker_t *w)
{
    pthread_mutex_lock(&w->lock);
    int busy = w->running || w->queued > 0;
    pthread_mutex_unlock(&w->lock);
    return busy;
}

static void kd_worker_async_closed(uv_handle_t *handle)
{
    kd_worker_t *w = handle->data;
    void (*closed)(void *) = w->closed;
    void *arg = w->closed_arg;
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
    if (closed != NULL)
        closed(arg);
}

void kd_worker_stop(kd_worker_t *w, void (*closed)(void *arg), void *arg)
{
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    if (!w->joined) {
        pthread_join(w->thread, NULL);
        w->joined = 1;
    }
    kd_worker_drain(&w->async); /* deliver what finished after the last wake */
    w->closed = closed;
    w->closed_arg = arg;
    uv_close((uv_handle_t *)&w->async, kd_worker_async_closed);
}
