/*
 * The load generator (see loadgen.h). Each client thread owns a raw msgpack-rpc connection
 * (tests/lib/kd_rpc.h), so it sees every message the server sends and can pipeline. Inputs are
 * prepared once and shared read-only: per matrix a few x vectors with their reference A x, and a
 * few right-hand sides. A client picks the kind of each request from its own seeded generator;
 * the msgid identifies the request, and a table of what is in flight per client tells a wrong
 * answer from a lost, duplicated or unexpected one.
 */
#include "bench/service/loadgen.h"
#include "common/clock.h"
#include "kd_rpc.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

#define KD_LOAD_VECTORS 4

enum { KD_LOAD_SPMV = 0, KD_LOAD_SOLVE = 1, KD_LOAD_INFO = 2 };

typedef struct kd_load_inputs {
    double *x[KD_LOAD_MAX_MATRICES][KD_LOAD_VECTORS];
    double *ax[KD_LOAD_MAX_MATRICES][KD_LOAD_VECTORS]; /* A x, on the CPU */
    double bnorm[KD_LOAD_MAX_MATRICES][KD_LOAD_VECTORS];
} kd_load_inputs_t;

typedef struct kd_load_slot {
    int busy;
    int kind, matrix, vector;
    uint64_t sent_ns;
} kd_load_slot_t;

typedef struct kd_load_client {
    const kd_load_config_t *cfg;
    const kd_load_inputs_t *in;
    int index;
    uint64_t rng;
    kd_load_report_t counts; /* this client's share (no percentiles) */
    double *latency;         /* requests entries */
    size_t nlatency;
    int *kinds;         /* each latency's request kind */
    double *server_ms;  /* spmv answers: the server's own time_ms (the device part) */
    size_t nserver;
    char problem[512];
} kd_load_client_t;

