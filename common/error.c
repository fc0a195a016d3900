/*
 * Error code names and the kd_err_t message helpers (see error.h).
 */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct kd_error_entry {
    int code;
    const char *wire;
    const char *text;
};

static const struct kd_error_entry kd_errors[] = {
    {KD_OK, "OK", "success"},
    {KD_EBADREQ, "BAD_REQUEST", "bad request"},
    {KD_ENOTFOUND, "NOT_FOUND", "not found"},
    {KD_ETOOLARGE, "TOO_LARGE", "over a configured limit"},
    {KD_EDEVMEM, "DEVICE_MEMORY", "not enough device memory"},
    {KD_EBUSY, "BUSY", "server busy"},
    {KD_ECANCELLED, "CANCELLED", "cancelled"},
    {KD_ETIMEOUT, "TIMEOUT", "deadline exceeded"},
    {KD_EUNSUPPORTED, "UNSUPPORTED", "not supported"},
    {KD_EDEVICE, "DEVICE_ERROR", "OpenCL device error"},
    {KD_ENOMEM, "INTERNAL", "out of host memory"},
    {KD_EIO, "INTERNAL", "input/output error"},
    {KD_EPROTO, "BAD_REQUEST", "protocol error"},
    {KD_EINTERNAL, "INTERNAL", "internal error"},
    {KD_ENOTSPD, "NOT_SPD", "matrix is not symmetric positive definite"},
    {KD_EUNAUTH, "UNAUTHENTICATED", "not authenticated"},
    {KD_EFORBIDDEN, "FORBIDDEN", "not allowed for this user's role"},
    {KD_EQUOTA, "QUOTA", "over the user's quota"},
    {KD_ESTORAGE, "STORAGE_FULL", "the server's storage is full"},
};

static const struct kd_error_entry *kd_error_find(int code)
{
    for (size_t i = 0; i < sizeof(kd_errors) / sizeof(kd_errors[0]); i++)
        if (kd_errors[i].code == code)
            return &kd_errors[i];
    return NULL;
}

const char *kd_strerror(int code)
{
    const struct kd_error_entry *e = kd_error_find(code);
    return e ? e->text : "unknown error";
}

const char *kd_error_wire_name(int code)
{
    const struct kd_error_entry *e = kd_error_find(code);
    return e ? e->wire : "INTERNAL";
}

int kd_error_from_wire_name(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(kd_errors) / sizeof(kd_errors[0]); i++)
        if (strlen(kd_errors[i].wire) == len && memcmp(kd_errors[i].wire, name, len) == 0)
            return kd_errors[i].code;
    return KD_EINTERNAL;
}

int kd_err_set(kd_err_t *err, int code, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return code;
}

int kd_err_prefix(kd_err_t *err, const char *fmt, ...)
{
    if (err == NULL)
        return KD_EINTERNAL;
    char prefix[KD_ERR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    size_t plen = strlen(prefix);
    if (plen + 2 >= sizeof(err->message))
        plen = sizeof(err->message) - 3;
    size_t keep = sizeof(err->message) - plen - 3; /* room left for the old message */
    size_t olen = strnlen(err->message, sizeof(err->message) - 1);
    if (olen > keep)
        olen = keep;
    memmove(err->message + plen + 2, err->message, olen);
    memcpy(err->message, prefix, plen);
    err->message[plen] = ':';
    err->message[plen + 1] = ' ';
    err->message[plen + 2 + olen] = '\0';
    return err->code;
}

void kd_err_clear(kd_err_t *err)
{
    if (err == NULL)
        return;
    err->code = KD_OK;
    err->message[0] = '\0';
}
