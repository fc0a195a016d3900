/*
 * Error codes shared by every krylovd module.
 *
 * Like libuv: a function returns 0 on success or a negative KD_E* code, and data comes back through
 * out-parameters. Where a person needs more than the code ("indices[17] = 912 is outside 0..899"),
 * the function also takes a kd_err_t that it fills through kd_err_set(). Each code maps one-to-one
 * to a wire error code string ("NOT_FOUND") through kd_error_wire_name(); docs/PROTOCOL.md lists
 * them.
 */
#ifndef KD_COMMON_ERROR_H
#define KD_COMMON_ERROR_H

#include <stddef.h>

enum {
    KD_OK = 0,
    KD_EBADREQ = -1,      /* BAD_REQUEST: the request is malformed or inconsistent */
    KD_ENOTFOUND = -2,    /* NOT_FOUND: no such matrix / job */
    KD_ETOOLARGE = -3,    /* TOO_LARGE: over a configured limit (message, rows, nnz, ...) */
    KD_EDEVMEM = -4,      /* DEVICE_MEMORY: the device (or its budget) cannot hold it */
    KD_EBUSY = -5,        /* BUSY: queue full, try again later */
    KD_ECANCELLED = -6,   /* CANCELLED: job.cancel, client gone, or shutdown */
    KD_ETIMEOUT = -7,     /* TIMEOUT: the request's deadline passed */
    KD_EUNSUPPORTED = -8, /* UNSUPPORTED: valid, but not something this server/device can do */
    KD_EDEVICE = -9,      /* DEVICE_ERROR: the OpenCL runtime failed (build log, CL error name) */
    KD_ENOMEM = -10,      /* INTERNAL: host memory exhausted */
    KD_EIO = -11,         /* INTERNAL: file system error */
    KD_EPROTO = -12,      /* BAD_REQUEST: bytes that are not msgpack-rpc (connection is closed) */
    KD_EINTERNAL = -13,   /* INTERNAL: a bug; the message says where */
    KD_ENOTSPD = -14,     /* NOT_SPD: a method that needs an SPD matrix proved it is not */
    KD_EUNAUTH = -15,     /* UNAUTHENTICATED: no (or no longer a valid) `auth` on this connection */
    KD_EFORBIDDEN = -16,  /* FORBIDDEN: the user's role may not call this method */
    KD_EQUOTA = -17,      /* QUOTA: over one of the user's limits in the auth file */
    KD_ESTORAGE = -18,    /* STORAGE_FULL: the state directory's file system is full (ENOSPC,
                             EDQUOT); nothing was stored, nothing stored before was touched */
};
#define KD_ERROR_COUNT 19

/* A short English description of a code ("matrix not found"). Never NULL. */
const char *kd_strerror(int code);

/* The stable wire name of a code ("NOT_FOUND"). Never NULL. */
const char *kd_error_wire_name(int code);

/* Parse a wire name back to a code; returns KD_EINTERNAL for unknown names. */
int kd_error_from_wire_name(const char *name, size_t len);

#define KD_ERR_MESSAGE_MAX 512

/* An error with a message a person can act on. Zero-initialise before use. */
typedef struct kd_err {
    int code;
    char message[KD_ERR_MESSAGE_MAX];
} kd_err_t;

/* Record code and a printf-style message in err (which may be NULL); returns code, so callers can
 * write `return kd_err_set(err, KD_EBADREQ, "rows = %lld is negative", rows);`. */
int kd_err_set(kd_err_t *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefix an existing message: "uploading matrix: <old message>". Keeps the code; returns it. */
int kd_err_prefix(kd_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset to KD_OK with an empty message. */
void kd_err_clear(kd_err_t *err);

#endif
