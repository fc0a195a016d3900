/*
 * The progress line (see cli_progress.h). Solve progress is measured on a log scale: a residual
 * that fell from r0 to r on the way to the target t is log(r0 / r) / log(r0 / t) done, which is
 * how CG's convergence looks (steady in log ||r||), so the bar moves at an even pace. Iterations
 * against maxiter count too, whichever is further along: a slow solve that will end at maxiter
 * shows that end coming.
 */
#include "client/cli_progress.h"
#include "common/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define KD_PROGRESS_BAR 20
/* A terminal is redrawn at most this often; updates in between are skipped. */
#define KD_PROGRESS_REDRAW_S 0.1

static int kd_progress_columns(FILE *out)
{
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

void kd_progress_init(kd_progress_t *p, FILE *out, kd_progress_mode_t mode, const char *label)
{
    memset(p, 0, sizeof(*p));
    p->out = out;
    const char *term = getenv("TERM");
    p->terminal = isatty(fileno(out)) && !(term != NULL && strcmp(term, "dumb") == 0);
    p->enabled = mode == KD_PROGRESS_ON || (mode == KD_PROGRESS_AUTO && p->terminal);
    p->delay_s = mode == KD_PROGRESS_ON ? 0.0 : KD_PROGRESS_DELAY_S;
    p->start_s = kd_clock_ms() / 1e3;
    p->last_draw_s = -1.0;
    p->maxiter = -1;
    snprintf(p->label, sizeof(p->label), "%s", label);
}

void kd_progress_set_target(kd_progress_t *p, double target, int64_t maxiter)
{
    p->target = target;
    p->maxiter = maxiter;
}

/* Whether to draw now; `final` updates (the last of an upload) are never skipped. */
static int kd_progress_due(kd_progress_t *p, double now, int final)
{
    if (!p->enabled || now - p->start_s < p->delay_s)
        return 0;
    if (p->terminal && !final && p->last_draw_s >= 0.0 &&
        now - p->last_draw_s < KD_PROGRESS_REDRAW_S)
        return 0;
    p->last_draw_s = now;
    return 1;
}

static void kd_progress_bar(char *buf, size_t cap, double fraction)
{
    if (fraction < 0.0 || !isfinite(fraction)) {
        buf[0] = '\0';
        return;
    }
    if (fraction > 1.0)
        fraction = 1.0;
    int filled = (int)(fraction * KD_PROGRESS_BAR + 0.5);
    char bar[KD_PROGRESS_BAR + 1];
    for (int i = 0; i < KD_PROGRESS_BAR; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[KD_PROGRESS_BAR] = '\0';
    snprintf(buf, cap, "[%s] %3d%%  ", bar, (int)(fraction * 100.0));
}

static void kd_progress_emit(kd_progress_t *p, const char *line)
{
    if (p->terminal) {
        int cols = kd_progress_columns(p->out);
        fprintf(p->out, "\r%.*s\033[K", cols - 1, line);
        p->drawn = 1;
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
}

void kd_progress_solve(void *ctx, int64_t rhs, int64_t iteration, double residual)
{
    kd_progress_t *p = ctx;
    double now = kd_clock_ms() / 1e3;
    if (!p->have_first || rhs != p->rhs) { /* the first notification of a right-hand side */
        p->rhs = rhs;
        p->first_residual = residual;
        p->first_iteration = iteration;
        p->first_s = now;
        p->have_first = 1;
    }
    if (!kd_progress_due(p, now, 0))
        return;
    /* whichever end is nearer: the residual target (log scale) or maxiter */
    double fraction = -1.0;
    if (p->target > 0.0 && p->first_residual > p->target && residual > 0.0)
        fraction = log(p->first_residual / residual) / log(p->first_residual / p->target);
    else if (p->target > 0.0 && p->first_residual <= p->target)
        fraction = 1.0;
    if (p->maxiter > 0 && (double)iteration / (double)p->maxiter > fraction)
        fraction = (double)iteration / (double)p->maxiter;
    if (fraction < 0.0 && isfinite(fraction) && (p->target > 0.0 || p->maxiter > 0))
        fraction = 0.0;
    char bar[64], rate[48] = "", goal[32] = "", which[32] = "";
    kd_progress_bar(bar, sizeof(bar), fraction);
    double dt = now - p->first_s;
    if (dt > 0.05 && iteration > p->first_iteration)
        snprintf(rate, sizeof(rate), "  %.0f it/s", (double)(iteration - p->first_iteration) / dt);
    if (p->target > 0.0)
        snprintf(goal, sizeof(goal), " -> %.1e", p->target);
    if (rhs > 0)
        snprintf(which, sizeof(which), "  rhs %lld", (long long)rhs);
    char line[256];
    snprintf(line, sizeof(line), "%s  %sit %lld%s  ||r|| %.2e%s%s  %.1f s", p->label, bar,
             (long long)iteration, which, residual, goal, rate, now - p->start_s);
    kd_progress_emit(p, line);
}

void kd_progress_bytes(void *ctx, uint64_t sent, uint64_t total)
{
    kd_progress_t *p = ctx;
    double now = kd_clock_ms() / 1e3;
    if (!p->have_first) { /* the first step of the request is on the wire */
        p->first_s = now;
        p->first_iteration = (int64_t)sent;
        p->have_first = 1;
    }
    if (!kd_progress_due(p, now, sent == total))
        return;
    char bar[64], rate[48] = "", line[256];
    kd_progress_bar(bar, sizeof(bar), total > 0 ? (double)sent / (double)total : 1.0);
    double mib = 1024.0 * 1024.0, dt = now - p->first_s;
    if (dt > 0.01)
        snprintf(rate, sizeof(rate), "  %.1f MiB/s",
                 (double)(sent - (uint64_t)p->first_iteration) / mib / dt);
    snprintf(line, sizeof(line), "%s  %s%.1f / %.1f MiB%s%s", p->label, bar, (double)sent / mib,
             (double)total / mib, rate, sent == total ? "  (waiting for the server)" : "");
    kd_progress_emit(p, line);
}

void kd_progress_steps(kd_progress_t *p, int64_t done, int64_t total, const char *unit)
{
    double now = kd_clock_ms() / 1e3;
    if (!kd_progress_due(p, now, done == total))
        return;
    char bar[64], line[256];
    kd_progress_bar(bar, sizeof(bar), total > 0 ? (double)done / (double)total : 1.0);
    snprintf(line, sizeof(line), "%s  %s%s %lld / %lld  %.1f s", p->label, bar, unit,
             (long long)done, (long long)total, now - p->start_s);
    kd_progress_emit(p, line);
}

void kd_progress_done(kd_progress_t *p)
{
    if (p->enabled && p->terminal && p->drawn) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
    }
    p->drawn = 0;
}