static uint64_t kd_load_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void kd_load_problem(kd_load_client_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void kd_load_problem(kd_load_client_t *c, const char *fmt, ...)
{
    if (c->problem[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->problem, sizeof(c->problem), fmt, ap);
    va_end(ap);
}

int kd_load_put_matrices(kd_load_config_t *cfg)
{
    kd_rpc_t r;
    if (kd_rpc_connect(&r, cfg->port) != 0) {
        fprintf(stderr, "loadgen: cannot connect to port %d\n", cfg->port);
        return -1;
    }
    for (int i = 0; i < cfg->nmatrices; i++) {
        kd_rpc_msg_t m;
        char name[32];
        snprintf(name, sizeof(name), "load-%d", i);
        if (kd_rpc_put(&r, (uint64_t)i + 1, cfg->matrices[i], name, -1, cfg->ids[i], &m) != 0) {
            fprintf(stderr, "loadgen: put %d failed: %s %s\n", i, m.code, m.message);
            kd_rpc_msg_free(&m);
            kd_rpc_close(&r);
            return -1;
        }
        kd_rpc_msg_free(&m);
    }
    kd_rpc_close(&r);
    return 0;
}

static void kd_load_send(kd_load_client_t *c, kd_rpc_t *r, uint64_t msgid, kd_load_slot_t *slot)
{
    const kd_load_config_t *cfg = c->cfg;
    uint64_t roll = kd_load_rand(&c->rng) % 100;
    slot->kind = roll < (uint64_t)cfg->spmv_percent                          ? KD_LOAD_SPMV
                 : roll < (uint64_t)(cfg->spmv_percent + cfg->solve_percent) ? KD_LOAD_SOLVE
                                                                             : KD_LOAD_INFO;
    slot->matrix = (int)(kd_load_rand(&c->rng) % (uint64_t)cfg->nmatrices);
    slot->vector = (int)(kd_load_rand(&c->rng) % KD_LOAD_VECTORS);
    const kd_csr_t *A = cfg->matrices[slot->matrix];
    const char *id = cfg->ids[slot->matrix];
    kd_writer_t w;
    if (slot->kind == KD_LOAD_SPMV) {
        kd_rpc_write_spmv(&w, msgid, id, c->in->x[slot->matrix][slot->vector], A->cols, 0);
    } else if (slot->kind == KD_LOAD_SOLVE) {
        /* b = A x for a known x: the answer is checked by its residual */
        kd_rpc_begin(&w, msgid, "solve", 4);
        kd_w_kv_str(&w, "id", id);
        kd_w_kv_bin(&w, "b", c->in->ax[slot->matrix][slot->vector], (size_t)A->rows * 8);
        kd_w_kv_double(&w, "rtol", 1e-8);
        kd_w_kv_str(&w, "method", "cg");
    } else {
        kd_rpc_begin(&w, msgid, "matrix.info", 1);
        kd_w_kv_str(&w, "id", id);
    }
    c->counts.by_kind[slot->kind]++;
    slot->busy = 1;
    slot->sent_ns = kd_clock_ns();
    c->counts.sent++;
    if (kd_rpc_send(r, &w) != 0)
        kd_load_problem(c, "client %d: the connection broke while sending msgid %llu", c->index,
                        (unsigned long long)msgid);
}

/* ||b - A x|| / ||b|| on the CPU. */
static double kd_load_residual(const kd_csr_t *A, const double *b, const double *x, double bnorm)
{
    double *r = malloc((size_t)A->rows * sizeof(double));
    memcpy(r, b, (size_t)A->rows * sizeof(double));
    kd_csr_spmv_ref(A, x, -1.0, 1.0, r);
    double s = 0;
    for (int64_t i = 0; i < A->rows; i++)
        s += r[i] * r[i];
    free(r);
    return sqrt(s) / bnorm;
}

static int kd_load_check(kd_load_client_t *c, const kd_load_slot_t *slot, const kd_rpc_msg_t *m)
{
    const kd_load_config_t *cfg = c->cfg;
    const kd_csr_t *A = cfg->matrices[slot->matrix];
    if (slot->kind == KD_LOAD_INFO)
        return kd_obj_str_eq(kd_obj_get(m->result, "id"), cfg->ids[slot->matrix]) &&
               kd_rpc_int(m->result, "nnz", NULL, -1) == A->nnz &&
               kd_rpc_int(m->result, "rows", NULL, -1) == A->rows;
    double *v = malloc((size_t)A->rows * sizeof(double));
    int ok;
    if (slot->kind == KD_LOAD_SPMV) {
        const double *ref = c->in->ax[slot->matrix][slot->vector];
        ok = kd_rpc_vector(m->result, "y", v, A->rows) == 0;
        for (int64_t i = 0; ok && i < A->rows; i++)
            ok = fabs(v[i] - ref[i]) <= 1e-12 * (1.0 + fabs(ref[i]));
    } else {
        ok = kd_rpc_vector(m->result, "x", v, A->rows) == 0 &&
             kd_obj_str_eq(kd_obj_get(m->result, "status"), "converged") &&
             kd_load_residual(A, c->in->ax[slot->matrix][slot->vector], v,
                              c->in->bnorm[slot->matrix][slot->vector]) <= 1e-7;
    }
    free(v);
    return ok;
}

static void *kd_load_client_main(void *arg)
{
    kd_load_client_t *c = arg;
    const kd_load_config_t *cfg = c->cfg;
    kd_rpc_t r;
    if (kd_rpc_connect(&r, cfg->port) != 0) {
        kd_load_problem(c, "client %d cannot connect", c->index);
        c->counts.lost = (uint64_t)cfg->requests;
        return NULL;
    }
    int total = cfg->requests;
    kd_load_slot_t *slots = calloc((size_t)total + 1, sizeof(*slots)); /* by msgid */
    int next = 1, in_flight = 0;
    while (next <= total || in_flight > 0) {
        while (next <= total && in_flight < cfg->window) {
            kd_load_send(c, &r, (uint64_t)next, &slots[next]);
            next++;
            in_flight++;
        }
        kd_rpc_msg_t m;
        int kind = kd_rpc_read(&r, cfg->answer_timeout_ms, &m);
        if (kind == KD_RPC_TIMEOUT || kind == KD_RPC_CLOSED || kind == KD_RPC_GARBAGE) {
            kd_load_problem(c, "client %d: %s with %d request(s) in flight", c->index,
                            kind == KD_RPC_TIMEOUT  ? "no answer in time"
                            : kind == KD_RPC_CLOSED ? "connection closed"
                                                    : "unreadable bytes",
                            in_flight);
            kd_rpc_msg_free(&m);
            break;
        }
        if (kind == KD_RPC_NOTIFICATION) {
            c->counts.unexpected++;
            kd_rpc_msg_free(&m);
            continue;
        }
        uint64_t id = m.msgid;
        if (id == 0 || id > (uint64_t)total || id >= (uint64_t)next) {
            c->counts.unexpected++;
            kd_load_problem(c, "client %d: an answer to msgid %llu, never sent", c->index,
                            (unsigned long long)id);
        } else if (!slots[id].busy) {
            c->counts.duplicated++;
            kd_load_problem(c, "client %d: msgid %llu answered twice", c->index,
                            (unsigned long long)id);
        } else {
            kd_load_slot_t *slot = &slots[id];
            slot->busy = 0;
            in_flight--;
            c->counts.answered++;
            c->kinds[c->nlatency] = slot->kind;
            c->latency[c->nlatency++] = (double)(kd_clock_ns() - slot->sent_ns) / 1e6;
            double sms;
            if (slot->kind == KD_LOAD_SPMV && m.result != NULL &&
                kd_obj_double(kd_obj_get(m.result, "time_ms"), &sms) == 0)
                c->server_ms[c->nserver++] = sms;
            if (m.error != NULL) {
                c->counts.errors++;
                kd_load_problem(c, "client %d msgid %llu: %s %s", c->index, (unsigned long long)id,
                                m.code, m.message);
            } else if (kd_load_check(c, slot, &m)) {
                c->counts.correct++;
            } else {
                c->counts.wrong++;
                kd_load_problem(c, "client %d msgid %llu: wrong %s answer", c->index,
                                (unsigned long long)id,
                                slot->kind == KD_LOAD_SPMV    ? "spmv"
                                : slot->kind == KD_LOAD_SOLVE ? "solve"
                                                              : "info");
            }
        }
        kd_rpc_msg_free(&m);
    }
    c->counts.lost += (uint64_t)in_flight + (uint64_t)(total - (next - 1));
    /* Anything more now is a duplicate or a stray. */
    kd_rpc_msg_t m;
    while (kd_rpc_read(&r, 200, &m) == KD_RPC_RESPONSE) {
        c->counts.duplicated++;
        kd_load_problem(c, "client %d: msgid %llu answered after everything was", c->index,
                        (unsigned long long)m.msgid);
        kd_rpc_msg_free(&m);
    }
    kd_rpc_msg_free(&m);
    free(slots);
    kd_rpc_close(&r);
    return NULL;
}

typedef struct kd_load_background {
    const kd_load_config_t *cfg;
    atomic_int stop;
    atomic_int sent; /* the first solve was sent (or the thread gave up) */
    uint64_t solves;
    double ms;
    char problem[256];
} kd_load_background_t;

/* Solve the background matrix again and again until told to stop (each solve's answer is
 * awaited: the stop waits for the one running to end). */
static void *kd_load_background_main(void *arg)
{
    kd_load_background_t *bg = arg;
    const kd_csr_t *A = bg->cfg->background;
    kd_rpc_t r;
    char id[33];
    kd_rpc_msg_t m;
    if (kd_rpc_connect(&r, bg->cfg->port) != 0) {
        snprintf(bg->problem, sizeof(bg->problem), "background: cannot connect");
        atomic_store(&bg->sent, 1);
        return NULL;
    }
    if (kd_rpc_put(&r, 1, A, "load-background", -1, id, &m) != 0) {
        snprintf(bg->problem, sizeof(bg->problem), "background put: %.40s %.180s", m.code, m.message);
        kd_rpc_msg_free(&m);
        kd_rpc_close(&r);
        atomic_store(&bg->sent, 1);
        return NULL;
    }
    kd_rpc_msg_free(&m);
    double *b = malloc((size_t)A->rows * sizeof(double));
    for (int64_t i = 0; i < A->rows; i++)
        b[i] = 1.0;
    for (uint64_t msgid = 2; !atomic_load(&bg->stop); msgid++) {
        kd_writer_t w;
        kd_rpc_begin(&w, msgid, "solve", 4);
        kd_w_kv_str(&w, "id", id);
        kd_w_kv_bin(&w, "b", b, (size_t)A->rows * 8);
        kd_w_kv_double(&w, "rtol", 0.0);
        kd_w_kv_int(&w, "maxiter", bg->cfg->background_maxiter);
        uint64_t t0 = kd_clock_ns();
        if (kd_rpc_send(&r, &w) != 0) {
            snprintf(bg->problem, sizeof(bg->problem), "background: the connection broke");
            break;
        }
        atomic_store(&bg->sent, 1);
        int kind = kd_rpc_wait(&r, msgid, 600000, &m);
        if (kind != KD_RPC_RESPONSE || m.error != NULL) {
            snprintf(bg->problem, sizeof(bg->problem), "background solve: %.40s %.180s", m.code,
                     m.message);
            kd_rpc_msg_free(&m);
            break;
        }
        kd_rpc_msg_free(&m);
        bg->ms += (double)(kd_clock_ns() - t0) / 1e6;
        bg->solves++;
    }
    atomic_store(&bg->sent, 1);
    free(b);
    kd_rpc_close(&r);
    return NULL;
}

static int kd_load_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double kd_load_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    size_t i = (size_t)ceil(p * (double)n) - 1;
    return sorted[i < n ? i : n - 1];
}

int kd_load_run(const kd_load_config_t *cfg, kd_load_report_t *rep)
{
    memset(rep, 0, sizeof(*rep));
    if (cfg->clients < 1 || cfg->requests < 1 || cfg->window < 1 || cfg->nmatrices < 1)
        return -1;
    kd_load_inputs_t *in = calloc(1, sizeof(*in));
    uint64_t rng = cfg->seed | 1;
    for (int i = 0; i < cfg->nmatrices; i++) {
        const kd_csr_t *A = cfg->matrices[i];
        for (int v = 0; v < KD_LOAD_VECTORS; v++) {
            in->x[i][v] = malloc((size_t)A->cols * sizeof(double));
            in->ax[i][v] = malloc((size_t)A->rows * sizeof(double));
            for (int64_t k = 0; k < A->cols; k++)
                in->x[i][v][k] = (double)(kd_load_rand(&rng) >> 11) / 9007199254740992.0 - 0.5;
            kd_csr_spmv_ref(A, in->x[i][v], 1.0, 0.0, in->ax[i][v]);
            double s = 0;
            for (int64_t k = 0; k < A->rows; k++)
                s += in->ax[i][v][k] * in->ax[i][v][k];
            in->bnorm[i][v] = sqrt(s);
        }
    }
    kd_load_client_t *clients = calloc((size_t)cfg->clients, sizeof(*clients));
    pthread_t *threads = calloc((size_t)cfg->clients, sizeof(*threads));
    for (int i = 0; i < cfg->clients; i++) {
        clients[i].cfg = cfg;
        clients[i].in = in;
        clients[i].index = i;
        clients[i].rng = (cfg->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1))) | 1;
        clients[i].latency = malloc((size_t)cfg->requests * sizeof(double));
        clients[i].kinds = malloc((size_t)cfg->requests * sizeof(int));
        clients[i].server_ms = malloc((size_t)cfg->requests * sizeof(double));
    }
    kd_load_background_t bg = {.cfg = cfg};
    atomic_init(&bg.stop, 0);
    atomic_init(&bg.sent, 0);
    pthread_t bg_thread;
    int bg_started = cfg->background != NULL &&
                     pthread_create(&bg_thread, NULL, kd_load_background_main, &bg) == 0;
    /* Its matrix uploaded and its first solve sent: the clients should meet it. */
    for (int i = 0; bg_started && i < 600000 && !atomic_load(&bg.sent); i++)
        kd_rpc_sleep_ms(1);
    /* The server's worker and loop busy seconds, before and after (status fields). */
    double busy0 = -1, loop0 = -1;
    kd_rpc_t st;
    kd_rpc_msg_t sm;
    const int st_ok = kd_rpc_connect(&st, cfg->port) == 0;
    if (st_ok) {
        if (kd_rpc_status(&st, &sm) == 0) {
            kd_obj_double(kd_obj_get(sm.result, "worker_busy_s"), &busy0);
            kd_obj_double(kd_obj_get(sm.result, "loop_busy_s"), &loop0);
        }
        kd_rpc_msg_free(&sm);
    }
    uint64_t t0 = kd_clock_ns();
    int started = 0;
    for (int i = 0; i < cfg->clients; i++)
        started += pthread_create(&threads[i], NULL, kd_load_client_main, &clients[i]) == 0;
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    rep->seconds = (double)(kd_clock_ns() - t0) / 1e9;
    double busy1 = -1, loop1 = -1;
    if (st_ok && busy0 >= 0 && kd_rpc_status(&st, &sm) == 0) {
        if (kd_obj_double(kd_obj_get(sm.result, "worker_busy_s"), &busy1) == 0)
            rep->worker_busy = (busy1 - busy0) / rep->seconds;
        if (loop0 >= 0 && kd_obj_double(kd_obj_get(sm.result, "loop_busy_s"), &loop1) == 0)
            rep->loop_busy = (loop1 - loop0) / rep->seconds;
        kd_rpc_msg_free(&sm);
    }
    if (st_ok)
        kd_rpc_close(&st);
    if (bg_started) {
        atomic_store(&bg.stop, 1);
        pthread_join(bg_thread, NULL);
        rep->background_solves = bg.solves;
        rep->background_ms = bg.solves > 0 ? bg.ms / (double)bg.solves : 0.0;
        if (bg.problem[0] != '\0')
            snprintf(rep->first_problem, sizeof(rep->first_problem), "%s", bg.problem);
    }
    size_t nlat = 0;
    for (int i = 0; i < cfg->clients; i++)
        nlat += clients[i].nlatency;
    double *lat = malloc((nlat ? nlat : 1) * sizeof(double));
    double *by[2] = {malloc((nlat ? nlat : 1) * sizeof(double)),
                     malloc((nlat ? nlat : 1) * sizeof(double))};
    double *srv = malloc((nlat ? nlat : 1) * sizeof(double));
    size_t k = 0, nby[2] = {0, 0}, nsrv = 0;
    for (int i = 0; i < cfg->clients; i++) {
        const kd_load_report_t *c = &clients[i].counts;
        rep->sent += c->sent;
        rep->answered += c->answered;
        rep->correct += c->correct;
        rep->wrong += c->wrong;
        rep->errors += c->errors;
        rep->lost += c->lost;
        rep->duplicated += c->duplicated;
        rep->unexpected += c->unexpected;
        for (int j = 0; j < 3; j++)
            rep->by_kind[j] += c->by_kind[j];
        if (rep->first_problem[0] == '\0' && clients[i].problem[0] != '\0')
            snprintf(rep->first_problem, sizeof(rep->first_problem), "%s", clients[i].problem);
        memcpy(lat + k, clients[i].latency, clients[i].nlatency * sizeof(double));
        k += clients[i].nlatency;
        for (size_t j = 0; j < clients[i].nlatency; j++)
            if (clients[i].kinds[j] < 2)
                by[clients[i].kinds[j]][nby[clients[i].kinds[j]]++] = clients[i].latency[j];
        memcpy(srv + nsrv, clients[i].server_ms, clients[i].nserver * sizeof(double));
        nsrv += clients[i].nserver;
        free(clients[i].latency);
        free(clients[i].kinds);
        free(clients[i].server_ms);
    }
    if (started < cfg->clients)
        rep->lost += (uint64_t)(cfg->clients - started) * (uint64_t)cfg->requests;
    qsort(lat, nlat, sizeof(double), kd_load_cmp);
    rep->p50_ms = kd_load_percentile(lat, nlat, 0.50);
    rep->p90_ms = kd_load_percentile(lat, nlat, 0.90);
    rep->p99_ms = kd_load_percentile(lat, nlat, 0.99);
    rep->max_ms = nlat ? lat[nlat - 1] : 0.0;
    for (int j = 0; j < 2; j++) {
        qsort(by[j], nby[j], sizeof(double), kd_load_cmp);
        rep->kind_p50_ms[j] = kd_load_percentile(by[j], nby[j], 0.50);
        rep->kind_p99_ms[j] = kd_load_percentile(by[j], nby[j], 0.99);
        free(by[j]);
    }
    qsort(srv, nsrv, sizeof(double), kd_load_cmp);
    rep->spmv_server_p50_ms = kd_load_percentile(srv, nsrv, 0.50);
    free(srv);
    rep->requests_per_s = rep->seconds > 0 ? (double)rep->answered / rep->seconds : 0.0;
    free(lat);
    free(threads);
    free(clients);
    for (int i = 0; i < cfg->nmatrices; i++)
        for (int v = 0; v < KD_LOAD_VECTORS; v++) {
            free(in->x[i][v]);
            free(in->ax[i][v]);
        }
    free(in);
    return 0;
}

