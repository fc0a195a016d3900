/*
 * Finding a large bin in a response's first bytes (private to libkrylov), so that its payload can
 * be received straight into the caller's array instead of into a message buffer and copied: the
 * response [1, msgid, nil, {..., field: bin, ...}] is walked from its start as far as the bytes go,
 * skipping the result's other entries, until `field`'s bin header. No sockets here (client.c
 * reads).
 */
#ifndef KD_CLIENT_REPLY_SCAN_H
#define KD_CLIENT_REPLY_SCAN_H

#include <stddef.h>
#include <stdint.h>

typedef enum kd_reply_scan {
    KD_REPLY_SCAN_FOUND = 0, /* *header_at / *header_len: field's bin header, of `want` bytes */
    KD_REPLY_SCAN_MORE = 1,  /* the bytes end before the answer */
    KD_REPLY_SCAN_NO = 2,    /* not that: another message, an error, no such bin of that size */
} kd_reply_scan_t;

kd_reply_scan_t kd_reply_scan(const uint8_t *buf, size_t len, uint64_t msgid, const char *field,
                              size_t want, size_t *header_at, size_t *header_len);

/* Make the bin header at buf (header_len bytes, from a FOUND scan) say 0 bytes: the message then
 * frames and unpacks without the payload, which went elsewhere. */
void kd_reply_scan_empty_bin(uint8_t *buf, size_t header_len);

#endif
