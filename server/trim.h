/*
 * Giving host memory back after a load. glibc keeps what a burst of large requests freed in its
 * arenas (one per thread that allocated), and the recycle shelf (common/recycle.h) keeps a few
 * large buffers for the next request: after the load ends the process's resident size stays near
 * its peak though nothing is counted in use. A timer on the loop thread checks once a tick: when
 * no request (server.status aside) came or ran during a whole tick, the clients hold at most
 * KD_TRIM_CLIENT_BYTES (client memory) and the resident size stands more than KD_TRIM_SLACK_BYTES
 * above where the last trim left it, the shelf is emptied and malloc_trim(0) returns the arenas'
 * free pages to the system. docs/OPERATIONS.md, "Host memory", has numbers.
 */
#ifndef KD_SERVER_TRIM_H
#define KD_SERVER_TRIM_H

#include <stddef.h>
#include <stdint.h>

struct kd_server;

#define KD_TRIM_SLACK_BYTES ((size_t)32 << 20)
#define KD_TRIM_CLIENT_BYTES ((size_t)4 << 20) /* client memory that still counts as idle */

typedef struct kd_trim_stats {
    uint64_t trims;          /* times memory was given back */
    uint64_t released_bytes; /* resident bytes those trims took off, summed */
    size_t settled_bytes;    /* the resident size the last trim left (or at start) */
} kd_trim_stats_t;

/* Any thread: the process's resident set (/proc/self/statm), 0 when it cannot be read. */
size_t kd_trim_rss_bytes(void);

/* Any thread: the bytes malloc has handed out and not had back (glibc's mallinfo2: arena chunks
 * in use plus mmapped chunks), 0 where that is not known. Unlike the resident size it does not
 * hold what freed memory the arenas keep, so growth in it under a steady load is a leak. */
size_t kd_trim_malloc_in_use(void);

/* Loop thread: start the timer (--memory-trim-ms; 0: no timer); stop it at shutdown. */
int kd_trim_start(struct kd_server *server);
void kd_trim_stop(struct kd_server *server);

/* Loop thread: give memory back now (the shelf and the arenas); returns the bytes released. */
size_t kd_trim_now(struct kd_server *server);

#endif
