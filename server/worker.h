/*
 * A device worker: one thread that owns one OpenCL device and runs jobs from a bounded FIFO
 * queue, so the event loop never waits on the GPU. The loop thread submits jobs (KD_EBUSY when the
 * queue is full); the worker runs each through the handler and posts the finished job back; a
 * uv_async wakes the loop, which drains the completions and writes the responses. Notifications a
 * running job emits (solve.progress) travel the same way, in order with its completion.
 */
#ifndef KD_SERVER_WORKER_H
#define KD_SERVER_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kd_worker kd_worker_t;
struct kd_job;

/* Runs on the worker thread: do the job, leave the encoded response in job->response. */
typedef void (*kd_worker_run_fn)(void *ctx, struct kd_job *job);

/* Runs on the loop thread for each finished job (job->response set) and for each notification
 * (bytes owned by the callee, job still in flight). */
typedef void (*kd_worker_done_fn)(void *ctx, struct kd_job *job);
typedef void (*kd_worker_notify_fn)(void *ctx, struct kd_job *job, void *bytes, size_t len);

/* Runs on the worker thread between jobs (may be NULL): work that waits for no client (publishing
 * a state file the writer thread wrote behind its reply). queue_empty: no job waits (else only overdue work should be
 * done). Returns nonzero while it has more to do. When the worker stops it is called until it
 * returns 0, after the last job: shutdown waits for it. */
typedef int (*kd_worker_idle_fn)(void *ctx, int queue_empty);

typedef struct kd_worker_callbacks {
    kd_worker_run_fn run;
    kd_worker_idle_fn idle;
    kd_worker_done_fn done;
    kd_worker_notify_fn notify;
    void *ctx;
} kd_worker_callbacks_t;

/* Start the thread. capacity bounds the jobs waiting (not counting the running one). */
int kd_worker_start(uv_loop_t *loop, size_t capacity, const kd_worker_callbacks_t *cb,
                    kd_worker_t **out);

/* Queue a job (loop thread). KD_EBUSY when the queue is full, KD_ECANCELLED after stop began. */
int kd_worker_submit(kd_worker_t *w, struct kd_job *job);

/* Take a job that has not started back out of the queue (loop thread). KD_OK when it was
 * removed (the worker will never see it: the caller answers it), KD_ENOTFOUND when it is running
 * or finished. */
int kd_worker_remove(kd_worker_t *w, struct kd_job *job);

/* From the worker thread, during run: take up to max queued jobs for which match(arg, job) is
 * true out of the queue, in queue order, into out (match runs under the queue's lock: it may
 * read the job's request, nothing else). Each taken job is then the caller's to run and to hand
 * back through kd_worker_finish; the loop can no longer remove it. Returns how many. Dynamic
 * batching (server/handlers/spmv.c) and serving short requests inside a long one use it. */
typedef int (*kd_worker_match_fn)(void *arg, const struct kd_job *job);
size_t kd_worker_take(kd_worker_t *w, kd_worker_match_fn match, void *arg, struct kd_job **out,
                      size_t max);

/* From the worker thread: put jobs[0..n) taken with kd_worker_take back at the head of the queue,
 * in that order, ahead of every job queued now (they were queued before those): a request that
 * waits for something the running job holds (device memory, server/handlers/spmv.c) runs after it.
 * The loop may remove them again (timeout, cancel) as any queued job. */
void kd_worker_requeue(kd_worker_t *w, struct kd_job **jobs, size_t n);

/* From the worker thread, during run: run a job taken with kd_worker_take through the run
 * callback, as if the worker had taken it itself (one that must run alone after all); its
 * response is set, and the caller still posts it with kd_worker_finish. */
void kd_worker_run(kd_worker_t *w, struct kd_job *job);

/* From the worker thread: post a job taken with kd_worker_take, its response set, to the loop
 * (the job run through kd_worker_run_fn is posted by the worker itself). */
void kd_worker_finish(kd_worker_t *w, struct kd_job *job);

/* From the worker thread, during run: send bytes (malloc'd, ownership passes) to the job's
 * client ahead of its response. */
void kd_worker_notify(kd_worker_t *w, struct kd_job *job, void *bytes, size_t len);

/* How long the worker watches for a new job before it sleeps, after each one (0: it sleeps at
 * once). On a GPU a few tens of microseconds of one core buy back the
 * wake-up latency of every short request that follows another within that time; with PoCL the
 * device is the CPU, and a spinning worker would take a core from it. */
void kd_worker_set_spin(kd_worker_t *w, uint64_t ns);

/* Any thread: run the idle hook soon, even with no job queued (the writer thread finished a
 * file). w is a void * so that it fits a plain callback. */
void kd_worker_wake(void *w);

/* Nanoseconds the worker has spent running jobs (any thread): its utilisation over a period. */
uint64_t kd_worker_busy_ns(kd_worker_t *w);

/* Jobs waiting and running (any thread). */
size_t kd_worker_queued(kd_worker_t *w);
int kd_worker_busy(kd_worker_t *w);

/* Refuse new jobs; the thread ends after the queue drains (queued jobs still run: cancel them
 * first for a fast stop). Then join it, deliver the last completions and close the async handle;
 * `closed` is called on the loop thread when the worker is fully gone. */
void kd_worker_stop(kd_worker_t *w, void (*closed)(void *arg), void *arg);

#endif
