/*
 * UTF-8 validation for the CLI's output: names on the server are bytes, and what the CLI prints
 * (JSON strings, table cells) must be valid UTF-8.
 */
#ifndef KD_CLIENT_CLI_UTF8_H
#define KD_CLIENT_CLI_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (1..4; s is NUL-terminated), or 0 if the bytes there
 * are not one (overlong forms, surrogates and code points past U+10FFFF included). */
static inline size_t kd_utf8_sequence(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, min = 0x10000;
    else
        return 0;
    unsigned cp = c & (0x3fu >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

#endif
