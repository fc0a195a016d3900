/*
 * Host memory back to the system after a load (see trim.h).
 */
#include "server/trim.h"
#include "common/log.h"
#include "common/recycle.h"
#include "server/server.h"

#include <malloc.h>
#include <stdio.h>
#include <unistd.h>

size_t kd_trim_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (size_t)resident * (size_t)page : 0;
}

size_t kd_trim_malloc_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

size_t kd_trim_now(kd_server_t *server)
{
    const size_t before = kd_trim_rss_bytes();
    kd_recycle_release_idle();
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    const size_t after = kd_trim_rss_bytes();
    const size_t released = before > after ? before - after : 0;
    server->trim.trims++;
    server->trim.released_bytes += released;
    server->trim.settled_bytes = after;
    KD_INFO("memory", "trim rss_before=%zu rss_after=%zu released=%zu", before, after, released);
    return released;
}

/* Requests that may have held memory: every one but server.status, which a monitor sends
 * all the time and which holds none. */
static uint64_t kd_trim_work(const kd_server_t *server)
{
    const kd_server_counters_t *c = &server->counters;
    return c->requests - c->by_method[KD_METHOD_SERVER_STATUS];
}

/* A whole tick without such a request arriving or running, the clients holding next to nothing
 * (paused readers' unread answers are not idle memory), and the resident size well above where
 * the last trim left it: give it back. */
static void kd_trim_tick(uv_timer_t *timer)
{
    kd_server_t *server = timer->data;
    const uint64_t work = kd_trim_work(server);
    const int idle = work == server->trim_seen_requests && server->jobs_in_flight == 0 &&
                     server->climem.used <= KD_TRIM_CLIENT_BYTES;
    server->trim_seen_requests = work;
    if (!idle)
        return;
    const size_t rss = kd_trim_rss_bytes();
    if (rss > server->trim.settled_bytes + KD_TRIM_SLACK_BYTES)
        kd_trim_now(server);
    else if (rss < server->trim.settled_bytes) /* it came down on its own */
        server->trim.settled_bytes = rss;
}

int kd_trim_start(kd_server_t *server)
{
    server->trim.settled_bytes = kd_trim_rss_bytes();
    if (server->cfg.memory_trim_ms <= 0)
        return KD_OK;
    if (uv_timer_init(server->loop, &server->trim_timer) != 0)
        return KD_EINTERNAL;
    server->trim_timer.data = server;
    server->trim_timer_open = 1;
    uint64_t every = (uint64_t)server->cfg.memory_trim_ms;
    uv_timer_start(&server->trim_timer, kd_trim_tick, every, every);
    uv_unref((uv_handle_t *)&server->trim_timer);
    return KD_OK;
}

void kd_trim_stop(kd_server_t *server)
{
    if (!server->trim_timer_open)
        return;
    server->trim_timer_open = 0;
    uv_timer_stop(&server->trim_timer);
    uv_close((uv_handle_t *)&server->trim_timer, NULL);
}