void kd_load_print(const kd_load_config_t *cfg, const kd_load_report_t *r)
{
    fprintf(stderr,
            "load: %d clients x %d requests, window %d, mix spmv %d%% / solve %d%% / info %d%%\n"
            "load: sent %llu (spmv %llu, solve %llu, info %llu), answered %llu, correct %llu\n"
            "load: wrong %llu, errors %llu, lost %llu, duplicated %llu, unexpected %llu\n"
            "load: %.2f s, %.0f requests/s, latency p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, "
            "max %.3f ms\n",
            cfg->clients, cfg->requests, cfg->window, cfg->spmv_percent, cfg->solve_percent,
            100 - cfg->spmv_percent - cfg->solve_percent, (unsigned long long)r->sent,
            (unsigned long long)r->by_kind[0], (unsigned long long)r->by_kind[1],
            (unsigned long long)r->by_kind[2], (unsigned long long)r->answered,
            (unsigned long long)r->correct, (unsigned long long)r->wrong,
            (unsigned long long)r->errors, (unsigned long long)r->lost,
            (unsigned long long)r->duplicated, (unsigned long long)r->unexpected, r->seconds,
            r->requests_per_s, r->p50_ms, r->p90_ms, r->p99_ms, r->max_ms);
    if (r->by_kind[0] > 0)
        fprintf(stderr, "load: spmv p50 %.3f ms p99 %.3f ms (server's own time p50 %.3f ms)\n",
                r->kind_p50_ms[0], r->kind_p99_ms[0], r->spmv_server_p50_ms);
    fprintf(stderr, "load: server busy during the run: device worker %.0f%%, loop thread %.0f%%\n",
            100.0 * r->worker_busy, 100.0 * r->loop_busy);
    if (r->by_kind[1] > 0)
        fprintf(stderr, "load: solve p50 %.3f ms p99 %.3f ms\n", r->kind_p50_ms[1],
                r->kind_p99_ms[1]);
    if (cfg->background != NULL)
        fprintf(stderr,
                "load: background: CG on %lld rows, %lld iterations a solve: %llu solves during "
                "the run, %.1f ms each\n",
                (long long)cfg->background->rows, (long long)cfg->background_maxiter,
                (unsigned long long)r->background_solves, r->background_ms);
    if (r->first_problem[0] != '\0')
        fprintf(stderr, "load: first problem: %s\n", r->first_problem);
}
