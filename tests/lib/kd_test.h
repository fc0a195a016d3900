/*
 * A small test harness: CHECK records a failure and goes on, REQUIRE ends the current test case.
 * Each test executable runs its cases in order and exits non-zero if any check failed.
 *
 * Random inputs are fresh on every run: the seed comes from the clock unless KD_TEST_SEED is set,
 * and is printed first so any failure can be replayed with the same inputs.
 */
#ifndef KD_TEST_H
#define KD_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int kd_test_failures;
static int kd_test_case_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            kd_test_failures++;                                                                    \
            kd_test_case_failed = 1;                                                               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            kd_test_failures++;                                                                    \
            kd_test_case_failed = 1;                                                               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long kd_a_ = (long long)(a), kd_b_ = (long long)(b);                                  \
        CHECK_MSG(kd_a_ == kd_b_, "%lld != %lld", kd_a_, kd_b_);                                   \
    } while (0)

#define CHECK_STR_CONTAINS(haystack, needle)                                                       \
    do {                                                                                           \
        const char *kd_h_ = (haystack), *kd_n_ = (needle);                                         \
        CHECK_MSG(kd_h_ != NULL && strstr(kd_h_, kd_n_) != NULL, "\"%s\" does not contain \"%s\"", \
                  kd_h_ ? kd_h_ : "(null)", kd_n_);                                                \
    } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double kd_a_ = (a), kd_b_ = (b);                                                           \
        double kd_s_ = fabs(kd_b_) > 1.0 ? fabs(kd_b_) : 1.0;                                      \
        CHECK_MSG(fabs(kd_a_ - kd_b_) <= (tol)*kd_s_, "%.17g vs %.17g (tol %g)", kd_a_, kd_b_,     \
                  (double)(tol));                                                                  \
    } while (0)

/* REQUIRE for helpers that return a value: a failure there ends the test program. */
#define MUST(cond)                                                                                 \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: MUST failed: %s\n", __FILE__, __LINE__, #cond);                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);             \
            kd_test_failures++;                                                                    \
            kd_test_case_failed = 1;                                                               \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        kd_test_case_failed = 0;                                                                   \
        fprintf(stderr, "-- %s\n", #fn);                                                           \
        fn();                                                                                      \
        fprintf(stderr, "   %s %s\n", kd_test_case_failed ? "FAIL" : "ok", #fn);                   \
    } while (0)

static uint64_t kd_test_rng_state;

static inline void kd_test_seed(void)
{
    const char *env = getenv("KD_TEST_SEED");
    if (env != NULL) {
        kd_test_rng_state = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        kd_test_rng_state = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    fprintf(stderr, "KD_TEST_SEED=%" PRIu64 "\n", kd_test_rng_state);
    if (kd_test_rng_state == 0)
        kd_test_rng_state = 1;
}

/* xorshift64*: uniform 64-bit values */
static inline uint64_t kd_test_rand_u64(void)
{
    uint64_t x = kd_test_rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    kd_test_rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* uniform in [0, n) */
static inline int64_t kd_test_rand_below(int64_t n)
{
    return n <= 0 ? 0 : (int64_t)(kd_test_rand_u64() % (uint64_t)n);
}

/* uniform in [lo, hi) */
static inline double kd_test_rand_double(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(kd_test_rand_u64() >> 11) / 9007199254740992.0);
}

static inline int kd_test_finish(void)
{
    if (kd_test_failures) {
        fprintf(stderr, "%d check(s) failed\n", kd_test_failures);
        return 1;
    }
    fprintf(stderr, "all checks passed\n");
    return 0;
}

#endif
