/*
 * Convergence plots through gnuplot (see cli_plot.h). The script asks for the pngcairo terminal
 * and falls back to gnuplot's libgd png terminal when this gnuplot was built without cairo.
 */
#include "client/cli_plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int kd_plot_find_program(const char *name, char *path, size_t cap)
{
    const char *env = getenv("PATH");
    if (env == NULL || env[0] == '\0')
        return -1;
    const char *p = env;
    for (;;) {
        const char *end = strchr(p, ':');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        /* an empty entry means the current directory */
        int n = len == 0 ? snprintf(path, cap, "./%s", name)
                         : snprintf(path, cap, "%.*s/%s", (int)len, p, name);
        struct stat st;
        if (n > 0 && (size_t)n < cap && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            access(path, X_OK) == 0)
            return 0;
        if (end == NULL)
            break;
        p = end + 1;
    }
    path[0] = '\0';
    return -1;
}

/* gnuplot single-quoted string: a quote is written twice, nothing else is special. */
static void kd_plot_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s != '\0'; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static void kd_plot_script(FILE *f, const char *png, const kd_plot_series_t *s)
{
    fputs("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "  set terminal pngcairo size 900,560 enhanced font 'sans,10'\n"
          "} else {\n"
          "  set terminal png size 900,560\n"
          "}\n",
          f);
    fputs("set output ", f);
    kd_plot_quoted(f, png);
    fputs("\nset title ", f);
    kd_plot_quoted(f, s->title != NULL ? s->title : "convergence");
    fputs(" noenhanced\nset xlabel 'iteration'\n"
          "set ylabel 'residual norm ||r||' noenhanced\n"
          "set logscale y\nset format y '%.0e'\nset grid\nset key top right\n",
          f);
    int has_target = s->target > 0.0 && isfinite(s->target);
    fputs(s->count > 200
              ? "plot '-' using 1:2 with lines lw 1.5 title 'residual'"
              : "plot '-' using 1:2 with linespoints pt 7 ps 0.5 lw 1.5 title 'residual'",
          f);
    if (has_target)
        fprintf(f, ", %.17g with lines dt 2 lw 1 title 'target'", s->target);
    fputc('\n', f);
    int64_t step = s->check_every > 0 ? s->check_every : 1;
    for (int64_t i = 0; i < s->count; i++) {
        double r = s->residuals[i];
        if (!(r > 0.0) || !isfinite(r))
            continue; /* log scale: an exact zero cannot be drawn */
        int64_t it = i * step;
        if (s->iterations >= 0 && it > s->iterations)
            it = s->iterations;
        fprintf(f, "%lld %.17g\n", (long long)it, r);
    }
    fputs("e\nunset output\n", f);
}

int kd_plot_convergence(const char *gnuplot, const char *png_path, const kd_plot_series_t *s,
                        char *err, size_t err_cap)
{
    size_t tmp_len = strlen(png_path) + 32;
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    snprintf(tmp, tmp_len, "%s.tmp-%ld", png_path, (long)getpid());
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(err, err_cap, "pipe: %s", strerror(errno));
        free(tmp);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, err_cap, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        free(tmp);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[0], STDIN_FILENO);
        close(fds[0]);
        close(fds[1]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDOUT_FILENO); /* gnuplot's own chatter; its errors stay on stderr */
        execl(gnuplot, "gnuplot", (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    /* gnuplot may exit early on an error: a write to the closed pipe must not kill us */
    struct sigaction ignore = {.sa_handler = SIG_IGN}, old;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old);
    FILE *f = fdopen(fds[1], "w");
    if (f != NULL) {
        kd_plot_script(f, tmp, s);
        fclose(f);
    } else {
        close(fds[1]);
    }
    sigaction(SIGPIPE, &old, NULL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    struct stat st;
    int rc = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        snprintf(err, err_cap, "gnuplot (%s) failed with status %d", gnuplot,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    else if (stat(tmp, &st) != 0 || st.st_size == 0)
        snprintf(err, err_cap, "gnuplot (%s) wrote no picture", gnuplot);
    else if (rename(tmp, png_path) != 0)
        snprintf(err, err_cap, "cannot write %s: %s", png_path, strerror(errno));
    else
        rc = 0;
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    return rc;
}
