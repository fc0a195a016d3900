/*
 * The CLI's progress line on stderr, for long solves (from solve.progress notifications) and
 * uploads (from libkrylov's send-progress callback):
 *
 *   cg  [##########..........]  52%  it 1840  ||r|| 3.1e-06 -> 1.0e-08  4210 it/s  0.4 s
 *   upload  [#######.............]  35%  120.0 / 342.9 MiB  210.3 MiB/s
 *   bench  [##########..........]  50%  run 10 / 20  1.2 s
 *
 * On a terminal the line is redrawn in place and erased when the work ends; it appears only once
 * the work has taken KD_PROGRESS_DELAY_S, so quick commands print nothing extra. Forced on
 * (--progress) it draws from the first update, and when stderr is not a terminal it writes one
 * line per update instead of redrawing (readable in a log). Off, every call is a no-op.
 */
#ifndef KD_CLIENT_CLI_PROGRESS_H
#define KD_CLIENT_CLI_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#define KD_PROGRESS_DELAY_S 0.5

typedef enum { KD_PROGRESS_AUTO, KD_PROGRESS_ON, KD_PROGRESS_OFF } kd_progress_mode_t;

typedef struct kd_progress {
    FILE *out;
    int enabled;  /* drawing at all */
    int terminal; /* redraw in place (else one line per update) */
    int drawn;    /* a line is on the screen now (terminal) */
    double delay_s;
    double start_s, last_draw_s;
    char label[32];
    /* solve */
    double target;   /* the residual norm that stops the solve; 0 if none */
    int64_t maxiter; /* -1 if unknown */
    /* the first update (of this right-hand side): rates and fractions count from it */
    int have_first;
    int64_t rhs;
    double first_residual;
    int64_t first_iteration; /* for an upload: bytes sent at the first update */
    double first_s;
} kd_progress_t;

/* Decide from the mode and whether `out` is a terminal (TERM=dumb counts as not). */
void kd_progress_init(kd_progress_t *p, FILE *out, kd_progress_mode_t mode, const char *label);

/* For a solve: the residual norm to reach (max(rtol ||b||, atol)) and maxiter (-1: unknown). */
void kd_progress_set_target(kd_progress_t *p, double target, int64_t maxiter);

/* A krylov_progress_fn: one solve.progress notification. ctx is the kd_progress_t. */
void kd_progress_solve(void *ctx, int64_t rhs, int64_t iteration, double residual);

/* A krylov_send_progress_fn: bytes of a request written so far. ctx is the kd_progress_t. */
void kd_progress_bytes(void *ctx, uint64_t sent, uint64_t total);

/* Counted steps (`krylov bench` runs): `done` of `total` so far. */
void kd_progress_steps(kd_progress_t *p, int64_t done, int64_t total, const char *unit);

/* The work is over: erase the line (terminal). */
void kd_progress_done(kd_progress_t *p);

#endif
