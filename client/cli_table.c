/*
 * Aligned text tables (see cli_table.h). Widths count UTF-8 characters, not bytes, so a name
 * with accents does not push its row out of line; control characters become spaces and bytes that
 * are not UTF-8 question marks.
 */
#include "client/cli_table.h"
#include "client/cli_utf8.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int kd_table_width(const char *s)
{
    int n = 0;
    for (; *s != '\0'; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static void kd_table_add(kd_table_t *t, char *text)
{
    if (text == NULL) {
        t->failed = 1;
        return;
    }
    /* a newline or tab in a name must not break the table, nor a stray byte the terminal */
    for (unsigned char *c = (unsigned char *)text; *c != '\0';) {
        size_t n = kd_utf8_sequence(c);
        if (n == 0)
            *c++ = '?';
        else if (n == 1 && (*c < 0x20 || *c == 0x7f))
            *c++ = ' ';
        else
            c += n;
    }
    if (t->cell == 0) {
        if (t->rows == t->cap_rows) {
            int cap = t->cap_rows ? t->cap_rows * 2 : 16;
            char **grown = realloc(t->cells, (size_t)cap * (size_t)t->columns * sizeof(char *));
            if (grown == NULL) {
                free(text);
                t->failed = 1;
                return;
            }
            t->cells = grown;
            t->cap_rows = cap;
        }
        t->rows++;
    }
    t->cells[(size_t)(t->rows - 1) * (size_t)t->columns + (size_t)t->cell] = text;
    t->cell = (t->cell + 1) % t->columns;
}

void kd_table_init(kd_table_t *t, int columns, const char *const *headers)
{
    memset(t, 0, sizeof(*t));
    t->columns = columns < KD_TABLE_MAX_COLUMNS ? columns : KD_TABLE_MAX_COLUMNS;
    for (int c = 0; c < t->columns; c++) {
        const char *h = headers[c];
        t->right[c] = h[0] == '>';
        kd_table_add(t, strdup(h + t->right[c]));
    }
}

void kd_table_cell(kd_table_t *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (text != NULL)
        vsnprintf(text, (size_t)n + 1, fmt, again);
    va_end(again);
    va_end(ap);
    kd_table_add(t, text);
}

void kd_table_free(kd_table_t *t)
{
    if (t->cells != NULL) {
        int filled = t->rows * t->columns - (t->cell ? t->columns - t->cell : 0);
        for (int i = 0; i < filled; i++)
            free(t->cells[i]);
    }
    free(t->cells);
    memset(t, 0, sizeof(*t));
}

int kd_table_print(kd_table_t *t, FILE *out)
{
    while (!t->failed && t->cell != 0)
        kd_table_cell(t, "%s", ""); /* complete a short last row */
    if (t->failed) {
        kd_table_free(t);
        return -1;
    }
    int width[KD_TABLE_MAX_COLUMNS] = {0};
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->columns; c++) {
            int w = kd_table_width(t->cells[r * t->columns + c]);
            if (w > width[c])
                width[c] = w;
        }
    for (int r = 0; r < t->rows; r++) {
        for (int c = 0; c < t->columns; c++) {
            const char *s = t->cells[r * t->columns + c];
            int pad = width[c] - kd_table_width(s);
            int last = c == t->columns - 1;
            if (t->right[c])
                fprintf(out, "%*s%s", pad, "", s);
            else
                fprintf(out, "%s%*s", s, last ? 0 : pad, "");
            fputs(last ? "\n" : "  ", out);
        }
        if (r == 0) {
            for (int c = 0; c < t->columns; c++) {
                for (int i = 0; i < width[c]; i++)
                    fputc('-', out);
                fputs(c == t->columns - 1 ? "\n" : "  ", out);
            }
        }
    }
    kd_table_free(t);
    return 0;
}
