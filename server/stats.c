/*
 * Latency histograms (see stats.h). Bucket i of the fine histogram holds latencies in
 * (2^((i-1)/4), 2^(i/4)] microseconds, so a reported percentile is at most 19% above the truth.
 */
#include "server/stats.h"

#include <math.h>

const double kd_stats_prom_bounds[KD_STATS_PROM_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   10.0, 60.0};

static int kd_latency_fine_index(double us)
{
    if (us <= 1.0)
        return 0;
    int i = (int)ceil(4.0 * log2(us));
    return i >= KD_STATS_FINE_BUCKETS ? KD_STATS_FINE_BUCKETS - 1 : i;
}

void kd_latency_record(kd_latency_t *lat, uint64_t ns)
{
    double s = (double)ns / 1e9;
    lat->count++;
    lat->sum_s += s;
    if (s > lat->max_s)
        lat->max_s = s;
    lat->fine[kd_latency_fine_index((double)ns / 1e3)]++;
    for (int i = 0; i < KD_STATS_PROM_BUCKETS; i++) {
        if (s <= kd_stats_prom_bounds[i]) {
            lat->prom[i]++;
            return;
        }
    }
    /* above the last bound: counted only in count (the +Inf bucket) */
}

double kd_latency_quantile(const kd_latency_t *lat, double q)
{
    if (lat->count == 0)
        return 0.0;
    uint64_t want = (uint64_t)ceil(q * (double)lat->count);
    if (want == 0)
        want = 1;
    uint64_t seen = 0;
    for (int i = 0; i < KD_STATS_FINE_BUCKETS; i++) {
        seen += lat->fine[i];
        if (seen >= want) {
            double upper = exp2((double)i / 4.0) / 1e6;
            return upper < lat->max_s ? upper : lat->max_s;
        }
    }
    return lat->max_s;
}
