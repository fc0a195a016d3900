/*
 * Logging: one line per event, `level component: message key=value`, to stderr (journald adds the
 * timestamp and unit when run under systemd). Thread-safe: each line is written with one call.
 * Never log vector or matrix data.
 */
#ifndef KD_COMMON_LOG_H
#define KD_COMMON_LOG_H

typedef enum kd_log_level {
    KD_LOG_DEBUG = 0,
    KD_LOG_INFO = 1,
    KD_LOG_WARN = 2,
    KD_LOG_ERROR = 3,
    KD_LOG_OFF = 4,
} kd_log_level_t;

void kd_log_set_level(kd_log_level_t level);
kd_log_level_t kd_log_get_level(void);

/* Parse "debug" | "info" | "warn" | "error" | "off"; returns 0 or -1. */
int kd_log_parse_level(const char *text, kd_log_level_t *out);

/* Redirect output to a file (append), for --log-file and SIGHUP reopen; NULL means stderr. Returns
 * 0 or a negative KD_E* code. */
int kd_log_open(const char *path);

void kd_log(kd_log_level_t level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define KD_DEBUG(component, ...) kd_log(KD_LOG_DEBUG, component, __VA_ARGS__)
#define KD_INFO(component, ...) kd_log(KD_LOG_INFO, component, __VA_ARGS__)
#define KD_WARN(component, ...) kd_log(KD_LOG_WARN, component, __VA_ARGS__)
#define KD_ERROR(component, ...) kd_log(KD_LOG_ERROR, component, __VA_ARGS__)

#endif
