/*
 * `krylov solve --plot conv.png`: the convergence history drawn by gnuplot, if it is installed.
 * gnuplot is looked up on $PATH and run as a child process with the script and the data on its
 * standard input; the picture is written beside the target and renamed over it, so a failed plot
 * never leaves half a PNG.
 */
#ifndef KD_CLIENT_CLI_PLOT_H
#define KD_CLIENT_CLI_PLOT_H

#include <stddef.h>
#include <stdint.h>

/* Find the executable `name` in the directories of $PATH; 0 and its path in `path`, or -1. */
int kd_plot_find_program(const char *name, char *path, size_t cap);

typedef struct kd_plot_series {
    const double *residuals; /* the residual norm at each check */
    int64_t count;
    int64_t check_every; /* iterations between checks (the x axis) */
    int64_t iterations;  /* the solve's final iteration count (the last point's x) */
    double target;       /* drawn as a dashed line when > 0 */
    const char *title;
} kd_plot_series_t;

/* Run gnuplot (the path from kd_plot_find_program) to draw s into png_path. 0, or -1 with a
 * message in err. */
int kd_plot_convergence(const char *gnuplot, const char *png_path, const kd_plot_series_t *s,
                        char *err, size_t err_cap);

#endif
