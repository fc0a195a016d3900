/*
 * A small streaming JSON writer for the CLI's --json output: one document on a FILE, indented
 * two spaces per level. Strings are escaped (control characters as \u00XX; bytes that are not
 * valid UTF-8 become U+FFFD, so the output always parses), non-finite doubles are written as
 * null, and doubles keep 17 significant digits so a reader gets the same value back.
 *
 *   kd_json_t j;
 *   kd_json_init(&j, stdout);
 *   kd_json_object_begin(&j);
 *   kd_json_kv_str(&j, "id", id);
 *   kd_json_key(&j, "history");
 *   kd_json_array_begin(&j); ... kd_json_array_end(&j);
 *   kd_json_object_end(&j);
 *   kd_json_finish(&j);                 // newline and flush
 */
#ifndef KD_CLIENT_CLI_JSON_H
#define KD_CLIENT_CLI_JSON_H

#include <stdint.h>
#include <stdio.h>

#define KD_JSON_MAX_DEPTH 32

typedef struct kd_json {
    FILE *out;
    int depth;
    int count[KD_JSON_MAX_DEPTH]; /* values written so far at each level */
    int after_key;                /* a key was written; its value comes next */
} kd_json_t;

void kd_json_init(kd_json_t *j, FILE *out);
void kd_json_object_begin(kd_json_t *j);
void kd_json_object_end(kd_json_t *j);
void kd_json_array_begin(kd_json_t *j);
void kd_json_array_end(kd_json_t *j);
void kd_json_key(kd_json_t *j, const char *key);
void kd_json_str(kd_json_t *j, const char *s); /* NULL writes null */
void kd_json_int(kd_json_t *j, int64_t v);
void kd_json_double(kd_json_t *j, double v);
void kd_json_bool(kd_json_t *j, int v);
void kd_json_null(kd_json_t *j);
void kd_json_finish(kd_json_t *j);

void kd_json_kv_str(kd_json_t *j, const char *key, const char *s);
void kd_json_kv_int(kd_json_t *j, const char *key, int64_t v);
void kd_json_kv_double(kd_json_t *j, const char *key, double v);
void kd_json_kv_bool(kd_json_t *j, const char *key, int v);
void kd_json_kv_null(kd_json_t *j, const char *key);

#endif
