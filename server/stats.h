/*
 * Request latency statistics, kept per method on the loop thread (no locking): a fine log-scale
 * histogram (four buckets per octave from 1 us) for percentiles in server.status, and the fixed
 * Prometheus buckets for /metrics. Latency runs from the moment a request is decoded to the moment
 * its response is handed to the socket.
 */
#ifndef KD_SERVER_STATS_H
#define KD_SERVER_STATS_H

#include <stddef.h>
#include <stdint.h>

#define KD_STATS_FINE_BUCKETS 128 /* 2^(i/4) us: up to about 2^32 us = 71 minutes */
#define KD_STATS_PROM_BUCKETS 16

/* The upper bounds of the Prometheus buckets, in seconds (+Inf is implied after the last). */
extern const double kd_stats_prom_bounds[KD_STATS_PROM_BUCKETS];

typedef struct kd_latency {
    uint64_t count;
    double sum_s;
    double max_s;
    uint64_t fine[KD_STATS_FINE_BUCKETS];
    uint64_t prom[KD_STATS_PROM_BUCKETS]; /* not cumulative: count in (bound[i-1], bound[i]] */
} kd_latency_t;

void kd_latency_record(kd_latency_t *lat, uint64_t ns);

/* The q-quantile (0 < q <= 1) in seconds: the upper bound of the fine bucket that holds it, never
 * above the largest value recorded. 0 when nothing was recorded. */
double kd_latency_quantile(const kd_latency_t *lat, double q);

#endif
