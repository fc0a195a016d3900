/*
 * The CLI's JSON writer (see cli_json.h). It tracks only what it needs to place commas and
 * indentation: how many values each open container holds and whether a key is waiting for its
 * value.
 */
#include "client/cli_json.h"
#include "client/cli_utf8.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

void kd_json_init(kd_json_t *j, FILE *out)
{
    memset(j, 0, sizeof(*j));
    j->out = out;
}

static void kd_json_indent(kd_json_t *j)
{
    fputc('\n', j->out);
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->out);
}

/* Comma and indentation before a value (or a key) at the current level. */
static void kd_json_before_value(kd_json_t *j)
{
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->depth > 0 && j->depth <= KD_JSON_MAX_DEPTH) {
        if (j->count[j->depth - 1]++ > 0)
            fputc(',', j->out);
        kd_json_indent(j);
    }
}

static void kd_json_open(kd_json_t *j, char bracket)
{
    kd_json_before_value(j);
    fputc(bracket, j->out);
    if (j->depth < KD_JSON_MAX_DEPTH)
        j->count[j->depth] = 0;
    j->depth++;
}

static void kd_json_close(kd_json_t *j, char bracket)
{
    j->depth--;
    if (j->depth < KD_JSON_MAX_DEPTH && j->count[j->depth] > 0)
        kd_json_indent(j);
    fputc(bracket, j->out);
}

void kd_json_object_begin(kd_json_t *j)
{
    kd_json_open(j, '{');
}

void kd_json_object_end(kd_json_t *j)
{
    kd_json_close(j, '}');
}

void kd_json_array_begin(kd_json_t *j)
{
    kd_json_open(j, '[');
}

void kd_json_array_end(kd_json_t *j)
{
    kd_json_close(j, ']');
}

static void kd_json_string(FILE *out, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', out);
    while (*s != '\0') {
        unsigned c = *s;
        if (c == '"' || c == '\\') {
            fputc('\\', out);
            fputc((int)c, out);
            s++;
        } else if (c == '\n') {
            fputs("\\n", out);
            s++;
        } else if (c == '\t') {
            fputs("\\t", out);
            s++;
        } else if (c == '\r') {
            fputs("\\r", out);
            s++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(out, "\\u%04x", c);
            s++;
        } else {
            size_t n = kd_utf8_sequence(s);
            if (n == 0) {
                fputs("\\ufffd", out);
                s++;
            } else {
                fwrite(s, 1, n, out);
                s += n;
            }
        }
    }
    fputc('"', out);
}

void kd_json_key(kd_json_t *j, const char *key)
{
    kd_json_before_value(j);
    kd_json_string(j->out, key);
    fputs(": ", j->out);
    j->after_key = 1;
}

void kd_json_str(kd_json_t *j, const char *s)
{
    if (s == NULL) {
        kd_json_null(j);
        return;
    }
    kd_json_before_value(j);
    kd_json_string(j->out, s);
}

void kd_json_int(kd_json_t *j, int64_t v)
{
    kd_json_before_value(j);
    fprintf(j->out, "%" PRId64, v);
}

void kd_json_double(kd_json_t *j, double v)
{
    kd_json_before_value(j);
    if (!isfinite(v)) {
        fputs("null", j->out);
        return;
    }
    char buf[40];
    snprintf(buf, sizeof(buf), "%.17g", v);
    fputs(buf, j->out);
    if (strpbrk(buf, ".eE") == NULL)
        fputs(".0", j->out); /* stays a float for readers that tell ints from floats */
}

void kd_json_bool(kd_json_t *j, int v)
{
    kd_json_before_value(j);
    fputs(v ? "true" : "false", j->out);
}

void kd_json_null(kd_json_t *j)
{
    kd_json_before_value(j);
    fputs("null", j->out);
}

void kd_json_finish(kd_json_t *j)
{
    fputc('\n', j->out);
    fflush(j->out);
}

void kd_json_kv_str(kd_json_t *j, const char *key, const char *s)
{
    kd_json_key(j, key);
    kd_json_str(j, s);
}

void kd_json_kv_int(kd_json_t *j, const char *key, int64_t v)
{
    kd_json_key(j, key);
    kd_json_int(j, v);
}

void kd_json_kv_double(kd_json_t *j, const char *key, double v)
{
    kd_json_key(j, key);
    kd_json_double(j, v);
}

void kd_json_kv_bool(kd_json_t *j, const char *key, int v)
{
    kd_json_key(j, key);
    kd_json_bool(j, v);
}

void kd_json_kv_null(kd_json_t *j, const char *key)
{
    kd_json_key(j, key);
    kd_json_null(j);
}
