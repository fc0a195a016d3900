/*
 * The log sink (see log.h). A mutex around the FILE swap keeps SIGHUP reopen safe while worker
 * threads log; each line is formatted into a local buffer and written with one fputs.
 */
#include "common/log.h"
#include "common/error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static kd_log_level_t kd_log_level = KD_LOG_INFO;
static FILE *kd_log_file;
static pthread_mutex_t kd_log_lock = PTHREAD_MUTEX_INITIALIZER;

void kd_log_set_level(kd_log_level_t level)
{
    kd_log_level = level;
}

kd_log_level_t kd_log_get_level(void)
{
    return kd_log_level;
}

int kd_log_parse_level(const char *text, kd_log_level_t *out)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = (kd_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

int kd_log_open(const char *path)
{
    FILE *f = NULL;
    if (path != NULL) {
        f = fopen(path, "a");
        if (f == NULL)
            return KD_EIO;
        setvbuf(f, NULL, _IOLBF, 0);
    }
    pthread_mutex_lock(&kd_log_lock);
    FILE *old = kd_log_file;
    kd_log_file = f;
    pthread_mutex_unlock(&kd_log_lock);
    if (old != NULL)
        fclose(old);
    return KD_OK;
}

void kd_log(kd_log_level_t level, const char *component, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < kd_log_level || level >= KD_LOG_OFF)
        return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s %s: ", names[level], component);
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    for (size_t i = 0; i < len; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[len] = '\n';
    line[len + 1] = '\0';
    pthread_mutex_lock(&kd_log_lock);
    fputs(line, kd_log_file != NULL ? kd_log_file : stderr);
    pthread_mutex_unlock(&kd_log_lock);
}
